//! Runs one plan: creates the cgroup, clones the sandbox's init into fresh namespaces, maps its
//! ids, feeds stdin, relays stdout and stderr as they come, enforces the wall timeout and the
//! output cap, then collects artifacts and removes the cgroup.
//!
//! Invariants: runs in a single-threaded process (the helper), never in the daemon; the sandbox
//! is killed by killing its init, which makes the kernel kill every process of its pid
//! namespace, double-forked ones included; the cgroup is removed on every path out, and the
//! workspace tmpfs dies with the last descriptor to it, so nothing is left behind.

use crate::artifacts;
use crate::cgroup::{Cgroup, CgroupError, Hierarchy};
use crate::contain::{self, Ctx};
use crate::netns::NetnsMaker;
use crate::plan::JailPlan;
use crate::seccomp;
use crate::sys;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Instant;
use warden_types::{ExecResult, Reason};

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// A limit of the plan cannot be applied on this host: the run is refused, never weaker.
    #[error("refused: {0}")]
    Refused(String),
    #[error("sandbox setup failed at step {step:?}: {message}")]
    Setup { step: String, message: String },
    #[error("cannot start {command:?}: {message}")]
    Command { command: String, message: String },
    #[error("{op}: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

impl From<CgroupError> for JailError {
    fn from(e: CgroupError) -> Self {
        JailError::Refused(e.to_string())
    }
}

fn os(op: &'static str) -> impl FnOnce(io::Error) -> JailError {
    move |source| JailError::Os { op, source }
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Removes the cgroup whatever way `run` returns, then the leaves other helpers left behind
/// (see [`Hierarchy::remove_stale`]): that sweep runs here, after the result, rather than on
/// the start-up path.
pub(crate) struct CgroupGuard(pub Box<dyn Cgroup>, pub Hierarchy);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        let _ = self.0.remove();
        self.1.remove_stale();
    }
}

// Messages from the sandbox on the status pipe: tag byte, u32 length, payload.
const MSG_STEP_FAILED: u8 = b'E';
const MSG_EXEC_FAILED: u8 = b'C';
const MSG_EXIT_STATUS: u8 = b'X';

fn send_msg(fd: RawFd, tag: u8, payload: &[u8]) {
    let mut msg = Vec::with_capacity(5 + payload.len());
    msg.push(tag);
    msg.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    msg.extend_from_slice(payload);
    // SAFETY: `fd` is the status pipe's write end, open in this process.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let _ = sys::write_all(fd, &msg);
}

/// Init's end when a containment step failed: says which and why, then exits before the
/// program could run.
fn step_failed(status_fd: RawFd, step: &str, message: &str) -> ! {
    send_msg(
        status_fd,
        MSG_STEP_FAILED,
        format!("{step}\0{message}").as_bytes(),
    );
    // SAFETY: _exit ends the process without running destructors of the copied state.
    unsafe { libc::_exit(126) }
}

/// Init's plan, from its supervisor (see [`receive_plan`]).
fn read_plan(plan_r: BorrowedFd<'_>, bell: BorrowedFd<'_>) -> Option<JailPlan> {
    let raw = receive_plan(plan_r, bell, usize::MAX)?;
    serde_json::from_slice(&raw).ok()
}

/// Waits for the doorbell, then reads a plan (its length, then its bytes, at most `max`) from
/// the pipe; `None` if the sender went away without one. The receiver polls the pipe for
/// hang-up only, so the plan's bytes arriving do not wake it (see [`send_plan`]).
pub(crate) fn receive_plan(
    plan_r: BorrowedFd<'_>,
    bell: BorrowedFd<'_>,
    max: usize,
) -> Option<Vec<u8>> {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: bell.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: plan_r.as_raw_fd(),
                events: 0,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n < 0 || fds[0].revents & libc::POLLIN == 0 {
            // The supervisor closed the pipe without ringing: no plan is coming.
            return None;
        }
        sys::eventfd_wait(bell).ok()?;
        break;
    }
    let mut len = [0u8; 8];
    if !read_exact(plan_r, &mut len).ok()? {
        return None;
    }
    let len = usize::try_from(u64::from_le_bytes(len)).ok()?;
    if len > max {
        return None;
    }
    let mut raw = vec![0u8; len];
    if !read_exact(plan_r, &mut raw).ok()? {
        return None;
    }
    Some(raw)
}

/// What is left to do after the result is known: reap the sandbox's init (whose namespaces
/// the kernel is still tearing down) and remove the cgroup. Dropping it does both; the helper
/// sends the result first, so callers don't wait for the teardown.
pub struct Teardown {
    pub(crate) _init: KillOnDrop,
    pub(crate) _cgroup: CgroupGuard,
}

