//! The helper process: single-threaded, so that forking into namespaces never happens in a
//! multi-threaded process (Firecracker's jailer is the model). Two ways to get one:
//! - exec: `warden` re-executed with `WARDEN_JAIL_HELPER=1` (the daemon, or any
//!   multi-threaded caller);
//! - fork: a single-threaded caller (the one-shot CLI) forks itself and the child serves the
//!   plan it already has in memory, saving an exec and the plan's encoding.
//!
//! Protocol: (exec only) the plan as JSON on stdin; frames (see [`crate::protocol`]) on the
//! output; the exit status is 0 whenever a final frame was written.

use crate::cgroup::Hierarchy;
use crate::plan::JailPlan;
use crate::protocol::{HelperError, Tag, write_frame};
use crate::supervisor::{self, JailError, Stream};
use std::io::{Read, Write};

/// The environment variable that turns the binary into the helper.
pub const HELPER_ENV: &str = "WARDEN_JAIL_HELPER";

/// Plans larger than this are refused (the code is inside the plan).
pub const MAX_PLAN_BYTES: u64 = 64 * 1024 * 1024;

/// Runs the exec'd helper: the plan from stdin, frames to stdout; returns the exit status.
pub fn main() -> i32 {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let plan = read_plan();
    let hierarchy = Hierarchy::detect().map_err(HelperFailure::Cgroups);
    match (plan, hierarchy) {
        (Ok(plan), Ok(hierarchy)) => serve(&plan, &hierarchy, &mut out),
        (Err(e), _) | (_, Err(e)) => finish(&mut out, Err(e)),
    }
}

fn read_plan() -> Result<JailPlan, HelperFailure> {
    let mut raw = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_PLAN_BYTES)
        .read_to_end(&mut raw)
        .map_err(HelperFailure::ReadPlan)?;
    serde_json::from_slice(&raw).map_err(HelperFailure::DecodePlan)
}

/// Runs one plan, writing output frames and the final frame to `out`; then tears the sandbox
/// down. Returns the exit status for the helper.
pub fn serve(plan: &JailPlan, hierarchy: &Hierarchy, out: &mut impl Write) -> i32 {
    if plan.trace_timing {
        eprintln!("warden-trace: {:.3} helper has the plan", crate::monotonic_ms());
    }
    let mut relay = |stream: Stream, chunk: &[u8]| {
        let tag = match stream {
            Stream::Stdout => Tag::Stdout,
            Stream::Stderr => Tag::Stderr,
        };
        // A reader that went away is noticed at the final frame.
        let _ = write_frame(out, tag, chunk);
    };
    let result = supervisor::run(plan, hierarchy, &mut relay).map_err(HelperFailure::Jail);
    finish(out, result)
}

fn finish(
    out: &mut impl Write,
    result: Result<(warden_types::ExecResult, supervisor::Teardown), HelperFailure>,
) -> i32 {
    let (tag, payload, teardown) = match result {
        Ok((result, teardown)) => (Tag::Result, serde_json::to_vec(&result), Some(teardown)),
        Err(e) => (Tag::Error, serde_json::to_vec(&to_helper_error(&e)), None),
    };
    let payload = payload.unwrap_or_else(|_| b"{}".to_vec());
    let written = write_frame(out, tag, &payload).is_ok();
    let _ = out.flush();
    // The result is out; now wait for the kernel to tear the namespaces down and remove the
    // cgroup. The caller need not wait for this.
    drop(teardown);
    if written { 0 } else { 1 }
}

fn to_helper_error(e: &HelperFailure) -> HelperError {
    let kind = match e {
        HelperFailure::Jail(JailError::Refused(_)) | HelperFailure::Cgroups(_) => "refused",
        HelperFailure::Jail(JailError::Setup { .. }) => "setup",
        HelperFailure::Jail(JailError::Command { .. }) => "command",
        _ => "internal",
    };
    HelperError {
        kind: kind.into(),
        message: e.to_string(),
    }
}

#[derive(Debug, thiserror::Error)]
enum HelperFailure {
    #[error("read plan: {0}")]
    ReadPlan(std::io::Error),
    #[error("decode plan: {0}")]
    DecodePlan(serde_json::Error),
    #[error("cannot read the cgroup layout: {0}")]
    Cgroups(std::io::Error),
    #[error(transparent)]
    Jail(#[from] JailError),
}
