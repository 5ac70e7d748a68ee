//! Jail sandboxes with a lifetime ([`JailSandbox`]): a workspace tmpfs held by the daemon, each
//! execution a fresh jail with that workspace attached, and contexts — long-lived interpreters,
//! one helper in session mode each (see [`crate::context`]).
//!
//! Invariants: executions, context cells and context changes run side by side (each
//! execution is its own jail: its own namespaces and cgroup with the sandbox's limits, at most
//! [`MAX_RUNS_AT_ONCE`] at once; a context's cells take turns on the context); destroy and
//! pause wait for all of them (pause refuses while any runs);
//! destroy kills a running execution through its cgroup so that its helper still tears down,
//! then drops the workspace (the tmpfs goes with the last descriptor); a networked sandbox
//! gives every run and every context its own link and firewall with the same rules; a context
//! whose interpreter died is replaced before the next cell, and the result says so. A paused
//! sandbox has every context's run frozen (the cgroup freezer) and no execution running;
//! whatever next takes a turn (an execution, a cell, a context's start or restart) or ends
//! a context thaws it first, since a frozen process can neither run nor die.
//!
//! A context's saved state is one file of the workspace, `.warden/<context>.state`, written by
//! one save ([`save_state`]: an eviction's, or a snapshot's and a fork's with the interpreter
//! left running) and read by one restore; it is removed once loaded, when the context restarts
//! or ends, and (a snapshot's or a fork's) from the parent after the copy. A context listed
//! with no interpreter (a restart of the daemon, a copy) is adopted evicted when its state file
//! is there.

