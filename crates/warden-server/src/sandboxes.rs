//! `/v1/sandboxes`: sandboxes with a lifetime, their executions and their files.
//!
//! Invariants: handlers stay thin (decode, one call to [`warden_engine::Sandboxes`], encode);
//! executions go through the same admission (slots and queue) as one-shot ones; file paths
//! are checked by [`WorkspacePath`] before any backend sees them.

use crate::otlp::ExecSpans;
use crate::{
    ApiError, ApiJson, ApiPath, AppState, Caller, admit, refusal, respond, run_to_end, timeout_from,
};
use axum::Extension;
use axum::Json;
use axum::body::Bytes;
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
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub idle_ttl_seconds: Option<u64>,
    #[serde(default)]
    pub max_lifetime_seconds: Option<u64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
}

pub(crate) async fn create_sandbox(
    state: &AppState,
    caller: &Caller,
    body: CreateBody,
) -> Result<warden_engine::SandboxInfo, ApiError> {
    let owner = caller.owner();
    if let Some(key) = &caller.0
        && let Some(max) = key.max_sandboxes
        && state.sandboxes.count_of(owner.as_deref()) >= max
    {
        return Err(ApiError::from(
            warden_engine::EngineError::TooManySandboxes { max },
        ));
    }
    let info = state
        .sandboxes
        .create(CreateSandbox {
            profile: body.profile,
            language: body.language,
            name: body.name,
            labels: body.labels,
            idle_ttl_seconds: body.idle_ttl_seconds,
            max_lifetime_seconds: body.max_lifetime_seconds,
            memory_mb: body.memory_mb,
            owner,
        })
        .await?;
    state
        .metrics
        .sandboxes_live
        .set(state.sandboxes.count() as i64);
    Ok(info)
}

pub(crate) async fn destroy_sandbox(
    state: &AppState,
    owner: Owner,
    id: &str,
) -> Result<String, ApiError> {
    let id = state.sandboxes.destroy(owner.as_deref(), id).await?;
    state
        .metrics
        .sandboxes_live
        .set(state.sandboxes.count() as i64);
    Ok(id)
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
    let admitted = admit_exec(&state, caller, id, body).await?;
    let sandboxes = state.sandboxes.clone();
    let AdmittedExec {
        slot,
        spans,
        profile,
        language,
        prepared,
    } = admitted;
    Ok(respond(
        state,
        slot,
        spans,
        stream,
        profile,
        language,
        move |events| async move { sandboxes.run_exec(prepared, events).await },
    )
    .await)
}

/// Runs in a sandbox to the end and gives the result itself (the compatibility routes
/// re-shape it), counted and traced as `exec_in` does.
pub(crate) async fn exec_in_to_end(
    state: AppState,
    caller: Caller,
    id: String,
    body: ExecBody,
) -> Result<warden_types::ExecResult, ApiError> {
    let AdmittedExec {
        slot,
        spans,
        profile,
        language,
        prepared,
    } = admit_exec(&state, caller, id, body).await?;
    let sandboxes = state.sandboxes.clone();
    run_to_end(
        state,
        slot,
        spans,
        profile,
        language,
        move |events| async move { sandboxes.run_exec(prepared, events).await },
    )
    .await
}

/// An execution in a sandbox, admitted (a slot held) and prepared (policies passed).
struct AdmittedExec {
    slot: crate::Admitted,
    spans: ExecSpans,
    profile: String,
    language: String,
    prepared: warden_engine::PreparedExec,
}

async fn admit_exec(
    state: &AppState,
    caller: Caller,
    id: String,
    body: ExecBody,
) -> Result<AdmittedExec, ApiError> {
    let owner = caller.owner();
    let req_language = body.language.clone();
    let req = SandboxExec {
        code: body.code,
        language: body.language,
        timeout: timeout_from(body.timeout_seconds)?,
        stdin: body.stdin.map(String::into_bytes).unwrap_or_default(),
        args: body.args,
        context: body.context,
    };
    // Unknown sandbox: answer before queueing.
    let info = state.sandboxes.get(owner.as_deref(), &id)?;
    let mut spans = ExecSpans::start();
    spans.stage("queue");
    let slot = admit(state, &caller).await?;
    spans.stage("policies");
    let sandboxes = state.sandboxes.clone();
    let prepared =
        tokio::task::spawn_blocking(move || sandboxes.prepare_exec(owner.as_deref(), &id, req))
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            })?;
    let prepared = prepared.map_err(|e| {
        let language = req_language.unwrap_or(info.language.clone());
        refusal(state, &info.profile, &language, e)
    })?;
    spans.stage("run");
    Ok(AdmittedExec {
        slot,
        spans,
        profile: prepared.profile().to_owned(),
        language: prepared.plan.language.to_string(),
        prepared,
    })
}

fn workspace_path(path: &str) -> Result<WorkspacePath, ApiError> {
    WorkspacePath::new(path)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_path", format!("path: {e}")))
}

pub async fn upload(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath((id, path)): ApiPath<(String, String)>,
    body: Bytes,
) -> Response {
    let result = async {
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

pub async fn create_context(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    body: Bytes,
) -> Response {
    // The body is optional: no body is `{}`.
    let body: CreateContextBody = if body.iter().all(u8::is_ascii_whitespace) {
        CreateContextBody::default()
    } else {
        // Through axum's decoder, so the message names the field (`language: invalid type…`).
        match Json::<CreateContextBody>::from_bytes(&body) {
            Ok(Json(b)) => b,
            Err(e) => {
                return ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", e.body_text())
                    .into_response();
            }
        }
    };
    // Starting an interpreter costs as much as an execution: it takes a slot.
    let _slot = match admit(&state, &caller).await {
        Ok(slot) => slot,
        Err(e) => return e.into_response(),
    };
    let created = state
        .sandboxes
        .create_context(
            caller.owner().as_deref(),
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
    let _slot = match admit(&state, &caller).await {
        Ok(slot) => slot,
        Err(e) => return e.into_response(),
    };
    match state
        .sandboxes
        .restart_context(caller.owner().as_deref(), &id, &context)
        .await
    {
        Ok(info) => Json(info).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
