//! envd, E2B's in-sandbox daemon (port 49983), as a mapping onto a Warden sandbox: commands
//! (`process.Process`), the file system (`filesystem.Filesystem`), `GET|POST /files` and
//! `GET /health`.
//!
//! Invariants: a command is one execution in the sandbox (`bash`, the sandbox's limits and
//! isolation, its own timeout at most the sandbox's), streamed as it runs; a kill ends that
//! execution (dropping it kills its sandbox run); file
//! operations in the workspace go through the engine's files API, the others run as a short
//! shell script in the sandbox, so they see exactly what the sandbox's programs see (its
//! read-only root, its user). A command runs with its own environment and working directory
//! (the engine's per-execution `env` and `cwd`), and with `stdin: true` a live stdin
//! (`SendInput`, `CloseStdin`); it runs on when its stream goes away, as envd's do, and
//! `Connect` hears it again. Unknown procedures are `unimplemented`; what envd does and Warden
//! does not (watchers, client streams, PTYs) says so in Connect's error shape.

use super::connect::{self, RpcError, decode_envelopes};
use super::multipart;
use super::{HOME, SandboxError, api_error, sandbox_of};
use crate::{AppState, Caller};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use warden_engine::{SandboxExec, StdinWriter};
use warden_types::{ExecEvent, ExecResult, Reason, WorkspacePath};

pub(super) fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/files", get(download).post(upload))
        .fallback(rpc)
        .with_state(state)
}

/// envd's plain HTTP error: `{"code": <connect code>, "message"}` with the status.
pub(crate) fn plain_error(status: StatusCode, code: &'static str, message: String) -> Response {
    (
        status,
        axum::Json(json!({ "code": code, "message": message })),
    )
        .into_response()
}

/// The files API's error: `{"code": <status>, "message"}` (envd's REST errors).
fn files_error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({ "code": status.as_u16(), "message": message.into() })),
    )
        .into_response()
}

async fn health(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match sandbox_of(&state, &headers, false) {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.response(),
    }
}

// ---------------------------------------------------------------------------------------------
// Paths

/// An E2B path as the sandbox sees it: absolute, a relative one under [`HOME`].
pub(crate) fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("{HOME}/{rest}")
    } else {
        format!("{HOME}/{path}")
    }
}

/// The workspace path of a sandbox path under [`HOME`] (or `/workspace`), if it is one.
pub(crate) fn in_workspace(abs: &str) -> Option<WorkspacePath> {
    let rest = abs
        .strip_prefix(HOME)
        .and_then(|r| r.strip_prefix('/'))
        .or_else(|| abs.strip_prefix("/workspace/"))?;
    WorkspacePath::new(rest).ok()
}

fn checked_path(path: &str) -> Result<String, RpcError> {
    if path.is_empty() || path.len() > 4096 || path.contains('\0') {
        return Err(RpcError::new(
            "invalid_argument",
            "path: 1 to 4096 bytes, no NUL",
        ));
    }
    Ok(absolute(path))
}

// ---------------------------------------------------------------------------------------------
// Shell scripts run in the sandbox

/// What `find -printf` prints of one entry: type, size, permission bits, `ls`-style
/// permissions, owner, group, modification time, symlink target, path; each NUL-terminated.
const ENTRY_FORMAT: &str = r"%y\0%s\0%m\0%M\0%u\0%g\0%T@\0%l\0%p\0";
/// Exit statuses the scripts use to say why they stopped.
const NOT_FOUND: i32 = 44;
const NOT_A_DIR: i32 = 45;
const EXISTS: i32 = 46;

fn stat_script() -> String {
    format!(
        "[ -e \"$1\" ] || [ -L \"$1\" ] || exit {NOT_FOUND}\nexec find \"$1\" -maxdepth 0 -printf '{ENTRY_FORMAT}'\n"
    )
}
fn list_script() -> String {
    format!(
        "[ -e \"$1\" ] || exit {NOT_FOUND}\n[ -d \"$1\" ] || exit {NOT_A_DIR}\nexec find \"$1\" -mindepth 1 -maxdepth \"$2\" -printf '{ENTRY_FORMAT}'\n"
    )
}
fn mkdir_script() -> String {
    format!(
        "[ -e \"$1\" ] && exit {EXISTS}\nmkdir -p -- \"$1\" || exit 1\nexec find \"$1\" -maxdepth 0 -printf '{ENTRY_FORMAT}'\n"
    )
}
fn move_script() -> String {
    format!(
        "[ -e \"$1\" ] || [ -L \"$1\" ] || exit {NOT_FOUND}\nmv -T -- \"$1\" \"$2\" || exit 1\nexec find \"$2\" -maxdepth 0 -printf '{ENTRY_FORMAT}'\n"
    )
}
fn remove_script() -> String {
    format!("[ -e \"$1\" ] || [ -L \"$1\" ] || exit {NOT_FOUND}\nexec rm -rf -- \"$1\"\n")
}
fn read_script() -> String {
    format!("[ -f \"$1\" ] || exit {NOT_FOUND}\nexec base64 -w0 -- \"$1\"\n")
}
const WRITE_SCRIPT: &str = "mkdir -p -- \"$(dirname -- \"$1\")\" && exec cat > \"$1\"\n";

