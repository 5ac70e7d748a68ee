//! The docker backend: [`Backend`] and [`BackendSandbox`] over the Docker Engine API.
//!
//! A one-shot execution is one container whose first process is the wrapper (create, attach,
//! start, relay, wait, remove — what `docker run --rm` does); a persistent sandbox is a
//! container whose first process is the keeper, and each execution an `exec` of the wrapper.
//! The files API of a persistent sandbox is `exec`s of small shell scripts.
//!
//! Invariants: every call to the engine has a deadline (`call_timeout`), and a run's stream the
//! plan's timeout plus a grace period, after which the container is killed — an engine that
//! stops answering becomes an error, never a hang; a one-shot container is removed on every
//! path, also when the caller goes away mid-run (a drop guard removes it); an execution, a file
//! operation of one sandbox never overlap (one lock), so when a file operation runs no program
//! process is alive (the wrapper killed them all) and its symlink checks cannot be raced; a
//! destroy does not wait for the lock: removing the container ends a running execution; Warden never pulls an image; a profile that asks for an OCI runtime the engine
//! lacks is refused, never run under the default one. A networked container gets its link,
//! firewall and resolver from a keeper ([`crate::network`]) after its start and before its
//! program gets code; the keeper is stopped after the container is removed.

use crate::durable::DiskWorkspace;
use crate::error::DockerError;
use crate::network::{self, Keeper};
use crate::plan::{
    ContainerPlan, LABEL_PID, LABEL_PID_NAMESPACE, LABEL_SANDBOX, PlanInput, Role,
    own_pid_namespace,
};
use crate::relay::{self, Relayed};
use crate::wrapper;
use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptionsBuilder, KillContainerOptions,
    ListContainersOptions, RemoveContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warden_engine::import_guard;
use warden_engine::shape::archive::artifacts_from_tar;
use warden_engine::{
    Backend, BackendError, BackendSandbox, EventSender, ExecPlan, SandboxSpec, StdinReceiver,
    Unsupported,
};
use warden_net::uids::UidLease;
use warden_types::{ExecResult, FileEntry, Limits, Reason, WorkspacePath};

/// What the docker backend needs from the settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerSettings {
    /// `unix:///path/to/docker.sock` or a plain socket path.
    pub host: String,
    /// Deadline of each engine call (create, start, inspect, remove, …).
    pub call_timeout: Duration,
    /// The host uids containers run as: each container its own (and the gid of the same
    /// number), leased as the jail's are ([`warden_net::uids`]).
    pub uids: warden_net::uids::UidRange,
    /// How networked containers get their controlled egress.
    pub network: network::NetSettings,
    /// The OCI seccomp profile (JSON) every container runs under: the binary gives Warden's
    /// own table (`warden_jail::seccomp::oci`); `None` leaves the engine's default.
    pub seccomp_profile: Option<std::sync::Arc<str>>,
}

impl Default for DockerSettings {
    fn default() -> Self {
        DockerSettings {
            host: "unix:///var/run/docker.sock".into(),
            call_timeout: Duration::from_secs(30),
            uids: warden_net::uids::UidRange::default(),
            network: network::NetSettings::default(),
            seccomp_profile: None,
        }
    }
}

/// What `warden doctor` shows about the engine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EngineProbe {
    pub version: String,
    pub api_version: String,
    /// OCI runtimes registered with the engine (`runc`, `runsc`, …).
    pub runtimes: Vec<String>,
    /// Each image asked about, and whether the engine has it.
    pub images: Vec<(String, bool)>,
}

#[derive(Debug)]
struct Shared {
    settings: DockerSettings,
    client: tokio::sync::OnceCell<Docker>,
    /// The engine's OCI runtimes, read once.
    runtimes: tokio::sync::OnceCell<Vec<String>>,
    /// Whether the engine shares the daemon's mount namespace (so sandboxes are durable by
    /// default), once told (an unreachable engine is asked again next time).
    shares_mounts: std::sync::OnceLock<bool>,
    /// One-shot containers of this process still running: never orphans.
    in_flight: Mutex<HashSet<String>>,
}

/// The docker backend. Cheap to share; connects on first use.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    shared: Arc<Shared>,
}