impl std::fmt::Debug for Teardown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Teardown")
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at end of file.
fn read_exact(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let n = sys::read(fd, &mut buf[got..])?;
        if n == 0 {
            return Ok(false);
        }
        got += n;
    }
    Ok(true)
}

/// The next message from the sandbox on the status pipe, `None` at end of file.
fn next_message(fd: BorrowedFd<'_>) -> Option<(u8, Vec<u8>)> {
    let mut header = [0u8; 5];
    if !read_exact(fd, &mut header).ok()? {
        return None;
    }
    let len = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
    let mut payload = vec![0u8; len.min(1 << 20)];
    if !read_exact(fd, &mut payload).ok()? {
        return None;
    }
    Some((header[0], payload))
}

/// A sandbox whose namespaces exist and whose init waits for its plan: the expensive part of
/// a start (the kernel creating namespaces) done before the plan is known, so a caller can
/// overlap it with its own work (the CLI loads settings and runs policies meanwhile).
pub struct Started {
    pid: libc::pid_t,
    kill_guard: KillOnDrop,
    /// A pidfd of init (readable once it exits).
    pidfd: OwnedFd,
    /// The sandbox's network namespace, being made beside init.
    netns: NetnsMaker,
    /// The name of the sandbox's cgroup leaf, created by [`launch`].
    cgroup_name: String,
    out_r: OwnedFd,
    err_r: OwnedFd,
    in_w: OwnedFd,
    plan_w: OwnedFd,
    /// Rung when init may read its plan (see [`send_plan`]).
    plan_bell: OwnedFd,
    go_w: OwnedFd,
    status_r: OwnedFd,
    ws_parent: OwnedFd,
    /// Read end of the reply pipe of a session's program (unused by one-shot runs).
    ctl_r: OwnedFd,
}

impl Started {
    /// The sandbox's init (its namespaces are `/proc/<pid>/ns/*`).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The sandbox's network namespace as a path a host tool can open (`ip … netns PATH`):
    /// this process's descriptor of it. Waits until it is made.
    pub fn network_namespace_path(&mut self) -> Result<String, JailError> {
        let fd = self.netns.finish().map_err(netns_refused)?;
        Ok(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            fd.as_raw_fd()
        ))
    }
}

fn netns_refused(e: io::Error) -> JailError {
    JailError::Refused(format!("cannot create namespaces: network: {e}"))
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started").field("pid", &self.pid).finish()
    }
}

/// Clones the sandbox's init into fresh user, pid, mount, ipc and uts namespaces and starts
/// making its network namespace beside it ([`crate::netns`]; init enters it before it drops
/// its capabilities, and its cgroup namespace after it is in its cgroup). Init waits for its
/// plan; dropping the result kills it. The cgroup comes later ([`launch`]), while init builds
/// its root: the start-up path holds only what needs no plan and cannot overlap with anything
/// else.
pub fn start() -> Result<Started, JailError> {
    let cgroup_name = format!(
        "run-{}-{:x}",
        std::process::id(),
        (crate::monotonic_ms() * 1e6) as u64
    );
    let (out_r, out_w) = sys::pipe().map_err(os("pipe"))?;
    let (err_r, err_w) = sys::pipe().map_err(os("pipe"))?;
    let (in_r, in_w) = sys::pipe().map_err(os("pipe"))?;
    let (plan_r, plan_w) = sys::pipe().map_err(os("pipe"))?;
    let plan_bell = sys::eventfd().map_err(os("eventfd"))?;
    let (go_r, go_w) = sys::pipe().map_err(os("pipe"))?;
    let (status_r, status_w) = sys::pipe().map_err(os("pipe"))?;
    let (ws_parent, ws_child) = sys::socketpair().map_err(os("socketpair"))?;
    let (ctl_r, ctl_w) = sys::pipe().map_err(os("pipe"))?;

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Supplementary groups would follow the sandbox as host group memberships.
        // SAFETY: setgroups with an empty list.
        if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
            return Err(JailError::Os {
                op: "setgroups",
                source: io::Error::last_os_error(),
            });
        }
    }

    // SAFETY: called from a single-threaded process; the child only runs `sandbox_init`, which
    // never returns.
    let pid = unsafe { sys::clone_into_namespaces(sys::SANDBOX_NAMESPACES) }
        .map_err(|e| JailError::Refused(format!("cannot create namespaces: {e}")))?;
    if pid == 0 {
        drop((out_r, err_r, in_w, plan_w, go_w, status_r, ws_parent, ctl_r));
        sandbox_init(
            plan_r,
            plan_bell,
            go_r,
            ws_child,
            [in_r, out_w, err_w, ctl_w],
            status_w,
        );
    }
    let pid = pid as libc::pid_t;
    drop((out_w, err_w, in_r, plan_r, go_r, status_w, ws_child, ctl_w));
    // Kill the sandbox if anything fails before the normal end; reap it in any case.
    let kill_guard = KillOnDrop(pid);
    let pidfd = sys::pidfd_open(pid).map_err(os("pidfd_open"))?;
    let netns = NetnsMaker::start(pidfd.as_fd()).map_err(netns_refused)?;
    Ok(Started {
        pid,
        kill_guard,
        pidfd,
        netns,
        cgroup_name,
        out_r,
        err_r,
        in_w,
        plan_w,
        plan_bell,
        go_w,
        status_r,
        ws_parent,
        ctl_r,
    })
}

