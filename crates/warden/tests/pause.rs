//! Pause and resume through the real daemon: a paused sandbox's processes stop where they are
//! (a ticking thread in a context leaves a gap as long as the pause) and keep their state; the
//! next use resumes it; a pause is refused while an execution runs; an idle sandbox of a
//! profile with `on_idle = "pause"` is paused, not destroyed; a paused sandbox is destroyed
//! with nothing left. On the jail (the cgroup freezer) and on docker (the container's pause).

mod common;

use common::http_request;
use serde_json::Value;
use std::time::{Duration, Instant};

const SETTINGS: &str = r#"
[sandbox]
default_profile = "ctx"

[sandbox.profiles.ctx]
timeout_seconds = 20
max_memory_mb = 160
enabled_policies = []

[sandbox.profiles.brief]
timeout_seconds = 2
max_memory_mb = 160
enabled_policies = []

[sandbox.profiles.napper]
timeout_seconds = 20
max_memory_mb = 160
enabled_policies = []
idle_ttl_seconds = 1
on_idle = "pause"

[sandbox.profiles.guarded]
timeout_seconds = 20
max_memory_mb = 160
enabled_policies = ["forbidden_imports"]
runtime_import_check = true
  [sandbox.profiles.guarded.policies.forbidden_imports]
  allowed_modules = ["math"]

[sandbox.profiles.docker]
backend = "docker"
timeout_seconds = 20
max_memory_mb = 160
enabled_policies = []
  [sandbox.profiles.docker.runtime]
  image = "warden-python:3.11"
"#;

/// The tests here run one at a time: the jail test checks the whole freezer hierarchy for
/// frozen leftovers, which another test's sandbox, paused on purpose at that moment, would be.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn call(addr: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = http_request(addr, method, path, "", body);
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn start() -> (common::Server, tempfile::TempDir) {
    common::serve_settings(SETTINGS)
}

fn create(addr: &str, profile: &str) -> String {
    let (status, v) = call(
        addr,
        "POST",
        "/v1/sandboxes",
        &format!(r#"{{"profile": "{profile}"}}"#),
    );
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_owned()
}

fn cell(addr: &str, id: &str, code: &str) -> Value {
    let body = serde_json::json!({ "code": code, "context": "default" }).to_string();
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!(status, 200, "{v}");
    v
}

/// A thread that notes the time every 10 ms, and a variable.
const TICKER: &str = "import threading, time\nticks = []\ndef tick():\n    while True:\n        ticks.append(time.monotonic())\n        time.sleep(0.01)\nthreading.Thread(target=tick, daemon=True).start()\nkept = 42\ntime.sleep(0.2)\nprint(len(ticks) > 5)";

/// The longest gap between two ticks, in seconds, and the variable.
const LONGEST_GAP: &str =
    "gaps = [b - a for a, b in zip(ticks, ticks[1:])]\nprint(round(max(gaps), 2), kept)";

fn state(addr: &str, id: &str) -> String {
    let (status, v) = call(addr, "GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{v}");
    v["state"].as_str().unwrap().to_owned()
}

fn paused_processes_stop_and_keep_their_state(profile: &str) {
    let (server, _dir) = start();
    let addr = server.addr.as_str();
    let id = create(addr, profile);
    assert_eq!(cell(addr, &id, TICKER)["stdout"], "True\n");
    assert_eq!(state(addr, &id), "running");

    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "paused");
    // Pausing twice is no error.
    let (status, _) = call(addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200);
    assert_eq!(state(addr, &id), "paused");
    std::thread::sleep(Duration::from_secs(2));
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/resume"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "running");
    let out = cell(addr, &id, LONGEST_GAP);
    let stdout = out["stdout"].as_str().unwrap();
    let (gap, kept) = stdout.trim().split_once(' ').unwrap();
    let gap: f64 = gap.parse().unwrap();
    // Frozen for the pause: no tick for about 2 s (never less than 1.5 whatever the load); a
    // ticker that ran on would show gaps of about 10 ms.
    assert!(
        gap >= 1.5,
        "the ticker was not stopped: longest gap {gap} s"
    );
    assert_eq!(kept, "42", "{out}");

    // A use resumes: pause, then a cell runs at once and finds its state.
    let (status, _) = call(addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200);
    assert_eq!(cell(addr, &id, "print(kept + 1)")["stdout"], "43\n");
    assert_eq!(state(addr, &id), "running");

    // Refused while an execution runs.
    let runner = {
        let addr = addr.to_owned();
        let id = id.clone();
        std::thread::spawn(move || {
            let body = serde_json::json!({ "code": "import time\ntime.sleep(3)\nprint('done')" })
                .to_string();
            call(&addr, "POST", &format!("/v1/sandboxes/{id}/exec"), &body)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
        if status == 409 {
            break v;
        }
        // Before the execution started: undo and try again.
        assert_eq!(status, 200, "{v}");
        call(addr, "POST", &format!("/v1/sandboxes/{id}/resume"), "");
        assert!(Instant::now() < deadline, "never refused while running");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(refused["error"]["code"], "sandbox_busy", "{refused}");
    let (status, v) = runner.join().unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stdout"], "done\n");

    // A paused sandbox is destroyed with its processes.
    let (status, _) = call(addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200);
    let (status, v) = call(addr, "DELETE", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{v}");
    let (status, _) = call(addr, "GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 404);
}

#[test]
fn a_paused_jail_sandbox_stops_keeps_its_state_and_resumes() {
    let _one_at_a_time = serial();
    require_root!();
    paused_processes_stop_and_keep_their_state("ctx");
    // Nothing of the daemon's sandboxes is left frozen or alive in the freezer hierarchy.
    let leftovers: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/freezer/warden")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("freezer.state"))
                .is_ok_and(|s| s.trim() != "THAWED")
        })
        .map(|e| e.path())
        .collect();
    assert!(leftovers.is_empty(), "frozen cgroups left: {leftovers:?}");
}

/// The container's `State.Paused`, or `None` once it is gone.
fn container_paused(id: &str) -> Option<bool> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.warden.sandbox={id}"),
        ])
        .output()
        .unwrap();
    let container = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if container.is_empty() {
        return None;
    }
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.State.Paused}}", &container])
        .output()
        .unwrap();
    Some(String::from_utf8_lossy(&out.stdout).trim() == "true")
}

