//! The workspace of a sandbox with a lifetime: a size-capped tmpfs that is mounted nowhere on
//! the host, or for a durable sandbox an ext4 image of the same size under the daemon's data
//! directory, mounted nowhere either (see [`crate::disk`]): its files outlive the daemon,
//! and [`Workspace::open_on_disk`] takes them up again. The daemon holds its root as a descriptor; each run of the sandbox attaches a
//! clone of it in its own mount namespace, and the files API reads and writes through the
//! descriptor.
//!
//! Invariants: the tmpfs exists exactly as long as the descriptor (and the clones held by
//! running sandboxes): dropping the `Workspace`, or the daemon dying, frees it, and it never
//! appears in a host mount table; every path is opened with `openat2` beneath the workspace,
//! never following a symlink or crossing a mount; only regular files are read or replaced,
//! and reads never block (a FIFO is refused, not opened for reading); files the daemon
//! creates belong to the sandbox user; the sandbox's host uid is leased for as long as the
//! workspace lives (each run's helper holds the lease too), and released cleanly only once no
//! process runs as it (see [`warden_net::uids`]).

use crate::artifacts::FileStamp;
use crate::layout::{OUTPUT_DIR_NAME, SCRATCH_TMP, SCRATCH_WORK};
use crate::sys;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use warden_net::uids::UidLease;
use warden_types::{FileEntry, WorkspacePath};

