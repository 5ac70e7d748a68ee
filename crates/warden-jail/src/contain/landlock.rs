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
//! Invariant: a ruleset the kernel does not enforce at all refuses the run (fail closed);
//! partial enforcement on an older kernel is accepted and reported by `warden doctor`.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

const ABI_WANTED: ABI = ABI::V6;

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("landlock is not enforced by this kernel")]
    NotEnforced,
}

pub fn restrict(networked: bool, writable: &[&str], devices: &[&str]) -> Result<(), LandlockError> {
    let write = AccessFs::from_write(ABI_WANTED);
    // Handled and not granted means denied: a networked sandbox keeps TCP bind denied and
    // gets connect back.
    let net = if networked {
        AccessNet::BindTcp.into()
    } else {
        AccessNet::from_all(ABI_WANTED)
    };
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write)?
        .handle_access(net)?
        .scope(Scope::from_all(ABI_WANTED))?
        .create()?
        .add_rules(path_beneath_rules(writable, write))?
        .add_rules(path_beneath_rules(devices, write))?
        .restrict_self()?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(LandlockError::NotEnforced);
    }
    Ok(())
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
