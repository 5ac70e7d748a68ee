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

/// Landlock on a kernel of ABI `abi`: the ABI, then each part Warden uses, enforced or not
/// (a part not enforced is `ok: false`: profiles that require it are refused, the others run
/// without it).
pub fn landlock(abi: u32) -> Vec<Probe> {
    use warden_types::landlock::LandlockPart;
    let newest = LandlockPart::NEWEST_ABI;
    let mut probes = vec![Probe {
        name: "landlock",
        ok: abi >= 1,
        detail: match abi {
            0 => "not supported by this kernel: every jail profile is refused".into(),
            a if a >= newest => {
                format!("ABI {a}: every part Warden uses (ABI {newest}) is enforced")
            }
            a => format!(
                "ABI {a}: parts of later ABIs are not enforced; profiles that require them are refused"
            ),
        },
    }];
    for part in LandlockPart::ALL {
        let enforced = part.abi() <= abi;
        probes.push(Probe {
            name: match part {
                LandlockPart::Filesystem => "  filesystem",
                LandlockPart::Truncate => "  truncate",
                LandlockPart::Tcp => "  tcp",
                LandlockPart::DeviceIoctl => "  device_ioctl",
                LandlockPart::Scope => "  scope",
            },
            ok: enforced,
            detail: format!(
                "{} (ABI {}){}",
                part.describe(),
                part.abi(),
                if enforced {
                    ""
                } else {
                    ": NOT enforced by this kernel"
                }
            ),
        });
    }
    probes
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
    probes.extend(landlock(crate::contain::landlock::LandlockKernel::abi(
        &crate::contain::landlock::RealKernel,
    )));
    probes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(abi: u32) -> String {
        landlock(abi)
            .iter()
            .map(|p| {
                let mark = if p.ok { "ok " } else { "NO " };
                format!("{mark} {:<14} {}", p.name, p.detail)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn doctor_lists_each_part_of_landlock_enforced_or_not() {
        assert_eq!(
            lines(7),
            "\
ok  landlock       ABI 7: every part Warden uses (ABI 6) is enforced
ok    filesystem   writes only beneath the workspace, /tmp, /dev/shm (ABI 1)
ok    truncate     truncation only beneath the writable folders (ABI 3)
ok    tcp          no TCP bind; TCP connect only when networked (ABI 4)
ok    device_ioctl no ioctl on other devices (ABI 5)
ok    scope        signals and abstract unix sockets stay in the sandbox (ABI 6)"
        );
        assert_eq!(
            lines(3),
            "\
ok  landlock       ABI 3: parts of later ABIs are not enforced; profiles that require them are refused
ok    filesystem   writes only beneath the workspace, /tmp, /dev/shm (ABI 1)
ok    truncate     truncation only beneath the writable folders (ABI 3)
NO    tcp          no TCP bind; TCP connect only when networked (ABI 4): NOT enforced by this kernel
NO    device_ioctl no ioctl on other devices (ABI 5): NOT enforced by this kernel
NO    scope        signals and abstract unix sockets stay in the sandbox (ABI 6): NOT enforced by this kernel"
        );
        let none = landlock(0);
        assert!(none.iter().all(|p| !p.ok));
        assert!(none[0].detail.contains("every jail profile is refused"));
    }
}
