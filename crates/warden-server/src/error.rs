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
    fn from(e: EngineError) -> ApiError {
        use StatusCode as S;
        match &e {
            EngineError::Disabled => {
                ApiError::new(S::SERVICE_UNAVAILABLE, "disabled", e.to_string())
            }
            EngineError::UnknownProfile { .. } => {
                ApiError::new(S::BAD_REQUEST, "unknown_profile", e.to_string())
            }
            EngineError::UnknownLanguage { .. } => {
                ApiError::new(S::BAD_REQUEST, "unknown_language", e.to_string())
            }
            EngineError::InvalidRequest { .. } => {
                ApiError::new(S::BAD_REQUEST, "invalid_request", e.to_string())
            }
            EngineError::PolicyViolation(v) => {
                let mut err =
                    ApiError::new(S::UNPROCESSABLE_ENTITY, "policy_violation", e.to_string());
                err.violation = serde_json::to_value(v).ok();
                err
            }
            EngineError::BackendUnavailable { .. } => {
                ApiError::new(S::SERVICE_UNAVAILABLE, "backend_unavailable", e.to_string())
            }
            EngineError::Backend(BackendError::Refused(_)) => {
                ApiError::new(S::SERVICE_UNAVAILABLE, "refused", e.to_string())
            }
            EngineError::Backend(BackendError::Command(_)) => {
                ApiError::new(S::SERVICE_UNAVAILABLE, "runtime_unavailable", e.to_string())
            }
            EngineError::SandboxNotFound(_) => {
                ApiError::new(S::NOT_FOUND, "sandbox_not_found", e.to_string())
            }
            EngineError::NameTaken(_) => ApiError::new(S::CONFLICT, "name_taken", e.to_string()),
            EngineError::ContextNotFound(_) => {
                ApiError::new(S::NOT_FOUND, "context_not_found", e.to_string())
            }
            EngineError::TooManyContexts { .. } => {
                ApiError::new(S::TOO_MANY_REQUESTS, "too_many_contexts", e.to_string())
            }
            EngineError::TooManySandboxes { .. } => {
                ApiError::new(S::TOO_MANY_REQUESTS, "too_many_sandboxes", e.to_string())
            }
            EngineError::Backend(BackendError::NotFound(_)) => {
                ApiError::new(S::NOT_FOUND, "not_found", e.to_string())
            }
            EngineError::Backend(BackendError::BadPath(_)) => {
                ApiError::new(S::BAD_REQUEST, "bad_path", e.to_string())
            }
            EngineError::Backend(BackendError::Gone(_)) => {
                ApiError::new(S::GONE, "sandbox_gone", e.to_string())
            }
            // Not the caller's fault and not a bug of Warden's: the run may be tried again.
            // Its message says what was lost, never the host's details.
            EngineError::Backend(BackendError::Lost(_)) => {
                eprintln!("warden serve: {e}");
                ApiError::new(S::SERVICE_UNAVAILABLE, "sandbox_lost", e.to_string())
            }
            EngineError::Backend(BackendError::Setup(_) | BackendError::Internal(_)) => {
                eprintln!("warden serve: internal error: {e}");
                ApiError::new(
                    S::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; see the server's log",
                )
            }
        }
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
