//! E2B's control plane (`E2B_API_URL`): sandboxes created, listed, inspected, given a new
//! timeout and killed, as Warden sandboxes of the key's owner.
//!
//! Invariants: a template names a profile, and E2B's default templates (`base`,
//! `code-interpreter-v1`, …) the default profile; a sandbox's `timeout` is its whole lifetime
//! from now, within its profile's maximum; `pause` is Warden's pause (the sandbox's processes
//! frozen, its files and contexts kept) and `connect` (or `resume`) resumes it; what Warden
//! cannot do (snapshots, fork, network settings, volumes, metrics, logs) is answered 501 `{"code", "message"}` naming it,
//! which the SDKs raise as a `SandboxException`; every error is `{"code": <status>,
//! "message"}`, a 429 with `Retry-After`.

use super::{E2b, ENVD_VERSION, HOME, StatusError, api_error};
use crate::{ApiError, AppState, Caller};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use warden_engine::{CreateSandbox, SandboxInfo};

/// The label that records a sandbox's E2B template (its profile is the engine's).
const TEMPLATE_LABEL: &str = "e2b.template";
/// E2B's default templates: the default profile.
const DEFAULT_TEMPLATES: &[&str] = &["base", "code-interpreter-v1", "code-interpreter", "desktop"];
/// E2B's default sandbox timeout, seconds.
const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// Sandboxes per page of a list, when the caller names no limit.
const DEFAULT_PAGE: usize = 100;

pub(super) fn router(state: AppState) -> Router {
    Router::new()
        .route("/sandboxes", post(create).get(list))
        .route("/v2/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(info).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(connect))
        .fallback(unsupported)
        .method_not_allowed_fallback(unsupported)
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> StatusError {
    StatusError::new(status, message)
}

fn from_api(e: ApiError) -> StatusError {
    StatusError::from(e)
}

/// What Warden does not do, by path.
async fn unsupported(req: Request) -> Response {
    let path = req.uri().path();
    let what = ["snapshots", "fork", "network", "metrics", "logs", "refreshes"]
        .into_iter()
        .find(|w| path.ends_with(&format!("/{w}")))
        .map(|w| format!("{w} is not supported by Warden"))
        .unwrap_or_else(|| {
            format!(
                "{} {path} is not part of Warden's E2B drop-in (see docs/api.md, \"Using the E2B SDK\")",
                req.method()
            )
        });
    error(StatusCode::NOT_IMPLEMENTED, what).into_response()
}

/// The caller by its key: `X-API-KEY` (E2B's header) or `Authorization: Bearer`; without
/// configured keys, the keyless caller.
fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, StatusError> {
    if state.keys.is_empty() {
        return Ok(Caller(None));
    }
    let presented = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
        })
        .map(str::trim);
    match presented.and_then(|p| state.keys.find(p)) {
        Some(key) => Ok(Caller(Some(key))),
        None => Err(error(
            StatusCode::UNAUTHORIZED,
            "a valid API key is required: X-API-KEY: <key> (a Warden API key)",
        )),
    }
}

/// A JSON object body (an empty body is `{}`).
fn object(body: &Bytes) -> Result<serde_json::Map<String, Value>, StatusError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("invalid JSON: {e}"))),
    }
}

/// A string map field (`metadata`, `envVars`).
fn string_map(
    body: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<BTreeMap<String, String>, StatusError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(error(
                    StatusCode::BAD_REQUEST,
                    format!("{field}.{k}: must be a string"),
                )),
            })
            .collect(),
        Some(_) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("{field}: must be an object of strings"),
        )),
    }
}

/// A timeout in whole seconds, at least 1.
fn timeout_field(body: &serde_json::Map<String, Value>) -> Result<Option<u64>, StatusError> {
    match body.get("timeout") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(t) if t >= 1 => Ok(Some(t)),
            _ => Err(error(
                StatusCode::BAD_REQUEST,
                "timeout: must be a whole number of seconds, at least 1",
            )),
        },
    }
}

/// The features of a create body that Warden refuses rather than ignores.
fn refuse_unsupported(body: &serde_json::Map<String, Value>) -> Result<(), StatusError> {
    let set = |k: &str| match body.get(k) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    for (field, what) in [
        ("autoPause", "auto-pause"),
        ("autoResume", "auto-resume"),
        ("mcp", "MCP servers in the sandbox"),
        ("volumeMounts", "volume mounts"),
        (
            "network",
            "network settings (a profile decides a sandbox's network)",
        ),
        ("iam", "IAM settings"),
    ] {
        if set(field) {
            return Err(error(
                StatusCode::NOT_IMPLEMENTED,
                format!("{field}: {what} is not supported by Warden"),
            ));
        }
    }
    Ok(())
}

