//! The SDK's one error type.
//!
//! Invariants: an answer of the daemon with an error status is always [`Error::Api`] with the
//! daemon's own `code` and `message` (or [`Error::UnexpectedResponse`] when the body is not the
//! API's error shape, e.g. a proxy's HTML page) — never a bare HTTP error; failures below HTTP
//! are told apart (cannot connect, timed out, broken mid-way); the transport library's error
//! types are only ever a `source`, never part of the API.

use std::time::Duration;
use warden_types::InvalidWorkspacePath;

/// A boxed underlying cause (the HTTP library's error), kept for `source()` and logs.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong talking to a Warden daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The base URL given to the client is not an `http://` (or, with the `tls` feature,
    /// `https://`) URL without query or fragment.
    #[error("invalid daemon url {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },

    /// A file path that cannot name a file in the workspace; refused before any request.
    #[error(transparent)]
    InvalidPath(#[from] InvalidWorkspacePath),

    /// The daemon refused or failed the request: its status, `code` and `message`
    /// (`sandbox_not_found`, `policy_violation`, `unknown_profile`, `too_many_requests`, …).
    #[error("{code} (http {status}): {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
        /// For `policy_violation`: which policy refused what, and where.
        violation: Option<Box<Violation>>,
        /// For 429 and 503: how long the daemon asks to wait before trying again.
        retry_after: Option<Duration>,
    },

    /// The daemon answered with an error status but not with the API's error shape (for
    /// instance a reverse proxy's page); the start of the body is kept.
    #[error("{operation}: unexpected http {status} answer: {body}")]
    UnexpectedResponse {
        operation: &'static str,
        status: u16,
        body: String,
    },

    /// No connection could be made (refused, no route, unknown host).
    #[error("cannot connect to the warden daemon at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: Cause,
    },

    /// The request did not finish within the client's timeout (see
    /// [`ClientBuilder::timeout`](crate::ClientBuilder::timeout)).
    #[error("{operation} timed out{}", after.map(|d| format!(" after {d:?}")).unwrap_or_default())]
    Timeout {
        operation: &'static str,
        after: Option<Duration>,
    },

    /// The connection broke or the HTTP exchange failed after it was made.
    #[error("{operation}: {source}")]
    Transport {
        operation: &'static str,
        #[source]
        source: Cause,
    },

    /// A successful answer whose body is not what the API promises (bad JSON, a missing field,
    /// an event stream that ends without its `end` event).
    #[error("{operation}: cannot decode the daemon's answer: {detail}")]
    Decode {
        operation: &'static str,
        detail: String,
    },

    /// A streamed execution failed after its stream began: the daemon's `error` event
    /// (`name` is the API's error code, `value` its message).
    #[error("execution failed: {code}: {message}")]
    Execution { code: String, message: String },

    /// Arguments given to [`CodeInterpreterTool`](crate::CodeInterpreterTool) that do not match
    /// its schema.
    #[error("invalid tool arguments: {0}")]
    InvalidToolArguments(String),
}

impl Error {
    /// The daemon's error code, when the daemon answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } | Error::Execution { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, when the daemon answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::UnexpectedResponse { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the request (or its code) was at fault, as opposed to the daemon or the
    /// network: a 4xx answer other than 408/429, or arguments refused before sending.
    /// An agent can show these to the LLM so it can correct its code.
    pub fn is_caller_error(&self) -> bool {
        match self {
            Error::Api { status, .. } => {
                (400..500).contains(status) && ![408, 429].contains(status)
            }
            Error::InvalidPath(_) | Error::InvalidToolArguments(_) => true,
            _ => false,
        }
    }
}

/// A policy's refusal, as the daemon reports it in a `policy_violation` error:
/// `{"policy": "forbidden_imports", "kind": "forbidden_import", "module": "os", "message",
/// "line", "column"}`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Violation {
    /// The policy that refused, as named in the profile's `enabled_policies`.
    pub policy: String,
    /// What kind of refusal (`forbidden_import`, `dynamic_import`, `timeout_above_quota`, …).
    #[serde(default)]
    pub kind: Option<String>,
    pub message: String,
    /// 1-based line in the code, when the refusal is about a place in it.
    #[serde(default)]
    pub line: Option<u32>,
    /// 1-based column, in characters.
    #[serde(default)]
    pub column: Option<u32>,
    /// The kind's own fields (`module`, `requested`, `maximum`, …).
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl Violation {
    /// The refused module, for a `forbidden_imports` refusal.
    pub fn module(&self) -> Option<&str> {
        self.details.get("module").and_then(|m| m.as_str())
    }
}

/// Turns an error status and its body into [`Error::Api`], or [`Error::UnexpectedResponse`]
/// when the body is not `{"error": {"code", "message"}}`.
pub(crate) fn from_error_body(
    operation: &'static str,
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Error {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: ApiErrorBody,
    }
    #[derive(serde::Deserialize)]
    struct ApiErrorBody {
        code: String,
        message: String,
        #[serde(default)]
        violation: Option<serde_json::Value>,
    }
    match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope { error }) => Error::Api {
            status,
            code: error.code,
            message: error.message,
            // A violation of an unknown shape is dropped rather than hiding the error itself.
            violation: error.violation.and_then(|v| serde_json::from_value(v).ok()),
            retry_after,
        },
        Err(_) => Error::UnexpectedResponse {
            operation,
            status,
            body: snippet(body),
        },
    }
}

/// The start of a body, as text, for an error message.
pub(crate) fn snippet(body: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_the_daemons_code_message_and_violation() {
        let body = br#"{"error":{"code":"policy_violation","message":"policy forbidden_imports refused the request: module os","violation":{"policy":"forbidden_imports","kind":"forbidden_import","module":"os","message":"module os","line":1,"column":8}}}"#;
        let e = from_error_body("execute", 422, None, body);
        let Error::Api {
            status,
            code,
            message,
            violation: Some(v),
            retry_after: None,
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!((*status, code.as_str()), (422, "policy_violation"));
        assert!(message.contains("module os"));
        assert_eq!(v.policy, "forbidden_imports");
        assert_eq!(v.module(), Some("os"));
        assert_eq!((v.line, v.column), (Some(1), Some(8)));
        assert!(e.is_caller_error());
        assert_eq!(e.code(), Some("policy_violation"));
    }

    #[test]
    fn other_bodies_are_unexpected_responses_with_a_snippet() {
        let html = format!("<html>{}</html>", "x".repeat(1000));
        let e = from_error_body("execute", 502, None, html.as_bytes());
        match &e {
            Error::UnexpectedResponse {
                status: 502, body, ..
            } => {
                assert!(
                    body.starts_with("<html>xxx") && body.ends_with('…'),
                    "{body}"
                );
                assert!(body.chars().count() <= 201);
            }
            other => panic!("{other:?}"),
        }
        assert!(!e.is_caller_error());
        assert_eq!(e.status(), Some(502));
    }

    #[test]
    fn too_many_requests_is_not_the_callers_fault() {
        let body = br#"{"error":{"code":"too_many_requests","message":"busy"}}"#;
        let e = from_error_body("execute", 429, Some(Duration::from_secs(1)), body);
        assert!(!e.is_caller_error());
        assert!(matches!(e, Error::Api { retry_after: Some(d), .. } if d.as_secs() == 1));
    }
}
