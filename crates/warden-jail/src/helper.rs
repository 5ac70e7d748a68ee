//! The helper process: single-threaded, so that forking into namespaces never happens in a
//! multi-threaded process (Firecracker's jailer is the model). Three ways to get one:
//! - exec: `warden` re-executed with `WARDEN_JAIL_HELPER=1` (a multi-threaded caller);
//! - the fork server (a daemon): `warden` exec'd once with `WARDEN_JAIL_HELPER=forks` forks a
//!   child per helper, which sets up what an exec'd helper gets and runs [`main`] (see
//!   [`crate::launcher`], [`crate::fork_server`]);
//! - fork: a single-threaded caller (the one-shot CLI) forks itself and the child serves the
//!   plan it already has in memory, saving an exec and the plan's encoding.
//!
//! Protocol: the plan as JSON on the input (stdin when exec'd, a pipe when forked), read to its
//! end; frames (see [`crate::protocol`]) on the output; the exit status is 0 whenever a final
//! frame was written. The helper creates the sandbox's namespaces before it reads the plan, so
//! a caller that starts it early overlaps that work with its own.

use crate::plan::JailPlan;
use crate::protocol::{HelperError, Tag, write_frame};
use crate::supervisor::{self, JailError, Stream};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

/// The environment variable that turns the binary into the helper.
pub const HELPER_ENV: &str = "WARDEN_JAIL_HELPER";

/// Plans larger than this are refused (the code is inside the plan).
pub const MAX_PLAN_BYTES: u64 = 64 * 1024 * 1024;

/// The descriptor at which an exec'd helper inherits a sandbox's workspace (see
/// [`crate::plan::JailPlan::shared_workspace_fd`]).
pub const INHERITED_WORKSPACE_FD: i32 = 3;

pub use crate::uid::INHERITED_LEASE_FD;

/// The value of [`HELPER_ENV`] that starts a session (a context's long-lived run, see
/// [`crate::session`]) instead of a one-shot run.
pub const SESSION_MODE: &str = "session";

/// The value of [`HELPER_ENV`] for a run whose program's stdin stays open: the plan comes as
/// one `Plan` frame ([`crate::protocol`]), and what follows it on the helper's stdin, to its
/// end, is relayed to the program's stdin as it arrives.
pub const LIVE_MODE: &str = "live";

/// The value of [`HELPER_ENV`] that starts a pooled one-shot (see [`crate::pooled`]).
pub const POOLED_MODE: &str = "pooled";

/// Runs the exec'd helper: the plan from stdin, frames to stdout; returns the exit status.
pub fn main() -> i32 {
    // Named after its mode for whoever looks at the host's processes ("warden pooled", …);
    // the sandbox's init takes the binary's name back (see `init::sandbox_init`).
    let mode = std::env::var(HELPER_ENV).unwrap_or_default();
    crate::sys::set_name(&format!(
        "warden {}",
        if mode == "1" { "run" } else { mode.as_str() }
    ));
    // Inherited without close-on-exec on purpose; the sandboxed program must not get it.
    crate::sys::set_cloexec(INHERITED_WORKSPACE_FD);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if std::env::var_os(HELPER_ENV).is_some_and(|v| v == crate::fork_server::FORKS_MODE) {
        // The fork server's socket is its stdin; it never uses its stdout.
        drop(out);
        // SAFETY: descriptor 0 is the socket the engine started this process with, and
        // nothing else in this process owns it.
        let socket = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(0) };
        return crate::fork_server::serve_forks(socket);
    }
    if std::env::var_os(HELPER_ENV).is_some_and(|v| v == SESSION_MODE) {
        use std::os::fd::AsFd;
        let Ok(input) = std::io::stdin().as_fd().try_clone_to_owned() else {
            return 1;
        };
        return crate::session::serve(input, &mut out);
    }
    if std::env::var_os(HELPER_ENV).is_some_and(|v| v == LIVE_MODE) {
        // Unbuffered: `read_frame` then reads exactly the frame, and what follows stays in
        // the pipe for the relay.
        let Ok(input) = std::io::stdin().as_fd().try_clone_to_owned() else {
            return 1;
        };
        let mut input = std::fs::File::from(input);
        let host = crate::uid::HelperUid::expected_by_env();
        let receive = || match crate::protocol::read_frame(&mut input) {
            Ok(Some((Tag::Plan, plan))) => Ok(plan),
            Ok(Some(_)) => Err(HelperFailure::ReadPlan(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the first frame must be the plan",
            ))),
            Ok(None) => Err(HelperFailure::NoPlan),
            Err(e) => Err(HelperFailure::ReadPlan(e)),
        };
        return serve_with(host, receive, &mut out, Some(std::io::stdin().as_fd()));
    }
    if std::env::var_os(HELPER_ENV).is_some_and(|v| v == POOLED_MODE) {
        use std::os::fd::AsFd;
        let Ok(input) = std::io::stdin().as_fd().try_clone_to_owned() else {
            return 1;
        };
        return crate::pooled::serve(input, &mut out);
    }
    serve(&mut std::io::stdin().lock(), &mut out)
}

