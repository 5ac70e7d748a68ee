//! The CLI's output, as snapshots: `warden profiles`, policy refusals, bad settings, the JSON
//! shape of `warden run --json`.

mod common;

use std::process::Command;

fn warden(args: &[&str]) -> (String, String, i32) {
    let out = Command::new(common::warden()).args(args).output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn profiles_table() {
    let (out, _, status) = warden(&["profiles"]);
    assert_eq!(status, 0);
    insta::assert_snapshot!(out);
}

#[test]
fn profiles_json_has_effective_limits() {
    let (out, _, _) = warden(&["profiles", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let standard = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "standard")
        .unwrap();
    assert_eq!(standard["limits"]["timeout_ms"], 30000);
    assert_eq!(standard["limits"]["memory_mb"], 128);
    assert_eq!(standard["default"], true);
}

#[test]
fn a_forbidden_import_names_the_module_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.py");
    std::fs::write(&file, "import math\n\nimport subprocess\n").unwrap();
    let (out, err, status) = warden(&["run", file.to_str().unwrap()]);
    assert_eq!(status, 125);
    assert_eq!(out, "");
    insta::assert_snapshot!(err);
}

#[test]
fn a_policy_violation_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.py");
    std::fs::write(&file, "x = __import__('o' + 's')\n").unwrap();
    let (out, _, status) = warden(&["run", "--json", file.to_str().unwrap()]);
    assert_eq!(status, 125);
    insta::assert_snapshot!(out);
}

#[test]
fn a_syntax_error_has_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.py");
    std::fs::write(&file, "print('a'\n").unwrap();
    let (_, err, status) = warden(&["run", file.to_str().unwrap()]);
    assert_eq!(status, 125);
    insta::assert_snapshot!(err);
}

#[test]
fn requests_above_the_quota_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ok.py");
    std::fs::write(&file, "print(1)\n").unwrap();
    let (_, err, status) = warden(&["run", "--timeout", "300", file.to_str().unwrap()]);
    assert_eq!(status, 125);
    insta::assert_snapshot!(err);
}

#[test]
fn bad_settings_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("settings.toml");
    std::fs::write(
        &file,
        "[default.ai.sandbox.profiles.standard]\ntimeout_seconds = 30\nmax_memroy_mb = 1\n",
    )
    .unwrap();
    let (_, err, status) = warden(&["--config", file.to_str().unwrap(), "profiles"]);
    assert_eq!(status, 125);
    insta::assert_snapshot!(err.replace(file.to_str().unwrap(), "settings.toml"));
}

#[test]
fn unknown_language_and_profile() {
    let (_, err, status) = warden(&["run", "-l", "cobol", "/dev/null"]);
    assert_eq!(status, 125);
    assert_eq!(
        err,
        "warden: unknown language \"cobol\" (known: bash, javascript, python)\n"
    );
    let (_, err, _) = warden(&["run", "--profile", "gpu", "/dev/null"]);
    assert_eq!(
        err,
        "warden: unknown profile \"gpu\" (known: data_science, standard)\n"
    );
}

#[test]
fn run_json_shape() {
    require_root!();
    let (v, status) = common::run_json("test", "python", "print('hi')");
    assert_eq!(status, 0);
    let mut v = v;
    v["duration_ms"] = serde_json::json!("[duration]");
    insta::assert_json_snapshot!(v);
}

#[test]
fn the_source_documents_settings_file_runs_unchanged() {
    require_root!();
    let settings = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/source-document-settings.toml");
    let out = common::warden_cmd(
        &[
            "--config",
            settings.to_str().unwrap(),
            "run",
            "-",
            "--profile",
            "standard",
        ],
        "import math; print(math.sqrt(144))",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "12.0\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = common::warden_cmd(
        &[
            "--config",
            settings.to_str().unwrap(),
            "run",
            "-",
            "--profile",
            "standard",
        ],
        "import os",
    );
    assert_eq!(out.status.code(), Some(125));
}
