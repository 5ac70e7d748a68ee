//! Warden's settings: `settings.toml` → [`Settings`], with profiles, runtimes and the jail's
//! options.
//!
//! The file has the source document's shape, with or without its `default.ai.` prefix, so an
//! existing file works unchanged. Invariants: unknown keys are errors that name the key's full
//! path; every option has a documented default and the default is the restrictive choice;
//! a `Settings` value has passed [`Settings::validate`], so the engine can trust it
//! (the default profile exists, every profile's runtime exists, limits are positive, policy
//! names are known).

pub mod fuzz;

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_policy::PolicySettings;
use warden_types::egress::{Cidr, EgressPolicy};
use warden_types::landlock::LandlockRequirement;
use warden_types::{Language, Limits};

/// The embedded default settings: the source document's `standard` and `data_science` profiles.
pub const DEFAULT_SETTINGS: &str = include_str!("../../../profiles/settings.toml");

/// [`DEFAULT_SETTINGS`] as JSON, converted by `build.rs`.
const DEFAULT_SETTINGS_JSON: &str =
    include_str!(concat!(env!("OUT_DIR"), "/default_settings.json"));

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("read {path:?}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: invalid TOML: {message}")]
    Syntax { origin: String, message: String },
    #[error("{origin}: {key}: {message}")]
    Key {
        origin: String,
        key: String,
        message: String,
    },
}

/// The whole settings file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub sandbox: SandboxSettings,
    #[serde(default)]
    pub server: ServerSettings,
}

/// `[server]`: the daemon's own options.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Executions (and starts of a context's interpreter) running at once, for every front-end
    /// together; read it with [`ServerSettings::max_concurrent`]. Unset: twice the CPUs
    /// ([`default_max_concurrent`], found only when an admission is made: reading settings
    /// does no I/O, the CLI's included). `warden serve --max-concurrent` overrides it.
    pub max_concurrent: Option<usize>,
    /// Executions waiting for a slot; past this, 429 with Retry-After. Default: 64.
    /// `--max-queued` overrides it.
    pub max_queued: usize,
    /// Sandboxes with a lifetime alive at once (warm pools not counted). Default: 64.
    /// `--max-sandboxes` overrides it.
    pub max_sandboxes: usize,
    /// Connections held at once; at the cap the oldest idle one is closed to let a new one
    /// in. Default: 4096.
    pub max_connections: usize,
    /// Seconds a client has to send a request's head (request line and headers); the
    /// connection is closed after that. Default: 10.
    pub request_head_timeout_seconds: f64,
    /// Seconds a client has to send a request's body; 408 after that. Default: 60.
    pub request_body_timeout_seconds: f64,
    /// Bearer API keys. With none, `warden serve` listens only on loopback; with some, every
    /// request but health, metrics and the API description must carry one, and a key sees
    /// only its own sandboxes.
    pub api_keys: Vec<ApiKey>,
    /// A second file of keys, `[[api_keys]]` entries like the ones above (e.g. a mounted
    /// Kubernetes Secret, so that the settings themselves can live in a ConfigMap). Read by
    /// [`Settings::load`]; a missing or bad file is an error, never "no keys".
    pub api_keys_file: Option<PathBuf>,
    /// OpenTelemetry traces over OTLP/HTTP (JSON): one span per execution with its stages.
    /// Off unless an endpoint is set.
    pub otlp: OtlpSettings,
    /// The audit log of every decision that matters (docs/audit.md).
    pub audit: AuditSettings,
    /// Where `warden serve` keeps durable sandboxes (a profile's `durable`): their workspace
    /// images and the database of their records. One daemon at a time per folder (a second is
    /// refused at start). Default: /var/lib/warden. `warden serve --data-dir` overrides it.
    pub data_dir: PathBuf,
    /// The disk each API key's snapshots (of durable sandboxes) may take in all, MiB; a
    /// snapshot past it is refused. Default: 4096.
    pub snapshot_quota_mb: u64,
}

/// Executions at once when the settings do not say: twice the CPUs this process may run on
/// (its affinity and its cgroup's CPU quota, as `std::thread::available_parallelism` reads
/// them). With the network off by default, executions mostly use the CPU (the interpreter's
/// start alone is ≈ 13 ms of it), so more of them at once only share the CPUs finer: each
/// one's wall-clock time, which its timeout counts, stretches, and fewer end per second (on 2
/// cores, 8 at once made 0.64–0.69 of a bare interpreter loop's rate, 4 at once 0.70–0.72:
/// docs/benchmarks.md, session 33). Twice, not once, so that a run's waits (its sandbox's set-up
/// and end, a sleep, stdin) leave no CPU idle. A host whose programs mostly wait (egress)
/// raises it.
/// Found once per process (the CPUs' count reads the cgroup's quota files, ≈ 10 µs).
pub fn default_max_concurrent() -> usize {
    static CPUS_TWICE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS_TWICE.get_or_init(|| 2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl ServerSettings {
    /// Executions at once: the setting, else [`default_max_concurrent`].
    pub fn max_concurrent(&self) -> usize {
        self.max_concurrent.unwrap_or_else(default_max_concurrent)
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            max_concurrent: None,
            max_queued: 64,
            max_sandboxes: 64,
            max_connections: 4096,
            request_head_timeout_seconds: 10.0,
            request_body_timeout_seconds: 60.0,
            api_keys: Vec::new(),
            api_keys_file: None,
            otlp: OtlpSettings::default(),
            audit: AuditSettings::default(),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            snapshot_quota_mb: 4096,
        }
    }
}

/// The default `[server] data_dir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/warden";

/// `[server.audit]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSettings {
    /// Where each event is written as a JSON line: `"stdout"`, or a file's path (appended to,
    /// created with mode 0600). Default: none (events are only kept for `GET /v1/audit`).
    pub log: Option<String>,
    /// The last events kept in memory for `GET /v1/audit`. Default: 10000; 0 keeps none.
    pub retained: usize,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self {
            log: None,
            retained: 10_000,
        }
    }
}

/// `[server.otlp]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSettings {
    /// The collector's traces URL, `http://HOST:PORT/v1/traces`. Default: none (no traces).
    pub endpoint: Option<String>,
    /// `service.name` of the spans. Default: "warden".
    pub service_name: String,
}