/// Runs a shell script in the sandbox to its end: one execution, as any other.
async fn run_script(
    state: &AppState,
    caller: &Caller,
    id: &str,
    script: String,
    args: Vec<String>,
    stdin: Vec<u8>,
) -> Result<ExecResult, RpcError> {
    let execution = state
        .sandboxes
        .start_exec(
            &caller.engine(),
            id,
            SandboxExec {
                code: script,
                language: Some("bash".into()),
                timeout: None,
                stdin,
                args,
                context: None,
                ..SandboxExec::default()
            },
        )
        .await
        .map_err(|e| RpcError::from_api(&api_error(e)))?;
    execution
        .finish()
        .await
        .map_err(|e| RpcError::from_api(&api_error(e)))
}

/// A script's failure as the error envd gives.
fn script_error(r: &ExecResult, path: &str) -> RpcError {
    match r.exit_code {
        Some(NOT_FOUND) => RpcError::new("not_found", format!("path not found: {path}")),
        Some(NOT_A_DIR) => RpcError::new("invalid_argument", format!("not a directory: {path}")),
        Some(EXISTS) => RpcError::new("already_exists", format!("path already exists: {path}")),
        _ => {
            let err = r.stderr.trim();
            let code = if err.contains("Permission denied") || err.contains("Read-only") {
                "permission_denied"
            } else {
                "failed_precondition"
            };
            RpcError::new(code, format!("{path}: {err}"))
        }
    }
}

