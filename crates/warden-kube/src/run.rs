//! One execution in a ready sandbox pod, through the exec subresource:
//!
//! 1. `prepare`: the code goes in on stdin and is written to `/code/<file>`; the pod's cgroup
//!    counters (`memory.events`, `pids.events`) are read as the baseline.
//! 2. `run`: the interpreter, under `prlimit` (file size, processes, no core dumps), with the
//!    plan's stdin; stdout and stderr stream back as events and are kept up to the cap.
//! 3. `reap`: every process of the sandbox's uid except the pod's pid 1 is killed (double-forked
//!    survivors too) and the counters are read again.
//! 4. `collect`: `tar` of `/workspace/output` streams back and becomes the artifacts (the
//!    engine's shared [`warden_engine::shape::archive`]).
//!
//! Invariants: the wall timeout and the output cap are enforced here, by stopping the stream
//! and killing every process of the sandbox in step 3, which runs after every execution —
//! so no process of one run is alive during the next or during file access; the reason is
//! chosen by the jail's precedence (output > memory > pids > timeout > signal > exited); a
//! sandbox whose container died during the run is reported by what its status says
//! (OOMKilled is the memory limit), never as a normal exit.

use crate::cluster::{Cluster, ClusterError, ExecSession, ExitStatus};
use crate::commands::{self, Layout};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_engine::import_guard;
use warden_engine::shape::archive::{Collected, artifacts_from_tar};
use warden_engine::shape::{CappedOutput, Utf8Carry};
use warden_engine::{EventSender, ExecPlan};
use warden_types::{ExecEvent, ExecResult, Limits, Reason};

/// A failed step of an execution.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("write the code into the pod: {0}")]
    Prepare(String),
    #[error("the image cannot run the program: {0}")]
    NotStarted(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The pod's container ended during the run (reason from its status, e.g. Evicted).
    #[error("the sandbox pod ended during the run: {0}")]
    PodEnded(String),
    /// The import guard refused an import, or the guarded run ran without it (see
    /// `warden_engine::import_guard::judge`).
    #[error(transparent)]
    ImportGuard(warden_engine::BackendError),
}

/// The counters of the pod's cgroup that say a limit was hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub oom_kills: u64,
    pub pids_max: u64,
}

impl Counters {
    /// Reads the output of the scripts' counter loop.
    pub fn parse(text: &str) -> Counters {
        let mut c = Counters::default();
        let mut file = "";
        for line in text.lines() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                file = if name == "memory.events" || name == "pids.events" {
                    name
                } else {
                    ""
                };
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(key), Some(value)) = (words.next(), words.next()) else {
                continue;
            };
            let value = value.parse().unwrap_or(0);
            match (file, key) {
                ("memory.events", "oom_kill") => c.oom_kills = value,
                ("pids.events", "max") => c.pids_max = value,
                _ => {}
            }
        }
        c
    }
}

/// What step 2 kept: stdout, stderr (indexed as the pump reads them).
type Relay = [CappedOutput; 2];

