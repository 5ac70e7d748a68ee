//! The one path of an execution, from admission to result, for every front-end: a one-shot
//! ([`Engine::start`]) or a run in a sandbox with a lifetime, with or without a context
//! ([`Sandboxes::start_exec`]).
//!
//! ```text
//! start: admission (slots, queue, the caller's own limit) → defaults (profile, language) and
//!        policies, on a blocking thread in a multi-threaded runtime → the backend's check
//!        (one-shots; a sandbox's spec was checked when it was made)      → Execution
//! Execution::finish | ::run(events) | ::stream: the backend runs → the outcome reported once
//!        to the observer (metrics, trace) → the slot released → the result
//! ```
//!
//! The audit log (see [`crate::audit`]) hears of each execution here too: `execution_started`
//! when it begins to run and `execution_ended` when it ends (also when its future is dropped:
//! `cancelled`), or `execution_refused` when it is refused after admission.
//!
//! Invariants: a front-end calls the engine once per execution and gets either a refusal
//! (before anything ran: its status is the front-end's to choose) or an [`Execution`] that
//! only runs; every admitted execution is reported exactly once (see [`crate::observe`]);
//! dropping an [`Execution`] or the future of its run ends it (the backend's drop guards kill
//! what was started) and releases its slot; a streamed execution runs to its end even when
//! its reader goes away (its events are dropped), as the result is still counted.

use crate::admission::{Admitted, Caller, Refusal};
use crate::audit::{self, Decision};
use crate::backend::{Backend, EventSender};
use crate::observe::{ExecRecord, ExecTrace};
use crate::sandboxes::{PreparedExec, SandboxExec, Sandboxes};
use crate::{Engine, EngineError, ExecPlan, ExecRequest};
use std::sync::Arc;
use tokio::sync::mpsc;
use warden_types::{ExecEvent, ExecResult};

/// What a streamed execution yields: its events as they happen, then its end.
#[derive(Debug)]
pub enum Streamed {
    Event(ExecEvent),
    /// The last item: the result, or why the run failed after it was admitted.
    End(Box<Result<ExecResult, EngineError>>),
}

/// An admitted, checked execution, ready to run (see the module docs).
#[derive(Debug)]
pub struct Execution {
    engine: Engine,
    admitted: Admitted,
    trace: ExecTrace,
    profile: String,
    language: String,
    target: Target,
    audited: Audited,
    /// The writer of a live stdin (see [`SandboxExec::live_stdin`]), until taken.
    stdin: Option<crate::backend::StdinWriter>,
}

/// What the audit log keeps of an execution.
#[derive(Debug)]
struct Audited {
    owner: Option<String>,
    sandbox: Option<String>,
    context: Option<String>,
    /// Empty when the engine has no audit log (the digest is not computed then).
    code_sha256: String,
    code_bytes: usize,
}

impl Audited {
    fn of(engine: &Engine, caller: &Caller, sandbox: Option<&str>, code: &str) -> Audited {
        Audited {
            owner: caller.owner().map(str::to_owned),
            sandbox: sandbox.map(str::to_owned),
            context: None,
            code_sha256: match engine.audit() {
                Some(_) => audit::code_sha256(code),
                None => String::new(),
            },
            code_bytes: code.len(),
        }
    }

    fn refused(&self, engine: &Engine, profile: &str, language: &str, error: &EngineError) {
        engine.record(self.owner.as_deref(), || {
            audit::refused(
                self.sandbox.clone(),
                profile,
                language,
                self.code_sha256.clone(),
                error,
            )
        });
    }
}

/// An execution's `execution_started`, and its `execution_ended` exactly once: when the run
/// returns ([`RunAudit::end`]), or as `cancelled` when its future is dropped first.
struct RunAudit<'a> {
    engine: &'a Engine,
    audited: &'a Audited,
    profile: &'a str,
    execution: String,
    started: std::time::Instant,
    ended: bool,
}

impl<'a> RunAudit<'a> {
    fn begin(engine: &'a Engine, audited: &'a Audited, profile: &'a str, language: &str) -> Self {
        let execution = match engine.audit() {
            Some(_) => format!("ex-{}", uuid::Uuid::now_v7().simple()),
            None => String::new(),
        };
        engine.record(audited.owner.as_deref(), || Decision::ExecutionStarted {
            execution: execution.clone(),
            sandbox: audited.sandbox.clone(),
            context: audited.context.clone(),
            profile: profile.to_owned(),
            language: language.to_owned(),
            code_sha256: audited.code_sha256.clone(),
            code_bytes: audited.code_bytes,
        });
        RunAudit {
            engine,
            audited,
            profile,
            execution,
            started: std::time::Instant::now(),
            ended: false,
        }
    }

