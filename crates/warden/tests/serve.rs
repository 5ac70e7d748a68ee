//! `warden serve` with the real jail: one-shot execution over HTTP, JSON and NDJSON.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// The child is waited for by `Server`'s drop, or on every early return here.
#[allow(clippy::zombie_processes)]
fn start() -> Server {
    let mut child = Command::new(common::warden())
        .args([
            "--config",
            common::settings().to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
            let addr = addr.to_owned();
            // Keep reading (and dropping) the log so the server never blocks on a full pipe.
            std::thread::spawn(move || {
                let mut sink = String::new();
                while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
                    sink.clear();
                }
            });
            return Server { child, addr };
        }
        seen.push_str(&line);
    }
}

/// A minimal HTTP/1.1 POST; returns the status code and the body.
fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    request(addr, "POST", path, body.as_bytes())
}

/// A minimal HTTP/1.1 request; returns the status code and the body (as text).
fn request(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    (status, body)
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, tail) = rest.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
}

#[test]
fn one_shot_execution_over_http() {
    require_root!();
    let server = start();
    let (status, body) = post(&server.addr, "/v1/execute", r#"{"code": "print(6 * 7)"}"#);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["stdout"], "42\n");
    assert_eq!(v["reason"], "exited");

    let (status, body) = post(
        &server.addr,
        "/v1/execute",
        r#"{"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(2)", "stream": true}"#,
    );
    assert_eq!(status, 200);
    let events: Vec<serde_json::Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(events.iter().any(|e| e["type"] == "stdout"), "{body}");
    assert!(events.iter().any(|e| e["type"] == "stderr"), "{body}");
    let end = events.last().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["exit_code"].as_i64()),
        (Some("end"), Some(2))
    );

    let (status, body) = post(
        &server.addr,
        "/v1/execute",
        r#"{"code": "import time; time.sleep(5)", "timeout_seconds": 1}"#,
    );
    assert_eq!(status, 200);
    assert!(body.contains(r#""reason":"timeout""#), "{body}");

    // Piston's route, in another language, with arguments.
    let (status, body) = post(
        &server.addr,
        "/api/v2/execute",
        r#"{"language": "javascript", "version": "*", "files": [{"content": "console.log(process.argv[2])"}], "args": ["hi"]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["run"]["stdout"], "hi\n");
    assert_eq!(v["language"], "javascript");

    let (status, body) = post(&server.addr, "/v1/execute", r#"{"code": 1}"#);
    assert_eq!(status, 400, "{body}");
    let (status, _) = post(
        &server.addr,
        "/v1/execute",
        r#"{"code": "x", "profile": "networked"}"#,
    );
    assert_eq!(status, 503);
}

#[test]
fn a_non_loopback_address_is_refused() {
    let out = Command::new(common::warden())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs API keys"));
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn sandboxes_over_http_share_a_workspace_and_files() {
    require_root!();
    let server = start();
    let a = &server.addr;
    let (status, body) = post(
        a,
        "/v1/sandboxes",
        r#"{"profile": "test", "name": "analysis", "labels": {"team": "x"}}"#,
    );
    assert_eq!(status, 201, "{body}");
    let info = json(&body);
    let id = info["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("analysis-"), "{id}");
    assert_eq!(info["language"], "python");
    assert_eq!(info["executions"], 0);
    // Names are unique among live sandboxes.
    let (status, _) = post(
        a,
        "/v1/sandboxes",
        r#"{"profile": "test", "name": "analysis"}"#,
    );
    assert_eq!(status, 409);

    let (status, body) = request(
        a,
        "PUT",
        &format!("/v1/sandboxes/{id}/files/data/in.txt"),
        b"21",
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "n = int(open('data/in.txt').read())\nopen('out.txt', 'w').write(str(n * 2))\nprint(n)"}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["stdout"], "21\n");
    // The next execution sees the file; so does a download; by name as well as by id.
    let (status, body) = post(
        a,
        "/v1/sandboxes/analysis/exec",
        r#"{"code": "print(open('out.txt').read())"}"#,
    );
    assert_eq!(
        (status, json(&body)["stdout"].as_str()),
        (200, Some("42\n")),
        "{body}"
    );
    let (status, body) = request(a, "GET", &format!("/v1/sandboxes/{id}/files/out.txt"), b"");
    assert_eq!((status, body.as_str()), (200, "42"));
    let (status, body) = request(a, "GET", &format!("/v1/sandboxes/{id}/files"), b"");
    assert_eq!(status, 200);
    let paths: Vec<_> = json(&body)["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paths, ["data", "data/in.txt", "out.txt", "output"]);
    // Paths cannot leave the workspace.
    for bad in ["../etc/passwd", "%2Fetc%2Fpasswd", "a/../../x"] {
        let (status, body) = request(a, "GET", &format!("/v1/sandboxes/{id}/files/{bad}"), b"");
        assert!(status == 400 || status == 404, "{bad}: {status} {body}");
        assert!(!body.contains("root:"), "{body}");
    }
    // Another language in the same sandbox, the same workspace.
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "cat out.txt", "language": "bash"}"#,
    );
    assert_eq!(
        (status, json(&body)["stdout"].as_str()),
        (200, Some("42")),
        "{body}"
    );

    let (status, body) = request(a, "GET", "/v1/sandboxes?label=team=x", b"");
    assert_eq!(status, 200);
    assert_eq!(json(&body)["count"], 1);
    let (status, body) = request(a, "GET", &format!("/v1/sandboxes/{id}"), b"");
    assert_eq!(status, 200);
    assert_eq!(json(&body)["executions"], 3);

    let (status, body) = request(a, "DELETE", &format!("/v1/sandboxes/{id}"), b"");
    assert_eq!(status, 200, "{body}");
    for (method, path) in [
        ("GET", format!("/v1/sandboxes/{id}")),
        ("DELETE", format!("/v1/sandboxes/{id}")),
        ("POST", format!("/v1/sandboxes/{id}/exec")),
        ("GET", format!("/v1/sandboxes/{id}/files/out.txt")),
    ] {
        let body: &[u8] = if method == "POST" {
            br#"{"code": "1"}"#
        } else {
            b""
        };
        let (status, body) = request(a, method, &path, body);
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(json(&body)["error"]["code"], "sandbox_not_found");
    }
}

#[test]
fn sandbox_streams_output_while_the_program_runs() {
    require_root!();
    let server = start();
    let a = &server.addr;
    let (_, body) = post(a, "/v1/sandboxes", r#"{"profile": "test"}"#);
    let id = json(&body)["id"].as_str().unwrap().to_owned();
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')", "stream": true}"#,
    );
    assert_eq!(status, 200);
    let events: Vec<serde_json::Value> = body.lines().map(json).collect();
    let at = |text: &str| {
        events
            .iter()
            .find(|e| e["type"] == "stdout" && e["text"].as_str().unwrap().contains(text))
            .unwrap_or_else(|| panic!("no {text:?} in {body}"))["timestamp"]
            .as_u64()
            .unwrap()
    };
    let gap = at("second") - at("first");
    assert!(
        gap >= 900,
        "the first chunk came only with the second: {gap} ms"
    );
    assert_eq!(events.last().unwrap()["type"], "end");
}

#[test]
fn idle_sandboxes_expire_and_the_compat_routes_work() {
    require_root!();
    let server = start();
    let a = &server.addr;
    let (status, body) = post(
        a,
        "/v1/sandboxes",
        r#"{"profile": "test", "idle_ttl_seconds": 1}"#,
    );
    assert_eq!(status, 201, "{body}");
    let short = json(&body)["id"].as_str().unwrap().to_owned();
    let (status, body) = post(
        a,
        "/v1/sandboxes",
        r#"{"profile": "test", "idle_ttl_seconds": 999999}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("idle_ttl_seconds"), "{body}");

    // The source document's sandboxed server.
    let (status, body) = post(
        a,
        "/api/v1/sandbox/create",
        r#"{"language": "python", "name": "data-processing", "profile": "test"}"#,
    );
    assert_eq!(status, 201, "{body}");
    let v = json(&body);
    assert_eq!(v["success"], true);
    let sid = v["sandbox_id"].as_str().unwrap().to_owned();
    assert!(sid.starts_with("data-processing-"), "{sid}");
    let (status, body) = post(
        a,
        "/api/v1/execute",
        &format!(r#"{{"sandbox_id": "{sid}", "code": "print('Hello, World!')"}}"#),
    );
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(
        (v["success"].as_bool(), v["exit_code"].as_i64()),
        (Some(true), Some(0))
    );
    assert_eq!(v["output"], "Hello, World!\n");
    let (status, body) = post(
        a,
        &format!("/api/v1/execute/{sid}"),
        r#"{"code": "import sys; sys.exit(3)"}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["exit_code"], 3);
    let (status, body) = post(
        a,
        "/api/v1/sandbox/destroy",
        &format!(r#"{{"sandbox_id": "{sid}", "namespace": "development", "force": false}}"#),
    );
    assert_eq!(
        (status, json(&body)["success"].as_bool()),
        (200, Some(true)),
        "{body}"
    );

    std::thread::sleep(std::time::Duration::from_millis(2500));
    let (status, _) = request(a, "GET", &format!("/v1/sandboxes/{short}"), b"");
    assert_eq!(status, 404, "the idle sandbox was not reaped");
}

#[test]
fn after_a_kill_9_nothing_is_left_running_and_the_next_start_cleans_up() {
    require_root!();
    let tmpfs_mounts = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(" - tmpfs "))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mounts_before = tmpfs_mounts();
    let mut server = start();
    let a = server.addr.clone();
    let (_, body) = post(&a, "/v1/sandboxes", r#"{"profile": "test"}"#);
    let id = json(&body)["id"].as_str().unwrap().to_owned();
    let pending = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&a).unwrap();
        let body = r#"{"code": "import os\nif os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['sleep', '62.5'])\nos.execvp('sleep', ['sleep', '62.5'])"}"#;
        let _ = write!(
            s,
            "POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
    });
    let sleeping = || {
        let out = Command::new("pgrep")
            .args(["-f", "sleep 62.5"])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sleeping() {
        assert!(
            std::time::Instant::now() < deadline,
            "the program never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    pending.join().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sleeping() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox outlived its daemon"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The workspace was a detached tmpfs: no mount of it anywhere.
    assert_eq!(tmpfs_mounts(), mounts_before);
    // The next start removes the killed helpers' cgroups.
    let _next = start();
    let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
    assert!(!h.has_stale(), "stale cgroups after the restart");
}
