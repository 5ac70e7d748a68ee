//! The SDK against a real `warden serve` (real jail sandboxes): every method, streaming as it
//! happens, the daemon's errors as typed errors, the tool, and the examples.

mod common;

use common::Daemon;
use futures_util::StreamExt;
use std::time::{Duration, Instant};
use warden_client::{
    Client, CodeInterpreterTool, Error, ExecEvent, ExecuteRequest, Reason, RunRequest, Sandbox,
    SandboxOptions,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_execute() {
    require_root!();
    let daemon = Daemon::start();
    let client = daemon.client();
    client.health().await.unwrap();

    let r = client.execute("print(6 * 7)").await.unwrap();
    assert_eq!(r.stdout, "42\n");
    let r = client
        .execute(ExecuteRequest::new("print('small')").memory_mb(48))
        .await
        .unwrap();
    assert_eq!(r.stdout, "small\n");
    assert_eq!((r.reason, r.exit_code), (Reason::Exited, Some(0)));
    assert!(r.is_success());

    let r = client
        .execute(
            ExecuteRequest::new("read line; echo \"got $line\" >&2; exit 3")
                .language("bash")
                .stdin("hello\n"),
        )
        .await
        .unwrap();
    assert_eq!(r.stderr, "got hello\n");
    // A failing program is a result, not an error.
    assert_eq!((r.reason, r.exit_code), (Reason::Exited, Some(3)));

    let start = Instant::now();
    let r = client
        .execute(
            ExecuteRequest::new("import time\ntime.sleep(30)")
                .profile("test")
                .timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    assert_eq!(r.reason, Reason::Timeout);
    assert!(start.elapsed() < Duration::from_secs(10));

    // Artifacts come back with their bytes.
    let r = client
        .execute(
            "import os\nos.makedirs('output', exist_ok=True)\nopen('output/a.txt','w').write('hi')",
        )
        .await
        .unwrap();
    let a = r
        .artifacts
        .iter()
        .find(|a| a.name == "a.txt")
        .expect("a.txt");
    assert_eq!(a.bytes, b"hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_errors_are_typed() {
    require_root!();
    let daemon = Daemon::start();
    let client = daemon.client();

    let e = client
        .execute(ExecuteRequest::new("import os\nprint(os.getcwd())").profile("strict"))
        .await
        .unwrap_err();
    match &e {
        Error::Api {
            status: 422,
            code,
            message,
            violation: Some(v),
            ..
        } => {
            assert_eq!(code, "policy_violation");
            assert!(message.contains("os"), "{message}");
            assert_eq!(v.policy, "forbidden_imports");
            assert_eq!(v.module(), Some("os"));
            assert_eq!(v.line, Some(1));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.is_caller_error());

    let e = client
        .execute(ExecuteRequest::new("1").profile("no-such-profile"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Api { status: 400, code, .. } if code == "unknown_profile"),
        "{e:?}"
    );

    let e = client
        .execute(ExecuteRequest::new("1").language("cobol"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Api { status: 400, code, .. } if code == "unknown_language"),
        "{e:?}"
    );

    let e = Sandbox::connect(&client, "sb-does-not-exist")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Api { status: 404, code, .. } if code == "sandbox_not_found"),
        "{e:?}"
    );
    assert_eq!(e.code(), Some("sandbox_not_found"));

    // The client's own timeout: the request is abandoned, typed as a timeout.
    let impatient = Client::builder(&daemon.url)
        .timeout(Duration::from_millis(700))
        .build()
        .unwrap();
    let start = Instant::now();
    let e = impatient
        .execute("import time\ntime.sleep(5)")
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Timeout { after: Some(d), .. } if d == Duration::from_millis(700)),
        "{e:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_session() {
    require_root!();
    let daemon = Daemon::start();
    let client = daemon.client();
    let run_label = format!("run-{}", std::process::id());

    let sandbox = Sandbox::create(
        &client,
        SandboxOptions::new()
            .name("sdk-session")
            .profile("test")
            .language("python")
            .label("suite", &run_label)
            .idle_ttl(Duration::from_secs(120))
            .max_lifetime(Duration::from_secs(600))
            .memory_mb(64),
    )
    .await
    .unwrap();
    let id = sandbox.id().to_owned();
    assert!(id.starts_with("sdk-session-"), "{id}");
    assert_eq!(sandbox.created_info().language, "python");
    assert_eq!(sandbox.created_info().profile, "test");
    assert_eq!(sandbox.created_info().idle_ttl_seconds, 120);
    assert_eq!(sandbox.created_info().max_lifetime_seconds, 600);
    assert_eq!(sandbox.created_info().limits.memory_mb, 64);
    assert_eq!(sandbox.created_info().labels["suite"], run_label);

    // Executions share the workspace.
    let r = sandbox
        .run("open('state.txt', 'w').write('from run 1')")
        .await
        .unwrap();
    assert!(r.is_success(), "{r:?}");
    let r = sandbox
        .run("print(open('state.txt').read())")
        .await
        .unwrap();
    assert_eq!(r.stdout, "from run 1\n");

    // Upload under a path that needs encoding; the program sees it.
    let written = sandbox
        .upload("in dir/a#b%c?.txt", "uploaded ✓")
        .await
        .unwrap();
    assert_eq!(
        (written.path.as_str(), written.size),
        ("in dir/a#b%c?.txt", 12)
    );
    let r = sandbox
        .run_with(
            RunRequest::new("import sys\nprint(open(sys.argv[1]).read(), sys.stdin.read())")
                .arg("in dir/a#b%c?.txt")
                .stdin("and stdin")
                .timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "uploaded ✓ and stdin\n", "{r:?}");

    // Download what the program wrote, every byte value intact.
    let r = sandbox
        .run("open('bytes.bin', 'wb').write(bytes(range(256)))")
        .await
        .unwrap();
    assert!(r.is_success(), "{r:?}");
    let bytes = sandbox.download("/workspace/bytes.bin").await.unwrap();
    assert_eq!(bytes.as_ref(), (0..=255u8).collect::<Vec<_>>().as_slice());

    let files = sandbox.files().await.unwrap();
    let find = |p: &str| files.iter().find(|f| f.path == p);
    assert_eq!(
        find("bytes.bin").map(|f| (f.size, f.is_dir)),
        Some((256, false))
    );
    assert_eq!(find("in dir").map(|f| f.is_dir), Some(true));
    assert!(find("state.txt").is_some(), "{files:?}");

    let info = sandbox.info().await.unwrap();
    assert_eq!(info.id, id);
    assert_eq!(info.executions, 4);

    // Found by label, and by name.
    let listed = client
        .list_sandboxes(&[("suite", &run_label)])
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|s| &s.id).collect::<Vec<_>>(), [&id]);
    assert!(
        client
            .list_sandboxes(&[("suite", "another")])
            .await
            .unwrap()
            .is_empty()
    );
    let by_name = Sandbox::connect(&client, "sdk-session").await.unwrap();
    assert_eq!(by_name.id(), id);

    // Pause and resume; an evicting pause saves the context's variables and names the rest.
    let r = sandbox
        .run_with(
            RunRequest::new(
                "import threading
kept = 41
lock = threading.Lock()",
            )
            .context("default"),
        )
        .await
        .unwrap();
    assert!(r.is_success(), "{r:?}");
    let paused = sandbox.pause(true).await.unwrap();
    assert_eq!(paused.sandbox.state, warden_client::SandboxState::Paused);
    assert_eq!(paused.evicted.len(), 1, "{paused:?}");
    assert!(
        paused.evicted[0]
            .eviction
            .saved
            .contains(&"kept".to_owned()),
        "{paused:?}"
    );
    assert_eq!(
        paused.evicted[0].eviction.unsaved[0].name, "lock",
        "{paused:?}"
    );
    let resumed = sandbox.resume().await.unwrap();
    assert_eq!(resumed.sandbox.state, warden_client::SandboxState::Running);
    assert_eq!(resumed.restored.len(), 1, "{resumed:?}");
    let r = sandbox
        .run_with(RunRequest::new("print(kept + 1, 'lock' in globals())").context("default"))
        .await
        .unwrap();
    assert_eq!(r.stdout, "42 False\n", "{r:?}");
    assert!(sandbox.pause(false).await.unwrap().evicted.is_empty());
    assert_eq!(
        sandbox.resume().await.unwrap().sandbox.state,
        warden_client::SandboxState::Running
    );

    // A snapshot, a sandbox made from it and forks: the files and the context's variables
    // (what could be saved) in each.
    // (The evicting pause above lost the lock; a new one, which a snapshot cannot save either.)
    let r = sandbox
        .run_with(RunRequest::new("lock = threading.Lock()").context("default"))
        .await
        .unwrap();
    assert!(r.is_success(), "{r:?}");
    let snap = sandbox.snapshot("sdk-snap").await.unwrap();
    assert_eq!(snap.sandbox_id, id);
    let default = snap.contexts.iter().find(|c| c.context == "default");
    assert!(
        default.is_some_and(|c| c.eviction.saved.contains(&"kept".to_owned())
            && c.eviction.unsaved.iter().any(|u| u.name == "lock")),
        "{snap:?}"
    );
    let listed = client.list_snapshots().await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["sdk-snap"]
    );
    let copy = Sandbox::create(&client, SandboxOptions::new().from_snapshot("sdk-snap"))
        .await
        .unwrap();
    let forks = sandbox.fork(2).await.unwrap();
    assert_eq!(forks.sandboxes.len(), 2);
    assert_eq!(forks.contexts, snap.contexts);
    for made in forks.sandboxes.iter().chain([&copy]) {
        let r = made
            .run_with(
                RunRequest::new("print(kept, open('bytes.bin', 'rb').read()[:3])")
                    .context("default"),
            )
            .await
            .unwrap();
        assert_eq!(r.stdout, "41 b'\\x00\\x01\\x02'\n", "{r:?}");
        assert_ne!(r.cell.context_restarted, Some(true), "{r:?}");
        made.clone().destroy().await.unwrap();
    }
    client.delete_snapshot("sdk-snap").await.unwrap();
    assert!(client.list_snapshots().await.unwrap().is_empty());
    let e = client.delete_snapshot("sdk-snap").await.unwrap_err();
    assert_eq!(e.status(), Some(404), "{e:?}");

    // Paths are checked before any request; missing files are the daemon's 404.
    assert!(matches!(
        sandbox.upload("../escape", "x").await,
        Err(Error::InvalidPath(_))
    ));
    assert!(matches!(
        sandbox.download("/etc/passwd").await,
        Err(Error::InvalidPath(_))
    ));
    let e = sandbox.download("missing.txt").await.unwrap_err();
    assert_eq!(e.status(), Some(404), "{e:?}");

    let handle = sandbox.clone();
    sandbox.destroy().await.unwrap();
    for e in [
        handle.info().await.unwrap_err(),
        handle.run("print(1)").await.unwrap_err(),
        handle.files().await.unwrap_err(),
        handle.clone().destroy().await.unwrap_err(),
    ] {
        assert!(
            matches!(&e, Error::Api { status: 404, code, .. } if code == "sandbox_not_found"),
            "{e:?}"
        );
    }
}

