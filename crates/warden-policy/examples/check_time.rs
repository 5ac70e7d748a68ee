//! How long the default policies take to check a Python program, by the program's size: the
//! evidence for where the engine checks a request (on its async thread up to
//! `CHECKED_INLINE_BYTES`, on a blocking thread above; `warden-engine/src/pipeline.rs`).
//!
//! `cargo run --release -p warden-policy --example check_time [ROUNDS]` prints, per size, the
//! median time of one `check_all` of the `standard` profile's policies (`forbidden_imports` with
//! the default allow-list, `resource_quota`) over ROUNDS checks (default 2000); with `-`, the
//! times of 50 checks of the program on standard input (passed or refused): the first, the median.

use std::time::{Duration, Instant};
use warden_policy::{PolicyInput, PolicySet, PolicySettings, Requested, build_policies};

/// `rounds` checks of `input`: their times in µs, in the order they ran, and whether it passed.
fn time_checks(policies: &PolicySet, input: &PolicyInput<'_>, rounds: usize) -> (Vec<f64>, bool) {
    let mut passed = false;
    let times = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            passed = policies.check_all(input).is_ok();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    (times, passed)
}

/// A program of about `size` bytes made of the lines agents' code is made of: imports of
/// allowed modules, definitions, loops, calls, literals.
fn program(size: usize) -> String {
    const BLOCK: &str = "import json\nfrom math import sqrt\n\n\
def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n\n\
data = [sqrt(i) for i in range(100)]\n\
print(json.dumps({\"mean\": mean(data), \"n\": len(data)}))\n";
    let mut code = String::with_capacity(size + BLOCK.len());
    while code.len() < size {
        code.push_str(BLOCK);
    }
    code
}

fn main() {
    let arg = std::env::args().nth(1);
    let limits = Requested {
        timeout: Duration::from_secs(30),
        memory_mb: 256,
    };
    let enabled = ["forbidden_imports".to_owned(), "resource_quota".to_owned()];
    let policies = build_policies(&enabled, &PolicySettings::default(), false, limits)
        .expect("the default policies build");
    let language = warden_types::Language::new("python").expect("a valid language");
    if arg.as_deref() == Some("-") {
        // One program from standard input, passed or refused: the first check and the median.
        let mut code = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut code).expect("UTF-8 input");
        let input = PolicyInput {
            code: &code,
            language: &language,
            requested: limits,
        };
        let (mut times, passed) = time_checks(&policies, &input, 50);
        let first = times[0];
        times.sort_by(f64::total_cmp);
        let verdict = if passed { "passed" } else { "refused" };
        println!(
            "{} bytes: first check {first:.1} µs, median of 50 {:.1} µs ({verdict})",
            code.len(),
            times[times.len() / 2]
        );
        return;
    }
    let rounds: usize = arg
        .map(|r| r.parse().expect("ROUNDS is a number"))
        .unwrap_or(2000);
    println!("| program | bytes | median µs per check | p90 |");
    println!("|---|---:|---:|---:|");
    for size in [9, 1024, 4096, 16384, 65536] {
        let code = if size == 9 {
            "print(1)\n".to_owned()
        } else {
            program(size)
        };
        let input = PolicyInput {
            code: &code,
            language: &language,
            requested: limits,
        };
        let (mut times, passed) = time_checks(&policies, &input, rounds);
        assert!(passed, "the generated program passes");
        times.sort_by(f64::total_cmp);
        let name = if size == 9 { "`print(1)`" } else { "generated" };
        println!(
            "| {name} | {} | {:.1} | {:.1} |",
            code.len(),
            times[times.len() / 2],
            times[times.len() * 9 / 10]
        );
    }
}
