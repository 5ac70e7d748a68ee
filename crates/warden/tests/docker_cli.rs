//! The docker backend through the real binary: `warden run` and `warden serve` with profiles
//! that use it, refusals with clear errors, and no container left behind.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn settings() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/docker-settings.toml")
}

/// Runs `warden run --json` directly (not in an outer pid namespace: its pid is the label of
/// the containers it makes). Returns the JSON, the exit status and the warden process's pid.
fn run(profile: &str, code: &str, extra: &[&str]) -> (serde_json::Value, i32, u32) {
    let settings = settings();
    let mut child = Command::new(common::warden())
        .args([
            "--config",
            settings.to_str().unwrap(),
            "run",
            "--json",
            "-p",
            profile,
        ])
        .args(extra)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(code.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (value, out.status.code().unwrap_or(-1), pid)
}

fn containers_with_label(label: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={label}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn runsc_registered() -> bool {
    let out = Command::new("docker")
        .args(["info", "--format", "{{json .Runtimes}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("\"runsc\"")
}

#[test]
fn run_uses_the_docker_backend_and_leaves_no_container() {
    require_docker!();
    let (v, status, pid) = run(
        "docker",
        "import os, sys\nprint(os.getuid(), os.uname().nodename)\nopen('output/r.txt', 'w').write('r')\nsys.exit(4)",
        &[],
    );
    // A host uid of its own from the default range (warden_net::uids).
    let (uid, host) = v["stdout"].as_str().unwrap().split_once(' ').unwrap();
    assert_eq!(host, "sandbox\n", "{v}");
    assert!(
        warden_net::uids::UidRange::default().contains(uid.parse().unwrap()),
        "{v}"
    );
    assert_eq!(v["exit_code"], 4);
    assert_eq!(status, 4);
    assert_eq!(v["artifacts"][0]["name"], "r.txt");
    assert!(containers_with_label(&format!("dev.warden.pid={pid}")).is_empty());
}

#[test]
fn javascript_runs_in_its_own_image() {
    require_docker!();
    let (v, _, _) = run("node", "console.log(6 * 7)", &["-l", "javascript"]);
    assert_eq!(v["stdout"], "42\n", "{v}");
}

#[test]
fn the_data_science_image_imports_numpy_pandas_and_matplotlib() {
    require_docker!();
    // numpy needs its BLAS, which Debian provides through an alternatives link that no package
    // lists: the image build must carry it.
    let (v, status, _) = run(
        "data_science",
        "import numpy, pandas, matplotlib\nprint(int(numpy.arange(6).reshape(2, 3).sum()), len(pandas.DataFrame({'a': [1, 2]})))",
        &[],
    );
    assert_eq!(v["stdout"], "15 2\n", "{v}");
    assert_eq!(status, 0);
}

#[test]
fn a_missing_image_is_refused_with_a_clear_error_and_never_pulled() {
    require_docker!();
    let start = Instant::now();
    let (v, status, _) = run("missing_image", "print(1)", &[]);
    assert_eq!(status, 125);
    assert_eq!(v["error"]["code"], "refused", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("warden-no-such-image:1") && message.contains("never pulls"),
        "{message}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// A networked profile runs behind Warden's own link and firewall (the full egress tests are
/// the `docker_*` tests of jail_network.rs), IPv6 allow entries included.
#[test]
fn a_networked_profile_gets_controlled_egress() {
    require_docker!();
    let (v, status, pid) = run(
        "networked",
        "import socket\nprint(sorted(n for _, n in socket.if_nameindex()))\n\
         try:\n    socket.create_connection(('169.254.169.254', 80), timeout=1.5); print('METADATA REACHED')\n\
         except OSError:\n    print('metadata refused')\n",
        &[],
    );
    assert_eq!(status, 0, "{v}");
    assert_eq!(v["stdout"], "['eth0', 'lo']\nmetadata refused\n", "{v}");
    assert!(containers_with_label(&format!("dev.warden.pid={pid}")).is_empty());
    // An IPv6 allow entry is enforced (it used to be refused): the container has an IPv6
    // address from the pool (fd57:6172:6465:6e::/64) on eth0, and the metadata address stays
    // closed to that allow-list.
    let (v, status, pid) = run(
        "networked_v6",
        "import socket\n\
         print(sorted(l.split()[0][:16] for l in open('/proc/net/if_inet6') if l.split()[5] == 'eth0' and l.split()[3] == '00'))\n\
         try:\n    socket.create_connection(('169.254.169.254', 80), timeout=1.5); print('METADATA REACHED')\n\
         except OSError:\n    print('metadata refused')\n",
        &[],
    );
    assert_eq!(status, 0, "{v}");
    assert_eq!(
        v["stdout"], "['fd5761726465006e']\nmetadata refused\n",
        "{v}"
    );
    assert!(containers_with_label(&format!("dev.warden.pid={pid}")).is_empty());
}

#[test]
fn gvisor_runs_under_runsc_or_is_refused() {
    require_docker!();
    let (v, status, _) = run("gvisor", "import platform\nprint(platform.release())", &[]);
    if runsc_registered() {
        // gVisor's Sentry answers the kernel's version itself (the host's is 6.x).
        assert_eq!(v["stdout"], "4.4.0\n", "{v}");
    } else {
        assert_eq!(status, 125);
        assert_eq!(v["error"]["code"], "refused", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("runsc"));
    }
}

#[test]
fn an_unreachable_engine_is_a_clear_error_not_a_hang() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("s.toml");
    std::fs::write(
        &conf,
        std::fs::read_to_string(settings()).unwrap()
            + "\n[sandbox.docker]\nhost = \"unix:///nonexistent/docker.sock\"\ncall_timeout_seconds = 2\n",
    )
    .unwrap();
    let start = Instant::now();
    let mut child = Command::new(common::warden())
        .args(["--config", conf.to_str().unwrap(), "run", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"print(1)").unwrap();
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot reach the docker engine"),
        "{v}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// Starts `warden serve` on the docker settings; returns the child and its address.
fn serve() -> (std::process::Child, String) {
    let settings = settings();
    // A data directory of its own (durable sandboxes of the settings' jail profiles).
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let data_dir = std::env::temp_dir().join(format!(
        "warden-docker-cli-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut child = Command::new(common::warden())
        .args([
            "--config",
            settings.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for _ in 0..5 {
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        if let Some(a) = line.trim().strip_prefix("warden: listening on http://") {
            // Keep reading: the daemon writes more (the playground's address), and a write
            // to a closed pipe would end it.
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            return (child, a.to_owned());
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("no address: {seen:?}");
}

/// A minimal HTTP/1.1 request (`Connection: close`); the status and the body.
fn request(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let (head, mut rest) = raw.split_once("\r\n\r\n").unwrap();
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, rest.to_owned());
    }
    let mut out = String::new();
    loop {
        let (size, tail) = rest.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return (status, out);
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
}

#[test]
fn sandboxes_over_http_on_docker_share_a_workspace_and_leave_nothing() {
    require_docker!();
    let (mut child, a) = serve();
    let (status, body) = request(&a, "POST", "/v1/sandboxes", br#"{"profile": "docker"}"#);
    assert_eq!(status, 201, "{body}");
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(info["backend"], "docker", "{info}");
    let id = info["id"].as_str().unwrap().to_owned();
    assert_eq!(
        containers_with_label(&format!("dev.warden.sandbox={id}")).len(),
        1
    );
    let (status, body) = request(
        &a,
        "PUT",
        &format!("/v1/sandboxes/{id}/files/in.txt"),
        b"21",
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = request(
        &a,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        br#"{"code": "n = int(open('in.txt').read())\nopen('out.txt', 'w').write(str(n * 2))"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = request(
        &a,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        br#"{"code": "cat out.txt", "language": "bash"}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""stdout":"42""#), "{body}");
    let (status, body) = request(&a, "GET", &format!("/v1/sandboxes/{id}/files/out.txt"), b"");
    assert_eq!((status, body.as_str()), (200, "42"));
    let (status, body) = request(&a, "DELETE", &format!("/v1/sandboxes/{id}"), b"");
    assert_eq!(status, 200, "{body}");
    assert!(containers_with_label(&format!("dev.warden.sandbox={id}")).is_empty());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn serve_runs_docker_profiles_and_removes_containers_left_by_a_dead_daemon() {
    require_docker!();
    // A container as a crashed daemon would have left it: Warden's labels, a dead pid.
    let stale = format!("warden-stale-{}", std::process::id());
    let made = Command::new("docker")
        .args([
            "create",
            "--name",
            &stale,
            "--label",
            &format!("dev.warden.sandbox={stale}"),
            "--label",
            "dev.warden.pid=999999999",
            "--network",
            "none",
            "warden-python:3.11",
            "true",
        ])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let (mut child, addr) = serve();
    assert!(
        containers_with_label(&format!("dev.warden.sandbox={stale}")).is_empty(),
        "the stale container is still there"
    );
    let (status, body) = request(
        &addr,
        "POST",
        "/v1/execute",
        br#"{"code": "print(21 * 2)", "profile": "docker"}"#,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""stdout":"42\n""#), "{body}");
}
