//! The MCP tools with a real MCP client (the official `mcp` Python package, installed by
//! `scripts/setup-mcp-client.sh`) and the real jail: over stdio (`warden mcp`) and over
//! streamable HTTP (`/mcp` of `warden serve`). The client script
//! (`fixtures/mcp_client.py`) plays one agent session and prints what it received; the
//! checks are here.

mod common;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The venv's python, as the setup script installs it; its absence is a failure, not a skip:
/// `scripts/setup-tests.sh` (run by `scripts/test.sh` and CI) installs it.
fn client_python() -> PathBuf {
    let venv = std::env::var_os("WARDEN_MCP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/warden/venv-mcp"));
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-mcp-client.sh (scripts/setup-tests.sh does)",
        python.display()
    );
    python
}

fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_client.py")
}

/// Runs the client script with `args`; returns what it printed, as JSON.
fn run_client(args: &[&str]) -> Value {
    let out = Command::new(client_python())
        .arg(client_script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("start the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP client failed ({}):\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn text(v: &Value, step: &str) -> String {
    v[step]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{step}: no text in {}", v[step]))
        .to_owned()
}

fn is_error(v: &Value, step: &str) -> bool {
    v[step]["is_error"]
        .as_bool()
        .unwrap_or_else(|| panic!("{step}: no is_error in {}", v[step]))
}

fn required(schema: &Value) -> Vec<&str> {
    schema["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Everything one client session must have seen, whichever the transport.
fn check_session(v: &Value) {
    // The tools, their names and the source document's parameters, as JSON schemas.
    let tools = v["tools"].as_object().expect("tools");
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "create_sandbox",
            "destroy_sandbox",
            "execute_code",
            "fork_sandbox",
            "list_files",
            "list_sandboxes",
            "pause_sandbox",
            "read_file",
            "resume_sandbox",
            "run_code",
            "snapshot_sandbox",
            "write_file"
        ]
    );
    let schema = |tool: &str| &tools[tool]["input_schema"];
    assert_eq!(required(schema("create_sandbox")), ["name", "language"]);
    for optional in ["namespace", "labels"] {
        assert!(
            schema("create_sandbox")["properties"][optional].is_object(),
            "create_sandbox lacks {optional}"
        );
    }
    assert_eq!(required(schema("run_code")), ["sandbox_name", "code"]);
    assert_eq!(required(schema("destroy_sandbox")), ["sandbox_name"]);
    assert_eq!(required(schema("pause_sandbox")), ["sandbox_name"]);
    assert!(required(schema("list_sandboxes")).is_empty());
    assert_eq!(required(schema("execute_code")), ["code"]);
    assert_eq!(
        schema("execute_code")["properties"]["language"]["type"],
        serde_json::json!(["string", "null"])
    );
    assert_eq!(
        required(schema("write_file")),
        ["sandbox_name", "path", "content"]
    );
    for tool in names {
        assert_eq!(schema(tool)["type"], "object", "{tool}");
        assert!(
            tools[tool]["description"]
                .as_str()
                .is_some_and(|d| d.len() > 20),
            "{tool} has no description"
        );
    }
    assert_eq!(v["server_name"], "warden");

    // A sandbox with a lifetime: created, found by name and by id, sharing its workspace.
    assert!(!is_error(v, "create"), "{}", v["create"]);
    let created = &v["create"]["structured"];
    assert_eq!(created["success"], true);
    let id = created["sandbox_id"].as_str().expect("sandbox_id");
    assert!(id.starts_with("mcp-test-"), "{id}");
    assert_eq!(created["sandbox"]["labels"]["namespace"], "dev");
    assert!(text(v, "create").starts_with(&format!("sandbox {id} created")));
    assert_eq!(text(v, "run_write"), "STDOUT:\nwritten");
    assert_eq!(text(v, "run_read"), "STDOUT:\nfrom the first run");
    let run = &v["run_read"]["structured"];
    assert_eq!(
        (&run["success"], &run["exit_code"], &run["output"]),
        (
            &Value::Bool(true),
            &Value::from(0),
            &Value::from("STDOUT:\nfrom the first run")
        )
    );

    // Files in, files out; an artifact named with size and type, never its bytes.
    assert_eq!(
        text(v, "write_file"),
        "wrote 12 bytes to /workspace/in/data.csv"
    );
    assert_eq!(
        text(v, "run_files"),
        "STDOUT:\n6\n\nFILES:\n- total.txt (text/plain, 1 bytes)"
    );
    assert_eq!(
        v["run_files"]["structured"]["files"],
        serde_json::json!([{"name": "total.txt", "size": 1, "mime_type": "text/plain"}])
    );
    let listing = text(v, "list_files");
    for entry in [
        "- in/data.csv (12 bytes)",
        "- output/total.txt (1 bytes)",
        "- shared.txt (18 bytes)",
    ] {
        assert!(listing.contains(entry), "{entry} not in {listing}");
    }
    assert_eq!(text(v, "read_file"), "6");
    assert!(is_error(v, "read_escape"));
    assert!(
        text(v, "read_escape").starts_with("ERROR:\ninvalid argument path"),
        "{}",
        text(v, "read_escape")
    );

    // Long output is cut for the model (max_output_length = 2000) with a visible marker.
    let flood = text(v, "run_flood");
    assert!(flood.starts_with("STDOUT:\nxxxx"), "{}", &flood[..40]);
    assert!(
        flood.contains("\n[... 48000 characters truncated ...]\n"),
        "no marker"
    );
    assert!(
        flood.len() < 2100,
        "{} characters reached the model",
        flood.len()
    );

    // A failed run is a tool result with isError, carrying the report.
    assert!(is_error(v, "run_fail"));
    assert_eq!(
        text(v, "run_fail"),
        "STDOUT:\nbefore\n\nERROR:\nthe program exited with code 3"
    );
    assert_eq!(v["run_fail"]["structured"]["exit_code"], 3);
    assert_eq!(v["run_fail"]["structured"]["success"], false);

    // One-shot execution.
    assert!(!is_error(v, "execute"), "{}", v["execute"]);
    assert_eq!(text(v, "execute"), "STDOUT:\n12.0");

    // A policy violation: a tool error naming the module and line, not a protocol error.
    assert!(is_error(v, "violation"));
    let violation = text(v, "violation");
    assert!(
        violation.starts_with("ERROR:\nthe code did not run: policy forbidden_imports"),
        "{violation}"
    );
    assert!(
        violation.contains("\"subprocess\"") && violation.contains("line 1"),
        "{violation}"
    );
    assert_eq!(
        v["violation"]["structured"]["violation"]["policy"],
        "forbidden_imports"
    );
    // The same violation when the interpreter refuses the import while the code runs.
    assert!(is_error(v, "violation_at_run_time"));
    let violation = text(v, "violation_at_run_time");
    assert!(
        violation.starts_with("ERROR:\nthe run was stopped: policy forbidden_imports")
            && violation.contains("\"subprocess\" refused at run time")
            && violation.contains("line 3"),
        "{violation}"
    );
    let structured = &v["violation_at_run_time"]["structured"]["violation"];
    assert_eq!(
        (
            &structured["kind"],
            &structured["module"],
            &structured["line"]
        ),
        (
            &serde_json::json!("forbidden_import"),
            &serde_json::json!("subprocess"),
            &serde_json::json!(3)
        ),
        "{structured}"
    );

    // Arguments that do not fit the schema: a tool error the model can act on.
    assert!(is_error(v, "bad_arguments"));
    assert!(
        text(v, "bad_arguments").contains("missing field `code`"),
        "{}",
        text(v, "bad_arguments")
    );

    // Listed while alive, gone after destroy.
    assert_eq!(v["list"]["structured"]["count"], 1);
    assert_eq!(v["list"]["structured"]["sandboxes"][0]["id"], id);
    // Paused, then resumed by the next run with its files.
    assert!(!is_error(v, "pause"), "{}", v["pause"]);
    assert_eq!(v["pause"]["structured"]["sandbox"]["state"], "paused");
    assert_eq!(text(v, "run_after_pause"), "STDOUT:\nfrom the first run");
    assert_eq!(v["list"]["structured"]["sandboxes"][0]["state"], "running");
    assert_eq!(v["list"]["structured"]["sandboxes"][0]["executions"], 6);
    assert_eq!(text(v, "destroy"), format!("sandbox {id} destroyed"));
    assert_eq!(v["destroy"]["structured"]["success"], true);
    assert!(is_error(v, "run_gone"));
    assert_eq!(v["run_gone"]["structured"]["error"], "sandbox_not_found");
    assert_eq!(v["list_after"]["structured"]["count"], 0);
    assert_eq!(text(v, "list_after"), "no live sandboxes");
}

/// The client's two ways to start a session: the initialize handshake of the protocol versions
/// before 2026-07-28 (what most MCP hosts speak today), and discovery of the newest version.
const MODES: [&str; 2] = ["legacy", "auto"];

/// Checks that `mode` negotiated the kind of protocol version it should.
fn check_version(v: &Value, mode: &str) {
    let version = v["protocol_version"].as_str().expect("protocol_version");
    match mode {
        "legacy" => assert!(version < "2026-07-28", "legacy mode negotiated {version}"),
        _ => assert!(version >= "2026-07-28", "auto mode negotiated {version}"),
    }
}

#[test]
fn a_real_mcp_client_over_stdio() {
    require_root!();
    let warden = common::warden();
    let settings = common::settings();
    for mode in MODES {
        // In an outer pid namespace, as the other tests that build real sandboxes.
        let v = run_client(&[
            mode,
            "stdio",
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            warden.to_str().unwrap(),
            "--config",
            settings.to_str().unwrap(),
            "mcp",
        ]);
        check_version(&v, mode);
        check_session(&v);
    }
}

fn serve() -> common::Server {
    common::serve_with(&common::settings())
}

/// `GET path` over plain HTTP/1.1; the body.
fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n").unwrap().1.to_owned()
}

#[test]
fn a_real_mcp_client_over_http_and_the_daemon_still_stops_promptly() {
    require_root!();
    let mut server = serve();
    let url = format!("http://{}/mcp", server.addr);
    for mode in MODES {
        let v = run_client(&[mode, "http", &url]);
        check_version(&v, mode);
        check_session(&v);
    }
    // MCP's executions and refusals are in /metrics: seven runs and two policy violations a
    // session (one before the run, one at run time; a refused run is not in the durations).
    let metrics = get(&server.addr, "/metrics");
    for line in [
        r#"warden_executions_total{profile="test",language="python",outcome="exited"} 14"#,
        r#"warden_executions_total{profile="strict",language="python",outcome="policy_violation"} 4"#,
        r#"warden_policy_violations_total{policy="forbidden_imports"} 4"#,
        "warden_execution_duration_seconds_count 14",
        "warden_sandboxes_live 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in /metrics:\n{metrics}"
        );
    }

    // The MCP tools act on the daemon's sandboxes: one made over MCP is seen over REST. The
    // session stays open (a legacy session keeps an event stream open).
    let mut holder = Command::new(client_python())
        .arg(client_script())
        .args(["legacy", "hold", &url, "seen-by-rest"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the MCP client");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let created: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let listed: Value = serde_json::from_str(&get(&server.addr, "/v1/sandboxes")).unwrap();
    assert_eq!(listed["count"], 1, "{listed}");
    assert_eq!(listed["sandboxes"][0]["id"], created["sandbox_id"]);
    assert!(
        get(&server.addr, "/metrics")
            .lines()
            .any(|l| l == "warden_sandboxes_live 1")
    );

    // SIGTERM with that session open: the daemon still stops promptly.
    let term = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let start = Instant::now();
    let stopped = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = holder.kill();
    let _ = holder.wait();
    let status = stopped.expect("warden serve did not stop within 10 s of SIGTERM");
    assert!(status.success(), "{status}");
}

/// `POST path` with a JSON body and optional headers over plain HTTP/1.1; the status and body.
fn post(addr: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    (status, raw.split_once("\r\n\r\n").unwrap().1.to_owned())
}

#[test]
fn with_api_keys_mcp_needs_a_key_and_a_key_sees_only_its_sandboxes() {
    require_root!();
    // The test settings plus two keys ("alice-key", "bob-key"; the file holds their SHA-256).
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.toml");
    let mut toml = std::fs::read_to_string(common::settings()).unwrap();
    toml.push_str(
        "\n[[server.api_keys]]\nname = \"alice\"\nmax_sandboxes = 1\n\
         key_sha256 = \"72ee9d4355ccb9d3a4c9dbf37382e38e75c1b1a225b5bd1f729ee91bbda30c20\"\n\
         [[server.api_keys]]\nname = \"bob\"\n\
         key_sha256 = \"9b94dc1a51a38769f135edf04033ad7f2f487b6c25929be7a861cfc1ab10cf98\"\n",
    );
    std::fs::write(&settings, toml).unwrap();
    let server = common::serve_with(&settings);
    let url = format!("http://{}/mcp", server.addr);

    // Without a key, or with a wrong one, /mcp is refused before any MCP is spoken.
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    for headers in ["", "Authorization: Bearer wrong\r\n"] {
        let (status, body) = post(&server.addr, "/mcp", headers, initialize);
        assert_eq!(status, 401, "{headers:?}: {body}");
        assert!(body.contains("unauthorized"), "{body}");
    }
    let (status, body) = post(
        &server.addr,
        "/mcp",
        "Authorization: Bearer bob-key\r\n",
        initialize,
    );
    assert_eq!(status, 200, "{body}");

    for mode in MODES {
        let v = run_client(&[mode, "keys", &url, "alice-key", "bob-key"]);
        assert!(
            v["no_key"].as_str().unwrap().starts_with("refused: "),
            "{mode}: connected without a key: {}",
            v["no_key"]
        );
        assert!(!is_error(&v, "a_create"), "{}", v["a_create"]);
        assert_eq!(v["a_create"]["structured"]["sandbox"]["name"], "mine");
        // alice's own limit: one live sandbox.
        assert_eq!(v["a_second"]["structured"]["error"], "too_many_sandboxes");
        assert_eq!(text(&v, "a_run"), "STDOUT:\na");
        assert_eq!(v["a_list"]["structured"]["count"], 1);
        // bob sees nothing of alice's and can touch none of it.
        assert_eq!(v["b_list"]["structured"]["count"], 0);
        for step in ["b_run", "b_read", "b_destroy"] {
            assert_eq!(
                v[step]["structured"]["error"], "sandbox_not_found",
                "{mode} {step}: {}",
                v[step]
            );
        }
        assert!(!is_error(&v, "a_destroy"), "{}", v["a_destroy"]);
    }
}
