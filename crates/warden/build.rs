//! Link flags of the `warden` binary.

fn main() {
    // Every `warden run` pays the dynamic loader's relocation of this large position-
    // independent binary (≈18 000 relative relocations). Packed relative relocations
    // (DT_RELR, glibc ≥ 2.36, binutils ≥ 2.38) shrink that table from ≈430 KB to a few KB,
    // which the loader reads and applies faster; the binary stays position-independent.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    // The functions one `warden run` executes, side by side at the start of .text: the CLI,
    // the helper it forks and the sandbox's init each fault in every 64 KB of text they run
    // (fork copies no page-table entries of file-backed text), ≈ 160 faults per run when that
    // code is scattered (docs/benchmarks.md, "The code of one run, side by side";
    // `bench/link_order.py` regenerates the list). LLD is the linker of this target since
    // Rust 1.90 (the workspace's rust-version is newer), and it ignores a name the binary no
    // longer has. `WARDEN_LINK_ORDER=off` leaves the order to the linker (for another linker,
    // which may not know the option).
    let order = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("link-order.txt");
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu")
        && std::env::var("WARDEN_LINK_ORDER").as_deref() != Ok("off")
    {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-env-changed=WARDEN_LINK_ORDER");
    println!("cargo:rerun-if-changed=build.rs");
}
