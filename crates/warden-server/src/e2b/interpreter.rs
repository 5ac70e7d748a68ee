//! E2B's code interpreter (port 49999): `POST /execute` answered with NDJSON as the cell runs,
//! and contexts (`/contexts…`), as cells and contexts of the Warden sandbox.
//!
//! Invariants: Python code without a context runs in the sandbox's default context (state kept
//! across calls); another language without a context is a fresh run in the sandbox; each line
//! is one JSON object (never a blank line), and the last is `end_of_execution`, also after an
//! error; a policy refusal is the execution's `error`, other refusals the HTTP status that
//! fits (the SDKs raise them).

use super::{HOME, StatusError, api_error, sandbox_of};
use crate::{ApiError, AppState};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde_json::{Value, json};
use warden_engine::{CreateContext, SandboxExec, Streamed};
use warden_types::{ExecEvent, ExecResult, Reason, RichResult};

pub(super) fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/execute", post(execute))
        .route("/contexts", post(create_context).get(list_contexts))
        .route("/contexts/{id}", delete(remove_context))
        .route("/contexts/{id}/restart", post(restart_context))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> StatusError {
    StatusError::new(status, message)
}

fn from_api(e: ApiError) -> StatusError {
    StatusError::from(e)
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such route of the code interpreter (/execute, /contexts)",
    )
    .into_response()
}

async fn health(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match sandbox_of(&state, &headers, false) {
        Ok(_) => StatusCode::OK.into_response(),
        Err(e) => e.response(),
    }
}

/// E2B's language names → Warden's (`None`: the sandbox's default context, Python).
pub(crate) fn language(name: Option<&str>) -> Option<String> {
    match name.map(str::to_ascii_lowercase).as_deref() {
        None | Some("" | "python" | "python3") => None,
        Some("js" | "javascript" | "node") => Some("javascript".into()),
        Some("bash" | "sh") => Some("bash".into()),
        Some(other) => Some(other.to_owned()),
    }
}

fn object(body: &Bytes) -> Result<serde_json::Map<String, Value>, StatusError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("invalid JSON: {e}"))),
    }
}

fn opt_string(
    body: &serde_json::Map<String, Value>,
    k: &str,
) -> Result<Option<String>, StatusError> {
    match body.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("{k}: must be a string"),
        )),
    }
}

fn line(v: Value) -> Bytes {
    let mut b = serde_json::to_vec(&v).unwrap_or_default();
    b.push(b'\n');
    b.into()
}

fn ndjson(lines: Vec<Bytes>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        lines.concat(),
    )
        .into_response()
}

