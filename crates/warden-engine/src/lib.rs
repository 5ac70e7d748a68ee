//! The Warden service: every front-end (CLI, REST, MCP, SDK) turns its input into an
//! [`ExecRequest`] and calls [`Engine::execute`], which resolves the profile and language,
//! runs the profile's policies, asks the profile's backend to check and then run the plan.
//!
//! Invariants: front-ends never talk to a backend directly; a request can lower a profile's
//! limits freely, and raise them only as far as `resource_quota` allows (without that policy,
//! never above the profile's own limits); a profile whose backend is not configured is
//! refused, never run on another backend.

pub mod backend;
pub mod contexts;
pub mod pool;
pub mod sandboxes;
pub mod shape;

pub use backend::{
    Backend, BackendError, BackendSandbox, CellPlan, ContextSpec, EventSender, ExecPlan,
    NO_CONTEXTS, SandboxSpec, Unsupported,
};
pub use contexts::{ContextInfo, CreateContext, DEFAULT_CONTEXT};
pub use pool::PoolStatus;
pub use sandboxes::{CreateSandbox, PreparedExec, SandboxExec, SandboxInfo, Sandboxes};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use warden_config::{BackendKind, Profile, Settings};
use warden_policy::{PolicyInput, Requested, Violation};
use warden_types::{ExecResult, Language};

/// What a front-end asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecRequest {
    pub code: String,
    /// Language name or alias; default: the profile's runtime language.
    pub language: Option<String>,
    /// Profile name; default: `[sandbox].default_profile`.
    pub profile: Option<String>,
    /// Overrides of the profile's limits, checked by `resource_quota`.
    pub timeout: Option<Duration>,
    pub memory_mb: Option<u64>,
    pub stdin: Vec<u8>,
    /// Arguments for the program (after the code file).
    pub args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error("the sandbox is disabled in the settings ([sandbox].enabled = false)")]
    Disabled,
    #[error("unknown profile {name:?} (known: {known})")]
    UnknownProfile { name: String, known: String },
    #[error("unknown language {name:?} (known: {known})")]
    UnknownLanguage { name: String, known: String },
    #[error("invalid request: {field}: {message}")]
    InvalidRequest {
        field: &'static str,
        message: String,
    },
    #[error("{0}")]
    PolicyViolation(Violation),
    #[error("profile {profile:?} uses the {backend} backend, which is not available: {why}")]
    BackendUnavailable {
        profile: String,
        backend: &'static str,
        why: String,
    },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("no sandbox {0:?}")]
    SandboxNotFound(String),
    #[error("a live sandbox is already named {0:?}")]
    NameTaken(String),
    #[error("{max} sandboxes are live, the most allowed; destroy one first")]
    TooManySandboxes { max: usize },
    #[error("no context {0:?} in this sandbox")]
    ContextNotFound(String),
    #[error("{max} contexts are live in this sandbox, the most allowed; destroy one first")]
    TooManyContexts { max: usize },
}

/// The service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Engine {
    settings: Arc<Settings>,
    backends: HashMap<BackendKind, Arc<dyn Backend>>,
    unavailable: HashMap<BackendKind, String>,
}

impl Engine {
    pub fn new(settings: Arc<Settings>) -> Engine {
        Engine {
            settings,
            backends: HashMap::new(),
            unavailable: HashMap::new(),
        }
    }

    pub fn with_backend(mut self, kind: BackendKind, backend: Arc<dyn Backend>) -> Engine {
        self.backends.insert(kind, backend);
        self
    }

