//! The engine's side of the helper protocol: the command of an exec'd helper
//! ([`helper_command`]), a run's helper started by the backend's [`crate::launcher::Launcher`]
//! ([`exec_helper`]), sending it the plan and reading its frames ([`converse`]) until the
//! result, output chunks becoming live events on the way ([`OutputEvents`]).
//!
//! Invariants: a helper has an empty environment but for its mode and host ids (the daemon's
//! variables never reach a sandbox) and dies with its starter (parent-death signal); a caller that goes away before the
//! result ends the sandbox through its cgroup and lets the helper tear it down, killing it
//! after a grace period ([`KillHelperOnDrop`]); a helper that outlives the plan's timeout by
//! the margin is an error, never a hang; a helper that ends without a final frame is an error.

use crate::cgroup::Hierarchy;
use crate::helper::HELPER_ENV;
use crate::plan::JailPlan;
use crate::protocol::{self, HelperError, Tag};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_engine::import_guard::Refusal;
use warden_engine::shape::Utf8Carry;
use warden_engine::{BackendError, EventSender, StdinReceiver};
use warden_types::{ExecEvent, ExecResult};

/// Runs blocking workspace I/O off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BackendError> + Send + 'static,
) -> Result<T, BackendError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BackendError::Internal(format!("workspace task: {e}")))?
}

/// What a sandbox with a lifetime gives each of its runs' helpers: its workspace (at
/// [`crate::helper::INHERITED_WORKSPACE_FD`], a descriptor of this process) and a hold of its
/// uid's lease of the helper's own (at [`crate::helper::INHERITED_LEASE_FD`]; this process's
/// copy closes with the command, once the helper is started).
#[derive(Debug, Clone)]
pub struct Inherited {
    pub workspace: std::os::fd::RawFd,
    pub lease: std::sync::Arc<std::os::fd::OwnedFd>,
}

/// The command that starts an exec'd helper in `mode` (`1`: one run; `session`: a context)
/// for a plan whose host ids are `host`, with an empty environment but for the mode and
/// `host`, dying with this process, and with a sandbox's descriptors if given.
pub(crate) fn helper_command(
    helper_exe: &std::path::Path,
    host: &crate::plan::HostIds,
    inherited: Option<Inherited>,
    mode: &str,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(helper_exe);
    command
        .env_clear()
        .env(HELPER_ENV, mode)
        .env(crate::uid::HOST_IDS_ENV, crate::uid::env_value(host))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let targets = [
        crate::helper::INHERITED_WORKSPACE_FD,
        crate::helper::INHERITED_LEASE_FD,
    ];
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
            if let Some(Inherited { workspace, lease }) = &inherited {
                use std::os::fd::AsRawFd;
                let (workspace, lease) = (*workspace, lease.as_raw_fd());
                // Either may sit at the other's target: copy both above the targets first
                // (close-on-exec copies), then onto the targets (dup2 clears close-on-exec).
                let above = targets[1] + 1;
                let copies = [
                    libc::fcntl(workspace, libc::F_DUPFD_CLOEXEC, above),
                    libc::fcntl(lease, libc::F_DUPFD_CLOEXEC, above),
                ];
                for (copy, target) in copies.into_iter().zip(targets) {
                    if copy == -1 || libc::dup2(copy, target) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
            Ok(())
        });
    }
    command
}

