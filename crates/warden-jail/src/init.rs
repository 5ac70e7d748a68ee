//! The sandbox's init (pid 1 of its pid namespace): cloned by the supervisor
//! ([`crate::supervisor::start`]), it runs the containment steps that need no plan, waits for its
//! plan, runs [`contain::STEPS`], starts the program (`clone(CLONE_VM | CLONE_VFORK)` +
//! `execve`), reaps every process of the sandbox and reports the program's status; and the
//! status pipe's messages it reports on ([`Report`]).
//!
//! Invariants: init never returns — once its report is out it `_exit`s (the plan says
//! `init_exits_on_status`) or waits to be killed, and its exit tears the namespaces down; a
//! failed step is reported with its name and ends init before the program could run;
//! everything the program inherits is applied to init first; the program's child, which shares
//! init's memory, makes only async-signal-safe system calls on data prepared before the clone;
//! init dies with its supervisor (parent-death signal).

use crate::contain::{self, Ctx};
use crate::plan::{InitInput, JailPlan};
use crate::seccomp;
use crate::sys;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;

// Init's reports on the status pipe: tag byte, u32 length (little-endian), payload.
const MSG_STEP_FAILED: u8 = b'E';
const MSG_EXEC_FAILED: u8 = b'C';
const MSG_EXIT_STATUS: u8 = b'X';

/// A report of init's, as the supervisor reads it (see [`next_message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// A containment step (or the program's start) failed: the program never ran.
    StepFailed { step: String, message: String },
    /// The program could not be executed (not found, not executable).
    ExecFailed(String),
    /// The program's wait status, once every other process of the sandbox is gone.
    ExitStatus(i32),
}

impl Report {
    /// The report in a message; `None` for a message that is none of them (skipped).
    pub(crate) fn decode(tag: u8, payload: &[u8]) -> Option<Report> {
        match tag {
            MSG_STEP_FAILED => {
                let text = String::from_utf8_lossy(payload);
                let (step, message) = text.split_once('\0').unwrap_or(("unknown", &text));
                Some(Report::StepFailed {
                    step: step.to_owned(),
                    message: message.to_owned(),
                })
            }
            MSG_EXEC_FAILED => Some(Report::ExecFailed(
                String::from_utf8_lossy(payload).into_owned(),
            )),
            MSG_EXIT_STATUS if payload.len() == 4 => {
                Some(Report::ExitStatus(i32::from_le_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ])))
            }
            _ => None,
        }
    }
}

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

/// Init's plan and network attachment, from its supervisor (see [`receive_plan`]).
fn read_plan(plan_r: BorrowedFd<'_>, bell: BorrowedFd<'_>) -> Option<InitInput> {
    let raw = receive_plan(plan_r, bell, usize::MAX)?;
    serde_json::from_slice(&raw).ok()
}

/// Waits for the doorbell, then reads a plan — init's from its supervisor, a forked helper's
/// from its caller — (its length, then its bytes, at most `max`) from the pipe; `None` if the sender went away without one. The receiver polls the pipe for
/// hang-up only, so the plan's bytes arriving do not wake it (see [`crate::supervisor::send_plan`]).
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
pub(crate) fn next_message(fd: BorrowedFd<'_>) -> Option<(u8, Vec<u8>)> {
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

/// The sandbox's init's name (`/proc/1/comm` inside): the binary's.
const INIT_NAME: &str = "warden";

/// The sandbox's init: runs the containment steps, starts the program, reaps, reports the
/// program's status, exits. Never returns.
pub(crate) fn sandbox_init(
    plan_r: OwnedFd,
    plan_bell: OwnedFd,
    go: OwnedFd,
    workspace_socket: OwnedFd,
    stdio: [OwnedFd; 5],
    status: OwnedFd,
) -> ! {
    let status_fd = status.as_raw_fd();
    // The name a program sees as pid 1's whatever the helper's (each names its mode), as
    // with the CLI's helper: one way of starting a sandbox is not told from another.
    crate::sys::set_name(INIT_NAME);
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
    let Some(InitInput { plan, network }) = plan else {
        // SAFETY: _exit ends the process without running destructors of the copied state.
        unsafe { libc::_exit(126) };
    };
    drop(plan_r);
    let plan = &plan;
    let filters = plan.seccomp.then(seccomp::filters);
    let mut ctx = Ctx {
        plan,
        network: network.as_ref(),
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
    let [stdin, stdout, stderr, reply, start] = &stdio;
    let spawn = ProgramSpawn {
        exec: &exec,
        stdio: [
            stdin.as_raw_fd(),
            stdout.as_raw_fd(),
            stderr.as_raw_fd(),
            // A gated program's interpreter says on it that it reached its gate.
            if plan.session || plan.import_report || plan.gated {
                reply.as_raw_fd()
            } else {
                -1
            },
            if plan.gated { start.as_raw_fd() } else { -1 },
        ],
        exec_errno: 0,
        chdir_failed: false,
    };
    let (child, exec_errno, chdir_failed) = match spawn_program(spawn) {
        Ok(spawned) => spawned,
        Err(e) => step_failed(status_fd, "start program", &e.to_string()),
    };
    if exec_errno != 0 {
        // The child has exited (127); the loop below reaps it and reports its status after
        // this message, which the supervisor reads first.
        let err = io::Error::from_raw_os_error(exec_errno);
        let message = if chdir_failed {
            format!("working directory {}: {err}", plan.cwd.display())
        } else {
            err.to_string()
        };
        send_msg(status_fd, MSG_EXEC_FAILED, message.as_bytes());
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
            if plan.init_exits_on_status {
                // Its exit ends the namespaces (every mount, the network) now, beside the
                // supervisor collecting the artifacts through descriptors it holds.
                // SAFETY: _exit takes an integer; nothing of init needs to run at exit.
                unsafe { libc::_exit(0) };
            }
            wait_for_teardown();
        }
        if reaped < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
    }
}

/// Init's last state, once the status is out (unless the plan says `init_exits_on_status`): it
/// waits to be killed rather than exiting. Its exit tears down the namespaces (every mount, the
/// network), a millisecond of kernel work that would otherwise compete on the CPUs with the
/// supervisor collecting the artifacts and answering a daemon's client; the supervisor kills
/// init once the answer is out (`KillOnDrop`). Init dies with its supervisor in any case
/// (parent-death signal). (Not at a lower priority: the teardown takes kernel locks that the
/// next sandbox's start waits for.)
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
    /// stdin, stdout, stderr, (a session's, a guarded or gated run's) reply pipe and (a gated
    /// run's) start pipe, or -1 for none.
    stdio: [RawFd; 5],
    /// Set by the child when its exec failed; read by init once the child has left.
    exec_errno: i32,
    /// Set by the child when the failure was entering the working directory.
    chdir_failed: bool,
}