/// Entries as `find -printf ENTRY_FORMAT` printed them, in envd's `EntryInfo` JSON.
pub(crate) fn parse_entries(out: &str) -> Vec<Value> {
    let fields: Vec<&str> = out.split('\0').collect();
    fields
        .chunks_exact(9)
        .map(|f| {
            let path = f[8];
            let name = path.rsplit('/').next().unwrap_or(path);
            let kind = match f[0] {
                "d" => "FILE_TYPE_DIRECTORY",
                "l" => "FILE_TYPE_SYMLINK",
                "f" => "FILE_TYPE_FILE",
                _ => "FILE_TYPE_UNSPECIFIED",
            };
            let mtime_ms = f[6]
                .parse::<f64>()
                .map(|s| (s * 1000.0).max(0.0) as u64)
                .unwrap_or(0);
            let mut e = json!({
                "name": name,
                "type": kind,
                "path": path,
                "size": f[1].parse::<u64>().unwrap_or(0).to_string(),
                "mode": u32::from_str_radix(f[2], 8).unwrap_or(0),
                "permissions": f[3],
                "owner": f[4],
                "group": f[5],
                "modifiedTime": warden_types::rfc3339(mtime_ms),
            });
            if f[0] == "l" {
                e["symlinkTarget"] = json!(f[7]);
            }
            e
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// /files

#[derive(Debug, serde::Deserialize)]
struct FilesQuery {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    username: Option<String>,
}

fn files_rpc_error(e: RpcError) -> Response {
    files_error(e.status(), e.message)
}

async fn download(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let (id, caller) = match sandbox_of(&state, &headers, true) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    let Ok(Query(q)) = query else {
        return files_error(StatusCode::BAD_REQUEST, "query: path=<file>");
    };
    let Some(path) = q.path else {
        return files_error(StatusCode::BAD_REQUEST, "path: required");
    };
    let abs = match checked_path(&path) {
        Ok(p) => p,
        Err(e) => return files_rpc_error(e),
    };
    let bytes = match in_workspace(&abs) {
        Some(wp) => state
            .sandboxes
            .read_file(
                caller.owner().as_deref(),
                &id,
                &wp,
                state.limits.max_download_bytes,
            )
            .await
            .map_err(|e| {
                let e = api_error(e);
                let mut r = RpcError::from_api(&e);
                if e.code == "not_found" {
                    r.message = format!("file not found: {abs}");
                }
                r
            }),
        None => match run_script(
            &state,
            &caller,
            &id,
            read_script(),
            vec![abs.clone()],
            vec![],
        )
        .await
        {
            Ok(r) if r.is_success() && !r.stdout_truncated => B64
                .decode(r.stdout.trim())
                .map_err(|_| RpcError::new("failed_precondition", "the file could not be read")),
            Ok(r) if r.is_success() => Err(RpcError::new(
                "resource_exhausted",
                format!("{abs}: larger than this sandbox's output cap; read it from under {HOME}"),
            )),
            Ok(r) => Err(script_error(&r, &abs)),
            Err(e) => Err(e),
        },
    };
    match bytes {
        Ok(b) => ([(header::CONTENT_TYPE, "application/octet-stream")], b).into_response(),
        Err(e) => files_rpc_error(e),
    }
}

async fn upload(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let (id, caller) = match sandbox_of(&state, &headers, true) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return files_error(StatusCode::PAYLOAD_TOO_LARGE, r.body_text());
        }
        Err(r) => return files_error(StatusCode::BAD_REQUEST, r.body_text()),
    };
    let Ok(Query(q)) = query else {
        return files_error(StatusCode::BAD_REQUEST, "query: path=<file>");
    };
    if headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity")
    {
        return files_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "compressed uploads (gzip) are not supported; upload without gzip",
        );
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let files: Vec<(String, Vec<u8>)> = if content_type.starts_with("multipart/form-data") {
        let parts = match multipart::parse(content_type, &body) {
            Ok(p) => p,
            Err(e) => return files_error(StatusCode::BAD_REQUEST, format!("multipart body: {e}")),
        };
        if parts.is_empty() {
            return files_error(StatusCode::BAD_REQUEST, "multipart body: no file");
        }
        let single = parts.len() == 1;
        let mut files = Vec::new();
        for part in parts {
            let path = match (&q.path, part.filename) {
                (Some(p), _) if single => p.clone(),
                (_, Some(f)) => f,
                _ => return files_error(StatusCode::BAD_REQUEST, "path: required for each file"),
            };
            files.push((path, part.data));
        }
        files
    } else {
        let Some(path) = q.path.clone() else {
            return files_error(StatusCode::BAD_REQUEST, "path: required");
        };
        vec![(path, body.to_vec())]
    };
    let mut written = Vec::new();
    for (path, data) in files {
        let abs = match checked_path(&path) {
            Ok(p) => p,
            Err(e) => return files_rpc_error(e),
        };
        let done = match in_workspace(&abs) {
            Some(wp) => state
                .sandboxes
                .write_file(caller.owner().as_deref(), &id, &wp, data)
                .await
                .map_err(|e| RpcError::from_api(&api_error(e))),
            None => match run_script(
                &state,
                &caller,
                &id,
                WRITE_SCRIPT.into(),
                vec![abs.clone()],
                data,
            )
            .await
            {
                Ok(r) if r.is_success() => Ok(()),
                Ok(r) => Err(script_error(&r, &abs)),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = done {
            return files_rpc_error(e);
        }
        let name = abs.rsplit('/').next().unwrap_or(&abs).to_owned();
        written.push(json!({ "name": name, "type": "file", "path": abs }));
    }
    axum::Json(Value::Array(written)).into_response()
}

// ---------------------------------------------------------------------------------------------
// Connect RPC

/// `POST /{service}/{method}`.
async fn rpc(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let streaming = content_type.starts_with("application/connect+");
    let fail = |e: RpcError| {
        if streaming {
            stream_error(e)
        } else {
            unary_error(e)
        }
    };
    if method != Method::POST {
        return fail(RpcError::new(
            "unimplemented",
            format!("{method} {}: envd's procedures are POST", uri.path()),
        ));
    }
    let procedure = uri.path().trim_start_matches('/').to_owned();
    let Some(kind) = procedure_kind(&procedure) else {
        return plain_error(
            StatusCode::NOT_FOUND,
            "unimplemented",
            format!("unknown procedure {procedure:?}"),
        );
    };
    let json_type = if streaming {
        "application/connect+json"
    } else {
        "application/json"
    };
    if content_type.split(';').next().map(str::trim) != Some(json_type) {
        return fail(RpcError::new(
            "invalid_argument",
            format!("{procedure}: Content-Type must be {json_type} (the JSON codec)"),
        ));
    }
    if streaming != (kind == Kind::ServerStream) {
        return fail(RpcError::new(
            "invalid_argument",
            format!("{procedure}: wrong Content-Type for this procedure's kind"),
        ));
    }
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return fail(RpcError::new("resource_exhausted", r.body_text()));
        }
        Err(r) => return fail(RpcError::new("invalid_argument", r.body_text())),
    };
    let request = if streaming {
        match decode_envelopes(&body) {
            Ok(envs) => match envs.into_iter().find(|e| e.flags == 0) {
                Some(e) => parse_message(&e.message),
                None => Err(RpcError::new("invalid_argument", "no request message")),
            },
            Err(e) => Err(RpcError::new("invalid_argument", e.to_string())),
        }
    } else {
        parse_message(&body)
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let (id, caller) = match sandbox_of(&state, &headers, true) {
        Ok(s) => s,
        Err(SandboxError::Unknown(id)) if streaming => {
            return stream_error(RpcError::new(
                "not_found",
                format!("sandbox {id} not found"),
            ));
        }
        Err(e) => return e.response(),
    };
    let call = Call {
        state,
        caller,
        id,
        request,
    };
    let answer = match procedure.as_str() {
        "process.Process/Start" => return start(call, &headers).await,
        "process.Process/Connect" => return connect_to(&call),
        "process.Process/SendInput" => call.send_input().await,
        "process.Process/CloseStdin" => call.close_stdin(),
        "process.Process/SendSignal" => call.send_signal(),
        "process.Process/List" => call.list_processes(),
        "filesystem.Filesystem/Stat" => call.stat().await,
        "filesystem.Filesystem/ListDir" => call.list_dir().await,
        "filesystem.Filesystem/MakeDir" => call.make_dir().await,
        "filesystem.Filesystem/Move" => call.move_entry().await,
        "filesystem.Filesystem/Remove" => call.remove().await,
        other => Err(unsupported(other)),
    };
    match answer {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => fail(e),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Unary,
    ServerStream,
    /// Client or bidirectional streams: never over HTTP/1.1 here.
    ClientStream,
}

/// envd's procedures, and their kinds; `None`: not envd's.
pub(crate) fn procedure_kind(procedure: &str) -> Option<Kind> {
    Some(match procedure {
        "process.Process/Start" | "process.Process/Connect" => Kind::ServerStream,
        "filesystem.Filesystem/WatchDir" => Kind::ServerStream,
        "process.Process/StreamInput" => Kind::ClientStream,
        "process.Process/List"
        | "process.Process/Update"
        | "process.Process/SendInput"
        | "process.Process/SendSignal"
        | "process.Process/CloseStdin"
        | "filesystem.Filesystem/Stat"
        | "filesystem.Filesystem/MakeDir"
        | "filesystem.Filesystem/Move"
        | "filesystem.Filesystem/ListDir"
        | "filesystem.Filesystem/Remove"
        | "filesystem.Filesystem/CreateWatcher"
        | "filesystem.Filesystem/GetWatcherEvents"
        | "filesystem.Filesystem/RemoveWatcher" => Kind::Unary,
        _ => return None,
    })
}

/// What Warden's envd does not do, with why.
fn unsupported(procedure: &str) -> RpcError {
    let why = match procedure {
        "process.Process/StreamInput" => {
            "client streams are not supported by Warden; use SendInput (send_stdin)"
        }
        "process.Process/Update" => "PTYs are not supported by Warden",
        _ if procedure.starts_with("filesystem.Filesystem/") => {
            "watching directories is not supported by Warden"
        }
        _ => "not supported by Warden",
    };
    RpcError::new("unimplemented", format!("{procedure}: {why}"))
}

fn parse_message(bytes: &[u8]) -> Result<Value, RpcError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(RpcError::new(
            "invalid_argument",
            "the message must be a JSON object",
        )),
        Err(e) => Err(RpcError::new(
            "invalid_argument",
            format!("invalid JSON: {e}"),
        )),
    }
}

fn unary_error(e: RpcError) -> Response {
    plain_error(e.status(), e.code, e.message)
}

/// A stream that is only its end, with the error (status 200, as Connect streams end).
fn stream_error(e: RpcError) -> Response {
    (
        [(header::CONTENT_TYPE, "application/connect+json")],
        connect::end(Some(&e)),
    )
        .into_response()
}

/// A field of a protobuf JSON message by its JSON name or its proto name.
fn field<'a>(v: &'a Value, json_name: &str, proto_name: &str) -> Option<&'a Value> {
    v.get(json_name)
        .or_else(|| v.get(proto_name))
        .filter(|v| !v.is_null())
}

