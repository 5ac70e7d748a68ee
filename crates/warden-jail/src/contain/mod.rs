//! The containment of one sandbox, as a flat, ordered list of named steps run by the sandbox's
//! init process (pid 1 of its pid namespace) before it starts the program (nsjail's
//! `contain.cc` is the model).
//!
//! Invariants: the order is fixed and visible in `BEFORE_PLAN` and `STEPS`; each step does one
//! thing; a failing
//! step ends the sandbox before the program runs, and its name goes into the error; everything
//! the program inherits (uid, rlimits, no capabilities, no_new_privs, landlock, seccomp) is
//! applied to init itself first, so init is no more privileged than the program it reaps.

pub mod caps;
pub mod landlock;
pub mod rlimits;

use crate::mounts::{self, RealMountSys};
use crate::plan::{JailPlan, NetAttachment};
use crate::seccomp::Filters;
use crate::sys;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

/// Where the new root is assembled, inside the sandbox's own mount namespace (a tmpfs is
/// mounted over it there; the host's /tmp is untouched).
pub const STAGING: &str = "/tmp";

/// What the steps work with.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub plan: &'a JailPlan,
    /// A networked sandbox's link, as its helper attached it (see [`NetAttachment`]).
    pub network: Option<&'a NetAttachment>,
    pub filters: Option<&'a Filters>,
    /// Socket on which the workspace tmpfs is handed to the supervisor, and the sandbox's
    /// network namespace to init.
    pub workspace_socket: OwnedFd,
    /// Read end of the supervisor's "go" pipe: one byte once init is in its cgroup with the
    /// limits written; end of file if the supervisor died or refused.
    pub go: OwnedFd,
}

