//! Nothing is left behind, and what cannot be applied is refused.

mod common;

use std::path::Path;

fn count_cgroup_leaves() -> usize {
    let mut n = 0;
    for root in [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/cpu",
    ] {
        let mut stack = vec![Path::new(root).to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    if e.file_name().to_string_lossy().starts_with("run-") {
                        n += 1;
                    }
                    stack.push(e.path());
                }
            }
        }
    }
    n
}

fn count_mounts() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count()
}

/// Processes running as a sandbox's host user (a uid of the default range) whose command line
/// has `marker` (other tests of this file run at the same time).
fn sandbox_processes(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let sandbox_user = std::fs::read_to_string(e.path().join("status"))
            .map(|s| {
                s.lines().any(|l| {
                    l.starts_with("Uid:")
                        && l.split_whitespace()
                            .nth(1)
                            .and_then(|u| u.parse().ok())
                            .is_some_and(|u| warden_net::uids::UidRange::default().contains(u))
                })
            })
            .unwrap_or(false);
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if sandbox_user && cmd.contains(marker) {
            found.push(cmd);
        }
    }
    found
}

fn shmem_kb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Shmem:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

#[test]
fn two_hundred_runs_leave_nothing_behind() {
    require_root!();
    let marker = format!("3{}7", std::process::id());
    let before = (
        count_cgroup_leaves(),
        count_mounts(),
        sandbox_processes(&marker).len(),
        shmem_kb(),
    );
    let settings = common::settings();
    // Each run leaves a process, a file in the workspace and in /tmp, and output.
    let code = format!(
        "import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nopen('/tmp/x', 'wb').write(b'0' * (1 << 20))\nopen('output/o.txt', 'w').write('x')\nprint('ok')"
    );
    for i in 0..200 {
        let out = std::process::Command::new(common::warden())
            .args([
                "--config",
                settings.to_str().unwrap(),
                "run",
                "-l",
                "python",
                "-",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(code.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ok\n",
            "run {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Refused runs (a policy violation after the CLI already forked its helper, which created
    // a cgroup and namespaces) leave nothing either.
    for _ in 0..20 {
        let out = common::warden_cmd(
            &[
                "--config",
                settings.to_str().unwrap(),
                "run",
                "--profile",
                "strict",
                "-l",
                "python",
                "-",
            ],
            "import os",
        );
        assert_eq!(out.status.code(), Some(125));
    }
    // The helper finishes its clean-up after it has answered: give it a moment.
    let mut after = before;
    for _ in 0..50 {
        after = (
            count_cgroup_leaves(),
            count_mounts(),
            sandbox_processes(&marker).len(),
            shmem_kb(),
        );
        if after.0 == before.0 && after.1 == before.1 && after.2 == before.2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(after.0, before.0, "cgroups left behind");
    assert_eq!(after.1, before.1, "mounts left behind");
    assert_eq!(
        after.2,
        before.2,
        "processes left behind: {:?}",
        sandbox_processes(&marker)
    );
    // 200 runs × 1 MiB in tmpfs would be 200 MiB of shared memory if workspaces leaked.
    assert!(
        after.3 < before.3 + 50 * 1024,
        "tmpfs memory grew from {} kB to {} kB",
        before.3,
        after.3
    );
}

#[test]
fn without_cgroups_a_limited_profile_is_refused() {
    require_root!();
    // An unprivileged user can create the namespaces but not the cgroup: the run must be
    // refused, not run without its memory limit.
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::warden())
        .args([
            "--config",
            common::settings().to_str().unwrap(),
            "run",
            "--json",
            "-l",
            "python",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"print('ran')")?;
            c.wait_with_output()
        })
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "refused", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("cgroup"),
        "{v}"
    );
    assert_eq!(out.status.code(), Some(125));
}
