//! The jail as an engine [`Backend`]: builds the [`JailPlan`], starts the helper process with
//! it, turns the helper's frames into events and the final result.
//!
//! Invariants: the helper is single-threaded — exec'd with an empty environment (the daemon's
//! variables never reach a sandbox), or forked only when the caller has exactly one thread;
//! the helper is killed if the caller goes away before the result, or if it outlives the
//! plan's timeout by a safety margin — a stuck helper becomes an error, never a hang.

use crate::cgroup::Hierarchy;
use crate::helper::HELPER_ENV;
use crate::plan::{CODE_DIR, IdMap, JailPlan, PlanInput};
use crate::protocol::{self, HelperError, Tag};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_engine::{Backend, BackendError, EventSender, ExecPlan};
use warden_types::{ExecEvent, ExecResult};

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
        let (frames_r, frames_w) = crate::sys::pipe().ok()?;
        // SAFETY: this process has one thread, so the child gets a consistent copy of it; the
        // child only runs `helper::serve` and then `_exit`s, never returning to the caller.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return None;
        }
        if pid == 0 {
            drop((plan_w, frames_r));
            // The helper must not hold the caller's stdin or stdout open.
            if let Ok(null) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
            {
                use std::os::fd::AsRawFd;
                let _ = crate::sys::dup2(null.as_raw_fd(), 0);
                let _ = crate::sys::dup2(null.as_raw_fd(), 1);
            }
            let mut input = std::fs::File::from(plan_r);
            let mut out =
                std::io::BufWriter::with_capacity(64 * 1024, std::fs::File::from(frames_w));
            let code = crate::helper::serve(&mut input, &mut out);
            drop(out);
            // SAFETY: leave without running the parent's destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        Some(Prestarted {
            parts: Some(HelperParts {
                pid,
                plan_w,
                frames_r,
            }),
        })
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
        })
        .map_err(|e| BackendError::Refused(e.to_string()))
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

    fn unsupported(&self) -> Vec<warden_engine::Unsupported> {
        // Until the jail's persistent workspace lands (create_sandbox below refuses).
        vec![warden_engine::Unsupported {
            promise: "persistent_sandboxes",
            why: "this build's jail has no sandboxes with a lifetime yet".into(),
        }]
    }

    fn check(&self, plan: &ExecPlan) -> Result<(), BackendError> {
        if plan.network_enabled {
            return Err(BackendError::Refused(
                "network_enabled = true: the jail backend has no controlled network, so the profile is refused rather than run with the host's network".into(),
            ));
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
            frames_r,
        }) = prestarted.and_then(|mut p| p.parts.take())
        {
            let guard = KillHelperOnDrop(Some(pid as u32));
            let internal = |e: std::io::Error| BackendError::Internal(format!("helper pipe: {e}"));
            let plan_w = tokio::net::unix::pipe::Sender::from_owned_fd(plan_w).map_err(internal)?;
            let frames =
                tokio::net::unix::pipe::Receiver::from_owned_fd(frames_r).map_err(internal)?;
            let result = converse(&jail_plan, plan_w, frames, events, margin).await;
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
        let mut child = tokio::process::Command::new(&self.settings.helper_exe)
            .env_clear()
            .env(HELPER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                BackendError::Internal(format!(
                    "start helper {}: {e}",
                    self.settings.helper_exe.display()
                ))
            })?;
        // Until the result arrives, dropping this future (a caller that went away) kills the
        // helper, whose death kills the sandbox; after it, the helper finishes its clean-up on
        // its own and is reaped in the background.
        let guard = KillHelperOnDrop(child.id());
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let result = converse(&jail_plan, stdin, stdout, events, margin).await;
        std::mem::forget(guard);
        if result.is_ok() {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        } else {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        result
    }

    async fn create_sandbox(
        &self,
        _spec: warden_engine::SandboxSpec,
    ) -> Result<std::sync::Arc<dyn warden_engine::BackendSandbox>, BackendError> {
        Err(BackendError::Refused("sandboxes: not in this fake".into()))
    }

    async fn remove_orphans(&self, _live: &[String]) -> Result<usize, BackendError> {
        Ok(0)
    }
}

/// Sends the plan to a helper and reads its frames until the result, within `margin`.
async fn converse(
    plan: &JailPlan,
    mut to_helper: impl tokio::io::AsyncWrite + Unpin,
    from_helper: impl tokio::io::AsyncRead + Unpin,
    events: Option<EventSender>,
    margin: Duration,
) -> Result<ExecResult, BackendError> {
    let payload = serde_json::to_vec(plan)
        .map_err(|e| BackendError::Internal(format!("encode plan: {e}")))?;
    let write = async move {
        to_helper.write_all(&payload).await?;
        to_helper.shutdown().await
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

/// Reads the helper's frames: output chunks become events, the final frame the result.
async fn read_frames(
    mut stdout: impl tokio::io::AsyncRead + Unpin,
    events: Option<EventSender>,
) -> Result<ExecResult, BackendError> {
    let mut out = Utf8Carry::default();
    let mut err = Utf8Carry::default();
    loop {
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
        match tag {
            Tag::Stdout | Tag::Stderr => {
                if let Some(tx) = &events {
                    let event = if tag == Tag::Stdout {
                        ExecEvent::Stdout {
                            text: out.push(&body),
                            timestamp: warden_types::now_ms(),
                        }
                    } else {
                        ExecEvent::Stderr {
                            text: err.push(&body),
                            timestamp: warden_types::now_ms(),
                        }
                    };
                    // A receiver that went away only loses the live view.
                    let _ = tx.send(event).await;
                }
            }
            Tag::Result => {
                return serde_json::from_slice::<ExecResult>(&body)
                    .map_err(|e| BackendError::Internal(format!("helper result: {e}")));
            }
            Tag::Error => {
                let e: HelperError = serde_json::from_slice(&body)
                    .map_err(|e| BackendError::Internal(format!("helper error: {e}")))?;
                return Err(match e.kind.as_str() {
                    "refused" => BackendError::Refused(e.message),
                    "setup" => BackendError::Setup(e.message),
                    "command" => BackendError::Command(e.message),
                    _ => BackendError::Internal(e.message),
                });
            }
        }
    }
}

struct KillHelperOnDrop(Option<u32>);

impl Drop for KillHelperOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // SAFETY: kill with integers; the pid is our child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Carry;

    #[test]
    fn split_characters_are_held_until_whole() {
        let mut c = Utf8Carry::default();
        let euro = "€".as_bytes();
        assert_eq!(c.push(&euro[..1]), "");
        assert_eq!(c.push(&euro[1..]), "€");
        assert_eq!(c.push(b"\xff ok"), "\u{fffd} ok");
    }
}
