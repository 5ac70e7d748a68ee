//! The sandbox's network namespace, made beside its init instead of by init's clone.
//!
//! A new network namespace is the costliest namespace to create (≈0.45 ms of the 0.7 ms that
//! a clone into all of them took here; every protocol's per-namespace state is set up), and
//! made by init's clone it sat on the path to every program's start: the supervisor could not
//! read its plan before the clone returned. Now the supervisor clones init without it and
//! starts a [`NetnsMaker`]: a short-lived process (a `clone(CLONE_VM | CLONE_FILES)` of the
//! supervisor, on a stack of its own) that enters init's user namespace, creates the network
//! namespace there, brings its loopback up and opens it into the supervisor's descriptor
//! table — on the other CPU, while the supervisor reads the plan and init builds its root.
//! The supervisor hands the namespace to init, which enters it (the step "enter network
//! namespace") before it drops its capabilities and long before the program starts.
//!
//! Invariants:
//! - the namespace is owned by init's user namespace, as when init's clone made it, so init
//!   can enter and configure it and nothing of the host can be reached from it;
//! - no program runs before init has entered it: a maker that failed makes the supervisor
//!   refuse the sandbox, and init's step then fails on the closed socket (fail closed); a
//!   maker that failed only because init had already exited ([`NetnsMaker::init_was_gone`])
//!   still fails the sandbox, but its error gives way to the one that ended init;
//! - the maker shares the supervisor's memory, so it makes only raw system calls (no libc
//!   wrapper: those write `errno`, which is the supervisor thread's) and reports through
//!   [`Job`], which the supervisor reads only after reaping it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const STACK_BYTES: usize = 32 * 1024;
const NETNS_PATH: &[u8] = b"/proc/self/ns/net\0";

/// What the maker was doing when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    None = 0,
    EnterUserNamespace,
    CreateNetworkNamespace,
    LoopbackSocket,
    LoopbackFlags,
    LoopbackUp,
    OpenNamespace,
}

impl Op {
    fn describe(self) -> &'static str {
        match self {
            Op::None => "(nothing)",
            Op::EnterUserNamespace => "enter the sandbox's user namespace",
            Op::CreateNetworkNamespace => "create the network namespace",
            Op::LoopbackSocket => "open a socket to configure loopback",
            Op::LoopbackFlags => "read loopback's flags",
            Op::LoopbackUp => "bring up loopback",
            Op::OpenNamespace => "open the network namespace",
        }
    }
}

/// The maker's input and report, in memory it shares with the supervisor.
struct Job {
    /// A pidfd of the sandbox's init, whose user namespace the maker enters.
    init: i32,
    /// The namespace's descriptor, in the supervisor's table (set on success).
    netns: i32,
    failed: Op,
    errno: i32,
}

/// A network namespace being made; [`NetnsMaker::finish`] waits for it.
pub struct NetnsMaker {
    /// The maker's pid until it is reaped.
    pid: Option<libc::pid_t>,
    /// Boxed so that its address, which the maker holds, never moves.
    job: Box<Job>,
    /// The maker's stack (a heap buffer: it does not move with the struct).
    _stack: Vec<u8>,
    made: Option<OwnedFd>,
    /// Set by `finish`: the maker failed because init had exited (see `init_was_gone`).
    init_gone: bool,
}

impl std::fmt::Debug for NetnsMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetnsMaker")
            .field("pid", &self.pid)
            .finish()
    }
}

impl NetnsMaker {
    /// Starts making a network namespace owned by the user namespace of `init` (a pidfd).
    pub fn start(init: BorrowedFd<'_>) -> io::Result<NetnsMaker> {
        let mut job = Box::new(Job {
            init: init.as_raw_fd(),
            netns: -1,
            failed: Op::None,
            errno: 0,
        });
        let mut stack = vec![0u8; STACK_BYTES];
        let arg: *mut Job = &mut *job;
        // SAFETY: the stack and the job live in the returned maker, which reaps the maker
        // before dropping them (see `Drop`); the maker makes only raw system calls (see
        // `make`). Not CLONE_FS: entering a user namespace needs a filesystem context of
        // one's own.
        let pid = unsafe {
            crate::sys::clone_sharing_memory(
                &mut stack,
                libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD,
                make,
                arg.cast(),
            )
        }?;
        Ok(NetnsMaker {
            pid: Some(pid),
            job,
            _stack: stack,
            made: None,
            init_gone: false,
        })
    }

