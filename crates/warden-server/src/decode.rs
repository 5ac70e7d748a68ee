//! Request bodies and paths → checked requests, exactly as the handlers decode them: the same
//! extractor's decoding into the same request types, then the same checks, before anything
//! waits for a slot or reaches the engine's backends.
//!
//! It exists so that what a handler accepts can be exercised without a daemon: the fuzz target
//! `rest` (fuzz/fuzz_targets/rest.rs, through [`crate::fuzz::request`]) and its regression
//! corpus replayed by the ordinary tests. Invariant: every refusal is a 4xx [`ApiError`] naming
//! what is wrong; no input makes decoding panic, allocate without bound or answer 5xx.

use crate::compat::{self, CreateRequest, DestroyRequest, ExecuteInRequest, ExecuteRequest};
use crate::piston::{self, PistonRequest};
use crate::sandboxes::{self, CreateBody, CreateContextBody, ExecBody};
use crate::{ApiError, ExecuteBody, Object, json_rejection};
use axum::Json;
use serde::de::DeserializeOwned;
use warden_engine::{CreateContext, ExecRequest, SandboxExec};
use warden_types::WorkspacePath;

/// A route that takes input the handler decodes, one variant per request type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/execute`.
    Execute,
    /// `POST /v1/sandboxes`.
    CreateSandbox,
    /// `POST /v1/sandboxes/{id}/exec`.
    SandboxExec,
    /// `POST /v1/sandboxes/{id}/contexts` (the body is optional).
    CreateContext,
    /// `PUT|GET /v1/sandboxes/{id}/files/{path}`: the input is the path.
    FilePath,
    /// `POST /api/v1/sandbox/create`.
    CompatCreate,
    /// `POST /api/v1/execute`.
    CompatExecute,
    /// `POST /api/v1/execute/{id}`.
    CompatExecuteIn,
    /// `POST /api/v1/sandbox/destroy`.
    CompatDestroy,
    /// `POST /api/v2/execute` (Piston's errors: 400 with `{"message"}`).
    PistonExecute,
    /// `POST /v1/sandboxes/{id}/pause` (the body is optional).
    PauseSandbox,
}

impl Route {
    /// Every route, in a fixed order (the fuzz target picks one by index).
    pub const ALL: [Route; 11] = [
        Route::Execute,
        Route::CreateSandbox,
        Route::SandboxExec,
        Route::CreateContext,
        Route::FilePath,
        Route::CompatCreate,
        Route::CompatExecute,
        Route::CompatExecuteIn,
        Route::CompatDestroy,
        Route::PistonExecute,
        Route::PauseSandbox,
    ];
}

/// What a handler goes on with after decoding.
#[derive(Debug)]
pub enum Decoded {
    /// A one-shot execution (native or Piston), for the engine's `prepare`.
    Exec {
        request: ExecRequest,
        stream: bool,
    },
    /// A sandbox to create (native or the compatibility route's).
    CreateSandbox(CreateBody),
    /// An execution in a sandbox (native or the compatibility routes'), for `Sandboxes::start_exec`.
    SandboxExec {
        sandbox: Option<String>,
        request: SandboxExec,
        stream: bool,
    },
    CreateContext(CreateContext),
    File(WorkspacePath),
    DestroySandbox {
        sandbox: String,
    },
    /// A pause: whether it evicts the contexts.
    PauseSandbox {
        evict: bool,
    },
}

/// Decodes `input` (a JSON body; for [`Route::FilePath`], the path as axum hands it over) as
/// the route's handler does.
pub fn decode(route: Route, input: &[u8]) -> Result<Decoded, ApiError> {
    match route {
        Route::Execute => {
            let body: ExecuteBody = json(input)?;
            let stream = body.stream;
            Ok(Decoded::Exec {
                request: body.into_request()?,
                stream,
            })
        }
        Route::CreateSandbox => Ok(Decoded::CreateSandbox(json::<CreateBody>(input)?)),
        Route::SandboxExec => {
            let body: ExecBody = json(input)?;
            let stream = body.stream;
            Ok(Decoded::SandboxExec {
                sandbox: None,
                request: body.into_sandbox_exec()?,
                stream,
            })
        }
        Route::CreateContext => {
            let body = sandboxes::optional_body::<CreateContextBody>(input)?;
            Ok(Decoded::CreateContext(CreateContext {
                language: body.language,
            }))
        }
        Route::PauseSandbox => {
            let body = sandboxes::optional_body::<sandboxes::PauseBody>(input)?;
            Ok(Decoded::PauseSandbox { evict: body.evict })
        }
        Route::FilePath => {
            // axum's `Path` hands over text (percent-decoded); other bytes never get here.
            let path = std::str::from_utf8(input).map_err(|_| {
                ApiError::new(
                    axum::http::StatusCode::BAD_REQUEST,
                    "bad_path",
                    "path: not UTF-8",
                )
            })?;
            Ok(Decoded::File(sandboxes::workspace_path(path)?))
        }
        Route::CompatCreate => Ok(Decoded::CreateSandbox(
            json::<CreateRequest>(input)?.into_create_body(),
        )),
        Route::CompatExecute => {
            let req: ExecuteRequest = json(input)?;
            Ok(Decoded::SandboxExec {
                sandbox: Some(req.sandbox_id),
                request: compat::exec_body(req.code, req.timeout_seconds).into_sandbox_exec()?,
                stream: false,
            })
        }
        Route::CompatExecuteIn => {
            let req: ExecuteInRequest = json(input)?;
            Ok(Decoded::SandboxExec {
                sandbox: None,
                request: compat::exec_body(req.code, req.timeout_seconds).into_sandbox_exec()?,
                stream: false,
            })
        }
        Route::CompatDestroy => {
            let req: DestroyRequest = json(input)?;
            Ok(Decoded::DestroySandbox {
                sandbox: req.sandbox_id,
            })
        }
        Route::PistonExecute => {
            let Json(Object(body)) = Json::<Object<PistonRequest>>::from_bytes(input)
                .map_err(piston::rejection_error)?;
            Ok(Decoded::Exec {
                request: body.into_request()?,
                stream: false,
            })
        }
    }
}

/// A JSON body as the handlers' `ApiJson` extractor decodes it (after the content type).
fn json<T: DeserializeOwned>(input: &[u8]) -> Result<T, ApiError> {
    Json::<Object<T>>::from_bytes(input)
        .map(|Json(Object(v))| v)
        .map_err(json_rejection)
}
