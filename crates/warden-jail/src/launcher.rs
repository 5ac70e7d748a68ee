//! How the engine starts helpers ([`Launcher`]): exec'd one by one (this binary re-executed
//! with `WARDEN_JAIL_HELPER=<mode>`), or forked by a fork server — one helper process exec'd
//! once in [`FORKS_MODE`], single-threaded, that forks a helper per request
//! ([`crate::fork_server`]). A daemon starts a helper per sandbox; the fork server saves each one
//! the fork of the multi-threaded daemon (its page tables, then copy-on-write faults in the
//! daemon), the exec, and the start of the static binary (glibc's cache-size `cpuid`s, which
//! trap to the hypervisor on a VM; the self-relocation and its faults).
//!
//! Invariants:
//! - Both ways give a helper the same: an environment of its mode and host ids only (the
//!   daemon's variables never reach a sandbox), stdin and stdout pipes to the engine, the
//!   daemon's standard error, a sandbox's descriptors at 3 and 4 when given and no other
//!   descriptor, no blocked signal, and death with its starter (parent-death signal).
//! - The fork server exits when the engine's end of its socket closes (the daemon ended, `kill
//!   -9` included), and its helpers die with it; a fork server that ended is replaced at the
//!   next start, and the waiters of its helpers see them killed (`SIGKILL`) once they are gone.
//!   One that does not answer a request within [`ANSWER_WITHIN`] is replaced too: a start
//!   fails, never hangs.
//! - A forked helper is signalled through a pidfd opened before the fork server could reap it:
//!   never a process that reused its pid.

use crate::fork_server::{FORKS_MODE, MAX_MESSAGE, Reply, Request};
use crate::helper::HELPER_ENV;
use crate::plan::HostIds;
use crate::sys;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use warden_engine::BackendError;

/// How long a fork server may take to answer a request (a fork: a millisecond or so) before
/// it is given up for another: a start fails, never hangs.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How a process starts its helpers: exec'd each, or forked by its fork server.
#[derive(Debug, Clone)]
pub struct Launcher {
    exe: PathBuf,
    server: Option<Arc<ForkServer>>,
}

impl Launcher {
    /// Helpers exec'd from `exe`, one by one.
    pub(crate) fn exec(exe: PathBuf) -> Launcher {
        Launcher { exe, server: None }
    }

    /// Helpers forked by a fork server exec'd from `exe` (started at the first helper).
    pub(crate) fn fork_server(exe: PathBuf) -> Launcher {
        Launcher {
            server: Some(Arc::new(ForkServer {
                exe: exe.clone(),
                connection: tokio::sync::Mutex::new(None),
            })),
            exe,
        }
    }

    /// Starts a helper in `mode` (`1`: one run; `session`, `live`, `pooled`) for a plan whose
    /// host ids are `host`, with a sandbox's descriptors if given. `kill_on_drop`: the helper
    /// is killed when the returned value is dropped.
    pub(crate) async fn start(
        &self,
        host: &HostIds,
        inherited: Option<crate::client::Inherited>,
        mode: &str,
        kill_on_drop: bool,
    ) -> Result<HelperChild, BackendError> {
        let failed = |e: io::Error| {
            BackendError::Internal(format!("start helper {}: {e}", self.exe.display()))
        };
        match &self.server {
            None => {
                let mut command = crate::client::helper_command(&self.exe, host, inherited, mode);
                command.kill_on_drop(kill_on_drop);
                let mut child = command.spawn().map_err(failed)?;
                Ok(HelperChild {
                    pid: child.id().unwrap_or_default(),
                    stdin: child.stdin.take(),
                    stdout: child.stdout.take(),
                    process: Process::Exec(child),
                })
            }
            Some(server) => server
                .start(host, inherited, mode, kill_on_drop)
                .await
                .map_err(failed),
        }
    }
}

/// A started helper: its pipes and its process, as `tokio::process::Child` gives them.
#[derive(Debug)]
pub struct HelperChild {
    pid: u32,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: Option<ChildStdout>,
    process: Process,
}

#[derive(Debug)]
enum Process {
    Exec(tokio::process::Child),
    Forked(Forked),
}

/// A helper forked by the fork server, which reaps it and reports its status.
#[derive(Debug)]
struct Forked {
    pidfd: AsyncFd<OwnedFd>,
    status: Status,
    kill_on_drop: bool,
}

#[derive(Debug)]
enum Status {
    Waiting(oneshot::Receiver<i32>),
    Known(ExitStatus),
}

impl HelperChild {
    /// The helper's pid (its runs' cgroups are named after it), while it has not been waited
    /// for.
    pub(crate) fn id(&self) -> Option<u32> {
        match &self.process {
            Process::Exec(child) => child.id(),
            Process::Forked(forked) => match forked.status {
                Status::Waiting(_) => Some(self.pid),
                Status::Known(_) => None,
            },
        }
    }

