//! A pooled one-shot: the helper's `pooled` mode (`WARDEN_JAIL_HELPER=pooled`). The sandbox of
//! a gated one-shot plan (see [`crate::gate`]) is built and its interpreter started before the
//! code is known; the interpreter waits at its gate; the code comes later and the run goes on
//! exactly as a cold one.
//!
//! Engine ⇄ helper: frames of [`crate::protocol`] — `Plan` (the plan without its code), then,
//! once the helper said `Ready`, one `Exec` with a [`Start`]; back come `Ready`, output chunks
//! (none for a quiet `Start`: nobody follows the output live, as for a cold run's quiet plan)
//! and one final `Result` or `Error`, as for a cold run. End of input before the `Exec` ends
//! the sandbox quietly (a pool that closed or discarded it).
//!
//! Invariants: the sandbox is built by the same steps as a cold run of the same plan
//! ([`supervisor::launch`]; only the gate is held); `Ready` is sent once the interpreter has
//! reached its gate (the import guard's first report, or node's gate byte, has come); while it
//! waits its cgroup has the background CPU weight ([`CpuWeight::Background`]: the refill yields
//! to runs somebody waits for) and gets the normal one back before its gate opens, so its
//! program runs at the weight of a cold run's; a pooled run's time limit
//! counts from the opening of the gate, when the program's own code starts; the program's
//! file, stdin and time limit are the `Start`'s; one `Start` per sandbox, then it is torn
//! down like any run; a sandbox whose interpreter died while it waited sends an `Error` at
//! once (the engine sees its output pipe readable and discards it).

use crate::cgroup::CpuWeight;
use crate::helper::HelperFailure;
use crate::plan::JailPlan;
use crate::protocol::{Tag, read_frame, write_frame};
use crate::supervisor::{self, JailError, Stream};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// What a pooled sandbox is given to run: what differs between runs of one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub code: String,
    pub stdin: Vec<u8>,
    /// From the opening of the gate (the program's own start).
    pub timeout_ms: u64,
    /// Nobody follows the output live: the plan's [`JailPlan::quiet_output`] for this run
    /// (the plan was sent before anyone asked for it).
    #[serde(default)]
    pub quiet: bool,
}

/// Serves one pooled run on `input` (the helper's stdin); frames to `out`.
pub fn serve(input: OwnedFd, out: &mut impl Write) -> i32 {
    let started = crate::uid::start(crate::uid::HelperUid::expected_by_env());
    let mut input = std::fs::File::from(input);
    let plan = match read_frame(&mut input) {
        Ok(Some((Tag::Plan, raw))) => {
            serde_json::from_slice::<JailPlan>(&raw).map_err(HelperFailure::DecodePlan)
        }
        Ok(_) => Err(HelperFailure::NoPlan),
        Err(e) => Err(HelperFailure::ReadPlan(e)),
    };
    let (owned, mut plan) = match (started, plan) {
        (started, Ok(p)) => match crate::uid::for_plan(started, p.ids.host) {
            Ok(owned) => (owned, p),
            Err(e) => return crate::helper::finish(out, Err(HelperFailure::Jail(e))),
        },
        (_, Err(HelperFailure::NoPlan)) => return 0,
        (Err(e), _) => return crate::helper::finish(out, Err(HelperFailure::Jail(e))),
        (_, Err(e)) => return crate::helper::finish(out, Err(e)),
    };
    if !plan.gated {
        let refused = JailError::Refused("a pooled run needs a gated plan".into());
        return crate::helper::finish(out, Err(HelperFailure::Jail(refused)));
    }
    let crate::uid::Owned { mut started, uid } = owned;
    let (network, attachment) = match crate::link::attach_network(&plan, &mut started) {
        Ok(Some((attached, attachment))) => (Some(attached), Some(attachment)),
        Ok(None) => (None, None),
        Err(e) => return crate::helper::finish(out, Err(HelperFailure::Jail(e))),
    };
    let mut network = network;
    let mut before_go = || match network.as_mut() {
        Some(n) => n.wait_firewall().map_err(crate::link::network_error),
        None => Ok(()),
    };
    let code = match run(
        started,
        &mut plan,
        attachment.as_ref(),
        &mut input,
        out,
        &mut before_go,
    ) {
        Some(result) => crate::helper::finish(out, result.map_err(HelperFailure::Jail)),
        None => 0,
    };
    drop(network);
    if let Some(uid) = uid {
        uid.release();
    }
    code
}

