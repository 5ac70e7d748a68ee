//! Tenants on one host: a sandbox that exhausts a resource the kernel counts per user must not
//! starve a concurrent sandbox of it (issue 23, point 7; docs/threat-model.md, "Per-user
//! kernel limits"). Each sandbox runs as a host uid of its own (`warden_net::uids`) and, in
//! the jail, owns its user namespace, so each of these limits is per sandbox.
//!
//! One attack per limit, on the jail and on docker: a "hog" in a persistent sandbox takes all
//! it can of the resource and shows that it is exhausted for itself (its own next attempt
//! fails: the attack is live), then, while it holds it, a one-shot sandbox and another
//! persistent sandbox must each still get the resource. A last test checks that the per-user
//! limits no sandbox can reach because their system calls are refused stay refused.
//!
//! Before the change, on this kernel (6.18), one jail sandbox holding 128 inotify instances
//! left every other sandbox — and the host's root — unable to open one: the user namespaces
//! were root's, and the kernel charges a namespace's inotify instances, pending signals,
//! processes and namespaces to its owner.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use warden_engine::{Backend, BackendSandbox, ExecPlan, SandboxSpec};
use warden_types::{ExecEvent, Language, Limits};

const DOCKER_IMAGE: &str = "warden-python:3.11";

/// Shared by every program: ctypes for the system calls Python does not wrap, and how a hog
/// reports that it holds the resource (then holds it until its sandbox is destroyed).
const PRELUDE: &str = r#"
import ctypes, errno, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def hold(what):
    # The padding pushes the line past what the docker relay holds back (the length of its
    # end marker, which a chunk's tail might start).
    print("HOG READY", what, "\n" + "." * 100, flush=True)
    time.sleep(300)
def victim(ok, why=""):
    print("VICTIM OK" if ok else "VICTIM STARVED " + str(why), flush=True)
"#;

/// One per-user limit: what the hog does (it calls `hold` only once it exhausted the limit
/// for itself, else it exits with the reason) and what a victim must still manage.
struct Attack {
    name: &'static str,
    hog: &'static str,
    victim: &'static str,
    /// The hog's memory limit, MiB (the victims have the default).
    hog_memory_mb: u64,
}

/// The sandboxes' memory limit, MiB.
const MEMORY_MB: u64 = 256;

const INOTIFY_INSTANCES: Attack = Attack {
    name: "inotify instances (fs.inotify.max_user_instances)",
    hog: r#"
fds = []
while len(fds) < 100000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
# EMFILE well below the descriptor limit: the per-user count, and it holds for this user.
if err() != "EMFILE" or len(fds) > 4000 or libc.inotify_init1(0) >= 0:
    sys.exit(f"not exhausted: {len(fds)} {err()}")
hold(len(fds))
"#,
    victim: r#"
fd = libc.inotify_init1(0)
victim(fd >= 0, err())
"#,
    hog_memory_mb: MEMORY_MB,
};

const INOTIFY_WATCHES: Attack = Attack {
    name: "inotify watches (fs.inotify.max_user_watches)",
    hog: r#"
os.makedirs("/tmp/w", exist_ok=True)
files = []
def path(i):
    while len(files) <= i:
        p = f"/tmp/w/{len(files)}"
        open(p, "w").close()
        files.append(p.encode())
    return files[i]
total, why = 0, None
for _ in range(120):
    fd = libc.inotify_init1(0)
    if fd < 0:
        why = err()
        break
    for i in range(4000):
        if libc.inotify_add_watch(fd, path(i), 0x100) < 0:
            why = err()
            break
        total += 1
    if why:
        break
fd = libc.inotify_init1(0)
if why != "ENOSPC" or fd < 0 or libc.inotify_add_watch(fd, b"/tmp", 0x100) >= 0:
    sys.exit(f"not exhausted: {total} {why}")
hold(total)
"#,
    victim: r#"
fd = libc.inotify_init1(0)
victim(fd >= 0 and libc.inotify_add_watch(fd, b"/tmp", 0x100) >= 0, err())
"#,
    hog_memory_mb: MEMORY_MB,
};

