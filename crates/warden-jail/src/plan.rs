//! The typed plan of one sandboxed run: everything the helper will do, decided before any side
//! effect (bubblewrap's SetupOp list, ripgrep's HiArgs).
//!
//! Invariants: a `JailPlan` is complete and checked when built — the helper never consults
//! settings, nor changes it (what only the helper learns, a networked sandbox's link, travels
//! beside it as a [`NetAttachment`] into the mount the plan already holds); mount destinations are absolute paths inside the sandbox without `..`; the root
//! is read-only and built only from the listed host paths; the host's /proc, /sys, /root, /home
//! and /var are never a source.

use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};
use warden_engine::import_guard::Delivery;
use warden_types::Limits;

pub use crate::layout::{
    CODE_DIR, GATED_CODE_ROOM, IMPORT_GUARD_DIR, OUTPUT_DIR_NAME, SCRATCH_TMP, SCRATCH_WORK,
    SESSION_REPLY_FD, START_FD, WORKSPACE_DIR,
};

/// Host paths never mounted into a sandbox, whatever the settings say: checked-in data with a
/// reason per entry (`data/host_paths.toml`, see [`crate::tables`]).
pub use crate::tables::FORBIDDEN_HOST_PATHS;

/// The uid and gid the program has inside the sandbox, and which unprivileged host uid (and
/// gid of the same number) they map to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    pub inside_uid: u32,
    pub inside_gid: u32,
    pub host: HostIds,
}

/// Which host uid a sandbox runs as: its own, never another live sandbox's (see
/// [`warden_net::uids`]). The helper learns the number; it owns the sandbox's user namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HostIds {
    /// A one-shot run: the helper leases a uid of this range for the run's life.
    Lease(warden_net::uids::UidRange),
    /// A run of a sandbox with a lifetime, which holds the lease of `uid`; the helper
    /// inherits it at [`crate::helper::INHERITED_LEASE_FD`] and holds it until it is done.
    Held { uid: u32 },
}

/// One step of building the sandbox's root, applied in order under the new root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountOp {
    /// Bind a host path read-only, nosuid, nodev (recursively).
    BindReadOnly {
        source: PathBuf,
        dest: PathBuf,
    },
    /// Bind a host device node (read-write, nosuid, noexec).
    BindDevice {
        source: PathBuf,
        dest: PathBuf,
    },
    /// A symlink, e.g. /bin -> usr/bin on merged-/usr hosts.
    Symlink {
        target: PathBuf,
        dest: PathBuf,
    },
    Dir {
        dest: PathBuf,
        mode: u32,
    },
    /// A small file written into the root before it becomes read-only.
    File {
        dest: PathBuf,
        contents: String,
        mode: u32,
    },
    /// The import guard's files in folder `dir` (mode 0444), written into the root before it
    /// becomes read-only, where `delivery` puts them: its source (`usercustomize.py` or
    /// `sitecustomize.py`) and, when this binary carries it, its bytecode in `__pycache__`.
    /// Their contents are this binary's own (`warden_engine::import_guard`), so they do not
    /// travel in every plan (≈ 50 KB of the plan's JSON, encoded and decoded twice per sandbox
    /// otherwise); the helper and init are this binary.
    ImportGuard {
        dir: PathBuf,
        delivery: Delivery,
    },
    /// A fresh procfs for the sandbox's pid namespace.
    Proc {
        dest: PathBuf,
    },
    /// A size-capped tmpfs owned by the sandbox user.
    Tmpfs {
        dest: PathBuf,
        size_bytes: u64,
        mode: u32,
    },
    /// Bind a subfolder of the workspace tmpfs somewhere (the workspace and /tmp).
    BindScratch {
        subdir: String,
        dest: PathBuf,
    },
    /// Hide a file under /proc behind /dev/null.
    MaskFile {
        dest: PathBuf,
    },
    /// Hide a folder under /proc behind an empty read-only tmpfs.
    MaskDir {
        dest: PathBuf,
    },
    /// Make an existing path read-only (a bind onto itself, then ro).
    ReadOnly {
        dest: PathBuf,
    },
    /// A networked sandbox's resolv.conf (mode 0644), written into the root like `File`; its
    /// contents name the resolver on the host end of the sandbox's link, known only once the
    /// helper has leased the link's slot, and come with the [`NetAttachment`].
    ResolvConf {
        dest: PathBuf,
    },
    /// A sandbox with brokered secrets: the CA bundle it trusts (mode 0644, written into the
    /// root like `File`): the host's CAs and its egress gateway's own CA, made by the helper
    /// with the gateway, and come with the [`NetAttachment`].
    GatewayCa {
        dest: PathBuf,
    },
}

