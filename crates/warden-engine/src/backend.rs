//! The `Backend` trait: what provides isolation (`jail`, `docker`, …). Backends know nothing of
//! HTTP, MCP or settings files; they get a complete [`ExecPlan`] and must apply every limit in
//! it or refuse.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use warden_types::egress::EgressPolicy;
use warden_types::{
    Eviction, ExecEvent, ExecResult, FileEntry, Language, Limits, Restoration, WorkspacePath,
};

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
    /// This execution's own environment variables, set after the sandbox's (an execution in
    /// a sandbox with a lifetime; checked by [`crate::exec_env::check_env`]). A backend that
    /// cannot set them refuses the plan ([`ExecPlan::refuse_env_and_cwd`]).
    pub env: BTreeMap<String, String>,
    /// This execution's working directory (checked by [`crate::exec_env::check_cwd`]: inside
    /// the sandbox's writable folders); `None`: the sandbox's (its `home`, else the
    /// workspace). A directory that does not exist fails the start.
    pub cwd: Option<String>,
    pub limits: Limits,
    /// The import guard the interpreter must run with (see [`crate::import_guard`]): a
    /// backend that cannot install it refuses the plan, and a run without it is refused.
    pub import_guard: Option<crate::import_guard::ImportGuard>,
    pub network_enabled: bool,
    /// What the sandbox may reach when `network_enabled` (ignored otherwise).
    pub egress: EgressPolicy,
    /// The docker backend's image, when the profile or runtime names one.
    pub image: Option<String>,
    /// The OCI runtime a container backend must use (`runsc` for gVisor); `None`: the engine's
    /// default. A backend that cannot honour it refuses the plan.
    pub container_runtime: Option<String>,
}

impl ExecPlan {
    /// The refusal of a backend that does not (yet) give an execution its own `env` and
    /// `cwd`: a plan asking for either is refused, never run without them.
    pub fn refuse_env_and_cwd(&self, backend: &str) -> Result<(), BackendError> {
        if !self.env.is_empty() {
            return Err(BackendError::Refused(format!(
                "the {backend} backend does not set an execution's own environment variables"
            )));
        }
        if let Some(cwd) = &self.cwd {
            return Err(BackendError::Refused(format!(
                "the {backend} backend does not run an execution in another working directory ({cwd})"
            )));
        }
        Ok(())
    }
}

/// Events go out as they happen, when the caller wants them.
pub type EventSender = tokio::sync::mpsc::Sender<ExecEvent>;

/// The live stdin of an execution, as its backend reads it: chunks in order; the channel's
/// end (every [`StdinWriter`] dropped) is the end of the program's input.
pub type StdinReceiver = tokio::sync::mpsc::Receiver<Vec<u8>>;

/// Writes to the live stdin of a running execution (see [`crate::Execution::take_stdin`]);
/// dropping every clone closes the program's stdin.
pub type StdinWriter = tokio::sync::mpsc::Sender<Vec<u8>>;

/// The refusal of a backend without live stdin.
pub const NO_LIVE_STDIN: &str =
    "writing to a running execution's stdin is not supported by this backend";

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
    /// A limit of the sandbox (as its creator set it: memory, pids, the timeout) stopped what
    /// had to start or finish, e.g. a context's interpreter, or the save of its state (which
    /// runs the context's own code, and which that code can end): the caller's to change, not
    /// a failure.
    #[error("{0}")]
    Limit(String),
    /// Something of the sandbox's holds it now — an execution's turn, a process the freezer
    /// cannot stop yet — so it cannot be paused or copied this instant: the caller's to retry
    /// (409 `sandbox_busy`), never a failure. Nothing was changed.
    #[error("{0}")]
    Busy(String),
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
    /// The run's sandbox ended under it for a reason outside the program (its helper killed,
    /// the container engine unreachable): the result is lost, and nothing of the run is left
    /// running (what could not be removed yet is removed when it can be).
    #[error("the sandbox was lost during the run: {0}")]
    Lost(String),
    /// The host's disk had no room for what the sandbox must keep (a durable sandbox's
    /// workspace image under the data directory): nothing was made.
    #[error("no space left on the host's disk: {0}")]
    NoSpace(String),
    /// The interpreter's import guard refused an import while the program ran (see
    /// [`crate::import_guard`]); the engine answers it as the policy's violation.
    #[error("import of {:?} refused at run time", .0.module)]
    ImportRefused(crate::import_guard::Refusal),
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
    /// What the sandbox may reach when `network_enabled` (ignored otherwise).
    pub egress: EgressPolicy,
    /// The image (docker/kubernetes), from the profile's runtime.
    pub image: Option<String>,
    /// The OCI runtime a container backend must use; see [`ExecPlan::container_runtime`].
    pub container_runtime: Option<String>,
    /// Set on what the backend creates, where it can carry labels.
    pub labels: BTreeMap<String, String>,
    /// Environment variables every execution and context of the sandbox gets (after the
    /// backend's own, which they may replace).
    pub env: BTreeMap<String, String>,
    /// An absolute path where the workspace is also seen, and the HOME and working directory
    /// of every execution and context (the E2B drop-in's `/home/user`); `None`: the
    /// workspace only at its usual place. A backend that cannot honour it refuses the spec.
    pub home: Option<String>,
}