/// A sandbox whose program has been told to start: init has its plan, the cgroup its limits,
/// and the "go" byte is sent. What [`run`] and a session ([`crate::session`]) continue from.
pub(crate) struct Launched {
    pub pid: libc::pid_t,
    pub kill_guard: KillOnDrop,
    pub cgroup: CgroupGuard,
    pub pidfd: OwnedFd,
    pub out_r: OwnedFd,
    pub err_r: OwnedFd,
    pub in_w: OwnedFd,
    pub status_r: OwnedFd,
    pub ws_parent: OwnedFd,
    pub ctl_r: OwnedFd,
    /// When the go byte was sent.
    pub start: Instant,
}

/// Maps the ids, sends init its plan, applies the cgroup limits, moves init into the cgroup
/// and sends the go byte (fail closed: a limit that cannot be applied ends the sandbox).
///
/// `before_go` is called once the sandbox is in its cgroup and just before its program may
/// start (a networked sandbox waits for its firewall there); an error ends the sandbox before
/// the program runs.
pub(crate) fn launch(
    started: Started,
    plan: &JailPlan,
    before_go: &mut dyn FnMut() -> Result<(), JailError>,
) -> Result<Launched, JailError> {
    let trace = |what: &str| {
        if plan.trace_timing {
            eprintln!(
                "warden-trace: {:.3} supervisor {what}",
                crate::monotonic_ms()
            );
        }
    };
    let Started {
        pid,
        kill_guard,
        pidfd,
        mut netns,
        cgroup_name,
        out_r,
        err_r,
        in_w,
        plan_w,
        plan_bell,
        go_w,
        status_r,
        ws_parent,
        ctl_r,
    } = started;
    // SAFETY: geteuid has no preconditions.
    map_ids(pid, plan, unsafe { libc::geteuid() } == 0)?;
    trace("ids mapped");
    // Init builds its sandbox from the plan while the cgroup gets its limits and init is moved
    // into it; init starts the program only after the go byte, which follows both.
    let encoded = serde_json::to_vec(plan).map_err(|e| JailError::Os {
        op: "encode plan",
        source: io::Error::other(e),
    })?;
    if let Err(e) = send_plan(plan_w, plan_bell.as_fd(), &encoded) {
        // Init is gone: a step it runs before its plan may have said why.
        read_status(status_r.as_fd(), plan)?;
        return Err(e);
    }
    // Wait for the network namespace first and only then create the cgroup: the maker is
    // still at work on one CPU when the plan arrives, and with this process busy on the other
    // init would wait for a CPU to build its root (measured: 0.34 ms from "ids mapped" to
    // init's first step). Sleeping here gives init that CPU; the cgroup work fits in the time
    // init takes to build its root. Init reads the namespace after that (the step "enter
    // network namespace").
    let made = netns.finish().map_err(netns_refused)?;
    if let Err(e) = sys::send_fd(ws_parent.as_fd(), made) {
        // Init is gone or going: a step it ran may have said why.
        let _ = sys::kill(pid, libc::SIGKILL);
        read_status(status_r.as_fd(), plan)?;
        return Err(os("send the network namespace")(e));
    }
    drop(netns);
    let hierarchy = match &plan.cgroups {
        Some(h) => h.clone(),
        None => Hierarchy::detect().map_err(|e| CgroupError::Read {
            path: "/proc/self/mountinfo".into(),
            source: e,
        })?,
    };
    let cgroup = CgroupGuard(hierarchy.create(&cgroup_name)?, hierarchy);
    if plan.fast_cgroup_attach {
        crate::cgroup::ensure_fast_attach();
    }
    cgroup.0.set_limits(&plan.cgroup)?;
    cgroup.0.attach(pid)?;
    trace("cgroup limits set and attached");
    before_go()?;
    // A failed write means init is gone; its status message says why.
    let _ = sys::write_all(go_w.as_fd(), b"g");
    drop(go_w);
    Ok(Launched {
        pid,
        kill_guard,
        cgroup,
        pidfd,
        out_r,
        err_r,
        in_w,
        status_r,
        ws_parent,
        ctl_r,
        start: Instant::now(),
    })
}