impl DockerBackend {
    pub fn new(settings: DockerSettings) -> DockerBackend {
        DockerBackend {
            shared: Arc::new(Shared {
                settings,
                client: tokio::sync::OnceCell::new(),
                runtimes: tokio::sync::OnceCell::new(),
                shares_mounts: std::sync::OnceLock::new(),
                in_flight: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// Reports the engine's version, runtimes and which of `images` it has.
    pub async fn probe(&self, images: &[String]) -> Result<EngineProbe, DockerError> {
        let sh = &self.shared;
        let docker = sh.docker().await?;
        let version = sh.call("version", "", docker.version()).await?;
        let runtimes = sh.runtimes().await?;
        let mut present = Vec::new();
        for image in images {
            let found = match sh
                .call("inspect image", "", docker.inspect_image(image))
                .await
            {
                Ok(_) => true,
                Err(DockerError::Call { message, .. }) if message.contains("No such image") => {
                    false
                }
                Err(e) => return Err(e),
            };
            present.push((image.clone(), found));
        }
        Ok(EngineProbe {
            version: version.version.unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            runtimes,
            images: present,
        })
    }

    #[allow(clippy::too_many_arguments)]
    /// The conformance promises this backend cannot keep when profiles run under the OCI
    /// runtime `runtime` (each names a case or a group of cases of the suite). A runtime the
    /// engine does not have keeps none (`*`).
    pub async fn unsupported_under(&self, runtime: &str) -> Vec<Unsupported> {
        match self.shared.runtimes().await {
            Ok(have) if have.iter().any(|r| r == runtime) => {}
            Ok(have) => {
                return vec![Unsupported {
                    promise: "*",
                    check: None,
                    why: format!(
                        "the OCI runtime {runtime:?} is not registered with the engine (registered: {}); profiles that ask for it are refused",
                        have.join(", ")
                    ),
                }];
            }
            Err(e) => {
                return vec![Unsupported {
                    promise: "*",
                    check: None,
                    why: e.to_string(),
                }];
            }
        }
        if runtime != "runsc" {
            return Vec::new();
        }
        let u = |promise: &'static str, check: Option<&'static str>, why: &str| Unsupported {
            promise,
            check,
            why: why.to_owned(),
        };
        vec![
            u(
                "a_limit_in_a_sandbox_is_that_runs_reason_only",
                Some("exec"),
                "under gVisor the memory limit is the runtime's too: a memory bomb in a persistent sandbox can end the whole container (\"No such exec instance\" on the next exec)",
            ),
            u(
                "a_limit_in_a_sandbox_is_that_runs_reason_only",
                Some("reason"),
                "under gVisor a persistent sandbox's run is not given the memory reason (the host's OOM kill ends the container, see this case's exec check) nor the pids reason (see pids_limit_is_reason_pids)",
            ),
            u(
                "pids_limit_is_reason_pids",
                Some("reason"),
                "under gVisor the program's processes are limited by RLIMIT_NPROC inside gVisor's kernel, which keeps no count of the forks it refused (the host's pids cgroup counts the runtime's threads, and is not visible inside): a fork bomb is stopped, but not reported as reason pids",
            ),
            u(
                "cpu_quota_is_hard",
                Some("cpu_time"),
                "gVisor shows the program virtual CPU times, so the quota (enforced by the host cgroup on the runtime) cannot be measured from inside",
            ),
            u(
                "egress",
                None,
                "networked profiles are refused under runsc: gVisor's netstack takes the container's interfaces when it starts, before Warden's controlled link is attached",
            ),
        ]
    }

    #[allow(clippy::too_many_arguments)]
    fn plan_input<'a>(
        &'a self,
        name: String,
        sandbox_id: String,
        image: Option<&'a str>,
        limits: &'a Limits,
        network_enabled: bool,
        oci_runtime: Option<&'a str>,
        labels: &'a BTreeMap<String, String>,
        role: Role,
        cmd: Vec<String>,
        uid: u32,
    ) -> PlanInput<'a> {
        PlanInput {
            name,
            sandbox_id,
            image,
            limits,
            network_enabled,
            uid,
            oci_runtime,
            labels,
            role,
            cmd,
            seccomp_profile: self.shared.settings.seccomp_profile.clone(),
        }
    }
}

impl Shared {
    async fn docker(&self) -> Result<&Docker, DockerError> {
        let host = self.settings.host.clone();
        let timeout = self.settings.call_timeout;
        self.client
            .get_or_try_init(|| async move {
                let unreachable = |message: String| DockerError::Unreachable {
                    host: host.clone(),
                    message,
                };
                let path = host.trim_start_matches("unix://");
                let client = Docker::connect_with_unix(
                    path,
                    timeout.as_secs().max(1),
                    bollard::API_DEFAULT_VERSION,
                )
                .map_err(|e| unreachable(e.to_string()))?;
                // Speak the engine's API version when it is older than the client's.
                match tokio::time::timeout(timeout, client.negotiate_version()).await {
                    Ok(Ok(client)) => Ok(client),
                    Ok(Err(e)) => Err(unreachable(e.to_string())),
                    Err(_) => Err(DockerError::Deadline {
                        call: "version",
                        after: timeout,
                    }),
                }
            })
            .await
    }

    /// Runs one engine call under the deadline.
    async fn call<T>(
        &self,
        call: &'static str,
        container: &str,
        fut: impl Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, DockerError> {
        match tokio::time::timeout(self.settings.call_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(DockerError::from_bollard(call, container, e)),
            Err(_) => Err(DockerError::Deadline {
                call,
                after: self.settings.call_timeout,
            }),
        }
    }

    async fn runtimes(&self) -> Result<Vec<String>, DockerError> {
        let docker = self.docker().await?;
        self.runtimes
            .get_or_try_init(|| async {
                let info = self.call("info", "", docker.info()).await?;
                let mut names: Vec<String> =
                    info.runtimes.unwrap_or_default().into_keys().collect();
                names.sort();
                Ok(names)
            })
            .await
            .cloned()
    }

    /// Refuses an OCI runtime the engine does not have.
    async fn ensure_runtime(&self, runtime: Option<&str>) -> Result<(), DockerError> {
        let Some(runtime) = runtime else {
            return Ok(());
        };
        let have = self.runtimes().await?;
        if have.iter().any(|r| r == runtime) {
            Ok(())
        } else {
            Err(DockerError::RuntimeMissing {
                runtime: runtime.to_owned(),
                registered: have.join(", "),
            })
        }
    }

    async fn create(&self, plan: &ContainerPlan) -> Result<(), DockerError> {
        let docker = self.docker().await?;
        let options = CreateContainerOptionsBuilder::default()
            .name(&plan.name)
            .build();
        match self
            .call(
                "create container",
                "",
                docker.create_container(Some(options), plan.to_create_body()),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(DockerError::Call { message, .. })
                if message.contains("No such image") || message.contains("not found") =>
            {
                Err(DockerError::ImageMissing {
                    image: plan.image.clone(),
                })
            }
            Err(DockerError::Call { message, .. })
                if message.contains("unknown or invalid runtime") =>
            {
                Err(DockerError::RuntimeMissing {
                    runtime: plan.oci_runtime.clone().unwrap_or_default(),
                    registered: "see `docker info`".into(),
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn remove(&self, name: &str) -> Result<(), DockerError> {
        let docker = self.docker().await?;
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            link: false,
        };
        match self
            .call(
                "remove container",
                name,
                docker.remove_container(name, Some(options)),
            )
            .await
        {
            Ok(()) | Err(DockerError::ContainerGone { .. }) => Ok(()),
            // Already being removed by an earlier call.
            Err(DockerError::Call { message, .. }) if message.contains("already in progress") => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Kills every process of the sandbox's user (`uid`) but pid 1 (and the killer itself):
    /// the wrapper of a one-shot survives to send its report; a persistent sandbox's keeper
    /// too. If that is not seen done within [`relay::GRACE`], or fails, the whole container is
    /// killed; if the engine cannot start it (the program has filled the pids limit, so the
    /// runtime's fork into the container is refused), `if_refused` says what follows.
    async fn kill_processes(&self, container: &str, uid: u32, if_refused: KillRefused) {
        let ok = async {
            let docker = self.docker().await.map_err(KillFailure::Other)?;
            let exec = self
                .call(
                    "create exec",
                    container,
                    docker.create_exec(
                        container,
                        CreateExecOptions::<String> {
                            cmd: Some(wrapper::kill_all_command()),
                            user: Some(user_of(uid)),
                            ..Default::default()
                        },
                    ),
                )
                .await
                .map_err(KillFailure::Other)?;
            self.call(
                "start exec",
                container,
                docker.start_exec(
                    &exec.id,
                    Some(StartExecOptions {
                        detach: true,
                        ..Default::default()
                    }),
                ),
            )
            .await
            .map_err(KillFailure::NotStarted)?;
            // Detached: wait until it has run. Not too briefly: past this the whole container
            // is killed, which for a persistent sandbox ends it, and a loaded host can take
            // a second to start an exec.
            let until = Instant::now() + relay::GRACE;
            let mut pause = Duration::from_millis(5);
            while Instant::now() < until {
                let inspect = self
                    .call("inspect exec", container, docker.inspect_exec(&exec.id))
                    .await
                    .map_err(KillFailure::Other)?;
                // Done, whatever its status: `kill` fails when nothing was left to kill (the
                // run ended on its own meanwhile), which is no reason to end the container; a
                // kill that did not work leaves a stream that does not end, and the caller
                // kills the container then (`relay::relay`'s grace).
                if inspect.running == Some(false) && inspect.exit_code.is_some() {
                    return Ok::<bool, KillFailure>(true);
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Ok(false)
        }
        .await;
        // Said, so that a run that lost its sandbox or its report to it can be traced.
        match &ok {
            Ok(true) => return,
            // Nothing lost yet: the wrapper's timer ends the run, or the relay's grace runs out.
            Err(KillFailure::NotStarted(_)) if if_refused == KillRefused::AwaitTheWrapper => {
                return;
            }
            Ok(false) => eprintln!(
                "warden: docker: the kill exec in {container} was not seen done within {}s; killing the container",
                relay::GRACE.as_secs()
            ),
            Err(KillFailure::NotStarted(e) | KillFailure::Other(e)) => eprintln!(
                "warden: docker: the kill exec in {container} failed ({e}); killing the container"
            ),
        }
        self.kill_container(container).await;
    }

    /// What a networked plan asks of the host, checked (`None` for an offline one), with its
    /// brokered secrets' values read now (`with_values`: for a container about to start).
    fn net_request(
        &self,
        network_enabled: bool,
        egress: &warden_types::egress::EgressPolicy,
        with_values: bool,
    ) -> Result<Option<warden_net::NetRequest>, network::NetError> {
        if !network_enabled {
            return Ok(None);
        }
        let req = network::request(&self.settings.network, egress, with_values)?;
        network::check(&self.settings.network, &req)?;
        Ok(Some(req))
    }

    /// Gives a networked container's plan its files (resolv.conf; with brokered secrets the
    /// CA bundle) and its secrets' variables (placeholders and the bundle's, never a value);
    /// returns those variables.
    fn net_files(
        &self,
        cplan: &mut ContainerPlan,
        name: &str,
        req: &warden_net::NetRequest,
    ) -> Result<Vec<(String, String)>, network::NetError> {
        let net = &self.settings.network;
        let file = network::create_run_file(net, name, network::RunFile::ResolvConf)?;
        cplan.resolv_conf = Some(file.display().to_string());
        let secret_env = warden_net::secrets::sandbox_env(&req.secrets);
        if !req.secrets.is_empty() {
            let file = network::create_run_file(net, name, network::RunFile::CaBundle)?;
            cplan.ca_bundle = Some(file.display().to_string());
            cplan.env = with_env(
                std::mem::take(&mut cplan.env),
                secret_env.iter().map(|(k, v)| (k, v)),
            );
        }
        Ok(secret_env)
    }

    /// Attaches Warden's link, firewall and resolver to a started container's network
    /// namespace and gives it the resolver in its resolv.conf; returns the keeper that holds
    /// them. The container's program must not get its code before this returned.
    async fn attach_network(
        &self,
        container: &str,
        req: warden_net::NetRequest,
    ) -> Result<Keeper, BackendError> {
        let docker = self.docker().await?;
        let inspect = self
            .call(
                "inspect container",
                container,
                docker.inspect_container(container, None),
            )
            .await?;
        let pid = inspect
            .state
            .as_ref()
            .and_then(|s| s.pid)
            .filter(|&p| p > 0)
            .ok_or_else(|| DockerError::ContainerGone {
                container: container.to_owned(),
            })?;
        // The keeper writes the resolver's address into the file bound on the container's
        // /etc/resolv.conf (and the CA bundle into its file) before it answers, and removes
        // the files at its teardown.
        let net = &self.settings.network;
        let ca_bundle = (!req.secrets.is_empty())
            .then(|| network::run_file(net, container, network::RunFile::CaBundle));
        let keeper = Keeper::start(
            net,
            req,
            pid as i32,
            Some(network::run_file(
                net,
                container,
                network::RunFile::ResolvConf,
            )),
            ca_bundle,
            self.settings.call_timeout,
        )
        .await?;
        Ok(keeper)
    }

    /// Unpauses a container that may be paused (an error, e.g. it is not, is ignored).
    async fn unpause_quietly(&self, container: &str) {
        if let Ok(docker) = self.docker().await {
            let _ = self
                .call(
                    "unpause container",
                    container,
                    docker.unpause_container(container),
                )
                .await;
        }
    }

    async fn kill_container(&self, container: &str) {
        if let Ok(docker) = self.docker().await {
            let _ = self
                .call(
                    "kill container",
                    container,
                    docker.kill_container(
                        container,
                        Some(KillContainerOptions {
                            signal: "SIGKILL".into(),
                        }),
                    ),
                )
                .await;
        }
    }
}

/// Writes the payload to an attached stdin, then closes it (the program sees end of input).
fn feed(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    payload: Vec<u8>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // A program that exits without reading its stdin closes the pipe: not an error.
        let _ = input.write_all(&payload).await;
        let _ = input.flush().await;
        let _ = input.shutdown().await;
    })
}

/// Writes the payload to an attached stdin, then each chunk of a live stdin as it comes, then
/// closes it at the live stdin's end.
fn feed_live(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    payload: Vec<u8>,
    mut live: StdinReceiver,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if input.write_all(&payload).await.is_err() || input.flush().await.is_err() {
            return;
        }
        while let Some(chunk) = live.recv().await {
            // A program that closed its stdin takes no more.
            if input.write_all(&chunk).await.is_err() || input.flush().await.is_err() {
                return;
            }
        }
        let _ = input.shutdown().await;
    })
}

/// `base` (`K=V` entries) with `extra` set on it, each replacing an entry of its name (a
/// variable appears once, so what the program reads does not depend on which copy wins).
fn with_env<'a>(
    mut base: Vec<String>,
    extra: impl Iterator<Item = (&'a String, &'a String)>,
) -> Vec<String> {
    for (k, v) in extra {
        let entry = format!("{k}={v}");
        match base
            .iter_mut()
            .find(|e| e.split_once('=').is_some_and(|(n, _)| n == k))
        {
            Some(slot) => *slot = entry,
            None => base.push(entry),
        }
    }
    base
}

/// Removes a one-shot container if the run's future is dropped before it finishes, then
/// stops its network keeper (a keeper dropped without a runtime still tears down on its own)
/// and ends the container's uid lease (cleanly once the container is removed).
struct RemoveOnDrop {
    shared: Arc<Shared>,
    name: Option<String>,
    keeper: Option<Keeper>,
    uid: Option<UidLease>,
}

/// The `User` of a container and its execs: the leased uid and the gid of the same number.
fn user_of(uid: u32) -> String {
    format!("{uid}:{uid}")
}

/// Leases a container's host uid (the folder is shared with the jail's helpers).
async fn lease_uid(range: warden_net::uids::UidRange) -> Result<UidLease, BackendError> {
    tokio::task::spawn_blocking(move || {
        range.lease(
            std::path::Path::new(warden_net::uids::RUN_DIR),
            &warden_net::uids::ProcScan,
        )
    })
    .await
    .map_err(|e| BackendError::Internal(format!("uid lease task: {e}")))?
    .map_err(|e| BackendError::Refused(format!("no host uid for the container: {e}")))
}

/// Ends a container's uid lease: released cleanly when the container is known removed (its
/// processes and files went with it), else left for the next taker to check.
fn end_lease(uid: Option<UidLease>, removed: bool) {
    if let Some(uid) = uid {
        if removed {
            uid.release();
        } else {
            drop(uid);
        }
    }
}

/// How long a container whose removal met an unreachable engine is retried for.
const REMOVE_RETRY_FOR: Duration = Duration::from_secs(15 * 60);

/// Removes a one-shot's container once the engine answers again (every 2 s, for at most
/// [`REMOVE_RETRY_FOR`]; past that the next start's orphan removal takes it), then lets
/// orphan removal see it again.
async fn remove_when_reachable(shared: Arc<Shared>, name: String, uid: Option<UidLease>) {
    let until = Instant::now() + REMOVE_RETRY_FOR;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        match shared.remove(&name).await {
            Err(e) if e.is_unreachable() && Instant::now() < until => continue,
            Err(e) => {
                eprintln!("warden: docker: container {name} left behind: {e}");
                end_lease(uid, false);
            }
            Ok(()) => end_lease(uid, true),
        }
        break;
    }
    shared.in_flight.lock().expect("not poisoned").remove(&name);
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let keeper = self.keeper.take();
        let uid = self.uid.take();
        if let Some(name) = self.name.take() {
            let shared = self.shared.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let removed = shared.remove(&name).await.is_ok();
                    end_lease(uid, removed);
                    network::remove_run_files(&shared.settings.network, &name);
                    shared.in_flight.lock().expect("not poisoned").remove(&name);
                    if let Some(k) = keeper {
                        k.stop(shared.settings.call_timeout).await;
                    }
                });
            }
        }
    }
}

/// Stops a keeper after its container is gone, without making the caller wait for the
/// teardown (as the jail sends its result before it empties the slot) — except in pid 1 of a
/// pid namespace (a container's entry point), whose exit would kill the keeper mid-teardown.
async fn stop_keeper(shared: &Arc<Shared>, keeper: Option<Keeper>) {
    if let Some(k) = keeper {
        let deadline = shared.settings.call_timeout;
        if std::process::id() == 1 {
            k.stop(deadline).await;
        } else {
            tokio::spawn(k.stop(deadline));
        }
    }
}

/// Turns what the relay saw and the exit status into the result, by the jail's precedence:
/// output, memory, pids, timeout, signal, exited.
/// A run's result, its counters, and the import guard's report (see [`judge_guard`]).
type Finished = (ExecResult, (u64, u64), Option<Vec<u8>>);

fn finish(
    relayed: Relayed,
    exit: Option<i64>,
    engine_oom: bool,
    limits: &Limits,
    started: Instant,
    counters_before: (u64, u64),
) -> Result<Finished, DockerError> {
    let Some(report_bytes) = relayed.report.as_ref() else {
        // No marker: the wrapper did not get to run the program, or the sandbox was killed
        // before it could report.
        if !(relayed.timed_out || relayed.output_exceeded) {
            if let Some(e) = relayed.stream_error {
                return Err(DockerError::Call {
                    call: "attach",
                    message: e,
                });
            }
            match exit {
                Some(wrapper::EXIT_NO_COMMAND) => {
                    return Err(DockerError::Command(
                        String::from_utf8_lossy(relayed.stderr.bytes())
                            .trim()
                            .to_owned(),
                    ));
                }
                Some(wrapper::EXIT_DELIVERY) => {
                    return Err(DockerError::Delivery(
                        String::from_utf8_lossy(relayed.stderr.bytes())
                            .trim()
                            .to_owned(),
                    ));
                }
                // The wrapper ends only by its marker, its two codes above, or a signal
                // (128 + n, e.g. the program's `kill -9 -1`): any other status is not its own.
                Some(code) if !is_signal_status(code) => {
                    let stderr = String::from_utf8_lossy(relayed.stderr.bytes());
                    let message: String = stderr
                        .trim()
                        .lines()
                        .last()
                        .unwrap_or("")
                        .chars()
                        .take(400)
                        .collect();
                    eprintln!(
                        "warden: docker: the container runtime failed a run (exit {code}): {message}"
                    );
                    return Err(DockerError::RuntimeFailed {
                        exit: code,
                        message,
                    });
                }
                _ => {}
            }
        }
        return Ok((
            assemble(
                relayed,
                exit,
                started,
                engine_oom,
                false,
                Vec::new(),
                Vec::new(),
            ),
            counters_before,
            None,
        ));
    };
    let report = wrapper::parse_report(report_bytes).unwrap_or_default();
    let oom = report.oom_kills.unwrap_or(0);
    let pids = report.pids_max_hits.unwrap_or(0);
    // The wrapper archives the output folder's entries as `./…`.
    let mut collected = artifacts_from_tar(&report.archive, ".", limits, relayed.report_complete);
    for (name, size) in report.too_big {
        collected.skipped.push(warden_types::SkippedArtifact {
            name,
            why: format!(
                "{size} bytes would pass the artifact cap of {} bytes",
                limits.max_artifact_bytes
            ),
        });
    }
    let oom_hit = oom > counters_before.0;
    let pids_hit = pids > counters_before.1;
    let guard = report.guard;
    Ok((
        assemble(
            relayed,
            exit,
            started,
            oom_hit,
            pids_hit,
            collected.artifacts,
            collected.skipped,
        ),
        (oom.max(counters_before.0), pids.max(counters_before.1)),
        guard,
    ))
}

/// A guarded run's answer: its import guard's refusal, or the refusal of a run without the
/// guard (see `warden_engine::import_guard::judge`); the result otherwise.
fn judge_guard(
    plan: &ExecPlan,
    result: ExecResult,
    report: Option<Vec<u8>>,
) -> Result<ExecResult, BackendError> {
    if plan.import_guard.is_some() {
        let report = import_guard::parse_report(report.as_deref().unwrap_or_default());
        import_guard::judge(&report, &result)?;
    }
    Ok(result)
}

fn assemble(
    relayed: Relayed,
    exit: Option<i64>,
    started: Instant,
    oom: bool,
    pids: bool,
    artifacts: Vec<warden_types::Artifact>,
    skipped: Vec<warden_types::SkippedArtifact>,
) -> ExecResult {
    // The engine reports a program that a signal ended as 128 + the signal, like a shell; a
    // program that exits with such a status on its own is reported the same way (a
    // documented difference from the jail, which sees the real wait status).
    let killed = relayed.timed_out || relayed.output_exceeded;
    let (exit_code, signal) = match exit {
        _ if killed => (None, Some(libc_sigkill())),
        Some(code) if is_signal_status(code) => (None, Some((code - 128) as i32)),
        Some(code) => (Some(code as i32), None),
        None => (None, Some(libc_sigkill())),
    };
    let reason = if relayed.output_exceeded {
        Reason::Output
    } else if oom {
        Reason::Memory
    } else if pids {
        Reason::Pids
    } else if relayed.timed_out {
        Reason::Timeout
    } else if signal.is_some() {
        Reason::Signal
    } else {
        Reason::Exited
    };
    ExecResult {
        stdout_truncated: relayed.stdout.is_truncated(),
        stderr_truncated: relayed.stderr.is_truncated(),
        stdout: relayed.stdout.into_text(),
        stderr: relayed.stderr.into_text(),
        exit_code,
        signal,
        reason,
        duration_ms: started.elapsed().as_millis() as u64,
        artifacts,
        skipped_artifacts: skipped,
        cell: Default::default(),
        egress: Default::default(),
    }
}

/// Whether an exit status the engine reports is a shell's 128 + signal.
fn is_signal_status(code: i64) -> bool {
    (129..=128 + 64).contains(&code)
}

const fn libc_sigkill() -> i32 {
    9
}

/// Bytes of the wrapper's report kept at most: twice the artifact cap plus room for tar
/// headers. Files larger than the cap never come (the wrapper leaves them out); files that
/// would pass the cap together are skipped by [`artifacts_from_tar`] as in the jail, as long as
/// they come within twice the cap — past it, the rest is reported skipped in one entry.
fn report_cap(limits: &Limits) -> usize {
    let headers = 1024 * (u64::from(limits.max_artifacts) + 64);
    usize::try_from(
        limits
            .max_artifact_bytes
            .saturating_mul(2)
            .saturating_add(headers)
            .saturating_add(64 * 1024),
    )
    .unwrap_or(usize::MAX)
}

fn argv(plan: &ExecPlan) -> Vec<String> {
    let mut argv = plan.command.clone();
    argv.push(format!("{}/{}", crate::plan::CODE_DIR, plan.file_name));
    argv.extend(plan.args.iter().cloned());
    argv
}

/// What follows when the engine cannot start the kill `exec` (see `Shared::kill_processes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillRefused {
    /// The container is killed at once (nothing else would end what is left).
    KillContainer,
    /// A run's timeout or output cap: its wrapper's own timer (see [`wrapper`]) ends the
    /// program's processes from inside without a fork and reports; if the run's stream has
    /// not ended within the relay's grace after this, its caller kills the container.
    AwaitTheWrapper,
}