impl SandboxSpec {
    /// The refusal of a backend that does not (yet) give a sandbox's runs its `env` and
    /// `home`: a spec asking for either is refused, never run without them.
    pub fn refuse_env_and_home(&self, backend: &str) -> Result<(), BackendError> {
        if !self.env.is_empty() {
            return Err(BackendError::Refused(format!(
                "the {backend} backend does not set a sandbox's environment variables"
            )));
        }
        if let Some(home) = &self.home {
            return Err(BackendError::Refused(format!(
                "the {backend} backend does not mount the workspace at {home}"
            )));
        }
        Ok(())
    }
}

/// A context to start in a sandbox: a persistent interpreter (see
/// [`BackendSandbox::create_context`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ContextSpec {
    /// Unique within its sandbox, `[a-z0-9-]`, chosen by the engine.
    pub id: String,
    pub language: Language,
    /// The interpreter command (the runtime's); the backend appends its driver's path.
    pub command: Vec<String>,
    /// The sandbox's limits; `timeout` bounds the interpreter's start.
    pub limits: Limits,
    /// Modules the interpreter imports before it says it is ready (the profile's
    /// `preload_modules`, for the default context only). They are loaded, not bound in the
    /// user's globals. A module that fails to import fails the start.
    pub preload: Vec<String>,
    /// The import guard the interpreter runs with (see [`ExecPlan::import_guard`]).
    pub import_guard: Option<crate::import_guard::ImportGuard>,
}

/// One cell to run in a context.
#[derive(Debug, Clone, PartialEq)]
pub struct CellPlan {
    pub code: String,
    /// From the cell's start to the interrupt (KeyboardInterrupt in Python).
    pub timeout: std::time::Duration,
    /// From the interrupt to the kill of the context (which is then restarted).
    pub interrupt_grace: std::time::Duration,
}

