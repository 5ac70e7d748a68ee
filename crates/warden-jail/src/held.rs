//! The engine's side of a pooled one-shot ([`crate::pooled`] is the helper's): a helper
//! started in `pooled` mode, given the plan without its code, that says `Ready` once the
//! sandbox's interpreter waits at its gate; [`HeldJailRun::run`] sends the code and reads the
//! frames to the result as a cold run's ([`crate::client`]).
//!
//! Invariants: the plan is the one [`crate::JailBackend::exec`] would build for the same
//! request (same function), gated; a held run is used once; dropping it unused closes the
//! helper's input, which tears the sandbox down (and the helper dies with this process in
//! any case: parent-death signal); a held run whose helper said anything after `Ready` (its
//! sandbox ended) is not alive and never runs.

use crate::client::{KillHelperOnDrop, read_frame, read_frames};
use crate::launcher::{HelperChild, Launcher};
use crate::plan::{GATED_CODE_ROOM, JailPlan};
use crate::pooled::Start;
use crate::protocol::{Tag, write_frame};
use std::os::fd::AsRawFd;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use warden_engine::{BackendError, EventSender, ExecPlan, HeldRun};
use warden_types::ExecResult;

/// A pooled one-shot sandbox whose interpreter waits for its code.
#[derive(Debug)]
pub struct HeldJailRun {
    child: HelperChild,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    trace: bool,
}

fn internal(what: &str) -> impl FnOnce(std::io::Error) -> BackendError + '_ {
    move |e| BackendError::Internal(format!("{what}: {e}"))
}

impl HeldJailRun {
    /// Starts a helper in `pooled` mode with `plan` (gated, its code empty) and waits until its
    /// interpreter waits at the gate (`Ready`), within `ready_within`.
    pub(crate) async fn start(
        launcher: &Launcher,
        plan: &JailPlan,
        ready_within: Duration,
    ) -> Result<HeldJailRun, BackendError> {
        if !plan.gated {
            return Err(BackendError::Refused(
                "only a gated plan (Python under the run-time import guard, or node) can be held"
                    .into(),
            ));
        }
        let mut child = launcher
            .start(&plan.ids.host, None, crate::helper::POOLED_MODE, false)
            .await?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut frame = Vec::new();
        let encoded = crate::client::encode_plan(plan).map_err(internal("encode plan"))?;
        write_frame(&mut frame, Tag::Plan, &encoded).map_err(internal("frame"))?;
        stdin
            .write_all(&frame)
            .await
            .map_err(internal("send plan to helper"))?;
        let ready = tokio::time::timeout(ready_within, read_frame(&mut stdout)).await;
        match ready {
            Ok(Ok((Tag::Ready, _))) => Ok(HeldJailRun {
                child,
                stdin,
                stdout,
                trace: plan.trace_timing,
            }),
            Ok(Ok((Tag::Error, body))) => Err(crate::client::helper_error(&body)),
            Ok(Ok((tag, _))) => Err(BackendError::Internal(format!(
                "unexpected helper frame {tag:?} before ready"
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(BackendError::Internal(format!(
                "the held sandbox was not ready within {}s",
                ready_within.as_secs()
            ))),
        }
    }
}

#[async_trait::async_trait]
impl HeldRun for HeldJailRun {
    fn alive(&self) -> bool {
        // Nothing comes after `Ready` until the code is sent, unless the sandbox ended.
        let mut poll = libc::pollfd {
            fd: self.stdout.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call; no wait.
        unsafe { libc::poll(&mut poll, 1, 0) == 0 }
    }

    fn fits(&self, plan: &ExecPlan) -> bool {
        plan.code.len() <= GATED_CODE_ROOM
    }

    async fn run(
        self: Box<Self>,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let HeldJailRun {
            mut child,
            mut stdin,
            stdout,
            trace,
        } = *self;
        if trace {
            eprintln!("warden-trace: {:.3} held run starts", crate::monotonic_ms());
        }
        let guard = KillHelperOnDrop::of(&child);
        let start = Start {
            code: plan.code,
            stdin: plan.stdin,
            timeout_ms: plan.limits.timeout.as_millis() as u64,
            quiet: events.is_none(),
        };
        let mut frame = Vec::new();
        let body = serde_json::to_vec(&start)
            .map_err(|e| BackendError::Internal(format!("encode start: {e}")))?;
        write_frame(&mut frame, Tag::Exec, &body).map_err(internal("frame"))?;
        let margin = plan.limits.timeout + Duration::from_secs(10);
        let result = tokio::time::timeout(margin, async {
            stdin
                .write_all(&frame)
                .await
                .map_err(internal("send code to helper"))?;
            read_frames(stdout, events).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(BackendError::Internal(format!(
                "the sandbox helper did not finish within {}s of the timeout",
                margin.as_secs()
            )))
        });
        guard.disarm();
        drop(stdin);
        if result.is_err() {
            let _ = child.start_kill();
        }
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        result
    }
}
