//! Thin, safe wrappers over the raw system calls the jail needs.
//!
//! Invariant: every wrapper returns `io::Result` with the OS error intact and owns the file
//! descriptors it creates (`OwnedFd`), so no descriptor leaks into a sandbox by accident: all
//! of them are opened close-on-exec.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// The filesystem calls the docker backend shares (a durable workspace's image, see
/// [`warden_net::disk`]).
pub use warden_net::fsys::{
    attach_clone, detached_fs, dup2, entry_names, open_beneath, umount_detach,
};

/// The same helpers as the shared calls above (one definition, in warden-net).
pub use warden_net::fsys::cstring;
use warden_net::fsys::{check, check_long};

/// This process's effective uid and gid set to another user's for a while (its real and
/// saved ids stay root's, so [`EffectiveIds::restore`] can switch back): what a namespace
/// created meanwhile takes as its owner. Single-threaded callers only (the raw system calls
/// change the calling thread).
///
/// A change of effective ids clears the dumpable flag and the parent-death signal: both are
/// put back on restore (a helper must still die with the daemon that started it).
#[must_use = "restore the effective ids"]
pub struct EffectiveIds {
    dumpable: libc::c_int,
    parent_death_signal: libc::c_int,
    parent: libc::pid_t,
}

impl EffectiveIds {
    pub fn become_ids(uid: u32, gid: u32) -> io::Result<EffectiveIds> {
        // SAFETY: prctl with integer arguments.
        let dumpable = check(unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) })?;
        let mut parent_death_signal: libc::c_int = 0;
        // SAFETY: PR_GET_PDEATHSIG writes an int to the pointer, which is valid.
        check(unsafe {
            libc::prctl(
                libc::PR_GET_PDEATHSIG,
                &mut parent_death_signal as *mut libc::c_int as libc::c_ulong,
                0,
                0,
                0,
            )
        })?;
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        const KEEP: libc::c_long = -1;
        // SAFETY: setresgid/setresuid with integer arguments; -1 keeps an id.
        check_long(unsafe {
            libc::syscall(libc::SYS_setresgid, KEEP, libc::c_long::from(gid), KEEP)
        })?;
        // SAFETY: as above.
        if let Err(e) = check_long(unsafe {
            libc::syscall(libc::SYS_setresuid, KEEP, libc::c_long::from(uid), KEEP)
        }) {
            // SAFETY: as above; back to root's gid.
            unsafe { libc::syscall(libc::SYS_setresgid, KEEP, 0 as libc::c_long, KEEP) };
            return Err(e);
        }
        Ok(EffectiveIds {
            dumpable,
            parent_death_signal,
            parent,
        })
    }

    /// Back to the effective uid and gid 0 (the permitted capabilities, kept because the real
    /// uid stayed 0, become effective again) and to the dumpable flag the change cleared.
    pub fn restore(self) -> io::Result<()> {
        const KEEP: libc::c_long = -1;
        // SAFETY: setresuid/setresgid/prctl with integer arguments.
        unsafe {
            check_long(libc::syscall(
                libc::SYS_setresuid,
                KEEP,
                0 as libc::c_long,
                KEEP,
            ))?;
            check_long(libc::syscall(
                libc::SYS_setresgid,
                KEEP,
                0 as libc::c_long,
                KEEP,
            ))?;
            check(libc::prctl(
                libc::PR_SET_DUMPABLE,
                self.dumpable as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            if self.parent_death_signal != 0 {
                check(libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    self.parent_death_signal as libc::c_ulong,
                    0,
                    0,
                    0,
                ))?;
                // A parent that died meanwhile sent no signal: act as if it had.
                if libc::getppid() != self.parent {
                    libc::raise(self.parent_death_signal);
                }
            }
        }
        Ok(())
    }
}

/// The namespaces the sandbox's init is cloned into: user, pid, mount, ipc, uts. Its network
/// namespace is made beside it ([`crate::netns`]) and its cgroup namespace entered later, once
/// it is in its cgroup.
pub const SANDBOX_NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

/// A fork-like `clone(2)` (no new stack) into new namespaces: returns 0 in the child and the
/// child's pid in the parent.
///
/// # Safety
/// The caller must be single-threaded (the child gets a copy of this address space with only
/// the calling thread) and the child must not return into code that assumes otherwise.
pub unsafe fn clone_into_namespaces(flags: libc::c_int) -> io::Result<libc::pid_t> {
    // SAFETY: the caller upholds the single-threaded contract; without a new stack, clone
    // behaves like fork.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid as libc::pid_t)
}

