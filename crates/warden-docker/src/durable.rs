//! A durable docker sandbox's workspace: the jail's workspace image ([`warden_net::disk`]: a
//! preallocated ext4 image of `workspace_mb` in the sandbox's folder under the data
//! directory, on a loop device with autoclear), mounted on the host at `<folder>/workspace`
//! ([`MOUNT_DIR`]) and bound into the container on `/workspace` in place of its tmpfs. The
//! size cap is the filesystem's own: a full workspace takes not a byte more of the host's
//! disk, and its files outlive the daemon and the container.
//!
//! Invariants: the image is mounted at most once (a mount a killed daemon left at the folder
//! is detached before the image is attached again, and [`warden_net::disk::mount`] waits for
//! the old attachment to go; one left at the folder of a sandbox the daemon died making, which
//! has no record, is detached by the next start's sweep, [`detach_leftover`], before the
//! folder is removed); the folder's mount is made only after the container of the
//! same sandbox is gone, so no process still writes through an earlier mount; a container is
//! used only after [`DiskWorkspace::check_seen_by_container`] showed its `/workspace` is this
//! filesystem (an engine in another mount namespace would bind the empty folder underneath
//! instead: refused, never run on the host's disk without the cap); [`DiskWorkspace::release`]
//! detaches the folder's mount and closes the daemon's descriptor, so the loop device goes
//! with the container's last reference.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use warden_net::disk::{self, DiskError};
use warden_net::fsys;

/// The folder of a sandbox's own folder where its workspace's filesystem is mounted.
pub const MOUNT_DIR: &str = "workspace";

/// A durable sandbox's workspace filesystem, mounted at its folder's [`MOUNT_DIR`].
#[derive(Debug)]
pub struct DiskWorkspace {
    /// The sandbox's folder (the image and the mount point are in it).
    dir: PathBuf,
    /// The filesystem's root, mounted nowhere (syncfs and the snapshot's copy go through it).
    root: OwnedFd,
    /// The filesystem's device number, as every mount of it shows it.
    dev: u64,
}

impl DiskWorkspace {
    /// Makes the image in `dir` (`size_mb`, owned by `uid`) and mounts it at the folder.
    pub fn create(dir: &Path, size_mb: u64, uid: u32) -> Result<DiskWorkspace, DiskError> {
        disk::make_image(dir, size_mb, uid, uid)?;
        let made = Self::mount_at(dir);
        if made.is_err() {
            let _ = std::fs::remove_file(dir.join(disk::IMAGE_FILE));
        }
        made
    }

    /// Takes up the image in `dir` as the last process left it (a mount of it that a killed
    /// daemon left at the folder is detached first), its files given to `uid`.
    pub fn open(dir: &Path, uid: u32) -> Result<DiskWorkspace, DiskError> {
        detach_leftover(dir)?;
        let ws = Self::mount_at(dir)?;
        disk::chown_tree(ws.root.as_fd(), uid, uid)?;
        Ok(ws)
    }

    fn mount_at(dir: &Path) -> Result<DiskWorkspace, DiskError> {
        let root = disk::mount(dir)?;
        let dev = fstat(&root).map_err(DiskError::Mount)?.st_dev;
        let at = dir.join(MOUNT_DIR);
        match std::fs::DirBuilder::new().mode(0o700).create(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(DiskError::Mount(e)),
        }
        fsys::attach_clone(root.as_fd(), &at).map_err(DiskError::Mount)?;
        Ok(DiskWorkspace {
            dir: dir.to_path_buf(),
            root,
            dev,
        })
    }

    /// The host folder the container binds on `/workspace`.
    pub fn host_path(&self) -> PathBuf {
        self.dir.join(MOUNT_DIR)
    }

    /// Whether the process `pid` (a started container's first process, a pid of this pid
    /// namespace) sees this filesystem on its `/workspace`.
    pub fn check_seen_by(&self, pid: i64) -> Result<(), String> {
        let path = format!("/proc/{pid}/root/workspace");
        let seen = std::fs::metadata(&path).map_err(|e| format!("stat {path}: {e}"))?;
        if seen.dev() == self.dev {
            Ok(())
        } else {
            Err(format!(
                "the container's /workspace is not the sandbox's workspace image (device {} instead of {}): the docker engine does not see the daemon's mount at {} (is it in another mount namespace?)",
                seen.dev(),
                self.dev,
                self.host_path().display()
            ))
        }
    }

