//! Host uids for sandboxes: every live sandbox (one-shot, persistent, pooled, a context's) of
//! the jail and of the docker backend runs as a host uid (and the gid of the same number) of
//! its own, leased from a configured range through [`crate::lease`] — the kernel counts some
//! resources per user (inotify instances and watches, pipe buffers, epoll watches, file
//! descriptors in flight, keys, and through the user namespace's owner the `ucounts` of
//! processes, pending signals, message queues, locked memory and namespaces), so a uid of
//! its own turns each of those into a per-sandbox limit. docs/threat-model.md lists them.
//!
//! Invariants: a uid is held by at most one sandbox on this host at a time, across processes
//! (`warden run`s, `warden serve`, any backend using the same folder); its holder releases
//! it ([`UidLease::release`]) only once the sandbox's processes are gone and its files with
//! them (a jail's workspace, a removed container); a holder that dies without releasing
//! leaves its record, and the next taker takes that uid only when no process runs as it any
//! more ([`UidUsers`]), else skips it; a search starts at a varying place in the range, so a
//! freed uid is not the next one handed out.

use crate::lease::{Lease, LeaseError, LockLeases};
use std::os::fd::OwnedFd;
use std::path::Path;

/// Where the uid leases live: shared by every Warden process and backend on the host.
pub const RUN_DIR: &str = "/run/warden/uids";

/// The default range's first uid: above the ranges systemd hands out to containers
/// (524288–1879048191) and to dynamic users, below 2^31 and systemd's foreign range
/// (2147352576+), so it collides with no real user, `/etc/subuid` range or container.
pub const DEFAULT_UID_BASE: u32 = 1_900_000_000;
/// The default range's size: as many sandboxes at once.
pub const DEFAULT_UID_COUNT: u32 = 65_536;

/// `[base, base + count)`: the host uids (and gids) sandboxes run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UidRange {
    pub base: u32,
    pub count: u32,
}

impl Default for UidRange {
    fn default() -> Self {
        UidRange {
            base: DEFAULT_UID_BASE,
            count: DEFAULT_UID_COUNT,
        }
    }
}

/// Whether any process runs as a uid: what a crashed holder may have left (the OS side, with
/// a fake in tests).
pub trait UidUsers {
    fn in_use(&self, uid: u32) -> bool;
}

/// Scans `/proc` (this process's pid namespace: run from the host's to see every process).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcScan;

impl UidUsers for ProcScan {
    fn in_use(&self, uid: u32) -> bool {
        let Some(mut statuses) = statuses() else {
            // Cannot tell: the uid is not taken.
            return true;
        };
        statuses.any(|status| status_has_uid(&status, uid))
    }
}

impl ProcScan {
    /// Every uid some process runs as (real, effective, saved or file), in one pass over
    /// `/proc`: what many holders waiting for their uids to be free ask at once. `None` if
    /// `/proc` cannot be read (then no uid can be told free).
    pub fn uids_in_use() -> Option<std::collections::HashSet<u32>> {
        Some(
            statuses()?
                .flat_map(|status| status_uids(&status).collect::<Vec<_>>())
                .collect(),
        )
    }
}

/// Every process's `/proc/<pid>/status` that can still be read; `None` if `/proc` cannot be.
fn statuses() -> Option<impl Iterator<Item = String>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(entries.flatten().filter_map(|entry| {
        let name = entry.file_name();
        name.to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| std::fs::read_to_string(entry.path().join("status")).ok())
            .flatten()
    }))
}

/// The real, effective, saved and file uids a `/proc/<pid>/status` names.
fn status_uids(status: &str) -> impl Iterator<Item = u32> + '_ {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .into_iter()
        .flat_map(|ids| ids.split_whitespace().filter_map(|id| id.parse().ok()))
}

/// Whether a `/proc/<pid>/status` names `uid` among its real, effective, saved or file uids.
fn status_has_uid(status: &str, uid: u32) -> bool {
    status_uids(status).any(|id| id == uid)
}

/// A leased host uid; the gid has the same number.
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    lease: Lease,
}

impl UidRange {
    /// Leases a uid of the range in `dir`, skipping any a crashed holder still has processes
    /// of (`users`).
    pub fn lease(&self, dir: &Path, users: &dyn UidUsers) -> Result<UidLease, LeaseError> {
        self.lease_from(dir, users, search_start())
    }

    fn lease_from(
        &self,
        dir: &Path,
        users: &dyn UidUsers,
        seed: u32,
    ) -> Result<UidLease, LeaseError> {
        let leases = self.leases(dir);
        let mut lease = leases.lease_spread(seed, SPREAD, |uid, record| {
            record.is_empty() || !users.in_use(uid)
        })?;
        let uid = lease.index();
        lease
            .write_record(&format!("held by {}\n", std::process::id()))
            .map_err(|source| LeaseError::Lock {
                path: leases.path(uid),
                source,
            })?;
        Ok(UidLease { uid, lease })
    }

