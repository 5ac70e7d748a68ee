//! Leases of numbered host resources across processes: the one mechanism behind the address
//! pool's slots ([`crate::pool`]) and the sandboxes' host uids (the jail's and the docker
//! backend's `uids`). Any number of processes (`warden run`s, `warden serve`, keepers) lease
//! from the same folder at once.
//!
//! Two ways to hold an index, chosen per range ([`LockLeases::new`], [`LockLeases::shared`]):
//!
//! - **a file per index** (the pool's slots, a few hundred at most): index `i` is leased
//!   exactly while some open file description of `<dir>/<prefix>-<i>.lock` holds an exclusive
//!   `flock` on it, and that file's content is the holder's record;
//! - **one file per folder and prefix** (the uids, thousands held at once by one daemon):
//!   index `i` is leased exactly while byte `i` of `<dir>/<prefix>.locks` holds an exclusive
//!   open-file-description lock (`F_OFD_SETLK`) or byte `2^32 + i` a shared one. The holder
//!   locks byte `i` through one description of the file that its whole process shares (so a
//!   lease costs no descriptor of its own: a daemon holding 10,000 sandboxes would otherwise
//!   hold 10,000 lock files open), and its process keeps the indices it holds in a set
//!   (locks of one description never conflict with each other). A child that must keep the
//!   lease alive on its own ([`Lease::for_child`]) gets a description of its own with a shared
//!   lock on byte `2^32 + i`, which the next taker finds and respects. The record lives in
//!   `<dir>/<prefix>-<i>.record`, written while the lock is held.
//!
//! Invariants, both ways: the kernel drops a lock when the last descriptor of its description
//! closes (a process that dies, the children that inherited it), so a crashed holder never
//! keeps its lease; a lease dropped without [`Lease::release`] leaves its record, which the next
//! taker reads before it decides (`usable`), so what a crashed holder left is recovered, or
//! skipped while it remains; the folder is created mode 0700 and the files 0600, never through
//! a symlink. The two ways do not see each other's locks: one prefix in one folder is always
//! leased the same way.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

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

/// In a shared lock file, where the bytes that children's copies of a lease lock begin
/// (byte `CHILD_HOLDS + i` for index `i`).
const CHILD_HOLDS: i64 = 1 << 32;

/// How a range's indices are locked (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    FilePerIndex,
    Shared,
}

/// The leases of indices `[first, first + count)` in `dir`, by prefix (so two overlapping
/// ranges of one prefix in one folder share their common locks).
#[derive(Debug, Clone)]
pub struct LockLeases {
    dir: PathBuf,
    prefix: &'static str,
    first: u32,
    count: u32,
    store: Store,
    /// A description of the shared lock file of this range's own, instead of the process's
    /// (tests: two of them conflict as two processes do).
    own: Option<Arc<LockFile>>,
}

