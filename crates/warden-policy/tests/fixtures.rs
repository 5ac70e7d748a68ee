//! Snapshot tests over `tests/fixtures/*.py`: one file per case, checked by the policies of the
//! standard profile (`forbidden_imports` with the default allow-list, then `resource_quota`),
//! once in strict mode and once not. Each snapshot holds the fixture's source and both outcomes:
//! `ok`, or the violation as JSON, the shape the engine hands on.

use std::fmt::Write as _;
use std::time::Duration;

use warden_policy::{PolicyInput, PolicySettings, Requested, build_policies};
use warden_types::Language;

/// The standard profile's limits; every fixture asks for exactly these.
const STANDARD: Requested = Requested {
    timeout: Duration::from_secs(30),
    memory_mb: 128,
};

/// `ok`, or the violation as pretty JSON.
fn check(code: &str, strict_mode: bool) -> String {
    let enabled = ["forbidden_imports".to_owned(), "resource_quota".to_owned()];
    let policies = build_policies(&enabled, &PolicySettings::default(), strict_mode, STANDARD)
        .expect("the standard profile's policies build");
    let language = Language::new("python").expect("python is a valid language");
    let input = PolicyInput {
        code,
        language: &language,
        requested: STANDARD,
    };
    match policies.check_all(&input) {
        Ok(()) => "ok".to_owned(),
        Err(violation) => serde_json::to_string_pretty(&violation).expect("a violation serializes"),
    }
}

#[test]
fn fixtures() {
    insta::glob!("fixtures/*.py", |path| {
        let code = std::fs::read_to_string(path).expect("fixture is readable UTF-8");
        let mut snapshot = String::new();
        writeln!(snapshot, "----- code -----\n{code}").unwrap();
        writeln!(snapshot, "----- strict -----\n{}", check(&code, true)).unwrap();
        writeln!(snapshot, "----- non_strict -----\n{}", check(&code, false)).unwrap();
        insta::with_settings!({ omit_expression => true }, {
            insta::assert_snapshot!(snapshot);
        });
    });
}