    /// Waits for the maker and returns the namespace (the same one on every call).
    pub fn finish(&mut self) -> io::Result<BorrowedFd<'_>> {
        if let Some(pid) = self.pid.take() {
            let status = crate::sys::waitpid(pid)?;
            // SAFETY: the maker is reaped, so nothing writes the job any more; the volatile
            // reads keep the compiler from assuming the fields unchanged since `start`.
            let (netns, failed, errno) = unsafe {
                (
                    std::ptr::read_volatile(&self.job.netns),
                    std::ptr::read_volatile(&self.job.failed),
                    std::ptr::read_volatile(&self.job.errno),
                )
            };
            if netns >= 0 {
                // SAFETY: the maker opened this descriptor in our shared table; nobody else
                // owns it.
                self.made = Some(unsafe { OwnedFd::from_raw_fd(netns) });
            } else if failed != Op::None {
                self.init_gone = failed == Op::EnterUserNamespace && errno == libc::ESRCH;
                return Err(io::Error::new(
                    io::Error::from_raw_os_error(errno).kind(),
                    format!(
                        "{}: {}",
                        failed.describe(),
                        io::Error::from_raw_os_error(errno)
                    ),
                ));
            } else {
                return Err(io::Error::other(format!(
                    "the maker ended without a namespace (wait status {status:#x})"
                )));
            }
        }
        use std::os::fd::AsFd;
        self.made
            .as_ref()
            .map(|fd| fd.as_fd())
            .ok_or_else(|| io::Error::other("the network namespace was not made"))
    }

    /// Whether the maker, once [`finish`](Self::finish)ed, failed only because init had
    /// already exited (entering its user namespace through the pidfd: `ESRCH`). That failure
    /// is a consequence, not a cause: whatever ended init says why the sandbox failed.
    pub fn init_was_gone(&self) -> bool {
        self.init_gone
    }
}

impl Drop for NetnsMaker {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            // The stack and the job must outlive the maker.
            let _ = crate::sys::kill(pid, libc::SIGKILL);
            let _ = crate::sys::waitpid(pid);
        }
    }
}

/// The maker: raw system calls only, on its own stack, in the supervisor's memory.
extern "C" fn make(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the boxed job, alive until this process is reaped; the supervisor does
    // not touch it meanwhile.
    let job = unsafe { &mut *arg.cast::<Job>() };
    match make_namespace(job.init) {
        Ok(fd) => {
            job.netns = fd;
            0
        }
        Err((op, errno)) => {
            job.failed = op;
            job.errno = errno;
            1
        }
    }
}