    /// Whether the started container `id` (full id), whose first process is `pid`, sees this
    /// filesystem on its `/workspace`: that process's view, or under gVisor (runsc), whose
    /// first process is the sentry in an empty root of its own, the view of the container's
    /// gofer, the process that opens the container's files for it ([`runsc_gofer_of`]).
    pub fn check_seen_by_container(&self, pid: i64, id: &str) -> Result<(), String> {
        self.check_seen_by(pid)
            .or_else(|why| match runsc_gofer_of(id) {
                Some(gofer) => self.check_seen_by(gofer),
                None => Err(why),
            })
    }

    /// Copies the image into `dst` as of now (see [`disk::copy_synced`]); the caller keeps
    /// writers away (the container paused, the files API held).
    pub fn snapshot_to(&self, dst: &Path) -> Result<(), DiskError> {
        disk::copy_synced(self.root.as_fd(), &self.dir.join(disk::IMAGE_FILE), dst)
    }

    /// Detaches the folder's mount: the filesystem goes with its last reference (the
    /// container's, once it is removed, and this value's descriptor, when it is dropped). Its
    /// files stay in the image. Idempotent.
    pub fn release(&self) -> Result<(), DiskError> {
        let at = self.host_path();
        if is_mount_point(&self.dir, &at) {
            fsys::umount_detach(&at).map_err(DiskError::Mount)?;
        }
        Ok(())
    }
}

/// Whether the engine listening on the unix socket `socket` runs in this process's mount
/// namespace, so that a mount the daemon makes is what the engine binds into a container:
/// the socket's peer (the engine, by `SO_PEERCRED`; pid 0 when it is in another pid
/// namespace) has the same `/proc/<pid>/ns/mnt`. `false` when it cannot be told (an engine
/// in another pid namespace, a proxy in front of it in a container of its own).
pub fn engine_shares_mount_namespace(socket: &Path) -> io::Result<bool> {
    let stream = std::os::unix::net::UnixStream::connect(socket)?;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a connected socket, and a ucred buffer of the length given.
    let ret = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    fsys::check(ret)?;
    if cred.pid <= 0 {
        return Ok(false);
    }
    let ns =
        |pid: &str| std::fs::metadata(format!("/proc/{pid}/ns/mnt")).map(|m| (m.dev(), m.ino()));
    Ok(ns(&cred.pid.to_string())? == ns("self")?)
}

/// Detaches every mount a killed daemon left at the folder `dir`'s [`MOUNT_DIR`] (made before
/// its container, so mounted while the daemon died making or taking up the sandbox); the
/// filesystem goes with its last reference (the container's, once it is removed).
pub fn detach_leftover(dir: &Path) -> Result<(), DiskError> {
    let at = dir.join(MOUNT_DIR);
    while is_mount_point(dir, &at) {
        fsys::umount_detach(&at).map_err(DiskError::Mount)?;
    }
    Ok(())
}

/// The pid of the gVisor gofer of the container `id` (full id): a `runsc-gofer … gofer` process
/// whose bundle folder is named after the container (docker's layout). It runs in the
/// container's mount namespace and root, so its `/workspace` is the container's.
pub fn runsc_gofer_of(id: &str) -> Option<i64> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i64 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let gofer = args.first() == Some(&&b"runsc-gofer"[..])
            && args.contains(&&b"gofer"[..])
            && args.iter().any(|a| {
                Path::new(std::ffi::OsStr::from_bytes(a)).file_name() == Some(id.as_ref())
            });
        gofer.then_some(pid)
    })
}

/// Whether `at` (a folder in `dir`) is a mount point: its device differs from its parent's.
fn is_mount_point(dir: &Path, at: &Path) -> bool {
    match (std::fs::metadata(dir), std::fs::symlink_metadata(at)) {
        (Ok(parent), Ok(child)) => parent.dev() != child.dev(),
        _ => false,
    }
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and a stat buffer of the right size.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded and filled it.
    Ok(unsafe { st.assume_init() })
}