    fn record(&mut self, outcome: Result<&ExecResult, &str>) {
        self.ended = true;
        if let Ok(result) = outcome {
            let owner = self.audited.owner.as_deref();
            for d in &result.egress.egress_denied {
                self.engine.record(owner, || Decision::EgressDenied {
                    execution: self.execution.clone(),
                    sandbox: self.audited.sandbox.clone(),
                    host: d.host.clone(),
                    port: d.port,
                    why: d.why.clone(),
                });
            }
            for u in &result.egress.secrets_used {
                self.engine.record(owner, || Decision::SecretUsed {
                    execution: self.execution.clone(),
                    sandbox: self.audited.sandbox.clone(),
                    name: u.name.clone(),
                    host: u.host.clone(),
                });
            }
            for a in &result.egress.egress_allowed {
                self.engine.record(owner, || Decision::EgressAllowed {
                    execution: self.execution.clone(),
                    sandbox: self.audited.sandbox.clone(),
                    host: a.host.clone(),
                    port: a.port,
                    bytes_sent: a.bytes_sent,
                    bytes_received: a.bytes_received,
                });
            }
        }
        self.engine.record(self.audited.owner.as_deref(), || {
            audit::ended(
                std::mem::take(&mut self.execution),
                self.audited.sandbox.clone(),
                self.profile,
                outcome,
                self.started.elapsed().as_millis() as u64,
            )
        });
    }

    fn end(mut self, outcome: Result<&ExecResult, &EngineError>) {
        self.record(outcome.map_err(EngineError::code));
    }
}

impl Drop for RunAudit<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.record(Err("cancelled"));
        }
    }
}

#[derive(Debug)]
enum Target {
    OneShot {
        backend: Arc<dyn Backend>,
        plan: Box<ExecPlan>,
    },
    InSandbox {
        sandboxes: Box<Sandboxes>,
        prepared: Box<PreparedExec>,
    },
}

/// Programs up to this size are checked on the async thread itself: a typical one's check is
/// shorter than the hop to a blocking thread and back that it saves (≈ 40 µs for 1 KiB; the
/// hop ≈ 0.1 ms of a pooled one-shot), and the slowest 1 KiB programs tried (a thousand nested
/// unary operators, a run of decorators) hold the thread for 0.1–0.25 ms (`warden-policy`'s
/// example `check_time`, docs/benchmarks.md, session 29). Larger ones go to a blocking thread.
const CHECKED_INLINE_BYTES: usize = 1024;

/// Runs CPU-bound work (parsing the code of `code_len` bytes for the policies) where it does
/// not hold up other tasks: on a blocking thread when the runtime has several workers and the
/// code is larger than [`CHECKED_INLINE_BYTES`]; inline otherwise (a current-thread runtime, the
/// CLI's, has nothing else to run, and a thread costs start-up).
async fn off_the_async_threads<T: Send + 'static>(
    code_len: usize,
    work: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    if code_len <= CHECKED_INLINE_BYTES {
        return work();
    }
    match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => work(),
        _ => tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| EngineError::Internal(format!("policy check task: {e}")))?,
    }
}

impl Engine {
    /// Admits the caller, or refuses at once (the queue full, the caller's own limit reached).
    pub(crate) async fn admit(&self, caller: &Caller) -> Result<Admitted, EngineError> {
        let retry_after_secs = self.admission.limits().retry_after_secs;
        self.admission.admit(caller).await.map_err(|r| match r {
            Refusal::Busy => EngineError::Busy {
                running: self.admission.limits().max_concurrent,
                queued: self.admission.limits().max_queued,
                retry_after_secs,
            },
            Refusal::KeyBusy { key, max } => EngineError::KeyBusy {
                key,
                max,
                retry_after_secs,
            },
            Refusal::Closed => EngineError::ShuttingDown,
        })
    }

    /// Reports an execution to the observer, if there is one.
    pub(crate) fn report(
        &self,
        profile: &str,
        language: &str,
        outcome: Result<&ExecResult, &EngineError>,
        trace: ExecTrace,
    ) {
        if let Some(observer) = &self.observer {
            observer.execution(ExecRecord {
                profile,
                language,
                outcome,
                trace: trace.finish(),
            });
        }
    }

    /// A one-shot execution in a fresh sandbox: admitted, resolved, its policies passed and
    /// its backend's check done. Refusals after admission are reported.
    pub async fn start(&self, caller: &Caller, req: ExecRequest) -> Result<Execution, EngineError> {
        let mut trace = ExecTrace::start();
        trace.stage("queue");
        let admitted = self.admit(caller).await?;
        trace.stage("policies");
        let (asked_profile, asked_language) = self.asked(&req);
        let audited = Audited::of(self, caller, None, &req.code);
        let engine = self.clone();
        let code_len = req.code.len();
        let (profile, plan) =
            match off_the_async_threads(code_len, move || engine.prepare(&req)).await {
                Ok(prepared) => prepared,
                Err(e) => {
                    audited.refused(self, &asked_profile, &asked_language, &e);
                    self.report(&asked_profile, &asked_language, Err(&e), trace);
                    return Err(e);
                }
            };
        let language = plan.language.to_string();
        let checked = self
            .backend_for(&profile)
            .cloned()
            .and_then(|backend| Ok(backend.check(&plan).map(|()| backend)?));
        match checked {
            Ok(backend) => Ok(Execution {
                engine: self.clone(),
                admitted,
                trace,
                profile,
                language,
                target: Target::OneShot {
                    backend,
                    plan: Box::new(plan),
                },
                audited,
                stdin: None,
            }),
            Err(e) => {
                audited.refused(self, &profile, &language, &e);
                self.report(&profile, &language, Err(&e), trace);
                Err(e)
            }
        }
    }