pub use crate::cgroup::CgroupPlan;

/// Everything the helper needs to run one program in a fresh sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JailPlan {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox.
    pub cwd: PathBuf,
    /// The code, written into the sandbox's own in-memory root at `code_path`.
    pub code_path: PathBuf,
    pub code: String,
    /// Bytes given to the program on stdin (empty: /dev/null-like EOF at once).
    pub stdin: Vec<u8>,
    pub limits: Limits,
    pub ids: IdMap,
    pub hostname: String,
    /// Size of the sandbox's root tmpfs, which only holds mount points and small files.
    pub mounts: Vec<MountOp>,
    pub cgroup: CgroupPlan,
    /// Seccomp allow-list on (always, unless a test turns it off to compare).
    pub seccomp: bool,
    /// Landlock: every part Warden uses up to this ABI, each a hard requirement (the backend
    /// sets the ABI its check found this kernel enforces for the profile's requirement; the
    /// default is the newest Warden uses, which an older kernel refuses at init); `None`
    /// only for tests that compare.
    pub landlock: Option<u32>,
    /// Print how long each step took to stderr (`WARDEN_TRACE_TIMING=1` in the engine's
    /// environment); for finding where start-up time goes.
    #[serde(default)]
    pub trace_timing: bool,
    /// Nobody follows the output live (an engine run with no event sender): the helper sends
    /// no output frames, only the result, which holds the output. Spares the engine a wake-up
    /// for every write of the program, each of which took the program's CPU from it for a
    /// moment (docs/benchmarks.md, session 32). A pooled run's comes with its `Start`.
    #[serde(default)]
    pub quiet_output: bool,
    /// Make cgroup moves cheap (see [`crate::cgroup::ensure_fast_attach`]).
    #[serde(default)]
    pub fast_cgroup_attach: bool,
    /// The host's cgroup layout as the caller found it, so the helper need not read the mount
    /// table again (the caller and the helper share the host's view); `None`: the helper
    /// finds it.
    #[serde(default)]
    pub cgroups: Option<crate::cgroup::Hierarchy>,
    /// A sandbox with a lifetime: the helper inherited its workspace tmpfs (a detached mount)
    /// at this descriptor, and the run attaches a clone of it instead of a fresh tmpfs. Only
    /// artifacts written during this run are returned.
    #[serde(default)]
    pub shared_workspace_fd: Option<i32>,
    /// The output folder's files before this run (a shared workspace): not this run's
    /// artifacts unless changed.
    #[serde(default)]
    pub known_outputs: Vec<crate::artifacts::FileStamp>,
    /// A networked sandbox (`network_enabled`): `None` keeps it on loopback only.
    #[serde(default)]
    pub network: Option<JailNetwork>,
    /// A long-lived run (a context's interpreter, see [`crate::session`]): the program gets
    /// the reply pipe at descriptor [`SESSION_REPLY_FD`], and init forwards SIGINT to it.
    #[serde(default)]
    pub session: bool,
    /// The interpreter runs with the import guard ([`JailPlan::add_import_guard`]): the program
    /// gets the report pipe at descriptor [`SESSION_REPLY_FD`], and a one-shot run's report is
    /// judged when it ends (a session's travels with the driver's replies).
    #[serde(default)]
    pub import_report: bool,
    /// A gated run (see [`crate::gate`]): init does not write the code; the supervisor writes
    /// it through a copy of the root's code folder and then opens the start gate, at once (a
    /// cold run) or when the code arrives (a pooled one).
    #[serde(default)]
    pub gated: bool,
    /// Init exits as soon as it has reported the program's status, so that the kernel ends
    /// the namespaces while the supervisor makes the answer; otherwise it waits for the
    /// supervisor to kill it once the answer is out. Set for the one-shot CLI, whose whole run
    /// (its exit and its helper's teardown) is waited for: it ends 1 ms sooner so. A daemon's
    /// answer comes sooner with the teardown after it (docs/benchmarks.md, "The teardown
    /// beside the answer").
    #[serde(default)]
    pub init_exits_on_status: bool,
}