    /// The range's leases in `dir`: byte-range locks on one lock file (`uid.locks`), so a
    /// daemon holding thousands of sandboxes holds no descriptor per uid, and a record per
    /// uid ever used (`uid-<uid>.record`).
    pub fn leases(&self, dir: &Path) -> LockLeases {
        LockLeases::shared(dir, "uid", self.base, self.count)
    }

    /// Whether `uid` is in the range.
    pub fn contains(&self, uid: u32) -> bool {
        uid.checked_sub(self.base).is_some_and(|o| o < self.count)
    }

    /// Who else uses uids of the range, from the texts of `/etc/passwd` and `/etc/subuid`:
    /// users (`name (uid N)`) and subordinate ranges (`name's subuids A-B`). Sandboxes of a
    /// range someone owns would share that owner's per-user counts, and its files.
    pub fn claimed_by(&self, passwd: &str, subuid: &str) -> Vec<String> {
        let end = u64::from(self.base) + u64::from(self.count);
        let mut found = Vec::new();
        for line in passwd.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if let (Some(name), Some(Ok(uid))) = (fields.first(), fields.get(2).map(|u| u.parse()))
                && self.contains(uid)
            {
                found.push(format!("{name} (uid {uid})"));
            }
        }
        for line in subuid.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if let [name, start, count] = fields[..]
                && let (Ok(start), Ok(count)) = (start.parse::<u64>(), count.parse::<u64>())
                && start < end
                && start + count > u64::from(self.base)
            {
                found.push(format!("{name}'s subuids {start}-{}", start + count - 1));
            }
        }
        found
    }

    /// How many uids of the range are leased now in `dir` (probes their locks).
    pub fn leased_now(&self, dir: &Path) -> usize {
        let leases = self.leases(dir);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .filter_map(|e| leases.index_of(e.file_name().to_str()?))
            .filter(|&uid| self.contains(uid) && leases.is_leased(uid))
            .count()
    }

    /// What `warden doctor` says of the range: whether no user or subordinate range of this
    /// host claims it, and a line about it.
    pub fn describe(&self) -> (bool, String) {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let claimed = self.claimed_by(&read("/etc/passwd"), &read("/etc/subuid"));
        let span = format!(
            "{}-{} ({} sandboxes at once, {} now)",
            self.base,
            u64::from(self.base) + u64::from(self.count) - 1,
            self.count,
            self.leased_now(Path::new(RUN_DIR))
        );
        if claimed.is_empty() {
            (
                true,
                format!("{span}; no user or subuid range of this host has one"),
            )
        } else {
            (
                false,
                format!(
                    "{span}; already used by {}: choose another range",
                    claimed.join(", ")
                ),
            )
        }
    }
}

/// Searches probe among the range's first `SPREAD` uids, a window that doubles while it is
/// crowded ([`LockLeases::lease_spread`]): spread enough that consecutive sandboxes rarely get
/// the uid just freed, few enough that the records (one per uid ever used, in a tmpfs)
/// stay a few thousand, or about twice the most sandboxes held at once, whatever the range's
/// size.
const SPREAD: u32 = 4096;

/// Where a search's probes come from: varies with the time and the process, so that consecutive sandboxes
/// rarely get the uid just freed (whatever the kernel frees late is then never charged to
/// the next tenant). Also where a teardown's sweep of cgroup leaves starts
/// (`warden_jail::cgroup::Hierarchy::remove_some_stale`).
pub fn search_start() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(7))
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

impl UidLease {
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Ends the lease with nothing to recover: for a holder that saw its sandbox's processes
    /// and files gone.
    pub fn release(self) {
        self.lease.release();
    }

    /// A descriptor for a child that holds the uid as long as it lives ([`Lease::for_child`]).
    pub fn for_child(&self) -> std::io::Result<OwnedFd> {
        self.lease.for_child()
    }

