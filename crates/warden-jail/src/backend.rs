//! The jail as an engine [`Backend`]: builds the [`JailPlan`], starts the helper process with
//! it, turns the helper's frames into events and the final result.
//!
//! Invariants: the helper is single-threaded — exec'd with an empty environment (the daemon's
//! variables never reach a sandbox), or forked only when the caller has exactly one thread;
//! a caller that goes away before the result ends the sandbox (its processes killed through
//! its cgroup, the helper then tears down; killed outright after a grace period), and a helper
//! that outlives the plan's timeout by a safety margin is killed — a stuck helper becomes an
//! error, never a hang.

use crate::cgroup::Hierarchy;
use crate::context::{CellEnd, JailContext};
use crate::helper::HELPER_ENV;
use crate::plan::{CODE_DIR, IdMap, JailPlan, PlanInput};
use crate::protocol::{self, HelperError, Tag};
use crate::session::CellRequest;
use crate::workspace::{Workspace, WorkspaceError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_engine::{
    Backend, BackendError, BackendSandbox, CellPlan, ContextSpec, EventSender, ExecPlan,
    SandboxSpec,
};
use warden_types::{ExecEvent, ExecResult, FileEntry, WorkspacePath};

/// What the jail needs from the settings.
#[derive(Debug, Clone)]
pub struct JailSettings {
    pub host_paths: Vec<PathBuf>,
    /// See [`crate::cgroup::ensure_fast_attach`].
    pub fast_cgroup_attach: bool,
    pub ids: IdMap,
    /// The binary to re-execute as the helper (normally the running `warden`).
    pub helper_exe: PathBuf,
    /// Fork the helper instead of exec'ing it when this process has a single thread (the
    /// one-shot CLI). A multi-threaded process always execs.
    pub fork_when_single_threaded: bool,
    /// Block until a forked helper has removed its sandbox, after the result is in. A process
    /// about to exit must: as pid 1 of a pid namespace (a container's entry point), its exit
    /// would kill the helper before its clean-up.
    pub wait_for_teardown: bool,
    /// The host side of networked sandboxes.
    pub network: NetSettings,
}

/// How networked sandboxes are wired to the host (`[sandbox.jail.network]`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetSettings {
    /// The IPv4 range cut into one /30 per networked sandbox.
    pub pool: warden_types::egress::Cidr,
    /// The IPv6 range cut into one /126 per networked sandbox (same index as its /30).
    pub pool6: warden_types::egress::Cidr,
    /// The resolver the per-sandbox DNS server asks; `None`: the host's /etc/resolv.conf.
    pub upstream_dns: Option<std::net::SocketAddr>,
}

impl Default for NetSettings {
    fn default() -> Self {
        NetSettings {
            pool: "10.213.0.0/16".parse().expect("a valid CIDR"),
            pool6: warden_net::DEFAULT_POOL6.parse().expect("a valid CIDR"),
            upstream_dns: None,
        }
    }
}

/// What a networked sandbox asks of the host; `None` for an offline one.
fn net_request(
    settings: &NetSettings,
    network_enabled: bool,
    egress: &warden_types::egress::EgressPolicy,
) -> Result<Option<warden_net::NetRequest>, BackendError> {
    if !network_enabled {
        return Ok(None);
    }
    let upstream_dns = match settings.upstream_dns {
        Some(a) => a,
        None => std::fs::read_to_string("/etc/resolv.conf")
            .ok()
            .and_then(|s| first_nameserver(&s))
            .ok_or_else(|| {
                BackendError::Refused(
                    "network_enabled = true: no upstream resolver (set [sandbox.jail.network].upstream_dns, or a nameserver in /etc/resolv.conf)".into(),
                )
            })?,
    };
    Ok(Some(warden_net::NetRequest {
        egress: egress.clone(),
        pool: settings.pool,
        pool6: settings.pool6,
        upstream_dns,
    }))
}

/// The first `nameserver` of a resolv.conf, on port 53.
fn first_nameserver(resolv_conf: &str) -> Option<std::net::SocketAddr> {
    resolv_conf.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next() == Some("nameserver"))
            .then(|| words.next()?.parse::<std::net::IpAddr>().ok())
            .flatten()
            .map(|ip| std::net::SocketAddr::new(ip, 53))
    })
}

#[derive(Debug)]
pub struct JailBackend {
    settings: JailSettings,
    hierarchy: Result<Hierarchy, String>,
    /// Forked helpers not yet reaped (reaped without blocking at the next run).
    forked: std::sync::Mutex<Vec<libc::pid_t>>,
    /// A helper forked early by the caller, already creating its sandbox.
    prestarted: std::sync::Mutex<Option<Prestarted>>,
}

