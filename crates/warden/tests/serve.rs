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
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("warden: listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Server { child, addr }
}

/// A minimal HTTP/1.1 POST; returns the status code and the body.
fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
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
    assert!(String::from_utf8_lossy(&out.stderr).contains("non-loopback"));
}
