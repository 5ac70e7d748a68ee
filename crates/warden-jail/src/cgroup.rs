//! Memory, process and CPU limits through cgroups, v1 or v2 behind one trait.
//!
//! Invariants: a sandbox gets its own leaf cgroup under Warden's parent (`warden` below the
//! cgroup the helper runs in, per controller); every limit the plan asks for is written or the
//! run is refused (fail closed); `remove` leaves no directory behind once the sandbox's
//! processes are gone. The filesystem root is a parameter, so the layout is tested on a
//! temporary folder.
//!
//! v1 keeps one folder per controller, and a run's leaves come and go in a fixed order: the
//! memory leaf is made first and removed last, so a run that has a leaf anywhere has its memory
//! leaf, and one scan of the memory parent finds every run left behind (see
//! [`Hierarchy::remove_stale`]). Every leaf is still locked by its owner: a sweep of an older
//! Warden on the same host tries each leaf's own lock, and would remove an unlocked leaf of a
//! run being set up. Only a run that can be paused (a context's) gets a freezer leaf: a
//! one-shot or a sandbox's execution is never frozen.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The cgroup limits to apply (a part of the plan); every field present must be applied or the run is refused.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CgroupPlan {
    pub memory_bytes: u64,
    pub max_pids: u64,
    pub cpus: f64,
}

/// A sandbox's CPU weight: how the scheduler shares busy cores between it and the host's
/// other work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuWeight {
    /// The kernel's default, as every cgroup gets it: a run's program.
    Normal,
    /// Work that no caller waits for — a pooled sandbox built ahead of its code: it gets the
    /// cores' idle time first, and
    /// 1/16 of a normal share when they are busy (never nothing: a refill still ends under
    /// a steady load).
    Background,
}

impl CpuWeight {
    /// `cpu.shares` (cgroup v1: default 1024).
    fn v1_shares(self) -> u64 {
        match self {
            CpuWeight::Normal => 1024,
            CpuWeight::Background => 64,
        }
    }

    /// `cpu.weight` (cgroup v2: default 100).
    fn v2_weight(self) -> u64 {
        match self {
            CpuWeight::Normal => 100,
            CpuWeight::Background => 6,
        }
    }
}

/// The name of Warden's parent cgroup under the helper's own cgroup.
pub const PARENT: &str = "warden";

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup {controller} controller is mounted (needed for the {limit} limit)")]
    ControllerMissing {
        controller: &'static str,
        limit: &'static str,
    },
    #[error("create cgroup {path:?}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("write {value:?} to {path:?}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    #[error("read {path:?}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path:?} did not settle at {value:?} within {FREEZE_SETTLE:?}")]
    Unsettled { path: PathBuf, value: &'static str },
    #[error("remove cgroup {path:?}: {source}")]
    Remove { path: PathBuf, source: io::Error },
}

/// One sandbox's cgroup, created with its limits written.
pub trait Cgroup: std::fmt::Debug {
    /// Writes the limits; every one must be written or the run is refused.
    fn set_limits(&self, plan: &CgroupPlan) -> Result<(), CgroupError>;
    /// Sets the cgroup's CPU weight against the host's other work. Not a limit (the CPU
    /// quota is): which of the runnable tasks the scheduler picks first when the cores are
    /// all busy.
    fn set_cpu_weight(&self, weight: CpuWeight) -> Result<(), CgroupError>;
    /// Moves a process into the cgroup (all controllers).
    fn attach(&self, pid: libc::pid_t) -> Result<(), CgroupError>;
    /// The cgroup's event counters, their files opened now (see [`Events`]).
    fn events(&self) -> Events;
    /// Whether the kernel's OOM killer ended a process of this cgroup.
    fn oom_killed(&self) -> bool {
        self.events().oom_killed()
    }
    /// Whether a fork or clone failed because of the process limit.
    fn pids_limit_hit(&self) -> bool {
        self.events().pids_limit_hit()
    }
    /// Pids still in the cgroup.
    fn pids(&self) -> Vec<libc::pid_t>;
    /// Removes the cgroup; the processes must be gone. Retries briefly while the kernel
    /// finishes tearing them down.
    fn remove(&self) -> Result<(), CgroupError>;
}

/// Which cgroup hierarchy serves the limits on this host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Hierarchy {
    /// v1: one folder per controller, already including the helper's own cgroup path.
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
        cpu: Option<PathBuf>,
        /// Not a limit: pausing a sandbox freezes its runs here. Without it, runs work and a
        /// pause is refused.
        #[serde(default)]
        freezer: Option<PathBuf>,
    },
    /// v2: the helper's own cgroup folder in the unified hierarchy, with the controllers it
    /// may enable for children.
    V2 {
        base: PathBuf,
        controllers: Vec<String>,
    },
}

impl Hierarchy {
    /// Finds the controllers from /proc/self/mountinfo and /proc/self/cgroup.
    pub fn detect() -> io::Result<Hierarchy> {
        let mountinfo = read_mountinfo()?;
        let own = fs::read_to_string("/proc/self/cgroup")?;
        Ok(Self::from_proc(&mountinfo, &own, |p| {
            fs::read_to_string(p).unwrap_or_default()
        }))
    }

