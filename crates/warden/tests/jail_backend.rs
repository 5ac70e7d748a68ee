//! The jail backend as a multi-threaded caller (the daemon) uses it: helpers forked by its fork
//! server (or exec'd one by one), never forked from the caller itself; output streams as events;
//! several sandboxes run at once; a fork server that dies is replaced.

mod common;

use std::sync::Arc;
use std::time::Duration;
use warden_engine::{Backend, ExecPlan};
use warden_jail::JailBackend;
use warden_types::{ExecEvent, Language, Limits, Reason};

fn backend() -> Arc<JailBackend> {
    Arc::new(JailBackend::new(common::jail_settings()))
}

fn exec_backend() -> Arc<JailBackend> {
    Arc::new(JailBackend::new(warden_jail::JailSettings {
        helper_start: warden_jail::HelperStart::Exec,
        ..common::jail_settings()
    }))
}

fn proc_field(pid: i32, file: &str) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default()
}

/// The ancestors of the process whose command line holds `marker` (a sandboxed program's
/// argument), nearest first, up to this process's child.
fn ancestors_of_program(marker: &str) -> Vec<i32> {
    let Some(program) = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<i32>().ok()?;
            proc_field(pid, "cmdline")
                .split(|b| *b == 0)
                .any(|arg| arg == marker.as_bytes())
                .then_some(pid)
        })
    else {
        return vec![];
    };
    let me = std::process::id() as i32;
    let mut chain = vec![program];
    while let Some(parent) = common::parent_of(*chain.last().unwrap() as u32).map(|p| p as i32) {
        if parent == me {
            return chain;
        }
        if parent <= 1 {
            break;
        }
        chain.push(parent);
    }
    vec![]
}

/// This process's child above the marked program, if that child is a fork server (a forked
/// helper's and its init's environment block is the fork server's own: only the one whose
/// parent is this process is the server).
fn fork_server_above(marker: &str) -> Option<i32> {
    let top = *ancestors_of_program(marker).last()?;
    proc_field(top, "environ")
        .split(|b| *b == 0)
        .any(|v| v == b"WARDEN_JAIL_HELPER=forks")
        .then_some(top)
}