/// The plan of an exec'd helper: its input, read to the end.
fn read_to_end(input: &mut impl Read) -> Result<Vec<u8>, HelperFailure> {
    let mut raw = Vec::new();
    input
        .take(MAX_PLAN_BYTES)
        .read_to_end(&mut raw)
        .map_err(HelperFailure::ReadPlan)?;
    if raw.is_empty() {
        return Err(HelperFailure::NoPlan);
    }
    Ok(raw)
}

/// Starts a sandbox at once (the namespaces cost the most and need no plan), then reads the
/// plan from `input` to its end, runs it writing output frames and the final frame to `out`,
/// and tears the sandbox down. Returns the exit status for the helper.
pub fn serve(input: &mut impl Read, out: &mut impl Write) -> i32 {
    let host = crate::uid::HelperUid::expected_by_env();
    serve_with(host, || read_to_end(input), out, None)
}

/// [`serve`] for a helper forked by its caller (the one-shot CLI), which sends the plan as the
/// supervisor sends init its own ([`supervisor::send_plan`]): length-prefixed, with a doorbell,
/// so that the helper is not queued behind its caller when the plan arrives.
pub(crate) fn serve_forked(plan_r: OwnedFd, bell: OwnedFd, out: &mut impl Write) -> i32 {
    serve_with(
        crate::uid::HelperUid::expected_by_default(),
        || {
            crate::init::receive_plan(plan_r.as_fd(), bell.as_fd(), MAX_PLAN_BYTES as usize)
                .ok_or(HelperFailure::NoPlan)
        },
        out,
        None,
    )
}

