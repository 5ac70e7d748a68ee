//! How the engine starts helpers ([`Launcher`]): exec'd one by one (this binary re-executed
//! with `WARDEN_JAIL_HELPER=<mode>`), or forked by a fork server — one helper process exec'd
//! once in [`FORKS_MODE`], single-threaded, that forks a helper per request
//! ([`serve_forks`]). A daemon starts a helper per sandbox; the fork server saves each one
//! the fork of the multi-threaded daemon (its page tables, then copy-on-write faults in the
//! daemon), the exec, and the start of the static binary (glibc's cache-size `cpuid`s, which
//! trap to the hypervisor on a VM; the self-relocation and its faults).
//!
//! Invariants:
//! - Both ways give a helper the same: an environment of its mode and host ids only (the
//!   daemon's variables never reach a sandbox), stdin and stdout pipes to the engine, the
//!   daemon's standard error, a sandbox's descriptors at 3 and 4 when given and no other
//!   descriptor, no blocked signal, and death with its starter (parent-death signal).
//! - The fork server holds nothing of a helper once it is forked: it closes the descriptors
//!   it was sent, and reaps its children, reporting each exit status to the engine.
//! - The fork server exits when the engine's end of its socket closes (the daemon ended, `kill
//!   -9` included), and its helpers die with it; a fork server that ended is replaced at the
//!   next start, and the waiters of its helpers see them killed (`SIGKILL`) once they are gone.
//! - A forked helper is signalled through a pidfd opened before the fork server could reap it:
//!   never a process that reused its pid.

use crate::helper::{HELPER_ENV, INHERITED_WORKSPACE_FD};
use crate::plan::HostIds;
use crate::sys;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use warden_engine::BackendError;

/// The value of [`HELPER_ENV`] that makes the binary a fork server.
pub const FORKS_MODE: &str = "forks";

/// The largest request or reply of the fork server's protocol (a mode and host ids).
const MAX_MESSAGE: usize = 4096;

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

/// A request to the fork server: the helper's mode and host ids (its environment), whether a
/// sandbox's two descriptors follow its pipes. The descriptors travel with it: the helper's
/// stdin (read end), its stdout (write end), then the workspace and the lease.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    seq: u64,
    mode: String,
    host: String,
    inherited: bool,
}

/// What the fork server says: a helper started (its pidfd travels with it) or not, and each
/// helper's end.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Reply {
    Started { seq: u64, pid: u32 },
    Failed { seq: u64, error: String },
    Exited { pid: u32, status: i32 },
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
        let started = answered
            .await
            .map_err(|_| io::Error::other("the fork server ended"))??;
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

/// Runs the fork server (the binary started in [`FORKS_MODE`], single-threaded): forks a
/// helper for each request on `socket` and reports the helpers' ends, until the engine's end
/// of the socket closes. Returns the exit status.
pub fn serve_forks(socket: OwnedFd) -> i32 {
    match serve_forks_on(socket) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("warden: fork server: {e}");
            1
        }
    }
}