/// Folders deeper than this are not listed.
const MAX_LIST_DEPTH: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{path}: no such file")]
    NotFound { path: String },
    #[error("{path}: {why}")]
    Refused { path: String, why: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

#[derive(Debug)]
pub struct Workspace {
    /// Closed first (fields drop in order), so the files are gone before the lease goes.
    root: OwnedFd,
    owner: (u32, u32),
    lease: HeldUid,
    /// A durable workspace's image file (see [`crate::disk`]); `None`: a tmpfs.
    image: Option<std::path::PathBuf>,
}

/// How many rounds (20 ms apart) a dropped workspace's lease waits for its uid's processes
/// to be gone.
const RELEASE_CHECKS: usize = 250;

/// The sandbox's uid lease; dropped after the workspace's root.
#[derive(Debug)]
struct HeldUid(Option<UidLease>);

impl Drop for HeldUid {
    /// Released cleanly once no process runs as the uid any more: a run's helper may still
    /// be tearing its sandbox down (it holds the lease too), so the check is repeated for a
    /// while; past that the record stays, and the next taker checks again. The check scans
    /// /proc, so off the caller's thread, and once a round for every lease waiting: one
    /// scan each cost a destroy as much as the host has processes (≈ 3,000 status files
    /// beside 1,000 live contexts), and destroys in a row scanned side by side.
    fn drop(&mut self) {
        if let Some(lease) = self.0.take() {
            uid_releaser::release_when_unused(lease);
        }
    }
}

/// The one thread that releases dropped workspaces' leases (see [`HeldUid`]).
mod uid_releaser {
    use super::RELEASE_CHECKS;
    use std::collections::HashSet;
    use std::sync::{Condvar, Mutex, OnceLock};
    use warden_net::uids::{ProcScan, UidLease};

    /// A lease and the rounds it has waited.
    pub(super) type Waiting = (UidLease, usize);

    struct Queue {
        leases: Mutex<Vec<Waiting>>,
        wake: Condvar,
    }

    static QUEUE: Queue = Queue {
        leases: Mutex::new(Vec::new()),
        wake: Condvar::new(),
    };
    /// Whether the thread runs (started by the first lease dropped).
    static WORKER: OnceLock<bool> = OnceLock::new();

    pub(super) fn release_when_unused(lease: UidLease) {
        let running = *WORKER.get_or_init(|| {
            std::thread::Builder::new()
                .name("uid-release".into())
                .spawn(work)
                .map_err(|e| eprintln!("warden: release sandboxes' uids: {e}"))
                .is_ok()
        });
        // Without the thread the lease is dropped: its record stays for the next taker.
        if running {
            QUEUE.leases.lock().expect("not poisoned").push((lease, 0));
            QUEUE.wake.notify_one();
        }
    }

    fn work() -> ! {
        loop {
            let batch = {
                let mut leases = QUEUE.leases.lock().expect("not poisoned");
                while leases.is_empty() {
                    leases = QUEUE.wake.wait(leases).expect("not poisoned");
                }
                std::mem::take(&mut *leases)
            };
            let left = round(batch, ProcScan::uids_in_use().as_ref());
            if !left.is_empty() {
                QUEUE.leases.lock().expect("not poisoned").extend(left);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }

    /// One round: the leases whose uid no process runs as are released; the others wait
    /// another round, or after [`RELEASE_CHECKS`] rounds are dropped (their records stay).
    /// `in_use`: `None` when /proc could not be read (no uid is free then).
    pub(super) fn round(batch: Vec<Waiting>, in_use: Option<&HashSet<u32>>) -> Vec<Waiting> {
        let mut left = Vec::new();
        for (lease, rounds) in batch {
            if in_use.is_some_and(|uids| !uids.contains(&lease.uid())) {
                lease.release();
            } else if rounds + 1 < RELEASE_CHECKS {
                left.push((lease, rounds + 1));
            }
        }
        left
    }
}

impl Workspace {
    /// Creates the tmpfs (`size_mb`), owned by the sandbox's leased host uid (and the gid of
    /// the same number), with the working folder, its output folder and /tmp's folder.
    pub fn create(size_mb: u64, lease: UidLease) -> io::Result<Workspace> {
        let owner = (lease.uid(), lease.uid());
        let root = sys::detached_tmpfs(size_mb * 1024 * 1024, 0o700, owner.0, owner.1)?;
        Self::over(root, lease)
    }

    /// Makes a durable workspace in `dir` (an ext4 image of `size_mb`, see [`crate::disk`]),
    /// owned by the sandbox's leased uid, with the same folders as [`Workspace::create`].
    pub fn create_on_disk(
        dir: &Path,
        size_mb: u64,
        lease: UidLease,
    ) -> Result<Workspace, crate::disk::DiskError> {
        crate::disk::make_image(dir, size_mb, lease.uid(), lease.uid())?;
        let root = crate::disk::mount(dir)?;
        let mut ws = Self::over(root, lease).map_err(crate::disk::DiskError::Mount)?;
        ws.image = Some(dir.join(crate::disk::IMAGE_FILE));
        Ok(ws)
    }

    /// Takes up the durable workspace in `dir` as its last process left it; its files are
    /// given to the sandbox's leased uid (which may differ from the last one).
    pub fn open_on_disk(dir: &Path, lease: UidLease) -> Result<Workspace, crate::disk::DiskError> {
        let root = crate::disk::mount(dir)?;
        crate::disk::chown_tree(root.as_fd(), lease.uid(), lease.uid())?;
        let mut ws = Self::over(root, lease).map_err(crate::disk::DiskError::Mount)?;
        ws.image = Some(dir.join(crate::disk::IMAGE_FILE));
        Ok(ws)
    }

    /// Copies a durable workspace's image into `dir` as of now (see
    /// [`crate::disk::copy_synced`]: the caller keeps writers away); a tmpfs workspace has
    /// none to copy.
    pub fn snapshot_to(&self, dir: &Path) -> Result<(), crate::disk::DiskError> {
        let Some(image) = &self.image else {
            return Err(crate::disk::DiskError::Copy(io::Error::new(
                io::ErrorKind::Unsupported,
                "the workspace is not durable (a tmpfs)",
            )));
        };
        crate::disk::copy_synced(self.root.as_fd(), image, dir)
    }

    /// The workspace over a filesystem's root, with its folders made if missing.
    fn over(root: OwnedFd, lease: UidLease) -> io::Result<Workspace> {
        let owner = (lease.uid(), lease.uid());
        let ws = Workspace {
            root,
            owner,
            lease: HeldUid(Some(lease)),
            image: None,
        };
        for dir in [SCRATCH_WORK, SCRATCH_TMP] {
            ws.mkdir_owned(ws.root.as_fd(), dir, 0o700)?;
        }
        let work = sys::open_beneath(
            ws.root.as_fd(),
            Path::new(SCRATCH_WORK),
            libc::O_RDONLY | libc::O_DIRECTORY,
        )?;
        ws.mkdir_owned(work.as_fd(), OUTPUT_DIR_NAME, 0o755)?;
        Ok(ws)
    }

    /// The root of the tmpfs, for a run to attach.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The sandbox's host uid's lease, for a run's helper to inherit a hold of.
    pub fn uid_lease(&self) -> &UidLease {
        self.lease.0.as_ref().expect("held until dropped")
    }

    fn mkdir_owned(&self, dir: BorrowedFd<'_>, name: &str, mode: u32) -> io::Result<()> {
        match sys::mkdir_at(dir, name, mode) {
            Ok(()) => sys::chown_at(dir, name, self.owner.0, self.owner.1),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn work(&self) -> io::Result<OwnedFd> {
        sys::open_beneath(
            self.root.as_fd(),
            Path::new(SCRATCH_WORK),
            libc::O_RDONLY | libc::O_DIRECTORY,
        )
    }

    /// Writes a regular file, creating its folders; replaces an existing regular file.
    pub fn write_file(&self, path: &WorkspacePath, bytes: &[u8]) -> Result<(), WorkspaceError> {
        let err = |source: io::Error| map_io(path, source);
        let parts: Vec<&str> = path.components().collect();
        let (name, folders) = parts.split_last().expect("a WorkspacePath is never empty");
        let mut dir = self.work().map_err(err)?;
        for folder in folders {
            self.mkdir_owned(dir.as_fd(), folder, 0o755).map_err(err)?;
            dir = sys::open_beneath(
                dir.as_fd(),
                Path::new(folder),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
            .map_err(err)?;
        }
        let file = sys::create_beneath(
            dir.as_fd(),
            Path::new(name),
            libc::O_WRONLY | libc::O_CREAT | libc::O_NONBLOCK | libc::O_NOCTTY,
            0o644,
        )
        .map_err(err)?;
        let st = sys::fstat(file.as_fd()).map_err(err)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(WorkspaceError::Refused {
                path: path.to_string(),
                why: "not a regular file".into(),
            });
        }
        sys::fchown(file.as_fd(), self.owner.0, self.owner.1).map_err(err)?;
        let mut file = std::fs::File::from(file);
        file.set_len(0).map_err(err)?;
        file.write_all(bytes).map_err(err)
    }

    /// Removes a file (a missing one is no error). Its folders are walked without following
    /// symlinks, like [`Workspace::write_file`].
    pub fn remove_file(&self, path: &WorkspacePath) -> Result<(), WorkspaceError> {
        let err = |source: io::Error| map_io(path, source);
        let parts: Vec<&str> = path.components().collect();
        let (name, folders) = parts.split_last().expect("a WorkspacePath is never empty");
        let mut dir = self.work().map_err(err)?;
        for folder in folders {
            dir = match sys::open_beneath(
                dir.as_fd(),
                Path::new(folder),
                libc::O_RDONLY | libc::O_DIRECTORY,
            ) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                other => other.map_err(err)?,
            };
        }
        match sys::unlink_at(dir.as_fd(), name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other.map_err(err),
        }
    }

    /// Whether a regular file is at `path` (its folders walked without following symlinks).
    pub fn has_file(&self, path: &WorkspacePath) -> Result<bool, WorkspaceError> {
        let err = |source: io::Error| map_io(path, source);
        let work = self.work().map_err(err)?;
        let fd = match sys::open_beneath(
            work.as_fd(),
            Path::new(path.as_str()),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        ) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            other => other.map_err(err)?,
        };
        let st = sys::fstat(fd.as_fd()).map_err(err)?;
        Ok(st.st_mode & libc::S_IFMT == libc::S_IFREG)
    }

    /// Reads a regular file of at most `max_bytes`.
    pub fn read_file(
        &self,
        path: &WorkspacePath,
        max_bytes: u64,
    ) -> Result<Vec<u8>, WorkspaceError> {
        let err = |source: io::Error| map_io(path, source);
        let work = self.work().map_err(err)?;
        let fd = sys::open_beneath(
            work.as_fd(),
            Path::new(path.as_str()),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        )
        .map_err(err)?;
        let st = sys::fstat(fd.as_fd()).map_err(err)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(WorkspaceError::Refused {
                path: path.to_string(),
                why: "not a regular file".into(),
            });
        }
        let size = st.st_size as u64;
        if size > max_bytes {
            return Err(WorkspaceError::Refused {
                path: path.to_string(),
                why: format!("{size} bytes, more than the limit of {max_bytes}"),
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        std::fs::File::from(fd)
            .take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(err)?;
        if bytes.len() as u64 > max_bytes {
            return Err(WorkspaceError::Refused {
                path: path.to_string(),
                why: format!("grew past the limit of {max_bytes} bytes while read"),
            });
        }
        Ok(bytes)
    }

    /// The stamps of the files under the output folder now (at most a few thousand), so that a
    /// run returns only what it wrote.
    pub fn output_stamps(&self) -> Vec<FileStamp> {
        let Ok(work) = self.work() else {
            return Vec::new();
        };
        let Ok(output) = sys::open_beneath(
            work.as_fd(),
            Path::new(OUTPUT_DIR_NAME),
            libc::O_RDONLY | libc::O_DIRECTORY,
        ) else {
            return Vec::new();
        };
        let mut stamps = Vec::new();
        walk(output.as_fd(), "", 0, 4096, &mut |_, st| {
            if st.st_mode & libc::S_IFMT == libc::S_IFREG {
                stamps.push(FileStamp::of(st));
            }
        });
        stamps
    }

    /// Lists the working folder recursively (symlinks are listed, not followed; names that
    /// are not UTF-8 are left out), at most `max_entries`.
    pub fn list(&self, max_entries: usize) -> Result<Vec<FileEntry>, WorkspaceError> {
        let work = self.work().map_err(|e| WorkspaceError::Io {
            path: String::new(),
            source: e,
        })?;
        let mut out = Vec::new();
        walk(work.as_fd(), "", 0, max_entries, &mut |path, st| {
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            out.push(FileEntry {
                path: path.to_owned(),
                size: if is_dir { 0 } else { st.st_size as u64 },
                is_dir,
            });
        });
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

/// Visits every entry under `dir` (depth first, at most `max` in all), giving its path and
/// its own `stat` (a symlink's, never its target's).
fn walk(
    dir: BorrowedFd<'_>,
    prefix: &str,
    depth: usize,
    max: usize,
    visit: &mut dyn FnMut(&str, &libc::stat),
) -> usize {
    let mut seen = 0;
    // Read from the descriptor: exactly this folder, whatever the program renames.
    let Ok(mut names) = sys::entry_names(dir) else {
        return 0;
    };
    names.sort();
    for name in names {
        if seen >= max {
            return seen;
        }
        seen += 1;
        let Ok(name) = std::str::from_utf8(name.as_bytes()) else {
            continue;
        };
        let path = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        let Ok(fd) = sys::open_beneath(dir, Path::new(name), libc::O_PATH | libc::O_NOFOLLOW)
        else {
            continue;
        };
        let Ok(st) = sys::fstat(fd.as_fd()) else {
            continue;
        };
        visit(&path, &st);
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR
            && depth < MAX_LIST_DEPTH
            && let Ok(sub) =
                sys::open_beneath(dir, Path::new(name), libc::O_RDONLY | libc::O_DIRECTORY)
        {
            seen += walk(sub.as_fd(), &path, depth + 1, max - seen, visit);
        }
    }
    seen
}

fn map_io(path: &WorkspacePath, source: io::Error) -> WorkspaceError {
    let path = path.to_string();
    match source.raw_os_error() {
        Some(libc::ENOENT) => WorkspaceError::NotFound { path },
        Some(libc::ELOOP) => WorkspaceError::Refused {
            path,
            why: "leads through a symlink (not followed)".into(),
        },
        Some(libc::EXDEV) => WorkspaceError::Refused {
            path,
            why: "leads outside the workspace".into(),
        },
        Some(libc::ENOTDIR) => WorkspaceError::Refused {
            path,
            why: "a parent is not a folder".into(),
        },
        Some(libc::EISDIR) => WorkspaceError::Refused {
            path,
            why: "is a folder".into(),
        },
        Some(libc::ENOSPC) => WorkspaceError::Refused {
            path,
            why: "the workspace is full (its size cap)".into(),
        },
        Some(libc::ENXIO) => WorkspaceError::Refused {
            path,
            why: "not a regular file".into(),
        },
        _ => WorkspaceError::Io { path, source },
    }
}

#[cfg(test)]
mod tests {
    use super::RELEASE_CHECKS;
    use super::uid_releaser::round;
    use std::collections::HashSet;
    use warden_net::uids::{UidRange, UidUsers};

    struct NoneLeft;
    impl UidUsers for NoneLeft {
        fn in_use(&self, _: u32) -> bool {
            false
        }
    }

    #[test]
    fn a_round_releases_the_leases_whose_uid_is_free_and_keeps_the_others_a_while() {
        let dir = tempfile::tempdir().unwrap();
        let range = UidRange {
            base: 3_000_000_000,
            count: 8,
        };
        let leases = range.leases(dir.path());
        let free = range.lease(dir.path(), &NoneLeft).unwrap();
        let busy = range.lease(dir.path(), &NoneLeft).unwrap();
        let (free_uid, busy_uid) = (free.uid(), busy.uid());
        let in_use: HashSet<u32> = [busy_uid].into();
        let left = round(vec![(free, 0), (busy, 0)], Some(&in_use));
        assert!(!leases.is_leased(free_uid), "released");
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].0.uid(), left[0].1), (busy_uid, 1));
        assert!(leases.is_leased(busy_uid), "still held");
        // /proc unreadable: nothing is free.
        let left = round(left, None);
        assert_eq!(left[0].1, 2);
        // The last round drops it without a release: its record stays for the next taker.
        let (busy, _) = left.into_iter().next().unwrap();
        assert!(round(vec![(busy, RELEASE_CHECKS - 1)], Some(&in_use)).is_empty());
        assert!(!leases.is_leased(busy_uid));
        assert!(
            !std::fs::read(dir.path().join(format!("uid-{busy_uid}.record")))
                .unwrap()
                .is_empty()
        );
    }
}