/// `host`: the host ids the plan most likely names (the sandbox is started before it comes);
/// `live_stdin`: where the program's stdin comes from while it runs (see [`LIVE_MODE`]).
fn serve_with(
    host: Option<crate::plan::HostIds>,
    receive: impl FnOnce() -> Result<Vec<u8>, HelperFailure>,
    out: &mut impl Write,
    live_stdin: Option<std::os::fd::BorrowedFd<'_>>,
) -> i32 {
    let entered_at = crate::monotonic_ms();
    let started = crate::uid::start(host);
    let started_at = crate::monotonic_ms();
    let plan = receive();
    // Whether to trace is in the plan: the times before it are kept and printed after.
    let read_at = crate::monotonic_ms();
    let plan = plan.and_then(|raw| {
        serde_json::from_slice::<JailPlan>(&raw).map_err(HelperFailure::DecodePlan)
    });
    let (owned, plan) = match (started, plan) {
        (started, Ok(p)) => match crate::uid::for_plan(started, p.ids.host) {
            Ok(owned) => (owned, p),
            Err(e) => return finish(out, Err(HelperFailure::Jail(e))),
        },
        // A caller that went away without a plan (it refused the request itself) gets no frame.
        (Ok(owned), Err(HelperFailure::NoPlan)) => {
            let crate::uid::Owned { started, uid } = owned;
            drop(started);
            if let Some(uid) = uid {
                uid.release();
            }
            return 0;
        }
        (_, Err(HelperFailure::NoPlan)) => return 0,
        (Err(e), _) => return finish(out, Err(HelperFailure::Jail(e))),
        (_, Err(e)) => return finish(out, Err(e)),
    };
    let crate::uid::Owned { mut started, uid } = owned;
    if plan.trace_timing {
        eprintln!("warden-trace: {entered_at:.3} helper runs");
        eprintln!("warden-trace: {started_at:.3} helper started the sandbox");
        eprintln!("warden-trace: {read_at:.3} helper read the plan");
        eprintln!(
            "warden-trace: {:.3} helper has the plan",
            crate::monotonic_ms()
        );
    }
    // A networked sandbox: its link and firewall, torn down after the sandbox (below).
    let (mut network, attachment) = match crate::link::attach_network(&plan, &mut started) {
        Ok(Some((attached, attachment))) => (Some(attached), Some(attachment)),
        Ok(None) => (None, None),
        Err(e) => return finish(out, Err(HelperFailure::Jail(e))),
    };
    let mut before_go = || match network.as_mut() {
        Some(n) => n.wait_firewall().map_err(crate::link::network_error),
        None => Ok(()),
    };
    let mut relay = |stream: Stream, chunk: &[u8]| {
        let tag = match stream {
            Stream::Stdout => Tag::Stdout,
            Stream::Stderr => Tag::Stderr,
        };
        // A reader that went away is noticed at the final frame.
        let _ = write_frame(out, tag, chunk);
    };
    let result = supervisor::run_with(
        started,
        &plan,
        attachment.as_ref(),
        &mut relay,
        &mut before_go,
        live_stdin,
    )
    .map_err(HelperFailure::Jail);
    // The program has ended: the gateway's decisions join its result (the refusals it saw,
    // the connections it made).
    let result = result.map(|(mut r, teardown)| {
        if let Some(n) = network.as_mut() {
            r.egress = n.finish_egress();
        }
        (r, teardown)
    });
    let code = finish(out, result);
    drop(network);
    // The teardown (in `finish`) killed and reaped init, with every process of the sandbox.
    if let Some(uid) = uid {
        uid.release();
    }
    code
}

pub(crate) fn finish(
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
    // The pipe write woke the caller with the hint that this process sleeps next, so the
    // scheduler queued it on this CPU; it does not sleep (the teardown follows), so give the
    // CPU to the caller, which has the result to deliver.
    // SAFETY: sched_yield has no arguments and no memory effects.
    unsafe { libc::sched_yield() };
    // The result is out; now kill and reap init (a one-shot CLI's is ending already:
    // `JailPlan::init_exits_on_status`) and remove the cgroup. Not held back for the caller's
    // exit: the teardown is part of the run either way (docs/benchmarks.md, "The teardown
    // beside the answer"). The caller need not wait for it, nor for end of file on the
    // standard error this process inherited from it (a caller that captures it reads to its
    // end).
    crate::sys::redirect_to_null(&[2]);
    drop(teardown);
    if written { 0 } else { 1 }
}

fn to_helper_error(e: &HelperFailure) -> HelperError {
    match e {
        HelperFailure::Jail(jail) => HelperError::of(jail),
        _ => HelperError {
            kind: "internal".into(),
            message: e.to_string(),
            module: None,
            line: None,
        },
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HelperFailure {
    #[error("read plan: {0}")]
    ReadPlan(std::io::Error),
    #[error("no plan")]
    NoPlan,
    #[error("decode plan: {0}")]
    DecodePlan(serde_json::Error),
    #[error(transparent)]
    Jail(#[from] JailError),
}