impl Default for OtlpSettings {
    fn default() -> Self {
        Self {
            endpoint: None,
            service_name: "warden".into(),
        }
    }
}

/// `[[server.api_keys]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// Who the key belongs to; owns the sandboxes created with it.
    pub name: String,
    /// Lowercase hex SHA-256 of the key (`printf %s "$KEY" | sha256sum`): the file never holds
    /// the key itself.
    pub key_sha256: String,
    /// Live sandboxes this key may have at once. Default: no limit of its own.
    #[serde(default)]
    pub max_sandboxes: Option<usize>,
    /// Executions this key may run at once. Default: no limit of its own.
    #[serde(default)]
    pub max_concurrent: Option<usize>,
    /// Reads every owner's events in `GET /v1/audit` (other keys read only their own).
    /// Default: false.
    #[serde(default)]
    pub admin: bool,
}

/// Which backend provides isolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Native Linux namespaces, cgroups, seccomp and Landlock (the embedded default).
    Jail,
    /// Containers on a Docker Engine.
    Docker,
    /// Pods on an existing Kubernetes cluster.
    Kubernetes,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Jail => "jail",
            BackendKind::Docker => "docker",
            BackendKind::Kubernetes => "kubernetes",
        }
    }
}

/// `[sandbox]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSettings {
    /// Whether the sandbox may run code at all. Default: true.
    pub enabled: bool,
    /// The profile used when a request names none. Default: "standard".
    pub default_profile: String,
    /// Characters of each output section kept in the LLM-facing format. Default: 2000.
    pub max_output_length: usize,
    /// The backend for profiles that don't choose one. Default: "jail".
    pub backend: BackendKind,
    /// Named profiles. Default: `standard` and `data_science`. A file that defines profiles
    /// replaces the built-in ones (it must define its `default_profile`).
    pub profiles: BTreeMap<String, Profile>,
    /// Languages and how they run. The built-in ones (python, javascript, bash) are always
    /// present; a file's entries add languages or replace a built-in one by name.
    pub runtimes: BTreeMap<String, Runtime>,
    /// Options of the native jail backend.
    pub jail: JailOptions,
    /// Options of the Kubernetes backend.
    pub kubernetes: KubernetesOptions,
    /// Options of the docker backend.
    pub docker: DockerOptions,
    /// `[sandbox.secrets.NAME]`: secrets the egress gateway brokers for profiles that list
    /// them in `egress.secrets` (values from the daemon's environment or a file, never from
    /// this file). Default: none.
    pub secrets: BTreeMap<String, warden_types::egress::SecretSetting>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            default_profile: "standard".into(),
            max_output_length: 2000,
            backend: BackendKind::Jail,
            profiles: BTreeMap::new(),
            runtimes: BTreeMap::new(),
            jail: JailOptions::default(),
            kubernetes: KubernetesOptions::default(),
            docker: DockerOptions::default(),
            secrets: BTreeMap::new(),
        }
    }
}