/// A helper forked early from a single-threaded process: it is already creating its sandbox's
/// namespaces and waits for the plan. Dropping it unused closes the plan pipe, and the helper
/// then removes its sandbox and exits.
#[derive(Debug)]
pub struct Prestarted {
    parts: Option<HelperParts>,
}

#[derive(Debug)]
struct HelperParts {
    pid: libc::pid_t,
    plan_w: std::os::fd::OwnedFd,
    /// Rung once the plan is in the pipe (see `supervisor::send_plan`).
    plan_bell: std::os::fd::OwnedFd,
    frames_r: std::os::fd::OwnedFd,
}

impl Drop for Prestarted {
    /// An unused helper: closing the plan pipe tells it to remove its sandbox; wait for that,
    /// so a caller that exits next (as pid 1 of a pid namespace, its exit kills the helper)
    /// leaves nothing behind.
    fn drop(&mut self) {
        if let Some(HelperParts { pid, plan_w, .. }) = self.parts.take() {
            drop(plan_w);
            // SAFETY: waitpid on our own child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        }
    }
}

impl Prestarted {
    /// Forks a helper if this process has exactly one thread; `None` otherwise or on failure.
    pub fn fork_if_single_threaded() -> Option<Prestarted> {
        if !single_threaded() {
            return None;
        }
        let (plan_r, plan_w) = crate::sys::pipe().ok()?;
        let plan_bell = crate::sys::eventfd().ok()?;
        let (frames_r, frames_w) = crate::sys::pipe().ok()?;
        let placement = OtherCpu::before_fork();
        // SAFETY: getpid has no preconditions.
        let caller_pid = unsafe { libc::getpid() };
        // SAFETY: this process has one thread, so the child gets a consistent copy of it; the
        // child only runs `helper::serve` and then `_exit`s, never returning to the caller.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return None;
        }
        if pid == 0 {
            if let Some(placement) = placement {
                placement.in_child();
            }
            drop((plan_w, frames_r));
            // The helper must not hold the caller's stdin or stdout open (its standard error
            // goes once the result is out: `helper::finish`).
            crate::sys::redirect_to_null(&[0, 1]);
            let mut out =
                std::io::BufWriter::with_capacity(64 * 1024, std::fs::File::from(frames_w));
            // The caller, unless it is pid 1 (a container's entry point, which waits for this
            // helper's exit: `JailSettings::wait_for_teardown`) or already gone.
            let caller = (caller_pid != 1)
                .then(|| crate::sys::pidfd_open(caller_pid).ok())
                .flatten()
                // SAFETY: getppid has no preconditions.
                .filter(|_| unsafe { libc::getppid() } == caller_pid);
            let code = crate::helper::serve_forked(plan_r, plan_bell, caller, &mut out);
            drop(out);
            // SAFETY: leave without running the parent's destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        if let Some(placement) = placement {
            placement.in_parent(pid);
        }
        Some(Prestarted {
            parts: Some(HelperParts {
                pid,
                plan_w,
                plan_bell,
                frames_r,
            }),
        })
    }
}

/// Starts the forked helper on another CPU than its parent's. The kernel queues a forked
/// child on its parent's CPU more often than not, even with the other CPU idle, and the child
/// then waits there until the parent sleeps (measured with `perf sched`: the helper runnable
/// for 0.64 ms while the CLI built its plan), so the namespaces it should be creating
/// meanwhile are created only after. The parent narrows the child's CPUs to the others, which
/// moves it at once; the child, once told, widens them back to the parent's own before it
/// creates anything, so the sandbox keeps every CPU the caller allowed.
struct OtherCpu {
    allowed: libc::cpu_set_t,
    others: libc::cpu_set_t,
    /// A byte from the parent once the child's CPUs are narrowed (or could not be); end of
    /// file if the parent died first.
    placed_r: std::os::fd::OwnedFd,
    placed_w: std::os::fd::OwnedFd,
}

impl OtherCpu {
    /// `None` when this process may run on one CPU only (nothing to gain) or on error.
    fn before_fork() -> Option<OtherCpu> {
        let allowed = crate::sys::cpu_affinity(0).ok()?;
        let here = crate::sys::current_cpu()
            .ok()
            .filter(|&cpu| cpu < libc::CPU_SETSIZE as usize)?;
        let mut others = allowed;
        // SAFETY: CPU_CLR and CPU_COUNT only touch the set; `here` is below CPU_SETSIZE.
        unsafe {
            libc::CPU_CLR(here, &mut others);
            if libc::CPU_COUNT(&others) == 0 {
                return None;
            }
        }
        let (placed_r, placed_w) = crate::sys::pipe().ok()?;
        Some(OtherCpu {
            allowed,
            others,
            placed_r,
            placed_w,
        })
    }

