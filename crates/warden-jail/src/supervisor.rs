//! Runs one plan: creates the cgroup, clones the sandbox's init (its own side is
//! [`crate::init`]) into fresh namespaces, maps its ids, feeds stdin, relays stdout and stderr
//! as they come, enforces the wall timeout and the output cap, then collects artifacts and
//! removes the cgroup.
//!
//! Invariants: runs in a single-threaded process (the helper), never in the daemon; the sandbox
//! is killed by killing its init, which makes the kernel kill every process of its pid
//! namespace, double-forked ones included; the cgroup is removed on every path out, and the
//! workspace tmpfs dies with the last descriptor to it, so nothing is left behind.

use crate::artifacts;
use crate::cgroup::{Cgroup, CgroupError, CpuWeight, Events, Hierarchy};
use crate::init::{self, Report};
use crate::netns::NetnsMaker;
use crate::plan::{JailPlan, NetAttachment, ToInit};
use crate::sys;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Instant;
use warden_engine::BackendError;
use warden_engine::import_guard;
use warden_engine::shape::capped_text;
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
    /// The interpreter's import guard refused an import (see
    /// [`warden_engine::import_guard`]).
    #[error("import of {:?} refused at run time", .0.module)]
    ImportRefused(warden_engine::import_guard::Refusal),
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

/// Removes the cgroup whatever way `run` returns, then leaves other helpers left behind
/// (see [`Hierarchy::remove_some_stale`]): that sweep runs here, after the result, rather than
/// on the start-up path, and over a window of the leaves, so that it costs a teardown the same
/// beside ten sandboxes or thousands.
pub(crate) struct CgroupGuard(pub Box<dyn Cgroup>, pub Hierarchy);

/// How many leaves one teardown's sweep looks at (each: an open, a `flock`, a close).
const TEARDOWN_SWEEP_LEAVES: usize = 32;

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        let _ = self.0.remove();
        self.1.remove_some_stale(TEARDOWN_SWEEP_LEAVES);
    }
}

/// What is left to do after the result is known: reap the sandbox's init (whose namespaces
/// the kernel is still tearing down) and remove the cgroup. Dropping it does both; the helper
/// sends the result first, so callers don't wait for the teardown.
pub struct Teardown {
    pub(crate) _init: KillOnDrop,
    pub(crate) _cgroup: CgroupGuard,
    /// A pooled run's code folder copy ([`crate::gate::Gate::open`]), closed here, after the
    /// answer, where its grace period delays nobody.
    pub(crate) _code_folder: Option<OwnedFd>,
}

impl std::fmt::Debug for Teardown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Teardown")
    }
}

/// A sandbox whose namespaces exist and whose init waits for its plan: the expensive part of
/// a start (the kernel creating namespaces) done before the plan is known, so a caller can
/// overlap it with its own work (the CLI loads settings and runs policies meanwhile).
pub struct Started {
    pid: libc::pid_t,
    /// The host uid that owns the sandbox's user namespace and its user maps to (`None`:
    /// unprivileged, the caller's own).
    host_uid: Option<u32>,
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
    /// Write end of a gated program's start pipe (see [`crate::gate`]).
    start_w: OwnedFd,
}