/// `[sandbox.profiles.NAME]`: limits and policies.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Profile {
    /// Wall-clock limit of one execution, seconds. Default: 30.
    pub timeout_seconds: f64,
    /// Memory of the whole sandbox, MiB. Default: 128.
    pub max_memory_mb: u64,
    /// Processes and threads at once. Default: 64.
    pub max_pids: u64,
    /// CPU quota in cores. Default: 1.0.
    pub cpus: f64,
    /// Bytes of stdout and of stderr kept, each; past it the run is stopped. Default: 1 MiB.
    pub max_output_bytes: u64,
    /// Largest file the program may write, MiB. Default: 16.
    pub max_file_size_mb: u64,
    /// Workspace tmpfs size (working directory and /tmp), MiB. Default: 64.
    pub workspace_mb: u64,
    /// Artifacts returned at most. Default: 32.
    pub max_artifacts: u32,
    /// Total artifact bytes returned at most, MiB. Default: 16.
    pub max_artifact_mb: u64,
    /// Network access. Default: false. `true` is refused by backends that cannot provide a
    /// controlled network; a profile asking for it is never run without it.
    pub network_enabled: bool,
    /// Read-only root filesystem. Default: true; false is rejected (the root is always
    /// read-only, the workspace and /tmp are the writable places).
    pub read_only: bool,
    /// Refuse dynamic imports the policy cannot resolve. Default: true.
    pub strict_mode: bool,
    /// Policies run before execution, by name. Default: ["resource_quota"].
    pub enabled_policies: Vec<String>,
    /// With `forbidden_imports` enabled, the interpreter itself also refuses imports outside
    /// the allow-list while the program runs (Warden's import guard, installed by the Python
    /// runtime's start-up before user code: see `warden_engine::import_guard`), which catches
    /// what the static check cannot see (names built at run time, decoded code). Default:
    /// true; false keeps the check before the run only. Python runtimes only.
    pub runtime_import_check: bool,
    /// The profile's runtime: its default language and, optionally, the command and image.
    pub runtime: ProfileRuntime,
    /// Settings of each policy.
    pub policies: PolicySettings,
    /// This profile's backend. Default: `[sandbox].backend`.
    pub backend: Option<BackendKind>,
    /// A sandbox with a lifetime is destroyed after this long without use, seconds.
    /// Default: 600. A request may ask for less, never more.
    pub idle_ttl_seconds: u64,
    /// A sandbox with a lifetime is destroyed this long after its creation, seconds.
    /// Default: 3600. A request may ask for less, never more.
    pub max_lifetime_seconds: u64,
    /// What happens to a sandbox at the end of its idle TTL: `destroy` (the default) or
    /// `pause` (its processes frozen, its files and contexts kept until its lifetime ends; the
    /// next use resumes it).
    pub on_idle: OnIdle,
    /// What a networked sandbox may reach (`network_enabled = true` only). Default: the public
    /// internet, never the host, loopback, private, shared or link-local ranges.
    pub egress: EgressPolicy,
    /// The OCI runtime the docker backend must use for this profile, e.g. "runsc" (gVisor).
    /// Default: none (the engine's default runtime). A profile that names one is refused when
    /// the engine does not have it, never run under another; the jail backend refuses it.
    pub container_runtime: Option<String>,
    /// Sandboxes of this profile kept ready by `warden serve`, each with its default Python
    /// context already started (and `preload_modules` imported), so that create and the first
    /// cell pay no start-up. Default: 0 (no pool). Each pooled sandbox holds an idle
    /// interpreter; at most 32. Needs a Python runtime and `network_enabled = false`, and a
    /// backend with contexts (the jail; on another the daemon disables the pool at start).
    pub pool_size: u32,
    /// One-shot sandboxes of this profile kept ready by `warden serve` (`POST /v1/execute` and
    /// the other one-shot routes), each with its interpreter started and waiting for its code:
    /// a run then pays neither the sandbox's nor the interpreter's start-up. Every one-shot
    /// still gets a fresh sandbox, used once and destroyed after, built as a cold one.
    /// Default: 0 (none); at most 32, for each of `oneshot_pool_languages`. Needs
    /// `network_enabled = false`; a request whose run would be built differently (another
    /// language, other limits, arguments) runs cold.
    pub oneshot_pool_size: u32,
    /// The languages (names or aliases) whose one-shots are held, each in a pool of its own of
    /// `oneshot_pool_size` sandboxes: `python` (a Python runtime under the run-time import
    /// guard: `forbidden_imports` with `runtime_import_check`) and `javascript` (a runtime
    /// whose command is node), the only ones whose interpreter can wait for its code (see
    /// [`ONESHOT_POOL_LANGUAGES`]). A language whose runs the backend cannot hold (e.g.
    /// Python without the guard) gets no pool, said once in a log line. Default: both.
    pub oneshot_pool_languages: Vec<String>,
    /// Modules imported into a sandbox's default context when its interpreter starts (before
    /// the first cell, so a pooled sandbox has paid for them before the request arrives). They
    /// go into `sys.modules` only, not into the user's globals: a cell still writes
    /// `import pandas as pd`, which then costs a dictionary lookup. Default: none. Dotted
    /// module names; allowed by the profile's `forbidden_imports` list when that policy is on.
    pub preload_modules: Vec<String>,
    /// What the profile requires of Landlock (the jail backend's containment step):
    /// `"available"` (every part this kernel offers, at least the filesystem rules), `"all"`
    /// (every part Warden uses: a kernel below Landlock ABI 6 refuses the profile) or a list
    /// of parts with `"filesystem"` among them (`filesystem`, `truncate`, `tcp`,
    /// `device_ioctl`, `scope`). A kernel that cannot enforce a required part refuses the
    /// profile, with the reason, before anything runs; parts not required are still enforced
    /// where the kernel offers them. Default: "available". Other backends do not use Landlock:
    /// a profile of theirs may not set it.
    pub landlock: LandlockRequirement,
    /// Whether a sandbox with a lifetime of this profile outlives the daemon (`warden serve`):
    /// its workspace kept on disk under `[server] data_dir` (a preallocated, loop-mounted
    /// ext4 image of `workspace_mb`) and its record in the daemon's database, so that a
    /// restart (after a crash or an upgrade) finds it again with its files; its contexts come
    /// back restarted. The docker backend binds the same image into the sandbox's container
    /// and makes the container again after a restart. One-shot runs are never durable.
    /// Default: true where the profile can be — the jail or docker backend and no pool (on
    /// docker, only where its engine shares the daemon's mount namespace, which the backend
    /// finds out: elsewhere the default is false and `true` is refused at create), false
    /// otherwise; `true` on the kubernetes backend, or with a `pool_size`, is refused. See
    /// [`Settings::durable`].
    pub durable: Option<bool>,
}

/// A profile's `on_idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnIdle {
    Destroy,
    Pause,
}

/// The most sandboxes a profile's pool may hold.
pub const MAX_POOL_SIZE: u32 = 32;

/// The languages whose one-shots can be held (`oneshot_pool_languages`): their interpreters
/// know how to wait for their code (Python under the import guard, node through a preload).
pub const ONESHOT_POOL_LANGUAGES: [&str; 2] = ["python", "javascript"];

impl Default for Profile {
    fn default() -> Self {
        Self {
            timeout_seconds: 30.0,
            max_memory_mb: 128,
            max_pids: 64,
            cpus: 1.0,
            max_output_bytes: 1024 * 1024,
            max_file_size_mb: 16,
            workspace_mb: 64,
            max_artifacts: 32,
            max_artifact_mb: 16,
            network_enabled: false,
            read_only: true,
            strict_mode: true,
            enabled_policies: vec!["resource_quota".into()],
            runtime_import_check: true,
            runtime: ProfileRuntime::default(),
            policies: PolicySettings::default(),
            backend: None,
            idle_ttl_seconds: 600,
            max_lifetime_seconds: 3600,
            on_idle: OnIdle::Destroy,
            egress: EgressPolicy::default(),
            container_runtime: None,
            pool_size: 0,
            oneshot_pool_size: 0,
            oneshot_pool_languages: ONESHOT_POOL_LANGUAGES.map(String::from).to_vec(),
            preload_modules: Vec::new(),
            landlock: LandlockRequirement::Available,
            durable: None,
        }
    }
}

/// The largest size in MiB whose bytes fit in a `u64` (sizes the backends take in bytes).
const MAX_MIB: u64 = u64::MAX / MIB;
const MIB: u64 = 1024 * 1024;

impl Profile {
    /// The profile's limits as the backends take them.
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_secs_f64(self.timeout_seconds),
            memory_mb: self.max_memory_mb,
            max_pids: self.max_pids,
            cpus: self.cpus,
            max_output_bytes: self.max_output_bytes,
            max_file_size_bytes: self.max_file_size_mb * MIB,
            workspace_mb: self.workspace_mb,
            max_artifacts: self.max_artifacts,
            max_artifact_bytes: self.max_artifact_mb * MIB,
        }
    }
}

/// `[sandbox.profiles.NAME.runtime]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileRuntime {
    /// The language used when a request names none. Default: "python".
    pub language: String,
    /// The docker backend's image for this profile's language. Default: the runtime's.
    pub image: Option<String>,
    /// The command for this profile's language (the code file is appended). Default: the
    /// runtime's.
    pub command: Option<Vec<String>>,
}

