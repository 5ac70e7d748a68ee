//! The E2B drop-in: agents written for E2B's SDKs (`e2b`, `e2b-code-interpreter`) run unchanged
//! against Warden, configured by `E2B_API_URL` and `E2B_SANDBOX_URL` (both this server) and
//! `E2B_API_KEY` (a Warden API key).
//!
//! Three wire protocols, each a mapping onto the engine (one engine call per request):
//! - the control plane (`control.rs`): `/sandboxes…`, `/v2/sandboxes…` with `X-API-KEY`;
//!   errors `{"code": <status>, "message"}`;
//! - envd, the in-sandbox daemon (`envd.rs`, port 49983): Connect RPC with the JSON codec
//!   (`connect.rs`) for processes and the file system, `GET|POST /files`, `GET /health`;
//! - the code interpreter (`interpreter.rs`, port 49999): `POST /execute` (NDJSON),
//!   `/contexts…`.
//!
//! Invariants: a request carrying `E2b-Sandbox-Id` is E2B's in-sandbox traffic and goes to the
//! port its `E2b-Sandbox-Port` names, whatever its path; other requests reach E2B only on
//! the control plane's paths, so Warden's own routes are untouched. A sandbox made here is a
//! Warden sandbox of the same owner (the key's name), with the workspace also at
//! [`HOME`]; in-sandbox requests act as the sandbox's creator, and carry its access token
//! where the SDK sends one ([`Session`]). Bad input is answered in the protocol's own error
//! shape, never with a 5xx (a 502 only says "no such sandbox", as E2B's proxy does).

mod connect;
mod control;
pub(crate) mod envd;
mod interpreter;
pub mod multipart;

use crate::{ApiError, AppState, Caller};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tower::ServiceExt;

pub use connect::{Envelope, EnvelopeError, decode_envelopes};
pub use control::unquote;

/// Where E2B code expects its home and working directory: the sandbox's workspace.
pub const HOME: &str = "/home/user";
/// The envd version advertised: 0.5.7 is the first with `application/octet-stream` uploads,
/// which are implemented; later versions' features (file metadata, 0.6.2) are not.
pub const ENVD_VERSION: &str = "0.5.7";
/// E2B's ports, named by `E2b-Sandbox-Port`.
pub const ENVD_PORT: u16 = 49983;
pub const INTERPRETER_PORT: u16 = 49999;

const SANDBOX_ID: &str = "e2b-sandbox-id";
const SANDBOX_PORT: &str = "e2b-sandbox-port";
const ACCESS_TOKEN: &str = "x-access-token";

/// Who made a sandbox through E2B, for its in-sandbox requests (which carry no API key).
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) caller: Caller,
}

/// The drop-in's own state: the sessions of its sandboxes, the secret their access tokens are
/// derived from, the commands running now.
#[derive(Debug, Clone)]
pub struct E2b {
    secret: Arc<[u8; 32]>,
    sessions: Arc<Mutex<BTreeMap<String, Session>>>,
    pub(crate) processes: envd::Processes,
}

impl Default for E2b {
    fn default() -> Self {
        let mut secret = [0u8; 32];
        // A per-process secret: tokens die with the process, as its sandboxes do.
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            use std::io::Read;
            let _ = f.read_exact(&mut secret);
        }
        if secret == [0u8; 32] {
            secret = Sha256::digest(uuid::Uuid::now_v7().as_bytes()).into();
        }
        E2b {
            secret: Arc::new(secret),
            sessions: Arc::default(),
            processes: envd::Processes::default(),
        }
    }
}

impl E2b {
    /// The sandbox's access token (`envdAccessToken`): derived from its id and this process's
    /// secret, so it needs no storage and cannot be guessed from the id.
    pub fn access_token(&self, sandbox_id: &str) -> String {
        let mut h = Sha256::new();
        h.update(*self.secret);
        h.update(sandbox_id.as_bytes());
        let digest = h.finalize();
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    pub(crate) fn remember(&self, sandbox_id: &str, caller: &Caller) {
        self.sessions.lock().expect("not poisoned").insert(
            sandbox_id.to_owned(),
            Session {
                caller: caller.clone(),
            },
        );
    }

    pub(crate) fn forget(&self, sandbox_id: &str) {
        self.sessions
            .lock()
            .expect("not poisoned")
            .remove(sandbox_id);
    }

    /// Drops the sessions of sandboxes that no longer exist (reaped by their TTL).
    pub(crate) fn prune(&self, alive: impl Fn(&str, &Caller) -> bool) {
        self.sessions
            .lock()
            .expect("not poisoned")
            .retain(|id, s| alive(id, &s.caller));
    }

    fn session(&self, sandbox_id: &str) -> Option<Session> {
        self.sessions
            .lock()
            .expect("not poisoned")
            .get(sandbox_id)
            .cloned()
    }
}

/// Which of E2B's protocols a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Not E2B's: Warden's own routes.
    Warden,
    Control,
    Envd,
    Interpreter,
    /// `E2b-Sandbox-Id` with a missing or unknown port.
    BadPort,
}

/// The control plane's paths (all else without `E2b-Sandbox-Id` is Warden's).
fn is_control_path(path: &str) -> bool {
    path == "/sandboxes"
        || path.starts_with("/sandboxes/")
        || path == "/v2/sandboxes"
        || path.starts_with("/v2/sandboxes/")
        || path.starts_with("/templates")
        || path.starts_with("/v2/templates")
        || path.starts_with("/v3/templates")
        || path.starts_with("/snapshots")
        || path.starts_with("/volumes")
}

