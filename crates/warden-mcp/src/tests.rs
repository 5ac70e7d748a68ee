//! The tools against a fake backend, called by an in-process MCP client (rmcp's) over a pipe:
//! arguments, answers, errors, callers and the tool list, without root. The real jail and the
//! official Python client are tested in `crates/warden/tests/mcp.rs`.

use super::*;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use std::collections::BTreeMap;
use std::sync::Mutex;
use warden_engine::{
    AdmissionLimits, Backend, BackendError, BackendSandbox, Engine, EventSender, ExecPlan,
    ExecRecord, KeySlots, Observer,
};
use warden_types::{ExecResult, FileEntry, Reason};

/// Understands three statements, each valid Python (so policies parse them):
/// `print("TEXT")`, `open("PATH", "w").write("TEXT")`, `print(open("PATH").read())`, and
/// `exit(N)`. Sandboxes keep their files in memory.
#[derive(Debug, Default)]
struct Fake;

#[derive(Debug, Default)]
struct FakeSandbox {
    files: Mutex<BTreeMap<String, Vec<u8>>>,
}

fn quoted(s: &str) -> Vec<&str> {
    s.split('"').skip(1).step_by(2).collect()
}

fn interpret(code: &str, files: &Mutex<BTreeMap<String, Vec<u8>>>) -> ExecResult {
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut exit_code = 0;
    for line in code.lines() {
        let q = quoted(line);
        if line.starts_with("print(open(") {
            match files.lock().unwrap().get(q[0]) {
                Some(b) => {
                    stdout.push_str(&String::from_utf8_lossy(b));
                    stdout.push('\n');
                }
                None => {
                    stderr.push_str("FileNotFoundError\n");
                    exit_code = 1;
                    break;
                }
            }
        } else if line.starts_with("print(") {
            stdout.push_str(q[0]);
            stdout.push('\n');
        } else if line.starts_with("open(") {
            files
                .lock()
                .unwrap()
                .insert(q[0].to_owned(), q[2].as_bytes().to_vec());
        } else if let Some(n) = line.strip_prefix("exit(") {
            exit_code = n.trim_end_matches(')').parse().unwrap();
            break;
        }
    }
    ExecResult {
        stdout,
        stderr,
        exit_code: Some(exit_code),
        signal: None,
        reason: Reason::Exited,
        duration_ms: 1,
        stdout_truncated: false,
        stderr_truncated: false,
        artifacts: vec![],
        skipped_artifacts: vec![],
        cell: Default::default(),
        egress: Default::default(),
    }
}

#[async_trait::async_trait]
impl Backend for Fake {
    fn name(&self) -> &'static str {
        "jail"
    }
    fn check(&self, _plan: &ExecPlan) -> Result<(), BackendError> {
        Ok(())
    }
    async fn exec(
        &self,
        plan: ExecPlan,
        _events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        Ok(interpret(&plan.code, &Mutex::default()))
    }
    async fn create_sandbox(
        &self,
        _spec: warden_engine::SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        Ok(Arc::new(FakeSandbox::default()))
    }
    async fn remove_orphans(&self, _live: &[String]) -> Result<usize, BackendError> {
        Ok(0)
    }
}

