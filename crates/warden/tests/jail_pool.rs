//! Warm pools with the real jail, through the real daemon over HTTP: a pooled sandbox goes to
//! one caller, is built like an on-demand one (limits, policies, no network), is replaced
//! after a take or when it dies while waiting, is not given to a request that asks for other
//! limits, and has the profile's modules imported before its first cell.

mod common;

use common::http_request as request;
use std::time::{Duration, Instant};

/// The keys "alice-key" and "bob-key" (the settings hold their SHA-256).
const KEYS: &str = "[[server.api_keys]]\nname = \"alice\"\nmax_sandboxes = 1\n\
    key_sha256 = \"72ee9d4355ccb9d3a4c9dbf37382e38e75c1b1a225b5bd1f729ee91bbda30c20\"\n\
    [[server.api_keys]]\nname = \"bob\"\n\
    key_sha256 = \"9b94dc1a51a38769f135edf04033ad7f2f487b6c25929be7a861cfc1ab10cf98\"\n";

/// `open`: no policies, 160 MB, pool of one, `colorsys` preloaded. `strict`: the
/// forbidden_imports policy, pool of one.
const PROFILES: &str = r#"
[sandbox]
default_profile = "open"

[sandbox.profiles.open]
timeout_seconds = 20
max_memory_mb = 160
max_pids = 32
enabled_policies = ["resource_quota"]
pool_size = 1
preload_modules = ["colorsys"]

[sandbox.profiles.strict]
timeout_seconds = 20
max_memory_mb = 160
enabled_policies = ["forbidden_imports", "resource_quota"]
pool_size = 1
preload_modules = ["colorsys"]
  [sandbox.profiles.strict.policies.forbidden_imports]
  allowed_modules = ["colorsys", "sys", "math"]
"#;

/// The data-science libraries, as the shipped `data_science` profile preloads them.
const DATA_SCIENCE: &str = r#"
[sandbox]
default_profile = "ds"

[sandbox.profiles.ds]
timeout_seconds = 60
max_memory_mb = 512
max_pids = 128
cpus = 2.0
enabled_policies = ["resource_quota"]
pool_size = 1
preload_modules = ["numpy", "pandas", "matplotlib", "matplotlib.pyplot"]
"#;

struct Daemon {
    server: common::Server,
    _dir: tempfile::TempDir,
}

/// Stops the daemon as a service manager would (SIGTERM, then wait), so that its pooled
/// sandboxes are torn down; `common::Server`'s SIGKILL would leave their cgroups to the next
/// start, and the shutdown test, running alongside, would see them.
impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.server.child.try_wait() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &self.server.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if !matches!(self.server.child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn start(toml: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.toml");
    std::fs::write(&settings, toml).unwrap();
    Daemon {
        server: common::serve_with(&settings),
        _dir: dir,
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// A caller: the daemon's address and its key's header line (empty without keys).
struct Caller<'a> {
    addr: &'a str,
    auth: String,
}

impl Caller<'_> {
    fn call(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        let (status, body) = request(self.addr, method, path, &self.auth, body);
        let value = if body.is_empty() {
            serde_json::Value::Null
        } else {
            json(&body)
        };
        (status, value)
    }

    fn create(&self, body: &str) -> String {
        let (status, v) = self.call("POST", "/v1/sandboxes", body);
        assert_eq!(status, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// A cell in the sandbox's default context.
    fn cell(&self, id: &str, code: &str) -> serde_json::Value {
        let body = serde_json::json!({ "code": code, "context": "default" }).to_string();
        let (status, v) = self.call("POST", &format!("/v1/sandboxes/{id}/exec"), &body);
        assert_eq!(status, 200, "{v}");
        v
    }

    /// Whether the sandbox came from the pool: its default context exists before any cell
    /// (one created on demand makes it at the first cell naming it).
    fn was_pooled(&self, id: &str) -> bool {
        let (status, v) = self.call("GET", &format!("/v1/sandboxes/{id}/contexts"), "");
        assert_eq!(status, 200, "{v}");
        let ids: Vec<&str> = v
            .as_array()
            .or_else(|| v["contexts"].as_array())
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        ids.contains(&"default")
    }

    fn destroy(&self, id: &str) {
        let (status, v) = self.call("DELETE", &format!("/v1/sandboxes/{id}"), "");
        assert!(status == 200 || status == 204, "{status} {v}");
    }
}

fn anonymous(addr: &str) -> Caller<'_> {
    Caller {
        addr,
        auth: String::new(),
    }
}

fn keyed<'a>(addr: &'a str, key: &str) -> Caller<'a> {
    Caller {
        addr,
        auth: format!("Authorization: Bearer {key}\r\n"),
    }
}

