//! The commands Warden sends into a pod, run for real on this host in a stand-in pod
//! ([`common::LocalPod`]: a pid namespace whose init is the keep-alive command, entered as
//! the pod's own uid). The real `sh`, `prlimit`, `kill -1`, `tar`, `find` and `python3` run the
//! real scripts: only the transport (the API server's exec websocket) is replaced — see
//! `apiserver.rs` for that. Needs root, like the jail's tests; CI runs as root.

mod common;

use common::LocalPod;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use warden_engine::{Backend, BackendError, ExecPlan, SandboxSpec};
use warden_kube::cluster::{Cluster, ClusterError, ExecSession, ExitStatus};
use warden_kube::{KubeBackend, KubeSettings};
use warden_types::{Language, Limits, Reason, WorkspacePath};

#[async_trait::async_trait]
impl Cluster for LocalPod {
    async fn create_pod(&self, _: &Pod) -> Result<(), ClusterError> {
        Ok(())
    }
    async fn get_pod(&self, name: &str) -> Result<Pod, ClusterError> {
        if *self.deleted.lock().unwrap() {
            return Err(ClusterError::NotFound {
                op: format!("get pod {name}"),
                message: "deleted".into(),
            });
        }
        Ok(LocalPod::ready_pod())
    }
    async fn pod_events(
        &self,
        _: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Event>, ClusterError> {
        Ok(vec![])
    }
    async fn delete_pod(&self, _: &str) -> Result<bool, ClusterError> {
        let mut deleted = self.deleted.lock().unwrap();
        let was = !*deleted;
        *deleted = true;
        Ok(was)
    }
    async fn list_pods(&self, _: &str) -> Result<Vec<Pod>, ClusterError> {
        Ok(vec![])
    }
    async fn get_network_policy(
        &self,
        _: &str,
    ) -> Result<Option<k8s_openapi::api::networking::v1::NetworkPolicy>, ClusterError> {
        Ok(None)
    }
    async fn create_network_policy(
        &self,
        _: &k8s_openapi::api::networking::v1::NetworkPolicy,
    ) -> Result<(), ClusterError> {
        Ok(())
    }
    async fn exec(&self, _pod: &str, command: Vec<String>) -> Result<ExecSession, ClusterError> {
        let mut child =
            self.command(&command, false)
                .spawn()
                .map_err(|e| ClusterError::Unavailable {
                    op: "nsenter".into(),
                    message: e.to_string(),
                })?;
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        Ok(ExecSession {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            status: Box::pin(async move {
                use std::os::unix::process::ExitStatusExt;
                match child.wait().await {
                    // As a container runtime reports it: 128+N for a death by signal N.
                    Ok(s) => {
                        ExitStatus::Code(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)))
                    }
                    Err(_) => ExitStatus::Lost,
                }
            }),
            keep: Box::new(()),
        })
    }
    async fn version(&self) -> Result<String, ClusterError> {
        Ok("local".into())
    }
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(10),
        memory_mb: 128,
        max_pids: 16,
        cpus: 1.0,
        max_output_bytes: 4096,
        max_file_size_bytes: 1 << 20,
        workspace_mb: 16,
        max_artifacts: 4,
        max_artifact_bytes: 1 << 20,
    }
}

fn plan(code: &str) -> ExecPlan {
    ExecPlan {
        import_guard: None,
        profile: "standard".into(),
        language: Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: code.into(),
        args: vec!["arg1".into()],
        stdin: b"from stdin".to_vec(),
        env: Default::default(),
        cwd: None,
        limits: limits(),
        network_enabled: false,
        egress: Default::default(),
        container_runtime: None,
        image: Some("python:3.11-slim".into()),
    }
}