    fn in_parent(self, child: libc::pid_t) {
        use std::os::fd::AsFd;
        let _ = crate::sys::set_cpu_affinity(child, &self.others);
        let _ = crate::sys::write_all(self.placed_w.as_fd(), b"p");
    }

    fn in_child(self) {
        use std::os::fd::AsFd;
        let OtherCpu {
            allowed,
            placed_r,
            placed_w,
            ..
        } = self;
        drop(placed_w);
        let mut byte = [0u8; 1];
        let _ = crate::sys::read(placed_r.as_fd(), &mut byte);
        let _ = crate::sys::set_cpu_affinity(0, &allowed);
    }
}

/// Whether this process has exactly one thread, so that fork is safe.
fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|n| n.trim() == "1"))
        })
        .unwrap_or(false)
}

impl JailBackend {
    pub fn new(settings: JailSettings) -> JailBackend {
        JailBackend {
            settings,
            hierarchy: Hierarchy::detect().map_err(|e| format!("cannot read cgroup layout: {e}")),
            forked: std::sync::Mutex::new(Vec::new()),
            prestarted: std::sync::Mutex::new(None),
        }
    }

    /// Hands over a helper forked early; the next run uses it.
    pub fn adopt(self, prestarted: Option<Prestarted>) -> JailBackend {
        *self.prestarted.lock().expect("not poisoned") = prestarted;
        self
    }

    /// Builds the helper's plan for an engine plan.
    pub fn plan(&self, plan: &ExecPlan) -> Result<JailPlan, BackendError> {
        let code_file = PathBuf::from(CODE_DIR).join(&plan.file_name);
        let mut argv = plan.command.clone();
        argv.push(code_file.display().to_string());
        argv.extend(plan.args.iter().cloned());
        JailPlan::build(PlanInput {
            argv,
            code: plan.code.clone(),
            code_file_name: plan.file_name.clone(),
            stdin: plan.stdin.clone(),
            limits: plan.limits.clone(),
            host_paths: &self.settings.host_paths,
            ids: self.settings.ids,
            extra_env: vec![],
            shared_workspace_fd: None,
        })
        .map_err(|e| BackendError::Refused(e.to_string()))
        .and_then(|mut jail_plan| {
            jail_plan.network =
                net_request(&self.settings.network, plan.network_enabled, &plan.egress)?.map(
                    |request| crate::plan::JailNetwork {
                        request,
                        interface: None,
                    },
                );
            Ok(jail_plan)
        })
    }
}

/// What a sandbox needs of its backend to start runs: always exec'd helpers (the daemon is
/// multi-threaded).
#[derive(Debug, Clone)]
struct SandboxPart {
    helper_exe: PathBuf,
    host_paths: Vec<PathBuf>,
    ids: IdMap,
    fast_cgroup_attach: bool,
}

impl JailBackend {
    fn sandbox_part(&self) -> SandboxPart {
        SandboxPart {
            helper_exe: self.settings.helper_exe.clone(),
            host_paths: self.settings.host_paths.clone(),
            ids: self.settings.ids,
            fast_cgroup_attach: self.settings.fast_cgroup_attach,
        }
    }
}

/// A jail sandbox with a lifetime: a workspace tmpfs held by the daemon; each execution is a
/// fresh jail (namespaces, cgroup, seccomp: as a one-shot run) with that workspace attached.
/// Executions run one at a time.
#[derive(Debug)]
pub struct JailSandbox {
    id: String,
    backend: SandboxPart,
    /// A networked sandbox: each execution gets its own link and firewall with these rules.
    network: Option<warden_net::NetRequest>,
    /// `None` once destroyed. A run holds its own reference until it ends.
    workspace: std::sync::Mutex<Option<Arc<Workspace>>>,
    one_at_a_time: tokio::sync::Mutex<()>,
    /// Set by `destroy`: a running execution is killed.
    destroyed: tokio::sync::watch::Sender<bool>,
    /// The contexts, by id: each its own helper and sandbox (see [`crate::context`]).
    contexts: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<ContextSlot>>>>,
}

/// A context: what it was created with, and its running interpreter (`None` between a failed
/// restart and the next cell, which starts one).
#[derive(Debug)]
struct ContextSlot {
    spec: ContextSpec,
    live: Option<JailContext>,
}

