fn code(kind: &str, n: usize) -> (String, usize) {
    let (open, close, prefix): (&str, &str, &str) = match kind {
        "lambdadef" => ("lambda a=", ":1", "x = "),
        "lambdastar" => ("lambda *a, b=", ":1", "x = "),
        "lambdabody" => ("lambda:", "", "x = "),
        "ternary" => ("1 if 1 else ", "", "x = "),
        "ternarytest" => ("(1 if ", " else 1)", "x = "),
        "yield" => ("(yield ", ")", "def f():\n x = "),
        "yieldfrom" => ("(yield from ", ")", "def f():\n x = "),
        "await" => ("await ", "", "async def f():\n x = "),
        "not" => ("not ", "", "x = "),
        "unary" => ("-", "", "x = "),
        "invert" => ("~", "", "x = "),
        "star" => ("f(*", ")", "x = "),
        "dstar" => ("f(**", ")", "x = "),
        "kwarg" => ("f(a=", ")", "x = "),
        "sub" => ("a[", "]", "x = "),
        "slice" => ("a[1:", "]", "x = "),
        "step" => ("a[::", "]", "x = "),
        "dictv" => ("{1:", "}", "x = "),
        "dictk" => ("{", ":1}", "x = "),
        "dictu" => ("{**", "}", "x = "),
        "set" => ("{", "}", "x = "),
        "tuple" => ("(1,", ")", "x = "),
        "list" => ("[", "]", "x = "),
        "paren" => ("(", ")", "x = "),
        "comp" => ("[x for x in ", "]", "x = "),
        "compif" => ("[x for x in y if ", "]", "x = "),
        "gen" => ("(x for x in ", ")", "x = "),
        "walrus" => ("(a:=", ")", "x = "),
        "fstr" => ("f'{", "}'", "x = "),
        "pow" => ("1**", "", "x = "),
        "starlist" => ("[*", "]", "x = "),
        "slicelambda" => ("a[lambda a=", ":1]", "x = "),
        "defdefault" => ("(lambda a=", ":1)", "def f(a="),
        "classbase" => ("f(", ")", "class A("),
        "typeparam" => ("(lambda a=", ":1)", "def f[T: "),
        "withitem" => ("(lambda a=", ":1)", "with "),
        "deltarget" => ("(", ")", "del "),
        "starassign" => ("*(", ")", ""),
        "annot" => ("lambda a=", ":1", "x: "),
        "returnann" => ("lambda a=", ":1", "def f() -> "),
        _ => panic!(),
    };
    let suffix = match kind {
        "defdefault" => "): pass",
        "classbase" => "): pass",
        "typeparam" => "](): pass",
        "withitem" => ": pass",
        "starassign" => ", = 1",
        _ => "",
    };
    let (o, c) = if matches!(
        kind,
        "lambdadef"
            | "lambdastar"
            | "slicelambda"
            | "defdefault"
            | "typeparam"
            | "withitem"
            | "annot"
            | "returnann"
    ) {
        (open, close)
    } else {
        (open, close)
    };
    let mut s = prefix.to_owned();
    s += &o.repeat(n);
    s += if kind == "starassign" { "a" } else { "1" };
    s += &c.repeat(n);
    s += suffix;
    s += "\n";
    (s, o.len() + c.len())
}
fn main() {
    let kind = std::env::args().nth(1).unwrap();
    let stack: usize = 1 << 20;
    if let Some(n) = std::env::args().nth(2) {
        let (src, _) = code(&kind, n.parse().unwrap());
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn(move || {
                let parsed = ruff_python_parser::parse_unchecked_source(
                    &src,
                    ruff_python_ast::PySourceType::Python,
                );
                println!("ok errors={}", parsed.errors().len());
                std::mem::forget(parsed);
            })
            .unwrap()
            .join()
            .unwrap();
        return;
    }
    let me = std::env::current_exe().unwrap();
    let fits = |n: usize| {
        let out = std::process::Command::new(&me)
            .args([&kind, &n.to_string()])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        (s.starts_with("ok"), s)
    };
    let (mut lo, mut hi) = (1usize, 2usize);
    let per = code(&kind, 1).1;
    while fits(hi).0 {
        lo = hi;
        hi *= 2;
        if hi > 1 << 15 {
            println!("{kind}: guarded (> {lo} levels, {})", fits(lo).1.trim());
            return;
        }
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid).0 { lo = mid } else { hi = mid }
    }
    println!(
        "{kind}: max {lo} levels in 1 MiB -> {} B/level, {} B stack per source byte ({})",
        stack / lo,
        stack / (lo * per),
        fits(lo).1.trim()
    );
}
