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
//!   declares it in the table (`gaps`: the one `Check` of that attack it waives, and why) and
//!   the run prints `gap: …` — never a silent pass. A `BROKEN:` line, the daemon's integrity
//!   (alive, answering, not stopped or traced, its secret not shown) and the host's checks
//!   (nothing left running, the witness alive, the host's services untouched, the caps) are
//!   never waivable (`Check::waivable`);
//! - every attack is proven live: its positive control (`controls`) runs it in
//!   `fixtures/weak_sandbox.sh`, where the boundary it targets is absent, and the same checks
//!   must see it succeed; an attack that cannot be shown so says why (`uncontrolled`), and that
//!   list is pinned here (`UNCONTROLLED`);
//! - a backend that is not on this host (no engine, no runsc), or no root, is a reported skip
//!   (`prerequisite!`: `SKIPPED: …` in the skip log; under CI a failure), never a pass; an
//!   engine without the suite's image fails;
//! - the egress gateway's attacks (`gateway` in the table) run, after the others, in a
//!   networked profile behind the gateway against the gateway's test internet
//!   (`common::gateway_world`, up only for them), through a daemon of their own with the same
//!   host checks, and besides their refusals (`denied`) the internet's own logs are checked
//!   (`Check::Internet`): what a refused request would have reached says so even if the
//!   program missed it.

mod common;

use common::gateway_world::{API, API6, GatewayWorld, OTHER, PRIVATE, SECRET};

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
    gaps: BTreeMap<String, Gap>,
    control: Option<Control>,
    uncontrolled: Option<String>,
    gateway: Option<GatewayProfile>,
    #[serde(default)]
    denied: Vec<Denied>,
    #[serde(default)]
    echoes_secret: bool,
}

/// The profile a gateway attack runs in (the table's header says what each allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum GatewayProfile {
    Rules,
    Secret,
}

impl GatewayProfile {
    fn profile(self) -> &'static str {
        match self {
            GatewayProfile::Rules => "attack_gateway",
            GatewayProfile::Secret => "attack_secret",
        }
    }
}

/// A refusal the result's `egress_denied` must hold: its host and port, and a part of its why.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Denied {
    host: String,
    port: u16,
    why: String,
}

/// A promise a backend does not keep for one attack: the one check it waives, and why.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gap {
    check: Check,
    why: String,
}

/// How an attack's positive control runs (the default: `userns`, seeing `broken`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Control {
    #[serde(default)]
    env: WeakSandbox,
    /// The check that must see the attack succeed there.
    #[serde(default = "Check::broken")]
    sees: Check,
}

/// The weak sandboxes of `fixtures/weak_sandbox.sh` (its header says what each is).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum WeakSandbox {
    #[default]
    Userns,
    HostNet,
    Root,
}

impl Default for Control {
    fn default() -> Control {
        Control {
            env: WeakSandbox::default(),
            sees: Check::Broken,
        }
    }
}

impl WeakSandbox {
    fn name(self) -> &'static str {
        match self {
            WeakSandbox::Userns => "userns",
            WeakSandbox::HostNet => "host-net",
            WeakSandbox::Root => "root",
        }
    }
}

/// The attacks whose success no positive control can show (each says why in the table, field
/// `uncontrolled`). Pinned, so that the list cannot grow without a change here.
const UNCONTROLLED: &[&str] = &[
    "artifact_hardlinks.py",
    "artifact_odd_names.py",
    "artifact_sparse_5gb.py",
    "artifact_symlinks.py",
    "artifact_ten_thousand.py",
    "cpu_spin.py",
    "fork_bomb.sh",
    "gw_echo_exfiltration.py",
    "gw_gateway_ports.py",
    "syscall_clock_settime.py",
    "syscall_reboot.py",
];

/// One check the runner makes of a run. Only the table's own checks can be waived by a gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Check {
    /// The answer: 200, or 422 `policy_violation` where the policy catches the attack.
    Answer,
    /// The request took at most `seconds`.
    Took,
    /// The run ended with one of `reason`.
    Reason,
    /// stdout holds every string of `shows`.
    Shows,
    /// No output holds a string of `forbidden`.
    Forbidden,
    /// The artifacts are exactly `artifacts`.
    Artifacts,
    /// The result's `egress_denied` holds every refusal of `denied`.
    Denied,
    /// A `BROKEN:` line: the attack got what it was after.
    Broken,
    /// The daemon: alive, answering, neither stopped nor traced.
    Daemon,
    /// The daemon's secret in an answer.
    Secret,
    /// Output and artifacts within their caps; artifacts' names and contents.
    Caps,
    /// Nothing of the run left running (processes, containers, cgroups).
    Left,
    /// The witness beside the daemon alive.
    Witness,
    /// The host's TCP and UDP services not reached.
    HostServices,
    /// The gateway's test internet got only what the gateway lets through: under the `rules`
    /// profile no request at an address but the allowed name's, none at the LAN, no UDP; the
    /// brokered value only at its bound host, in its bound header.
    Internet,
}

impl Check {
    fn waivable(self) -> bool {
        matches!(
            self,
            Check::Answer
                | Check::Took
                | Check::Reason
                | Check::Shows
                | Check::Forbidden
                | Check::Artifacts
                | Check::Denied
        )
    }

    fn broken() -> Check {
        Check::Broken
    }
}

