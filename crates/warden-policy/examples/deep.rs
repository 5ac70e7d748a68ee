use std::time::{Duration, Instant};
use warden_policy::*;
fn code(kind: &str, n: usize) -> String {
    let nest = |open: &str, close: &str| format!("x = {}1{}\n", open.repeat(n), close.repeat(n));
    match kind {
        "binop" => format!("x = 1{}\n", "+1".repeat(n)),
        "unary" => format!("x = {}1\n", "-".repeat(n)),
        "list" => nest("[", "]"),
        "dict" => nest("{1:", "}"),
        "args" => nest("f(", ")"),
        "kwargs" => nest("f(a=", ")"),
        "comp" => nest("[x for x in ", "]"),
        "lambdadef" => nest("lambda a=", ":1"),
        "star" => nest("[*", "]"),
        "fstr" => nest("f'{", "}'"),
        "attr" => format!("x = a{}\n", ".b".repeat(n)),
        "pattern" => format!(
            "match x:\n case {}1{}:\n  pass\n",
            "[".repeat(n),
            "]".repeat(n)
        ),
        "ifs" => {
            let mut s = String::new();
            for i in 0..n {
                s += &" ".repeat(i);
                s += "if x:\n";
            }
            s += &" ".repeat(n);
            s += "pass\n";
            s
        }
        "exec" => format!("exec('x = {}1')\n", "-".repeat(n)),
        "execbad" => format!("exec('x = {}1(')\n", "-".repeat(n)),
        _ => panic!("{kind}"),
    }
}
fn main() {
    let kind = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).unwrap().parse().unwrap();
    let bad = std::env::args().nth(3).is_some();
    let mut src = code(&kind, n);
    if bad {
        src.push_str("import os\n(\n");
    } else {
        src.push_str("import os\n");
    }
    let out = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let p = ForbiddenImports::new(&ForbiddenImportsSettings::default(), true).unwrap();
            let lang = warden_types::Language::new("python").unwrap();
            let t = Instant::now();
            let r = p.check(&PolicyInput {
                code: &src,
                language: &lang,
                requested: Requested {
                    timeout: Duration::from_secs(1),
                    memory_mb: 1,
                },
            });
            format!("{:?} in {:?}", r.map_err(|v| (v.kind, v.line)), t.elapsed())
        })
        .unwrap()
        .join()
        .unwrap();
    println!("{kind} {n} bad={bad}: {out}");
}
