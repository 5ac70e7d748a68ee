//! The fork server: the helper binary started once with `WARDEN_JAIL_HELPER=forks`
//! ([`FORKS_MODE`]) by a daemon's [`crate::launcher::Launcher`], single-threaded, forking one
//! helper per request ([`serve_forks`]). Its protocol: one [`Request`] per seqpacket message
//! with the helper's descriptors (SCM_RIGHTS); [`Reply`]s back, `Started` with the helper's
//! pidfd.
//!
//! Invariants: the server holds nothing of a helper once it is forked (it closes what it was
//! sent) and nothing its starter left open; it reaps every child and reports each end; it
//! never reads a plan (a plan reaches the helper on its stdin, after the fork), so no helper's
//! memory holds another's plan or secrets; a forked helper gets what an exec'd one gets — its
//! mode and host ids as its whole environment, its pipes at 0 and 1, the daemon's standard
//! error, a sandbox's descriptors at 3 and 4 and no other, no blocked signal, death with the
//! server (parent-death signal); the server exits when the engine's end of its socket closes.

use crate::helper::{HELPER_ENV, INHERITED_WORKSPACE_FD};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// The value of [`HELPER_ENV`] that makes the binary a fork server.
pub const FORKS_MODE: &str = "forks";

/// The largest request or reply of the protocol (a mode and host ids).
pub(crate) const MAX_MESSAGE: usize = 4096;

/// A request to the fork server: the helper's mode and host ids (its environment), whether a
/// sandbox's two descriptors follow its pipes. The descriptors travel with it: the helper's
/// stdin (read end), its stdout (write end), then the workspace and the lease.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    pub(crate) seq: u64,
    pub(crate) mode: String,
    pub(crate) host: String,
    pub(crate) inherited: bool,
}

/// What the fork server says: a helper started (its pidfd travels with it) or not, and each
/// helper's end.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Reply {
    Started { seq: u64, pid: u32 },
    Failed { seq: u64, error: String },
    Exited { pid: u32, status: i32 },
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
    sys::close_from(3)?;
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
        // Ends first (each reported before the next fork), then the next request.
        match sys::first_readable(&[signals.as_fd(), socket.as_fd()], None) {
            Some(0) => {
                let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
                while sys::read(signals.as_fd(), &mut info).is_ok_and(|n| n > 0) {}
                reap(socket.as_fd())?;
                continue;
            }
            Some(_) => {}
            None => return Err(io::Error::other("poll of the socket and signals failed")),
        }
        let (n, fds) = match sys::recv_with_fds(socket.as_fd(), &mut buf, 4) {
            Ok((0, _)) => return Ok(()),
            Ok(message) => message,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // Not the engine's (its requests are small, with 2 or 4 descriptors).
                eprintln!("warden: fork server: a request that does not fit: {e}");
                continue;
            }
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
        sys::close_from(first_free)?;
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
