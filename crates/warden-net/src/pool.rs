//! The address pool: one /30 per networked sandbox (network, host end, sandbox end,
//! broadcast) and, at the same index, one /126 of an IPv6 unique-local range (host end
//! `::1`, sandbox end `::2` of the /126), leased across processes with a lock file per slot.
//!
//! Invariants: a slot is used by at most one live sandbox on this host — its lease is an
//! exclusive `flock` on `<run_dir>/slot-<index>.lock` ([`crate::lease`]), which the kernel
//! releases when the holder dies, so a crashed helper frees its slot; whoever takes a slot next first removes
//! whatever the previous holder left (see [`crate::host`]); slots are taken lowest first, so a
//! crash's leftovers are found again by the next start.

use crate::lease::{LeaseError, LockLeases};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use warden_types::egress::Cidr;

/// The prefix of every host-side interface, nft chain suffix and lock of Warden's sandboxes.
pub const IF_PREFIX: &str = "wdsb";
/// The default IPv4 pool: a /30 for each of 16 384 sandboxes, in a private range few hosts
/// route to.
pub const DEFAULT_POOL: &str = "10.213.0.0/16";
/// The default IPv6 pool: a unique-local /64 (`fd57:6172:6465:6e::/64`, "Warden" in hex),
/// blocked as ULA for every sandbox like the rest of fc00::/7.
pub const DEFAULT_POOL6: &str = "fd57:6172:6465:6e::/64";
/// The prefix of one slot's IPv6 link.
pub const SLOT_PREFIX6: u8 = 126;

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("address pool {pool} must be an IPv4 range from /8 to /30")]
    BadPool { pool: Cidr },
    #[error(
        "IPv6 address pool {pool6} must be an IPv6 range of at least as many /126 slots as the IPv4 pool {pool} has /30s"
    )]
    BadPool6 { pool: Cidr, pool6: Cidr },
    #[error(transparent)]
    Lease(LeaseError),
    #[error("address pool {pool} is exhausted: {slots} networked sandboxes are running")]
    Exhausted { pool: Cidr, slots: u32 },
}

/// An IPv4 range cut into /30 slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    cidr: Cidr,
    cidr6: Cidr,
}

/// One sandbox's share of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Slot {
    pub index: u32,
    /// The host end of the veth pair: the sandbox's gateway and DNS server.
    pub host: Ipv4Addr,
    /// The sandbox end.
    pub sandbox: Ipv4Addr,
    /// The host end of the IPv6 link (the sandbox's IPv6 gateway).
    pub host6: Ipv6Addr,
    /// The sandbox's IPv6 address.
    pub sandbox6: Ipv6Addr,
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

    /// The /126 both IPv6 ends live in.
    pub fn network6(&self) -> Cidr {
        let base = u128::from(self.host6) - 1;
        Cidr::new(IpAddr::V6(Ipv6Addr::from(base)), SLOT_PREFIX6).expect("aligned /126")
    }

    /// The MAC address of both ends of the link (`02:` locally administered, then the
    /// slot's index): both ends have ARP and neighbour discovery off and send every frame to
    /// this address, so neither needs an answer from the other.
    pub fn mac(&self) -> String {
        let i = self.index.to_be_bytes();
        format!("02:77:{:02x}:{:02x}:{:02x}:{:02x}", i[0], i[1], i[2], i[3])
    }
}

impl Pool {
    /// An IPv4 pool with the default IPv6 pool.
    pub fn new(cidr: Cidr) -> Result<Pool, PoolError> {
        Pool::dual(cidr, DEFAULT_POOL6.parse().expect("a valid CIDR"))
    }

    /// An IPv4 pool and the IPv6 pool whose /126s go with its /30s, index for index.
    pub fn dual(cidr: Cidr, cidr6: Cidr) -> Result<Pool, PoolError> {
        if !cidr.is_ipv4() || !(8..=30).contains(&cidr.prefix()) {
            return Err(PoolError::BadPool { pool: cidr });
        }
        if cidr6.is_ipv4()
            || cidr6.prefix() > SLOT_PREFIX6
            || SLOT_PREFIX6 - cidr6.prefix() < 30 - cidr.prefix()
        {
            return Err(PoolError::BadPool6 {
                pool: cidr,
                pool6: cidr6,
            });
        }
        Ok(Pool { cidr, cidr6 })
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
        let v6 = |n: u128| match self.cidr6.nth(n) {
            Some(IpAddr::V6(a)) => a,
            _ => unreachable!("an IPv6 pool at least as large as the IPv4 pool"),
        };
        let base = index as u128 * 4;
        Some(Slot {
            index,
            host: v4(base + 1),
            sandbox: v4(base + 2),
            host6: v6(base + 1),
            sandbox6: v6(base + 2),
        })
    }

    /// Leases the lowest free slot, creating `run_dir` (mode 0700) if needed. Whatever a
    /// crashed holder left is the next taker's to remove ([`crate::host`]).
    pub fn lease(&self, run_dir: &Path) -> Result<Lease, PoolError> {
        match leases(run_dir, self.slots()).lease(0, |_, _| true) {
            Ok(lease) => Ok(Lease {
                slot: self.slot(lease.index()).expect("index below slots()"),
                _lease: lease,
            }),
            Err(LeaseError::Exhausted { .. }) => Err(PoolError::Exhausted {
                pool: self.cidr,
                slots: self.slots(),
            }),
            Err(e) => Err(PoolError::Lease(e)),
        }
    }

    /// Whether slot `index` is leased by a live process right now (a probe: takes and drops
    /// the lock).
    pub fn is_leased(run_dir: &Path, index: u32) -> bool {
        leases(run_dir, index.saturating_add(1)).is_leased(index)
    }
}

/// The slots' lock files: `<run_dir>/slot-<index>.lock`.
fn leases(run_dir: &Path, slots: u32) -> LockLeases {
    LockLeases::new(run_dir, "slot", 0, slots)
}

/// A leased slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Lease {
    pub slot: Slot,
    _lease: crate::lease::Lease,
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
        assert_eq!(
            (s.host6.to_string(), s.sandbox6.to_string()),
            (
                "fd57:6172:6465:6e::1d".into(),
                "fd57:6172:6465:6e::1e".into()
            )
        );
        assert_eq!(s.network6().to_string(), "fd57:6172:6465:6e::1c/126");
        assert_eq!(s.mac(), "02:77:00:00:00:07");
        let last = p.slot(16383).unwrap();
        assert_eq!(last.sandbox6.to_string(), "fd57:6172:6465:6e::fffe");
        // The IPv6 pool must hold a /126 for every /30.
        let v4: Cidr = "10.213.0.0/16".parse().unwrap();
        assert!(Pool::dual(v4, "fd00::/113".parse().unwrap()).is_err());
        assert!(Pool::dual(v4, "fd00::/112".parse().unwrap()).is_ok());
        assert!(Pool::dual(v4, "10.0.0.0/8".parse().unwrap()).is_err());
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
        let again = crate::lease::tests::eventually(0, |l: &Lease| l.slot.index, || p.lease(&dir));
        drop((again, b));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
