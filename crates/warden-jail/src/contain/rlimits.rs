//! Resource limits the kernel enforces per process: file size, core dumps, open files.
//! Limits are only ever lowered (root here lacks CAP_SYS_RESOURCE to raise hard limits).

use std::io;

fn lower(resource: libc::__rlimit_resource_t, wanted: u64) -> io::Result<()> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `current` is a valid rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let value = wanted.min(current.rlim_max);
    let new = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `new` is a valid rlimit.
    if unsafe { libc::setrlimit(resource, &new) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn apply(max_file_size_bytes: u64) -> io::Result<()> {
    lower(libc::RLIMIT_FSIZE, max_file_size_bytes)?;
    lower(libc::RLIMIT_CORE, 0)?;
    lower(libc::RLIMIT_NOFILE, 4096)?;
    Ok(())
}
