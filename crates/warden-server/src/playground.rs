//! The playground: a notebook-like page at `/` and its assets at `/playground/{file}`, and
//! `GET /v1/profiles` (the profiles and languages a client may pick, which the page reads).
//!
//! Invariants: every asset is embedded in the binary at build time (`playground/`, with
//! CodeMirror vendored from Debian's `libjs-codemirror` under `playground/vendor/codemirror/`),
//! so the page works offline and loads nothing from elsewhere; the page is open (no key), but
//! it uses only the public REST API, whose calls carry the key the user gives it; a strict
//! Content-Security-Policy lets it run only its own scripts and reach only this origin.

use crate::{ApiError, ApiPath, AppState};
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The page.
const INDEX: &str = include_str!("../playground/index.html");

/// The assets the page loads, by file name: (name, content type, bytes).
pub const ASSETS: &[(&str, &str, &str)] = &[
    (
        "playground.js",
        "text/javascript; charset=utf-8",
        include_str!("../playground/playground.js"),
    ),
    (
        "playground.css",
        "text/css; charset=utf-8",
        include_str!("../playground/playground.css"),
    ),
    (
        "codemirror.js",
        "text/javascript; charset=utf-8",
        include_str!("../playground/vendor/codemirror/codemirror.js"),
    ),
    (
        "codemirror.css",
        "text/css; charset=utf-8",
        include_str!("../playground/vendor/codemirror/codemirror.css"),
    ),
    (
        "mode-python.js",
        "text/javascript; charset=utf-8",
        include_str!("../playground/vendor/codemirror/mode/python.js"),
    ),
    (
        "mode-javascript.js",
        "text/javascript; charset=utf-8",
        include_str!("../playground/vendor/codemirror/mode/javascript.js"),
    ),
    (
        "mode-shell.js",
        "text/javascript; charset=utf-8",
        include_str!("../playground/vendor/codemirror/mode/shell.js"),
    ),
    (
        "matchbrackets.js",
        "text/javascript; charset=utf-8",
        include_str!("../playground/vendor/codemirror/addon/matchbrackets.js"),
    ),
];

/// Only this origin's scripts and styles; images also from `data:` (charts) and `blob:`;
/// requests to this origin only; never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// `GET /`: the playground page.
pub async fn page(State(_): State<AppState>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        INDEX,
    )
        .into_response()
}

/// `GET /playground/{file}`: one of [`ASSETS`].
pub async fn asset(State(_): State<AppState>, ApiPath(file): ApiPath<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            *body,
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no playground asset {file:?}"),
        )
        .into_response(),
    }
}

/// `GET /v1/profiles`: what a request may name as `profile` and `language`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ProfileList {
    /// The profile used when a request names none.
    pub default_profile: String,
    pub profiles: Vec<ProfileSummary>,
    /// The languages (runtimes) configured, by name.
    pub languages: Vec<String>,
}

/// A profile's name, its default language and its main limits.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ProfileSummary {
    pub name: String,
    /// The language used when a request names none.
    pub language: String,
    pub timeout_seconds: f64,
    pub memory_mb: u64,
    pub network_enabled: bool,
    /// The policies run before each execution.
    pub policies: Vec<String>,
}

pub async fn profiles(State(state): State<AppState>) -> Json<ProfileList> {
    let sandbox = &state.engine.settings().sandbox;
    Json(ProfileList {
        default_profile: sandbox.default_profile.clone(),
        profiles: sandbox
            .profiles
            .iter()
            .map(|(name, p)| ProfileSummary {
                name: name.clone(),
                language: p.runtime.language.clone(),
                timeout_seconds: p.timeout_seconds,
                memory_mb: p.max_memory_mb,
                network_enabled: p.network_enabled,
                policies: p.enabled_policies.clone(),
            })
            .collect(),
        languages: sandbox.runtimes.keys().cloned().collect(),
    })
}
