//! The backend end to end over real HTTP and websockets: a kubeconfig file → kube's client →
//! a fake API server on 127.0.0.1 (written here: pods, NetworkPolicies, events, version, and
//! the exec subresource speaking `v5.channel.k8s.io`) → commands run in a stand-in pod
//! ([`common::LocalPod`]). What this proves: the client is built from a kubeconfig, the
//! requests are the ones the Role allows, and exec works through kube's websocket client —
//! stdin with its end-of-input signal, stdout and stderr channels, the status channel. What it
//! does not: that a real API server, kubelet and container runtime answer as this fake does
//! (it follows the protocol as kube's client implements it). Needs root, for the stand-in pod.

mod common;

use common::LocalPod;
use futures_util::{SinkExt, StreamExt};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use warden_engine::{Backend, BackendError, ExecPlan, SandboxSpec};
use warden_kube::cluster::{Cluster, ExitStatus, KubeCluster};
use warden_kube::{KubeBackend, KubeSettings};
use warden_types::{Language, Limits, Reason, WorkspacePath};

const NS: &str = "warden-sandboxes";

#[derive(Default)]
struct State {
    policies: BTreeMap<String, serde_json::Value>,
    pods: BTreeMap<String, (serde_json::Value, Arc<LocalPod>)>,
    /// "METHOD path" of every plain request, in order.
    requests: Vec<String>,
}

type Shared = Arc<Mutex<State>>;

struct FakeApiServer {
    state: Shared,
    kubeconfig: tempfile::NamedTempFile,
}

impl FakeApiServer {
    async fn start() -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state: Shared = Arc::default();
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        let kubeconfig = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            kubeconfig.path(),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: fake\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {NS}\ncurrent-context: fake\n"
            ),
        )
        .unwrap();
        FakeApiServer { state, kubeconfig }
    }

    fn settings(&self) -> KubeSettings {
        KubeSettings {
            kubeconfig: Some(self.kubeconfig.path().to_owned()),
            ready_timeout: Duration::from_secs(5),
            ..KubeSettings::default()
        }
    }
}

fn status(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

async fn respond(stream: &mut TcpStream, code: u16, body: &serde_json::Value) {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn serve(mut stream: TcpStream, state: Shared) {
    let mut peek = vec![0u8; 16 * 1024];
    let n = stream.peek(&mut peek).await.unwrap_or(0);
    let head = String::from_utf8_lossy(&peek[..n]).to_ascii_lowercase();
    if head.contains("upgrade: websocket") {
        return exec(stream, state).await;
    }
    // A plain request: head, then a body of Content-Length bytes.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: serde_json::Value =
        serde_json::from_slice(&buf[header_end..]).unwrap_or(serde_json::Value::Null);
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    state
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {path}"));
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let policies = format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies");
    let (code, answer) = {
        let mut s = state.lock().unwrap();
        match (method, path) {
            ("GET", "/version") => (
                200,
                serde_json::json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake",
                    "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": "",
                    "compiler": "", "platform": "linux/amd64"}),
            ),
            ("POST", p) if p == policies => {
                let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
                s.policies.insert(name, body.clone());
                (201, body)
            }
            ("GET", p) if p.starts_with(&format!("{policies}/")) => {
                match s.policies.get(&p[policies.len() + 1..]) {
                    Some(v) => (200, v.clone()),
                    None => (404, status(404, "NotFound", "networkpolicy not found")),
                }
            }
            ("POST", p) if p == pods => {
                let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
                match s.pods.entry(name) {
                    std::collections::btree_map::Entry::Occupied(_) => {
                        (409, status(409, "AlreadyExists", "pod exists"))
                    }
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        slot.insert((body.clone(), Arc::new(LocalPod::new())));
                        (201, body)
                    }
                }
            }
            ("GET", p) if p == pods => {
                let items: Vec<_> = s.pods.values().map(|(v, _)| v.clone()).collect();
                (
                    200,
                    serde_json::json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
                )
            }
            ("GET", p) if p.starts_with(&format!("{pods}/")) => {
                match s.pods.get(&p[pods.len() + 1..]) {
                    Some((v, _)) => {
                        let mut v = v.clone();
                        v["status"] = serde_json::json!({"phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}]});
                        (200, v)
                    }
                    None => (404, status(404, "NotFound", "pod not found")),
                }
            }
            ("DELETE", p) if p.starts_with(&format!("{pods}/")) => {
                match s.pods.remove(&p[pods.len() + 1..]) {
                    Some((v, _)) => (200, v),
                    None => (404, status(404, "NotFound", "pod not found")),
                }
            }
            ("GET", p) if p == format!("/api/v1/namespaces/{NS}/events") => (
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": []}),
            ),
            _ => (404, status(404, "NotFound", "no such route in the fake")),
        }
    };
    respond(&mut stream, code, &answer).await;
}

/// `a=1&command=sh&command=-c` → the values of `command`, decoded as a form.
fn commands_of(query: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|kv| kv.strip_prefix("command="))
        .map(|v| {
            let bytes = v.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'+' => out.push(b' '),
                    b'%' if i + 2 < bytes.len() => {
                        let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                        out.push(u8::from_str_radix(hex, 16).unwrap());
                        i += 2;
                    }
                    b => out.push(b),
                }
                i += 1;
            }
            String::from_utf8(out).unwrap()
        })
        .collect()
}

