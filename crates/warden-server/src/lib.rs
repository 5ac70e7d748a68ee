//! Warden's HTTP API (the start of `warden serve`): one-shot execution with a JSON result or an
//! NDJSON event stream, health, JSON errors, a request body limit; the engine's reports of
//! executions recorded as metrics and traces (`observe.rs`).
//!
//! Invariants: handlers are thin — decode, one engine call ([`Engine::start`],
//! [`Sandboxes::start_exec`], …), encode; admission (slots, queue, 429 with Retry-After),
//! policies and the backend's check are the engine's; every error is
//! `{"error": {"code", "message"}}` with the engine's code, a fitting status and no 500 for bad
//! input.

pub mod audit;
mod auth;
mod compat;
pub mod decode;
pub mod e2b;
mod error;
pub mod fuzz;
pub mod listen;
mod mcp;
mod metrics;
mod observe;
pub mod openapi;
mod otlp;
mod piston;
pub mod playground;
mod sandboxes;
mod versions;

pub use auth::{Caller, Keys};
pub use error::ApiError;
pub use metrics::Metrics;
use otlp::Tracer;
use versions::Versions;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use warden_engine::{Engine, ExecRequest, Sandboxes, Streamed};
use warden_types::ExecEvent;

/// Limits of the HTTP server itself (the engine holds the execution slots and queue:
/// [`warden_engine::AdmissionLimits`]).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Largest request body, bytes; past this, 413.
    pub max_body_bytes: usize,
    /// Sandboxes with a lifetime alive at once.
    pub max_sandboxes: usize,
    /// Contexts alive at once in all sandboxes together (`warden serve`: what its descriptor
    /// limit holds beside `max_sandboxes`).
    pub max_contexts: usize,
    /// Largest file the files API returns, bytes.
    pub max_download_bytes: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_body_bytes: 16 * 1024 * 1024,
            max_sandboxes: warden_config::ServerSettings::default().max_sandboxes,
            max_contexts: usize::MAX,
            max_download_bytes: 64 * 1024 * 1024,
        }
    }
}

impl ServerLimits {
    /// The limits `[server]` sets, the others at their defaults.
    pub fn from_settings(settings: &warden_config::ServerSettings) -> ServerLimits {
        ServerLimits {
            max_sandboxes: settings.max_sandboxes,
            ..ServerLimits::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct AppState {
    engine: Engine,
    keys: Keys,
    sandboxes: Sandboxes,
    limits: ServerLimits,
    /// Interpreter versions, asked once.
    versions: Versions,
    metrics: Metrics,
    /// Ends the MCP sessions and streams of `/mcp` (see [`AppState::stop_mcp`]).
    mcp_stop: warden_mcp::CancellationToken,
    /// The E2B drop-in's sessions, tokens and running commands.
    e2b: e2b::E2b,
    /// The engine's audit log, read by `GET /v1/audit`.
    audit: Arc<warden_engine::AuditLog>,
}

impl AppState {
    /// The server over `engine`, which reports every execution to the server's metrics and
    /// traces (whichever front-end asked: REST, the compatibility routes, `/mcp`), and records
    /// its decisions in its audit log (one kept in memory only, `[server.audit] retained`
    /// events, when the engine was given none).
    pub fn new(engine: Engine, limits: ServerLimits) -> AppState {
        let audit = match engine.audit() {
            Some(log) => log.clone(),
            None => Arc::new(warden_engine::AuditLog::new(
                None,
                engine.settings().server.audit.retained,
            )),
        };
        let engine = engine.with_audit(audit.clone());
        let metrics = Metrics::default();
        let tracer = Tracer::new(&engine.settings().server.otlp);
        let engine = engine.with_observer(Arc::new(observe::Recorder {
            metrics: metrics.clone(),
            tracer,
        }));
        AppState {
            versions: Versions::new(engine.settings()),
            metrics,
            sandboxes: Sandboxes::new(engine.clone(), limits.max_sandboxes)
                .with_max_contexts(limits.max_contexts),
            keys: Keys::from_settings(&engine.settings().server.api_keys),
            mcp_stop: warden_mcp::CancellationToken::new(),
            e2b: e2b::E2b::default(),
            audit,
            engine,
            limits,
        }
    }

    /// Keeps durable sandboxes in `store` (before the state is shared: see
    /// [`Sandboxes::with_store`]).
    pub fn with_store(mut self, store: warden_engine::Store) -> AppState {
        self.sandboxes = self.sandboxes.with_store(store);
        self
    }

    /// Ends the open MCP sessions and streams, so a graceful shutdown is not held up by them.
    pub fn stop_mcp(&self) {
        self.mcp_stop.cancel();
    }

    pub fn sandboxes(&self) -> &Sandboxes {
        &self.sandboxes
    }

    /// Destroys expired sandboxes every `every` until the runtime stops.
    pub fn spawn_reaper(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let sandboxes = self.sandboxes.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                sandboxes.reap_expired().await;
            }
        })
    }
}

