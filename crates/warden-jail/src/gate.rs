//! The start gate of a gated run (`JailPlan::gated`): its interpreter starts before its
//! program's file exists, and waits at the end of its start-up until the supervisor has written
//! the file and opened the gate. A cold run opens it at once, before the interpreter even
//! starts; a pooled one ([`crate::pooled`]) when its code arrives. Both are built and run by
//! the same code; only the moment differs.
//!
//! Two interpreters know how to wait, each told by its environment where the start descriptor
//! ([`START_FD`]) is:
//! - Python under the import guard (a one-shot under `forbidden_imports`): the guard's last act
//!   (see `warden_engine::import_guard::START_ENV`); its first report, on the report pipe,
//!   says it reached the gate ([`JailPlan::add_import_guard`]).
//! - node ([`JailPlan::add_node_gate`], a one-shot whose command is node): a preload
//!   (`gate/node.js`, given by `NODE_OPTIONS=--require`) writes one byte on the reply pipe
//!   ([`SESSION_REPLY_FD`]) to say it reached the gate, then waits; it removes its variables
//!   from `process.env` and closes both descriptors before the program's file is loaded.
//!
//! Invariants: the program's file is written exactly as init writes a non-gated run's (the
//! root's code folder, the sandbox user's file, mode 0444, the last inode the root gets),
//! through a writable copy of the code folder's mount that init handed over before the root
//! became read-only; the gate's write end is closed once the gate is open, and the copy is
//! never written again: [`Gate::open`] gives it back to be closed where no one waits for it
//! (the last descriptor of a detached mount takes it down, and the kernel waits for an
//! expedited RCU grace period there); the gate is opened at most once; a
//! gated program's interpreter says it reached the gate on the reply pipe before it waits, and
//! the program finds both descriptors closed.

use crate::layout::{GATED_CODE_ROOM, NODE_GATE_PATH, SESSION_REPLY_FD, START_FD};
use crate::plan::{JailPlan, MountOp};
use crate::supervisor::JailError;
use crate::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The node gate's preload, written into the root at [`NODE_GATE_PATH`].
pub const NODE_PRELOAD: &str = include_str!("gate/node.js");

/// Names the start descriptor for the node gate's preload (removed from `process.env`).
pub const NODE_START_ENV: &str = "WARDEN_GATE_START";
/// Names the descriptor on which the node gate's preload says it reached the gate.
pub const NODE_READY_ENV: &str = "WARDEN_GATE_READY";

/// Whether `argv` runs node (its program's name is `node` or `nodejs`): the interpreter that
/// the node gate's preload is for.
pub fn runs_node(argv: &[String]) -> bool {
    argv.first()
        .and_then(|program| Path::new(program).file_name())
        .is_some_and(|name| name == "node" || name == "nodejs")
}

impl JailPlan {
    /// Gates a node one-shot (see the module docs): the preload written into the root, the
    /// environment that loads it and names its descriptors. A plan whose code is larger than
    /// a gated root's room, or that is not node's, is left as it is (run as before).
    pub fn add_node_gate(&mut self) {
        let has_node_options = self.env.iter().any(|(k, _)| k == "NODE_OPTIONS");
        if self.session
            || self.gated
            || has_node_options
            || !runs_node(&self.argv)
            || self.code.len() > GATED_CODE_ROOM
        {
            return;
        }
        self.mounts.push(MountOp::File {
            dest: PathBuf::from(NODE_GATE_PATH),
            contents: NODE_PRELOAD.to_owned(),
            mode: 0o444,
        });
        self.env.extend([
            (
                "NODE_OPTIONS".to_owned(),
                format!("--require {NODE_GATE_PATH}"),
            ),
            (NODE_START_ENV.to_owned(), START_FD.to_string()),
            (NODE_READY_ENV.to_owned(), SESSION_REPLY_FD.to_string()),
        ]);
        self.gated = true;
    }

    /// The language whose interpreter waits at this gated plan's gate (what a pooled sandbox
    /// says it holds), `None` for a plan that is not gated.
    pub fn gated_language(&self) -> Option<&'static str> {
        let named = |key: &str| self.env.iter().any(|(k, _)| k == key);
        if !self.gated {
            None
        } else if named(NODE_START_ENV) {
            Some("javascript")
        } else {
            Some("python")
        }
    }
}

/// A gated run's gate, held by its supervisor until the code is there.
#[derive(Debug)]
pub struct Gate {
    /// A writable copy of the root's code folder (a detached mount).
    code_dir: OwnedFd,
    /// The write end of the program's start pipe.
    start_w: OwnedFd,
    /// The host uid (and gid) the sandbox user maps to; `None`: this process's own ids.
    owner: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("write the code into the sandbox ({step}): {source}")]
    WriteCode {
        step: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("a gated plan's code file has no name: {0:?}")]
    NoFileName(std::path::PathBuf),
}

impl From<GateError> for JailError {
    fn from(e: GateError) -> Self {
        JailError::Setup {
            step: "write code".into(),
            message: e.to_string(),
        }
    }
}

