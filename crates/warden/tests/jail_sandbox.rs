//! Jail sandboxes with a lifetime, through the Backend trait: a shared workspace across
//! executions, the files API confined to it, isolation between sandboxes, and destroy.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_engine::{Backend, BackendError, BackendSandbox, ExecPlan, SandboxSpec};
use warden_jail::JailBackend;
use warden_types::{Language, Limits, Reason, WorkspacePath};

fn backend() -> Arc<JailBackend> {
    Arc::new(JailBackend::new(common::jail_settings()))
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(10),
        memory_mb: 128,
        max_pids: 32,
        cpus: 1.0,
        max_output_bytes: 1 << 20,
        max_file_size_bytes: 8 << 20,
        workspace_mb: 4,
        max_artifacts: 8,
        max_artifact_bytes: 1 << 20,
    }
}

fn plan(code: &str) -> ExecPlan {
    ExecPlan {
        import_guard: None,
        profile: "test".into(),
        language: Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: code.into(),
        args: vec![],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: limits(),
        network_enabled: false,
        egress: Default::default(),
        image: None,
        container_runtime: None,
    }
}

async fn sandbox(backend: &JailBackend, id: &str) -> Arc<dyn BackendSandbox> {
    backend
        .create_sandbox(SandboxSpec {
            id: id.into(),
            profile: "test".into(),
            limits: limits(),
            network_enabled: false,
            egress: Default::default(),
            image: None,
            container_runtime: None,
            labels: BTreeMap::new(),
            env: Default::default(),
            home: None,
        })
        .await
        .unwrap()
}

fn path(p: &str) -> WorkspacePath {
    WorkspacePath::new(p).unwrap()
}

/// One runtime for the whole file, and every test body on its worker threads: a helper's
/// parent-death signal follows the thread that started it, so a helper started from a test's
/// own thread (or a per-test runtime) would be killed mid-teardown when that test ends,
/// leaving a cgroup that another test's "nothing left" check would see.
fn run(body: impl std::future::Future<Output = ()> + Send + 'static) {
    static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    });
    if let Err(e) = RUNTIME.block_on(RUNTIME.spawn(body)) {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[test]
fn executions_share_the_workspace_and_only_new_artifacts_come_back() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "share").await;
        let first = sb
            .exec(
                plan("import os\nopen('notes.txt','w').write('kept')\nopen('output/a.txt','w').write('a')\nprint(os.getcwd())"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(first.stdout, "/workspace\n", "{first:?}");
        assert_eq!(first.artifacts.len(), 1);
        let second = sb
            .exec(
                plan("print(open('notes.txt').read())\nopen('output/b.txt','w').write('b')"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(second.stdout, "kept\n", "{second:?}");
        let names: Vec<_> = second.artifacts.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["b.txt"], "earlier artifacts are not this run's");
        sb.destroy().await.unwrap();
    });
}

#[test]
fn uploaded_files_are_the_programs_and_its_files_can_be_downloaded() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "files").await;
        sb.write_file(&path("data/in.csv"), b"x\n1\n2\n".to_vec())
            .await
            .unwrap();
        let r = sb
            .exec(
                plan("import os\nrows = open('data/in.csv').read().split()\nopen('data/in.csv','a').write('3\\n')\nopen('sum.txt','w').write(str(sum(map(int, rows[1:]))))\nprint(os.stat('data/in.csv').st_uid)"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(r.stdout, "1000\n", "the sandbox user owns uploads: {r:?}");
        assert_eq!(sb.read_file(&path("sum.txt"), 1024).await.unwrap(), b"3");
        assert_eq!(
            sb.read_file(&path("/workspace/data/in.csv"), 1024)
                .await
                .unwrap(),
            b"x\n1\n2\n3\n"
        );
        let listing = sb.list_files(100).await.unwrap();
        let paths: Vec<_> = listing.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["data", "data/in.csv", "output", "sum.txt"]);
        assert!(matches!(
            sb.read_file(&path("missing"), 10).await,
            Err(BackendError::NotFound(_))
        ));
        assert!(matches!(
            sb.read_file(&path("sum.txt"), 0).await,
            Err(BackendError::BadPath(_))
        ));
        sb.destroy().await.unwrap();
    });
}

#[test]
fn symlinks_and_fifos_made_by_the_program_do_not_lead_the_daemon_outside() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "links").await;
        let r = sb
            .exec(
                plan("import os\nos.symlink('/etc/passwd', 'passwd')\nos.symlink('/etc', 'etc')\nos.mkfifo('fifo')"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(r.exit_code, Some(0), "{r:?}");
        for p in ["passwd", "etc/shadow", "fifo"] {
            let got = sb.read_file(&path(p), 1 << 20).await;
            assert!(matches!(got, Err(BackendError::BadPath(_))), "{p}: {got:?}");
        }
        // Writing through a symlinked folder or onto a symlink is refused too.
        for p in ["etc/evil", "passwd"] {
            let got = sb.write_file(&path(p), b"x".to_vec()).await;
            assert!(matches!(got, Err(BackendError::BadPath(_))), "{p}: {got:?}");
        }
        let started = Instant::now();
        let got = sb.write_file(&path("fifo"), b"x".to_vec()).await;
        assert!(matches!(got, Err(BackendError::BadPath(_))), "{got:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a FIFO must not block"
        );
        assert!(
            std::fs::read_to_string("/etc/passwd")
                .unwrap()
                .contains("root:")
        );
        sb.destroy().await.unwrap();
    });
}

