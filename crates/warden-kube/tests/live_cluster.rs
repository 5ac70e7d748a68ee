//! Against a real cluster, only when `WARDEN_TEST_KUBECONFIG` names its kubeconfig:
//! `WARDEN_TEST_KUBECONFIG=~/.kube/config cargo test -p warden-kube --test live_cluster -- --ignored`
//! (the namespace, default "warden-sandboxes", must exist; the image, default
//! "python:3.11-slim", is `$WARDEN_TEST_KUBE_IMAGE`). Without it these tests are ignored, and
//! listed as such with the reason — never reported as passed.

use std::collections::BTreeMap;
use std::time::Duration;
use warden_engine::{Backend, ExecPlan, SandboxSpec};
use warden_kube::backend::{TEST_KUBECONFIG_ENV, from_test_env};
use warden_types::{Language, Limits, Reason, WorkspacePath};

async fn backend() -> warden_kube::KubeBackend {
    match from_test_env().await {
        Some(b) => b.expect("connect to the test cluster"),
        None => panic!("{TEST_KUBECONFIG_ENV} is not set: these tests need a live cluster"),
    }
}

fn image() -> String {
    std::env::var("WARDEN_TEST_KUBE_IMAGE").unwrap_or_else(|_| "python:3.11-slim".into())
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(10),
        memory_mb: 128,
        max_pids: 32,
        cpus: 0.5,
        max_output_bytes: 1 << 16,
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
        args: vec![],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: limits(),
        network_enabled: false,
        egress: Default::default(),
        container_runtime: None,
        image: Some(image()),
    }
}

#[tokio::test]
#[ignore = "needs a live cluster: set WARDEN_TEST_KUBECONFIG and run with --ignored"]
async fn one_shot_runs_report_output_codes_limits_and_artifacts() {
    let b = backend().await;
    let r = b.exec(plan("print('hi')"), None).await.unwrap();
    assert_eq!(
        (r.reason, r.exit_code, r.stdout.as_str()),
        (Reason::Exited, Some(0), "hi\n")
    );
    let r = b.exec(plan("import sys; sys.exit(3)"), None).await.unwrap();
    assert_eq!(r.exit_code, Some(3));
    let mut p = plan(
        "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(60)\ntime.sleep(60)",
    );
    p.limits.timeout = Duration::from_secs(2);
    assert_eq!(b.exec(p, None).await.unwrap().reason, Reason::Timeout);
    let r = b.exec(plan("print('x' * 200000)"), None).await.unwrap();
    assert_eq!(r.reason, Reason::Output);
    let r = b
        .exec(
            plan("import os\nopen('output/a.txt','w').write('abc')\nos.symlink('/etc/passwd','output/p')"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.artifacts.len(), 1, "{r:?}");
    assert!(
        r.skipped_artifacts
            .iter()
            .any(|s| s.why.contains("symlink"))
    );
    let r = b
        .exec(plan(&metadata_probe("169.254.169.254", 80)), None)
        .await
        .unwrap();
    if let Err(why) = metadata_blocked(&r.stdout, r.exit_code) {
        panic!("{why}: {r:?}");
    }
}

/// A program that connects to `host:port` and says what became of it: `reached`, or
/// `blocked: ` and the errno's name (`timeout` when nothing answered).
fn metadata_probe(host: &str, port: u16) -> String {
    format!(
        r#"
import errno, socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("{host}", {port}))
    print("reached")
except socket.timeout:
    print("blocked: timeout")
except OSError as e:
    print("blocked:", errno.errorcode.get(e.errno, e.errno))
"#
    )
}

/// The metadata address is blocked only when the probe ran to its end and the connection
/// failed the way a network policy makes it fail (dropped: a timeout; rejected: refused or
/// unreachable). Any other failure (the program did not run, no python, a crash) proves
/// nothing.
fn metadata_blocked(stdout: &str, exit_code: Option<i32>) -> Result<(), String> {
    const BLOCKED: [&str; 5] = [
        "blocked: timeout\n",
        "blocked: ECONNREFUSED\n",
        "blocked: EHOSTUNREACH\n",
        "blocked: ENETUNREACH\n",
        "blocked: EPERM\n",
    ];
    if exit_code != Some(0) {
        return Err(format!(
            "the probe did not run to its end (exit {exit_code:?})"
        ));
    }
    if !BLOCKED.contains(&stdout) {
        return Err(format!("the metadata address was not blocked: {stdout:?}"));
    }
    Ok(())
}

/// The live check above can fail: the same probe, run here on the host, against a port that
/// answers (reached: not blocked), a closed port (refused: blocked), and a broken probe.
#[test]
fn the_metadata_check_fails_unless_the_connection_is_blocked() {
    let run = |code: &str| {
        let out = std::process::Command::new("python3")
            .args(["-c", code])
            .output()
            .expect("python3 (scripts/setup.sh installs it)");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code(),
        )
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap().port();
    let (stdout, code) = run(&metadata_probe("127.0.0.1", open));
    assert_eq!(stdout, "reached\n");
    assert!(metadata_blocked(&stdout, code).is_err());
    drop(listener);
    let (stdout, code) = run(&metadata_probe("127.0.0.1", open));
    assert_eq!(stdout, "blocked: ECONNREFUSED\n");
    metadata_blocked(&stdout, code).unwrap();
    let (stdout, code) =
        run(&metadata_probe("127.0.0.1", open).replace("socket.socket()", "socket.sock()"));
    assert!(
        metadata_blocked(&stdout, code).is_err(),
        "{stdout:?} {code:?}"
    );
}

#[tokio::test]
#[ignore = "needs a live cluster: set WARDEN_TEST_KUBECONFIG and run with --ignored"]
async fn sandboxes_keep_files_refuse_symlinks_and_are_deleted() {
    let b = backend().await;
    let spec = SandboxSpec {
        id: format!("live-{}", std::process::id()),
        profile: "standard".into(),
        limits: limits(),
        network_enabled: false,
        egress: Default::default(),
        container_runtime: None,
        image: Some(image()),
        labels: BTreeMap::new(),
        env: Default::default(),
        home: None,
    };
    let sb = b.create_sandbox(spec).await.unwrap();
    let path = WorkspacePath::new("data/in.txt").unwrap();
    sb.write_file(&path, b"42".to_vec()).await.unwrap();
    let r = sb
        .exec(plan("print(open('data/in.txt').read())"), None)
        .await
        .unwrap();
    assert_eq!(r.stdout, "42\n");
    sb.exec(plan("import os; os.symlink('/etc', 'link')"), None)
        .await
        .unwrap();
    let through = WorkspacePath::new("link/passwd").unwrap();
    assert!(sb.read_file(&through, 1 << 20).await.is_err());
    assert!(
        sb.list_files(100)
            .await
            .unwrap()
            .iter()
            .any(|f| f.path == "data/in.txt")
    );
    sb.destroy().await.unwrap();
    sb.destroy().await.unwrap();
    assert_eq!(b.remove_orphans(&[]).await.unwrap(), 0);
}