impl LockLeases {
    /// Leases held by a lock file per index (`<dir>/<prefix>-<i>.lock`).
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
            store: Store::FilePerIndex,
            own: None,
        }
    }

    /// Leases held by byte-range locks on one lock file (`<dir>/<prefix>.locks`), with no
    /// descriptor per lease.
    pub fn shared(
        dir: impl Into<PathBuf>,
        prefix: &'static str,
        first: u32,
        count: u32,
    ) -> LockLeases {
        LockLeases {
            store: Store::Shared,
            ..LockLeases::new(dir, prefix, first, count)
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds index `index`'s record.
    pub fn path(&self, index: u32) -> PathBuf {
        match self.store {
            Store::FilePerIndex => self.dir.join(format!("{}-{index}.lock", self.prefix)),
            Store::Shared => self.dir.join(format!("{}-{index}.record", self.prefix)),
        }
    }

    /// The index whose record a file of this name in the folder holds, if it is one of this
    /// prefix's (in the range or not).
    pub fn index_of(&self, file_name: &str) -> Option<u32> {
        let suffix = match self.store {
            Store::FilePerIndex => ".lock",
            Store::Shared => ".record",
        };
        file_name
            .strip_prefix(self.prefix)?
            .strip_prefix('-')?
            .strip_suffix(suffix)?
            .parse()
            .ok()
    }

    /// The shared lock file's path.
    fn locks_path(&self) -> PathBuf {
        self.dir.join(format!("{}.locks", self.prefix))
    }

    /// Leases the first free index at or after `first + start` (wrapping around within the
    /// range), creating the folder
    /// (mode 0700) if needed. A free index is offered to `usable` with its record (empty if
    /// none) while the lock is held: `false` skips it (its lock is dropped again).
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
    /// one: thousands of probes per lease once thousands are held), and the records stay
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
        let mut lease = match self.store {
            Store::FilePerIndex => {
                let path = self.path(index);
                let file = open_lock(&path)?;
                // SAFETY: flock on a descriptor we own.
                if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                    let err = std::io::Error::last_os_error();
                    if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                        return Err(LeaseError::Lock { path, source: err });
                    }
                    return Ok(None);
                }
                Lease {
                    index,
                    hold: Hold::File(file),
                }
            }
            Store::Shared => {
                let locks = match &self.own {
                    Some(own) => own.clone(),
                    None => LockFile::of_process(&self.locks_path())?,
                };
                if !locks.take(index)? {
                    return Ok(None);
                }
                Lease {
                    index,
                    hold: Hold::Byte {
                        locks,
                        record: self.path(index),
                    },
                }
            }
        };
        let record = lease.record();
        Ok(usable(index, &record).then_some(lease))
    }

    /// Whether index `index` is leased by a live process right now (a probe).
    pub fn is_leased(&self, index: u32) -> bool {
        match self.store {
            Store::FilePerIndex => {
                let Ok(file) = File::open(self.path(index)) else {
                    return false;
                };
                // SAFETY: flock on a descriptor we own; closing it drops the probe's lock.
                unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
            }
            Store::Shared => {
                // A description of its own sees every holder's locks, this process's too.
                let Ok(file) = File::open(self.locks_path()) else {
                    return false;
                };
                let fd = file.as_raw_fd();
                [i64::from(index), CHILD_HOLDS + i64::from(index)]
                    .into_iter()
                    .any(|at| ofd_locked(fd, at).unwrap_or(true))
            }
        }
    }

    /// The record of index `index` (empty if none).
    pub fn record_of(&self, index: u32) -> String {
        read_record(&self.path(index))
    }

    /// These leases, through a description of the shared lock file of their own rather than
    /// the process's: they conflict with the process's as another process's would.
    #[cfg(test)]
    pub(crate) fn apart(mut self) -> LockLeases {
        ensure_private_dir(&self.dir).unwrap();
        self.own = Some(Arc::new(LockFile::open(&self.locks_path()).unwrap()));
        self
    }
}

/// One open file description of a shared lock file, and the indices locked through it.
#[derive(Debug)]
struct LockFile {
    path: PathBuf,
    file: File,
    held: Mutex<HashSet<u32>>,
}

/// The process's descriptions of shared lock files, by path: one each while any of its
/// leases is held.
static PROCESS_LOCKS: Mutex<Option<HashMap<PathBuf, Weak<LockFile>>>> = Mutex::new(None);

impl LockFile {
    fn open(path: &Path) -> Result<LockFile, LeaseError> {
        Ok(LockFile {
            path: path.into(),
            file: open_lock(path)?,
            held: Mutex::new(HashSet::new()),
        })
    }

    /// The process's description of the lock file at `path`, opened if it has none.
    fn of_process(path: &Path) -> Result<Arc<LockFile>, LeaseError> {
        let mut all = PROCESS_LOCKS.lock().expect("not poisoned");
        let all = all.get_or_insert_with(HashMap::new);
        if let Some(open) = all.get(path).and_then(Weak::upgrade) {
            return Ok(open);
        }
        let open = Arc::new(LockFile::open(path)?);
        all.retain(|_, w| w.strong_count() > 0);
        all.insert(path.into(), Arc::downgrade(&open));
        Ok(open)
    }

