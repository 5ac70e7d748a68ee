//! Leases of numbered host resources across processes, by lock files: the one mechanism
//! behind the address pool's slots ([`crate::pool`]) and the sandboxes' host uids (the jail's
//! and the docker backend's `uids`). Any number of processes (`warden run`s, `warden serve`,
//! keepers) lease from the same folder at once.
//!
//! Invariants: index `i` is leased exactly while some open file description of
//! `<dir>/<prefix>-<i>.lock` holds an exclusive `flock` on it — the kernel drops it when the
//! last holder (a process, or the children that inherited the descriptor) is gone, so a
//! crashed holder never keeps its lease; the lock file's content is the holder's record,
//! read by the next taker before it decides (`usable`), so what a crashed holder left (its
//! record is still there) is recovered, or skipped while it remains; the folder is created
//! mode 0700 and the lock files 0600, never through a symlink.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("create {path:?}: {source}")]
    RunDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("lock {path:?}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("all {count} of {dir:?}'s {prefix} leases are taken")]
    Exhausted {
        dir: PathBuf,
        prefix: &'static str,
        count: u32,
    },
}

/// Random probes per window of [`LockLeases::lease_spread`] before the window doubles.
const PROBES: u32 = 8;

/// The leases of indices `[first, first + count)` in `dir`, the lock file of index `i` being
/// `<prefix>-<i>.lock` (so two overlapping ranges in one folder share their common locks).
#[derive(Debug, Clone)]
pub struct LockLeases {
    dir: PathBuf,
    prefix: &'static str,
    first: u32,
    count: u32,
}

impl LockLeases {
    pub fn new(
        dir: impl Into<PathBuf>,
        prefix: &'static str,
        first: u32,
        count: u32,
    ) -> LockLeases {
        LockLeases {
            dir: dir.into(),
            prefix,
            first,
            count,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lock file of index `index`.
    pub fn path(&self, index: u32) -> PathBuf {
        self.dir.join(format!("{}-{index}.lock", self.prefix))
    }

    /// Leases the first free index at or after `first + start` (wrapping around within the
    /// range), creating the folder
    /// (mode 0700) if needed. A free index is offered to `usable` with its lock file's record
    /// (empty if none) while the lock is held: `false` skips it (its lock is dropped again).
    pub fn lease(
        &self,
        start: u32,
        mut usable: impl FnMut(u32, &str) -> bool,
    ) -> Result<Lease, LeaseError> {
        ensure_private_dir(&self.dir)?;
        for n in 0..self.count {
            let offset = (u64::from(start) + u64::from(n)) % u64::from(self.count);
            if let Some(lease) = self.try_offset(offset as u32, &mut usable)? {
                return Ok(lease);
            }
        }
        Err(LeaseError::Exhausted {
            dir: self.dir.clone(),
            prefix: self.prefix,
            count: self.count,
        })
    }

    /// Leases a free index by probing pseudo-random offsets (from `seed`) within a window at
    /// the range's start, `window` wide at first and doubled after each [`PROBES`] taken ones,
    /// then, should all that fail, by [`LockLeases::lease`]'s full search. A search costs a few
    /// probes however many leases are held (a linear search from the start passes every held
    /// one: thousands of opens per lease once thousands are held), and the lock files stay
    /// within about twice the most leases ever held at once.
    pub fn lease_spread(
        &self,
        seed: u32,
        window: u32,
        mut usable: impl FnMut(u32, &str) -> bool,
    ) -> Result<Lease, LeaseError> {
        ensure_private_dir(&self.dir)?;
        let mut window = window.clamp(1, self.count.max(1));
        let mut x = seed | 1;
        loop {
            for _ in 0..PROBES {
                // xorshift32: cheap, and never 0 from a non-zero state.
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if let Some(lease) = self.try_offset(x % window, &mut usable)? {
                    return Ok(lease);
                }
            }
            if window >= self.count {
                break;
            }
            window = window.saturating_mul(2).min(self.count);
        }
        self.lease(seed % self.count.max(1), usable)
    }

    /// Takes index `first + offset` if it is free and `usable`.
    fn try_offset(
        &self,
        offset: u32,
        usable: &mut impl FnMut(u32, &str) -> bool,
    ) -> Result<Option<Lease>, LeaseError> {
        let index = self.first + offset;
        let path = self.path(index);
        let file = open_lock(&path)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            let mut lease = Lease { index, file };
            return Ok(usable(index, &lease.record()).then_some(lease));
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(LeaseError::Lock { path, source: err });
        }
        Ok(None)
    }

    /// Whether index `index` is leased by a live process right now (a probe: takes and drops
    /// the lock).
    pub fn is_leased(&self, index: u32) -> bool {
        let Ok(file) = File::open(self.path(index)) else {
            return false;
        };
        // SAFETY: flock on a descriptor we own; closing it drops the probe's lock.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
    }

    /// The record of index `index` as its lock file holds it (empty if none).
    pub fn record_of(&self, index: u32) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(self.path(index)) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
}

/// A leased index: held until this and every descriptor inherited from it are closed.
#[derive(Debug)]
pub struct Lease {
    index: u32,
    file: File,
}

impl Lease {
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The holder's record: what the next taker reads (empty: nothing to recover).
    pub fn record(&mut self) -> String {
        let mut s = String::new();
        let _ = self.file.rewind();
        let _ = self.file.read_to_string(&mut s);
        s
    }

