//! The egress gateway of networked jail sandboxes (`egress.gateway`), end to end through the
//! real binary and real clients (curl, Python's urllib and requests, Node's fetch, pip),
//! against the gateway's test internet (`common::gateway_world`: `api.test` allowed,
//! `other.test` refused, `private.test` and `rebind.test` resolving to addresses the gateway
//! never dials). Attacks on the gateway are programs of the attack suite
//! (`tests/attacks/gw_*.py`, run by `attacks.rs` against the same world).

mod common;

use common::gateway_world::{API, GatewayWorld, SECRET};
use common::{stdout_of, warden_cmd};
use std::path::PathBuf;
use std::process::Command;

/// The gateway world and this file's settings.
struct World {
    net: GatewayWorld,
}

impl World {
    fn new() -> World {
        let world = World {
            net: GatewayWorld::up(),
        };
        world.write_settings();
        world
    }

    fn path(&self, name: &str) -> PathBuf {
        self.net.path(name)
    }

    fn log(&self, host: &str) -> String {
        self.net.log(host)
    }

    fn settings(&self) -> PathBuf {
        self.path("settings.toml")
    }

    fn write_settings(&self) {
        let net = "network_enabled = true\nenabled_policies = []\ntimeout_seconds = 60\n";
        std::fs::write(
            self.settings(),
            format!(
                "[sandbox]\ndefault_profile = \"gw\"\n{}\
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
                 [sandbox.profiles.open.egress.gateway]\ndeny = [\"other.test:443\"]\n",
                self.net.settings()
            ),
        )
        .unwrap();
    }

    /// Runs Python (after `prelude`) in a profile; returns the result JSON (which must not be
    /// an error). Docker profiles (`d_*`) run outside an outer pid namespace (see
    /// `common::warden_direct`).
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
        let code = format!("{}\n{code}", prelude(&self.net.ca()));
        let out = if profile.starts_with("d_") {
            common::warden_direct(&args, &code, |_| {})
        } else {
            warden_cmd(&args, &code)
        };
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

    /// Runs `code` (whose report `R` has the placeholder it got in `R["placeholder"]`), then
    /// `SEARCH_FOR_THE_VALUE`; the result, the report and the placeholder, which must look
    /// like one.
    fn py_with_secret(
        &self,
        profile: &str,
        code: &str,
    ) -> (serde_json::Value, serde_json::Value, String) {
        let v = self.py(
            profile,
            &format!("{code}{SEARCH_FOR_THE_VALUE}\nprint(json.dumps(R))"),
        );
        let r = report(&v);
        let placeholder = r["placeholder"].as_str().unwrap().to_owned();
        assert!(placeholder.starts_with("WARDEN_SECRET_API_KEY_"), "{r}");
        (v, r, placeholder)
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

/// A persistent sandbox, made through the daemon at `addr`.
struct Sandbox<'a> {
    addr: &'a str,
    name: &'a str,
    /// Its id, as the daemon gave it.
    id: String,
}

impl<'a> Sandbox<'a> {
    fn create(addr: &'a str, profile: &str, name: &'a str) -> Sandbox<'a> {
        let body = serde_json::json!({"profile": profile, "name": name}).to_string();
        let (status, body) = common::http_request(addr, "POST", "/v1/sandboxes", "", &body);
        assert_eq!(status, 201, "{body}");
        let id = json(&body)["id"].as_str().unwrap().to_owned();
        Sandbox { addr, name, id }
    }

    /// Runs `code`; the result, which must be answered with 200.
    fn exec(&self, code: &str) -> serde_json::Value {
        self.exec_body(serde_json::json!({ "code": code }))
    }

    /// Runs `code` as a cell of the context `default`.
    fn cell(&self, code: &str) -> serde_json::Value {
        self.exec_body(serde_json::json!({"code": code, "context": "default"}))
    }

    fn exec_body(&self, body: serde_json::Value) -> serde_json::Value {
        let path = format!("/v1/sandboxes/{}/exec", self.name);
        let (status, body) = common::http_request(self.addr, "POST", &path, "", &body.to_string());
        assert_eq!(status, 200, "{body}");
        json(&body)
    }

    /// `PATCH …/egress` with `rules`; the status and the body.
    fn change_rules(&self, rules: &str) -> (u16, String) {
        let path = format!("/v1/sandboxes/{}/egress", self.name);
        common::http_request(self.addr, "PATCH", &path, "", rules)
    }

    /// Destroys it and waits until no network slot is left dirty: the daemon is then killed by
    /// the test's end, and a networked sandbox still alive at that moment would leave its slot
    /// to the next start's sweep (a crash's state), which the network tests that run after
    /// this binary would see.
    fn destroy(self) {
        let path = format!("/v1/sandboxes/{}", self.name);
        let (status, body) = common::http_request(self.addr, "DELETE", &path, "", "");
        assert_eq!(status, 200, "{body}");
        let dir = std::path::Path::new(warden_net::RUN_DIR);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while (0..64).any(|slot| {
            warden_net::host::slot_state(dir, slot) == warden_net::host::SlotState::Dirty
        }) {
            assert!(
                std::time::Instant::now() < deadline,
                "a network slot is still dirty 10 s after {} was destroyed",
                self.name
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// How many requests reached the test API with the brokered value in the bound header.
fn value_arrivals(world: &World) -> usize {
    world
        .log("inet")
        .matches(&format!("header {API} authorization Bearer {SECRET}"))
        .count()
}

/// Python that searches everything the sandbox can read for the value (`R["found"]`: what
/// looks like it), and checks its CA bundle (`R["bundle_…"]`); `assert_nothing_holds_it`
/// checks the report.
const SEARCH_FOR_THE_VALUE: &str = r#"
import os, re
found = set()
for root in ["/etc", "/tmp", "/workspace", "/run", "/proc/self", "/proc/1"]:
    for d, dirs, files in os.walk(root):
        if d.startswith("/proc/") and d.count("/") > 3:
            dirs[:] = []
        if d.endswith("/fd"):
            # A docker wrapper's stdin is the engine's attach stream: reading it would wait forever.
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
"#;

/// The sandbox's side of a brokered secret: never the value, in the result or anywhere it
/// looked (`SEARCH_FOR_THE_VALUE`); its bundle holds certificates only and cannot be changed.
fn assert_nothing_holds_it(v: &serde_json::Value, r: &serde_json::Value) {
    assert!(
        !v.to_string().contains(SECRET),
        "the value reached the sandbox: {v}"
    );
    assert_eq!(r["found"], serde_json::json!([]), "{r}");
    assert_eq!(r["bundle_has_key"], false, "{r}");
    assert_eq!(r["bundle_writable"], false, "{r}");
    assert!(r["bundle_certs"].as_u64().unwrap() >= 1, "{r}");
}

#[test]
fn rules_change_on_a_live_sandbox_and_decisions_are_audited() {
    require_root!();
    let world = World::new();
    let server = common::serve_with(&world.settings());
    let a = &server.addr;
    let sandbox = Sandbox::create(a, "gw", "patched");
    let code = format!(
        "{}\nR['other'] = curl('https://other.test/patched')\nprint(json.dumps(R))",
        prelude(&world.net.ca())
    );
    let before = sandbox.exec(&code);
    assert_eq!(denied(&before, "other.test", 443), "not in the allow-list");
    assert_ne!(report(&before)["other"]["code"], 0, "{before}");
    // Bad rules are refused with the field and why.
    let (status, body) = sandbox.change_rules(r#"{"allow": ["other.test:99999"]}"#);
    assert_eq!(status, 400, "{body}");
    let (status, body) =
        sandbox.change_rules(r#"{"allow": ["api.test", "other.test:443"], "deny": []}"#);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["allow"][1], "other.test:443");
    let after = sandbox.exec(&code);
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
    sandbox.destroy();
}

#[test]
fn a_brokered_secret_reaches_its_host_only_and_the_sandbox_never_sees_it() {
    require_root!();
    let world = World::new();
    let code = r#"
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
print(json.dumps(seen))
"#;
    // (Init's and the gateway's memory: the attack suite's gw_read_ca_key.py.)
    let (v, r, placeholder) = world.py_with_secret("sec", code);
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
    assert_eq!(value_arrivals(&world), 3, "{inet}");
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
    assert_nothing_holds_it(&v, &r);
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

/// The docker backend: the same redirect and gateway, held by the container's network keeper,
/// and the same report in the result (refusals with their reasons, connections with bytes).
#[test]
fn docker_a_container_goes_through_the_same_gateway_and_reports_it() {
    require_docker!();
    let world = World::new();
    let v = world.py(
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
    let code = r#"
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
"#;
    let (v, r, placeholder) = world.py_with_secret("d_sec", code);
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
    assert_eq!(value_arrivals(&world), 1, "{inet}");
    assert!(
        inet.contains(&format!("header 203.0.113.40 x-api-key {placeholder}")),
        "{inet}"
    );
    assert_nothing_holds_it(&v, &r);
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
    let sandbox = Sandbox::create(a, "d_sec", "dsec");
    let container = format!("warden-{}", sandbox.id);
    let exec = |code: &str| sandbox.exec(code);
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
    let (status, body) = sandbox.change_rules(r#"{"allow": ["api.test", "other.test"]}"#);
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
    assert_eq!(value_arrivals(&world), 2);
    sandbox.destroy();
}

/// A context (a long-lived interpreter) of a sandbox with a gateway: each cell's result has
/// the refusals its code met.
#[test]
fn a_context_cell_reports_its_refusals() {
    require_root!();
    let world = World::new();
    let server = common::serve_with(&world.settings());
    let a = &server.addr;
    let sandbox = Sandbox::create(a, "gw", "ctx");
    let first = sandbox.cell(
        "import urllib.request\ntry:\n    urllib.request.urlopen('http://other.test/ctx', timeout=15)\nexcept Exception as e:\n    print(type(e).__name__)",
    );
    assert_eq!(first["stdout"], "HTTPError\n", "{first}");
    assert_eq!(denied(&first, "other.test", 80), "not in the allow-list");
    let second = sandbox
        .cell("print(urllib.request.urlopen('http://api.test/ctx', timeout=15).read().decode())");
    assert_eq!(second["stdout"], "hello from 203.0.113.40\n\n", "{second}");
    assert!(second.get("egress_denied").is_none(), "{second}");
    sandbox.destroy();
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
    let sandbox = Sandbox::create(a, "gw", "ctxrules");
    let cell = |code: &str| sandbox.cell(code);
    let fetch = "import urllib.request\ntry:\n    print(urllib.request.urlopen('http://other.test/ctxrules', timeout=15).read().decode(), end='')\nexcept Exception as e:\n    print(type(e).__name__)";
    let first = cell(&format!("x = 1\n{fetch}"));
    assert_eq!(first["stdout"], "HTTPError\n", "{first}");
    let (status, body) = sandbox.change_rules(r#"{"allow": ["api.test", "other.test"]}"#);
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
    sandbox.destroy();
}

/// Why Node or pip, the clients of the two tests below, cannot be used here, if they cannot.
fn missing_node_or_pip() -> Option<String> {
    common::missing_path("/usr/bin/node", "Node 20, scripts/setup-tests.sh").or_else(|| {
        common::missing_path(
            "/usr/lib/python3/dist-packages/pip",
            "python3-pip, scripts/setup-tests.sh",
        )
    })
}

/// More real clients: Node's `fetch` (undici, trusting the test CA through
/// `NODE_EXTRA_CA_CERTS`) and `pip download` from a package index served over HTTPS by the
/// allowed host; the refused host's index is refused with the reason in the result.
#[test]
fn node_fetch_and_pip_download_go_through_the_gateway() {
    require_root!();
    prerequisite!(missing_node_or_pip());
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
    prerequisite!(missing_node_or_pip());
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
    assert_eq!(value_arrivals(&world), 1, "{inet}");
    assert!(!v.to_string().contains(SECRET), "{v}");
}