impl JailPlan {
    /// The program's command as init finds it (`argv[0]`): a path as given, else the first
    /// executable file of that name in the plan's `PATH` (`/usr/bin:/bin` without one), in the
    /// root this process sees.
    pub(crate) fn find_command(&self) -> Option<PathBuf> {
        let name = self.argv.first()?;
        if name.contains('/') {
            return Some(PathBuf::from(name));
        }
        let search = self
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or("/usr/bin:/bin", |(_, v)| v.as_str());
        search
            .split(':')
            .map(|dir| Path::new(dir).join(name))
            .find(|p| crate::init::is_executable(p))
    }

    /// Runs the Python interpreter with the import guard: its file written into the root at
    /// [`IMPORT_GUARD_DIR`] as the interpreter's version allows ([`Delivery::for_interpreter`]
    /// of [`JailPlan::find_command`]), the environment that names it, the report pipe. A
    /// context's `driver` (its path in the sandbox) is trusted like the standard library.
    pub fn add_import_guard(
        &mut self,
        guard: &warden_engine::import_guard::ImportGuard,
        driver: Option<&str>,
    ) {
        // Found on the host: the sandbox's root binds the host's own folders (read-only), so
        // the file found there is the one init runs.
        let delivery = self.find_command().map_or(Delivery::SearchPath, |path| {
            Delivery::for_interpreter(&path)
        });
        self.env
            .extend(guard.env(IMPORT_GUARD_DIR, &delivery, driver));
        self.mounts.push(MountOp::ImportGuard {
            dir: IMPORT_GUARD_DIR.into(),
            delivery,
        });
        self.import_report = true;
        // A one-shot program (not a context's driver) waits at the gate, cold or pooled alike.
        if driver.is_none() && !self.session && self.code.len() <= GATED_CODE_ROOM {
            self.env.push((
                warden_engine::import_guard::START_ENV.to_owned(),
                START_FD.to_string(),
            ));
            self.gated = true;
        }
    }
}

/// A networked sandbox's part of the plan: what it may reach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JailNetwork {
    pub request: warden_net::NetRequest,
}

/// Where a networked sandbox's resolv.conf is (a [`MountOp::ResolvConf`]).
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// What the helper learns once a networked sandbox's link exists (its leased slot), passed to
/// init beside the plan, which stays as built: how init configures its side of the link, and
/// the contents of the planned [`MountOp::ResolvConf`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetAttachment {
    pub interface: warden_net::Interface,
    pub resolv_conf: String,
    /// The contents of the planned [`MountOp::GatewayCa`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
}

pub use warden_net::secrets::{CA_BUNDLE_VARIABLES, GATEWAY_CA_BUNDLE};

impl JailPlan {
    /// The plan as the sandbox's init may see it: brokered secrets' values blanked (init is
    /// the sandbox's first process; only the helper and the gateway hold the values).
    pub fn for_init(&self) -> std::borrow::Cow<'_, JailPlan> {
        match &self.network {
            Some(n) if n.request.secrets.iter().any(|s| !s.value.is_empty()) => {
                let mut plan = self.clone();
                if let Some(n) = plan.network.as_mut() {
                    for s in &mut n.request.secrets {
                        s.value.clear();
                    }
                    n.request.upstream_ca_pem = None;
                }
                std::borrow::Cow::Owned(plan)
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }
}

/// What the supervisor sends init: the plan and, for a networked sandbox, its attachment.
#[derive(Debug, Serialize)]
pub struct ToInit<'a> {
    pub plan: &'a JailPlan,
    pub network: Option<&'a NetAttachment>,
}

/// [`ToInit`], as init decodes it.
#[derive(Debug, Deserialize)]
pub struct InitInput {
    pub plan: JailPlan,
    pub network: Option<NetAttachment>,
}

/// Why a plan could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("host path {path:?} may not be mounted into a sandbox ({why})")]
    ForbiddenHostPath { path: PathBuf, why: &'static str },
    #[error("path {path:?} must be absolute and free of '..'")]
    BadPath { path: PathBuf },
    #[error("empty command: a runtime needs at least a program name")]
    EmptyCommand,
    #[error("limit {field} must be greater than zero")]
    ZeroLimit { field: &'static str },
}

/// Checks that a path is absolute and has no `..`, `.` is dropped.
pub fn clean_absolute(path: &Path) -> Result<PathBuf, PlanError> {
    if !path.is_absolute() {
        return Err(PlanError::BadPath { path: path.into() });
    }
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(PlanError::BadPath { path: path.into() });
            }
        }
    }
    Ok(out)
}

