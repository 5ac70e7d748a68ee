//! The `Backend` trait: what provides isolation (`jail`, `docker`, …). Backends know nothing of
//! HTTP, MCP or settings files; they get a complete [`ExecPlan`] and must apply every limit in
//! it or refuse.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use warden_types::{ExecEvent, ExecResult, FileEntry, Language, Limits, WorkspacePath};

/// One execution, fully resolved: the backend neither looks up profiles nor runs policies.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecPlan {
    /// The profile the plan was resolved from (backends may key options on it, e.g. the
    /// Kubernetes RuntimeClass per profile, and label what they create with it).
    pub profile: String,
    pub language: Language,
    /// The interpreter command; the backend appends the path of the code file.
    pub command: Vec<String>,
    /// The code file's name inside the sandbox, e.g. `main.py`.
    pub file_name: String,
    pub code: String,
    /// Arguments after the code file's path.
    pub args: Vec<String>,
    pub stdin: Vec<u8>,
    pub limits: Limits,
    pub network_enabled: bool,
    /// The docker backend's image, when the profile or runtime names one.
    pub image: Option<String>,
}

/// Events go out as they happen, when the caller wants them.
pub type EventSender = tokio::sync::mpsc::Sender<ExecEvent>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The plan asks for something this backend cannot guarantee here: never run weaker.
    #[error("refused: {0}")]
    Refused(String),
    /// Building the sandbox failed.
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    /// The program could not be started (e.g. the interpreter is missing).
    #[error("{0}")]
    Command(String),
    /// Something broke in the backend itself.
    #[error("backend failure: {0}")]
    Internal(String),
    /// A file of a sandbox's workspace that does not exist (or is not a regular file).
    #[error("not found: {0}")]
    NotFound(String),
    /// A workspace path that leads through a symlink, or a file over a size cap.
    #[error("refused path: {0}")]
    BadPath(String),
    /// The sandbox is gone (destroyed, or its container/pod disappeared).
    #[error("the sandbox is gone: {0}")]
    Gone(String),
}

/// A sandbox with a lifetime: what it is built with. Its executions may only lower `limits`
/// (a run's timeout is its own; memory, pids and CPU are the sandbox's).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxSpec {
    /// Unique, `[a-z0-9-]`, chosen by the engine; backends use it in the names of what they
    /// create (cgroups, containers, pods) so that leftovers can be found after a crash.
    pub id: String,
    /// The profile the sandbox was created from (see [`ExecPlan::profile`]).
    pub profile: String,
    pub limits: Limits,
    pub network_enabled: bool,
    /// The image (docker/kubernetes), from the profile's runtime.
    pub image: Option<String>,
    /// Set on what the backend creates, where it can carry labels.
    pub labels: BTreeMap<String, String>,
}

/// A live sandbox of one backend. Executions share its workspace (`/workspace`): a file one
/// run writes is there for the next.
///
/// Invariants: after `destroy` returns `Ok`, nothing the sandbox created is left (process,
/// cgroup, mount, tmpfs, container); `destroy` is idempotent; file access never follows a
/// symlink and never leaves the workspace.
#[async_trait::async_trait]
pub trait BackendSandbox: Send + Sync + fmt::Debug {
    /// Runs one plan in the sandbox (its `limits.timeout` and output caps apply to this run).
    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError>;

    /// Writes a regular file (creating parent folders), replacing an existing file.
    async fn write_file(&self, path: &WorkspacePath, bytes: Vec<u8>) -> Result<(), BackendError>;

    /// Reads a regular file, at most `max_bytes` (more is `BadPath`).
    async fn read_file(
        &self,
        path: &WorkspacePath,
        max_bytes: u64,
    ) -> Result<Vec<u8>, BackendError>;

    /// Lists the workspace recursively (at most `max_entries`), without following symlinks.
    async fn list_files(&self, max_entries: usize) -> Result<Vec<FileEntry>, BackendError>;

    /// Removes everything the sandbox holds. Idempotent.
    async fn destroy(&self) -> Result<(), BackendError>;
}

#[async_trait::async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    fn name(&self) -> &'static str;

    /// Refuses a plan this backend cannot apply on this host, before anything is started.
    fn check(&self, plan: &ExecPlan) -> Result<(), BackendError>;

    /// Runs the plan to the end. Output events go to `events` as they happen, if given; the
    /// final result is returned (and not sent as an event: the caller decides).
    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError>;

    /// Creates a sandbox with a lifetime (see [`BackendSandbox`]).
    async fn create_sandbox(
        &self,
        spec: SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError>;

    /// Removes what an earlier process of this host left (after a crash): sandboxes whose
    /// labels/names say they are Warden's and whose id is not in `live`. Returns how many.
    async fn remove_orphans(&self, live: &[String]) -> Result<usize, BackendError>;
}