/// Starts a helper (with a sandbox's descriptors, if given) and converses with it;
/// with a live `stdin`, the helper runs in [`crate::helper::LIVE_MODE`]: the plan goes as a
/// `Plan` frame and the chunks after it, as they come, are the program's stdin, whose end
/// closes it.
pub(crate) async fn exec_helper(
    launcher: &crate::launcher::Launcher,
    jail_plan: &JailPlan,
    events: Option<EventSender>,
    margin: Duration,
    inherited: Option<Inherited>,
    cancel: Option<tokio::sync::watch::Receiver<bool>>,
    stdin: Option<StdinReceiver>,
) -> Result<ExecResult, BackendError> {
    let mode = match stdin {
        Some(_) => crate::helper::LIVE_MODE,
        None => "1",
    };
    let mut child = launcher
        .start(&jail_plan.ids.host, inherited, mode, false)
        .await?;
    // Until the result arrives, dropping this future (a caller that went away) ends the
    // sandbox through its cgroup and lets the helper tear it down (see `KillHelperOnDrop`);
    // after it, the helper finishes its clean-up on its own and is reaped in the background.
    let guard = KillHelperOnDrop::of(&child);
    let helper_pid = child.id();
    let stdout = child.stdout.take().expect("piped stdout");
    let live = stdin;
    let to_helper = child.stdin.take().expect("piped stdin");
    let send = async move {
        let mut to_helper = to_helper;
        match live {
            None => to_helper.write_all(&encode_plan(jail_plan)?).await?,
            Some(mut live) => {
                let mut frame = Vec::new();
                protocol::write_frame(&mut frame, Tag::Plan, &encode_plan(jail_plan)?)?;
                to_helper.write_all(&frame).await?;
                // The program's input as it comes; a helper that no longer reads (its
                // program ended) stops this only with the conversation.
                while let Some(chunk) = live.recv().await {
                    to_helper.write_all(&chunk).await?;
                }
            }
        }
        to_helper.shutdown().await
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
    guard.disarm();
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
                // When it was reaped: its number may be another helper's from then on.
                .map(|status| (status, crate::monotonic_ms()))
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
        if let Some((status, ended_at)) = died
            && std::os::unix::process::ExitStatusExt::signal(&status).is_some()
            && matches!(result, Err(BackendError::Internal(_)))
        {
            // Its sandbox's processes are dying with it; make sure, then remove its leaves
            // once they are empty. Only its own: a helper started since may have its number.
            let _ = blocking(move || {
                if let (Some(pid), Ok(h)) = (helper_pid, Hierarchy::detect()) {
                    for _ in 0..100 {
                        h.kill_runs_of_ended(pid, ended_at);
                        h.remove_stale();
                        if h.runs_of_ended(pid, ended_at).is_empty() {
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

pub(crate) fn encode_plan(plan: &JailPlan) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec(plan).map_err(|e| std::io::Error::other(format!("encode plan: {e}")))
}

/// Sends the plan to a helper (`send`) and reads its frames until the result, within
/// `margin`.
pub(crate) async fn converse(
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
        // The result ends the conversation even while a live stdin is still being written.
        tokio::pin!(write);
        let read = read_frames(from_helper, events);
        tokio::pin!(read);
        let mut written = None;
        let result = loop {
            tokio::select! {
                result = &mut read => break result,
                w = &mut write, if written.is_none() => written = Some(w),
            }
        };
        if let Some(Err(e)) = written
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
            "import_refused" => BackendError::ImportRefused(Refusal {
                module: e.module.unwrap_or_default(),
                line: e.line,
            }),
            _ => BackendError::Internal(e.message),
        },
        Err(e) => BackendError::Internal(format!("helper error: {e}")),
    }
}

/// Reads the helper's frames: output chunks become events, the final frame the result.
pub(crate) async fn read_frames(
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
/// as after any run; a helper still alive after a grace period is killed outright. It holds
/// the helper by a pidfd, which names it even after its pid is reused.
pub(crate) struct KillHelperOnDrop(Option<(u32, std::os::fd::OwnedFd)>);

impl KillHelperOnDrop {
    pub(crate) fn of(child: &crate::launcher::HelperChild) -> KillHelperOnDrop {
        KillHelperOnDrop(child.id().zip(child.pidfd()))
    }

    /// The result is in: the helper finishes its clean-up on its own.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }

    /// A helper this process forked itself (and has not reaped).
    pub(crate) fn of_own_child(pid: libc::pid_t) -> KillHelperOnDrop {
        KillHelperOnDrop(
            crate::sys::pidfd_open(pid)
                .ok()
                .map(|pidfd| (pid as u32, pidfd)),
        )
    }
}

/// How long a helper gets to tear down a sandbox whose caller went away.
const TEARDOWN_GRACE_MS: libc::c_int = 5_000;

impl Drop for KillHelperOnDrop {
    fn drop(&mut self) {
        let Some((pid, pidfd)) = self.0.take() else {
            return;
        };
        use std::os::fd::AsFd;
        // Its runs' cgroups are named after its pid: only while it lives is the pid its own.
        if crate::sys::wait_readable(pidfd.as_fd(), 0).unwrap_or(true) {
            return;
        }
        if let Ok(h) = Hierarchy::detect() {
            h.kill_runs_of(pid);
        }
        std::thread::spawn(move || {
            let exited =
                crate::sys::wait_readable(pidfd.as_fd(), TEARDOWN_GRACE_MS).unwrap_or(true);
            if !exited {
                let _ = crate::sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
            }
        });
    }
}