fn serve_forks_on(socket: OwnedFd) -> io::Result<()> {
    // Nothing its starter left open without close-on-exec (a shell's, a jobserver's pipe)
    // stays open for the daemon's lifetime: only the socket and the standard descriptors.
    // SAFETY: close_range takes integers; descriptors from 3 up are nobody's in this process.
    if unsafe { libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SIGCHLD is read from a signalfd, so it is blocked here; a helper gets the mask back.
    // SAFETY: sigset calls on a local set; sigprocmask on this (only) thread.
    let (chld, unblocked) = unsafe {
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let mut old: libc::sigset_t = std::mem::zeroed();
        if libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        (chld, old)
    };
    // SAFETY: signalfd with a valid set creates a new descriptor or fails.
    let signals = unsafe { libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if signals < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: signalfd returned a new descriptor owned by nobody else.
    let signals = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(signals) };
    // SAFETY: getpid has no preconditions.
    let server_pid = unsafe { libc::getpid() };
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let mut polled = [
            libc::pollfd {
                fd: socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: signals.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds for the duration of the call.
        if unsafe { libc::poll(polled.as_mut_ptr(), 2, -1) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if polled[1].revents != 0 {
            let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
            while sys::read(signals.as_fd(), &mut info).is_ok_and(|n| n > 0) {}
            reap(socket.as_fd())?;
        }
        if polled[0].revents == 0 {
            continue;
        }
        let (n, fds) = match sys::recv_with_fds(socket.as_fd(), &mut buf, 4) {
            Ok((0, _)) => return Ok(()),
            Ok(message) => message,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => continue,
            Err(e) => return Err(e),
        };
        let request = match serde_json::from_slice::<Request>(&buf[..n]) {
            Ok(request) => request,
            Err(e) => {
                eprintln!("warden: fork server: a request that does not parse: {e}");
                continue;
            }
        };
        let seq = request.seq;
        let reply = match fork_helper(&request, fds, &unblocked, server_pid) {
            Ok((pid, pidfd)) => {
                let message = serde_json::to_vec(&Reply::Started { seq, pid })?;
                sys::send_with_fds(socket.as_fd(), &message, &[pidfd.as_fd()])
            }
            Err(e) => {
                let message = serde_json::to_vec(&Reply::Failed {
                    seq,
                    error: e.to_string(),
                })?;
                sys::send_with_fds(socket.as_fd(), &message, &[])
            }
        };
        if let Err(e) = reply {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e);
        }
    }
}

/// Reaps every ended child, reporting each.
fn reap(socket: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid int for the kernel to fill.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) };
        if pid <= 0 {
            return Ok(());
        }
        let message = serde_json::to_vec(&Reply::Exited {
            pid: pid as u32,
            status,
        })?;
        match sys::send_with_fds(socket, &message, &[]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Forks one helper for `request` with its descriptors `fds`; returns its pid and a pidfd
/// (opened before it can be reaped).
fn fork_helper(
    request: &Request,
    fds: Vec<OwnedFd>,
    unblocked: &libc::sigset_t,
    server_pid: libc::pid_t,
) -> io::Result<(u32, OwnedFd)> {
    let expected = if request.inherited { 4 } else { 2 };
    if fds.len() != expected {
        return Err(io::Error::other(format!(
            "{} descriptors came with the request, not {expected}",
            fds.len()
        )));
    }
    if !is_mode(&request.mode) {
        return Err(io::Error::other(format!(
            "unknown helper mode {:?}",
            request.mode
        )));
    }
    // SAFETY: this process has one thread, so the child gets a consistent copy of it; the
    // child only runs `become_helper`, which never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        become_helper(request, &fds, unblocked, server_pid);
    }
    drop(fds);
    let pidfd = sys::pidfd_open(pid)?;
    Ok((pid as u32, pidfd))
}

fn is_mode(mode: &str) -> bool {
    [
        "1",
        crate::helper::SESSION_MODE,
        crate::helper::LIVE_MODE,
        crate::helper::POOLED_MODE,
    ]
    .contains(&mode)
}

/// In the forked child: sets up what an exec'd helper gets (see the module's invariants) and
/// runs the helper; never returns.
fn become_helper(
    request: &Request,
    fds: &[OwnedFd],
    unblocked: &libc::sigset_t,
    server_pid: libc::pid_t,
) -> ! {
    let set_up = || -> io::Result<()> {
        // SAFETY: prctl and getppid take integers.
        unsafe {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != server_pid {
                return Err(io::Error::other("the fork server ended"));
            }
        }
        // The targets: stdin, stdout, then the sandbox's workspace and lease. A source may sit
        // at another's target: copy all above the targets first, then onto them.
        let targets = [
            0,
            1,
            INHERITED_WORKSPACE_FD,
            crate::helper::INHERITED_LEASE_FD,
        ];
        let above = targets[3] + 1;
        let mut copies = Vec::with_capacity(fds.len());
        for fd in fds {
            // SAFETY: fcntl on an open descriptor.
            let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, above) };
            if copy < 0 {
                return Err(io::Error::last_os_error());
            }
            copies.push(copy);
        }
        for (copy, target) in copies.iter().zip(targets) {
            sys::dup2(*copy, target)?;
        }
        // Nothing else of the fork server's: its socket, its signalfd, the copies (standard
        // error stays: the daemon's).
        let first_free = (targets[fds.len() - 1] + 1).max(3);
        // SAFETY: close_range takes integers; everything from `first_free` up is ours to close.
        if unsafe { libc::syscall(libc::SYS_close_range, first_free, libc::c_uint::MAX, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: on this (only) thread.
        if unsafe { libc::sigprocmask(libc::SIG_SETMASK, unblocked, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    if let Err(e) = set_up() {
        eprintln!("warden: fork server: set up a helper: {e}");
        // SAFETY: leave at once, without the fork server's destructors.
        unsafe { libc::_exit(1) };
    }
    // SAFETY: this process has one thread (a fork of the single-threaded fork server), so
    // nothing reads the environment meanwhile.
    unsafe {
        for (name, _) in std::env::vars_os() {
            std::env::remove_var(name);
        }
        std::env::set_var(HELPER_ENV, &request.mode);
        std::env::set_var(crate::uid::HOST_IDS_ENV, &request.host);
    }
    // As the exec'd helper's `main` ends (`std::process::exit`: its standard output flushed).
    std::process::exit(crate::helper::main())
}