    /// Prefers v1 controllers where they are mounted (a v2 mount without them, as on hosts
    /// that mount cgroup2 for hugetlb only, is ignored); otherwise v2.
    pub fn from_proc(
        mountinfo: &str,
        own_cgroup: &str,
        read: impl Fn(&Path) -> String,
    ) -> Hierarchy {
        let mut v1: Vec<(String, PathBuf)> = Vec::new();
        let mut v2_mount = None;
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split(' ').nth(4).unwrap_or_default();
            let mut right = right.split(' ');
            let fstype = right.next().unwrap_or_default();
            let options = right.nth(1).unwrap_or_default();
            match fstype {
                "cgroup" => {
                    for opt in options.split(',') {
                        if matches!(opt, "memory" | "pids" | "cpu" | "freezer") {
                            v1.push((opt.to_owned(), PathBuf::from(mount_point)));
                        }
                    }
                }
                "cgroup2" => v2_mount = Some(PathBuf::from(mount_point)),
                _ => {}
            }
        }
        let own_path = |controller: &str| -> String {
            for line in own_cgroup.lines() {
                let mut parts = line.splitn(3, ':');
                let (_, ctrls, path) = (parts.next(), parts.next(), parts.next());
                let (Some(ctrls), Some(path)) = (ctrls, path) else {
                    continue;
                };
                if (controller.is_empty() && ctrls.is_empty())
                    || (!controller.is_empty() && ctrls.split(',').any(|c| c == controller))
                {
                    return path.to_owned();
                }
            }
            "/".to_owned()
        };
        let v1_path = |name: &str| {
            v1.iter()
                .find(|(c, _)| c == name)
                .map(|(_, mount)| mount.join(own_path(name).trim_start_matches('/')))
        };
        if !v1.is_empty() {
            return Hierarchy::V1 {
                memory: v1_path("memory"),
                pids: v1_path("pids"),
                cpu: v1_path("cpu"),
                freezer: v1_path("freezer"),
            };
        }
        let base = v2_mount
            .map(|m| m.join(own_path("").trim_start_matches('/')))
            .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"));
        let controllers = read(&base.join("cgroup.controllers"))
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        Hierarchy::V2 { base, controllers }
    }

    /// A short description for `warden doctor`.
    pub fn describe(&self) -> String {
        match self {
            Hierarchy::V1 {
                memory,
                pids,
                cpu,
                freezer,
            } => {
                let mut have = Vec::new();
                for (name, p) in [
                    ("memory", memory),
                    ("pids", pids),
                    ("cpu", cpu),
                    ("freezer", freezer),
                ] {
                    if p.is_some() {
                        have.push(name);
                    }
                }
                format!("cgroup v1 ({})", have.join(", "))
            }
            Hierarchy::V2 { base, controllers } => {
                format!(
                    "cgroup v2 at {} ({})",
                    base.display(),
                    controllers.join(", ")
                )
            }
        }
    }

    /// Which of memory, pids, cpu this hierarchy can limit.
    pub fn controllers(&self) -> Vec<&'static str> {
        match self {
            Hierarchy::V1 {
                memory, pids, cpu, ..
            } => [("memory", memory), ("pids", pids), ("cpu", cpu)]
                .into_iter()
                .filter(|(_, p)| p.is_some())
                .map(|(n, _)| n)
                .collect(),
            Hierarchy::V2 { controllers, .. } => ["memory", "pids", "cpu"]
                .into_iter()
                .filter(|c| controllers.iter().any(|have| have == c))
                .collect(),
        }
    }

    /// Creates a sandbox's cgroup, without limits yet ([`Cgroup::set_limits`]); nothing is left
    /// behind on error. `freezable`: the run may be paused ([`Hierarchy::freeze_runs_of`]), so
    /// v1 also gives it a freezer leaf (v2's freezer is in every leaf).
    pub fn create(&self, name: &str, freezable: bool) -> Result<Box<dyn Cgroup>, CgroupError> {
        match self {
            Hierarchy::V1 {
                memory,
                pids,
                cpu,
                freezer,
            } => {
                let need = |p: &Option<PathBuf>, controller, limit| {
                    p.clone()
                        .map(|p| p.join(PARENT).join(name))
                        .ok_or(CgroupError::ControllerMissing { controller, limit })
                };
                let memory = need(memory, "memory", "memory")?;
                let pids = need(pids, "pids", "process")?;
                let cpu = need(cpu, "cpu", "cpu")?;
                let freezer = freezer
                    .as_ref()
                    .filter(|_| freezable)
                    .map(|p| p.join(PARENT).join(name));
                // The memory leaf first (see the module's invariants).
                let mut cg = V1Cgroup {
                    _owned: vec![create_owned(&memory)?],
                    memory,
                    pids,
                    cpu,
                    freezer,
                };
                let others: Vec<PathBuf> = cg.others().cloned().collect();
                for dir in others.iter().rev() {
                    match create_owned(dir) {
                        Ok(lock) => cg._owned.push(lock),
                        Err(e) => {
                            let _ = cg.remove();
                            return Err(e);
                        }
                    }
                }
                Ok(Box::new(cg))
            }
            Hierarchy::V2 { base, controllers } => {
                for (controller, limit) in
                    [("memory", "memory"), ("pids", "process"), ("cpu", "cpu")]
                {
                    if !controllers.iter().any(|c| c == controller) {
                        return Err(CgroupError::ControllerMissing { controller, limit });
                    }
                }
                let parent = base.join(PARENT);
                mkdir(&parent)?;
                write(&parent.join("cgroup.subtree_control"), "+memory +pids +cpu")?;
                let path = parent.join(name);
                let lock = create_owned(&path)?;
                Ok(Box::new(V2Cgroup { path, _owned: lock }))
            }
        }
    }

    /// Removes sandbox cgroups left behind by helpers that died before their clean-up (killed
    /// with the pid namespace they ran in, or by `kill -9`). A live sandbox's leaf is locked
    /// (`flock`) by its helper for as long as it lives (init dies with it), whatever pid namespace
    /// they are in (v1: the lock of the run's memory leaf speaks for all its leaves, see the
    /// module's invariants); a leaf nobody locks and that holds no process is stale. A leaf nobody
    /// locks whose processes are frozen (a paused sandbox, or one being copied, when its daemon
    /// was killed) is thawed, so that the kill they were sent ends them, and removed at a
    /// later scan. Returns how many were removed.
    pub fn remove_stale(&self) -> usize {
        self.stale(true, None)
    }

    /// [`Hierarchy::remove_stale`] over at most `window` of the parent's leaves, taken in a row
    /// from a varied one (wrapping around): what a sandbox's own teardown does. A full sweep
    /// tries the lock of every live sandbox's leaf (three system calls each) under the
    /// parent's exclusive lock, which every creation waits for, so its cost grew with the
    /// sandboxes beside it (≈ 3 ms of calls beside 1,000 live contexts, against ≈ 0.3 for a
    /// window of 32: docs/benchmarks.md, session 31). With fewer leaves than the
    /// window this is the full sweep. A leaf left by a helper nobody watched (a `warden run`
    /// killed with SIGKILL) is still found, by some teardown among the next (leaves / window)
    /// or so; a daemon sweeps in full at its start and when one of its helpers dies.
    pub fn remove_some_stale(&self, window: usize) -> usize {
        self.stale(true, Some(window))
    }

    /// Whether a stale leaf is there (see [`Hierarchy::remove_stale`]).
    pub fn has_stale(&self) -> bool {
        self.stale(false, None) > 0
    }

    fn stale(&self, remove: bool, window: Option<usize>) -> usize {
        // The folder whose leaves are locked, and the other folders a run's leaf of the same
        // name may be in (v1: made after the memory leaf and removed before it).
        let (owners, others) = match self {
            Hierarchy::V1 { memory: None, .. } => return 0,
            Hierarchy::V1 {
                memory: Some(memory),
                pids,
                cpu,
                freezer,
            } => (
                memory.join(PARENT),
                [freezer, cpu, pids]
                    .into_iter()
                    .flatten()
                    .map(|p| p.join(PARENT))
                    .collect(),
            ),
            Hierarchy::V2 { base, .. } => (base.join(PARENT), Vec::new()),
        };
        // Where a run is thawed: the parent folder, the file and the value.
        let thaw = match self {
            Hierarchy::V1 { freezer, .. } => freezer
                .as_ref()
                .map(|f| (f.join(PARENT), "freezer.state", "THAWED")),
            Hierarchy::V2 { base, .. } => Some((base.join(PARENT), "cgroup.freeze", "0")),
        };
        // Exclusive on the parent: no leaf is between its creation and its lock meanwhile.
        let Ok(_scan) = lock_dir(&owners, libc::LOCK_EX) else {
            return 0;
        };
        let Ok(entries) = fs::read_dir(&owners) else {
            return 0;
        };
        let mut runs: Vec<std::ffi::OsString> = entries
            .flatten()
            .map(|entry| entry.file_name())
            .filter(|name| name.to_string_lossy().starts_with("run-"))
            .collect();
        if let Some(window) = window.filter(|&w| w < runs.len()) {
            // Any start will do, as long as teardowns' starts differ (the time and the pid).
            let start = warden_net::uids::search_start() as usize % runs.len();
            runs.rotate_left(start);
            runs.truncate(window);
        }
        let mut found = 0;
        for name in runs {
            let path = owners.join(&name);
            // Held by its owner: alive.
            if lock_dir(&path, libc::LOCK_EX | libc::LOCK_NB).is_err() {
                continue;
            }
            // Every process of a run is in each of its leaves.
            if !procs(&path).is_empty() {
                // Ownerless: thawed, so that the processes can die (see above).
                if let (true, Some((folder, file, value))) = (remove, &thaw) {
                    let _ = write_existing(&folder.join(&name).join(file), value);
                }
                continue;
            }
            if !remove {
                found += 1 + others.iter().filter(|o| o.join(&name).exists()).count();
                continue;
            }
            for leaf in others.iter().map(|o| o.join(&name)) {
                if fs::remove_dir(&leaf).is_ok() {
                    found += 1;
                }
            }
            if fs::remove_dir(&path).is_ok() {
                found += 1;
            }
        }
        found
    }

    /// The leaves of the runs of helper `helper_pid`, in every controller's hierarchy. The
    /// helper must be alive (or not yet reaped): its pid is its own only until then.
    pub fn runs_of(&self, helper_pid: u32) -> Vec<PathBuf> {
        self.runs_made_before(helper_pid, f64::INFINITY)
    }

    /// The leaves of the runs of helper `helper_pid`, which ended (was reaped) at `ended_at`
    /// on the monotonic clock ([`crate::monotonic_ms`]): once a helper is reaped a new one may
    /// get its number, and only the time in a leaf's name ([`run_name`]) tells their runs
    /// apart.
    pub fn runs_of_ended(&self, helper_pid: u32, ended_at: f64) -> Vec<PathBuf> {
        self.runs_made_before(helper_pid, ended_at)
    }

    fn runs_made_before(&self, helper_pid: u32, before_ms: f64) -> Vec<PathBuf> {
        let prefix = runs_prefix(helper_pid);
        let mut found = Vec::new();
        for parent in self.parents() {
            for entry in fs::read_dir(&parent).into_iter().flatten().flatten() {
                let name = entry.file_name();
                let Some(made) = name.to_string_lossy().strip_prefix(&prefix).map(made_at_ms)
                else {
                    continue;
                };
                // A name without a time (not made by `run_name`) counts as made before.
                if made.is_none_or(|ms| ms < before_ms) {
                    found.push(entry.path());
                }
            }
        }
        found
    }

    /// Freezes (`frozen`) or thaws every run of helper `helper_pid` — the processes stop where
    /// they are, unaware, and keep their memory — and waits until the kernel says it is done.
    /// Returns how many runs were changed. A frozen process cannot die: thaw before killing.
    pub fn freeze_runs_of(&self, helper_pid: u32, frozen: bool) -> Result<usize, CgroupError> {
        let prefix = runs_prefix(helper_pid);
        let (parent, file, value, done): (PathBuf, &str, &str, fn(&str) -> bool) = match self {
            Hierarchy::V1 { freezer: None, .. } => {
                return Err(CgroupError::ControllerMissing {
                    controller: "freezer",
                    limit: "pause",
                });
            }
            Hierarchy::V1 {
                freezer: Some(f), ..
            } => (
                f.join(PARENT),
                "freezer.state",
                if frozen { "FROZEN" } else { "THAWED" },
                if frozen {
                    |state| state.trim() == "FROZEN"
                } else {
                    |state| state.trim() == "THAWED"
                },
            ),
            Hierarchy::V2 { base, .. } => (
                base.join(PARENT),
                "cgroup.freeze",
                if frozen { "1" } else { "0" },
                |_| true,
            ),
        };
        let mut changed = 0;
        for entry in fs::read_dir(&parent).into_iter().flatten().flatten() {
            if !entry.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let leaf = entry.path();
            write(&leaf.join(file), value)?;
            // v1 passes through FREEZING while it catches every task; v2 says so in
            // cgroup.events.
            let deadline = std::time::Instant::now() + FREEZE_SETTLE;
            loop {
                let settled = match self {
                    Hierarchy::V1 { .. } => {
                        done(&fs::read_to_string(leaf.join(file)).unwrap_or_default())
                    }
                    Hierarchy::V2 { .. } => {
                        counter(&leaf.join("cgroup.events"), "frozen") == u64::from(frozen)
                    }
                };
                if settled {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(CgroupError::Unsettled {
                        path: leaf.join(file),
                        value,
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            changed += 1;
        }
        Ok(changed)
    }

    /// Kills every process in the runs of helper `helper_pid` (a cancelled execution): its
    /// supervisor then sees the sandbox end and tears it down as usual. Returns how many
    /// processes were signalled.
    pub fn kill_runs_of(&self, helper_pid: u32) -> usize {
        kill_in(&self.runs_of(helper_pid))
    }

    /// [`Hierarchy::kill_runs_of`] for a helper that ended at `ended_at`
    /// ([`Hierarchy::runs_of_ended`]): a new helper's runs under the same number are spared.
    pub fn kill_runs_of_ended(&self, helper_pid: u32, ended_at: f64) -> usize {
        kill_in(&self.runs_of_ended(helper_pid, ended_at))
    }

    /// The folders of Warden's parent cgroup, to find leftovers.
    pub fn parents(&self) -> Vec<PathBuf> {
        match self {
            Hierarchy::V1 {
                memory,
                pids,
                cpu,
                freezer,
            } => [memory, pids, cpu, freezer]
                .into_iter()
                .flatten()
                .map(|p| p.join(PARENT))
                .collect(),
            Hierarchy::V2 { base, .. } => vec![base.join(PARENT)],
        }
    }
}

/// Where Warden mounts its controller-less cgroup v1 hierarchy.
pub const DYNMODS_MOUNT: &str = "/run/warden/cgroup-dynmods";

/// Whether any cgroup hierarchy is mounted with `favordynmods`.
pub fn favordynmods_active(mountinfo: &str) -> bool {
    mountinfo.lines().any(|line| {
        line.split_once(" - ").is_some_and(|(_, right)| {
            let mut f = right.split(' ');
            matches!(f.next(), Some("cgroup" | "cgroup2"))
                && f.nth(1)
                    .is_some_and(|opts| opts.split(',').any(|o| o == "favordynmods"))
        })
    })
}

/// Moving a process into a cgroup takes the kernel's cgroup_threadgroup_rwsem for writing,
/// which waits for an RCU grace period unless some hierarchy is mounted with `favordynmods`
/// (measured here: 10-16 ms per run, the largest part of a sandbox's start-up). When none is,
/// and we are root, mount a controller-less named v1 hierarchy (`name=warden`, like systemd's
/// `name=systemd`) with that option once per boot. The kernel documents the trade-off: cheaper
/// migrations for slightly dearer fork and exit. Best effort: on failure runs just start slower.
pub fn ensure_fast_attach() {
    // Ours is mounted already (every run after the first): one stat, no mount table read.
    if Path::new(DYNMODS_MOUNT).join("cgroup.procs").exists() {
        return;
    }
    let mountinfo = read_mountinfo().unwrap_or_default();
    // SAFETY: geteuid has no preconditions.
    if favordynmods_active(&mountinfo) || unsafe { libc::geteuid() } != 0 {
        return;
    }
    if fs::create_dir_all(DYNMODS_MOUNT).is_ok() {
        let _ = crate::sys::mount(
            Some(Path::new("cgroup")),
            Path::new(DYNMODS_MOUNT),
            Some("cgroup"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("none,name=warden,favordynmods"),
        );
    }
}

/// /proc/self/mountinfo, read in one go (procfs reports its size as 0, so a plain
/// `read_to_string` would grow its buffer from 32 bytes, one read per doubling).
pub fn read_mountinfo() -> io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(16 * 1024);
    fs::File::open("/proc/self/mountinfo")?.read_to_string(&mut text)?;
    Ok(text)
}

/// Opens a folder and `flock`s it (`how`: LOCK_SH, LOCK_EX, optionally LOCK_NB).
fn lock_dir(path: &Path, how: libc::c_int) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)?;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(dir.as_raw_fd(), how) } == 0 {
            return Ok(dir.into());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Creates a sandbox's leaf and locks it, under a shared lock of the parent so that
/// [`Hierarchy::remove_stale`] never sees the leaf before its lock. The returned lock lives
/// as long as the sandbox's helper (its init dies with it).
fn create_owned(leaf: &Path) -> Result<std::os::fd::OwnedFd, CgroupError> {
    let parent = leaf.parent().unwrap_or(leaf);
    mkdir(parent)?;
    let locked = |source| CgroupError::Create {
        path: leaf.to_owned(),
        source,
    };
    let _creating = lock_dir(parent, libc::LOCK_SH).map_err(locked)?;
    mkdir(leaf)?;
    lock_dir(leaf, libc::LOCK_EX).map_err(locked)
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    })
}

