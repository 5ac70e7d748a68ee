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
    println!("cargo:rerun-if-changed=build.rs");
}