/// The refusal of a backend without contexts.
pub const NO_CONTEXTS: &str = "contexts are not supported by this backend";

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

    /// [`BackendSandbox::exec`] with the program's stdin open while it runs: the plan's
    /// `stdin` first, then each chunk from `stdin` as it arrives; the channel's end closes it
    /// (the program reads end of file). Input the program never reads is dropped at its end.
    /// Default: refused.
    async fn exec_with_stdin(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
        stdin: StdinReceiver,
    ) -> Result<ExecResult, BackendError> {
        let _ = (plan, events, stdin);
        Err(BackendError::Refused(NO_LIVE_STDIN.into()))
    }

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

    /// Removes everything the sandbox holds, its contexts included. Idempotent.
    async fn destroy(&self) -> Result<(), BackendError>;

    /// Starts a context: a persistent interpreter with exactly the isolation of one of this
    /// sandbox's executions (same limits, policies and workspace), in its own process(es), so
    /// that no state is shared with another context. Returns once the interpreter is ready.
    async fn create_context(&self, spec: ContextSpec) -> Result<(), BackendError> {
        let _ = spec;
        Err(BackendError::Refused(NO_CONTEXTS.into()))
    }

    /// Runs one cell in a context (one at a time per context). The result's
    /// `cell` part is filled in; `cell.context_restarted` says whether the context survived
    /// (`Some(false)`) or was restarted with fresh state (`Some(true)`: the grace after the
    /// interrupt passed, the memory limit killed it, or the interpreter exited).
    async fn exec_in_context(
        &self,
        id: &str,
        cell: CellPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let _ = (id, cell, events);
        Err(BackendError::Refused(NO_CONTEXTS.into()))
    }

    /// Replaces a context's interpreter with a fresh one (its state is lost).
    async fn restart_context(&self, id: &str) -> Result<(), BackendError> {
        let _ = id;
        Err(BackendError::Refused(NO_CONTEXTS.into()))
    }

    /// Ends a context. Idempotent.
    async fn destroy_context(&self, id: &str) -> Result<(), BackendError> {
        let _ = id;
        Err(BackendError::Refused(NO_CONTEXTS.into()))
    }

    /// Saves what can be saved of a context's state inside the sandbox, then ends its
    /// interpreter to free its memory (a pause that evicts). The context stays: its next cell,
    /// or [`BackendSandbox::restore_context`], starts a fresh interpreter that loads the state.
    /// `timeout` bounds the save (user objects' pickling runs user code).
    async fn evict_context(
        &self,
        id: &str,
        timeout: std::time::Duration,
    ) -> Result<Eviction, BackendError> {
        let _ = (id, timeout);
        Err(BackendError::Refused(NO_EVICTION.into()))
    }

    /// Starts an evicted context's interpreter and loads its saved state (`None`: the context
    /// was not evicted, nothing to do).
    async fn restore_context(
        &self,
        id: &str,
        timeout: std::time::Duration,
    ) -> Result<Option<Restoration>, BackendError> {
        let _ = (id, timeout);
        Ok(None)
    }

    /// Saves what can be saved of a running context's state inside the sandbox, as an
    /// eviction does (the same save, in the same place), but its interpreter goes on: a copy of
    /// the workspace made now (a snapshot's, a fork's) carries the state, and
    /// [`BackendSandbox::adopt_context`] in the copy finds it. The caller removes it from this
    /// sandbox afterwards with [`BackendSandbox::discard_saved_context`]. A paused sandbox
    /// stays paused.
    async fn save_context(
        &self,
        id: &str,
        timeout: std::time::Duration,
    ) -> Result<Eviction, BackendError> {
        let _ = (id, timeout);
        Err(BackendError::Refused(NO_EVICTION.into()))
    }

    /// Removes the state that [`BackendSandbox::save_context`] left in the sandbox (not an
    /// evicted context's, which its restore needs). Idempotent.
    async fn discard_saved_context(&self, id: &str) -> Result<(), BackendError> {
        let _ = id;
        Ok(())
    }

    /// Takes up a listed context that has no interpreter (the sandbox was taken up after a
    /// restart of the daemon, or made from a copy of another's workspace): if a saved state of
    /// it is in the workspace, registers it as evicted — its next cell, or
    /// [`BackendSandbox::restore_context`], starts an interpreter that loads the state — and
    /// returns `true`; else registers nothing and returns `false` (the caller creates it).
    async fn adopt_context(&self, spec: ContextSpec) -> Result<bool, BackendError> {
        let _ = spec;
        Ok(false)
    }

    /// Stops every process of the sandbox where it is — its contexts' interpreters keep their
    /// memory and state — until [`BackendSandbox::resume`]; the processes cannot tell (the
    /// cgroup freezer, a container's pause). Refused while an execution runs. Any other
    /// operation on a paused sandbox resumes it first.
    async fn pause(&self) -> Result<(), BackendError> {
        Err(BackendError::Refused(NO_PAUSE.into()))
    }

    /// Lets a paused sandbox's processes run again. Idempotent.
    async fn resume(&self) -> Result<(), BackendError> {
        Err(BackendError::Refused(NO_PAUSE.into()))
    }

    /// Copies the workspace of a durable sandbox (see [`Backend::create_durable_sandbox`])
    /// into `dir` (an empty folder the engine made), consistent as of one instant (no write
    /// is half in it), in the form [`Backend::restore_sandbox`] takes up: the copy of a
    /// snapshot's folder is a new sandbox's. Waits for a running execution to end. Default:
    /// refused.
    async fn snapshot_to(&self, dir: &std::path::Path) -> Result<(), BackendError> {
        let _ = dir;
        Err(BackendError::Refused(NO_DURABLE.into()))
    }

    /// Replaces the egress gateway's rules of a sandbox whose profile has a gateway; every
    /// execution started afterwards gets them, and a running context no later than its next
    /// cell: live where the sandbox's gateway outlives its executions (docker: the
    /// container's gateway takes them for every new connection), otherwise by restarting the
    /// context's interpreter before that cell, whose result then says
    /// `context_restarted: true` (the jail: each context has its own gateway).
    async fn set_egress(
        &self,
        rules: warden_types::egress::GatewayRules,
    ) -> Result<(), BackendError> {
        let _ = rules;
        Err(BackendError::Refused(NO_GATEWAY.into()))
    }

    /// Whether the sandbox is usable and the context's interpreter is running now (it was
    /// not killed or exited since it started). The warm pool asks this before it hands a
    /// sandbox out. A backend without contexts has none alive.
    async fn context_alive(&self, id: &str) -> bool {
        let _ = id;
        false
    }
}