/// Collects the events of a stream with the moment each arrived.
async fn timed(mut events: warden_client::EventStream) -> Vec<(Instant, ExecEvent)> {
    let mut out = Vec::new();
    while let Some(event) = events.next().await {
        out.push((Instant::now(), event.unwrap()));
    }
    out
}

const SLOW: &str = "import sys, time\n\
                    print('first', flush=True)\n\
                    print('warning', file=sys.stderr, flush=True)\n\
                    time.sleep(1.5)\n\
                    print('second')";

fn check_arrives_as_it_happens(events: &[(Instant, ExecEvent)]) {
    let first = events
        .iter()
        .find(|(_, e)| matches!(e, ExecEvent::Stdout { text, .. } if text.contains("first")))
        .expect("a stdout event with `first`");
    assert!(
        events
            .iter()
            .any(|(_, e)| matches!(e, ExecEvent::Stderr { text, .. } if text.contains("warning")))
    );
    let (end_at, end) = events.last().unwrap();
    let ExecEvent::End(result) = end else {
        panic!("the last event is not End: {end:?}")
    };
    assert_eq!(result.stdout, "first\nsecond\n");
    assert_eq!(result.stderr, "warning\n");
    // `first` arrived while the program slept, not with the end.
    let gap = end_at.duration_since(first.0);
    assert!(
        gap >= Duration::from_millis(1200),
        "first arrived only {gap:?} before the end"
    );
    // Nothing follows End.
    assert_eq!(
        events
            .iter()
            .filter(|(_, e)| matches!(e, ExecEvent::End(_)))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_output_arrives_while_the_program_runs() {
    require_root!();
    let daemon = Daemon::start();
    let client = daemon.client();

    let events = timed(client.execute_stream(SLOW).await.unwrap()).await;
    check_arrives_as_it_happens(&events);

    let sandbox = Sandbox::create(&client, SandboxOptions::new())
        .await
        .unwrap();
    let events = timed(sandbox.run_stream(SLOW).await.unwrap()).await;
    check_arrives_as_it_happens(&events);

    // `result()` waits for the end.
    let result = sandbox
        .run_stream(RunRequest::new("print('x' * 3)"))
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    assert_eq!(result.stdout, "xxx\n");

    // A refusal comes before the stream starts, as a typed error.
    let e = client
        .execute_stream(ExecuteRequest::new("import os").profile("strict"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Api { status: 422, code, .. } if code == "policy_violation"),
        "{e:?}"
    );
    sandbox.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_code_interpreter_tool() {
    require_root!();
    let daemon = Daemon::start();
    let client = daemon.client();

    // The source document's example, exactly.
    let tool = CodeInterpreterTool::one_shot(client.clone());
    let answer = tool
        .call(r#"{"code": "import math; print(math.sqrt(144))", "language": "python"}"#)
        .await;
    assert_eq!(answer, "STDOUT:\n12.0");

    let answer = tool
        .call(r#"{"code": "echo hi; exit 4", "language": "bash"}"#)
        .await;
    assert_eq!(
        answer,
        "STDOUT:\nhi\n\nERROR:\nthe program exited with code 4"
    );

    let answer = tool
        .call(r#"{"code": "import time\ntime.sleep(20)", "timeout": 0.5}"#)
        .await;
    assert!(
        answer.starts_with("ERROR:\nthe time limit ended the run (timeout)"),
        "{answer}"
    );

    let answer = tool
        .max_output_length(200)
        .call(r#"{"code": "for i in range(10000): print(i)"}"#)
        .await;
    // The shared report cuts each section to the limit, keeping both ends around a marker.
    assert!(answer.chars().count() <= 200 + 80, "{answer}");
    assert!(answer.contains("truncated"), "{answer}");
    assert!(
        answer.starts_with("STDOUT:\n0\n1\n") && answer.ends_with("9998\n9999"),
        "{answer}"
    );
    assert!(answer.contains("characters truncated"), "{answer}");

    // A policy refusal is told to the LLM, with the module and the line.
    let strict = CodeInterpreterTool::one_shot_with_profile(client.clone(), "strict");
    let answer = strict
        .call(r#"{"code": "import math\nimport subprocess"}"#)
        .await;
    assert!(answer.starts_with("ERROR:\npolicy_violation:"), "{answer}");
    assert!(answer.contains("subprocess"), "{answer}");
    assert_eq!(answer.matches("line 2").count(), 1, "{answer}");
    assert!(strict.try_call(r#"{"code": "import os"}"#).await.is_ok());

    // Backed by a sandbox: files persist between calls.
    let sandbox = Sandbox::create(&client, SandboxOptions::new())
        .await
        .unwrap();
    let in_sandbox = CodeInterpreterTool::in_sandbox(sandbox.clone());
    assert!(in_sandbox.description().contains("persist"));
    let answer = in_sandbox
        .call(r#"{"code": "open('notes.txt', 'w').write('kept')\nprint('saved')"}"#)
        .await;
    assert_eq!(answer, "STDOUT:\nsaved");
    let answer = in_sandbox
        .call(r#"{"code": "print(open('notes.txt').read())"}"#)
        .await;
    assert_eq!(answer, "STDOUT:\nkept");
    sandbox.destroy().await.unwrap();

    // The sandbox is gone: the daemon's 404 is told to the LLM too.
    let answer = in_sandbox.call(r#"{"code": "print(1)"}"#).await;
    assert!(answer.starts_with("ERROR:\nsandbox_not_found:"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_run_against_a_daemon() {
    require_root!();
    let daemon = Daemon::start();
    let run = |name: &str| {
        let out = std::process::Command::new(common::example_bin(name))
            .env("WARDEN_URL", &daemon.url)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{name}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };

    let out = run("code_interpreter");
    let definition: serde_json::Value = {
        let json = out
            .split_once("tool definition:\n")
            .and_then(|(_, rest)| rest.split_once("\ncall: "))
            .map(|(json, _)| json)
            .expect("the definition is printed");
        serde_json::from_str(json).unwrap()
    };
    assert_eq!(definition["function"]["name"], "code_interpreter");
    assert_eq!(
        definition["function"]["parameters"]["required"],
        serde_json::json!(["code"])
    );
    assert!(out.ends_with("answer:\nSTDOUT:\n12.0\n"), "{out}");

    let out = run("hello");
    assert!(
        out.contains("hello from the sandbox\nreason: exited, exit code: Some(0)\n"),
        "{out}"
    );
    assert!(out.contains("6 * 7 = 42\n"), "{out}");
    // Streamed chunks are printed as they come, then the whole result.
    assert!(out.contains("stdout at "), "{out}");
    assert!(
        out.contains("streamed run ended: exited in ")
            && out.ends_with(", stdout \"tick 0\\ntick 1\\ntick 2\\n\"\n"),
        "{out}"
    );

    let out = run("sandbox_session");
    assert!(out.contains("step 1: rows: 2\n"), "{out}");
    assert!(out.contains("step 2: total: 8\n"), "{out}");
    assert!(out.contains("downloaded total.txt: 8\n"), "{out}");
    assert!(
        out.contains("executions: 2,") && out.ends_with("destroyed\n"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_sent_and_scope_the_sandboxes() {
    require_root!();
    // printf %s sdk-key-alice | sha256sum, and the same for bob.
    let daemon = Daemon::start_with_extra(
        r#"
[[server.api_keys]]
name = "alice"
key_sha256 = "2d85f24cceec9b87e323ac5903730991204a9cb222453940cf513af0b5cb2467"
[[server.api_keys]]
name = "bob"
key_sha256 = "e0cd6461cd7f46f99bf78b7804fe1296f45a62d187437988aae8380dcce7bdb4"
"#,
    );
    let with_key = |key: &str| Client::builder(&daemon.url).api_key(key).build().unwrap();
    let (alice, bob) = (with_key("sdk-key-alice"), with_key("sdk-key-bob"));

    for client in [daemon.client(), with_key("sdk-key-mallory")] {
        let e = client.execute("print(1)").await.unwrap_err();
        assert!(
            matches!(&e, Error::Api { status: 401, code, .. } if code == "unauthorized"),
            "{e:?}"
        );
        assert!(e.is_caller_error());
    }
    // Health stays open.
    daemon.client().health().await.unwrap();

    assert_eq!(alice.execute("print(6 * 7)").await.unwrap().stdout, "42\n");
    let sandbox = Sandbox::create(&alice, SandboxOptions::new())
        .await
        .unwrap();
    assert_eq!(sandbox.run("print('mine')").await.unwrap().stdout, "mine\n");

    // Bob neither sees nor reaches alice's sandbox.
    let e = Sandbox::connect(&bob, sandbox.id()).await.unwrap_err();
    assert!(
        matches!(&e, Error::Api { status: 404, code, .. } if code == "sandbox_not_found"),
        "{e:?}"
    );
    assert!(bob.list_sandboxes(&[]).await.unwrap().is_empty());
    let listed = alice.list_sandboxes(&[]).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, sandbox.id());
    sandbox.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_match_the_daemons_api_description() {
    require_root!();
    let daemon = Daemon::start();
    let spec = reqwest::get(format!("{}/openapi.json", daemon.url))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let spec: serde_json::Value = serde_json::from_slice(&spec).unwrap();
    // Every field the SDK can send, set.
    let mut execute = serde_json::to_value(
        ExecuteRequest::new("1")
            .language("python")
            .profile("test")
            .timeout(Duration::from_secs(1))
            .memory_mb(64)
            .stdin("x"),
    )
    .unwrap();
    let mut run = serde_json::to_value(
        RunRequest::new("1")
            .language("python")
            .timeout(Duration::from_secs(1))
            .stdin("x")
            .arg("a")
            .context("default")
            .env("K", "v")
            .cwd("/workspace"),
    )
    .unwrap();
    for body in [&mut execute, &mut run] {
        body["stream"] = true.into();
    }
    let create = serde_json::to_value(
        SandboxOptions::new()
            .profile("test")
            .language("python")
            .name("n")
            .label("k", "v")
            .idle_ttl(Duration::from_secs(1))
            .max_lifetime(Duration::from_secs(1))
            .memory_mb(64)
            .from_snapshot("s"),
    )
    .unwrap();
    for (path, body) in [
        ("/v1/execute", &execute),
        ("/v1/sandboxes", &create),
        ("/v1/sandboxes/{id}/exec", &run),
    ] {
        let reference = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]
            ["schema"]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("no request schema for {path}"));
        let name = reference.rsplit('/').next().unwrap();
        let schema = &spec["components"]["schemas"][name];
        let known = schema["properties"].as_object().unwrap();
        let sent = body.as_object().unwrap();
        for field in sent.keys() {
            assert!(
                known.contains_key(field),
                "{path}: the API has no field {field:?}"
            );
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            let required = required.as_str().unwrap();
            assert!(
                sent.contains_key(required),
                "{path}: {required:?} is required"
            );
        }
        // And the field set the SDK cannot send is what it chose to leave out.
        let unsent: Vec<&String> = known.keys().filter(|k| !sent.contains_key(*k)).collect();
        assert!(unsent.is_empty(), "{path}: the SDK cannot send {unsent:?}");
    }
}

/// Settings with a networked profile behind the egress gateway (its upstream resolver is never
/// asked: nothing in these tests connects) and one without.
pub const GATEWAY_SETTINGS: &str = r#"
[sandbox]
default_profile = "gw"
[sandbox.jail.network]
upstream_dns = "192.0.2.53:53"
[sandbox.profiles.gw]
network_enabled = true
enabled_policies = []
[sandbox.profiles.gw.egress.gateway]
allow = ["api.test"]
[sandbox.profiles.plain]
enabled_policies = []
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_rules_of_a_live_sandbox_are_replaced() {
    require_root!();
    let daemon = Daemon::start_with_text(GATEWAY_SETTINGS);
    let client = daemon.client();
    let sandbox = Sandbox::create(&client, SandboxOptions::new().profile("gw"))
        .await
        .unwrap();
    let rules: warden_client::GatewayRules = serde_json::from_value(serde_json::json!({
        "allow": ["api.test", "*.pypi.org:443"],
        "deny": ["bad.pypi.org"]
    }))
    .unwrap();
    let now = sandbox.set_egress(&rules).await.unwrap();
    assert_eq!(now, rules);
    // Without a gateway: the caller's mistake, naming the field.
    let plain = Sandbox::create(&client, SandboxOptions::new().profile("plain"))
        .await
        .unwrap();
    match plain.set_egress(&rules).await.unwrap_err() {
        Error::Api {
            status: 400,
            code,
            message,
            ..
        } => {
            assert_eq!(code, "invalid_request");
            assert!(message.contains("egress"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    plain.destroy().await.unwrap();
    // Networked: destroyed before the daemon stops, so its network slot is left clean.
    sandbox.destroy().await.unwrap();
}