const PIPE_BUFFERS: Attack = Attack {
    name: "pipe buffers (fs.pipe-user-pages-soft)",
    hog: r#"
import fcntl
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
pipes, why = [], None
while len(pipes) < 1000:
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    except OSError as e:
        why = errno.errorcode[e.errno]
        break
    pipes.append((r, w))
# Past the soft limit this user's new pipes get the minimum (two pages), not 16.
r, w = os.pipe()
own = fcntl.fcntl(w, F_GETPIPE_SZ)
if why != "EPERM" or own >= 65536:
    sys.exit(f"not exhausted: {len(pipes)} {why} {own}")
hold(f"{len(pipes)} MiB, own new pipe {own} bytes")
"#,
    victim: r#"
import fcntl
r, w = os.pipe()
size = fcntl.fcntl(w, 1032)
try:
    fcntl.fcntl(w, 1031, 1 << 20)
    grown = True
except OSError as e:
    grown = False
victim(size == 65536 and grown, f"pipe of {size} bytes, grown {grown}")
"#,
    hog_memory_mb: MEMORY_MB,
};

const PENDING_SIGNALS: Attack = Attack {
    name: "queued signals (RLIMIT_SIGPENDING)",
    hog: r#"
import signal
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
n = 0
while n < 5_000_000 and libc.sigqueue(os.getpid(), sig, ctypes.c_void_p(0)) == 0:
    n += 1
why = err()
if why != "EAGAIN" or libc.sigqueue(os.getpid(), sig, ctypes.c_void_p(0)) == 0:
    sys.exit(f"not exhausted: {n} {why}")
hold(n)
"#,
    victim: r#"
import signal
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
ok = all(libc.sigqueue(os.getpid(), sig, ctypes.c_void_p(0)) == 0 for _ in range(100))
victim(ok, err())
"#,
    hog_memory_mb: MEMORY_MB,
};

const PROCESSES: Attack = Attack {
    name: "processes (RLIMIT_NPROC; the pids cgroup)",
    hog: r#"
kids, why = [], None
while len(kids) < 100000:
    try:
        pid = os.fork()
    except OSError as e:
        why = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    kids.append(pid)
if why != "EAGAIN":
    sys.exit(f"not exhausted: {len(kids)} {why}")
hold(len(kids))
"#,
    victim: r#"
kids = []
try:
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        kids.append(pid)
    victim(all(os.waitpid(k, 0)[1] == 0 for k in kids))
except OSError as e:
    victim(False, e)
"#,
    hog_memory_mb: MEMORY_MB,
};

const FDS_IN_FLIGHT: Attack = Attack {
    name: "descriptors in flight over unix sockets (RLIMIT_NOFILE per user)",
    hog: r#"
import array, socket
a, b = socket.socketpair()
a.setblocking(False)
fds = array.array("i", [os.open("/dev/null", os.O_RDONLY) for _ in range(200)])
sent, why = 0, None
while sent < 1_000_000:
    try:
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    except OSError as e:
        why = errno.errorcode[e.errno]
        break
    sent += len(fds)
c, d = socket.socketpair()
try:
    c.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds[:1])])
    own = "sent"
except OSError as e:
    own = errno.errorcode[e.errno]
if why != "ETOOMANYREFS" or own != "ETOOMANYREFS":
    sys.exit(f"not exhausted: {sent} {why} {own}")
hold(sent)
"#,
    victim: r#"
import array, socket
a, b = socket.socketpair()
try:
    a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0]))])
    victim(True)
except OSError as e:
    victim(False, e)
"#,
    hog_memory_mb: MEMORY_MB,
};