/// The descriptors this process holds open across exec (the test harness's, e.g. cargo's
/// jobserver): an exec'd helper inherits them, a forked one does not.
fn inheritable_fds() -> Vec<String> {
    std::fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .flatten()
        .filter(|e| {
            let info = std::fs::read_to_string(e.path()).unwrap_or_default();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                .unwrap_or(0);
            flags & libc::O_CLOEXEC as u32 == 0
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !["0", "1", "2"].contains(&n.as_str()))
        .collect()
}

/// What can be seen of a helper from outside: its signal mask and dispositions, credentials,
/// capabilities, threads, and the kinds of its open descriptors, leaving out those numbered in
/// `leaked` (the test harness's, which only an exec'd helper inherits).
fn helper_view(pid: i32, leaked: &[String]) -> (Vec<String>, Vec<String>) {
    let status = String::from_utf8(proc_field(pid, "status")).unwrap_or_default();
    let lines = status
        .lines()
        .filter(|l| {
            [
                "Sig",
                "Shd",
                "Cap",
                "NoNewPrivs",
                "Seccomp",
                "Uid",
                "Gid",
                "Groups",
                "Threads",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .map(String::from)
        .collect();
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| !leaked.contains(&e.file_name().to_string_lossy().into_owned()))
                .map(|e| {
                    let target = std::fs::read_link(e.path()).unwrap_or_default();
                    let target = target.to_string_lossy();
                    // pipe:[inode], a run's cgroup: the kind, not the instance.
                    target
                        .split(":[")
                        .next()
                        .unwrap_or_default()
                        .split("/run-")
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default();
    fds.sort();
    (lines, fds)
}

/// Starts a run of a program that prints a line, then sleeps 30 s, with `marker` as its
/// argument (to find its processes); returns once the line is out, with the run's task.
async fn start_marked_run(
    b: &Arc<JailBackend>,
    marker: &str,
) -> tokio::task::JoinHandle<Result<warden_types::ExecResult, warden_engine::BackendError>> {
    let mut p = plan("import time\nprint('started', flush=True)\ntime.sleep(30)");
    p.args = vec![marker.to_owned()];
    p.limits.timeout = Duration::from_secs(40);
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let run = {
        let b = b.clone();
        tokio::spawn(async move { b.exec(p, Some(tx)).await })
    };
    assert!(matches!(rx.recv().await, Some(ExecEvent::Stdout { .. })));
    run
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
        limits: Limits {
            timeout: Duration::from_secs(10),
            memory_mb: 128,
            max_pids: 32,
            cpus: 1.0,
            max_output_bytes: 1 << 20,
            max_file_size_bytes: 1 << 20,
            workspace_mb: 16,
            max_artifacts: 4,
            max_artifact_bytes: 1 << 20,
        },
        network_enabled: false,
        egress: Default::default(),
        image: None,
        container_runtime: None,
    }
}

#[test]
fn exec_mode_streams_output_while_the_program_runs() {
    require_root!();
    common::runtime().block_on(async {
        let b = backend();
        b.check(&plan("")).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let code = "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')";
        let run = tokio::spawn({
            let b = b.clone();
            async move { b.exec(plan(code), Some(tx)).await }
        });
        // The first line arrives while the program is still sleeping (in one or more chunks).
        let mut seen = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(900);
        while !seen.ends_with('\n') {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(ExecEvent::Stdout { text, timestamp })) => {
                    assert!(timestamp > 1_700_000_000_000, "timestamp {timestamp}");
                    seen.push_str(&text)
                }
                other => panic!("no output while the program ran: {other:?} after {seen:?}"),
            }
        }
        assert_eq!(seen, "first\n");
        assert!(!run.is_finished());
        let result = run.await.unwrap().unwrap();
        assert_eq!(result.stdout, "first\nsecond\n");
        assert_eq!(result.reason, Reason::Exited);
    });
}

#[test]
fn exec_mode_runs_sandboxes_concurrently() {
    require_root!();
    common::runtime().block_on(async {
        let b = backend();
        let start = std::time::Instant::now();
        let runs: Vec<_> = (0..6)
            .map(|i| {
                let b = b.clone();
                tokio::spawn(async move {
                    b.exec(
                        plan(&format!("import time\ntime.sleep(1)\nprint({i})")),
                        None,
                    )
                    .await
                })
            })
            .collect();
        for (i, run) in runs.into_iter().enumerate() {
            let r = run.await.unwrap().unwrap();
            assert_eq!(r.stdout, format!("{i}\n"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
    });
}

#[test]
fn a_caller_that_goes_away_leaves_no_process_and_no_cgroup() {
    require_root!();
    common::runtime().block_on(async {
        let backend = backend();
        let mut p = plan(
            "import os\nif os.fork() == 0:\n    os.execvp('sleep', ['sleep', '63.5'])\nos.execvp('sleep', ['sleep', '63.5'])",
        );
        p.limits.timeout = Duration::from_secs(60);
        let run = {
            let backend = backend.clone();
            tokio::spawn(async move { backend.exec(p, None).await })
        };
        let sleepers = || {
            String::from_utf8(
                std::process::Command::new("pgrep")
                    .args(["-f", "sleep 63.5"])
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap()
            .split_whitespace()
            .map(|pid| pid.parse::<u32>().unwrap())
            .collect::<Vec<_>>()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sleepers().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never started");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Its run's leaves are named after its helper. Only those are checked: the other
        // tests of this binary run beside it, and a leaf of theirs whose helper was killed
        // looks stale until their sweep removes it.
        let helper = run_helper_of(sleepers()[0]).expect("the program's cgroup leaf");
        let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
        assert!(!h.runs_of(helper).is_empty());
        // The caller goes away (an HTTP client that disconnected).
        run.abort();
        let _ = run.await;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !sleepers().is_empty() || !h.runs_of(helper).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "left behind: processes {:?} leaves {:?}",
                sleepers(),
                h.runs_of(helper)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// The helper whose run process `pid` is in, from its cgroup leaf's name (`run-<helper>-…`).
fn run_helper_of(pid: u32) -> Option<u32> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let leaf = cgroups.split("/run-").nth(1)?;
    leaf.split('-').next()?.parse().ok()
}

#[test]
fn the_import_guard_changes_nothing_the_program_observes() {
    require_root!();
    common::runtime().block_on(async {
        let b = backend();
        // What a program can see of its start: argv, its names, the import path, the loaded
        // modules, its environment, its folder, warnings' attribution, a traceback, the exit.
        let code = "import sys, os, json, warnings, site\n\
            print(sys.argv, __file__, __name__, __package__, __spec__, type(__loader__).__name__)\n\
            print(sys.path, sorted(sys.path_importer_cache))\n\
            print(site.USER_BASE, site.USER_SITE, site.ENABLE_USER_SITE)\n\
            print(sorted(sys.modules))\n\
            print(sorted(os.environ.items()))\n\
            print(sorted(os.listdir('/code')), sys.flags)\n\
            warnings.warn('attributed to the program')\n\
            def f():\n    import json.nope\n\
            try:\n    f()\nexcept ImportError as e:\n    print(repr(e))\n\
            json.loads('{')\n";
        let guard = warden_engine::import_guard::ImportGuard {
            allowed: ["sys", "os", "json", "warnings", "site"]
                .map(String::from)
                .to_vec(),
        };
        let mut guarded = plan(code);
        guarded.args = vec!["a b".into(), "c".into()];
        guarded.import_guard = Some(guard);
        let mut plain = guarded.clone();
        plain.import_guard = None;
        let with = b.exec(guarded, None).await.unwrap();
        let without = b.exec(plain, None).await.unwrap();
        assert_eq!(with.exit_code, Some(1), "{with:?}");
        assert!(with.stderr.contains("JSONDecodeError"), "{with:?}");
        assert!(with.stderr.contains("main.py:8: UserWarning"), "{with:?}");
        assert_eq!(
            (&with.stdout, &with.stderr, with.exit_code, with.reason),
            (
                &without.stdout,
                &without.stderr,
                without.exit_code,
                without.reason
            )
        );
    });
}

/// The guard freezes what exists before the program starts (a cheaper exit) and nothing of
/// the program's: its globals' cycles are still collected at its exit while `print` works, in
/// the order they would be without the guard.
#[test]
fn the_import_guard_freezes_only_what_exists_before_the_program() {
    require_root!();
    common::runtime().block_on(async {
        let code = "import sys\n\
            print('gc' in sys.modules)\n\
            import gc\n\
            class Finalized:\n    def __init__(self, name):\n        self.name, self.me = name, self\n\
            \x20   def __del__(self):\n        print('finalized', self.name, flush=True)\n\
            first, second = Finalized('first'), Finalized('second')\n\
            def keep():\n    return first\n\
            print(gc.get_freeze_count() > 0, gc.is_tracked(keep), keep in gc.get_objects())\n";
        let guard = warden_engine::import_guard::ImportGuard {
            allowed: ["sys", "gc"].map(String::from).to_vec(),
        };
        let mut guarded = plan(code);
        guarded.import_guard = Some(guard);
        let mut plain = guarded.clone();
        plain.import_guard = None;
        let with = backend().exec(guarded, None).await.unwrap();
        let without = backend().exec(plain, None).await.unwrap();
        assert_eq!(
            (with.stdout.as_str(), with.stderr.as_str(), with.exit_code),
            ("False\nTrue True True\nfinalized first\nfinalized second\n", "", Some(0)),
            "{with:?}"
        );
        assert_eq!(
            without.stdout.replacen("False True", "True True", 1),
            with.stdout,
            "{without:?}"
        );
    });
}

#[test]
fn forked_and_execd_helpers_are_the_same_process_and_give_the_program_the_same() {
    require_root!();
    common::runtime().block_on(async {
        // What a program can see of the process it was started in: its environment, its
        // descriptors, its signals' mask and dispositions, its limits, its scheduling, its
        // credentials, its folder, its session.
        let code = "import os, resource\n\
            print(sorted(os.environ.items()))\n\
            print(sorted(os.listdir('/proc/self/fd')))\n\
            print([l for l in open('/proc/self/status') if l.startswith(('Sig', 'Shd', 'Cap', 'NoNewPrivs', 'Seccomp', 'Uid', 'Gid', 'Groups'))])\n\
            print([resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith('RLIMIT_')])\n\
            print(os.sched_getscheduler(0), os.nice(0), os.sched_getaffinity(0), os.umask(0o22))\n\
            print(os.getcwd(), os.getpid(), os.getppid(), os.getsid(0), os.getpgrp())\n\
            print(open('/proc/self/oom_score_adj').read(), open('/proc/self/loginuid').read())\n";
        let forked = backend().exec(plan(code), None).await.unwrap();
        let execd = exec_backend().exec(plan(code), None).await.unwrap();
        assert_eq!(forked.exit_code, Some(0), "{forked:?}");
        assert_eq!(
            (&forked.stdout, &forked.stderr),
            (&execd.stdout, &execd.stderr)
        );
        // And the helper itself, seen from outside while its program runs: the one below the
        // fork server against the one exec'd by this process.
        let mut views = vec![];
        for (name, b) in [("forked", backend()), ("exec'd", exec_backend())] {
            let marker = format!("helper-view-{}-{}", name.len(), std::process::id());
            let run = start_marked_run(&b, &marker).await;
            let chain = ancestors_of_program(&marker);
            // program ← init ← helper (← the fork server)
            let helper = match name {
                "forked" => chain[chain.len() - 2],
                _ => chain[chain.len() - 1],
            };
            let leaked = match name {
                "forked" => vec![],
                _ => inheritable_fds(),
            };
            views.push(helper_view(helper, &leaked));
            run.abort();
        }
        assert!(!views[0].0.is_empty() && !views[0].1.is_empty(), "{views:?}");
        assert_eq!(views[0], views[1], "forked, then exec'd");
    });
}

#[test]
fn a_fork_server_that_dies_is_replaced_and_its_runs_end() {
    require_root!();
    common::runtime().block_on(async {
        let b = backend();
        // A run in progress when its fork server is killed: its helper and sandbox die with
        // the server, and the run ends at once as lost, leaving nothing behind.
        let marker = format!("fork-server-test-{}", std::process::id());
        let run = start_marked_run(&b, &marker).await;
        let server = fork_server_above(&marker).expect("the run's fork server");
        let killed_at = std::time::Instant::now();
        // SAFETY: kill with integers.
        assert_eq!(unsafe { libc::kill(server, libc::SIGKILL) }, 0);
        let outcome = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("the run ended")
            .unwrap();
        let error = outcome.expect_err("a run whose helper died");
        assert!(
            error.to_string().contains("helper ended"),
            "{error} after {:?}",
            killed_at.elapsed()
        );
        let h = warden_jail::cgroup::Hierarchy::detect().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while h.has_stale() {
            assert!(std::time::Instant::now() < deadline, "stale cgroups left");
            h.remove_stale();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The next run starts another fork server.
        let run = start_marked_run(&b, &marker).await;
        let replacement = fork_server_above(&marker).expect("the next run's fork server");
        assert_ne!(replacement, server);
        run.abort();
    });
}

#[test]
fn a_fork_server_that_does_not_answer_is_given_up_for_another() {
    require_root!();
    common::runtime().block_on(async {
        let b = backend();
        let marker = format!("fork-server-stopped-{}", std::process::id());
        let run = start_marked_run(&b, &marker).await;
        let server = fork_server_above(&marker).expect("the run's fork server");
        // SAFETY: kill with integers.
        assert_eq!(unsafe { libc::kill(server, libc::SIGSTOP) }, 0);
        let asked = std::time::Instant::now();
        let error = b
            .exec(plan("print(1)"), None)
            .await
            .expect_err("a start through a stopped fork server");
        assert!(
            error.to_string().contains("did not answer"),
            "{error} after {:?}",
            asked.elapsed()
        );
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "{:?}",
            asked.elapsed()
        );
        // The next start gets another fork server; the run of the stopped one still runs.
        assert_eq!(b.exec(plan("print(2)"), None).await.unwrap().stdout, "2\n");
        assert!(!run.is_finished());
        // SAFETY: kill with integers.
        unsafe {
            libc::kill(server, libc::SIGKILL);
            libc::kill(server, libc::SIGCONT);
        }
        let ended = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("its run ended with it")
            .unwrap();
        assert!(ended.is_err(), "{ended:?}");
    });
}