async fn sandbox(pod: &Arc<LocalPod>) -> Arc<dyn warden_engine::BackendSandbox> {
    let settings = KubeSettings {
        layout: pod.layout(),
        poll_interval: Duration::from_millis(5),
        ..KubeSettings::default()
    };
    let backend = KubeBackend::start(pod.clone(), settings).await.unwrap();
    backend
        .create_sandbox(SandboxSpec {
            id: "sb-local".into(),
            profile: "standard".into(),
            limits: limits(),
            network_enabled: false,
            egress: Default::default(),
            container_runtime: None,
            image: Some("python:3.11-slim".into()),
            labels: BTreeMap::new(),
            env: Default::default(),
            home: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_run_gets_code_stdin_args_exit_code_and_artifacts_without_symlinks() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let code = "import os, sys\nprint(sys.stdin.read(), sys.argv[1])\nopen('output/a.txt', 'w').write('abc')\nos.makedirs('output/sub')\nopen('output/sub/b.csv', 'w').write('x,y')\nos.symlink('/etc/passwd', 'output/passwd')\nsys.exit(3)";
    let r = sb.exec(plan(code), None).await.unwrap();
    assert_eq!((r.reason, r.exit_code), (Reason::Exited, Some(3)), "{r:?}");
    assert_eq!(r.stdout, "from stdin arg1\n");
    let names: Vec<_> = r.artifacts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "sub/b.csv"]);
    assert_eq!(r.artifacts[0].bytes, b"abc");
    assert_eq!(r.artifacts[1].mime_type, "text/csv");
    assert_eq!(r.skipped_artifacts.len(), 1, "{:?}", r.skipped_artifacts);
    assert_eq!(r.skipped_artifacts[0].name, "passwd");
    assert!(r.skipped_artifacts[0].why.contains("symlink"));
    assert_eq!(pod.live_processes(), 0);
}

#[tokio::test]
async fn the_timeout_kills_double_forked_survivors() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let mut p = plan(
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(100)\n    os._exit(0)\nprint('parent', flush=True)\ntime.sleep(100)",
    );
    p.limits.timeout = Duration::from_secs(1);
    let r = sb.exec(p, None).await.unwrap();
    assert_eq!(r.reason, Reason::Timeout, "{r:?}");
    assert_eq!(r.stdout, "parent\n");
    assert!(
        r.duration_ms >= 1000 && r.duration_ms < 5000,
        "{}",
        r.duration_ms
    );
    assert_eq!(
        pod.live_processes(),
        0,
        "a process of the sandbox survived the reap"
    );
    // The sandbox still works after a timeout.
    let r = sb.exec(plan("print('again')"), None).await.unwrap();
    assert_eq!(r.stdout, "again\n");
}

#[tokio::test]
async fn an_output_flood_is_cut_at_the_cap_and_stopped() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let r = sb
        .exec(plan("while True:\n    print('x' * 1000)"), None)
        .await
        .unwrap();
    assert_eq!(r.reason, Reason::Output, "{r:?}");
    assert!(r.stdout_truncated);
    assert!(
        r.stdout
            .ends_with("[warden: output truncated at 4096 bytes]\n")
    );
    assert_eq!(pod.live_processes(), 0);
}

#[tokio::test]
async fn prlimit_applies_the_process_and_file_size_limits() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let code = "import os, time\nn = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('fork refused after', n, e.errno)\n";
    let r = sb.exec(plan(code), None).await.unwrap();
    assert!(r.stdout.starts_with("fork refused after"), "{r:?}");
    let forked: u64 = r.stdout.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(forked < 16, "{forked} processes with max_pids 16");
    let r = sb
        .exec(plan("open('big', 'wb').write(b'x' * (2 << 20))"), None)
        .await
        .unwrap();
    assert_ne!(r.exit_code, Some(0));
    assert!(r.stderr.contains("File too large"), "{r:?}");
    assert_eq!(pod.live_processes(), 0);
}

