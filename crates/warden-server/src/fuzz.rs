//! The REST request decoding's fuzz entry point: arbitrary bytes → a route and its input →
//! [`crate::decode::decode`] (the handlers' own decoding and checks) → for a one-shot
//! execution, the engine's `prepare` (profile, language, limits and policies) over the
//! built-in settings, as the handler runs it next.
//!
//! Called by the cargo-fuzz target `rest` (fuzz/fuzz_targets/rest.rs) and, over the checked-in
//! regression corpus (fuzz/corpus/rest/), by this crate's ordinary tests (tests/fuzz_corpus.rs).
//! An input's first byte picks the route (`Route::ALL[byte % 10]`; in the checked-in seeds the
//! letters `d` to `m`, in [`Route::ALL`]'s order), the rest is the body.
//!
//! Invariants: only a JSON object is a body; a refusal is a 4xx with a code and a message, and its JSON body is
//! `{"error": {"code", "message"}}`; an accepted execution's timeout is within [0.001, 86400] s,
//! whichever route it came by; a prepared plan's limits are the request's when it set them.

use crate::ApiError;
use crate::decode::{Decoded, Route, decode};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use warden_config::Settings;
use warden_engine::Engine;

/// The longest timeout any route accepts (the API's documented range).
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Decodes one fuzz input and checks the invariants above.
pub fn request(data: &[u8]) {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    let route = Route::ALL[usize::from(selector) % Route::ALL.len()];
    match decode(route, input) {
        Ok(decoded) => {
            let body = input.trim_ascii_start();
            assert!(
                route == Route::FilePath
                    || (route == Route::CreateContext && body.is_empty())
                    || body.starts_with(b"{"),
                "{route:?} accepted a body that is not a JSON object"
            );
            check_decoded(route, decoded)
        }
        Err(e) => check_refusal(route, &e),
    }
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| Engine::new(Arc::new(Settings::builtin())))
}

fn check_decoded(route: Route, decoded: Decoded) {
    match decoded {
        Decoded::Exec { request, .. } => {
            if let Some(t) = request.timeout {
                assert!(
                    !t.is_zero() && t <= MAX_TIMEOUT,
                    "{route:?} accepted a timeout of {t:?}"
                );
            }
            match engine().prepare(&request) {
                Ok((_, plan)) => {
                    if let Some(t) = request.timeout {
                        assert_eq!(plan.limits.timeout, t, "{route:?}: the timeout was lost");
                    }
                    if let Some(m) = request.memory_mb {
                        assert_eq!(plan.limits.memory_mb, m, "{route:?}: the memory was lost");
                    }
                }
                Err(e) => check_refusal(route, &ApiError::from(e)),
            }
        }
        Decoded::SandboxExec { request, .. } => {
            if let Some(t) = request.timeout {
                assert!(
                    !t.is_zero() && t <= MAX_TIMEOUT,
                    "{route:?} accepted a timeout of {t:?}"
                );
            }
            check_env_and_cwd(&request.env, request.cwd.as_deref());
        }
        Decoded::File(path) => {
            let path = path.as_str();
            assert!(
                !path.starts_with('/') && !path.split('/').any(|c| matches!(c, "" | "." | "..")),
                "{route:?} accepted the path {path:?}"
            );
        }
        Decoded::CreateSandbox(_)
        | Decoded::CreateContext(_)
        | Decoded::DestroySandbox { .. }
        | Decoded::PauseSandbox { .. } => {}
    }
}

/// The engine's checks of a run's own `env` and `cwd` (they run after decoding, in
/// `Sandboxes::prepare_in`): an accepted directory is clean and inside the writable folders,
/// accepted variables are plain names, never Warden's.
pub(crate) fn check_env_and_cwd(
    env: &std::collections::BTreeMap<String, String>,
    cwd: Option<&str>,
) {
    use warden_engine::exec_env::{check_cwd, check_env};
    if let Some(cwd) = cwd
        && let Ok(clean) = check_cwd(cwd, Some("/home/user"))
    {
        assert!(
            ["/workspace", "/tmp", "/home/user"]
                .iter()
                .any(|r| clean == *r || clean.starts_with(&format!("{r}/"))),
            "cwd {cwd:?} accepted as {clean:?}"
        );
        assert!(
            !clean
                .split('/')
                .skip(1)
                .any(|c| matches!(c, "" | "." | "..")),
            "cwd {cwd:?} accepted as {clean:?}"
        );
    }
    if check_env(env, "env", true).is_ok() {
        for (k, v) in env {
            assert!(
                !k.is_empty() && !k.starts_with("WARDEN_") && !k.contains('='),
                "{k:?}"
            );
            assert!(!v.contains('\0'), "{k}: NUL");
        }
    }
}

fn check_refusal(route: Route, e: &ApiError) {
    assert!(
        e.status.is_client_error(),
        "{route:?} answered {} ({}: {})",
        e.status,
        e.code,
        e.message
    );
    assert!(
        !e.code.is_empty() && !e.message.is_empty(),
        "{route:?}: {e:?}"
    );
    let body = e.body();
    assert_eq!(body["error"]["code"], e.code, "{route:?}: {body}");
    let response = if route == Route::PistonExecute {
        crate::piston::piston_error(e.clone())
    } else {
        axum::response::IntoResponse::into_response(e.clone())
    };
    assert!(response.status().is_client_error(), "{route:?}: {e:?}");
}

/// The E2B drop-in's decoders over arbitrary bytes (fuzz target `e2b`): the first byte picks
/// one (`0`: Connect envelopes, `1`: a multipart body, `2`: the list's percent-decoding, `3`:
/// a command's `Start` request with the engine's checks of its `envs` and `cwd`), the rest is
/// its input.
///
/// Invariants: none panics; envelopes account for every byte of the body (5 per header plus
/// each message) and a compressed one is refused; multipart parts hold only bytes of the body.
pub fn e2b(data: &[u8]) {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    match selector % 4 {
        0 => {
            if let Ok(envelopes) = crate::e2b::decode_envelopes(input) {
                let total: usize = envelopes.iter().map(|e| 5 + e.message.len()).sum();
                assert_eq!(total, input.len(), "envelopes do not account for the body");
                assert!(
                    envelopes.iter().all(|e| e.flags & 1 == 0),
                    "a compressed envelope"
                );
            }
        }
        1 => {
            if let Ok(parts) =
                crate::e2b::multipart::parse("multipart/form-data; boundary=b", input)
            {
                let sum: usize = parts.iter().map(|p| p.data.len()).sum();
                assert!(sum <= input.len(), "parts hold more than the body");
            }
        }
        2 => {
            let decoded = crate::e2b::unquote(&String::from_utf8_lossy(input));
            assert!(decoded.len() <= 3 * input.len() + 3);
        }
        _ => {
            // A command's start request, then the engine's checks of its envs and cwd.
            if let Ok(serde_json::Value::Object(request)) = serde_json::from_slice(input)
                && let Ok(command) =
                    crate::e2b::envd::start_command(&serde_json::Value::Object(request))
            {
                assert!(!command.argv.is_empty() && !command.argv[0].is_empty());
                assert!(command.cwd.starts_with('/'), "{:?}", command.cwd);
                check_env_and_cwd(&command.envs, Some(&command.cwd));
            }
        }
    }
}
