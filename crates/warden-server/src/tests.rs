use super::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tower::ServiceExt;
use warden_config::{BackendKind, Settings};
use warden_engine::{Backend, BackendError, EventSender, ExecPlan};
use warden_types::{ExecResult, Reason};

/// Answers with the code as stdout, after taking a permit from an optional gate.
#[derive(Debug, Default)]
struct EchoBackend {
    gate: Option<Arc<Semaphore>>,
    /// Its check refuses every plan with this reason.
    refuse: Option<&'static str>,
}

#[async_trait::async_trait]
impl Backend for EchoBackend {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
        match self.refuse {
            Some(why) => Err(BackendError::Refused(why.into())),
            None => Ok(()),
        }
    }
    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        if let Some(gate) = &self.gate {
            gate.acquire().await.unwrap().forget();
        }
        if let Some(tx) = events {
            let _ = tx
                .send(ExecEvent::Stdout {
                    text: plan.code.clone(),
                    timestamp: 1,
                })
                .await;
        }
        Ok(ExecResult {
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
        })
    }

    async fn create_sandbox(
        &self,
        _spec: warden_engine::SandboxSpec,
    ) -> Result<std::sync::Arc<dyn warden_engine::BackendSandbox>, BackendError> {
        Ok(Arc::new(MemorySandbox::default()))
    }

    async fn remove_orphans(&self, _live: &[String]) -> Result<usize, BackendError> {
        Ok(0)
    }
}

/// A sandbox whose workspace is a map; executions echo the code.
#[derive(Debug, Default)]
struct MemorySandbox {
    files: std::sync::Mutex<std::collections::BTreeMap<String, Vec<u8>>>,
}