/// Why the kill `exec` did not run.
enum KillFailure {
    /// The engine refused to start it.
    NotStarted(DockerError),
    /// Any other engine call failed.
    Other(DockerError),
}

fn refuse(e: crate::plan::PlanError) -> BackendError {
    BackendError::Refused(e.to_string())
}

#[async_trait::async_trait]
impl Backend for DockerBackend {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn check(&self, plan: &ExecPlan) -> Result<(), BackendError> {
        let labels = BTreeMap::new();
        ContainerPlan::build(self.plan_input(
            "check".into(),
            "check".into(),
            plan.image.as_deref(),
            &plan.limits,
            plan.network_enabled,
            plan.container_runtime.as_deref(),
            &labels,
            Role::OneShot,
            vec![],
            // Any uid of the range: the check leases none.
            self.shared.settings.uids.base,
        ))
        .map_err(refuse)?;
        self.shared
            .net_request(plan.network_enabled, &plan.egress, false)?;
        Ok(())
    }

    /// The check, and the engine answers a ping within the call deadline.
    async fn ready(&self, plan: &ExecPlan) -> Result<(), BackendError> {
        self.check(plan)?;
        let sh = &self.shared;
        let unreachable =
            |e: DockerError| BackendError::Refused(format!("the docker engine is not usable: {e}"));
        let docker = sh.docker().await.map_err(unreachable)?;
        sh.call("ping", "", docker.ping())
            .await
            .map_err(unreachable)?;
        Ok(())
    }

    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let sh = &self.shared;
        let nonce = wrapper::nonce();
        let id = format!("run-{}", &nonce[..16]);
        let name = format!("warden-{id}");
        let labels = BTreeMap::new();
        // The container's own host uid, until it is removed.
        let uid = lease_uid(sh.settings.uids).await?;
        let cplan = ContainerPlan::build(self.plan_input(
            name.clone(),
            id,
            plan.image.as_deref(),
            &plan.limits,
            plan.network_enabled,
            plan.container_runtime.as_deref(),
            &labels,
            Role::OneShot,
            wrapper::command(&argv(&plan)),
            uid.uid(),
        ))
        .map_err(refuse)?;
        let user = uid.uid();
        let net = sh.net_request(plan.network_enabled, &plan.egress, true)?;
        let mut cplan = cplan;
        if let Some(req) = &net {
            sh.net_files(&mut cplan, &name, req)?;
        }
        sh.ensure_runtime(cplan.oci_runtime.as_deref()).await?;
        let docker = sh.docker().await?;
        sh.in_flight
            .lock()
            .expect("not poisoned")
            .insert(name.clone());
        let mut guard = RemoveOnDrop {
            shared: self.shared.clone(),
            name: Some(name.clone()),
            keeper: None,
            uid: Some(uid),
        };
        sh.create(&cplan).await?;
        let attached = sh
            .call(
                "attach container",
                &name,
                docker.attach_container(
                    &name,
                    Some(AttachContainerOptions {
                        stdin: true,
                        stdout: true,
                        stderr: true,
                        stream: true,
                        logs: false,
                        detach_keys: None,
                    }),
                ),
            )
            .await?;
        sh.call(
            "start container",
            &name,
            docker.start_container(&name, None),
        )
        .await?;
        if let Some(req) = net {
            // The wrapper waits for its code on stdin: nothing runs before the rules exist.
            match sh.attach_network(&name, req).await {
                Ok(keeper) => guard.keeper = Some(keeper),
                Err(e) => {
                    // Removed here, not by the guard's task: a CLI exits right after the
                    // error, before a spawned removal would run.
                    let removed = sh.remove(&name).await.is_ok();
                    end_lease(guard.uid.take(), removed);
                    network::remove_run_files(&sh.settings.network, &name);
                    guard.name = None;
                    sh.in_flight.lock().expect("not poisoned").remove(&name);
                    return Err(e);
                }
            }
        }
        let started = Instant::now();
        let payload = wrapper::stdin_payload(
            &nonce,
            plan.limits.max_artifact_bytes,
            &plan.file_name,
            plan.limits.timeout,
            plan.code.as_bytes(),
            plan.import_guard.as_ref(),
            &plan.stdin,
        );
        let writer = feed(attached.input, payload);
        let relayed = relay::relay(
            attached.output,
            &wrapper::marker(&nonce),
            plan.limits.max_output_bytes,
            report_cap(&plan.limits),
            started + plan.limits.timeout,
            events,
            || sh.kill_processes(&name, user, KillRefused::AwaitTheWrapper),
        )
        .await;
        writer.abort();
        if !relayed.ended {
            // Said, as for a persistent sandbox: since a kill exec the engine could not start
            // is left to the wrapper's timer, this is where such a run's container ends.
            eprintln!(
                "warden: docker: the run in {name} did not end within {}s of its kill; killing the container",
                relay::GRACE.as_secs()
            );
            sh.kill_container(&name).await;
        }
        let exit = wait_exit(sh, docker, &name).await;
        // Without the wrapper's report, the engine's word on the memory limit: gVisor's
        // runtime is in the container's cgroup, so the host's OOM killer ends the whole
        // sandbox, counters and wrapper with it.
        let engine_oom = relayed.report.is_none() && oom_killed(sh, docker, &name).await;
        // The program has ended: the gateway's last events, open connections with theirs.
        let egress = match guard.keeper.as_mut() {
            Some(k) => k.egress_report(true, sh.settings.call_timeout).await,
            None => Default::default(),
        };
        let outcome = finish(relayed, exit, engine_oom, &plan.limits, started, (0, 0));
        let removed = sh.remove(&name).await;
        guard.name = None;
        let uid = guard.uid.take();
        // (A bound file's content outlives its removal while the engine still holds the
        // container.)
        network::remove_run_files(&sh.settings.network, &name);
        // The engine went away during the run when a call failed for it, or when it could not
        // say how the container ended and cannot remove it: what the relay saw then is not
        // the run's end (a cut attach stream looks like a killed sandbox).
        let engine_gone = outcome.as_ref().is_err_and(DockerError::is_unreachable)
            || (exit.is_none() && removed.as_ref().is_err_and(DockerError::is_unreachable));
        if removed.as_ref().is_err_and(DockerError::is_unreachable) {
            // Still in flight (orphan removal leaves it alone) until it is removed.
            tokio::spawn(remove_when_reachable(self.shared.clone(), name, uid));
        } else {
            end_lease(uid, removed.is_ok());
            sh.in_flight.lock().expect("not poisoned").remove(&name);
        }
        // After the removal (or its hand-over): the keeper empties the rules, so a container
        // the engine could not remove yet keeps only an interface that is dropped.
        stop_keeper(&self.shared, guard.keeper.take()).await;
        if engine_gone {
            if let Err(e) = &outcome {
                eprintln!("warden: docker: {e}");
            }
            return Err(BackendError::Lost(
                "the docker engine became unreachable; the run's container is removed once the engine answers again".into(),
            ));
        }
        let (mut result, _, guard_report) = outcome?;
        result.egress = egress;
        match removed {
            // The run is complete; only its container waits for the engine.
            Err(e) if e.is_unreachable() => judge_guard(&plan, result, guard_report),
            Err(e) => Err(e.into()),
            Ok(()) => judge_guard(&plan, result, guard_report),
        }
    }

    async fn create_sandbox(
        &self,
        spec: SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        self.build_sandbox(spec, WorkspaceAt::Memory).await
    }

    fn supports_durable(&self) -> bool {
        true
    }

    /// Where the engine binds the daemon's mounts: it shares the daemon's mount namespace
    /// (see [`crate::durable::engine_shares_mount_namespace`]). An engine elsewhere (the
    /// daemon in a container beside it, a rootless engine) would bind the empty folder under
    /// the workspace's mount, which [`DiskWorkspace::check_seen_by_container`] refuses: there
    /// sandboxes are durable only when a profile asks, and then refused with the reason.
    fn durable_by_default(&self) -> bool {
        let sh = &self.shared;
        if let Some(&shares) = sh.shares_mounts.get() {
            return shares;
        }
        let socket = sh.settings.host.trim_start_matches("unix://");
        match crate::durable::engine_shares_mount_namespace(std::path::Path::new(socket)) {
            Ok(shares) => *sh.shares_mounts.get_or_init(|| shares),
            Err(_) => false,
        }
    }

    async fn create_durable_sandbox(
        &self,
        spec: SandboxSpec,
        dir: &std::path::Path,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        self.build_sandbox(spec, WorkspaceAt::NewImage(dir.to_path_buf()))
            .await
    }

    /// Detaches the workspace's mount that a daemon killed while making or taking up the
    /// sandbox left at `dir` (its container, if any, goes with the orphans).
    fn release_leftover(&self, dir: &std::path::Path) -> Result<(), BackendError> {
        crate::durable::detach_leftover(dir).map_err(disk_error)
    }

    /// A new container on the workspace an earlier process left (its container, if the
    /// engine still has it, is removed first: processes do not outlive the daemon).
    async fn restore_sandbox(
        &self,
        spec: SandboxSpec,
        dir: &std::path::Path,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        self.build_sandbox(spec, WorkspaceAt::Image(dir.to_path_buf()))
            .await
    }

    /// Removes the containers labelled by Warden whose sandbox id is not in `live`, unless
    /// this process is running them (one-shots in flight), another live Warden process
    /// created them, or a Warden process of another pid namespace did (whether it lives
    /// cannot be told from here).
    async fn remove_orphans(&self, live: &[String]) -> Result<usize, BackendError> {
        let sh = &self.shared;
        let docker = sh.docker().await?;
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_string(),
                vec![LABEL_SANDBOX.to_string()],
            )])),
            ..Default::default()
        };
        let containers = sh
            .call("list containers", "", docker.list_containers(Some(options)))
            .await?;
        let own_namespace = own_pid_namespace();
        let mut removed = 0;
        for c in containers {
            let Some(id) = c.labels.as_ref().and_then(|l| l.get(LABEL_SANDBOX)) else {
                continue;
            };
            let name = c
                .names
                .as_ref()
                .and_then(|n| n.first())
                .map(|n| n.trim_start_matches('/').to_owned())
                .unwrap_or_default();
            if live.contains(id) || sh.in_flight.lock().expect("not poisoned").contains(&name) {
                continue;
            }
            let made_elsewhere = c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_PID_NAMESPACE))
                .is_some_and(|ns| Some(ns) != own_namespace.as_ref());
            if made_elsewhere {
                // Its pid means nothing in this pid namespace: not ours to judge.
                continue;
            }
            if let Some(pid) = c.labels.as_ref().and_then(|l| l.get(LABEL_PID))
                && pid.parse::<u32>().is_ok_and(|pid| {
                    pid != std::process::id()
                        && std::path::Path::new(&format!("/proc/{pid}")).exists()
                })
            {
                // Another live Warden process's container: not ours to judge.
                continue;
            }
            let Some(cid) = c.id.as_deref() else { continue };
            if c.state == Some(bollard::models::ContainerSummaryStateEnum::PAUSED) {
                // A frozen process cannot die: thawed first.
                sh.unpause_quietly(cid).await;
            }
            sh.remove(cid).await?;
            network::remove_run_files(&sh.settings.network, &name);
            removed += 1;
        }
        Ok(removed)
    }
}

