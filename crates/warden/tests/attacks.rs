//! The adversarial suite: every attack program in `tests/attacks/` (listed, with what it tries
//! and what must come of it, in `tests/attacks/attacks.toml`) run against every backend present
//! through a real `warden serve`, one test per backend (`jail`, `docker`, `gvisor`).
//!
//! Invariants the runner holds to:
//! - the jail's daemon runs inside an outer pid namespace (`unshare --pid --fork --mount-proc`),
//!   so a broken jail's `kill(-1)` cannot reach the test runner or the machine's other
//!   processes. The docker backend's daemon runs in the host's: its sandboxes are the engine's
//!   containers, never its children, and its start-up orphan removal judges other Warden
//!   processes' containers by their pid label, which only means anything in the host's pid
//!   namespace;
//! - every check of the table is made on every backend; a backend that does not keep one
//!   declares it in the table (`gaps`) and the run prints `gap: …` — never a silent pass. The
//!   host's checks (the daemon alive and answering, nothing left running, the witness alive,
//!   the host's services untouched, no secret shown) are never waived;
//! - a backend that is not on this host (no engine, no runsc), or no root, is a reported skip
//!   (`prerequisite!`: `SKIPPED: …` in the skip log; under CI a failure), never a pass; an
//!   engine without the suite's image fails.

mod common;