    /// A hold on the helper that survives its pid's reuse, for a kill after this value is
    /// gone (see [`crate::client::KillHelperOnDrop`]).
    pub(crate) fn pidfd(&self) -> Option<OwnedFd> {
        match &self.process {
            Process::Exec(child) => child
                .id()
                .and_then(|pid| sys::pidfd_open(pid as libc::pid_t).ok()),
            Process::Forked(forked) => forked.pidfd.get_ref().try_clone().ok(),
        }
    }

    /// Waits for the helper to end.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.process {
            Process::Exec(child) => child.wait().await,
            Process::Forked(forked) => {
                if let Status::Waiting(receiver) = &mut forked.status {
                    let status = match receiver.await {
                        Ok(raw) => ExitStatus::from_raw(raw),
                        Err(_) => {
                            // The fork server ended: its helpers die with it (parent-death
                            // signal). Wait until this one is gone.
                            let _ = forked.pidfd.readable().await.map(|mut g| g.retain_ready());
                            ExitStatus::from_raw(libc::SIGKILL)
                        }
                    };
                    forked.status = Status::Known(status);
                }
                match forked.status {
                    Status::Known(status) => Ok(status),
                    Status::Waiting(_) => unreachable!("the status was just set"),
                }
            }
        }
    }

    /// Whether the helper has ended (without waiting).
    pub(crate) fn has_ended(&mut self) -> bool {
        match &mut self.process {
            Process::Exec(child) => !matches!(child.try_wait(), Ok(None)),
            Process::Forked(forked) => {
                matches!(forked.status, Status::Known(_))
                    || sys::wait_readable(forked.pidfd.get_ref().as_fd(), 0).unwrap_or(true)
            }
        }
    }

    /// Sends the helper `SIGKILL` (its sandbox dies with it).
    pub(crate) fn start_kill(&mut self) -> io::Result<()> {
        match &mut self.process {
            Process::Exec(child) => child.start_kill(),
            Process::Forked(forked) => match forked.status {
                Status::Known(_) => Ok(()),
                Status::Waiting(_) => {
                    match sys::pidfd_send_signal(forked.pidfd.get_ref().as_fd(), libc::SIGKILL) {
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                        other => other,
                    }
                }
            },
        }
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        if self.kill_on_drop && matches!(self.status, Status::Waiting(_)) {
            let _ = sys::pidfd_send_signal(self.pidfd.get_ref().as_fd(), libc::SIGKILL);
        }
    }
}

/// The engine's side of the fork server.
#[derive(Debug)]
struct ForkServer {
    exe: PathBuf,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

/// One running fork server: its socket, the requests waiting for their answer, the helpers
/// waiting for their end.
#[derive(Debug)]
struct Connection {
    socket: AsyncFd<OwnedFd>,
    state: Mutex<Waiters>,
}

#[derive(Debug, Default)]
struct Waiters {
    next_seq: u64,
    /// `None` once the fork server has ended: nothing waits on it any more.
    requests: Option<HashMap<u64, oneshot::Sender<io::Result<Started>>>>,
    helpers: HashMap<u32, oneshot::Sender<i32>>,
}

#[derive(Debug)]
struct Started {
    pid: u32,
    pidfd: OwnedFd,
    status: oneshot::Receiver<i32>,
}

impl ForkServer {
    async fn start(
        &self,
        host: &HostIds,
        inherited: Option<crate::client::Inherited>,
        mode: &str,
        kill_on_drop: bool,
    ) -> io::Result<HelperChild> {
        let connection = self.connection().await?;
        let (stdin_r, stdin_w) = sys::pipe()?;
        let (stdout_r, stdout_w) = sys::pipe()?;
        let (answer, answered) = oneshot::channel();
        let seq = {
            let mut waiters = connection.state.lock().expect("not poisoned");
            let seq = waiters.next_seq;
            waiters.next_seq += 1;
            match &mut waiters.requests {
                Some(requests) => requests.insert(seq, answer),
                None => return Err(io::Error::other("the fork server ended")),
            };
            seq
        };
        let request = serde_json::to_vec(&Request {
            seq,
            mode: mode.to_owned(),
            host: crate::uid::env_value(host),
            inherited: inherited.is_some(),
        })?;
        let mut fds = vec![stdin_r.as_fd(), stdout_w.as_fd()];
        if let Some(inherited) = &inherited {
            // SAFETY: the workspace descriptor is the sandbox's, open for as long as the
            // caller holds `inherited` (this call).
            fds.push(unsafe { BorrowedFd::borrow_raw(inherited.workspace) });
            fds.push(inherited.lease.as_fd());
        }
        let sent = connection
            .socket
            .async_io(tokio::io::Interest::WRITABLE, |socket| {
                sys::send_with_fds(socket.as_fd(), &request, &fds)
            })
            .await;
        drop(fds);
        drop((stdin_r, stdout_w));
        if let Err(e) = sent {
            if let Some(requests) = &mut connection.state.lock().expect("not poisoned").requests {
                requests.remove(&seq);
            }
            return Err(e);
        }
        let started = match tokio::time::timeout(ANSWER_WITHIN, answered).await {
            Ok(answer) => answer.map_err(|_| io::Error::other("the fork server ended"))??,
            Err(_) => {
                // A fork server that does not answer (stopped, say) is given up: the next
                // start starts another; this one's helpers keep running meanwhile.
                let mut waiters = connection.state.lock().expect("not poisoned");
                waiters.requests = None;
                eprintln!(
                    "warden: the helpers' fork server did not answer within {}s; starting another",
                    ANSWER_WITHIN.as_secs()
                );
                return Err(io::Error::other(format!(
                    "the fork server did not answer within {}s",
                    ANSWER_WITHIN.as_secs()
                )));
            }
        };
        let stdin = ChildStdin::from_std(std::process::ChildStdin::from(stdin_w))?;
        let stdout = ChildStdout::from_std(std::process::ChildStdout::from(stdout_r))?;
        Ok(HelperChild {
            pid: started.pid,
            stdin: Some(stdin),
            stdout: Some(stdout),
            process: Process::Forked(Forked {
                // SAFETY: an `OwnedFd` stays open and keeps its number for as long as the
                // `AsyncFd` owns it.
                pidfd: unsafe {
                    AsyncFd::register_with_interest(started.pidfd, tokio::io::Interest::READABLE)
                }?,
                status: Status::Waiting(started.status),
                kill_on_drop,
            }),
        })
    }

