//! The audit log through the real daemon and the real jail: each decision is one JSON line in
//! the file `[server.audit] log` names, in `seq` order, and `GET /v1/audit` gives a key its own
//! events (an admin key every owner's), never the code or the files' contents.

mod common;

use common::http_request;
use serde_json::Value;

/// alice-key, bob-key and carol-key (an admin); the settings hold their SHA-256.
const KEYS: &str = "[[server.api_keys]]\nname = \"alice\"\n\
    key_sha256 = \"72ee9d4355ccb9d3a4c9dbf37382e38e75c1b1a225b5bd1f729ee91bbda30c20\"\n\
    [[server.api_keys]]\nname = \"bob\"\n\
    key_sha256 = \"9b94dc1a51a38769f135edf04033ad7f2f487b6c25929be7a861cfc1ab10cf98\"\n\
    [[server.api_keys]]\nname = \"carol\"\nadmin = true\n\
    key_sha256 = \"368c3387fc9b5ce6ab156ad952031f52bc9154e89a727020cd314f8910a21823\"\n";

fn call(addr: &str, key: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = http_request(
        addr,
        method,
        path,
        &format!("Authorization: Bearer {key}\r\n"),
        body,
    );
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, value)
}

fn names(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

#[test]
fn every_decision_is_one_line_and_each_key_reads_only_its_own() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let settings = dir.path().join("settings.toml");
    std::fs::write(
        &settings,
        format!(
            "{KEYS}[server.audit]\nlog = {:?}\n\n[sandbox]\ndefault_profile = \"standard\"\n",
            log.to_str().unwrap()
        ),
    )
    .unwrap();
    let server = common::serve_with(&settings);
    let addr = server.addr.as_str();

    // alice: a sandbox, a file in and out, a run, a refused run, the end of the sandbox.
    let (status, v) = call(addr, "alice-key", "POST", "/v1/sandboxes", "{}");
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let (status, v) = call(
        addr,
        "alice-key",
        "PUT",
        &format!("/v1/sandboxes/{id}/files/notes.txt"),
        "the contents of a file",
    );
    assert_eq!(status, 201, "{v}");
    let (status, _) = call(
        addr,
        "alice-key",
        "GET",
        &format!("/v1/sandboxes/{id}/files/notes.txt"),
        "",
    );
    assert_eq!(status, 200);
    let code = "print(open('notes.txt').read())";
    let body = serde_json::json!({ "code": code }).to_string();
    let (status, v) = call(
        addr,
        "alice-key",
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        &body,
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = call(
        addr,
        "alice-key",
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "x = 1\nimport socket"}"#,
    );
    assert_eq!(status, 422, "{v}");
    let (status, v) = call(
        addr,
        "alice-key",
        "DELETE",
        &format!("/v1/sandboxes/{id}"),
        "",
    );
    assert!(status == 200 || status == 204, "{status} {v}");
    // bob: a one-shot.
    let (status, v) = call(
        addr,
        "bob-key",
        "POST",
        "/v1/execute",
        r#"{"code": "print(2)"}"#,
    );
    assert_eq!(status, 200, "{v}");

    // The file: one line per decision, in order, with the owner.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(
        names(&lines),
        [
            "sandbox_created",
            "file_uploaded",
            "file_downloaded",
            "execution_started",
            "execution_ended",
            "execution_refused",
            "sandbox_destroyed",
            "execution_started",
            "execution_ended",
        ],
        "{text}"
    );
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["seq"], i as u64 + 1, "{line}");
    }
    assert!(lines[..7].iter().all(|l| l["owner"] == "alice"), "{text}");
    assert!(lines[7..].iter().all(|l| l["owner"] == "bob"), "{text}");
    assert_eq!(lines[0]["sandbox"], id.as_str());
    assert_eq!(lines[1]["path"], "notes.txt");
    assert_eq!(lines[1]["bytes"], 22);
    assert_eq!(lines[3]["sandbox"], id.as_str());
    assert_eq!(lines[3]["code_bytes"], code.len());
    assert_eq!(lines[3]["execution"], lines[4]["execution"]);
    assert_eq!(lines[4]["reason"], "exited");
    assert_eq!(lines[4]["exit_code"], 0);
    assert_eq!(lines[5]["error"], "policy_violation");
    assert_eq!(lines[5]["module"], "socket");
    assert_eq!(lines[5]["line"], 2);
    assert_eq!(lines[6]["cause"], "request");
    assert!(
        lines[7].get("sandbox").is_none(),
        "a one-shot: {}",
        lines[7]
    );
    // Never the code, the file's contents or the output.
    for secret in [
        "open('notes.txt')",
        "the contents of a file",
        "import socket",
    ] {
        assert!(!text.contains(secret), "{secret:?} in the log:\n{text}");
    }

    // The API: each key its own; the admin every owner's; paging by seq.
    let (status, v) = call(addr, "alice-key", "GET", "/v1/audit", "");
    assert_eq!(status, 200, "{v}");
    let alice: Vec<Value> = v["events"].as_array().unwrap().clone();
    assert_eq!(alice.len(), 7, "{v}");
    assert_eq!(v["next"], 7);
    let (_, v) = call(addr, "bob-key", "GET", "/v1/audit", "");
    assert_eq!(
        names(v["events"].as_array().unwrap()),
        ["execution_started", "execution_ended"]
    );
    let (_, v) = call(addr, "carol-key", "GET", "/v1/audit?since=3&limit=2", "");
    let page: Vec<u64> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(page, [4, 5], "{v}");
    assert_eq!(v["next"], 5);
    let (status, v) = call(addr, "carol-key", "GET", "/v1/audit?limit=0", "");
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("limit:"),
        "{v}"
    );
    let (status, v) = call(addr, "carol-key", "GET", "/v1/audit?owner=bob", "");
    assert_eq!(status, 400, "{v}");
    // Without a key: 401, as every other route.
    let (status, _) = http_request(addr, "GET", "/v1/audit", "", "");
    assert_eq!(status, 401);
}

#[test]
fn an_audit_log_that_cannot_be_opened_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.toml");
    std::fs::write(
        &settings,
        "[server.audit]\nlog = \"/nonexistent-dir/audit.jsonl\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::warden())
        .args([
            "--config",
            settings.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
            // Its own: the default one may be held by a daemon running on this machine.
            "--data-dir",
            dir.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[server.audit] log = \"/nonexistent-dir/audit.jsonl\""),
        "{stderr}"
    );
}
