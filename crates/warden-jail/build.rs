//! Compiles the checked-in security data at build time: the seccomp table into BPF, and the
//! root's tables (`data/*.toml`: forbidden host paths, masked /proc entries, devices, Landlock
//! paths) into Rust statics. A table that does not parse, names an unknown syscall or lacks a
//! reason fails the build.

#[allow(dead_code)]
#[path = "src/seccomp/table.rs"]
mod table;

#[allow(dead_code)]
#[path = "src/tables/source.rs"]
mod tables;

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

    println!("cargo:rerun-if-changed=src/tables/source.rs");
    for file in tables::FILES {
        println!("cargo:rerun-if-changed={file}");
    }
    let root = tables::load().unwrap_or_else(|e| panic!("{e}"));
    let path = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("tables.rs");
    std::fs::write(path, tables::render(&root)).unwrap();
}