/// A host path may be bound only if it is not, and is not under, a forbidden one, and does
/// not contain one (binding `/` would bring /root along).
pub fn check_host_path(path: &Path) -> Result<PathBuf, PlanError> {
    let path = clean_absolute(path)?;
    for forbidden in FORBIDDEN_HOST_PATHS {
        let forbidden = Path::new(forbidden);
        if path == forbidden {
            return Err(PlanError::ForbiddenHostPath {
                path,
                why: "a forbidden path",
            });
        }
        if forbidden != Path::new("/") && path.starts_with(forbidden) {
            return Err(PlanError::ForbiddenHostPath {
                path,
                why: "under a forbidden path",
            });
        }
    }
    Ok(path)
}

/// Entries of the sandbox's own procfs that are hidden or made read-only (as Docker and runc
/// do), and the device nodes a program gets (all else of /dev is absent): checked-in data with
/// a reason per entry (`data/proc.toml`, `data/devices.toml`, see [`crate::tables`]).
pub use crate::tables::{DEVICES, MASKED_PROC_DIRS, MASKED_PROC_FILES, READ_ONLY_PROC};

/// What the caller decides: the program, its files and limits.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub argv: Vec<String>,
    pub code: String,
    pub code_file_name: String,
    pub stdin: Vec<u8>,
    pub limits: Limits,
    pub host_paths: &'a [PathBuf],
    pub ids: IdMap,
    pub extra_env: Vec<(String, String)>,
    /// See [`JailPlan::shared_workspace_fd`].
    pub shared_workspace_fd: Option<i32>,
    /// A networked sandbox (`network_enabled`): what it may reach; `None` keeps it offline.
    pub network: Option<warden_net::NetRequest>,
}

/// Sets `key` in `env`, replacing an earlier value (a variable appears once).
fn set_env(env: &mut Vec<(String, String)>, key: String, value: String) {
    match env.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => env.push((key, value)),
    }
}

impl JailPlan {
    /// Also shows the workspace at `home` (an absolute, clean path under /home, e.g.
    /// `/home/user`: the same folder of the workspace tmpfs as `/workspace`, so Landlock's
    /// rule for the workspace covers it), and makes it the program's HOME and working
    /// directory.
    pub fn with_home(&mut self, home: &str) -> Result<(), PlanError> {
        let dest = clean_absolute(Path::new(home))?;
        // Under /home, which the root never binds from the host (host_paths refuses it):
        // nothing of the root is hidden.
        if !dest.starts_with("/home") || dest == Path::new("/home") {
            return Err(PlanError::BadPath { path: dest });
        }
        self.mounts.push(MountOp::BindScratch {
            subdir: SCRATCH_WORK.into(),
            dest: dest.clone(),
        });
        set_env(&mut self.env, "HOME".into(), home.into());
        self.cwd = dest;
        Ok(())
    }

