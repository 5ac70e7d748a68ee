//! The harness of the driver tests: starts an embedded context driver outside any sandbox,
//! with its protocol pipes at descriptors 0 (requests) and 3 (replies) as the sandbox's init
//! sets them up (or, with `--channel`, through the shell wrapper the jail uses), and speaks
//! the framed protocol to it.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

#[path = "../../../../tests/support/prerequisite.rs"]
mod prerequisite;
pub use prerequisite::*;

/// One language's driver: its interpreter, its embedded source and the language its `ready`
/// names.
pub struct Runtime {
    pub interpreter: &'static str,
    pub file: &'static str,
    pub source: &'static str,
    pub language: &'static str,
    /// Set for this interpreter only.
    pub env: &'static [(&'static str, &'static str)],
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is valid for two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A running driver and the ends of its protocol pipes.
pub struct Driver {
    pub child: Child,
    pub requests: std::fs::File,
    pub replies: std::fs::File,
    _dir: tempfile::TempDir,
}

impl Driver {
    /// Starts the driver and waits for its `ready`, which must name the runtime's language;
    /// `None` when the interpreter is not installed (a reported skip; under CI a failure).
    pub fn start(runtime: &Runtime, env: &[(&str, &str)]) -> Option<Driver> {
        let mut d = Driver::launch(runtime, env, &[])?;
        let ready = d.receive();
        assert_eq!(ready["type"], "ready", "{ready}");
        assert_eq!(ready["language"], runtime.language);
        Some(d)
    }

    /// Starts the driver with `args` after its path, without waiting for `ready`.
    pub fn launch(runtime: &Runtime, env: &[(&str, &str)], args: &[&str]) -> Option<Driver> {
        let interpreter = runtime.interpreter;
        crate::prerequisite!(
            missing_path(interpreter, "scripts/setup.sh installs it"),
            None
        );
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join(runtime.file);
        std::fs::write(&script, runtime.source).unwrap();
        let (req_r, req_w) = pipe();
        let (rep_r, rep_w) = pipe();
        let (req_fd, rep_fd) = (req_r.as_raw_fd(), rep_w.as_raw_fd());
        let mut command = if args.first() == Some(&"--channel") {
            // As the jail starts it (see JailSandbox::context_plan).
            let mut c = Command::new("/bin/sh");
            c.args([
                "-c",
                r#"exec "$@" 4<&0 5>&3 3>&- </dev/null"#,
                "warden-driver",
                interpreter,
            ]);
            c
        } else {
            Command::new(interpreter)
        };
        command
            .arg(&script)
            .args(args)
            .env_clear()
            .envs(runtime.env.iter().copied())
            .env("MPLBACKEND", "Agg")
            .env("MPLCONFIGDIR", dir.path())
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: only `fsys::dup2` (async-signal-safe) between fork and exec. The request
        // pipe goes to 0 first: it may sit at 3, where the reply pipe goes next.
        unsafe {
            command.pre_exec(move || {
                warden_net::fsys::dup2(req_fd, 0)?;
                warden_net::fsys::dup2(rep_fd, 3)
            });
        }
        let child = command.spawn().unwrap();
        drop((req_r, rep_w));
        Some(Driver {
            child,
            requests: req_w.into(),
            replies: rep_r.into(),
            _dir: dir,
        })
    }

    pub fn receive(&mut self) -> serde_json::Value {
        let mut len = [0u8; 4];
        self.replies.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        self.replies.read_exact(&mut body).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    pub fn send(&mut self, code: &str) {
        let body = serde_json::to_vec(&serde_json::json!({ "code": code })).unwrap();
        self.requests
            .write_all(&(body.len() as u32).to_le_bytes())
            .unwrap();
        self.requests.write_all(&body).unwrap();
    }

    pub fn run(&mut self, code: &str) -> serde_json::Value {
        self.send(code);
        let reply = self.receive();
        assert_eq!(reply["type"], "done", "{reply}");
        reply
    }

    pub fn interrupt(&self) {
        // SAFETY: kill with integers, on our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
    }

    /// Closes the requests (the driver exits) and returns its stdout and stderr.
    pub fn finish(mut self) -> (String, String) {
        drop(self.requests);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
        let mut out = String::new();
        let mut err = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (out, err)
    }
}