/// Where a sandbox's workspace is: a tmpfs in its container, or a durable image in the
/// sandbox's folder (made now, or taken up again).
enum WorkspaceAt {
    Memory,
    NewImage(std::path::PathBuf),
    Image(std::path::PathBuf),
}

enum AtKind {
    New,
    Existing,
}

/// A durable workspace's failure: a full host disk is the caller's to know; the rest is a
/// setup failure.
fn disk_error(e: warden_net::disk::DiskError) -> BackendError {
    match e {
        warden_net::disk::DiskError::NoSpace { .. } => {
            BackendError::NoSpace(format!("make the sandbox's workspace: {e}"))
        }
        e => BackendError::Setup(format!("the durable workspace: {e}")),
    }
}

/// Lets a durable workspace go after its container was removed (or never made).
fn release_disk(disk: Option<&DiskWorkspace>) {
    if let Some(ws) = disk
        && let Err(e) = ws.release()
    {
        eprintln!(
            "warden: docker: letting the workspace at {} go: {e}",
            ws.host_path().display()
        );
    }
}

impl DockerBackend {
    /// A sandbox with its workspace `at` (see [`Backend::create_sandbox`] and
    /// [`Backend::create_durable_sandbox`]).
    async fn build_sandbox(
        &self,
        spec: SandboxSpec,
        at: WorkspaceAt,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        if let Some(home) = &spec.home {
            return Err(BackendError::Refused(format!(
                "the docker backend does not mount the workspace at {home}"
            )));
        }
        let at_kind = match &at {
            WorkspaceAt::NewImage(_) => AtKind::New,
            _ => AtKind::Existing,
        };
        let sh = &self.shared;
        let name = format!("warden-{}", spec.id);
        // The sandbox's own host uid, until its container is removed.
        let uid = lease_uid(sh.settings.uids).await?;
        let cplan = ContainerPlan::build(self.plan_input(
            name.clone(),
            spec.id.clone(),
            spec.image.as_deref(),
            &spec.limits,
            spec.network_enabled,
            spec.container_runtime.as_deref(),
            &spec.labels,
            Role::Persistent,
            vec![],
            uid.uid(),
        ))
        .map_err(refuse)?;
        let net = sh.net_request(spec.network_enabled, &spec.egress, true)?;
        sh.ensure_runtime(cplan.oci_runtime.as_deref()).await?;
        let docker = sh.docker().await?;
        let mut cplan = cplan;
        // A durable workspace: its image mounted at its folder, bound on /workspace.
        let disk = match at {
            WorkspaceAt::Memory => None,
            WorkspaceAt::NewImage(dir) | WorkspaceAt::Image(dir) => {
                let new = matches!(at_kind, AtKind::New);
                if !new {
                    // The container of an earlier process goes before its mount does (thawed
                    // first if it was left paused: a frozen process cannot die).
                    sh.unpause_quietly(&name).await;
                    if let Err(e) = sh.remove(&name).await {
                        end_lease(Some(uid), false);
                        return Err(e.into());
                    }
                }
                let (size_mb, user) = (spec.limits.workspace_mb, uid.uid());
                let made = tokio::task::spawn_blocking(move || {
                    if new {
                        DiskWorkspace::create(&dir, size_mb, user)
                    } else {
                        DiskWorkspace::open(&dir, user)
                    }
                })
                .await
                .map_err(|e| BackendError::Internal(format!("workspace task: {e}")))?;
                match made {
                    Ok(ws) => {
                        cplan.workspace_bind = Some(ws.host_path().display().to_string());
                        Some(Arc::new(ws))
                    }
                    Err(e) => {
                        end_lease(Some(uid), true);
                        return Err(disk_error(e));
                    }
                }
            }
        };
        let secret_env = match &net {
            Some(req) => match sh.net_files(&mut cplan, &name, req) {
                Ok(env) => env,
                Err(e) => {
                    network::remove_run_files(&sh.settings.network, &name);
                    release_disk(disk.as_deref());
                    end_lease(Some(uid), true);
                    return Err(e.into());
                }
            },
            None => Vec::new(),
        };
        // Removed here on failure; the lease ends with it (cleanly once removed); a durable
        // workspace is let go (its files stay in its image).
        let undo = |e: BackendError, uid: UidLease| async {
            end_lease(Some(uid), sh.remove(&name).await.is_ok());
            network::remove_run_files(&sh.settings.network, &name);
            release_disk(disk.as_deref());
            e
        };
        if let Err(e) = sh.create(&cplan).await {
            return Err(undo(e.into(), uid).await);
        }
        if let Err(e) = sh
            .call(
                "start container",
                &name,
                docker.start_container(&name, None),
            )
            .await
        {
            return Err(undo(e.into(), uid).await);
        }
        if let Some(ws) = &disk
            && let Err(why) = self.check_workspace(&name, ws).await
        {
            return Err(undo(BackendError::Refused(why), uid).await);
        }
        let keeper = match net {
            None => None,
            Some(req) => match sh.attach_network(&name, req).await {
                Ok(k) => Some(k),
                Err(e) => return Err(undo(e, uid).await),
            },
        };
        Ok(Arc::new(DockerSandbox {
            shared: self.shared.clone(),
            env: spec.env.clone(),
            secret_env,
            gateway: spec.network_enabled && spec.egress.gateway.is_some(),
            keeper: tokio::sync::Mutex::new(keeper),
            user: uid.uid(),
            uid: Mutex::new(Some(uid)),
            disk: Mutex::new(disk),
            name,
            state: tokio::sync::Mutex::new(SandboxState {
                counters: (0, 0),
                destroyed: false,
                paused: false,
            }),
        }))
    }