fn string_field(v: &Value, json_name: &str, proto_name: &str) -> Result<Option<String>, RpcError> {
    match field(v, json_name, proto_name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::new(
            "invalid_argument",
            format!("{json_name}: must be a string"),
        )),
    }
}

struct Call {
    state: AppState,
    caller: Caller,
    id: String,
    request: Value,
}

impl Call {
    fn path(&self, name: &str) -> Result<String, RpcError> {
        let p = string_field(&self.request, name, name)?
            .ok_or_else(|| RpcError::new("invalid_argument", format!("{name}: required")))?;
        checked_path(&p)
    }

    async fn script(
        &self,
        script: String,
        args: Vec<String>,
        path: &str,
    ) -> Result<ExecResult, RpcError> {
        let r = run_script(&self.state, &self.caller, &self.id, script, args, vec![]).await?;
        if r.is_success() {
            Ok(r)
        } else {
            Err(script_error(&r, path))
        }
    }

    async fn one_entry(
        &self,
        script: String,
        args: Vec<String>,
        path: &str,
    ) -> Result<Value, RpcError> {
        let r = self.script(script, args, path).await?;
        parse_entries(&r.stdout)
            .into_iter()
            .next()
            .map(|e| json!({ "entry": e }))
            .ok_or_else(|| RpcError::new("failed_precondition", format!("{path}: no entry")))
    }

