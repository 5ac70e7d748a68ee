//! What this host supports, for `warden doctor`: namespaces, cgroup controllers, seccomp,
//! Landlock. Each probe is cheap and has no lasting effect.

use crate::cgroup::Hierarchy;
use crate::sys;

/// One capability of the host and whether it works.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Probe {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Tries to create every namespace the jail uses, in a child that exits at once.
fn namespaces() -> Probe {
    // SAFETY: `warden doctor` is single-threaded here; the child only calls _exit.
    let pid = match unsafe {
        sys::clone_into_namespaces(
            sys::SANDBOX_NAMESPACES | libc::CLONE_NEWNET | libc::CLONE_NEWCGROUP,
        )
    } {
        Ok(0) => {
            // SAFETY: _exit in the child.
            unsafe { libc::_exit(0) }
        }
        Ok(pid) => pid,
        Err(e) => {
            return Probe {
                name: "namespaces",
                ok: false,
                detail: format!("user+pid+mount+net+ipc+uts+cgroup: {e}"),
            };
        }
    };
    let status = sys::waitpid(pid).unwrap_or(-1);
    Probe {
        name: "namespaces",
        ok: status == 0,
        detail: "user, pid, mount, net, ipc, uts, cgroup".into(),
    }
}

fn seccomp() -> Probe {
    // SAFETY: prctl query with no memory effects.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    let filters = crate::seccomp::filters();
    let (allowed, denied) = crate::seccomp::summary().unwrap_or_default();
    Probe {
        name: "seccomp",
        ok: mode >= 0,
        detail: format!(
            "filter mode available; {} syscalls allowed, {} denied with EPERM, the rest ENOSYS ({} BPF instructions)",
            allowed.len(),
            denied.len(),
            filters.instructions()
        ),
    }
}

fn landlock() -> Probe {
    let abi = crate::contain::landlock::kernel_abi();
    Probe {
        name: "landlock",
        ok: abi >= 1,
        detail: if abi >= 1 {
            format!("ABI {abi}")
        } else {
            "not supported by this kernel".into()
        },
    }
}

fn cgroups() -> Vec<Probe> {
    match Hierarchy::detect() {
        Ok(h) => {
            let have = h.controllers();
            let parents_writable = h.parents().iter().all(|p| {
                let probe_dir = p.parent().unwrap_or(p);
                let c = sys::cstring(probe_dir).ok();
                // SAFETY: `c` is a valid C string when present.
                c.is_some_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
            });
            ["memory", "pids", "cpu"]
                .into_iter()
                .map(|name| Probe {
                    name: match name {
                        "memory" => "cgroup memory",
                        "pids" => "cgroup pids",
                        _ => "cgroup cpu",
                    },
                    ok: have.contains(&name) && parents_writable,
                    detail: if !have.contains(&name) {
                        format!("controller missing ({})", h.describe())
                    } else if !parents_writable {
                        format!("not writable by this user ({})", h.describe())
                    } else {
                        h.describe()
                    },
                })
                .collect()
        }
        Err(e) => vec![Probe {
            name: "cgroups",
            ok: false,
            detail: e.to_string(),
        }],
    }
}

/// Whether joining a cgroup is cheap here (informational: runs work either way).
fn cgroup_attach() -> Probe {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let active = crate::cgroup::favordynmods_active(&mountinfo);
    Probe {
        name: "cgroup attach",
        ok: true,
        detail: if active {
            "fast: a hierarchy has favordynmods".into()
        } else {
            "slow: no hierarchy has favordynmods, each run waits an RCU grace period (~10 ms); the first run as root with fast_cgroup_attach = true mounts one".into()
        },
    }
}

/// Every probe of the jail backend.
pub fn run_all() -> Vec<Probe> {
    let mut probes = vec![namespaces()];
    probes.extend(cgroups());
    probes.push(cgroup_attach());
    probes.push(seccomp());
    probes.push(landlock());
    probes
}
