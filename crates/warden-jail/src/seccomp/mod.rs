//! The seccomp filter of every sandbox, from the checked-in allow-list `seccomp/x86_64.toml`
//! (see its README for the format and how the list was derived).
//!
//! Invariants: the BPF is generated from the table at build time (`build.rs` uses [`table`]),
//! so the filter that runs is exactly the table that was reviewed; every syscall not allowed
//! returns ENOSYS; every `[[deny]]` entry returns its own errno (EPERM) from a filter installed
//! after the allow-list, whose errno wins for equal actions.

#[allow(dead_code)]
pub mod table;

pub use table::{SeccompError, summary};

mod generated {
    include!(concat!(env!("OUT_DIR"), "/seccomp_filters.rs"));
}

/// One BPF instruction as generated: (code, jt, jf, k).
type Insn = (u16, u8, u8, u32);

fn program(insns: &[Insn]) -> Vec<libc::sock_filter> {
    insns
        .iter()
        .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
        .collect()
}

/// The filters to install, in order: the allow-list, then one deny filter per errno.
#[derive(Debug, Clone)]
pub struct Filters {
    pub programs: Vec<Vec<libc::sock_filter>>,
}

impl Filters {
    pub fn instructions(&self) -> usize {
        self.programs.iter().map(Vec::len).sum()
    }
}

/// The build-time filters.
pub fn filters() -> Filters {
    let mut programs = vec![program(generated::ALLOW)];
    programs.extend(generated::DENY.iter().map(|p| program(p)));
    Filters { programs }
}

/// Installs the filters on the calling thread (no_new_privs must already be set).
pub fn install(filters: &Filters) -> Result<(), std::io::Error> {
    for prog in &filters.programs {
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `fprog` points at a valid BPF program that outlives the call; the kernel
        // copies it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            )
        };
        if ret != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_generated_filters_match_the_table() {
        let compiled = super::table::compile().unwrap();
        let generated = super::filters();
        assert_eq!(generated.programs[0].len(), compiled.allow.len());
        assert_eq!(generated.programs.len(), 1 + compiled.deny.len());
    }
}