impl JailSandbox {
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
            extra_env: vec![("WARDEN_RESULT_BUDGET".into(), budget.to_string())],
            shared_workspace_fd: Some(crate::helper::INHERITED_WORKSPACE_FD),
        })
        .map_err(|e| BackendError::Refused(e.to_string()))?;
        plan.session = true;
        plan.fast_cgroup_attach = b.fast_cgroup_attach;
        // A networked sandbox's interpreter has the sandbox's egress, by the same rules.
        plan.network = self
            .network
            .clone()
            .map(|request| crate::plan::JailNetwork {
                request,
                interface: None,
            });
        plan.trace_timing = std::env::var_os("WARDEN_TRACE_TIMING").is_some();
        Ok(plan)
    }

    async fn start_context(&self, spec: &ContextSpec) -> Result<JailContext, BackendError> {
        let workspace = self.workspace()?;
        let plan = self.context_plan(spec)?;
        use std::os::fd::AsRawFd;
        JailContext::start(&self.backend.helper_exe, &plan, workspace.fd().as_raw_fd()).await
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

fn workspace_error(e: WorkspaceError) -> BackendError {
    match e {
        WorkspaceError::NotFound { .. } => BackendError::NotFound(e.to_string()),
        WorkspaceError::Refused { .. } => BackendError::BadPath(e.to_string()),
        WorkspaceError::Io { .. } => BackendError::Internal(e.to_string()),
    }
}

/// Runs blocking workspace I/O off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BackendError> + Send + 'static,
) -> Result<T, BackendError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BackendError::Internal(format!("workspace task: {e}")))?
}

#[async_trait::async_trait]
impl BackendSandbox for JailSandbox {
    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let _turn = self.one_at_a_time.lock().await;
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
            extra_env: vec![],
            shared_workspace_fd: Some(crate::helper::INHERITED_WORKSPACE_FD),
        })
        .map_err(|e| BackendError::Refused(e.to_string()))?;
        jail_plan.fast_cgroup_attach = b.fast_cgroup_attach;
        jail_plan.network = self
            .network
            .clone()
            .map(|request| crate::plan::JailNetwork {
                request,
                interface: None,
            });
        jail_plan.known_outputs = {
            let workspace = workspace.clone();
            blocking(move || Ok(workspace.output_stamps())).await?
        };
        jail_plan.trace_timing = std::env::var_os("WARDEN_TRACE_TIMING").is_some();
        let margin = plan.limits.timeout + Duration::from_secs(10);
        use std::os::fd::AsRawFd;
        let fd = workspace.fd().as_raw_fd();
        let cancel = self.destroyed.subscribe();
        exec_helper(
            &b.helper_exe,
            &jail_plan,
            events,
            margin,
            Some(fd),
            Some(cancel),
        )
        .await
    }

    async fn write_file(&self, path: &WorkspacePath, bytes: Vec<u8>) -> Result<(), BackendError> {
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
        let mut killed = self.one_at_a_time.try_lock().is_err();
        self.destroyed.send_replace(true);
        let _turn = self.one_at_a_time.lock().await;
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
        let _turn = self.one_at_a_time.lock().await;
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
        };
        self.contexts
            .lock()
            .expect("not poisoned")
            .insert(id, Arc::new(tokio::sync::Mutex::new(slot)));
        Ok(())
    }

    async fn exec_in_context(
        &self,
        id: &str,
        cell: CellPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let _turn = self.one_at_a_time.lock().await;
        let slot = self.context_slot(id)?;
        let mut slot = slot.lock().await;
        let workspace = self.workspace()?;
        let known_outputs = blocking(move || Ok(workspace.output_stamps())).await?;
        // An interpreter that died since the last cell (its state is gone) is replaced first,
        // and the result says so.
        let mut restarted = false;
        if let Some(live) = slot.live.as_mut()
            && !live.is_alive()
        {
            if let Some(dead) = slot.live.take() {
                dead.close().await;
            }
            restarted = true;
        }
        if slot.live.is_none() {
            let live = self.start_context(&slot.spec).await?;
            slot.live = Some(live);
        }
        let request = CellRequest {
            code: cell.code,
            timeout_ms: cell.timeout.as_millis() as u64,
            grace_ms: cell.interrupt_grace.as_millis() as u64,
            known_outputs,
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
        let _turn = self.one_at_a_time.lock().await;
        let slot = self.context_slot(id)?;
        let mut slot = slot.lock().await;
        if let Some(old) = slot.live.take()
            && old.close().await
        {
            Self::remove_stale_cgroups().await?;
        }
        let live = self.start_context(&slot.spec).await?;
        slot.live = Some(live);
        Ok(())
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
            return Ok(());
        };
        // A running cell holds the slot; destroying waits for it (its timeout bounds that).
        let live = slot.lock().await.live.take();
        if let Some(live) = live
            && live.close().await
        {
            Self::remove_stale_cgroups().await?;
        }
        Ok(())
    }
}