    /// Whether the started container `name` sees the durable workspace on its `/workspace`
    /// (see [`DiskWorkspace::check_seen_by_container`]).
    async fn check_workspace(&self, name: &str, ws: &DiskWorkspace) -> Result<(), String> {
        let sh = &self.shared;
        let docker = sh.docker().await.map_err(|e| e.to_string())?;
        let inspect = sh
            .call(
                "inspect container",
                name,
                docker.inspect_container(name, None),
            )
            .await
            .map_err(|e| e.to_string())?;
        let pid = inspect
            .state
            .as_ref()
            .and_then(|s| s.pid)
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("container {name} is not running"))?;
        let id = inspect.id.as_deref().unwrap_or_default();
        ws.check_seen_by_container(pid, id)
    }
}

/// Whether the engine saw the container's cgroup run out of memory (`State.OOMKilled`: an OOM
/// kill anywhere in it). False when it cannot say (the container is gone, the call failed).
async fn oom_killed(sh: &Shared, docker: &Docker, name: &str) -> bool {
    sh.call(
        "inspect container",
        name,
        docker.inspect_container(name, None),
    )
    .await
    .ok()
    .and_then(|i| i.state)
    .and_then(|s| s.oom_killed)
    .unwrap_or(false)
}

/// Waits for a container to stop and returns its exit status.
async fn wait_exit(sh: &Shared, docker: &Docker, name: &str) -> Option<i64> {
    let mut stream = docker.wait_container(
        name,
        Some(WaitContainerOptions {
            condition: "not-running".into(),
        }),
    );
    match tokio::time::timeout(sh.settings.call_timeout, stream.next()).await {
        Ok(Some(Ok(r))) => Some(r.status_code),
        Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => Some(code),
        _ => None,
    }
}

