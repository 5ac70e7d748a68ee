//! A stand-in for a pod, for tests that run the commands Warden sends into a pod for real: a
//! pid namespace (`unshare --pid`) whose init is the pod's keep-alive command, entered with
//! `nsenter` as an unprivileged uid of its own (the pod's `runAsUser`), with a workspace and a
//! code folder on the host. Needs root (to switch uid and make the namespace), like the jail's
//! tests; CI runs as root.

#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use warden_kube::commands::Layout;

#[path = "../../../../tests/support/prerequisite.rs"]
mod prerequisite;
pub use prerequisite::*;

static NEXT_UID: AtomicU32 = AtomicU32::new(0);

/// A pid namespace standing in for a pod.
#[derive(Debug)]
pub struct LocalPod {
    root: tempfile::TempDir,
    pub uid: u32,
    keeper: Mutex<std::process::Child>,
    init_pid: u32,
    pub deleted: Mutex<bool>,
}

impl LocalPod {
    pub fn new() -> LocalPod {
        // A uid of its own per pod (and per test process): `kill -1` as this uid reaches only
        // this pod's processes.
        let uid =
            310_000 + (std::process::id() % 1000) * 100 + NEXT_UID.fetch_add(1, Ordering::SeqCst);
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for dir in ["workspace", "workspace/.tmp", "code"] {
            let p = root.path().join(dir);
            std::fs::create_dir_all(&p).unwrap();
            std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
        }
        // The pod's keep-alive process, as its pid 1.
        let keepalive = warden_kube::KubeSettings::default().keepalive_command;
        let mut keeper = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "setpriv"])
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .args(["--clear-groups", "--"])
            .args(&keepalive)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let children = format!("/proc/{}/task/{}/children", keeper.id(), keeper.id());
        let init_pid = (0..1000).find_map(|_| {
            let text = std::fs::read_to_string(&children).unwrap_or_default();
            let pid = text.split_whitespace().next().and_then(|p| p.parse().ok());
            if pid.is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
            pid
        });
        let Some(init_pid) = init_pid else {
            let _ = keeper.kill();
            panic!("the namespace's init did not start: {children} stays empty");
        };
        LocalPod {
            root,
            uid,
            keeper: Mutex::new(keeper),
            init_pid,
            deleted: Mutex::new(false),
        }
    }

    pub fn layout(&self) -> Layout {
        Layout {
            workspace: self.workspace().display().to_string(),
            code_dir: self.root.path().join("code").display().to_string(),
        }
    }

    pub fn workspace(&self) -> PathBuf {
        self.root.path().join("workspace")
    }

    /// Programs (python3) of this pod's uid still alive or unreaped, anywhere on the host; the
    /// keep-alive process (sh, sleep) runs as the same uid, as in a pod.
    pub fn live_processes(&self) -> usize {
        // Killed processes are reaped by the keep-alive process an instant later.
        std::thread::sleep(Duration::from_millis(100));
        let wanted = self.uid.to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .chars()
                    .all(|c| c.is_ascii_digit())
            })
            .filter(|e| {
                let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
                let field = |name: &str| {
                    status
                        .lines()
                        .find(|l| l.starts_with(name))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .map(str::to_owned)
                };
                field("Uid:").as_deref() == Some(wanted.as_str())
                    && field("Name:").as_deref() == Some("python3")
            })
            .count()
    }

    /// The command that runs `argv` in this pod as its uid, in the workspace. With
    /// `pod_paths`, arguments naming `/workspace` or `/code` are moved to this pod's folders
    /// (what the container's mounts do in a real pod).
    pub fn command(&self, argv: &[String], pod_paths: bool) -> tokio::process::Command {
        let layout = self.layout();
        let argv: Vec<String> = argv
            .iter()
            .map(|a| {
                if !pod_paths {
                    return a.clone();
                }
                for (pod, here) in [
                    ("/workspace", &layout.workspace),
                    ("/code", &layout.code_dir),
                ] {
                    if a == pod || a.starts_with(&format!("{pod}/")) {
                        return format!("{here}{}", &a[pod.len()..]);
                    }
                }
                a.clone()
            })
            .collect();
        let mut cmd = tokio::process::Command::new("nsenter");
        cmd.arg(format!("--target={}", self.init_pid))
            .arg("--pid")
            .arg(format!("--wd={}", self.workspace().display()))
            .args(["--", "setpriv"])
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.uid))
            .args(["--clear-groups", "--"])
            .args(&argv)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.workspace())
            .env("TMPDIR", self.workspace().join(".tmp"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    pub fn ready_pod() -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }
}

impl Drop for LocalPod {
    /// Kills the namespace's init, which takes every process of the namespace with it (the
    /// parent-death signal of `--kill-child` does not survive setpriv's change of uid).
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.init_pid.to_string()])
            .status();
        let mut keeper = self.keeper.lock().unwrap();
        let _ = keeper.kill();
        let _ = keeper.wait();
    }
}