    /// A lease taken by another process and inherited at `fd` (see [`Lease::inherited`]).
    pub fn inherited(uid: u32, fd: OwnedFd) -> UidLease {
        UidLease {
            uid,
            lease: Lease::inherited(uid, fd),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::tests::eventually;
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    /// Uids with processes left, and the uids asked about.
    #[derive(Default)]
    struct FakeUsers {
        busy: BTreeSet<u32>,
        asked: RefCell<Vec<u32>>,
    }

    impl UidUsers for FakeUsers {
        fn in_use(&self, uid: u32) -> bool {
            self.asked.borrow_mut().push(uid);
            self.busy.contains(&uid)
        }
    }

    #[test]
    fn each_holder_gets_its_own_uid_until_the_range_is_exhausted() {
        let tmp = tempfile::tempdir().unwrap();
        let range = UidRange {
            base: 5000,
            count: 3,
        };
        let users = FakeUsers::default();
        let a = range.lease_from(tmp.path(), &users, 0).unwrap();
        let b = range.lease_from(tmp.path(), &users, 0).unwrap();
        let c = range.lease_from(tmp.path(), &users, 7).unwrap();
        let mut got = [a.uid(), b.uid(), c.uid()];
        got.sort();
        assert_eq!(got, [5000, 5001, 5002]);
        assert!(matches!(
            range.lease_from(tmp.path(), &users, 0),
            Err(LeaseError::Exhausted { count: 3, .. })
        ));
        // A clean release: the next taker asks nothing.
        let freed = b.uid();
        b.release();
        let d = eventually(freed, UidLease::uid, || {
            range.lease_from(tmp.path(), &users, 0)
        });
        assert!(users.asked.borrow().is_empty());
        drop((a, c, d));
    }

    #[test]
    fn a_crashed_holders_uid_is_skipped_while_its_processes_remain_then_recovered() {
        let tmp = tempfile::tempdir().unwrap();
        let range = UidRange {
            base: 7000,
            count: 2,
        };
        let mut users = FakeUsers::default();
        // Dropped without release: a holder that died.
        let crashed = range.lease_from(tmp.path(), &users, 0).unwrap();
        let (dead, other) = match crashed.uid() {
            7000 => (7000, 7001),
            _ => (7001, 7000),
        };
        drop(crashed);
        users.busy.insert(dead);
        let next = range.lease_from(tmp.path(), &users, 0).unwrap();
        assert_eq!(next.uid(), other, "{dead} still has processes");
        // Asked about the dead holder's uid (once its lock was free: a forked copy may delay
        // that).
        assert!(users.asked.borrow().iter().all(|&u| u == dead));
        // Nothing else free while it is busy.
        assert!(range.lease_from(tmp.path(), &users, 0).is_err());
        users.busy.clear();
        let recovered = eventually(dead, UidLease::uid, || {
            range.lease_from(tmp.path(), &users, 0)
        });
        drop((next, recovered));
    }

    #[test]
    fn a_crowded_range_still_leases_and_keeps_its_files_near_the_peak() {
        let tmp = tempfile::tempdir().unwrap();
        let range = UidRange {
            base: 300_000,
            count: 65_536,
        };
        let users = FakeUsers::default();
        let held: Vec<UidLease> = (0..SPREAD + 200)
            .map(|i| {
                range
                    .lease_from(tmp.path(), &users, i.wrapping_mul(2_654_435_761))
                    .unwrap()
            })
            .collect();
        let mut uids: Vec<u32> = held.iter().map(UidLease::uid).collect();
        uids.sort();
        uids.dedup();
        assert_eq!(uids.len(), held.len(), "a uid leased twice");
        // The window grew only as far as needed: at most twice the peak in records.
        let files = std::fs::read_dir(tmp.path()).unwrap().count() - 1;
        assert!(
            files <= 2 * held.len(),
            "{files} records for {} leases",
            held.len()
        );
    }

    #[test]
    fn overlapping_ranges_share_their_uids() {
        let tmp = tempfile::tempdir().unwrap();
        let users = FakeUsers::default();
        let wide = UidRange {
            base: 100,
            count: 2,
        };
        let narrow = UidRange {
            base: 101,
            count: 1,
        };
        let a = narrow.lease_from(tmp.path(), &users, 0).unwrap();
        assert_eq!(a.uid(), 101);
        assert_eq!(wide.lease_from(tmp.path(), &users, 1).unwrap().uid(), 100);
        assert!(wide.contains(101) && !narrow.contains(100) && !narrow.contains(102));
    }

    #[test]
    fn users_and_subuid_ranges_inside_the_range_are_found() {
        let range = UidRange {
            base: 200_000,
            count: 1000,
        };
        let passwd =
            "root:x:0:0::/root:/bin/sh\nold:x:200999:5::/:/bin/sh\nnew:x:201000:5::/:/bin/sh\n";
        let subuid = "a:100000:65536\nb:165536:65536\nc:201000:10\nbroken\n";
        assert_eq!(
            range.claimed_by(passwd, subuid),
            ["old (uid 200999)", "b's subuids 165536-231071"]
        );
        assert!(UidRange::default().claimed_by(passwd, subuid).is_empty());
    }

    #[test]
    fn a_status_names_its_uids() {
        let status = "Name:\tpython3\nUid:\t1900000001\t1900000001\t1900000001\t1900000001\nGid:\t5\t5\t5\t5\n";
        assert!(status_has_uid(status, 1_900_000_001));
        assert!(!status_has_uid(status, 5));
        // The real scan sees this process's own uid.
        // SAFETY: getuid has no preconditions.
        assert!(ProcScan.in_use(unsafe { libc::getuid() }));
        assert!(!ProcScan.in_use(u32::MAX - 2));
        // One pass sees every uid: this process's and the uid 0 of the kernel's threads.
        let all = ProcScan::uids_in_use().expect("/proc is readable");
        // SAFETY: as above.
        assert!(all.contains(&unsafe { libc::getuid() }) && all.contains(&0));
        assert!(!all.contains(&(u32::MAX - 2)));
    }
}