async fn create(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let result = async {
        let caller = caller(&state, &headers)?;
        let body = object(&body)?;
        refuse_unsupported(&body)?;
        let template = match body.get("templateID") {
            None | Some(Value::Null) => "base".to_owned(),
            Some(Value::String(t)) if !t.is_empty() && t.len() <= 128 => t.clone(),
            Some(_) => return Err(error(StatusCode::BAD_REQUEST, "templateID: must be a template name")),
        };
        let profile = profile_of(&state, &template)?;
        let timeout = timeout_field(&body)?.unwrap_or(DEFAULT_TIMEOUT_SECS);
        let mut labels = string_map(&body, "metadata")?;
        let env = string_map(&body, "envVars")?;
        // Internet access a profile does not give cannot be granted here.
        if body.get("allow_internet_access").and_then(Value::as_bool) == Some(true) {
            let networked = state
                .engine
                .settings()
                .profile(
                    profile
                        .as_deref()
                        .unwrap_or(&state.engine.settings().sandbox.default_profile),
                )
                .is_some_and(|p| p.network_enabled);
            if !networked {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "allow_internet_access: this template's profile has no network; use a profile with network_enabled",
                ));
            }
        }
        labels.insert(TEMPLATE_LABEL.into(), template);
        let info = state
            .sandboxes
            .create(
                &caller.engine(),
                CreateSandbox {
                    profile,
                    labels,
                    idle_ttl_seconds: None,
                    max_lifetime_seconds: Some(timeout),
                    env,
                    home: Some(HOME.into()),
                    ..CreateSandbox::default()
                },
            )
            .await
            .map_err(|e| match e {
                // The engine's check of the variables, under E2B's name for them.
                warden_engine::EngineError::InvalidRequest { field: "env", message } => {
                    error(StatusCode::BAD_REQUEST, format!("envVars: {message}"))
                }
                e => from_api(api_error(e)),
            })?;
        // The whole lifetime from now, used or not (E2B has no idle timeout).
        let info = state
            .sandboxes
            .set_lifetime(caller.owner().as_deref(), &info.id, Duration::from_secs(timeout))
            .map_err(|e| from_api(api_error(e)))?;
        state.e2b.prune(|id, c| state.sandboxes.get(c.owner().as_deref(), id).is_ok());
        state.e2b.remember(&info.id, &caller);
        Ok((StatusCode::CREATED, axum::Json(sandbox_json(&state.e2b, &info))).into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// The profile a template names: itself when it is a profile; the default one for E2B's
/// default templates.
fn profile_of(state: &AppState, template: &str) -> Result<Option<String>, StatusError> {
    if state.engine.settings().profile(template).is_some() {
        return Ok(Some(template.to_owned()));
    }
    if DEFAULT_TEMPLATES.contains(&template) {
        return Ok(None);
    }
    let mut known: Vec<String> = DEFAULT_TEMPLATES.iter().map(|s| (*s).to_owned()).collect();
    known.extend(state.engine.settings().sandbox.profiles.keys().cloned());
    Err(error(
        StatusCode::NOT_FOUND,
        format!(
            "template {template:?} not found: a template is a Warden profile or one of E2B's defaults ({})",
            known.join(", ")
        ),
    ))
}

fn template_of(info: &SandboxInfo) -> String {
    info.labels
        .get(TEMPLATE_LABEL)
        .cloned()
        .unwrap_or_else(|| info.profile.clone())
}

fn metadata_of(info: &SandboxInfo) -> BTreeMap<String, String> {
    let mut m = info.labels.clone();
    m.remove(TEMPLATE_LABEL);
    m
}

/// The create and connect answer (E2B's `Sandbox`).
fn sandbox_json(e2b: &E2b, info: &SandboxInfo) -> Value {
    json!({
        "templateID": template_of(info),
        "sandboxID": info.id,
        "clientID": "warden",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": e2b.access_token(&info.id),
        "alias": info.profile,
        "domain": null,
    })
}

/// E2B's `SandboxDetail` / `ListedSandbox`.
fn detail_json(e2b: &E2b, info: &SandboxInfo, with_token: bool) -> Value {
    let mut v = json!({
        "templateID": template_of(info),
        "sandboxID": info.id,
        "clientID": "warden",
        "alias": info.profile,
        "startedAt": info.created_at,
        "endAt": info.expires_at,
        "envdVersion": ENVD_VERSION,
        "cpuCount": info.limits.cpus.ceil().max(1.0) as u64,
        "memoryMB": info.limits.memory_mb,
        "diskSizeMB": info.limits.workspace_mb,
        "state": match info.state {
            warden_types::SandboxState::Running => "running",
            warden_types::SandboxState::Paused => "paused",
        },
        "metadata": metadata_of(info),
    });
    if with_token {
        v["envdAccessToken"] = json!(e2b.access_token(&info.id));
    }
    v
}

async fn info(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let caller = match caller(&state, &headers) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    match state.sandboxes.get(caller.owner().as_deref(), &id) {
        Ok(info) => axum::Json(detail_json(&state.e2b, &info, true)).into_response(),
        Err(e) => from_api(api_error(e)).into_response(),
    }
}

async fn kill(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let caller = match caller(&state, &headers) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    match state
        .sandboxes
        .destroy(caller.owner().as_deref(), &id)
        .await
    {
        Ok(id) => {
            state.e2b.forget(&id);
            state.e2b.processes.forget_sandbox(&id);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => from_api(api_error(e)).into_response(),
    }
}

async fn set_timeout(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let result = async {
        let caller = caller(&state, &headers)?;
        let body = object(&body)?;
        let Some(timeout) = timeout_field(&body)? else {
            return Err(error(StatusCode::BAD_REQUEST, "timeout: required"));
        };
        state
            .sandboxes
            .set_lifetime(caller.owner().as_deref(), &id, Duration::from_secs(timeout))
            .map_err(|e| from_api(api_error(e)))?;
        Ok(StatusCode::NO_CONTENT.into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `pause`: Warden's pause (204; 409 when it is paused already, which the SDKs read as
/// `False`).
async fn pause(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let caller = caller(&state, &headers)?;
        let owner = caller.owner();
        let info = state
            .sandboxes
            .get(owner.as_deref(), &id)
            .map_err(|e| from_api(api_error(e)))?;
        if info.state == warden_types::SandboxState::Paused {
            return Err(error(
                StatusCode::CONFLICT,
                format!("sandbox {id} is already paused"),
            ));
        }
        state
            .sandboxes
            .pause(owner.as_deref(), &id, false)
            .await
            .map_err(|e| from_api(api_error(e)))?;
        Ok::<_, StatusError>(StatusCode::NO_CONTENT.into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `connect` (and the older `resume`): a sandbox of the caller's, resumed if it was paused, its
/// timeout renewed when one is given.
async fn connect(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let result = async {
        let caller = caller(&state, &headers)?;
        let body = object(&body)?;
        let owner = caller.owner();
        // A paused sandbox runs again (E2B's connect resumes).
        state
            .sandboxes
            .resume(owner.as_deref(), &id)
            .await
            .map_err(|e| from_api(api_error(e)))?;
        let info = match timeout_field(&body)? {
            Some(t) => state
                .sandboxes
                .set_lifetime(owner.as_deref(), &id, Duration::from_secs(t)),
            None => state.sandboxes.get(owner.as_deref(), &id),
        }
        .map_err(|e| from_api(api_error(e)))?;
        state.e2b.remember(&info.id, &caller);
        Ok::<_, StatusError>(
            (
                StatusCode::CREATED,
                axum::Json(sandbox_json(&state.e2b, &info)),
            )
                .into_response(),
        )
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /sandboxes` and `/v2/sandboxes`: the caller's sandboxes, filtered by `metadata`
/// (`k=v&k2=v2`, each part URL-encoded) and `state`, a page at a time (`limit`, `nextToken`;
/// the next page's token in `x-next-token`).
async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let result = async {
        let caller = caller(&state, &headers)?;
        let mut metadata = BTreeMap::new();
        let mut limit = DEFAULT_PAGE;
        let mut skip = 0usize;
        let mut states: Option<Vec<String>> = None;
        for (k, v) in &query {
            match k.as_str() {
                "metadata" | "query" => {
                    for pair in v.split('&').filter(|p| !p.is_empty()) {
                        let (mk, mv) = pair.split_once('=').unwrap_or((pair, ""));
                        metadata.insert(unquote(&unquote(mk)), unquote(&unquote(mv)));
                    }
                }
                "limit" => {
                    limit = v
                        .parse::<usize>()
                        .ok()
                        .filter(|l| (1..=1000).contains(l))
                        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "limit: 1 to 1000"))?;
                }
                "nextToken" => {
                    skip = v.parse::<usize>().map_err(|_| {
                        error(
                            StatusCode::BAD_REQUEST,
                            "nextToken: not a token of this server",
                        )
                    })?;
                }
                "state" => states = Some(v.split(',').map(str::to_owned).collect()),
                // Order, time and template filters: listed oldest first.
                _ => {}
            }
        }
        let all: Vec<SandboxInfo> = state
            .sandboxes
            .list(caller.owner().as_deref(), &metadata)
            .into_iter()
            .filter(|i| {
                let name = match i.state {
                    warden_types::SandboxState::Running => "running",
                    warden_types::SandboxState::Paused => "paused",
                };
                states.as_ref().is_none_or(|s| s.iter().any(|x| x == name))
            })
            .collect();
        let page: Vec<Value> = all
            .iter()
            .skip(skip)
            .take(limit)
            .map(|i| detail_json(&state.e2b, i, false))
            .collect();
        let mut r = axum::Json(Value::Array(page)).into_response();
        if skip + limit < all.len()
            && let Ok(v) = HeaderValue::from_str(&(skip + limit).to_string())
        {
            r.headers_mut().insert("x-next-token", v);
        }
        Ok::<_, StatusError>(r)
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Percent-decoding (`+` as a space), lossy for bytes that are not UTF-8.
pub fn unquote(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
