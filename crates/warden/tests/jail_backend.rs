//! The jail backend as a multi-threaded caller (the daemon) uses it: the helper is exec'd, not
//! forked; output streams as events; several sandboxes run at once.

mod common;

use std::sync::Arc;
use std::time::Duration;
use warden_engine::{Backend, ExecPlan};
use warden_jail::JailBackend;
use warden_types::{ExecEvent, Language, Limits, Reason};

fn backend() -> Arc<JailBackend> {
    Arc::new(JailBackend::new(common::jail_settings()))
}

fn plan(code: &str) -> ExecPlan {
    ExecPlan {
        import_guard: None,
        profile: "standard".into(),
        language: Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: code.into(),
        args: vec![],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: Limits {
            timeout: Duration::from_secs(10),
            memory_mb: 128,
            max_pids: 32,
            cpus: 1.0,
            max_output_bytes: 1 << 20,
            max_file_size_bytes: 1 << 20,
            workspace_mb: 16,
            max_artifacts: 4,
            max_artifact_bytes: 1 << 20,
        },
        network_enabled: false,
        egress: Default::default(),
        image: None,
        container_runtime: None,
    }
}

#[test]
fn exec_mode_streams_output_while_the_program_runs() {
    require_root!();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = backend();
        b.check(&plan("")).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let code = "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')";
        let run = tokio::spawn({
            let b = b.clone();
            async move { b.exec(plan(code), Some(tx)).await }
        });
        // The first line arrives while the program is still sleeping (in one or more chunks).
        let mut seen = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(900);
        while !seen.ends_with('\n') {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(ExecEvent::Stdout { text, timestamp })) => {
                    assert!(timestamp > 1_700_000_000_000, "timestamp {timestamp}");
                    seen.push_str(&text)
                }
                other => panic!("no output while the program ran: {other:?} after {seen:?}"),
            }
        }
        assert_eq!(seen, "first\n");
        assert!(!run.is_finished());
        let result = run.await.unwrap().unwrap();
        assert_eq!(result.stdout, "first\nsecond\n");
        assert_eq!(result.reason, Reason::Exited);
    });
}

#[test]
fn exec_mode_runs_sandboxes_concurrently() {
    require_root!();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = backend();
        let start = std::time::Instant::now();
        let runs: Vec<_> = (0..6)
            .map(|i| {
                let b = b.clone();
                tokio::spawn(async move {
                    b.exec(
                        plan(&format!("import time\ntime.sleep(1)\nprint({i})")),
                        None,
                    )
                    .await
                })
            })
            .collect();
        for (i, run) in runs.into_iter().enumerate() {
            let r = run.await.unwrap().unwrap();
            assert_eq!(r.stdout, format!("{i}\n"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
    });
}

#[test]
fn a_caller_that_goes_away_leaves_no_process_and_no_cgroup() {
    require_root!();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = backend();
        let mut p = plan(
            "import os\nif os.fork() == 0:\n    os.execvp('sleep', ['sleep', '63.5'])\nos.execvp('sleep', ['sleep', '63.5'])",
        );
        p.limits.timeout = Duration::from_secs(60);
        let run = {
            let backend = backend.clone();
            tokio::spawn(async move { backend.exec(p, None).await })
        };
        let sleeping = || {
            !std::process::Command::new("pgrep")
                .args(["-f", "sleep 63.5"])
                .output()
                .unwrap()
                .stdout
                .is_empty()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !sleeping() {
            assert!(std::time::Instant::now() < deadline, "never started");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The caller goes away (an HTTP client that disconnected).
        run.abort();
        let _ = run.await;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
        while sleeping() || h.has_stale() {
            assert!(
                std::time::Instant::now() < deadline,
                "left behind: processes {} stale cgroups {}",
                sleeping(),
                h.has_stale()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn the_import_guard_changes_nothing_the_program_observes() {
    require_root!();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = backend();
        // What a program can see of its start: argv, its names, the import path, the loaded
        // modules, its environment, its folder, warnings' attribution, a traceback, the exit.
        let code = "import sys, os, json, warnings\n\
            print(sys.argv, __file__, __name__, __package__, __spec__, type(__loader__).__name__)\n\
            print(sys.path)\n\
            print(sorted(sys.modules))\n\
            print(sorted(os.environ.items()))\n\
            print(sorted(os.listdir('/code')), sys.flags)\n\
            warnings.warn('attributed to the program')\n\
            def f():\n    import json.nope\n\
            try:\n    f()\nexcept ImportError as e:\n    print(repr(e))\n\
            json.loads('{')\n";
        let guard = warden_engine::import_guard::ImportGuard {
            allowed: ["sys", "os", "json", "warnings"].map(String::from).to_vec(),
        };
        let mut guarded = plan(code);
        guarded.args = vec!["a b".into(), "c".into()];
        guarded.import_guard = Some(guard);
        let mut plain = guarded.clone();
        plain.import_guard = None;
        let with = b.exec(guarded, None).await.unwrap();
        let without = b.exec(plain, None).await.unwrap();
        assert_eq!(with.exit_code, Some(1), "{with:?}");
        assert!(with.stderr.contains("JSONDecodeError"), "{with:?}");
        assert!(with.stderr.contains("main.py:7: UserWarning"), "{with:?}");
        assert_eq!(
            (&with.stdout, &with.stderr, with.exit_code, with.reason),
            (
                &without.stdout,
                &without.stderr,
                without.exit_code,
                without.reason
            )
        );
    });
}