/// A backend's [`BackendError::Busy`] for a pause beside what holds the sandbox now: a running
/// execution, or a copy of it (a snapshot's, a fork's) on the jail, a file operation on docker.
pub const PAUSE_BUSY: &str = "an execution, a file operation or a copy (a snapshot, a fork) is \
     running in this sandbox; pause it after that ends";

/// A backend's [`BackendError::Busy`] when the sandbox's processes did not all stop in time
/// for a pause or a copy (the kernel's freezer did not settle: one was in a call it cannot be
/// stopped in); nothing stays frozen.
pub const FREEZE_UNSETTLED: &str = "a process of this sandbox could not be stopped now; retry";

/// The refusal of a backend that cannot evict a context.
pub const NO_EVICTION: &str = "this backend cannot evict a context";

/// The refusal of a backend whose sandboxes cannot outlive the process.
pub const NO_DURABLE: &str = "this backend cannot keep a sandbox across a restart of the daemon";

/// A one-shot sandbox built ahead of its code ([`Backend::hold`]): a fresh sandbox whose
/// interpreter has started and waits. It runs exactly one plan, then is gone; dropping it
/// unused destroys it.
#[async_trait::async_trait]
pub trait HeldRun: Send + Sync + fmt::Debug {
    /// Whether it still waits (its sandbox was not killed and did not fail meanwhile).
    fn alive(&self) -> bool;

    /// Whether `plan` can run in it: the plan it was held for but for the code, stdin and
    /// timeout (the engine compares the rest), and within the backend's own bounds.
    fn fits(&self, plan: &ExecPlan) -> bool;

    /// Runs `plan` (one that [`HeldRun::fits`]) as [`Backend::exec`] would; its timeout counts
    /// from the start of the program's own code.
    async fn run(
        self: Box<Self>,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError>;
}

/// The refusal of a backend that cannot hold one-shot sandboxes.
pub const NO_HELD_RUNS: &str = "this backend cannot start a one-shot sandbox ahead of its code";

/// The refusal of a sandbox without an egress gateway to change.
pub const NO_GATEWAY: &str =
    "this sandbox has no egress gateway (its profile sets no egress.gateway)";

/// The refusal of a backend that cannot pause sandboxes.
pub const NO_PAUSE: &str = "this backend cannot pause a sandbox";

/// A promise of the backend conformance suite (`crates/warden/tests/conformance.rs`) that a
/// backend cannot keep on this host, and why. `warden doctor` prints these; the suite reports
/// the cases of such a promise as unsupported rather than passed, and fails a case that is
/// not kept without a declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// A group of the suite's cases (`persistent_sandboxes`), one case
    /// (`memory_limit_is_reason_memory`), or `*` for all.
    pub promise: &'static str,
    /// For one case: the one check of it that is waived (the suite tags its checks, e.g.
    /// `reason`); every other check of the case still holds. `None` for a group or `*`, whose
    /// cases the backend does not run at all (it refuses them) or cannot run here.
    pub check: Option<&'static str>,
    pub why: String,
}