#[derive(Debug)]
struct SandboxState {
    /// The cgroup's OOM-kill and pids-limit counters at the end of the last execution.
    counters: (u64, u64),
    destroyed: bool,
    /// The container is paused (`docker pause`: the cgroup freezer); whatever next execs in
    /// it unpauses it first.
    paused: bool,
}

/// A persistent sandbox: a long-lived container; executions and file operations are `exec`s.
#[derive(Debug)]
pub struct DockerSandbox {
    shared: Arc<Shared>,
    name: String,
    /// The container's host uid: every exec runs as it.
    user: u32,
    /// Every execution's own environment variables (`SandboxSpec::env`).
    env: BTreeMap<String, String>,
    /// Its lease, ended when the container is removed (or, left for the next taker to check,
    /// when the sandbox is dropped without a destroy).
    uid: Mutex<Option<UidLease>>,
    /// A networked sandbox's link, firewall and resolver; stopped after the container is
    /// removed (dropping the sandbox stops it too).
    /// Brokered secrets' variables (placeholders, the CA bundle's), in every execution.
    secret_env: Vec<(String, String)>,
    /// Its profile has an egress gateway (run by the keeper).
    gateway: bool,
    /// Held while it reports (after an execution) and when destroyed.
    keeper: tokio::sync::Mutex<Option<Keeper>>,
    /// A durable sandbox's workspace (its image's filesystem, bound on `/workspace`); let go
    /// after the container is removed.
    disk: Mutex<Option<Arc<DiskWorkspace>>>,
    state: tokio::sync::Mutex<SandboxState>,
}

/// Exit statuses of the files scripts.
const FILE_SYMLINK: i64 = 71;
const FILE_NOT_FOUND: i64 = 75;
const FILE_TOO_BIG: i64 = 76;
const FILE_NOT_REGULAR: i64 = 73;

/// Walks the path's folders from /workspace without following a symlink; the last component
/// is left in `$last`. Shared by the file scripts.
const WALK: &str = r#"cd /workspace || exit 70
n=$#; i=1
for c in "$@"; do
  if [ -L "./$c" ]; then exit 71; fi
  if [ "$i" -lt "$n" ]; then
    if [ ! -e "./$c" ]; then [ "$MODE" = write ] && { mkdir "./$c" || exit 72; } || exit 75; fi
    [ -d "./$c" ] || exit 73
    cd "./$c" || exit 72
  fi
  last=$c; i=$((i+1))
done
"#;

impl DockerSandbox {
    async fn unpause_if_paused(&self, state: &mut SandboxState) -> Result<(), BackendError> {
        if state.paused {
            let sh = &self.shared;
            let docker = sh.docker().await?;
            sh.call(
                "unpause container",
                &self.name,
                docker.unpause_container(&self.name),
            )
            .await?;
            state.paused = false;
        }
        Ok(())
    }

