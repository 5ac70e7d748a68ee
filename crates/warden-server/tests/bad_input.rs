//! Bad input at every route of the REST API: huge, binary, invalid UTF-8, deeply nested,
//! wrongly typed or out of range fields, unknown profiles and languages, wrong content types.
//! Each must be answered with a 4xx whose `{"error": {"code", "message"}}` names the field and
//! why — never a 5xx, a crash or a hang (every request has a deadline).
//!
//! The daemon runs in process over a backend that echoes the code (the requests must reach it
//! when they are good), so this needs no root; `crates/warden/tests/serve.rs` sends a few of
//! these to a real daemon with the real jail.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use warden_config::{BackendKind, Settings};
use warden_engine::{Backend, BackendError, BackendSandbox, Engine, EventSender, ExecPlan};
use warden_server::{AppState, ServerLimits, router};
use warden_types::{ExecResult, FileEntry, Reason, WorkspacePath};

/// Echoes the code as stdout; its sandboxes hold no files.
#[derive(Debug)]
struct Echo;

fn echoed(plan: ExecPlan) -> ExecResult {
    ExecResult {
        stdout: plan.code,
        stderr: String::new(),
        exit_code: Some(0),
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
impl Backend for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
        Ok(())
    }
    async fn exec(
        &self,
        plan: ExecPlan,
        _: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        Ok(echoed(plan))
    }
    async fn create_sandbox(
        &self,
        _: warden_engine::SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        Ok(Arc::new(Echo))
    }
    async fn remove_orphans(&self, _: &[String]) -> Result<usize, BackendError> {
        Ok(0)
    }
}

#[async_trait::async_trait]
impl BackendSandbox for Echo {
    async fn exec(
        &self,
        plan: ExecPlan,
        _: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        Ok(echoed(plan))
    }
    async fn write_file(&self, _: &WorkspacePath, _: Vec<u8>) -> Result<(), BackendError> {
        Ok(())
    }
    async fn read_file(&self, path: &WorkspacePath, _: u64) -> Result<Vec<u8>, BackendError> {
        Err(BackendError::NotFound(path.to_string()))
    }
    async fn list_files(&self, _: usize) -> Result<Vec<FileEntry>, BackendError> {
        Ok(vec![])
    }
    async fn destroy(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

fn app() -> axum::Router {
    let engine =
        Engine::new(Arc::new(Settings::builtin())).with_backend(BackendKind::Jail, Arc::new(Echo));
    router(AppState::new(engine, ServerLimits::default()))
}

/// One request; the status and the body as JSON (Null when it is not JSON). A request that
/// takes more than 20 s is a hang.
async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, serde_json::Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let req = req.body(Body::from(body)).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(20), async {
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    })
    .await;
    answer.unwrap_or_else(|_| panic!("{method} {path}: no answer within 20 s"))
}

/// A bad request and what it must get: the status, the error code, and words the message must
/// contain (the field, and why).
struct Case {
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
    says: &'static [&'static str],
}

fn json_case(
    path: &str,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
    says: &'static [&'static str],
) -> Case {
    Case {
        method: "POST",
        path: path.to_owned(),
        content_type: Some("application/json"),
        body: body.into(),
        status,
        code,
        says,
    }
}

fn nested(depth: usize, open: &str, close: &str) -> String {
    format!("{}{}", open.repeat(depth), close.repeat(depth))
}

