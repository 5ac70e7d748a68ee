//! Compiles the seccomp table into BPF at build time: a table that does not parse, names an
//! unknown syscall or lacks a reason fails the build.

#[allow(dead_code)]
#[path = "src/seccomp/table.rs"]
mod table;

use std::fmt::Write;

fn main() {
    println!("cargo:rerun-if-changed=seccomp/x86_64.toml");
    println!("cargo:rerun-if-changed=seccomp/syscalls_x86_64.tsv");
    println!("cargo:rerun-if-changed=src/seccomp/table.rs");
    let prog = table::compile().unwrap_or_else(|e| panic!("{e}"));
    let mut out = String::from("pub static PROGRAM: &[(u16, u8, u8, u32)] = &[");
    for i in &prog {
        let _ = write!(out, "({},{},{},{}),", i.code, i.jt, i.jf, i.k);
    }
    out.push_str("];\n");
    let path = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("seccomp_filters.rs");
    std::fs::write(path, out).unwrap();
}