/// A check that failed, and what it saw.
#[derive(Debug)]
struct Finding {
    check: Check,
    what: String,
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

/// An attack program's code as the sandbox gets it: the file, with a `# prelude: NAME` line
/// replaced by `prelude/NAME.py` (a helper several programs share, each program being sent
/// alone).
fn program(attack: &Attack) -> String {
    let code = std::fs::read_to_string(attacks_dir().join(&attack.file)).unwrap();
    code.lines()
        .map(|line| match line.strip_prefix("# prelude: ") {
            Some(rest) => {
                let name = rest.split_whitespace().next().unwrap_or_default();
                std::fs::read_to_string(attacks_dir().join("prelude").join(format!("{name}.py")))
                    .unwrap_or_else(|e| panic!("{}: prelude {name}: {e}", attack.file))
            }
            None => format!("{line}\n"),
        })
        .collect()
}

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

    /// The host uids this backend's daemon gives its sandboxes: a range of its own (the
    /// backends' suites run at once), so small that every attack's sandbox runs as a uid a
    /// witness runs as too. The gateway attacks' daemon has a range of its own: the leases of
    /// the daemon before it are released only as its killed processes finish dying.
    fn sandbox_uids(self, gateway: bool) -> [u32; SANDBOX_UIDS as usize] {
        let base = 1_899_990_000 + 10 * self as u32 + if gateway { 5 } else { 0 };
        std::array::from_fn(|i| base + i as u32)
    }

    /// Why this backend cannot be tested on this host, if it cannot.
    fn unavailable(self) -> Option<String> {
        match self {
            Backend::Jail => None,
            Backend::Docker => common::missing_docker(),
            Backend::Gvisor => common::missing_runsc(),
        }
    }

    /// The daemon's settings; with the gateway's world, also its profiles (`GatewayProfile`).
    fn settings(self, world: Option<&GatewayWorld>) -> String {
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
        let uids = format!(
            "uid_base = {}\nuid_count = {SANDBOX_UIDS}\n",
            self.sandbox_uids(world.is_some())[0]
        );
        let gateway = world.map_or_else(String::new, |world| {
            let net = format!("{limits}enabled_policies = []\nnetwork_enabled = true\n");
            format!(
                "{}\
                 [sandbox.profiles.attack_gateway]\n{net}\
                 [sandbox.profiles.attack_gateway.egress.gateway]\n\
                 allow = [\"api.test\", \"private.test\", \"rebind.test\"]\n\
                 [sandbox.profiles.attack_secret]\n{net}\
                 [sandbox.profiles.attack_secret.egress]\nsecrets = [\"api_key\"]\n\
                 [sandbox.profiles.attack_secret.egress.gateway]\n\
                 allow = [\"api.test\", \"other.test\"]\n",
                world.settings()
            )
        });
        format!(
            "[sandbox]\ndefault_profile = \"attack\"\nbackend = \"{backend}\"\n\n\
             [sandbox.jail]\n{uids}\n[sandbox.docker]\n{uids}\n\
             [sandbox.profiles.attack]\n{limits}enabled_policies = []\n\n\
             [sandbox.profiles.attack_policy]\n{limits}\
             enabled_policies = [\"forbidden_imports\", \"resource_quota\"]\n\
             [sandbox.profiles.attack_policy.policies.forbidden_imports]\n\
             allowed_modules = [\"math\", \"json\"]\n{gateway}"
        )
    }
}

/// How many host uids a daemon of the suite leases to its sandboxes (one run at a time, and
/// one more while the last one's are released).
const SANDBOX_UIDS: u32 = 2;

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
    /// The host uids it gives its sandboxes.
    uids: [u32; SANDBOX_UIDS as usize],
    secret: String,
    /// A `sleep` as each of the sandboxes' host uids (so as the attacking sandbox's own uid,
    /// and another's) in the daemon's pid namespace (through `nsenter` for the jail): only the
    /// sandbox's namespaces keep a `kill(-1)` from ending them.
    witnesses: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        for witness in &mut self.witnesses {
            let _ = witness.kill();
            let _ = witness.wait();
        }
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

