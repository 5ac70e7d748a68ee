//! A durable sandbox's workspace on disk: an ext4 image file of exactly the workspace's size,
//! preallocated, attached to a loop device and mounted nowhere (a detached mount, as the
//! tmpfs workspace is), so that the size cap is the filesystem's own and a full workspace
//! cannot take a byte more of the host's disk.
//!
//! Invariants: the image's blocks are all allocated when it is made (`fallocate`), so writes
//! inside it never need the host's disk and a full host disk fails only the making of an
//! image, with `ENOSPC` before anything is mounted; the loop device is attached with
//! autoclear and our descriptor of it is closed once the filesystem holds it, so it goes
//! with the last reference to the mount (the daemon's descriptor, a run's clone), a crashed
//! daemon included; an image is never attached twice at once (two filesystems over the same
//! blocks would corrupt it): [`mount`] waits for an earlier attachment to go first, and
//! refuses past [`ATTACH_WAIT`]; the image is made by `mkfs.ext4` without discard, which
//! would punch holes into the preallocation.

use crate::fsys as sys;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The image file in a durable sandbox's folder.
pub const IMAGE_FILE: &str = "workspace.ext4";

/// How long [`mount`] waits for an earlier attachment of the same image to go (a killed
/// daemon's runs may take a moment to end and release their clones).
pub const ATTACH_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The host's disk has no room for the image.
    #[error("no room for a workspace image of {size_mb} MiB on the disk of the data directory")]
    NoSpace { size_mb: u64 },
    #[error("make the workspace image: {0}")]
    Make(String),
    #[error("the workspace image is missing (its sandbox's folder has no {IMAGE_FILE})")]
    Missing,
    #[error("the workspace image is still attached by an earlier process after {0:?}")]
    StillAttached(Duration),
    #[error("attach the workspace image to a loop device: {0}")]
    Attach(io::Error),
    #[error("mount the workspace image: {0}")]
    Mount(io::Error),
    #[error("give the workspace's files to the sandbox's uid: {0}")]
    Chown(io::Error),
    #[error("copy the workspace image: {0}")]
    Copy(io::Error),
}

fn is_enospc(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC)
}

/// Makes the image in `dir` (which must not have one): `size_mb`, every block allocated, an
/// ext4 filesystem whose root belongs to `uid`/`gid`. A failure leaves no image behind.
pub fn make_image(dir: &Path, size_mb: u64, uid: u32, gid: u32) -> Result<(), DiskError> {
    let path = dir.join(IMAGE_FILE);
    let result = (|| {
        let file = File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| DiskError::Make(format!("create the image file: {e}")))?;
        preallocate(&file, size_mb * 1024 * 1024)?;
        drop(file);
        let out = std::process::Command::new(mkfs())
            .args(["-q", "-F", "-m", "0", "-L", "warden-ws", "-E"])
            // Inode tables and journal written now: left lazy, the kernel's ext4lazyinit
            // thread zeroes them after the mount, and the loop device turns those zeroes
            // into holes punched in the preallocated image.
            .arg(format!(
                "root_owner={uid}:{gid},nodiscard,lazy_itable_init=0,lazy_journal_init=0"
            ))
            .arg(&path)
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| DiskError::Make(format!("run mkfs.ext4 (e2fsprogs): {e}")))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            if why.contains("No space left") {
                return Err(DiskError::NoSpace { size_mb });
            }
            return Err(DiskError::Make(format!(
                "mkfs.ext4 {}: {}",
                out.status,
                why.trim()
            )));
        }
        // mkfs zeroes some ranges by punching holes where the host's filesystem cannot zero
        // in place (tmpfs): allocate them again.
        let file = File::options()
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| DiskError::Make(format!("reopen the image file: {e}")))?;
        preallocate(&file, size_mb * 1024 * 1024)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    result
}

/// Allocates every block of the image's `size` bytes (holes read as zeros before and after,
/// so the data is unchanged) and syncs it: then no write inside the image needs the host's
/// disk. A full host disk is [`DiskError::NoSpace`].
fn preallocate(file: &File, size: u64) -> Result<(), DiskError> {
    let size_mb = size / (1024 * 1024);
    // SAFETY: a valid descriptor and plain integers.
    let ret = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
    if ret != 0 {
        let e = io::Error::last_os_error();
        return Err(if is_enospc(&e) {
            DiskError::NoSpace { size_mb }
        } else {
            DiskError::Make(format!("allocate {size_mb} MiB: {e}"))
        });
    }
    file.sync_all()
        .map_err(|e| DiskError::Make(format!("sync the image file: {e}")))
}

/// `mkfs.ext4` from e2fsprogs, where Debian puts it (PATH may lack /sbin for a service).
fn mkfs() -> PathBuf {
    ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("mkfs.ext4"))
}

/// Whether a loop device is attached to the image (by its canonical path) now.
fn attached(image: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        name.to_str().is_some_and(|n| n.starts_with("loop"))
            && std::fs::read_to_string(entry.path().join("loop/backing_file"))
                .is_ok_and(|backing| Path::new(backing.trim_end_matches('\n')) == image)
    })
}

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// Attaches `image` (open read-write) to a free loop device with autoclear; returns the
/// device's descriptor and path.
fn attach(image: BorrowedFd<'_>) -> io::Result<(OwnedFd, PathBuf)> {
    let control = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/loop-control")?;
    // Another process may take the free device between the two calls: try a few.
    for _ in 0..16 {
        // SAFETY: a valid descriptor; the request takes no argument.
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let device = File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)?;
        // SAFETY: all-zero is a valid loop_config (no offset, no size limit, no key).
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = image.as_raw_fd() as u32;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: a valid descriptor and a pointer to a loop_config that outlives the call.
        let ret = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE as _, &config) };
        if ret == 0 {
            return Ok((OwnedFd::from(device), path));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(e);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::ResourceBusy,
        "every free loop device was taken by another process meanwhile",
    ))
}

