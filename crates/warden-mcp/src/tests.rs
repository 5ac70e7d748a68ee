//! The tools against a fake backend: arguments, answers, errors and the tool list, without
//! root. The real jail and a real MCP client are tested in `crates/warden/tests/mcp.rs`.

use super::*;
use rmcp::model::CallToolResult;
use std::collections::BTreeMap;
use std::sync::Mutex;
use warden_engine::{Backend, BackendError, BackendSandbox, Engine, EventSender, ExecPlan};
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

fn server_with(options: McpOptions) -> WardenMcp {
    let settings = Arc::new(warden_config::Settings::builtin());
    let engine =
        Engine::new(settings).with_backend(warden_config::BackendKind::Jail, Arc::new(Fake));
    WardenMcp::new(Sandboxes::new(engine, 4), options)
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

/// Arguments as the model sends them: JSON, decoded the way the router decodes them.
fn args<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Parameters<T> {
    Parameters(serde_json::from_value(v).expect("valid arguments"))
}

#[tokio::test]
async fn a_sandbox_lives_across_runs_and_is_found_by_name_or_id() {
    let mcp = server();
    let created = mcp
        .create_sandbox(args(json!({"name": "data", "language": "python",
            "namespace": "dev", "labels": {"team": "a"}})))
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

    let first = mcp
        .run_code(args(json!({"sandbox_name": "data",
            "code": "open(\"a.txt\", \"w\").write(\"kept\")\nprint(\"wrote\")"})))
        .await;
    assert_eq!(text(&first), "STDOUT:\nwrote");
    let second = mcp
        .run_code(args(
            json!({"sandbox_name": id, "code": "print(open(\"a.txt\").read())"}),
        ))
        .await;
    assert_eq!(text(&second), "STDOUT:\nkept");
    assert_eq!(structured(&second)["success"], true);
    assert_eq!(structured(&second)["exit_code"], 0);
    assert_eq!(structured(&second)["output"], "STDOUT:\nkept");

    let listed = mcp.list_sandboxes().await;
    assert_eq!(structured(&listed)["count"], 1);
    assert_eq!(structured(&listed)["sandboxes"][0]["id"], id.as_str());
    assert_eq!(structured(&listed)["sandboxes"][0]["executions"], 2);
    assert!(
        text(&listed).starts_with("1 live sandbox:\n- data-"),
        "{}",
        text(&listed)
    );

    let destroyed = mcp
        .destroy_sandbox(args(json!({"sandbox_name": "data"})))
        .await;
    assert_eq!(text(&destroyed), format!("sandbox {id} destroyed"));
    assert_eq!(
        structured(&destroyed),
        &json!({"success": true, "message": format!("sandbox {id} destroyed")})
    );
    assert_eq!(text(&mcp.list_sandboxes().await), "no live sandboxes");
    let gone = mcp
        .run_code(args(
            json!({"sandbox_name": "data", "code": "print(\"x\")"}),
        ))
        .await;
    assert_eq!(gone.is_error, Some(true));
    assert_eq!(structured(&gone)["error"], "sandbox_not_found");
}

#[tokio::test]
async fn files_go_in_and_come_out() {
    let mcp = server();
    mcp.create_sandbox(args(json!({"name": "f", "language": "python"})))
        .await;
    let wrote = mcp
        .write_file(args(
            json!({"sandbox_name": "f", "path": "/workspace/in/data.csv",
            "content": "a,b\n1,2\n"}),
        ))
        .await;
    assert_eq!(text(&wrote), "wrote 8 bytes to /workspace/in/data.csv");
    let read = mcp
        .read_file(args(json!({"sandbox_name": "f", "path": "in/data.csv"})))
        .await;
    assert_eq!(text(&read), "a,b\n1,2\n");
    assert_eq!(structured(&read)["size"], 8);

    let binary = mcp
        .write_file(args(json!({"sandbox_name": "f", "path": "b.bin",
            "content": "AP8=", "encoding": "base64"})))
        .await;
    assert_eq!(text(&binary), "wrote 2 bytes to /workspace/b.bin");
    let as_text = mcp
        .read_file(args(json!({"sandbox_name": "f", "path": "b.bin"})))
        .await;
    assert_eq!(
        text(&as_text),
        "/workspace/b.bin is a binary file of 2 bytes; read it with encoding \"base64\""
    );
    let as_b64 = mcp
        .read_file(args(
            json!({"sandbox_name": "f", "path": "b.bin", "encoding": "base64"}),
        ))
        .await;
    assert_eq!(text(&as_b64), "AP8=");

    let listed = mcp.list_files(args(json!({"sandbox_name": "f"}))).await;
    assert_eq!(
        text(&listed),
        "2 entries in /workspace:\n- b.bin (2 bytes)\n- in/data.csv (8 bytes)"
    );

    let escape = mcp
        .read_file(args(json!({"sandbox_name": "f", "path": "../etc/passwd"})))
        .await;
    assert_eq!(escape.is_error, Some(true));
    assert!(text(&escape).starts_with("ERROR:\ninvalid argument path: invalid workspace path"));
    let missing = mcp
        .read_file(args(json!({"sandbox_name": "f", "path": "nope.txt"})))
        .await;
    assert_eq!(missing.is_error, Some(true));
    assert_eq!(structured(&missing)["error"], "not_found");
    let bad_b64 = mcp
        .write_file(args(json!({"sandbox_name": "f", "path": "x",
            "content": "!!", "encoding": "base64"})))
        .await;
    assert!(text(&bad_b64).starts_with("ERROR:\ninvalid argument content: not base64"));
}

#[tokio::test]
async fn long_files_are_cut_for_the_model() {
    let mcp = server_with(McpOptions {
        max_output_length: 20,
        ..McpOptions::default()
    });
    mcp.create_sandbox(args(json!({"name": "l", "language": "python"})))
        .await;
    mcp.write_file(args(
        json!({"sandbox_name": "l", "path": "big.txt", "content": "x".repeat(1000)}),
    ))
    .await;
    let read = mcp
        .read_file(args(json!({"sandbox_name": "l", "path": "big.txt"})))
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
    let mcp = server();
    let r = mcp
        .execute_code(args(json!({"code": "import os\nprint(os.getcwd())"})))
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
    let mcp = server();
    let ok = mcp
        .execute_code(args(json!({"code": "print(\"42\")", "language": "python"})))
        .await;
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(text(&ok), "STDOUT:\n42");
    let failed = mcp
        .execute_code(args(json!({"code": "print(\"so far\")\nexit(3)"})))
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
    let mcp = server();
    let cases = [
        mcp.execute_code(args(json!({"code": "print(\"x\")", "language": "cobol"})))
            .await,
        mcp.execute_code(args(json!({"code": "print(\"x\")", "profile": "nope"})))
            .await,
        mcp.execute_code(args(json!({"code": "print(\"x\")", "timeout_seconds": -1})))
            .await,
        mcp.execute_code(args(
            json!({"code": "print(\"x\")", "timeout_seconds": 3600}),
        ))
        .await,
        mcp.create_sandbox(args(json!({"name": "Bad Name", "language": "python"})))
            .await,
        mcp.destroy_sandbox(args(json!({"sandbox_name": "ghost"})))
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
    let mcp = server();
    let a = mcp
        .create_sandbox(args(json!({"name": "twin", "language": "python"})))
        .await;
    assert_eq!(a.is_error, Some(false));
    let b = mcp
        .create_sandbox(args(json!({"name": "twin", "language": "python"})))
        .await;
    assert_eq!(b.is_error, Some(true));
    assert_eq!(structured(&b)["error"], "name_taken");
    assert_eq!(structured(&b)["success"], false);
}

#[tokio::test]
async fn a_full_queue_answers_busy_at_once() {
    let mcp = server_with(McpOptions {
        max_concurrent: 1,
        max_queued: 0,
        ..McpOptions::default()
    });
    let held = mcp.admit().await.expect("the one slot");
    let r = mcp
        .execute_code(args(json!({"code": "print(\"x\")"})))
        .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(structured(&r)["error"], "too_many_requests");
    assert!(text(&r).starts_with("ERROR:\nbusy: 1 executions are running and 0 waiting"));
    drop(held);
    let r = mcp
        .execute_code(args(json!({"code": "print(\"x\")"})))
        .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
}

#[test]
fn the_tool_list_and_its_schemas() {
    let tools = server().tool_router.list_all();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "create_sandbox",
            "destroy_sandbox",
            "execute_code",
            "list_files",
            "list_sandboxes",
            "read_file",
            "run_code",
            "write_file"
        ]
    );
    let listing: Vec<serde_json::Value> = tools
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
    insta::assert_json_snapshot!(listing);
}
