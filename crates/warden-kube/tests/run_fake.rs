//! One execution over a scripted fake cluster: the commands sent into the pod, and how the
//! answers become a result (reasons by precedence, output cap, artifacts, errors).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_engine::ExecPlan;
use warden_kube::cluster::{Cluster, ClusterError, ExecSession, ExitStatus};
use warden_kube::commands::Layout;
use warden_kube::run::{self, RunError};
use warden_types::{Language, Limits, Reason};

/// What the fake answers to one exec: stdout, stderr, status; `hang` never ends the stream.
#[derive(Debug, Clone, Default)]
struct Answer {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: Option<ExitStatus>,
    hang: bool,
    fail: Option<ClusterError>,
}

fn ok(stdout: &[u8]) -> Answer {
    Answer {
        stdout: stdout.to_vec(),
        status: Some(ExitStatus::Code(0)),
        ..Answer::default()
    }
}

#[derive(Debug, Default)]
struct Fake {
    answers: Mutex<VecDeque<Answer>>,
    commands: Mutex<Vec<Vec<String>>>,
    pod: Mutex<Option<k8s_openapi::api::core::v1::Pod>>,
}

#[async_trait::async_trait]
impl Cluster for Fake {
    async fn create_pod(&self, _: &k8s_openapi::api::core::v1::Pod) -> Result<(), ClusterError> {
        Ok(())
    }
    async fn get_pod(&self, name: &str) -> Result<k8s_openapi::api::core::v1::Pod, ClusterError> {
        self.pod
            .lock()
            .unwrap()
            .clone()
            .ok_or(ClusterError::NotFound {
                op: format!("get pod {name}"),
                message: String::new(),
            })
    }
    async fn pod_events(
        &self,
        _: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Event>, ClusterError> {
        Ok(vec![])
    }
    async fn delete_pod(&self, _: &str) -> Result<bool, ClusterError> {
        Ok(true)
    }
    async fn list_pods(
        &self,
        _: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, ClusterError> {
        Ok(vec![])
    }
    async fn get_network_policy(
        &self,
        _: &str,
    ) -> Result<Option<k8s_openapi::api::networking::v1::NetworkPolicy>, ClusterError> {
        Ok(None)
    }
    async fn create_network_policy(
        &self,
        _: &k8s_openapi::api::networking::v1::NetworkPolicy,
    ) -> Result<(), ClusterError> {
        Ok(())
    }
    async fn exec(&self, _pod: &str, command: Vec<String>) -> Result<ExecSession, ClusterError> {
        self.commands.lock().unwrap().push(command);
        let a = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("an answer per exec");
        if let Some(e) = a.fail {
            return Err(e);
        }
        let (stdout, keep): (
            Box<dyn tokio::io::AsyncRead + Send + Unpin>,
            Box<dyn Send + Sync>,
        ) = if a.hang {
            // A stream that stays open: its writer is kept alive with the session.
            let (w, r) = tokio::io::duplex(1 << 16);
            (Box::new(r), Box::new(w))
        } else {
            (Box::new(std::io::Cursor::new(a.stdout)), Box::new(()))
        };
        let status = a.status.clone();
        Ok(ExecSession {
            stdin: Box::new(tokio::io::sink()),
            stdout,
            stderr: Box::new(std::io::Cursor::new(a.stderr)),
            status: Box::pin(async move {
                match status {
                    Some(s) => s,
                    None => std::future::pending().await,
                }
            }),
            keep,
        })
    }
    async fn version(&self) -> Result<String, ClusterError> {
        Ok("v1.33.0".into())
    }
}

fn plan() -> ExecPlan {
    ExecPlan {
        import_guard: None,
        profile: "standard".into(),
        language: Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: "print('hi')".into(),
        args: vec!["a1".into()],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: Limits {
            timeout: Duration::from_millis(300),
            memory_mb: 128,
            max_pids: 64,
            cpus: 1.0,
            max_output_bytes: 100,
            max_file_size_bytes: 1 << 20,
            workspace_mb: 64,
            max_artifacts: 4,
            max_artifact_bytes: 1 << 20,
        },
        network_enabled: false,
        egress: Default::default(),
        container_runtime: None,
        image: Some("python:3.11-slim".into()),
    }
}

const COUNTERS: &[u8] =
    b"[memory.events]\nlow 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n[pids.events]\nmax 0\n";
const COUNTERS_OOM: &[u8] =
    b"[memory.events]\nlow 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n[pids.events]\nmax 0\n";

fn output_tar() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o644);
    b.append_data(&mut h, "output/r.txt", &b"abc"[..]).unwrap();
    b.into_inner().unwrap()
}