impl Gate {
    pub(crate) fn new(code_dir: OwnedFd, start_w: OwnedFd, owner: Option<u32>) -> Gate {
        Gate {
            code_dir,
            start_w,
            owner,
        }
    }

    /// Writes `code` as the program's file (`code_path`'s name in the code folder) and opens
    /// the gate: the interpreter goes on and runs it. Gives back the code folder's writable
    /// copy, written no more, for the caller to close once nothing waits on it: closing it
    /// waits for an RCU grace period (measured: 0.15–0.2 ms, which right after the gate
    /// competed with the interpreter for its CPU).
    pub fn open(self, code_path: &Path, code: &str) -> Result<OwnedFd, GateError> {
        let name = code_path
            .file_name()
            .ok_or_else(|| GateError::NoFileName(code_path.to_owned()))?;
        let file = create_in(self.code_dir.as_fd(), name, self.owner)?;
        sys::write_all(file.as_fd(), code.as_bytes()).map_err(|source| GateError::WriteCode {
            step: "write",
            source,
        })?;
        drop(file);
        // A program that ended before its gate opened (killed while it waited) leaves no
        // reader: its end is reported by init, not here.
        let _ = sys::write_all(self.start_w.as_fd(), b"s");
        Ok(self.code_dir)
    }
}

/// Creates the file `name` in `dir`, the sandbox user's (mode 0444), open for writing. As
/// `owner` (when given): the root tmpfs belongs to the sandbox's user namespace, where only
/// that uid is mapped (the kernel refuses to create a file for an unmapped one).
fn create_in(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    owner: Option<u32>,
) -> Result<std::fs::File, GateError> {
    let err = |step| move |source| GateError::WriteCode { step, source };
    let c_name = sys::cstring(name).map_err(err("name"))?;
    let as_owner = match owner {
        Some(uid) => {
            Some(sys::EffectiveIds::become_ids(uid, uid).map_err(err("become the owner"))?)
        }
        None => None,
    };
    let created = open_new(dir, &c_name);
    if let Some(ids) = as_owner {
        ids.restore().map_err(err("restore the effective uid"))?;
    }
    created.map_err(err("create"))
}

fn open_new(
    dir: std::os::fd::BorrowedFd<'_>,
    c_name: &std::ffi::CStr,
) -> io::Result<std::fs::File> {
    // SAFETY: a valid directory descriptor and C string.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c_name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o444 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor that nobody else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    // Whatever this process's umask took away. SAFETY: fchmod on the descriptor just opened.
    if unsafe { libc::fchmod(fd, 0o444) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(plan: &'a JailPlan, key: &str) -> Vec<&'a str> {
        plan.env
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    #[test]
    fn a_node_one_shot_is_gated_with_its_preload_and_the_descriptors_it_names() {
        for program in ["node", "/usr/bin/node", "nodejs"] {
            let mut plan = crate::plan::sample(&[program, "/code/main.js"]);
            plan.code = "console.log(1)".into();
            plan.add_node_gate();
            assert!(plan.gated && !plan.import_report, "{program}");
            assert_eq!(plan.gated_language(), Some("javascript"));
            assert_eq!(
                env_of(&plan, "NODE_OPTIONS"),
                ["--require /warden/gate/node.js"]
            );
            assert_eq!(env_of(&plan, NODE_START_ENV), ["5"]);
            assert_eq!(env_of(&plan, NODE_READY_ENV), ["3"]);
            let preloads: Vec<_> = plan
                .mounts
                .iter()
                .filter(|op| {
                    matches!(op, MountOp::File { dest, contents, mode: 0o444 }
                    if dest == Path::new(NODE_GATE_PATH) && contents == NODE_PRELOAD)
                })
                .collect();
            assert_eq!(preloads.len(), 1);
            // Once only.
            let before = plan.clone();
            plan.add_node_gate();
            assert_eq!(plan, before);
        }
    }

    #[test]
    fn what_is_not_a_node_one_shot_with_room_for_its_code_is_left_as_it_is() {
        let mut session = crate::plan::sample(&["node", "/code/main.js"]);
        session.session = true;
        let mut large = crate::plan::sample(&["node", "/code/main.js"]);
        large.code = "/".repeat(GATED_CODE_ROOM + 1);
        let mut with_options = crate::plan::sample(&["node", "/code/main.js"]);
        with_options
            .env
            .push(("NODE_OPTIONS".into(), "--max-old-space-size=64".into()));
        for plan in [
            crate::plan::sample(&["python3", "/code/main.py"]),
            crate::plan::sample(&["/usr/bin/env", "node", "/code/main.js"]),
            crate::plan::sample(&["deno", "run", "/code/main.js"]),
            session,
            large,
            with_options,
        ] {
            let mut gated = plan.clone();
            gated.add_node_gate();
            assert_eq!(gated, plan);
            assert_eq!(gated.gated_language(), None);
        }
    }
}