/// The program's child: moves its streams into place and execs. It runs on its own stack in
/// init's address space (CLONE_VM), with init suspended until it execs or exits (CLONE_VFORK),
/// so it touches nothing but `ProgramSpawn` and makes only async-signal-safe calls.
extern "C" fn program_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ProgramSpawn` that `spawn_program` keeps alive, and init is
    // suspended until this child execs or exits, so nothing else touches it meanwhile.
    let spawn = unsafe { &mut *arg.cast::<ProgramSpawn<'_>>() };
    let exec = spawn.exec;
    let targets = [
        0,
        1,
        2,
        crate::layout::SESSION_REPLY_FD,
        crate::layout::START_FD,
    ];
    // SAFETY: raw system calls on descriptors and on C strings prepared before the clone.
    unsafe {
        let mut ok = true;
        // The sources are all above 3 (the helper's 0-2 were open when the pipes were made,
        // and an exec'd helper holds 3 for the workspace), so no dup2 clobbers a later source;
        // the start pipe's target comes last. A source already at its target only loses
        // close-on-exec (dup2 onto itself would keep it).
        for (from, to) in spawn.stdio.into_iter().zip(targets) {
            let moved = if from == to {
                libc::fcntl(from, libc::F_SETFD, 0)
            } else if from >= 0 {
                libc::dup2(from, to)
            } else {
                0
            };
            if moved < 0 {
                ok = false;
                break;
            }
        }
        let entered = ok && libc::chdir(exec.cwd.as_ptr()) == 0;
        spawn.chdir_failed = ok && !entered;
        if entered {
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
/// copies those of a fork of the large `warden` binary). Returns the child's pid, the errno
/// of a failed exec (0 when the exec succeeded) and whether it was the working directory that
/// failed.
fn spawn_program(mut spawn: ProgramSpawn<'_>) -> io::Result<(libc::pid_t, i32, bool)> {
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
        Ok((
            pid,
            std::ptr::read_volatile(&spawn.exec_errno),
            std::ptr::read_volatile(&spawn.chdir_failed),
        ))
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
    let path = plan
        .find_command()
        .ok_or_else(|| format!("{}: command not found in the sandbox", plan.argv[0]))?;
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

/// Whether `path` is a file this process may execute.
pub(crate) fn is_executable(path: &Path) -> bool {
    let Ok(c) = sys::cstring(path) else {
        return false;
    };
    // SAFETY: `c` is a valid C string.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 && !path.is_dir() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `messages` as init does, closes the pipe, and reads them back as the supervisor does.
    fn round_trip(messages: &[(u8, &[u8])]) -> Vec<Option<Report>> {
        let (r, w) = sys::pipe().unwrap();
        for (tag, payload) in messages {
            send_msg(w.as_raw_fd(), *tag, payload);
        }
        drop(w);
        let mut out = Vec::new();
        while let Some((tag, payload)) = next_message(r.as_fd()) {
            out.push(Report::decode(tag, &payload));
        }
        out
    }

    #[test]
    fn reports_survive_the_status_pipe() {
        let status = 0x0300_i32.to_le_bytes();
        assert_eq!(
            round_trip(&[
                (MSG_STEP_FAILED, b"apply seccomp\0invalid argument"),
                (MSG_EXEC_FAILED, b"No such file or directory (os error 2)"),
                (MSG_EXIT_STATUS, &status),
            ]),
            [
                Some(Report::StepFailed {
                    step: "apply seccomp".into(),
                    message: "invalid argument".into(),
                }),
                Some(Report::ExecFailed(
                    "No such file or directory (os error 2)".into()
                )),
                Some(Report::ExitStatus(0x0300)),
            ]
        );
    }

    #[test]
    fn odd_messages_are_skipped_or_named_unknown() {
        assert_eq!(
            Report::decode(MSG_STEP_FAILED, b"no separator"),
            Some(Report::StepFailed {
                step: "unknown".into(),
                message: "no separator".into(),
            })
        );
        assert_eq!(Report::decode(MSG_EXIT_STATUS, &[1, 2, 3]), None);
        assert_eq!(Report::decode(b'?', b"x"), None);
        // A message cut short (init killed while writing) ends the stream.
        let (r, w) = sys::pipe().unwrap();
        sys::write_all(w.as_fd(), &[MSG_EXIT_STATUS, 4, 0, 0, 0, 1]).unwrap();
        drop(w);
        assert_eq!(next_message(r.as_fd()), None);
    }

    #[test]
    fn a_plan_arrives_only_with_the_doorbell() {
        // Small (fits in the pipe) and large (written after the bell, read as it comes).
        for len in [100usize, 1 << 20] {
            let (r, w) = sys::pipe().unwrap();
            let bell = sys::eventfd().unwrap();
            let plan = vec![7u8; len];
            let sent = plan.clone();
            let bell_w = bell.try_clone().unwrap();
            let sender = std::thread::spawn(move || {
                crate::supervisor::send_plan(w, bell_w.as_fd(), &sent).unwrap()
            });
            assert_eq!(
                receive_plan(r.as_fd(), bell.as_fd(), usize::MAX).as_deref(),
                Some(&plan[..])
            );
            sender.join().unwrap();
        }
        // Closed unrung: no plan is coming.
        let (r, w) = sys::pipe().unwrap();
        let bell = sys::eventfd().unwrap();
        drop(w);
        assert_eq!(receive_plan(r.as_fd(), bell.as_fd(), usize::MAX), None);
        // Larger than the receiver takes: refused.
        let (r, w) = sys::pipe().unwrap();
        let bell = sys::eventfd().unwrap();
        crate::supervisor::send_plan(w, bell.as_fd(), &[1u8; 64]).unwrap();
        assert_eq!(receive_plan(r.as_fd(), bell.as_fd(), 63), None);
    }

    fn plan(argv: &[&str]) -> JailPlan {
        crate::plan::sample(argv)
    }

    fn c(p: *const libc::c_char) -> String {
        // SAFETY: the pointers come from CStrings `Exec` keeps alive.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn the_program_is_found_in_the_plans_path_and_its_arrays_end_in_null() {
        let exec = prepare_exec(&plan(&["sh", "-c", "true"])).unwrap();
        let path = exec.path.to_str().unwrap();
        assert!(path.ends_with("/sh") && path.starts_with('/'), "{path}");
        assert_eq!(exec.cwd.to_str().unwrap(), "/workspace");
        let argv: Vec<_> = exec.argv_ptrs[..3].iter().map(|&p| c(p)).collect();
        assert_eq!(argv, ["sh", "-c", "true"]);
        assert!(exec.argv_ptrs[3].is_null() && exec.argv_ptrs.len() == 4);
        let env: Vec<_> = exec.env_ptrs[..exec.env_ptrs.len() - 1]
            .iter()
            .map(|&p| c(p))
            .collect();
        assert!(env.contains(&"K=v=w".to_owned()), "{env:?}");
        assert!(env.iter().any(|e| e.starts_with("PATH=/")));
        assert!(exec.env_ptrs.last().unwrap().is_null());
        // A path with a slash is taken as it is, found or not.
        let exec = prepare_exec(&plan(&["/no/such/program"])).unwrap();
        assert_eq!(exec.path.to_str().unwrap(), "/no/such/program");
    }

    #[test]
    fn a_missing_program_or_a_nul_in_an_argument_is_an_error() {
        assert_eq!(
            prepare_exec(&plan(&["warden-no-such-program"]))
                .err()
                .unwrap(),
            "warden-no-such-program: command not found in the sandbox"
        );
        assert!(prepare_exec(&plan(&["/bin/sh", "a\0b"])).is_err());
    }
}