fn make_namespace(init: i32) -> Result<i32, (Op, i32)> {
    use raw::syscall3;
    let check = |op: Op, ret: isize| {
        if ret < 0 {
            Err((op, -ret as i32))
        } else {
            Ok(ret)
        }
    };
    // SAFETY: every call takes plain integers, or pointers to the ifreq on this stack and to a
    // static NUL-terminated path.
    unsafe {
        // A new task is queued on its parent's CPU ahead of it; let the supervisor finish
        // starting and go to sleep waiting for its plan first, or it would sit behind this
        // process's 0.5–0.8 ms of namespace creation and read the plan late.
        syscall3(libc::SYS_sched_yield, 0, 0, 0);
        check(
            Op::EnterUserNamespace,
            syscall3(
                libc::SYS_setns,
                init as usize,
                libc::CLONE_NEWUSER as usize,
                0,
            ),
        )?;
        check(
            Op::CreateNetworkNamespace,
            syscall3(libc::SYS_unshare, libc::CLONE_NEWNET as usize, 0, 0),
        )?;
        let sock = check(
            Op::LoopbackSocket,
            syscall3(
                libc::SYS_socket,
                libc::AF_INET as usize,
                (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as usize,
                0,
            ),
        )? as usize;
        let mut req: libc::ifreq = std::mem::zeroed();
        req.ifr_name[0] = b'l' as libc::c_char;
        req.ifr_name[1] = b'o' as libc::c_char;
        check(
            Op::LoopbackFlags,
            syscall3(
                libc::SYS_ioctl,
                sock,
                libc::SIOCGIFFLAGS as usize,
                addr(&mut req),
            ),
        )?;
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        check(
            Op::LoopbackUp,
            syscall3(
                libc::SYS_ioctl,
                sock,
                libc::SIOCSIFFLAGS as usize,
                addr(&mut req),
            ),
        )?;
        syscall3(libc::SYS_close, sock, 0, 0);
        let fd = check(
            Op::OpenNamespace,
            syscall3(
                libc::SYS_openat,
                libc::AT_FDCWD as usize,
                NETNS_PATH.as_ptr() as usize,
                (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
            ),
        )?;
        Ok(fd as i32)
    }
}

fn addr<T>(value: &mut T) -> usize {
    value as *mut T as usize
}

/// System calls without libc's wrappers, which would write `errno` (thread-local storage the
/// maker shares with the supervisor's thread). They return the result or minus the errno.
mod raw {
    /// # Safety
    /// As for the system call `nr` with these arguments.
    #[cfg(target_arch = "x86_64")]
    pub unsafe fn syscall3(nr: libc::c_long, a: usize, b: usize, c: usize) -> isize {
        let ret: isize;
        // SAFETY: the caller upholds the call's contract; `syscall` clobbers rcx and r11.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") nr as isize => ret,
                in("rdi") a,
                in("rsi") b,
                in("rdx") c,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    /// # Safety
    /// As for the system call `nr` with these arguments.
    #[cfg(target_arch = "aarch64")]
    pub unsafe fn syscall3(nr: libc::c_long, a: usize, b: usize, c: usize) -> isize {
        let ret: isize;
        // SAFETY: the caller upholds the call's contract.
        unsafe {
            std::arch::asm!(
                "svc 0",
                in("x8") nr,
                inlateout("x0") a as isize => ret,
                in("x1") b,
                in("x2") c,
                options(nostack),
            );
        }
        ret
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    /// A child paused in a new user namespace, killed on drop.
    struct Paused(libc::pid_t);

    impl Paused {
        fn start(flags: libc::c_int) -> Paused {
            // SAFETY: the child only pauses and exits; it never returns into the test harness.
            let pid = unsafe { crate::sys::clone_into_namespaces(flags) }.expect("clone");
            if pid == 0 {
                loop {
                    // SAFETY: pause has no arguments.
                    unsafe { libc::pause() };
                }
            }
            Paused(pid)
        }
    }

    impl Drop for Paused {
        fn drop(&mut self) {
            let _ = crate::sys::kill(self.0, libc::SIGKILL);
            let _ = crate::sys::waitpid(self.0);
        }
    }

    fn inode(path: String) -> u64 {
        std::fs::metadata(path).expect("namespace file").ino()
    }

    #[test]
    fn the_namespace_is_new_and_owned_by_the_sandbox_user_namespace() {
        let child = Paused::start(libc::CLONE_NEWUSER);
        let pidfd = crate::sys::pidfd_open(child.0).expect("pidfd");
        let mut maker = NetnsMaker::start(pidfd.as_fd()).expect("start");
        let netns = maker.finish().expect("made").try_clone_to_owned().unwrap();
        let st = crate::sys::fstat(netns.as_fd()).unwrap();
        assert_ne!(
            st.st_ino,
            inode("/proc/self/ns/net".into()),
            "not the host's"
        );
        // NS_GET_USERNS: the user namespace that owns it.
        // SAFETY: an ioctl without argument on a namespace descriptor; it returns a new fd.
        let owner = unsafe { libc::ioctl(netns.as_raw_fd(), 0xb701) };
        assert!(owner >= 0, "{}", io::Error::last_os_error());
        // SAFETY: the ioctl returned a new descriptor that nobody else owns.
        let owner = unsafe { OwnedFd::from_raw_fd(owner) };
        assert_eq!(
            crate::sys::fstat(owner.as_fd()).unwrap().st_ino,
            inode(format!("/proc/{}/ns/user", child.0))
        );
        // A second finish gives the same namespace.
        assert_eq!(
            crate::sys::fstat(maker.finish().unwrap()).unwrap().st_ino,
            st.st_ino
        );
    }

    #[test]
    fn a_failure_names_the_step_and_leaves_no_namespace() {
        // A process of this user namespace: entering it again is refused (EINVAL).
        let child = Paused::start(0);
        let pidfd = crate::sys::pidfd_open(child.0).expect("pidfd");
        let mut maker = NetnsMaker::start(pidfd.as_fd()).expect("start");
        let err = maker.finish().expect_err("refused").to_string();
        assert!(
            err.starts_with("enter the sandbox's user namespace: "),
            "{err}"
        );
        assert!(maker.finish().is_err());
        assert!(
            !maker.init_was_gone(),
            "init was there: a failure of the maker's own"
        );
    }

    #[test]
    fn a_maker_whose_init_has_exited_says_so() {
        // Init ended (a step of its own failed) before the maker entered its user namespace:
        // the maker's failure is only a consequence, and says so.
        let child = Paused::start(libc::CLONE_NEWUSER);
        let pidfd = crate::sys::pidfd_open(child.0).expect("pidfd");
        crate::sys::kill(child.0, libc::SIGKILL).unwrap();
        assert!(
            crate::sys::wait_readable(pidfd.as_fd(), 5000).unwrap(),
            "exited"
        );
        let mut maker = NetnsMaker::start(pidfd.as_fd()).expect("start");
        assert!(!maker.init_was_gone(), "not known before finish");
        let err = maker.finish().expect_err("no namespace").to_string();
        assert!(
            err.starts_with("enter the sandbox's user namespace: "),
            "{err}"
        );
        assert!(maker.init_was_gone(), "{err}");
    }
}
