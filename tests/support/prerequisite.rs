//! Run-time prerequisites of the tests: the one way a test says it cannot run here. Included
//! by each test crate's `common` module (`#[path]`), and by unit tests that need the host's
//! kernel (warden-jail's Landlock), so every test reports skips alike.
//!
//! A test whose prerequisite is missing (root, the Docker engine, runsc, an interpreter or a
//! package that the project's setup installs):
//! - under CI (`CI` set, and not `0` or `false`) fails, naming what is missing: CI's machine
//!   has everything `scripts/setup.sh` installs, so a skip there is a broken setup;
//! - otherwise appends `SKIPPED: <test>: <why>` to the skip log and writes the same line
//!   straight to the process's stderr (past the harness's capture of passing tests), then
//!   returns. The skip log is `$WARDEN_SKIP_LOG`, by default `warden-skipped.log` in cargo's
//!   temporary folder of the target directory; `scripts/test.sh` empties it first and lists
//!   it in its summary.
//!
//! What needs something no setup provides (a live cluster, a flag) is `#[ignore = "why"]`
//! instead, which cargo itself counts and lists.

#![allow(dead_code)]

use std::io::Write;

/// Whether this is a CI run (`CI=true`): then a missing prerequisite fails the test.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Where skips are recorded.
pub fn skip_log() -> std::path::PathBuf {
    std::env::var_os("WARDEN_SKIP_LOG")
        .map(Into::into)
        .unwrap_or_else(|| {
            // Cargo names its temporary folder for integration tests only; a crate's own unit
            // tests (which include this file too) use the system's.
            option_env!("CARGO_TARGET_TMPDIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(std::env::temp_dir)
                .join("warden-skipped.log")
        })
}

/// The running test's name, as the harness shows it (`<test crate>::<path>`).
pub fn test_name() -> String {
    let thread = std::thread::current();
    format!(
        "{}::{}",
        env!("CARGO_CRATE_NAME"),
        thread.name().unwrap_or("<unnamed thread>")
    )
}

/// Reports that the running test cannot run here because `why`: a failure under CI, a
/// recorded skip otherwise (the caller then returns; see [`prerequisite!`]).
pub fn skip(why: &str) {
    let test = test_name();
    if under_ci() {
        panic!("{test}: a prerequisite is missing under CI: {why}");
    }
    let line = format!("SKIPPED: {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    let log = skip_log();
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // One append of one line: concurrent tests' lines do not interleave.
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
    {
        Ok(mut f) => f.write_all(line.as_bytes()).unwrap(),
        Err(e) => panic!("{test}: cannot record the skip in {}: {e}", log.display()),
    }
}

/// Why root is missing, if it is.
pub fn missing_root() -> Option<String> {
    let euid_is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        .unwrap_or(false);
    (!euid_is_root).then(|| {
        "needs root (real sandboxes: namespaces, mounts, cgroups, uid switches; CI runs as root)"
            .to_owned()
    })
}

/// Whether this process lacks root.
pub fn not_root() -> bool {
    missing_root().is_some()
}

/// Why the Docker engine cannot be used, if it cannot.
pub fn missing_docker() -> Option<String> {
    match std::process::Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
    {
        Err(e) => Some(format!("needs the docker command ({e})")),
        Ok(o) if !o.status.success() => Some(format!(
            "needs a running Docker engine: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

/// Why gVisor's runsc cannot be used with the Docker engine, if it cannot.
pub fn missing_runsc() -> Option<String> {
    if let Some(why) = missing_docker() {
        return Some(why);
    }
    let runtimes = std::process::Command::new("docker")
        .args(["info", "--format", "{{json .Runtimes}}"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    (!runtimes.contains("\"runsc\"")).then(|| {
        "needs runsc registered with the Docker engine (scripts/setup-gvisor.sh)".to_owned()
    })
}

/// Why `path` (an interpreter, a package folder) is missing, if it is.
pub fn missing_path(path: &str, installed_by: &str) -> Option<String> {
    (!std::path::Path::new(path).exists()).then(|| format!("needs {path} ({installed_by})"))
}

/// `prerequisite!(missing)` returns from the test when `missing` (an `Option<String>`, the
/// reason) is `Some`, after [`skip`] reported it (under CI: fails instead);
/// `prerequisite!(missing, value)` returns `value`.
#[macro_export]
macro_rules! prerequisite {
    ($missing:expr) => {
        if let Some(why) = $missing {
            $crate::common::skip(&why);
            return;
        }
    };
    ($missing:expr, $ret:expr) => {
        if let Some(why) = $missing {
            $crate::common::skip(&why);
            return $ret;
        }
    };
}

/// The test builds real sandboxes: root, or a reported skip (under CI: a failure).
#[macro_export]
macro_rules! require_root {
    () => {
        $crate::prerequisite!($crate::common::missing_root())
    };
}

/// The test uses the Docker engine (and builds sandboxes): root and a running engine, or a
/// reported skip (under CI: a failure).
#[macro_export]
macro_rules! require_docker {
    () => {
        $crate::require_root!();
        $crate::prerequisite!($crate::common::missing_docker())
    };
}
