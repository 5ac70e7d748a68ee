//! The `Backend` trait: what provides isolation (`jail`, `docker`, …). Backends know nothing of
//! HTTP, MCP or settings files; they get a complete [`ExecPlan`] and must apply every limit in
//! it or refuse.

use std::fmt;
use warden_types::{ExecEvent, ExecResult, Language, Limits};

/// One execution, fully resolved: the backend neither looks up profiles nor runs policies.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecPlan {
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
}