    /// Runs the wrapper without a program: the counters and this run's output files.
    async fn report_only(&self, limits: &Limits) -> Result<Relayed, DockerError> {
        let sh = &self.shared;
        let docker = sh.docker().await?;
        let nonce = wrapper::nonce();
        let exec = sh
            .call(
                "create exec",
                &self.name,
                docker.create_exec(
                    &self.name,
                    CreateExecOptions::<String> {
                        cmd: Some(wrapper::command(&[])),
                        env: Some(crate::plan::program_env()),
                        user: Some(user_of(self.user)),
                        working_dir: Some(crate::plan::WORKSPACE_DIR.into()),
                        attach_stdin: Some(true),
                        attach_stdout: Some(true),
                        attach_stderr: Some(true),
                        ..Default::default()
                    },
                ),
            )
            .await?;
        let started = sh
            .call("start exec", &self.name, docker.start_exec(&exec.id, None))
            .await?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(DockerError::Call {
                call: "start exec",
                message: "not attached".into(),
            });
        };
        let writer = feed(
            input,
            wrapper::report_only_payload(&nonce, limits.max_artifact_bytes),
        );
        let relayed = relay::relay(
            output,
            &wrapper::marker(&nonce),
            0,
            report_cap(limits),
            Instant::now() + sh.settings.call_timeout,
            None,
            || async {},
        )
        .await;
        writer.abort();
        Ok(relayed)
    }

    /// One execution: an `exec` of the wrapper; `stdin`: its live stdin, fed after the
    /// payload until its end.
    async fn run(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
        stdin: Option<StdinReceiver>,
    ) -> Result<ExecResult, BackendError> {
        let mut state = self.state.lock().await;
        if state.destroyed {
            return Err(self.gone());
        }
        self.unpause_if_paused(&mut state).await?;
        let sh = &self.shared;
        let docker = sh.docker().await?;
        let nonce = wrapper::nonce();
        let exec = sh
            .call(
                "create exec",
                &self.name,
                docker.create_exec(
                    &self.name,
                    CreateExecOptions::<String> {
                        cmd: Some(wrapper::command(&argv(&plan))),
                        env: Some(with_env(
                            crate::plan::program_env(),
                            self.secret_env
                                .iter()
                                .map(|(k, v)| (k, v))
                                .chain(&self.env)
                                .chain(&plan.env),
                        )),
                        user: Some(user_of(self.user)),
                        // Inside the sandbox's writable folders (the engine's check).
                        working_dir: Some(
                            plan.cwd
                                .clone()
                                .unwrap_or_else(|| crate::plan::WORKSPACE_DIR.into()),
                        ),
                        attach_stdin: Some(true),
                        attach_stdout: Some(true),
                        attach_stderr: Some(true),
                        ..Default::default()
                    },
                ),
            )
            .await?;
        let started_exec = sh
            .call("start exec", &self.name, docker.start_exec(&exec.id, None))
            .await?;
        let StartExecResults::Attached { output, input } = started_exec else {
            return Err(BackendError::Internal("exec did not attach".into()));
        };
        let started = Instant::now();
        let payload = wrapper::stdin_payload(
            &nonce,
            plan.limits.max_artifact_bytes,
            &plan.file_name,
            plan.limits.timeout,
            plan.code.as_bytes(),
            plan.import_guard.as_ref(),
            &plan.stdin,
        );
        let writer = match stdin {
            None => feed(input, payload),
            Some(live) => feed_live(input, payload, live),
        };
        let relayed = relay::relay(
            output,
            &wrapper::marker(&nonce),
            plan.limits.max_output_bytes,
            report_cap(&plan.limits),
            started + plan.limits.timeout,
            events,
            || sh.kill_processes(&self.name, self.user, KillRefused::AwaitTheWrapper),
        )
        .await;
        writer.abort();
        let mut relayed = relayed;
        if !relayed.ended {
            // The sandbox did not stop within the grace period: it is killed whole, and gone.
            eprintln!(
                "warden: docker: the run in {} did not end within {}s of its kill; killing the container",
                self.name,
                relay::GRACE.as_secs()
            );
            sh.kill_container(&self.name).await;
            state.destroyed = true;
        } else if relayed.report.is_none() && (relayed.timed_out || relayed.output_exceeded) {
            // The kill took the wrapper too (here it is not pid 1): ask for its report alone.
            match self.report_only(&plan.limits).await {
                Ok(report) => {
                    if report.report.is_none() {
                        // Said, as a failed read is: the run's files do not come back.
                        eprintln!(
                            "warden: docker: the report of a killed run in {} came back empty (its stream ended without one{})",
                            self.name,
                            report
                                .stream_error
                                .as_deref()
                                .map(|e| format!(": {e}"))
                                .unwrap_or_default()
                        );
                    }
                    relayed.report = report.report;
                    relayed.report_complete = report.report_complete;
                }
                // The run's result goes without its counters and files: said in the log.
                Err(e) => eprintln!(
                    "warden: docker: the report of a killed run in {} could not be read: {e}",
                    self.name
                ),
            }
        }
        let exit = match sh
            .call("inspect exec", &self.name, docker.inspect_exec(&exec.id))
            .await
        {
            Ok(i) => i.exit_code,
            Err(DockerError::ContainerGone { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let finished = finish(relayed, exit, false, &plan.limits, started, state.counters);
        if let Err(DockerError::RuntimeFailed { .. }) = &finished {
            // The run's processes may outlive the runtime's failed wait: none is left running.
            sh.kill_processes(&self.name, self.user, KillRefused::KillContainer)
                .await;
        }
        let (mut result, counters, guard_report) = finished?;
        state.counters = counters;
        if let Some(k) = self.keeper.lock().await.as_mut() {
            result.egress = k.egress_report(false, sh.settings.call_timeout).await;
        }
        judge_guard(&plan, result, guard_report)
    }

    fn gone(&self) -> BackendError {
        BackendError::Gone(format!("sandbox container {} was destroyed", self.name))
    }

    /// Runs a command to the end with `stdin`, keeping at most `cap` bytes of stdout.
    async fn run_simple(
        &self,
        cmd: Vec<String>,
        env: Vec<String>,
        stdin: Vec<u8>,
        cap: usize,
    ) -> Result<(Vec<u8>, Option<i64>), DockerError> {
        let sh = &self.shared;
        let docker = sh.docker().await?;
        let exec = sh
            .call(
                "create exec",
                &self.name,
                docker.create_exec(
                    &self.name,
                    CreateExecOptions::<String> {
                        cmd: Some(cmd),
                        env: Some(env),
                        user: Some(user_of(self.user)),
                        attach_stdin: Some(true),
                        attach_stdout: Some(true),
                        attach_stderr: Some(true),
                        ..Default::default()
                    },
                ),
            )
            .await?;
        let started = sh
            .call("start exec", &self.name, docker.start_exec(&exec.id, None))
            .await?;
        let StartExecResults::Attached { mut output, input } = started else {
            return Err(DockerError::Call {
                call: "start exec",
                message: "not attached".into(),
            });
        };
        let writer = feed(input, stdin);
        let mut out = Vec::new();
        let deadline = Instant::now() + sh.settings.call_timeout;
        loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Err(_) => {
                    writer.abort();
                    // Not read any more: let the engine drop it rather than wait on it while
                    // the kill runs (see `relay::relay`).
                    drop(output);
                    sh.kill_processes(&self.name, self.user, KillRefused::KillContainer)
                        .await;
                    return Err(DockerError::Deadline {
                        call: "file operation",
                        after: sh.settings.call_timeout,
                    });
                }
                Ok(None) => break,
                Ok(Some(Ok(bollard::container::LogOutput::StdOut { message }))) => {
                    let room = cap.saturating_sub(out.len());
                    out.extend_from_slice(&message[..message.len().min(room)]);
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => {
                    return Err(DockerError::from_bollard("file operation", &self.name, e));
                }
            }
        }
        writer.abort();
        let inspect = sh
            .call("inspect exec", &self.name, docker.inspect_exec(&exec.id))
            .await?;
        Ok((out, inspect.exit_code))
    }

    async fn file_script(
        &self,
        mode: &str,
        body: &str,
        path: &WorkspacePath,
        stdin: Vec<u8>,
        cap: usize,
    ) -> Result<(Vec<u8>, Option<i64>), BackendError> {
        let mut cmd = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            format!("{WALK}{body}"),
            "warden".to_owned(),
        ];
        cmd.extend(path.components().map(str::to_owned));
        let (out, code) = self
            .run_simple(cmd, vec![format!("MODE={mode}")], stdin, cap)
            .await?;
        let p = path.as_str();
        match code {
            Some(0) => Ok((out, code)),
            Some(FILE_SYMLINK) => Err(BackendError::BadPath(format!(
                "{p}: leads through a symlink"
            ))),
            Some(FILE_NOT_FOUND) => Err(BackendError::NotFound(p.to_owned())),
            Some(FILE_NOT_REGULAR) => Err(BackendError::BadPath(format!(
                "{p}: not a regular file or folder where one is needed"
            ))),
            Some(FILE_TOO_BIG) => Err(BackendError::BadPath(format!(
                "{p}: larger than the size cap"
            ))),
            other => Err(BackendError::Internal(format!(
                "file operation on {p} failed (status {other:?})"
            ))),
        }
    }
}