/// A pool metric (`ready`, `size`, `taken_total`, `discarded_total`) of a profile.
fn pool_metric(addr: &str, name: &str, profile: &str) -> u64 {
    common::metric(
        addr,
        &format!("warden_pool_{name}{{profile=\"{profile}\"}}"),
    )
}

/// Waits until the profile's pool holds `ready` sandboxes.
fn wait_ready(addr: &str, profile: &str, ready: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, text) = request(addr, "GET", "/metrics", "", "");
        assert_eq!(status, 200);
        let line = format!("warden_pool_ready{{profile=\"{profile}\"}} {ready}");
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pool of {profile} never held {ready}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_pooled_sandbox_goes_to_one_caller_is_replaced_and_is_torn_down_at_shutdown() {
    require_root!();
    let mut daemon = start(&format!("{PROFILES}\n{KEYS}"));
    let a = daemon.server.addr.clone();
    let alice = keyed(&a, "alice-key");
    let bob = keyed(&a, "bob-key");
    wait_ready(&a, "open", 1);
    assert_eq!(pool_metric(&a, "size", "open"), 1);

    // alice may hold one sandbox: the one waiting in the pool is nobody's, so she gets it.
    let first = alice.create(r#"{"profile": "open"}"#);
    assert!(alice.was_pooled(&first));
    assert_eq!(pool_metric(&a, "taken_total", "open"), 1);
    let (status, v) = alice.call("POST", "/v1/sandboxes", r#"{"profile": "open"}"#);
    assert_eq!(
        status, 429,
        "alice's own limit applies to what she took: {v}"
    );
    let r = alice.cell(&first, "x = 'alice'\nx");
    assert_eq!(r["text"], "'alice'", "{r}");

    // The pool refills; the next one is a fresh sandbox and a fresh interpreter.
    wait_ready(&a, "open", 1);
    let second = bob.create(r#"{"profile": "open"}"#);
    assert_ne!(second, first);
    assert!(bob.was_pooled(&second));
    let r = bob.cell(&second, "x");
    assert_eq!(r["error"]["name"], "NameError", "{r}");
    // bob cannot reach alice's sandbox, and her state is hers.
    let (status, _) = bob.call("GET", &format!("/v1/sandboxes/{first}"), "");
    assert_eq!(status, 404);
    assert_eq!(alice.cell(&first, "x")["text"], "'alice'");

    // Two creates at once: different sandboxes, no shared state, and exactly as many taken
    // from the pool as say so.
    wait_ready(&a, "open", 1);
    let taken_before = pool_metric(&a, "taken_total", "open");
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(|| bob.create(r#"{"profile": "open"}"#));
        let two = s.spawn(|| bob.create(r#"{"profile": "open"}"#));
        (one.join().unwrap(), two.join().unwrap())
    });
    assert_ne!(one, two);
    let pooled = [&one, &two].iter().filter(|id| bob.was_pooled(id)).count() as u64;
    assert!(pooled >= 1, "the waiting sandbox went to neither");
    assert_eq!(
        pool_metric(&a, "taken_total", "open") - taken_before,
        pooled
    );
    bob.cell(&one, "y = 1");
    assert_eq!(bob.cell(&two, "y")["error"]["name"], "NameError");
    for id in [&one, &two, &second] {
        bob.destroy(id);
    }

    // A pooled sandbox whose interpreter dies while it waits is never handed out.
    wait_ready(&a, "open", 1);
    wait_ready(&a, "strict", 1);
    let daemon_pid = daemon.server.child.id();
    let drivers = common::descendants_running(daemon_pid, "warden_driver.py");
    // alice's context, and the two waiting ones.
    assert_eq!(drivers.len(), 3, "{drivers:?}");
    alice.destroy(&first);
    let waiting = common::descendants_running(daemon_pid, "warden_driver.py");
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    for pid in &waiting {
        let status = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    // Dead once the sandboxes' init has reaped them (the kill itself is asynchronous).
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting
        .iter()
        .any(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    {
        assert!(Instant::now() < deadline, "the killed interpreters linger");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let third = alice.create(r#"{"profile": "open"}"#);
    let r = alice.cell(&third, "import sys\n'colorsys' in sys.modules");
    assert_eq!(r["text"], "True", "{r}");
    assert_ne!(
        r["context_restarted"], true,
        "a dead pooled sandbox was handed out: {r}"
    );
    assert!(pool_metric(&a, "discarded_total", "open") >= 1);
    // Both pools are whole again (dead ones are replaced, not only skipped).
    wait_ready(&a, "strict", 1);
    wait_ready(&a, "open", 1);
    alice.destroy(&third);

    // Shutdown (SIGTERM) ends the waiting sandboxes cleanly: their helpers remove their own
    // cgroups, so nothing is stale and no interpreter is left.
    let helpers = common::descendants_running(daemon_pid, "warden_driver.py");
    assert_eq!(helpers.len(), 2, "{helpers:?}");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &daemon_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = daemon.server.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    for pid in helpers {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pooled interpreter {pid} outlived the daemon"
        );
    }
    // The check sees the whole machine: a leaf some other run is removing right now (its lock
    // released, its controllers going one by one) looks stale for an instant, a leaked one
    // for ever.
    let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.has_stale() {
        assert!(
            Instant::now() < deadline,
            "stale cgroups after the shutdown"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn pooled_sandboxes_keep_the_profiles_limits_policies_and_no_network() {
    require_root!();
    let daemon = start(PROFILES);
    let a = daemon.server.addr.as_str();
    let c = anonymous(a);
    wait_ready(a, "open", 1);
    wait_ready(a, "strict", 1);

    // A request for other limits is built on demand; the waiting sandbox stays in the pool.
    let other = c.create(r#"{"profile": "open", "memory_mb": 100}"#);
    assert!(!c.was_pooled(&other));
    assert_eq!(pool_metric(a, "taken_total", "open"), 0);
    assert_eq!(pool_metric(a, "ready", "open"), 1);
    // Its default context, made now, is the same context: the profile's preload included.
    let r = c.cell(&other, "import sys\n'colorsys' in sys.modules");
    assert_eq!(r["text"], "True", "{r}");
    let (_, info) = c.call("GET", &format!("/v1/sandboxes/{other}"), "");
    assert_eq!(info["limits"]["memory_mb"], 100, "{info}");

    let id = c.create(r#"{"profile": "open", "labels": {"team": "a"}}"#);
    assert!(
        c.was_pooled(&id),
        "labels are not part of what a sandbox is built from"
    );
    assert_eq!(pool_metric(a, "taken_total", "open"), 1);
    let (_, info) = c.call("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(info["limits"]["memory_mb"], 160, "{info}");
    assert_eq!(info["labels"]["team"], "a", "{info}");

    // The jail's isolation, as in any sandbox: the sandbox user, seccomp, no new privileges,
    // a pid namespace, no host network (only loopback, and not the host's: the daemon's own
    // port is unreachable), and no route out.
    let port: u16 = a.rsplit_once(':').unwrap().1.parse().unwrap();
    let probe = format!(
        r#"import os, socket
status = open('/proc/self/status').read()
fields = dict(l.split(':\t', 1) for l in status.splitlines() if ':\t' in l)
def reach(host, port):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        return 'connected'
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
seen = (os.getuid(), fields['Seccomp'].strip(), fields['NoNewPrivs'].strip(),
        [n for _, n in socket.if_nameindex()], reach('127.0.0.1', {port}), reach('1.1.1.1', 53),
        os.path.exists('/root'))"#
    );
    let r = c.cell(&id, &format!("{probe}\nseen"));
    let text = r["text"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(text.starts_with("(1000, '2', '1', ['lo'], '"), "{text}");
    assert!(text.ends_with("', False)"), "{text}");
    assert!(!text.contains("'connected'"), "{text}");
    // The same probe as a one-shot run of the profile (built on demand) sees the same.
    let (status, once) = c.call(
        "POST",
        "/v1/execute",
        &serde_json::json!({ "profile": "open", "code": format!("{probe}\nprint(repr(seen))") })
            .to_string(),
    );
    assert_eq!(status, 200, "{once}");
    assert_eq!(once["stdout"].as_str().unwrap().trim(), text, "{once}");

    // The memory limit is the profile's: 100 MB fit, 200 MB end the cell (and the context,
    // which is restarted).
    let r = c.cell(&id, "a = bytearray(100 * 2**20)\nlen(a) // 2**20");
    assert_eq!(r["text"], "100", "{r}");
    let r = c.cell(
        &id,
        "b = bytearray(200 * 2**20)\nb[::4096] = b'x' * len(b[::4096])",
    );
    assert_eq!(r["reason"], "memory", "{r}");
    assert_eq!(r["context_restarted"], true, "{r}");

    // The profile's policies apply to cells of a pooled sandbox.
    let strict = c.create(r#"{"profile": "strict"}"#);
    assert!(c.was_pooled(&strict));
    let body = serde_json::json!({ "code": "import socket", "context": "default" }).to_string();
    let (status, v) = c.call("POST", &format!("/v1/sandboxes/{strict}/exec"), &body);
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["error"]["code"], "policy_violation", "{v}");
    let r = c.cell(&strict, "import colorsys\ncolorsys.rgb_to_hsv(1, 0, 0)");
    assert_eq!(r["text"], "(0.0, 1.0, 1)", "{r}");
    for id in [&other, &id, &strict] {
        c.destroy(id);
    }
}

#[test]
fn the_data_science_libraries_are_imported_before_the_first_cell() {
    require_root!();
    prerequisite!(common::missing_path(
        "/usr/lib/python3/dist-packages/pandas",
        "scripts/setup.sh installs it"
    ));
    let daemon = start(DATA_SCIENCE);
    let a = daemon.server.addr.as_str();
    let c = anonymous(a);
    wait_ready(a, "ds", 1);
    let id = c.create("{}");
    assert!(c.was_pooled(&id));
    // The preload left nothing in the user's workspace but its output folder (matplotlib's and
    // fontconfig's caches go to /tmp).
    let (status, files) = c.call("GET", &format!("/v1/sandboxes/{id}/files"), "");
    assert_eq!(status, 200, "{files}");
    assert_eq!(
        files["files"],
        serde_json::json!([{"is_dir": true, "path": "output", "size": 0}]),
        "{files}"
    );
    let r = c.cell(
        &id,
        "import sys\n([m in sys.modules for m in ('numpy', 'pandas', 'matplotlib', 'matplotlib.pyplot')], \
         [n for n in ('np', 'pd', 'plt', 'numpy', 'pandas', 'matplotlib') if n in globals()], \
         sys.modules['matplotlib'].get_backend().lower())",
    );
    assert_eq!(r["text"], "([True, True, True, True], [], 'agg')", "{r}");
    // The first use is a lookup in sys.modules, not an import from disk.
    let r = c.cell(
        &id,
        "import time\nt = time.perf_counter()\nimport pandas as pd\nimported_ms = (time.perf_counter() - t) * 1000\n\
         pd.DataFrame({'a': [1, 2]}).sum()",
    );
    assert_eq!(r["text"], "a    3\ndtype: int64", "{r}");
    let r = c.cell(&id, "imported_ms < 5");
    assert_eq!(r["text"], "True", "{r}");
    c.destroy(&id);
}
