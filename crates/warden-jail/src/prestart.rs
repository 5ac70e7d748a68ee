//! The helper forked early by a single-threaded caller ([`Prestarted`]: the one-shot CLI forks it
//! first thing in `main`), and its placement on another CPU than its parent's ([`OtherCpu`]).
//!
//! Invariants: a helper is forked only when the process has exactly one thread (checked, not
//! assumed); the child runs only `helper::serve_forked` and `_exit`s, never returning into the
//! caller; its CPUs are narrowed only until it is placed, then widened back to every CPU the
//! caller allowed; an unused `Prestarted` is waited for when dropped, so it leaves nothing
//! behind.

/// A helper forked early from a single-threaded process: it is already creating its sandbox's
/// namespaces and waits for the plan. Dropping it unused closes the plan pipe, and the helper
/// then removes its sandbox and exits.
#[derive(Debug)]
pub struct Prestarted {
    pub(crate) parts: Option<HelperParts>,
}

/// The caller's ends of a forked helper: its pid, the plan pipe with its doorbell, and the
/// frames pipe.
#[derive(Debug)]
pub(crate) struct HelperParts {
    pub(crate) pid: libc::pid_t,
    pub(crate) plan_w: std::os::fd::OwnedFd,
    /// Rung once the plan is in the pipe (see `supervisor::send_plan`).
    pub(crate) plan_bell: std::os::fd::OwnedFd,
    pub(crate) frames_r: std::os::fd::OwnedFd,
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
        let plan_bell = crate::sys::eventfd().ok()?;
        let (frames_r, frames_w) = crate::sys::pipe().ok()?;
        let placement = OtherCpu::before_fork();
        // SAFETY: this process has one thread, so the child gets a consistent copy of it; the
        // child only runs `helper::serve` and then `_exit`s, never returning to the caller.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return None;
        }
        if pid == 0 {
            if let Some(placement) = placement {
                placement.in_child();
            }
            drop((plan_w, frames_r));
            // The helper must not hold the caller's stdin or stdout open (its standard error
            // goes once the result is out: `helper::finish`).
            crate::sys::redirect_to_null(&[0, 1]);
            let mut out =
                std::io::BufWriter::with_capacity(64 * 1024, std::fs::File::from(frames_w));
            let code = crate::helper::serve_forked(plan_r, plan_bell, &mut out);
            drop(out);
            // SAFETY: leave without running the parent's destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        if let Some(placement) = placement {
            placement.in_parent(pid);
        }
        Some(Prestarted {
            parts: Some(HelperParts {
                pid,
                plan_w,
                plan_bell,
                frames_r,
            }),
        })
    }
}

/// Starts the forked helper on another CPU than its parent's. The kernel queues a forked
/// child on its parent's CPU more often than not, even with the other CPU idle, and the child
/// then waits there until the parent sleeps (measured with `perf sched`: the helper runnable
/// for 0.64 ms while the CLI built its plan), so the namespaces it should be creating
/// meanwhile are created only after. The parent narrows the child's CPUs to the others, which
/// moves it at once; the child, once told, widens them back to the parent's own before it
/// creates anything, so the sandbox keeps every CPU the caller allowed.
struct OtherCpu {
    allowed: libc::cpu_set_t,
    others: libc::cpu_set_t,
    /// A byte from the parent once the child's CPUs are narrowed (or could not be); end of
    /// file if the parent died first.
    placed_r: std::os::fd::OwnedFd,
    placed_w: std::os::fd::OwnedFd,
}

impl OtherCpu {
    /// `None` when this process may run on one CPU only (nothing to gain) or on error.
    fn before_fork() -> Option<OtherCpu> {
        let allowed = crate::sys::cpu_affinity(0).ok()?;
        let here = crate::sys::current_cpu()
            .ok()
            .filter(|&cpu| cpu < libc::CPU_SETSIZE as usize)?;
        let mut others = allowed;
        // SAFETY: CPU_CLR and CPU_COUNT only touch the set; `here` is below CPU_SETSIZE.
        unsafe {
            libc::CPU_CLR(here, &mut others);
            if libc::CPU_COUNT(&others) == 0 {
                return None;
            }
        }
        let (placed_r, placed_w) = crate::sys::pipe().ok()?;
        Some(OtherCpu {
            allowed,
            others,
            placed_r,
            placed_w,
        })
    }

    fn in_parent(self, child: libc::pid_t) {
        use std::os::fd::AsFd;
        let _ = crate::sys::set_cpu_affinity(child, &self.others);
        let _ = crate::sys::write_all(self.placed_w.as_fd(), b"p");
    }

    fn in_child(self) {
        use std::os::fd::AsFd;
        let OtherCpu {
            allowed,
            placed_r,
            placed_w,
            ..
        } = self;
        drop(placed_w);
        let mut byte = [0u8; 1];
        let _ = crate::sys::read(placed_r.as_fd(), &mut byte);
        let _ = crate::sys::set_cpu_affinity(0, &allowed);
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
