//! The audit log's two ends on the daemon: its sink, opened from `[server.audit]` before the
//! daemon starts (a file that cannot be opened stops the start, it is never skipped), and
//! `GET /v1/audit`, where a key reads its own events (an `admin` key, or the loopback daemon
//! without keys, reads every owner's).

use crate::auth::Caller;
use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use warden_engine::{AuditEvent, AuditLog, Visible};

/// The most events one read returns.
const MAX_LIMIT: usize = 1000;

/// The log `[server.audit]` asks for. `stdout_taken`: stdout carries a protocol (`warden mcp`),
/// so `log = "stdout"` is refused there.
pub fn open_log(
    settings: &warden_config::AuditSettings,
    stdout_taken: bool,
) -> Result<AuditLog, String> {
    let sink: Option<Box<dyn Write + Send>> = match settings.log.as_deref() {
        None => None,
        Some("stdout") if stdout_taken => {
            return Err(
                "[server.audit] log = \"stdout\": stdout carries the MCP protocol here; give a file's path".into(),
            );
        }
        Some("stdout") => Some(Box::new(std::io::stdout())),
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| format!("[server.audit] log = {path:?}: {e}"))?;
            Some(Box::new(file))
        }
    };
    Ok(AuditLog::new(sink, settings.retained))
}

/// `GET /v1/audit`'s answer.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct AuditPage {
    /// The events after `since`, oldest first.
    pub events: Vec<AuditEvent>,
    /// The `since` of the next read: the last event's `seq` (or the asked `since`).
    pub next: u64,
}

/// `GET /v1/audit?since=SEQ&limit=N`: the caller's events after `since` (default 0) among the
/// retained ones, at most `limit` (default 100, at most 1000).
pub async fn read(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let mut since = 0u64;
    let mut limit = 100usize;
    for (key, value) in query {
        let bad = |why: &str| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("{key}: {why}"),
            )
            .into_response()
        };
        match key.as_str() {
            "since" => match value.parse() {
                Ok(v) => since = v,
                Err(_) => return bad("expected an event's seq (a whole number)"),
            },
            "limit" => match value.parse() {
                Ok(v) if (1..=MAX_LIMIT).contains(&v) => limit = v,
                _ => return bad("expected a whole number from 1 to 1000"),
            },
            _ => {
                return ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    format!("unknown query parameter {key:?} (known: since, limit)"),
                )
                .into_response();
            }
        }
    }
    let owner = caller.owner();
    let who = if caller.is_admin() {
        Visible::All
    } else {
        Visible::Owner(owner.as_deref())
    };
    let events = state.audit.read(who, since, limit);
    let next = events.last().map_or(since, |e| e.seq);
    Json(AuditPage { events, next }).into_response()
}
