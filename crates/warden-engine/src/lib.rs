//! The Warden service: every front-end (CLI, REST, MCP, SDK) turns its input into an
//! [`ExecRequest`] (or a [`SandboxExec`]) and makes one engine call, [`Engine::start`] (or
//! [`Sandboxes::start_exec`]), which owns the execution from admission to result (see
//! [`pipeline`]): slots and queue, the profile and language, the policies, the backend's
//! check, the run, the report to the observer (metrics, traces) and the shaping of output
//! (one module for backends, `warden_types::llm` for models).
//!
//! Invariants: front-ends never talk to a backend directly; a request can lower a profile's
//! limits freely, and raise them only as far as `resource_quota` allows (without that policy,
//! never above the profile's own limits); a profile whose backend is not configured is
//! refused, never run on another backend.

pub mod admission;
pub mod audit;
pub mod backend;
pub mod contexts;
pub mod exec_env;
pub mod import_guard;
pub mod observe;
pub mod oneshot_pool;
pub mod pipeline;
pub mod pool;
pub mod sandboxes;
pub mod shape;
pub mod snapshots;
pub mod store;

pub use admission::{Admission, AdmissionLimits, Caller, KeySlots};
pub use audit::{AuditEvent, AuditLog, Decision, DestroyCause, Visible};
pub use observe::{ExecRecord, ExecTrace, FinishedTrace, Observer};
pub use pipeline::{Execution, Streamed};

pub use backend::{
    Backend, BackendError, BackendSandbox, CellPlan, ContextSpec, EventSender, ExecPlan,
    FREEZE_UNSETTLED, HeldRun, NO_CONTEXTS, NO_DURABLE, NO_EVICTION, NO_GATEWAY, NO_HELD_RUNS,
    NO_LIVE_STDIN, NO_PAUSE, PAUSE_BUSY, SandboxSpec, StdinReceiver, StdinWriter, Unsupported,
};
pub use contexts::{ContextInfo, CreateContext, DEFAULT_CONTEXT, INTERRUPT_GRACE};
pub use oneshot_pool::{OneShotPoolId, OneShotPoolStatus};
pub use pool::PoolStatus;
pub use sandboxes::{CreateSandbox, Restored, SandboxExec, SandboxInfo, Sandboxes};
pub use snapshots::{Forked, MAX_FORKS, SnapshotInfo};
pub use store::{Store, StoreError};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use warden_config::{BackendKind, Profile, Settings};
use warden_policy::{PolicyInput, Requested, Violation};
use warden_types::Language;

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
    Backend(BackendError),
    #[error("no sandbox {0:?}")]
    SandboxNotFound(String),
    #[error("a live sandbox is already named {0:?}")]
    NameTaken(String),
    #[error("{max} sandboxes are live, the most allowed; destroy one first")]
    TooManySandboxes { max: usize },
    #[error("sandbox {0:?} is running an execution; try again after it ends")]
    SandboxBusy(String),
    #[error("no context {0:?} in this sandbox")]
    ContextNotFound(String),
    #[error("no snapshot {0:?}")]
    SnapshotNotFound(String),
    #[error("a snapshot is already named {0:?}")]
    SnapshotNameTaken(String),
    #[error(
        "the snapshot would take {need_mb} MiB, and this API key's snapshots hold {used_mb} of its {quota_mb} MiB; delete one first"
    )]
    SnapshotQuota {
        need_mb: u64,
        used_mb: u64,
        quota_mb: u64,
    },
    #[error("{max} contexts are live in this sandbox, the most allowed; destroy one first")]
    TooManyContexts { max: usize },
    /// The daemon's room for contexts (each holds descriptors: its helper's channel) is full.
    #[error(
        "{max} contexts are live on this host, the most the daemon's descriptor limit holds beside [server] max_sandboxes; destroy one first, or raise the daemon's descriptor hard limit (LimitNOFILE= in its service unit, ulimit -Hn) or lower max_sandboxes"
    )]
    HostContextsFull { max: usize },
    #[error(
        "busy: {running} executions are running and {queued} waiting, the most allowed; try again shortly"
    )]
    Busy {
        running: usize,
        queued: usize,
        retry_after_secs: u64,
    },
    #[error("the API key {key:?} runs {max} executions already, its limit; try again shortly")]
    KeyBusy {
        key: String,
        max: usize,
        retry_after_secs: u64,
    },
    #[error("the server is stopping")]
    ShuttingDown,
    /// Durable state could not be written under the data directory (which operation, why);
    /// what was saved before is intact.
    #[error("{0}")]
    Storage(store::StoreError),
    /// A failure of the engine itself (a task that panicked).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<BackendError> for EngineError {
    /// A backend's error, except the import guard's refusal: that is the policy's violation,
    /// the same answer as the check before the run gives.
    fn from(error: BackendError) -> Self {
        match error {
            BackendError::ImportRefused(refusal) => {
                EngineError::PolicyViolation(refusal.violation())
            }
            other => EngineError::Backend(other),
        }
    }
}

