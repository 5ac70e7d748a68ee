//! Connect RPC with the JSON codec, as envd speaks it: unary calls are one JSON message each
//! way; server streams are 5-byte envelopes (a flags byte, a big-endian u32 length, the
//! message), the last one flagged end-of-stream with `{}` or `{"error": {code, message}}`.
//!
//! Invariants: decoding never trusts a length past the bytes at hand and never allocates more
//! than the body holds; an end-of-stream envelope is always the last thing sent.

use axum::http::StatusCode;
use bytes::{BufMut, Bytes, BytesMut};

/// Flag of the last envelope of a stream.
pub const END_STREAM: u8 = 0b10;
/// Flag of a compressed message (never used here: compression is refused).
pub const COMPRESSED: u8 = 0b01;

/// One envelope of a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub flags: u8,
    pub message: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("the envelope's header is cut short ({0} bytes left, 5 needed)")]
    ShortHeader(usize),
    #[error("the envelope says {said} bytes, {left} are left")]
    ShortMessage { said: u32, left: usize },
    #[error("compressed messages are not accepted (no compression was negotiated)")]
    Compressed,
    #[error("unknown envelope flags {0:#04x}")]
    UnknownFlags(u8),
}

/// Splits a body into envelopes.
pub fn decode_envelopes(body: &[u8]) -> Result<Vec<Envelope>, EnvelopeError> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        if rest.len() < 5 {
            return Err(EnvelopeError::ShortHeader(rest.len()));
        }
        let flags = rest[0];
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]);
        if flags & COMPRESSED != 0 {
            return Err(EnvelopeError::Compressed);
        }
        if flags & !(COMPRESSED | END_STREAM) != 0 {
            return Err(EnvelopeError::UnknownFlags(flags));
        }
        let left = rest.len() - 5;
        if len as usize > left {
            return Err(EnvelopeError::ShortMessage { said: len, left });
        }
        out.push(Envelope {
            flags,
            message: rest[5..5 + len as usize].to_vec(),
        });
        rest = &rest[5 + len as usize..];
    }
    Ok(out)
}

/// One envelope: a message, or (with [`END_STREAM`]) the stream's end.
pub fn envelope(flags: u8, message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.put_u8(flags);
    b.put_u32(message.len() as u32);
    b.put_slice(message);
    b.freeze()
}

/// A stream's message.
pub fn message(value: &serde_json::Value) -> Bytes {
    envelope(0, &serde_json::to_vec(value).unwrap_or_default())
}

/// A stream's end: success, or the error.
pub fn end(error: Option<&RpcError>) -> Bytes {
    let body = match error {
        None => serde_json::json!({}),
        Some(e) => serde_json::json!({ "error": { "code": e.code, "message": e.message } }),
    };
    envelope(END_STREAM, &serde_json::to_vec(&body).unwrap_or_default())
}

/// A Connect error: its code (`not_found`, …) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: &'static str,
    pub message: String,
}

impl RpcError {
    pub fn new(code: &'static str, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// The HTTP status of a unary error (the Connect protocol's table).
    pub fn status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "canceled" => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A Warden API error (an engine error's status and message) as a Connect error.
    pub fn from_api(e: &crate::ApiError) -> RpcError {
        let code = match e.status.as_u16() {
            400 | 422 => match e.code {
                "policy_violation" | "limit_exceeded" => "failed_precondition",
                _ => "invalid_argument",
            },
            401 => "unauthenticated",
            403 => "permission_denied",
            404 | 410 => "not_found",
            408 => "deadline_exceeded",
            // A paused-sandbox race or a busy sandbox is worth trying again; a name is taken.
            409 if e.code == "sandbox_busy" => "unavailable",
            409 => "already_exists",
            413 | 429 => "resource_exhausted",
            503 => "unavailable",
            _ => "internal",
        };
        RpcError::new(code, e.message.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_cut_ones_are_refused() {
        let mut body = message(&serde_json::json!({"a": 1})).to_vec();
        body.extend_from_slice(&end(None));
        let got = decode_envelopes(&body).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].flags, 0);
        assert_eq!(got[0].message, br#"{"a":1}"#);
        assert_eq!(got[1].flags, END_STREAM);
        assert_eq!(got[1].message, b"{}");
        assert_eq!(
            decode_envelopes(&body[..3]),
            Err(EnvelopeError::ShortHeader(3))
        );
        assert_eq!(
            decode_envelopes(&[0, 0xff, 0xff, 0xff, 0xff, b'{']),
            Err(EnvelopeError::ShortMessage {
                said: u32::MAX,
                left: 1
            })
        );
        assert_eq!(
            decode_envelopes(&[1, 0, 0, 0, 0]),
            Err(EnvelopeError::Compressed)
        );
        assert_eq!(
            decode_envelopes(&[0x80, 0, 0, 0, 0]),
            Err(EnvelopeError::UnknownFlags(0x80))
        );
        assert_eq!(decode_envelopes(b""), Ok(vec![]));
    }

    #[test]
    fn an_error_end_carries_the_code_and_message() {
        let e = end(Some(&RpcError::new("not_found", "no such file")));
        assert_eq!(e[0], END_STREAM);
        let v: serde_json::Value = serde_json::from_slice(&e[5..]).unwrap();
        assert_eq!(v["error"]["code"], "not_found");
        assert_eq!(v["error"]["message"], "no such file");
    }

    #[test]
    fn engine_statuses_map_to_connect_codes() {
        use axum::http::StatusCode as S;
        let e = |status, code| crate::ApiError::new(status, code, "m");
        for (status, code, want) in [
            (S::NOT_FOUND, "sandbox_not_found", "not_found"),
            (S::BAD_REQUEST, "bad_path", "invalid_argument"),
            (
                S::UNPROCESSABLE_ENTITY,
                "policy_violation",
                "failed_precondition",
            ),
            (
                S::TOO_MANY_REQUESTS,
                "too_many_requests",
                "resource_exhausted",
            ),
            (S::GONE, "sandbox_gone", "not_found"),
            (S::SERVICE_UNAVAILABLE, "refused", "unavailable"),
            (S::INTERNAL_SERVER_ERROR, "internal", "internal"),
            (S::CONFLICT, "sandbox_busy", "unavailable"),
        ] {
            assert_eq!(RpcError::from_api(&e(status, code)).code, want, "{code}");
        }
        assert_eq!(RpcError::new("not_found", "").status(), S::NOT_FOUND);
        assert_eq!(
            RpcError::new("unimplemented", "").status(),
            S::NOT_IMPLEMENTED
        );
    }
}
