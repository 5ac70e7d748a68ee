//! API keys: `Authorization: Bearer <key>`, checked against the SHA-256 digests in
//! `[[server.api_keys]]`.
//!
//! Invariants: with keys configured, every route but health, metrics, the API description and
//! the playground's page and assets answers 401 without a valid key; the key's name becomes the owner of what it
//! creates, and a key sees only its own sandboxes; the keys themselves are never stored, only
//! their digests, and digests are compared in constant time.

use crate::{ApiError, AppState};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Routes open without a key: health, metrics, the API's description and the playground page
/// (whose own API calls carry the key the user gives it).
const OPEN: &[&str] = &[
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/",
];

/// Open path prefixes: the playground's assets.
const OPEN_PREFIXES: &[&str] = &["/playground/"];

fn is_open(path: &str) -> bool {
    OPEN.contains(&path) || OPEN_PREFIXES.iter().any(|p| path.starts_with(p))
}

#[derive(Debug)]
pub struct KeyEntry {
    pub name: String,
    digest: [u8; 32],
    /// Reads every owner's audit events.
    admin: bool,
    /// The engine's caller for this key: its name as the owner, its own limits (its execution
    /// slots are shared by every request made with the key).
    caller: warden_engine::Caller,
}

/// The configured keys (none: no authentication, loopback only).
#[derive(Debug, Clone, Default)]
pub struct Keys(Arc<Vec<Arc<KeyEntry>>>);

impl Keys {
    pub fn from_settings(keys: &[warden_config::ApiKey]) -> Keys {
        Keys(Arc::new(
            keys.iter()
                .map(|k| {
                    let mut digest = [0u8; 32];
                    for (i, byte) in digest.iter_mut().enumerate() {
                        *byte = u8::from_str_radix(&k.key_sha256[2 * i..2 * i + 2], 16)
                            .expect("validated as hex by the settings");
                    }
                    Arc::new(KeyEntry {
                        name: k.name.clone(),
                        digest,
                        admin: k.admin,
                        caller: warden_engine::Caller {
                            owner: Some(k.name.clone()),
                            max_sandboxes: k.max_sandboxes,
                            slots: k.max_concurrent.map(warden_engine::KeySlots::new),
                        },
                    })
                })
                .collect(),
        ))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn find(&self, presented: &str) -> Option<Arc<KeyEntry>> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Look at every key, whatever matches, and compare without early exit.
        let mut found = None;
        for key in self.0.iter() {
            let diff = key
                .digest
                .iter()
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 {
                found = Some(key.clone());
            }
        }
        found
    }
}

/// Who is calling, as a request extension: `None` when no keys are configured.
#[derive(Debug, Clone, Default)]
pub struct Caller(pub Option<Arc<KeyEntry>>);

impl Caller {
    pub fn owner(&self) -> Option<String> {
        self.0.as_ref().map(|k| k.name.clone())
    }

    /// May read every owner's audit events: an admin key, or anyone when there are no keys
    /// (the daemon is on loopback then, and everything is ownerless).
    pub fn is_admin(&self) -> bool {
        self.0.as_ref().is_none_or(|k| k.admin)
    }

    /// The engine's view of this caller (the default one without keys).
    pub fn engine(&self) -> warden_engine::Caller {
        self.0
            .as_ref()
            .map(|k| k.caller.clone())
            .unwrap_or_default()
    }
}

pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if state.keys.is_empty() || is_open(req.uri().path()) {
        req.extensions_mut().insert(Caller(None));
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(key) = presented.and_then(|p| state.keys.find(p)) else {
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid API key is required: Authorization: Bearer <key>",
        )
        .into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return response;
    };
    req.extensions_mut().insert(Caller(Some(key)));
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_by_digest_only() {
        let digest = format!("{:x}", Sha256::digest(b"s3cret"));
        let keys = Keys::from_settings(&[warden_config::ApiKey {
            name: "a".into(),
            key_sha256: digest,
            max_sandboxes: None,
            max_concurrent: Some(2),
            admin: false,
        }]);
        assert_eq!(keys.find("s3cret").unwrap().name, "a");
        assert!(keys.find("s3cret ").is_none());
        assert!(keys.find("").is_none());
    }
}
