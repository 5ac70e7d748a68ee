//! `warden serve` with the real jail: one-shot execution over HTTP, JSON and NDJSON.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

fn start() -> common::Server {
    common::serve_with(&common::settings())
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
    // An idle context with a process of its own: it must die with the daemon too.
    let (status, body) = post(
        &a,
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "import subprocess\nsubprocess.Popen(['sleep', '62.75'])", "context": "default"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let in_context = || {
        let out = Command::new("pgrep")
            .args(["-f", "sleep 62.75"])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    assert!(in_context(), "the context's process never started");
    let old_id = id.clone();
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
    while sleeping() || in_context() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox or its context outlived the daemon"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The workspace was a detached tmpfs: no mount of it anywhere.
    assert_eq!(tmpfs_mounts(), mounts_before);
    // The next start removes the killed helpers' cgroups.
    let next = start();
    let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
    assert!(!h.has_stale(), "stale cgroups after the restart");
    // The sandboxes the daemon lists after the restart are usable; the one it had before is
    // reported gone, cleanly, on every route.
    let (status, body) = request(&next.addr, "GET", "/v1/sandboxes", b"");
    assert_eq!(status, 200, "{body}");
    for listed in json(&body)["sandboxes"].as_array().unwrap() {
        let listed = listed["id"].as_str().unwrap();
        let (status, body) = post(
            &next.addr,
            &format!("/v1/sandboxes/{listed}/exec"),
            r#"{"code": "print(1)"}"#,
        );
        assert_eq!(
            (status, json(&body)["stdout"].as_str()),
            (200, Some("1\n")),
            "{body}"
        );
    }
    for (method, path, body) in [
        ("GET", format!("/v1/sandboxes/{old_id}"), ""),
        (
            "POST",
            format!("/v1/sandboxes/{old_id}/exec"),
            r#"{"code": "print(1)"}"#,
        ),
        ("GET", format!("/v1/sandboxes/{old_id}/files/x"), ""),
        ("DELETE", format!("/v1/sandboxes/{old_id}"), ""),
    ] {
        let (status, answer) = request(&next.addr, method, &path, body.as_bytes());
        assert_eq!(
            (status, json(&answer)["error"]["code"].as_str()),
            (404, Some("sandbox_not_found")),
            "{method} {path}: {answer}"
        );
    }
}

#[test]
fn contexts_over_http_keep_state_and_plain_exec_is_unchanged() {
    require_root!();
    let server = start();
    let a = &server.addr;
    let (status, body) = post(a, "/v1/sandboxes", r#"{"profile": "test"}"#);
    assert_eq!(status, 201, "{body}");
    let id = json(&body)["id"].as_str().unwrap().to_owned();
    let exec = |body: &str| {
        let (status, body) = post(a, &format!("/v1/sandboxes/{id}/exec"), body);
        (status, json(&body))
    };

    // A context made explicitly, with no body at all.
    let (status, body) = post(a, &format!("/v1/sandboxes/{id}/contexts"), "");
    assert_eq!(status, 201, "{body}");
    let ctx = json(&body);
    let cid = ctx["id"].as_str().unwrap().to_owned();
    assert!(cid.starts_with("ctx-"), "{ctx}");
    assert_eq!(
        (ctx["language"].as_str(), ctx["sandbox_id"].as_str()),
        (Some("python"), Some(id.as_str()))
    );
    let (status, v) = exec(&format!(
        r#"{{"code": "x = 20\nprint('set')", "context": "{cid}"}}"#
    ));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["stdout"].as_str(), v["execution_count"].as_u64()),
        (Some("set\n"), Some(1))
    );
    assert!(v.get("text").is_none(), "{v}");
    assert_eq!(v["context_restarted"], false);
    let (_, v) = exec(&format!(r#"{{"code": "x + 22", "context": "{cid}"}}"#));
    assert_eq!(v["text"], "42", "{v}");
    assert_eq!(v["execution_count"], 2);
    assert_eq!(
        v["results"][0]["mime_types"],
        serde_json::json!(["text/plain"])
    );
    assert_eq!(v["results"][0]["is_main_result"], true);
    let (_, v) = exec(&format!(
        r#"{{"code": "undefined_name", "context": "{cid}"}}"#
    ));
    assert_eq!(v["error"]["name"], "NameError", "{v}");
    assert!(
        v["error"]["traceback"]
            .as_str()
            .unwrap()
            .contains("<cell 3>"),
        "{v}"
    );

    // The default context: made by the first execution that names it.
    let (_, v) = exec(r#"{"code": "y = 5", "context": "default"}"#);
    assert_eq!(v["execution_count"], 1, "{v}");
    let (_, v) =
        exec(r#"{"code": "(y, 'x' in globals())", "context": "default", "language": "py"}"#);
    assert_eq!(v["text"], "(5, False)", "{v}");
    // Plain executions are as before: a fresh process, no cell fields.
    let (status, v) = exec(r#"{"code": "print('y' in globals())"}"#);
    assert_eq!(
        (status, v["stdout"].as_str()),
        (200, Some("False\n")),
        "{v}"
    );
    for key in [
        "execution_count",
        "text",
        "results",
        "error",
        "context_restarted",
    ] {
        assert!(v.get(key).is_none(), "{key} in a plain result: {v}");
    }

    let (status, body) = request(a, "GET", &format!("/v1/sandboxes/{id}/contexts"), b"");
    assert_eq!(status, 200);
    let list = json(&body);
    assert_eq!(list["count"], 2, "{list}");
    let (status, body) = request(a, "GET", &format!("/v1/sandboxes/{id}/contexts/{cid}"), b"");
    assert_eq!(
        (status, json(&body)["executions"].as_u64()),
        (200, Some(3)),
        "{body}"
    );

    // Streaming a cell: output events, then the end with the cell's result.
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/exec"),
        &format!(r#"{{"code": "print('streamed')\nx * 2", "context": "{cid}", "stream": true}}"#),
    );
    assert_eq!(status, 200);
    let events: Vec<serde_json::Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "stdout", "{body}");
    let end = events.last().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["text"].as_str()),
        (Some("end"), Some("40")),
        "{body}"
    );

    // Refusals: an unknown context, stdin in a context, another language, javascript contexts.
    let (status, v) = exec(r#"{"code": "1", "context": "ctx-nope"}"#);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("context_not_found")),
        "{v}"
    );
    let (status, v) = exec(&format!(
        r#"{{"code": "1", "context": "{cid}", "stdin": "x"}}"#
    ));
    assert_eq!(status, 400, "{v}");
    let (status, v) = exec(&format!(
        r#"{{"code": "echo", "context": "{cid}", "language": "bash"}}"#
    ));
    assert_eq!(status, 400, "{v}");
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/contexts"),
        r#"{"language": "bash"}"#,
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/contexts"),
        r#"{"lang": "python"}"#,
    );
    assert_eq!(status, 400, "{body}");

    // Restart: the state is gone, the count starts again.
    let (status, body) = post(a, &format!("/v1/sandboxes/{id}/contexts/{cid}/restart"), "");
    assert_eq!(
        (status, json(&body)["restarts"].as_u64()),
        (200, Some(1)),
        "{body}"
    );
    let (_, v) = exec(&format!(
        r#"{{"code": "'x' in globals()", "context": "{cid}"}}"#
    ));
    assert_eq!(
        (v["text"].as_str(), v["execution_count"].as_u64()),
        (Some("False"), Some(1)),
        "{v}"
    );

    // A process the default context leaves running, to see that destroy ends it.
    let (_, v) = exec(
        r#"{"code": "import subprocess\nsubprocess.Popen(['sleep', '73.25'])", "context": "default"}"#,
    );
    assert!(v.get("error").is_none(), "{v}");
    let (status, _) = request(
        a,
        "DELETE",
        &format!("/v1/sandboxes/{id}/contexts/{cid}"),
        b"",
    );
    assert_eq!(status, 200);
    let (status, body) = request(a, "GET", &format!("/v1/sandboxes/{id}/contexts/{cid}"), b"");
    assert_eq!(
        (status, json(&body)["error"]["code"].as_str()),
        (404, Some("context_not_found"))
    );
    let (status, _) = request(a, "DELETE", &format!("/v1/sandboxes/{id}"), b"");
    assert_eq!(status, 200);
    let (status, _) = request(a, "GET", &format!("/v1/sandboxes/{id}/contexts"), b"");
    assert_eq!(status, 404);
    // Destroying the sandbox ended its contexts and everything they started.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = Command::new("pgrep")
        .args(["-f", "sleep 73.25"])
        .output()
        .unwrap();
    assert!(
        out.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_cell_timeout_over_http_interrupts_and_keeps_the_context() {
    require_root!();
    let server = start();
    let a = &server.addr;
    let (_, body) = post(a, "/v1/sandboxes", r#"{"profile": "test"}"#);
    let id = json(&body)["id"].as_str().unwrap().to_owned();
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "z = 1", "context": "default"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let started = std::time::Instant::now();
    let (status, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "while True:\n    pass", "context": "default", "timeout_seconds": 0.5}"#,
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    let v = json(&body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["reason"].as_str(), v["context_restarted"].as_bool()),
        (Some("timeout"), Some(false)),
        "{v}"
    );
    assert_eq!(v["error"]["name"], "KeyboardInterrupt");
    let (_, body) = post(
        a,
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "z", "context": "default"}"#,
    );
    assert_eq!(json(&body)["text"], "1", "{body}");
    request(a, "DELETE", &format!("/v1/sandboxes/{id}"), b"");
}

/// `/readyz` is whether the default profile can run now: a docker profile whose engine does
/// not answer makes the daemon not ready (503, with the reason), and `free_slots` stays.
#[test]
fn readyz_is_503_with_the_reason_while_the_default_profile_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.toml");
    std::fs::write(
        &settings,
        "[sandbox]\ndefault_profile = \"dock\"\n\
         [sandbox.docker]\nhost = \"unix:///nonexistent/warden-readyz.sock\"\n\
         [sandbox.profiles.dock]\nbackend = \"docker\"\n\
         [sandbox.profiles.dock.runtime]\nimage = \"warden-python:3.11\"\n",
    )
    .unwrap();
    let server = common::serve_with(&settings);
    let (status, body) = request(&server.addr, "GET", "/readyz", b"");
    assert_eq!(status, 503, "{body}");
    let v = json(&body);
    assert_eq!(v["status"], "not_ready", "{body}");
    assert!(v["free_slots"].as_u64().is_some(), "{body}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("the docker engine is not usable"),
        "{body}"
    );
    let (status, _) = request(&server.addr, "GET", "/healthz", b"");
    assert_eq!(status, 200, "alive, only not ready");
}

/// `[server] max_sandboxes` raises the daemon's cap past the old fixed 64, and the cap still
/// holds at its new value; `[server] max_concurrent` is the admission's bound (`/readyz`).
#[test]
fn the_settings_raise_the_live_sandbox_cap_past_64() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.toml");
    let mut text = std::fs::read_to_string(common::settings()).unwrap();
    text.push_str("\n[server]\nmax_sandboxes = 70\nmax_concurrent = 3\n");
    std::fs::write(&settings, text).unwrap();
    let server = common::serve_with(&settings);
    let (status, body) = request(&server.addr, "GET", "/readyz", b"");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["free_slots"], 3, "{body}");
    let mut ids = Vec::new();
    for i in 0..70 {
        let (status, body) = post(
            &server.addr,
            "/v1/sandboxes",
            &format!(r#"{{"name": "s{i}"}}"#),
        );
        assert_eq!(status, 201, "sandbox {i}: {body}");
        ids.push(json(&body)["id"].as_str().unwrap().to_owned());
    }
    let (status, body) = post(&server.addr, "/v1/sandboxes", "{}");
    assert_eq!(status, 429, "{body}");
    assert_eq!(json(&body)["error"]["code"], "too_many_sandboxes");
    assert!(body.contains("70 sandboxes are live"), "{body}");
    // The 70th still runs code.
    let (status, body) = post(
        &server.addr,
        &format!("/v1/sandboxes/{}/exec", ids[69]),
        r#"{"code": "print(69)"}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["stdout"], "69\n");
    let (_, body) = request(&server.addr, "GET", "/v1/sandboxes", b"");
    assert_eq!(json(&body)["count"], 70);
    for id in &ids {
        let (status, body) = request(&server.addr, "DELETE", &format!("/v1/sandboxes/{id}"), b"");
        assert_eq!(status, 200, "{body}");
    }
}