#[async_trait::async_trait]
impl BackendSandbox for FakeSandbox {
    async fn exec(
        &self,
        plan: ExecPlan,
        _events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        Ok(interpret(&plan.code, &self.files))
    }
    async fn write_file(&self, path: &WorkspacePath, bytes: Vec<u8>) -> Result<(), BackendError> {
        self.files
            .lock()
            .unwrap()
            .insert(path.as_str().to_owned(), bytes);
        Ok(())
    }
    async fn read_file(
        &self,
        path: &WorkspacePath,
        max_bytes: u64,
    ) -> Result<Vec<u8>, BackendError> {
        let bytes = self
            .files
            .lock()
            .unwrap()
            .get(path.as_str())
            .cloned()
            .ok_or_else(|| BackendError::NotFound(path.to_string()))?;
        if bytes.len() as u64 > max_bytes {
            return Err(BackendError::BadPath(format!("{path}: too large")));
        }
        Ok(bytes)
    }
    async fn list_files(&self, _max_entries: usize) -> Result<Vec<FileEntry>, BackendError> {
        Ok(self
            .files
            .lock()
            .unwrap()
            .iter()
            .map(|(p, b)| FileEntry {
                path: p.clone(),
                size: b.len() as u64,
                is_dir: false,
            })
            .collect())
    }
    async fn destroy(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

fn engine() -> Engine {
    let settings = Arc::new(warden_config::Settings::builtin());
    Engine::new(settings).with_backend(warden_config::BackendKind::Jail, Arc::new(Fake))
}

fn server_on(engine: Engine, options: McpOptions) -> WardenMcp {
    WardenMcp::new(Sandboxes::new(engine, 4), options)
}

fn server_with(options: McpOptions) -> WardenMcp {
    server_on(engine(), options)
}

fn server() -> WardenMcp {
    server_with(McpOptions::default())
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .map(|c| c.as_text().expect("text content").text.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

fn structured(r: &CallToolResult) -> &serde_json::Value {
    r.structured_content.as_ref().expect("structured content")
}

/// A client session with a server, both in this process, over a pipe.
struct Session {
    client: RunningService<RoleClient, ()>,
}

impl Session {
    async fn start(mcp: WardenMcp) -> Session {
        let (server_end, client_end) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = mcp.serve(server_end).await {
                let _ = running.waiting().await;
            }
        });
        let client = ().serve(client_end).await.expect("MCP handshake");
        Session { client }
    }

    /// Calls `tool` with `arguments` as the model sends them.
    async fn call(&self, tool: &'static str, arguments: serde_json::Value) -> CallToolResult {
        let serde_json::Value::Object(arguments) = arguments else {
            panic!("arguments must be an object");
        };
        self.client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await
            .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
    }
}

async fn session() -> Session {
    Session::start(server()).await
}

/// Arguments decoded as the router decodes them, for calls that bypass the protocol.
fn args<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid arguments")
}

#[tokio::test]
async fn a_sandbox_lives_across_runs_and_is_found_by_name_or_id() {
    let s = session().await;
    let created = s
        .call(
            "create_sandbox",
            json!({"name": "data", "language": "python",
            "namespace": "dev", "labels": {"team": "a"}}),
        )
        .await;
    assert_eq!(created.is_error, Some(false), "{}", text(&created));
    let id = structured(&created)["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(id.starts_with("data-"), "{id}");
    assert_eq!(structured(&created)["success"], true);
    assert_eq!(
        structured(&created)["sandbox"]["labels"]["namespace"],
        "dev"
    );
    assert!(text(&created).starts_with(&format!("sandbox {id} created: language python")));

    let first = s
        .call(
            "run_code",
            json!({"sandbox_name": "data",
            "code": "open(\"a.txt\", \"w\").write(\"kept\")\nprint(\"wrote\")"}),
        )
        .await;
    assert_eq!(text(&first), "STDOUT:\nwrote");
    let second = s
        .call(
            "run_code",
            json!({"sandbox_name": id, "code": "print(open(\"a.txt\").read())"}),
        )
        .await;
    assert_eq!(text(&second), "STDOUT:\nkept");
    assert_eq!(structured(&second)["success"], true);
    assert_eq!(structured(&second)["exit_code"], 0);
    assert_eq!(structured(&second)["output"], "STDOUT:\nkept");

    let listed = s.call("list_sandboxes", json!({})).await;
    assert_eq!(structured(&listed)["count"], 1);
    assert_eq!(structured(&listed)["sandboxes"][0]["id"], id.as_str());
    assert_eq!(structured(&listed)["sandboxes"][0]["executions"], 2);
    assert!(
        text(&listed).starts_with("1 live sandbox:\n- data-"),
        "{}",
        text(&listed)
    );

    let destroyed = s
        .call("destroy_sandbox", json!({"sandbox_name": "data"}))
        .await;
    assert_eq!(text(&destroyed), format!("sandbox {id} destroyed"));
    assert_eq!(
        structured(&destroyed),
        &json!({"success": true, "message": format!("sandbox {id} destroyed")})
    );
    assert_eq!(
        text(&s.call("list_sandboxes", json!({})).await),
        "no live sandboxes"
    );
    let gone = s
        .call(
            "run_code",
            json!({"sandbox_name": "data", "code": "print(\"x\")"}),
        )
        .await;
    assert_eq!(gone.is_error, Some(true));
    assert_eq!(structured(&gone)["error"], "sandbox_not_found");
}

#[tokio::test]
async fn files_go_in_and_come_out() {
    let s = session().await;
    s.call("create_sandbox", json!({"name": "f", "language": "python"}))
        .await;
    let wrote = s
        .call(
            "write_file",
            json!({"sandbox_name": "f", "path": "/workspace/in/data.csv",
            "content": "a,b\n1,2\n"}),
        )
        .await;
    assert_eq!(text(&wrote), "wrote 8 bytes to /workspace/in/data.csv");
    let read = s
        .call(
            "read_file",
            json!({"sandbox_name": "f", "path": "in/data.csv"}),
        )
        .await;
    assert_eq!(text(&read), "a,b\n1,2\n");
    assert_eq!(structured(&read)["size"], 8);

    let binary = s
        .call(
            "write_file",
            json!({"sandbox_name": "f", "path": "b.bin",
            "content": "AP8=", "encoding": "base64"}),
        )
        .await;
    assert_eq!(text(&binary), "wrote 2 bytes to /workspace/b.bin");
    let as_text = s
        .call("read_file", json!({"sandbox_name": "f", "path": "b.bin"}))
        .await;
    assert_eq!(
        text(&as_text),
        "/workspace/b.bin is a binary file of 2 bytes; read it with encoding \"base64\""
    );
    let as_b64 = s
        .call(
            "read_file",
            json!({"sandbox_name": "f", "path": "b.bin", "encoding": "base64"}),
        )
        .await;
    assert_eq!(text(&as_b64), "AP8=");

    let listed = s.call("list_files", json!({"sandbox_name": "f"})).await;
    assert_eq!(
        text(&listed),
        "2 entries in /workspace:\n- b.bin (2 bytes)\n- in/data.csv (8 bytes)"
    );

    let escape = s
        .call(
            "read_file",
            json!({"sandbox_name": "f", "path": "../etc/passwd"}),
        )
        .await;
    assert_eq!(escape.is_error, Some(true));
    assert!(text(&escape).starts_with("ERROR:\ninvalid argument path: invalid workspace path"));
    let missing = s
        .call(
            "read_file",
            json!({"sandbox_name": "f", "path": "nope.txt"}),
        )
        .await;
    assert_eq!(missing.is_error, Some(true));
    assert_eq!(structured(&missing)["error"], "not_found");
    let bad_b64 = s
        .call(
            "write_file",
            json!({"sandbox_name": "f", "path": "x",
            "content": "!!", "encoding": "base64"}),
        )
        .await;
    assert!(text(&bad_b64).starts_with("ERROR:\ninvalid argument content: not base64"));
}

#[tokio::test]
async fn long_files_are_cut_for_the_model() {
    let s = Session::start(server_with(McpOptions {
        max_output_length: 20,
        ..McpOptions::default()
    }))
    .await;
    s.call("create_sandbox", json!({"name": "l", "language": "python"}))
        .await;
    s.call(
        "write_file",
        json!({"sandbox_name": "l", "path": "big.txt", "content": "x".repeat(1000)}),
    )
    .await;
    let read = s
        .call("read_file", json!({"sandbox_name": "l", "path": "big.txt"}))
        .await;
    assert_eq!(
        text(&read),
        format!(
            "{}\n[... 980 characters truncated ...]\n{}",
            "x".repeat(10),
            "x".repeat(10)
        )
    );
    assert_eq!(structured(&read)["truncated"], true);
    assert_eq!(structured(&read)["size"], 1000);
}

#[tokio::test]
async fn a_policy_violation_is_a_tool_error_naming_the_module() {
    let s = session().await;
    let r = s
        .call(
            "execute_code",
            json!({"code": "import os\nprint(os.getcwd())"}),
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(t.starts_with("ERROR:\nthe code did not run: "), "{t}");
    assert!(t.contains("os"), "{t}");
    assert_eq!(structured(&r)["error"], "policy_violation");
    assert_eq!(structured(&r)["violation"]["policy"], "forbidden_imports");
}

#[tokio::test]
async fn execute_code_runs_once_and_reports_failure() {
    let s = session().await;
    let ok = s
        .call(
            "execute_code",
            json!({"code": "print(\"42\")", "language": "python"}),
        )
        .await;
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(text(&ok), "STDOUT:\n42");
    let failed = s
        .call(
            "execute_code",
            json!({"code": "print(\"so far\")\nexit(3)"}),
        )
        .await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(
        text(&failed),
        "STDOUT:\nso far\n\nERROR:\nthe program exited with code 3"
    );
    assert_eq!(structured(&failed)["exit_code"], 3);
    assert_eq!(structured(&failed)["success"], false);
}

#[tokio::test]
async fn bad_requests_say_what_to_change() {
    let s = session().await;
    let cases = [
        s.call(
            "execute_code",
            json!({"code": "print(\"x\")", "language": "cobol"}),
        )
        .await,
        s.call(
            "execute_code",
            json!({"code": "print(\"x\")", "profile": "nope"}),
        )
        .await,
        s.call(
            "execute_code",
            json!({"code": "print(\"x\")", "timeout_seconds": -1}),
        )
        .await,
        s.call(
            "execute_code",
            json!({"code": "print(\"x\")", "timeout_seconds": 3600}),
        )
        .await,
        s.call(
            "create_sandbox",
            json!({"name": "Bad Name", "language": "python"}),
        )
        .await,
        s.call("destroy_sandbox", json!({"sandbox_name": "ghost"}))
            .await,
    ];
    let texts: Vec<String> = cases
        .iter()
        .map(|r| {
            assert_eq!(r.is_error, Some(true), "{}", text(r));
            format!("[{}] {}", structured(r)["error"], text(r))
        })
        .collect();
    insta::assert_snapshot!(texts.join("\n"));
}

#[tokio::test]
async fn a_name_is_unique_among_live_sandboxes() {
    let s = session().await;
    let a = s
        .call(
            "create_sandbox",
            json!({"name": "twin", "language": "python"}),
        )
        .await;
    assert_eq!(a.is_error, Some(false));
    let b = s
        .call(
            "create_sandbox",
            json!({"name": "twin", "language": "python"}),
        )
        .await;
    assert_eq!(b.is_error, Some(true));
    assert_eq!(structured(&b)["error"], "name_taken");
    assert_eq!(structured(&b)["success"], false);
}

#[tokio::test]
async fn a_full_queue_answers_busy_at_once() {
    let mcp = server_on(
        engine().with_admission(AdmissionLimits {
            max_concurrent: 1,
            max_queued: 0,
            retry_after_secs: 1,
        }),
        McpOptions::default(),
    );
    let s = Session::start(mcp.clone()).await;
    let held = mcp
        .sandboxes
        .engine()
        .admission()
        .admit(&Caller::default())
        .await
        .expect("the one slot");
    let r = s
        .call("execute_code", json!({"code": "print(\"x\")"}))
        .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(structured(&r)["error"], "too_many_requests");
    assert!(text(&r).starts_with("ERROR:\nbusy: 1 executions are running and 0 waiting"));
    drop(held);
    let r = s
        .call("execute_code", json!({"code": "print(\"x\")"}))
        .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
}

#[tokio::test]
async fn the_tool_list_and_its_schemas() {
    let s = session().await;
    let tools = s.client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
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
    let mut listing: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "inputSchema": t.input_schema,
                "annotations": t.annotations,
            })
        })
        .collect();
    listing.sort_by_key(|t| t["name"].as_str().unwrap_or_default().to_owned());
    insta::assert_json_snapshot!(listing);
}