async fn execute(answers: Vec<Answer>) -> (Result<warden_types::ExecResult, RunError>, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    *fake.answers.lock().unwrap() = answers.into();
    let r = run::execute(fake.as_ref(), "warden-sb-1", &Layout::pod(), &plan(), None).await;
    (r, fake)
}

#[tokio::test]
async fn a_run_writes_the_code_runs_under_prlimit_reaps_and_collects() {
    let (r, fake) = execute(vec![
        ok(COUNTERS),
        ok(b"hi\n"),
        ok(COUNTERS),
        ok(&output_tar()),
    ])
    .await;
    let r = r.unwrap();
    assert_eq!(
        (r.reason, r.exit_code, r.stdout.as_str()),
        (Reason::Exited, Some(0), "hi\n")
    );
    assert_eq!(r.artifacts.len(), 1);
    assert_eq!(r.artifacts[0].name, "r.txt");
    let commands = fake.commands.lock().unwrap().clone();
    assert_eq!(commands.len(), 4);
    assert_eq!(commands[0][..2], ["sh", "-c"]);
    assert_eq!(commands[0][4..], ["/workspace", "/code/main.py"]);
    assert_eq!(
        commands[1][..7],
        [
            "prlimit",
            "--nproc=67",
            "--fsize=1048576",
            "--core=0",
            "--",
            "sh",
            "-c"
        ]
    );
    assert_eq!(
        commands[1][8..],
        ["warden", "python3", "/code/main.py", "a1"]
    );
    assert!(
        commands[2][2].starts_with("kill -KILL -1"),
        "{:?}",
        commands[2]
    );
    assert_eq!(commands[3][..2], ["tar", "-c"]);
}

#[tokio::test]
async fn exit_codes_and_signals() {
    let with_status = |s| Answer {
        status: Some(s),
        ..Answer::default()
    };
    let (r, _) = execute(vec![
        ok(COUNTERS),
        with_status(ExitStatus::Code(3)),
        ok(COUNTERS),
        ok(b""),
    ])
    .await;
    let r = r.unwrap();
    assert_eq!(
        (r.reason, r.exit_code, r.signal),
        (Reason::Exited, Some(3), None)
    );
    let (r, _) = execute(vec![
        ok(COUNTERS),
        with_status(ExitStatus::Code(137)),
        ok(COUNTERS),
        ok(b""),
    ])
    .await;
    let r = r.unwrap();
    assert_eq!(
        (r.reason, r.exit_code, r.signal),
        (Reason::Signal, None, Some(9))
    );
}

#[tokio::test]
async fn the_timeout_stops_the_run_and_the_reap_kills_what_is_left() {
    let hang = Answer {
        hang: true,
        ..Answer::default()
    };
    let (r, fake) = execute(vec![ok(COUNTERS), hang, ok(COUNTERS), ok(b"")]).await;
    let r = r.unwrap();
    assert_eq!(r.reason, Reason::Timeout);
    assert!(r.duration_ms >= 300, "{}", r.duration_ms);
    assert!(fake.commands.lock().unwrap()[2][2].starts_with("kill -KILL -1"));
}

