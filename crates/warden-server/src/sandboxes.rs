//! `/v1/sandboxes`: sandboxes with a lifetime, their executions and their files.
//!
//! Invariants: handlers stay thin (decode, one call to [`warden_engine::Sandboxes`], encode);
//! executions and context starts are admitted by the engine like one-shot ones; file paths
//! are checked by [`WorkspacePath`] before any backend sees them.

use crate::{ApiError, ApiJson, ApiPath, AppState, Caller, respond, timeout_from};
use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::collections::BTreeMap;
use warden_engine::{CreateContext, CreateSandbox, SandboxExec};
use warden_types::WorkspacePath;

/// Who is asking: the API key's name (`None`: no keys configured).
pub(crate) type Owner = Option<String>;

/// `POST /v1/sandboxes`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub language: Option<String>,
    /// 1-48 characters of a-z, 0-9 and '-', not starting with '-'.
    #[serde(default)]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,47}$"))]
    pub name: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// At most the profile's.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub idle_ttl_seconds: Option<u64>,
    /// At most the profile's.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_lifetime_seconds: Option<u64>,
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub memory_mb: Option<u64>,
    /// One of the API key's snapshots: the sandbox starts with its workspace (and its
    /// profile, language and memory unless named here). The sandbox is durable.
    #[serde(default)]
    pub from_snapshot: Option<String>,
}

pub(crate) async fn create_sandbox(
    state: &AppState,
    caller: &Caller,
    body: CreateBody,
) -> Result<warden_engine::SandboxInfo, ApiError> {
    Ok(state
        .sandboxes
        .create(
            &caller.engine(),
            CreateSandbox {
                profile: body.profile,
                language: body.language,
                name: body.name,
                labels: body.labels,
                idle_ttl_seconds: body.idle_ttl_seconds,
                max_lifetime_seconds: body.max_lifetime_seconds,
                memory_mb: body.memory_mb,
                env: BTreeMap::new(),
                home: None,
                from_snapshot: body.from_snapshot,
            },
        )
        .await?)
}

pub(crate) async fn destroy_sandbox(
    state: &AppState,
    owner: Owner,
    id: &str,
) -> Result<String, ApiError> {
    Ok(state.sandboxes.destroy(owner.as_deref(), id).await?)
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Response {
    match create_sandbox(&state, &caller, body).await {
        Ok(info) => (StatusCode::CREATED, Json(info)).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let mut labels = BTreeMap::new();
    for (key, value) in query {
        if key != "label" {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("unknown query parameter {key:?} (known: label=KEY=VALUE)"),
            )
            .into_response();
        }
        let Some((k, v)) = value.split_once('=') else {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "label: expected KEY=VALUE",
            )
            .into_response();
        };
        labels.insert(k.to_owned(), v.to_owned());
    }
    let sandboxes = state.sandboxes.list(caller.owner().as_deref(), &labels);
    Json(serde_json::json!({ "count": sandboxes.len(), "sandboxes": sandboxes })).into_response()
}

pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Response {
    match state.sandboxes.get(caller.owner().as_deref(), &id) {
        Ok(info) => Json(info).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /v1/sandboxes/{id}/pause`: its processes frozen, its state kept (or, with `evict`,
/// its Python contexts saved and ended).
pub async fn pause(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body
        .map_err(bytes_rejection)
        .and_then(|body| optional_body::<PauseBody>(&body))
    {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    match state
        .sandboxes
        .pause(caller.owner().as_deref(), &id, body.evict)
        .await
    {
        Ok(info) => Json(info).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `PATCH /v1/sandboxes/{id}/egress`: the egress gateway's new rules (replacing the old).
pub async fn set_egress(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(rules): ApiJson<warden_types::egress::GatewayRules>,
) -> Response {
    match state
        .sandboxes
        .set_egress(caller.owner().as_deref(), &id, rules)
        .await
    {
        Ok(rules) => Json(rules).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /v1/sandboxes/{id}/resume`.
pub async fn resume(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Response {
    match state.sandboxes.resume(caller.owner().as_deref(), &id).await {
        Ok(info) => Json(info).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub async fn destroy(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Response {
    match destroy_sandbox(&state, caller.owner(), &id).await {
        Ok(id) => Json(serde_json::json!({ "id": id, "destroyed": true })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/sandboxes/{id}/exec`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    pub code: String,
    #[serde(default)]
    pub language: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 0.001, max = 86400.0))]
    pub timeout_seconds: Option<f64>,
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub stream: bool,
    /// Run as a cell of this context (`"default"`: the sandbox's default Python context, made
    /// on first use); absent: a fresh run, as before contexts existed.
    #[serde(default)]
    pub context: Option<String>,
    /// Environment variables of this run only, set after the sandbox's: names of letters,
    /// digits and `_` (not starting with a digit), none beginning `WARDEN_`; under a profile
    /// with the runtime import guard, not the variables that decide what Python loads first
    /// (`PYTHONPATH`, `LD_PRELOAD`, …). Not in a context.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory of this run: an absolute path inside the sandbox's writable
    /// folders (`/workspace`, `/tmp`, the sandbox's home); it must exist. Default: the
    /// sandbox's (`/workspace`). Not in a context.
    #[serde(default)]
    pub cwd: Option<String>,
}

impl ExecBody {
    /// The engine's request, its timeout checked.
    pub(crate) fn into_sandbox_exec(self) -> Result<SandboxExec, ApiError> {
        Ok(SandboxExec {
            code: self.code,
            language: self.language,
            timeout: timeout_from(self.timeout_seconds)?,
            stdin: self.stdin.map(String::into_bytes).unwrap_or_default(),
            args: self.args,
            context: self.context,
            env: self.env,
            cwd: self.cwd,
            live_stdin: false,
        })
    }
}

pub async fn exec(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ExecBody>,
) -> Response {
    match exec_in(state, caller, id, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn exec_in(
    state: AppState,
    caller: Caller,
    id: String,
    body: ExecBody,
) -> Result<Response, ApiError> {
    let stream = body.stream;
    let execution = state
        .sandboxes
        .start_exec(&caller.engine(), &id, body.into_sandbox_exec()?)
        .await?;
    Ok(respond(execution, stream).await)
}

/// Runs in a sandbox to the end and gives the result itself (the compatibility routes
/// re-shape it).
pub(crate) async fn exec_in_to_end(
    state: AppState,
    caller: Caller,
    id: String,
    body: ExecBody,
) -> Result<warden_types::ExecResult, ApiError> {
    let execution = state
        .sandboxes
        .start_exec(&caller.engine(), &id, body.into_sandbox_exec()?)
        .await?;
    Ok(execution.finish().await?)
}

/// A raw body's rejection as the API's error: too large (413), too slow (408), else 400.
fn bytes_rejection(rejection: BytesRejection) -> ApiError {
    if let Some(e) = crate::body_timeout(&rejection) {
        return e;
    }
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            rejection.body_text(),
        ),
        _ => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            rejection.body_text(),
        ),
    }
}

pub(crate) fn workspace_path(path: &str) -> Result<WorkspacePath, ApiError> {
    WorkspacePath::new(path)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_path", format!("path: {e}")))
}

pub async fn upload(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, path)): ApiPath<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let body = body.map_err(bytes_rejection)?;
        let path = workspace_path(&path)?;
        let size = body.len();
        state
            .sandboxes
            .write_file(caller.owner().as_deref(), &id, &path, body.to_vec())
            .await?;
        Ok::<_, ApiError>(
            (
                StatusCode::CREATED,
                Json(serde_json::json!({ "path": path.as_str(), "size": size })),
            )
                .into_response(),
        )
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

pub async fn download(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, path)): ApiPath<(String, String)>,
) -> Response {
    let result = async {
        let path = workspace_path(&path)?;
        let bytes = state
            .sandboxes
            .read_file(
                caller.owner().as_deref(),
                &id,
                &path,
                state.limits.max_download_bytes,
            )
            .await?;
        Ok::<_, ApiError>(
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        )
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

pub async fn list_files(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Response {
    match state
        .sandboxes
        .list_files(caller.owner().as_deref(), &id, 10_000)
        .await
    {
        Ok(files) => Json(serde_json::json!({ "files": files })).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /v1/sandboxes/{id}/contexts`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContextBody {
    #[serde(default)]
    pub language: Option<String>,
}

/// Decodes an optional JSON body: no body at all is `{}`; anything else must be the JSON object.
pub(crate) fn optional_body<T: serde::de::DeserializeOwned + Default>(
    body: &[u8],
) -> Result<T, ApiError> {
    // Only no body at all is "no body": whitespace is a body, and not JSON (the document
    // says `application/json`; schemathesis sends "\t" and expects a refusal).
    if body.is_empty() {
        return Ok(T::default());
    }
    // Through axum's decoder, so the message names the field (`language: invalid type…`).
    Json::<crate::Object<T>>::from_bytes(body)
        .map(|Json(crate::Object(body))| body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", e.body_text()))
}

/// `POST /v1/sandboxes/{id}/pause` (the body is optional).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// Also evict the sandbox's Python contexts: save what can be saved of their variables
    /// in the sandbox and end their interpreters, to free their memory; the resume (or a
    /// context's next cell) loads them again. The answer names what could not be saved.
    #[serde(default)]
    pub evict: bool,
}

pub async fn create_context(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body
        .map_err(bytes_rejection)
        .and_then(|body| optional_body::<CreateContextBody>(&body))
    {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let created = state
        .sandboxes
        .create_context(
            &caller.engine(),
            &id,
            CreateContext {
                language: body.language,
            },
        )
        .await;
    match created {
        Ok(info) => (StatusCode::CREATED, Json(info)).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub async fn list_contexts(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Response {
    match state
        .sandboxes
        .list_contexts(caller.owner().as_deref(), &id)
    {
        Ok(contexts) => Json(serde_json::json!({ "count": contexts.len(), "contexts": contexts }))
            .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub async fn get_context(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, context)): ApiPath<(String, String)>,
) -> Response {
    match state
        .sandboxes
        .get_context(caller.owner().as_deref(), &id, &context)
    {
        Ok(info) => Json(info).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub async fn destroy_context(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, context)): ApiPath<(String, String)>,
) -> Response {
    match state
        .sandboxes
        .destroy_context(caller.owner().as_deref(), &id, &context)
        .await
    {
        Ok(id) => Json(serde_json::json!({ "id": id, "destroyed": true })).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub async fn restart_context(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, context)): ApiPath<(String, String)>,
) -> Response {
    match state
        .sandboxes
        .restart_context(&caller.engine(), &id, &context)
        .await
    {
        Ok(info) => Json(info).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /v1/sandboxes/{id}/snapshot`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotBody {
    /// Unique among the API key's snapshots: 1-48 characters of a-z, 0-9 and '-', not
    /// starting with '-'.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,47}$"))]
    pub name: String,
}

/// Records the sandbox's workspace under a name (a durable sandbox's).
pub async fn snapshot(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<SnapshotBody>,
) -> Response {
    match state
        .sandboxes
        .snapshot(caller.owner().as_deref(), &id, &body.name)
        .await
    {
        Ok(info) => (StatusCode::CREATED, Json(info)).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `GET /v1/snapshots`: the API key's snapshots, oldest first.
pub async fn list_snapshots(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    match state.sandboxes.list_snapshots(caller.owner().as_deref()) {
        Ok(snapshots) => {
            let used: u64 = snapshots.iter().map(|s| s.size_bytes).sum();
            Json(serde_json::json!({
                "count": snapshots.len(),
                "snapshots": snapshots,
                "used_bytes": used,
                "quota_bytes": state.engine.settings().server.snapshot_quota_mb * 1024 * 1024,
            }))
            .into_response()
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `DELETE /v1/snapshots/{name}`.
pub async fn delete_snapshot(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
) -> Response {
    match state
        .sandboxes
        .delete_snapshot(caller.owner().as_deref(), &name)
        .await
    {
        Ok(name) => Json(serde_json::json!({ "name": name, "deleted": true })).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// How many copies (default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 16))]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// Makes `count` independent copies of a durable sandbox as it is now.
pub async fn fork(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ForkBody>,
) -> Response {
    match state
        .sandboxes
        .fork(&caller.engine(), &id, body.count)
        .await
    {
        Ok(made) => (
            StatusCode::CREATED,
            Json(crate::openapi::ForkList {
                count: made.sandboxes.len(),
                sandboxes: made.sandboxes,
                contexts: made.contexts,
            }),
        )
            .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
