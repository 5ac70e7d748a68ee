//! Warden's native isolation backend, the embedded default: a program runs in fresh user, pid,
//! mount, network, ipc, uts and cgroup namespaces, on a read-only root built from an allow-list
//! of host paths, with a size-capped tmpfs workspace, cgroup limits, rlimits, no capabilities,
//! no_new_privs, Landlock and a seccomp allow-list.
//!
//! The path of one run: the engine's [`JailBackend`] builds a [`JailPlan`] and starts the
//! helper (this binary in helper mode, single-threaded: forked by the daemon's fork server,
//! `launcher.rs`, or exec'd) with the plan on stdin;
//! [`helper::main`] runs [`supervisor::run`], which clones the sandbox's init (`init.rs`); init runs the
//! containment [`contain::STEPS`] in order and starts the program; the supervisor relays its
//! output as [`protocol`] frames and ends with the result.

pub mod artifacts;
pub mod backend;
pub mod cgroup;
mod client;
pub mod contain;
pub mod context;
pub use warden_net::disk;
mod fork_server;
pub mod gate;
pub mod held;
pub mod helper;
mod init;
pub mod launcher;
pub mod layout;
mod link;
pub mod mounts;
mod netns;
pub mod plan;
pub mod pooled;
pub mod prestart;
pub mod probe;
pub mod protocol;
pub mod sandbox;
pub mod seccomp;
pub mod session;
pub mod settings;
pub mod supervisor;
mod sys;
pub mod tables;
pub mod uid;
pub mod workspace;

pub use backend::JailBackend;
pub use plan::{IdMap, JailPlan, MountOp, PlanError, PlanInput};
pub use prestart::Prestarted;
pub use sandbox::JailSandbox;
pub use settings::{HelperStart, JailSettings, NetSettings};

/// Monotonic clock in milliseconds, comparable across processes: for `WARDEN_TRACE_TIMING`.
pub fn monotonic_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6
}
