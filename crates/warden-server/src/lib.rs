//! Warden's HTTP API (the start of `warden serve`): one-shot execution with a JSON result or an
//! NDJSON event stream, health, JSON errors, a request body limit and bounded concurrency.
//!
//! Invariants: handlers are thin — decode, one engine call, encode; every error is
//! `{"error": {"code", "message"}}` with a fitting status and no 500 for bad input; more
//! requests than execution slots wait in a bounded queue, past which the answer is 429 with
//! Retry-After — never an unbounded pile-up; policy checks (CPU-bound parsing) run off the
//! async threads.

mod auth;
mod compat;
mod error;
mod mcp;
mod metrics;
pub mod openapi;
mod otlp;
mod piston;
mod sandboxes;
mod versions;

pub use auth::{Caller, Keys};
pub use error::ApiError;
pub use metrics::Metrics;
use otlp::{ExecSpans, Tracer};
use versions::Versions;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use warden_engine::{Engine, EngineError, ExecRequest, Sandboxes};
use warden_types::ExecEvent;

/// Limits of the server itself.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Executions running at once.
    pub max_concurrent: usize,
    /// Requests waiting for a slot; past this, 429.
    pub max_queued: usize,
    /// Largest request body, bytes; past this, 413.
    pub max_body_bytes: usize,
    /// The Retry-After a 429 carries, seconds.
    pub retry_after_secs: u64,
    /// Sandboxes with a lifetime alive at once.
    pub max_sandboxes: usize,
    /// Largest file the files API returns, bytes.
    pub max_download_bytes: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_concurrent: 8,
            max_queued: 64,
            max_body_bytes: 16 * 1024 * 1024,
            retry_after_secs: 1,
            max_sandboxes: 64,
            max_download_bytes: 64 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone)]
pub struct AppState {
    engine: Engine,
    keys: Keys,
    tracer: Tracer,
    sandboxes: Sandboxes,
    limits: ServerLimits,
    /// Execution slots.
    slots: Arc<Semaphore>,
    /// Admission: slots plus queue places.
    admission: Arc<Semaphore>,
    /// Interpreter versions, asked once.
    versions: Versions,
    metrics: Metrics,
    /// Ends the MCP sessions and streams of `/mcp` (see [`AppState::stop_mcp`]).
    mcp_stop: warden_mcp::CancellationToken,
}

impl AppState {
    pub fn new(engine: Engine, limits: ServerLimits) -> AppState {
        AppState {
            slots: Arc::new(Semaphore::new(limits.max_concurrent)),
            admission: Arc::new(Semaphore::new(limits.max_concurrent + limits.max_queued)),
            versions: Versions::new(engine.settings()),
            metrics: Metrics::default(),
            sandboxes: Sandboxes::new(engine.clone(), limits.max_sandboxes),
            keys: Keys::from_settings(&engine.settings().server.api_keys),
            tracer: Tracer::new(&engine.settings().server.otlp),
            mcp_stop: warden_mcp::CancellationToken::new(),
            engine,
            limits,
        }
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
        let state = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if !state.sandboxes.reap_expired().await.is_empty() {
                    state
                        .metrics
                        .sandboxes_live
                        .set(state.sandboxes.count() as i64);
                }
            }
        })
    }
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/openapi.json", get(openapi::openapi_json))
        .route("/docs", get(openapi::docs))
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

async fn readyz(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "status": "ready",
        "free_slots": state.slots.available_permits(),
    }))
}

/// `Json` whose rejections are API errors naming what is wrong.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => {
                let (status, code) = match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => {
                        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
                    }
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
                    }
                    // Syntax errors and wrong types alike are the caller's malformed input;
                    // axum's message names the field and position.
                    _ => (StatusCode::BAD_REQUEST, "invalid_json"),
                };
                Err(ApiError::new(status, code, rejection.body_text()))
            }
        }
    }
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
    pub timeout_seconds: Option<f64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Text given to the program on stdin.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Answer with NDJSON events as they happen instead of one JSON result.
    #[serde(default)]
    pub stream: bool,
}

