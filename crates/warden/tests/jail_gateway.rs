//! The egress gateway of networked jail sandboxes (`egress.gateway`), end to end through the
//! real binary and real clients (curl, Python's urllib and requests), against a small
//! "internet" this test builds from network namespaces (nothing leaves the machine):
//!
//! - `wg-inet`: 203.0.113.40 (`api.test`, the allowed "public API") and 203.0.113.41
//!   (`other.test`, a domain the rules do not allow), each with HTTP (80) and HTTPS (443,
//!   a certificate from the test's own CA), and the upstream DNS server, whose table also
//!   sends `private.test` to a private address and `rebind.test` to loopback, metadata and
//!   private addresses;
//! - `wg-lan`: 10.251.0.10, a private host with the same servers.
//!
//! Every server logs what reaches it, so a refused connection is shown not to have arrived.
//! Its names and addresses differ from `jail_network`'s world, so both can run at once.

mod common;

use common::{stdout_of, warden_cmd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static WORLD: Mutex<()> = Mutex::new(());

/// The brokered secret's real value: in a file only the daemon reads.
const SECRET: &str = "sk-test-REALVALUE9f8e7d6c5b4a3";

fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sh_quiet(cmd: &str) {
    let _ = Command::new("sh")
        .args(["-c", cmd])
        .stderr(Stdio::null())
        .status();
}

const HOSTS: &[(&str, &str, &[&str])] = &[
    (
        "inet",
        "203.0.113.33/28",
        &["203.0.113.40/28", "203.0.113.41/28"],
    ),
    ("lan", "10.251.0.1/24", &["10.251.0.10/24"]),
];

const DNS: &[&str] = &[
    "api.test=203.0.113.40",
    "other.test=203.0.113.41",
    "private.test=10.251.0.10",
    "rebind.test=127.0.0.1,169.254.169.254,10.251.0.10",
];

struct World {
    dir: tempfile::TempDir,
    servers: Vec<Child>,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl World {
    fn new() -> World {
        let lock = WORLD.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let mut world = World {
            dir,
            servers: vec![],
            _lock: lock,
        };
        world.remove();
        world.make_certificates();
        world.make_package_index();
        let fixture =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/world_server.py");
        let tls = format!(
            "{},{}",
            world.path("server.pem").display(),
            world.path("server.key").display()
        );
        for (name, host_addr, addrs) in HOSTS {
            let ns = format!("wg-{name}");
            let host_if = format!("wg-{name}-h");
            sh(&format!(
                "ip netns add {ns} && ip link add {host_if} type veth peer name eth0 netns {ns} && \
                 ip addr add {host_addr} dev {host_if} && ip link set {host_if} up && \
                 ip -n {ns} link set lo up && ip -n {ns} link set eth0 up"
            ));
            for a in *addrs {
                sh(&format!("ip -n {ns} addr add {a} dev eth0"));
            }
            let gw = host_addr.split('/').next().unwrap();
            sh(&format!("ip -n {ns} route add default via {gw}"));
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns, "/usr/bin/python3"])
                .arg(&fixture)
                .arg("--log")
                .arg(world.log_path(name))
                .args(["--tls", &tls]);
            for a in *addrs {
                cmd.args(["--addr", a.split('/').next().unwrap()]);
            }
            if *name == "inet" {
                for entry in DNS {
                    cmd.args(["--dns", entry]);
                }
                cmd.arg("--files").arg(world.path("index"));
            }
            let err = std::fs::File::create(world.path(&format!("{name}.err"))).unwrap();
            world
                .servers
                .push(cmd.stdout(Stdio::null()).stderr(err).spawn().unwrap());
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (name, _, _) in HOSTS {
            while !world.log(name).contains("ready") {
                assert!(
                    Instant::now() < deadline,
                    "world server {name} did not start: {}",
                    std::fs::read_to_string(world.path(&format!("{name}.err"))).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        world.write_settings();
        world
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The "public" CA and one server certificate for every name of the world.
    fn make_certificates(&self) {
        let d = self.dir.path().display();
        sh(&format!(
            "cd {d} && \
             openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
               -keyout ca.key -out ca.pem -days 2 -subj '/CN=Warden test public CA' 2>/dev/null && \
             openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
               -keyout server.key -out server.csr -subj '/CN=api.test' 2>/dev/null && \
             printf 'subjectAltName=DNS:api.test,DNS:other.test,DNS:private.test,DNS:rebind.test\\n' > san.ext && \
             openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
               -out server.pem -days 2 -extfile san.ext 2>/dev/null && \
             chmod 644 server.key"
        ));
    }

    /// A "simple" package index (PEP 503) with one small wheel, `tinypkg` 0.1, for pip.
    fn make_package_index(&self) {
        let d = self.path("index");
        std::fs::create_dir_all(d.join("simple/tinypkg")).unwrap();
        std::fs::create_dir_all(d.join("packages")).unwrap();
        let wheel = "tinypkg-0.1-py3-none-any.whl";
        sh(&format!(
            r#"python3 - <<'PY'
import zipfile
with zipfile.ZipFile("{}/packages/{wheel}", "w") as z:
    z.writestr("tinypkg/__init__.py", "VALUE = 42\n")
    z.writestr("tinypkg-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n")
    z.writestr("tinypkg-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: warden-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("tinypkg-0.1.dist-info/RECORD", "")
PY"#,
            d.display()
        ));
        std::fs::write(
            d.join("simple/index.html"),
            "<html><body><a href=\"tinypkg/\">tinypkg</a></body></html>\n",
        )
        .unwrap();
        std::fs::write(
            d.join("simple/tinypkg/index.html"),
            format!("<html><body><a href=\"../../packages/{wheel}\">{wheel}</a></body></html>\n"),
        )
        .unwrap();
    }

    fn log_path(&self, host: &str) -> PathBuf {
        self.path(&format!("{host}.log"))
    }

    fn log(&self, host: &str) -> String {
        std::fs::read_to_string(self.log_path(host)).unwrap_or_default()
    }

    fn settings(&self) -> PathBuf {
        self.path("settings.toml")
    }

    fn write_settings(&self) {
        let net = "network_enabled = true\nenabled_policies = []\ntimeout_seconds = 60\n";
        std::fs::write(self.path("api-key"), format!("{SECRET}\n")).unwrap();
        let d = self.dir.path().display();
        std::fs::write(
            self.settings(),
            format!(
                "[sandbox]\ndefault_profile = \"gw\"\n\
                 [sandbox.jail.network]\nupstream_dns = \"203.0.113.40:53\"\n\
                 upstream_ca_file = \"{d}/ca.pem\"\n\
                 [sandbox.secrets.api_key]\nfrom_file = \"{d}/api-key\"\nhosts = [\"api.test\"]\n\
                 header = \"Authorization\"\nenv = \"API_KEY\"\n\
                 [sandbox.profiles.sec]\n{net}\
                 [sandbox.profiles.sec.egress]\nsecrets = [\"api_key\"]\n\
                 [sandbox.profiles.sec.egress.gateway]\nallow = [\"api.test\", \"other.test\"]\n\
                 [sandbox.profiles.gw]\n{net}\
                 [sandbox.profiles.gw.egress.gateway]\n\
                 allow = [\"api.test\", \"private.test\", \"rebind.test\", \"*.cdn.test:443\"]\n\
                 deny = [\"bad.cdn.test\"]\n\
                 [sandbox.profiles.d_gw]\n{net}backend = \"docker\"\nruntime = {{ image = \"warden-python:3.11\" }}\n\
                 [sandbox.profiles.d_gw.egress.gateway]\nallow = [\"api.test\"]\n\
                 [sandbox.profiles.d_sec]\n{net}backend = \"docker\"\nruntime = {{ image = \"warden-python:3.11\" }}\n\
                 [sandbox.profiles.d_sec.egress]\nsecrets = [\"api_key\"]\n\
                 [sandbox.profiles.d_sec.egress.gateway]\nallow = [\"api.test\"]\n\
                 [sandbox.profiles.open]\n{net}\
                 [sandbox.profiles.open.egress.gateway]\ndeny = [\"other.test:443\"]\n"
            ),
        )
        .unwrap();
    }

    /// Runs Python in a profile; returns the result JSON (which must not be an error).
    fn py(&self, profile: &str, code: &str) -> serde_json::Value {
        let settings = self.settings();
        let args = [
            "--config",
            settings.to_str().unwrap(),
            "run",
            "--json",
            "--profile",
            profile,
            "-l",
            "python",
            "-",
        ];
        let ca = std::fs::read_to_string(self.path("ca.pem")).unwrap();
        let code = format!("{}\n{code}", prelude(&ca));
        let out = warden_cmd(&args, &code);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(v.get("error").is_none(), "{v}");
        assert_eq!(v["exit_code"], 0, "{v}");
        v
    }

    fn remove(&mut self) {
        for (name, _, _) in HOSTS {
            sh_quiet(&format!("ip netns del wg-{name}"));
            sh_quiet(&format!("ip link del wg-{name}-h"));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        self.remove();
    }
}

/// What every program starts with: the test CA in `ca.pem`, a `curl` helper and a report.
fn prelude(ca: &str) -> String {
    format!(
        r#"
import json, subprocess, socket, urllib.request
open("ca.pem", "w").write("""{ca}""")
def curl(*a):
    p = subprocess.run(["curl", "-sS", "--max-time", "15", "--cacert", "ca.pem", *a], capture_output=True, text=True)
    return {{"code": p.returncode, "out": p.stdout[:300], "err": p.stderr[:300]}}
def urllib_get(url):
    import ssl
    try:
        ctx = ssl.create_default_context(cafile="ca.pem")
        return "ok:" + urllib.request.urlopen(url, timeout=15, context=ctx).read().decode()[:200]
    except Exception as e:
        return "err:" + type(e).__name__ + ":" + str(e)[:200]
R = {{}}
"#
    )
}

fn report(v: &serde_json::Value) -> serde_json::Value {
    let out = stdout_of(v);
    let line = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}\n{v}"))
}

/// The refusal of `host:port` in the result; its `why`.
fn denied(v: &serde_json::Value, host: &str, port: u16) -> String {
    v["egress_denied"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["host"] == host && d["port"] == port)
        .unwrap_or_else(|| panic!("no refusal of {host}:{port} in {}", v["egress_denied"]))["why"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn allowed_bytes(v: &serde_json::Value, host: &str, port: u16) -> u64 {
    v["egress_allowed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["host"] == host && d["port"] == port)
        .map(|d| d["bytes_received"].as_u64().unwrap())
        .sum()
}

#[test]
fn the_allowed_host_works_and_the_others_are_refused_with_the_reason() {
    require_root!();
    let world = World::new();
    let v = world.py(
        "gw",
        r#"
R["https_allowed"] = curl("https://api.test/hello")
R["http_allowed"] = urllib_get("http://api.test/plain")
R["https_urllib"] = urllib_get("https://api.test/urllib")
import requests
R["requests"] = requests.get("https://api.test/requests", verify="ca.pem", timeout=15).text
R["https_other"] = curl("https://other.test/x")
R["http_other"] = curl("http://other.test/x")
R["private"] = curl("https://private.test/x")
R["rebind"] = curl("https://rebind.test/x")
R["ip_http"] = curl("http://203.0.113.40/x")
R["ip_https"] = curl("-k", "https://203.0.113.40/x")
R["lookup"] = socket.gethostbyname("never-asked-upstream.test")
print(json.dumps(R))
"#,
    );
    let r = report(&v);
    assert_eq!(r["https_allowed"]["code"], 0, "{r}");
    assert_eq!(
        r["https_allowed"]["out"], "hello from 203.0.113.40\n",
        "{r}"
    );
    assert_eq!(r["http_allowed"], "ok:hello from 203.0.113.40\n", "{r}");
    assert_eq!(r["https_urllib"], "ok:hello from 203.0.113.40\n", "{r}");
    assert_eq!(r["requests"], "hello from 203.0.113.40\n", "{r}");
    // Refused: TLS with an alert curl reports, plain HTTP with a 403 that says why.
    assert_ne!(r["https_other"]["code"], 0, "{r}");
    assert!(
        r["http_other"]["out"]
            .as_str()
            .unwrap()
            .contains("not in the allow-list"),
        "{r}"
    );
    assert_eq!(denied(&v, "other.test", 443), "not in the allow-list");
    assert_eq!(denied(&v, "other.test", 80), "not in the allow-list");
    assert!(
        denied(&v, "private.test", 443).contains("not public"),
        "{v}"
    );
    assert!(denied(&v, "rebind.test", 443).contains("not public"), "{v}");
    assert!(
        denied(&v, "203.0.113.40", 80).contains("by name only"),
        "{v}"
    );
    assert!(denied(&v, "203.0.113.40", 443).contains("SNI"), "{v}");
    assert!(allowed_bytes(&v, "api.test", 443) > 0, "{v}");
    assert!(allowed_bytes(&v, "api.test", 80) > 0, "{v}");
    // What arrived: the allowed requests only; nothing at the private host; the sandbox's own
    // lookups never left the host.
    let inet = world.log("inet");
    assert!(inet.contains("http 203.0.113.40 /hello"), "{inet}");
    assert!(!inet.contains(" /x "), "{inet}");
    assert!(!inet.contains("never-asked-upstream"), "{inet}");
    assert!(!world.log("lan").contains("http "), "{}", world.log("lan"));
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn rules_change_on_a_live_sandbox_and_decisions_are_audited() {
    require_root!();
    let world = World::new();
    let server = common::serve_with(&world.settings());
    let a = &server.addr;
    let (status, body) = common::http_request(
        a,
        "POST",
        "/v1/sandboxes",
        "",
        r#"{"profile": "gw", "name": "patched"}"#,
    );
    assert_eq!(status, 201, "{body}");
    let ca = std::fs::read_to_string(world.path("ca.pem")).unwrap();
    let code = serde_json::json!({
        "code": format!("{}\nR['other'] = curl('https://other.test/patched')\nprint(json.dumps(R))", prelude(&ca))
    })
    .to_string();
    let exec = || {
        let (status, body) =
            common::http_request(a, "POST", "/v1/sandboxes/patched/exec", "", &code);
        assert_eq!(status, 200, "{body}");
        json(&body)
    };
    let before = exec();
    assert_eq!(denied(&before, "other.test", 443), "not in the allow-list");
    assert_ne!(report(&before)["other"]["code"], 0, "{before}");
    // Bad rules are refused with the field and why.
    let (status, body) = common::http_request(
        a,
        "PATCH",
        "/v1/sandboxes/patched/egress",
        "",
        r#"{"allow": ["other.test:99999"]}"#,
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = common::http_request(
        a,
        "PATCH",
        "/v1/sandboxes/patched/egress",
        "",
        r#"{"allow": ["api.test", "other.test:443"], "deny": []}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["allow"][1], "other.test:443");
    let after = exec();
    assert_eq!(
        report(&after)["other"]["out"],
        "hello from 203.0.113.41\n",
        "{after}"
    );
    assert!(after.get("egress_denied").is_none(), "{after}");
    assert!(allowed_bytes(&after, "other.test", 443) > 0, "{after}");
    assert!(world.log("inet").contains("http 203.0.113.41 /patched"));
    // The audit log has the refusal, the change and the connection, in that order.
    let (status, body) = common::http_request(a, "GET", "/v1/audit", "", "");
    assert_eq!(status, 200, "{body}");
    let events: Vec<String> = json(&body)["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .filter(|e| e.starts_with("egress"))
        .collect();
    assert_eq!(
        events,
        ["egress_denied", "egress_rules_changed", "egress_allowed"],
        "{body}"
    );
    destroy_and_leave_no_slot(a, "patched");
}

/// Destroys a sandbox through the daemon and waits until no network slot is left dirty: the
/// daemon is then killed by the test's end, and a networked sandbox still alive at that moment
/// would leave its slot to the next start's sweep (a crash's state), which the network
/// tests that run after this binary would see.
fn destroy_and_leave_no_slot(addr: &str, sandbox: &str) {
    let (status, body) =
        common::http_request(addr, "DELETE", &format!("/v1/sandboxes/{sandbox}"), "", "");
    assert_eq!(status, 200, "{body}");
    let dir = std::path::Path::new(warden_net::RUN_DIR);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while (0..64)
        .any(|slot| warden_net::host::slot_state(dir, slot) == warden_net::host::SlotState::Dirty)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a network slot is still dirty 10 s after {sandbox} was destroyed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_brokered_secret_reaches_its_host_only_and_the_sandbox_never_sees_it() {
    require_root!();
    let world = World::new();
    let v = world.py(
        "sec",
        r#"
import os, re, ssl
ph = os.environ["API_KEY"]
R["placeholder"] = ph
def curl_trusting_env(*a):
    p = subprocess.run(["curl", "-sS", "--max-time", "15", *a], capture_output=True, text=True)
    return {"code": p.returncode, "out": p.stdout[:300], "err": p.stderr[:300]}
auth = "Authorization: Bearer " + ph
R["curl"] = curl_trusting_env("-H", auth, "https://api.test/curl")
import requests
R["requests"] = requests.get("https://api.test/requests", headers={"Authorization": "Bearer " + ph}, timeout=15).text
req = urllib.request.Request("https://api.test/urllib", headers={"Authorization": "Bearer " + ph})
R["urllib"] = urllib.request.urlopen(req, timeout=15, context=ssl.create_default_context()).read().decode()
# The placeholder elsewhere: another header to the bound host, the bound header to another host.
R["other_header"] = curl_trusting_env("-H", "X-Api-Key: " + ph, "https://api.test/other-header")
R["other_host"] = curl("-H", auth, "https://other.test/other-host")
# Everything the program can read that could hold the value.
seen = {}
for k, val in os.environ.items():
    seen["env:" + k] = val
for path in ["/proc/self/environ", "/proc/self/cmdline", "/proc/1/environ", "/proc/1/cmdline"]:
    try:
        seen[path] = open(path, "rb").read().decode(errors="replace")
    except Exception as e:
        seen[path] = "unreadable:" + type(e).__name__
found = set()
for root in ["/etc", "/tmp", "/workspace", "/run", "/proc/self", "/proc/1"]:
    for d, dirs, files in os.walk(root):
        if d.startswith("/proc/") and d.count("/") > 3:
            dirs[:] = []
        for f in files:
            try:
                data = open(os.path.join(d, f), "rb").read(4 << 20)
            except Exception:
                continue
            found.update(m.decode() for m in re.findall(rb"sk-test-[A-Za-z0-9]+", data))
R["found"] = sorted(found)
# Init (cloned by the helper) is not dumpable: its memory cannot be read.
try:
    with open("/proc/1/mem", "rb") as f:
        f.read(1)
    R["init_mem"] = "readable"
except OSError as e:
    R["init_mem"] = type(e).__name__
bundle = open("/etc/warden/ca-bundle.pem").read()
R["bundle_has_key"] = "PRIVATE KEY" in bundle
R["bundle_certs"] = bundle.count("BEGIN CERTIFICATE")
try:
    open("/etc/warden/ca-bundle.pem", "a").write("x")
    R["bundle_writable"] = True
except OSError:
    R["bundle_writable"] = False
print(json.dumps(seen))
print(json.dumps(R))
"#,
    );
    let r = report(&v);
    let placeholder = r["placeholder"].as_str().unwrap().to_owned();
    assert!(placeholder.starts_with("WARDEN_SECRET_API_KEY_"), "{r}");
    for client in ["curl", "requests", "urllib"] {
        let got = match &r[client] {
            serde_json::Value::String(s) => s.clone(),
            other => other["out"].as_str().unwrap_or_default().to_owned(),
        };
        assert_eq!(got, "hello from 203.0.113.40\n", "{client}: {r}");
    }
    assert_eq!(r["other_header"]["out"], "hello from 203.0.113.40\n", "{r}");
    assert_eq!(r["other_host"]["out"], "hello from 203.0.113.41\n", "{r}");
    // The API got the value, three times, in the bound header only; the placeholder went
    // unchanged to another host and in another header.
    let inet = world.log("inet");
    let bearer = format!("header 203.0.113.40 authorization Bearer {SECRET}");
    assert_eq!(inet.matches(&bearer).count(), 3, "{inet}");
    assert!(
        inet.contains(&format!("header 203.0.113.40 x-api-key {placeholder}")),
        "{inet}"
    );
    assert!(
        inet.contains(&format!(
            "header 203.0.113.41 authorization Bearer {placeholder}"
        )),
        "{inet}"
    );
    assert!(!inet.contains(&format!("203.0.113.41 authorization Bearer {SECRET}")));
    // The sandbox: never the value, nowhere it looked; its bundle holds certificates only
    // and cannot be changed.
    assert!(
        !v.to_string().contains(SECRET),
        "the value reached the sandbox: {v}"
    );
    assert_eq!(r["found"], serde_json::json!([]), "{r}");
    assert_ne!(r["init_mem"], "readable", "{r}");
    assert_eq!(r["bundle_has_key"], false);
    assert_eq!(r["bundle_writable"], false);
    assert!(r["bundle_certs"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(
        v["secrets_used"],
        serde_json::json!([
            {"name": "api_key", "host": "api.test"},
            {"name": "api_key", "host": "api.test"},
            {"name": "api_key", "host": "api.test"}
        ]),
        "{v}"
    );
}

/// Attacks on the gateway itself: a name and an address that disagree, IP literals (IPv4 and
/// IPv6), the gateway's own port, UDP around it (DNS straight to a server), another protocol.
#[test]
fn attacks_on_the_gateway_are_refused() {
    require_root!();
    let world = World::new();
    let v = world.py(
        "gw",
        r#"
def raw(host, port, data, family=socket.AF_INET, t=10):
    try:
        s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(t)
        s.connect((host, port)); s.sendall(data)
        out = b""
        while True:
            c = s.recv(65536)
            if not c: break
            out += c
        return "ok:" + out.decode(errors="replace")[:300]
    except Exception as e:
        return "err:" + type(e).__name__
def udp(host, port, data, t=2):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(t)
        s.sendto(data, (host, port)); return "ok:" + repr(s.recv(512))
    except Exception as e:
        return "err:" + type(e).__name__
gw = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
# The address of the allowed name, the Host of another: the Host decides, and it is refused.
R["host_other"] = raw("203.0.113.40", 80, b"GET /a1 HTTP/1.1\r\nHost: other.test\r\n\r\n")
# A request line naming another host than its Host.
R["absolute"] = raw("203.0.113.40", 80, b"GET http://other.test/a2 HTTP/1.1\r\nHost: api.test\r\n\r\n")
# Two Host headers.
R["two_hosts"] = raw("203.0.113.40", 80, b"GET /a3 HTTP/1.1\r\nHost: api.test\r\nHost: other.test\r\n\r\n")
# SNI of the allowed name, Host of another inside TLS: it can only reach the allowed name.
R["sni_allowed_host_other"] = curl("--resolve", "api.test:443:203.0.113.41", "-H", "Host: other.test", "https://api.test/a4")
# SNI of a refused name sent to the allowed name's address.
R["sni_other"] = curl("--resolve", "other.test:443:203.0.113.40", "https://other.test/a5")
# IPv6 literal (no route needed: every TCP connection goes to the gateway).
R["ipv6_literal"] = raw("2001:db8:ffff::1", 80, b"GET /a6 HTTP/1.1\r\nHost: [2001:db8:ffff::1]\r\n\r\n", socket.AF_INET6)
# The gateway's own port, on its own address, asking for a refused name.
R["gateway_port"] = raw(gw, 15001, b"GET /a7 HTTP/1.1\r\nHost: other.test\r\n\r\n")
# Not HTTP, not TLS.
R["ssh"] = raw("203.0.113.40", 22, b"SSH-2.0-OpenSSH_9.0\r\n")
# Around the gateway: UDP to the world's echo and its DNS server.
R["udp_echo"] = udp("203.0.113.40", 7, b"ping")
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03api\x04test\x00\x00\x01\x00\x01"
R["dns_direct"] = udp("203.0.113.40", 53, q)
# No other process of the host is visible (the gateway and its keys among them).
R["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:5]
print(json.dumps(R))
"#
        .replace("os.listdir", "__import__('os').listdir")
        .as_str(),
    );
    let r = report(&v);
    let text = |k: &str| r[k].as_str().unwrap().to_owned();
    assert!(text("host_other").contains("403 Forbidden"), "{r}");
    assert_eq!(denied(&v, "other.test", 80), "not in the allow-list");
    assert!(text("absolute").contains("another host"), "{r}");
    assert!(text("two_hosts").contains("403"), "{r}");
    assert_eq!(
        r["sni_allowed_host_other"]["out"], "hello from 203.0.113.40\n",
        "{r}"
    );
    assert_ne!(r["sni_other"]["code"], 0, "{r}");
    assert_eq!(denied(&v, "other.test", 443), "not in the allow-list");
    assert!(text("ipv6_literal").contains("by name only"), "{r}");
    assert!(
        denied(&v, "2001:db8:ffff::1", 80).contains("by name only"),
        "{v}"
    );
    assert!(text("gateway_port").contains("403"), "{r}");
    assert!(
        denied(&v, "other.test", 15001).contains("allow-list"),
        "{v}"
    );
    assert!(!text("ssh").contains("SSH"), "{r}");
    assert!(text("udp_echo").starts_with("err:"), "{r}");
    assert!(text("dns_direct").starts_with("err:"), "{r}");
    assert_eq!(r["pids"][0], 1, "{r}");
    // Nothing of it reached another host than the allowed one: the refused name's server saw
    // no request at all, and the Host inside TLS went to the allowed name's server.
    let inet = world.log("inet");
    assert!(!inet.contains("203.0.113.41"), "{inet}");
    assert!(!inet.contains("udp "), "{inet}");
    assert!(
        !inet.contains("/a1") && !inet.contains("/a2") && !inet.contains("/a3"),
        "{inet}"
    );
    assert!(inet.contains("http 203.0.113.40 /a4"), "{inet}");
}

/// The documented limit of brokered secrets: a bound host that echoes the request's headers
/// hands the value back to the program. Bind a secret only to hosts that never echo it.
#[test]
fn a_bound_host_that_echoes_headers_shows_the_value_the_documented_limit() {
    require_root!();
    let world = World::new();
    let v = world.py(
        "sec",
        r#"
import os
p = subprocess.run(["curl", "-sS", "--max-time", "15", "-H", "Authorization: Bearer " + os.environ["API_KEY"], "https://api.test/echo"], capture_output=True, text=True)
print(p.stdout)
"#,
    );
    assert!(stdout_of(&v).contains(SECRET), "{v}");
}

/// Runs Python in a docker profile through `warden run` (not in a pid namespace of its own:
/// the keeper must see the container's first process); returns the result JSON.
fn docker_py(world: &World, profile: &str, code: &str) -> serde_json::Value {
    let settings = world.settings();
    let mut child = Command::new(common::warden())
        .args([
            "--config",
            settings.to_str().unwrap(),
            "run",
            "--json",
            "--profile",
            profile,
            "-l",
            "python",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(code.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    v
}

/// The docker backend: the same redirect and gateway, held by the container's network keeper,
/// and the same report in the result (refusals with their reasons, connections with bytes).
#[test]
fn docker_a_container_goes_through_the_same_gateway_and_reports_it() {
    require_docker!();
    let world = World::new();
    let v = docker_py(
        &world,
        "d_gw",
        r#"
import json, urllib.request, urllib.error
R = {}
R["allowed"] = urllib.request.urlopen("http://api.test/docker", timeout=15).read().decode()
try:
    urllib.request.urlopen("http://other.test/docker", timeout=15)
    R["other"] = "reached"
except urllib.error.HTTPError as e:
    R["other"] = str(e.code) + " " + e.read().decode()
print(json.dumps(R))
"#,
    );
    let r = report(&v);
    assert_eq!(r["allowed"], "hello from 203.0.113.40\n", "{r}");
    assert_eq!(
        r["other"], "403 warden egress gateway: other.test:80 refused: not in the allow-list\n",
        "{r}"
    );
    assert_eq!(denied(&v, "other.test", 80), "not in the allow-list");
    assert!(allowed_bytes(&v, "api.test", 80) > 0, "{v}");
    assert!(world.log("inet").contains("http 203.0.113.40 /docker"));
    assert!(!world.log("inet").contains("203.0.113.41"));
}

/// Brokered secrets on the docker backend: the container sees the placeholder and trusts its
/// gateway's CA through the bundle bound read-only and the usual variables; the API gets the
/// value in the bound header; the value is nowhere the container can read, nor in the
/// engine's view of the container (its configuration and environment).
#[test]
fn docker_a_brokered_secret_reaches_its_host_only_and_the_container_never_sees_it() {
    require_docker!();
    let world = World::new();
    let v = docker_py(
        &world,
        "d_sec",
        r#"
import json, os, re, ssl, urllib.request
R = {}
ph = os.environ["API_KEY"]
R["placeholder"] = ph
R["vars"] = {k: os.environ.get(k) for k in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "PIP_CERT"]}
def get(url, headers):
    req = urllib.request.Request(url, headers=headers)
    return urllib.request.urlopen(req, timeout=15, context=ssl.create_default_context()).read().decode()
R["bound"] = get("https://api.test/docker-secret", {"Authorization": "Bearer " + ph})
R["other_header"] = get("https://api.test/docker-other-header", {"X-Api-Key": ph})
found = set()
for root in ["/etc", "/tmp", "/workspace", "/run", "/proc/self", "/proc/1"]:
    for d, dirs, files in os.walk(root):
        if d.startswith("/proc/") and d.count("/") > 3:
            dirs[:] = []
        if d.endswith("/fd"):
            # The wrapper's stdin is the engine's attach stream: reading it would wait forever.
            continue
        for f in files:
            try:
                data = open(os.path.join(d, f), "rb").read(4 << 20)
            except Exception:
                continue
            found.update(m.decode() for m in re.findall(rb"sk-test-[A-Za-z0-9]+", data))
R["found"] = sorted(found)
bundle = open("/etc/warden/ca-bundle.pem").read()
R["bundle_has_key"] = "PRIVATE KEY" in bundle
R["bundle_certs"] = bundle.count("BEGIN CERTIFICATE")
try:
    open("/etc/warden/ca-bundle.pem", "a").write("x")
    R["bundle_writable"] = True
except OSError:
    R["bundle_writable"] = False
print(json.dumps(R))
"#,
    );
    let r = report(&v);
    let placeholder = r["placeholder"].as_str().unwrap().to_owned();
    assert!(placeholder.starts_with("WARDEN_SECRET_API_KEY_"), "{r}");
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
    ] {
        assert_eq!(r["vars"][var], "/etc/warden/ca-bundle.pem", "{r}");
    }
    assert_eq!(r["bound"], "hello from 203.0.113.40\n", "{r}");
    assert_eq!(r["other_header"], "hello from 203.0.113.40\n", "{r}");
    let inet = world.log("inet");
    assert_eq!(
        inet.matches(&format!(
            "header 203.0.113.40 authorization Bearer {SECRET}"
        ))
        .count(),
        1,
        "{inet}"
    );
    assert!(
        inet.contains(&format!("header 203.0.113.40 x-api-key {placeholder}")),
        "{inet}"
    );
    assert!(!v.to_string().contains(SECRET), "{v}");
    assert_eq!(r["found"], serde_json::json!([]), "{r}");
    assert_eq!(r["bundle_has_key"], false, "{r}");
    assert_eq!(r["bundle_writable"], false, "{r}");
    assert!(r["bundle_certs"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(
        v["secrets_used"],
        serde_json::json!([{"name": "api_key", "host": "api.test"}]),
        "{v}"
    );
}

/// A persistent docker sandbox through the daemon: each execution's result has its own
/// refusals and connections; the secret works in each; the engine's view of the container
/// (`docker inspect`: its configuration and environment) holds the placeholder, never the
/// value.
#[test]
fn docker_a_persistent_sandbox_reports_each_execution_and_the_engine_never_holds_the_value() {
    require_docker!();
    let world = World::new();
    let server = common::serve_with(&world.settings());
    let a = &server.addr;
    let (status, body) = common::http_request(
        a,
        "POST",
        "/v1/sandboxes",
        "",
        r#"{"profile": "d_sec", "name": "dsec"}"#,
    );
    assert_eq!(status, 201, "{body}");
    let container = format!("warden-{}", json(&body)["id"].as_str().unwrap());
    let exec = |code: &str| {
        let body = serde_json::json!({ "code": code }).to_string();
        let (status, body) = common::http_request(a, "POST", "/v1/sandboxes/dsec/exec", "", &body);
        assert_eq!(status, 200, "{body}");
        json(&body)
    };
    let code = r#"
import os, ssl, urllib.request, urllib.error
req = urllib.request.Request("https://api.test/persistent", headers={"Authorization": "Bearer " + os.environ["API_KEY"]})
print(urllib.request.urlopen(req, timeout=15, context=ssl.create_default_context()).read().decode(), end="")
try:
    urllib.request.urlopen("http://private.test/p", timeout=15)
except urllib.error.HTTPError as e:
    print(e.code)
"#;
    for _ in 0..2 {
        let v = exec(code);
        assert_eq!(v["stdout"], "hello from 203.0.113.40\n403\n", "{v}");
        assert_eq!(denied(&v, "private.test", 80), "not in the allow-list");
        assert_eq!(v["egress_denied"].as_array().unwrap().len(), 1, "{v}");
        assert_eq!(
            v["secrets_used"],
            serde_json::json!([{"name": "api_key", "host": "api.test"}]),
            "{v}"
        );
    }
    // New rules reach the container's running gateway at once (live, no restart): the
    // workspace's file from before is still there.
    let v = exec("open('kept.txt', 'w').write('kept')");
    assert_eq!(v["exit_code"], 0, "{v}");
    let (status, body) = common::http_request(
        a,
        "PATCH",
        "/v1/sandboxes/dsec/egress",
        "",
        r#"{"allow": ["api.test", "other.test"]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let v = exec(
        "import urllib.request\nprint(open('kept.txt').read(), urllib.request.urlopen('http://other.test/live', timeout=15).read().decode(), end='')",
    );
    assert_eq!(v["stdout"], "kept hello from 203.0.113.41\n", "{v}");
    assert!(allowed_bytes(&v, "other.test", 80) > 0, "{v}");
    assert!(world.log("inet").contains("http 203.0.113.41 /live"));
    let inspect = Command::new("docker")
        .args(["inspect", &container])
        .output()
        .unwrap();
    assert!(inspect.status.success());
    let inspect = String::from_utf8_lossy(&inspect.stdout);
    assert!(inspect.contains("WARDEN_SECRET_API_KEY_"), "{inspect}");
    assert!(!inspect.contains(SECRET), "{inspect}");
    assert_eq!(
        world
            .log("inet")
            .matches(&format!(
                "header 203.0.113.40 authorization Bearer {SECRET}"
            ))
            .count(),
        2
    );
    destroy_and_leave_no_slot(a, "dsec");
}

/// A context (a long-lived interpreter) of a sandbox with a gateway: each cell's result has
/// the refusals its code met.
#[test]
fn a_context_cell_reports_its_refusals() {
    require_root!();
    let world = World::new();
    let server = common::serve_with(&world.settings());
    let a = &server.addr;
    let (status, body) = common::http_request(
        a,
        "POST",
        "/v1/sandboxes",
        "",
        r#"{"profile": "gw", "name": "ctx"}"#,
    );
    assert_eq!(status, 201, "{body}");
    let cell = |code: &str| {
        let body = serde_json::json!({"code": code, "context": "default"}).to_string();
        let (status, body) = common::http_request(a, "POST", "/v1/sandboxes/ctx/exec", "", &body);
        assert_eq!(status, 200, "{body}");
        json(&body)
    };
    let first = cell(
        "import urllib.request\ntry:\n    urllib.request.urlopen('http://other.test/ctx', timeout=15)\nexcept Exception as e:\n    print(type(e).__name__)",
    );
    assert_eq!(first["stdout"], "HTTPError\n", "{first}");
    assert_eq!(denied(&first, "other.test", 80), "not in the allow-list");
    let second =
        cell("print(urllib.request.urlopen('http://api.test/ctx', timeout=15).read().decode())");
    assert_eq!(second["stdout"], "hello from 203.0.113.40\n\n", "{second}");
    assert!(second.get("egress_denied").is_none(), "{second}");
    destroy_and_leave_no_slot(a, "ctx");
}

/// A running context of a jail sandbox gets changed rules at its next cell: its session's
/// gateway kept the old ones, so its interpreter is restarted first and the cell's result says
/// so (`context_restarted`); a cell after that is not restarted again.
#[test]
fn a_running_context_gets_changed_rules_at_its_next_cell_by_a_restart() {
    require_root!();
    let world = World::new();
    let server = common::serve_with(&world.settings());
    let a = &server.addr;
    let (status, body) = common::http_request(
        a,
        "POST",
        "/v1/sandboxes",
        "",
        r#"{"profile": "gw", "name": "ctxrules"}"#,
    );
    assert_eq!(status, 201, "{body}");
    let cell = |code: &str| {
        let body = serde_json::json!({"code": code, "context": "default"}).to_string();
        let (status, body) =
            common::http_request(a, "POST", "/v1/sandboxes/ctxrules/exec", "", &body);
        assert_eq!(status, 200, "{body}");
        json(&body)
    };
    let fetch = "import urllib.request\ntry:\n    print(urllib.request.urlopen('http://other.test/ctxrules', timeout=15).read().decode(), end='')\nexcept Exception as e:\n    print(type(e).__name__)";
    let first = cell(&format!("x = 1\n{fetch}"));
    assert_eq!(first["stdout"], "HTTPError\n", "{first}");
    let (status, body) = common::http_request(
        a,
        "PATCH",
        "/v1/sandboxes/ctxrules/egress",
        "",
        r#"{"allow": ["api.test", "other.test"]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let second = cell(&format!("print('x' in globals())\n{fetch}"));
    assert_eq!(
        second["stdout"], "False\nhello from 203.0.113.41\n",
        "{second}"
    );
    assert_eq!(second["context_restarted"], true, "{second}");
    let third = cell(fetch);
    assert_eq!(third["stdout"], "hello from 203.0.113.41\n", "{third}");
    assert_ne!(third["context_restarted"], true, "{third}");
    destroy_and_leave_no_slot(a, "ctxrules");
}

/// More real clients: Node's `fetch` (undici, trusting the test CA through
/// `NODE_EXTRA_CA_CERTS`) and `pip download` from a package index served over HTTPS by the
/// allowed host; the refused host's index is refused with the reason in the result.
#[test]
fn node_fetch_and_pip_download_go_through_the_gateway() {
    require_root!();
    prerequisite!(common::missing_path(
        "/usr/bin/node",
        "Node 20, scripts/setup-tests.sh"
    ));
    prerequisite!(common::missing_path(
        "/usr/lib/python3/dist-packages/pip",
        "python3-pip, scripts/setup-tests.sh"
    ));
    let world = World::new();
    let v = world.py(
        "gw",
        r#"
import os, sys
def node(url):
    js = "fetch(process.argv[1]).then(r => r.text()).then(t => console.log('ok:' + t.trim()), e => console.log('err:' + ((e.cause && e.cause.code) || e.message)))"
    env = dict(os.environ, NODE_EXTRA_CA_CERTS=os.path.abspath("ca.pem"))
    p = subprocess.run(["node", "-e", js, url], capture_output=True, text=True, env=env, timeout=60)
    return (p.stdout + p.stderr).strip()[:300]
def pip(index):
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
        "--disable-pip-version-check", "--retries", "0", "--timeout", "15", "--cert", "ca.pem",
        "--index-url", index, "-d", "dl", "tinypkg"], capture_output=True, text=True, timeout=120)
    return {"code": p.returncode, "out": (p.stdout + p.stderr)[-400:]}
R["node_allowed"] = node("https://api.test/node")
R["node_other"] = node("https://other.test/node")
R["pip_allowed"] = pip("https://api.test/simple/")
R["pip_other"] = pip("https://other.test/simple/")
R["downloaded"] = sorted(os.listdir("dl")) if os.path.isdir("dl") else []
print(json.dumps(R))
"#,
    );
    let r = report(&v);
    assert_eq!(r["node_allowed"], "ok:hello from 203.0.113.40", "{r}");
    assert!(r["node_other"].as_str().unwrap().starts_with("err:"), "{r}");
    assert_eq!(r["pip_allowed"]["code"], 0, "{r}");
    assert_eq!(
        r["downloaded"],
        serde_json::json!(["tinypkg-0.1-py3-none-any.whl"]),
        "{r}"
    );
    assert_ne!(r["pip_other"]["code"], 0, "{r}");
    assert_eq!(denied(&v, "other.test", 443), "not in the allow-list");
    assert!(allowed_bytes(&v, "api.test", 443) > 0, "{v}");
    let inet = world.log("inet");
    assert!(inet.contains("http 203.0.113.40 /node"), "{inet}");
    assert!(
        inet.contains("http 203.0.113.40 /simple/tinypkg/"),
        "{inet}"
    );
    assert!(
        inet.contains("http 203.0.113.40 /packages/tinypkg-0.1-py3-none-any.whl"),
        "{inet}"
    );
    assert!(!inet.contains("203.0.113.41"), "{inet}");
}

/// Brokered secrets with Node's `fetch` and pip, trusting the gateway's CA only through the
/// variables the sandbox is given (`NODE_EXTRA_CA_CERTS`, `PIP_CERT`): the value reaches the
/// API in the bound header; pip's index on the bound host works through the broker.
#[test]
fn node_fetch_and_pip_use_a_brokered_secret_through_the_sandboxs_variables() {
    require_root!();
    prerequisite!(common::missing_path(
        "/usr/bin/node",
        "Node 20, scripts/setup-tests.sh"
    ));
    prerequisite!(common::missing_path(
        "/usr/lib/python3/dist-packages/pip",
        "python3-pip, scripts/setup-tests.sh"
    ));
    let world = World::new();
    let v = world.py(
        "sec",
        r#"
import os, sys
js = "fetch('https://api.test/node-secret', {headers: {Authorization: 'Bearer ' + process.env.API_KEY}}).then(r => r.text()).then(t => console.log('ok:' + t.trim()), e => console.log('err:' + ((e.cause && e.cause.code) || e.message)))"
p = subprocess.run(["node", "-e", js], capture_output=True, text=True, timeout=60)
R["node"] = (p.stdout + p.stderr).strip()[:300]
p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
    "--disable-pip-version-check", "--retries", "0", "--timeout", "15",
    "--index-url", "https://api.test/simple/", "-d", "dl", "tinypkg"], capture_output=True, text=True, timeout=120)
R["pip"] = {"code": p.returncode, "out": (p.stdout + p.stderr)[-400:]}
R["downloaded"] = sorted(os.listdir("dl")) if os.path.isdir("dl") else []
print(json.dumps(R))
"#,
    );
    let r = report(&v);
    assert_eq!(r["node"], "ok:hello from 203.0.113.40", "{r}");
    assert_eq!(r["pip"]["code"], 0, "{r}");
    assert_eq!(
        r["downloaded"],
        serde_json::json!(["tinypkg-0.1-py3-none-any.whl"]),
        "{r}"
    );
    let inet = world.log("inet");
    assert_eq!(
        inet.matches(&format!(
            "header 203.0.113.40 authorization Bearer {SECRET}"
        ))
        .count(),
        1,
        "{inet}"
    );
    assert!(!v.to_string().contains(SECRET), "{v}");
}