    /// Builds the plan: checks the inputs and lays out the root in order.
    pub fn build(input: PlanInput<'_>) -> Result<JailPlan, PlanError> {
        if input.argv.is_empty() || input.argv[0].is_empty() {
            return Err(PlanError::EmptyCommand);
        }
        let l = &input.limits;
        for (field, value) in [
            ("timeout", l.timeout.as_millis() as u64),
            ("memory_mb", l.memory_mb),
            ("max_pids", l.max_pids),
            ("workspace_mb", l.workspace_mb),
            ("max_output_bytes", l.max_output_bytes),
        ] {
            if value == 0 {
                return Err(PlanError::ZeroLimit { field });
            }
        }
        if l.cpus.is_nan() || l.cpus <= 0.0 {
            return Err(PlanError::ZeroLimit { field: "cpus" });
        }
        let mut mounts = Vec::new();
        for host in input.host_paths {
            let host = check_host_path(host)?;
            match std::fs::symlink_metadata(&host) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    // Recreate the link (merged /usr: /bin -> usr/bin) instead of binding what
                    // it points to, so the sandbox sees the same layout as the host.
                    let target = std::fs::read_link(&host)
                        .map_err(|_| PlanError::BadPath { path: host.clone() })?;
                    mounts.push(MountOp::Symlink { target, dest: host });
                }
                Ok(_) => mounts.push(MountOp::BindReadOnly {
                    source: host.clone(),
                    dest: host,
                }),
                // A path this host lacks is skipped: the allow-list is a superset for several
                // distributions.
                Err(_) => {}
            }
        }
        mounts.push(MountOp::Dir {
            dest: "/dev".into(),
            mode: 0o755,
        });
        for dev in DEVICES {
            let path = PathBuf::from("/dev").join(dev);
            if path.exists() {
                mounts.push(MountOp::BindDevice {
                    source: path.clone(),
                    dest: path,
                });
            }
        }
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            mounts.push(MountOp::Symlink {
                target: target.into(),
                dest: PathBuf::from("/dev").join(name),
            });
        }
        // Python's multiprocessing needs a writable /dev/shm; it shares the workspace's cap
        // through its own small tmpfs.
        mounts.push(MountOp::Tmpfs {
            dest: "/dev/shm".into(),
            size_bytes: (l.workspace_mb * 1024 * 1024).min(64 * 1024 * 1024),
            mode: 0o1777,
        });
        mounts.push(MountOp::Proc {
            dest: "/proc".into(),
        });
        for f in MASKED_PROC_FILES {
            mounts.push(MountOp::MaskFile { dest: f.into() });
        }
        for d in MASKED_PROC_DIRS {
            mounts.push(MountOp::MaskDir { dest: d.into() });
        }
        for d in READ_ONLY_PROC {
            mounts.push(MountOp::ReadOnly { dest: d.into() });
        }
        let ids = input.ids;
        mounts.push(MountOp::Dir {
            dest: "/etc".into(),
            mode: 0o755,
        });
        mounts.push(MountOp::File {
            dest: "/etc/passwd".into(),
            contents: format!(
                "root:x:0:0:root:/:/usr/sbin/nologin\nsandbox:x:{}:{}:sandbox:{WORKSPACE_DIR}:/bin/sh\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n",
                ids.inside_uid, ids.inside_gid
            ),
            mode: 0o644,
        });
        mounts.push(MountOp::File {
            dest: "/etc/group".into(),
            contents: format!(
                "root:x:0:\nsandbox:x:{}:\nnogroup:x:65534:\n",
                ids.inside_gid
            ),
            mode: 0o644,
        });
        mounts.push(MountOp::File {
            dest: "/etc/hosts".into(),
            contents: "127.0.0.1 localhost sandbox\n::1 localhost\n".into(),
            mode: 0o644,
        });
        // The workspace: one tmpfs with the size cap (mounted beside the root while it is built),
        // split into the working directory and /tmp so that one cap bounds both.
        mounts.push(MountOp::BindScratch {
            subdir: SCRATCH_WORK.into(),
            dest: WORKSPACE_DIR.into(),
        });
        mounts.push(MountOp::BindScratch {
            subdir: SCRATCH_TMP.into(),
            dest: "/tmp".into(),
        });
        let code_path = PathBuf::from(CODE_DIR).join(&input.code_file_name);
        let code_path = clean_absolute(&code_path)?;
        mounts.push(MountOp::Dir {
            dest: CODE_DIR.into(),
            mode: 0o755,
        });
        // A networked sandbox asks Warden's resolver on the host end of its link.
        if input.network.is_some() {
            mounts.push(MountOp::ResolvConf {
                dest: RESOLV_CONF.into(),
            });
        }
        // Brokered secrets: the sandbox trusts its gateway's CA and sees placeholders.
        let secrets = input
            .network
            .as_ref()
            .map(|n| n.secrets.as_slice())
            .unwrap_or_default();
        let secret_env = warden_net::secrets::sandbox_env(secrets);
        if !secrets.is_empty() {
            mounts.push(MountOp::GatewayCa {
                dest: GATEWAY_CA_BUNDLE.into(),
            });
        }
        let mut env = vec![
            (
                "PATH".to_owned(),
                "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".to_owned(),
            ),
            ("HOME".to_owned(), WORKSPACE_DIR.to_owned()),
            ("TMPDIR".to_owned(), "/tmp".to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("USER".to_owned(), "sandbox".to_owned()),
            ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
            ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
            ("MPLBACKEND".to_owned(), "Agg".to_owned()),
            // Caches (fontconfig) and matplotlib's folder go to /tmp, not into the user's
            // workspace, where the files API and artifacts would show them.
            ("XDG_CACHE_HOME".to_owned(), "/tmp/.cache".to_owned()),
            (
                "MPLCONFIGDIR".to_owned(),
                "/tmp/.config/matplotlib".to_owned(),
            ),
            (
                "WARDEN_OUTPUT_DIR".to_owned(),
                format!("{WORKSPACE_DIR}/{OUTPUT_DIR_NAME}"),
            ),
        ];
        for (key, value) in input.extra_env.into_iter().chain(secret_env) {
            set_env(&mut env, key, value);
        }
        Ok(JailPlan {
            argv: input.argv,
            env,
            cwd: WORKSPACE_DIR.into(),
            code_path,
            code: input.code,
            stdin: input.stdin,
            cgroup: CgroupPlan {
                memory_bytes: l.memory_mb * 1024 * 1024,
                max_pids: l.max_pids,
                cpus: l.cpus,
            },
            limits: input.limits,
            ids,
            hostname: "sandbox".into(),
            mounts,
            seccomp: true,
            landlock: Some(warden_types::landlock::LandlockPart::NEWEST_ABI),
            trace_timing: false,
            quiet_output: false,
            fast_cgroup_attach: false,
            cgroups: None,
            shared_workspace_fd: input.shared_workspace_fd,
            known_outputs: Vec::new(),
            network: input.network.map(|request| JailNetwork { request }),
            session: false,
            import_report: false,
            gated: false,
            init_exits_on_status: false,
        })
    }
}