impl ExecuteBody {
    fn into_request(self) -> Result<ExecRequest, ApiError> {
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
        Some(t) if !(t.is_finite() && t > 0.0 && t <= 86_400.0) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "timeout_seconds: must be a number of seconds in (0, 86400]",
        )),
        Some(t) => Ok(Some(Duration::from_secs_f64(t))),
        None => Ok(None),
    }
}

/// Waits for an execution slot, or refuses at once when the queue is full. Both permits are
/// held until the execution ends, so running plus waiting never exceeds slots plus queue.
async fn admit(state: &AppState, caller: &Caller) -> Result<Admitted, ApiError> {
    // A key's own limit first: it must not take a global place it cannot use.
    let own = match caller
        .0
        .as_ref()
        .and_then(|k| Some((k, k.running.clone()?)))
    {
        Some((key, running)) => Some(running.try_acquire_owned().map_err(|_| {
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                format!(
                    "key {:?} runs {} executions already, its limit",
                    key.name,
                    key.max_concurrent.unwrap_or_default()
                ),
            );
            e.retry_after_secs = Some(state.limits.retry_after_secs);
            e
        })?),
        None => None,
    };
    let Ok(place) = state.admission.clone().try_acquire_owned() else {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            format!(
                "{} executions are running and {} waiting; try again later",
                state.limits.max_concurrent, state.limits.max_queued
            ),
        );
        e.retry_after_secs = Some(state.limits.retry_after_secs);
        return Err(e);
    };
    state.metrics.queued.inc();
    let slot = state.slots.clone().acquire_owned().await;
    state.metrics.queued.dec();
    let slot = slot.map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is stopping",
        )
    })?;
    state.metrics.running.inc();
    Ok(Admitted {
        _own: own,
        _place: place,
        _slot: slot,
        running: state.metrics.running.clone(),
    })
}

/// An admitted request: its queue place and execution slot, until dropped.
pub(crate) struct Admitted {
    _own: Option<OwnedSemaphorePermit>,
    _place: OwnedSemaphorePermit,
    _slot: OwnedSemaphorePermit,
    running: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.running.dec();
    }
}

/// Counts one execution's outcome and, with tracing on, exports its spans.
fn record_traced(
    state: &AppState,
    spans: ExecSpans,
    profile: &str,
    language: &str,
    outcome: &Result<warden_types::ExecResult, ApiError>,
) {
    record(state, profile, language, outcome);
    let (reason, error) = match outcome {
        Ok(r) => (r.reason.as_str().to_owned(), None),
        Err(e) => (e.code.to_owned(), Some(e.message.as_str())),
    };
    let mut attributes = vec![
        ("warden.profile", profile.to_owned()),
        ("warden.language", language.to_owned()),
        ("warden.outcome", reason),
    ];
    if let Ok(r) = outcome {
        attributes.push(("warden.duration_ms", r.duration_ms.to_string()));
        if let Some(code) = r.exit_code {
            attributes.push(("warden.exit_code", code.to_string()));
        }
    }
    state.tracer.record(spans, &attributes, error);
}

/// Counts one request's outcome.
fn record(
    state: &AppState,
    profile: &str,
    language: &str,
    outcome: &Result<warden_types::ExecResult, ApiError>,
) {
    let outcome_label = match outcome {
        Ok(r) => {
            state
                .metrics
                .duration
                .observe(r.duration_ms as f64 / 1000.0);
            r.reason.as_str().to_owned()
        }
        Err(e) => e.code.to_owned(),
    };
    state
        .metrics
        .executions
        .get_or_create(&metrics::ExecLabels {
            profile: profile.to_owned(),
            language: language.to_owned(),
            outcome: outcome_label,
        })
        .inc();
}

/// Prepares a request off the async threads (policies parse code: CPU-bound) and counts
/// refusals.
async fn prepare(
    state: &AppState,
    request: ExecRequest,
) -> Result<(String, warden_engine::ExecPlan), ApiError> {
    let engine = state.engine.clone();
    let profile = request
        .profile
        .clone()
        .unwrap_or_else(|| engine.settings().sandbox.default_profile.clone());
    let language = request.language.clone().unwrap_or_else(|| {
        engine
            .settings()
            .profile(&profile)
            .map(|p| p.runtime.language.clone())
            .unwrap_or_default()
    });
    let prepared = tokio::task::spawn_blocking(move || engine.prepare(&request))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            )
        })?;
    prepared.map_err(|e| refusal(state, &profile, &language, e))
}