#[tokio::test]
async fn output_past_the_cap_is_cut_marked_and_wins_over_other_reasons() {
    let flood = Answer {
        stdout: vec![b'x'; 5000],
        hang: false,
        status: None,
        ..Answer::default()
    };
    let (r, _) = execute(vec![ok(COUNTERS), flood, ok(COUNTERS_OOM), ok(b"")]).await;
    let r = r.unwrap();
    assert_eq!(r.reason, Reason::Output);
    assert!(r.stdout_truncated);
    assert!(r.stdout.starts_with(&"x".repeat(100)));
    assert!(
        r.stdout
            .ends_with("[warden: output truncated at 100 bytes]\n"),
        "{}",
        r.stdout
    );
}

#[tokio::test]
async fn an_oom_kill_during_the_run_is_the_memory_reason() {
    let (r, _) = execute(vec![
        ok(COUNTERS),
        Answer {
            status: Some(ExitStatus::Code(137)),
            ..Answer::default()
        },
        ok(COUNTERS_OOM),
        ok(b""),
    ])
    .await;
    assert_eq!(r.unwrap().reason, Reason::Memory);
}

#[tokio::test]
async fn a_container_killed_for_memory_is_the_memory_reason_and_an_evicted_one_is_gone() {
    let gone = || Answer {
        fail: Some(ClusterError::NotFound {
            op: "exec".into(),
            message: "container not running".into(),
        }),
        ..Answer::default()
    };
    let pod = |file: &str| -> k8s_openapi::api::core::v1::Pod {
        let path = format!("{}/tests/recorded/{file}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let fake = Arc::new(Fake::default());
    // No answer for the artifacts step: the container is gone, so it must not be asked.
    *fake.answers.lock().unwrap() = vec![ok(COUNTERS), Answer::default(), gone()].into();
    *fake.pod.lock().unwrap() = Some(pod("pod_oom_killed.json"));
    let r = run::execute(fake.as_ref(), "warden-sb-1", &Layout::pod(), &plan(), None)
        .await
        .unwrap();
    assert_eq!(r.reason, Reason::Memory);
    assert!(r.skipped_artifacts[0].why.contains("killed for memory"));

    *fake.answers.lock().unwrap() = vec![ok(COUNTERS), Answer::default(), gone()].into();
    *fake.pod.lock().unwrap() = Some(pod("pod_evicted.json"));
    let r = run::execute(fake.as_ref(), "warden-sb-1", &Layout::pod(), &plan(), None).await;
    assert_eq!(r.unwrap_err(), RunError::PodEnded("Evicted".into()));
}

#[tokio::test]
async fn an_interpreter_the_image_lacks_is_a_command_error() {
    let not_started = Answer {
        status: Some(ExitStatus::NotStarted(
            "exec: \"prlimit\": executable file not found in $PATH".into(),
        )),
        ..Answer::default()
    };
    let (r, _) = execute(vec![ok(COUNTERS), not_started, ok(COUNTERS)]).await;
    assert!(matches!(r, Err(RunError::NotStarted(m)) if m.contains("prlimit")));
    // An image without sh fails at the first step, with the same kind of error.
    let no_sh = Answer {
        status: Some(ExitStatus::NotStarted(
            "exec: \"sh\": executable file not found".into(),
        )),
        ..Answer::default()
    };
    let (r, _) = execute(vec![no_sh]).await;
    assert!(matches!(r, Err(RunError::NotStarted(m)) if m.contains("\"sh\"")));
}

#[test]
fn counters_read_the_right_file() {
    // memory.events has a `max` line too: only pids.events' counts as the pids limit.
    let c = run::Counters::parse(std::str::from_utf8(COUNTERS).unwrap());
    assert_eq!(
        c,
        run::Counters {
            oom_kills: 0,
            pids_max: 0
        }
    );
    let c = run::Counters::parse("[pids.events]\nmax 2\n[memory.events]\noom_kill 5\n");
    assert_eq!(
        c,
        run::Counters {
            oom_kills: 5,
            pids_max: 2
        }
    );
}