/// `clone(2)` of a child that shares this process's memory (`flags` include `CLONE_VM`) and
/// runs `child(arg)` on `stack`, as posix_spawn does. Signals are blocked around the clone, so
/// the child starts with all of them blocked and never runs one of this process's handlers on
/// the shared memory. Returns the child's pid.
///
/// # Safety
/// `stack` must outlive the child's use of it (the caller reaps the child, or is suspended
/// until it execs: `CLONE_VFORK`), and `child` may only make calls that are safe in a process
/// sharing this one's memory and thread-local storage; `arg` must stay valid for it.
pub unsafe fn clone_sharing_memory(
    stack: &mut [u8],
    flags: libc::c_int,
    child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<libc::pid_t> {
    // SAFETY: the caller upholds the stack's and the child's contract; the top is aligned down
    // to 16 bytes, as the ABI wants, and the stack grows down from it.
    unsafe {
        let top = stack.as_mut_ptr().add(stack.len()) as usize & !15;
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(child, top as *mut libc::c_void, flags, arg);
        let err = io::Error::last_os_error();
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 { Err(err) } else { Ok(pid) }
    }
}

/// A close-on-exec eventfd whose counter starts at 0: a doorbell between two processes that
/// share it across a fork.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes integers and returns a new descriptor or -1.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
    // SAFETY: eventfd succeeded, so the descriptor is open and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Rings the doorbell. The kernel wakes the waiter without the "waker sleeps next" hint that
/// pipe and socket writes give, so the scheduler puts the waiter on an idle CPU rather than
/// queueing it behind the ringer.
pub fn eventfd_ring(fd: BorrowedFd<'_>) -> io::Result<()> {
    write_all(fd, &1u64.to_ne_bytes())
}

/// Waits until the doorbell has rung.
pub fn eventfd_wait(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut count = [0u8; 8];
    loop {
        match read(fd, &mut count) {
            Ok(8) => return Ok(()),
            Ok(_) => return Err(io::Error::other("short read from an eventfd")),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// How many bytes a pipe holds before a writer blocks.
pub fn pipe_capacity(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // SAFETY: F_GETPIPE_SZ takes no argument and has no memory effects.
    Ok(check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) })? as usize)
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A close-on-exec unix stream socket pair, used to pass a descriptor back from the sandbox.
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    unix_pair(libc::SOCK_STREAM)
}

/// A close-on-exec unix socket pair of `kind`.
fn unix_pair(kind: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: socketpair succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a valid descriptor have no memory effects.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
}

pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for `buf.len()` writable bytes.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

pub fn write_all(fd: BorrowedFd<'_>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` readable bytes.
        let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Points each of `fds` at /dev/null, read and write (best effort: left as they are if
/// /dev/null can't be opened).
pub fn redirect_to_null(fds: &[RawFd]) {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null");
    if let Ok(null) = null {
        for &fd in fds {
            let _ = dup2(null.as_raw_fd(), fd);
        }
    }
}

pub fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(cstring).transpose()?;
    let target = cstring(target)?;
    let fstype = fstype.map(cstring).transpose()?;
    let data = data.map(cstring).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null or a valid NUL-terminated string alive for the call.
    check(unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    })?;
    Ok(())
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `mount_setattr(2)`: set attributes on a mount, and with `recursive` on all mounts below it.
pub fn mount_setattr(target: &Path, set: u64, recursive: bool) -> io::Result<()> {
    let target = cstring(target)?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 } as libc::c_uint;
    // SAFETY: `target` is a valid C string and `attr` a valid mount_attr of the size passed.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    Ok(())
}

/// `pivot_root(".", ".")` in the current directory: the old root ends up stacked under the new
/// one, and a lazy unmount of "." removes it without needing a put-old directory.
pub fn pivot_root_here() -> io::Result<()> {
    let dot = c".";
    // SAFETY: both arguments are valid C strings.
    check_long(unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) })?;
    Ok(())
}

pub fn chdir(path: &Path) -> io::Result<()> {
    let path = cstring(path)?;
    // SAFETY: `path` is a valid C string.
    check(unsafe { libc::chdir(path.as_ptr()) })?;
    Ok(())
}