    async fn stat(&self) -> Result<Value, RpcError> {
        let path = self.path("path")?;
        self.one_entry(stat_script(), vec![path.clone()], &path)
            .await
    }

    async fn list_dir(&self) -> Result<Value, RpcError> {
        let path = self.path("path")?;
        let depth = match field(&self.request, "depth", "depth") {
            None => 1,
            Some(d) => d
                .as_u64()
                .or_else(|| d.as_str().and_then(|s| s.parse().ok()))
                .filter(|d| (1..=64).contains(d))
                .ok_or_else(|| RpcError::new("invalid_argument", "depth: 1 to 64"))?,
        };
        let r = self
            .script(list_script(), vec![path.clone(), depth.to_string()], &path)
            .await?;
        Ok(json!({ "entries": parse_entries(&r.stdout) }))
    }

    async fn make_dir(&self) -> Result<Value, RpcError> {
        let path = self.path("path")?;
        self.one_entry(mkdir_script(), vec![path.clone()], &path)
            .await
    }

    async fn move_entry(&self) -> Result<Value, RpcError> {
        let from = self.path("source")?;
        let to = self.path("destination")?;
        self.one_entry(move_script(), vec![from.clone(), to], &from)
            .await
    }

    async fn remove(&self) -> Result<Value, RpcError> {
        let path = self.path("path")?;
        self.script(remove_script(), vec![path.clone()], &path)
            .await?;
        Ok(json!({}))
    }

    fn pid(&self) -> Result<u32, RpcError> {
        let selector = field(&self.request, "process", "process")
            .ok_or_else(|| RpcError::new("invalid_argument", "process: required"))?;
        match field(selector, "pid", "pid") {
            Some(p) => p
                .as_u64()
                .or_else(|| p.as_str().and_then(|s| s.parse().ok()))
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| RpcError::new("invalid_argument", "process.pid: a number")),
            None if field(selector, "tag", "tag").is_some() => Err(RpcError::new(
                "not_found",
                "no process has a tag here (Warden's commands have none)",
            )),
            None => Err(RpcError::new("invalid_argument", "process.pid: required")),
        }
    }

    fn send_signal(&self) -> Result<Value, RpcError> {
        let pid = self.pid()?;
        if self.state.e2b.processes.kill(&self.id, pid) {
            Ok(json!({}))
        } else {
            Err(not_found(pid))
        }
    }

    /// `process.Process/SendInput`: bytes to a command's live stdin.
    async fn send_input(&self) -> Result<Value, RpcError> {
        let pid = self.pid()?;
        let input = field(&self.request, "input", "input")
            .ok_or_else(|| RpcError::new("invalid_argument", "input: required"))?;
        if field(input, "pty", "pty").is_some() {
            return Err(RpcError::new(
                "unimplemented",
                "PTYs are not supported by Warden",
            ));
        }
        let data = match field(input, "stdin", "stdin") {
            None => Vec::new(),
            Some(Value::String(b64)) => B64
                .decode(b64)
                .map_err(|_| RpcError::new("invalid_argument", "input.stdin: base64 bytes"))?,
            Some(_) => {
                return Err(RpcError::new(
                    "invalid_argument",
                    "input.stdin: base64 bytes",
                ));
            }
        };
        let writer = self.state.e2b.processes.stdin(&self.id, pid)?;
        if data.is_empty() {
            return Ok(json!({}));
        }
        // A command that does not read its stdin fills the pipe: say so rather than hang.
        match tokio::time::timeout(STDIN_WAIT, writer.send(data)).await {
            Ok(Ok(())) => Ok(json!({})),
            // The command ended meanwhile.
            Ok(Err(_)) => Err(not_found(pid)),
            Err(_) => Err(RpcError::new(
                "resource_exhausted",
                format!(
                    "process {pid} has not read its stdin for {}s; nothing more was sent",
                    STDIN_WAIT.as_secs()
                ),
            )),
        }
    }

    /// `process.Process/CloseStdin`: the command reads end of file after what was sent.
    fn close_stdin(&self) -> Result<Value, RpcError> {
        let pid = self.pid()?;
        self.state.e2b.processes.close_stdin(&self.id, pid)?;
        Ok(json!({}))
    }

    fn list_processes(&self) -> Result<Value, RpcError> {
        Ok(json!({ "processes": self.state.e2b.processes.list(&self.id) }))
    }
}

// ---------------------------------------------------------------------------------------------
// Commands