/// One execution; `pod` is ready. The caller reaps the pod afterwards when this fails.
pub async fn execute(
    cluster: &dyn Cluster,
    pod: &str,
    layout: &Layout,
    plan: &ExecPlan,
    events: Option<EventSender>,
) -> Result<ExecResult, RunError> {
    let guarded = plan.import_guard.is_some();
    let mut input = plan.code.as_bytes().to_vec();
    if guarded {
        input.extend_from_slice(import_guard::SOURCE.as_bytes());
    }
    let prepared = commands::call(
        cluster,
        pod,
        commands::prepare(layout, &plan.file_name, guarded.then_some(plan.code.len())),
        &input,
        COUNTERS_CAP,
    )
    .await?;
    if let ExitStatus::NotStarted(why) = prepared.status {
        return Err(RunError::NotStarted(why));
    }
    if prepared.status != ExitStatus::Code(0) {
        return Err(RunError::Prepare(format!(
            "{:?}: {}",
            prepared.status, prepared.stderr
        )));
    }
    let before = Counters::parse(&String::from_utf8_lossy(&prepared.stdout));

    let started = Instant::now();
    let session = cluster.exec(pod, commands::program(layout, plan)).await?;
    let ([stdout, stderr], ended) = relay(session, plan, events).await;
    let duration_ms = started.elapsed().as_millis() as u64;

    // Step 3 runs whatever happened: it is what makes the timeout and the output cap final.
    let reaped = commands::call(cluster, pod, commands::reap(), &[], COUNTERS_CAP).await;
    let after = match &reaped {
        Ok(out) => Some(Counters::parse(&String::from_utf8_lossy(&out.stdout))),
        Err(_) => None,
    };
    let (exit, stopped) = ended;
    if let ExitStatus::NotStarted(why) = &exit {
        return Err(RunError::NotStarted(why.clone()));
    }
    if exit == ExitStatus::Code(127)
        && let Some(line) = String::from_utf8_lossy(stderr.bytes())
            .lines()
            .find(|l| l.starts_with(commands::NOT_FOUND_MARKER))
    {
        return Err(RunError::NotStarted(format!(
            "the image has no {:?}",
            &line[commands::NOT_FOUND_MARKER.len()..]
        )));
    }
    // The container is gone (its memory was exhausted with the kubelet's group OOM kill, or
    // the pod was evicted): its status says which.
    let container_end = if after.is_none() || (exit == ExitStatus::Lost && stopped.is_none()) {
        let pod = cluster.get_pod(pod).await.ok();
        pod.as_ref().and_then(crate::readiness::termination_reason)
    } else {
        None
    };
    let oom = match (&after, container_end.as_deref()) {
        (_, Some("OOMKilled")) => true,
        (Some(after), _) => after.oom_kills > before.oom_kills,
        _ => false,
    };
    if let Some(reason) = &container_end
        && reason != "OOMKilled"
    {
        return Err(RunError::PodEnded(reason.clone()));
    }
    if exit == ExitStatus::Lost && stopped.is_none() && container_end.is_none() {
        return Err(RunError::Cluster(ClusterError::Unavailable {
            op: format!("exec in pod {pod}"),
            message: "the exec stream closed without the program's status".into(),
        }));
    }
    if after.is_none() && !oom {
        return Err(match reaped {
            Err(e) => RunError::Cluster(e),
            Ok(_) => RunError::PodEnded("unknown".into()),
        });
    }
    let pids_hit = after.is_some_and(|a| a.pids_max > before.pids_max);
    let (exit_code, signal) = match exit {
        // The runtime reports a signal's death as 128+N, as a shell does.
        ExitStatus::Code(c) if (129..=128 + 64).contains(&c) => (None, Some(c - 128)),
        ExitStatus::Code(c) => (Some(c), None),
        _ => (None, Some(9)),
    };
    let reason = if stopped == Some(Stop::Output) {
        Reason::Output
    } else if oom {
        Reason::Memory
    } else if pids_hit {
        Reason::Pids
    } else if stopped == Some(Stop::Timeout) {
        Reason::Timeout
    } else if signal.is_some() {
        Reason::Signal
    } else {
        Reason::Exited
    };
    if guarded && container_end.is_none() {
        let out = commands::call(
            cluster,
            pod,
            commands::guard_report(layout),
            &[],
            import_guard::MAX_REPORT as u64,
        )
        .await?;
        import_guard::judge_reason(&import_guard::parse_report(&out.stdout), &reason)
            .map_err(RunError::ImportGuard)?;
    }
    let (artifacts, skipped_artifacts) = if container_end.is_some() {
        // The container was killed for memory: its workspace went with it.
        (
            vec![],
            vec![warden_types::SkippedArtifact {
                name: commands::OUTPUT_DIR.into(),
                why: "the sandbox's container was killed for memory; its workspace is gone".into(),
            }],
        )
    } else {
        collect(cluster, pod, layout, plan).await?
    };
    Ok(ExecResult {
        stdout_truncated: stdout.is_truncated(),
        stderr_truncated: stderr.is_truncated(),
        stdout: stdout.into_text(),
        stderr: stderr.into_text(),
        exit_code,
        signal,
        reason,
        duration_ms,
        artifacts,
        skipped_artifacts,
        cell: Default::default(),
        egress: Default::default(),
    })
}