impl Started {
    /// The sandbox's init (its namespaces are `/proc/<pid>/ns/*`).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The sandbox's network namespace as a path a host tool can open (`ip … netns PATH`):
    /// this process's descriptor of it. Waits until it is made. A maker that failed because
    /// init is gone (a step init runs before its plan failed) gives way to init's report.
    pub fn network_namespace_path(&mut self, plan: &JailPlan) -> Result<String, JailError> {
        match self.netns.finish().map(|fd| fd.as_raw_fd()) {
            Ok(fd) => Ok(format!("/proc/{}/fd/{fd}", std::process::id())),
            Err(e) if self.netns.init_was_gone() => Err(init_gone(
                self.pid,
                self.status_r.as_fd(),
                plan,
                netns_refused(e),
            )),
            Err(e) => Err(netns_refused(e)),
        }
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
///
/// `host_uid` (as root): the sandbox's own host uid, leased by the caller (see
/// [`crate::uid`]). The user namespace is created with it as this process's effective uid and
/// gid, which makes it the namespace's owner: the kernel charges the per-user counts of
/// everything inside (inotify instances, processes, pending signals, message queues,
/// namespaces…) to that uid on the host, never to root's, which every sandbox would share.
pub fn start(host_uid: Option<u32>) -> Result<Started, JailError> {
    let cgroup_name = crate::cgroup::run_name(std::process::id(), crate::monotonic_ms());
    let (out_r, out_w) = sys::pipe().map_err(os("pipe"))?;
    let (err_r, err_w) = sys::pipe().map_err(os("pipe"))?;
    let (in_r, in_w) = sys::pipe().map_err(os("pipe"))?;
    let (plan_r, plan_w) = sys::pipe().map_err(os("pipe"))?;
    let plan_bell = sys::eventfd().map_err(os("eventfd"))?;
    let (go_r, go_w) = sys::pipe().map_err(os("pipe"))?;
    let (status_r, status_w) = sys::pipe().map_err(os("pipe"))?;
    let (ws_parent, ws_child) = sys::socketpair().map_err(os("socketpair"))?;
    let (ctl_r, ctl_w) = sys::pipe().map_err(os("pipe"))?;
    let (start_r, start_w) = sys::pipe().map_err(os("pipe"))?;

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

    let owner = match host_uid {
        Some(uid) => Some(sys::EffectiveIds::become_ids(uid, uid).map_err(os("seteuid"))?),
        None => None,
    };
    // SAFETY: called from a single-threaded process; the child only runs `sandbox_init`, which
    // never returns.
    let pid = unsafe { sys::clone_into_namespaces(sys::SANDBOX_NAMESPACES) };
    if matches!(pid, Ok(0)) {
        // Init keeps the owner's effective uid until its step "switch user" sets every id.
        drop((
            out_r, err_r, in_w, plan_w, go_w, status_r, ws_parent, ctl_r, start_w,
        ));
        init::sandbox_init(
            plan_r,
            plan_bell,
            go_r,
            ws_child,
            [in_r, out_w, err_w, ctl_w, start_r],
            status_w,
        );
    }
    if let Some(owner) = owner {
        owner.restore().map_err(os("restore the effective uid"))?;
    }
    let pid = pid.map_err(|e| JailError::Refused(format!("cannot create namespaces: {e}")))?
        as libc::pid_t;
    drop((
        out_w, err_w, in_r, plan_r, go_r, status_w, ws_child, ctl_w, start_r,
    ));
    // Kill the sandbox if anything fails before the normal end; reap it in any case.
    let kill_guard = KillOnDrop(pid);
    let pidfd = sys::pidfd_open(pid).map_err(os("pidfd_open"))?;
    let netns = NetnsMaker::start(pidfd.as_fd()).map_err(netns_refused)?;
    Ok(Started {
        pid,
        host_uid,
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
        start_w,
    })
}

/// A sandbox whose program has been told to start: init has its plan, the cgroup its limits,
/// and the "go" byte is sent. What [`run`] and a session ([`crate::session`]) continue from.
pub(crate) struct Launched {
    pub pid: libc::pid_t,
    pub kill_guard: KillOnDrop,
    pub cgroup: CgroupGuard,
    /// The cgroup's event counters, opened before the program runs and read after it.
    pub events: Events,
    pub pidfd: OwnedFd,
    pub out_r: OwnedFd,
    pub err_r: OwnedFd,
    pub in_w: OwnedFd,
    pub status_r: OwnedFd,
    pub ws_parent: OwnedFd,
    pub ctl_r: OwnedFd,
    /// When the go byte was sent (a held gated run: when its gate opened).
    pub start: Instant,
    /// The workspace's descriptor, when already received (a gated run's comes before its
    /// code folder); else it is read from `ws_parent` for the artifacts.
    pub scratch: Option<OwnedFd>,
    /// A gated run held at its gate ([`launch`] with `hold`): opened by the caller.
    pub gate: Option<crate::gate::Gate>,
    /// The code folder's copy a held gate gave back when it opened, closed in the teardown.
    pub code_folder: Option<OwnedFd>,
    /// What was read of the report pipe before the run (a held run's first guard message).
    pub report_prefix: Vec<u8>,
}

/// Maps the ids, sends init its plan, applies the cgroup limits, moves init into the cgroup
/// and sends the go byte (fail closed: a limit that cannot be applied ends the sandbox).
///
/// `network`: a networked sandbox's attachment (see [`NetAttachment`]), sent to init with its
/// plan, which stays as built.
///
/// `before_go` is called once the sandbox is in its cgroup and just before its program may
/// start (a networked sandbox waits for its firewall there); an error ends the sandbox before
/// the program runs.
///
/// A gated plan (see [`crate::gate`]): init hands over the workspace and a writable copy of the
/// code folder once it has built the root; the gate is then opened here, before the go byte
/// (a cold run), or, with `hold`, left to the caller in [`Launched::gate`] (a pooled run).
pub(crate) fn launch(
    started: Started,
    plan: &JailPlan,
    network: Option<&NetAttachment>,
    before_go: &mut dyn FnMut() -> Result<(), JailError>,
    hold: bool,
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
        host_uid,
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
        start_w,
    } = started;
    map_ids(pid, plan, host_uid)?;
    trace("ids mapped");
    // Init builds its sandbox from the plan while the cgroup gets its limits and init is moved
    // into it; init starts the program only after the go byte, which follows both.
    let for_init = plan.for_init();
    let encoded = serde_json::to_vec(&ToInit {
        plan: &for_init,
        network,
    })
    .map_err(|e| JailError::Os {
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
    //
    // A hand-over that failed because init is already gone (the maker could not enter its
    // user namespace: ESRCH; or init's end of the socket is closed) is a consequence, never
    // the error: init ended at a step of its own, one it runs on its plan while this process
    // goes on below. Which of the two comes first is up to the scheduler; so that the error
    // does not depend on it, the cgroup's steps still run and their refusal (a limit this
    // host cannot apply) is reported first, else init's report (see `init_gone`), as when
    // init ends after the hand-over. Only failure paths pay for this. (E.g. run by an unprivileged user: init cannot drop its
    // groups, setgroups being denied in its user namespace, and no cgroup can be created.)
    let (handed, maker_failed) = match netns.finish() {
        Ok(made) => (
            sys::send_fd(ws_parent.as_fd(), made).map_err(os("send the network namespace")),
            false,
        ),
        Err(e) => (Err(netns_refused(e)), true),
    };
    let init_gone = match handed {
        Ok(()) => None,
        // A maker that failed for a reason of its own refuses the sandbox (fail closed).
        Err(e) if maker_failed && !netns.init_was_gone() => return Err(e),
        Err(handover) => Some(init_gone(pid, status_r.as_fd(), plan, handover)),
    };
    drop(netns);
    let hierarchy = match &plan.cgroups {
        Some(h) => h.clone(),
        None => Hierarchy::detect().map_err(|e| CgroupError::Read {
            path: "/proc/self/mountinfo".into(),
            source: e,
        })?,
    };
    let cgroup = CgroupGuard(hierarchy.create(&cgroup_name, plan.session)?, hierarchy);
    if plan.fast_cgroup_attach {
        crate::cgroup::ensure_fast_attach();
    }
    cgroup.0.set_limits(&plan.cgroup)?;
    if hold {
        // Built ahead of its code: nobody waits for it until it is taken, when the weight
        // goes back to normal before the gate opens (see `crate::pooled`).
        cgroup.0.set_cpu_weight(CpuWeight::Background)?;
    }
    if let Some(e) = init_gone {
        return Err(e);
    }
    cgroup.0.attach(pid)?;
    // Opened here, while init builds its root, so that the answer's path only reads them.
    let events = cgroup.0.events();
    trace("cgroup limits set and attached");
    let (scratch, gate, code_folder) = if plan.gated {
        let received = sys::recv_fd(ws_parent.as_fd())
            .and_then(|scratch| Ok(scratch.zip(sys::recv_fd(ws_parent.as_fd())?)));
        let (scratch, code_dir) = match received {
            Ok(Some(both)) => both,
            // Init's end closed: at end of file, or with ECONNRESET when it ended with the
            // network namespace sent to it still unread (it ended at a step before "enter
            // network namespace"). Either way the step that ended it says why.
            failed => {
                let e = match failed {
                    Err(e) => os("receive the code folder")(e),
                    _ => JailError::Setup {
                        step: "hand over workspace".into(),
                        message: "init ended before it handed over the code folder".into(),
                    },
                };
                return Err(self::init_gone(pid, status_r.as_fd(), plan, e));
            }
        };
        let gate = crate::gate::Gate::new(code_dir, start_w, host_uid);
        if hold {
            (Some(scratch), Some(gate), None)
        } else {
            let code_folder = gate.open(&plan.code_path, &plan.code)?;
            trace("code written, gate open");
            (Some(scratch), None, Some(code_folder))
        }
    } else {
        drop(start_w);
        (None, None, None)
    };
    before_go()?;
    // A failed write means init is gone; its status message says why.
    let _ = sys::write_all(go_w.as_fd(), b"g");
    drop(go_w);
    // A cold run's code folder copy: closed once init has its go (the close waits for a grace
    // period, see `Gate::open`), while the program starts.
    drop(code_folder);
    Ok(Launched {
        pid,
        kill_guard,
        cgroup,
        events,
        pidfd,
        out_r,
        err_r,
        in_w,
        status_r,
        ws_parent,
        ctl_r,
        start: Instant::now(),
        scratch,
        gate,
        code_folder: None,
        report_prefix: Vec::new(),
    })
}

/// Why a sandbox whose init is gone before its program could start failed: init's report
/// (the step that ended it) if it sent one, else `otherwise` (what failed here for want of
/// init). Kills init first, so the status pipe ends even if init is still going.
fn init_gone(
    pid: libc::pid_t,
    status_r: BorrowedFd<'_>,
    plan: &JailPlan,
    otherwise: JailError,
) -> JailError {
    let _ = sys::kill(pid, libc::SIGKILL);
    match read_status(status_r, plan) {
        Err(reported) => reported,
        Ok(_) => otherwise,
    }
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
    while let Some((tag, payload)) = init::next_message(status_r) {
        match Report::decode(tag, &payload) {
            Some(Report::StepFailed { step, message }) => {
                return Err(JailError::Setup { step, message });
            }
            Some(Report::ExecFailed(message)) => {
                return Err(JailError::Command {
                    command: plan.argv[0].clone(),
                    message,
                });
            }
            Some(Report::ExitStatus(status)) => return Ok(Some(status)),
            None => {}
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
    run_with(started, plan, None, on_output, &mut || Ok(()), None)
}

/// [`run`], for a networked sandbox with its link's `network` attachment, and with
/// `before_go` (see [`launch`]).
pub fn run_with(
    started: Started,
    plan: &JailPlan,
    network: Option<&NetAttachment>,
    on_output: &mut dyn FnMut(Stream, &[u8]),
    before_go: &mut dyn FnMut() -> Result<(), JailError>,
    live_stdin: Option<BorrowedFd<'_>>,
) -> Result<(ExecResult, Teardown), JailError> {
    let launched = launch(started, plan, network, before_go, false)?;
    finish_run(launched, plan, on_output, live_stdin)
}

/// The rest of a run once its program may start (a held gated run: once its gate is open):
/// relays output and stdin, enforces the timeout (from [`Launched::start`]) and the output
/// cap, and makes the result. `live_stdin`: where the program's stdin comes from while it
/// runs, after the plan's (see [`crate::helper::LIVE_MODE`]).
pub(crate) fn finish_run(
    launched: Launched,
    plan: &JailPlan,
    on_output: &mut dyn FnMut(Stream, &[u8]),
    live_stdin: Option<BorrowedFd<'_>>,
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
        events,
        pidfd,
        out_r,
        err_r,
        in_w,
        status_r,
        ws_parent,
        ctl_r,
        start,
        scratch,
        gate,
        code_folder,
        report_prefix,
    } = launched;
    // A held gate that was never opened: the program must not run.
    if gate.is_some() {
        return Err(JailError::Os {
            op: "run a held sandbox",
            source: io::Error::other("its gate was not opened"),
        });
    }
    // A guarded run's report pipe (the program's descriptor 3), read once it has ended.
    let report_r = plan.import_report.then_some(ctl_r);
    // Nobody follows the output live: it is only collected for the result.
    let on_output: &mut dyn FnMut(Stream, &[u8]) = if plan.quiet_output {
        &mut |_, _| {}
    } else {
        on_output
    };

    let relay = relay_output(
        plan,
        [out_r, err_r, in_w],
        status_r.as_fd(),
        &pidfd,
        pid,
        start,
        on_output,
        live_stdin,
    )?;
    trace("output relayed");
    // Init reports the program's status once it has killed and reaped everything else in the
    // sandbox; if init was killed (timeout, output cap), the pipe just ends.
    let program_status = read_status(status_r.as_fd(), plan)?;
    let duration = start.elapsed();
    trace("status received");
    let (exit_code, signal) = exit_of(program_status);
    let oom = events.oom_killed();
    let pids_hit = events.pids_limit_hit();
    let reason = reason(&relay, oom, pids_hit, signal.is_some());
    if let Some(report_r) = report_r {
        // Every process of the sandbox is dead (init reports the status after killing and
        // reaping the rest, or init was killed): what is in the pipe is all there will be.
        let mut raw = report_prefix;
        raw.extend(read_available(report_r.as_fd()));
        let report = import_guard::parse_report(&raw);
        import_guard::judge_reason(&report, &reason).map_err(|e| match e {
            BackendError::ImportRefused(refusal) => JailError::ImportRefused(refusal),
            other => JailError::Refused(other.to_string()),
        })?;
    }
    let scratch = match scratch {
        Some(scratch) => Ok(Some(scratch)),
        None => sys::recv_fd(ws_parent.as_fd()),
    };
    let (artifacts, skipped_artifacts) = match scratch {
        Ok(Some(scratch)) => artifacts::collect(
            scratch.as_fd(),
            &plan.limits,
            &plan.known_outputs.iter().copied().collect(),
        ),
        _ => (Vec::new(), Vec::new()),
    };
    trace("artifacts collected");

    let result = ExecResult {
        stdout: capped_text(
            relay.stdout,
            relay.stdout_truncated,
            plan.limits.max_output_bytes,
        ),
        stderr: capped_text(
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
        egress: Default::default(),
    };
    Ok((
        result,
        Teardown {
            _init: kill_guard,
            _cgroup: cgroup,
            _code_folder: code_folder,
        },
    ))
}

/// What a pipe holds now, at most the import guard's report size, without waiting.
pub(crate) fn read_available(fd: BorrowedFd<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    if sys::set_nonblocking(fd).is_err() {
        return out;
    }
    let mut buf = [0u8; import_guard::MAX_REPORT];
    while out.len() < import_guard::MAX_REPORT {
        match sys::read(fd, &mut buf[..import_guard::MAX_REPORT - out.len()]) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
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

/// Kills (a no-op once it is exiting) and reaps the sandbox's init.
pub(crate) struct KillOnDrop(pub libc::pid_t);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = sys::kill(self.0, libc::SIGKILL);
        let _ = sys::waitpid(self.0);
    }
}

/// Maps the sandbox user to `host_uid` (and the gid of the same number), or without privilege
/// to the caller's own ids.
fn map_ids(pid: libc::pid_t, plan: &JailPlan, host_uid: Option<u32>) -> Result<(), JailError> {
    let ids = plan.ids;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let write = |file: &str, content: String| {
        std::fs::write(proc_dir.join(file), content)
            .map_err(|e| JailError::Refused(format!("cannot map ids of the sandbox ({file}): {e}")))
    };
    if let Some(host) = host_uid {
        write("uid_map", format!("{} {host} 1\n", ids.inside_uid))?;
        write("gid_map", format!("{} {host} 1\n", ids.inside_gid))?;
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
/// stdout and stderr early is still bounded by its timeout. The program's stdin is the plan's
/// `stdin`, then (with `live_stdin`) what arrives there until its end; it is closed after
/// that, or at once when there is nothing to give.
fn relay_output(
    plan: &JailPlan,
    [out_r, err_r, in_w]: [OwnedFd; 3],
    status: BorrowedFd<'_>,
    pidfd: &OwnedFd,
    pid: libc::pid_t,
    start: Instant,
    on_output: &mut dyn FnMut(Stream, &[u8]),
    mut live_stdin: Option<BorrowedFd<'_>>,
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
    if let Some(live) = live_stdin {
        sys::set_nonblocking(live).map_err(os("set nonblocking"))?;
    }
    let mut streams: [Option<OwnedFd>; 2] = [Some(out_r), Some(err_r)];
    let mut stdin = if plan.stdin.is_empty() && live_stdin.is_none() {
        // Closed now: the program reads end of file at once (kept to the end of this
        // function, a program reading its stdin would wait for its timeout).
        drop(in_w);
        None
    } else {
        Some(in_w)
    };
    // What is waiting to go to the program: the plan's stdin, then each chunk of the live
    // stdin (read only when this is empty, so a program that does not read holds it back).
    let mut pending: Vec<u8> = plan.stdin.clone();
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
            if stdin_off < pending.len() {
                pfds.push(libc::pollfd {
                    fd: w.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
            } else if let Some(live) = live_stdin {
                pfds.push(libc::pollfd {
                    fd: live.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
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
            if let Some(live) = live_stdin
                && pfd.fd == live.as_raw_fd()
            {
                match sys::read(live, &mut buf) {
                    Ok(0) => {
                        // The caller closed the program's stdin.
                        live_stdin = None;
                        stdin = None;
                    }
                    Ok(n) => {
                        pending.clear();
                        pending.extend_from_slice(&buf[..n]);
                        stdin_off = 0;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => {
                        live_stdin = None;
                        stdin = None;
                    }
                }
                continue;
            }
            if let Some(w) = &stdin
                && pfd.fd == w.as_raw_fd()
            {
                // SAFETY: writing from a valid slice of what is pending.
                let n = unsafe {
                    libc::write(
                        w.as_raw_fd(),
                        pending[stdin_off..].as_ptr().cast(),
                        pending.len() - stdin_off,
                    )
                };
                if n > 0 {
                    stdin_off += n as usize;
                }
                let done = stdin_off >= pending.len();
                if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                    // The program closed its stdin: nothing more goes to it.
                    stdin = None;
                    live_stdin = None;
                } else if done && live_stdin.is_none() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_follows_its_precedence() {
        // (output exceeded, oom, pids hit, timed out, signaled) -> reason
        let cases = [
            ((true, true, true, true, true), Reason::Output),
            ((false, true, true, true, true), Reason::Memory),
            ((false, false, true, true, true), Reason::Pids),
            ((false, false, false, true, true), Reason::Timeout),
            ((false, false, false, false, true), Reason::Signal),
            ((false, false, false, false, false), Reason::Exited),
            ((true, false, false, false, false), Reason::Output),
            ((false, true, false, false, false), Reason::Memory),
            ((false, false, true, false, false), Reason::Pids),
        ];
        for ((output, oom, pids, timeout, signaled), want) in cases {
            assert_eq!(
                reason_of(output, oom, pids, timeout, signaled),
                want,
                "{output} {oom} {pids} {timeout} {signaled}"
            );
        }
    }

    #[test]
    fn wait_statuses_become_an_exit_code_or_a_signal() {
        assert_eq!(exit_of(Some(3 << 8)), (Some(3), None));
        assert_eq!(exit_of(Some(0)), (Some(0), None));
        assert_eq!(exit_of(Some(libc::SIGSEGV)), (None, Some(libc::SIGSEGV)));
        // No status: init was killed, and the program with its namespace.
        assert_eq!(exit_of(None), (None, Some(libc::SIGKILL)));
    }

    fn status_of(messages: &[u8]) -> Result<Option<i32>, JailError> {
        let (r, w) = sys::pipe().unwrap();
        sys::write_all(w.as_fd(), messages).unwrap();
        drop(w);
        let plan = crate::plan::sample(&["python3"]);
        read_status(r.as_fd(), &plan)
    }

    fn msg(tag: u8, payload: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn inits_reports_become_the_runs_status_or_error() {
        assert!(matches!(
            status_of(&msg(b'E', b"build root\0no space")),
            Err(JailError::Setup { step, message }) if step == "build root" && message == "no space"
        ));
        assert!(matches!(
            status_of(&msg(b'C', b"not found")),
            Err(JailError::Command { command, message }) if command == "python3" && message == "not found"
        ));
        // Messages that are none of the reports are skipped.
        let mut both = msg(b'?', b"x");
        both.extend(msg(b'X', &(7_i32 << 8).to_le_bytes()));
        assert_eq!(status_of(&both).unwrap(), Some(7 << 8));
        assert_eq!(status_of(&[]).unwrap(), None);
    }
}
