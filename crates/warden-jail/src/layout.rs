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

/// The descriptor at which a session's program writes its replies, and a guarded one-shot
/// program's import guard its report (see `warden_engine::import_guard::REPORT_FD`).
pub const SESSION_REPLY_FD: i32 = 3;

/// The folder of the import guard's `sitecustomize.py` in the sandbox's root (Python runs
/// with `PYTHONPATH` naming it; the guard removes it from `sys.path` before user code).
pub const IMPORT_GUARD_DIR: &str = "/warden/import-guard";
