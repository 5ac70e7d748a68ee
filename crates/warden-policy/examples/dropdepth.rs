fn code(kind: &str, n: usize) -> String {
    let nest = |open: &str, close: &str| format!("x = {}1{}\n", open.repeat(n), close.repeat(n));
    match kind {
        "binop" => format!("x = 1{}\n", "+1".repeat(n)),
        "unary" => format!("x = {}1\n", "-".repeat(n)),
        "list" => nest("[", "]"),
        "tuple" => nest("(1,", ")"),
        "dict" => nest("{1:", "}"),
        "set" => nest("{", "}"),
        "args" => nest("f(", ")"),
        "kwargs" => nest("f(a=", ")"),
        "subscript" => nest("a[", "]"),
        "slice" => nest("a[1:", "]"),
        "comp" => nest("[x for x in ", "]"),
        "gen" => nest("(x for x in ", ")"),
        "ternary" => format!("x = {}1\n", "1 if 1 else ".repeat(n)),
        "call" => format!("x = f{}\n", "()".repeat(n)),
        "attr" => format!("x = a{}\n", ".b".repeat(n)),
        "pow" => format!("x = 1{}\n", "**1".repeat(n)),
        "lambda" => format!("x = {}1\n", "lambda:".repeat(n)),
        "lambdadef" => nest("lambda a=", ":1"),
        "not" => format!("x = {}1\n", "not ".repeat(n)),
        "await" => format!("async def f():\n x = {}1\n", "await ".repeat(n)),
        "star" => nest("[*", "]"),
        "fstr" => nest("f'{", "}'"),
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
        "defs" => {
            let mut s = String::new();
            for i in 0..n {
                s += &" ".repeat(i);
                s += "def f():\n";
            }
            s += &" ".repeat(n);
            s += "pass\n";
            s
        }
        _ => panic!("{kind}"),
    }
}
fn main() {
    let kind = std::env::args().nth(1).unwrap();
    let stack: usize = 1 << 20;
    // Find the largest n whose drop fits in `stack`, by doubling then bisecting in child processes.
    if let Some(n) = std::env::args().nth(2) {
        let n: usize = n.parse().unwrap();
        let src = code(&kind, n);
        let parsed =
            ruff_python_parser::parse_unchecked_source(&src, ruff_python_ast::PySourceType::Python);
        let errs = parsed.errors().len();
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn(move || drop(parsed))
            .unwrap()
            .join()
            .unwrap();
        println!("ok errors={errs}");
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
    while fits(hi).0 {
        lo = hi;
        hi *= 2;
        if hi > 1 << 20 {
            println!("{kind}: > {lo} ok");
            return;
        }
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid).0 { lo = mid } else { hi = mid }
    }
    println!(
        "{kind}: max {lo} levels in 1 MiB -> {} bytes/level ({})",
        stack / lo,
        fits(lo).1.trim()
    );
}
