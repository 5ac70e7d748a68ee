//! The address pool: one /30 per networked sandbox (network, host end, sandbox end,
//! broadcast), leased across processes with a lock file per slot.
//!
//! Invariants: a slot is used by at most one live sandbox on this host — its lease is an
//! exclusive `flock` on `<run_dir>/slot-<index>.lock`, which the kernel releases when the
//! holder dies, so a crashed helper frees its slot; whoever takes a slot next first removes
//! whatever the previous holder left (see [`crate::host`]); slots are taken lowest first, so a
//! crash's leftovers are found again by the next start.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use warden_types::egress::Cidr;

/// The prefix of every host-side interface, nft chain suffix and lock of Warden's sandboxes.
pub const IF_PREFIX: &str = "wdsb";

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("address pool {pool} must be an IPv4 range from /8 to /30")]
    BadPool { pool: Cidr },
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
    #[error("address pool {pool} is exhausted: {slots} networked sandboxes are running")]
    Exhausted { pool: Cidr, slots: u32 },
}

/// An IPv4 range cut into /30 slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    cidr: Cidr,
}

/// One sandbox's share of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Slot {
    pub index: u32,
    /// The host end of the veth pair: the sandbox's gateway and DNS server.
    pub host: Ipv4Addr,
    /// The sandbox end.
    pub sandbox: Ipv4Addr,
}

impl Slot {
    /// The host-side interface, e.g. `wdsb7` (at most 15 bytes for up to 10^11 slots).
    pub fn if_name(&self) -> String {
        format!("{IF_PREFIX}{}", self.index)
    }

    /// The /30 both ends live in.
    pub fn network(&self) -> Cidr {
        let base = u32::from(self.host) - 1;
        Cidr::new(IpAddr::V4(Ipv4Addr::from(base)), 30).expect("aligned /30")
    }
}

impl Pool {
    pub fn new(cidr: Cidr) -> Result<Pool, PoolError> {
        if !cidr.is_ipv4() || !(8..=30).contains(&cidr.prefix()) {
            return Err(PoolError::BadPool { pool: cidr });
        }
        Ok(Pool { cidr })
    }

    pub fn cidr(&self) -> Cidr {
        self.cidr
    }

    pub fn slots(&self) -> u32 {
        1u32 << (30 - self.cidr.prefix())
    }

    /// The `index`-th slot; `None` past the pool's end.
    pub fn slot(&self, index: u32) -> Option<Slot> {
        if index >= self.slots() {
            return None;
        }
        let v4 = |n: u128| match self.cidr.nth(n) {
            Some(IpAddr::V4(a)) => a,
            _ => unreachable!("an IPv4 pool within its size"),
        };
        let base = index as u128 * 4;
        Some(Slot {
            index,
            host: v4(base + 1),
            sandbox: v4(base + 2),
        })
    }

    /// Leases the lowest free slot, creating `run_dir` (mode 0700) if needed.
    pub fn lease(&self, run_dir: &Path) -> Result<Lease, PoolError> {
        ensure_private_dir(run_dir)?;
        for index in 0..self.slots() {
            let path = lock_path(run_dir, index);
            let file = open_lock(&path)?;
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                let slot = self.slot(index).expect("index below slots()");
                return Ok(Lease { slot, _file: file });
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(PoolError::Lock { path, source: err });
            }
        }
        Err(PoolError::Exhausted {
            pool: self.cidr,
            slots: self.slots(),
        })
    }

    /// Whether slot `index` is leased by a live process right now (a probe: takes and drops
    /// the lock).
    pub fn is_leased(run_dir: &Path, index: u32) -> bool {
        let Ok(file) = File::open(lock_path(run_dir, index)) else {
            return false;
        };
        // SAFETY: flock on a descriptor we own; closing it drops the probe's lock.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
    }
}

fn lock_path(run_dir: &Path, index: u32) -> PathBuf {
    run_dir.join(format!("slot-{index}.lock"))
}

fn open_lock(path: &Path) -> Result<File, PoolError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| PoolError::Lock {
            path: path.into(),
            source,
        })
}

fn ensure_private_dir(dir: &Path) -> Result<(), PoolError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| PoolError::RunDir {
            path: dir.into(),
            source,
        })
}

/// A leased slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Lease {
    pub slot: Slot,
    _file: File,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(s: &str) -> Pool {
        Pool::new(s.parse().unwrap()).unwrap()
    }

    #[test]
    fn slots_are_aligned_quarters() {
        let p = pool("10.213.0.0/16");
        assert_eq!(p.slots(), 16384);
        let s = p.slot(7).unwrap();
        assert_eq!(
            (s.host.to_string(), s.sandbox.to_string()),
            ("10.213.0.29".into(), "10.213.0.30".into())
        );
        assert_eq!(s.network().to_string(), "10.213.0.28/30");
        assert_eq!(s.if_name(), "wdsb7");
        assert!(p.slot(16384).is_none());
        assert_eq!(p.slot(16383).unwrap().sandbox.to_string(), "10.213.255.254");
        assert!(Pool::new("10.0.0.0/31".parse().unwrap()).is_err());
        assert!(Pool::new("fd00::/64".parse().unwrap()).is_err());
    }

    #[test]
    fn leases_are_exclusive_lowest_first_and_freed_on_drop() {
        // A fresh folder: a leftover of an earlier run (same pid) would hold stale slots.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pool");
        let p = pool("10.213.0.0/29");
        let a = p.lease(&dir).unwrap();
        let b = p.lease(&dir).unwrap();
        assert_eq!((a.slot.index, b.slot.index), (0, 1));
        assert!(Pool::is_leased(&dir, 0));
        assert!(matches!(p.lease(&dir), Err(PoolError::Exhausted { .. })));
        drop(a);
        assert!(!Pool::is_leased(&dir, 0));
        assert_eq!(p.lease(&dir).unwrap().slot.index, 0);
        drop(b);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