/// Sends a plan (length, then JSON) and rings the receiver's doorbell: from the supervisor to
/// init, and from the CLI to the helper it forked. The receiver waits on the doorbell (an
/// eventfd), not on the pipe: a pipe write wakes the reader with the hint that the writer is
/// about to sleep, so the scheduler queues the reader on this CPU behind whatever the writer
/// does next while the other CPU idles (measured: ≈0.6 ms of init's start-up spent runnable
/// behind the cgroup work, 0.16 ms of the helper's behind the CLI). A plan that fits in the
/// pipe is written before the bell, so the receiver never waits on the pipe; a larger one
/// after it, the receiver reading as it comes. The pipe is closed after the bell, never
/// before: a receiver that sees it hang up unrung knows no plan is coming.
pub(crate) fn send_plan(
    plan_w: OwnedFd,
    bell: BorrowedFd<'_>,
    encoded: &[u8],
) -> Result<(), JailError> {
    let mut framed = Vec::with_capacity(8 + encoded.len());
    framed.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
    framed.extend_from_slice(encoded);
    let fits = sys::pipe_capacity(plan_w.as_fd()).is_ok_and(|room| framed.len() <= room);
    let ring = || sys::eventfd_ring(bell).map_err(os("ring the sandbox's doorbell"));
    if !fits {
        ring()?;
    }
    sys::write_all(plan_w.as_fd(), &framed).map_err(os("send plan to sandbox"))?;
    if fits {
        ring()?;
    }
    drop(plan_w);
    Ok(())
}

/// Reads init's report on the status pipe: the program's wait status, `None` if init was
/// killed before it could report; a setup step or the exec that failed is an error.
pub(crate) fn read_status(
    status_r: BorrowedFd<'_>,
    plan: &JailPlan,
) -> Result<Option<i32>, JailError> {
    while let Some((tag, payload)) = next_message(status_r) {
        match tag {
            MSG_STEP_FAILED => {
                let text = String::from_utf8_lossy(&payload);
                let (step, message) = text.split_once('\0').unwrap_or(("unknown", &text));
                return Err(JailError::Setup {
                    step: step.to_owned(),
                    message: message.to_owned(),
                });
            }
            MSG_EXEC_FAILED => {
                return Err(JailError::Command {
                    command: plan.argv[0].clone(),
                    message: String::from_utf8_lossy(&payload).into_owned(),
                });
            }
            MSG_EXIT_STATUS if payload.len() == 4 => {
                return Ok(Some(i32::from_le_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ])));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The exit code and signal of a wait status; a program whose status never came (init was
/// killed: timeout, output cap) died with the namespace, by SIGKILL.
pub(crate) fn exit_of(status: Option<i32>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(s) if libc::WIFEXITED(s) => (Some(libc::WEXITSTATUS(s)), None),
        Some(s) if libc::WIFSIGNALED(s) => (None, Some(libc::WTERMSIG(s))),
        _ => (None, Some(libc::SIGKILL)),
    }
}

/// Runs the plan in a started sandbox and relays output to `on_output` as it arrives. Returns
/// the result as soon as every process of the sandbox but its init is gone, with the rest of
/// the clean-up.
pub fn run(
    started: Started,
    plan: &JailPlan,
    on_output: &mut dyn FnMut(Stream, &[u8]),
) -> Result<(ExecResult, Teardown), JailError> {
    run_with(started, plan, on_output, &mut || Ok(()))
}

/// [`run`], with `before_go` (see [`launch`]).
pub fn run_with(
    started: Started,
    plan: &JailPlan,
    on_output: &mut dyn FnMut(Stream, &[u8]),
    before_go: &mut dyn FnMut() -> Result<(), JailError>,
) -> Result<(ExecResult, Teardown), JailError> {
    let trace = |what: &str| {
        if plan.trace_timing {
            eprintln!(
                "warden-trace: {:.3} supervisor {what}",
                crate::monotonic_ms()
            );
        }
    };
    let Launched {
        pid,
        kill_guard,
        cgroup,
        pidfd,
        out_r,
        err_r,
        in_w,
        status_r,
        ws_parent,
        ctl_r,
        start,
    } = launch(started, plan, before_go)?;
    drop(ctl_r);

    let relay = relay_output(
        plan,
        [out_r, err_r, in_w],
        status_r.as_fd(),
        &pidfd,
        pid,
        start,
        on_output,
    )?;
    trace("output relayed");
    // Init reports the program's status once it has killed and reaped everything else in the
    // sandbox; if init was killed (timeout, output cap), the pipe just ends.
    let program_status = read_status(status_r.as_fd(), plan)?;
    let duration = start.elapsed();
    trace("status received");
    let (exit_code, signal) = exit_of(program_status);
    let oom = cgroup.0.oom_killed();
    let pids_hit = cgroup.0.pids_limit_hit();
    let reason = reason(&relay, oom, pids_hit, signal.is_some());
    let (artifacts, skipped_artifacts) = match sys::recv_fd(ws_parent.as_fd()) {
        Ok(Some(scratch)) => artifacts::collect(
            scratch.as_fd(),
            &plan.limits,
            &plan.known_outputs.iter().copied().collect(),
        ),
        _ => (Vec::new(), Vec::new()),
    };
    trace("artifacts collected");

    let result = ExecResult {
        stdout: finish_text(
            relay.stdout,
            relay.stdout_truncated,
            plan.limits.max_output_bytes,
        ),
        stderr: finish_text(
            relay.stderr,
            relay.stderr_truncated,
            plan.limits.max_output_bytes,
        ),
        exit_code,
        signal,
        reason,
        duration_ms: duration.as_millis() as u64,
        stdout_truncated: relay.stdout_truncated,
        stderr_truncated: relay.stderr_truncated,
        artifacts,
        skipped_artifacts,
        cell: Default::default(),
    };
    Ok((
        result,
        Teardown {
            _init: kill_guard,
            _cgroup: cgroup,
        },
    ))
}

/// Why the run ended, by precedence: the output cap (Warden stopped it), then a limit the
/// sandbox hit during the run (memory: the OOM killer ended a process; pids: a fork failed) —
/// even if the program then carried on or exited 0, because an agent must know its code hit a
/// wall — then the timeout, then a signal, else a normal exit.
pub(crate) fn reason_of(
    output_exceeded: bool,
    oom: bool,
    pids_hit: bool,
    timed_out: bool,
    signaled: bool,
) -> Reason {
    if output_exceeded {
        Reason::Output
    } else if oom {
        Reason::Memory
    } else if pids_hit {
        Reason::Pids
    } else if timed_out {
        Reason::Timeout
    } else if signaled {
        Reason::Signal
    } else {
        Reason::Exited
    }
}

fn reason(relay: &Relay, oom: bool, pids_hit: bool, signaled: bool) -> Reason {
    reason_of(
        relay.output_exceeded,
        oom,
        pids_hit,
        relay.timed_out,
        signaled,
    )
}

/// The marker appended to a stream cut at the output cap.
pub fn truncation_marker(limit: u64) -> String {
    format!("\n[warden: output truncated at {limit} bytes]\n")
}

pub(crate) fn finish_text(bytes: Vec<u8>, truncated: bool, limit: u64) -> String {
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if truncated {
        text.push_str(&truncation_marker(limit));
    }
    text
}

/// Kills (a no-op once it is exiting) and reaps the sandbox's init.
pub(crate) struct KillOnDrop(pub libc::pid_t);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = sys::kill(self.0, libc::SIGKILL);
        let _ = sys::waitpid(self.0);
    }
}

