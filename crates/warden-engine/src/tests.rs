use super::*;
use std::sync::Mutex;
use warden_types::{ExecResult, Reason};

/// Records the plans it gets and answers with a fixed result.
#[derive(Debug, Default)]
struct RecordingBackend {
    plans: Mutex<Vec<ExecPlan>>,
    refuse: Option<String>,
    checks: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Backend for RecordingBackend {
    fn name(&self) -> &'static str {
        "recording"
    }
    fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
        self.checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match &self.refuse {
            Some(why) => Err(BackendError::Refused(why.clone())),
            None => Ok(()),
        }
    }
    async fn exec(
        &self,
        plan: ExecPlan,
        _: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        self.plans.lock().unwrap().push(plan);
        Ok(ExecResult {
            stdout: "ok\n".into(),
            stderr: String::new(),
            exit_code: Some(0),
            signal: None,
            reason: Reason::Exited,
            duration_ms: 1,
            stdout_truncated: false,
            stderr_truncated: false,
            artifacts: vec![],
            skipped_artifacts: vec![],
            cell: Default::default(),
            egress: Default::default(),
        })
    }

    async fn create_sandbox(
        &self,
        _spec: crate::SandboxSpec,
    ) -> Result<std::sync::Arc<dyn crate::BackendSandbox>, BackendError> {
        Err(BackendError::Refused("sandboxes: not in this fake".into()))
    }

    async fn remove_orphans(&self, _live: &[String]) -> Result<usize, BackendError> {
        Ok(0)
    }
}

fn engine(backend: Arc<RecordingBackend>) -> Engine {
    Engine::new(Arc::new(Settings::builtin())).with_backend(BackendKind::Jail, backend)
}

fn req(code: &str) -> ExecRequest {
    ExecRequest {
        code: code.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_default_profile_and_language_are_used() {
    let b = Arc::new(RecordingBackend::default());
    engine(b.clone())
        .execute(req("print(1)"), None)
        .await
        .unwrap();
    let plan = b.plans.lock().unwrap().pop().unwrap();
    assert_eq!(plan.language.as_str(), "python");
    assert_eq!(plan.command, ["python3"]);
    assert_eq!(plan.file_name, "main.py");
    assert_eq!(plan.limits.timeout, Duration::from_secs(30));
    assert!(!plan.network_enabled);
}

#[tokio::test]
async fn policies_refuse_before_the_backend_runs() {
    let b = Arc::new(RecordingBackend::default());
    let err = engine(b.clone())
        .execute(req("import os"), None)
        .await
        .unwrap_err();
    match err {
        EngineError::PolicyViolation(v) => {
            assert_eq!((v.policy, v.line), ("forbidden_imports", Some(1)))
        }
        other => panic!("{other:?}"),
    }
    assert!(b.plans.lock().unwrap().is_empty());
}

#[tokio::test]
async fn requests_above_the_quota_are_refused() {
    let b = Arc::new(RecordingBackend::default());
    let mut r = req("print(1)");
    r.timeout = Some(Duration::from_secs(120));
    let err = engine(b.clone()).execute(r, None).await.unwrap_err();
    assert!(
        matches!(err, EngineError::PolicyViolation(ref v) if v.policy == "resource_quota"),
        "{err:?}"
    );
    let mut r = req("print(1)");
    r.memory_mb = Some(64);
    r.timeout = Some(Duration::from_secs(5));
    engine(b.clone()).execute(r, None).await.unwrap();
    let plan = b.plans.lock().unwrap().pop().unwrap();
    assert_eq!(
        (plan.limits.memory_mb, plan.limits.timeout),
        (64, Duration::from_secs(5))
    );
}

#[tokio::test]
async fn an_argument_with_a_nul_byte_is_a_bad_request_not_a_failed_start() {
    let b = Arc::new(RecordingBackend::default());
    let mut r = req("print(1)");
    r.args = vec!["ok".into(), "a\0b".into()];
    let err = engine(b.clone()).execute(r, None).await.unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidRequest { field: "args", .. }),
        "{err:?}"
    );
    assert!(b.plans.lock().unwrap().is_empty());
}

#[tokio::test]
async fn unknown_profiles_and_languages_are_named() {
    let b = Arc::new(RecordingBackend::default());
    let mut r = req("x");
    r.profile = Some("gpu".into());
    assert_eq!(
        engine(b.clone())
            .execute(r, None)
            .await
            .unwrap_err()
            .to_string(),
        "unknown profile \"gpu\" (known: data_science, standard)"
    );
    let mut r = req("x");
    r.language = Some("cobol".into());
    assert_eq!(
        engine(b).execute(r, None).await.unwrap_err().to_string(),
        "unknown language \"cobol\" (known: bash, javascript, python)"
    );
}