const EPOLL_WATCHES: Attack = Attack {
    name: "epoll watches (fs.epoll.max_user_watches)",
    hog: r#"
import select
# One process's descriptors (RLIMIT_NOFILE) allow about 4 million watches: two processes,
# each registering every target in as many epoll instances as it can.
targets = [os.eventfd(0) for _ in range(2000)]
limit = int(open("/proc/sys/fs/epoll/max_user_watches").read())
def register(upto):
    eps, n = [], 0
    try:
        while n < upto:
            ep = select.epoll()
            eps.append(ep)
            for fd in targets:
                ep.register(fd, select.EPOLLIN)
                n += 1
    except OSError as e:
        return eps, n, errno.errorcode[e.errno]
    return eps, n, None
r, w = os.pipe()
if os.fork() == 0:
    kept = register(limit // 2)
    os.write(w, b"r")
    time.sleep(300)
    os._exit(0)
os.read(r, 1)
eps, n, why = register(limit)
try:
    select.epoll().register(targets[0], select.EPOLLIN)
    own = "registered"
except OSError as e:
    own = errno.errorcode[e.errno]
if why != "ENOSPC" or own != "ENOSPC":
    sys.exit(f"not exhausted: {n} more than half of {limit}: {why} {own}")
hold(n)
"#,
    victim: r#"
import select
try:
    select.epoll().register(os.eventfd(0), select.EPOLLIN)
    victim(True)
except OSError as e:
    victim(False, e)
"#,
    // Each watch costs the kernel about 200 bytes, charged to the sandbox's memory.
    hog_memory_mb: 2048,
};

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(120),
        memory_mb: MEMORY_MB,
        max_pids: 32,
        cpus: 1.0,
        max_output_bytes: 1 << 16,
        max_file_size_bytes: 1 << 20,
        workspace_mb: 16,
        max_artifacts: 0,
        max_artifact_bytes: 0,
    }
}

fn plan(code: &str, image: Option<&str>) -> ExecPlan {
    plan_with(code, image, MEMORY_MB)
}

fn plan_with(code: &str, image: Option<&str>, memory_mb: u64) -> ExecPlan {
    ExecPlan {
        profile: "test".into(),
        language: Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: format!("{PRELUDE}{code}"),
        args: vec![],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: Limits {
            timeout: Duration::from_secs(30),
            memory_mb,
            ..limits()
        },
        network_enabled: false,
        egress: Default::default(),
        image: image.map(str::to_owned),
        container_runtime: None,
        import_guard: None,
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
use std::sync::atomic::Ordering::Relaxed;

async fn sandbox(
    backend: &dyn Backend,
    id: &str,
    image: Option<&str>,
    memory_mb: u64,
) -> Arc<dyn BackendSandbox> {
    backend
        .create_sandbox(SandboxSpec {
            // Unique on the host: docker names its container after it.
            id: format!(
                "tenants-{id}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Relaxed)
            ),
            profile: "test".into(),
            limits: Limits {
                memory_mb,
                ..limits()
            },
            network_enabled: false,
            egress: Default::default(),
            image: image.map(str::to_owned),
            container_runtime: None,
            labels: BTreeMap::new(),
            env: BTreeMap::new(),
            home: None,
        })
        .await
        .unwrap_or_else(|e| panic!("create sandbox {id}: {e}"))
}

/// The hog takes the resource in a persistent sandbox; while it holds it, a one-shot and
/// another persistent sandbox must get theirs; then the hog's sandbox is destroyed.
async fn starve(backend: Arc<dyn Backend>, attack: &'static Attack, image: Option<&'static str>) {
    let hog_box = sandbox(&*backend, "hog", image, attack.hog_memory_mb).await;
    let (events, mut seen) = tokio::sync::mpsc::channel(64);
    let hog = {
        let hog_box = hog_box.clone();
        tokio::spawn(async move {
            let plan = plan_with(attack.hog, image, attack.hog_memory_mb);
            hog_box.exec(plan, Some(events)).await
        })
    };
    // Until the hog says it holds the resource (or ends without it: then its result says why).
    let mut said = String::new();
    let ready = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(event) = seen.recv().await {
            if let ExecEvent::Stdout { text, .. } = event {
                said.push_str(&text);
                if said.contains("HOG READY") {
                    return true;
                }
            }
        }
        false
    })
    .await;
    if ready != Ok(true) {
        hog_box.destroy().await.unwrap();
        panic!(
            "{}: the hog did not exhaust the limit: {said:?} {:?}",
            attack.name,
            hog.await
        );
    }
    let one_shot = backend.exec(plan(attack.victim, image), None).await;
    let other_box = sandbox(&*backend, "victim", image, MEMORY_MB).await;
    let persistent = other_box.exec(plan(attack.victim, image), None).await;
    other_box.destroy().await.unwrap();
    hog_box.destroy().await.unwrap();
    let _ = hog.await;
    for (who, result) in [("one-shot", one_shot), ("persistent", persistent)] {
        let result = result.unwrap_or_else(|e| panic!("{}: {who} victim: {e}", attack.name));
        assert_eq!(
            result.stdout,
            "VICTIM OK\n",
            "{}: a {who} sandbox was starved while another held the limit ({}): {result:?}",
            attack.name,
            said.trim()
        );
    }
}

