//! Where things are inside a sandbox: the fixed names the plan, the mounts, the workspace, the
//! artifacts and the program's descriptors agree on.
//!
//! Invariants: constants only, no dependencies; every path here is absolute (or a single name
//! inside the workspace tmpfs) and clean.

/// Where the workspace, the code and the output folder live inside the sandbox.
pub const WORKSPACE_DIR: &str = "/workspace";
pub const OUTPUT_DIR_NAME: &str = "output";
pub const CODE_DIR: &str = "/code";
/// Inside the workspace tmpfs: the folder bound at /workspace and the one bound at /tmp.
pub const SCRATCH_WORK: &str = "work";
pub const SCRATCH_TMP: &str = "tmp";

/// The descriptor at which a session's program writes its replies, a guarded one-shot
/// program's import guard its report (see `warden_engine::import_guard::REPORT_FD`), and a
/// gated node program's preload its "at the gate" byte (see [`crate::gate`]).
pub const SESSION_REPLY_FD: i32 = 3;

/// The import guard's folder in the sandbox's root: Python's user base (`PYTHONUSERBASE`),
/// whose site-packages holds the guard as `usercustomize.py`, or, for an interpreter not named
/// by its version, the folder of its `sitecustomize.py` on `PYTHONPATH`
/// (`warden_engine::import_guard::Delivery`); the guard removes it from `sys.path` before user
/// code.
pub const IMPORT_GUARD_DIR: &str = "/warden/import-guard";

/// The descriptor at which a gated run's interpreter finds its start pipe (see
/// [`crate::gate`]): the import guard (or node's gate preload) reads one byte from it, then
/// closes it, before the program's file is opened. Not 4: the guard's own copy of the report
/// descriptor takes the lowest free one, 4, as in a run without a gate.
pub const START_FD: i32 = 5;

/// Where node's gate preload is in a gated node run's root (see [`crate::gate`]).
pub const NODE_GATE_PATH: &str = "/warden/gate/node.js";

/// The most code a gated run's root has room for: its root tmpfs has the same size whatever
/// the code (a pooled sandbox's root is built before its code is known), and a plan with more
/// code is not gated.
pub const GATED_CODE_ROOM: usize = 1024 * 1024;