    /// Locks byte `index` if no holder (this process included) has it and no child of a
    /// former holder still holds a copy; `false` if taken.
    fn take(&self, index: u32) -> Result<bool, LeaseError> {
        let mut held = self.held.lock().expect("not poisoned");
        if held.contains(&index) {
            return Ok(false);
        }
        let fd = self.file.as_raw_fd();
        let err = |source| LeaseError::Lock {
            path: self.path.clone(),
            source,
        };
        if !ofd_set(fd, libc::F_WRLCK, i64::from(index)).map_err(err)? {
            return Ok(false);
        }
        // A copy handed to a child is made only by a holder, so none appears once the byte is
        // ours: what is there now is all there will be.
        if ofd_locked(fd, CHILD_HOLDS + i64::from(index)).map_err(err)? {
            let _ = ofd_set(fd, libc::F_UNLCK, i64::from(index));
            return Ok(false);
        }
        held.insert(index);
        Ok(true)
    }

    fn free(&self, index: u32) {
        let mut held = self.held.lock().expect("not poisoned");
        let _ = ofd_set(self.file.as_raw_fd(), libc::F_UNLCK, i64::from(index));
        held.remove(&index);
    }
}

/// Sets (or with `F_UNLCK` removes) an open-file-description lock on byte `at` of `fd`;
/// `false` if another description holds a conflicting one.
fn ofd_set(fd: RawFd, kind: libc::c_int, at: i64) -> std::io::Result<bool> {
    let mut lock = byte_lock(kind, at);
    // SAFETY: fcntl with a valid struct flock on a descriptor the caller holds.
    if unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut lock) } == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// Whether a description other than `fd`'s holds any lock on byte `at`.
fn ofd_locked(fd: RawFd, at: i64) -> std::io::Result<bool> {
    let mut lock = byte_lock(libc::F_WRLCK, at);
    // SAFETY: fcntl with a valid struct flock on a descriptor the caller holds.
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut lock) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
}

fn byte_lock(kind: libc::c_int, at: i64) -> libc::flock {
    // SAFETY: a plain C struct; all zeroes is valid (and l_pid must be 0 for OFD locks).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = at;
    lock.l_len = 1;
    lock
}

/// A leased index: held until dropped (and, for a lock file per index, until every
/// descriptor inherited from it is closed; see [`Lease::for_child`]).
#[derive(Debug)]
pub struct Lease {
    index: u32,
    hold: Hold,
}

#[derive(Debug)]
enum Hold {
    /// The index's own lock file, its record inside.
    File(File),
    /// Byte `index` of a shared lock file, through the process's description.
    Byte {
        locks: Arc<LockFile>,
        record: PathBuf,
    },
    /// A copy another process handed this one (its lock is that holder's).
    Inherited(File),
}

impl Lease {
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The holder's record: what the next taker reads (empty: nothing to recover).
    pub fn record(&mut self) -> String {
        match &mut self.hold {
            Hold::File(file) | Hold::Inherited(file) => {
                let mut s = String::new();
                let _ = file.rewind();
                let _ = file.read_to_string(&mut s);
                s
            }
            Hold::Byte { record, .. } => read_record(record),
        }
    }

    /// Replaces the record.
    pub fn write_record(&mut self, text: &str) -> std::io::Result<()> {
        match &mut self.hold {
            Hold::File(file) | Hold::Inherited(file) => overwrite(file, text.as_bytes()),
            Hold::Byte { record, .. } => overwrite(&mut record_to_write(record)?, text.as_bytes()),
        }
    }

    /// Empties the record and ends the lease: for a holder whose resources are all gone.
    pub fn release(self) {
        match &self.hold {
            Hold::File(file) | Hold::Inherited(file) => {
                let _ = file.set_len(0);
            }
            Hold::Byte { record, .. } => {
                let _ = empty_record(record);
            }
        }
    }

    /// A descriptor for a child process that must hold the lease as long as it lives, even
    /// if this holder ends first (close-on-exec: the caller places it for the child).
    pub fn for_child(&self) -> std::io::Result<OwnedFd> {
        match &self.hold {
            Hold::File(file) | Hold::Inherited(file) => Ok(file.try_clone()?.into()),
            Hold::Byte { locks, .. } => {
                let copy = File::open(&locks.path)?;
                if !ofd_set(
                    copy.as_raw_fd(),
                    libc::F_RDLCK,
                    CHILD_HOLDS + i64::from(self.index),
                )? {
                    return Err(std::io::Error::other(
                        "a child's hold is locked exclusively",
                    ));
                }
                Ok(copy.into())
            }
        }
    }

