//! The typed container plan: every setting of a sandbox's container decided from the engine's
//! plan before the Engine API is called, then turned into the engine's create body in one place.
//!
//! Invariants (each one a field below, checked by a snapshot test of the create body): the root
//! filesystem is read-only; the only writable places are size-capped tmpfs mounts
//! (`/workspace`, `/tmp`, `/code`) or, for a durable sandbox, its workspace image's
//! filesystem (capped by its own size, see [`crate::durable`]) on `/workspace`; no other host
//! path is mounted but a networked container's resolv.conf (read-only, a file Warden writes
//! with its resolver's address, see [`crate::network`]); the network mode is `none` and the network disabled; every
//! capability is dropped and `no-new-privileges` is set, under Warden's own seccomp table (as
//! an OCI profile, the settings' `seccomp_profile`; the engine's default only when none is
//! given); the user is not root; memory (with swap equal to it, so no swap), pids and CPU are
//! capped; the engine keeps no log of the output (log driver `none`: the program's output
//! reaches the host's disk nowhere); the container carries Warden's labels so that leftovers can be found after a crash.

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use std::collections::{BTreeMap, HashMap};
use warden_types::Limits;

/// The label every container Warden creates carries; its value is the sandbox id.
pub const LABEL_SANDBOX: &str = "dev.warden.sandbox";
/// `oneshot` or `persistent`.
pub const LABEL_KIND: &str = "dev.warden.kind";
/// The pid of the Warden process that created the container: `remove_orphans` leaves alone
/// the containers of other live Warden processes (a `warden run` beside a daemon, a second
/// daemon on the same engine).
pub const LABEL_PID: &str = "dev.warden.pid";
/// The pid namespace [`LABEL_PID`] is a pid of (its inode): a pid from another namespace names
/// no process here, so `remove_orphans` cannot tell whether its Warden lives and leaves the
/// container alone (a daemon run inside `unshare --pid` must not take the host's daemons'
/// containers for orphans, nor they its).
pub const LABEL_PID_NAMESPACE: &str = "dev.warden.pidns";

/// This process's pid namespace, as in [`LABEL_PID_NAMESPACE`]; `None` where it cannot be read.
pub fn own_pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let link = link.to_str()?;
    Some(link.strip_prefix("pid:[")?.strip_suffix(']')?.to_owned())
}

/// Where the program's code file is written (a small tmpfs of its own).
pub const CODE_DIR: &str = "/code";
pub const WORKSPACE_DIR: &str = "/workspace";
/// The code tmpfs holds one code file at a time; the API accepts at most 10 MB of code.
const CODE_TMPFS_MB: u64 = 16;
/// Under gVisor the container's pids cgroup holds the runtime's own host threads, not the
/// program's processes: the Sentry's (a Go program whose threads only grow) and, on the ptrace
/// platform, a stub thread per address space and Sentry thread that ran it. They grow with
/// each `exec` until they level off: 38 at the start, 150–220 after 40–55 runs that each
/// start a few processes, measured with Debian's 2022-12-19 build. When the cgroup refuses
/// one, the Sentry panics and the whole sandbox ends ("error initializing first thread:
/// resource temporarily unavailable"), so the host cgroup gets this much on top of the
/// profile's `max_pids`: it only bounds the sandbox's cost to the host. The program's own
/// processes and threads are limited inside gVisor's kernel by `RLIMIT_NPROC` (see
/// [`ContainerPlan::process_limit`]).
pub const RUNSC_PIDS_ALLOWANCE: u64 = 1024;
/// /dev/shm for Python's multiprocessing: small, and counted in the memory limit like every
/// tmpfs page.
const SHM_MB: u64 = 16;

/// What a container is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Runs one program as its first process (the wrapper) and exits with it.
    OneShot,
    /// Runs a keeper that waits forever; programs run as `exec`s beside it.
    Persistent,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::OneShot => "oneshot",
            Role::Persistent => "persistent",
        }
    }
}