pub type Step = fn(&mut Ctx<'_>) -> Result<(), String>;

/// A step that needs no plan.
pub type EarlyStep = fn() -> Result<(), String>;

/// The steps init runs while it waits for its plan (the caller is still building it then, so
/// they add nothing to a start). Init holds every capability of its new user namespace (its
/// ids are not mapped yet), which is all these need.
pub const BEFORE_PLAN: &[(&str, EarlyStep)] = &[
    ("close inherited descriptors on exec", cloexec_inherited),
    ("reset signal dispositions", reset_signal_dispositions),
    ("make mounts private", make_mounts_private),
    ("empty the capability bounding set", empty_bounding_set),
];

/// The containment steps, in order. Before the first, init has received its plan, which the
/// supervisor sends once the ids are mapped; it writes the cgroup's limits and moves init into
/// it meanwhile, and the last step waits for that.
pub const STEPS: &[(&str, Step)] = &[
    ("switch user", switch_user),
    ("build root", build_root),
    ("hand over workspace", hand_over_workspace),
    ("pivot root", pivot_root),
    ("make root read-only", make_root_read_only),
    ("set hostname", set_hostname),
    ("enter network namespace", enter_network_namespace),
    ("configure network", configure_network),
    ("enter cgroup namespace", enter_cgroup_namespace),
    ("apply rlimits", apply_rlimits),
    ("drop capabilities", drop_capabilities),
    ("set no_new_privs", set_no_new_privs),
    ("make init undumpable", make_undumpable),
    ("apply landlock", apply_landlock),
    ("apply seccomp", apply_seccomp),
    ("wait until in the cgroup", wait_for_cgroup),
];

fn os(e: std::io::Error) -> String {
    e.to_string()
}

fn wait_for_cgroup(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let mut byte = [0u8; 1];
    match sys::read(ctx_fd(&ctx.go), &mut byte) {
        Ok(1) => Ok(()),
        Ok(_) => Err("the supervisor did not confirm the cgroup".into()),
        Err(e) => Err(os(e)),
    }
}

fn ctx_fd(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// Descriptors init inherited without close-on-exec (from whoever started `warden`) must not
/// reach the program: it gets exactly its streams, which its child moves into place with dup2
/// (a fresh descriptor, open across the exec).
fn cloexec_inherited() -> Result<(), String> {
    sys::cloexec_from(3).map_err(os)
}

/// An exec keeps ignored signals ignored, and Rust's runtime ignores SIGPIPE in every warden
/// process: without this the program would start with SIGPIPE ignored (`yes | head -1` would
/// complain of a broken pipe), and with whatever else the caller ignored. Init's dispositions
/// are the program's (its child is a clone of it); init sets none of its own until the program
/// runs.
fn reset_signal_dispositions() -> Result<(), String> {
    sys::default_signal_dispositions().map_err(os)
}

fn make_mounts_private() -> Result<(), String> {
    sys::mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .map_err(os)
}

fn build_root(ctx: &mut Ctx<'_>) -> Result<(), String> {
    mounts::build_root(&mut RealMountSys, Path::new(STAGING), ctx.plan, ctx.network)
        .map_err(|e| e.to_string())
}

fn hand_over_workspace(ctx: &mut Ctx<'_>) -> Result<(), String> {
    // The supervisor reads artifacts through this descriptor after the sandbox is gone; the
    // tmpfs lives as long as the descriptor does, and never appears in the host's mounts.
    let scratch = mounts::scratch_dir(Path::new(STAGING));
    let dir = std::fs::File::open(&scratch).map_err(os)?;
    let fd: OwnedFd = dir.into();
    sys::send_fd(ctx_fd(&ctx.workspace_socket), ctx_fd(&fd)).map_err(os)?;
    // A gated run: a writable copy of the root's code folder, through which the supervisor
    // writes the code after the root is read-only (see `crate::gate`).
    if ctx.plan.gated {
        let code_dir = ctx.plan.code_path.parent().unwrap_or(Path::new("/"));
        let code_dir = mounts::under(&mounts::root_dir(Path::new(STAGING)), code_dir);
        let clone = sys::open_tree_clone(&code_dir).map_err(os)?;
        sys::send_fd(ctx_fd(&ctx.workspace_socket), ctx_fd(&clone)).map_err(os)?;
    }
    Ok(())
}

fn pivot_root(_: &mut Ctx<'_>) -> Result<(), String> {
    sys::chdir(&mounts::root_dir(Path::new(STAGING))).map_err(os)?;
    sys::pivot_root_here().map_err(os)?;
    // One lazy unmount drops the host's tree, the staging tmpfs and the workspace's own mount
    // point; the workspace lives on through its binds and the supervisor's descriptor.
    sys::umount_detach(Path::new(".")).map_err(os)?;
    sys::chdir(Path::new("/")).map_err(os)
}

fn make_root_read_only(_: &mut Ctx<'_>) -> Result<(), String> {
    sys::mount_setattr(
        Path::new("/"),
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        false,
    )
    .map_err(os)
}

fn set_hostname(ctx: &mut Ctx<'_>) -> Result<(), String> {
    sys::sethostname(&ctx.plan.hostname).map_err(os)
}

/// The supervisor made the sandbox's network namespace beside init (see `crate::netns`: its
/// loopback is up, and it is owned by init's user namespace) and sends it once init has its
/// root; init enters it here, while it still holds its capabilities, and the program, its
/// child, starts in it. No namespace, no program: end of file fails the step.
fn enter_network_namespace(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let netns = sys::recv_fd(ctx_fd(&ctx.workspace_socket))
        .map_err(os)?
        .ok_or("the supervisor sent no network namespace")?;
    sys::setns(ctx_fd(&netns), libc::CLONE_NEWNET).map_err(os)
}

/// A networked sandbox: address its end of the link the host moved in, default route via the
/// host end. Offline sandboxes have no such interface and skip this.
fn configure_network(ctx: &mut Ctx<'_>) -> Result<(), String> {
    match ctx.network {
        Some(attached) => warden_net::inside::configure(&attached.interface).map_err(os),
        None => Ok(()),
    }
}

fn enter_cgroup_namespace(_: &mut Ctx<'_>) -> Result<(), String> {
    // After the supervisor attached us: the sandbox sees its own cgroup as the root.
    // SAFETY: unshare with a flag has no memory effects.
    if unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } != 0 {
        return Err(os(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Becomes the sandbox user first: files the setup creates must be owned by an id mapped in
/// the namespace (the helper's host root is not), and the capabilities held in the new user
/// namespace survive the switch because the namespace has no uid 0 to switch away from.
fn switch_user(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let ids = ctx.plan.ids;
    // SAFETY: setgroups with an empty list, setresgid/setresuid with integers.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(format!("setgroups: {}", std::io::Error::last_os_error()));
        }
        let g = ids.inside_gid;
        if libc::setresgid(g, g, g) != 0 {
            return Err(format!("setresgid: {}", std::io::Error::last_os_error()));
        }
        let u = ids.inside_uid;
        if libc::setresuid(u, u, u) != 0 {
            return Err(format!("setresuid: {}", std::io::Error::last_os_error()));
        }
        // A change of credentials clears the parent-death signal: arm it again, or the
        // sandbox would outlive a killed supervisor. (A supervisor that died in between is
        // noticed at the last step: its "go" pipe reads end of file.)
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(format!("prctl: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn apply_rlimits(ctx: &mut Ctx<'_>) -> Result<(), String> {
    rlimits::apply(ctx.plan.limits.max_file_size_bytes).map_err(os)
}

/// What an exec could ever grant: nothing (one `prctl` per capability, so done while the
/// caller still builds the plan; the capabilities init holds are dropped by the step "drop
/// capabilities").
fn empty_bounding_set() -> Result<(), String> {
    caps::empty_bounding_set().map_err(os)
}

fn drop_capabilities(_: &mut Ctx<'_>) -> Result<(), String> {
    caps::drop_all().map_err(os)
}

fn set_no_new_privs(_: &mut Ctx<'_>) -> Result<(), String> {
    caps::no_new_privs().map_err(os)
}

fn make_undumpable(_: &mut Ctx<'_>) -> Result<(), String> {
    caps::not_dumpable().map_err(os)
}

fn apply_landlock(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let Some(abi) = ctx.plan.landlock else {
        return Ok(());
    };
    landlock::restrict(
        abi,
        ctx.plan.network.is_some(),
        crate::tables::LANDLOCK_WRITABLE,
        crate::tables::LANDLOCK_DEVICES,
    )
    .map_err(|e| e.to_string())
}

fn apply_seccomp(ctx: &mut Ctx<'_>) -> Result<(), String> {
    match ctx.filters {
        Some(filters) => crate::seccomp::install(filters).map_err(|e| e.to_string()),
        None => Ok(()),
    }
}
