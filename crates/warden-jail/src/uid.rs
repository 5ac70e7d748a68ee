//! The host uid of a helper's sandbox ([`warden_net::uids`]): leased by the helper itself for
//! a one-shot run, or inherited from the sandbox with a lifetime that holds it; the
//! supervisor creates the sandbox's user namespace with that uid as its owner
//! ([`crate::supervisor::start`]).
//!
//! Invariants: the helper holds the lease from before the sandbox's namespaces exist until its
//! processes are gone; it releases a lease of its own cleanly only after the teardown, and
//! any other end (a crash, an error) leaves the record for the next taker to check; a helper
//! whose guess (an exec'd helper's environment, which its caller set from the plan; a forked
//! helper's default range) differs from its plan starts over with the plan's; without root there is nothing to lease (the caller's own ids are mapped).

use crate::plan::HostIds;
use crate::supervisor::{JailError, Started};
use std::os::fd::{FromRawFd, OwnedFd};
use warden_net::uids::{ProcScan, UidLease, UidRange};

/// The environment variable that tells an exec'd helper which host ids its plan will name
/// (JSON of a [`HostIds`]), so it can create the sandbox before the plan arrives.
pub const HOST_IDS_ENV: &str = "WARDEN_JAIL_HOST_IDS";

/// The descriptor at which an exec'd helper inherits its sandbox's uid lease
/// ([`HostIds::Held`]).
pub const INHERITED_LEASE_FD: i32 = 4;

/// The uid a helper's sandbox runs as, with its lease.
#[derive(Debug)]
pub(crate) struct HelperUid {
    host: HostIds,
    lease: UidLease,
}

impl HelperUid {
    /// What an exec'd helper's plan will name: its environment says (the caller set it from
    /// the plan); `None` when not root.
    pub(crate) fn expected_by_env() -> Option<HostIds> {
        Self::root().then(|| {
            std::env::var(HOST_IDS_ENV)
                .ok()
                .and_then(|v| serde_json::from_str(&v).ok())
                .unwrap_or(HostIds::Lease(UidRange::default()))
        })
    }

    /// What a helper forked before its caller read the settings guesses: a one-shot in the
    /// default range (its environment is its caller's, never about this run); `None` when
    /// not root.
    pub(crate) fn expected_by_default() -> Option<HostIds> {
        Self::root().then(|| HostIds::Lease(UidRange::default()))
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// Takes `host`'s uid: a new lease from the range, or the inherited one.
    pub(crate) fn take(host: HostIds) -> Result<HelperUid, JailError> {
        let lease = match host {
            HostIds::Lease(range) => range
                .lease(std::path::Path::new(warden_net::uids::RUN_DIR), &ProcScan)
                .map_err(|e| JailError::Refused(format!("no host uid for the sandbox: {e}")))?,
            HostIds::Held { uid } => {
                let fd = INHERITED_LEASE_FD;
                // SAFETY: fcntl on a descriptor number only queries it.
                if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
                    return Err(JailError::Refused(format!(
                        "the lease of host uid {uid} was not inherited at descriptor {fd}"
                    )));
                }
                crate::sys::set_cloexec(fd);
                // SAFETY: the caller passed its lease at this number for this process to own.
                UidLease::inherited(uid, unsafe { OwnedFd::from_raw_fd(fd) })
            }
        };
        Ok(HelperUid { host, lease })
    }

    pub(crate) fn uid(&self) -> u32 {
        self.lease.uid()
    }

    /// The sandbox's processes are gone: a lease of this helper's own ends with nothing to
    /// recover; an inherited one stays the sandbox's (this copy just closes).
    pub(crate) fn release(self) {
        match self.host {
            HostIds::Lease(_) => self.lease.release(),
            HostIds::Held { .. } => drop(self.lease),
        }
    }
}

/// A started sandbox with its host uid (`None` without root); dropping it kills the sandbox
/// first, then drops the lease (fields drop in order).
pub(crate) struct Owned {
    pub started: Started,
    pub uid: Option<HelperUid>,
}

/// Takes the uid for `host` and starts a sandbox owned by it.
pub(crate) fn start(host: Option<HostIds>) -> Result<Owned, JailError> {
    let uid = host.map(HelperUid::take).transpose()?;
    let started = crate::supervisor::start(uid.as_ref().map(HelperUid::uid))?;
    Ok(Owned { started, uid })
}

/// `started` (from an `expected_by_*` guess) as the plan asks: kept when the plan
/// names the same host ids, else dropped and started again with the plan's.
pub(crate) fn for_plan(
    started: Result<Owned, JailError>,
    plan_host: HostIds,
) -> Result<Owned, JailError> {
    match started {
        Ok(owned) if owned.uid.as_ref().is_none_or(|u| u.host == plan_host) => Ok(owned),
        Ok(Owned { started, uid }) => {
            // Init is killed and reaped here: nothing of the sandbox is left.
            drop(started);
            if let Some(uid) = uid {
                uid.release();
            }
            start(Some(plan_host))
        }
        Err(e) => Err(e),
    }
}

/// The environment value for an exec'd helper whose plan names `host`.
pub(crate) fn env_value(host: &HostIds) -> String {
    serde_json::to_string(host).expect("plain data")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_value_reads_back() {
        for host in [
            HostIds::Lease(UidRange { base: 10, count: 2 }),
            HostIds::Held { uid: 1_900_000_007 },
        ] {
            assert_eq!(
                serde_json::from_str::<HostIds>(&env_value(&host)).unwrap(),
                host
            );
        }
    }
}