/// Everything a sandbox's container is created with.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerPlan {
    pub name: String,
    pub image: String,
    /// `uid:gid`, never 0.
    pub user: String,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    /// `RLIMIT_NPROC` (soft and hard) of the container's processes, under gVisor only: its
    /// kernel is the sandbox's own, so the count is the sandbox's processes and threads of its
    /// user (the keeper, the wrapper and the program), which the host's pids cgroup cannot
    /// count there. Elsewhere the pids cgroup is exact and no rlimit is set: the host kernel
    /// counts `RLIMIT_NPROC` per uid across every namespace.
    pub process_limit: Option<i64>,
    pub nano_cpus: i64,
    pub file_size_bytes: i64,
    pub workspace_mb: u64,
    /// The OCI runtime (`runsc` for gVisor); `None`: the engine's default.
    pub oci_runtime: Option<String>,
    pub role: Role,
    /// Networked (Warden's controlled egress is attached after the start).
    pub network: bool,
    /// A networked container's resolv.conf: a file Warden writes (the resolver's address,
    /// once its keeper is ready), bound read-only on `/etc/resolv.conf` — the one host path a
    /// container sees, and it holds nothing but that line.
    pub resolv_conf: Option<String>,
    /// A container with brokered secrets: its gateway's CA bundle, a file Warden writes (the
    /// host's CAs and the sandbox's own), bound read-only on
    /// [`warden_net::secrets::GATEWAY_CA_BUNDLE`]; certificates only, never a key.
    pub ca_bundle: Option<String>,
    /// The OCI seccomp profile (JSON) the container runs under; `None`: the engine's default.
    pub seccomp_profile: Option<std::sync::Arc<str>>,
    /// A durable sandbox's workspace: the host folder where its image's filesystem is mounted
    /// (see [`crate::durable`]), bound on `/workspace` instead of a tmpfs.
    pub workspace_bind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the docker backend needs an image: set the profile's or the runtime's `image`")]
    NoImage,
    #[error(
        "network_enabled = true with container_runtime = \"runsc\": gVisor's netstack takes the container's interfaces when it starts, before Warden's controlled link exists, so the profile is refused rather than run without its rules"
    )]
    NetworkUnderRunsc,
    #[error(
        "the sandbox user {0:?} is root; the docker backend runs programs as an unprivileged uid:gid"
    )]
    RootUser(String),
    #[error("limit {field} = {value} does not fit the engine's API")]
    Limit { field: &'static str, value: String },
}

/// What a plan is built from.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub name: String,
    pub sandbox_id: String,
    pub image: Option<&'a str>,
    pub limits: &'a Limits,
    pub network_enabled: bool,
    /// The container's leased host uid (the gid has the same number); never root.
    pub uid: u32,
    pub oci_runtime: Option<&'a str>,
    pub labels: &'a BTreeMap<String, String>,
    pub role: Role,
    /// The one-shot's command (the wrapper and the program); ignored for a persistent one.
    pub cmd: Vec<String>,
    /// See [`ContainerPlan::seccomp_profile`].
    pub seccomp_profile: Option<std::sync::Arc<str>>,
}