fn key(name: &str, max_sandboxes: Option<usize>, slots: Option<usize>) -> Caller {
    Caller {
        owner: Some(name.to_owned()),
        max_sandboxes,
        slots: slots.map(KeySlots::new),
    }
}

#[tokio::test]
async fn a_key_sees_only_its_own_sandboxes() {
    let mcp = server();
    let (alice, bob) = (key("alice", None, None), key("bob", None, None));
    let made = mcp.answer(
        mcp.create(
            alice.clone(),
            args(json!({"name": "mine", "language": "python"})),
        )
        .await,
    );
    assert_eq!(made.is_error, Some(false), "{}", text(&made));
    let listed = mcp.list(bob.clone());
    assert_eq!(structured(&listed)["count"], 0);
    let stolen = mcp.answer(
        mcp.run(
            bob.clone(),
            args(json!({"sandbox_name": "mine", "code": "print(\"x\")"})),
        )
        .await,
    );
    assert_eq!(structured(&stolen)["error"], "sandbox_not_found");
    let gone = mcp.answer(
        mcp.destroy(bob.clone(), args(json!({"sandbox_name": "mine"})))
            .await,
    );
    assert_eq!(structured(&gone)["error"], "sandbox_not_found");
    // Names are per owner: bob may use the same one.
    let same_name = mcp.answer(
        mcp.create(
            bob.clone(),
            args(json!({"name": "mine", "language": "python"})),
        )
        .await,
    );
    assert_eq!(same_name.is_error, Some(false), "{}", text(&same_name));
    assert_eq!(structured(&mcp.list(alice.clone()))["count"], 1);
    assert_eq!(structured(&mcp.list(Caller::default()))["count"], 0);
}

