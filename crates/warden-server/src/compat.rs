//! The source document's sandboxed server (`/api/v1/...`), so its existing clients work
//! unchanged: the same paths and JSON fields, backed by sandboxes with a lifetime. Code runs in
//! the sandbox's language.

use crate::sandboxes::{CreateBody, ExecBody, create_sandbox, destroy_sandbox, exec_in_to_end};
use crate::{ApiJson, ApiPath, AppState, Caller};
use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `POST /api/v1/sandbox/create`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    pub language: String,
    /// 1-48 characters of a-z, 0-9 and '-', not starting with '-'.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,47}$"))]
    pub name: String,
    /// A Kubernetes namespace in the original; accepted and shown as a label.
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Beyond the original: a profile.
    #[serde(default)]
    pub profile: Option<String>,
}

impl CreateRequest {
    /// The native create request: the namespace becomes a label.
    pub(crate) fn into_create_body(self) -> CreateBody {
        let mut labels = self.labels;
        if let Some(ns) = self.namespace {
            labels.insert("namespace".into(), ns);
        }
        CreateBody {
            profile: self.profile,
            language: Some(self.language),
            name: Some(self.name),
            labels,
            idle_ttl_seconds: None,
            max_lifetime_seconds: None,
            memory_mb: None,
            from_snapshot: None,
        }
    }
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<CreateRequest>,
) -> Response {
    let body = req.into_create_body();
    match create_sandbox(&state, &caller, body).await {
        Ok(info) => (
            StatusCode::CREATED,
            Json(serde_json::json!({
                "success": true,
                "message": format!("sandbox {} created", info.id),
                "sandbox_id": info.id,
                "sandbox": info,
            })),
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /api/v1/execute`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteRequest {
    pub sandbox_id: String,
    pub code: String,
    #[serde(default)]
    #[schemars(range(min = 0.001, max = 86400.0))]
    pub timeout_seconds: Option<f64>,
}

/// `POST /api/v1/execute/{sandbox_id}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteInRequest {
    pub code: String,
    #[serde(default)]
    #[schemars(range(min = 0.001, max = 86400.0))]
    pub timeout_seconds: Option<f64>,
}

pub async fn execute(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<ExecuteRequest>,
) -> Response {
    run(state, caller, req.sandbox_id, req.code, req.timeout_seconds).await
}

pub async fn execute_in(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<ExecuteInRequest>,
) -> Response {
    run(state, caller, id, req.code, req.timeout_seconds).await
}

async fn run(
    state: AppState,
    caller: Caller,
    id: String,
    code: String,
    timeout_seconds: Option<f64>,
) -> Response {
    let body = exec_body(code, timeout_seconds);
    let result = match exec_in_to_end(state, caller, id, body).await {
        Ok(result) => result,
        Err(e) => return e.into_response(),
    };
    let output = format!("{}{}", result.stdout, result.stderr);
    Json(serde_json::json!({
        "success": result.is_success(),
        "output": output,
        "result": output,
        "exit_code": result.shell_status(),
        "stdout": result.stdout,
        "stderr": result.stderr,
        "reason": result.reason,
        "duration_ms": result.duration_ms,
    }))
    .into_response()
}

/// The native exec request of a compatibility execute: a fresh run in the sandbox's language.
pub(crate) fn exec_body(code: String, timeout_seconds: Option<f64>) -> ExecBody {
    ExecBody {
        code,
        language: None,
        timeout_seconds,
        stdin: None,
        args: Vec::new(),
        stream: false,
        context: None,
        env: Default::default(),
        cwd: None,
    }
}

/// `POST /api/v1/sandbox/destroy`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DestroyRequest {
    pub sandbox_id: String,
    #[serde(default)]
    pub namespace: Option<String>,
    /// Accepted for compatibility: destroy always kills a running execution.
    #[serde(default)]
    pub force: bool,
}

/// Destroys a sandbox of the caller's (with API keys, another key's sandbox is not found).
pub async fn destroy(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(req): ApiJson<DestroyRequest>,
) -> Response {
    let _ = (req.namespace, req.force);
    match destroy_sandbox(&state, caller.owner(), &req.sandbox_id).await {
        Ok(id) => Json(serde_json::json!({
            "success": true,
            "message": format!("sandbox {id} destroyed"),
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}
