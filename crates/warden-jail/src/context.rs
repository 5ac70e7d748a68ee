//! The engine's side of a context: one helper in session mode (see [`crate::session`])
//! per context, kept alive between cells, spoken to in frames over its stdin and stdout.
//!
//! Invariants: each context is its own helper, sandbox and interpreter process, so no state is
//! shared between contexts or sandboxes; a context is used by one cell at a time (`&mut self`);
//! a helper that does not answer within the cell's timeout, grace and a safety margin is
//! killed, never waited on forever; dropping a context kills its helper (whose death kills the
//! sandbox), and [`JailContext::close`] ends it cleanly (the helper removes its cgroup).

use crate::client::{OutputEvents, helper_error, read_frame};
use crate::plan::JailPlan;
use crate::protocol::{Tag, write_frame};
use crate::session::{CellRequest, Ready};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use warden_engine::{BackendError, EventSender};
use warden_types::{ExecResult, Reason};

/// The Python driver: the program of a Python context, injected into the sandbox as its code
/// file (`/code/warden_driver.py`), exactly like an execution's code.
pub const PYTHON_DRIVER: &str = include_str!("../driver/warden_driver.py");

/// The driver's file name inside the sandbox's `/code`.
pub const PYTHON_DRIVER_FILE: &str = "warden_driver.py";

/// The JavaScript driver: the program of a JavaScript context (Node), injected the same way
/// as `/code/warden_driver.js`; it speaks the same protocol as the Python driver.
pub const JAVASCRIPT_DRIVER: &str = include_str!("../driver/warden_driver.js");

/// The JavaScript driver's file name inside the sandbox's `/code`.
pub const JAVASCRIPT_DRIVER_FILE: &str = "warden_driver.js";

/// The driver of a language and its file name, for the languages that have one.
pub fn driver_for(language: &str) -> Option<(&'static str, &'static str)> {
    match language {
        "python" => Some((PYTHON_DRIVER, PYTHON_DRIVER_FILE)),
        "javascript" => Some((JAVASCRIPT_DRIVER, JAVASCRIPT_DRIVER_FILE)),
        _ => None,
    }
}

/// Beyond a cell's timeout and grace, how long the engine waits for the helper's answer before
/// it calls the helper stuck.
const SAFETY_MARGIN: Duration = Duration::from_secs(10);

/// How long a closed context's helper gets to remove its sandbox before it is killed.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// How a cell ended.
#[derive(Debug)]
pub enum CellEnd {
    /// The cell finished (or was interrupted) and the interpreter lives on.
    Alive(ExecResult),
    /// The context ended during the cell (killed after the grace, the memory limit, the
    /// interpreter exited): its state is gone.
    Died(ExecResult),
}

/// A running context's helper.
#[derive(Debug)]
pub struct JailContext {
    child: crate::launcher::HelperChild,
    to_helper: tokio::process::ChildStdin,
    from_helper: tokio::process::ChildStdout,
    pub ready: Ready,
    /// The sandbox's egress rules generation its network was set up with (the sandbox's
    /// gateway rules may change after: [`crate::sandbox::JailSandbox`] restarts it then).
    pub rules_generation: u64,
}

fn pipe_error(what: &'static str) -> impl FnOnce(std::io::Error) -> BackendError {
    move |e| BackendError::Internal(format!("{what}: {e}"))
}