/// Docker sandboxes have no contexts: what runs between executions is the container's own
/// process, which `docker pause` freezes; files stay and the next execution unpauses it.
#[test]
fn a_paused_docker_sandbox_is_a_paused_container_until_its_next_use() {
    let _one_at_a_time = serial();
    require_docker!();
    let (server, _dir) = start();
    let addr = server.addr.as_str();
    let id = create(addr, "docker");
    let body = serde_json::json!({ "code": "open('kept.txt', 'w').write('kept')" }).to_string();
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        container_paused(&id),
        Some(false),
        "no container labelled {id}"
    );
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "paused");
    assert_eq!(container_paused(&id), Some(true));
    let body = serde_json::json!({ "code": "print(open('kept.txt').read())" }).to_string();
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stdout"], "kept\n");
    assert_eq!(container_paused(&id), Some(false));
    assert_eq!(state(addr, &id), "running");
    // Destroyed while paused: no container left.
    let (status, _) = call(addr, "POST", &format!("/v1/sandboxes/{id}/pause"), "");
    assert_eq!(status, 200);
    let (status, v) = call(addr, "DELETE", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(container_paused(&id), None);
}

#[test]
fn an_idle_sandbox_of_an_on_idle_pause_profile_is_paused_not_destroyed() {
    let _one_at_a_time = serial();
    require_root!();
    let (server, _dir) = start();
    let addr = server.addr.as_str();
    let id = create(addr, "napper");
    assert_eq!(cell(addr, &id, "kept = 7\nprint(kept)")["stdout"], "7\n");
    // The idle TTL is 1 s and the reaper looks every second.
    let deadline = Instant::now() + Duration::from_secs(15);
    while state(addr, &id) != "paused" {
        assert!(Instant::now() < deadline, "never paused");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Still there after more idle time, and resumed by its next use with its state.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(state(addr, &id), "paused");
    assert_eq!(cell(addr, &id, "print(kept * 6)")["stdout"], "42\n");
}

/// A cell that leaves values pickle can save (two names for one dict, some ballast), modules,
/// a function and a class of its own, and a lock that nothing can save.
const STATEFUL: &str = "import math as m\nimport threading\ndata = {'a': [1, 2, 3]}\nalias = data\ndef double(x):\n    return x * 2\nclass Box:\n    size = 3\nlock = threading.Lock()\nballast = bytearray(4 * 1024 * 1024)\nprint('ready')";

fn cell_in(addr: &str, id: &str, context: &str, code: &str) -> Value {
    let body = serde_json::json!({ "code": code, "context": context }).to_string();
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!(status, 200, "{v}");
    v
}

/// An error answer with this status and code, whose message names each of `needles`.
fn refused(status: u16, v: &Value, want: u16, code: &str, needles: &[&str]) {
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (want, Some(code)),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap();
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
}

fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

#[test]
fn an_evicting_pause_saves_what_it_can_ends_the_interpreters_and_the_resume_loads_it() {
    let _one_at_a_time = serial();
    require_root!();
    let (server, _dir) = start();
    let addr = server.addr.as_str();
    let daemon = server.child.id();
    let id = create(addr, "ctx");
    assert_eq!(
        cell(addr, &id, STATEFUL)["stdout"],
        "ready\n",
        "the first cell"
    );
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/contexts"), "{}");
    assert_eq!(status, 201, "{v}");
    let other = v["id"].as_str().unwrap().to_owned();
    assert_eq!(
        cell_in(addr, &id, &other, "y = 5\nprint(y)")["stdout"],
        "5\n"
    );
    assert_eq!(
        common::descendants_running(daemon, "warden_driver.py").len(),
        2,
        "one interpreter per context before the pause"
    );

    // A body that is not what the route takes names the field.
    let (status, v) = call(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        r#"{"evict": "yes"}"#,
    );
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("evict"), "{v}");

    let (status, v) = call(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        r#"{"evict": true}"#,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
    let evicted = v["evicted"].as_array().unwrap();
    assert_eq!(evicted.len(), 2, "{v}");
    let default = evicted.iter().find(|e| e["context"] == "default").unwrap();
    let saved = names(&default["saved"]);
    for name in [
        "data",
        "alias",
        "double",
        "Box",
        "m",
        "threading",
        "ballast",
    ] {
        assert!(saved.contains(&name), "{name} not saved: {default}");
    }
    let unsaved = default["unsaved"].as_array().unwrap();
    assert_eq!(unsaved.len(), 1, "{default}");
    assert_eq!(unsaved[0]["name"], "lock");
    assert!(
        unsaved[0]["why"].as_str().unwrap().contains("lock"),
        "{default}"
    );
    assert!(
        default["bytes"].as_u64().unwrap() > 4 * 1024 * 1024,
        "{default}"
    );
    // The interpreters are gone: their memory is free.
    assert_eq!(
        common::descendants_running(daemon, "warden_driver.py"),
        Vec::<u32>::new(),
        "interpreters left after an evicting pause"
    );
    let (status, v) = call(addr, "GET", &format!("/v1/sandboxes/{id}/contexts"), "");
    assert_eq!(status, 200, "{v}");
    assert!(
        v["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["evicted"] == true),
        "{v}"
    );

    // The resume loads every evicted context again.
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/resume"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "running", "{v}");
    let restored = v["restored"].as_array().unwrap();
    assert_eq!(restored.len(), 2, "{v}");
    for r in restored {
        assert_eq!(r["unsaved"], serde_json::json!([]), "{r}");
    }
    let out = cell(
        addr,
        &id,
        "print(alias is data, double(21), m.floor(Box.size + 0.5), len(ballast), 'lock' in globals())",
    );
    assert_eq!(out["stdout"], "True 42 3 4194304 False\n", "{out}");
    assert_eq!(cell_in(addr, &id, &other, "print(y * 2)")["stdout"], "10\n");

    // Without a resume, the context's next cell loads it; no state file is left behind.
    let (status, v) = call(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        r#"{"evict": true}"#,
    );
    assert_eq!(status, 200, "{v}");
    let out = cell(addr, &id, "print(data['a'], double(2))");
    assert_eq!(out["stdout"], "[1, 2, 3] 4\n", "{out}");
    let (status, v) = call(
        addr,
        "DELETE",
        &format!("/v1/sandboxes/{id}/contexts/{other}"),
        "",
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = call(addr, "GET", &format!("/v1/sandboxes/{id}/files"), "");
    assert_eq!(status, 200, "{v}");
    assert!(
        !v.to_string().contains(".state"),
        "a context's saved state was left in the workspace: {v}"
    );
}

/// A saved state whose values would run `os.system` when loaded (the header of a state with
/// nothing else, then a dict whose value is `os.system("touch /workspace/pwned")`).
const CRAFTED_STATE: &str = "8004953d000000000000007d94288c0776657273696f6e944b028c0f657865637574696f6e5f636f756e74944b018c076d6f64756c6573947d948c07736f7572636573947d94752e286470300a56780a636f730a73797374656d0a2856746f756368202f776f726b73706163652f70776e65640a7452732e";

#[test]
fn a_saved_state_is_loaded_as_user_code_under_the_import_guard() {
    let _one_at_a_time = serial();
    require_root!();
    let (server, _dir) = start();
    let addr = server.addr.as_str();
    let id = create(addr, "guarded");
    assert_eq!(
        cell(addr, &id, "import math\nx = 2\nprint(x)")["stdout"],
        "2\n"
    );
    let (status, v) = call(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        r#"{"evict": true}"#,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(names(&v["evicted"][0]["saved"]), ["math", "x"], "{v}");
    // The state file is the sandbox's own: a program replaces it with one that names `os`.
    let body = serde_json::json!({
        "code": format!("open('.warden/default.state', 'wb').write(bytes.fromhex('{CRAFTED_STATE}'))"),
    })
    .to_string();
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!((status, v["exit_code"].as_i64()), (200, Some(0)), "{v}");

    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/resume"), "");
    assert_eq!(status, 200, "{v}");
    let restored = &v["restored"][0];
    assert_eq!(restored["context"], "default", "{v}");
    let why = restored["unsaved"][0]["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("os"),
        "the refusal should name the module: {v}"
    );
    // Nothing ran, and the context starts afresh.
    let out = cell(
        addr,
        &id,
        "import math\nprint('x' in globals(), math.floor(2.5))",
    );
    assert_eq!(out["stdout"], "False 2\n", "{out}");
    let (status, v) = call(addr, "GET", &format!("/v1/sandboxes/{id}/files"), "");
    assert_eq!(status, 200, "{v}");
    assert!(
        !v.to_string().contains("pwned"),
        "the crafted state ran: {v}"
    );
}

#[test]
fn an_evicting_pause_whose_state_path_the_user_took_is_refused_naming_it() {
    let _one_at_a_time = serial();
    require_root!();
    let (server, _dir) = start();
    let addr = server.addr.as_str();
    let id = create(addr, "ctx");
    assert_eq!(cell(addr, &id, "x = 7\nprint(x)")["stdout"], "7\n");
    // A file of the user's where the state's folder goes (schemathesis found this: a 503).
    let body = serde_json::json!({ "code": "open('.warden', 'w').write('mine')" }).to_string();
    let (status, v) = call(addr, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!((status, v["exit_code"].as_i64()), (200, Some(0)), "{v}");
    let (status, v) = call(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        r#"{"evict": true}"#,
    );
    refused(
        status,
        &v,
        400,
        "bad_path",
        &[".warden/default.state", "FileExistsError"],
    );
    // Nothing was lost: the sandbox runs, its context kept its variable, the file is the user's.
    assert_eq!(state(addr, &id), "running");
    assert_eq!(
        cell(addr, &id, "print(x, open('.warden').read())")["stdout"],
        "7 mine\n"
    );
    // Moved out of the way, the same pause works.
    cell(addr, &id, "import os\nos.rename('.warden', 'mine.txt')");
    let (status, v) = call(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        r#"{"evict": true}"#,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(names(&v["evicted"][0]["saved"]), ["os", "x"], "{v}");
}

/// A save runs the context's own code (a value's `__reduce__`) under the sandbox's limits. A
/// limit that stops it, or code that ends the interpreter during it, refuses the pause as a
/// limit (422, naming the context and why), never an internal error (CI's schemathesis saw a 500
/// from an evicting pause on a loaded machine); it says whether the variables are still there,
/// and they are when it says so.
#[test]
fn an_evicting_pause_stopped_by_a_limit_or_by_the_context_is_a_limit_that_says_what_is_lost() {
    let _one_at_a_time = serial();
    require_root!();
    let (server, _dir) = start();
    let addr = server.addr.as_str();
    let pause = |id: &str| {
        call(
            addr,
            "POST",
            &format!("/v1/sandboxes/{id}/pause"),
            r#"{"evict": true}"#,
        )
    };

    // The timeout (2 s) interrupts a save that sleeps: the interpreter goes on with its state.
    let id = create(addr, "brief");
    let slow = "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(30)\n        return (int, ())\nslow = Slow()\nx = 7";
    cell(addr, &id, slow);
    let (status, v) = pause(&id);
    refused(
        status,
        &v,
        422,
        "limit_exceeded",
        &["timeout", "\"default\"", "goes on"],
    );
    assert_eq!(state(addr, &id), "running");
    let out = cell(addr, &id, "del slow\nprint(x)");
    assert_eq!(out["stdout"], "7\n", "{out}");
    assert_ne!(out["context_restarted"], true, "{out}");
    // Without the slow value, the same pause saves.
    let (status, v) = pause(&id);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        names(&v["evicted"][0]["saved"]),
        ["Slow", "time", "x"],
        "{v}"
    );

    // A value whose pickling ends the interpreter: its state is lost, and the answer says so.
    let id = create(addr, "ctx");
    cell(
        addr,
        &id,
        "import os\nclass Gone:\n    def __reduce__(self):\n        os._exit(3)\ngone = Gone()\ny = 1",
    );
    let (status, v) = pause(&id);
    refused(status, &v, 422, "limit_exceeded", &["\"default\"", "lost"]);
    assert_eq!(state(addr, &id), "running");
    let out = cell(addr, &id, "print('y' in globals())");
    assert_eq!(out["stdout"], "False\n", "{out}");
    assert_eq!(out["context_restarted"], true, "{out}");
}
