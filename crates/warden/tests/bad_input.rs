//! Bad input sent to a real `warden serve` with the real jail, over a real socket: the few
//! cases where the transport and the sandbox matter (huge bodies, raw bytes, a policy parsing
//! 10 MB of code). Every route's full list of bad input is `warden-server/tests/bad_input.rs`.
//! Each must be a clear 4xx (or, for good input, a result) within a deadline, and the daemon
//! must answer normally afterwards.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One raw HTTP/1.1 request (`head` without the length, which is added); the status and the
/// body. No answer within 60 s fails the test instead of hanging it.
fn raw(addr: &str, head: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    // The daemon may answer (413) and close before taking the whole body.
    let _ = s.write_all(body);
    let mut answer = Vec::new();
    if let Err(e) = s.read_to_end(&mut answer) {
        panic!("{head}: no answer within 60 s ({e})");
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    (
        status,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

const POST: &str = "POST /v1/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json";

#[test]
fn a_real_daemon_answers_bad_input_with_a_clear_4xx_and_stays_up() {
    require_root!();
    let mut server = common::serve_with(&common::settings());
    let a = &server.addr.clone();
    let garbage: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (POST, garbage, 400, "invalid_json"),
        (
            POST,
            b"{\"code\": \"\xff\xfe\"}".to_vec(),
            400,
            "invalid_json",
        ),
        (
            POST,
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            400,
            "invalid_json",
        ),
        (
            POST,
            format!(r#"{{"code": "{}"}}"#, "x".repeat(20 << 20)).into_bytes(),
            413,
            "body_too_large",
        ),
        (
            "POST /v1/execute HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain",
            br#"{"code": "print(1)"}"#.to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            POST,
            br#"{"code": "print(1)", "memory_mb": -1, "timeout_seconds": "x"}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            POST,
            br#"{"code": "print(1)", "profile": "no-such"}"#.to_vec(),
            400,
            "unknown_profile",
        ),
        (
            POST,
            br#"{"code": "print(1)", "language": "cobol"}"#.to_vec(),
            400,
            "unknown_language",
        ),
        (
            "GET /v1/sandboxes/%FF%FE HTTP/1.1\r\nHost: x",
            Vec::new(),
            400,
            "bad_path",
        ),
    ];
    for (head, body, status, code) in cases {
        let started = Instant::now();
        let (got, v) = raw(a, head, &body);
        assert_eq!(
            (got, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{head:.40} {:?}: {v:.300}",
            String::from_utf8_lossy(&body[..body.len().min(40)])
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{head:.40}: {:?}",
            started.elapsed()
        );
    }
    // Ten megabytes of code run (no policy) or are refused by the policy as too large to
    // check (strict): an answer either way, not a 5xx or a hang.
    let code = format!("{}\nprint('ran')", "#".repeat(10 << 20));
    for (profile, want, says) in [("test", 200, "ran\n"), ("strict", 422, "code too large")] {
        let started = Instant::now();
        let body = serde_json::json!({"code": code, "profile": profile}).to_string();
        let (got, v) = raw(a, POST, body.as_bytes());
        assert_eq!(got, want, "{profile}: {v:.300}");
        let text = if want == 200 {
            v["stdout"].as_str()
        } else {
            v["error"]["message"].as_str()
        };
        assert!(
            text.unwrap_or_default().contains(says),
            "{profile}: {v:.300}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{profile}: {:?}",
            started.elapsed()
        );
    }
    // The daemon is the same process and answers as before.
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the daemon died"
    );
    let (got, v) = raw(a, POST, br#"{"code": "print(6 * 7)"}"#);
    assert_eq!((got, v["stdout"].as_str()), (200, Some("42\n")), "{v}");
}