#[tokio::test]
async fn a_keys_own_limits_hold() {
    let mcp = server();
    let alice = key("alice", Some(1), Some(1));
    let first = mcp.answer(
        mcp.create(
            alice.clone(),
            args(json!({"name": "a1", "language": "python"})),
        )
        .await,
    );
    assert_eq!(first.is_error, Some(false), "{}", text(&first));
    let second = mcp.answer(
        mcp.create(
            alice.clone(),
            args(json!({"name": "a2", "language": "python"})),
        )
        .await,
    );
    assert_eq!(structured(&second)["error"], "too_many_sandboxes");
    let held = mcp
        .sandboxes
        .engine()
        .admission()
        .admit(&alice)
        .await
        .expect("alice's one slot");
    let busy = mcp.answer(
        mcp.execute(alice.clone(), args(json!({"code": "print(\"x\")"})))
            .await,
    );
    assert_eq!(structured(&busy)["error"], "too_many_requests");
    assert!(
        text(&busy).contains("\"alice\" runs 1 executions already"),
        "{}",
        text(&busy)
    );
    // Other callers are not held up by alice's limit.
    let other = mcp.answer(
        mcp.execute(Caller::default(), args(json!({"code": "print(\"x\")"})))
            .await,
    );
    assert_eq!(other.is_error, Some(false), "{}", text(&other));
    drop(held);
}