/// The API's routes; in front of them, E2B's (see [`e2b`]: requests with `E2b-Sandbox-Id`,
/// and the control plane's paths).
pub fn router(state: AppState) -> Router {
    let e2b_routers = e2b::Routers::new(&state);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/openapi.json", get(openapi::openapi_json))
        .route("/docs", get(openapi::docs))
        .route("/", get(playground::page))
        .route("/playground/{file}", get(playground::asset))
        .route("/v1/profiles", get(playground::profiles))
        .route("/v1/audit", get(audit::read))
        .route("/v1/execute", post(execute))
        .route(
            "/v1/sandboxes",
            post(sandboxes::create).get(sandboxes::list),
        )
        .route(
            "/v1/sandboxes/{id}",
            get(sandboxes::get).delete(sandboxes::destroy),
        )
        .route("/v1/sandboxes/{id}/exec", post(sandboxes::exec))
        .route("/v1/sandboxes/{id}/pause", post(sandboxes::pause))
        .route("/v1/sandboxes/{id}/resume", post(sandboxes::resume))
        .route("/v1/sandboxes/{id}/snapshot", post(sandboxes::snapshot))
        .route("/v1/sandboxes/{id}/fork", post(sandboxes::fork))
        .route("/v1/snapshots", get(sandboxes::list_snapshots))
        .route("/v1/snapshots/{name}", delete(sandboxes::delete_snapshot))
        .route("/v1/sandboxes/{id}/egress", patch(sandboxes::set_egress))
        .route(
            "/v1/sandboxes/{id}/contexts",
            post(sandboxes::create_context).get(sandboxes::list_contexts),
        )
        .route(
            "/v1/sandboxes/{id}/contexts/{context}",
            get(sandboxes::get_context).delete(sandboxes::destroy_context),
        )
        .route(
            "/v1/sandboxes/{id}/contexts/{context}/restart",
            post(sandboxes::restart_context),
        )
        .route("/v1/sandboxes/{id}/files", get(sandboxes::list_files))
        .route(
            "/v1/sandboxes/{id}/files/{*path}",
            get(sandboxes::download).put(sandboxes::upload),
        )
        .route("/api/v1/sandbox/create", post(compat::create))
        .route("/api/v1/sandbox/destroy", post(compat::destroy))
        .route("/api/v1/execute", post(compat::execute))
        .route("/api/v1/execute/{id}", post(compat::execute_in))
        .route("/api/v2/execute", post(piston::execute))
        .route("/api/v2/runtimes", get(piston::runtimes))
        .nest_service("/mcp", mcp::service(&state))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            e2b_routers,
            e2b::dispatch,
        ))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("this route does not take the method {method} (see /openapi.json)"),
    )
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    state.metrics.observe_pools(&state.sandboxes.pool_status());
    state
        .metrics
        .observe_oneshot_pools(&state.engine.oneshot_pool_status());
    let admission = state.engine.admission();
    state.metrics.running.set(admission.running() as i64);
    state.metrics.queued.set(admission.queued() as i64);
    state
        .metrics
        .sandboxes_live
        .set(state.sandboxes.count() as i64);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// Ready when the default profile can run now (the engine's [`Engine::ready`]: its backend's
/// check, and its engine reachable for a container backend); else 503 with the reason, as the
/// API's error would say it. `free_slots` either way.
async fn readyz(State(state): State<AppState>) -> Response {
    let free_slots = state.engine.admission().free_slots();
    match state.engine.ready().await {
        Ok(()) => Json(serde_json::json!({
            "status": "ready",
            "free_slots": free_slots,
        }))
        .into_response(),
        Err(e) => {
            let e = ApiError::from(e);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({
                    "status": "not_ready",
                    "reason": e.message,
                    "code": e.code,
                    "free_slots": free_slots,
                })),
            )
                .into_response()
        }
    }
}

/// `Json` whose rejections are API errors naming what is wrong.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<Object<T>>::from_request(req, state).await {
            Ok(Json(Object(v))) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// A request body that must be a JSON object. serde's derived structs also take a JSON array