/// One runtime for the whole file, test bodies on its worker threads (a helper's parent-death
/// signal follows the thread that started it; see jail_sandbox.rs).
fn run(body: impl std::future::Future<Output = ()> + Send + 'static) {
    static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    });
    if let Err(e) = RUNTIME.block_on(RUNTIME.spawn(body)) {
        std::panic::resume_unwind(e.into_panic());
    }
}

fn jail() -> Arc<dyn Backend> {
    Arc::new(warden_jail::JailBackend::new(common::jail_settings()))
}

fn docker() -> Arc<dyn Backend> {
    Arc::new(warden_docker::DockerBackend::new(common::docker_settings()))
}

macro_rules! attacks {
    ($($test:ident: $attack:ident;)*) => {
        mod jail {
            use super::*;
            $(
                #[test]
                fn $test() {
                    require_root!();
                    run(starve(jail(), &$attack, None));
                }
            )*
        }
        mod docker {
            use super::*;
            $(
                #[test]
                fn $test() {
                    require_docker!();
                    run(starve(docker(), &$attack, Some(DOCKER_IMAGE)));
                }
            )*
        }
    };
}

attacks! {
    inotify_instances: INOTIFY_INSTANCES;
    inotify_watches: INOTIFY_WATCHES;
    pipe_buffers: PIPE_BUFFERS;
    pending_signals: PENDING_SIGNALS;
    processes: PROCESSES;
    descriptors_in_flight: FDS_IN_FLIGHT;
    epoll_watches: EPOLL_WATCHES;
}

/// The per-user limits whose system calls a sandbox may not make (the seccomp table): keys
/// (`kernel.keys.maxkeys`, `maxbytes`), fanotify groups and marks, POSIX message queues
/// (RLIMIT_MSGQUEUE), SysV shared memory locked with SHM_LOCK and memfd_secret
/// (RLIMIT_MEMLOCK), user and other namespaces (`user.max_*_namespaces`), io_uring and perf
/// (locked memory). Each call must fail, on every backend.
const REFUSED: &str = r#"
NR = {"add_key": 248, "request_key": 249, "keyctl": 250, "fanotify_init": 300,
      "mq_open": 240, "shmget": 29, "msgget": 68, "memfd_secret": 447,
      "unshare": 272, "io_uring_setup": 425, "perf_event_open": 298, "bpf": 321}
args = {"add_key": (b"user", b"k", b"v", 1, -3), "request_key": (b"user", b"k", 0, -3),
        "keyctl": (0, -3, 0, 0, 0), "fanotify_init": (0x200, 0), "mq_open": (b"q", 0o100 | 2, 0o600, 0),
        "shmget": (0, 4096, 0o1000 | 0o600), "msgget": (0, 0o1000 | 0o600), "memfd_secret": (0,),
        "unshare": (0x10000000,), "io_uring_setup": (1, ctypes.create_string_buffer(120)),
        "perf_event_open": (ctypes.create_string_buffer(128), 0, -1, -1, 0), "bpf": (0, 0, 0)}