fn map_ids(pid: libc::pid_t, plan: &JailPlan, root: bool) -> Result<(), JailError> {
    let ids = plan.ids;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let write = |file: &str, content: String| {
        std::fs::write(proc_dir.join(file), content)
            .map_err(|e| JailError::Refused(format!("cannot map ids of the sandbox ({file}): {e}")))
    };
    if root {
        write(
            "uid_map",
            format!("{} {} 1\n", ids.inside_uid, ids.host_uid),
        )?;
        write(
            "gid_map",
            format!("{} {} 1\n", ids.inside_gid, ids.host_gid),
        )?;
    } else {
        // Without privilege only our own ids can be mapped, and setgroups must be denied.
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        write("setgroups", "deny".into())?;
        write("uid_map", format!("{} {uid} 1\n", ids.inside_uid))?;
        write("gid_map", format!("{} {gid} 1\n", ids.inside_gid))?;
    }
    Ok(())
}

struct Relay {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    output_exceeded: bool,
    timed_out: bool,
}

#[allow(clippy::too_many_arguments)]
/// Relays output and stdin until the program's streams are closed and init has reported (or
/// died), enforcing the timeout and the output cap all along — a program that closes its
/// stdout and stderr early is still bounded by its timeout.
fn relay_output(
    plan: &JailPlan,
    [out_r, err_r, in_w]: [OwnedFd; 3],
    status: BorrowedFd<'_>,
    pidfd: &OwnedFd,
    pid: libc::pid_t,
    start: Instant,
    on_output: &mut dyn FnMut(Stream, &[u8]),
) -> Result<Relay, JailError> {
    let limit = plan.limits.max_output_bytes as usize;
    let deadline = start + plan.limits.timeout;
    let mut relay = Relay {
        stdout: Vec::new(),
        stderr: Vec::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        output_exceeded: false,
        timed_out: false,
    };
    for fd in [&out_r, &err_r, &in_w] {
        sys::set_nonblocking(fd.as_fd()).map_err(os("set nonblocking"))?;
    }
    let mut streams: [Option<OwnedFd>; 2] = [Some(out_r), Some(err_r)];
    let mut stdin = if plan.stdin.is_empty() {
        None
    } else {
        Some(in_w)
    };
    let mut stdin_off = 0usize;
    let mut init_exited = false;
    let mut killed = false;
    let mut buf = vec![0u8; 64 * 1024];
    let mut status_ready = false;
    while streams.iter().any(Option::is_some) || !(status_ready || init_exited) {
        let mut pfds = Vec::with_capacity(5);
        for s in streams.iter().flatten() {
            pfds.push(libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if let Some(w) = &stdin {
            pfds.push(libc::pollfd {
                fd: w.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            });
        }
        if !init_exited {
            pfds.push(libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if !status_ready {
            pfds.push(libc::pollfd {
                fd: status.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let wait_ms = if killed || init_exited {
            // After the namespace is gone every writer is dead: the pipes drain to EOF.
            1000
        } else {
            deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32
        };
        // SAFETY: `pfds` is a valid array of pollfd of the given length.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, wait_ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(JailError::Os {
                op: "poll",
                source: err,
            });
        }
        if n == 0 && !killed && !init_exited && Instant::now() >= deadline {
            relay.timed_out = true;
            let _ = sys::kill(pid, libc::SIGKILL);
            killed = true;
            continue;
        }
        for pfd in &pfds {
            if pfd.revents == 0 {
                continue;
            }
            if pfd.fd == pidfd.as_raw_fd() {
                init_exited = true;
                continue;
            }
            if pfd.fd == status.as_raw_fd() {
                // Read after the loop; init wrote it (or died) once the program was gone.
                status_ready = true;
                continue;
            }
            if let Some(w) = &stdin
                && pfd.fd == w.as_raw_fd()
            {
                // SAFETY: writing from a valid slice of the plan's stdin.
                let n = unsafe {
                    libc::write(
                        w.as_raw_fd(),
                        plan.stdin[stdin_off..].as_ptr().cast(),
                        plan.stdin.len() - stdin_off,
                    )
                };
                if n > 0 {
                    stdin_off += n as usize;
                }
                if n < 0 || stdin_off >= plan.stdin.len() {
                    stdin = None;
                }
                continue;
            }
            let index = if streams[0].as_ref().map(|s| s.as_raw_fd()) == Some(pfd.fd) {
                0
            } else {
                1
            };
            let Some(fd) = streams[index].as_ref() else {
                continue;
            };
            match sys::read(fd.as_fd(), &mut buf) {
                Ok(0) => streams[index] = None,
                Ok(n) => {
                    let (kept, truncated, stream) = if index == 0 {
                        (
                            &mut relay.stdout,
                            &mut relay.stdout_truncated,
                            Stream::Stdout,
                        )
                    } else {
                        (
                            &mut relay.stderr,
                            &mut relay.stderr_truncated,
                            Stream::Stderr,
                        )
                    };
                    let room = limit.saturating_sub(kept.len());
                    let take = n.min(room);
                    if take > 0 {
                        kept.extend_from_slice(&buf[..take]);
                        on_output(stream, &buf[..take]);
                    }
                    if take < n && !*truncated {
                        *truncated = true;
                        if !killed {
                            relay.output_exceeded = true;
                            let _ = sys::kill(pid, libc::SIGKILL);
                            killed = true;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => streams[index] = None,
            }
        }
    }
    if !init_exited && !killed && Instant::now() >= deadline {
        relay.timed_out = true;
    }
    Ok(relay)
}

/// The sandbox's init: runs the containment steps, starts the program, reaps, reports the
/// program's status, exits. Never returns.
fn sandbox_init(
    plan_r: OwnedFd,
    plan_bell: OwnedFd,
    go: OwnedFd,
    workspace_socket: OwnedFd,
    stdio: [OwnedFd; 4],
    status: OwnedFd,
) -> ! {
    let status_fd = status.as_raw_fd();
    // Die with the supervisor: a sandbox must not outlive the process that enforces its
    // limits. A supervisor that died before this line leaves the plan pipe empty.
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    for (name, step) in contain::BEFORE_PLAN {
        if let Err(message) = step() {
            step_failed(status_fd, name, &message);
        }
    }
    let plan = read_plan(plan_r.as_fd(), plan_bell.as_fd());
    drop(plan_bell);
    let Some(plan) = plan else {
        // SAFETY: _exit ends the process without running destructors of the copied state.
        unsafe { libc::_exit(126) };
    };
    drop(plan_r);
    let plan = &plan;
    let filters = plan.seccomp.then(seccomp::filters);
    let mut ctx = Ctx {
        plan,
        filters: filters.as_ref(),
        workspace_socket,
        go,
    };
    for (name, step) in contain::STEPS {
        let result = step(&mut ctx);
        if plan.trace_timing {
            eprintln!(
                "warden-trace: {:.3} init step {name:?} done",
                crate::monotonic_ms()
            );
        }
        if let Err(message) = result {
            step_failed(status_fd, name, &message);
        }
    }
    drop(ctx);
    let exec = match prepare_exec(plan) {
        Ok(exec) => exec,
        Err(message) => {
            send_msg(status_fd, MSG_EXEC_FAILED, message.as_bytes());
            // SAFETY: as above.
            unsafe { libc::_exit(127) };
        }
    };
    if plan.trace_timing {
        eprintln!(
            "warden-trace: {:.3} init forks the program",
            crate::monotonic_ms()
        );
    }
    let [stdin, stdout, stderr, reply] = &stdio;
    let spawn = ProgramSpawn {
        exec: &exec,
        stdio: [
            stdin.as_raw_fd(),
            stdout.as_raw_fd(),
            stderr.as_raw_fd(),
            if plan.session { reply.as_raw_fd() } else { -1 },
        ],
        exec_errno: 0,
    };
    let (child, exec_errno) = match spawn_program(spawn) {
        Ok(spawned) => spawned,
        Err(e) => step_failed(status_fd, "start program", &e.to_string()),
    };
    if exec_errno != 0 {
        // The child has exited (127); the loop below reaps it and reports its status after
        // this message, which the supervisor reads first.
        let err = io::Error::from_raw_os_error(exec_errno);
        send_msg(status_fd, MSG_EXEC_FAILED, err.to_string().as_bytes());
    }
    drop(stdio);
    if plan.session {
        forward_interrupts_to(child);
    }
    loop {
        let mut st = 0;
        // SAFETY: `st` is a valid int; -1 waits for any child (init reaps orphans too).
        let reaped = unsafe { libc::waitpid(-1, &mut st, 0) };
        if reaped == child {
            if plan.trace_timing {
                eprintln!(
                    "warden-trace: {:.3} init reaped the program",
                    crate::monotonic_ms()
                );
            }
            // Whatever the program left running goes now, before the status is reported, so
            // that the supervisor reads artifacts from a workspace nobody can still change.
            // SAFETY: kill(-1) from pid 1 reaches every other process of this pid namespace.
            unsafe { libc::kill(-1, libc::SIGKILL) };
            // SAFETY: a null status pointer is allowed; reap until no child is left.
            while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0
                || io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
            send_msg(status_fd, MSG_EXIT_STATUS, &st.to_le_bytes());
            wait_for_teardown();
        }
        if reaped < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
    }
}

/// Init's last state, once the status is out: it waits to be killed rather than exiting. Its
/// exit tears down the namespaces (every mount, the network), a millisecond of kernel work
/// that would otherwise compete on the CPUs with the supervisor collecting the artifacts and
/// answering its caller; the supervisor kills init once the answer is out (`KillOnDrop`).
/// Init dies with its supervisor in any case (parent-death signal). (Not at a lower priority:
/// the teardown takes kernel locks that the next sandbox's start waits for.)
fn wait_for_teardown() -> ! {
    // SAFETY: close and pause take integers; seccomp allows both.
    unsafe {
        // The standard error init inherited may be its caller's pipe: a caller reading it to
        // its end must not wait for the teardown.
        libc::close(2);
        loop {
            libc::pause();
        }
    }
}

/// The program's pid (inside the sandbox) for [`forward_interrupt`].
static PROGRAM: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward_interrupt(_: libc::c_int) {
    let pid = PROGRAM.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and takes integers.
        unsafe { libc::kill(pid, libc::SIGINT) };
    }
}

/// A session's supervisor interrupts a cell by sending SIGINT to init (it cannot name the
/// program, whose pid is the sandbox's own): init passes it on. As pid 1 of its namespace,
/// init gets a signal from outside only if it handles it, so without this SIGINT is dropped.
fn forward_interrupts_to(child: libc::pid_t) {
    PROGRAM.store(child, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: a zeroed sigaction with a valid handler; no SA_RESTART, so init's waitpid sees
    // EINTR and goes round its loop again.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = forward_interrupt as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
}

/// What the program's child needs: everything prepared before the clone, because the child
/// shares init's memory and may only make raw system calls.
struct ProgramSpawn<'a> {
    exec: &'a Exec,
    /// stdin, stdout, stderr and (a session's) reply pipe, or -1 for none.
    stdio: [RawFd; 4],
    /// Set by the child when its exec failed; read by init once the child has left.
    exec_errno: i32,
}

/// The program's child: moves its streams into place and execs. It runs on its own stack in
/// init's address space (CLONE_VM), with init suspended until it execs or exits (CLONE_VFORK),
/// so it touches nothing but `ProgramSpawn` and makes only async-signal-safe calls.
extern "C" fn program_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ProgramSpawn` that `spawn_program` keeps alive, and init is
    // suspended until this child execs or exits, so nothing else touches it meanwhile.
    let spawn = unsafe { &mut *arg.cast::<ProgramSpawn<'_>>() };
    let exec = spawn.exec;
    let targets = [0, 1, 2, crate::layout::SESSION_REPLY_FD];
    // SAFETY: raw system calls on descriptors and on C strings prepared before the clone.
    unsafe {
        let mut ok = true;
        // The sources are all above 3 (the helper's 0-2 were open when the pipes were made,
        // and an exec'd helper holds 3 for the workspace), so no dup2 clobbers a later source.
        for (from, to) in spawn.stdio.into_iter().zip(targets) {
            if from >= 0 && libc::dup2(from, to) < 0 {
                ok = false;
                break;
            }
        }
        if ok && libc::chdir(exec.cwd.as_ptr()) == 0 {
            // Init blocked every signal around the clone; the program starts with none blocked
            // (init's handlers are all default here — see `contain::BEFORE_PLAN` — so none
            // can run in shared memory).
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::execve(
                exec.path.as_ptr(),
                exec.argv_ptrs.as_ptr(),
                exec.env_ptrs.as_ptr(),
            );
        }
        spawn.exec_errno = *libc::__errno_location();
        libc::_exit(127)
    }
}

/// Starts the program as posix_spawn does: `clone(CLONE_VM | CLONE_VFORK)` on a stack of its
/// own, which spares copying init's page tables only for the exec to drop them (a fork here
/// copies those of a fork of the large `warden` binary). Returns the child's pid and the errno
/// of a failed exec (0 when the exec succeeded).
fn spawn_program(mut spawn: ProgramSpawn<'_>) -> io::Result<(libc::pid_t, i32)> {
    const STACK_BYTES: usize = 64 * 1024;
    let mut stack = vec![0u8; STACK_BYTES];
    // SAFETY: the stack outlives the child's use of it (init is suspended until the child
    // execs or exits: CLONE_VFORK); the child makes only async-signal-safe calls while init
    // is suspended (see `program_child`), and `spawn` outlives it.
    unsafe {
        let pid = sys::clone_sharing_memory(
            &mut stack,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            program_child,
            (&mut spawn as *mut ProgramSpawn<'_>).cast(),
        )?;
        Ok((pid, std::ptr::read_volatile(&spawn.exec_errno)))
    }
}

struct Exec {
    path: std::ffi::CString,
    cwd: std::ffi::CString,
    _argv: Vec<std::ffi::CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _env: Vec<std::ffi::CString>,
    env_ptrs: Vec<*const libc::c_char>,
}

/// Resolves the command in the sandbox's PATH and builds execve's arrays before the fork, so
/// the program's child only calls async-signal-safe functions.
fn prepare_exec(plan: &JailPlan) -> Result<Exec, String> {
    let name = &plan.argv[0];
    let path = if name.contains('/') {
        PathBuf::from(name)
    } else {
        let search = plan
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or("/usr/bin:/bin", |(_, v)| v.as_str());
        search
            .split(':')
            .map(|dir| Path::new(dir).join(name))
            .find(|p| is_executable(p))
            .ok_or_else(|| format!("{name}: command not found in the sandbox"))?
    };
    let cpath = sys::cstring(&path).map_err(|e| e.to_string())?;
    let argv: Vec<_> = plan
        .argv
        .iter()
        .map(|a| sys::cstring(a).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let env: Vec<_> = plan
        .env
        .iter()
        .map(|(k, v)| sys::cstring(format!("{k}={v}")).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut argv_ptrs: Vec<_> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<_> = env.iter().map(|a| a.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    Ok(Exec {
        path: cpath,
        cwd: sys::cstring(&plan.cwd).map_err(|e| e.to_string())?,
        _argv: argv,
        argv_ptrs,
        _env: env,
        env_ptrs,
    })
}

fn is_executable(path: &Path) -> bool {
    let Ok(c) = sys::cstring(path) else {
        return false;
    };
    // SAFETY: `c` is a valid C string.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 && !path.is_dir() }
}
