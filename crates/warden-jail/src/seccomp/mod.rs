//! The seccomp filter of every sandbox, from the checked-in allow-list `seccomp/x86_64.toml`
//! (see its README for the format and how the list was derived).
//!
//! Invariants: the BPF is generated from the table at build time (`build.rs` uses [`table`]),
//! so the filter that runs is exactly the table that was reviewed; one program, a binary
//! search over the syscall number; every syscall not allowed returns ENOSYS; every `[[deny]]`
//! entry returns its own errno (EPERM).

pub mod oci;
#[allow(dead_code)]
pub mod table;

pub use table::{SeccompError, summary};

mod generated {
    include!(concat!(env!("OUT_DIR"), "/seccomp_filters.rs"));
}

/// The program to install.
#[derive(Debug, Clone)]
pub struct Filters {
    pub program: Vec<libc::sock_filter>,
}

impl Filters {
    pub fn instructions(&self) -> usize {
        self.program.len()
    }
}

/// The build-time program.
pub fn filters() -> Filters {
    Filters {
        program: generated::PROGRAM
            .iter()
            .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
            .collect(),
    }
}

/// Installs the program on the calling thread (no_new_privs must already be set).
pub fn install(filters: &Filters) -> Result<(), std::io::Error> {
    {
        let prog = &filters.program;
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
    fn the_generated_program_is_the_tables() {
        let compiled = super::table::compile().unwrap();
        let generated = super::filters();
        assert_eq!(generated.program.len(), compiled.len());
        for (g, c) in generated.program.iter().zip(&compiled) {
            assert_eq!((g.code, g.jt, g.jf, g.k), (c.code, c.jt, c.jf, c.k));
        }
    }
}