got = {}
for name, nr in NR.items():
    r = libc.syscall(nr, *args[name])
    got[name] = "allowed" if r >= 0 else err()
print(sorted(got.items()))
allowed = [n for n, e in got.items() if e not in ("EPERM", "ENOSYS", "EACCES")]
print("REFUSED ALL" if not allowed else f"ALLOWED {allowed}")
"#;

async fn refused(backend: Arc<dyn Backend>, image: Option<&'static str>) {
    let result = backend.exec(plan(REFUSED, image), None).await.unwrap();
    assert!(result.stdout.ends_with("REFUSED ALL\n"), "{result:?}");
}

#[test]
fn jail_refuses_the_calls_of_the_other_per_user_limits() {
    require_root!();
    run(refused(jail(), None));
}

#[test]
fn docker_refuses_the_calls_of_the_other_per_user_limits() {
    require_docker!();
    run(refused(docker(), Some(DOCKER_IMAGE)));
}

/// The jail's uid leases end with their sandboxes: after a one-shot and a sandbox's life,
/// the uids they used are free again and their records clean (nothing for the next taker to
/// check), and two sandboxes at once never share one.
#[test]
fn jail_sandboxes_hold_distinct_uids_released_when_they_end() {
    require_root!();
    run(async {
        let backend = jail();
        let uid_of = |stdout: &str| -> u32 {
            stdout
                .split_whitespace()
                .nth(1)
                .and_then(|u| u.parse().ok())
                .unwrap_or_else(|| panic!("no uid in {stdout:?}"))
        };
        let show = "print(open('/proc/self/uid_map').read())";
        let a = sandbox(&*backend, "uid-a", None, MEMORY_MB).await;
        let b = sandbox(&*backend, "uid-b", None, MEMORY_MB).await;
        let in_a = a.exec(plan(show, None), None).await.unwrap();
        let in_a_again = a.exec(plan(show, None), None).await.unwrap();
        let in_b = b.exec(plan(show, None), None).await.unwrap();
        let one_shot = backend.exec(plan(show, None), None).await.unwrap();
        let (ua, ub, uo) = (
            uid_of(&in_a.stdout),
            uid_of(&in_b.stdout),
            uid_of(&one_shot.stdout),
        );
        assert_eq!(ua, uid_of(&in_a_again.stdout), "a sandbox keeps its uid");
        assert!(ua != ub && ua != uo && ub != uo, "{ua} {ub} {uo}");
        let leases = warden_net::uids::UidRange::default()
            .leases(std::path::Path::new(warden_net::uids::RUN_DIR));
        assert!(leases.is_leased(ua) && leases.is_leased(ub));
        a.destroy().await.unwrap();
        b.destroy().await.unwrap();
        drop((a, b));
        // The helper releases after its teardown, the sandbox after its workspace is gone
        // and no process runs as its uid (on a thread of its own): wait for both.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for uid in [ua, ub, uo] {
            while leases.is_leased(uid) || !leases.record_of(uid).is_empty() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "uid {uid} still leased or not released cleanly: {:?}",
                    leases.record_of(uid)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
}

/// A holder that dies without releasing leaves its record: the next taker skips its uid while
/// a process of that uid still runs, and takes it once the process is gone.
#[test]
fn a_crashed_holders_uid_is_skipped_while_its_process_lives() {
    require_root!();
    use warden_net::uids::{ProcScan, UidRange};
    let dir = tempfile::tempdir().unwrap();
    // A uid of its own for this test, away from the default range.
    let range = UidRange {
        base: 1_890_000_000 + std::process::id() % 1_000_000,
        count: 1,
    };
    let crashed = range.lease(dir.path(), &ProcScan).unwrap();
    let uid = crashed.uid().to_string();
    let mut left = std::process::Command::new("setpriv")
        .args([&format!("--reuid={uid}"), &format!("--regid={uid}")])
        .args(["--clear-groups", "sleep", "60"])
        .spawn()
        .unwrap();
    // Wait until the process runs as the uid (setpriv has switched).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !warden_net::uids::UidUsers::in_use(&ProcScan, range.base) {
        assert!(
            std::time::Instant::now() < deadline,
            "setpriv did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(crashed);
    assert!(
        range.lease(dir.path(), &ProcScan).is_err(),
        "a uid whose process still runs was handed out"
    );
    left.kill().unwrap();
    left.wait().unwrap();
    // (Retried briefly: a child another test thread forks holds a copy of a lock file's
    // descriptor, and so its lock, until it execs.)
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let next = loop {
        match range.lease(dir.path(), &ProcScan) {
            Ok(lease) => break lease,
            Err(e) => assert!(std::time::Instant::now() < deadline, "not recovered: {e}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(next.uid(), range.base);
}

/// A jail helper killed mid-run (its sandbox dies with it: parent-death signal) leaves its
/// uid's record; once the sandbox's processes are gone the uid can be leased again.
#[test]
fn a_killed_helpers_uid_is_recovered() {
    require_root!();
    run(async {
        let backend = jail();
        let (events, mut seen) = tokio::sync::mpsc::channel(16);
        let code =
            "print(open('/proc/self/uid_map').read().split()[1], flush=True)\ntime.sleep(60)";
        let running = {
            let backend = backend.clone();
            tokio::spawn(async move { backend.exec(plan(code, None), Some(events)).await })
        };
        let mut said = String::new();
        while !said.contains('\n') {
            match tokio::time::timeout(Duration::from_secs(30), seen.recv()).await {
                Ok(Some(ExecEvent::Stdout { text, .. })) => said.push_str(&text),
                Ok(Some(_)) => {}
                other => panic!("no uid from the sandbox: {other:?} {said:?}"),
            }
        }
        let uid: u32 = said.trim().parse().unwrap();
        // The sandbox's init runs as the uid; its parent is the helper.
        let init_parent = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
            .filter(|s| {
                s.lines().any(|l| {
                    l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(&uid.to_string())
                })
            })
            .filter_map(|s| {
                let field = |k: &str| {
                    s.lines()
                        .find_map(|l| l.strip_prefix(k))
                        .map(|v| v.trim().to_owned())
                };
                // The helper is root's: the sandbox process whose parent is not the uid's.
                let ppid: i32 = field("PPid:")?.parse().ok()?;
                let parent = std::fs::read_to_string(format!("/proc/{ppid}/status")).ok()?;
                parent
                    .lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
                    .then_some(ppid)
            })
            .next()
            .expect("the sandbox's init and its helper");
        // SAFETY: kill with a pid and a signal.
        assert_eq!(unsafe { libc::kill(init_parent, libc::SIGKILL) }, 0);
        assert!(running.await.unwrap().is_err(), "the run must end as lost");
        let leases = warden_net::uids::UidRange {
            base: uid,
            count: 1,
        }
        .leases(std::path::Path::new(warden_net::uids::RUN_DIR));
        assert!(
            leases.record_of(uid).starts_with("held by"),
            "a killed helper cannot release: {:?}",
            leases.record_of(uid)
        );
        let range = warden_net::uids::UidRange {
            base: uid,
            count: 1,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let taken = loop {
            match range.lease(
                std::path::Path::new(warden_net::uids::RUN_DIR),
                &warden_net::uids::ProcScan,
            ) {
                Ok(lease) => break lease,
                Err(e) => {
                    assert!(std::time::Instant::now() < deadline, "not recovered: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        assert!(!warden_net::uids::UidUsers::in_use(
            &warden_net::uids::ProcScan,
            uid
        ));
        taken.release();
    });
}
