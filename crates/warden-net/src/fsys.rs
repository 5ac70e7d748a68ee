//! The filesystem system calls that the jail and the docker backend share (the jail's `sys`
//! re-exports them): opening beneath a folder without following links, a filesystem mounted
//! nowhere, a copy of such a mount attached at a path, a lazy unmount; the names in an open
//! folder; and placing a descriptor where a child expects to inherit it.
//!
//! Invariant: every wrapper returns `io::Result` with the OS error intact and owns the file
//! descriptors it creates (`OwnedFd`), all of them close-on-exec — except [`dup2`]'s target,
//! which is placed to be inherited.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `path` as a C string; a NUL byte inside is an `InvalidInput` error.
pub fn cstring(path: impl AsRef<OsStr>) -> io::Result<CString> {
    CString::new(path.as_ref().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// A system call's `-1` as the `errno` error.
pub fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `dup2` that leaves the target open across exec. `dup2` of a descriptor onto itself is a
/// no-op that keeps its close-on-exec flag, so that case clears the flag instead.
/// Async-signal-safe (usable between `fork` and `exec`).
pub fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    if from == to {
        // SAFETY: clearing FD_CLOEXEC on an open descriptor has no memory effects.
        check(unsafe { libc::fcntl(from, libc::F_SETFD, 0) })?;
        return Ok(());
    }
    // SAFETY: dup2 on descriptors has no memory effects.
    check(unsafe { libc::dup2(from, to) })?;
    Ok(())
}

/// [`check`] for calls that answer a `long` (`syscall(2)`).
pub fn check_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Opens a path relative to `dir` with `openat2(2)`, refusing to leave `dir` and to follow any
/// symlink or magic link on the way (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV).
pub fn open_beneath(dir: BorrowedFd<'_>, path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_XDEV: u64 = 0x01;
    const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    const RESOLVE_BENEATH: u64 = 0x08;
    let path = cstring(path)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
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

/// A filesystem of `fstype` (with string options such as `source`) mounted nowhere, nosuid
/// and nodev: the returned descriptor is its root .
pub fn detached_fs(fstype: &str, options: &[(&str, String)]) -> io::Result<OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_SET_STRING: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    let fstype = cstring(fstype)?;
    // SAFETY: a valid C string and flags.
    let fs =
        check_long(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })?;
    // SAFETY: fsopen returned a new descriptor that nobody else owns.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as RawFd) };
    for (key, value) in options {
        let (key, value) = (cstring(key)?, cstring(value)?);
        // SAFETY: valid descriptor and C strings.
        check_long(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        })?;
    }
    // SAFETY: plain integers and null pointers, as the command takes no key or value.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    })?;
    // SAFETY: plain integers.
    let mnt = check_long(unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) as libc::c_uint,
        )
    })?;
    // SAFETY: fsmount returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(mnt as RawFd) })
}

/// Mounts a copy of the mount behind `tree` (e.g. a [`detached_fs`]) at `target`: the
/// same filesystem, attached in the caller's mount namespace.
pub fn attach_clone(tree: BorrowedFd<'_>, target: &Path) -> io::Result<()> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    let empty = cstring("")?;
    // SAFETY: a valid descriptor and C string.
    let clone = check_long(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            tree.as_raw_fd(),
            empty.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    })?;
    // SAFETY: open_tree returned a new descriptor that nobody else owns.
    let clone = unsafe { OwnedFd::from_raw_fd(clone as RawFd) };
    let target = cstring(target)?;
    // SAFETY: valid descriptors and C strings.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            clone.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })?;
    Ok(())
}

/// Unmounts `target` lazily (`MNT_DETACH`): gone from the tree now, the filesystem once its
/// last user lets go.
pub fn umount_detach(target: &Path) -> io::Result<()> {
    let target = cstring(target)?;
    // SAFETY: `target` is a valid C string.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) })?;
    Ok(())
}

/// The names in the folder open at `dir` (`.` and `..` left out, in the order the filesystem
/// gives), read with `getdents64` from the descriptor itself: exactly that folder, whatever
/// the path it was opened by now leads to, with no path walk (listing through
/// `/proc/self/fd/N` reopens the folder through procfs). `dir` must be open for reading (not
/// `O_PATH`); its offset is set back to the start first, so a folder can be listed again.
pub fn entry_names(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, then the name,
    // NUL-terminated and padded to the record's length.
    const NAME_AT: usize = 19;
    // SAFETY: lseek on a descriptor the caller keeps open has no memory effects.
    if unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut names = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let got = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let got = match check_long(got) {
            Ok(0) => return Ok(names),
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut at = 0;
        while at < got {
            let record = buf
                .get(at + 16..at + 18)
                .map(|b| u16::from_ne_bytes([b[0], b[1]]) as usize)
                .filter(|&len| len > NAME_AT && at + len <= got)
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "bad directory record")
                })?;
            let name = &buf[at + NAME_AT..at + record];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_os_string());
            }
            at += record;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn entry_names_lists_the_open_folder_again_and_again() {
        let tmp = tempfile::tempdir().unwrap();
        // Enough names, some long, to take more than one getdents64 call.
        let mut made: Vec<OsString> = (0..600)
            .map(|i| OsString::from(format!("{i:04}-{}", "n".repeat(i % 97))))
            .collect();
        for name in &made {
            std::fs::write(tmp.path().join(name), b"").unwrap();
        }
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        made.push("sub".into());
        made.sort();
        let dir = std::fs::File::open(tmp.path()).unwrap();
        for _ in 0..2 {
            let mut names = entry_names(dir.as_fd()).unwrap();
            names.sort();
            assert_eq!(names, made);
        }
        // The folder the descriptor holds, not what its path names now.
        std::fs::rename(tmp.path(), tmp.path().with_extension("moved")).unwrap();
        std::fs::create_dir(tmp.path()).unwrap();
        assert_eq!(entry_names(dir.as_fd()).unwrap().len(), made.len());
        std::fs::remove_dir_all(tmp.path().with_extension("moved")).unwrap();
    }

    #[test]
    fn entry_names_refuses_a_descriptor_it_cannot_read() {
        let tmp = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(tmp.path().join("f")).unwrap();
        assert_eq!(
            entry_names(file.as_fd()).unwrap_err().raw_os_error(),
            Some(libc::ENOTDIR)
        );
    }
}
