use std::time::{Duration, Instant};
use warden_policy::*;
fn main() {
    let n: usize = std::env::args().nth(2).unwrap().parse().unwrap();
    let kind = std::env::args().nth(1).unwrap();
    let code = match kind.as_str() {
        "paren" => format!("x = {}1{}\n", "(".repeat(n), ")".repeat(n)),
        "binop" => format!("x = 1{}\n", "+1".repeat(n)),
        "unary" => format!("x = {}1\n", "-".repeat(n)),
        "list" => format!("x = {}1{}\n", "[".repeat(n), "]".repeat(n)),
        "ifs" => { let mut s = String::new(); for i in 0..n { s += &" ".repeat(i); s += "if x:\n"; } s += &" ".repeat(n); s += "pass\n"; s },
        "call" => format!("x = f{}\n", "()".repeat(n)),
        "attr" => format!("x = a{}\n", ".b".repeat(n)),
        _ => panic!(),
    };
    let p = ForbiddenImports::new(&ForbiddenImportsSettings::default(), true).unwrap();
    let lang = warden_types::Language::new("python").unwrap();
    let t = Instant::now();
    let r = p.check(&PolicyInput { code: &code, language: &lang, requested: Requested { timeout: Duration::from_secs(1), memory_mb: 1 } });
    println!("{kind} {n}: {:?} in {:?}", r.map_err(|v| v.message), t.elapsed());
}