/// An execution refused before it ran: counted (with the policy, for a violation) and
/// turned into the API's error.
fn refusal(state: &AppState, profile: &str, language: &str, e: EngineError) -> ApiError {
    if let EngineError::PolicyViolation(v) = &e {
        state
            .metrics
            .policy_violations
            .get_or_create(&metrics::PolicyLabels {
                policy: v.policy.to_owned(),
            })
            .inc();
    }
    let e = ApiError::from(e);
    record(state, profile, language, &Err(e.clone()));
    e
}

async fn execute(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiJson(body): ApiJson<ExecuteBody>,
) -> Response {
    match execute_inner(state, caller, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn execute_inner(
    state: AppState,
    caller: Caller,
    body: ExecuteBody,
) -> Result<Response, ApiError> {
    let stream = body.stream;
    let request = body.into_request()?;
    let mut spans = ExecSpans::start();
    spans.stage("queue");
    let slot = admit(&state, &caller).await?;
    spans.stage("policies");
    let (profile, plan) = prepare(&state, request).await?;
    let language = plan.language.to_string();
    state.engine.check_prepared(&profile, &plan)?;
    spans.stage("run");
    let engine = state.engine.clone();
    let run_profile = profile.clone();
    Ok(respond(
        state,
        slot,
        spans,
        stream,
        profile,
        language,
        move |events| async move { engine.run_prepared(&run_profile, plan, events).await },
    )
    .await)
}

/// Runs an admitted execution and answers with its JSON result, or with NDJSON events as
/// they happen when `stream` is set; counts the outcome either way.
/// Runs an admitted execution to its end without streaming, and counts it.
async fn run_to_end<F, Fut>(
    state: AppState,
    slot: Admitted,
    spans: ExecSpans,
    profile: String,
    language: String,
    run: F,
) -> Result<warden_types::ExecResult, ApiError>
where
    F: FnOnce(Option<warden_engine::EventSender>) -> Fut,
    Fut: std::future::Future<Output = Result<warden_types::ExecResult, EngineError>>,
{
    let result = run(None).await.map_err(ApiError::from);
    record_traced(&state, spans, &profile, &language, &result);
    drop(slot);
    result
}

async fn respond<F, Fut>(
    state: AppState,
    slot: Admitted,
    spans: ExecSpans,
    stream: bool,
    profile: String,
    language: String,
    run: F,
) -> Response
where
    F: FnOnce(Option<warden_engine::EventSender>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<warden_types::ExecResult, EngineError>> + Send,
{
    if !stream {
        return match run_to_end(state, slot, spans, profile, language, run).await {
            Ok(result) => Json(result).into_response(),
            Err(e) => e.into_response(),
        };
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<ExecEvent>(64);
    let (lines_tx, lines_rx) =
        tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        let _slot = slot;
        let forward = {
            let lines_tx = lines_tx.clone();
            async move {
                let mut rx = rx;
                while let Some(event) = rx.recv().await {
                    if lines_tx.send(Ok(ndjson(&event))).await.is_err() {
                        break;
                    }
                }
            }
        };
        let (result, ()) = tokio::join!(run(Some(tx)), forward);
        let result = result.map_err(ApiError::from);
        record_traced(&state, spans, &profile, &language, &result);
        let last = match result {
            Ok(result) => ndjson(&ExecEvent::End(Box::new(result))),
            Err(e) => ndjson(&ExecEvent::Error {
                name: e.code.to_owned(),
                value: e.message,
            }),
        };
        let _ = lines_tx.send(Ok(last)).await;
    });
    let body =
        axum::body::Body::from_stream(futures_util::stream::unfold(lines_rx, |mut rx| async {
            rx.recv().await.map(|item| (item, rx))
        }));
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        body,
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