#[tokio::test]
async fn other_languages_use_their_runtime_and_skip_python_policies() {
    let b = Arc::new(RecordingBackend::default());
    let mut r = req("require('fs')");
    r.language = Some("js".into());
    engine(b.clone()).execute(r, None).await.unwrap();
    let plan = b.plans.lock().unwrap().pop().unwrap();
    assert_eq!(
        (plan.language.as_str(), plan.command[0].as_str()),
        ("javascript", "node")
    );
}

#[tokio::test]
async fn a_backend_refusal_is_passed_on_and_a_missing_backend_is_named() {
    let b = Arc::new(RecordingBackend {
        refuse: Some("no cgroups".into()),
        ..Default::default()
    });
    let err = engine(b).execute(req("print(1)"), None).await.unwrap_err();
    assert_eq!(err.to_string(), "refused: no cgroups");
    let bare = Engine::new(Arc::new(Settings::builtin()))
        .with_unavailable_backend(BackendKind::Jail, "gone".into());
    let err = bare.execute(req("print(1)"), None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "profile \"standard\" uses the jail backend, which is not available: gone"
    );
}

/// Counts what the engine reports.
#[derive(Debug, Default)]
struct Reports(Mutex<Vec<(String, Vec<&'static str>)>>);

impl Observer for Reports {
    fn execution(&self, record: ExecRecord<'_>) {
        let outcome = match record.outcome {
            Ok(r) => r.reason.to_string(),
            Err(e) => e.code().to_owned(),
        };
        let stages = record.trace.stages.iter().map(|s| s.0).collect();
        self.0.lock().unwrap().push((outcome, stages));
    }
}

#[tokio::test]
async fn one_engine_call_checks_once_runs_once_and_reports_once() {
    let b = Arc::new(RecordingBackend::default());
    let reports = Arc::new(Reports::default());
    let engine = engine(b.clone()).with_observer(reports.clone());
    let execution = engine
        .start(&Caller::default(), req("print(1)"))
        .await
        .unwrap();
    assert_eq!(execution.profile(), "standard");
    assert_eq!(execution.language(), "python");
    // Checked before it was handed out; nothing ran yet, nothing reported yet.
    assert_eq!(b.checks.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(b.plans.lock().unwrap().is_empty());
    assert!(reports.0.lock().unwrap().is_empty());
    assert_eq!(engine.admission().running(), 1);
    execution.finish().await.unwrap();
    assert_eq!(b.checks.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(b.plans.lock().unwrap().len(), 1);
    assert_eq!(engine.admission().running(), 0);
    // A refusal by a policy is reported too, without a run stage.
    engine
        .start(&Caller::default(), req("import os"))
        .await
        .unwrap_err();
    assert_eq!(
        *reports.0.lock().unwrap(),
        [
            ("exited".to_owned(), vec!["queue", "policies", "run"]),
            ("policy_violation".to_owned(), vec!["queue", "policies"]),
        ]
    );
}

#[tokio::test]
async fn a_stream_ends_with_the_result_and_a_dropped_execution_frees_its_slot() {
    let b = Arc::new(RecordingBackend::default());
    let engine = engine(b.clone());
    let mut items = engine
        .start(&Caller::default(), req("print(1)"))
        .await
        .unwrap()
        .stream();
    let mut last = None;
    while let Some(item) = items.recv().await {
        last = Some(item);
    }
    match last {
        Some(Streamed::End(outcome)) => assert_eq!(outcome.unwrap().stdout, "ok\n"),
        other => panic!("{other:?}"),
    }
    let dropped = engine
        .start(&Caller::default(), req("print(1)"))
        .await
        .unwrap();
    assert_eq!(engine.admission().running(), 1);
    drop(dropped);
    assert_eq!(engine.admission().running(), 0);
    assert_eq!(
        b.plans.lock().unwrap().len(),
        1,
        "the dropped one never ran"
    );
}

fn audited(backend: Arc<RecordingBackend>) -> (Engine, Arc<AuditLog>) {
    let log = Arc::new(AuditLog::new(None, 100));
    (engine(backend).with_audit(log.clone()), log)
}

fn events(log: &AuditLog) -> Vec<serde_json::Value> {
    log.read(Visible::All, 0, 100)
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

#[tokio::test]
async fn an_execution_is_audited_as_started_then_ended_with_its_code_digest_only() {
    let (engine, log) = audited(Arc::new(RecordingBackend::default()));
    let caller = Caller {
        owner: Some("alice".into()),
        ..Caller::default()
    };
    let code = "print('a secret of the code')";
    engine
        .start(&caller, req(code))
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    let events = events(&log);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["event"], "execution_started");
    assert_eq!(events[1]["event"], "execution_ended");
    assert_eq!(events[0]["execution"], events[1]["execution"]);
    assert!(events[0]["execution"].as_str().unwrap().starts_with("ex-"));
    assert_eq!(events[0]["owner"], "alice");
    assert_eq!(events[0]["code_sha256"], audit::code_sha256(code));
    assert_eq!(events[0]["code_bytes"], code.len());
    assert_eq!(events[1]["reason"], "exited");
    assert_eq!(events[1]["exit_code"], 0);
    assert!(!serde_json::to_string(&events).unwrap().contains("secret"));
}

#[tokio::test]
async fn a_refusal_after_admission_is_audited_once_and_nothing_runs() {
    let b = Arc::new(RecordingBackend::default());
    let (engine, log) = audited(b.clone());
    let err = engine
        .start(&Caller::default(), req("import socket"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "policy_violation");
    let events = events(&log);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "execution_refused");
    assert_eq!(events[0]["policy"], "forbidden_imports");
    assert_eq!(events[0]["module"], "socket");
    assert_eq!(events[0]["line"], 1);
    assert!(b.plans.lock().unwrap().is_empty());
}

/// A backend whose runs never end.
#[derive(Debug)]
struct NeverEnds;

#[async_trait::async_trait]
impl Backend for NeverEnds {
    fn name(&self) -> &'static str {
        "never-ends"
    }
    fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
        Ok(())
    }
    async fn exec(&self, _: ExecPlan, _: Option<EventSender>) -> Result<ExecResult, BackendError> {
        std::future::pending().await
    }
    async fn create_sandbox(
        &self,
        _spec: crate::SandboxSpec,
    ) -> Result<std::sync::Arc<dyn crate::BackendSandbox>, BackendError> {
        Err(BackendError::Refused("sandboxes: not in this fake".into()))
    }
    async fn remove_orphans(&self, _live: &[String]) -> Result<usize, BackendError> {
        Ok(0)
    }
}

#[tokio::test]
async fn a_run_whose_future_is_dropped_is_audited_as_cancelled() {
    let log = Arc::new(AuditLog::new(None, 100));
    let engine = Engine::new(Arc::new(Settings::builtin()))
        .with_backend(BackendKind::Jail, Arc::new(NeverEnds))
        .with_audit(log.clone());
    let execution = engine
        .start(&Caller::default(), req("print(1)"))
        .await
        .unwrap();
    // Polled once (started, then waiting on the backend), then dropped before its end.
    let mut run = Box::pin(execution.finish());
    let waker = std::task::Waker::noop();
    assert!(
        run.as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_pending()
    );
    assert_eq!(events(&log).len(), 1);
    drop(run);
    let events = events(&log);
    assert_eq!(
        events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["execution_started", "execution_ended"],
        "{events:?}"
    );
    assert_eq!(events[1]["error"], "cancelled");
    assert_eq!(events[0]["execution"], events[1]["execution"]);
}

/// A sandbox that records its plans and answers with what it read of a live stdin.
#[derive(Debug, Default)]
struct StdinSandbox {
    plans: Mutex<Vec<ExecPlan>>,
}

#[async_trait::async_trait]
impl crate::BackendSandbox for StdinSandbox {
    async fn exec(
        &self,
        plan: ExecPlan,
        _: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        self.plans.lock().unwrap().push(plan);
        Ok(ok_result(String::new()))
    }
    async fn exec_with_stdin(
        &self,
        plan: ExecPlan,
        _: Option<EventSender>,
        mut stdin: crate::StdinReceiver,
    ) -> Result<ExecResult, BackendError> {
        let mut read = plan.stdin.clone();
        self.plans.lock().unwrap().push(plan);
        while let Some(chunk) = stdin.recv().await {
            read.extend(chunk);
        }
        Ok(ok_result(String::from_utf8(read).unwrap()))
    }
    async fn write_file(
        &self,
        _: &warden_types::WorkspacePath,
        _: Vec<u8>,
    ) -> Result<(), BackendError> {
        Ok(())
    }
    async fn read_file(
        &self,
        _: &warden_types::WorkspacePath,
        _: u64,
    ) -> Result<Vec<u8>, BackendError> {
        Ok(vec![])
    }
    async fn list_files(&self, _: usize) -> Result<Vec<warden_types::FileEntry>, BackendError> {
        Ok(vec![])
    }
    async fn destroy(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

fn ok_result(stdout: String) -> ExecResult {
    ExecResult {
        stdout,
        stderr: String::new(),
        exit_code: Some(0),
        signal: None,
        reason: Reason::Exited,
        duration_ms: 1,
        stdout_truncated: false,
        stderr_truncated: false,
        artifacts: vec![],
        skipped_artifacts: vec![],
        cell: Default::default(),
        egress: Default::default(),
    }
}

#[derive(Debug)]
struct StdinBackend(Arc<StdinSandbox>);

#[async_trait::async_trait]
impl Backend for StdinBackend {
    fn name(&self) -> &'static str {
        "stdin"
    }
    fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
        Ok(())
    }
    async fn exec(&self, _: ExecPlan, _: Option<EventSender>) -> Result<ExecResult, BackendError> {
        Ok(ok_result(String::new()))
    }
    async fn create_sandbox(
        &self,
        _: crate::SandboxSpec,
    ) -> Result<Arc<dyn crate::BackendSandbox>, BackendError> {
        Ok(self.0.clone())
    }
    async fn remove_orphans(&self, _: &[String]) -> Result<usize, BackendError> {
        Ok(0)
    }
}

async fn stdin_sandbox(home: Option<&str>) -> (Sandboxes, Arc<StdinSandbox>, String) {
    let sandbox = Arc::new(StdinSandbox::default());
    let engine = Engine::new(Arc::new(Settings::builtin()))
        .with_backend(BackendKind::Jail, Arc::new(StdinBackend(sandbox.clone())));
    let sandboxes = Sandboxes::new(engine, 4);
    let id = sandboxes
        .create(
            &Caller::default(),
            CreateSandbox {
                home: home.map(str::to_owned),
                ..CreateSandbox::default()
            },
        )
        .await
        .unwrap()
        .id;
    (sandboxes, sandbox, id)
}

#[tokio::test]
async fn an_executions_env_and_cwd_reach_the_backend_checked() {
    let (s, sandbox, id) = stdin_sandbox(Some("/home/user")).await;
    let env: std::collections::BTreeMap<String, String> =
        [("GREETING".to_owned(), "hi".to_owned())].into();
    s.start_exec(
        &Caller::default(),
        &id,
        SandboxExec {
            code: "echo".into(),
            language: Some("bash".into()),
            env: env.clone(),
            cwd: Some("/home/user/sub/".into()),
            ..SandboxExec::default()
        },
    )
    .await
    .unwrap()
    .finish()
    .await
    .unwrap();
    let plan = sandbox.plans.lock().unwrap()[0].clone();
    assert_eq!(plan.env, env);
    assert_eq!(plan.cwd.as_deref(), Some("/home/user/sub"));
    for (req, field) in [
        (
            SandboxExec {
                cwd: Some("/etc".into()),
                ..SandboxExec::default()
            },
            "cwd",
        ),
        (
            SandboxExec {
                env: [("WARDEN_OUTPUT_DIR".to_owned(), "/".to_owned())].into(),
                ..SandboxExec::default()
            },
            "env",
        ),
        (
            SandboxExec {
                env: [("A".to_owned(), "b".to_owned())].into(),
                context: Some(crate::DEFAULT_CONTEXT.into()),
                ..SandboxExec::default()
            },
            "env",
        ),
    ] {
        match s.start_exec(&Caller::default(), &id, req).await {
            Err(EngineError::InvalidRequest { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    assert_eq!(
        sandbox.plans.lock().unwrap().len(),
        1,
        "nothing refused ran"
    );
}

#[tokio::test]
async fn a_live_stdin_gets_the_writers_chunks_and_ends_when_it_is_dropped() {
    let (s, _, id) = stdin_sandbox(None).await;
    let mut execution = s
        .start_exec(
            &Caller::default(),
            &id,
            SandboxExec {
                code: "cat".into(),
                language: Some("bash".into()),
                stdin: b"first ".to_vec(),
                live_stdin: true,
                ..SandboxExec::default()
            },
        )
        .await
        .unwrap();
    let stdin = execution.take_stdin().expect("a live stdin");
    assert!(execution.take_stdin().is_none(), "taken once");
    let run = tokio::spawn(execution.finish());
    stdin.send(b"second ".to_vec()).await.unwrap();
    stdin.send(b"third".to_vec()).await.unwrap();
    drop(stdin);
    assert_eq!(run.await.unwrap().unwrap().stdout, "first second third");
}

#[tokio::test]
async fn a_live_stdin_nobody_took_is_closed_at_the_start() {
    let (s, _, id) = stdin_sandbox(None).await;
    let result = s
        .start_exec(
            &Caller::default(),
            &id,
            SandboxExec {
                code: "cat".into(),
                language: Some("bash".into()),
                stdin: b"only".to_vec(),
                live_stdin: true,
                ..SandboxExec::default()
            },
        )
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(result.stdout, "only");
}

#[tokio::test]
async fn a_sandboxs_env_is_checked_at_create() {
    let (s, _, _) = stdin_sandbox(None).await;
    let err = s
        .create(
            &Caller::default(),
            CreateSandbox {
                env: [("BAD-NAME".to_owned(), "x".to_owned())].into(),
                ..CreateSandbox::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidRequest { field: "env", .. }),
        "{err:?}"
    );
}
