//! A real `warden serve` for the SDK's tests, started on a free loopback port with the
//! integration tests' settings (`crates/warden/tests/fixtures/test-settings.toml`: default
//! profile `test`, and `strict` with `forbidden_imports`).
//!
//! The daemon is the workspace's `warden` binary: `$WARDEN_BIN`, else `warden` in the target
//! folder these tests were built in (`cargo test --workspace` builds it; alone, run
//! `cargo build -p warden` first). Building real sandboxes needs root: `require_root!()` skips
//! a test with a message otherwise.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The target folder's profile directory (`…/debug`), from this test's own path
/// (`…/debug/deps/daemon-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

pub fn warden_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("WARDEN_BIN") {
        return PathBuf::from(bin);
    }
    let bin = profile_dir().join("warden");
    assert!(
        bin.is_file(),
        "no warden binary at {}: run `cargo build -p warden` (or set WARDEN_BIN)",
        bin.display()
    );
    bin
}

/// A compiled example of this crate (`cargo test` builds them).
pub fn example_bin(name: &str) -> PathBuf {
    let bin = profile_dir().join("examples").join(name);
    assert!(
        bin.is_file(),
        "no example at {}: run `cargo build --examples -p warden-client`",
        bin.display()
    );
    bin
}

pub fn settings() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../warden/tests/fixtures/test-settings.toml")
}

#[path = "../../../../tests/support/prerequisite.rs"]
mod prerequisite;
pub use prerequisite::*;

/// A running daemon; stopped with SIGTERM (it destroys its sandboxes) when dropped.
pub struct Daemon {
    child: Child,
    pub url: String,
    /// Its own data directory (durable sandboxes), removed after it exits.
    data_dir: std::path::PathBuf,
}

impl Daemon {
    pub fn start() -> Daemon {
        Daemon::start_with(&settings())
    }

    /// A daemon with the test settings plus `extra` TOML (e.g. `[[server.api_keys]]`).
    pub fn start_with_extra(extra: &str) -> Daemon {
        let base = std::fs::read_to_string(settings()).unwrap();
        Daemon::start_with_text(&format!("{base}\n{extra}"))
    }

    /// A daemon with these settings (a whole settings file's text).
    pub fn start_with_text(text: &str) -> Daemon {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "warden-client-test-{}-{}.toml",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, text).unwrap();
        let daemon = Daemon::start_with(&path);
        let _ = std::fs::remove_file(&path);
        daemon
    }

    // The child is waited for in `drop`, or before the panic on an early exit.
    #[allow(clippy::zombie_processes)]
    fn start_with(settings: &std::path::Path) -> Daemon {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let data_dir = std::env::temp_dir().join(format!(
            "warden-client-test-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut child = Command::new(warden_bin())
            .arg("--config")
            .arg(settings)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start warden serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("warden serve ended before listening: {seen}");
            }
            if let Some(addr) = line.trim().strip_prefix("warden: listening on http://") {
                let url = format!("http://{addr}");
                // Keep draining the log so the daemon never blocks on a full pipe.
                std::thread::spawn(move || {
                    let mut sink = String::new();
                    while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
                        sink.clear();
                    }
                });
                return Daemon {
                    child,
                    url,
                    data_dir,
                };
            }
            seen.push_str(&line);
        }
    }

    pub fn client(&self) -> warden_client::Client {
        warden_client::Client::new(&self.url).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