/// Every process under `pid`, as `pid: cmdline`, but the daemon's fork server (which lives as
/// long as the daemon; the helpers it forks are counted).
fn descendants(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = children(pid);
    while let Some(p) = todo.pop() {
        todo.extend(children(p));
        if common::is_fork_server(p) {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        out.push(format!(
            "{p}: {}",
            String::from_utf8_lossy(&cmd).replace('\0', " ")
        ));
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

/// The leases of `uids` (a range), where the daemons take them.
fn uid_leases(uids: &[u32]) -> warden_net::lease::LockLeases {
    let range = warden_net::uids::UidRange {
        base: uids[0],
        count: uids.len() as u32,
    };
    range.leases(std::path::Path::new(warden_net::uids::RUN_DIR))
}

/// Empties the records of `uids` whose lease no one holds: what a killed earlier run of the
/// suite left. A daemon skips a recorded uid while some process runs as it, and the witnesses
/// run as these uids, so such a record would keep its uid from every later run.
fn clear_stale_leases(uids: &[u32]) {
    let leases = uid_leases(uids);
    for &uid in uids {
        if !leases.is_leased(uid) && !leases.record_of(uid).is_empty() {
            std::fs::write(leases.path(uid), "").unwrap();
        }
    }
}

fn start_daemon(backend: Backend, world: Option<&GatewayWorld>) -> Daemon {
    let secret = format!("wardensecret{}x{}", std::process::id(), backend as u8);
    let dir = tempfile::Builder::new()
        .prefix(&format!("attacks-{secret}-"))
        .tempdir()
        .unwrap();
    let settings = dir.path().join("settings.toml");
    std::fs::write(&settings, backend.settings(world)).unwrap();
    clear_stale_leases(&backend.sandbox_uids(world.is_some()));
    let data_dir = dir.path().join("data");
    let serve = [
        "--config",
        settings.to_str().unwrap(),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_dir.to_str().unwrap(),
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
    let witnesses = backend
        .sandbox_uids(world.is_some())
        .iter()
        .map(|uid| {
            let sleep = [
                "setpriv".to_owned(),
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".to_owned(),
                "sleep".to_owned(),
                "3600".to_owned(),
            ];
            if backend == Backend::Jail {
                Command::new("nsenter")
                    .args(["--target", &pid.to_string(), "--pid", "--"])
                    .args(sleep)
                    .spawn()
                    .unwrap()
            } else {
                Command::new(&sleep[0]).args(&sleep[1..]).spawn().unwrap()
            }
        })
        .collect();
    Daemon {
        child,
        addr,
        pid,
        uids: backend.sandbox_uids(world.is_some()),
        secret,
        witnesses,
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

/// The result of one attack's run: the checks that failed.
#[derive(Default)]
struct Verdict(Vec<Finding>);

impl Verdict {
    fn push(&mut self, check: Check, what: impl Into<String>) {
        self.0.push(Finding {
            check,
            what: what.into(),
        });
    }

    fn saw(&self, check: Check) -> bool {
        self.0.iter().any(|f| f.check == check)
    }
}

struct Suite {
    backend: Backend,
    daemon: Daemon,
    services: HostServices,
    /// The gateway's test internet, for the gateway attacks' suite.
    world: Option<GatewayWorld>,
}

/// The addresses of the gateway's test internet, as the gateway attacks get them on stdin.
fn internet() -> serde_json::Value {
    serde_json::json!({"api": API, "other": OTHER, "api6": API6, "private": PRIVATE})
}

/// How far each of the internet's logs is (what a run adds is read from there).
fn internet_logs(world: &GatewayWorld) -> [usize; 2] {
    ["inet", "lan"].map(|host| world.log(host).len())
}

/// The checks of the internet's logs since `from` (`internet_logs`), after a gateway attack.
fn check_world(world: &GatewayWorld, from: [usize; 2], kind: GatewayProfile, v: &mut Verdict) {
    let [inet, lan] = ["inet", "lan"].map(|host| world.log(host));
    check_internet(
        kind,
        inet.get(from[0]..).unwrap_or_default(),
        lan.get(from[1]..).unwrap_or_default(),
        v,
    );
}

/// `Check::Internet` on what the internet's hosts logged during one run (lines of
/// `fixtures/world_server.py`: `http ADDR PATH FROM`, `udp ADDR FROM`, `header ADDR NAME VALUE`,
/// `dns NAME FROM`).
fn check_internet(kind: GatewayProfile, inet: &str, lan: &str, v: &mut Verdict) {
    let bound = format!("header {API} authorization Bearer {SECRET}");
    for line in inet.lines() {
        let mut words = line.split_whitespace();
        let (what, addr) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        if what == "udp" {
            v.push(Check::Internet, format!("UDP got past the gateway: {line}"));
        } else if kind == GatewayProfile::Rules && matches!(what, "http" | "header") && addr != API
        {
            v.push(
                Check::Internet,
                format!("a request reached an address but the allowed name's: {line}"),
            );
        }
        if line.contains(SECRET) && line != bound {
            v.push(
                Check::Internet,
                format!("the brokered value reached a host or header it is not bound to: {line}"),
            );
        }
    }
    for line in lan.lines().filter(|l| !l.starts_with("ready")) {
        v.push(Check::Internet, format!("the LAN host was reached: {line}"));
    }
}

/// `Check::Denied`: every refusal of `denied` is in the result's `egress_denied`.
fn check_denied(attack: &Attack, r: &serde_json::Value, v: &mut Verdict) {
    let seen = r["egress_denied"].as_array().cloned().unwrap_or_default();
    for want in &attack.denied {
        let found = seen.iter().any(|d| {
            d["host"] == want.host.as_str()
                && d["port"] == want.port
                && d["why"].as_str().is_some_and(|why| why.contains(&want.why))
        });
        if !found {
            v.push(
                Check::Denied,
                format!(
                    "no refusal of {}:{} ({:?}) in egress_denied: {}",
                    want.host,
                    want.port,
                    want.why,
                    serde_json::Value::Array(seen.clone())
                ),
            );
        }
    }
}

/// The brokered value in an output: only where the table says the bound host echoes it (the
/// documented limit), and there it must be (the limit is what the threat model says).
fn check_brokered(attack: &Attack, r: &serde_json::Value, v: &mut Verdict) {
    let shown = ["stdout", "stderr"]
        .iter()
        .any(|k| r[k].as_str().unwrap_or_default().contains(SECRET));
    if attack.echoes_secret && !shown {
        v.push(
            Check::Shows,
            "the bound host's echo did not show the brokered value (the documented limit)",
        );
    } else if !attack.echoes_secret && shown {
        v.push(Check::Secret, "the brokered value is in the output");
    }
}

impl Suite {
    /// Runs one attack in `profile`; `index` makes its marker unique.
    fn run(&mut self, attack: &Attack, profile: &str, index: usize) -> Verdict {
        let mut v = Verdict::default();
        let logs = self.world.as_ref().map(internet_logs);
        let code = program(attack);
        let marker = format!(
            "{}{:02}{}.25",
            std::process::id() % 100_000,
            index,
            self.backend as u8
        );
        let mut stdin = serde_json::json!({
            "marker": marker,
            "daemon_pid": self.daemon.pid,
            "tcp_port": self.services.tcp_port,
            "udp_port": self.services.udp_port,
        });
        if attack.gateway.is_some() {
            stdin["internet"] = internet();
        }
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
            v.push(Check::Took, format!("took {took:?}, more than {limit:?}"));
        }
        if body.contains(&self.daemon.secret) {
            v.push(Check::Secret, "the daemon's secret is in the answer");
        }
        let result: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let caught = profile == "attack_policy"
            && matches!(
                attack.policy,
                Some(PolicyVerdict::Catches | PolicyVerdict::Refuses)
            );
        if caught {
            if status != 422 || result["error"]["code"] != "policy_violation" {
                v.push(
                    Check::Answer,
                    format!("the policy did not refuse it: {status} {body:.300}"),
                );
            }
            // The import guard's refusals, and only those, happen at run time.
            let at_run_time = result["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("at run time"));
            if at_run_time != (attack.policy == Some(PolicyVerdict::Refuses)) {
                v.push(
                    Check::Answer,
                    format!("refused at the wrong stage: {body:.300}"),
                );
            }
        } else if status != 200 {
            v.push(Check::Answer, format!("answered {status}: {body:.300}"));
        } else {
            check_result(attack, &result, &mut v);
            if attack.gateway.is_some() {
                check_denied(attack, &result, &mut v);
                check_brokered(attack, &result, &mut v);
            }
        }
        if let (Some(world), Some(logs), Some(kind)) = (&self.world, logs, attack.gateway) {
            check_world(world, logs, kind, &mut v);
        }
        self.check_host(&marker, &mut v);
        v
    }

    /// The host after a run: the daemon, leftovers, the witness, the host's services.
    fn check_host(&mut self, marker: &str, v: &mut Verdict) {
        if let Ok(Some(status)) = self.daemon.child.try_wait() {
            v.push(Check::Daemon, format!("the daemon died: {status}"));
            return;
        }
        if let Some(harm) = traced_or_stopped(self.daemon.pid) {
            v.push(Check::Daemon, harm);
        }
        let (status, body) = http(
            &self.daemon.addr,
            "GET",
            "/healthz",
            b"",
            Duration::from_secs(10),
        );
        if status != 200 {
            v.push(Check::Daemon, format!("/healthz answered {status}: {body}"));
        }
        if let Err(left) = settles(10, || host_processes_with(marker)) {
            v.push(Check::Left, format!("left running: {left}"));
        }
        match self.backend {
            Backend::Jail => {
                let pid = self.daemon.pid;
                if let Err(left) = settles(10, || descendants(pid)) {
                    v.push(
                        Check::Left,
                        format!("processes left under the daemon: {left}"),
                    );
                }
            }
            Backend::Docker | Backend::Gvisor => {
                let pid = self.daemon.pid;
                if let Err(left) = settles(20, || containers_of(pid)) {
                    v.push(Check::Left, format!("containers left: {left}"));
                }
            }
        }
        for witness in &mut self.daemon.witnesses {
            if let Ok(Some(status)) = witness.try_wait() {
                v.push(
                    Check::Witness,
                    format!("the witness {} was killed: {status}", witness.id()),
                );
            }
        }
        for (what, hits) in [
            ("TCP", &self.services.tcp_hits),
            ("UDP", &self.services.udp_hits),
        ] {
            let n = hits.load(Ordering::SeqCst);
            if n > 0 {
                v.push(
                    Check::HostServices,
                    format!("the host's {what} service was reached {n} times"),
                );
            }
        }
    }
}

/// Whether the process `pid` is traced or stopped, as its host status says.
fn traced_or_stopped(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let (state, tracer) = (field("State:"), field("TracerPid:"));
    (tracer != "0" || state.starts_with('T') || state.starts_with('t'))
        .then(|| format!("the daemon is {state}, traced by {tracer}"))
}

/// The checks of one answer against the table and the caps (see `attacks.toml`).
fn check_result(attack: &Attack, r: &serde_json::Value, v: &mut Verdict) {
    let stdout = r["stdout"].as_str().unwrap_or_default();
    let stderr = r["stderr"].as_str().unwrap_or_default();
    let reason = r["reason"].as_str().unwrap_or_default();
    let tail = stdout.chars().rev().take(300).collect::<String>();
    let tail: String = tail.chars().rev().collect();
    if !attack.reason.iter().any(|want| want == reason) {
        v.push(
            Check::Reason,
            format!(
                "reason {reason:?}, not one of {:?}; stdout ends {tail:?}; stderr {:.300}",
                attack.reason, stderr
            ),
        );
    }
    for want in &attack.shows {
        if !stdout.contains(want.as_str()) {
            v.push(
                Check::Shows,
                format!(
                    "stdout lacks {want:?} (the attack did not run through): {tail:?} {stderr:.300}"
                ),
            );
        }
    }
    for text in [stdout, stderr] {
        for line in text.lines().filter(|l| l.contains(BROKEN)) {
            v.push(Check::Broken, format!("it worked: {line:.300}"));
        }
        for bad in &attack.forbidden {
            if text.contains(bad.as_str()) {
                v.push(Check::Forbidden, format!("output shows {bad:?}"));
            }
        }
        let marker = "\n[warden: output truncated at 65536 bytes]\n";
        if text.len() > MAX_OUTPUT + marker.len() {
            v.push(
                Check::Caps,
                format!("{} bytes of output past the cap", text.len()),
            );
        }
    }
    let artifacts = r["artifacts"].as_array().cloned().unwrap_or_default();
    if artifacts.len() > MAX_ARTIFACTS {
        v.push(
            Check::Caps,
            format!("{} artifacts past the cap", artifacts.len()),
        );
    }
    let total: u64 = artifacts
        .iter()
        .map(|a| a["size"].as_u64().unwrap_or(0))
        .sum();
    if total > MAX_ARTIFACT_BYTES {
        v.push(
            Check::Caps,
            format!("{total} bytes of artifacts past the cap"),
        );
    }
    use base64::Engine as _;
    for a in &artifacts {
        let name = a["name"].as_str().unwrap_or_default();
        if name.is_empty()
            || name.starts_with('/')
            || name.split('/').any(|c| c == ".." || c.is_empty())
            || name.chars().any(char::is_control)
        {
            v.push(Check::Caps, format!("an artifact named {name:?}"));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(a["bytes"].as_str().unwrap_or_default())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        if text.contains("root:x:0:0") || text.contains("root:*:") || text.contains("root:!") {
            v.push(
                Check::Caps,
                format!("artifact {name:?} holds host data: {text:.80}"),
            );
        }
    }
    let skipped = r["skipped_artifacts"].as_array().map_or(0, Vec::len);
    if skipped > 100 {
        v.push(
            Check::Caps,
            format!("{skipped} skipped artifacts listed: unbounded"),
        );
    }
    if let Some(want) = &attack.artifacts {
        let names: Vec<&str> = artifacts
            .iter()
            .filter_map(|a| a["name"].as_str())
            .collect();
        if names != want.iter().map(String::as_str).collect::<Vec<_>>() {
            v.push(
                Check::Artifacts,
                format!("artifacts {names:?}, not {want:?}"),
            );
        }
    }
}

/// Splits a run's failed checks into those `gap` waives (only its one check, and only if that
/// check may be waived at all) and the failures.
fn judge(verdict: Verdict, gap: Option<&Gap>) -> (Vec<String>, Vec<String>) {
    let mut waived = Vec::new();
    let mut failed = Vec::new();
    for f in verdict.0 {
        match gap {
            Some(gap) if gap.check == f.check && f.check.waivable() => waived.push(f.what),
            _ => failed.push(format!("{:?}: {}", f.check, f.what)),
        }
    }
    (waived, failed)
}

/// Runs every attack against `backend` (the policy bypasses twice: policies on and off), the
/// gateway's last, against its test internet through a daemon with its profiles.
fn run_suite(backend: Backend) {
    require_root!();
    prerequisite!(backend.unavailable());
    let table = table();
    let (gateway, others): (Vec<&Attack>, Vec<&Attack>) =
        table.attack.iter().partition(|a| a.gateway.is_some());
    let mut failures = Vec::new();
    let mut index = 0;
    let mut suite = Suite {
        backend,
        daemon: start_daemon(backend, None),
        services: HostServices::start(),
        world: None,
    };
    suite.run_all(&others, &mut index, &mut failures);
    drop(suite);
    let world = GatewayWorld::up();
    let mut suite = Suite {
        backend,
        daemon: start_daemon(backend, Some(&world)),
        services: HostServices::start(),
        world: Some(world),
    };
    suite.run_all(&gateway, &mut index, &mut failures);
    drop(suite);
    assert!(
        failures.is_empty(),
        "{} attacks got through or harmed the host:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

impl Suite {
    /// Runs `attacks`, each in its profiles, between two normal runs (so the attacks meet a
    /// working sandbox, and the daemon is as it was after them); `index` numbers the runs.
    fn run_all(&mut self, attacks: &[&Attack], index: &mut usize, failures: &mut Vec<String>) {
        normal_run_works(&self.daemon);
        let backend = self.backend;
        for attack in attacks {
            let mut profiles = vec![attack.gateway.map_or("attack", GatewayProfile::profile)];
            if attack.policy.is_some() {
                profiles.push("attack_policy");
            }
            for profile in profiles {
                *index += 1;
                let started = Instant::now();
                let verdict = self.run(attack, profile, *index);
                let name = format!("{} {} ({profile})", backend.name(), attack.file);
                let gap = attack.gaps.get(backend.name());
                let (waived, failed) = judge(verdict, gap);
                let mut err = std::io::stderr();
                match gap {
                    Some(gap) if waived.is_empty() => {
                        let _ = writeln!(
                            err,
                            "gap: {name}: {:?}: {} (held on this run)",
                            gap.check, gap.why
                        );
                    }
                    Some(gap) => {
                        let _ = writeln!(
                            err,
                            "gap: {name}: {:?}: {} ({})",
                            gap.check,
                            gap.why,
                            waived.join("; ")
                        );
                    }
                    None if failed.is_empty() => {
                        let _ = writeln!(err, "held: {name} in {:?}", started.elapsed());
                    }
                    None => {}
                }
                for f in failed {
                    failures.push(format!("{name}: {f}"));
                }
            }
        }
        normal_run_works(&self.daemon);
        // While the daemon lives (its teardowns done), not after it is killed: a lease it
        // still held would be left with its record (see `clear_stale_leases`).
        let uids = self.daemon.uids;
        let leases = uid_leases(&uids);
        let held = || {
            uids.iter()
                .filter(|&&uid| leases.is_leased(uid))
                .collect::<Vec<_>>()
        };
        if let Err(held) = settles(10, held) {
            failures.push(format!(
                "{}: the daemon still holds the uids {held} after its runs",
                backend.name()
            ));
        }
        if backend == Backend::Jail {
            let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
            if settles(5, || if h.has_stale() { vec!["stale"] } else { vec![] }).is_err() {
                failures.push("jail: a stale cgroup is left".into());
            }
        }
    }
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
    let mut uncontrolled: Vec<&str> = table
        .attack
        .iter()
        .filter(|a| a.uncontrolled.as_deref().is_some_and(|why| !why.is_empty()))
        .map(|a| a.file.as_str())
        .collect();
    uncontrolled.sort();
    assert_eq!(
        uncontrolled, UNCONTROLLED,
        "the attacks without a positive control (`uncontrolled` in attacks.toml) changed: \
         give the new one a control, or pin it in UNCONTROLLED with the table's reason"
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
        for (backend, gap) in &a.gaps {
            assert!(
                ["jail", "docker", "gvisor"].contains(&backend.as_str()),
                "{}: gap for {backend}",
                a.file
            );
            assert!(
                gap.check.waivable() && !gap.why.is_empty(),
                "{}: the {backend} gap waives {:?}, which is never waivable (or says no why)",
                a.file,
                gap.check
            );
        }
        assert!(
            a.control.is_none() || a.uncontrolled.is_none(),
            "{}: both a control and why there is none",
            a.file
        );
        assert!(a.policy.is_none() || a.language == "python", "{}", a.file);
        assert!(
            a.gateway.is_none() || (a.language == "python" && a.policy.is_none()),
            "{}: a gateway attack is Python, and has no policy run",
            a.file
        );
        assert!(
            a.gateway.is_some() || (a.denied.is_empty() && !a.echoes_secret),
            "{}: `denied` and `echoes_secret` are for gateway attacks",
            a.file
        );
        assert!(
            !a.echoes_secret || a.gateway == Some(GatewayProfile::Secret),
            "{}: only the `secret` profile has a secret to echo",
            a.file
        );
        let code = program(a);
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
    assert!(v.0.is_empty(), "{:?}", v.0);
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
    let all: Vec<String> =
        v.0.iter()
            .map(|f| format!("{:?}: {}", f.check, f.what))
            .collect();
    let all = all.join("\n");
    for caught in [
        "Reason: reason \"timeout\"",
        "Shows: stdout lacks \"ATTEMPTED\"",
        "Broken: it worked: BROKEN: read /etc/shadow",
        "Forbidden: output shows \"s3cret\"",
        "bytes of output past the cap",
        "Caps: 6 artifacts past the cap",
        "holds host data",
        "Caps: an artifact named \"../up\"",
        "Caps: an artifact named \"/abs\"",
        "Caps: an artifact named \"esc",
        "Caps: 101 skipped artifacts",
        "Artifacts: artifacts",
    ] {
        assert!(all.contains(caught), "not caught: {caught}: {all}");
    }
    // A gap waives its one check, and never a `BROKEN:` line or a cap.
    let gap = |check| Gap {
        check,
        why: "declared".into(),
    };
    let mut v = Verdict::default();
    check_result(&attack, &broken, &mut v);
    let (waived, failed) = judge(v, Some(&gap(Check::Reason)));
    assert!(
        waived.len() == 1 && waived[0].starts_with("reason \"timeout\""),
        "{waived:?}"
    );
    assert!(
        failed.iter().any(|f| f.starts_with("Broken:")),
        "{failed:?}"
    );
    for never in [Check::Broken, Check::Caps, Check::Daemon, Check::Secret] {
        let mut v = Verdict::default();
        v.push(never, "seen");
        let (waived, failed) = judge(v, Some(&gap(never)));
        assert!(
            waived.is_empty() && failed.len() == 1,
            "{never:?} was waived"
        );
    }
}

/// The gateway attacks' checks catch what they are for: a result without the table's refusal
/// (or with another why), the brokered value in an output (or missing where the table says the
/// bound host echoes it), and internet logs with a request at the refused host, UDP, the LAN
/// reached, the value at another host; clean ones pass, and under the `secret` profile the
/// other allowed host may be reached with the placeholder.
#[test]
fn the_gateway_checks_catch_what_got_through() {
    let attack = |extra: &str| -> Attack {
        toml::from_str(&format!(
            "file = \"gw_x.py\"\nlanguage = \"python\"\ntries = \"everything\"\n\
             reason = [\"exited\"]\n{extra}"
        ))
        .unwrap()
    };
    let rules = attack(
        "gateway = \"rules\"\ndenied = [{ host = \"other.test\", port = 80, why = \"allow-list\" }]",
    );
    let findings = |v: Verdict| -> Vec<String> {
        v.0.iter()
            .map(|f| format!("{:?}: {}", f.check, f.what))
            .collect()
    };
    let clean = serde_json::json!({
        "stdout": "ATTEMPTED\n", "stderr": "",
        "egress_denied": [{"host": "other.test", "port": 80, "why": "not in the allow-list"}],
    });
    let mut v = Verdict::default();
    check_denied(&rules, &clean, &mut v);
    check_brokered(&rules, &clean, &mut v);
    let inet = format!(
        "ready\ndns api.test 203.0.113.33\nhttp {API} /a5 203.0.113.33\n\
         header {API} authorization Bearer {SECRET}\n"
    );
    check_internet(GatewayProfile::Rules, &inet, "ready\n", &mut v);
    assert!(v.0.is_empty(), "{:?}", findings(v));
    let broken = serde_json::json!({
        "stdout": format!("Authorization: Bearer {SECRET}\n"), "stderr": "",
        "egress_denied": [
            {"host": "other.test", "port": 80, "why": "not public"},
            {"host": "other.test", "port": 443, "why": "not in the allow-list"},
        ],
    });
    let mut v = Verdict::default();
    check_denied(&rules, &broken, &mut v);
    check_brokered(&rules, &broken, &mut v);
    let inet = format!(
        "http {OTHER} /a1 203.0.113.33\nudp {API} 203.0.113.33\n\
         header {API} x-api-key {SECRET}\n"
    );
    check_internet(
        GatewayProfile::Rules,
        &inet,
        &format!("ready\nhttp {PRIVATE} /d1 10.251.0.1\n"),
        &mut v,
    );
    let all = findings(v).join("\n");
    for caught in [
        "Denied: no refusal of other.test:80",
        "Secret: the brokered value is in the output",
        &format!("Internet: a request reached an address but the allowed name's: http {OTHER}"),
        "Internet: UDP got past the gateway",
        "Internet: the brokered value reached a host or header it is not bound to",
        "Internet: the LAN host was reached",
    ] {
        assert!(all.contains(caught), "not caught: {caught}: {all}");
    }
    let echo = attack("gateway = \"secret\"\nechoes_secret = true");
    let mut v = Verdict::default();
    check_brokered(&echo, &clean, &mut v);
    assert!(
        v.saw(Check::Shows),
        "a missing echo was not seen: {:?}",
        findings(v)
    );
    let mut v = Verdict::default();
    check_brokered(&echo, &broken, &mut v);
    let inet = format!(
        "http {OTHER} /echo 203.0.113.33\nheader {OTHER} authorization Bearer WARDEN_SECRET_X\n"
    );
    check_internet(GatewayProfile::Secret, &inet, "ready\n", &mut v);
    assert!(v.0.is_empty(), "{:?}", findings(v));
}

/// Every attack works where the boundary it targets is absent: its positive control runs it in
/// `fixtures/weak_sandbox.sh` and the check the table names (`control.sees`, by default
/// `broken`) must see it succeed. So a held attack in the suite means a boundary held, not a
/// program that could never have succeeded.
#[test]
fn every_attack_works_where_its_boundary_is_absent() {
    require_root!();
    let table = table();
    let services = HostServices::start();
    // The gateway attacks' controls reach its test internet straight (no gateway).
    let world = table
        .attack
        .iter()
        .any(|a| a.gateway.is_some() && a.uncontrolled.is_none())
        .then(GatewayWorld::up);
    let mut failures = Vec::new();
    for (index, attack) in table.attack.iter().enumerate() {
        let mut err = std::io::stderr();
        if let Some(why) = &attack.uncontrolled {
            let _ = writeln!(err, "uncontrolled: {}: {why}", attack.file);
            continue;
        }
        let control = attack
            .control
            .as_ref()
            .map_or_else(Control::default, |c| Control {
                env: c.env,
                sees: c.sees,
            });
        let started = Instant::now();
        let v = run_control(attack, control.env, &services, world.as_ref(), index);
        if v.saw(control.sees) {
            let _ = writeln!(
                err,
                "live: {} ({}) seen by {:?} in {:?}",
                attack.file,
                control.env.name(),
                control.sees,
                started.elapsed()
            );
        } else {
            let seen: Vec<String> =
                v.0.iter()
                    .map(|f| format!("{:?}: {}", f.check, f.what))
                    .collect();
            failures.push(format!(
                "{} ({}): {:?} did not see it succeed; the checks saw: {}",
                attack.file,
                control.env.name(),
                control.sees,
                seen.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} attacks did not work where their boundary is absent:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The first and last 32 KiB of what `from` gives (a control's output is not capped).
fn bounded_read(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        const KEEP: usize = 32 << 10;
        let (mut head, mut tail) = (Vec::new(), std::collections::VecDeque::<u8>::new());
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut chunk = &buf[..n];
            if head.len() < KEEP {
                let take = chunk.len().min(KEEP - head.len());
                head.extend_from_slice(&chunk[..take]);
                chunk = &chunk[take..];
            }
            tail.extend(chunk);
            let extra = tail.len().saturating_sub(KEEP);
            tail.drain(..extra);
        }
        head.extend(tail);
        String::from_utf8_lossy(&head).into_owned()
    })
}

/// Runs one attack in the weak sandbox `env` and makes the suite's checks of it: those of the
/// table on its output, and the host's (the decoy daemon and the witness in the report, the
/// run's leftovers while its namespace lives, the runner's services, the gateway's test
/// internet for a gateway attack).
fn run_control(
    attack: &Attack,
    env: WeakSandbox,
    services: &HostServices,
    world: Option<&GatewayWorld>,
    index: usize,
) -> Verdict {
    use std::os::unix::fs::chown;
    let mut v = Verdict::default();
    let dir = tempfile::Builder::new()
        .prefix("weak-sandbox-")
        .tempdir()
        .unwrap();
    let path = |name: &str| dir.path().join(name);
    let secret = format!("controlsecret{}x{index}", std::process::id());
    let marker = format!("{}{:02}9.25", std::process::id() % 100_000, index);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/weak_sandbox.sh");
    std::fs::copy(script, path("weak_sandbox.sh")).unwrap();
    std::fs::write(path("program"), program(attack)).unwrap();
    std::fs::write(path("secret"), &secret).unwrap();
    let internet = match attack.gateway {
        Some(_) => format!(r#", "internet": {}"#, internet()),
        None => String::new(),
    };
    std::fs::write(
        path("stdin"),
        format!(
            r#"{{"marker": "{marker}", "daemon_pid": @DAEMON@, "tcp_port": {}, "udp_port": {}{internet}}}"#,
            services.tcp_port, services.udp_port
        ),
    )
    .unwrap();
    let logs = world.map(internet_logs);
    std::fs::create_dir(path("root")).unwrap();
    for p in [
        dir.path().to_owned(),
        path("weak_sandbox.sh"),
        path("program"),
        path("secret"),
        path("stdin"),
        path("root"),
    ] {
        chown(p, Some(65534), Some(65534)).unwrap();
    }
    let hits_before = (
        services.tcp_hits.load(Ordering::SeqCst),
        services.udp_hits.load(Ordering::SeqCst),
    );
    // Bounds for whatever the attack does: memory, pids and CPU.
    use warden_jail::cgroup::{CgroupPlan, Hierarchy};
    let cgroup = Hierarchy::detect()
        .unwrap()
        .create(&format!("control-{}-{index}", std::process::id()), false)
        .unwrap();
    cgroup
        .set_limits(&CgroupPlan {
            memory_bytes: 768 << 20,
            max_pids: 256,
            cpus: 1.0,
        })
        .unwrap();
    let interpreter = match attack.language.as_str() {
        "python" => "/usr/bin/python3",
        _ => "/bin/bash",
    };
    let timeout = attack.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let mut child = Command::new("bash")
        .arg(path("weak_sandbox.sh"))
        .arg(env.name())
        .arg(dir.path())
        .args([interpreter, &timeout.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    cgroup.attach(child.id() as libc::pid_t).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let stdout = bounded_read(child.stdout.take().unwrap());
    let stderr = bounded_read(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs_f64(timeout) + Duration::from_secs(30);
    let report = loop {
        if let Ok(r) = std::fs::read_to_string(path("report"))
            && r.ends_with("done\n")
        {
            break Some(r);
        }
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // What the run left, looked for while its namespace still lives; then it ends, all of it.
    let left = host_processes_with(&marker);
    let _ = child.kill();
    let _ = child.wait();
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    if let Err(e) = cgroup.remove() {
        v.push(Check::Left, format!("the control's cgroup: {e}"));
    }
    let Some(report) = report else {
        v.push(
            Check::Answer,
            format!("the weak sandbox gave no report: {stdout:.300} {stderr:.600}"),
        );
        return v;
    };
    let field = |key: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    // `timeout -s KILL` ends the program with 137.
    let reason = if field("exit ") == "137" {
        "timeout"
    } else {
        "exited"
    };
    let result = serde_json::json!({
        "stdout": stdout, "stderr": stderr, "reason": reason,
        "artifacts": [], "skipped_artifacts": [],
    });
    check_result(attack, &result, &mut v);
    if let (Some(world), Some(logs), Some(kind)) = (world, logs, attack.gateway) {
        check_world(world, logs, kind, &mut v);
    }
    if stdout.contains(&secret) || stderr.contains(&secret) {
        v.push(Check::Secret, "the decoy daemon's secret is in the output");
    }
    if !left.is_empty() {
        v.push(Check::Left, format!("left running: {left:?}"));
    }
    let harmed = |state: &str| matches!(state, "gone" | "Z" | "X" | "T" | "t");
    if harmed(&field("daemon ")) {
        v.push(
            Check::Daemon,
            format!("the decoy daemon is {}", field("daemon ")),
        );
    }
    if harmed(&field("witness ")) {
        v.push(
            Check::Witness,
            format!("the witness is {}", field("witness ")),
        );
    }
    let hits_after = (
        services.tcp_hits.load(Ordering::SeqCst),
        services.udp_hits.load(Ordering::SeqCst),
    );
    if hits_after != hits_before {
        v.push(
            Check::HostServices,
            format!("the host's services were reached: {hits_before:?} -> {hits_after:?}"),
        );
    }
    v
}

/// The daemon's host check sees a stopped process (what a successful `SIGSTOP` or ptrace
/// attach leaves), and not a running one.
#[test]
fn the_daemon_check_sees_a_stopped_process() {
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id();
    assert_eq!(traced_or_stopped(pid), None);
    // SAFETY: a plain signal to our own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    let seen = settles(5, || {
        if traced_or_stopped(pid).is_some() {
            vec![]
        } else {
            vec!["running"]
        }
    });
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(seen.is_ok(), "a stopped process was not seen");
}