/// of their fields in order (`[null, null]` was a sandbox create); the API's bodies are
/// objects only, as the OpenAPI document says.
#[derive(Debug)]
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Visit(std::marker::PhantomData))
            .map(Object)
    }
}

/// A JSON body's rejection as the API's error.
pub(crate) fn json_rejection(rejection: JsonRejection) -> ApiError {
    if let Some(e) = body_timeout(&rejection) {
        return e;
    }
    let (status, code) = match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
        }
        // Syntax errors and wrong types alike are the caller's malformed input;
        // axum's message names the field and position.
        _ => (StatusCode::BAD_REQUEST, "invalid_json"),
    };
    ApiError::new(status, code, rejection.body_text())
}

/// A body that did not arrive in `[server] request_body_timeout_seconds` (see `listen.rs`):
/// 408, not the caller's malformed input.
pub(crate) fn body_timeout(rejection: &(dyn std::error::Error + 'static)) -> Option<ApiError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return Some(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request's body did not arrive in time; send it at once after the head",
            ));
        }
        cause = e.source();
    }
    None
}

/// `Path` whose rejections (a segment that is not percent-encoded UTF-8, …) are API errors in
/// JSON like every other, naming the segment's problem.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            // A route that does not match its handler's parameters is ours, not the caller's.
            Err(rejection) if rejection.status().is_server_error() => {
                eprintln!("warden serve: internal error: {}", rejection.body_text());
                Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; see the server's log",
                ))
            }
            Err(rejection) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_path",
                format!("the URL's path: {}", rejection.body_text()),
            )),
        }
    }
}

/// `POST /v1/execute`: one-shot execution in a fresh sandbox.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteBody {
    pub code: String,
    #[serde(default)]
    pub language: Option<String>,
    #[serde(default)]
    pub profile: Option<String>,
    /// Seconds; within the profile's quota.
    #[serde(default)]
    #[schemars(range(min = 0.001, max = 86400.0))]
    pub timeout_seconds: Option<f64>,
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub memory_mb: Option<u64>,
    /// Text given to the program on stdin.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Answer with NDJSON events as they happen instead of one JSON result.
    #[serde(default)]
    pub stream: bool,
}

impl ExecuteBody {
    pub(crate) fn into_request(self) -> Result<ExecRequest, ApiError> {
        let timeout = timeout_from(self.timeout_seconds)?;
        Ok(ExecRequest {
            code: self.code,
            language: self.language,
            profile: self.profile,
            timeout,
            memory_mb: self.memory_mb,
            stdin: self.stdin.map(String::into_bytes).unwrap_or_default(),
            args: Vec::new(),
        })
    }
}

/// A request's `timeout_seconds`, checked.
fn timeout_from(seconds: Option<f64>) -> Result<Option<Duration>, ApiError> {
    match seconds {
        // At least a millisecond: a smaller positive number would become a zero timeout.
        Some(t) if !(0.001..=86_400.0).contains(&t) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "timeout_seconds: must be a number of seconds in [0.001, 86400]",
        )),
        Some(t) => Ok(Some(Duration::from_secs_f64(t))),
        None => Ok(None),
    }
}

async fn execute(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiJson(body): ApiJson<ExecuteBody>,
) -> Response {
    let stream = body.stream;
    let started = match body.into_request() {
        Ok(request) => state.engine.start(&caller.engine(), request).await,
        Err(e) => return e.into_response(),
    };
    match started {
        Ok(execution) => respond(execution, stream).await,
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// Answers with an execution's JSON result, or with NDJSON events as they happen when
/// `stream` is set (the last line: `end` with the result, or `error`).
async fn respond(execution: warden_engine::Execution, stream: bool) -> Response {
    if !stream {
        return match execution.finish().await {
            Ok(result) => Json(result).into_response(),
            Err(e) => ApiError::from(e).into_response(),
        };
    }
    let lines = futures_util::stream::unfold(execution.stream(), |mut items| async move {
        let line = match items.recv().await? {
            Streamed::Event(event) => ndjson(&event),
            Streamed::End(outcome) => match *outcome {
                Ok(result) => ndjson(&ExecEvent::End(Box::new(result))),
                Err(e) => {
                    let e = ApiError::from(e);
                    ndjson(&ExecEvent::Error {
                        name: e.code.to_owned(),
                        value: e.message,
                    })
                }
            },
        };
        Some((Ok::<_, std::io::Error>(line), items))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response()
}

fn ndjson(event: &ExecEvent) -> bytes::Bytes {
    let mut line = serde_json::to_vec(event).unwrap_or_default();
    line.push(b'\n');
    line.into()
}

#[cfg(test)]
mod tests;