pub fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })?;
    Ok(())
}

/// [`open_beneath`] with a creation mode, for `O_CREAT`.
pub fn create_beneath(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_ALL: u64 = 0x01 | 0x02 | 0x04 | 0x08;
    let path = cstring(path)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64,
        mode: mode as u64,
        resolve: RESOLVE_ALL,
    };
    // SAFETY: `path` is a valid C string and `how` a valid open_how of the size passed.
    let fd = check_long(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })?;
    // SAFETY: openat2 succeeded and returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `mkdirat(2)` of one name in `dir`.
pub fn mkdir_at(dir: BorrowedFd<'_>, name: &str, mode: u32) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: a valid descriptor and C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })?;
    Ok(())
}

/// Removes the file `name` of `dir` (not a folder; never follows a symlink: it removes the
/// link).
pub fn unlink_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: a valid descriptor and C string.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })?;
    Ok(())
}

/// `fchownat(2)` of one name in `dir`, never following a symlink.
pub fn chown_at(dir: BorrowedFd<'_>, name: &str, uid: u32, gid: u32) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: a valid descriptor and C string.
    check(unsafe {
        libc::fchownat(
            dir.as_raw_fd(),
            name.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(())
}

pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: plain integers.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })?;
    Ok(())
}

/// A tmpfs that is mounted nowhere: the returned descriptor is its root, and the filesystem
/// lives exactly as long as that descriptor (and any clone of the mount). Nothing appears in
/// any mount table, so a crashed owner leaves nothing to clean up.
pub fn detached_tmpfs(size_bytes: u64, mode: u32, uid: u32, gid: u32) -> io::Result<OwnedFd> {
    detached_fs(
        "tmpfs",
        &[
            ("size", size_bytes.to_string()),
            ("mode", format!("{mode:o}")),
            ("uid", uid.to_string()),
            ("gid", gid.to_string()),
        ],
    )
}

/// A detached, writable copy of the mount at `path` (its subtree from there): the root's code
/// folder, handed to the supervisor before the root is made
/// read-only (see [`crate::gate`]).
pub fn open_tree_clone(path: &Path) -> io::Result<OwnedFd> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let path = cstring(path)?;
    // SAFETY: a valid C string.
    let clone = check_long(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    })?;
    // SAFETY: open_tree returned a new descriptor that nobody else owns.
    let clone = unsafe { OwnedFd::from_raw_fd(clone as RawFd) };
    // The copy only: the original (the sandbox's root) stays read-only.
    let attr = MountAttr {
        attr_set: 0,
        attr_clr: MOUNT_ATTR_RDONLY,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = cstring("")?;
    // SAFETY: a valid descriptor, C string and mount_attr of the size passed.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            clone.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    Ok(clone)
}

/// Sets close-on-exec on `fd` if it is open (a descriptor inherited on purpose must not reach
/// the sandboxed program).
pub fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl on an integer; an unused number just fails with EBADF.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
}