/// A rich result in E2B's shape: one field per MIME type it knows, the rest in `extra`.
pub(crate) fn result_json(r: &RichResult) -> Value {
    let mut out = serde_json::Map::new();
    let mut extra = serde_json::Map::new();
    for (mime, data) in &r.data {
        let key = match mime.as_str() {
            "text/plain" => "text",
            "text/html" => "html",
            "text/markdown" => "markdown",
            "image/svg+xml" => "svg",
            "image/png" => "png",
            "image/jpeg" => "jpeg",
            "application/pdf" => "pdf",
            "text/latex" => "latex",
            "application/javascript" => "javascript",
            "application/json" => {
                let v = serde_json::from_str(data).unwrap_or(Value::String(data.clone()));
                out.insert("json".into(), v);
                continue;
            }
            _ => {
                extra.insert(mime.clone(), Value::String(data.clone()));
                continue;
            }
        };
        out.insert(key.into(), Value::String(data.clone()));
    }
    out.insert("type".into(), json!("result"));
    out.insert("is_main_result".into(), json!(r.is_main_result));
    if !extra.is_empty() {
        out.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(out)
}

/// The lines that end an execution: its results, its error, its count, then the end.
pub(crate) fn end_lines(r: &ExecResult, in_context: bool) -> Vec<Bytes> {
    let mut lines: Vec<Bytes> = r
        .cell
        .results
        .iter()
        .map(|x| line(result_json(x)))
        .collect();
    if let Some(text) = &r.cell.text
        && !r.cell.results.iter().any(|x| x.is_main_result)
    {
        lines.push(line(
            json!({ "type": "result", "text": text, "is_main_result": true }),
        ));
    }
    let error = match (&r.cell.error, r.reason) {
        (_, Reason::Timeout) => Some(json!({
            "type": "error", "name": "TimeoutError",
            "value": format!("the execution ran past its timeout ({} ms)", r.duration_ms),
            "traceback": "",
        })),
        (Some(e), _) => Some(json!({
            "type": "error", "name": e.name, "value": e.value, "traceback": e.traceback,
        })),
        (None, reason) if reason.is_limit() => Some(json!({
            "type": "error", "name": "LimitExceeded",
            "value": format!("the sandbox's {reason} limit ended the execution"),
            "traceback": "",
        })),
        (None, _) if !in_context && !r.is_success() => Some(json!({
            "type": "error", "name": "Error",
            "value": format!("exited with status {}", r.shell_status()),
            "traceback": r.stderr,
        })),
        _ => None,
    };
    lines.extend(error.map(line));
    if let Some(n) = r.cell.execution_count {
        lines.push(line(
            json!({ "type": "number_of_executions", "execution_count": n }),
        ));
    }
    lines.push(line(json!({ "type": "end_of_execution" })));
    lines
}

fn error_lines(name: &str, value: &str) -> Vec<Bytes> {
    vec![
        line(json!({ "type": "error", "name": name, "value": value, "traceback": "" })),
        line(json!({ "type": "end_of_execution" })),
    ]
}

async fn execute(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let (id, caller) = match sandbox_of(&state, &headers, true) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    let parsed = (|| {
        let body = object(&body)?;
        let code = opt_string(&body, "code")?
            .ok_or_else(|| error(StatusCode::BAD_REQUEST, "code: required"))?;
        let context = opt_string(&body, "context_id")?;
        let lang = language(opt_string(&body, "language")?.as_deref());
        match body.get("env_vars") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) if m.is_empty() => {}
            Some(_) => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "env_vars: per-execution environment variables are not supported by Warden; give them to Sandbox.create(envs=…)",
                ));
            }
        }
        if context.is_some() && lang.is_some() {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "context_id and language: give one of them",
            ));
        }
        Ok((code, context, lang))
    })();
    let (code, context, lang) = match parsed {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    // Python without a context: the sandbox's default context; another language: a run.
    let context = match (&context, &lang) {
        (Some(c), _) => Some(c.clone()),
        (None, None) => Some(warden_engine::DEFAULT_CONTEXT.to_owned()),
        (None, Some(_)) => None,
    };
    let in_context = context.is_some();
    let started = state
        .sandboxes
        .start_exec(
            &caller.engine(),
            &id,
            SandboxExec {
                code,
                language: lang,
                timeout: None,
                stdin: Vec::new(),
                args: Vec::new(),
                context,
                ..SandboxExec::default()
            },
        )
        .await;
    let execution = match started {
        Ok(e) => e,
        Err(e) => {
            let e = api_error(e);
            if e.code == "policy_violation" {
                return ndjson(error_lines("PolicyViolation", &e.message));
            }
            return from_api(e).into_response();
        }
    };
    let state = Some((execution.stream(), Lines::default()));
    let lines = futures_util::stream::unfold(state, move |state| async move {
        let (mut items, mut buffered) = state?;
        let chunk: Bytes = match items.recv().await? {
            Streamed::Event(ExecEvent::Stdout { text, timestamp }) => {
                buffered.out.push(&text, "stdout", timestamp)
            }
            Streamed::Event(ExecEvent::Stderr { text, timestamp }) => {
                buffered.err.push(&text, "stderr", timestamp)
            }
            Streamed::Event(_) => Bytes::new(),
            Streamed::End(outcome) => {
                let mut lines = vec![buffered.out.rest("stdout"), buffered.err.rest("stderr")];
                lines.extend(match *outcome {
                    Ok(r) => end_lines(&r, in_context),
                    Err(e) => {
                        let e = api_error(e);
                        error_lines(e.code, &e.message)
                    }
                });
                return Some((Ok::<_, std::io::Error>(lines.concat().into()), None));
            }
        };
        Some((Ok(chunk), Some((items, buffered))))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response()
}

/// Output split into lines, as E2B's kernels send it (one message per line, its newline
/// kept); a last line without a newline goes out at the end.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    out: LineBuffer,
    err: LineBuffer,
}

#[derive(Debug, Default)]
pub(crate) struct LineBuffer {
    partial: String,
    timestamp: u64,
}

impl LineBuffer {
    /// The NDJSON messages of the complete lines `text` ends.
    pub(crate) fn push(&mut self, text: &str, kind: &str, timestamp: u64) -> Bytes {
        if self.partial.is_empty() {
            self.timestamp = timestamp;
        }
        self.partial.push_str(text);
        let Some(last) = self.partial.rfind('\n') else {
            return Bytes::new();
        };
        let rest = self.partial.split_off(last + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        let lines: Vec<Bytes> = done
            .split_inclusive('\n')
            .map(|l| line(json!({ "type": kind, "text": l, "timestamp": self.timestamp })))
            .collect();
        self.timestamp = timestamp;
        lines.concat().into()
    }

    /// The last, unfinished line, if any.
    pub(crate) fn rest(&mut self, kind: &str) -> Bytes {
        if self.partial.is_empty() {
            return Bytes::new();
        }
        let text = std::mem::take(&mut self.partial);
        line(json!({ "type": kind, "text": text, "timestamp": self.timestamp }))
    }
}

fn context_json(c: &warden_engine::ContextInfo) -> Value {
    json!({ "id": c.id, "language": c.language, "cwd": HOME })
}

async fn create_context(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (id, caller) = match sandbox_of(&state, &headers, false) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    let parsed = (|| {
        let body = object(&body)?;
        if let Some(cwd) = opt_string(&body, "cwd")?
            && cwd.trim_end_matches('/') != HOME
        {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("cwd: a context starts in {HOME}; change directory in its code"),
            ));
        }
        Ok(language(opt_string(&body, "language")?.as_deref()))
    })();
    let lang = match parsed {
        Ok(l) => l.unwrap_or_else(|| "python".into()),
        Err(r) => return r.into_response(),
    };
    match state
        .sandboxes
        .create_context(
            &caller.engine(),
            &id,
            CreateContext {
                language: Some(lang),
            },
        )
        .await
    {
        Ok(c) => axum::Json(context_json(&c)).into_response(),
        Err(e) => from_api(api_error(e)).into_response(),
    }
}