/// Launches the held sandbox, says `Ready` once its interpreter waits at the gate, runs the
/// `Start` that comes; `None` when the engine ended it before (nothing to report).
fn run(
    started: supervisor::Started,
    plan: &mut JailPlan,
    attachment: Option<&crate::plan::NetAttachment>,
    input: &mut std::fs::File,
    out: &mut impl Write,
    before_go: &mut dyn FnMut() -> Result<(), JailError>,
) -> Option<Result<(warden_types::ExecResult, supervisor::Teardown), JailError>> {
    let mut launched = match supervisor::launch(started, plan, attachment, before_go, true) {
        Ok(launched) => launched,
        Err(e) => return Some(Err(e)),
    };
    // Ready: the guard's first report (node: its gate's byte), the sign that the interpreter
    // reached its gate.
    let deadline = Instant::now() + plan.limits.timeout.max(Duration::from_secs(10));
    match crate::sys::first_readable(
        &[launched.ctl_r.as_fd(), launched.pidfd.as_fd()],
        Some(deadline),
    ) {
        Some(0) => launched.report_prefix = supervisor::read_available(launched.ctl_r.as_fd()),
        _ => return Some(Err(ended_early(launched, plan))),
    }
    if launched.report_prefix.is_empty() {
        return Some(Err(ended_early(launched, plan)));
    }
    let ready = serde_json::json!({ "language": plan.gated_language() }).to_string();
    if write_frame(out, Tag::Ready, ready.as_bytes()).is_err() {
        return None;
    }
    // Wait for the code (or the end of input), watching the sandbox meanwhile.
    match crate::sys::first_readable(&[input.as_fd(), launched.pidfd.as_fd()], None) {
        Some(0) => {}
        _ => return Some(Err(ended_early(launched, plan))),
    }
    let start = match read_frame(input) {
        Ok(Some((Tag::Exec, raw))) => match serde_json::from_slice::<Start>(&raw) {
            Ok(start) => start,
            Err(e) => return Some(Err(protocol(format!("decode start: {e}")))),
        },
        Ok(None) => return None,
        Ok(Some((tag, _))) => return Some(Err(protocol(format!("unexpected frame {tag:?}")))),
        Err(e) => return Some(Err(protocol(format!("read start: {e}")))),
    };
    plan.code = start.code;
    plan.stdin = start.stdin;
    plan.limits.timeout = Duration::from_millis(start.timeout_ms.max(1));
    plan.quiet_output = start.quiet;
    let gate = launched.gate.take()?;
    // Taken: from here the run is waited for, at the weight every cold run has.
    if let Err(e) = launched.cgroup.0.set_cpu_weight(CpuWeight::Normal) {
        return Some(Err(e.into()));
    }
    match gate.open(&plan.code_path, &plan.code) {
        Ok(code_folder) => launched.code_folder = Some(code_folder),
        Err(e) => return Some(Err(e.into())),
    }
    launched.start = Instant::now();
    let mut relay = |stream: Stream, chunk: &[u8]| {
        let tag = match stream {
            Stream::Stdout => Tag::Stdout,
            Stream::Stderr => Tag::Stderr,
        };
        let _ = write_frame(out, tag, chunk);
    };
    Some(supervisor::finish_run(launched, plan, &mut relay, None))
}

fn protocol(message: String) -> JailError {
    JailError::Os {
        op: "pooled run",
        source: std::io::Error::other(message),
    }
}

/// Why a held sandbox ended before its run: init's report if it made one, else that the
/// interpreter died while it waited.
fn ended_early(launched: supervisor::Launched, plan: &JailPlan) -> JailError {
    let _ = sys::kill(launched.pid, libc::SIGKILL);
    match supervisor::read_status(launched.status_r.as_fd(), plan) {
        Err(reported) => reported,
        Ok(_) => JailError::Command {
            command: plan.argv[0].clone(),
            message: "the interpreter ended before its code came".into(),
        },
    }
}