#[test]
fn sandboxes_do_not_see_each_others_files_and_the_size_cap_holds() {
    require_root!();
    run(async {
        let b = backend();
        let one = sandbox(&b, "one").await;
        let two = sandbox(&b, "two").await;
        one.write_file(&path("secret.txt"), b"one's".to_vec())
            .await
            .unwrap();
        let r = two
            .exec(plan("import os\nprint(sorted(os.listdir('.')))"), None)
            .await
            .unwrap();
        assert_eq!(r.stdout, "['output']\n", "{r:?}");
        // The workspace is 4 MiB: a bigger upload is refused, and so is a bigger write.
        let got = one.write_file(&path("big"), vec![0u8; 5 << 20]).await;
        assert!(matches!(got, Err(BackendError::BadPath(_))), "{got:?}");
        let r = one
            .exec(plan("open('big2','wb').write(b'0' * (5 << 20))"), None)
            .await
            .unwrap();
        assert_ne!(r.exit_code, Some(0), "{r:?}");
        assert!(r.stderr.contains("No space left"), "{}", r.stderr);
        one.destroy().await.unwrap();
        two.destroy().await.unwrap();
    });
}

#[test]
fn destroy_ends_a_running_execution_and_leaves_nothing() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "doomed").await;
        let running = {
            let sb = sb.clone();
            tokio::spawn(async move {
                sb.exec(
                    plan("import os\nif os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['sleep', '61.5'])\nos.execvp('sleep', ['sleep', '61.5'])"),
                    None,
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let running_before = std::process::Command::new("pgrep")
            .args(["-f", "sleep 61.5"])
            .output()
            .unwrap();
        assert!(
            !running_before.stdout.is_empty(),
            "the program never started"
        );
        let started = Instant::now();
        sb.destroy().await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        let r = running.await.unwrap();
        assert!(matches!(r, Err(BackendError::Gone(_))), "{r:?}");
        assert!(matches!(
            sb.exec(plan("print(1)"), None).await,
            Err(BackendError::Gone(_))
        ));
        assert!(matches!(
            sb.read_file(&path("x"), 1).await,
            Err(BackendError::Gone(_))
        ));
        sb.destroy().await.unwrap();
        // No process of the sandbox is left, and no cgroup of a gone helper.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let out = std::process::Command::new("pgrep")
            .args(["-f", "sleep 61.5"])
            .output()
            .unwrap();
        assert!(out.stdout.is_empty(), "left running: {:?}", out);
        let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
        assert!(!h.has_stale(), "a stale cgroup is left");
    });
}

#[test]
fn a_timeout_in_a_sandbox_ends_that_run_only() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "slow").await;
        let mut p = plan("open('before','w').write('1')\nimport time\ntime.sleep(30)");
        p.limits.timeout = Duration::from_millis(500);
        let r = sb.exec(p, None).await.unwrap();
        assert_eq!(r.reason, Reason::Timeout);
        let r = sb
            .exec(plan("print(open('before').read())"), None)
            .await
            .unwrap();
        assert_eq!(r.stdout, "1\n");
        sb.destroy().await.unwrap();
    });
}

#[test]
fn a_workspace_cannot_run_code_before_the_import_guard() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "guard-user-site").await;
        // HOME is the workspace: Python's user site-packages would be a folder of it, and its
        // .pth files and usercustomize run at start-up, before any check.
        let site = "/workspace/.local/lib/python3.11/site-packages";
        let pth = "import builtins, os; builtins.OS_FROM_PTH = os\n";
        sb.write_file(
            &path(".local/lib/python3.11/site-packages/early.pth"),
            pth.as_bytes().to_vec(),
        )
        .await
        .unwrap();
        let seen = sb
            .exec(
                plan(&format!("import os\nprint(os.listdir('{site}'))")),
                None,
            )
            .await
            .unwrap();
        assert_eq!(seen.stdout, "['early.pth']\n", "{seen:?}");
        let mut guarded = plan("print('OS_FROM_PTH' in dir(__builtins__))");
        guarded.import_guard = Some(warden_engine::import_guard::ImportGuard {
            allowed: vec!["json".into()],
        });
        let r = sb.exec(guarded, None).await.unwrap();
        assert_eq!(
            (r.stdout.as_str(), r.exit_code),
            ("False\n", Some(0)),
            "{r:?}"
        );
        sb.destroy().await.unwrap();
    });
}

