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

pub mod gateway_world;
pub mod internet;

#[path = "../../../../tests/support/prerequisite.rs"]
mod prerequisite;
pub use prerequisite::*;

/// Runs `warden <args>` in an outer pid namespace with `stdin` as input.
pub fn warden_cmd(args: &[&str], stdin: &str) -> Output {
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(warden())
        .args(args);
    run_fed(cmd, stdin, |_| {})
}

/// Runs `warden <args>` directly (not in an outer pid namespace: a docker profile's containers
/// carry the CLI's pid as the host sees it, and its keeper must see the container's first
/// process) with `stdin` as input; `started` gets its pid while it runs.
pub fn warden_direct(args: &[&str], stdin: &str, started: impl FnOnce(u32)) -> Output {
    let mut cmd = Command::new(warden());
    cmd.args(args);
    run_fed(cmd, stdin, started)
}

/// Runs `cmd` with `stdin` as its input and waits for its output.
fn run_fed(mut cmd: Command, stdin: &str, started: impl FnOnce(u32)) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    started(child.id());
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

/// The jail as the tests build it through the Backend trait: the default host paths, fast
/// cgroup attach, the sandbox user 1000 mapped to a host uid of its own (the default range), this build's binary as the
/// helpers' fork server (the daemon's mode), no network. Override fields with
/// `JailSettings { …, ..common::jail_settings() }`.
pub fn jail_settings() -> warden_jail::JailSettings {
    warden_jail::JailSettings {
        host_paths: warden_config::JailOptions::default().host_paths,
        fast_cgroup_attach: true,
        ids: warden_jail::IdMap {
            inside_uid: 1000,
            inside_gid: 1000,
            host: warden_jail::plan::HostIds::Lease(Default::default()),
        },
        helper_exe: warden(),
        helper_start: warden_jail::HelperStart::ForkServer,
        wait_for_teardown: false,
        network: Default::default(),
    }
}

/// The docker backend's settings for tests: the engine's defaults, the real binary as the
/// network keeper of networked containers, and Warden's seccomp table as the containers'
/// profile (as the binary gives it).
pub fn docker_settings() -> warden_docker::DockerSettings {
    warden_docker::DockerSettings {
        network: warden_docker::NetSettings {
            keeper_exe: Some(warden()),
            ..Default::default()
        },
        seccomp_profile: Some(
            warden_jail::seccomp::oci::profile()
                .unwrap()
                .to_string()
                .into(),
        ),
        ..Default::default()
    }
}

/// A running `warden serve` on a free loopback port; killed and reaped when dropped (before
/// its data directory, when it has one of its own, is removed).
pub struct Server {
    pub child: std::process::Child,
    pub addr: String,
    pub data_dir: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `warden --config SETTINGS serve --listen 127.0.0.1:0` with a data directory of its
/// own (so that daemons of concurrent tests never share durable sandboxes) and waits for its
/// address.
pub fn serve_with(settings: &std::path::Path) -> Server {
    let data_dir = tempfile::tempdir().unwrap();
    let mut server = serve_at(&warden(), settings, data_dir.path());
    server.data_dir = Some(data_dir);
    server
}

/// [`serve_with`] settings given as text: written to a file of a folder that the returned
/// guard keeps for as long as the daemon needs it.
pub fn serve_settings(text: &str) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.toml");
    std::fs::write(&settings, text).unwrap();
    (serve_with(&settings), dir)
}

/// Starts `BINARY --config SETTINGS serve --listen 127.0.0.1:0 --data-dir DATA_DIR` and waits
/// for its address; the caller keeps the data directory.
// The child is waited for by `Server`'s drop, or on the early return here.
#[allow(clippy::zombie_processes)]
pub fn serve_at(
    binary: &std::path::Path,
    settings: &std::path::Path,
    data_dir: &std::path::Path,
) -> Server {
    use std::io::BufRead;
    let mut child = Command::new(binary)
        .args([
            "--config",
            settings.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("warden serve ended before listening: {seen}");
        }
        if let Some(addr) = line.trim().strip_prefix("warden: listening on http://") {
            let addr = addr.to_owned();
            // Keep reading (and dropping) the log so the server never blocks on a full pipe.
            std::thread::spawn(move || {
                let mut sink = String::new();
                while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
                    sink.clear();
                }
            });
            return Server {
                child,
                addr,
                data_dir: None,
            };
        }
        seen.push_str(&line);
    }
}

/// The value of one series of the daemon's `/metrics` (e.g.
/// `warden_pool_ready{profile="open"}`), read now.
pub fn metric(addr: &str, series: &str) -> u64 {
    let (status, text) = http_request(addr, "GET", "/metrics", "", "");
    assert_eq!(status, 200, "GET /metrics: {text}");
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// A minimal HTTP/1.1 request with extra header lines; returns the status and the body.
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // A daemon that never answers fails the test instead of holding the suite until CI's
    // limit (no test waits this long for one answer).
    s.set_read_timeout(Some(std::time::Duration::from_secs(180)))
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .unwrap_or_else(|e| panic!("{method} {path}: no whole answer: {e}"));
    let status = raw[9..12].parse().unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = rest;
        loop {
            let (size, tail) = rest.split_once("\r\n").unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                break out;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
    } else {
        rest.to_owned()
    };
    (status, body)
}

/// The pids of processes descending from `root` whose command line contains `needle`.
pub fn descendants_running(root: u32, needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(needle) {
            continue;
        }
        let mut at = pid;
        while let Some(parent) = parent_of(at) {
            if parent == root {
                out.push(pid);
                break;
            }
            if parent <= 1 {
                break;
            }
            at = parent;
        }
    }
    out
}

/// A process's parent, from `/proc/<pid>/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether `pid` is a daemon's fork server (the one process a `warden serve` keeps besides its
/// threads, which forks every helper: named after its mode).
pub fn is_fork_server(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|n| n.trim_end() == "warden forks")
}

/// The helper of the run whose program's command line holds `marker`: its ancestor whose
/// parent is `daemon` (an exec'd helper) or a fork server (a forked one).
pub fn helper_running(daemon: u32, marker: &str) -> Option<u32> {
    let program = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline)
                .contains(marker)
                .then_some(pid)
        })?;
    let mut at = program;
    loop {
        let parent = parent_of(at)?;
        if parent == daemon || is_fork_server(parent) {
            return Some(at);
        }
        if parent <= 1 {
            return None;
        }
        at = parent;
    }
}

/// A multi-threaded runtime of two workers, as the daemon has on this project's machines.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