/// The environment every program sees (the image's own is replaced, not merged).
pub fn program_env() -> Vec<String> {
    [
        "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        "HOME=/workspace",
        "TMPDIR=/tmp",
        "LANG=C.UTF-8",
        "USER=sandbox",
        "PYTHONUNBUFFERED=1",
        "PYTHONDONTWRITEBYTECODE=1",
        "MPLBACKEND=Agg",
        // Caches and matplotlib's folder in /tmp, not in the user's workspace.
        "XDG_CACHE_HOME=/tmp/.cache",
        "MPLCONFIGDIR=/tmp/.config/matplotlib",
        "WARDEN_OUTPUT_DIR=/workspace/output",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl ContainerPlan {
    pub fn build(input: PlanInput<'_>) -> Result<ContainerPlan, PlanError> {
        let under_runsc = input.oci_runtime == Some("runsc");
        if input.network_enabled && under_runsc {
            return Err(PlanError::NetworkUnderRunsc);
        }
        let image = input
            .image
            .filter(|i| !i.trim().is_empty())
            .ok_or(PlanError::NoImage)?;
        if input.uid == 0 {
            return Err(PlanError::RootUser(input.uid.to_string()));
        }
        let l = input.limits;
        let fit = |field: &'static str, value: u64| {
            i64::try_from(value).map_err(|_| PlanError::Limit {
                field,
                value: value.to_string(),
            })
        };
        let nano = l.cpus * 1e9;
        if !(nano.is_finite() && nano >= 1e6 && nano <= i64::MAX as f64) {
            return Err(PlanError::Limit {
                field: "cpus",
                value: l.cpus.to_string(),
            });
        }
        let mut labels = input.labels.clone();
        labels.insert(LABEL_SANDBOX.into(), input.sandbox_id.clone());
        labels.insert(LABEL_KIND.into(), input.role.label().into());
        labels.insert(LABEL_PID.into(), std::process::id().to_string());
        if let Some(ns) = own_pid_namespace() {
            labels.insert(LABEL_PID_NAMESPACE.into(), ns);
        }
        let cmd = match input.role {
            Role::OneShot => input.cmd,
            Role::Persistent => crate::wrapper::keeper_command(),
        };
        Ok(ContainerPlan {
            name: input.name,
            image: image.to_owned(),
            user: format!("{0}:{0}", input.uid),
            cmd,
            env: program_env(),
            labels,
            memory_bytes: fit("memory_mb", l.memory_mb.saturating_mul(1024 * 1024))?,
            // The wrapper's timer (`wrapper::TIMER_PIDS`) on top: the program keeps the
            // profile's count.
            pids_limit: fit(
                "max_pids",
                if under_runsc {
                    l.max_pids.saturating_add(RUNSC_PIDS_ALLOWANCE)
                } else {
                    l.max_pids
                }
                .saturating_add(crate::wrapper::TIMER_PIDS),
            )?,
            process_limit: under_runsc
                .then(|| {
                    fit(
                        "max_pids",
                        l.max_pids.saturating_add(crate::wrapper::TIMER_PIDS),
                    )
                })
                .transpose()?,
            nano_cpus: nano as i64,
            file_size_bytes: fit("max_file_size_bytes", l.max_file_size_bytes)?,
            workspace_mb: l.workspace_mb,
            oci_runtime: input.oci_runtime.map(str::to_owned),
            role: input.role,
            network: input.network_enabled,
            resolv_conf: None,
            ca_bundle: None,
            seccomp_profile: input.seccomp_profile,
            workspace_bind: None,
        })
    }

    /// The uid and gid the tmpfs mounts are owned by.
    fn ids(&self) -> (&str, &str) {
        self.user
            .split_once(':')
            .unwrap_or((&self.user, &self.user))
    }

    /// The Engine API's create body.
    pub fn to_create_body(&self) -> ContainerCreateBody {
        let (uid, gid) = self.ids();
        let tmpfs = |mb: u64, mode: &str| {
            format!("rw,nosuid,nodev,size={mb}m,uid={uid},gid={gid},mode={mode}")
        };
        let one_shot = self.role == Role::OneShot;
        let host_config = HostConfig {
            // No swap: the memory limit is the whole budget.
            memory: Some(self.memory_bytes),
            memory_swap: Some(self.memory_bytes),
            memory_swappiness: Some(0),
            pids_limit: Some(self.pids_limit),
            nano_cpus: Some(self.nano_cpus),
            ulimits: Some(
                std::iter::once(("fsize", self.file_size_bytes))
                    .chain(self.process_limit.map(|n| ("nproc", n)))
                    .map(|(name, n)| ResourcesUlimits {
                        name: Some(name.into()),
                        soft: Some(n),
                        hard: Some(n),
                    })
                    .collect(),
            ),
            network_mode: Some("none".into()),
            // Warden reads the program's output from the attach stream and never from the
            // engine's logs: with a log driver the engine would also write all of it (past
            // the output cap, until the kill lands) to the host's disk.
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            // Warden's seccomp table, given as the profile's JSON (the engine's API takes the
            // content, not a path); the engine's default only without one.
            security_opt: Some(
                std::iter::once("no-new-privileges".to_owned())
                    .chain(self.seccomp_profile.iter().map(|p| format!("seccomp={p}")))
                    .collect(),
            ),
            privileged: Some(false),
            ipc_mode: Some("private".into()),
            tmpfs: Some(
                [
                    (WORKSPACE_DIR, tmpfs(self.workspace_mb, "0700")),
                    ("/tmp", tmpfs(self.workspace_mb, "1777")),
                    (CODE_DIR, tmpfs(CODE_TMPFS_MB, "0700")),
                ]
                .into_iter()
                .filter(|(at, _)| !(*at == WORKSPACE_DIR && self.workspace_bind.is_some()))
                .map(|(at, opts)| (at.to_owned(), opts))
                .collect::<HashMap<_, _>>(),
            ),
            shm_size: Some((SHM_MB * 1024 * 1024) as i64),
            // No volumes and no bind mounts but a networked container's resolv.conf and CA
            // bundle (files Warden writes) and a durable sandbox's own workspace filesystem:
            // nothing else of the host's disk is visible.
            binds: Some(
                self.workspace_bind
                    .iter()
                    .map(|w| format!("{w}:{WORKSPACE_DIR}:rw,rprivate"))
                    .chain(
                        self.resolv_conf
                            .iter()
                            .map(|f| format!("{f}:/etc/resolv.conf:ro")),
                    )
                    .chain(
                        self.ca_bundle
                            .iter()
                            .map(|f| format!("{f}:{}:ro", warden_net::secrets::GATEWAY_CA_BUNDLE)),
                    )
                    .collect(),
            ),
            init: Some(false),
            runtime: self.oci_runtime.clone(),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            user: Some(self.user.clone()),
            cmd: Some(self.cmd.clone()),
            // The image's entrypoint would run before our wrapper; it is cleared.
            entrypoint: Some(vec![]),
            env: Some(self.env.clone()),
            working_dir: Some(WORKSPACE_DIR.into()),
            labels: Some(self.labels.clone().into_iter().collect()),
            hostname: Some("sandbox".into()),
            // Also when networked: Warden attaches its own link; an engine network, even
            // `none` not disabled, costs the engine a network sandbox (+150 ms a container).
            network_disabled: Some(true),
            tty: Some(false),
            attach_stdin: Some(one_shot),
            attach_stdout: Some(one_shot),
            attach_stderr: Some(one_shot),
            open_stdin: Some(one_shot),
            stdin_once: Some(one_shot),
            host_config: Some(host_config),
            ..Default::default()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    /// Limits for the crate's unit tests.
    pub(crate) fn limits() -> Limits {
        Limits {
            timeout: Duration::from_secs(10),
            memory_mb: 128,
            max_pids: 64,
            cpus: 0.5,
            max_output_bytes: 1 << 20,
            max_file_size_bytes: 16 << 20,
            workspace_mb: 64,
            max_artifacts: 32,
            max_artifact_bytes: 16 << 20,
        }
    }

    fn input<'a>(l: &'a Limits, labels: &'a BTreeMap<String, String>) -> PlanInput<'a> {
        PlanInput {
            name: "warden-sb-1".into(),
            sandbox_id: "sb-1".into(),
            image: Some("warden-python:3.11"),
            limits: l,
            network_enabled: false,
            uid: 1_900_000_042,
            oci_runtime: None,
            labels,
            role: Role::Persistent,
            cmd: vec![],
            seccomp_profile: Some("{\"defaultAction\":\"SCMP_ACT_ERRNO\"}".into()),
        }
    }

    /// A sorted JSON view, so the snapshot does not depend on hash-map order.
    fn sorted(body: &ContainerCreateBody) -> serde_json::Value {
        let text = serde_json::to_string(body).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        fn sort(v: serde_json::Value) -> serde_json::Value {
            match v {
                serde_json::Value::Object(m) => serde_json::Value::Object(
                    m.into_iter()
                        .map(|(k, v)| (k, sort(v)))
                        .collect::<std::collections::BTreeMap<_, _>>()
                        .into_iter()
                        .collect(),
                ),
                other => other,
            }
        }
        sort(value)
    }

    #[test]
    fn persistent_container_body() {
        let l = limits();
        let labels = BTreeMap::from([("owner".to_string(), "tests".to_string())]);
        let plan = ContainerPlan::build(input(&l, &labels)).unwrap();
        let mut body = plan.to_create_body();
        let pid = body.labels.as_mut().unwrap().remove(LABEL_PID);
        assert_eq!(pid, Some(std::process::id().to_string()));
        let ns = body.labels.as_mut().unwrap().remove(LABEL_PID_NAMESPACE);
        assert!(ns.is_some_and(|ns| ns.parse::<u64>().is_ok()));
        insta::assert_json_snapshot!(sorted(&body));
    }

    #[test]
    fn one_shot_attaches_stdin_and_uses_the_runtime_asked_for() {
        let l = limits();
        let labels = BTreeMap::new();
        let mut i = input(&l, &labels);
        i.role = Role::OneShot;
        i.cmd = vec!["/bin/sh".into(), "-c".into(), "true".into()];
        i.oci_runtime = Some("runsc");
        let body = ContainerPlan::build(i).unwrap().to_create_body();
        assert_eq!(body.open_stdin, Some(true));
        assert_eq!(body.stdin_once, Some(true));
        assert_eq!(body.cmd.unwrap()[0], "/bin/sh");
        let host = body.host_config.unwrap();
        assert_eq!(host.runtime.as_deref(), Some("runsc"));
        assert_eq!(body.labels.unwrap()[LABEL_KIND], "oneshot");
    }

    #[test]
    fn under_runsc_the_program_is_limited_inside_and_the_runtime_gets_room() {
        let l = limits();
        let labels = BTreeMap::new();
        let ulimits = |runtime: Option<&'static str>| {
            let mut i = input(&l, &labels);
            i.oci_runtime = runtime;
            let host = ContainerPlan::build(i)
                .unwrap()
                .to_create_body()
                .host_config
                .unwrap();
            let named = host
                .ulimits
                .unwrap()
                .into_iter()
                .map(|u| (u.name.unwrap(), u.soft.unwrap(), u.hard.unwrap()))
                .collect::<Vec<_>>();
            (host.pids_limit.unwrap(), named)
        };
        let fsize = ("fsize".to_owned(), 16 << 20, 16 << 20);
        // The wrapper's timer gets its two processes on top of the profile's 64.
        assert_eq!(ulimits(None), (64 + 2, vec![fsize.clone()]));
        assert_eq!(
            ulimits(Some("runsc")),
            (64 + 1024 + 2, vec![fsize, ("nproc".to_owned(), 66, 66)])
        );
    }

    #[test]
    fn a_networked_container_keeps_network_mode_none() {
        let l = limits();
        let labels = BTreeMap::new();
        let mut i = input(&l, &labels);
        i.network_enabled = true;
        let mut plan = ContainerPlan::build(i).unwrap();
        plan.resolv_conf = Some("/run/warden/net/docker/warden-sb-1.resolv.conf".into());
        plan.ca_bundle = Some("/run/warden/net/docker/warden-sb-1.ca-bundle.pem".into());
        let body = plan.to_create_body();
        assert_eq!(body.network_disabled, Some(true));
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.dns, None);
        assert_eq!(
            host.binds,
            Some(vec![
                "/run/warden/net/docker/warden-sb-1.resolv.conf:/etc/resolv.conf:ro".to_string(),
                "/run/warden/net/docker/warden-sb-1.ca-bundle.pem:/etc/warden/ca-bundle.pem:ro"
                    .to_string()
            ])
        );
        let offline = ContainerPlan::build(input(&l, &labels))
            .unwrap()
            .to_create_body();
        assert_eq!(offline.network_disabled, Some(true));
        assert_eq!(offline.host_config.unwrap().binds, Some(vec![]));
    }

    #[test]
    fn a_durable_container_binds_its_workspace_filesystem_instead_of_a_tmpfs() {
        let l = limits();
        let labels = BTreeMap::new();
        let mut plan = ContainerPlan::build(input(&l, &labels)).unwrap();
        plan.workspace_bind = Some("/var/lib/warden/sandboxes/sb-1/workspace".into());
        let host = plan.to_create_body().host_config.unwrap();
        assert_eq!(
            host.binds,
            Some(vec![
                "/var/lib/warden/sandboxes/sb-1/workspace:/workspace:rw,rprivate".to_string()
            ])
        );
        let tmpfs = host.tmpfs.unwrap();
        assert!(!tmpfs.contains_key(WORKSPACE_DIR), "{tmpfs:?}");
        assert!(tmpfs.contains_key("/tmp") && tmpfs.contains_key(CODE_DIR));
        assert_eq!(host.readonly_rootfs, Some(true));
    }

    #[test]
    fn refusals() {
        let l = limits();
        let labels = BTreeMap::new();
        let mut i = input(&l, &labels);
        i.network_enabled = true;
        i.oci_runtime = Some("runsc");
        assert_eq!(
            ContainerPlan::build(i).unwrap_err(),
            PlanError::NetworkUnderRunsc
        );
        let mut i = input(&l, &labels);
        i.image = None;
        assert_eq!(ContainerPlan::build(i).unwrap_err(), PlanError::NoImage);
        let mut i = input(&l, &labels);
        i.uid = 0;
        assert!(matches!(
            ContainerPlan::build(i),
            Err(PlanError::RootUser(_))
        ));
        let mut big = limits();
        big.memory_mb = u64::MAX;
        assert!(matches!(
            ContainerPlan::build(input(&big, &labels)),
            Err(PlanError::Limit {
                field: "memory_mb",
                ..
            })
        ));
    }
}