/// Hears what the engine reports.
#[derive(Debug, Default)]
struct Heard(Mutex<Vec<String>>);

impl Observer for Heard {
    fn execution(&self, record: ExecRecord<'_>) {
        let stages: Vec<&str> = record.trace.stages.iter().map(|s| s.0).collect();
        let outcome = match record.outcome {
            Ok(r) => r.reason.to_string(),
            Err(e) => format!("refused: {e}"),
        };
        self.0.lock().unwrap().push(format!(
            "{}/{}: {outcome} [{}]",
            record.profile,
            record.language,
            stages.join(", ")
        ));
    }
}

#[tokio::test]
async fn the_engine_reports_every_mcp_execution_with_its_stages() {
    let heard = Arc::new(Heard::default());
    let mcp = server_on(engine().with_observer(heard.clone()), McpOptions::default());
    let s = Session::start(mcp).await;
    s.call("execute_code", json!({"code": "print(\"x\")"}))
        .await;
    s.call(
        "execute_code",
        json!({"code": "import os", "language": "python"}),
    )
    .await;
    s.call("execute_code", json!({"code": "x", "language": "cobol"}))
        .await;
    s.call("create_sandbox", json!({"name": "o", "language": "python"}))
        .await;
    s.call("run_code", json!({"sandbox_name": "o", "code": "exit(2)"}))
        .await;
    s.call(
        "run_code",
        json!({"sandbox_name": "ghost", "code": "exit(2)"}),
    )
    .await;
    s.call("destroy_sandbox", json!({"sandbox_name": "o"}))
        .await;
    let heard = heard.0.lock().unwrap().join("\n");
    insta::assert_snapshot!(heard);
}