#[async_trait::async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    fn name(&self) -> &'static str;

    /// Whether its sandboxes have contexts ([`BackendSandbox::create_context`]); a warm pool
    /// needs them. Default: no.
    fn supports_contexts(&self) -> bool {
        false
    }

    /// The suite's promises this backend cannot keep here (default: none).
    fn unsupported(&self) -> Vec<Unsupported> {
        Vec::new()
    }

    /// Refuses a plan this backend cannot apply on this host, before anything is started.
    fn check(&self, plan: &ExecPlan) -> Result<(), BackendError>;

    /// Whether the plan could run now, for readiness probes: [`Backend::check`], and what the
    /// backend must reach to run it (the docker engine answers). Starts nothing. Default: the
    /// check.
    async fn ready(&self, plan: &ExecPlan) -> Result<(), BackendError> {
        self.check(plan)
    }

    /// Runs the plan to the end. The plan passed [`Backend::check`] (the engine checks once,
    /// before this; a backend does not check again). Output events go to `events` as they
    /// happen, if given; the final result is returned (and not sent as an event: the caller
    /// decides).
    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError>;

    /// Builds the sandbox of a one-shot `plan` (its code, stdin and timeout aside) and starts
    /// its interpreter, which waits for the code: by the same steps as [`Backend::exec`] of the
    /// same plan, so that a program cannot tell the two apart. Returns once it waits. Default:
    /// refused.
    async fn hold(&self, plan: &ExecPlan) -> Result<Box<dyn HeldRun>, BackendError> {
        let _ = plan;
        Err(BackendError::Refused(NO_HELD_RUNS.into()))
    }

    /// Creates a sandbox with a lifetime (see [`BackendSandbox`]).
    async fn create_sandbox(
        &self,
        spec: SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError>;

    /// Whether [`Backend::create_durable_sandbox`] and [`Backend::restore_sandbox`] work.
    /// Default: no.
    fn supports_durable(&self) -> bool {
        false
    }

    /// Whether a profile that does not say (`durable` unset) gets durable sandboxes here: the
    /// backend can keep one on this host without the operator's word. Default:
    /// [`Backend::supports_durable`].
    fn durable_by_default(&self) -> bool {
        self.supports_durable()
    }

    /// Creates a sandbox whose workspace lives in `dir` (an empty folder the engine made, and
    /// removes after [`BackendSandbox::destroy`]), with the spec's workspace size enforced
    /// there, so that it outlives this process: [`Backend::restore_sandbox`] takes it up
    /// again. Its contexts and processes do not outlive the process. Default: refused.
    async fn create_durable_sandbox(
        &self,
        spec: SandboxSpec,
        dir: &std::path::Path,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        let _ = (spec, dir);
        Err(BackendError::Refused(NO_DURABLE.into()))
    }

    /// Takes up a sandbox that [`Backend::create_durable_sandbox`] made in `dir` (in this or
    /// an earlier process, which is gone), with its files as they were and no context.
    /// Default: refused.
    async fn restore_sandbox(
        &self,
        spec: SandboxSpec,
        dir: &std::path::Path,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        let _ = (spec, dir);
        Err(BackendError::Refused(NO_DURABLE.into()))
    }

    /// Lets go of what an earlier process, killed while it made or took up a durable sandbox,
    /// left in `dir` (a sandbox's folder without a record, which the engine removes next):
    /// e.g. a mount of the workspace at the folder, which removing it would otherwise cross
    /// (deleting the files through it) and fail on. Default: nothing to let go.
    fn release_leftover(&self, dir: &std::path::Path) -> Result<(), BackendError> {
        let _ = dir;
        Ok(())
    }

    /// Removes what an earlier process of this host left (after a crash): sandboxes whose
    /// labels/names say they are Warden's and whose id is not in `live`. Returns how many.
    async fn remove_orphans(&self, live: &[String]) -> Result<usize, BackendError>;
}