/// Marks every descriptor from `first` up close-on-exec (`close_range` with
/// `CLOSE_RANGE_CLOEXEC`, Linux 5.11: older than the Landlock every sandbox requires).
pub fn cloexec_from(first: RawFd) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range takes integers; with this flag it closes nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Closes every descriptor from `first` up (`close_range`, Linux 5.9).
pub fn close_from(first: RawFd) -> io::Result<()> {
    // SAFETY: close_range takes integers; the caller owns every descriptor from `first` up.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The highest signal number on Linux (`_NSIG - 1`, the last real-time signal).
const SIGNAL_MAX: libc::c_int = 64;

/// Sets every signal's disposition to its default. The raw call, because glibc's wrapper
/// refuses its own two signals (32 and 33), which a caller may have ignored too; KILL and STOP
/// refuse any change and are skipped.
pub fn default_signal_dispositions() -> io::Result<()> {
    // The kernel's struct sigaction, all zero: SIG_DFL, no flags, no restorer, no mask.
    let default = [0u64; 4];
    for signal in 1..=SIGNAL_MAX {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `default` is a valid kernel sigaction; the old action is not asked for.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is valid for writing a stat struct.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded and filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// The CPUs a process may run on (`pid` 0: this one).
pub fn cpu_affinity(pid: libc::pid_t) -> io::Result<libc::cpu_set_t> {
    // SAFETY: an all-zero cpu_set_t is the empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    check(unsafe { libc::sched_getaffinity(pid, std::mem::size_of_val(&set), &mut set) })?;
    Ok(set)
}

pub fn set_cpu_affinity(pid: libc::pid_t, set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    check(unsafe { libc::sched_setaffinity(pid, std::mem::size_of_val(set), set) })?;
    Ok(())
}

/// The CPU this thread is running on (a snapshot).
pub fn current_cpu() -> io::Result<usize> {
    // SAFETY: sched_getcpu has no arguments.
    Ok(check(unsafe { libc::sched_getcpu() })? as usize)
}

/// Moves this process into the namespace `ns` refers to (of kind `kind`, a `CLONE_NEW*` flag).
pub fn setns(ns: BorrowedFd<'_>, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: setns takes a descriptor and a flag.
    check(unsafe { libc::setns(ns.as_raw_fd(), kind) })?;
    Ok(())
}

/// Waits until `fd` is readable (a pidfd: its process has exited), at most `timeout_ms`;
/// whether it became readable.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd.
    let n = check(unsafe { libc::poll(&mut pfd, 1, timeout_ms) })?;
    Ok(n == 1)
}

/// The index of the first of `fds` to become readable (or hang up), `None` at the deadline
/// (or if `poll` fails).
pub fn first_readable(
    fds: &[BorrowedFd<'_>],
    deadline: Option<std::time::Instant>,
) -> Option<usize> {
    loop {
        let mut polled: Vec<libc::pollfd> = fds
            .iter()
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let wait_ms = match deadline {
            Some(at) => at
                .saturating_duration_since(std::time::Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32,
            None => -1,
        };
        // SAFETY: `polled` is a valid array of pollfd of the given length.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, wait_ms) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
        if n == 0 {
            return None;
        }
        return polled.iter().position(|p| p.revents != 0);
    }
}

/// Opens `/proc/<pid>` as a pidfd, which becomes readable when the process exits.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes plain integers.
    let fd = check_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the call returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub fn kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes plain integers.
    check(unsafe { libc::kill(pid, signal) })?;
    Ok(())
}

/// Waits for `pid` and returns its raw wait status.
pub fn waitpid(pid: libc::pid_t) -> io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int for the kernel to fill.
        let ret = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if ret == pid {
            return Ok(status);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Sends one descriptor over a unix socket (SCM_RIGHTS).
pub fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    send_with_fds(sock, &[0u8], &[fd])
}

/// Receives one descriptor sent by [`send_fd`]; `Ok(None)` when the peer closed without sending.
pub fn recv_fd(sock: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let (n, mut fds) = recv_with_fds(sock, &mut byte, 1)?;
    if n == 0 || fds.is_empty() {
        return Ok(None);
    }
    Ok(fds.pop())
}

/// The most descriptors one message carries ([`send_with_fds`], [`recv_with_fds`]).
pub const MAX_FDS_PER_MESSAGE: usize = 8;

/// Sends `bytes` (one message on a datagram or seqpacket socket) with `fds` (SCM_RIGHTS, at
/// most [`MAX_FDS_PER_MESSAGE`]), without blocking on a non-blocking socket.
pub fn send_with_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    assert!(
        fds.len() <= MAX_FDS_PER_MESSAGE,
        "too many descriptors for one message"
    );
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    let data_len = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
    let mut cmsg_buf = vec![0u8; space];
    // SAFETY: an all-zero msghdr is a valid empty message header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cmsg_buf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: msg_control points at a buffer of CMSG_SPACE bytes, so the first header and
        // its data fit; the header pointer is non-null for the same reason.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` describes valid buffers alive for the call (the kernel only reads
        // the iovec's bytes).
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Receives one message into `buf` with up to `max_fds` descriptors (close-on-exec); returns
/// its length (0: the peer closed) and the descriptors. A message longer than `buf` is an
/// error (`InvalidData`), its descriptors closed.
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let max_fds = max_fds.min(MAX_FDS_PER_MESSAGE);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space =
        unsafe { libc::CMSG_SPACE((max_fds * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cmsg_buf = vec![0u8; space];
    // SAFETY: an all-zero msghdr is a valid empty message header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg_buf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    let n = loop {
        // SAFETY: `msg` describes valid buffers alive for the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control; CMSG_FIRSTHDR/NXTHDR return null or a header
    // inside it, and an SCM_RIGHTS header's data holds (len - CMSG_LEN(0)) / 4 descriptors
    // that this process now owns.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count =
                    ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    // (The control buffer's alignment may have room for one more than asked.)
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || fds.len() > max_fds {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a message or its descriptors did not fit",
        ));
    }
    Ok((n, fds))
}

/// A close-on-exec unix seqpacket socket pair: messages keep their bounds and carry
/// descriptors (the fork server's channel, [`crate::launcher`]).
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    unix_pair(libc::SOCK_SEQPACKET)
}

/// Sets this thread's name (`/proc/<pid>/comm`, what `ps` and `top` show; at most 15 bytes
/// are kept).
pub fn set_name(name: &str) {
    if let Ok(name) = CString::new(name) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string, valid for the call.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) };
    }
}