#[async_trait::async_trait]
impl BackendSandbox for DockerSandbox {
    /// Live: the container's gateway (held by its keeper) takes the new rules for every
    /// connection opened afterwards, by executions running now and later alike.
    async fn set_egress(
        &self,
        rules: warden_types::egress::GatewayRules,
    ) -> Result<(), BackendError> {
        if !self.gateway {
            return Err(BackendError::Refused(warden_engine::NO_GATEWAY.into()));
        }
        match self.keeper.lock().await.as_mut() {
            Some(k) => Ok(k
                .set_rules(rules, self.shared.settings.call_timeout)
                .await?),
            None => Err(self.gone()),
        }
    }

    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        self.run(plan, events, None).await
    }

    async fn exec_with_stdin(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
        stdin: StdinReceiver,
    ) -> Result<ExecResult, BackendError> {
        self.run(plan, events, Some(stdin)).await
    }

    async fn write_file(&self, path: &WorkspacePath, bytes: Vec<u8>) -> Result<(), BackendError> {
        let mut state = self.state.lock().await;
        if state.destroyed {
            return Err(self.gone());
        }
        self.unpause_if_paused(&mut state).await?;
        let body = r#"if [ -e "./$last" ] && [ ! -f "./$last" ]; then exit 73; fi
cat > "./$last" || exit 74
"#;
        self.file_script("write", body, path, bytes, 0).await?;
        Ok(())
    }

    async fn read_file(
        &self,
        path: &WorkspacePath,
        max_bytes: u64,
    ) -> Result<Vec<u8>, BackendError> {
        let mut state = self.state.lock().await;
        if state.destroyed {
            return Err(self.gone());
        }
        self.unpause_if_paused(&mut state).await?;
        let body = format!(
            r#"[ -e "./$last" ] || exit 75
[ -f "./$last" ] || exit 73
size=$(wc -c < "./$last") || exit 74
[ "$size" -le {max_bytes} ] || exit 76
head -c {max_bytes} "./$last"
"#
        );
        let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let (out, _) = self
            .file_script("read", &body, path, Vec::new(), cap)
            .await?;
        Ok(out)
    }

    async fn list_files(&self, max_entries: usize) -> Result<Vec<FileEntry>, BackendError> {
        let mut state = self.state.lock().await;
        if state.destroyed {
            return Err(self.gone());
        }
        self.unpause_if_paused(&mut state).await?;
        // find does not follow symlinks (-P, the default); only files and folders are listed;
        // a durable workspace filesystem's own lost+found (root's) is not the sandbox's.
        let script = format!(
            "cd /workspace && find . -mindepth 1 -maxdepth 64 \\( -path ./lost+found -uid 0 -prune \\) -o \\( -type f -o -type d \\) -printf '%y %s %P\\0' | head -z -n {}",
            max_entries
        );
        let (out, code) = self
            .run_simple(
                vec!["/bin/sh".into(), "-c".into(), script],
                vec![],
                Vec::new(),
                max_entries.saturating_mul(4200),
            )
            .await?;
        if code != Some(0) {
            return Err(BackendError::Internal(format!(
                "listing the workspace failed (status {code:?})"
            )));
        }
        let mut entries = Vec::new();
        for record in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
            let Ok(text) = std::str::from_utf8(record) else {
                continue;
            };
            let mut parts = text.splitn(3, ' ');
            let (Some(kind), Some(size), Some(path)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            entries.push(FileEntry {
                path: path.to_owned(),
                size: size.parse().unwrap_or(0),
                is_dir: kind == "d",
            });
            if entries.len() >= max_entries {
                break;
            }
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }

    /// Removes the container without waiting for a running execution: removing it kills that
    /// execution (which then ends with what it had), as a destroy must.
    async fn destroy(&self) -> Result<(), BackendError> {
        // A paused container's processes cannot die until thawed; the engine's forced removal
        // would wait on them.
        if let Ok(mut state) = self.state.try_lock()
            && state.paused
        {
            let _ = self.unpause_if_paused(&mut state).await;
        }
        self.shared.remove(&self.name).await?;
        // Removed: its processes are gone, and its files but a durable workspace's.
        end_lease(self.uid.lock().expect("not poisoned").take(), true);
        let disk = self.disk.lock().expect("not poisoned").take();
        if let Some(ws) = disk {
            ws.release().map_err(disk_error)?;
        }
        network::remove_run_files(&self.shared.settings.network, &self.name);
        let keeper = self.keeper.lock().await.take();
        if let Some(k) = keeper {
            k.stop(self.shared.settings.call_timeout).await;
        }
        self.state.lock().await.destroyed = true;
        Ok(())
    }

    async fn pause(&self) -> Result<(), BackendError> {
        let mut state = self
            .state
            .try_lock()
            .map_err(|_| BackendError::Busy(warden_engine::PAUSE_BUSY.into()))?;
        if state.destroyed {
            return Err(self.gone());
        }
        if !state.paused {
            let sh = &self.shared;
            let docker = sh.docker().await?;
            sh.call(
                "pause container",
                &self.name,
                docker.pause_container(&self.name),
            )
            .await?;
            state.paused = true;
        }
        Ok(())
    }

    async fn resume(&self) -> Result<(), BackendError> {
        let mut state = self.state.lock().await;
        if state.destroyed {
            return Err(self.gone());
        }
        self.unpause_if_paused(&mut state).await
    }

    /// Copies the durable workspace's image as of one instant: after a running execution or
    /// file operation (the sandbox's lock), with the container paused (the cgroup freezer:
    /// no process writes meanwhile), the filesystem synced first. A paused sandbox stays
    /// paused.
    async fn snapshot_to(&self, dir: &std::path::Path) -> Result<(), BackendError> {
        let state = self.state.lock().await;
        if state.destroyed {
            return Err(self.gone());
        }
        let Some(ws) = self.disk.lock().expect("not poisoned").clone() else {
            return Err(BackendError::Refused(warden_engine::NO_DURABLE.into()));
        };
        let sh = &self.shared;
        let docker = sh.docker().await?;
        if !state.paused {
            sh.call(
                "pause container",
                &self.name,
                docker.pause_container(&self.name),
            )
            .await?;
        }
        let dir = dir.to_path_buf();
        let copied = tokio::task::spawn_blocking(move || ws.snapshot_to(&dir).map_err(disk_error))
            .await
            .map_err(|e| BackendError::Internal(format!("copy task: {e}")))
            .and_then(|r| r);
        if !state.paused
            && let Err(e) = sh
                .call(
                    "unpause container",
                    &self.name,
                    docker.unpause_container(&self.name),
                )
                .await
        {
            eprintln!("warden: docker: unpausing {} after a copy: {e}", self.name);
        }
        copied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_variables_replace_the_base_ones_once_each() {
        let sandbox: BTreeMap<String, String> = [
            ("HOME".to_owned(), "/elsewhere".to_owned()),
            ("A".to_owned(), "sandbox".to_owned()),
        ]
        .into();
        let run: BTreeMap<String, String> = [("A".to_owned(), "run=1".to_owned())].into();
        let env = with_env(
            vec!["PATH=/bin".into(), "HOME=/workspace".into()],
            sandbox.iter().chain(&run),
        );
        assert_eq!(env, ["PATH=/bin", "HOME=/elsewhere", "A=run=1"]);
    }

    /// What the relay makes of a run whose stream ends with `stderr` and no marker.
    fn unreported(stderr: &[u8]) -> Relayed {
        crate::relay::tests::run(
            vec![Ok(bollard::container::LogOutput::StdErr {
                message: bytes::Bytes::copy_from_slice(stderr),
            })],
            1024,
        )
    }

    #[test]
    fn a_run_the_runtime_failed_is_an_error_not_the_programs_result() {
        // runsc's exec losing its sandbox (seen in CI): exit 128, its message on stderr.
        let stderr =
            b"partial\nwaiting on pid 17: urpc method \"containerManager.WaitPID\" failed: EOF\n";
        let limits = crate::plan::tests::limits();
        for exit in [0, 1, 127, 128, 255] {
            match finish(
                unreported(stderr),
                Some(exit),
                false,
                &limits,
                Instant::now(),
                (0, 0),
            ) {
                Err(DockerError::RuntimeFailed { exit: e, message }) => {
                    assert_eq!(e, exit);
                    assert!(message.starts_with("waiting on pid 17"), "{message}");
                }
                other => panic!("exit {exit}: {other:?}"),
            }
        }
        let lost = BackendError::from(DockerError::RuntimeFailed {
            exit: 128,
            message: "urpc".into(),
        });
        assert!(
            matches!(lost, BackendError::Lost(ref m) if !m.contains("urpc")),
            "{lost:?}"
        );
    }

    #[test]
    fn a_wrapper_killed_by_a_signal_is_the_programs_result() {
        let limits = crate::plan::tests::limits();
        let ended = |exit, engine_oom| {
            let (r, _, _) = finish(
                unreported(b""),
                exit,
                engine_oom,
                &limits,
                Instant::now(),
                (0, 0),
            )
            .unwrap();
            (r.exit_code, r.signal, r.reason)
        };
        // The program may kill its wrapper (`kill -9 -1`); the OOM killer may too.
        assert_eq!(ended(Some(137), false), (None, Some(9), Reason::Signal));
        // The same end with the engine's OOM kill (gVisor's sandbox ended whole) is memory.
        assert_eq!(ended(Some(137), true), (None, Some(9), Reason::Memory));
        assert_eq!(ended(None, false), (None, Some(9), Reason::Signal));
    }
}