impl EngineError {
    /// A short machine-readable code, the same for every front-end (REST's `error.code`,
    /// MCP's, the CLI's JSON).
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::Disabled => "disabled",
            EngineError::UnknownProfile { .. } => "unknown_profile",
            EngineError::UnknownLanguage { .. } => "unknown_language",
            EngineError::InvalidRequest { .. } => "invalid_request",
            EngineError::PolicyViolation(_) => "policy_violation",
            EngineError::BackendUnavailable { .. } => "backend_unavailable",
            EngineError::SandboxNotFound(_) => "sandbox_not_found",
            EngineError::NameTaken(_) => "name_taken",
            EngineError::SandboxBusy(_) => "sandbox_busy",
            EngineError::TooManySandboxes { .. } => "too_many_sandboxes",
            EngineError::ContextNotFound(_) => "context_not_found",
            EngineError::SnapshotNotFound(_) => "snapshot_not_found",
            EngineError::SnapshotNameTaken(_) => "name_taken",
            EngineError::SnapshotQuota { .. } => "snapshot_quota_exceeded",
            EngineError::TooManyContexts { .. } => "too_many_contexts",
            EngineError::HostContextsFull { .. } => "host_contexts_full",
            EngineError::Busy { .. } | EngineError::KeyBusy { .. } => "too_many_requests",
            EngineError::ShuttingDown => "shutting_down",
            EngineError::Internal(_) => "internal",
            EngineError::Storage(store::StoreError::Full { .. }) => "storage_full",
            EngineError::Storage(_) => "storage_failed",
            EngineError::Backend(b) => match b {
                BackendError::Refused(_) => "refused",
                BackendError::Busy(_) => "sandbox_busy",
                BackendError::Command(_) => "runtime_unavailable",
                BackendError::Limit(_) => "limit_exceeded",
                BackendError::NotFound(_) => "not_found",
                BackendError::BadPath(_) => "bad_path",
                BackendError::Gone(_) => "sandbox_gone",
                BackendError::Lost(_) => "sandbox_lost",
                BackendError::NoSpace(_) => "storage_full",
                BackendError::ImportRefused(_) => "policy_violation",
                BackendError::Setup(_) | BackendError::Internal(_) => "internal",
            },
        }
    }

    /// Seconds after which a refused request may be tried again, when it says so.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            EngineError::Busy {
                retry_after_secs, ..
            }
            | EngineError::KeyBusy {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

/// The service. Cheap to clone: clones share the admission (slots and queue).
#[derive(Debug, Clone)]
pub struct Engine {
    settings: Arc<Settings>,
    backends: HashMap<BackendKind, Arc<dyn Backend>>,
    unavailable: HashMap<BackendKind, String>,
    admission: Admission,
    observer: Option<Arc<dyn Observer>>,
    audit: Option<Arc<AuditLog>>,
    /// Held one-shot sandboxes, per profile (see [`oneshot_pool`]); empty unless started.
    oneshots: Arc<oneshot_pool::OneShotPools>,
}

impl Engine {
    /// The engine of `settings`, its admission bounded by `[server]`'s `max_concurrent` and
    /// `max_queued`.
    pub fn new(settings: Arc<Settings>) -> Engine {
        let admission = Admission::new(AdmissionLimits {
            max_concurrent: settings.server.max_concurrent(),
            max_queued: settings.server.max_queued,
            ..AdmissionLimits::default()
        });
        Engine {
            settings,
            backends: HashMap::new(),
            unavailable: HashMap::new(),
            admission,
            observer: None,
            audit: None,
            oneshots: Arc::default(),
        }
    }

    /// Replaces the admission's bounds (e.g. from command-line flags). Call before cloning:
    /// clones made earlier keep the old slots.
    pub fn with_admission(mut self, limits: AdmissionLimits) -> Engine {
        self.admission = Admission::new(limits);
        self
    }

    /// Reports every execution to `observer` (metrics, traces).
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Engine {
        self.observer = Some(observer);
        self
    }

    /// Records every decision that matters in `log` (see [`audit`]).
    pub fn with_audit(mut self, log: Arc<AuditLog>) -> Engine {
        self.audit = Some(log);
        self
    }

    /// The audit log, when there is one.
    pub fn audit(&self) -> Option<&Arc<AuditLog>> {
        self.audit.as_ref()
    }

    /// Records `owner`'s decision in the audit log, if there is one.
    pub(crate) fn record(&self, owner: Option<&str>, decision: impl FnOnce() -> audit::Decision) {
        if let Some(log) = &self.audit {
            log.record(owner, decision());
        }
    }

    /// The slots and queue every execution goes through.
    pub fn admission(&self) -> &Admission {
        &self.admission
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

    /// The profile and language a request names, the defaults filled in: `[sandbox]`'s default
    /// profile, that profile's language (empty for an unknown profile, which [`Engine::prepare`]
    /// refuses). Also the labels of a refusal before they are resolved.
    pub(crate) fn asked(&self, req: &ExecRequest) -> (String, String) {
        let settings = &self.settings;
        let profile = req
            .profile
            .clone()
            .unwrap_or_else(|| settings.sandbox.default_profile.clone());
        let language = req.language.clone().unwrap_or_else(|| {
            settings
                .profile(&profile)
                .map(|p| p.runtime.language.clone())
                .unwrap_or_default()
        });
        (profile, language)
    }

    /// Resolves a request into the profile name, the profile and the backend-neutral plan,
    /// running the profile's policies. No side effects.
    pub fn prepare(&self, req: &ExecRequest) -> Result<(String, ExecPlan), EngineError> {
        let s = &self.settings;
        if !s.sandbox.enabled {
            return Err(EngineError::Disabled);
        }
        let (profile_name, wanted) = self.asked(req);
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
        let import_guard = import_guard::for_profile(profile, &language);
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
                env: Default::default(),
                cwd: None,
                import_guard,
                limits,
                network_enabled: profile.network_enabled,
                egress: profile.egress.clone(),
                image,
                container_runtime: profile.container_runtime.clone(),
            },
        ))
    }

    /// Lets every backend of durable sandboxes go of what it left in `dir`, a sandbox's
    /// folder without a record (see [`Backend::release_leftover`]): the folder has no record
    /// to say whose it was.
    pub(crate) fn release_leftover(&self, dir: &std::path::Path) -> Result<(), String> {
        for backend in self.backends.values().filter(|b| b.supports_durable()) {
            backend
                .release_leftover(dir)
                .map_err(|e| format!("{}: {e}", backend.name()))?;
        }
        Ok(())
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

    /// Whether the default profile can run now (for `/readyz`): its plan resolves (for an
    /// empty program), its backend is configured, and the backend says it is ready for the
    /// plan ([`Backend::ready`]: its check, and its engine reachable). Starts nothing.
    pub async fn ready(&self) -> Result<(), EngineError> {
        let (profile, plan) = self.prepare(&ExecRequest::default())?;
        let backend = self.backend_for(&profile)?;
        Ok(backend.ready(&plan).await?)
    }

    /// Asks every configured backend to remove what an earlier process left (after a crash).
    pub async fn remove_orphans(&self) -> Vec<(&'static str, Result<usize, BackendError>)> {
        let mut out = Vec::new();
        for backend in self.backends.values() {
            out.push((backend.name(), backend.remove_orphans(&[]).await));
        }
        out
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