/// The exec subresource: runs the command in the pod's stand-in and relays the channels.
async fn exec(stream: TcpStream, state: Shared) {
    let target = Arc::new(Mutex::new(String::new()));
    let seen = target.clone();
    // The handshake's callback type is tungstenite's, large error and all.
    #[allow(clippy::result_large_err)]
    let callback = move |req: &Request, mut resp: Response| {
        *seen.lock().unwrap() = req.uri().to_string();
        let offered = req
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(offered.contains("v5.channel.k8s.io"), "offered {offered}");
        resp.headers_mut().insert(
            "sec-websocket-protocol",
            "v5.channel.k8s.io".parse().unwrap(),
        );
        Ok(resp)
    };
    let ws = tokio_tungstenite::accept_hdr_async(stream, callback)
        .await
        .unwrap();
    let uri = target.lock().unwrap().clone();
    let (path, query) = uri.split_once('?').unwrap_or((&uri, ""));
    state.lock().unwrap().requests.push(format!("EXEC {path}"));
    let name = path
        .strip_prefix(&format!("/api/v1/namespaces/{NS}/pods/"))
        .and_then(|p| p.strip_suffix("/exec"))
        .unwrap_or("")
        .to_owned();
    let pod = state
        .lock()
        .unwrap()
        .pods
        .get(&name)
        .map(|(_, p)| p.clone());
    let (mut sink, mut source) = ws.split();
    let Some(pod) = pod else {
        let _ = sink.close().await;
        return;
    };
    let mut child = pod.command(&commands_of(query), true).spawn().unwrap();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if sink.send(Message::binary(frame)).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    // Client → stdin, until the end-of-input signal (v5: [255, 0]) or the stream's end.
    let input = tokio::spawn(async move {
        while let Some(Ok(msg)) = source.next().await {
            let Message::Binary(data) = msg else { continue };
            match (data.first(), data.get(1)) {
                (Some(0), _) => {
                    if let Some(w) = stdin.as_mut() {
                        let _ = w.write_all(&data[1..]).await;
                    }
                }
                (Some(255), Some(0)) => drop(stdin.take()),
                _ => {}
            }
        }
    });
    let relay = |mut r: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                 channel: u8,
                 tx: tokio::sync::mpsc::Sender<Vec<u8>>| async move {
        let mut buf = vec![0u8; 32 * 1024];
        let mut kept = Vec::new();
        loop {
            let n = r.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            if channel == 2 {
                kept.extend_from_slice(&buf[..n]);
            }
            let mut frame = vec![channel];
            frame.extend_from_slice(&buf[..n]);
            if tx.send(frame).await.is_err() {
                // The client went away; keep draining so the program is never blocked.
                continue;
            }
        }
        kept
    };
    let (_, err) = tokio::join!(
        relay(Box::new(stdout), 1, tx.clone()),
        relay(Box::new(stderr), 2, tx.clone())
    );
    let code = child
        .wait()
        .await
        .ok()
        .and_then(|s| s.code())
        .unwrap_or(137);
    let err = String::from_utf8_lossy(&err);
    // As the kubelet reports it: success, a non-zero exit code, or a command that could not
    // start (setpriv's "failed to execute" stands in for the runtime's).
    let status = if code == 0 {
        serde_json::json!({"metadata": {}, "status": "Success"})
    } else if code == 127 && err.contains("failed to execute") {
        serde_json::json!({"metadata": {}, "status": "Failure",
            "message": format!("exec: executable file not found in $PATH: {err}")})
    } else {
        serde_json::json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": format!("command terminated with non-zero exit code: exit code {code}"),
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    };
    let mut frame = vec![3u8];
    frame.extend_from_slice(status.to_string().as_bytes());
    let _ = tx.send(frame).await;
    drop(tx);
    let _ = writer.await;
    input.abort();
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(10),
        memory_mb: 128,
        max_pids: 16,
        cpus: 1.0,
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
        image: Some("python:3.11-slim".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_kubes_websocket_client_carries_stdin_output_and_status() {
    require_root!();
    let server = FakeApiServer::start().await;
    let client = warden_kube::backend::client(Some(server.kubeconfig.path()), None)
        .await
        .unwrap();
    let cluster = KubeCluster::new(client, NS);
    assert_eq!(cluster.version().await.unwrap(), "v1.33.0-fake");
    let settings = server.settings();
    let backend = KubeBackend::start(Arc::new(cluster.clone()), settings)
        .await
        .unwrap();
    let spec = SandboxSpec {
        id: "sb-ws".into(),
        profile: "standard".into(),
        limits: limits(),
        network_enabled: false,
        egress: Default::default(),
        container_runtime: None,
        image: Some("python:3.11-slim".into()),
        labels: BTreeMap::new(),
        env: Default::default(),
        home: None,
    };
    cluster
        .create_pod(&backend.pod_for(&spec).unwrap())
        .await
        .unwrap();
    let call = |argv: &[&str], stdin: Vec<u8>| {
        let cluster = cluster.clone();
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        async move {
            warden_kube::commands::call(&cluster, "warden-sb-ws", argv, &stdin, 1 << 24)
                .await
                .unwrap()
        }
    };
    // Stdin in, through its end-of-input signal, and back out: 300 KB, larger than every
    // buffer on the way.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let out = call(&["cat"], big.clone()).await;
    assert_eq!(out.status, ExitStatus::Code(0));
    assert!(out.stdout == big, "{} bytes back", out.stdout.len());
    let out = call(&["sh", "-c", "echo out; echo err >&2; exit 7"], vec![]).await;
    assert_eq!(
        (out.status, out.stdout.as_slice(), out.stderr.as_str()),
        (ExitStatus::Code(7), &b"out\n"[..], "err")
    );
    let out = call(&["no-such-program"], vec![]).await;
    assert!(matches!(out.status, ExitStatus::NotStarted(_)), "{out:?}");
    // Arguments with spaces, quotes and shell syntax arrive as they were.
    let out = call(&["printf", "%s|", "a b", "'q'", "$(id)", "*"], vec![]).await;
    assert_eq!(out.stdout, b"a b|'q'|$(id)|*|");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_from_a_kubeconfig_runs_code_end_to_end() {
    require_root!();
    let server = FakeApiServer::start().await;
    let backend = KubeBackend::connect(server.settings()).await.unwrap();
    {
        let s = server.state.lock().unwrap();
        let names: Vec<_> = s.policies.keys().cloned().collect();
        assert_eq!(names, ["warden-sandbox-deny-all", "warden-sandbox-egress"]);
    }
    // One-shot: a pod of its own, deleted afterwards.
    let code = "import os, time\nprint('hello')\nopen('output/r.txt', 'w').write('res')\nif os.fork() == 0:\n    os.setsid(); time.sleep(100)\n";
    let r = backend.exec(plan(code), None).await.unwrap();
    assert_eq!(
        (r.reason, r.exit_code, r.stdout.as_str()),
        (Reason::Exited, Some(0), "hello\n"),
        "{r:?}"
    );
    assert_eq!(r.artifacts.len(), 1);
    assert_eq!(r.artifacts[0].bytes, b"res");
    let mut p = plan("import time\nprint('start', flush=True)\ntime.sleep(100)");
    p.limits.timeout = Duration::from_secs(1);
    let r = backend.exec(p, None).await.unwrap();
    assert_eq!(
        (r.reason, r.stdout.as_str()),
        (Reason::Timeout, "start\n"),
        "{r:?}"
    );
    assert!(
        server.state.lock().unwrap().pods.is_empty(),
        "one-shot pods are deleted"
    );

    // A sandbox with a lifetime: files and runs share the workspace; destroy deletes the pod.
    let sb = backend
        .create_sandbox(SandboxSpec {
            id: "sb-life".into(),
            profile: "standard".into(),
            limits: limits(),
            network_enabled: false,
            egress: Default::default(),
            container_runtime: None,
            image: Some("python:3.11-slim".into()),
            labels: BTreeMap::from([("team".into(), "a b".into())]),
            env: Default::default(),
            home: None,
        })
        .await
        .unwrap();
    let created = server.state.lock().unwrap().pods["warden-sb-life"]
        .0
        .clone();
    assert_eq!(
        created["metadata"]["annotations"]["warden.dev/labels"],
        r#"{"team":"a b"}"#
    );
    assert_eq!(created["spec"]["automountServiceAccountToken"], false);
    let path = WorkspacePath::new("in/data.txt").unwrap();
    sb.write_file(&path, b"7".to_vec()).await.unwrap();
    let r = sb
        .exec(
            plan(
                "import os\nprint(int(open('in/data.txt').read()) * 6)\nos.symlink('/etc', 'etc')",
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "42\n", "{r:?}");
    assert!(matches!(
        sb.read_file(&WorkspacePath::new("etc/passwd").unwrap(), 1 << 20)
            .await,
        Err(BackendError::BadPath(_))
    ));
    let listed: Vec<_> = sb
        .list_files(10)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert!(listed.contains(&"in/data.txt".to_string()), "{listed:?}");
    // A restarted daemon that knows this sandbox adopts its pod; one that does not deletes it.
    assert_eq!(
        backend.remove_orphans(&["sb-life".into()]).await.unwrap(),
        0
    );
    sb.destroy().await.unwrap();
    assert!(server.state.lock().unwrap().pods.is_empty());

    // Every request is one the generated Role grants, verb by verb.
    let requests = server.state.lock().unwrap().requests.clone();
    let role = warden_kube::objects::role(&warden_kube::objects::DeployParams::defaults("x"));
    let granted = |resource: &str, verb: &str| {
        role.rules.iter().flatten().any(|r| {
            r.resources.iter().flatten().any(|x| x == resource) && r.verbs.iter().any(|v| v == verb)
        })
    };
    for r in &requests {
        let (method, path) = r.split_once(' ').unwrap();
        if path == "/version" {
            continue; // served to any authenticated client
        }
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let i = parts.iter().position(|p| *p == "namespaces").expect(path);
        assert_eq!(parts[i + 1], NS, "{r}: outside the sandbox namespace");
        let (resource, verb) = match (method, &parts[i + 2..]) {
            ("EXEC", [_, _, "exec"]) => ("pods/exec", "create"),
            ("GET", [res]) => (*res, "list"),
            ("POST", [res]) => (*res, "create"),
            ("GET", [res, _]) => (*res, "get"),
            ("DELETE", [res, _]) => (*res, "delete"),
            other => panic!("unexpected request {other:?}"),
        };
        assert!(
            granted(resource, verb),
            "{r}: the Role does not grant {verb} on {resource}"
        );
    }
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("EXEC ") && r.ends_with("/exec"))
    );
}

/// Not a test: serves the fake API server so that the `warden` binary can be tried against it
/// by hand. `WARDEN_FAKE_KUBECONFIG=/tmp/fake-kubeconfig cargo test -p warden-kube --test
/// apiserver -- --ignored --nocapture serve_for_manual_runs` writes the kubeconfig there and
/// serves for `WARDEN_FAKE_SECONDS` (default 120).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a tool for manual runs of the warden binary, not a test"]
async fn serve_for_manual_runs() {
    require_root!();
    let Some(path) = std::env::var_os("WARDEN_FAKE_KUBECONFIG") else {
        panic!("set WARDEN_FAKE_KUBECONFIG to where the kubeconfig should be written");
    };
    let seconds: u64 = std::env::var("WARDEN_FAKE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let server = FakeApiServer::start().await;
    std::fs::copy(server.kubeconfig.path(), &path).unwrap();
    eprintln!("fake API server: kubeconfig at {path:?}, serving {seconds}s");
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let s = server.state.lock().unwrap();
    eprintln!("requests: {:#?}", s.requests);
}