use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `attacks.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    attack: Vec<Attack>,
}

/// One attack program and what must come of it (the fields are described in the table).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Attack {
    file: String,
    language: String,
    #[allow(dead_code)] // documentation for the reader of the table; shown in failures
    tries: String,
    reason: Vec<String>,
    #[serde(default)]
    shows: Vec<String>,
    #[serde(default)]
    forbidden: Vec<String>,
    timeout: Option<f64>,
    seconds: Option<u64>,
    artifacts: Option<Vec<String>>,
    policy: Option<PolicyVerdict>,
    #[serde(default)]
    gaps: BTreeMap<String, String>,
}

/// What the import policy does with a policy bypass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum PolicyVerdict {
    /// Refused before it runs (422).
    Catches,
    /// Refused while it runs, by the interpreter's import guard (422, "at run time").
    Refuses,
    /// Not seen: it runs, and isolation must hold.
    Misses,
}

/// The suite's profiles' limits (the runner checks results against them).
const MAX_OUTPUT: usize = 65536;
const MAX_ARTIFACTS: usize = 5;
const MAX_ARTIFACT_BYTES: u64 = 1 << 20;
/// What an attack prints only when it worked.
const BROKEN: &str = "BROKEN:";

fn attacks_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/attacks")
}

fn table() -> Table {
    let path = attacks_dir().join("attacks.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Jail,
    Docker,
    /// The docker backend with `container_runtime = "runsc"`.
    Gvisor,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Jail => "jail",
            Backend::Docker => "docker",
            Backend::Gvisor => "gvisor",
        }
    }

    /// Why this backend cannot be tested on this host, if it cannot.
    fn unavailable(self) -> Option<String> {
        match self {
            Backend::Jail => None,
            Backend::Docker => common::missing_docker(),
            Backend::Gvisor => common::missing_runsc(),
        }
    }

    fn settings(self) -> String {
        let (backend, runtime) = match self {
            Backend::Jail => ("jail", ""),
            Backend::Docker => ("docker", ""),
            Backend::Gvisor => ("docker", "container_runtime = \"runsc\"\n"),
        };
        // The profile allows up to 30 s; a run takes 10 s unless its attack sets `timeout`
        // (see `DEFAULT_TIMEOUT`).
        let limits = format!(
            "timeout_seconds = 30\nmax_memory_mb = 96\nmax_pids = 32\ncpus = 1.0\n\
             max_output_bytes = {MAX_OUTPUT}\nmax_file_size_mb = 4\nworkspace_mb = 16\n\
             max_artifacts = {MAX_ARTIFACTS}\nmax_artifact_mb = 1\n{runtime}"
        );
        format!(
            "[sandbox]\ndefault_profile = \"attack\"\nbackend = \"{backend}\"\n\n\
             [sandbox.profiles.attack]\n{limits}enabled_policies = []\n\n\
             [sandbox.profiles.attack_policy]\n{limits}\
             enabled_policies = [\"forbidden_imports\", \"resource_quota\"]\n\
             [sandbox.profiles.attack_policy.policies.forbidden_imports]\n\
             allowed_modules = [\"math\", \"json\"]\n"
        )
    }
}

/// An attack's run timeout unless it sets its own. (Under gVisor, writing the 10 000 artifacts
/// of artifact_ten_thousand.py took 7.5 s on a quiet 2-core host and 15 s on a busy one: that
/// attack sets 30 s, the profile's maximum.)
const DEFAULT_TIMEOUT: f64 = 10.0;

/// A `warden serve` for one backend, with a secret in its environment and on its command line
/// (the settings' folder is named after it), and a witness beside it.
struct Daemon {
    /// `unshare` (jail) or `warden` itself.
    child: Child,
    addr: String,
    /// The `warden serve` process as the host sees it.
    pid: u32,
    secret: String,
    /// `sleep` as the sandboxes' host uid in the daemon's pid namespace (through `nsenter` for
    /// the jail); a `kill(-1)` that escaped a sandbox would end it.
    witness: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.witness.kill();
        let _ = self.witness.wait();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The process whose parent is `parent`, waiting for it to appear.
fn child_of(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(pid) = children(parent).first() {
            return *pid;
        }
        assert!(Instant::now() < deadline, "no child of {parent}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host's processes whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The fields after the command's closing parenthesis: state, ppid, …
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Every process under `pid`, as `pid: cmdline`.
fn descendants(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = children(pid);
    while let Some(p) = todo.pop() {
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        out.push(format!(
            "{p}: {}",
            String::from_utf8_lossy(&cmd).replace('\0', " ")
        ));
        todo.extend(children(p));
    }
    out
}

/// Host processes whose command line contains `marker`.
fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue;
        }
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(marker)
        {
            found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
        }
    }
    found
}

/// Containers, running or not, that the daemon with host pid `pid` made.
fn containers_of(pid: u32) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.warden.pid={pid}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn start_daemon(backend: Backend) -> Daemon {
    let secret = format!("wardensecret{}x{}", std::process::id(), backend as u8);
    let dir = tempfile::Builder::new()
        .prefix(&format!("attacks-{secret}-"))
        .tempdir()
        .unwrap();
    let settings = dir.path().join("settings.toml");
    std::fs::write(&settings, backend.settings()).unwrap();
    let serve = [
        "--config",
        settings.to_str().unwrap(),
        "serve",
        "--listen",
        "127.0.0.1:0",
    ];
    let mut cmd = if backend == Backend::Jail {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(common::warden())
            .args(serve);
        c
    } else {
        let mut c = Command::new(common::warden());
        c.args(serve);
        c
    };
    let mut child = cmd
        .env("WARDEN_ATTACK_SECRET", &secret)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let addr = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("warden serve ended before listening: {seen}");
        }
        if let Some(addr) = line.trim().strip_prefix("warden: listening on http://") {
            break addr.to_owned();
        }
        seen.push_str(&line);
    };
    // Keep draining the log so the daemon never blocks on a full pipe; lines about attacks
    // go to the test's output.
    std::thread::spawn(move || {
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
    });
    let pid = if backend == Backend::Jail {
        child_of(child.id())
    } else {
        child.id()
    };
    let sleep = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sleep",
        "3600",
    ];
    let witness = if backend == Backend::Jail {
        Command::new("nsenter")
            .args(["--target", &pid.to_string(), "--pid", "--"])
            .args(sleep)
            .spawn()
            .unwrap()
    } else {
        Command::new(sleep[0]).args(&sleep[1..]).spawn().unwrap()
    };
    Daemon {
        child,
        addr,
        pid,
        secret,
        witness,
        _dir: dir,
    }
}

/// One HTTP/1.1 request with a deadline; the status and the body. A daemon that does not
/// answer in time fails the test instead of hanging it.
fn http(addr: &str, method: &str, path: &str, body: &[u8], deadline: Duration) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(deadline)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    if let Err(e) = s.read_to_end(&mut raw) {
        panic!("{method} {path}: no answer within {deadline:?} ({e})");
    }
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    (status, body.to_owned())
}

/// The host services the attacks try to reach: a TCP service on 127.0.0.1 that answers with a
/// token, and a UDP one; each counts what reached it.
struct HostServices {
    tcp_port: u16,
    udp_port: u16,
    tcp_hits: Arc<AtomicUsize>,
    udp_hits: Arc<AtomicUsize>,
}

impl HostServices {
    fn start() -> HostServices {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let services = HostServices {
            tcp_port: tcp.local_addr().unwrap().port(),
            udp_port: udp.local_addr().unwrap().port(),
            tcp_hits: Arc::default(),
            udp_hits: Arc::default(),
        };
        let hits = services.tcp_hits.clone();
        std::thread::spawn(move || {
            for mut conn in tcp.incoming().flatten() {
                hits.fetch_add(1, Ordering::SeqCst);
                let _ = conn.write_all(b"HOST-SERVICE\n");
            }
        });
        let hits = services.udp_hits.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((_, peer)) = udp.recv_from(&mut buf) {
                hits.fetch_add(1, Ordering::SeqCst);
                let _ = udp.send_to(b"HOST-SERVICE", peer);
            }
        });
        services
    }
}

/// Waits up to `secs` for `check` to come back empty; what it last found otherwise.
fn settles<T: std::fmt::Debug>(secs: u64, check: impl Fn() -> Vec<T>) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let found = check();
        if found.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{found:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The result of one attack's run: the checks of the table that failed (waivable by a gap),
/// and the host's checks that failed (never waived).
#[derive(Default)]
struct Verdict {
    own: Vec<String>,
    host: Vec<String>,
}

struct Suite {
    backend: Backend,
    daemon: Daemon,
    services: HostServices,
}

impl Suite {
    /// Runs one attack in `profile`; `index` makes its marker unique.
    fn run(&mut self, attack: &Attack, profile: &str, index: usize) -> Verdict {
        let mut v = Verdict::default();
        let code = std::fs::read_to_string(attacks_dir().join(&attack.file)).unwrap();
        let marker = format!(
            "{}{:02}{}.25",
            std::process::id() % 100_000,
            index,
            self.backend as u8
        );
        let stdin = serde_json::json!({
            "marker": marker,
            "daemon_pid": self.daemon.pid,
            "tcp_port": self.services.tcp_port,
            "udp_port": self.services.udp_port,
        });
        let mut request = serde_json::json!({
            "code": code,
            "language": attack.language,
            "profile": profile,
            "stdin": stdin.to_string(),
        });
        request["timeout_seconds"] = attack.timeout.unwrap_or(DEFAULT_TIMEOUT).into();
        let limit = Duration::from_secs(attack.seconds.unwrap_or(20));
        let started = Instant::now();
        let (status, body) = http(
            &self.daemon.addr,
            "POST",
            "/v1/execute",
            request.to_string().as_bytes(),
            limit + Duration::from_secs(30),
        );
        let took = started.elapsed();
        if took > limit {
            v.own.push(format!("took {took:?}, more than {limit:?}"));
        }
        if body.contains(&self.daemon.secret) {
            v.host.push("the daemon's secret is in the answer".into());
        }
        let result: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let caught = profile == "attack_policy"
            && matches!(
                attack.policy,
                Some(PolicyVerdict::Catches | PolicyVerdict::Refuses)
            );
        if caught {
            if status != 422 || result["error"]["code"] != "policy_violation" {
                v.own.push(format!(
                    "the policy did not refuse it: {status} {body:.300}"
                ));
            }
            // The import guard's refusals, and only those, happen at run time.
            let at_run_time = result["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("at run time"));
            if at_run_time != (attack.policy == Some(PolicyVerdict::Refuses)) {
                v.own
                    .push(format!("refused at the wrong stage: {body:.300}"));
            }
        } else if status != 200 {
            v.own.push(format!("answered {status}: {body:.300}"));
        } else {
            check_result(attack, &result, &mut v);
        }
        self.check_host(&marker, &mut v);
        v
    }

    /// The host after a run: the daemon, leftovers, the witness, the host's services.
    fn check_host(&mut self, marker: &str, v: &mut Verdict) {
        if let Ok(Some(status)) = self.daemon.child.try_wait() {
            v.host.push(format!("the daemon died: {status}"));
            return;
        }
        let (status, body) = http(
            &self.daemon.addr,
            "GET",
            "/healthz",
            b"",
            Duration::from_secs(10),
        );
        if status != 200 {
            v.host.push(format!("/healthz answered {status}: {body}"));
        }
        if let Err(left) = settles(10, || host_processes_with(marker)) {
            v.host.push(format!("left running: {left}"));
        }
        match self.backend {
            Backend::Jail => {
                let pid = self.daemon.pid;
                if let Err(left) = settles(10, || descendants(pid)) {
                    v.host
                        .push(format!("processes left under the daemon: {left}"));
                }
            }
            Backend::Docker | Backend::Gvisor => {
                let pid = self.daemon.pid;
                if let Err(left) = settles(20, || containers_of(pid)) {
                    v.host.push(format!("containers left: {left}"));
                }
            }
        }
        if let Ok(Some(status)) = self.daemon.witness.try_wait() {
            v.host.push(format!("the witness was killed: {status}"));
        }
        for (what, hits) in [
            ("TCP", &self.services.tcp_hits),
            ("UDP", &self.services.udp_hits),
        ] {
            let n = hits.load(Ordering::SeqCst);
            if n > 0 {
                v.host
                    .push(format!("the host's {what} service was reached {n} times"));
            }
        }
    }
}

/// The checks of one answer against the table and the caps (see `attacks.toml`).
fn check_result(attack: &Attack, r: &serde_json::Value, v: &mut Verdict) {
    let stdout = r["stdout"].as_str().unwrap_or_default();
    let stderr = r["stderr"].as_str().unwrap_or_default();
    let reason = r["reason"].as_str().unwrap_or_default();
    let tail = stdout.chars().rev().take(300).collect::<String>();
    let tail: String = tail.chars().rev().collect();
    if !attack.reason.iter().any(|want| want == reason) {
        v.own.push(format!(
            "reason {reason:?}, not one of {:?}; stdout ends {tail:?}; stderr {:.300}",
            attack.reason, stderr
        ));
    }
    for want in &attack.shows {
        if !stdout.contains(want.as_str()) {
            v.own.push(format!(
                "stdout lacks {want:?} (the attack did not run through): {tail:?} {stderr:.300}"
            ));
        }
    }
    for text in [stdout, stderr] {
        for line in text.lines().filter(|l| l.contains(BROKEN)) {
            v.own.push(format!("it worked: {line:.300}"));
        }
        for bad in &attack.forbidden {
            if text.contains(bad.as_str()) {
                v.own.push(format!("output shows {bad:?}"));
            }
        }
        let marker = "\n[warden: output truncated at 65536 bytes]\n";
        if text.len() > MAX_OUTPUT + marker.len() {
            v.host
                .push(format!("{} bytes of output past the cap", text.len()));
        }
    }
    let artifacts = r["artifacts"].as_array().cloned().unwrap_or_default();
    if artifacts.len() > MAX_ARTIFACTS {
        v.host
            .push(format!("{} artifacts past the cap", artifacts.len()));
    }
    let total: u64 = artifacts
        .iter()
        .map(|a| a["size"].as_u64().unwrap_or(0))
        .sum();
    if total > MAX_ARTIFACT_BYTES {
        v.host
            .push(format!("{total} bytes of artifacts past the cap"));
    }
    use base64::Engine as _;
    for a in &artifacts {
        let name = a["name"].as_str().unwrap_or_default();
        if name.is_empty()
            || name.starts_with('/')
            || name.split('/').any(|c| c == ".." || c.is_empty())
            || name.chars().any(char::is_control)
        {
            v.host.push(format!("an artifact named {name:?}"));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(a["bytes"].as_str().unwrap_or_default())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        if text.contains("root:x:0:0") || text.contains("root:*:") || text.contains("root:!") {
            v.host
                .push(format!("artifact {name:?} holds host data: {text:.80}"));
        }
    }
    let skipped = r["skipped_artifacts"].as_array().map_or(0, Vec::len);
    if skipped > 100 {
        v.host
            .push(format!("{skipped} skipped artifacts listed: unbounded"));
    }
    if let Some(want) = &attack.artifacts {
        let names: Vec<&str> = artifacts
            .iter()
            .filter_map(|a| a["name"].as_str())
            .collect();
        if names != want.iter().map(String::as_str).collect::<Vec<_>>() {
            v.own.push(format!("artifacts {names:?}, not {want:?}"));
        }
    }
}

/// Runs every attack against `backend` (the policy bypasses twice: policies on and off).
fn run_suite(backend: Backend) {
    require_root!();
    prerequisite!(backend.unavailable());
    let table = table();
    let mut suite = Suite {
        backend,
        daemon: start_daemon(backend),
        services: HostServices::start(),
    };
    // A normal run works before (so the attacks below meet a working sandbox) …
    normal_run_works(&suite.daemon);
    let mut failures = Vec::new();
    let mut index = 0;
    for attack in &table.attack {
        let mut profiles = vec!["attack"];
        if attack.policy.is_some() {
            profiles.push("attack_policy");
        }
        for profile in profiles {
            index += 1;
            let started = Instant::now();
            let verdict = suite.run(attack, profile, index);
            let name = format!("{} {} ({profile})", backend.name(), attack.file);
            let mut err = std::io::stderr();
            match (verdict.own.is_empty(), attack.gaps.get(backend.name())) {
                (true, None) => {
                    let _ = writeln!(err, "held: {name} in {:?}", started.elapsed());
                }
                (true, Some(why)) => {
                    let _ = writeln!(err, "gap: {name}: {why} (held on this run)");
                }
                (false, Some(why)) => {
                    let _ = writeln!(err, "gap: {name}: {why} ({})", verdict.own.join("; "));
                }
                (false, None) => failures.push(format!("{name}: {}", verdict.own.join("; "))),
            }
            for h in verdict.host {
                failures.push(format!("{name}: host: {h}"));
            }
        }
    }
    // … and after: the daemon is as it was.
    normal_run_works(&suite.daemon);
    if backend == Backend::Jail {
        let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
        if settles(5, || if h.has_stale() { vec!["stale"] } else { vec![] }).is_err() {
            failures.push("jail: a stale cgroup is left".into());
        }
    }
    assert!(
        failures.is_empty(),
        "{} attacks got through or harmed the host:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn normal_run_works(daemon: &Daemon) {
    let (status, body) = http(
        &daemon.addr,
        "POST",
        "/v1/execute",
        br#"{"code": "print(6 * 7)", "profile": "attack"}"#,
        Duration::from_secs(60),
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["stdout"].as_str(), v["reason"].as_str()),
        (Some("42\n"), Some("exited")),
        "{v}"
    );
}

#[test]
fn jail() {
    run_suite(Backend::Jail);
}

#[test]
fn docker() {
    run_suite(Backend::Docker);
}

#[test]
fn gvisor() {
    run_suite(Backend::Gvisor);
}

/// The table and the folder agree: every program has an entry, every entry a program, and
/// every entry's fields make sense.
#[test]
fn every_attack_program_is_in_the_table() {
    let table = table();
    let mut listed: Vec<&str> = table.attack.iter().map(|a| a.file.as_str()).collect();
    let mut files: Vec<String> = std::fs::read_dir(attacks_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".py") || n.ends_with(".sh"))
        .collect();
    files.sort();
    listed.sort();
    assert_eq!(
        listed, files,
        "attacks.toml and the programs in tests/attacks differ"
    );
    let reasons = ["exited", "timeout", "memory", "pids", "output", "signal"];
    for a in &table.attack {
        let suffix = match a.language.as_str() {
            "python" => ".py",
            "bash" => ".sh",
            other => panic!("{}: no language {other}", a.file),
        };
        assert!(a.file.ends_with(suffix), "{}: not {}", a.file, a.language);
        assert!(
            !a.reason.is_empty() && a.reason.iter().all(|r| reasons.contains(&r.as_str())),
            "{}: {:?}",
            a.file,
            a.reason
        );
        for backend in a.gaps.keys() {
            assert!(
                ["jail", "docker", "gvisor"].contains(&backend.as_str()),
                "{}: gap for {backend}",
                a.file
            );
        }
        assert!(a.policy.is_none() || a.language == "python", "{}", a.file);
        let code = std::fs::read_to_string(attacks_dir().join(&a.file)).unwrap();
        // Every program says what it does in its first line.
        assert!(
            code.starts_with("# "),
            "{}: no comment saying what it tries",
            a.file
        );
    }
}

/// The checks catch what they are for: an answer in which every attack "worked" fails each of
/// them, and a clean one fails none (so a passing suite means the attacks were contained, not
/// that the checks could not fail).
#[test]
fn the_checks_catch_an_attack_that_worked() {
    use base64::Engine as _;
    let attack: Attack = toml::from_str(
        r#"
        file = "x.py"
        language = "python"
        tries = "everything"
        reason = ["exited"]
        shows = ["ATTEMPTED"]
        forbidden = ["s3cret"]
        artifacts = ["a.txt"]
        "#,
    )
    .unwrap();
    let clean = serde_json::json!({
        "stdout": "ATTEMPTED\n", "stderr": "", "reason": "exited",
        "artifacts": [{"name": "a.txt", "size": 1, "bytes": "eA=="}],
        "skipped_artifacts": [],
    });
    let mut v = Verdict::default();
    check_result(&attack, &clean, &mut v);
    assert!(
        v.own.is_empty() && v.host.is_empty(),
        "{:?} {:?}",
        v.own,
        v.host
    );
    let passwd = base64::engine::general_purpose::STANDARD.encode("root:x:0:0:root:/root:/bin/sh");
    let artifact = |name: &str| serde_json::json!({"name": name, "size": 1, "bytes": "eA=="});
    let broken = serde_json::json!({
        "stdout": format!("BROKEN: read /etc/shadow\ns3cret\n{}", "y".repeat(MAX_OUTPUT + 100)),
        "stderr": "",
        "reason": "timeout",
        "artifacts": [
            {"name": "passwd", "size": 30, "bytes": passwd},
            artifact("../up"), artifact("/abs"), artifact("esc\u{1b}[31m"), artifact("5"),
            artifact("6"),
        ],
        "skipped_artifacts": vec![serde_json::json!({"name": "x", "why": "y"}); 101],
    });
    let mut v = Verdict::default();
    check_result(&attack, &broken, &mut v);
    let all = [v.own, v.host].concat().join("\n");
    for caught in [
        "reason \"timeout\"",
        "stdout lacks \"ATTEMPTED\"",
        "it worked: BROKEN: read /etc/shadow",
        "output shows \"s3cret\"",
        "bytes of output past the cap",
        "6 artifacts past the cap",
        "holds host data",
        "an artifact named \"../up\"",
        "an artifact named \"/abs\"",
        "an artifact named \"esc",
        "101 skipped artifacts",
        "not [\"a.txt\"]",
    ] {
        assert!(all.contains(caught), "not caught: {caught}: {all}");
    }
}