impl Default for ProfileRuntime {
    fn default() -> Self {
        Self {
            language: "python".into(),
            image: None,
            command: None,
        }
    }
}

/// `[sandbox.runtimes.LANGUAGE]`: how a language runs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    /// The interpreter and its arguments; the code file's path is appended.
    pub command: Vec<String>,
    /// The name of the code file inside the sandbox, e.g. "main.py".
    pub file_name: String,
    /// Other names for the language, e.g. ["py"].
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The docker backend's image. Default: none (the docker backend requires one).
    #[serde(default)]
    pub image: Option<String>,
}

/// The default range of sandboxes' host uids (jail and docker): see [`JailOptions::uid_base`].
pub const DEFAULT_UID_BASE: u32 = 1_900_000_000;
pub const DEFAULT_UID_COUNT: u32 = 65_536;

/// `[sandbox.jail]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JailOptions {
    /// Host paths bound read-only into every sandbox's root; missing ones are skipped.
    /// /root, /home, /var, /proc, /sys, /run, /boot and / itself are refused.
    /// Default: /usr, /bin, /sbin, /lib, /lib64 and the few /etc files interpreters read.
    pub host_paths: Vec<PathBuf>,
    /// The uid and gid the program has inside the sandbox. Default: 1000.
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    /// Each live sandbox (one-shot, persistent, pooled, a context's) maps its user to a host
    /// uid (and the gid of the same number) of its own from `[uid_base, uid_base + uid_count)`,
    /// leased across every Warden process on the host: the kernel counts inotify instances,
    /// pipe buffers, processes, pending signals and more per user, so a shared uid would let
    /// one sandbox starve the others. The range must belong to no real user. Default:
    /// 1900000000 and 65536 (above systemd's container ranges, below 2^31).
    pub uid_base: u32,
    pub uid_count: u32,
    /// Mount a controller-less cgroup v1 hierarchy with the kernel's `favordynmods` option
    /// (once per boot, as root) so that moving a sandbox into its cgroup does not wait for an
    /// RCU grace period (~10 ms). Costs the host slightly slower fork/exit. Default: true.
    pub fast_cgroup_attach: bool,
    /// Host side of networked sandboxes (`network_enabled = true`).
    pub network: JailNetwork,
}

/// `[sandbox.jail.network]`: how networked jail sandboxes are wired to the host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JailNetwork {
    /// IPv4 range cut into one /30 per networked sandbox (host end, sandbox end). Must not
    /// overlap a network the host routes to. Default: 10.213.0.0/16 (16384 sandboxes).
    pub pool: Cidr,
    /// IPv6 range cut into one /126 per networked sandbox (the same slot index as its /30):
    /// at least as many /126s as `pool` has /30s. Must not overlap a network the host routes
    /// to. Default: fd57:6172:6465:6e::/64 (unique-local, blocked for every sandbox).
    pub pool6: Cidr,
    /// The resolver Warden's per-sandbox DNS server asks. Default: the first `nameserver` of
    /// the host's /etc/resolv.conf.
    pub upstream_dns: Option<std::net::SocketAddr>,
    /// CA certificates (PEM) the egress gateway trusts, besides the host's, when it sends a
    /// brokered secret on to its host (a private API's CA). Default: none.
    pub upstream_ca_file: Option<std::path::PathBuf>,
}

impl Default for JailNetwork {
    fn default() -> Self {
        Self {
            pool: "10.213.0.0/16".parse().expect("a valid CIDR"),
            pool6: "fd57:6172:6465:6e::/64".parse().expect("a valid CIDR"),
            upstream_dns: None,
            upstream_ca_file: None,
        }
    }
}

impl Default for JailOptions {
    fn default() -> Self {
        Self {
            host_paths: [
                "/usr",
                "/bin",
                "/sbin",
                "/lib",
                "/lib64",
                "/lib32",
                "/libx32",
                "/etc/alternatives",
                "/etc/ld.so.cache",
                "/etc/ld.so.conf",
                "/etc/ld.so.conf.d",
                "/etc/localtime",
                "/etc/nsswitch.conf",
                "/etc/mime.types",
                "/etc/python3",
                "/etc/python3.11",
                "/etc/matplotlibrc",
                "/etc/fonts",
                "/etc/ssl/certs",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            sandbox_uid: 1000,
            sandbox_gid: 1000,
            uid_base: DEFAULT_UID_BASE,
            uid_count: DEFAULT_UID_COUNT,
            fast_cgroup_attach: true,
            network: JailNetwork::default(),
        }
    }
}

/// `[sandbox.kubernetes]`: where and how sandbox pods run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesOptions {
    /// The namespace of sandbox pods and their NetworkPolicies. Default: "warden-sandboxes".
    pub namespace: String,
    /// A kubeconfig file. Default: none, which means the in-cluster service account when
    /// running in a pod, else `$KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context. Default: its current context.
    pub context: Option<String>,
    /// The value of the `warden.dev/instance` label on this Warden's pods: at start-up, labelled
    /// pods of this instance that no live sandbox owns are deleted. Two Wardens sharing a
    /// namespace need different values. Default: "warden".
    pub instance: String,
    /// The RuntimeClass of every sandbox pod (e.g. "gvisor", "kata"). Default: none (the
    /// cluster's default runtime).
    pub runtime_class: Option<String>,
    /// A RuntimeClass per profile, overriding `runtime_class`: `{ standard = "gvisor" }`.
    /// Default: empty.
    pub runtime_classes: BTreeMap<String, String>,
    /// How long a new pod may take to be ready (scheduling and image pull), seconds.
    /// Default: 120.
    pub pod_ready_timeout_seconds: f64,
    /// The pods' imagePullPolicy: "IfNotPresent", "Always" or "Never". Default: "IfNotPresent".
    pub image_pull_policy: String,
    /// Sandbox pods run as a uid (and gid) picked per sandbox from
    /// `[uid_base, uid_base + uid_count)`: the process limit (RLIMIT_NPROC) counts per uid on a
    /// node, so a uid of its own makes it a per-sandbox limit. Default: 200000 and 65536.
    pub uid_base: u32,
    pub uid_count: u32,
    /// The keep-alive process of a sandbox pod: its pid 1, beside which code is exec'd. It
    /// must reap orphans (a double-forked process killed at the end of a run is re-parented
    /// to it; unreaped, it would stay a zombie counting against the process limit), which
    /// `sleep infinity` does not do and a shell waiting in a loop does.
    /// Default: ["sh", "-c", "while :; do sleep 3600 & wait $!; done"].
    pub keepalive_command: Vec<String>,
    /// Create the deny-all NetworkPolicy at start-up when missing (else only verify it and
    /// refuse to run without it). Default: true.
    pub manage_network_policy: bool,
    /// Destinations a sandbox with `network_enabled` may still never reach: cluster-internal
    /// ranges and link-local (169.254.169.254, the cloud metadata service). Default: the
    /// private, shared, loopback and link-local IPv4 and IPv6 ranges.
    pub egress_blocked_cidrs: Vec<String>,
}