/// The commands running now, by pid (numbers of this front-end's, not the sandbox's).
#[derive(Debug, Clone)]
pub(crate) struct Processes {
    next: Arc<AtomicU32>,
    running: Arc<Mutex<BTreeMap<u32, Running>>>,
}

impl Default for Processes {
    fn default() -> Self {
        Processes {
            next: Arc::new(AtomicU32::new(1000)),
            running: Arc::default(),
        }
    }
}

#[derive(Debug)]
struct Running {
    sandbox: String,
    config: Value,
    kill: Option<oneshot::Sender<()>>,
    stdin: Stdin,
    /// The streams that hear the command's events: its `Start`'s and each `Connect`'s.
    listeners: Vec<mpsc::Sender<Bytes>>,
}

/// A command's live stdin.
#[derive(Debug)]
enum Stdin {
    /// Started without `stdin: true`: its stdin was empty.
    None,
    Open(StdinWriter),
    Closed,
}

/// How many event frames a listener may lag behind before the command waits for it.
const LISTENER_FRAMES: usize = 64;

/// How long a `SendInput` waits for room in a command's stdin (which it does not read).
const STDIN_WAIT: Duration = Duration::from_secs(10);

impl Processes {
    /// Registers a command; its `Start` stream is its first listener (returned).
    fn add(
        &self,
        sandbox: &str,
        config: Value,
        stdin: Option<StdinWriter>,
    ) -> (u32, oneshot::Receiver<()>, mpsc::Receiver<Bytes>) {
        let pid = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let (frames, listener) = mpsc::channel(LISTENER_FRAMES);
        self.running.lock().expect("not poisoned").insert(
            pid,
            Running {
                sandbox: sandbox.to_owned(),
                config,
                kill: Some(tx),
                stdin: stdin.map_or(Stdin::None, Stdin::Open),
                listeners: vec![frames],
            },
        );
        (pid, rx, listener)
    }

    /// A new listener of the command `pid` of `sandbox` (`Connect`), its first frame the
    /// command's `start`; `None`: no such command.
    fn listen(&self, sandbox: &str, pid: u32) -> Option<mpsc::Receiver<Bytes>> {
        let mut running = self.running.lock().expect("not poisoned");
        let r = running.get_mut(&pid).filter(|r| r.sandbox == sandbox)?;
        let (frames, listener) = mpsc::channel(LISTENER_FRAMES);
        frames
            .try_send(event(json!({ "start": { "pid": pid } })))
            .expect("room in a new channel");
        r.listeners.push(frames);
        Some(listener)
    }

    /// The command's listeners now (closed ones dropped).
    fn listeners(&self, pid: u32) -> Vec<mpsc::Sender<Bytes>> {
        let mut running = self.running.lock().expect("not poisoned");
        match running.get_mut(&pid) {
            Some(r) => {
                r.listeners.retain(|l| !l.is_closed());
                r.listeners.clone()
            }
            None => Vec::new(),
        }
    }

    /// The command has ended: it leaves the list; returns its listeners, for its end.
    fn done(&self, pid: u32) -> Vec<mpsc::Sender<Bytes>> {
        self.running
            .lock()
            .expect("not poisoned")
            .remove(&pid)
            .map(|r| r.listeners)
            .unwrap_or_default()
    }

    /// Ends the command `pid` of `sandbox`; false when there is no such command.
    fn kill(&self, sandbox: &str, pid: u32) -> bool {
        let mut running = self.running.lock().expect("not poisoned");
        match running.get_mut(&pid) {
            Some(r) if r.sandbox == sandbox => {
                if let Some(k) = r.kill.take() {
                    let _ = k.send(());
                }
                true
            }
            _ => false,
        }
    }

    /// The writer of the live stdin of the command `pid` of `sandbox`.
    fn stdin(&self, sandbox: &str, pid: u32) -> Result<StdinWriter, RpcError> {
        let running = self.running.lock().expect("not poisoned");
        match running.get(&pid).filter(|r| r.sandbox == sandbox) {
            None => Err(not_found(pid)),
            Some(r) => match &r.stdin {
                Stdin::Open(w) => Ok(w.clone()),
                Stdin::None => Err(no_stdin(pid)),
                Stdin::Closed => Err(RpcError::new(
                    "failed_precondition",
                    format!("the stdin of process {pid} is closed"),
                )),
            },
        }
    }

    /// Closes the live stdin of the command `pid` of `sandbox` (the program reads end of
    /// file once what was sent is read). Closing it again is not an error.
    fn close_stdin(&self, sandbox: &str, pid: u32) -> Result<(), RpcError> {
        let mut running = self.running.lock().expect("not poisoned");
        match running.get_mut(&pid).filter(|r| r.sandbox == sandbox) {
            None => Err(not_found(pid)),
            Some(r) => match r.stdin {
                Stdin::None => Err(no_stdin(pid)),
                _ => {
                    r.stdin = Stdin::Closed;
                    Ok(())
                }
            },
        }
    }