#[test]
fn a_runs_own_env_and_cwd_apply_to_that_run_only() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "envcwd").await;
        sb.exec(plan("import os\nos.makedirs('sub/dir')"), None)
            .await
            .unwrap();
        let mut p =
            plan("import os\nprint(os.getcwd(), os.environ['GREETING'], os.environ['HOME'])");
        p.env = [("GREETING".to_owned(), "hi there".to_owned())].into();
        p.cwd = Some("/workspace/sub/dir".into());
        let r = sb.exec(p, None).await.unwrap();
        assert_eq!(
            r.stdout, "/workspace/sub/dir hi there /workspace\n",
            "{r:?}"
        );
        let r = sb
            .exec(
                plan("import os\nprint(os.getcwd(), os.environ.get('GREETING'))"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(r.stdout, "/workspace None\n", "{r:?}");
        let mut tmp = plan("import os\nprint(os.getcwd())");
        tmp.cwd = Some("/tmp".into());
        assert_eq!(sb.exec(tmp, None).await.unwrap().stdout, "/tmp\n");
        // A folder that does not exist: the program does not start, and the error names it.
        let mut missing = plan("print(1)");
        missing.cwd = Some("/workspace/nope".into());
        match sb.exec(missing, None).await {
            Err(BackendError::Command(m)) => {
                assert!(m.contains("working directory /workspace/nope"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        sb.destroy().await.unwrap();
    });
}

#[test]
fn a_live_stdin_reaches_the_program_as_it_comes_and_its_end_ends_it() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "livestdin").await;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (events_tx, mut events) = tokio::sync::mpsc::channel(64);
        let mut p = plan(
            "import sys\nfor line in sys.stdin:\n    print('echo', line.strip(), flush=True)\nprint('eof')",
        );
        p.stdin = b"from the plan\n".to_vec();
        let running = {
            let sb = sb.clone();
            tokio::spawn(async move { sb.exec_with_stdin(p, Some(events_tx), rx).await })
        };
        // Each line comes back before the next is sent: the program has it while it runs.
        let mut seen = String::new();
        for (send, want) in [
            (None, "echo from the plan\n"),
            (Some("one\n"), "echo one\n"),
            (Some("two\n"), "echo two\n"),
        ] {
            if let Some(line) = send {
                tx.send(line.as_bytes().to_vec()).await.unwrap();
            }
            while !seen.ends_with(want) {
                match tokio::time::timeout(Duration::from_secs(20), events.recv()).await {
                    Ok(Some(warden_types::ExecEvent::Stdout { text, .. })) => seen.push_str(&text),
                    Ok(Some(_)) => {}
                    other => panic!("waiting for {want:?}, saw {seen:?}: {other:?}"),
                }
            }
        }
        drop(tx);
        let r = running.await.unwrap().unwrap();
        assert_eq!(
            (r.stdout.as_str(), r.exit_code),
            ("echo from the plan\necho one\necho two\neof\n", Some(0)),
            "{r:?}"
        );
        // A program that ignores its stdin ends by itself; what it never read is dropped.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(vec![b'x'; 1 << 20]).await.unwrap();
        let r = sb
            .exec_with_stdin(plan("print('done')"), None, rx)
            .await
            .unwrap();
        assert_eq!(r.stdout, "done\n");
        drop(tx);
        sb.destroy().await.unwrap();
    });
}

#[test]
fn runs_of_one_sandbox_go_side_by_side_and_destroy_ends_them_all() {
    require_root!();
    run(async {
        let b = backend();
        let sb = sandbox(&b, "beside").await;
        // A run that waits on its stdin until the end of this test…
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let waiting = {
            let sb = sb.clone();
            let mut p = plan("import sys\nprint(sys.stdin.read())");
            p.limits.timeout = Duration::from_secs(60);
            tokio::spawn(async move { sb.exec_with_stdin(p, None, rx).await })
        };
        // …while others start and end beside it, over the same workspace.
        let r = sb
            .exec(
                plan("open('beside.txt','w').write('b')\nprint('beside')"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(r.stdout, "beside\n");
        assert!(!waiting.is_finished(), "the waiting run ended early");
        tx.send(b"released".to_vec()).await.unwrap();
        drop(tx);
        assert_eq!(waiting.await.unwrap().unwrap().stdout, "released\n");
        // Two waiting runs, then destroy: both end, nothing is left.
        let mut held = Vec::new();
        let mut senders = Vec::new();
        for _ in 0..2 {
            let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1);
            senders.push(tx);
            let sb = sb.clone();
            held.push(tokio::spawn(async move {
                sb.exec_with_stdin(plan("import sys\nsys.stdin.read()"), None, rx)
                    .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        sb.destroy().await.unwrap();
        for h in held {
            let r = h.await.unwrap();
            assert!(matches!(r, Err(BackendError::Gone(_))), "{r:?}");
        }
        drop(senders);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
        assert!(!h.has_stale(), "a stale cgroup is left");
    });
}
