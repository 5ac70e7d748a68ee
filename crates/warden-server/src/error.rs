//! The API's errors: every one is `{"error": {"code", "message"}}` with the status that fits.
//! Invariant: bad input is a 4xx naming what is wrong; internal failures are logged and answered
//! with a generic 500, never with their details.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use warden_engine::{BackendError, EngineError};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// A policy refusal, as data.
    pub violation: Option<serde_json::Value>,
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            violation: None,
            retry_after_secs: None,
        }
    }

    pub fn body(&self) -> serde_json::Value {
        let mut error = serde_json::json!({ "code": self.code, "message": self.message });
        if let Some(v) = &self.violation {
            error["violation"] = v.clone();
        }
        serde_json::json!({ "error": error })
    }
}

impl From<EngineError> for ApiError {
    /// The engine's code (one for every front-end) with the status that fits it.
    fn from(e: EngineError) -> ApiError {
        use StatusCode as S;
        let status = match &e {
            EngineError::Disabled
            | EngineError::BackendUnavailable { .. }
            | EngineError::ShuttingDown
            | EngineError::Backend(BackendError::Refused(_) | BackendError::Command(_)) => {
                S::SERVICE_UNAVAILABLE
            }
            EngineError::UnknownProfile { .. }
            | EngineError::UnknownLanguage { .. }
            | EngineError::InvalidRequest { .. }
            | EngineError::Backend(BackendError::BadPath(_)) => S::BAD_REQUEST,
            EngineError::PolicyViolation(_)
            | EngineError::Backend(BackendError::Limit(_) | BackendError::ImportRefused(_)) => {
                S::UNPROCESSABLE_ENTITY
            }
            EngineError::SandboxNotFound(_)
            | EngineError::ContextNotFound(_)
            | EngineError::SnapshotNotFound(_)
            | EngineError::Backend(BackendError::NotFound(_)) => S::NOT_FOUND,
            EngineError::NameTaken(_)
            | EngineError::SnapshotNameTaken(_)
            | EngineError::SandboxBusy(_)
            | EngineError::Backend(BackendError::Busy(_)) => S::CONFLICT,
            EngineError::SnapshotQuota { .. } => S::INSUFFICIENT_STORAGE,
            EngineError::TooManyContexts { .. }
            | EngineError::TooManySandboxes { .. }
            | EngineError::Busy { .. }
            | EngineError::KeyBusy { .. } => S::TOO_MANY_REQUESTS,
            // The host's capacity, not the caller's rate: the message names the settings.
            EngineError::HostContextsFull { .. } => S::SERVICE_UNAVAILABLE,
            EngineError::Backend(BackendError::Gone(_)) => S::GONE,
            // Not the caller's fault and not a bug of Warden's: the run may be tried again.
            // Its message says what was lost, never the host's details.
            EngineError::Backend(BackendError::Lost(_)) => {
                eprintln!("warden serve: {e}");
                S::SERVICE_UNAVAILABLE
            }
            // The host's disk under the data directory: which operation, and why (no host
            // path); nothing saved before is lost.
            EngineError::Storage(warden_engine::StoreError::Full { .. })
            | EngineError::Backend(BackendError::NoSpace(_)) => {
                eprintln!("warden serve: {e}");
                S::INSUFFICIENT_STORAGE
            }
            EngineError::Storage(_) => {
                eprintln!("warden serve: {e}");
                S::INTERNAL_SERVER_ERROR
            }
            EngineError::Internal(_)
            | EngineError::Backend(BackendError::Setup(_) | BackendError::Internal(_)) => {
                eprintln!("warden serve: internal error: {e}");
                return ApiError::new(
                    S::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; see the server's log",
                );
            }
        };
        let mut err = ApiError::new(status, e.code(), e.to_string());
        err.retry_after_secs = e.retry_after_secs();
        if let EngineError::PolicyViolation(v) = &e {
            err.violation = serde_json::to_value(v).ok();
        }
        err
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}