/// Sends `signal` to the process a pidfd names (never to a process that reused its pid).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: pidfd_send_signal on a descriptor, no siginfo, no flags.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_message_carries_its_bytes_and_descriptors_that_name_the_same_files() {
        let (ours, theirs) = seqpacket_pair().unwrap();
        let (first_r, first_w) = pipe().unwrap();
        let (second_r, second_w) = pipe().unwrap();
        send_with_fds(
            ours.as_fd(),
            b"two pipes",
            &[first_w.as_fd(), second_w.as_fd()],
        )
        .unwrap();
        send_with_fds(ours.as_fd(), b"none", &[]).unwrap();
        let mut buf = [0u8; 64];
        let (n, fds) = recv_with_fds(theirs.as_fd(), &mut buf, 4).unwrap();
        assert_eq!(&buf[..n], b"two pipes");
        assert_eq!(fds.len(), 2);
        // Received in order, close-on-exec, and the same pipes: what is written through
        // them comes out of the read ends kept here.
        for (fd, (reader, text)) in fds.iter().zip([(&first_r, b"1"), (&second_r, b"2")]) {
            // SAFETY: F_GETFD on an open descriptor.
            let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
            write_all(fd.as_fd(), text).unwrap();
            let mut got = [0u8; 1];
            assert_eq!(read(reader.as_fd(), &mut got).unwrap(), 1);
            assert_eq!(&got, text);
        }
        // Message bounds are kept: the next message, alone.
        let (n, fds) = recv_with_fds(theirs.as_fd(), &mut buf, 4).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"none"[..], 0));
        // The peer gone: a message of length 0.
        drop(ours);
        let (n, fds) = recv_with_fds(theirs.as_fd(), &mut buf, 4).unwrap();
        assert_eq!((n, fds.len()), (0, 0));
    }

    #[test]
    fn a_message_too_long_or_with_too_many_descriptors_is_refused_and_closes_them() {
        let (ours, theirs) = seqpacket_pair().unwrap();
        let (reader, writer) = pipe().unwrap();
        send_with_fds(ours.as_fd(), &[7u8; 100], &[writer.as_fd()]).unwrap();
        let mut small = [0u8; 10];
        let e = recv_with_fds(theirs.as_fd(), &mut small, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        send_with_fds(ours.as_fd(), b"x", &[writer.as_fd(), writer.as_fd()]).unwrap();
        let mut buf = [0u8; 10];
        let e = recv_with_fds(theirs.as_fd(), &mut buf, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // Every copy that arrived was closed: with ours gone too, the pipe's reader sees its
        // end.
        drop(writer);
        let mut got = [0u8; 1];
        assert_eq!(read(reader.as_fd(), &mut got).unwrap(), 0);
    }

    #[test]
    fn send_fd_and_recv_fd_pass_one_descriptor() {
        let (ours, theirs) = socketpair().unwrap();
        let (reader, writer) = pipe().unwrap();
        send_fd(ours.as_fd(), writer.as_fd()).unwrap();
        let received = recv_fd(theirs.as_fd()).unwrap().expect("a descriptor");
        write_all(received.as_fd(), b"z").unwrap();
        let mut got = [0u8; 1];
        read(reader.as_fd(), &mut got).unwrap();
        assert_eq!(&got, b"z");
        drop(ours);
        assert!(recv_fd(theirs.as_fd()).unwrap().is_none());
    }
}