    /// The running fork server, started if there is none (or it ended).
    async fn connection(&self) -> io::Result<Arc<Connection>> {
        let mut current = self.connection.lock().await;
        if let Some(connection) = current.as_ref()
            && connection
                .state
                .lock()
                .expect("not poisoned")
                .requests
                .is_some()
        {
            return Ok(connection.clone());
        }
        let (ours, theirs) = sys::seqpacket_pair()?;
        sys::set_nonblocking(ours.as_fd())?;
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .env_clear()
            .env(HELPER_ENV, FORKS_MODE)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(false);
        // SAFETY: nothing runs between fork and exec. With a `pre_exec`, the standard library
        // forks and execs, as for an exec'd helper: its other way, glibc's `posix_spawn`,
        // leaves the child ignoring glibc's internal signal 33, which every helper forked
        // from it would inherit.
        unsafe { command.pre_exec(|| Ok(())) };
        let mut process = command.spawn()?;
        let connection = Arc::new(Connection {
            // SAFETY: an `OwnedFd` stays open and keeps its number for as long as the `AsyncFd`
            // owns it.
            socket: unsafe { AsyncFd::register(ours) }?,
            state: Mutex::new(Waiters {
                requests: Some(HashMap::new()),
                ..Waiters::default()
            }),
        });
        let reading = connection.clone();
        tokio::spawn(async move {
            reading.read_replies().await;
            // Its socket closed: it ended (or is about to: it exits when ours closes).
            let _ = process.wait().await;
        });
        *current = Some(connection.clone());
        Ok(connection)
    }
}

impl Connection {
    /// Hands each reply to its waiter until the fork server ends; then every request still
    /// waiting fails, and every helper's waiter learns it through its closed channel.
    async fn read_replies(&self) {
        // Also when this task is dropped (its runtime shut down): the next start then starts
        // another fork server rather than waiting on a reader that is gone.
        let _ended = MarkEnded(self);
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            let received = self
                .socket
                .async_io(tokio::io::Interest::READABLE, |socket| {
                    sys::recv_with_fds(socket.as_fd(), &mut buf, 1)
                })
                .await;
            let (n, mut fds) = match received {
                Ok((0, _)) | Err(_) => break,
                Ok(message) => message,
            };
            let Ok(reply) = serde_json::from_slice::<Reply>(&buf[..n]) else {
                eprintln!("warden: the fork server sent a message that is not a reply");
                break;
            };
            let mut waiters = self.state.lock().expect("not poisoned");
            match reply {
                Reply::Started { seq, pid } => {
                    let (tell, status) = oneshot::channel();
                    let answer = match fds.pop() {
                        Some(pidfd) => {
                            waiters.helpers.insert(pid, tell);
                            Ok(Started { pid, pidfd, status })
                        }
                        None => Err(io::Error::other("the fork server sent no pidfd")),
                    };
                    if let Some(waiter) = waiters.requests.as_mut().and_then(|r| r.remove(&seq)) {
                        // A requester that went away drops the helper's pipes: it ends.
                        let _ = waiter.send(answer);
                    }
                }
                Reply::Failed { seq, error } => {
                    if let Some(waiter) = waiters.requests.as_mut().and_then(|r| r.remove(&seq)) {
                        let _ = waiter.send(Err(io::Error::other(error)));
                    }
                }
                Reply::Exited { pid, status } => {
                    if let Some(waiter) = waiters.helpers.remove(&pid) {
                        let _ = waiter.send(status);
                    }
                }
            }
        }
    }
}

/// Marks a fork server's connection ended when dropped: its waiting requests fail, and its
/// helpers' waiters see their channels closed.
struct MarkEnded<'a>(&'a Connection);

impl Drop for MarkEnded<'_> {
    fn drop(&mut self) {
        let mut waiters = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        waiters.requests = None;
        waiters.helpers.clear();
    }
}