async fn list_contexts(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (id, caller) = match sandbox_of(&state, &headers, false) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    match state
        .sandboxes
        .list_contexts(caller.owner().as_deref(), &id)
    {
        Ok(cs) => axum::Json(cs.iter().map(context_json).collect::<Vec<_>>()).into_response(),
        Err(e) => from_api(api_error(e)).into_response(),
    }
}

async fn remove_context(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(context): Path<String>,
) -> Response {
    let (id, caller) = match sandbox_of(&state, &headers, false) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    match state
        .sandboxes
        .destroy_context(caller.owner().as_deref(), &id, &context)
        .await
    {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => from_api(api_error(e)).into_response(),
    }
}

async fn restart_context(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(context): Path<String>,
) -> Response {
    let (id, caller) = match sandbox_of(&state, &headers, false) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    match state
        .sandboxes
        .restart_context(&caller.engine(), &id, &context)
        .await
    {
        Ok(c) => axum::Json(context_json(&c)).into_response(),
        Err(e) => from_api(api_error(e)).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(b: &Bytes) -> Vec<String> {
        b.split(|c| *c == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_slice::<Value>(l).unwrap()["text"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn output_goes_out_line_by_line() {
        let mut b = LineBuffer::default();
        assert!(b.push("hi", "stdout", 1).is_empty());
        assert_eq!(
            texts(&b.push("\nsecond\nthi", "stdout", 2)),
            ["hi\n", "second\n"]
        );
        assert_eq!(texts(&b.push("rd\n", "stdout", 3)), ["third\n"]);
        assert!(b.rest("stdout").is_empty());
        b.push("no newline", "stdout", 4);
        assert_eq!(texts(&b.rest("stdout")), ["no newline"]);
    }

    #[test]
    fn results_keep_their_mime_types_and_the_end_is_last() {
        let mut data = std::collections::BTreeMap::new();
        data.insert("text/plain".to_owned(), "1".to_owned());
        data.insert("image/png".to_owned(), "iVBO".to_owned());
        data.insert("application/json".to_owned(), "{\"a\": 1}".to_owned());
        data.insert("application/x-thing".to_owned(), "x".to_owned());
        let v = result_json(&RichResult {
            mime_types: vec![],
            data,
            is_main_result: true,
        });
        assert_eq!(v["type"], "result");
        assert_eq!(
            (v["text"].as_str(), v["png"].as_str()),
            (Some("1"), Some("iVBO"))
        );
        assert_eq!(v["json"]["a"], 1);
        assert_eq!(v["extra"]["application/x-thing"], "x");
        assert_eq!(v["is_main_result"], true);
        let r: ExecResult = serde_json::from_value(json!({
            "stdout": "", "stderr": "boom", "exit_code": 2, "signal": null, "reason": "exited",
            "duration_ms": 1, "stdout_truncated": false, "stderr_truncated": false, "artifacts": []
        }))
        .unwrap();
        let lines = end_lines(&r, false);
        let last: Value = serde_json::from_slice(lines.last().unwrap().trim_ascii()).unwrap();
        assert_eq!(last["type"], "end_of_execution");
        let err: Value = serde_json::from_slice(lines[0].trim_ascii()).unwrap();
        assert_eq!(
            (err["type"].as_str(), err["traceback"].as_str()),
            (Some("error"), Some("boom"))
        );
        assert!(lines.iter().all(|l| l.ends_with(b"\n") && l.len() > 1));
    }
}