#[async_trait::async_trait]
impl warden_engine::BackendSandbox for MemorySandbox {
    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        EchoBackend::default().exec(plan, events).await
    }
    /// `cat`: each chunk of the live stdin as stdout, as it comes, until it is closed.
    async fn exec_with_stdin(
        &self,
        _plan: ExecPlan,
        events: Option<EventSender>,
        mut stdin: warden_engine::StdinReceiver,
    ) -> Result<ExecResult, BackendError> {
        let mut out = String::new();
        while let Some(chunk) = stdin.recv().await {
            let text = String::from_utf8_lossy(&chunk).into_owned();
            if let Some(tx) = &events {
                let _ = tx
                    .send(ExecEvent::Stdout {
                        text: text.clone(),
                        timestamp: 1,
                    })
                    .await;
            }
            out.push_str(&text);
        }
        Ok(ExecResult {
            stdout: out,
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
        })
    }
    async fn write_file(
        &self,
        path: &warden_types::WorkspacePath,
        bytes: Vec<u8>,
    ) -> Result<(), BackendError> {
        self.files
            .lock()
            .unwrap()
            .insert(path.as_str().to_owned(), bytes);
        Ok(())
    }
    async fn read_file(
        &self,
        path: &warden_types::WorkspacePath,
        _max: u64,
    ) -> Result<Vec<u8>, BackendError> {
        self.files
            .lock()
            .unwrap()
            .get(path.as_str())
            .cloned()
            .ok_or_else(|| BackendError::NotFound(path.to_string()))
    }
    async fn list_files(&self, _max: usize) -> Result<Vec<warden_types::FileEntry>, BackendError> {
        Ok(self
            .files
            .lock()
            .unwrap()
            .iter()
            .map(|(p, b)| warden_types::FileEntry {
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

fn app_with(backend: EchoBackend, limits: ServerLimits) -> Router {
    app_on(engine_with(backend), limits)
}

fn engine_with(backend: EchoBackend) -> Engine {
    Engine::new(Arc::new(Settings::builtin())).with_backend(BackendKind::Jail, Arc::new(backend))
}

fn app_on(engine: Engine, limits: ServerLimits) -> Router {
    router(AppState::new(engine, limits))
}

fn app() -> Router {
    app_with(EchoBackend::default(), ServerLimits::default())
}

fn post(body: &str) -> Request<Body> {
    Request::post("/v1/execute")
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

async fn send(app: Router, req: Request<Body>) -> (StatusCode, serde_json::Value, Option<String>) {
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, value, retry)
}

#[tokio::test]
async fn health_and_readiness() {
    let (s, v, _) = send(app(), Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (s, v, _) = send(app(), Request::get("/readyz").body(Body::empty()).unwrap()).await;
    let slots = warden_config::default_max_concurrent() as u64;
    assert_eq!((s, v["free_slots"].as_u64()), (StatusCode::OK, Some(slots)));
    assert_eq!(v["status"], "ready");
}

/// `/readyz` is the backend's check of the default profile's plan: a refusal (a kernel
/// without a required part of Landlock, a missing cgroup controller) or a backend that is not
/// there is 503 with the reason, and `free_slots` stays.
#[tokio::test]
async fn readiness_is_the_default_profiles_check() {
    let refusing = EchoBackend {
        refuse: Some(
            "landlock = \"all\": this kernel's Landlock ABI is 5, so it cannot enforce scope",
        ),
        ..Default::default()
    };
    let readyz = || Request::get("/readyz").body(Body::empty()).unwrap();
    let (s, v, _) = send(app_with(refusing, ServerLimits::default()), readyz()).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["status"], "not_ready");
    assert_eq!(v["free_slots"], warden_config::default_max_concurrent());
    assert_eq!(v["code"], "refused", "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("cannot enforce scope"),
        "{v}"
    );
    // No backend for the default profile's kind.
    let engine = Engine::new(Arc::new(Settings::builtin()));
    let (s, v, _) = send(app_on(engine, ServerLimits::default()), readyz()).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(v["reason"].as_str().unwrap().contains("jail"), "{v}");
    // Only the default profile counts: a refusing backend of another kind does not matter.
    let engine = engine_with(EchoBackend::default()).with_backend(
        BackendKind::Docker,
        Arc::new(EchoBackend {
            refuse: Some("docker down"),
            ..Default::default()
        }),
    );
    let (s, _, _) = send(app_on(engine, ServerLimits::default()), readyz()).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn execute_returns_the_result() {
    let (s, v, _) = send(app(), post(r#"{"code": "print(1)"}"#)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["stdout"], "print(1)");
    assert_eq!(v["reason"], "exited");
}

#[tokio::test]
async fn malformed_json_and_wrong_types_name_the_field() {
    let (s, v, _) = send(app(), post(r#"{"code": 5}"#)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["code"], "invalid_json");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("code"),
        "{v}"
    );
    let (s, v, _) = send(app(), post(r#"{"code": "x", "profil": "a"}"#)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("profil"),
        "{v}"
    );
    let (s, _, _) = send(app(), post("{not json")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, v, _) = send(app(), post(r#"{"code": "x", "timeout_seconds": -1}"#)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("timeout_seconds"),
        "{v}"
    );
}

#[tokio::test]
async fn unknown_profile_and_language_are_400() {
    let (s, v, _) = send(app(), post(r#"{"code": "x", "profile": "gpu"}"#)).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unknown_profile"))
    );
    let (s, v, _) = send(app(), post(r#"{"code": "x", "language": "cobol"}"#)).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unknown_language"))
    );
}

#[tokio::test]
async fn policy_violations_are_422_with_module_and_line() {
    let (s, v, _) = send(app(), post(r#"{"code": "import math\nimport socket"}"#)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["error"]["violation"]["module"], "socket");
    assert_eq!(v["error"]["violation"]["line"], 2);
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let limits = ServerLimits {
        max_body_bytes: 1024,
        ..Default::default()
    };
    let big = format!(r#"{{"code": "{}"}}"#, "x".repeat(4096));
    let (s, v, _) = send(app_with(EchoBackend::default(), limits), post(&big)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["error"]["code"], "body_too_large");
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after() {
    let gate = Arc::new(Semaphore::new(0));
    let engine = engine_with(EchoBackend {
        gate: Some(gate.clone()),
        ..Default::default()
    })
    .with_admission(warden_engine::AdmissionLimits {
        max_concurrent: 1,
        max_queued: 1,
        retry_after_secs: 1,
    });
    let app = app_on(engine, ServerLimits::default());
    // One runs (blocked at the gate), one waits; the third is refused at once.
    let running = tokio::spawn(send(app.clone(), post(r#"{"code": "a"}"#)));
    let waiting = tokio::spawn(send(app.clone(), post(r#"{"code": "b"}"#)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (s, v, retry) = send(app.clone(), post(r#"{"code": "c"}"#)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(retry.as_deref(), Some("1"));
    gate.add_permits(2);
    assert_eq!(running.await.unwrap().0, StatusCode::OK);
    assert_eq!(waiting.await.unwrap().0, StatusCode::OK);
}

#[tokio::test]
async fn streaming_answers_ndjson_events_then_end() {
    let resp = app()
        .oneshot(post(r#"{"code": "print(2)", "stream": true}"#))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let lines: Vec<serde_json::Value> = std::str::from_utf8(&bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "stdout");
    assert_eq!(lines[0]["text"], "print(2)");
    assert_eq!(lines[0]["timestamp"], 1);
    let end = lines.last().unwrap();
    assert_eq!(end["type"], "end");
    assert_eq!(end["exit_code"], 0);
    assert_eq!(end["reason"], "exited");
}

#[tokio::test]
async fn unknown_routes_are_json_404() {
    let (s, v, _) = send(app(), Request::get("/nope").body(Body::empty()).unwrap()).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}

#[tokio::test]
async fn piston_execute_and_runtimes() {
    let req = Request::post("/api/v2/execute")
        .header("content-type", "application/json")
        .body(Body::from(
            r#"{"language": "py", "version": "*", "files": [{"name": "m.py", "content": "print(3)"}], "run_timeout": 2000}"#,
        ))
        .unwrap();
    let (s, v, _) = send(app(), req).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["language"], "python");
    assert_eq!(v["run"]["stdout"], "print(3)");
    assert_eq!(v["run"]["output"], "print(3)");
    assert_eq!(v["run"]["code"], 0);
    assert!(v["run"]["signal"].is_null());
    let (s, v, _) = send(
        app(),
        Request::get("/api/v2/runtimes")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let langs: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["language"].as_str().unwrap())
        .collect();
    assert_eq!(langs, ["bash", "javascript", "python"]);
}

#[tokio::test]
async fn piston_errors_are_400_with_a_message() {
    for body in [
        r#"{"language": "cobol", "files": [{"content": "x"}]}"#,
        r#"{"language": "python", "files": []}"#,
        r#"{"language": "python", "files": [{"content": "import os"}]}"#,
        r#"{"language": "python"}"#,
    ] {
        let req = Request::post("/api/v2/execute")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let (s, v, _) = send(app(), req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
}

/// Found by the `rest` fuzz target: Piston's `run_timeout` took any positive number of
/// milliseconds, past the day the native API allows; and a timeout below a nanosecond became a
/// zero one.
#[tokio::test]
async fn timeouts_out_of_range_are_refused_on_every_route() {
    for (path, body) in [
        (
            "/api/v2/execute",
            r#"{"language": "python", "files": [{"content": "1"}], "run_timeout": 30100000000}"#,
        ),
        (
            "/api/v2/execute",
            r#"{"language": "python", "files": [{"content": "1"}], "run_timeout": 86400001}"#,
        ),
        ("/v1/execute", r#"{"code": "1", "timeout_seconds": 1e-300}"#),
        ("/v1/execute", r#"{"code": "1", "timeout_seconds": 86401}"#),
    ] {
        let req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let (s, v, _) = send(app(), req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        let message = v["message"].as_str().or(v["error"]["message"].as_str());
        assert!(
            message.is_some_and(|m| m.contains("timeout")),
            "{body}: {v}"
        );
    }
}

/// Found by schemathesis: serde's derived structs also take a JSON array of their fields
/// (`[null, null]` created a sandbox). Every body is a JSON object, on every route.
#[tokio::test]
async fn bodies_that_are_not_json_objects_are_refused() {
    for (path, body) in [
        ("/v1/sandboxes", "[null, null]"),
        ("/v1/execute", r#"["print(1)"]"#),
        ("/api/v1/sandbox/create", r#"["python", "a"]"#),
        ("/api/v2/execute", r#"["python", null, [{"content": "1"}]]"#),
    ] {
        let req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let (s, v, _) = send(app(), req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path} {body}: {v}");
        let message = v["message"].as_str().or(v["error"]["message"].as_str());
        assert!(
            message.is_some_and(|m| m.contains("a JSON object")),
            "{path} {body}: {v}"
        );
    }
}

#[tokio::test]
async fn metrics_count_executions_violations_and_outcomes() {
    let app = app();
    send(app.clone(), post(r#"{"code": "print(1)"}"#)).await;
    send(app.clone(), post(r#"{"code": "import os"}"#)).await;
    let resp = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        text.contains(
            r#"warden_executions_total{profile="standard",language="python",outcome="exited"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"warden_executions_total{profile="standard",language="python",outcome="policy_violation"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"warden_policy_violations_total{policy="forbidden_imports"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("warden_execution_duration_seconds_count 1"),
        "{text}"
    );
    assert!(text.contains("warden_executions_running 0"), "{text}");
    assert!(text.contains("warden_executions_queued 0"), "{text}");
}

#[tokio::test]
async fn bad_input_is_a_clear_4xx_never_a_crash() {
    let cases: Vec<(Vec<u8>, StatusCode)> = vec![
        (b"\xff\xfe{\"code\": 1}".to_vec(), StatusCode::BAD_REQUEST),
        (
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            StatusCode::BAD_REQUEST,
        ),
        (
            br#"{"code": "x", "memory_mb": -5}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            br#"{"code": "x", "timeout_seconds": 1e300}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            br#"{"code": "x", "timeout_seconds": "soon"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            br#"{"code": "x", "memory_mb": 18446744073709551615}"#.to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            br#"{"code": "x", "memory_mb": 0}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        // Binary garbage as Python is a syntax error, reported by the policy with its position.
        (
            br#"{"code": "\u0000binary\u0001garbage"}"#.to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (b"".to_vec(), StatusCode::BAD_REQUEST),
        (b"null".to_vec(), StatusCode::BAD_REQUEST),
    ];
    for (body, expected) in cases {
        let req = Request::post("/v1/execute")
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .unwrap();
        let (s, v, _) = send(app(), req).await;
        let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
        assert_eq!(s, expected, "{shown}: {v}");
        if expected != StatusCode::OK {
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{shown}: {v}"
            );
        }
    }
    // Ten megabytes of code are accepted (under the 16 MiB body limit) and reach the backend.
    let code = "#".repeat(10 << 20);
    let (s, v, _) = send(
        app(),
        post(&format!(r#"{{"code": "{code}", "language": "bash"}}"#)),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["stdout"].as_str().unwrap().len(), 10 << 20);
}

async fn call(app: &Router, method: &str, path: &str, body: &str) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn sandbox_routes_answer_with_the_documented_shapes() {
    let app = app();
    let (status, body) = call(&app, "POST", "/v1/sandboxes", r#"{"name": "nb"}"#).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = info["id"].as_str().unwrap().to_owned();
    assert_eq!(info["profile"], "standard");
    assert_eq!(info["idle_ttl_seconds"], 600);
    assert!(info["expires_at"].as_str().unwrap().ends_with('Z'));
    let (status, body) = call(&app, "POST", "/v1/sandboxes", r#"{"name": "Bad Name"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("name"), "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sandboxes",
        r#"{"max_lifetime_seconds": 7200}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = call(
        &app,
        "PUT",
        &format!("/v1/sandboxes/{id}/files/a/b.txt"),
        "hi",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = call(&app, "GET", "/v1/sandboxes/nb/files/a/b.txt", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "hi"));
    let (status, body) = call(&app, "GET", &format!("/v1/sandboxes/{id}/files/..%2Fx"), "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "print(1)"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The standard profile's policy holds in sandboxes too.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "import os"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": 1}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A run's own environment and working directory: checked, naming the field.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"code": "print(1)", "env": {"A": "b"}, "cwd": "/workspace/sub"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (bad, field) in [
        (r#"{"code": "1", "cwd": "/etc"}"#, "cwd"),
        (r#"{"code": "1", "cwd": "relative"}"#, "cwd"),
        (r#"{"code": "1", "env": {"1X": "b"}}"#, "env"),
        (r#"{"code": "1", "env": {"WARDEN_OUTPUT_DIR": "/"}}"#, "env"),
        (r#"{"code": "1", "env": {"PYTHONPATH": "/x"}}"#, "env"),
        (
            r#"{"code": "1", "context": "default", "cwd": "/workspace"}"#,
            "cwd",
        ),
    ] {
        let (status, body) = call(&app, "POST", &format!("/v1/sandboxes/{id}/exec"), bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body.contains(&format!("{field}:")), "{bad}: {body}");
    }
    let (status, body) = call(&app, "GET", "/v1/sandboxes?bogus=1", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(&app, "DELETE", &format!("/v1/sandboxes/{id}"), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(&app, "GET", &format!("/v1/sandboxes/{id}"), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn openapi_describes_exactly_the_routes_served() {
    // Every `.route("…")` of the router is described…
    let source = include_str!("lib.rs");
    let mut routed: Vec<&str> = source
        .split(".route(")
        .skip(1)
        .filter_map(|rest| rest.trim_start().strip_prefix('"')?.split('"').next())
        .collect();
    routed.sort();
    routed.dedup();
    let mut described: Vec<&str> = openapi::OPERATIONS.iter().map(|o| o.path).collect();
    described.sort();
    described.dedup();
    assert_eq!(routed, described);
    // …and each described method is served (not 404 "no such route" nor 405).
    let app = app();
    for op in openapi::OPERATIONS {
        let path = op
            .path
            .replace("{*path}", "x.txt")
            .replace("{id}", "nope")
            .replace("{context}", "c")
            .replace("{file}", "playground.js");
        let (status, body) = call(&app, &op.method.to_uppercase(), &path, "{}").await;
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED && !body.contains("no such route"),
            "{} {path}: {status} {body}",
            op.method
        );
    }
    // The document is OpenAPI 3.1 and every reference resolves.
    let (status, body) = call(&app, "GET", "/openapi.json", "").await;
    assert_eq!(status, StatusCode::OK);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let text = doc.to_string();
    for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "dangling reference {name}"
        );
    }
    for name in ["ExecResult", "SandboxInfo", "ExecEvent", "ErrorBody"] {
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{name} missing"
        );
    }
    let (status, page) = call(&app, "GET", "/docs", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("/v1/sandboxes/{id}/exec") && !page.contains("<script"));
}

fn keyed_app() -> Router {
    use sha2::Digest;
    let digest = |k: &str| format!("{:x}", sha2::Sha256::digest(k.as_bytes()));
    let toml = format!(
        "[[server.api_keys]]\nname = \"a\"\nkey_sha256 = \"{}\"\nmax_sandboxes = 1\n[[server.api_keys]]\nname = \"b\"\nkey_sha256 = \"{}\"\n",
        digest("key-a"),
        digest("key-b")
    );
    let settings = Settings::from_toml(&toml, "keys").unwrap();
    let engine = Engine::new(Arc::new(settings))
        .with_backend(BackendKind::Jail, Arc::new(EchoBackend::default()));
    router(AppState::new(engine, ServerLimits::default()))
}

async fn call_as(
    app: &Router,
    key: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    if let Some(key) = key {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn api_keys_are_required_and_each_key_sees_its_own_sandboxes() {
    let app = keyed_app();
    let (status, _) = call_as(&app, None, "GET", "/healthz", "").await;
    assert_eq!(status, StatusCode::OK);
    for key in [None, Some("wrong"), Some("key-a2")] {
        let (status, body) =
            call_as(&app, key, "POST", "/v1/execute", r#"{"code": "print(1)"}"#).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{key:?}: {body}");
        assert!(body.contains("unauthorized"), "{body}");
    }
    let (status, _) = call_as(
        &app,
        Some("key-a"),
        "POST",
        "/v1/execute",
        r#"{"code": "print(1)"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call_as(
        &app,
        Some("key-a"),
        "POST",
        "/v1/sandboxes",
        r#"{"name": "mine"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // b neither sees nor uses a's sandbox, and may use the same name.
    for (method, path) in [
        ("GET", format!("/v1/sandboxes/{id}")),
        ("DELETE", format!("/v1/sandboxes/{id}")),
    ] {
        let (status, _) = call_as(&app, Some("key-b"), method, &path, "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    let (_, body) = call_as(&app, Some("key-b"), "GET", "/v1/sandboxes", "").await;
    assert!(body.contains(r#""count":0"#), "{body}");
    let (status, _) = call_as(
        &app,
        Some("key-b"),
        "POST",
        "/v1/sandboxes",
        r#"{"name": "mine"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    // a's own limit of one live sandbox.
    let (status, body) = call_as(&app, Some("key-a"), "POST", "/v1/sandboxes", "{}").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let (status, _) = call_as(
        &app,
        Some("key-a"),
        "GET",
        &format!("/v1/sandboxes/{id}"),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

/// The source document's routes and Piston's under API keys: 401 without a key, and a key
/// sees, runs in and destroys only its own sandboxes (another key's are not found).
#[tokio::test]
async fn compatibility_routes_honour_api_keys() {
    let app = keyed_app();
    let id_path = "/api/v1/execute/some-id";
    let routes: [(&str, &str, &str); 6] = [
        (
            "POST",
            "/api/v1/sandbox/create",
            r#"{"language": "python", "name": "doc"}"#,
        ),
        (
            "POST",
            "/api/v1/execute",
            r#"{"sandbox_id": "some-id", "code": "1"}"#,
        ),
        ("POST", id_path, r#"{"code": "1"}"#),
        (
            "POST",
            "/api/v1/sandbox/destroy",
            r#"{"sandbox_id": "some-id"}"#,
        ),
        (
            "POST",
            "/api/v2/execute",
            r#"{"language": "python", "version": "*", "files": [{"content": "print(1)"}]}"#,
        ),
        ("GET", "/api/v2/runtimes", ""),
    ];
    for (method, path, body) in routes {
        for key in [None, Some("wrong")] {
            let (status, text) = call_as(&app, key, method, path, body).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {key:?}: {text}"
            );
        }
    }
    let (status, body) = call_as(
        &app,
        Some("key-a"),
        "POST",
        "/api/v1/sandbox/create",
        r#"{"language": "python", "name": "doc"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let execute = format!(r#"{{"sandbox_id": "{id}", "code": "print(2)"}}"#);
    let execute_in = format!("/api/v1/execute/{id}");
    let destroy = format!(r#"{{"sandbox_id": "{id}"}}"#);
    // Another key: not found on every route that names the sandbox, and nothing destroyed.
    for (path, body) in [
        ("/api/v1/execute", execute.as_str()),
        (execute_in.as_str(), r#"{"code": "print(2)"}"#),
        ("/api/v1/sandbox/destroy", destroy.as_str()),
    ] {
        let (status, text) = call_as(&app, Some("key-b"), "POST", path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "key-b: POST {path}: {text}");
    }
    // The owner: runs in it through both execute routes.
    for (path, body) in [
        ("/api/v1/execute", execute.as_str()),
        (execute_in.as_str(), r#"{"code": "print(2)"}"#),
    ] {
        let (status, text) = call_as(&app, Some("key-a"), "POST", path, body).await;
        assert_eq!(status, StatusCode::OK, "key-a: POST {path}: {text}");
        assert!(text.contains(r#""stdout":"print(2)""#), "{text}");
    }
    // The key's own limit of one live sandbox holds on the compatibility route too; b has its
    // own and may reuse the name.
    let (status, text) = call_as(
        &app,
        Some("key-a"),
        "POST",
        "/api/v1/sandbox/create",
        r#"{"language": "python", "name": "other"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    let (status, text) = call_as(
        &app,
        Some("key-b"),
        "POST",
        "/api/v1/sandbox/create",
        r#"{"language": "python", "name": "doc"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    // Piston's one-shot route runs for any valid key.
    for key in ["key-a", "key-b"] {
        let (status, text) = call_as(&app, Some(key), "POST", routes[4].1, routes[4].2).await;
        assert_eq!(status, StatusCode::OK, "{key}: {text}");
        assert!(text.contains("print(1)"), "{text}");
        let (status, _) = call_as(&app, Some(key), "GET", "/api/v2/runtimes", "").await;
        assert_eq!(status, StatusCode::OK);
    }
    // The owner destroys it; then it is gone for everyone.
    let (status, text) = call_as(
        &app,
        Some("key-a"),
        "POST",
        "/api/v1/sandbox/destroy",
        &destroy,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains(r#""success":true"#), "{text}");
    for key in ["key-a", "key-b"] {
        let (status, _) = call_as(&app, Some(key), "POST", "/api/v1/execute", &execute).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{key}");
    }
}

#[tokio::test]
async fn executions_are_traced_to_an_otlp_collector_when_one_is_configured() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A collector that answers 200 and hands over what it was sent.
    let collector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = collector.local_addr().unwrap();
    let received = tokio::spawn(async move {
        let (mut conn, _) = collector.accept().await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = conn.read(&mut buf).await.unwrap();
            raw.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&raw).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if body.len() >= len {
                    conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                        .await
                        .unwrap();
                    return (head.to_owned(), body.to_owned());
                }
            }
        }
    });
    let settings = Settings::from_toml(
        &format!("[server.otlp]\nendpoint = \"http://{addr}/v1/traces\"\n"),
        "otlp",
    )
    .unwrap();
    let engine = Engine::new(Arc::new(settings))
        .with_backend(BackendKind::Jail, Arc::new(EchoBackend::default()));
    let app = router(AppState::new(engine, ServerLimits::default()));
    let (status, _) = call(&app, "POST", "/v1/execute", r#"{"code": "print(1)"}"#).await;
    assert_eq!(status, StatusCode::OK);
    let (head, body) = tokio::time::timeout(std::time::Duration::from_secs(5), received)
        .await
        .expect("no export within 5 s")
        .unwrap();
    assert!(head.starts_with("POST /v1/traces HTTP/1.1"), "{head}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    let names: Vec<_> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["execute", "queue", "policies", "run"]);
    let root = &spans[0];
    for child in &spans[1..] {
        assert_eq!(child["parentSpanId"], root["spanId"]);
        assert_eq!(child["traceId"], root["traceId"]);
    }
    let attr = |k: &str| {
        root["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == k)
            .map(|a| a["value"]["stringValue"].as_str().unwrap().to_owned())
    };
    assert_eq!(attr("warden.profile").as_deref(), Some("standard"));
    assert_eq!(attr("warden.outcome").as_deref(), Some("exited"));
    assert_eq!(
        doc["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
        "warden"
    );
}

#[test]
fn an_otlp_endpoint_must_be_plain_http() {
    let err = Settings::from_toml(
        "[server.otlp]\nendpoint = \"https://collector:4318/v1/traces\"\n",
        "otlp",
    )
    .unwrap_err();
    assert!(err.to_string().contains("server.otlp.endpoint"), "{err}");
}

#[tokio::test]
async fn the_playground_is_served_open_and_embedded() {
    // With keys configured, the page and its assets need none; the API still does.
    let app = keyed_app();
    let (status, page) = call_as(&app, None, "GET", "/", "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("<title>Warden playground</title>"), "{page}");
    // Nothing from elsewhere: every script and style sheet is one of the embedded assets.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );
    let mut referenced = 0;
    for link in page.split("/playground/").skip(1) {
        let file = link.split('"').next().unwrap();
        assert!(
            crate::playground::ASSETS
                .iter()
                .any(|(name, _, _)| *name == file),
            "the page loads {file}, which is not embedded"
        );
        referenced += 1;
    }
    assert_eq!(referenced, crate::playground::ASSETS.len());
    for (name, content_type, body) in crate::playground::ASSETS {
        let req = Request::get(format!("/playground/{name}"))
            .body(Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{name}");
        assert_eq!(resp.headers()["content-type"], *content_type, "{name}");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(bytes.len(), body.len(), "{name}");
        assert!(!body.contains("//# sourceMappingURL=http"), "{name}");
    }
    let (status, body) = call_as(&app, None, "GET", "/playground/nope.js", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = call_as(&app, None, "GET", "/playground/../v1/sandboxes", "").await;
    assert_ne!(status, StatusCode::OK);
    let (status, _) = call_as(&app, None, "GET", "/v1/profiles", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call_as(&app, None, "GET", "/v1/sandboxes", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // The page may run only its own scripts.
    let resp = app
        .clone()
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"));
}

#[tokio::test]
async fn profiles_lists_the_profiles_and_languages() {
    let app = app();
    let (status, body) = call(&app, "GET", "/v1/profiles", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["default_profile"], "standard");
    let names: Vec<&str> = list["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"standard") && names.contains(&"data_science"),
        "{body}"
    );
    assert_eq!(list["profiles"][1]["language"], "python", "{body}");
    let languages = list["languages"].as_array().unwrap();
    assert!(languages.iter().any(|l| l == "python"), "{body}");
    assert!(languages.iter().any(|l| l == "javascript"), "{body}");
}

/// The E2B drop-in's routing, codecs and errors (a fake backend; the official SDK drives a
/// real daemon in tests/e2b).
mod e2b;

/// A context past the daemon's room (its descriptor limit) is 503 with its own code and a
/// message naming the settings that raise it, never a 500.
#[test]
fn a_full_hosts_contexts_are_503_naming_the_settings() {
    let e = crate::error::ApiError::from(warden_engine::EngineError::HostContextsFull { max: 3 });
    assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(e.code, "host_contexts_full");
    assert!(
        e.message.starts_with("3 contexts are live on this host")
            && e.message.contains("LimitNOFILE")
            && e.message.contains("max_sandboxes"),
        "{}",
        e.message
    );
}

/// A backend's `Busy` (a pause or a copy that cannot happen this instant: its turn held, a
/// process the freezer could not stop) is 409 `sandbox_busy` with the backend's reason, for the
/// caller to retry; never a 5xx.
#[test]
fn a_backends_busy_is_409_sandbox_busy_with_its_reason() {
    for reason in [warden_engine::PAUSE_BUSY, warden_engine::FREEZE_UNSETTLED] {
        let e = crate::error::ApiError::from(warden_engine::EngineError::Backend(
            warden_engine::BackendError::Busy(reason.into()),
        ));
        assert_eq!(e.status, StatusCode::CONFLICT, "{reason}");
        assert_eq!(e.code, "sandbox_busy", "{reason}");
        assert_eq!(e.message, reason);
    }
}