/// Why Warden stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Timeout,
    Output,
}

/// Step 2: feeds stdin, relays output within the cap, waits for the status within the timeout.
async fn relay(
    session: ExecSession,
    plan: &ExecPlan,
    events: Option<EventSender>,
) -> (Relay, (ExitStatus, Option<Stop>)) {
    let ExecSession {
        stdin: mut stdin_w,
        mut stdout,
        mut stderr,
        status,
        keep,
    } = session;
    let limit = plan.limits.max_output_bytes;
    let mut r: Relay = [CappedOutput::new(limit), CappedOutput::new(limit)];
    let mut carry = [Utf8Carry::default(), Utf8Carry::default()];
    let input = plan.stdin.clone();
    let feed = async move {
        let _ = stdin_w.write_all(&input).await;
        let _ = stdin_w.shutdown().await;
    };
    let pump = async {
        let (mut out_open, mut err_open) = (true, true);
        let mut a = vec![0u8; 64 * 1024];
        let mut b = vec![0u8; 64 * 1024];
        while out_open || err_open {
            let (index, n) = tokio::select! {
                n = stdout.read(&mut a), if out_open => (0, n.unwrap_or(0)),
                n = stderr.read(&mut b), if err_open => (1, n.unwrap_or(0)),
            };
            if n == 0 {
                if index == 0 {
                    out_open = false;
                } else {
                    err_open = false;
                }
                continue;
            }
            let chunk = if index == 0 { &a[..n] } else { &b[..n] };
            let kept = r[index].keep(chunk);
            if let Some(tx) = &events
                && !kept.is_empty()
            {
                let text = carry[index].push(kept);
                let timestamp = warden_types::now_ms();
                let event = if index == 0 {
                    ExecEvent::Stdout { text, timestamp }
                } else {
                    ExecEvent::Stderr { text, timestamp }
                };
                // A receiver that went away only loses the live view.
                let _ = tx.send(event).await;
            }
            if r[index].is_truncated() {
                return Some(Stop::Output);
            }
        }
        None
    };
    let run = async {
        let (_, stop) = tokio::join!(feed, pump);
        match stop {
            Some(stop) => (ExitStatus::Lost, Some(stop)),
            None => (status.await, None),
        }
    };
    let outcome = match tokio::time::timeout(plan.limits.timeout, run).await {
        Ok(outcome) => outcome,
        Err(_) => (ExitStatus::Lost, Some(Stop::Timeout)),
    };
    // Closing the stream does not stop the process in the pod; the reap step does.
    drop(keep);
    (r, outcome)
}

/// Step 4: the artifacts of the output folder.
async fn collect(
    cluster: &dyn Cluster,
    pod: &str,
    layout: &Layout,
    plan: &ExecPlan,
) -> Result<
    (
        Vec<warden_types::Artifact>,
        Vec<warden_types::SkippedArtifact>,
    ),
    RunError,
> {
    let cap = archive_cap(&plan.limits);
    let out = commands::call(cluster, pod, commands::collect(layout), &[], cap).await?;
    // A missing output folder (the program removed it) is no artifacts: tar's status is
    // not an error here.
    let Collected { artifacts, skipped } =
        artifacts_from_tar(&out.stdout, commands::OUTPUT_DIR, &plan.limits, !out.cut);
    Ok((artifacts, skipped))
}

/// At most this many bytes of the output folder's archive are read: the artifact bytes the
/// limits allow plus room for headers (512 bytes each, a few per entry) of the entries looked
/// at.
pub fn archive_cap(limits: &Limits) -> u64 {
    limits.max_artifact_bytes + 1024 * (u64::from(limits.max_artifacts) + 64) + 1024
}

/// The counters' output is a few lines; more is not read.
const COUNTERS_CAP: u64 = 64 * 1024;