/// Decodes output chunks as UTF-8 across chunk boundaries: a character split between two
/// reads is held back until it is whole.
#[derive(Debug, Default)]
struct Utf8Carry(Vec<u8>);

impl Utf8Carry {
    fn push(&mut self, chunk: &[u8]) -> String {
        self.0.extend_from_slice(chunk);
        let valid_up_to = match std::str::from_utf8(&self.0) {
            Ok(_) => self.0.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.0.len(),
        };
        let rest = self.0.split_off(valid_up_to);
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0 = rest;
        text
    }
}

#[async_trait::async_trait]
impl Backend for JailBackend {
    fn name(&self) -> &'static str {
        "jail"
    }

    fn supports_contexts(&self) -> bool {
        true
    }

    fn unsupported(&self) -> Vec<warden_engine::Unsupported> {
        vec![warden_engine::Unsupported {
            promise: "orphans",
            why: "a jail sandbox cannot outlive the daemon that holds its workspace, so remove_orphans has nothing to find and does not remove sandboxes the caller forgot".into(),
        }]
    }

    fn check(&self, plan: &ExecPlan) -> Result<(), BackendError> {
        // A networked sandbox runs only behind Warden's own link and firewall; a host that
        // cannot provide them refuses the profile rather than run it on the host's network.
        if let Some(request) =
            net_request(&self.settings.network, plan.network_enabled, &plan.egress)?
        {
            warden_net::check(&request)
                .map_err(|e| BackendError::Refused(format!("network_enabled = true: {e}")))?;
        }
        if let Some(runtime) = &plan.container_runtime {
            return Err(BackendError::Refused(format!(
                "container_runtime = {runtime:?}: the jail backend is not a container runtime; use backend = \"docker\" for it"
            )));
        }
        let hierarchy = self
            .hierarchy
            .as_ref()
            .map_err(|e| BackendError::Refused(e.clone()))?;
        let have = hierarchy.controllers();
        for (controller, limit) in [("memory", "memory"), ("pids", "process"), ("cpu", "cpu")] {
            if !have.contains(&controller) {
                return Err(BackendError::Refused(format!(
                    "the {limit} limit cannot be applied: no cgroup {controller} controller on this host ({})",
                    hierarchy.describe()
                )));
            }
        }
        Ok(())
    }

    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let timeout = plan.limits.timeout;
        let trace = std::env::var_os("WARDEN_TRACE_TIMING").is_some();
        if trace {
            eprintln!("warden-trace: {:.3} backend exec", crate::monotonic_ms());
        }
        let mut jail_plan = self.plan(&plan)?;
        jail_plan.trace_timing = trace;
        if trace {
            eprintln!(
                "warden-trace: {:.3} backend plan built",
                crate::monotonic_ms()
            );
        }
        jail_plan.fast_cgroup_attach = self.settings.fast_cgroup_attach;
        jail_plan.cgroups = self.hierarchy.as_ref().ok().cloned();
        self.reap_forked();
        let margin = timeout + Duration::from_secs(10);
        let prestarted = self.prestarted.lock().expect("not poisoned").take();
        let prestarted = prestarted.or_else(|| {
            self.settings
                .fork_when_single_threaded
                .then(Prestarted::fork_if_single_threaded)
                .flatten()
        });
        if let Some(HelperParts {
            pid,
            plan_w,
            plan_bell,
            frames_r,
        }) = prestarted.and_then(|mut p| p.parts.take())
        {
            let guard = KillHelperOnDrop(Some(pid as u32));
            let internal = |e: std::io::Error| BackendError::Internal(format!("helper pipe: {e}"));
            let frames =
                tokio::net::unix::pipe::Receiver::from_owned_fd(frames_r).map_err(internal)?;
            // The plan fits the pipe (or the helper reads it as it comes): a blocking write.
            let send = async {
                let payload = encode_plan(&jail_plan)?;
                crate::supervisor::send_plan(plan_w, std::os::fd::AsFd::as_fd(&plan_bell), &payload)
                    .map_err(|e| std::io::Error::other(e.to_string()))
            };
            let result = converse(&jail_plan, send, frames, events, margin).await;
            std::mem::forget(guard);
            if result.is_err() {
                // SAFETY: kill and waitpid on our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            } else if self.settings.wait_for_teardown {
                // SAFETY: waitpid on our own child, which exits after its clean-up.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            } else {
                self.forked.lock().expect("not poisoned").push(pid);
                self.reap_forked();
            }
            return result;
        }
        exec_helper(
            &self.settings.helper_exe,
            &jail_plan,
            events,
            margin,
            None,
            None,
        )
        .await
    }

    async fn create_sandbox(
        &self,
        spec: SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        let network = net_request(&self.settings.network, spec.network_enabled, &spec.egress)?;
        if let Some(request) = &network {
            warden_net::check(request)
                .map_err(|e| BackendError::Refused(format!("network_enabled = true: {e}")))?;
        }
        let workspace = Workspace::create(spec.limits.workspace_mb, self.settings.ids)
            .map_err(|e| BackendError::Setup(format!("create the workspace tmpfs: {e}")))?;
        Ok(Arc::new(JailSandbox {
            id: spec.id,
            backend: self.sandbox_part(),
            network,
            workspace: std::sync::Mutex::new(Some(Arc::new(workspace))),
            one_at_a_time: tokio::sync::Mutex::new(()),
            destroyed: tokio::sync::watch::Sender::new(false),
            contexts: std::sync::Mutex::new(BTreeMap::new()),
        }))
    }

    /// A sandbox's workspace is a detached tmpfs held only by the daemon's descriptor, so a
    /// crashed daemon leaves no mount or tmpfs; its helpers die with it (parent-death signal)
    /// and their sandboxes with them. What remains are the cgroups of the killed helpers,
    /// removed here (see [`crate::cgroup::Hierarchy::remove_stale`]), and what their
    /// networked runs left (a slot's rules and pinned addresses; the veth pair died with the
    /// namespace), emptied here as the next run on that slot would.
    async fn remove_orphans(&self, _live: &[String]) -> Result<usize, BackendError> {
        let pool = self.settings.network.pool;
        blocking(move || {
            let h = Hierarchy::detect()
                .map_err(|e| BackendError::Internal(format!("cgroup layout: {e}")))?;
            let mut removed = 0;
            // Processes of a sandbox whose helper was just killed may take a moment to go.
            for _ in 0..25 {
                removed += h.remove_stale();
                if !h.has_stale() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let mut sys = warden_net::sys::RealSys;
            removed += warden_net::sweep(pool, std::path::Path::new(warden_net::RUN_DIR), &mut sys);
            Ok(removed)
        })
        .await
    }
}

