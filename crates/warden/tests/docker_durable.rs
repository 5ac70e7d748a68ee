//! Durable sandboxes of the docker backend through the real daemon and the real Docker
//! engine: the workspace is the sandbox's ext4 image under the data directory, bound into its
//! container; a sandbox outlives `kill -9` of `warden serve` (also while paused) and comes
//! back with its files, in a new container; a full workspace is full on disk too and takes
//! not a byte more of the host's disk; pause and resume, snapshots, `from_snapshot` and forks
//! work as the jail's, and a fork shares no writable byte with its parent; a destroyed
//! sandbox leaves nothing on disk (image, mount, loop device, record) nor in the engine, nor
//! does one whose making a `kill -9` cut; under gVisor (runsc) the same image serves as the
//! workspace, through its gofer.

mod common;

use common::{http_request, serve_at};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// alice-key (SHA-256 in the settings).
const SETTINGS: &str = r#"
[sandbox]
default_profile = "keep"
backend = "docker"

[sandbox.profiles.keep]
timeout_seconds = 20
max_memory_mb = 128
workspace_mb = 24
max_file_size_mb = 16
enabled_policies = []
  [sandbox.profiles.keep.runtime]
  image = "warden-python:3.11"

[sandbox.profiles.gvisor]
timeout_seconds = 20
max_memory_mb = 256
workspace_mb = 24
enabled_policies = []
durable = true
container_runtime = "runsc"
  [sandbox.profiles.gvisor.runtime]
  image = "warden-python:3.11"

[sandbox.profiles.fleeting]
timeout_seconds = 20
max_memory_mb = 128
workspace_mb = 24
enabled_policies = []
durable = false
  [sandbox.profiles.fleeting.runtime]
  image = "warden-python:3.11"

[[server.api_keys]]
name = "alice"
key_sha256 = "72ee9d4355ccb9d3a4c9dbf37382e38e75c1b1a225b5bd1f729ee91bbda30c20"
"#;

const ALICE: &str = "alice-key";

fn call(addr: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = http_request(
        addr,
        method,
        path,
        &format!("Authorization: Bearer {ALICE}\r\n"),
        body,
    );
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// A settings file and a data directory that outlive the daemons of one test.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("settings.toml"), SETTINGS).unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        Place { dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn folder(&self, id: &str) -> PathBuf {
        self.data().join("sandboxes").join(id)
    }

    fn serve(&self) -> common::Server {
        serve_at(
            &common::warden(),
            &self.dir.path().join("settings.toml"),
            &self.data(),
        )
    }
}

fn create(addr: &str, body: &str) -> String {
    let (status, made) = call(addr, "POST", "/v1/sandboxes", body);
    assert_eq!(status, 201, "{made}");
    made["id"].as_str().unwrap().to_owned()
}

fn exec(addr: &str, id: &str, code: &str) -> Value {
    let (status, v) = call(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        &serde_json::json!({ "code": code }).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    v
}

fn read(addr: &str, id: &str, file: &str) -> String {
    let out = exec(addr, id, &format!("print(open('{file}').read(), end='')"));
    assert_eq!(out["exit_code"], 0, "{out}");
    out["stdout"].as_str().unwrap().to_owned()
}

fn write(addr: &str, id: &str, file: &str, text: &str) {
    let out = exec(addr, id, &format!("open('{file}', 'w').write('{text}')"));
    assert_eq!(out["exit_code"], 0, "{out}");
}

/// Fills the workspace with files of 8 MiB (under the profiles' `max_file_size_mb`) until
/// `ENOSPC`; prints the errno and whether 16 MiB went in.
const FILL: &str = "n = 0\ntry:\n    for i in range(100):\n        with open(f'fill{i}.bin', 'wb') as f:\n            for _ in range(128):\n                f.write(b'x' * 65536)\n                f.flush()\n                n += 1\nexcept OSError as e:\n    print(e.errno, n * 65536 >= 16 * 1024 * 1024)\n";

fn kill_9(mut server: common::Server) {
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
}

/// The engine's containers of a sandbox (running or not).
fn containers_of(id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.warden.sandbox={id}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Loop devices whose backing file is under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok())
        .filter(|b| Path::new(b.trim()).starts_with(&dir))
        .collect()
}