    /// Replaces the record.
    pub fn write_record(&mut self, record: &str) -> std::io::Result<()> {
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(record.as_bytes())
    }

    /// Empties the record and ends the lease: for a holder whose resources are all gone.
    pub fn release(self) {
        let _ = self.file.set_len(0);
    }

    /// A lease that another process took and this one inherited at `fd` (its lock is the
    /// holder's: shared until every copy is closed).
    pub fn inherited(index: u32, fd: std::os::fd::OwnedFd) -> Lease {
        Lease {
            index,
            file: File::from(fd),
        }
    }
}

impl AsFd for Lease {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

fn open_lock(path: &Path) -> Result<File, LeaseError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| LeaseError::Lock {
            path: path.into(),
            source,
        })
}

fn ensure_private_dir(dir: &Path) -> Result<(), LeaseError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| LeaseError::RunDir {
            path: dir.into(),
            source,
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Takes leases until `take` gives `expected` (dropping others), for up to 5 s: a lock just
    /// freed can still be held for a moment by a copy of its descriptor in a child another
    /// test thread forked and has not exec'd yet (close-on-exec closes it only at the exec).
    pub(crate) fn eventually<T, E: std::fmt::Debug>(
        expected: u32,
        index: impl Fn(&T) -> u32,
        mut take: impl FnMut() -> Result<T, E>,
    ) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match take() {
                Ok(t) if index(&t) == expected => return t,
                other => assert!(
                    std::time::Instant::now() < deadline,
                    "never got {expected}: {:?}",
                    other.map(|t| index(&t))
                ),
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn leases_wrap_from_the_start_skip_what_is_unusable_and_keep_records() {
        let tmp = tempfile::tempdir().unwrap();
        let leases = LockLeases::new(tmp.path().join("l"), "uid", 0, 3);
        let mut a = leases.lease(2, |_, _| true).unwrap();
        assert_eq!(a.index(), 2);
        a.write_record("held 1\n").unwrap();
        // Wraps past the end; index 0 refused by the caller, so 1.
        let b = leases.lease(2, |i, _| i != 0).unwrap();
        assert_eq!(b.index(), 1);
        assert!(leases.is_leased(2) && leases.is_leased(1) && !leases.is_leased(0));
        // A holder that dies without releasing leaves its record for the next taker.
        drop(a);
        let mut seen = None;
        let c = eventually(2, Lease::index, || {
            leases.lease(2, |i, record| {
                seen = Some((i, record.to_owned()));
                true
            })
        });
        assert_eq!(seen, Some((2, "held 1\n".to_owned())));
        // A released lease leaves no record.
        c.release();
        assert_eq!(leases.record_of(2), "");
        let d = leases.lease(0, |_, _| true).unwrap();
        assert_eq!(d.index(), 0);
        let e = eventually(2, Lease::index, || leases.lease(0, |_, _| true));
        assert!(matches!(
            leases.lease(0, |_, _| true),
            Err(LeaseError::Exhausted { count: 3, .. })
        ));
        drop((b, e));
    }

    #[test]
    fn an_inherited_descriptor_holds_the_lease_until_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let leases = LockLeases::new(tmp.path(), "x", 7, 1);
        let a = leases.lease(0, |_, _| true).unwrap();
        assert_eq!(a.index(), 7);
        assert!(tmp.path().join("x-7.lock").exists());
        let copy = Lease::inherited(7, a.as_fd().try_clone_to_owned().unwrap());
        drop(a);
        assert!(leases.is_leased(7), "the copy still holds it");
        drop(copy);
        let again = eventually(7, Lease::index, || leases.lease(0, |_, _| true));
        drop(again);
    }
}