/// The command that starts an exec'd helper in `mode` (`1`: one run; `session`: a context),
/// with an empty environment, dying with this process, and with a sandbox's workspace at
/// [`crate::helper::INHERITED_WORKSPACE_FD`] if given.
pub(crate) fn helper_command(
    helper_exe: &std::path::Path,
    workspace: Option<std::os::fd::RawFd>,
    mode: &str,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(helper_exe);
    command
        .env_clear()
        .env(HELPER_ENV, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let target = crate::helper::INHERITED_WORKSPACE_FD;
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, dup2, fcntl) run.
    unsafe {
        command.pre_exec(move || {
            // The helper dies with the daemon (kill -9 included), and its sandbox with it
            // (init has the same setting towards the helper). Tokio spawns from its worker
            // threads, which live as long as the runtime.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            let moved = match workspace {
                // dup2 onto itself keeps close-on-exec: clear it instead.
                Some(fd) if fd == target => libc::fcntl(fd, libc::F_SETFD, 0),
                Some(fd) => libc::dup2(fd, target),
                None => 0,
            };
            if moved == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

/// Starts an exec'd helper (with a sandbox's workspace at
/// [`crate::helper::INHERITED_WORKSPACE_FD`], if given) and converses with it.
async fn exec_helper(
    helper_exe: &std::path::Path,
    jail_plan: &JailPlan,
    events: Option<EventSender>,
    margin: Duration,
    workspace: Option<std::os::fd::RawFd>,
    cancel: Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<ExecResult, BackendError> {
    let mut command = helper_command(helper_exe, workspace, "1");
    let mut child = command.spawn().map_err(|e| {
        BackendError::Internal(format!("start helper {}: {e}", helper_exe.display()))
    })?;
    // Until the result arrives, dropping this future (a caller that went away) ends the
    // sandbox through its cgroup and lets the helper tear it down (see `KillHelperOnDrop`);
    // after it, the helper finishes its clean-up on its own and is reaped in the background.
    let guard = KillHelperOnDrop(child.id());
    let helper_pid = child.id();
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let send = async move {
        let mut stdin = stdin;
        stdin.write_all(&encode_plan(jail_plan)?).await?;
        stdin.shutdown().await
    };
    let conversation = converse(jail_plan, send, stdout, events, margin);
    tokio::pin!(conversation);
    let mut cancelled = false;
    let result = match cancel {
        None => conversation.await,
        Some(mut cancel) => tokio::select! {
            result = &mut conversation => result,
            () = async { drop(cancel.wait_for(|destroyed| *destroyed).await) } => {
                // End the sandbox's processes; the helper then reports and removes the
                // sandbox (cgroup included) as after any run.
                cancelled = true;
                if let (Some(pid), Ok(h)) = (child.id(), Hierarchy::detect()) {
                    h.kill_runs_of(pid);
                }
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut conversation).await;
                Err(BackendError::Gone(
                    "the sandbox was destroyed during this execution".into(),
                ))
            }
        },
    };
    std::mem::forget(guard);
    if result.is_ok() {
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
    } else {
        // A helper that ends by itself right after its stream did was killed from outside (it
        // never ends without a result otherwise): its sandbox died with it (parent-death
        // signal), and its cgroup, which it would have removed, is left.
        let died = if cancelled {
            None
        } else {
            tokio::time::timeout(Duration::from_millis(500), child.wait())
                .await
                .ok()
                .and_then(Result::ok)
        };
        if died.is_none()
            && (!cancelled
                || tokio::time::timeout(Duration::from_secs(5), child.wait())
                    .await
                    .is_err())
        {
            let _ = child.start_kill();
        }
        let _ = child.wait().await;
        // Killed by a signal, that is (a helper that exits with a status ended by its own
        // fault: an internal error, as before).
        if let Some(status) = died
            && std::os::unix::process::ExitStatusExt::signal(&status).is_some()
            && matches!(result, Err(BackendError::Internal(_)))
        {
            // Its sandbox's processes are dying with it; make sure, then remove its leaves
            // once they are empty.
            let _ = blocking(move || {
                if let (Some(pid), Ok(h)) = (helper_pid, Hierarchy::detect()) {
                    for _ in 0..100 {
                        h.kill_runs_of(pid);
                        h.remove_stale();
                        if h.runs_of(pid).is_empty() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                Ok(())
            })
            .await;
            return Err(BackendError::Lost(format!(
                "the sandbox's helper ended ({status}) before the run did"
            )));
        }
    }
    result
}

fn encode_plan(plan: &JailPlan) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec(plan).map_err(|e| std::io::Error::other(format!("encode plan: {e}")))
}

/// Sends the plan to a helper (`send`) and reads its frames until the result, within
/// `margin`.
async fn converse(
    plan: &JailPlan,
    send: impl std::future::Future<Output = std::io::Result<()>>,
    from_helper: impl tokio::io::AsyncRead + Unpin,
    events: Option<EventSender>,
    margin: Duration,
) -> Result<ExecResult, BackendError> {
    let trace = plan.trace_timing;
    let write = async move {
        let sent = send.await;
        if trace {
            eprintln!(
                "warden-trace: {:.3} backend plan sent",
                crate::monotonic_ms()
            );
        }
        sent
    };
    let run = async {
        let (written, result) = tokio::join!(write, read_frames(from_helper, events));
        if let Err(e) = written
            && result.is_err()
        {
            return Err(BackendError::Internal(format!("send plan to helper: {e}")));
        }
        result
    };
    match tokio::time::timeout(margin, run).await {
        Ok(result) => result,
        Err(_) => Err(BackendError::Internal(format!(
            "the sandbox helper did not finish within {}s of the timeout",
            margin.as_secs()
        ))),
    }
}

impl JailBackend {
    /// Reaps forked helpers that have finished their clean-up, without waiting.
    fn reap_forked(&self) {
        let mut forked = self.forked.lock().expect("not poisoned");
        // SAFETY: waitpid with WNOHANG on our own children.
        forked
            .retain(|&pid| unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } == 0);
    }
}

/// Reads one frame of the helper's; the end of the stream is an error (the helper died).
pub(crate) async fn read_frame(
    stdout: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<(Tag, Vec<u8>), BackendError> {
    let mut header = [0u8; 5];
    if stdout.read_exact(&mut header).await.is_err() {
        return Err(BackendError::Internal(
            "the sandbox helper ended without a result".into(),
        ));
    }
    let (tag, len) = protocol::parse_header(header)
        .map_err(|e| BackendError::Internal(format!("helper frame: {e}")))?;
    let mut body = vec![0u8; len];
    stdout
        .read_exact(&mut body)
        .await
        .map_err(|e| BackendError::Internal(format!("helper frame: {e}")))?;
    Ok((tag, body))
}

/// Turns output frames into events, decoding UTF-8 across chunk boundaries.
#[derive(Debug, Default)]
pub(crate) struct OutputEvents {
    out: Utf8Carry,
    err: Utf8Carry,
}

impl OutputEvents {
    /// Sends a `Stdout` or `Stderr` frame's chunk as an event, if anyone listens.
    pub(crate) async fn relay(&mut self, tag: Tag, body: &[u8], events: Option<&EventSender>) {
        let Some(tx) = events else {
            return;
        };
        let event = if tag == Tag::Stdout {
            ExecEvent::Stdout {
                text: self.out.push(body),
                timestamp: warden_types::now_ms(),
            }
        } else {
            ExecEvent::Stderr {
                text: self.err.push(body),
                timestamp: warden_types::now_ms(),
            }
        };
        // A receiver that went away only loses the live view.
        let _ = tx.send(event).await;
    }
}

/// The engine's error for a helper's `Error` frame.
pub(crate) fn helper_error(body: &[u8]) -> BackendError {
    match serde_json::from_slice::<HelperError>(body) {
        Ok(e) => match e.kind.as_str() {
            "refused" => BackendError::Refused(e.message),
            "setup" => BackendError::Setup(e.message),
            "command" => BackendError::Command(e.message),
            _ => BackendError::Internal(e.message),
        },
        Err(e) => BackendError::Internal(format!("helper error: {e}")),
    }
}

/// Reads the helper's frames: output chunks become events, the final frame the result.
async fn read_frames(
    mut stdout: impl tokio::io::AsyncRead + Unpin,
    events: Option<EventSender>,
) -> Result<ExecResult, BackendError> {
    let mut output = OutputEvents::default();
    loop {
        let (tag, body) = read_frame(&mut stdout).await?;
        match tag {
            Tag::Stdout | Tag::Stderr => output.relay(tag, &body, events.as_ref()).await,
            Tag::Result => {
                return serde_json::from_slice::<ExecResult>(&body)
                    .map_err(|e| BackendError::Internal(format!("helper result: {e}")));
            }
            Tag::Error => return Err(helper_error(&body)),
            other => {
                return Err(BackendError::Internal(format!(
                    "unexpected helper frame {other:?}"
                )));
            }
        }
    }
}

/// Ends a sandbox whose caller went away (a dropped request): its processes are killed
/// through its cgroup, so the helper sees the sandbox end and tears it down (cgroup included)
/// as after any run; a helper still alive after a grace period is killed outright.
struct KillHelperOnDrop(Option<u32>);

/// How long a helper gets to tear down a sandbox whose caller went away.
const TEARDOWN_GRACE_MS: libc::c_int = 5_000;

impl Drop for KillHelperOnDrop {
    fn drop(&mut self) {
        let Some(pid) = self.0 else {
            return;
        };
        let pid = pid as libc::pid_t;
        // The pidfd first: it names this process even after the pid is reused.
        let Ok(pidfd) = crate::sys::pidfd_open(pid) else {
            return;
        };
        if let Ok(h) = Hierarchy::detect() {
            h.kill_runs_of(pid as u32);
        }
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let mut poll = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let exited = unsafe { libc::poll(&mut poll, 1, TEARDOWN_GRACE_MS) } > 0;
            if !exited {
                // SAFETY: pidfd_send_signal on our own pidfd, no siginfo.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Carry;

    #[test]
    fn the_first_nameserver_is_the_upstream() {
        let conf = "# comment\nsearch x\nnameserver 192.0.2.53\nnameserver 8.8.8.8\n";
        assert_eq!(
            super::first_nameserver(conf),
            Some("192.0.2.53:53".parse().unwrap())
        );
        assert_eq!(super::first_nameserver("nameserver bogus\n"), None);
    }

    #[test]
    fn split_characters_are_held_until_whole() {
        let mut c = Utf8Carry::default();
        let euro = "€".as_bytes();
        assert_eq!(c.push(&euro[..1]), "");
        assert_eq!(c.push(&euro[1..]), "€");
        assert_eq!(c.push(b"\xff ok"), "\u{fffd} ok");
    }
}