impl Default for KubernetesOptions {
    fn default() -> Self {
        Self {
            namespace: "warden-sandboxes".into(),
            kubeconfig: None,
            context: None,
            instance: "warden".into(),
            runtime_class: None,
            runtime_classes: BTreeMap::new(),
            pod_ready_timeout_seconds: 120.0,
            image_pull_policy: "IfNotPresent".into(),
            uid_base: 200_000,
            uid_count: 65_536,
            keepalive_command: ["sh", "-c", "while :; do sleep 3600 & wait $!; done"]
                .map(String::from)
                .to_vec(),
            manage_network_policy: true,
            egress_blocked_cidrs: [
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "100.64.0.0/10",
                "127.0.0.0/8",
                "169.254.0.0/16",
                "fc00::/7",
                "fe80::/10",
                "::1/128",
            ]
            .iter()
            .map(|c| c.to_string())
            .collect(),
        }
    }
}

/// `[sandbox.docker]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerOptions {
    /// The engine's socket. Default: "unix:///var/run/docker.sock".
    pub host: String,
    /// Deadline of each call to the engine, seconds. Default: 30.
    pub call_timeout_seconds: f64,
    /// Each container runs as a uid (and the gid of the same number) of its own from
    /// `[uid_base, uid_base + uid_count)`, leased as the jail's are (the same lock files: a
    /// range shared with the jail never gives a container a jail sandbox's uid). Default: the
    /// jail's default range.
    pub uid_base: u32,
    pub uid_count: u32,
}

impl Default for DockerOptions {
    fn default() -> Self {
        Self {
            host: "unix:///var/run/docker.sock".into(),
            call_timeout_seconds: 30.0,
            uid_base: DEFAULT_UID_BASE,
            uid_count: DEFAULT_UID_COUNT,
        }
    }
}

impl KubernetesOptions {
    /// The RuntimeClass a profile's pods use.
    pub fn runtime_class_for(&self, profile: &str) -> Option<&str> {
        self.runtime_classes
            .get(profile)
            .or(self.runtime_class.as_ref())
            .map(String::as_str)
    }

