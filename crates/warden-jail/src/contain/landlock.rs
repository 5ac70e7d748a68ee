//! Landlock: the program may write, create, remove or truncate only under the workspace, /tmp,
//! /dev/shm and the writable devices (checked-in data with a reason per entry:
//! `data/landlock.toml`, see [`crate::tables`]), bind no TCP port, make no TCP connection unless its
//! sandbox is networked (then its firewall decides where), and neither signal nor reach
//! abstract unix sockets outside its sandbox.
//!
//! Reading and executing are left to the mount namespace (the sandbox sees only the read-only
//! allow-listed root): handling them in Landlock would make every open walk the rule set — about
//! 2 ms on a Python start-up, measured — without hiding anything the namespace doesn't.
//!
//! Which parts are enforced: a profile states what it requires
//! ([`warden_types::landlock::LandlockRequirement`]); the backend's check compares it with the
//! kernel's ABI ([`LandlockKernel`], asked once per process) and refuses the profile, with the
//! reason, when a required part is missing; otherwise the plan carries the ABI to enforce —
//! every part Warden uses up to the kernel's ABI — and [`restrict`] applies exactly that.
//!
//! Invariant: fail closed. `restrict` asks the kernel for every part of the plan's ABI as a
//! hard requirement: a part the kernel does not enforce fails the step (and the run), never
//! runs weaker; a ruleset not fully enforced is an error too.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use std::sync::OnceLock;
use warden_types::landlock::LandlockPart;

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("landlock ruleset at ABI {abi}: {source}")]
    Ruleset {
        abi: u32,
        source: landlock::RulesetError,
    },
    #[error("landlock is not enforced by this kernel (the plan asks for ABI {abi})")]
    NotEnforced { abi: u32 },
    #[error("landlock is only partly enforced by this kernel (the plan asks for ABI {abi})")]
    PartiallyEnforced { abi: u32 },
}

/// Restricts the calling thread (and what it starts) to what the program may change: every
/// part Warden uses up to Landlock ABI `abi`, each a hard requirement.
pub fn restrict(
    abi: u32,
    networked: bool,
    writable: &[&str],
    devices: &[&str],
) -> Result<(), LandlockError> {
    let err = |source| LandlockError::Ruleset { abi, source };
    if abi == 0 {
        return Err(LandlockError::NotEnforced { abi });
    }
    let version = ABI::from(abi as i32);
    let write = AccessFs::from_write(version);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(write)
        .map_err(err)?;
    if abi >= LandlockPart::Tcp.abi() {
        // Handled and not granted means denied: a networked sandbox keeps TCP bind denied and
        // gets connect back.
        let net = if networked {
            AccessNet::BindTcp.into()
        } else {
            AccessNet::from_all(version)
        };
        ruleset = ruleset.handle_access(net).map_err(err)?;
    }
    if abi >= LandlockPart::Scope.abi() {
        ruleset = ruleset.scope(Scope::from_all(version)).map_err(err)?;
    }
    let status = ruleset
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(writable, write))
        .map_err(err)?
        .add_rules(path_beneath_rules(devices, write))
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        RulesetStatus::PartiallyEnforced => Err(LandlockError::PartiallyEnforced { abi }),
        RulesetStatus::NotEnforced => Err(LandlockError::NotEnforced { abi }),
    }
}

/// The kernel's Landlock, as the backend's check sees it: OS calls behind a trait, so that
/// the refusals of an older kernel are tested here ([`FakeKernel`]).
pub trait LandlockKernel: Send + Sync + std::fmt::Debug {
    /// The kernel's Landlock ABI version (0: none).
    fn abi(&self) -> u32;
}

/// The running kernel, asked once per process.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealKernel;

impl LandlockKernel for RealKernel {
    fn abi(&self) -> u32 {
        static ABI: OnceLock<u32> = OnceLock::new();
        *ABI.get_or_init(|| u32::try_from(kernel_abi()).unwrap_or(0))
    }
}

/// A kernel of a given ABI, for tests.
#[derive(Debug, Clone, Copy)]
pub struct FakeKernel(pub u32);

impl LandlockKernel for FakeKernel {
    fn abi(&self) -> u32 {
        self.0
    }
}

/// The Landlock ABI version of the running kernel (0 when unsupported), for `warden doctor`.
pub fn kernel_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and size 0, this only queries the ABI version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    v.max(0)
}

#[cfg(test)]
#[path = "../../../../tests/support/prerequisite.rs"]
mod prerequisite;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contain::landlock::prerequisite;

    /// Runs `restrict` on a thread of its own (Landlock restricts the calling thread only,
    /// and the thread ends with the test).
    fn restrict_on_a_thread(abi: u32) -> Result<(), String> {
        std::thread::spawn(move || {
            crate::contain::caps::no_new_privs().map_err(|e| e.to_string())?;
            restrict(abi, false, &["/tmp"], &["/dev/null"]).map_err(|e| e.to_string())
        })
        .join()
        .expect("the thread ran")
    }

    #[test]
    fn the_kernels_own_abi_is_fully_enforced() {
        let abi = RealKernel.abi();
        if abi == 0 {
            prerequisite::skip("this kernel has no Landlock (Warden's sandboxes need it)");
            return;
        }
        restrict_on_a_thread(abi.min(LandlockPart::NEWEST_ABI)).unwrap();
    }

    #[test]
    fn a_part_the_kernel_lacks_fails_the_step_instead_of_running_weaker() {
        // An ABI above the kernel's asks for access rights it does not know (ABI 6: scoping;
        // 9: unix socket resolution): with the hard requirement, an error, never a ruleset
        // with the part left out.
        let kernel = RealKernel.abi();
        let above = match kernel {
            0..=5 => 6,
            6..=8 => 9,
            _ => {
                prerequisite::skip(&format!(
                    "no Landlock ABI above this kernel's {kernel} is known to this test"
                ));
                return;
            }
        };
        let e = restrict_on_a_thread(above).unwrap_err();
        assert!(e.contains(&format!("ABI {above}")), "{e}");
        assert_eq!(
            restrict_on_a_thread(0).unwrap_err(),
            "landlock is not enforced by this kernel (the plan asks for ABI 0)"
        );
    }
}