    /// Records why a backend could not be set up, for the error a profile that uses it gets.
    pub fn with_unavailable_backend(mut self, kind: BackendKind, why: String) -> Engine {
        self.unavailable.insert(kind, why);
        self
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Resolves a request into the profile name, the profile and the backend-neutral plan,
    /// running the profile's policies. No side effects.
    pub fn prepare(&self, req: &ExecRequest) -> Result<(String, ExecPlan), EngineError> {
        let s = &self.settings;
        if !s.sandbox.enabled {
            return Err(EngineError::Disabled);
        }
        let profile_name = req
            .profile
            .clone()
            .unwrap_or_else(|| s.sandbox.default_profile.clone());
        let profile = s
            .profile(&profile_name)
            .ok_or_else(|| EngineError::UnknownProfile {
                name: profile_name.clone(),
                known: s
                    .sandbox
                    .profiles
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let wanted = req
            .language
            .clone()
            .unwrap_or_else(|| profile.runtime.language.clone());
        let (language, runtime) =
            s.runtime(&wanted)
                .ok_or_else(|| EngineError::UnknownLanguage {
                    name: wanted.clone(),
                    known: s
                        .sandbox
                        .runtimes
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        let mut limits = profile.limits();
        if let Some(t) = req.timeout {
            if t.is_zero() {
                return Err(EngineError::InvalidRequest {
                    field: "timeout",
                    message: "must be greater than zero".into(),
                });
            }
            limits.timeout = t;
        }
        if let Some(m) = req.memory_mb {
            if m == 0 {
                return Err(EngineError::InvalidRequest {
                    field: "memory_mb",
                    message: "must be at least 1".into(),
                });
            }
            limits.memory_mb = m;
        }
        if req.args.iter().any(|a| a.contains('\0')) {
            // Each argument becomes a C string of the program's argv.
            return Err(EngineError::InvalidRequest {
                field: "args",
                message: "must not contain NUL bytes".into(),
            });
        }
        check_policies(profile, &language, &req.code, &limits)?;
        let profile_language = s.runtime(&profile.runtime.language).map(|(l, _)| l);
        let is_profile_language = profile_language.as_ref() == Some(&language);
        let command = match (&profile.runtime.command, is_profile_language) {
            (Some(cmd), true) => cmd.clone(),
            _ => runtime.command.clone(),
        };
        let image = match (&profile.runtime.image, is_profile_language) {
            (Some(image), true) => Some(image.clone()),
            _ => runtime.image.clone(),
        };
        Ok((
            profile_name.clone(),
            ExecPlan {
                profile: profile_name,
                language,
                command,
                file_name: runtime.file_name.clone(),
                code: req.code.clone(),
                args: req.args.clone(),
                stdin: req.stdin.clone(),
                limits,
                network_enabled: profile.network_enabled,
                egress: profile.egress.clone(),
                image,
                container_runtime: profile.container_runtime.clone(),
            },
        ))
    }

    pub(crate) fn backend_for(&self, profile_name: &str) -> Result<&Arc<dyn Backend>, EngineError> {
        let profile = self
            .settings
            .profile(profile_name)
            .expect("prepare resolved the profile");
        let kind = self.settings.backend_of(profile);
        self.backends
            .get(&kind)
            .ok_or_else(|| EngineError::BackendUnavailable {
                profile: profile_name.to_owned(),
                backend: kind.as_str(),
                why: self
                    .unavailable
                    .get(&kind)
                    .cloned()
                    .unwrap_or_else(|| "not configured in this process".into()),
            })
    }

    /// Asks every configured backend to remove what an earlier process left (after a crash).
    pub async fn remove_orphans(&self) -> Vec<(&'static str, Result<usize, BackendError>)> {
        let mut out = Vec::new();
        for backend in self.backends.values() {
            out.push((backend.name(), backend.remove_orphans(&[]).await));
        }
        out
    }

    /// Runs one request to the end.
    pub async fn execute(
        &self,
        req: ExecRequest,
        events: Option<EventSender>,
    ) -> Result<ExecResult, EngineError> {
        let (profile, plan) = self.prepare(&req)?;
        self.run_prepared(&profile, plan, events).await
    }

    /// Checks that a prepared plan's backend can run it here, without running it.
    pub fn check_prepared(&self, profile: &str, plan: &ExecPlan) -> Result<(), EngineError> {
        Ok(self.backend_for(profile)?.check(plan)?)
    }

    /// Runs a plan from [`Engine::prepare`] (a front-end that must answer errors before it
    /// starts streaming prepares first, off the async threads: parsing is CPU-bound).
    pub async fn run_prepared(
        &self,
        profile: &str,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, EngineError> {
        let backend = self.backend_for(profile)?;
        backend.check(&plan)?;
        Ok(backend.exec(plan, events).await?)
    }
}

/// Runs the profile's policies. Without `resource_quota`, a request may still not go above the
/// profile's own limits: the quota only decides how far above is allowed.
fn check_policies(
    profile: &Profile,
    language: &Language,
    code: &str,
    limits: &warden_types::Limits,
) -> Result<(), EngineError> {
    let profile_max = Requested {
        timeout: Duration::from_secs_f64(profile.timeout_seconds),
        memory_mb: profile.max_memory_mb,
    };
    let set = warden_policy::build_policies(
        &profile.enabled_policies,
        &profile.policies,
        profile.strict_mode,
        profile_max,
    )
    .map_err(|e| EngineError::InvalidRequest {
        field: "profile",
        message: e.to_string(),
    })?;
    let requested = Requested {
        timeout: limits.timeout,
        memory_mb: limits.memory_mb,
    };
    set.check_all(&PolicyInput {
        code,
        language,
        requested,
    })
    .map_err(EngineError::PolicyViolation)?;
    if !profile
        .enabled_policies
        .iter()
        .any(|p| p == "resource_quota")
        && (requested.timeout > profile_max.timeout || requested.memory_mb > profile_max.memory_mb)
    {
        return Err(EngineError::InvalidRequest {
            field: if requested.timeout > profile_max.timeout {
                "timeout"
            } else {
                "memory_mb"
            },
            message:
                "above the profile's limit, and the profile has no resource_quota to allow more"
                    .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
