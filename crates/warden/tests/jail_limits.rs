//! Each limit of the native jail: reached by real code, and reported with the right reason.
//! The attacks on the limits (fork and memory bombs, floods, CPU spin, tmpfs fill) are in the
//! adversarial suite (`attacks.rs`), which runs them against every backend.

mod common;

use common::{py, run_json, stdout_of, warden_cmd};
use std::time::{Duration, Instant};

fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
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

#[test]
fn timeout_kills_every_process_double_forked_ones_too() {
    require_root!();
    let marker = format!("9{}", std::process::id());
    let code = format!(
        r#"
import os, subprocess, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp('sleep', ['sleep', '{marker}'])
    os._exit(0)
subprocess.Popen(['bash', '-c', 'trap "" TERM; exec sleep {marker}'])
print('started', flush=True)
time.sleep(60)
"#
    );
    let (v, status, elapsed) = common::run_with_timeout("python", &code, "1");
    assert_eq!(v["reason"], "timeout", "{v}");
    assert_eq!(v["stdout"], "started\n");
    assert_eq!(status, Some(124));
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    let survivors = host_processes_with(&marker);
    assert!(survivors.is_empty(), "left running: {survivors:?}");
}

#[test]
fn survivors_of_a_normal_exit_are_killed_too() {
    require_root!();
    let marker = format!("8{}", std::process::id());
    let v = py(&format!(
        "import subprocess\nsubprocess.Popen(['setsid', 'sleep', '{marker}'])\nprint('bye')"
    ));
    assert_eq!(v["reason"], "exited");
    assert!(host_processes_with(&marker).is_empty());
}

#[test]
fn output_flood_is_cut_with_a_marker_and_stops_the_run() {
    require_root!();
    let start = Instant::now();
    let v = py("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)");
    assert_eq!(v["reason"], "output", "{v:.200}");
    assert_eq!(v["stdout_truncated"], true);
    let out = stdout_of(&v);
    assert!(out.ends_with("\n[warden: output truncated at 65536 bytes]\n"));
    assert_eq!(
        out.len(),
        65536 + "\n[warden: output truncated at 65536 bytes]\n".len()
    );
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn file_size_limit() {
    require_root!();
    let v = py(
        "import os\ntry:\n    open('big', 'wb').write(b'0' * (5 << 20))\nexcept OSError as e:\n    print(e.strerror)",
    );
    assert_eq!(stdout_of(&v), "File too large\n", "{v}");
}

#[test]
fn cpu_share_is_a_hard_quota() {
    require_root!();
    // Two busy processes for 2 s of wall time under a quarter-core quota get about 0.5 s of CPU.
    let (v, _) = run_json(
        "half_cpu",
        "python",
        "import os, time\npid = os.fork()\nend = time.time() + 2\nwhile time.time() < end: pass\nif pid:\n    os.waitpid(pid, 0)\n    t = os.times()\n    print(round(t.user + t.system + t.children_user + t.children_system, 2))",
    );
    let used: f64 = stdout_of(&v).trim().parse().unwrap();
    assert!(
        used < 0.9,
        "used {used}s of CPU in 2 s under a 0.25-core quota"
    );
    assert!(used > 0.2, "used {used}s: the program barely ran");
}

#[test]
fn stdin_is_given_to_the_program() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "3\n4\n").unwrap();
    let out = warden_cmd(
        &[
            "--config",
            common::settings().to_str().unwrap(),
            "run",
            "--stdin",
            input.to_str().unwrap(),
            "-l",
            "python",
            "-",
        ],
        "import sys\nprint(sum(int(l) for l in sys.stdin))",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "7\n");
}

#[test]
fn killed_by_its_own_signal_is_reason_signal() {
    require_root!();
    let (v, status) = run_json("test", "bash", "kill -SEGV $$");
    assert_eq!(v["reason"], "signal", "{v}");
    assert_eq!(v["signal"], 11);
    assert_eq!(status, 128 + 11);
}

#[test]
fn closing_stdout_and_stderr_does_not_escape_the_timeout() {
    require_root!();
    let (v, _, elapsed) = common::run_with_timeout("bash", "exec >&- 2>&-; sleep 30", "1");
    assert_eq!(v["reason"], "timeout", "{v}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}