#[tokio::test]
async fn files_round_trip_and_symlinks_are_refused() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let path = |p: &str| WorkspacePath::new(p).unwrap();
    sb.write_file(&path("data/deep/in.txt"), b"42".to_vec())
        .await
        .unwrap();
    let r = sb
        .exec(plan("import os\nprint(open('data/deep/in.txt').read())\nos.symlink('/etc', 'etc')\nos.symlink('/etc/hostname', 'host')"), None)
        .await
        .unwrap();
    assert_eq!(r.stdout, "42\n", "{r:?}");
    assert_eq!(
        sb.read_file(&path("data/deep/in.txt"), 100).await.unwrap(),
        b"42"
    );
    for bad in ["etc/passwd", "host"] {
        match sb.read_file(&path(bad), 1 << 20).await {
            Err(BackendError::BadPath(m)) => assert!(m.contains("symlink"), "{m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(matches!(
        sb.write_file(&path("etc/evil"), b"x".to_vec()).await,
        Err(BackendError::BadPath(_))
    ));
    assert!(matches!(
        sb.write_file(&path("host"), b"x".to_vec()).await,
        Err(BackendError::BadPath(_))
    ));
    assert!(!Path::new("/etc/evil").exists());
    // A file where a folder should be, and a folder where a file should be.
    assert!(matches!(
        sb.write_file(&path("data/deep/in.txt/x"), b"x".to_vec())
            .await,
        Err(BackendError::BadPath(_))
    ));
    assert!(matches!(
        sb.write_file(&path("data/deep"), b"x".to_vec()).await,
        Err(BackendError::NotFound(_))
    ));
    assert!(matches!(
        sb.read_file(&path("missing.txt"), 100).await,
        Err(BackendError::NotFound(_))
    ));
    assert!(matches!(
        sb.read_file(&path("data"), 100).await,
        Err(BackendError::NotFound(_))
    ));
    sb.write_file(&path("big.bin"), vec![7; 5000])
        .await
        .unwrap();
    assert!(matches!(
        sb.read_file(&path("big.bin"), 100).await,
        Err(BackendError::BadPath(_))
    ));
    // Names with spaces, quotes and globs are data, never script.
    let odd = path("we ird 'name' $(id) *.txt");
    sb.write_file(&odd, b"odd".to_vec()).await.unwrap();
    assert_eq!(sb.read_file(&odd, 100).await.unwrap(), b"odd");
    let mut listed: Vec<_> = sb
        .list_files(100)
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.path, f.is_dir))
        .collect();
    listed.sort();
    assert!(
        listed.contains(&("data/deep/in.txt".into(), false)),
        "{listed:?}"
    );
    assert!(listed.contains(&("data".into(), true)));
    assert!(listed.contains(&("we ird 'name' $(id) *.txt".into(), false)));
    assert!(
        !listed.iter().any(|(p, _)| p.starts_with(".tmp")),
        "{listed:?}"
    );
    assert_eq!(sb.list_files(2).await.unwrap().len(), 2);
    sb.destroy().await.unwrap();
    sb.destroy().await.unwrap();
    assert!(matches!(
        sb.exec(plan("print(1)"), None).await,
        Err(BackendError::Gone(_))
    ));
}

#[tokio::test]
async fn a_program_that_leaves_a_child_holding_stdout_ends_when_it_exits() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let r = sb
        .exec(
            plan("import subprocess\nsubprocess.Popen(['sleep', '100'])\nprint('bye')"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        (r.reason, r.exit_code, r.stdout.as_str()),
        (Reason::Exited, Some(0), "bye\n"),
        "{r:?}"
    );
    assert!(r.duration_ms < 5000, "{}", r.duration_ms);
    assert_eq!(pod.live_processes(), 0);
}

#[tokio::test]
async fn an_interpreter_missing_from_the_image_is_a_command_error() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let mut p = plan("print(1)");
    p.command = vec!["python9".into()];
    match sb.exec(p, None).await {
        Err(BackendError::Command(m)) => assert!(m.contains("python9"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_import_guard_refuses_at_run_time_and_lets_allowed_imports_through() {
    require_root!();
    let pod = Arc::new(LocalPod::new());
    let sb = sandbox(&pod).await;
    let guard = warden_engine::import_guard::ImportGuard {
        allowed: vec!["json".into(), "math".into()],
    };
    let guarded = |code: &str| ExecPlan {
        import_guard: Some(guard.clone()),
        ..plan(code)
    };
    // Allowed modules and their own dependencies work, and the program has its stdin.
    let code = "import json, math\nprint(json.dumps([math.pi > 3, input()]))";
    let r = sb.exec(guarded(code), None).await.unwrap();
    assert_eq!((r.reason, r.exit_code), (Reason::Exited, Some(0)), "{r:?}");
    assert_eq!(r.stdout, "[true, \"from stdin\"]\n", "{r:?}");
    // A name the static check cannot see: refused while the program runs, with its line.
    let code = "print('before')\nimp = getattr(__builtins__, '__imp' + 'ort__')\nimp('o' + 's')\nprint('BROKEN')";
    match sb.exec(guarded(code), None).await {
        Err(BackendError::ImportRefused(refusal)) => {
            assert_eq!((refusal.module.as_str(), refusal.line), ("os", Some(3)));
        }
        other => panic!("not refused: {other:?}"),
    }
    // Without the guard the same program runs (the plan decides, not the pod's leftovers).
    let r = sb.exec(plan(code), None).await.unwrap();
    assert!(r.stdout.contains("BROKEN"), "{r:?}");
}