/// [`write`] to a file that must exist (never created): a missing one is `NotFound`.
fn write_existing(path: &Path, value: &str) -> Result<(), CgroupError> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|source| CgroupError::Write {
            path: path.to_owned(),
            value: value.to_owned(),
            source,
        })
}

fn mkdir(path: &Path) -> Result<(), CgroupError> {
    match fs::create_dir_all(path) {
        Ok(()) => Ok(()),
        Err(source) => Err(CgroupError::Create {
            path: path.to_owned(),
            source,
        }),
    }
}

/// A cgroup's event counters with their files open ([`Cgroup::events`]): reading them walks
/// no path, so the supervisor opens them while the program runs and only reads them on the
/// answer's path. Every read starts at offset 0, where the kernel generates the file afresh,
/// so one `Events` can be read any number of times. A file that could not be opened counts 0,
/// as one that cannot be read.
#[derive(Debug)]
pub struct Events {
    /// `memory.oom_control` (v1) or `memory.events` (v2): the `oom_kill` count.
    memory: Option<fs::File>,
    /// `pids.events`: the `max` count.
    pids: Option<fs::File>,
}

impl Events {
    fn open(memory: &Path, pids: &Path) -> Events {
        Events {
            memory: fs::File::open(memory).ok(),
            pids: fs::File::open(pids).ok(),
        }
    }

