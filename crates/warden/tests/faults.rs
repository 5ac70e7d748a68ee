//! Faults under a running execution: the jail's helper killed, the Docker engine gone, the
//! workspace full. Each must end with a clear error or reason, never a hang, and leave nothing
//! behind. (A `kill -9` of the daemon itself is in `serve.rs`.)
//!
//! The Docker engine is never stopped: the docker backend is pointed at a unix-socket proxy to
//! the engine's socket, and the proxy is what dies.
//!
//! Real sandboxes need root (CI runs as root); without root each test says so and returns.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One HTTP/1.1 request with a deadline; the status and the body.
fn http(addr: &str, method: &str, path: &str, body: &[u8], deadline: Duration) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(deadline)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    if let Err(e) = s.read_to_end(&mut raw) {
        panic!("{method} {path}: no answer within {deadline:?} ({e})");
    }
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    (status, body.to_owned())
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue;
        }
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(marker)
        {
            found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
        }
    }
    found
}

/// Waits up to `secs` for `done`.
fn eventually(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// The daemon's helper of the run whose program holds `marker` (forked by the daemon's fork
/// server), waiting for it to appear.
fn helper_of(daemon: u32, marker: &str) -> u32 {
    let mut found = None;
    assert!(
        eventually(10, || {
            found = common::helper_running(daemon, marker);
            found.is_some()
        }),
        "no helper under the daemon"
    );
    found.unwrap()
}

/// The cgroups a helper made (`run-<pid>-…` under Warden's parent in any hierarchy).
fn cgroups_of(helper: u32) -> Vec<String> {
    let out = std::process::Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "4", "-type", "d", "-name"])
        .arg(format!("run-{helper}-*"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn kill9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Runs `code` on the daemon in the background; the answer comes through the handle.
fn post_in_background(
    addr: &str,
    path: &str,
    body: serde_json::Value,
) -> std::thread::JoinHandle<(u16, String, Duration)> {
    let addr = addr.to_owned();
    let path = path.to_owned();
    std::thread::spawn(move || {
        let started = Instant::now();
        let (status, body) = http(
            &addr,
            "POST",
            &path,
            body.to_string().as_bytes(),
            Duration::from_secs(60),
        );
        (status, body, started.elapsed())
    })
}

#[test]
fn a_killed_helper_ends_the_run_with_a_clear_error_and_leaves_nothing() {
    require_root!();
    let server = common::serve_with(&common::settings());
    let daemon = server.child.id();
    let marker = format!("71{}.5", std::process::id() % 100_000);
    let code = format!(
        "import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\nprint('up', flush=True)\ntime.sleep(60)"
    );
    // A one-shot run.
    let running = post_in_background(
        &server.addr,
        "/v1/execute",
        serde_json::json!({"code": code, "profile": "test"}),
    );
    if !eventually(10, || !host_processes_with(&marker).is_empty()) {
        panic!("the program never started: {:?}", running.join());
    }
    let helper = helper_of(daemon, &marker);
    kill9(helper);
    let (status, body, took) = running.join().unwrap();
    assert!(took < Duration::from_secs(10), "the answer took {took:?}");
    let v = json(&body);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (503, Some("sandbox_lost")),
        "{body}"
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("helper"),
        "{body}"
    );
    assert!(
        eventually(5, || host_processes_with(&marker).is_empty()),
        "left running: {:?}",
        host_processes_with(&marker)
    );
    assert!(
        eventually(5, || cgroups_of(helper).is_empty()),
        "the killed helper's cgroups are left: {:?}",
        cgroups_of(helper)
    );

    // A sandbox with a lifetime: its run ends the same way, and the sandbox stays usable.
    let (status, body) = http(
        &server.addr,
        "POST",
        "/v1/sandboxes",
        br#"{"profile": "test"}"#,
        Duration::from_secs(30),
    );
    assert_eq!(status, 201, "{body}");
    let id = json(&body)["id"].as_str().unwrap().to_owned();
    let (status, _) = http(
        &server.addr,
        "PUT",
        &format!("/v1/sandboxes/{id}/files/kept.txt"),
        b"kept",
        Duration::from_secs(30),
    );
    assert_eq!(status, 201);
    let running = post_in_background(
        &server.addr,
        &format!("/v1/sandboxes/{id}/exec"),
        serde_json::json!({"code": code}),
    );
    if !eventually(10, || !host_processes_with(&marker).is_empty()) {
        panic!("the program never started: {:?}", running.join());
    }
    let helper = helper_of(daemon, &marker);
    kill9(helper);
    let (status, body, took) = running.join().unwrap();
    assert!(took < Duration::from_secs(10), "the answer took {took:?}");
    assert_eq!(
        (status, json(&body)["error"]["code"].as_str()),
        (503, Some("sandbox_lost")),
        "{body}"
    );
    assert!(eventually(5, || host_processes_with(&marker).is_empty()));
    let (status, body) = http(
        &server.addr,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        br#"{"code": "print(open('kept.txt').read())"}"#,
        Duration::from_secs(30),
    );
    assert_eq!(
        (status, json(&body)["stdout"].as_str()),
        (200, Some("kept\n")),
        "{body}"
    );
    assert!(
        eventually(5, || cgroups_of(helper).is_empty()),
        "the killed helper's cgroups are left: {:?}",
        cgroups_of(helper)
    );
}

#[test]
fn a_full_workspace_is_a_clear_error_not_a_hang() {
    require_root!();
    let server = common::serve_with(&common::settings());
    let a = &server.addr;
    let deadline = Duration::from_secs(30);
    let (status, body) = http(
        a,
        "POST",
        "/v1/sandboxes",
        br#"{"profile": "test"}"#,
        deadline,
    );
    assert_eq!(status, 201, "{body}");
    let id = json(&body)["id"].as_str().unwrap().to_owned();
    // Fill the workspace (16 MiB) to the last byte, from inside.
    let fill = r#"
import errno
n = 0
try:
    while True:
        with open(f'fill{n}', 'wb') as f:
            for _ in range(64):
                f.write(b'0' * 65536)
        n += 1
except OSError as e:
    print(errno.errorcode[e.errno])
try:
    with open('last', 'wb') as f:
        while True:
            f.write(b'0' * 512)
            f.flush()
except OSError as e:
    print(errno.errorcode[e.errno])
"#;
    let (status, body) = http(
        a,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        serde_json::json!({"code": fill}).to_string().as_bytes(),
        deadline,
    );
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert!(v["stdout"].as_str().unwrap().contains("ENOSPC"), "{v}");
    // An upload into the full workspace: a clear refusal naming the cause.
    let (status, body) = http(
        a,
        "PUT",
        &format!("/v1/sandboxes/{id}/files/more.bin"),
        &vec![7u8; 1 << 20],
        deadline,
    );
    let v = json(&body);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("bad_path")),
        "{body}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the workspace is full"),
        "{body}"
    );
    // A run in the full workspace still starts, says why its writes fail, and its artifacts
    // that fit come back.
    let (status, body) = http(
        a,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        br#"{"code": "import errno\ntry:\n    open('output/x.txt', 'w').write('x' * 100000)\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\nprint('ran')"}"#,
        deadline,
    );
    let v = json(&body);
    assert_eq!(status, 200, "{body}");
    assert!(v["stdout"].as_str().unwrap().ends_with("ran\n"), "{v}");
    // Freeing space makes it usable again.
    let (status, body) = http(
        a,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        br#"{"code": "import glob, os\nfor f in glob.glob('fill*'): os.remove(f)\nopen('output/ok.txt', 'w').write('ok')"}"#,
        deadline,
    );
    assert_eq!(status, 200, "{body}");
    let names: Vec<_> = json(&body)["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["ok.txt"], "{body}");
    let (status, _) = http(
        a,
        "PUT",
        &format!("/v1/sandboxes/{id}/files/more.bin"),
        &vec![7u8; 1 << 20],
        deadline,
    );
    assert_eq!(status, 201);
    http(a, "DELETE", &format!("/v1/sandboxes/{id}"), b"", deadline);
}