    fn list(&self, sandbox: &str) -> Vec<Value> {
        self.running
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|(_, r)| r.sandbox == sandbox)
            .map(|(pid, r)| json!({ "pid": pid, "config": r.config }))
            .collect()
    }

    /// Kills the commands of a sandbox that is gone.
    pub(crate) fn forget_sandbox(&self, sandbox: &str) {
        let mut running = self.running.lock().expect("not poisoned");
        for r in running.values_mut().filter(|r| r.sandbox == sandbox) {
            if let Some(k) = r.kill.take() {
                let _ = k.send(());
            }
        }
    }
}

fn not_found(pid: u32) -> RpcError {
    RpcError::new("not_found", format!("process with pid {pid} not found"))
}

fn no_stdin(pid: u32) -> RpcError {
    RpcError::new(
        "failed_precondition",
        format!("process {pid} was started without stdin (start it with stdin=True)"),
    )
}

/// The script of every `process.Process/Start`: it replaces itself with the command (its
/// arguments: the command and the command's own), so the command's status is the run's. The
/// environment and working directory are the execution's own (the engine's `env` and `cwd`).
pub(crate) const COMMAND_SCRIPT: &str = "exec \"$@\"\n";

fn event(e: Value) -> Bytes {
    connect::message(&json!({ "event": e }))
}

/// A `Start` request: the command's argv, environment and working directory (absolute,
/// [`HOME`] by default), and whether its stdin stays open.
#[derive(Debug)]
pub(crate) struct StartCommand {
    pub(crate) argv: Vec<String>,
    pub(crate) envs: BTreeMap<String, String>,
    pub(crate) cwd: String,
    pub(crate) stdin: bool,
    /// What `List` shows of it.
    pub(crate) config: Value,
}

/// Parses a `Start` request (the engine checks the variables' names and the directory).
pub(crate) fn start_command(request: &Value) -> Result<StartCommand, RpcError> {
    let process = field(request, "process", "process")
        .cloned()
        .unwrap_or(Value::Null);
    let cmd = string_field(&process, "cmd", "cmd")?.unwrap_or_default();
    let args: Vec<String> = match field(&process, "args", "args") {
        None => Vec::new(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| RpcError::new("invalid_argument", "process.args: strings"))?,
    };
    let envs: BTreeMap<String, String> = match field(&process, "envs", "envs") {
        None => BTreeMap::new(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| RpcError::new("invalid_argument", "process.envs: strings"))?,
    };
    let cwd = string_field(&process, "cwd", "cwd")?;
    if field(request, "pty", "pty").is_some() {
        return Err(RpcError::new(
            "unimplemented",
            "PTYs are not supported by Warden",
        ));
    }
    let stdin = match field(request, "stdin", "stdin") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(RpcError::new("invalid_argument", "stdin: a boolean")),
    };
    if cmd.is_empty() || cmd.contains('\0') || args.iter().any(|a| a.contains('\0')) {
        return Err(RpcError::new(
            "invalid_argument",
            "process.cmd: required, no NUL",
        ));
    }
    let config = json!({ "cmd": cmd, "args": args, "envs": envs, "cwd": cwd });
    let cwd = match cwd.as_deref() {
        None | Some("") => HOME.to_owned(),
        Some(c) => absolute(c),
    };
    let mut argv = vec![cmd];
    argv.extend(args);
    Ok(StartCommand {
        argv,
        envs,
        cwd,
        stdin,
        config,
    })
}

/// The engine's refusal of a command's `envs` or `cwd` in envd's words.
fn start_error(e: warden_engine::EngineError) -> RpcError {
    match e {
        warden_engine::EngineError::InvalidRequest { field, message } => {
            let field = if field == "env" {
                "process.envs"
            } else {
                field
            };
            let field = if field == "cwd" { "process.cwd" } else { field };
            RpcError::new("invalid_argument", format!("{field}: {message}"))
        }
        e => RpcError::from_api(&api_error(e)),
    }
}