/// Mount points (of this mount namespace, the engine's) under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .filter(|m| Path::new(m).starts_with(&dir))
        .collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Blocks of the image file allocated on the host's disk.
fn allocated(image: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(image).unwrap().blocks() * 512
}

#[test]
fn a_durable_docker_sandbox_outlives_kill_9_stays_full_and_leaves_nothing_when_destroyed() {
    require_docker!();
    let place = Place::new();
    let server = place.serve();
    let addr = server.addr.clone();
    let (status, made) = call(
        &addr,
        "POST",
        "/v1/sandboxes",
        r#"{"name": "box", "labels": {"team": "blue"}, "idle_ttl_seconds": 300}"#,
    );
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    // Durable by default ("keep" does not say: this engine shares the daemon's mounts); not
    // with durable = false, nor a one-shot run.
    assert!(place.folder(&id).join("workspace.ext4").exists());
    let fleeting = create(&addr, r#"{"profile": "fleeting"}"#);
    assert!(
        !place.folder(&fleeting).exists(),
        "a durable = false profile's sandbox has a folder"
    );
    let (status, v) = call(&addr, "POST", "/v1/execute", r#"{"code": "print(1)"}"#);
    assert_eq!((status, v["stdout"].as_str()), (200, Some("1\n")), "{v}");
    let folders = std::fs::read_dir(place.data().join("sandboxes"))
        .unwrap()
        .count();
    assert_eq!(folders, 1, "a one-shot run left a folder");
    // The container's /workspace is the image's ext4 filesystem, not a tmpfs.
    let out = exec(
        &addr,
        &id,
        "print([l.split()[2] for l in open('/proc/mounts') if l.split()[1] == '/workspace'])",
    );
    assert_eq!(out["stdout"], "['ext4']\n", "{out}");
    let image = place.folder(&id).join("workspace.ext4");
    let cap = 24 * 1024 * 1024;
    let made_blocks = allocated(&image);
    assert!(
        (cap..cap + 64 * 1024).contains(&made_blocks),
        "{made_blocks}"
    );
    // Files through the API and from code.
    let (status, v) = http_request(
        &addr,
        "PUT",
        &format!("/v1/sandboxes/{id}/files/data/in.txt"),
        &format!("Authorization: Bearer {ALICE}\r\n"),
        "uploaded",
    );
    assert_eq!(status, 201, "{v}");
    write(&addr, &id, "made.txt", "made in a run");
    let first_container = containers_of(&id);
    assert_eq!(first_container.len(), 1);

    kill_9(server);
    // The container outlives the daemon; the next start makes a new one on the same files.
    let server = place.serve();
    let addr = server.addr.clone();
    let (status, list) = call(&addr, "GET", "/v1/sandboxes", "");
    assert_eq!(status, 200, "{list}");
    let listed = list["sandboxes"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "only the durable one comes back: {list}");
    for field in [
        "id",
        "name",
        "profile",
        "labels",
        "created_at",
        "idle_ttl_seconds",
    ] {
        assert_eq!(listed[0][field], made[field], "{field}: {list}");
    }
    assert!(
        containers_of(&fleeting).is_empty(),
        "the fleeting one's container is left"
    );
    let now = containers_of(&id);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first_container, "the old container was taken up");
    let (status, body) = http_request(
        &addr,
        "GET",
        "/v1/sandboxes/box/files/data/in.txt",
        &format!("Authorization: Bearer {ALICE}\r\n"),
        "",
    );
    assert_eq!((status, body.as_str()), (200, "uploaded"));
    assert_eq!(read(&addr, &id, "made.txt"), "made in a run");
    // The listing shows the sandbox's files, not the filesystem's own lost+found.
    let (status, files) = call(&addr, "GET", &format!("/v1/sandboxes/{id}/files"), "");
    assert_eq!(status, 200, "{files}");
    assert!(!files.to_string().contains("lost+found"), "{files}");
    assert!(files.to_string().contains("made.txt"), "{files}");

    // Filled to the cap: ENOSPC inside, and not a byte more of the host's disk.

    let out = exec(&addr, &id, FILL);
    assert_eq!(out["stdout"], "28 True\n", "{out}");
    assert_eq!(allocated(&image), made_blocks, "the full workspace grew");
    kill_9(server);
    let server = place.serve();
    let addr = server.addr.clone();
    let out = exec(
        &addr,
        &id,
        "try:\n    open('more.bin', 'wb').write(b'y' * 1048576)\nexcept OSError as e:\n    print(e.errno)\n",
    );
    assert_eq!(out["stdout"], "28\n", "still full after a restart: {out}");
    assert_eq!(allocated(&image), made_blocks);

    // Destroyed: no container, mount, loop device, folder or record.
    let (status, v) = call(&addr, "DELETE", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{v}");
    assert!(containers_of(&id).is_empty(), "its container is left");
    assert!(!place.folder(&id).exists(), "its folder is left");
    assert_eq!(mounts_under(&place.data()), Vec::<String>::new());
    wait_for("the loop device released", || {
        loops_under(&place.data()).is_empty()
    });
    kill_9(server);
    let server = place.serve();
    let (status, list) = call(&server.addr, "GET", "/v1/sandboxes", "");
    assert_eq!(status, 200);
    assert_eq!(list["sandboxes"], serde_json::json!([]), "{list}");
    // A clean stop keeps a durable sandbox and lets go of its container, mount and image.
    let kept = create(&server.addr, "{}");
    let mut server = server;
    assert!(
        Command::new("kill")
            .args(["-TERM", &server.child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    server.child.wait().unwrap();
    assert!(containers_of(&kept).is_empty());
    assert_eq!(mounts_under(&place.data()), Vec::<String>::new());
    wait_for("the image released at shutdown", || {
        loops_under(&place.data()).is_empty()
    });
    let server = place.serve();
    let (status, _) = call(&server.addr, "DELETE", &format!("/v1/sandboxes/{kept}"), "");
    assert_eq!(status, 200);
    let left: Vec<_> = std::fs::read_dir(place.data().join("sandboxes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in the data directory: {left:?}");
}

#[test]
fn a_paused_durable_docker_sandbox_resumes_and_comes_back_after_a_kill_9() {
    require_docker!();
    let place = Place::new();
    let server = place.serve();
    let addr = server.addr.clone();
    let id = create(&addr, "{}");
    write(&addr, &id, "a.txt", "a");
    let (status, v) = call(&addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200, "{v}");
    let state =
        |addr: &str| call(addr, "GET", &format!("/v1/sandboxes/{id}"), "").1["state"].clone();
    assert_eq!(state(&addr), "paused");
    let inspect = |what: &str| {
        let out = Command::new("docker")
            .args(["inspect", "--format", what, &containers_of(&id)[0]])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(inspect("{{.State.Paused}}"), "true");
    let (status, v) = call(&addr, "POST", &format!("/v1/sandboxes/{id}/resume"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(inspect("{{.State.Paused}}"), "false");
    assert_eq!(read(&addr, &id, "a.txt"), "a");
    // Paused, then the daemon killed: the frozen container goes, the sandbox comes back.
    let (status, v) = call(&addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200, "{v}");
    kill_9(server);
    let server = place.serve();
    let addr = server.addr.clone();
    assert_eq!(state(&addr), "running");
    assert_eq!(read(&addr, &id, "a.txt"), "a");
    assert_eq!(containers_of(&id).len(), 1);
    assert_eq!(inspect("{{.State.Paused}}"), "false");
    // Destroyed before the daemon goes (a killed daemon leaves its container and mount).
    let (status, v) = call(&addr, "DELETE", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(mounts_under(&place.data()), Vec::<String>::new());
}

#[test]
fn docker_snapshots_and_ten_forks_are_independent_copies() {
    require_docker!();
    let place = Place::new();
    let server = place.serve();
    let addr = server.addr.clone();
    let parent = create(&addr, r#"{"labels": {"run": "tree"}}"#);
    write(&addr, &parent, "state.txt", "before");
    // A snapshot of a paused sandbox leaves it paused.
    let (status, v) = call(&addr, "POST", &format!("/v1/sandboxes/{parent}/pause"), "");
    assert_eq!(status, 200, "{v}");
    let (status, snap) = call(
        &addr,
        "POST",
        &format!("/v1/sandboxes/{parent}/snapshot"),
        r#"{"name": "first"}"#,
    );
    assert_eq!(status, 201, "{snap}");
    assert_eq!(snap["workspace_mb"], 24, "{snap}");
    let (_, info) = call(&addr, "GET", &format!("/v1/sandboxes/{parent}"), "");
    assert_eq!(info["state"], "paused", "{info}");
    write(&addr, &parent, "state.txt", "after");
    let child = create(&addr, r#"{"from_snapshot": "first"}"#);
    assert_eq!(read(&addr, &child, "state.txt"), "before");
    write(&addr, &child, "state.txt", "child");
    assert_eq!(read(&addr, &parent, "state.txt"), "after");

    // Ten forks: each its own image and container, none affects another or the parent.
    let (status, forks) = call(
        &addr,
        "POST",
        &format!("/v1/sandboxes/{parent}/fork"),
        r#"{"count": 10}"#,
    );
    assert_eq!(status, 201, "{forks}");
    let ids: Vec<String> = forks["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["labels"]["run"], "tree", "{s}");
            s["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 10);
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(read(&addr, id, "state.txt"), "after");
        write(&addr, id, "state.txt", &format!("fork {n}"));
        assert_eq!(containers_of(id).len(), 1);
    }
    write(&addr, &parent, "state.txt", "parent, later");
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(read(&addr, id, "state.txt"), format!("fork {n}"));
    }
    assert_eq!(read(&addr, &parent, "state.txt"), "parent, later");
    assert_eq!(read(&addr, &child, "state.txt"), "child");
    // No writable byte shared: each image file is its own inode with its own blocks (this
    // host's filesystem has no reflinks; where it has, the mount unshares them), and each
    // mounted filesystem its own device.
    use std::os::unix::fs::MetadataExt;
    let mut inodes = std::collections::BTreeSet::new();
    let mut devices = std::collections::BTreeSet::new();
    for id in ids.iter().chain([&parent, &child]) {
        let folder = place.folder(id);
        let image = std::fs::metadata(folder.join("workspace.ext4")).unwrap();
        assert_eq!(image.nlink(), 1);
        assert!(inodes.insert(image.ino()));
        assert!(devices.insert(std::fs::metadata(folder.join("workspace")).unwrap().dev()));
    }
    let left = std::fs::read_dir(place.data().join("snapshots"))
        .unwrap()
        .count();
    assert_eq!(left, 1, "only the named snapshot's folder");
    // All of them gone: nothing left in the engine or on disk but the snapshot.
    for id in ids.iter().chain([&parent, &child]) {
        let (status, v) = call(&addr, "DELETE", &format!("/v1/sandboxes/{id}"), "");
        assert_eq!(status, 200, "{v}");
        assert!(containers_of(id).is_empty());
    }
    assert_eq!(mounts_under(&place.data()), Vec::<String>::new());
    wait_for("the loop devices released", || {
        loops_under(&place.data().join("sandboxes")).is_empty()
    });
    let (status, _) = call(&addr, "DELETE", "/v1/snapshots/first", "");
    assert_eq!(status, 200);
}

#[test]
fn a_kill_9_while_a_durable_docker_sandbox_is_made_leaves_no_mount_after_the_restart() {
    require_docker!();
    let place = Place::new();
    let sandboxes = place.data().join("sandboxes");
    // The workspace is mounted at the sandbox's folder before its container is made and its
    // record saved: the daemon killed once the mount is there dies in between. (Should a kill
    // land after the record, the sandbox comes back whole: destroyed, and tried again.)
    let mut cut = None;
    for _ in 0..5 {
        let server = place.serve();
        let addr = server.addr.clone();
        let creating = std::thread::spawn(move || {
            // The kill cuts the request: the helper panics, which is the expected end.
            std::panic::catch_unwind(|| call(&addr, "POST", "/v1/sandboxes", "{}")).ok()
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while mounts_under(&sandboxes).is_empty() {
            assert!(Instant::now() < deadline, "the workspace was never mounted");
            std::thread::sleep(Duration::from_millis(1));
        }
        kill_9(server);
        let answer = creating.join().unwrap();
        let folders: Vec<String> = std::fs::read_dir(&sandboxes)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(folders.len(), 1, "{folders:?}");
        let id = folders[0].clone();
        assert_eq!(mounts_under(&sandboxes).len(), 1, "the mount was left");

        let server = place.serve();
        let (status, list) = call(&server.addr, "GET", "/v1/sandboxes", "");
        assert_eq!(status, 200, "{list}");
        if list["sandboxes"].as_array().unwrap().is_empty() {
            // Cut before the record: the sweep removed its mount and folder, the orphan
            // sweep its container, and the image went with them.
            assert!(answer.is_none(), "answered yet not listed: {answer:?}");
            assert_eq!(mounts_under(&place.data()), Vec::<String>::new());
            assert!(!place.folder(&id).exists(), "its folder is left");
            assert!(containers_of(&id).is_empty(), "its container is left");
            wait_for("the image's loop device released", || {
                loops_under(&place.data()).is_empty()
            });
            // The daemon makes sandboxes as before.
            let made = create(&server.addr, "{}");
            write(&server.addr, &made, "a.txt", "a");
            assert_eq!(read(&server.addr, &made, "a.txt"), "a");
            let (status, v) = call(&server.addr, "DELETE", &format!("/v1/sandboxes/{made}"), "");
            assert_eq!(status, 200, "{v}");
            cut = Some(id);
            break;
        }
        let (status, v) = call(&server.addr, "DELETE", &format!("/v1/sandboxes/{id}"), "");
        assert_eq!(status, 200, "{v}");
    }
    assert!(cut.is_some(), "no kill landed before the record in 5 tries");
    assert_eq!(mounts_under(&place.data()), Vec::<String>::new());
}

#[test]
fn a_durable_sandbox_under_gvisor_keeps_its_files_its_cap_and_its_copies() {
    require_root!();
    prerequisite!(common::missing_runsc());
    let place = Place::new();
    let server = place.serve();
    let addr = server.addr.clone();
    let id = create(&addr, r#"{"profile": "gvisor"}"#);
    // Under the sentry: gVisor's kernel, and the image's filesystem served by its gofer.
    let out = exec(
        &addr,
        &id,
        "import os\nprint(os.uname().release, os.statvfs('/workspace').f_blocks * os.statvfs('/workspace').f_frsize // 2**20)",
    );
    let fields: Vec<&str> = out["stdout"].as_str().unwrap().split_whitespace().collect();
    assert_eq!(fields.len(), 2, "{out}");
    let host = Command::new("uname").arg("-r").output().unwrap();
    assert_ne!(
        fields[0],
        String::from_utf8_lossy(&host.stdout).trim(),
        "not under gVisor: {out}"
    );
    let size_mb: u64 = fields[1].parse().unwrap();
    assert!(
        (16..=24).contains(&size_mb),
        "/workspace is not the 24 MiB image: {out}"
    );
    write(&addr, &id, "a.txt", "kept");
    let image = place.folder(&id).join("workspace.ext4");
    let made_blocks = allocated(&image);
    // Full at the cap, and not a byte more of the host's disk.
    let out = exec(&addr, &id, FILL);
    assert_eq!(out["stdout"], "28 True\n", "{out}");
    assert_eq!(allocated(&image), made_blocks, "the full workspace grew");
    exec(
        &addr,
        &id,
        "import glob, os\nfor f in glob.glob('fill*.bin'):\n    os.remove(f)",
    );
    // Paused and resumed; then the daemon killed: a new runsc container on the same files.
    let (status, v) = call(&addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200, "{v}");
    let (status, v) = call(&addr, "POST", &format!("/v1/sandboxes/{id}/resume"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(read(&addr, &id, "a.txt"), "kept");
    let first = containers_of(&id);
    kill_9(server);
    let server = place.serve();
    let addr = server.addr.clone();
    assert_eq!(read(&addr, &id, "a.txt"), "kept");
    let now = containers_of(&id);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first, "the old container was taken up");
    let runtime = Command::new("docker")
        .args(["inspect", "--format", "{{.HostConfig.Runtime}}", &now[0]])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&runtime.stdout).trim(), "runsc");
    // A snapshot and two forks: each its own copy.
    let (status, snap) = call(
        &addr,
        "POST",
        &format!("/v1/sandboxes/{id}/snapshot"),
        r#"{"name": "g"}"#,
    );
    assert_eq!(status, 201, "{snap}");
    let (status, forks) = call(
        &addr,
        "POST",
        &format!("/v1/sandboxes/{id}/fork"),
        r#"{"count": 2}"#,
    );
    assert_eq!(status, 201, "{forks}");
    let copies: Vec<String> = forks["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .chain([create(&addr, r#"{"from_snapshot": "g"}"#)])
        .collect();
    for (n, copy) in copies.iter().enumerate() {
        assert_eq!(read(&addr, copy, "a.txt"), "kept");
        write(&addr, copy, "a.txt", &format!("copy {n}"));
    }
    assert_eq!(read(&addr, &id, "a.txt"), "kept");
    for (n, copy) in copies.iter().enumerate() {
        assert_eq!(read(&addr, copy, "a.txt"), format!("copy {n}"));
    }
    // Destroyed: nothing left.
    for sandbox in copies.iter().chain([&id]) {
        let (status, v) = call(&addr, "DELETE", &format!("/v1/sandboxes/{sandbox}"), "");
        assert_eq!(status, 200, "{v}");
        assert!(containers_of(sandbox).is_empty());
    }
    assert_eq!(mounts_under(&place.data()), Vec::<String>::new());
    wait_for("the loop devices released", || {
        loops_under(&place.data().join("sandboxes")).is_empty()
    });
    let (status, _) = call(&addr, "DELETE", "/v1/snapshots/g", "");
    assert_eq!(status, 200);
}

#[test]
fn an_engine_is_told_to_share_the_daemons_mounts_only_when_it_does() {
    require_root!();
    use warden_docker::durable::engine_shares_mount_namespace;
    let dir = tempfile::tempdir().unwrap();
    // A listener of this process: the same mount namespace.
    let here = dir.path().join("here.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&here).unwrap();
    assert!(engine_shares_mount_namespace(&here).unwrap());
    // A listener in a mount namespace of its own (as an engine in a container beside the
    // daemon, or a rootless one): not.
    let there = dir.path().join("there.sock");
    let mut other = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "python3", "-c"])
        .arg("import socket, sys, time\ns = socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\ntime.sleep(60)")
        .arg(&there)
        .spawn()
        .unwrap();
    wait_for("the other namespace's listener", || {
        std::os::unix::net::UnixStream::connect(&there).is_ok()
    });
    let told = engine_shares_mount_namespace(&there);
    other.kill().unwrap();
    other.wait().unwrap();
    assert!(!told.unwrap());
    // No engine: an error, never a guess.
    assert!(engine_shares_mount_namespace(&dir.path().join("none.sock")).is_err());
}