use crate::cgroup::Hierarchy;
use crate::client::{Inherited, blocking, exec_helper};
use crate::context::{CellEnd, JailContext};
use crate::plan::{CODE_DIR, IdMap, JailPlan, PlanInput};
use crate::session::{CellRequest, StateOp};
use crate::workspace::{Workspace, WorkspaceError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use warden_engine::{
    BackendError, BackendSandbox, CellPlan, ContextSpec, EventSender, ExecPlan, StdinReceiver,
};
use warden_types::{Eviction, ExecResult, FileEntry, Reason, Restoration, WorkspacePath};

/// What a sandbox needs of its backend to start runs: the backend's launcher (never a helper
/// forked from this process: the daemon is multi-threaded).
#[derive(Debug, Clone)]
pub(crate) struct SandboxPart {
    pub(crate) launcher: crate::launcher::Launcher,
    pub(crate) host_paths: Vec<PathBuf>,
    /// The sandbox's ids: its host uid is held by its workspace (`HostIds::Held`).
    pub(crate) ids: IdMap,
    pub(crate) fast_cgroup_attach: bool,
    /// The Landlock ABI every run enforces (the backend's check for the sandbox's profile).
    pub(crate) landlock: u32,
}

/// How many plain runs of one sandbox may be alive at once; more wait for one to end.
pub const MAX_RUNS_AT_ONCE: usize = 8;

/// A jail sandbox with a lifetime: a workspace tmpfs held by the daemon; each execution is a
/// fresh jail (namespaces, cgroup, seccomp: as a one-shot run) with that workspace attached.
/// Executions and cells run side by side (at most [`MAX_RUNS_AT_ONCE`] plain runs).
#[derive(Debug)]
pub struct JailSandbox {
    id: String,
    backend: SandboxPart,
    /// A networked sandbox: each execution gets its own link and firewall with these rules
    /// (the gateway's may be replaced: [`BackendSandbox::set_egress`]).
    network: std::sync::Mutex<Option<warden_net::NetRequest>>,
    /// Counts changes of the gateway's rules: a context whose interpreter started under an
    /// older count (its session's gateway has the old rules) is restarted before its next
    /// cell, whose result says `context_restarted: true`.
    rules_generation: std::sync::atomic::AtomicU64,
    /// Every run's and context's own environment variables (`SandboxSpec::env`).
    env: Vec<(String, String)>,
    /// Where every run also sees the workspace, its HOME and working directory
    /// (`SandboxSpec::home`).
    home: Option<String>,
    /// `None` once destroyed. A run holds its own reference until it ends.
    workspace: std::sync::Mutex<Option<Arc<Workspace>>>,
    /// Runs, cells and context changes share it (each run is its own jail, a context's cells
    /// take turns on the context's slot); destroy and pause take it alone.
    turns: tokio::sync::RwLock<()>,
    /// Bounds the plain runs alive at once (each has the sandbox's limits).
    runs: tokio::sync::Semaphore,
    /// Set by `destroy`: a running execution is killed.
    destroyed: tokio::sync::watch::Sender<bool>,
    /// The contexts, by id: each its own helper and sandbox (see [`crate::context`]).
    contexts: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<ContextSlot>>>>,
    /// Whether the contexts' runs are frozen (see the module docs).
    paused: std::sync::atomic::AtomicBool,
    /// Held (shared) by the files API's writes, and (alone) by a copy of the workspace, so
    /// that no write lands in the middle of a copy.
    copying: tokio::sync::RwLock<()>,
}

/// A context: what it was created with, and its running interpreter (`None` between a failed
/// restart and the next cell, which starts one).
#[derive(Debug)]
struct ContextSlot {
    spec: ContextSpec,
    live: Option<JailContext>,
    /// The interpreter ended where no cell's result could say so (the import guard's refusal
    /// of a cell, a save it did not survive): the next cell's result says that the context was
    /// restarted.
    restart_untold: bool,
    /// Evicted: no interpreter, its state saved at [`state_path`]; the next cell or
    /// `restore_context` starts one and loads it.
    evicted: bool,
}

/// Where an evicted context's state waits, in the sandbox: the workspace, the one place all
/// of the sandbox's processes see. It is the user's data like any file there (the restore
/// treats it as user input); the driver removes it once loaded.
fn state_path(id: &str) -> String {
    format!("{}/.warden/{id}.state", crate::layout::WORKSPACE_DIR)
}

/// [`state_path`] as a path in the workspace.
fn state_file(id: &str) -> Result<WorkspacePath, BackendError> {
    WorkspacePath::new(&format!(".warden/{id}.state"))
        .map_err(|e| BackendError::Internal(format!("state path of context {id:?}: {e}")))
}

/// From a save or restore's answer: the driver's JSON report (a failure is the driver's
/// error, or a context that died on the way). The state file is in the workspace, so what the
/// user put there can be in its way (a file named `.warden`, a folder at the state's path, a
/// folder made read-only): that is the caller's to move, said with the path, as is a limit of
/// the workspace that the state ran into. A save runs the context's own code (a value's
/// `__reduce__`) under the sandbox's limits: a limit that stops it, or an interpreter that ends
/// during it, is the caller's to change (a limit, never an internal error), and says what is
/// left of the context's variables.
fn state_report<T: serde::de::DeserializeOwned>(
    end: CellEnd,
    id: &str,
    op: StateOp,
) -> Result<T, BackendError> {
    // A restore removes the state file as it opens it (see the driver's `restore_state`).
    let (what, left) = match op {
        StateOp::SaveState => ("save", "the context goes on with its variables"),
        StateOp::RestoreState => (
            "restore",
            "what it had loaded by then stays, and the rest of the state is lost",
        ),
    };
    let result = match end {
        CellEnd::Alive(result) => result,
        CellEnd::Died(result) => {
            return Err(BackendError::Limit(format!(
                "context {id:?}'s interpreter ended during the {what} of its state (reason {}): \
                 its variables are lost, and its next cell starts afresh",
                result.reason
            )));
        }
    };
    if let Some(error) = result.cell.error {
        let (name, value) = (error.name.as_str(), error.value.as_str());
        let at = format!(".warden/{id}.state");
        if result.reason.is_limit() || name == "MemoryError" {
            let limit = if name == "MemoryError" {
                Reason::Memory
            } else {
                result.reason
            };
            return Err(BackendError::Limit(format!(
                "the sandbox's {limit} limit stopped the {what} of context {id:?}'s state \
                 ({name}); {left}"
            )));
        }
        return Err(match name {
            "FileExistsError" | "NotADirectoryError" | "IsADirectoryError" | "PermissionError" => {
                BackendError::BadPath(format!(
                    "the workspace's files are in the way of the {what} of context {id:?}'s \
                     state, kept at {at}: {name}: {value}"
                ))
            }
            // ENOSPC, EFBIG: the sandbox's `workspace_mb` and `max_file_size_mb`.
            "OSError" if value.starts_with("[Errno 28]") || value.starts_with("[Errno 27]") => {
                BackendError::Limit(format!(
                    "a limit of the workspace (its size cap or the file size limit) stopped \
                     the {what} of context {id:?}'s state at {at}: {value}"
                ))
            }
            _ => BackendError::Refused(format!("the {what} failed: {name}: {value}")),
        });
    }
    let text = result.cell.text.unwrap_or_default();
    serde_json::from_str(&text)
        .map_err(|e| BackendError::Internal(format!("the driver's {what} report: {e}")))
}

impl JailSandbox {
    /// A sandbox over a fresh workspace; `network`: the request every run of a networked
    /// sandbox gets.
    pub(crate) fn new(
        id: String,
        backend: SandboxPart,
        network: Option<warden_net::NetRequest>,
        workspace: Workspace,
        env: BTreeMap<String, String>,
        home: Option<String>,
    ) -> JailSandbox {
        JailSandbox {
            id,
            backend,
            network: std::sync::Mutex::new(network),
            rules_generation: std::sync::atomic::AtomicU64::new(0),
            env: env.into_iter().collect(),
            home,
            workspace: std::sync::Mutex::new(Some(Arc::new(workspace))),
            turns: tokio::sync::RwLock::new(()),
            runs: tokio::sync::Semaphore::new(MAX_RUNS_AT_ONCE),
            destroyed: tokio::sync::watch::Sender::new(false),
            contexts: std::sync::Mutex::new(BTreeMap::new()),
            paused: std::sync::atomic::AtomicBool::new(false),
            copying: tokio::sync::RwLock::new(()),
        }
    }

    /// The network request of the sandbox's next run, with its current rules.
    fn network(&self) -> Option<warden_net::NetRequest> {
        self.network.lock().expect("not poisoned").clone()
    }

    /// Takes a share of the sandbox's turns (an execution, a cell, a context change: they run
    /// side by side; destroy and pause wait for them all), thawing it first if it was paused.
    async fn turn(&self) -> Result<tokio::sync::RwLockReadGuard<'_, ()>, BackendError> {
        let turn = self.turns.read().await;
        self.thaw_if_paused().await?;
        Ok(turn)
    }

    async fn thaw_if_paused(&self) -> Result<(), BackendError> {
        if self.paused.load(std::sync::atomic::Ordering::Acquire) {
            self.set_frozen(false).await?;
        }
        Ok(())
    }

    /// Freezes or thaws the runs of every live context. The caller holds the turn.
    async fn set_frozen(&self, frozen: bool) -> Result<(), BackendError> {
        let slots: Vec<_> = self
            .contexts
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect();
        let mut helpers = Vec::new();
        for slot in slots {
            if let Some(pid) = slot
                .lock()
                .await
                .live
                .as_ref()
                .and_then(JailContext::helper_pid)
            {
                helpers.push(pid);
            }
        }
        blocking(move || {
            let h = Hierarchy::detect()
                .map_err(|e| BackendError::Internal(format!("cannot read cgroup layout: {e}")))?;
            for (i, pid) in helpers.iter().enumerate() {
                if let Err(e) = h.freeze_runs_of(*pid, frozen) {
                    // A pause that failed part-way leaves nothing frozen.
                    if frozen {
                        for done in &helpers[..=i] {
                            let _ = h.freeze_runs_of(*done, false);
                        }
                    }
                    return Err(match e {
                        crate::cgroup::CgroupError::ControllerMissing { .. } => {
                            BackendError::Refused(format!("cannot pause: {e}"))
                        }
                        crate::cgroup::CgroupError::Unsettled { .. } => {
                            BackendError::Busy(warden_engine::FREEZE_UNSETTLED.into())
                        }
                        e => BackendError::Internal(e.to_string()),
                    });
                }
            }
            Ok(())
        })
        .await?;
        self.paused
            .store(frozen, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    fn workspace(&self) -> Result<Arc<Workspace>, BackendError> {
        self.workspace
            .lock()
            .expect("not poisoned")
            .clone()
            .ok_or_else(|| BackendError::Gone(format!("sandbox {} was destroyed", self.id)))
    }

    fn context_slot(&self, id: &str) -> Result<Arc<tokio::sync::Mutex<ContextSlot>>, BackendError> {
        self.contexts
            .lock()
            .expect("not poisoned")
            .get(id)
            .cloned()
            .ok_or_else(|| {
                BackendError::NotFound(format!("no context {id:?} in sandbox {}", self.id))
            })
    }

    /// The session plan of a context: the sandbox's run plan with the driver as its code.
    fn context_plan(&self, spec: &ContextSpec) -> Result<JailPlan, BackendError> {
        let Some((driver, driver_file)) = crate::context::driver_for(spec.language.as_str()) else {
            return Err(BackendError::Refused(format!(
                "contexts of language {} are not supported by the jail backend (python, javascript only)",
                spec.language
            )));
        };
        if !spec.preload.is_empty() && spec.language.as_str() != "python" {
            return Err(BackendError::Refused(format!(
                "preloaded modules are for Python contexts, not {}",
                spec.language
            )));
        }
        let b = &self.backend;
        let mut argv = Vec::new();
        if spec.language.as_str() == "javascript" {
            // Node cannot dup a descriptor (and the pipes' owner is not the sandbox's user, so
            // it cannot reopen them): the shell moves the protocol's pipes to 4 and 5 and
            // gives the interpreter an empty stdin and no descriptor 3 (see the driver).
            argv.extend(
                [
                    "/bin/sh",
                    "-c",
                    r#"exec "$@" 4<&0 5>&3 3>&- </dev/null"#,
                    "warden-driver",
                ]
                .map(String::from),
            );
        }
        argv.extend(spec.command.iter().cloned());
        argv.push(format!("{CODE_DIR}/{driver_file}"));
        if spec.language.as_str() == "javascript" {
            argv.extend(["--channel", "4,5"].map(String::from));
        }
        if !spec.preload.is_empty() {
            // Read and removed from sys.argv by the driver before any user code runs.
            argv.push("--preload".into());
            argv.push(spec.preload.join(","));
        }
        let budget = spec.limits.max_artifact_bytes.max(1024 * 1024);
        let mut plan = JailPlan::build(PlanInput {
            argv,
            code: driver.into(),
            code_file_name: driver_file.into(),
            stdin: Vec::new(),
            limits: spec.limits.clone(),
            host_paths: &b.host_paths,
            ids: b.ids,
            extra_env: self
                .env
                .iter()
                .cloned()
                .chain([("WARDEN_RESULT_BUDGET".into(), budget.to_string())])
                .collect(),
            shared_workspace_fd: Some(crate::helper::INHERITED_WORKSPACE_FD),
            // A networked sandbox's interpreter has the sandbox's egress, by the same rules.
            network: self.network(),
        })
        .map_err(|e| BackendError::Refused(e.to_string()))?;
        self.give_home(&mut plan)?;
        plan.session = true;
        if let Some(guard) = &spec.import_guard {
            plan.add_import_guard(guard, Some(&format!("{CODE_DIR}/{driver_file}")));
        }
        plan.fast_cgroup_attach = b.fast_cgroup_attach;
        plan.landlock = Some(b.landlock);
        plan.trace_timing = std::env::var_os("WARDEN_TRACE_TIMING").is_some();
        Ok(plan)
    }

    /// The sandbox's `home`, if it has one, in a run's plan.
    fn give_home(&self, plan: &mut JailPlan) -> Result<(), BackendError> {
        match &self.home {
            Some(home) => plan
                .with_home(home)
                .map_err(|e| BackendError::Refused(e.to_string())),
            None => Ok(()),
        }
    }

    /// Starts an evicted context's interpreter and loads its state. The caller holds the turn
    /// and the slot. Whatever happens the context is no longer evicted: its state file is
    /// read once (a failed load leaves a fresh interpreter, or none for the next cell to
    /// start).
    async fn restore_into(
        &self,
        id: &str,
        slot: &mut ContextSlot,
        timeout: Duration,
    ) -> Result<Restoration, BackendError> {
        slot.evicted = false;
        let mut live = self.start_context(&slot.spec).await?;
        let end = live
            .exec(&state_request(StateOp::RestoreState, id, timeout), None)
            .await;
        let ended = matches!(end, Ok(CellEnd::Died(_)) | Err(_));
        if ended {
            live.kill().await;
        } else {
            slot.live = Some(live);
        }
        state_report(end?, id, StateOp::RestoreState)
    }

    /// One execution: a fresh jail with the workspace attached; `stdin`: its live stdin.
    async fn run(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
        stdin: Option<StdinReceiver>,
    ) -> Result<ExecResult, BackendError> {
        let _turn = self.turn().await?;
        let _run = self
            .runs
            .acquire()
            .await
            .map_err(|_| BackendError::Internal("the runs' semaphore is closed".into()))?;
        let workspace = self.workspace()?;
        let b = &self.backend;
        let code_file = PathBuf::from(CODE_DIR).join(&plan.file_name);
        let mut argv = plan.command.clone();
        argv.push(code_file.display().to_string());
        argv.extend(plan.args.iter().cloned());
        let mut jail_plan = JailPlan::build(PlanInput {
            argv,
            code: plan.code.clone(),
            code_file_name: plan.file_name.clone(),
            stdin: plan.stdin.clone(),
            limits: plan.limits.clone(),
            host_paths: &b.host_paths,
            ids: b.ids,
            // The sandbox's variables, then this execution's own (checked by the engine).
            extra_env: self.env.iter().cloned().chain(plan.env.clone()).collect(),
            shared_workspace_fd: Some(crate::helper::INHERITED_WORKSPACE_FD),
            network: self.network(),
        })
        .map_err(|e| BackendError::Refused(e.to_string()))?;
        self.give_home(&mut jail_plan)?;
        if let Some(cwd) = &plan.cwd {
            // Inside the sandbox's writable folders (the engine's check); one that does not
            // exist fails the program's start, naming it.
            jail_plan.cwd = PathBuf::from(cwd);
        }
        if let Some(guard) = &plan.import_guard {
            jail_plan.add_import_guard(guard, None);
        }
        jail_plan.fast_cgroup_attach = b.fast_cgroup_attach;
        jail_plan.landlock = Some(b.landlock);
        jail_plan.known_outputs = {
            let workspace = workspace.clone();
            blocking(move || Ok(workspace.output_stamps())).await?
        };
        jail_plan.trace_timing = std::env::var_os("WARDEN_TRACE_TIMING").is_some();
        let margin = plan.limits.timeout + Duration::from_secs(10);
        let cancel = self.destroyed.subscribe();
        exec_helper(
            &b.launcher,
            &jail_plan,
            events,
            margin,
            Some(inherited(&workspace)?),
            Some(cancel),
            stdin,
        )
        .await
    }

    async fn start_context(&self, spec: &ContextSpec) -> Result<JailContext, BackendError> {
        let workspace = self.workspace()?;
        // Read before the plan: a change of rules while it starts restarts it at its next cell.
        let generation = self
            .rules_generation
            .load(std::sync::atomic::Ordering::SeqCst);
        let plan = self.context_plan(spec)?;
        let mut live =
            JailContext::start(&self.backend.launcher, &plan, inherited(&workspace)?).await?;
        live.rules_generation = generation;
        Ok(live)
    }

    /// Removes the cgroups of helpers that had to be killed (their sandboxes are on their
    /// way out, so a few tries suffice).
    async fn remove_stale_cgroups() -> Result<(), BackendError> {
        blocking(|| {
            if let Ok(h) = Hierarchy::detect() {
                for _ in 0..50 {
                    h.remove_stale();
                    if !h.has_stale() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Ok(())
        })
        .await
    }
}

/// Saves what can be saved of a Python context's state at its [`state_path`] (the caller
/// holds the turn and the slot); the interpreter goes on. `None`: no interpreter running. The
/// one save of evictions, snapshots and forks.
async fn save_state(
    id: &str,
    slot: &mut ContextSlot,
    timeout: Duration,
) -> Result<Option<Eviction>, BackendError> {
    if slot.spec.language.as_str() != "python" {
        return Err(BackendError::Refused(format!(
            "context {id:?} runs {}: only a Python context's state can be saved",
            slot.spec.language
        )));
    }
    let Some(live) = slot.live.as_mut() else {
        return Ok(None);
    };
    let end = live
        .exec(&state_request(StateOp::SaveState, id, timeout), None)
        .await;
    if !matches!(end, Ok(CellEnd::Alive(_))) {
        // Its interpreter is gone (or its helper broke): out of the slot now, so that the
        // next cell starts a fresh one and says so, rather than finding a helper on its way
        // out (a cell sent to it was a 500).
        if let Some(gone) = slot.live.take() {
            gone.kill().await;
        }
        slot.restart_untold = true;
    }
    state_report(end?, id, StateOp::SaveState).map(Some)
}

/// The request that saves or restores a context's state (`code` is the state's path).
fn state_request(op: StateOp, id: &str, timeout: Duration) -> CellRequest {
    CellRequest {
        code: state_path(id),
        timeout_ms: timeout.as_millis() as u64,
        grace_ms: warden_engine::INTERRUPT_GRACE.as_millis() as u64,
        known_outputs: Vec::new(),
        state: Some(op),
    }
}

/// A run's view of its sandbox: the workspace and a hold of the uid's lease, which its helper
/// inherits.
fn inherited(workspace: &Workspace) -> Result<Inherited, BackendError> {
    use std::os::fd::AsRawFd;
    let lease = workspace
        .uid_lease()
        .for_child()
        .map_err(|e| BackendError::Internal(format!("hold the sandbox's uid for a helper: {e}")))?;
    Ok(Inherited {
        workspace: workspace.fd().as_raw_fd(),
        lease: std::sync::Arc::new(lease),
    })
}

fn workspace_error(e: WorkspaceError) -> BackendError {
    match e {
        WorkspaceError::NotFound { .. } => BackendError::NotFound(e.to_string()),
        WorkspaceError::Refused { .. } => BackendError::BadPath(e.to_string()),
        WorkspaceError::Io { .. } => BackendError::Internal(e.to_string()),
    }
}

#[async_trait::async_trait]
impl BackendSandbox for JailSandbox {
    async fn set_egress(
        &self,
        rules: warden_types::egress::GatewayRules,
    ) -> Result<(), BackendError> {
        let mut network = self.network.lock().expect("not poisoned");
        match network.as_mut().and_then(|n| n.egress.gateway.as_mut()) {
            Some(gateway) => {
                *gateway = rules;
                self.rules_generation
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            None => Err(BackendError::Refused(warden_engine::NO_GATEWAY.into())),
        }
    }

    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        self.run(plan, events, None).await
    }

    async fn exec_with_stdin(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
        stdin: StdinReceiver,
    ) -> Result<ExecResult, BackendError> {
        self.run(plan, events, Some(stdin)).await
    }

    async fn write_file(&self, path: &WorkspacePath, bytes: Vec<u8>) -> Result<(), BackendError> {
        let _not_during_a_copy = self.copying.read().await;
        let workspace = self.workspace()?;
        let path = path.clone();
        blocking(move || workspace.write_file(&path, &bytes).map_err(workspace_error)).await
    }

    async fn read_file(
        &self,
        path: &WorkspacePath,
        max_bytes: u64,
    ) -> Result<Vec<u8>, BackendError> {
        let workspace = self.workspace()?;
        let path = path.clone();
        blocking(move || {
            workspace
                .read_file(&path, max_bytes)
                .map_err(workspace_error)
        })
        .await
    }

    async fn list_files(&self, max_entries: usize) -> Result<Vec<FileEntry>, BackendError> {
        let workspace = self.workspace()?;
        blocking(move || workspace.list(max_entries).map_err(workspace_error)).await
    }

    /// Kills a running execution (its helper is killed and reaped, which ends the sandbox's
    /// processes), removes the cgroups it could not, and drops the workspace: the tmpfs goes
    /// with the last descriptor.
    async fn destroy(&self) -> Result<(), BackendError> {
        let mut killed = self.turns.try_write().is_err();
        self.destroyed.send_replace(true);
        let _turn = self.turns.write().await;
        // Frozen processes cannot die.
        if let Err(e) = self.thaw_if_paused().await {
            eprintln!("warden: thawing sandbox {} before its end: {e}", self.id);
        }
        self.workspace.lock().expect("not poisoned").take();
        let contexts = std::mem::take(&mut *self.contexts.lock().expect("not poisoned"));
        for slot in contexts.into_values() {
            if let Some(live) = slot.lock().await.live.take() {
                killed |= live.close().await;
            }
        }
        if killed {
            // A killed helper could not remove its cgroup.
            Self::remove_stale_cgroups().await?;
        }
        Ok(())
    }

    async fn create_context(&self, spec: ContextSpec) -> Result<(), BackendError> {
        let _turn = self.turn().await?;
        if self
            .contexts
            .lock()
            .expect("not poisoned")
            .contains_key(&spec.id)
        {
            return Err(BackendError::Refused(format!(
                "context {:?} exists already",
                spec.id
            )));
        }
        let live = self.start_context(&spec).await?;
        let id = spec.id.clone();
        let slot = ContextSlot {
            spec,
            live: Some(live),
            restart_untold: false,
            evicted: false,
        };
        // Another create of the same id may have run beside this one (turns are shared).
        let raced = {
            let mut contexts = self.contexts.lock().expect("not poisoned");
            if contexts.contains_key(&id) {
                Some(slot)
            } else {
                contexts.insert(id.clone(), Arc::new(tokio::sync::Mutex::new(slot)));
                None
            }
        };
        if let Some(mut slot) = raced {
            if let Some(live) = slot.live.take()
                && live.close().await
            {
                Self::remove_stale_cgroups().await?;
            }
            return Err(BackendError::Refused(format!(
                "context {id:?} exists already"
            )));
        }
        Ok(())
    }

    async fn exec_in_context(
        &self,
        id: &str,
        cell: CellPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let _turn = self.turn().await?;
        let slot = self.context_slot(id)?;
        let mut slot = slot.lock().await;
        let workspace = self.workspace()?;
        let known_outputs = blocking(move || Ok(workspace.output_stamps())).await?;
        // An interpreter that died since the last cell (its state is gone) is replaced first,
        // and the result says so.
        let mut restarted = std::mem::take(&mut slot.restart_untold);
        if let Some(live) = slot.live.as_mut()
            && !live.is_alive()
        {
            if let Some(dead) = slot.live.take() {
                dead.close().await;
            }
            restarted = true;
        }
        // The gateway's rules changed since this interpreter started: its session's gateway
        // has the old ones, so a fresh interpreter with the new rules (its variables are lost,
        // and the result says so).
        let generation = self
            .rules_generation
            .load(std::sync::atomic::Ordering::SeqCst);
        if slot
            .live
            .as_ref()
            .is_some_and(|l| l.rules_generation != generation)
        {
            if let Some(old) = slot.live.take() {
                old.close().await;
            }
            restarted = true;
        }
        if slot.live.is_none() {
            if slot.evicted {
                // Its saved state first; a restore that ended the interpreter lost it.
                if let Err(e) = self.restore_into(id, &mut slot, cell.timeout).await {
                    eprintln!("warden: restoring context {id} of {}: {e}", self.id);
                    restarted = true;
                }
            }
            if slot.live.is_none() {
                let live = self.start_context(&slot.spec).await?;
                slot.live = Some(live);
            }
        }
        let request = CellRequest {
            code: cell.code,
            timeout_ms: cell.timeout.as_millis() as u64,
            grace_ms: cell.interrupt_grace.as_millis() as u64,
            known_outputs,
            state: None,
        };
        let mut cancel = self.destroyed.subscribe();
        let outcome = {
            let live = slot.live.as_mut().expect("started above");
            tokio::select! {
                end = live.exec(&request, events) => Some(end),
                () = async { drop(cancel.wait_for(|destroyed| *destroyed).await) } => None,
            }
        };
        match outcome {
            Some(Ok(CellEnd::Alive(mut result))) => {
                if restarted {
                    result.cell.context_restarted = Some(true);
                }
                Ok(result)
            }
            Some(Ok(CellEnd::Died(mut result))) => {
                // The state is gone: start a fresh interpreter now, so the next cell finds one.
                if let Some(old) = slot.live.take() {
                    old.close().await;
                }
                match self.start_context(&slot.spec).await {
                    Ok(live) => slot.live = Some(live),
                    // The next cell tries again.
                    Err(e) => eprintln!("warden: restarting context {id} of {}: {e}", self.id),
                }
                result.cell.context_restarted = Some(true);
                Ok(result)
            }
            Some(Err(e)) => {
                if let Some(live) = slot.live.take() {
                    live.kill().await;
                }
                if matches!(e, BackendError::ImportRefused(_)) {
                    slot.restart_untold = true;
                    // The guard ended the interpreter (its state is gone): a fresh one now,
                    // so that the next cell finds it, as after any death of the interpreter.
                    match self.start_context(&slot.spec).await {
                        Ok(live) => slot.live = Some(live),
                        Err(e) => eprintln!("warden: restarting context {id} of {}: {e}", self.id),
                    }
                }
                Err(e)
            }
            None => {
                if let Some(live) = slot.live.take() {
                    live.kill().await;
                }
                Err(BackendError::Gone(
                    "the sandbox was destroyed during this execution".into(),
                ))
            }
        }
    }

    async fn restart_context(&self, id: &str) -> Result<(), BackendError> {
        let _turn = self.turn().await?;
        let slot = self.context_slot(id)?;
        let mut slot = slot.lock().await;
        if let Some(old) = slot.live.take()
            && old.close().await
        {
            Self::remove_stale_cgroups().await?;
        }
        if std::mem::take(&mut slot.evicted) {
            // A restart starts afresh: the saved state is not loaded, and not left behind.
            let workspace = self.workspace()?;
            let state = state_file(id)?;
            blocking(move || workspace.remove_file(&state).map_err(workspace_error)).await?;
        }
        let live = self.start_context(&slot.spec).await?;
        slot.live = Some(live);
        Ok(())
    }

    async fn evict_context(&self, id: &str, timeout: Duration) -> Result<Eviction, BackendError> {
        let _turn = self.turn().await?;
        let slot = self.context_slot(id)?;
        let mut slot = slot.lock().await;
        let Some(eviction) = save_state(id, &mut slot, timeout).await? else {
            // No interpreter (evicted already, or a restart that failed): nothing held.
            return Ok(Eviction {
                saved: Vec::new(),
                unsaved: Vec::new(),
                bytes: 0,
            });
        };
        if let Some(live) = slot.live.take()
            && live.close().await
        {
            Self::remove_stale_cgroups().await?;
        }
        slot.evicted = true;
        Ok(eviction)
    }

    async fn restore_context(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<Restoration>, BackendError> {
        let _turn = self.turn().await?;
        let slot = self.context_slot(id)?;
        let mut slot = slot.lock().await;
        if !slot.evicted {
            return Ok(None);
        }
        self.restore_into(id, &mut slot, timeout).await.map(Some)
    }

    /// The eviction's save ([`save_state`]) with the interpreter left running; a paused
    /// sandbox is thawed for it and frozen again after, with the turn held alone: a use beside
    /// it (a cell, an eviction, another copy's save) would find the sandbox thawed, run, and be
    /// frozen under it by the save's freeze (CI's schemathesis saw an evicting pause beside a
    /// fork wait out its timeout, grace and margin, then fail). A running sandbox's save shares
    /// the turn, as a cell does.
    async fn save_context(&self, id: &str, timeout: Duration) -> Result<Eviction, BackendError> {
        // No pause comes while a share is held (it needs the turn alone), so a sandbox running
        // now runs until the save is done.
        let mut shared = Some(self.turns.read().await);
        let mut alone = None;
        if self.paused.load(std::sync::atomic::Ordering::Acquire) {
            drop(shared.take());
            alone = Some(self.turns.write().await);
        }
        let was_paused = alone.is_some() && self.paused.load(std::sync::atomic::Ordering::Acquire);
        let slot = self.context_slot(id)?;
        // Thawed (and frozen again) without this context's slot locked: `set_frozen` locks
        // every slot in turn, this one included (a save of a paused sandbox's context waited
        // on itself for ever).
        if was_paused {
            self.set_frozen(false).await?;
        }
        let saved = {
            let mut slot = slot.lock().await;
            if slot.evicted {
                Err(BackendError::Refused(format!(
                    "context {id:?} is evicted: its state is saved already"
                )))
            } else {
                save_state(id, &mut slot, timeout).await
            }
        };
        if was_paused && let Err(e) = self.set_frozen(true).await {
            eprintln!(
                "warden: freezing sandbox {} again after a save: {e}",
                self.id
            );
        }
        Ok(saved?.unwrap_or(Eviction {
            saved: Vec::new(),
            unsaved: Vec::new(),
            bytes: 0,
        }))
    }

    async fn discard_saved_context(&self, id: &str) -> Result<(), BackendError> {
        let slot = self.context_slot(id)?;
        if slot.lock().await.evicted {
            // Its restore needs it.
            return Ok(());
        }
        let workspace = self.workspace()?;
        let state = state_file(id)?;
        blocking(move || workspace.remove_file(&state).map_err(workspace_error)).await
    }

    /// A context with a state file in the workspace (an eviction's before a restart of the
    /// daemon, a snapshot's or a fork's copy) is registered evicted, with no interpreter.
    async fn adopt_context(&self, spec: ContextSpec) -> Result<bool, BackendError> {
        let _turn = self.turns.read().await;
        let workspace = self.workspace()?;
        let state = state_file(&spec.id)?;
        let found = blocking(move || workspace.has_file(&state).map_err(workspace_error)).await?;
        if !found {
            return Ok(false);
        }
        let mut contexts = self.contexts.lock().expect("not poisoned");
        if contexts.contains_key(&spec.id) {
            return Err(BackendError::Refused(format!(
                "context {:?} exists already",
                spec.id
            )));
        }
        contexts.insert(
            spec.id.clone(),
            Arc::new(tokio::sync::Mutex::new(ContextSlot {
                spec,
                live: None,
                restart_untold: false,
                evicted: true,
            })),
        );
        Ok(true)
    }

    async fn pause(&self) -> Result<(), BackendError> {
        let _turn = self
            .turns
            .try_write()
            .map_err(|_| BackendError::Busy(warden_engine::PAUSE_BUSY.into()))?;
        self.workspace()?;
        self.set_frozen(true).await
    }

    async fn resume(&self) -> Result<(), BackendError> {
        let _turn = self.turns.read().await;
        self.workspace()?;
        self.thaw_if_paused().await
    }

    /// Copies the durable workspace as of one instant: after a running execution (the turn),
    /// with every context's processes frozen (the cgroup freezer: nothing of the sandbox
    /// writes) and the files API's writes held, its filesystem synced, then copied; a paused
    /// sandbox stays paused, another is thawed after the copy.
    async fn snapshot_to(&self, dir: &std::path::Path) -> Result<(), BackendError> {
        let _turn = self.turns.write().await;
        let workspace = self.workspace()?;
        let _no_writes = self.copying.write().await;
        let was_paused = self.paused.load(std::sync::atomic::Ordering::Acquire);
        if !was_paused {
            self.set_frozen(true).await?;
        }
        let dir = dir.to_path_buf();
        let copied = blocking(move || {
            workspace
                .snapshot_to(&dir)
                .map_err(crate::backend::disk_error)
        })
        .await;
        if !was_paused && let Err(e) = self.set_frozen(false).await {
            eprintln!("warden: thawing sandbox {} after a copy: {e}", self.id);
        }
        copied
    }

    async fn context_alive(&self, id: &str) -> bool {
        if self.workspace().is_err() {
            return false;
        }
        let Ok(slot) = self.context_slot(id) else {
            return false;
        };
        // A slot held by a running cell is in use, so certainly not waiting in a pool; the
        // caller asks only about idle sandboxes and gets `false` here rather than a wait.
        let Ok(mut slot) = slot.try_lock() else {
            return false;
        };
        slot.live.as_mut().is_some_and(|live| live.is_alive())
    }

    async fn destroy_context(&self, id: &str) -> Result<(), BackendError> {
        let Some(slot) = self.contexts.lock().expect("not poisoned").remove(id) else {
            // Never taken up since a restart of the daemon or a copy: a state it left in the
            // workspace goes with it.
            let Ok(workspace) = self.workspace() else {
                return Ok(());
            };
            let state = state_file(id)?;
            return blocking(move || workspace.remove_file(&state).map_err(workspace_error)).await;
        };
        // A running cell holds the slot; destroying waits for it (its timeout bounds that).
        let (live, evicted) = {
            let mut slot = slot.lock().await;
            (slot.live.take(), slot.evicted)
        };
        if evicted {
            let workspace = self.workspace()?;
            let state = state_file(id)?;
            blocking(move || workspace.remove_file(&state).map_err(workspace_error)).await?;
        }
        // A frozen interpreter cannot end: thaw its runs (the others stay as they are).
        if self.paused.load(std::sync::atomic::Ordering::Acquire)
            && let Some(pid) = live.as_ref().and_then(JailContext::helper_pid)
        {
            blocking(move || {
                if let Ok(h) = Hierarchy::detect() {
                    let _ = h.freeze_runs_of(pid, false);
                }
                Ok(())
            })
            .await?;
        }
        if let Some(live) = live
            && live.close().await
        {
            Self::remove_stale_cgroups().await?;
        }
        Ok(())
    }
}
