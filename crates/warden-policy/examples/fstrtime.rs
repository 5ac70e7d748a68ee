use std::time::Instant;
fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let mode = std::env::args().nth(2).unwrap();
    let src = match mode.as_str() {
        "fstr" => format!("x = {}1{}\n", "f'{".repeat(n), "}'".repeat(n)),
        "fstr_flat" => format!("x = {}\n", "f'{1}' ".repeat(n)),
        "paren" => format!("x = {}1{}\n", "(".repeat(n), ")".repeat(n)),
        "list" => format!("x = {}1{}\n", "[".repeat(n), "]".repeat(n)),
        _ => panic!(),
    };
    let t = Instant::now();
    let mut lexer = ruff_python_parser::lexer::lex(&src, ruff_python_parser::Mode::Module);
    let mut lexed = 0;
    while lexer.next_token() != ruff_python_ast::token::TokenKind::EndOfFile { lexed += 1; }
    let tl = t.elapsed();
    let t = Instant::now();
    let p = stacker::grow(1 << 30, || ruff_python_parser::parse_unchecked_source(&src, ruff_python_ast::PySourceType::Python));
    println!("{mode} n={n} bytes={} lex={tl:?} ({lexed} tokens) parse={:?} errors={}", src.len(), t.elapsed(), p.errors().len());
    std::mem::forget(p);
}
