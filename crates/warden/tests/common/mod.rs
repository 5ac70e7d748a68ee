//! Shared helpers: run the real `warden` binary on real code, inside an outer pid namespace
//! (`unshare --pid --fork --mount-proc`) so that a broken jail cannot signal the test runner
//! or the machine's other processes.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub fn warden() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_warden"))
}

pub fn settings() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/test-settings.toml")
}

/// Whether this process lacks root. Tests that build real sandboxes need root (CI runs as
/// root); elsewhere `require_root!()` says so and returns, rather than fail for lack of
/// privileges.
pub fn not_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid != "0"))
        .unwrap_or(true)
}

#[macro_export]
macro_rules! require_root {
    () => {
        if $crate::common::not_root() {
            eprintln!("skipped: this test builds real sandboxes and needs root");
            return;
        }
    };
}

/// Runs `warden <args>` in an outer pid namespace with `stdin` as input.
pub fn warden_cmd(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(warden())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start unshare");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Runs code with the test settings and returns the JSON result (or error) and the exit status.
pub fn run_json(profile: &str, language: &str, code: &str) -> (serde_json::Value, i32) {
    let settings = settings();
    let out = warden_cmd(
        &[
            "--config",
            settings.to_str().unwrap(),
            "run",
            "--json",
            "--profile",
            profile,
            "-l",
            language,
            "-",
        ],
        code,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (value, out.status.code().unwrap_or(-1))
}

/// Runs Python in the `test` profile and returns the JSON result, which must not be an error.
pub fn py(code: &str) -> serde_json::Value {
    let (v, _) = run_json("test", "python", code);
    assert!(v.get("error").is_none(), "{v}");
    v
}

pub fn stdout_of(v: &serde_json::Value) -> String {
    v["stdout"].as_str().unwrap_or_default().to_owned()
}

/// Runs code in the `test` profile with `--timeout SECS`; returns the JSON result, the exit
/// status and how long the whole run took.
pub fn run_with_timeout(
    language: &str,
    code: &str,
    secs: &str,
) -> (serde_json::Value, Option<i32>, std::time::Duration) {
    let settings = settings();
    let start = std::time::Instant::now();
    let out = warden_cmd(
        &[
            "--config",
            settings.to_str().unwrap(),
            "run",
            "--json",
            "--timeout",
            secs,
            "-l",
            language,
            "-",
        ],
        code,
    );
    let elapsed = start.elapsed();
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (value, out.status.code(), elapsed)
}