/// A unix-socket proxy to the Docker engine's socket that can be cut (every connection closed,
/// the socket removed) and restored.
struct EngineProxy {
    path: PathBuf,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<UnixStream>>>,
}

impl EngineProxy {
    fn start(path: &Path) -> EngineProxy {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap();
        let proxy = EngineProxy {
            path: path.to_owned(),
            cut: Arc::default(),
            open: Arc::default(),
        };
        let (cut, open) = (proxy.cut.clone(), proxy.open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(engine) = UnixStream::connect("/var/run/docker.sock") else {
                    continue;
                };
                let mut held = open.lock().unwrap();
                held.push(client.try_clone().unwrap());
                held.push(engine.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), engine.try_clone().unwrap()),
                    (engine, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        // Half-close only: the engine's attach stream outlives the end of stdin.
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        proxy
    }

    /// The engine becomes unreachable: the socket is gone and every connection is closed.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.path);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The docker tests run one at a time: orphan removal from this process would take the other
/// test's running container (made by this same process, by another backend) for an orphan.
static DOCKER: Mutex<()> = Mutex::new(());

/// Containers, running or not, that this process made.
fn my_containers() -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.warden.pid={}", std::process::id()),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_docker_engine_going_away_mid_run_is_a_clear_error_and_nothing_is_left() {
    require_root!();
    prerequisite!(common::missing_docker());
    let _alone = DOCKER.lock().unwrap_or_else(|e| e.into_inner());
    use warden_engine::Backend;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("engine.sock");
    let proxy = EngineProxy::start(&socket);
    let settings = warden_docker::DockerSettings {
        host: format!("unix://{}", socket.display()),
        call_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let marker = format!("72{}.5", std::process::id() % 100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = warden_docker::DockerBackend::new(settings);
        let plan = warden_engine::ExecPlan {
            import_guard: None,
            profile: "test".into(),
            language: warden_types::Language::new("python").unwrap(),
            command: vec!["python3".into()],
            file_name: "main.py".into(),
            code: format!(
                "import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep(60)"
            ),
            args: vec![],
            stdin: vec![],
            env: Default::default(),
            cwd: None,
            limits: warden_types::Limits {
                timeout: Duration::from_secs(30),
                memory_mb: 96,
                max_pids: 32,
                cpus: 1.0,
                max_output_bytes: 65536,
                max_file_size_bytes: 4 << 20,
                workspace_mb: 16,
                max_artifacts: 5,
                max_artifact_bytes: 1 << 20,
            },
            network_enabled: false,
            egress: Default::default(),
            image: Some("warden-python:3.11".into()),
            container_runtime: None,
        };
        let started = Instant::now();
        let run = tokio::spawn(async move { backend.exec(plan, None).await });
        // Cut the engine off once the program runs.
        let deadline = Instant::now() + Duration::from_secs(30);
        while host_processes_with(&marker).is_empty() {
            if Instant::now() > deadline || run.is_finished() {
                panic!("the program never started: {:?}", run.await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(my_containers().len(), 1, "{:?}", my_containers());
        proxy.cut();
        let ended = tokio::time::timeout(Duration::from_secs(20), run).await;
        let result = ended
            .expect("no answer within 20 s of the engine going away")
            .unwrap();
        let err = match result {
            Ok(r) => {
                for id in my_containers() {
                    let _ = std::process::Command::new("docker")
                        .args(["rm", "-f", &id])
                        .output();
                }
                panic!("a run whose engine went away cannot succeed: {r:?}");
            }
            Err(e) => e,
        };
        let message = err.to_string();
        assert!(
            matches!(err, warden_engine::BackendError::Lost(_)) && message.contains("engine"),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        // The engine is back: the container the run could not remove is removed by the
        // backend without a restart.
        let _proxy = EngineProxy::start(&socket);
        let cleaned = tokio::time::timeout(Duration::from_secs(60), async {
            while !my_containers().is_empty() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        let left = my_containers();
        if cleaned.is_err() {
            // Remove it for the other tests before failing.
            for id in &left {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", id])
                    .output();
            }
        }
        assert!(
            left.is_empty(),
            "left behind once the engine was back: {left:?}"
        );
        assert!(
            host_processes_with(&marker).is_empty(),
            "the program outlived its container"
        );
    });
}

/// Orphan removal judges a container by its Warden's pid only within that Warden's pid
/// namespace: a daemon inside `unshare --pid` must not take the host's live daemons'
/// containers for orphans (their pids are not in its /proc), nor they its.
#[test]
fn orphan_removal_leaves_other_pid_namespaces_containers_alone() {
    require_root!();
    prerequisite!(common::missing_docker());
    let _alone = DOCKER.lock().unwrap_or_else(|e| e.into_inner());
    use warden_engine::Backend;
    let tag = format!("orphan-ns-{}", std::process::id());
    let own_ns = warden_docker::plan::own_pid_namespace().unwrap();
    // Both made "by" pid 999999999, which no process here has: one in this namespace (an
    // orphan), one in another.
    let run = |name: &str, ns: &str| {
        let out = std::process::Command::new("docker")
            .args(["run", "-d", "--name", name, "--label"])
            .arg(format!("dev.warden.sandbox={name}"))
            .args(["--label", "dev.warden.pid=999999999", "--label"])
            .arg(format!("dev.warden.pidns={ns}"))
            .args(["--label", &format!("faults-test={tag}")])
            .args(["warden-python:3.11", "sleep", "120"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let here = format!("{tag}-here");
    let elsewhere = format!("{tag}-elsewhere");
    run(&here, &own_ns);
    run(&elsewhere, "1");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let removed = rt.block_on(async {
        let backend = warden_docker::DockerBackend::new(Default::default());
        backend.remove_orphans(&[]).await
    });
    let left = |name: &str| {
        let out = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("name=^{name}$")])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    let (here_left, elsewhere_left) = (left(&here), left(&elsewhere));
    for name in [&here, &elsewhere] {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", name])
            .output();
    }
    assert!(removed.is_ok(), "{removed:?}");
    assert!(!here_left, "an orphan of this namespace was kept");
    assert!(elsewhere_left, "another namespace's container was removed");
}