    /// Checks values serde cannot; returns the key (below `sandbox.kubernetes.`) and why.
    fn validate(&self, profiles: &BTreeMap<String, Profile>) -> Result<(), (String, String)> {
        let bad = |key: &str, why: String| Err((format!("sandbox.kubernetes.{key}"), why));
        if !is_dns_label(&self.namespace) {
            return bad(
                "namespace",
                "must be a DNS label: 1-63 of a-z, 0-9, '-', starting and ending alphanumeric"
                    .into(),
            );
        }
        if !is_dns_label(&self.instance) {
            return bad(
                "instance",
                format!(
                    "{:?} is not a valid label value (a DNS label)",
                    self.instance
                ),
            );
        }
        if let Some(class) = &self.runtime_class
            && !is_dns_subdomain(class)
        {
            return bad("runtime_class", format!("{class:?} is not a valid name"));
        }
        for (profile, class) in &self.runtime_classes {
            if !profiles.contains_key(profile) {
                return bad(
                    &format!("runtime_classes.{profile}"),
                    format!(
                        "no profile {profile:?} (defined: {})",
                        profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                );
            }
            if !is_dns_subdomain(class) {
                return bad(
                    &format!("runtime_classes.{profile}"),
                    format!("{class:?} is not a valid name"),
                );
            }
        }
        if !(self.pod_ready_timeout_seconds.is_finite()
            && self.pod_ready_timeout_seconds > 0.0
            && self.pod_ready_timeout_seconds <= 3600.0)
        {
            return bad(
                "pod_ready_timeout_seconds",
                "must be a number of seconds in (0, 3600]".into(),
            );
        }
        if !["IfNotPresent", "Always", "Never"].contains(&self.image_pull_policy.as_str()) {
            return bad(
                "image_pull_policy",
                format!(
                    "{:?}: expected \"IfNotPresent\", \"Always\" or \"Never\"",
                    self.image_pull_policy
                ),
            );
        }
        validate_uid_range("sandbox.kubernetes", self.uid_base, self.uid_count)?;
        if self.keepalive_command.is_empty() || self.keepalive_command[0].is_empty() {
            return bad("keepalive_command", "must name a program".into());
        }
        for cidr in &self.egress_blocked_cidrs {
            if !is_cidr(cidr) {
                return bad(
                    "egress_blocked_cidrs",
                    format!("{cidr:?} is not an IPv4 or IPv6 CIDR (address/prefix)"),
                );
            }
        }
        Ok(())
    }
}

/// A range of sandboxes' host uids: never root, within the uids every tool handles (below
/// 2^31). Returns the key (`section.uid_base` or `.uid_count`) and why.
fn validate_uid_range(section: &str, base: u32, count: u32) -> Result<(), (String, String)> {
    if base == 0 {
        return Err((
            format!("{section}.uid_base"),
            "must not be 0: sandboxes never run as root".into(),
        ));
    }
    if count == 0 || u64::from(base) + u64::from(count) > 1 << 31 {
        return Err((
            format!("{section}.uid_count"),
            "must be at least 1, with uid_base + uid_count at most 2^31".into(),
        ));
    }
    Ok(())
}

/// RFC 1123 label: what Kubernetes accepts as a namespace name.
fn is_dns_label(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    (1..=63).contains(&s.len())
        && s.chars().all(ok_char)
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what Kubernetes accepts as a RuntimeClass name.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_cidr(s: &str) -> bool {
    let Some((addr, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => prefix <= 32,
        Ok(std::net::IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

fn builtin_runtimes() -> BTreeMap<String, Runtime> {
    let rt = |cmd: &str, file: &str, aliases: &[&str], image: &str| Runtime {
        command: vec![cmd.into()],
        file_name: file.into(),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        image: Some(image.into()),
    };
    BTreeMap::from([
        (
            "python".into(),
            rt(
                "python3",
                "main.py",
                &["py", "python3"],
                "warden-python:3.11",
            ),
        ),
        (
            "javascript".into(),
            rt(
                "node",
                "main.js",
                &["js", "node", "nodejs"],
                "warden-node:20",
            ),
        ),
        (
            "bash".into(),
            rt("bash", "main.sh", &["sh", "shell"], "warden-python:3.11"),
        ),
    ])
}

impl Settings {
    /// The embedded defaults, from the JSON form the build made of them (`build.rs`): every
    /// `warden run` without `--config` pays this, and JSON deserializes several times faster
    /// than TOML parses with the key-path tracking [`Settings::from_toml`] needs for its
    /// errors. A test checks both give the same.
    pub fn builtin() -> Settings {
        Settings::embedded()
            .completed()
            .expect("the embedded settings are valid")
    }

    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut settings = Settings::from_toml(&text, &path.display().to_string())?;
        settings.load_api_keys_file()?;
        Ok(settings)
    }

    /// Appends the keys of `[server].api_keys_file`, if set, and checks them.
    pub fn load_api_keys_file(&mut self) -> Result<(), ConfigError> {
        let Some(path) = self.server.api_keys_file.clone() else {
            return Ok(());
        };
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct KeysFile {
            #[serde(default)]
            api_keys: Vec<ApiKey>,
        }
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let value: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Syntax {
            origin: origin.clone(),
            message: e.message().to_owned(),
        })?;
        let file: KeysFile =
            serde_path_to_error::deserialize(toml::Value::Table(value)).map_err(|e| {
                ConfigError::Key {
                    origin: origin.clone(),
                    key: e.path().to_string(),
                    message: e.into_inner().message().to_owned(),
                }
            })?;
        self.server.api_keys.extend(file.api_keys);
        self.validate().map_err(|(key, message)| ConfigError::Key {
            origin,
            key,
            message,
        })
    }

    /// Parses and validates; `origin` names the file in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Settings, ConfigError> {
        let mut value: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            origin: origin.into(),
            message: e.message().to_owned(),
        })?;
        // The source document nests everything under `default.ai.`; accept both shapes.
        let mut prefix = "";
        if let Some(toml::Value::Table(default)) = value.get("default")
            && value.len() == 1
            && default.len() == 1
            && let Some(toml::Value::Table(ai)) = default.get("ai")
        {
            value = ai.clone();
            prefix = "default.ai.";
        }
        let key_error = |key: String, message: String| ConfigError::Key {
            origin: origin.into(),
            key: format!("{prefix}{key}"),
            message,
        };
        let settings: Settings = serde_path_to_error::deserialize(toml::Value::Table(value))
            .map_err(|e| {
                let path = e.path().to_string();
                key_error(path, e.into_inner().message().to_owned())
            })?;
        settings
            .completed()
            .map_err(|(key, message)| key_error(key, message))
    }

    /// What follows parsing: the built-in profiles if the file has none, the built-in
    /// runtimes under the file's own, then validation.
    fn completed(mut self) -> Result<Settings, (String, String)> {
        if self.sandbox.profiles.is_empty() {
            self.sandbox.profiles = Settings::builtin_profiles();
        }
        let mut runtimes = builtin_runtimes();
        runtimes.append(&mut self.sandbox.runtimes);
        self.sandbox.runtimes = runtimes;
        self.validate()?;
        Ok(self)
    }

    /// The embedded defaults as deserialized, before [`Settings::completed`].
    fn embedded() -> Settings {
        serde_json::from_str(DEFAULT_SETTINGS_JSON).expect("the embedded settings parse")
    }

    fn builtin_profiles() -> BTreeMap<String, Profile> {
        Settings::embedded().sandbox.profiles
    }

    /// Checks what serde cannot: references between sections and value ranges. Returns the
    /// offending key's path and why.
    pub fn validate(&self) -> Result<(), (String, String)> {
        for (key, value) in [
            ("server.max_concurrent", self.server.max_concurrent),
            ("server.max_sandboxes", Some(self.server.max_sandboxes)),
            ("server.max_connections", Some(self.server.max_connections)),
        ] {
            if value == Some(0) {
                return Err((key.into(), "must be at least 1".into()));
            }
        }
        if !self.server.data_dir.is_absolute() {
            return Err((
                "server.data_dir".into(),
                "must be an absolute path (e.g. /var/lib/warden)".into(),
            ));
        }
        for (key, value) in [
            (
                "server.request_head_timeout_seconds",
                self.server.request_head_timeout_seconds,
            ),
            (
                "server.request_body_timeout_seconds",
                self.server.request_body_timeout_seconds,
            ),
        ] {
            if !(value.is_finite() && (0.1..=3600.0).contains(&value)) {
                return Err((
                    key.into(),
                    "must be a number of seconds in [0.1, 3600]".into(),
                ));
            }
        }
        if let Some(endpoint) = &self.server.otlp.endpoint
            && !endpoint
                .strip_prefix("http://")
                .is_some_and(|rest| rest.contains('/') && !rest.starts_with('/'))
        {
            return Err((
                "server.otlp.endpoint".into(),
                "must be http://HOST:PORT/PATH (a local collector; https is not supported)".into(),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, key) in self.server.api_keys.iter().enumerate() {
            let at = |field: &str| format!("server.api_keys[{i}].{field}");
            if key.name.is_empty() || !names.insert(key.name.as_str()) {
                return Err((at("name"), "must be non-empty and unique".into()));
            }
            if key.key_sha256.len() != 64
                || !key
                    .key_sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err((
                    at("key_sha256"),
                    "must be 64 lowercase hex digits (the SHA-256 of the key)".into(),
                ));
            }
            if key.max_sandboxes == Some(0) || key.max_concurrent == Some(0) {
                return Err((
                    at(if key.max_sandboxes == Some(0) {
                        "max_sandboxes"
                    } else {
                        "max_concurrent"
                    }),
                    "must be at least 1".into(),
                ));
            }
        }
        let s = &self.sandbox;
        if !s.profiles.contains_key(&s.default_profile) {
            return Err((
                "sandbox.default_profile".into(),
                format!(
                    "profile {:?} is not defined (defined: {})",
                    s.default_profile,
                    s.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let pool = s.jail.network.pool;
        if !pool.is_ipv4() || !(8..=30).contains(&pool.prefix()) {
            return Err((
                "sandbox.jail.network.pool".into(),
                "must be an IPv4 range from /8 to /30".into(),
            ));
        }
        let pool6 = s.jail.network.pool6;
        if pool6.is_ipv4() || pool6.prefix() > 126 || 126 - pool6.prefix() < 30 - pool.prefix() {
            return Err((
                "sandbox.jail.network.pool6".into(),
                format!(
                    "must be an IPv6 range with a /126 for each of the pool's /30s (/{} or larger)",
                    126 - (30 - pool.prefix())
                ),
            ));
        }
        let d = &s.docker;
        if !(d.call_timeout_seconds.is_finite()
            && d.call_timeout_seconds > 0.0
            && d.call_timeout_seconds <= 3600.0)
        {
            return Err((
                "sandbox.docker.call_timeout_seconds".into(),
                "must be a number of seconds in (0, 3600]".into(),
            ));
        }
        if !(d.host.starts_with("unix:///") || d.host.starts_with('/')) {
            return Err((
                "sandbox.docker.host".into(),
                "must be a unix socket (unix:///path or /path); TCP engines are not supported yet"
                    .into(),
            ));
        }
        validate_uid_range("sandbox.docker", d.uid_base, d.uid_count)?;
        validate_uid_range("sandbox.jail", s.jail.uid_base, s.jail.uid_count)?;
        for (name, secret) in &s.secrets {
            let key = format!("sandbox.secrets.{name}");
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err((key, "a secret's name is letters, digits and '_'".into()));
            }
            secret.check().map_err(|why| (key, why))?;
        }
        for (lang, rt) in &s.runtimes {
            let key = format!("sandbox.runtimes.{lang}");
            Language::new(lang).map_err(|e| (key.clone(), e.to_string()))?;
            if rt.command.is_empty() || rt.command[0].is_empty() {
                return Err((format!("{key}.command"), "must name a program".into()));
            }
            if rt.file_name.is_empty() || rt.file_name.contains('/') {
                return Err((
                    format!("{key}.file_name"),
                    "must be a plain file name".into(),
                ));
            }
        }
        for (name, p) in &s.profiles {
            let key = |field: &str| format!("sandbox.profiles.{name}.{field}");
            // At least a millisecond: a smaller positive number would become a zero timeout.
            if !(0.001..=86_400.0).contains(&p.timeout_seconds) {
                return Err((
                    key("timeout_seconds"),
                    "must be a number of seconds in [0.001, 86400]".into(),
                ));
            }
            // Sizes in MiB become bytes for the backends: they must fit.
            for (field, value) in [
                ("max_file_size_mb", p.max_file_size_mb),
                ("max_artifact_mb", p.max_artifact_mb),
            ] {
                if value > MAX_MIB {
                    return Err((key(field), format!("must be at most {MAX_MIB}")));
                }
            }
            for (field, value) in [
                ("max_memory_mb", p.max_memory_mb),
                ("max_pids", p.max_pids),
                ("max_output_bytes", p.max_output_bytes),
                ("max_file_size_mb", p.max_file_size_mb),
                ("workspace_mb", p.workspace_mb),
                ("idle_ttl_seconds", p.idle_ttl_seconds),
                ("max_lifetime_seconds", p.max_lifetime_seconds),
            ] {
                if value == 0 {
                    return Err((key(field), "must be at least 1".into()));
                }
            }
            if !(p.cpus.is_finite() && p.cpus > 0.0) {
                return Err((key("cpus"), "must be a positive number of cores".into()));
            }
            if !p.read_only {
                return Err((
                    key("read_only"),
                    "false is not supported: the root filesystem is always read-only (write to the workspace or /tmp)".into(),
                ));
            }
            for policy in &p.enabled_policies {
                if !warden_policy::known_policies().contains(&policy.as_str()) {
                    return Err((
                        key("enabled_policies"),
                        format!(
                            "unknown policy {policy:?} (known: {})",
                            warden_policy::known_policies().join(", ")
                        ),
                    ));
                }
            }
            if self.runtime(&p.runtime.language).is_none() {
                return Err((
                    key("runtime.language"),
                    format!(
                        "no runtime for language {:?} (known: {})",
                        p.runtime.language,
                        s.runtimes.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if !p.network_enabled && p.egress != EgressPolicy::default() {
                return Err((
                    key("egress"),
                    "egress rules apply only to a networked profile: set network_enabled = true"
                        .into(),
                ));
            }
            for name in &p.egress.secrets {
                if !s.secrets.contains_key(name) {
                    return Err((
                        key("egress.secrets"),
                        format!("no secret {name:?} in [sandbox.secrets]"),
                    ));
                }
            }
            if !p.egress.secrets.is_empty() && p.egress.gateway.is_none() {
                return Err((
                    key("egress.secrets"),
                    "needs egress.gateway: only the gateway can put a secret into a request".into(),
                ));
            }
            if let Some(cmd) = &p.runtime.command
                && (cmd.is_empty() || cmd[0].is_empty())
            {
                return Err((key("runtime.command"), "must name a program".into()));
            }
            if let Some(rt) = &p.container_runtime {
                let ok = !rt.is_empty()
                    && rt.len() <= 64
                    && rt
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
                if !ok {
                    return Err((
                        key("container_runtime"),
                        "must be an OCI runtime's name such as \"runsc\" or \"runc\"".into(),
                    ));
                }
            }
            if p.landlock != LandlockRequirement::Available
                && self.backend_of(p) != BackendKind::Jail
            {
                return Err((
                    key("landlock"),
                    format!(
                        "Landlock is the jail backend's; the {} backend does not use it, so it cannot enforce landlock = {}",
                        self.backend_of(p).as_str(),
                        p.landlock
                    ),
                ));
            }
            if p.on_idle == OnIdle::Pause && self.backend_of(p) == BackendKind::Kubernetes {
                return Err((
                    key("on_idle"),
                    "the kubernetes backend cannot pause a sandbox (no call freezes a pod's processes); use \"destroy\"".into(),
                ));
            }
            if p.durable == Some(true) {
                let backend = self.backend_of(p);
                if backend == BackendKind::Kubernetes {
                    return Err((
                        key("durable"),
                        format!(
                            "the {} backend cannot keep a sandbox's workspace across a restart of the daemon (only the jail and docker backends can); set durable = false",
                            backend.as_str()
                        ),
                    ));
                }
                if p.pool_size > 0 {
                    return Err((
                        key("durable"),
                        "a pooled sandbox's workspace is built ahead of time in memory, so a profile with a pool_size cannot be durable; set durable = false or pool_size = 0".into(),
                    ));
                }
            }
            validate_pool(p, &self.runtime(&p.runtime.language), &key)?;
            for name in &p.oneshot_pool_languages {
                let language = self.runtime(name).map(|(language, _)| language);
                if !language
                    .as_ref()
                    .is_some_and(|l| ONESHOT_POOL_LANGUAGES.contains(&l.as_str()))
                {
                    return Err((
                        key("oneshot_pool_languages"),
                        format!(
                            "{name:?}: one-shot pools hold the interpreters that can wait for their code: {}",
                            ONESHOT_POOL_LANGUAGES.join(", ")
                        ),
                    ));
                }
            }
        }
        s.kubernetes.validate(&s.profiles)?;
        Ok(())
    }

    /// The runtime for a language name or alias: (canonical language, runtime).
    pub fn runtime(&self, name: &str) -> Option<(Language, &Runtime)> {
        let name = name.trim().to_ascii_lowercase();
        self.sandbox
            .runtimes
            .iter()
            .find(|(lang, rt)| **lang == name || rt.aliases.contains(&name))
            .and_then(|(lang, rt)| Some((Language::new(lang).ok()?, rt)))
    }

    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.sandbox.profiles.get(name)
    }

    /// The languages whose one-shots `profile` holds (its `oneshot_pool_languages`, aliases
    /// resolved, each once); none without a `oneshot_pool_size`.
    pub fn oneshot_pool_languages(&self, profile: &Profile) -> Vec<Language> {
        let mut languages: Vec<Language> = Vec::new();
        if profile.oneshot_pool_size == 0 {
            return languages;
        }
        for name in &profile.oneshot_pool_languages {
            if let Some((language, _)) = self.runtime(name)
                && !languages.contains(&language)
            {
                languages.push(language);
            }
        }
        languages
    }

    /// Whether a profile's sandboxes with a lifetime are durable: its `durable`, or by default
    /// where it can be (the jail or docker backend, no pool; the engine also asks the backend,
    /// `Backend::durable_by_default`, when the profile does not say).
    pub fn durable(&self, profile: &Profile) -> bool {
        profile.durable.unwrap_or(
            matches!(
                self.backend_of(profile),
                BackendKind::Jail | BackendKind::Docker
            ) && profile.pool_size == 0,
        )
    }

    /// The backend a profile runs on.
    pub fn backend_of(&self, profile: &Profile) -> BackendKind {
        profile.backend.unwrap_or(self.sandbox.backend)
    }
}

/// The pool and preload keys of a profile: what a pooled sandbox needs (a context driver, so
/// Python; an offline sandbox, the only kind with contexts yet) and module names the driver
/// can import.
fn validate_pool(
    p: &Profile,
    runtime: &Option<(Language, &Runtime)>,
    key: &dyn Fn(&str) -> String,
) -> Result<(), (String, String)> {
    let python = runtime
        .as_ref()
        .is_some_and(|(language, _)| language.as_str() == "python");
    if p.pool_size > MAX_POOL_SIZE {
        return Err((
            key("pool_size"),
            format!("must be at most {MAX_POOL_SIZE} (each pooled sandbox holds an interpreter)"),
        ));
    }
    if p.pool_size > 0 && !python {
        return Err((
            key("pool_size"),
            "a pool holds sandboxes with a ready Python context: the profile's runtime.language must be python".into(),
        ));
    }
    if p.pool_size > 0 && p.network_enabled {
        return Err((
            key("pool_size"),
            "pools are for offline profiles (a waiting networked sandbox would hold an address slot and a resolver): a pool needs network_enabled = false".into(),
        ));
    }
    if p.oneshot_pool_size > MAX_POOL_SIZE {
        return Err((
            key("oneshot_pool_size"),
            format!("must be at most {MAX_POOL_SIZE} (each pooled sandbox holds an interpreter)"),
        ));
    }
    if p.oneshot_pool_size > 0 && p.network_enabled {
        return Err((
            key("oneshot_pool_size"),
            "one-shot pools are for offline profiles (a waiting networked sandbox would hold an address slot and a resolver): it needs network_enabled = false".into(),
        ));
    }
    if !p.preload_modules.is_empty() && !python {
        return Err((
            key("preload_modules"),
            "modules are preloaded into a Python context: the profile's runtime.language must be python".into(),
        ));
    }
    if p.preload_modules.len() > 32 {
        return Err((key("preload_modules"), "at most 32 modules".into()));
    }
    let identifier = |part: &str| {
        part.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let checks_imports = p.enabled_policies.iter().any(|e| e == "forbidden_imports");
    for module in &p.preload_modules {
        if module.len() > 128 || !module.split('.').all(identifier) {
            return Err((
                key("preload_modules"),
                format!(
                    "{module:?} is not a module name such as \"pandas\" or \"matplotlib.pyplot\""
                ),
            ));
        }
        let allowed = p
            .policies
            .forbidden_imports
            .allowed_modules
            .iter()
            .any(|a| module == a || module.starts_with(&format!("{a}.")));
        if checks_imports && !allowed {
            return Err((
                key("preload_modules"),
                format!(
                    "{module:?} is not in the profile's forbidden_imports allowed_modules (a cell could not import it)"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