async fn check_all(app: &axum::Router, cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in cases {
        let (status, v) = call(app, c.method, &c.path, c.content_type, c.body.clone()).await;
        let shown = String::from_utf8_lossy(&c.body[..c.body.len().min(80)]).into_owned();
        let message = v["error"]["message"].as_str().unwrap_or_default();
        let code = v["error"]["code"].as_str().unwrap_or_default();
        let mut wrong = Vec::new();
        if status.as_u16() != c.status {
            wrong.push(format!("status {status}, not {}", c.status));
        }
        if code != c.code {
            wrong.push(format!("code {code:?}, not {:?}", c.code));
        }
        if message.is_empty() {
            wrong.push("no message".into());
        }
        for word in c.says {
            if !message.contains(word) {
                wrong.push(format!("the message does not say {word:?}"));
            }
        }
        if status.is_server_error() {
            wrong.push("a server error for bad input".into());
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{} {} {shown:?}: {} — got {v:.300}",
                c.method,
                c.path,
                wrong.join(", ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} bad requests were not answered right:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn one_shot_execution_refuses_bad_input_with_a_clear_4xx() {
    let app = app();
    let e = "/v1/execute";
    let mut garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    garbage[0] = 0xff;
    let cases = vec![
        json_case(e, garbage, 400, "invalid_json", &["expected"]),
        json_case(
            e,
            b"{\"code\": \"\xff\xfe\"}".to_vec(),
            400,
            "invalid_json",
            &["code", "unicode"],
        ),
        json_case(
            e,
            nested(100_000, "[", "]"),
            400,
            "invalid_json",
            &["invalid type"],
        ),
        json_case(
            e,
            format!(
                r#"{{"code": "x", "stdin": {}}}"#,
                nested(100_000, r#"{"a":"#, "}")
            ),
            400,
            "invalid_json",
            &["stdin", "invalid type"],
        ),
        json_case(
            e,
            r#"{"code": "x", "memory_mb": -5}"#,
            400,
            "invalid_json",
            &["memory_mb", "-5"],
        ),
        json_case(
            e,
            r#"{"code": "x", "memory_mb": 1.5}"#,
            400,
            "invalid_json",
            &["memory_mb", "1.5"],
        ),
        json_case(
            e,
            r#"{"code": "x", "memory_mb": "64"}"#,
            400,
            "invalid_json",
            &["memory_mb", "string"],
        ),
        json_case(
            e,
            r#"{"code": "x", "memory_mb": 18446744073709551616}"#,
            400,
            "invalid_json",
            &["memory_mb"],
        ),
        json_case(
            e,
            r#"{"code": "x", "memory_mb": 18446744073709551615}"#,
            422,
            "policy_violation",
            &["memory"],
        ),
        json_case(
            e,
            r#"{"code": "x", "memory_mb": 0}"#,
            400,
            "invalid_request",
            &["memory_mb"],
        ),
        json_case(
            e,
            r#"{"code": "x", "timeout_seconds": -1}"#,
            400,
            "invalid_request",
            &["timeout_seconds"],
        ),
        json_case(
            e,
            r#"{"code": "x", "timeout_seconds": 0}"#,
            400,
            "invalid_request",
            &["timeout_seconds"],
        ),
        json_case(
            e,
            r#"{"code": "x", "timeout_seconds": 1e300}"#,
            400,
            "invalid_request",
            &["timeout_seconds"],
        ),
        json_case(
            e,
            r#"{"code": "x", "timeout_seconds": 1e400}"#,
            400,
            "invalid_json",
            &["timeout_seconds"],
        ),
        json_case(
            e,
            r#"{"code": "x", "timeout_seconds": "soon"}"#,
            400,
            "invalid_json",
            &["timeout_seconds", "string"],
        ),
        json_case(
            e,
            r#"{"code": "x", "timeout_seconds": true}"#,
            400,
            "invalid_json",
            &["timeout_seconds"],
        ),
        json_case(
            e,
            r#"{"code": "x", "profile": "gpu"}"#,
            400,
            "unknown_profile",
            &["gpu"],
        ),
        json_case(
            e,
            r#"{"code": "x", "language": "cobol"}"#,
            400,
            "unknown_language",
            &["cobol"],
        ),
        json_case(
            e,
            r#"{"code": "x", "language": ""}"#,
            400,
            "unknown_language",
            &["language"],
        ),
        json_case(
            e,
            r#"{"code": "x", "profile": "\u0000\n../x"}"#,
            400,
            "unknown_profile",
            &["profile"],
        ),
        json_case(
            e,
            r#"{"code": "x", "stream": "yes"}"#,
            400,
            "invalid_json",
            &["stream"],
        ),
        json_case(
            e,
            r#"{"code": "x", "limits": {}}"#,
            400,
            "invalid_json",
            &["limits"],
        ),
        json_case(
            e,
            r#"{"code": "a", "code": "b"}"#,
            400,
            "invalid_json",
            &["duplicate", "code"],
        ),
        json_case(
            e,
            r#"{"language": "python"}"#,
            400,
            "invalid_json",
            &["code"],
        ),
        json_case(e, "", 400, "invalid_json", &["EOF"]),
        json_case(e, "[]", 400, "invalid_json", &["expected"]),
        json_case(e, "\"print(1)\"", 400, "invalid_json", &["expected"]),
        json_case(e, "null", 400, "invalid_json", &["expected"]),
        json_case(
            e,
            format!(r#"{{"code": "{}"}}"#, "x".repeat(17 << 20)),
            413,
            "body_too_large",
            &["length limit"],
        ),
        Case {
            content_type: Some("text/plain"),
            ..json_case(
                e,
                r#"{"code": "x"}"#,
                415,
                "unsupported_media_type",
                &["Content-Type"],
            )
        },
        Case {
            content_type: None,
            ..json_case(
                e,
                r#"{"code": "x"}"#,
                415,
                "unsupported_media_type",
                &["Content-Type"],
            )
        },
        Case {
            content_type: Some("application/x-www-form-urlencoded"),
            ..json_case(
                e,
                "code=x",
                415,
                "unsupported_media_type",
                &["Content-Type"],
            )
        },
        Case {
            method: "GET",
            ..json_case(e, "", 405, "method_not_allowed", &["method"])
        },
    ];
    check_all(&app, cases).await;
    // Good input still works beside all that: ten megabytes of code reach the backend, with a
    // charset in the content type.
    let code = "#".repeat(10 << 20);
    let (status, v) = call(
        &app,
        "POST",
        e,
        Some("application/json; charset=utf-8"),
        format!(r#"{{"code": "{code}", "language": "bash"}}"#).into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v:.300}");
    assert_eq!(v["stdout"].as_str().map(str::len), Some(10 << 20));
}

#[tokio::test]
async fn sandbox_routes_refuse_bad_input_with_a_clear_4xx() {
    let app = app();
    let (status, v) = call(
        &app,
        "POST",
        "/v1/sandboxes",
        Some("application/json"),
        br#"{"profile": "standard"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let s = "/v1/sandboxes";
    let exec = format!("/v1/sandboxes/{id}/exec");
    let contexts = format!("/v1/sandboxes/{id}/contexts");
    let pause = format!("/v1/sandboxes/{id}/pause");
    let file = |p: &str| Case {
        method: "GET",
        content_type: None,
        ..json_case(
            &format!("/v1/sandboxes/{id}/files/{p}"),
            "",
            400,
            "bad_path",
            &[],
        )
    };
    let cases = vec![
        json_case(
            s,
            r#"{"idle_ttl_seconds": -1}"#,
            400,
            "invalid_json",
            &["idle_ttl_seconds"],
        ),
        json_case(
            s,
            r#"{"idle_ttl_seconds": "soon"}"#,
            400,
            "invalid_json",
            &["idle_ttl_seconds"],
        ),
        json_case(
            s,
            r#"{"idle_ttl_seconds": 1e20}"#,
            400,
            "invalid_json",
            &["idle_ttl_seconds"],
        ),
        json_case(
            s,
            r#"{"idle_ttl_seconds": 999999999}"#,
            400,
            "invalid_request",
            &["idle_ttl_seconds"],
        ),
        json_case(
            s,
            r#"{"max_lifetime_seconds": 18446744073709551615}"#,
            400,
            "invalid_request",
            &["max_lifetime_seconds"],
        ),
        json_case(
            s,
            r#"{"memory_mb": -1}"#,
            400,
            "invalid_json",
            &["memory_mb"],
        ),
        json_case(s, r#"{"profile": "gpu"}"#, 400, "unknown_profile", &["gpu"]),
        json_case(
            s,
            r#"{"language": "cobol"}"#,
            400,
            "unknown_language",
            &["cobol"],
        ),
        json_case(
            s,
            r#"{"labels": {"a": 1}}"#,
            400,
            "invalid_json",
            &["labels"],
        ),
        json_case(s, r#"{"labels": []}"#, 400, "invalid_json", &["labels"]),
        json_case(
            s,
            format!(r#"{{"labels": {}}}"#, nested(100_000, r#"{"a":"#, "}")),
            400,
            "invalid_json",
            &["labels", "invalid type"],
        ),
        json_case(
            s,
            format!(r#"{{"name": {}}}"#, nested(100_000, "[", "]")),
            400,
            "invalid_json",
            &["name", "invalid type"],
        ),
        json_case(
            s,
            b"{\"name\": \"\xc3\x28\"}".to_vec(),
            400,
            "invalid_json",
            &["name", "unicode"],
        ),
        json_case(
            &exec,
            r#"{"code": "x", "args": "a b"}"#,
            400,
            "invalid_json",
            &["args"],
        ),
        json_case(
            &exec,
            r#"{"code": "x", "timeout_seconds": -3}"#,
            400,
            "invalid_request",
            &["timeout_seconds"],
        ),
        json_case(
            &exec,
            r#"{"code": "x", "language": "cobol"}"#,
            400,
            "unknown_language",
            &["cobol"],
        ),
        json_case(&exec, r#"{"code": 7}"#, 400, "invalid_json", &["code"]),
        json_case(
            &exec,
            nested(100_000, "[", "]"),
            400,
            "invalid_json",
            &["invalid type"],
        ),
        json_case(
            &exec,
            format!(r#"{{"code": "x", "args": {}}}"#, nested(100_000, "[", "]")),
            400,
            "invalid_json",
            &["args"],
        ),
        Case {
            content_type: Some("text/plain"),
            ..json_case(
                &exec,
                r#"{"code": "x"}"#,
                415,
                "unsupported_media_type",
                &["Content-Type"],
            )
        },
        json_case(
            &contexts,
            r#"{"language": "cobol"}"#,
            400,
            "unknown_language",
            &["cobol"],
        ),
        json_case(
            &contexts,
            r#"{"language": 5}"#,
            400,
            "invalid_json",
            &["language"],
        ),
        // An optional body may be absent, but whitespace is a body and not JSON.
        json_case(&contexts, "\t", 400, "invalid_json", &["EOF"]),
        json_case(&pause, " \n", 400, "invalid_json", &["EOF"]),
        json_case(
            "/v1/sandboxes/no-such-sandbox/exec",
            r#"{"code": "x"}"#,
            404,
            "sandbox_not_found",
            &["no-such-sandbox"],
        ),
        file("%2e%2e/etc/passwd"),
        file("a/../../etc/passwd"),
        file("%FF%FE"),
        file("a%00b"),
        file("/etc/passwd"),
        Case {
            body: vec![0; 10],
            method: "PUT",
            ..file("%FF")
        },
        // The compatibility routes.
        json_case(
            "/api/v1/execute",
            r#"{"code": "x"}"#,
            400,
            "invalid_json",
            &["sandbox_id"],
        ),
        json_case(
            "/api/v1/execute",
            r#"{"sandbox_id": "x", "code": "y", "timeout_seconds": -1}"#,
            400,
            "invalid_request",
            &["timeout_seconds"],
        ),
        json_case(
            "/api/v1/sandbox/create",
            r#"{"language": "cobol", "name": "x"}"#,
            400,
            "unknown_language",
            &["cobol"],
        ),
        json_case(
            "/api/v1/sandbox/create",
            r#"{"language": "python"}"#,
            400,
            "invalid_json",
            &["name"],
        ),
        json_case(
            "/api/v1/sandbox/destroy",
            r#"{"sandbox_id": 5}"#,
            400,
            "invalid_json",
            &["sandbox_id"],
        ),
    ];
    check_all(&app, cases).await;
}

/// Piston's route answers errors in Piston's own shape, `{"message"}` (its clients read that),
/// with the same rule: a 4xx that names the field and why. (`-1` limits are Piston's "the
/// configured limit", not an error.)
#[tokio::test]
async fn piston_refuses_bad_input_with_a_clear_4xx_in_its_own_shape() {
    let app = app();
    let one = r#""files": [{"content": "x"}]"#;
    let cases: Vec<(String, u16, &[&str])> = vec![
        (
            r#"{"language": "python", "files": []}"#.into(),
            400,
            &["files"],
        ),
        (
            format!(r#"{{"language": "cobol", {one}}}"#),
            400,
            &["cobol"],
        ),
        (
            format!(r#"{{"language": "python", {one}, "run_timeout": -5}}"#),
            400,
            &["run_timeout"],
        ),
        (
            format!(r#"{{"language": "python", {one}, "run_timeout": 1.5}}"#),
            400,
            &["run_timeout", "floating point"],
        ),
        (
            format!(r#"{{"language": "python", {one}, "run_memory_limit": "big"}}"#),
            400,
            &["run_memory_limit"],
        ),
        (
            format!(r#"{{"language": "python", {one}, "run_timeout": 9223372036854775807}}"#),
            400,
            &["timeout"],
        ),
        (
            format!(
                r#"{{"language": "python", {one}, "args": {}}}"#,
                nested(100_000, "[", "]")
            ),
            400,
            &["args"],
        ),
        (
            r#"{"language": "python", "files": [{"content": 5}]}"#.into(),
            400,
            &["files[0].content"],
        ),
        ("\u{0}\u{1}garbage".into(), 400, &["expected"]),
    ];
    let mut failures = Vec::new();
    for (body, want, says) in cases {
        let (status, v) = call(
            &app,
            "POST",
            "/api/v2/execute",
            Some("application/json"),
            body.clone().into_bytes(),
        )
        .await;
        let message = v["message"].as_str().unwrap_or_default();
        if status.as_u16() != want || says.iter().any(|w| !message.contains(w)) {
            failures.push(format!("{body:.80}: {status} {v}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
