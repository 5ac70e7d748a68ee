//! The helper process: `warden` re-executed with `WARDEN_JAIL_HELPER=1`, single-threaded, so
//! that forking into namespaces never happens in the multi-threaded daemon (Firecracker's
//! jailer is the model).
//!
//! Protocol: the plan as JSON on stdin; frames (see [`crate::protocol`]) on stdout; the exit
//! status is 0 whenever a final frame was written.

use crate::cgroup::Hierarchy;
use crate::plan::JailPlan;
use crate::protocol::{HelperError, Tag, write_frame};
use crate::supervisor::{self, JailError, Stream};
use std::io::{Read, Write};

/// The environment variable that turns the binary into the helper.
pub const HELPER_ENV: &str = "WARDEN_JAIL_HELPER";

/// Plans larger than this are refused (the code is inside the plan).
pub const MAX_PLAN_BYTES: u64 = 64 * 1024 * 1024;

/// Runs the helper; returns the process exit status.
pub fn main() -> i32 {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = run(&mut out);
    let (tag, payload, teardown) = match result {
        Ok((result, teardown)) => (Tag::Result, serde_json::to_vec(&result), Some(teardown)),
        Err(e) => (Tag::Error, serde_json::to_vec(&to_helper_error(&e)), None),
    };
    let payload = payload.unwrap_or_else(|_| b"{}".to_vec());
    let written = write_frame(&mut out, tag, &payload).is_ok();
    let _ = out.flush();
    // The result is out; now wait for the kernel to tear the namespaces down and remove the
    // cgroup. The caller need not wait for this.
    drop(teardown);
    if written { 0 } else { 1 }
}

fn to_helper_error(e: &HelperFailure) -> HelperError {
    let kind = match e {
        HelperFailure::Jail(JailError::Refused(_)) => "refused",
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
    #[error("detect cgroups: {0}")]
    Cgroups(std::io::Error),
    #[error(transparent)]
    Jail(#[from] JailError),
}

fn run(
    out: &mut impl Write,
) -> Result<(warden_types::ExecResult, supervisor::Teardown), HelperFailure> {
    let mut raw = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_PLAN_BYTES)
        .read_to_end(&mut raw)
        .map_err(HelperFailure::ReadPlan)?;
    let plan: JailPlan = serde_json::from_slice(&raw).map_err(HelperFailure::DecodePlan)?;
    if plan.trace_timing {
        eprintln!("warden-trace: {:.3} helper has the plan", crate::monotonic_ms());
    }
    drop(raw);
    let hierarchy = Hierarchy::detect().map_err(HelperFailure::Cgroups)?;
    let mut relay = |stream: Stream, chunk: &[u8]| {
        let tag = match stream {
            Stream::Stdout => Tag::Stdout,
            Stream::Stderr => Tag::Stderr,
        };
        // A reader that went away is noticed at the final frame.
        let _ = write_frame(out, tag, chunk);
    };
    Ok(supervisor::run(&plan, &hierarchy, &mut relay)?)
}