/// `process.Process/Start`: the command runs as one execution in the sandbox, with its own
/// environment and working directory (and, with `stdin: true`, a live stdin); `start`, then
/// its output as it comes, then `end`. The command runs on when its stream goes away (as
/// envd's do): `Connect` hears it again, `SendSignal` ends it, its timeout bounds it.
async fn start(call: Call, headers: &HeaderMap) -> Response {
    let command = match start_command(&call.request) {
        Ok(c) => c,
        Err(e) => return stream_error(e),
    };
    // The client's deadline, at most the sandbox's own timeout.
    let sandbox_timeout = call
        .state
        .sandboxes
        .get(call.caller.owner().as_deref(), &call.id)
        .map(|i| i.limits.timeout)
        .unwrap_or(Duration::from_secs(30));
    let asked = headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    let timeout = asked.map_or(sandbox_timeout, |a| a.min(sandbox_timeout));
    let started = call
        .state
        .sandboxes
        .start_exec(
            &call.caller.engine(),
            &call.id,
            SandboxExec {
                code: COMMAND_SCRIPT.into(),
                language: Some("bash".into()),
                timeout: Some(timeout),
                args: command.argv,
                env: command.envs,
                cwd: Some(command.cwd),
                live_stdin: command.stdin,
                ..SandboxExec::default()
            },
        )
        .await;
    let mut execution = match started {
        Ok(e) => e,
        Err(e) => return stream_error(start_error(e)),
    };
    let processes = call.state.e2b.processes.clone();
    let (pid, kill, listener) = processes.add(&call.id, command.config, execution.take_stdin());
    tokio::spawn(drive(execution, pid, kill, processes));
    stream_response(listener)
}

/// A Connect stream of the frames a listener gets.
fn stream_response(listener: mpsc::Receiver<Bytes>) -> Response {
    let body = futures_util::stream::unfold(listener, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
    });
    let mut r = axum::body::Body::from_stream(body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/connect+json"),
    );
    r
}

/// `process.Process/Connect`: a new stream of a running command's events from now on (its
/// `start`, then its output, then its `end`).
fn connect_to(call: &Call) -> Response {
    let pid = match call.pid() {
        Ok(p) => p,
        Err(e) => return stream_error(e),
    };
    match call.state.e2b.processes.listen(&call.id, pid) {
        Some(listener) => stream_response(listener),
        None => stream_error(not_found(pid)),
    }
}

/// Sends a frame to every listener of the command (a listener that went away is dropped).
async fn broadcast(listeners: &[mpsc::Sender<Bytes>], frame: &Bytes) {
    for l in listeners {
        let _ = l.send(frame.clone()).await;
    }
}

/// Runs a command's execution and writes its events to its listeners: `start` (to the
/// `Start` stream), the output, `end` (or the stream's error). A kill drops the execution:
/// its run is killed.
async fn drive(
    execution: warden_engine::Execution,
    pid: u32,
    mut kill: oneshot::Receiver<()>,
    processes: Processes,
) {
    broadcast(
        &processes.listeners(pid),
        &event(json!({ "start": { "pid": pid } })),
    )
    .await;
    let (events_tx, mut events) = mpsc::channel::<ExecEvent>(64);
    let mut run = Box::pin(execution.run(Some(events_tx)));
    let output = |e: ExecEvent| {
        let data = match e {
            ExecEvent::Stdout { text, .. } => json!({ "stdout": B64.encode(text.as_bytes()) }),
            ExecEvent::Stderr { text, .. } => json!({ "stderr": B64.encode(text.as_bytes()) }),
            _ => return None,
        };
        Some(event(json!({ "data": data })))
    };
    let outcome = loop {
        tokio::select! {
            out = run.as_mut() => break Some(out),
            Some(e) = events.recv() => {
                if let Some(f) = output(e) {
                    broadcast(&processes.listeners(pid), &f).await;
                }
            }
            _ = &mut kill => break None,
        }
    };
    let Some(outcome) = outcome else {
        // Killed: the run is dropped here, which kills it.
        drop(run);
        let listeners = processes.done(pid);
        broadcast(
            &listeners,
            &event(json!({ "end": {
                "exitCode": -1, "exited": false, "status": "signal: killed"
            } })),
        )
        .await;
        broadcast(&listeners, &connect::end(None)).await;
        return;
    };
    while let Ok(e) = events.try_recv() {
        if let Some(f) = output(e) {
            broadcast(&processes.listeners(pid), &f).await;
        }
    }
    let listeners = processes.done(pid);
    let end = match outcome {
        Err(e) => connect::end(Some(&RpcError::from_api(&api_error(e)))),
        Ok(r) if r.reason == Reason::Timeout => connect::end(Some(&RpcError::new(
            "deadline_exceeded",
            format!("the command ran past its timeout ({} ms)", r.duration_ms),
        ))),
        Ok(r) => {
            let code = r.shell_status();
            let mut end = json!({
                "exitCode": code,
                "exited": r.reason == Reason::Exited && r.exit_code.is_some(),
                "status": match (r.reason, r.exit_code, r.signal) {
                    (Reason::Exited, Some(c), _) => format!("exit status {c}"),
                    (_, _, Some(s)) => format!("signal: {s}"),
                    (reason, _, _) => format!("killed: {reason} limit"),
                },
            });
            if r.reason.is_limit() {
                end["error"] = json!(format!(
                    "the sandbox's {} limit ended the command",
                    r.reason
                ));
            }
            broadcast(&listeners, &event(json!({ "end": end }))).await;
            connect::end(None)
        }
    };
    broadcast(&listeners, &end).await;
}