/// Mounts the image in `dir` nowhere (nosuid, nodev) and returns the root of its filesystem.
/// Waits up to [`ATTACH_WAIT`] for an earlier attachment of the same image to go.
pub fn mount(dir: &Path) -> Result<OwnedFd, DiskError> {
    let path = dir.join(IMAGE_FILE);
    let image = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => DiskError::Missing,
            _ => DiskError::Attach(e),
        })?;
    // A copy whose blocks the host's filesystem shares with another file (a reflink: XFS,
    // btrfs) gets its own, so that no write inside it needs the host's disk, and no byte is
    // shared with the sandbox it was copied from; filesystems without shared blocks (ext4,
    // tmpfs) refuse the call, which is then nothing to do.
    // SAFETY: a valid descriptor and plain integers.
    unsafe {
        libc::fallocate(
            image.as_raw_fd(),
            FALLOC_FL_UNSHARE_RANGE,
            0,
            image.metadata().map_err(DiskError::Attach)?.len() as libc::off_t,
        )
    };
    // An image copied sparse (a backup restored) gets its blocks back before it is used.
    preallocate(&image, image.metadata().map_err(DiskError::Attach)?.len())?;
    let canonical = std::fs::canonicalize(&path).map_err(DiskError::Attach)?;
    let start = Instant::now();
    while attached(&canonical) {
        if start.elapsed() >= ATTACH_WAIT {
            return Err(DiskError::StillAttached(ATTACH_WAIT));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (device, device_path) = attach(image.as_fd()).map_err(DiskError::Attach)?;
    let root = sys::detached_fs("ext4", &[("source", device_path.display().to_string())])
        .map_err(DiskError::Mount);
    // The filesystem holds the device now (or failed): autoclear detaches it with the last
    // reference.
    drop(device);
    root
}

/// Gives every file of the workspace that is not root's (the filesystem's own lost+found) to
/// `uid`/`gid`: a sandbox taken up again gets a host uid that may differ from its last one.
/// No process of the sandbox runs meanwhile. Symlinks are changed themselves, never followed.
pub fn chown_tree(root: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<(), DiskError> {
    let err = DiskError::Chown;
    let own = |dir: BorrowedFd<'_>, name: &std::ffi::CStr| -> io::Result<libc::stat> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH;
        // SAFETY: a valid descriptor, C string and stat buffer.
        if unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatat succeeded.
        let st = unsafe { st.assume_init() };
        if st.st_uid != 0 && (st.st_uid != uid || st.st_gid != gid) {
            // SAFETY: a valid descriptor and C string.
            if unsafe { libc::fchownat(dir.as_raw_fd(), name.as_ptr(), uid, gid, flags) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(st)
    };
    own(root, c"").map_err(err)?;
    let mut stack: Vec<OwnedFd> = vec![
        sys::open_beneath(root, Path::new("."), libc::O_RDONLY | libc::O_DIRECTORY).map_err(err)?,
    ];
    while let Some(dir) = stack.pop() {
        let names = sys::entry_names(dir.as_fd()).map_err(err)?;
        for name in names {
            let c =
                std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str()))
                    .expect("a file name has no NUL");
            let st = own(dir.as_fd(), &c).map_err(err)?;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR && st.st_uid != 0 {
                stack.push(
                    sys::open_beneath(
                        dir.as_fd(),
                        Path::new(&name),
                        libc::O_RDONLY | libc::O_DIRECTORY,
                    )
                    .map_err(err)?,
                );
            }
        }
    }
    Ok(())
}

/// `fallocate`'s mode that gives a file its own copy of blocks it shares with another.
const FALLOC_FL_UNSHARE_RANGE: libc::c_int = 0x40;
/// Copies the image of the workspace whose root is `root` into `dst_dir` as of now: the
/// filesystem's writes are flushed and its journal committed first (`syncfs`), so the copy is
/// a consistent filesystem (at most a journal to replay when it is mounted). The caller makes
/// sure nothing writes meanwhile (the sandbox's processes frozen, its files API held). The
/// filesystem is not frozen with FIFREEZE: a daemon killed during the copy would leave it
/// frozen, and its image attached, for good. The copy may share blocks with the image where
/// the host's filesystem reflinks (`copy_file_range`); [`mount`] unshares them before a copy
/// is used.
pub fn copy_synced(root: BorrowedFd<'_>, image: &Path, dst_dir: &Path) -> Result<(), DiskError> {
    let dir = sys::open_beneath(root, Path::new("."), libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(DiskError::Copy)?;
    // SAFETY: a valid descriptor.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
        return Err(DiskError::Copy(io::Error::last_os_error()));
    }
    copy_image(image, &dst_dir.join(IMAGE_FILE))
}

fn copy_image(src: &Path, dst: &Path) -> Result<(), DiskError> {
    let result = (|| {
        let mut from = File::options()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(src)?;
        let mut to = File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(dst)?;
        io::copy(&mut from, &mut to)?;
        to.sync_all()
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(dst);
        if is_enospc(&e) {
            DiskError::NoSpace {
                size_mb: std::fs::metadata(src).map_or(0, |m| m.len() / (1024 * 1024)),
            }
        } else {
            DiskError::Copy(e)
        }
    })
}
