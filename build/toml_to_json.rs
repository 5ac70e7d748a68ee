//! Shared by build scripts (`#[path]`-included): converts a checked-in TOML data file to JSON
//! in OUT_DIR. Data that every run loads deserializes several times faster from JSON than TOML
//! parses; a file that does not parse fails the build.

/// Converts `relative` (to the crate's folder) into `OUT_DIR/json_name`.
pub fn toml_to_json(relative: &str, json_name: &str) {
    let source = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join(relative);
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(&source)
        .unwrap_or_else(|e| panic!("read {}: {e}", source.display()));
    let value: toml::Value =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    let json = serde_json::to_string(&value).expect("a TOML value converts to JSON");
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join(json_name);
    std::fs::write(&out, json).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
}
