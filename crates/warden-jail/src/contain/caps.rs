//! Capabilities: the bounding and ambient sets are emptied and the effective, permitted and
//! inheritable sets cleared, so neither the program nor anything it executes can regain one.
//! The bounding set only bounds what an `execve` (or a `capset` of the inheritable set) may
//! grant, never what a process holds, so it is emptied first, before init's plan arrives
//! ([`empty_bounding_set`]); init keeps its capabilities for the root and the namespaces until
//! [`drop_all`].

use std::io;

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Empties the bounding set (needs `CAP_SETPCAP`, which init holds in its new user namespace).
pub fn empty_bounding_set() -> io::Result<()> {
    for cap in 0..=last_cap() {
        // SAFETY: prctl with integer arguments has no memory effects.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if ret != 0 {
            let err = io::Error::last_os_error();
            // EINVAL: a capability this kernel doesn't know; nothing to drop.
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// Empties the ambient set and clears the effective, permitted and inheritable sets (the
/// bounding set is already empty: [`empty_bounding_set`]).
pub fn drop_all() -> io::Result<()> {
    // SAFETY: prctl with integer arguments has no memory effects.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data are valid capset structures for version 3 (two data elements).
    let ret = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn no_new_privs() -> io::Result<()> {
    // SAFETY: prctl with integer arguments has no memory effects.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Not dumpable: other processes of the same uid (the program) cannot open this one's
/// /proc/<pid>/mem or ptrace it.
pub fn not_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments has no memory effects.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