    /// A lease that another process took and this one inherited at `fd` (from
    /// [`Lease::for_child`]): held until every copy is closed.
    pub fn inherited(index: u32, fd: OwnedFd) -> Lease {
        Lease {
            index,
            hold: Hold::Inherited(File::from(fd)),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Hold::Byte { locks, .. } = &self.hold {
            locks.free(self.index);
        }
    }
}

fn read_record(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

/// A record file, emptied (a release: nothing left to recover).
fn empty_record(path: &Path) -> std::io::Result<File> {
    record_options().truncate(true).open(path)
}

/// A record file to [`overwrite`], created if missing.
fn record_to_write(path: &Path) -> std::io::Result<File> {
    record_options().create(true).truncate(false).open(path)
}

fn record_options() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW);
    options
}

/// Replaces a record file's content with `text`. It writes over the old content and cuts the
/// file to its length; it never empties the file first. On ext4 (a `/run` that is not a
/// tmpfs), a file truncated to nothing and written again is flushed to disk when it is closed
/// (`auto_da_alloc`). That would be a disk write per lease, for a record that the release empties
/// moments later, before the kernel's own write-back would have written it.
pub(crate) fn overwrite(file: &mut File, text: &[u8]) -> std::io::Result<()> {
    file.rewind()?;
    file.write_all(text)?;
    file.set_len(text.len() as u64)
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
    use std::os::fd::AsFd;

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

    /// Both ways of holding, on ranges `[first, first + count)` in `dir`.
    fn both(dir: &Path, first: u32, count: u32) -> [LockLeases; 2] {
        [
            LockLeases::new(dir, "uid", first, count),
            LockLeases::shared(dir, "uid", first, count),
        ]
    }

    #[test]
    fn leases_wrap_from_the_start_skip_what_is_unusable_and_keep_records() {
        let tmp = tempfile::tempdir().unwrap();
        for leases in both(&tmp.path().join("l"), 0, 3) {
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
            drop((b, d, e));
        }
    }

    #[test]
    fn a_record_is_replaced_whole_by_a_shorter_or_longer_one() {
        let tmp = tempfile::tempdir().unwrap();
        for leases in both(&tmp.path().join("l"), 0, 2) {
            let mut a = leases.lease(0, |_, _| true).unwrap();
            a.write_record("held by a long name\n").unwrap();
            a.write_record("held 2\n").unwrap();
            drop(a);
            let mut seen = None;
            let mut b = eventually(0, Lease::index, || {
                leases.lease(0, |_, record| {
                    seen = Some(record.to_owned());
                    true
                })
            });
            assert_eq!(
                seen.as_deref(),
                Some("held 2\n"),
                "no tail of the longer record"
            );
            b.write_record("held by a longer name than before\n")
                .unwrap();
            assert_eq!(leases.record_of(0), "held by a longer name than before\n");
            b.release();
            assert_eq!(leases.record_of(0), "");
        }
    }

    #[test]
    fn a_childs_copy_holds_the_lease_until_closed() {
        let tmp = tempfile::tempdir().unwrap();
        for leases in both(tmp.path(), 7, 1) {
            let a = leases.lease(0, |_, _| true).unwrap();
            assert_eq!(a.index(), 7);
            let copy = Lease::inherited(7, a.for_child().unwrap());
            drop(a);
            assert!(leases.is_leased(7), "the copy still holds it");
            assert!(leases.lease(0, |_, _| true).is_err());
            drop(copy);
            let again = eventually(7, Lease::index, || leases.lease(0, |_, _| true));
            drop(again);
        }
    }

    #[test]
    fn a_shared_lock_file_costs_no_descriptor_per_lease() {
        let tmp = tempfile::tempdir().unwrap();
        let leases = LockLeases::shared(tmp.path(), "uid", 1000, 5000);
        let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let first = leases.lease(0, |_, _| true).unwrap();
        let before = fds();
        let held: Vec<Lease> = (0..500)
            .map(|i| leases.lease_spread(i * 7919, 64, |_, _| true).unwrap())
            .collect();
        // Other test threads open and close files meanwhile: far fewer than one per lease.
        assert!(fds() < before + 50, "{before} -> {}", fds());
        let mut indices: Vec<u32> = held.iter().map(Lease::index).collect();
        indices.push(first.index());
        indices.sort();
        indices.dedup();
        assert_eq!(indices.len(), 501, "an index leased twice");
        // Locks of one description do not conflict: the process's own set excludes.
        assert!(held.iter().all(|l| leases.is_leased(l.index())));
        drop(held);
        let freed = indices.iter().filter(|&&i| i != first.index());
        assert!(freed.clone().all(|&i| !leases.is_leased(i)));
        assert!(leases.is_leased(first.index()));
    }

    #[test]
    fn two_descriptions_exclude_each_other_as_two_processes_do() {
        let tmp = tempfile::tempdir().unwrap();
        let mine = LockLeases::shared(tmp.path(), "uid", 0, 2);
        let other = LockLeases::shared(tmp.path(), "uid", 0, 2).apart();
        let a = mine.lease(0, |_, _| true).unwrap();
        let b = other.lease(0, |_, _| true).unwrap();
        assert_eq!((a.index(), b.index()), (0, 1));
        assert!(other.lease(0, |_, _| true).is_err() && mine.lease(0, |_, _| true).is_err());
        drop(b);
        assert_eq!(mine.lease(0, |_, _| true).unwrap().index(), 1);
    }

    /// Starts `sleep` holding `fd` (its only copy once the caller drops its own).
    fn child_holding(fd: OwnedFd) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let raw = fd.as_raw_fd();
        let mut command = std::process::Command::new("sleep");
        command.arg("60");
        // SAFETY: only `fsys::dup2` (async-signal-safe) between fork and exec.
        unsafe {
            command.pre_exec(move || crate::fsys::dup2(raw, 3));
        }
        let child = command.spawn().unwrap();
        drop(fd);
        child
    }

    #[test]
    fn another_process_holding_an_index_excludes_it_and_its_crash_frees_it() {
        let tmp = tempfile::tempdir().unwrap();
        let leases = LockLeases::shared(tmp.path(), "uid", 40, 2);
        // Another process takes index 40 (a description of its own, byte 40) and records it.
        ensure_private_dir(tmp.path()).unwrap();
        let theirs = open_lock(&tmp.path().join("uid.locks")).unwrap();
        assert!(ofd_set(theirs.as_raw_fd(), libc::F_WRLCK, 40).unwrap());
        std::fs::write(leases.path(40), "held by another\n").unwrap();
        let mut holder = child_holding(theirs.as_fd().try_clone_to_owned().unwrap());
        drop(theirs);
        let mine = leases.lease(0, |_, _| true).unwrap();
        assert_eq!(mine.index(), 41, "index 40 is the other process's");
        assert!(leases.is_leased(40));
        assert!(leases.lease(0, |_, _| true).is_err());
        // It crashes: the kernel drops its lock; its record is the next taker's to judge.
        holder.kill().unwrap();
        holder.wait().unwrap();
        let mut seen = String::new();
        let recovered = eventually(40, Lease::index, || {
            leases.lease(0, |_, record| {
                seen = record.to_owned();
                true
            })
        });
        assert_eq!(seen, "held by another\n");
        drop((mine, recovered));
    }

    #[test]
    fn a_child_process_holds_a_shared_lease_past_its_holder_until_it_dies() {
        let tmp = tempfile::tempdir().unwrap();
        let leases = LockLeases::shared(tmp.path(), "uid", 9, 1);
        let a = leases.lease(0, |_, _| true).unwrap();
        let mut child = child_holding(a.for_child().unwrap());
        drop(a);
        assert!(leases.is_leased(9), "the child still holds it");
        assert!(leases.lease(0, |_, _| true).is_err());
        child.kill().unwrap();
        child.wait().unwrap();
        drop(eventually(9, Lease::index, || leases.lease(0, |_, _| true)));
    }
}
