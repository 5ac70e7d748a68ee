//! Runs a command in cgroup leaves of its own, made, limited and removed by the jail's own code
//! (`warden_jail::cgroup`, as a `warden run` of the `standard` profile does: the memory, pids and
//! cpu leaves, its limits, the OOM and pids counters read after the run, the removal and the
//! sweep of stale leaves), so that the cost of per-sandbox cgroups can be measured on another
//! sandbox, such as bwrap (issue 24, point 2: `bench/loops.py`, see docs/benchmarks.md).
//!
//! The wrapper is the subreaper of what it runs and waits for every process of it to end
//! before removing the leaves (as the jail reaps a sandbox's init before removing its own).
//!
//! `--no-cgroups` does everything else the same (this process's start, the fork, the hand-over
//! through a pipe, the exec, the wait for the whole tree) without any leaf: the control that
//! prices the wrapper itself, so that what the cgroups cost is the difference between the two,
//! not between the wrapped command and the bare one.
//!
//! usage: cgroup_wrap [--no-cgroups] COMMAND [ARG...]   (root; exits with the command's status)

use std::ffi::CString;
use std::process::ExitCode;
use warden_jail::cgroup::{CgroupPlan, Hierarchy};

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("cgroup_wrap: {what}: {e}");
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let mut args = std::env::args().peekable();
    let _program = args.next();
    let with_cgroups = args.next_if(|a| a == "--no-cgroups").is_none();
    let args: Vec<CString> = args
        .map(|a| CString::new(a).expect("no NUL in arguments"))
        .collect();
    if args.is_empty() {
        eprintln!("usage: cgroup_wrap [--no-cgroups] COMMAND [ARG...]");
        return ExitCode::from(2);
    }
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let leaves = if with_cgroups {
        let hierarchy = match Hierarchy::detect() {
            Ok(h) => h,
            Err(e) => return fail("cgroup hierarchy", e),
        };
        let name = format!("run-{}-bench", std::process::id());
        let cgroup = match hierarchy.create(&name, false) {
            Ok(cg) => cg,
            Err(e) => return fail("create", e),
        };
        // The `standard` profile's limits (profiles/settings.toml).
        let limits = CgroupPlan {
            memory_bytes: 128 << 20,
            max_pids: 64,
            cpus: 1.0,
        };
        if let Err(e) = cgroup.set_limits(&limits) {
            return fail("limits", e);
        }
        Some((hierarchy, cgroup))
    } else {
        None
    };
    // As the jail moves a sandbox's init in before it runs anything: the child waits, before
    // its exec, until it has been moved, so that all it starts is born inside.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return fail("pipe", std::io::Error::last_os_error());
    }
    let [go_r, go_w] = fds;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return fail("become a subreaper", std::io::Error::last_os_error());
    }
    // SAFETY: this process is single-threaded; the child makes only async-signal-safe calls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return fail("fork", std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: as above; `argv` is a NULL-terminated array of C strings that outlive this.
        unsafe {
            let mut byte = 0u8;
            libc::close(go_w);
            if libc::read(go_r, (&mut byte as *mut u8).cast(), 1) == 1 {
                libc::execvp(argv[0], argv.as_ptr());
            }
            libc::_exit(127);
        }
    }
    // SAFETY: the read end is this process's own copy.
    unsafe { libc::close(go_r) };
    let attached = match &leaves {
        Some((_, cgroup)) => cgroup.attach(pid),
        None => Ok(()),
    };
    if attached.is_ok() {
        // SAFETY: one byte from a valid buffer to the pipe's write end.
        unsafe { libc::write(go_w, [1u8].as_ptr().cast(), 1) };
    }
    // SAFETY: the write end is this process's own; closing it ends a child that was not moved.
    unsafe { libc::close(go_w) };
    let mut status = 0;
    // SAFETY: `status` is a valid int; `pid` is this process's child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    // What the command left behind (bwrap's pid 1 is still ending its namespaces when bwrap
    // has exited) came to this subreaper: reap it all before the leaves are removed, as the
    // jail reaps init before its own. Without this, the first `rmdir` met a leaf still in use
    // (EBUSY) in 83 runs of 100 and slept before retrying: idle time charged to the cgroups.
    // SAFETY: a NULL status pointer is allowed; -1 waits for any child.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::__WALL) } > 0 {}
    if let Some((hierarchy, cgroup)) = &leaves {
        let _ = (cgroup.oom_killed(), cgroup.pids_limit_hit());
        let _ = cgroup.remove();
        hierarchy.remove_stale();
    }
    if let Err(e) = attached {
        // The child ended without running the command.
        return fail("attach", e);
    }
    ExitCode::from(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else {
        1
    })
}