impl JailContext {
    /// Starts the helper with `plan` (a session plan) and waits until the interpreter is
    /// ready, within the plan's timeout and the safety margin.
    pub async fn start(
        launcher: &crate::launcher::Launcher,
        plan: &JailPlan,
        inherited: crate::client::Inherited,
    ) -> Result<JailContext, BackendError> {
        let mut child = launcher
            .start(
                &plan.ids.host,
                Some(inherited),
                crate::helper::SESSION_MODE,
                true,
            )
            .await?;
        let mut to_helper = child.stdin.take().expect("piped stdin");
        let mut from_helper = child.stdout.take().expect("piped stdout");
        let payload = serde_json::to_vec(plan)
            .map_err(|e| BackendError::Internal(format!("encode plan: {e}")))?;
        let mut frame = Vec::with_capacity(payload.len() + 5);
        write_frame(&mut frame, Tag::Plan, &payload).map_err(pipe_error("encode plan"))?;
        let handshake = async {
            to_helper
                .write_all(&frame)
                .await
                .map_err(pipe_error("send plan to helper"))?;
            let mut stderr = Vec::new();
            loop {
                let (tag, body) = read_frame(&mut from_helper).await?;
                match tag {
                    Tag::Ready => {
                        return serde_json::from_slice::<Ready>(&body)
                            .map_err(|e| BackendError::Internal(format!("ready frame: {e}")));
                    }
                    Tag::Stderr if stderr.len() < 64 * 1024 => stderr.extend_from_slice(&body),
                    Tag::Stdout | Tag::Stderr => {}
                    Tag::Result => {
                        let result: ExecResult = serde_json::from_slice(&body)
                            .map_err(|e| BackendError::Internal(format!("helper result: {e}")))?;
                        let stderr = String::from_utf8_lossy(&stderr);
                        let tail: String = stderr
                            .chars()
                            .rev()
                            .take(2000)
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect();
                        // Stopped by a limit of the sandbox (too little memory for the
                        // interpreter, say): the sandbox's creator asked for it.
                        let error = match result.reason {
                            Reason::Exited | Reason::Signal => BackendError::Command,
                            Reason::Timeout | Reason::Memory | Reason::Pids | Reason::Output => {
                                BackendError::Limit
                            }
                        };
                        return Err(error(format!(
                            "the context's interpreter ({}) ended before it was ready (reason {}, exit code {:?}): {}",
                            plan.argv[0],
                            result.reason,
                            result.exit_code,
                            tail.trim()
                        )));
                    }
                    Tag::Error => return Err(helper_error(&body)),
                    other => {
                        return Err(BackendError::Internal(format!(
                            "unexpected helper frame {other:?} at start"
                        )));
                    }
                }
            }
        };
        let ready = match tokio::time::timeout(plan.limits.timeout + SAFETY_MARGIN, handshake).await
        {
            Ok(ready) => ready?,
            Err(_) => {
                return Err(BackendError::Internal(
                    "the context's helper did not answer at start".into(),
                ));
            }
        };
        Ok(JailContext {
            child,
            to_helper,
            from_helper,
            ready,
            rules_generation: 0,
        })
    }

    /// Runs one cell; output frames become events as they come.
    pub async fn exec(
        &mut self,
        request: &CellRequest,
        events: Option<EventSender>,
    ) -> Result<CellEnd, BackendError> {
        let payload = serde_json::to_vec(request)
            .map_err(|e| BackendError::Internal(format!("encode cell: {e}")))?;
        let mut frame = Vec::with_capacity(payload.len() + 5);
        write_frame(&mut frame, Tag::Exec, &payload).map_err(pipe_error("encode cell"))?;
        let margin = Duration::from_millis(request.timeout_ms.saturating_add(request.grace_ms))
            + SAFETY_MARGIN;
        let conversation = async {
            self.to_helper
                .write_all(&frame)
                .await
                .map_err(pipe_error("send cell to helper"))?;
            let mut output = OutputEvents::default();
            loop {
                let (tag, body) = read_frame(&mut self.from_helper).await?;
                match tag {
                    Tag::Stdout | Tag::Stderr => output.relay(tag, &body, events.as_ref()).await,
                    Tag::Cell | Tag::Result => {
                        let result: ExecResult = serde_json::from_slice(&body)
                            .map_err(|e| BackendError::Internal(format!("cell result: {e}")))?;
                        return Ok(if tag == Tag::Cell {
                            CellEnd::Alive(result)
                        } else {
                            CellEnd::Died(result)
                        });
                    }
                    Tag::Error => return Err(helper_error(&body)),
                    other => {
                        return Err(BackendError::Internal(format!(
                            "unexpected helper frame {other:?} in a cell"
                        )));
                    }
                }
            }
        };
        match tokio::time::timeout(margin, conversation).await {
            Ok(end) => end,
            Err(_) => Err(BackendError::Internal(format!(
                "the context's helper did not answer within {}s of the cell's timeout",
                SAFETY_MARGIN.as_secs()
            ))),
        }
    }

    /// Whether the context still runs between cells. A context whose interpreter died (a
    /// background thread that called `os._exit`, a kill from outside) has a helper that sends
    /// its final `Result` frame and exits; the helper sends nothing else between cells (output
    /// then is kept for the next cell), so anything readable from it, or its exit, means the
    /// context ended. Not for use during a cell.
    pub fn is_alive(&mut self) -> bool {
        if self.child.has_ended() {
            return false;
        }
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd {
            fd: self.from_helper.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd on a descriptor this value owns; a zero timeout never
        // blocks, and polling reads nothing.
        let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
        ready == 0
    }

    /// Ends the context: closing the helper's stdin makes it kill the sandbox and remove its
    /// cgroup; a helper that does not exit in time is killed. Returns whether it had to be.
    pub async fn close(self) -> bool {
        let JailContext {
            mut child,
            to_helper,
            from_helper,
            ..
        } = self;
        drop(to_helper);
        drop(from_helper);
        if tokio::time::timeout(CLOSE_WAIT, child.wait()).await.is_ok() {
            return false;
        }
        let _ = child.start_kill();
        let _ = child.wait().await;
        true
    }

    /// The helper's pid (its runs' cgroups are named after it), while it runs.
    pub fn helper_pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the helper at once (its sandbox dies with it; the cgroup is left for
    /// `remove_stale`).
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