    /// Whether the kernel's OOM killer ended a process of the cgroup.
    pub fn oom_killed(&self) -> bool {
        counter_of(self.memory.as_ref(), "oom_kill") > 0
    }

    /// Whether a fork or clone failed because of the process limit.
    pub fn pids_limit_hit(&self) -> bool {
        counter_of(self.pids.as_ref(), "max") > 0
    }
}

/// The value of `key` in the counters file at `path` (0 if it cannot be read).
fn counter(path: &Path, key: &str) -> u64 {
    counter_of(fs::File::open(path).ok().as_ref(), key)
}

/// The value of `key` in a counters file (`key value` lines), read from its start.
fn counter_of(file: Option<&fs::File>, key: &str) -> u64 {
    use std::io::{Read, Seek};
    let Some(mut file) = file else {
        return 0;
    };
    let mut text = String::new();
    if file
        .rewind()
        .and_then(|()| file.read_to_string(&mut text))
        .is_err()
    {
        return 0;
    }
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

fn procs(path: &Path) -> Vec<libc::pid_t> {
    fs::read_to_string(path.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The start of the names of helper `helper_pid`'s run leaves.
fn runs_prefix(helper_pid: u32) -> String {
    format!("run-{helper_pid}-")
}

/// The name of a run's leaves, made by helper `helper_pid` at `at_ms` on the monotonic clock
/// ([`crate::monotonic_ms`]): the helper's pid, so that its runs are found while it lives,
/// and the time, so that they are told from a later helper's with the same pid once it is
/// reaped ([`Hierarchy::runs_of_ended`]).
pub(crate) fn run_name(helper_pid: u32, at_ms: f64) -> String {
    format!("{}{:x}", runs_prefix(helper_pid), (at_ms * 1e6) as u64)
}

/// When the leaf named `run-<helper>-<suffix>` was made ([`run_name`]: the monotonic clock in
/// nanoseconds, in hex), in milliseconds; `None` for another suffix.
fn made_at_ms(suffix: &str) -> Option<f64> {
    u64::from_str_radix(suffix, 16)
        .ok()
        .map(|ns| ns as f64 / 1e6)
}

/// Kills every process in `leaves`; how many were signalled.
fn kill_in(leaves: &[PathBuf]) -> usize {
    let mut killed = 0;
    for leaf in leaves {
        for pid in procs(leaf) {
            // SAFETY: kill with integers.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
    }
    killed
}

fn rmdir_retrying(path: &Path) -> Result<(), CgroupError> {
    let mut delay = Duration::from_micros(200);
    for _ in 0..40 {
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                for pid in procs(path) {
                    let _ = crate::sys::kill(pid, libc::SIGKILL);
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            // A plain folder (the fake hierarchy in tests) is not empty: remove it whole.
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                return fs::remove_dir_all(path).map_err(|source| CgroupError::Remove {
                    path: path.to_owned(),
                    source,
                });
            }
            Err(source) => {
                return Err(CgroupError::Remove {
                    path: path.to_owned(),
                    source,
                });
            }
        }
    }
    Err(CgroupError::Remove {
        path: path.to_owned(),
        source: io::Error::from_raw_os_error(libc::EBUSY),
    })
}

/// How long a freeze or thaw may take to settle. A healthy one settles in milliseconds; one
/// that does not has a process in a call the freezer cannot stop it in, and the caller is
/// better told so soon (a pause refused as busy, to retry) than held.
const FREEZE_SETTLE: Duration = Duration::from_secs(3);

const CFS_PERIOD_US: u64 = 100_000;

fn cfs_quota_us(cpus: f64) -> u64 {
    ((cpus * CFS_PERIOD_US as f64).round() as u64).max(1000)
}

#[derive(Debug)]
struct V1Cgroup {
    memory: PathBuf,
    pids: PathBuf,
    cpu: PathBuf,
    /// Only for a run that can be paused (see [`Hierarchy::create`]).
    freezer: Option<PathBuf>,
    /// The ownership locks of the leaves, the memory leaf's first (see
    /// [`Hierarchy::remove_stale`]).
    _owned: Vec<std::os::fd::OwnedFd>,
}

impl V1Cgroup {
    /// The leaves besides the memory leaf, in the order they are removed (before it).
    fn others(&self) -> impl Iterator<Item = &PathBuf> {
        self.freezer.iter().chain([&self.cpu, &self.pids])
    }
}

impl Cgroup for V1Cgroup {
    fn set_limits(&self, plan: &CgroupPlan) -> Result<(), CgroupError> {
        let bytes = plan.memory_bytes.to_string();
        write(&self.memory.join("memory.limit_in_bytes"), &bytes)?;
        // With swap accounting, swap must be capped too, or the limit only moves pages to swap;
        // without it the file is absent (one open tells both).
        match write_existing(&self.memory.join("memory.memsw.limit_in_bytes"), &bytes) {
            Err(CgroupError::Write { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
        write(&self.pids.join("pids.max"), &plan.max_pids.to_string())?;
        // The period is the kernel's default in a new cgroup (100 ms, `CFS_PERIOD_US`): only the
        // quota is written (each write walks every CPU cgroup of the host to check it).
        write(
            &self.cpu.join("cpu.cfs_quota_us"),
            &cfs_quota_us(plan.cpus).to_string(),
        )?;
        Ok(())
    }

    fn set_cpu_weight(&self, weight: CpuWeight) -> Result<(), CgroupError> {
        write(
            &self.cpu.join("cpu.shares"),
            &weight.v1_shares().to_string(),
        )
    }

    fn attach(&self, pid: libc::pid_t) -> Result<(), CgroupError> {
        let pid = pid.to_string();
        for dir in [&self.memory, &self.pids, &self.cpu]
            .into_iter()
            .chain(self.freezer.as_ref())
        {
            write(&dir.join("cgroup.procs"), &pid)?;
        }
        Ok(())
    }

    fn events(&self) -> Events {
        Events::open(
            &self.memory.join("memory.oom_control"),
            &self.pids.join("pids.events"),
        )
    }

    fn pids(&self) -> Vec<libc::pid_t> {
        procs(&self.pids)
    }

    fn remove(&self) -> Result<(), CgroupError> {
        let mut first_error = None;
        // The memory leaf last (see the module's invariants).
        for dir in self.others().chain([&self.memory]) {
            if let Err(e) = rmdir_retrying(dir) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[derive(Debug)]
struct V2Cgroup {
    path: PathBuf,
    /// The ownership lock of the leaf (see [`Hierarchy::remove_stale`]).
    _owned: std::os::fd::OwnedFd,
}

impl Cgroup for V2Cgroup {
    fn set_limits(&self, plan: &CgroupPlan) -> Result<(), CgroupError> {
        write(
            &self.path.join("memory.max"),
            &plan.memory_bytes.to_string(),
        )?;
        let swap = self.path.join("memory.swap.max");
        if swap.exists() {
            write(&swap, "0")?;
        }
        write(&self.path.join("pids.max"), &plan.max_pids.to_string())?;
        write(
            &self.path.join("cpu.max"),
            &format!("{} {CFS_PERIOD_US}", cfs_quota_us(plan.cpus)),
        )?;
        Ok(())
    }

    fn set_cpu_weight(&self, weight: CpuWeight) -> Result<(), CgroupError> {
        write(
            &self.path.join("cpu.weight"),
            &weight.v2_weight().to_string(),
        )
    }

    fn attach(&self, pid: libc::pid_t) -> Result<(), CgroupError> {
        write(&self.path.join("cgroup.procs"), &pid.to_string())
    }

    fn events(&self) -> Events {
        Events::open(
            &self.path.join("memory.events"),
            &self.path.join("pids.events"),
        )
    }

    fn pids(&self) -> Vec<libc::pid_t> {
        procs(&self.path)
    }

    fn remove(&self) -> Result<(), CgroupError> {
        let kill = self.path.join("cgroup.kill");
        if kill.exists() && !self.pids().is_empty() {
            let _ = fs::write(&kill, "1");
        }
        rmdir_retrying(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1 hierarchy of plain folders under `root`: memory, pids, cpu, and freezer if asked.
    fn v1_under(root: &Path, with_freezer: bool) -> Hierarchy {
        Hierarchy::V1 {
            memory: Some(root.join("memory")),
            pids: Some(root.join("pids")),
            cpu: Some(root.join("cpu")),
            freezer: with_freezer.then(|| root.join("freezer")),
        }
    }

    const MOUNTINFO_V1: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 30 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
38 30 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 30 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const OWN_V1: &str = "8:pids:/\n4:memory:/process_api/abc\n1:cpu:/\n2:freezer:/\n0::/\n";

    #[test]
    fn v1_is_preferred_and_nested_under_the_own_cgroup() {
        let h = Hierarchy::from_proc(MOUNTINFO_V1, OWN_V1, |_| String::new());
        assert_eq!(
            h,
            Hierarchy::V1 {
                memory: Some("/sys/fs/cgroup/memory/process_api/abc".into()),
                pids: Some("/sys/fs/cgroup/pids".into()),
                cpu: Some("/sys/fs/cgroup/cpu".into()),
                freezer: Some("/sys/fs/cgroup/freezer".into()),
            }
        );
        assert_eq!(h.controllers(), ["memory", "pids", "cpu"]);
    }

    #[test]
    fn stale_leaves_of_dead_helpers_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), false);
        // A live sandbox holds its leaves' locks; a dead helper's leaves are unlocked. Pids
        // play no part: a helper in another pid namespace has a number that means nothing here.
        let live = h.create("run-1-live", false).unwrap();
        drop(h.create("run-1-dead", false).unwrap());
        assert!(h.has_stale());
        assert_eq!(h.remove_stale(), 3);
        assert!(tmp.path().join("memory/warden/run-1-live").exists());
        assert!(!tmp.path().join("memory/warden/run-1-dead").exists());
        assert!(!h.has_stale());
        drop(live);
    }

    #[test]
    fn an_ended_helpers_runs_are_told_from_a_new_helper_with_its_number_by_their_time() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), false);
        let name = |ms: f64| run_name(7, ms);
        let old = h.create(&name(1_000.0), false).unwrap();
        let new = h.create(&name(3_000.0), false).unwrap();
        let other = h.create(&run_name(70, 500.0), false).unwrap();
        let leaves = |paths: Vec<PathBuf>| {
            let mut names: Vec<String> = paths
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names.dedup();
            (paths.len(), names)
        };
        // Helper 7 reaped at 2 s: its run, in each of the three hierarchies, and not the
        // run a new helper 7 made at 3 s, nor helper 70's.
        assert_eq!(
            leaves(h.runs_of_ended(7, 2_000.0)),
            (3, vec![name(1_000.0)])
        );
        assert_eq!(
            leaves(h.runs_of(7)),
            (6, vec![name(1_000.0), name(3_000.0)])
        );
        assert_eq!(h.kill_runs_of_ended(7, 2_000.0), 0);
        drop((old, new, other));
    }

    #[test]
    fn a_teardown_sweeps_a_window_of_the_leaves_and_in_turn_every_one() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), false);
        let live: Vec<_> = (0..3)
            .map(|i| h.create(&format!("run-1-live{i}"), false).unwrap())
            .collect();
        for i in 0..8 {
            drop(h.create(&format!("run-1-dead{i}"), false).unwrap());
        }
        // Three leaves (memory, pids, cpu) a run: at most 4 runs' worth a sweep.
        let mut removed = 0;
        for _ in 0..500 {
            let now = h.remove_some_stale(4);
            assert!(now <= 4 * 3, "{now} leaves removed by one sweep of 4");
            removed += now;
            if !h.has_stale() {
                break;
            }
        }
        assert_eq!(removed, 8 * 3);
        assert!(!h.has_stale());
        for i in 0..3 {
            assert!(
                tmp.path()
                    .join(format!("memory/warden/run-1-live{i}"))
                    .exists()
            );
        }
        // A window as large as the leaves is the full sweep.
        drop(h.create("run-1-dead", false).unwrap());
        assert_eq!(h.remove_some_stale(32), 3);
        drop(live);
    }

    #[test]
    fn favordynmods_is_seen_on_any_cgroup_mount() {
        assert!(!favordynmods_active(MOUNTINFO_V1));
        let with = "50 30 0:40 / /run/warden/cgroup-dynmods rw - cgroup cgroup rw,favordynmods,name=warden\n";
        assert!(favordynmods_active(with));
    }

    #[test]
    fn v2_lists_its_controllers() {
        let mi = "39 30 0:35 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
        let h = Hierarchy::from_proc(mi, "0::/user.slice\n", |p| {
            assert_eq!(p, Path::new("/sys/fs/cgroup/user.slice/cgroup.controllers"));
            "cpu memory pids".into()
        });
        assert_eq!(h.controllers(), ["memory", "pids", "cpu"]);
    }

    #[test]
    fn a_missing_controller_refuses_the_run() {
        let h = Hierarchy::V2 {
            base: "/nonexistent".into(),
            controllers: vec!["hugetlb".into()],
        };
        let err = h.create("x", false).unwrap_err();
        assert!(
            matches!(
                err,
                CgroupError::ControllerMissing {
                    controller: "memory",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn v1_writes_every_limit_and_removes_its_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), true);
        let plan = CgroupPlan {
            memory_bytes: 64 << 20,
            max_pids: 32,
            cpus: 0.5,
        };
        let cg = h.create("sb1", true).unwrap();
        cg.set_limits(&plan).unwrap();
        let read = |p: &str| fs::read_to_string(tmp.path().join(p)).unwrap();
        assert_eq!(read("memory/warden/sb1/memory.limit_in_bytes"), "67108864");
        assert_eq!(read("pids/warden/sb1/pids.max"), "32");
        assert_eq!(read("cpu/warden/sb1/cpu.cfs_quota_us"), "50000");
        // Without swap accounting (no such file) nothing is made up.
        assert!(
            !tmp.path()
                .join("memory/warden/sb1/memory.memsw.limit_in_bytes")
                .exists()
        );
        assert!(tmp.path().join("freezer/warden/sb1").is_dir());
        assert!(!cg.oom_killed());
        // The counters' files as the kernel has them, opened before the events happen (as
        // the supervisor opens them while the program runs) and read after.
        let oom_control = tmp.path().join("memory/warden/sb1/memory.oom_control");
        let pids_events = tmp.path().join("pids/warden/sb1/pids.events");
        fs::write(
            &oom_control,
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        fs::write(&pids_events, "max 0\n").unwrap();
        let events = cg.events();
        assert!(!events.oom_killed() && !events.pids_limit_hit());
        fs::write(
            &oom_control,
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        assert!(events.oom_killed() && !events.pids_limit_hit());
        fs::write(&pids_events, "max 3\n").unwrap();
        assert!(events.oom_killed() && events.pids_limit_hit());
        assert!(cg.oom_killed() && cg.pids_limit_hit());
        cg.remove().unwrap();
        assert!(!tmp.path().join("memory/warden/sb1").exists());
        assert!(!tmp.path().join("cpu/warden/sb1").exists());
        assert!(!tmp.path().join("freezer/warden/sb1").exists());
    }

    #[test]
    fn the_cpu_weight_is_the_default_or_a_sixteenth_of_it() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = v1_under(tmp.path(), false);
        let v2_base = tmp.path().join("unified");
        let v2 = Hierarchy::V2 {
            base: v2_base.clone(),
            controllers: vec!["memory".into(), "pids".into(), "cpu".into()],
        };
        fs::create_dir_all(&v2_base).unwrap();
        let read = |p: &str| fs::read_to_string(tmp.path().join(p)).unwrap();
        let (a, b) = (
            v1.create("sb1", false).unwrap(),
            v2.create("sb1", false).unwrap(),
        );
        for (weight, shares, cpu_weight) in [
            (CpuWeight::Background, "64", "6"),
            (CpuWeight::Normal, "1024", "100"),
        ] {
            a.set_cpu_weight(weight).unwrap();
            b.set_cpu_weight(weight).unwrap();
            assert_eq!(read("cpu/warden/sb1/cpu.shares"), shares);
            assert_eq!(read("unified/warden/sb1/cpu.weight"), cpu_weight);
        }
    }

    #[test]
    fn only_a_run_that_can_be_paused_gets_a_freezer_leaf() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), true);
        let one_shot = h.create("run-1-a", false).unwrap();
        for controller in ["memory", "pids", "cpu"] {
            assert!(tmp.path().join(controller).join("warden/run-1-a").is_dir());
        }
        assert!(!tmp.path().join("freezer/warden/run-1-a").exists());
        // Nothing of it to freeze: a pause of its helper changes no run.
        assert_eq!(h.freeze_runs_of(1, true).unwrap(), 0);
        one_shot.remove().unwrap();
        for controller in ["memory", "pids", "cpu"] {
            assert!(!tmp.path().join(controller).join("warden/run-1-a").exists());
        }
    }

    #[test]
    fn every_leaf_of_a_live_run_is_locked_for_older_sweeps() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), true);
        let live = h.create("run-4-a", true).unwrap();
        // An older Warden's sweep tries each leaf's own lock, and removes an unlocked empty one.
        for controller in ["memory", "pids", "cpu", "freezer"] {
            let leaf = tmp.path().join(controller).join("warden/run-4-a");
            assert!(
                lock_dir(&leaf, libc::LOCK_EX | libc::LOCK_NB).is_err(),
                "{controller}"
            );
        }
        drop(live);
        let leaf = tmp.path().join("pids/warden/run-4-a");
        assert!(lock_dir(&leaf, libc::LOCK_EX | libc::LOCK_NB).is_ok());
    }

    #[test]
    fn a_run_left_half_made_or_half_removed_is_found_by_its_memory_leaf() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), true);
        // A helper that died after making its memory and pids leaves (the others never came).
        drop(h.create("run-2-a", true).unwrap());
        fs::remove_dir_all(tmp.path().join("cpu/warden/run-2-a")).unwrap();
        fs::remove_dir_all(tmp.path().join("freezer/warden/run-2-a")).unwrap();
        // One that died while removing its leaves: the memory leaf goes last, so it is there.
        let removing = h.create("run-3-a", true).unwrap();
        for controller in ["freezer", "cpu"] {
            fs::remove_dir_all(tmp.path().join(controller).join("warden/run-3-a")).unwrap();
        }
        drop(removing);
        assert!(h.has_stale());
        assert_eq!(h.remove_stale(), 4);
        for controller in ["memory", "pids", "cpu", "freezer"] {
            let parent = tmp.path().join(controller).join("warden");
            assert_eq!(fs::read_dir(&parent).unwrap().count(), 0, "{controller}");
        }
        assert!(!h.has_stale());
    }

    #[test]
    fn freezing_writes_the_state_of_each_run_of_the_helper_and_waits_for_it() {
        let tmp = tempfile::tempdir().unwrap();
        let h = v1_under(tmp.path(), true);
        let _mine = h.create("run-7-a", true).unwrap();
        let _other = h.create("run-8-a", true).unwrap();
        // A plain folder: the state reads back as written (the kernel's passes through
        // FREEZING first).
        assert_eq!(h.freeze_runs_of(7, true).unwrap(), 1);
        let state = |run: &str| {
            fs::read_to_string(
                tmp.path()
                    .join(format!("freezer/warden/{run}/freezer.state")),
            )
            .unwrap()
        };
        assert_eq!(state("run-7-a"), "FROZEN");
        assert!(
            !tmp.path()
                .join("freezer/warden/run-8-a/freezer.state")
                .exists()
        );
        assert_eq!(h.freeze_runs_of(7, false).unwrap(), 1);
        assert_eq!(state("run-7-a"), "THAWED");
        let without = Hierarchy::V1 {
            memory: None,
            pids: None,
            cpu: None,
            freezer: None,
        };
        assert!(matches!(
            without.freeze_runs_of(7, true),
            Err(CgroupError::ControllerMissing {
                controller: "freezer",
                ..
            })
        ));
    }
}