/// Routes a request by its headers and path (a pure function, tested beside it).
pub fn target(headers: &HeaderMap, path: &str) -> Target {
    if headers.contains_key(SANDBOX_ID) {
        return match headers
            .get(SANDBOX_PORT)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u16>().ok())
        {
            Some(ENVD_PORT) => Target::Envd,
            Some(INTERPRETER_PORT) => Target::Interpreter,
            _ => Target::BadPort,
        };
    }
    if is_control_path(path) {
        Target::Control
    } else {
        Target::Warden
    }
}

/// The routers of the three protocols, each with its own fallback in its own error shape.
#[derive(Debug, Clone)]
pub struct Routers {
    control: Router,
    envd: Router,
    interpreter: Router,
}

impl Routers {
    pub fn new(state: &AppState) -> Routers {
        let limit = DefaultBodyLimit::max(state.limits.max_body_bytes);
        Routers {
            control: control::router(state.clone()).layer(limit),
            envd: envd::router(state.clone()).layer(limit),
            interpreter: interpreter::router(state.clone()).layer(limit),
        }
    }
}

/// The outermost middleware: E2B's requests to their routers, all others on to Warden's.
pub async fn dispatch(State(routers): State<Routers>, req: Request, next: Next) -> Response {
    let router = match target(req.headers(), req.uri().path()) {
        Target::Warden => return next.run(req).await,
        Target::Control => routers.control,
        Target::Envd => routers.envd,
        Target::Interpreter => routers.interpreter,
        Target::BadPort => {
            return envd::plain_error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                format!(
                    "E2b-Sandbox-Port must be {ENVD_PORT} (envd) or {INTERPRETER_PORT} (code interpreter)"
                ),
            );
        }
    };
    match router.oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The sandbox an in-sandbox request is for, and who acts: its creator's session; the
/// request's access token must be the sandbox's when `token_required` (where the SDK sends
/// one) and must match whenever given.
pub(crate) fn sandbox_of(
    state: &AppState,
    headers: &HeaderMap,
    token_required: bool,
) -> Result<(String, Caller), SandboxError> {
    let id = headers
        .get(SANDBOX_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .ok_or(SandboxError::BadHeader)?
        .to_owned();
    let caller = match state.e2b.session(&id) {
        Some(s) => s.caller,
        // Without API keys every sandbox is the one (keyless) owner's: a sandbox made through
        // the REST API can be used without a connect first.
        None if state.keys.is_empty() => Caller(None),
        None => return Err(SandboxError::Unknown(id)),
    };
    if state.sandboxes.get(caller.owner().as_deref(), &id).is_err() {
        return Err(SandboxError::Unknown(id));
    }
    let given = headers.get(ACCESS_TOKEN).and_then(|v| v.to_str().ok());
    let expected = state.e2b.access_token(&id);
    match given {
        Some(t) if !constant_time_eq(t.as_bytes(), expected.as_bytes()) => {
            Err(SandboxError::BadToken)
        }
        None if token_required => Err(SandboxError::BadToken),
        _ => Ok((id, caller)),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why an in-sandbox request has no sandbox to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SandboxError {
    BadHeader,
    Unknown(String),
    BadToken,
}

impl SandboxError {
    /// As E2B's proxy and envd answer: 502 for a sandbox that is not there (the SDKs read it as
    /// "not running"), 401 for a wrong token, 400 for a bad header.
    pub(crate) fn response(&self) -> Response {
        match self {
            SandboxError::BadHeader => envd::plain_error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                "E2b-Sandbox-Id: a sandbox id is required".to_owned(),
            ),
            SandboxError::Unknown(id) => (
                StatusCode::BAD_GATEWAY,
                axum::Json(serde_json::json!({
                    "code": 502,
                    "message": format!("The sandbox {id} was not found"),
                    "sandboxId": id,
                })),
            )
                .into_response(),
            SandboxError::BadToken => envd::plain_error(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "X-Access-Token: not this sandbox's access token".to_owned(),
            ),
        }
    }
}

/// The error of E2B's control plane and code interpreter: `{"code": <status>, "message"}`
/// (a 429 with `Retry-After`; a 501 says it is not worth retrying).
#[derive(Debug, Clone)]
pub(crate) struct StatusError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) retry_after_secs: Option<u64>,
}

impl StatusError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> StatusError {
        StatusError {
            status,
            message: message.into(),
            retry_after_secs: None,
        }
    }
}

impl From<ApiError> for StatusError {
    fn from(e: ApiError) -> StatusError {
        StatusError {
            status: e.status,
            message: e.message,
            retry_after_secs: e.retry_after_secs,
        }
    }
}

impl IntoResponse for StatusError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "code": self.status.as_u16(), "message": self.message });
        let mut r = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::NOT_IMPLEMENTED {
            // E2B's SDKs retry only what says it may be retried.
            r.headers_mut().insert(
                "should-retry",
                axum::http::HeaderValue::from_static("false"),
            );
        }
        if let Some(secs) = self.retry_after_secs
            && let Ok(v) = axum::http::HeaderValue::from_str(&secs.to_string())
        {
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
        }
        r
    }
}

/// An engine error as the API maps it (status, code, message), for re-shaping.
pub(crate) fn api_error(e: warden_engine::EngineError) -> ApiError {
    ApiError::from(e)
}
