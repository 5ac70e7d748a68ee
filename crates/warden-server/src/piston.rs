//! Piston's API, so its clients work unchanged: `POST /api/v2/execute` and
//! `GET /api/v2/runtimes`. One-shot; the code runs in the requested language (never wrapped in
//! a shell). Piston's errors are `{"message": …}` with status 400.

use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use warden_engine::{EngineError, ExecRequest, Streamed};
use warden_types::ExecEvent;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PistonFile {
    #[serde(default)]
    pub name: Option<String>,
    pub content: String,
}

/// Piston's execute request (its field names and units: milliseconds, bytes, -1 = default).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PistonRequest {
    pub language: String,
    #[serde(default)]
    pub version: Option<String>,
    pub files: Vec<PistonFile>,
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub compile_timeout: Option<i64>,
    /// Milliseconds, 1 to 86400000; -1: the profile's.
    #[serde(default)]
    #[schemars(schema_with = "run_timeout_schema")]
    pub run_timeout: Option<i64>,
    #[serde(default)]
    pub compile_memory_limit: Option<i64>,
    /// Bytes, at least 1; -1: the profile's.
    #[serde(default)]
    #[schemars(schema_with = "run_memory_limit_schema")]
    pub run_memory_limit: Option<i64>,
}

/// `-1` (the profile's) or `1..=max`, or absent.
fn default_or_range(max: Option<i64>) -> schemars::Schema {
    let mut range = serde_json::json!({"type": "integer", "minimum": 1});
    if let Some(max) = max {
        range["maximum"] = max.into();
    }
    schemars::json_schema!({"anyOf": [{"type": "null"}, {"const": -1}, range]})
}

fn run_timeout_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    default_or_range(Some(86_400_000))
}

fn run_memory_limit_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    default_or_range(None)
}

/// Piston's error body: `{"message"}`, status 400.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PistonError {
    pub message: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PistonStage {
    pub stdout: String,
    pub stderr: String,
    /// stdout and stderr interleaved in the order they were written.
    pub output: String,
    pub code: Option<i32>,
    pub signal: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PistonResponse {
    pub language: String,
    pub version: String,
    pub run: PistonStage,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PistonRuntime {
    pub language: String,
    pub version: String,
    pub aliases: Vec<String>,
}

/// Piston answers errors as `{"message"}`.
pub(crate) fn piston_error(e: ApiError) -> Response {
    let status = if e.status.is_client_error() {
        StatusCode::BAD_REQUEST
    } else {
        e.status
    };
    (status, Json(serde_json::json!({ "message": e.message }))).into_response()
}

/// A body's rejection: Piston has no codes, every one is its 400.
pub(crate) fn rejection_error(rejection: axum::extract::rejection::JsonRejection) -> ApiError {
    bad(rejection.body_text())
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
}

fn signal_name(sig: i32) -> String {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("SIG{sig}"),
    }
    .to_owned()
}

impl PistonRequest {
    pub(crate) fn into_request(self) -> Result<ExecRequest, ApiError> {
        let [file] = <[PistonFile; 1]>::try_from(self.files).map_err(|files| {
            bad(format!(
                "files: exactly one file is supported, got {}",
                files.len()
            ))
        })?;
        let _ = file.name;
        let timeout = match self.run_timeout {
            None | Some(-1) => None,
            // The native API's range, in milliseconds: (0, one day].
            Some(ms @ 1..=86_400_000) => Some(Duration::from_millis(ms as u64)),
            Some(ms) => {
                return Err(bad(format!(
                    "run_timeout: {ms} is not a number of milliseconds in [1, 86400000]"
                )));
            }
        };
        let memory_mb = match self.run_memory_limit {
            None | Some(-1) => None,
            Some(b) if b > 0 => Some((b as u64).div_ceil(1024 * 1024)),
            Some(b) => {
                return Err(bad(format!(
                    "run_memory_limit: {b} is not a positive number of bytes"
                )));
            }
        };
        let _ = (
            self.compile_timeout,
            self.compile_memory_limit,
            self.version,
        );
        Ok(ExecRequest {
            code: file.content,
            language: Some(self.language),
            profile: None,
            timeout,
            memory_mb,
            stdin: self.stdin.map(String::into_bytes).unwrap_or_default(),
            args: self.args,
        })
    }
}

pub async fn execute(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<crate::Caller>,
    body: Result<Json<crate::Object<PistonRequest>>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(crate::Object(body)) = match body {
        Ok(b) => b,
        Err(rejection) => return piston_error(rejection_error(rejection)),
    };
    match execute_inner(state, caller, body).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => piston_error(e),
    }
}

async fn execute_inner(
    state: AppState,
    caller: crate::Caller,
    body: PistonRequest,
) -> Result<PistonResponse, ApiError> {
    let request = body.into_request()?;
    let execution = state.engine.start(&caller.engine(), request).await?;
    let language = execution.language().to_owned();
    // Piston's `output` is stdout and stderr interleaved as they happened: the events' order.
    let mut items = execution.stream();
    let mut output = String::new();
    let result = loop {
        match items.recv().await {
            Some(Streamed::Event(
                ExecEvent::Stdout { text, .. } | ExecEvent::Stderr { text, .. },
            )) => output.push_str(&text),
            Some(Streamed::Event(_)) => {}
            Some(Streamed::End(outcome)) => break (*outcome)?,
            None => {
                return Err(EngineError::Internal("the run ended without a result".into()).into());
            }
        }
    };
    let version = state.versions.version_of(&language).await;
    Ok(PistonResponse {
        language,
        version,
        run: PistonStage {
            stdout: result.stdout,
            stderr: result.stderr,
            output,
            code: result.exit_code,
            signal: result.signal.map(signal_name),
        },
    })
}

pub async fn runtimes(State(state): State<AppState>) -> Json<Vec<PistonRuntime>> {
    let mut out = Vec::new();
    for (language, runtime) in &state.engine.settings().sandbox.runtimes {
        out.push(PistonRuntime {
            language: language.clone(),
            version: state.versions.version_of(language).await,
            aliases: runtime.aliases.clone(),
        });
    }
    Json(out)
}