    /// Runs one request to the end as the default caller (the CLI's path): [`Engine::start`],
    /// then [`Execution::run`].
    pub async fn execute(
        &self,
        req: ExecRequest,
        events: Option<EventSender>,
    ) -> Result<ExecResult, EngineError> {
        self.start(&Caller::default(), req).await?.run(events).await
    }
}

impl Sandboxes {
    /// An execution in a live sandbox of the caller's (a cell, when `req.context` is set):
    /// an unknown sandbox is refused before queueing; then as [`Engine::start`].
    pub async fn start_exec(
        &self,
        caller: &Caller,
        id: &str,
        req: SandboxExec,
    ) -> Result<Execution, EngineError> {
        let entry = self.find(caller.owner(), id)?;
        let engine = self.engine().clone();
        let mut trace = ExecTrace::start();
        trace.stage("queue");
        let admitted = engine.admit(caller).await?;
        trace.stage("policies");
        let asked_language = req
            .language
            .clone()
            .unwrap_or_else(|| entry.language.clone());
        let profile = entry.profile.clone();
        let mut audited = Audited::of(&engine, caller, Some(&entry.id), &req.code);
        audited.context = req.context.clone();
        let this = self.clone();
        let code_len = req.code.len();
        match off_the_async_threads(code_len, move || this.prepare_in(entry, req)).await {
            Ok(mut prepared) => Ok(Execution {
                stdin: prepared.stdin_writer.take(),
                language: prepared.plan.language.to_string(),
                engine,
                admitted,
                trace,
                profile,
                target: Target::InSandbox {
                    sandboxes: Box::new(self.clone()),
                    prepared: Box::new(prepared),
                },
                audited,
            }),
            Err(e) => {
                audited.refused(&engine, &profile, &asked_language, &e);
                engine.report(&profile, &asked_language, Err(&e), trace);
                Err(e)
            }
        }
    }
}

impl Execution {
    /// The profile it resolved to.
    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// The language it runs in.
    pub fn language(&self) -> &str {
        &self.language
    }

    /// The writer of its live stdin (an execution started with
    /// [`SandboxExec::live_stdin`]), once: chunks sent go to the program in order while it
    /// runs; dropping the writer (every clone) closes the program's stdin. A send fails once
    /// the execution has ended.
    pub fn take_stdin(&mut self) -> Option<crate::backend::StdinWriter> {
        self.stdin.take()
    }

    /// Runs to the end; output events go to `events` as they happen, if given (the result is
    /// returned, not sent).
    pub async fn run(self, events: Option<EventSender>) -> Result<ExecResult, EngineError> {
        let Execution {
            engine,
            admitted,
            mut trace,
            profile,
            language,
            target,
            audited,
            stdin,
        } = self;
        // A writer nobody took closes the program's stdin at once.
        drop(stdin);
        trace.stage("run");
        let run_audit = RunAudit::begin(&engine, &audited, &profile, &language);
        let outcome = match target {
            Target::OneShot { backend, plan } => match engine.take_held(&plan) {
                // A sandbox held for exactly this plan (see `oneshot_pool`): fresh, built by
                // the same steps, its interpreter already started.
                Some(held) => held.run(*plan, events).await.map_err(EngineError::from),
                None => backend.exec(*plan, events).await.map_err(EngineError::from),
            },
            Target::InSandbox {
                sandboxes,
                prepared,
            } => sandboxes.run_exec(*prepared, events).await,
        };
        drop(admitted);
        run_audit.end(outcome.as_ref());
        engine.report(&profile, &language, outcome.as_ref(), trace);
        outcome
    }

    /// Runs to the end without events.
    pub async fn finish(self) -> Result<ExecResult, EngineError> {
        self.run(None).await
    }

    /// Runs on its own task; its events, then its end, arrive on the receiver. A reader that
    /// goes away does not stop the run (see the module docs).
    pub fn stream(self) -> mpsc::Receiver<Streamed> {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let (events_tx, mut events_rx) = mpsc::channel::<ExecEvent>(64);
            let forward = {
                let tx = tx.clone();
                async move {
                    while let Some(event) = events_rx.recv().await {
                        if tx.send(Streamed::Event(event)).await.is_err() {
                            break;
                        }
                    }
                }
            };
            let (outcome, ()) = tokio::join!(self.run(Some(events_tx)), forward);
            let _ = tx.send(Streamed::End(Box::new(outcome))).await;
        });
        rx
    }
}