/// A plan for unit tests elsewhere in the crate: `argv` with small limits, no host paths.
#[cfg(test)]
pub(crate) fn sample(argv: &[&str]) -> JailPlan {
    JailPlan::build(PlanInput {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        code: String::new(),
        code_file_name: "main.sh".into(),
        stdin: vec![],
        limits: Limits {
            timeout: std::time::Duration::from_secs(1),
            memory_mb: 64,
            max_pids: 16,
            cpus: 1.0,
            max_output_bytes: 1024,
            max_file_size_bytes: 1024,
            workspace_mb: 16,
            max_artifacts: 1,
            max_artifact_bytes: 1024,
        },
        host_paths: &[],
        ids: IdMap {
            inside_uid: 1000,
            inside_gid: 1000,
            host: HostIds::Lease(Default::default()),
        },
        extra_env: vec![("K".into(), "v=w".into())],
        shared_workspace_fd: None,
        network: None,
    })
    .expect("a valid plan")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            timeout: Duration::from_secs(5),
            memory_mb: 128,
            max_pids: 64,
            cpus: 1.0,
            max_output_bytes: 1 << 20,
            max_file_size_bytes: 1 << 24,
            workspace_mb: 64,
            max_artifacts: 16,
            max_artifact_bytes: 1 << 24,
        }
    }

    fn input(paths: &[PathBuf]) -> PlanInput<'_> {
        PlanInput {
            argv: vec!["python3".into(), "/code/main.py".into()],
            code: "print(1)".into(),
            code_file_name: "main.py".into(),
            stdin: vec![],
            limits: limits(),
            host_paths: paths,
            ids: IdMap {
                inside_uid: 1000,
                inside_gid: 1000,
                host: HostIds::Lease(Default::default()),
            },
            extra_env: vec![],
            shared_workspace_fd: None,
            network: None,
        }
    }

    #[test]
    fn secret_host_paths_are_refused() {
        for bad in [
            "/",
            "/root",
            "/root/.ssh",
            "/home/u",
            "/var/lib",
            "/proc",
            "/sys/fs",
            "/usr/../root",
        ] {
            let paths = vec![PathBuf::from(bad)];
            let err = JailPlan::build(input(&paths)).unwrap_err();
            assert!(
                matches!(
                    err,
                    PlanError::ForbiddenHostPath { .. } | PlanError::BadPath { .. }
                ),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn relative_paths_are_refused() {
        let paths = vec![PathBuf::from("usr")];
        assert!(matches!(
            JailPlan::build(input(&paths)),
            Err(PlanError::BadPath { .. })
        ));
    }

    #[test]
    fn missing_host_paths_are_skipped_and_proc_comes_before_masks() {
        let paths = vec![PathBuf::from("/usr"), PathBuf::from("/nonexistent-warden")];
        let plan = JailPlan::build(input(&paths)).unwrap();
        assert!(!plan.mounts.iter().any(|m| matches!(m, MountOp::BindReadOnly { source, .. } if source.ends_with("nonexistent-warden"))));
        let proc_at = plan
            .mounts
            .iter()
            .position(|m| matches!(m, MountOp::Proc { .. }))
            .unwrap();
        let mask_at = plan
            .mounts
            .iter()
            .position(|m| matches!(m, MountOp::MaskFile { .. }))
            .unwrap();
        assert!(proc_at < mask_at);
    }

    /// What the plan refuses, masks and creates, spelled out: the data files
    /// (`data/*.toml`) must keep the sandbox exactly this.
    #[test]
    fn the_plan_refuses_masks_and_creates_exactly_the_reviewed_entries() {
        for forbidden in [
            "/root", "/home", "/var", "/proc", "/sys", "/run", "/boot", "/",
        ] {
            assert!(
                matches!(
                    check_host_path(Path::new(forbidden)),
                    Err(PlanError::ForbiddenHostPath { .. })
                ),
                "{forbidden}"
            );
        }
        for allowed in ["/usr", "/etc/ssl", "/rooted", "/opt/home", "/lib64"] {
            assert_eq!(
                check_host_path(Path::new(allowed)).unwrap(),
                PathBuf::from(allowed)
            );
        }
        let plan = JailPlan::build(input(&[])).unwrap();
        let dests = |pick: fn(&MountOp) -> Option<&PathBuf>| -> Vec<String> {
            plan.mounts
                .iter()
                .filter_map(pick)
                .map(|p| p.display().to_string())
                .collect()
        };
        let masked_files = dests(|m| match m {
            MountOp::MaskFile { dest } => Some(dest),
            _ => None,
        });
        // Exactly the tables (their content is pinned by `tables`'s reviewed-tables test).
        assert_eq!(masked_files, MASKED_PROC_FILES);
        let masked_dirs = dests(|m| match m {
            MountOp::MaskDir { dest } => Some(dest),
            _ => None,
        });
        assert_eq!(masked_dirs, MASKED_PROC_DIRS);
        let read_only = dests(|m| match m {
            MountOp::ReadOnly { dest } => Some(dest),
            _ => None,
        });
        assert_eq!(read_only, READ_ONLY_PROC);
        // The devices this host has, in the table's order, each bound from itself.
        let expected: Vec<String> = ["null", "zero", "full", "random", "urandom", "tty"]
            .iter()
            .map(|d| format!("/dev/{d}"))
            .filter(|p| Path::new(p).exists())
            .collect();
        let devices: Vec<String> = plan
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountOp::BindDevice { source, dest } => {
                    assert_eq!(source, dest);
                    Some(dest.display().to_string())
                }
                _ => None,
            })
            .collect();
        assert_eq!(devices, expected);
    }

    #[test]
    fn zero_limits_are_refused() {
        let paths = vec![];
        let mut i = input(&paths);
        i.limits.memory_mb = 0;
        assert_eq!(
            JailPlan::build(i).unwrap_err(),
            PlanError::ZeroLimit { field: "memory_mb" }
        );
    }
}

#[cfg(test)]
mod home_tests {
    use super::*;

    #[test]
    fn a_home_shows_the_workspace_and_is_home_and_working_directory() {
        let mut plan = sample(&["/bin/true"]);
        plan.with_home("/home/user").unwrap();
        assert!(plan.mounts.contains(&MountOp::BindScratch {
            subdir: SCRATCH_WORK.into(),
            dest: "/home/user".into(),
        }));
        // The same folder of the workspace tmpfs as /workspace.
        assert!(plan.mounts.contains(&MountOp::BindScratch {
            subdir: SCRATCH_WORK.into(),
            dest: WORKSPACE_DIR.into(),
        }));
        assert_eq!(plan.cwd, PathBuf::from("/home/user"));
        let homes: Vec<_> = plan.env.iter().filter(|(k, _)| k == "HOME").collect();
        assert_eq!(homes, [&("HOME".to_owned(), "/home/user".to_owned())]);
        for bad in ["/etc", "/home", "/home/../etc", "relative", "/usr/home/x"] {
            assert!(sample(&["/bin/true"]).with_home(bad).is_err(), "{bad}");
        }
    }
}
