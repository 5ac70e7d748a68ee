//! The Kubernetes backend: a pod per sandbox (one-shot runs get a pod of their own for the one
//! run), executions through the exec subresource, files through small commands in the pod.
//!
//! Invariants: the backend does not start unless the deny-all NetworkPolicy exists as Warden
//! builds it (created when missing and allowed to, verified otherwise) — so no sandbox pod
//! runs without it; a pod that does not become ready is deleted before the error is returned;
//! a one-shot run's pod is deleted whatever the outcome; executions of one sandbox run one at
//! a time, and each ends by killing every process of the sandbox, so file access never races
//! a program; file access refuses any path with a symlink in it.

use crate::cluster::{Cluster, ClusterError, ExitStatus, KubeCluster};
use crate::commands::{self, Layout};
use crate::objects::{self, PodParams};
use crate::readiness::{self, PodState, StartError};
use crate::run::{self, RunError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use warden_engine::{
    Backend, BackendError, BackendSandbox, EventSender, ExecPlan, SandboxSpec, Unsupported,
};
use warden_types::{ExecResult, FileEntry, Limits, WorkspacePath};

/// A pod's runtime is a RuntimeClass (`[sandbox.kubernetes].runtime_class(es)`), not a
/// profile's `container_runtime` (a Docker engine's runtime name): asking for one here is
/// refused rather than silently run under the cluster's default.
fn refuse_container_runtime(runtime: Option<&str>) -> Result<(), BackendError> {
    match runtime {
        Some(r) => Err(BackendError::Refused(format!(
            "container_runtime = {r:?} is the docker backend's; for pods set a RuntimeClass in [sandbox.kubernetes].runtime_classes"
        ))),
        None => Ok(()),
    }
}

/// The cluster's NetworkPolicy gives a networked profile the internet minus the blocked
/// ranges; per-profile allow-lists, deny-lists and bandwidth caps are the jail's (its own
/// firewall and resolver). A profile asking for them is refused here, never run without them.
fn refuse_egress_rules(
    network_enabled: bool,
    egress: &warden_types::egress::EgressPolicy,
) -> Result<(), BackendError> {
    if network_enabled && (egress.gateway.is_some() || !egress.secrets.is_empty()) {
        return Err(BackendError::Refused(
            "the kubernetes backend has no egress gateway (egress.gateway, egress.secrets: the jail's and docker's); refused rather than run without it".into(),
        ));
    }
    if network_enabled
        && (egress.is_allow_list()
            || !egress.deny_cidrs.is_empty()
            || egress.max_bandwidth.is_some())
    {
        return Err(BackendError::Refused(
            "the kubernetes backend cannot apply a profile's egress allow-lists, deny-lists or bandwidth cap (only the jail can); refused rather than run without them".into(),
        ));
    }
    Ok(())
}

/// Failures of setting the backend up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    #[error("kubernetes client configuration ({source_}): {message}")]
    Config { source_: String, message: String },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(
        "the NetworkPolicy {name} is missing in namespace {namespace} and manage_network_policy is false: apply deploy/kubernetes/ first"
    )]
    PolicyMissing { name: String, namespace: String },
    #[error(
        "the NetworkPolicy {name} in namespace {namespace} differs from Warden's; refusing to run sandboxes under a policy it did not write (delete it to let Warden recreate it)"
    )]
    PolicyDiffers { name: String, namespace: String },
}

/// What the backend needs to know: where sandbox pods run and how they are made. The binary
/// fills it from `[sandbox.kubernetes]` (the settings file documents each option).
#[derive(Debug, Clone, PartialEq)]
pub struct KubeSettings {
    /// The namespace of sandbox pods and their NetworkPolicies.
    pub namespace: String,
    /// `None`: the in-cluster service account, then `$KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; `None`: its current one.
    pub context: Option<String>,
    /// The `warden.dev/instance` label of this Warden's pods.
    pub instance: String,
    /// The RuntimeClass of every sandbox pod, unless `runtime_classes` names one for the
    /// profile.
    pub runtime_class: Option<String>,
    pub runtime_classes: BTreeMap<String, String>,
    /// How long a new pod may take to be ready.
    pub ready_timeout: Duration,
    pub image_pull_policy: String,
    /// A sandbox's uid is picked from `[uid_base, uid_base + uid_count)`.
    pub uid_base: u32,
    pub uid_count: u32,
    /// The pod's pid 1; it must reap orphans.
    pub keepalive_command: Vec<String>,
    /// Create the deny-all NetworkPolicy when missing, else only verify it.
    pub manage_network_policy: bool,
    /// What a networked sandbox may still never reach.
    pub egress_blocked_cidrs: Vec<String>,
    /// How often a starting pod's status is read.
    pub poll_interval: Duration,
    /// The folders of a sandbox (always the pod's, but for tests).
    pub layout: Layout,
}

/// The restrictive defaults, the same as `[sandbox.kubernetes]`'s (the binary's tests compare
/// the two).
impl Default for KubeSettings {
    fn default() -> Self {
        KubeSettings {
            namespace: "warden-sandboxes".into(),
            kubeconfig: None,
            context: None,
            instance: "warden".into(),
            runtime_class: None,
            runtime_classes: BTreeMap::new(),
            ready_timeout: Duration::from_secs(120),
            image_pull_policy: "IfNotPresent".into(),
            uid_base: 200_000,
            uid_count: 65_536,
            keepalive_command: ["sh", "-c", "while :; do sleep 3600 & wait $!; done"]
                .map(String::from)
                .to_vec(),
            manage_network_policy: true,
            // Cluster-internal ranges and link-local (the cloud metadata service).
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
            .map(String::from)
            .to_vec(),
            poll_interval: Duration::from_millis(500),
            layout: Layout::pod(),
        }
    }
}

impl KubeSettings {
    /// The uid of a sandbox: spread over the configured range by a hash of its id.
    pub fn uid_for(&self, sandbox_id: &str) -> i64 {
        // FNV-1a: stable across builds and processes (std's hasher is randomly seeded).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in sandbox_id.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        i64::from(self.uid_base) + (h % u64::from(self.uid_count)) as i64
    }
}

/// Builds a client from a kubeconfig file (and context), or by kube's inference: the
/// in-cluster service account, then `$KUBECONFIG` or `~/.kube/config`.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Client, StartupError> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(Into::into),
        ..Default::default()
    };
    let config_err = |source_: String| {
        move |e: &dyn std::fmt::Display| StartupError::Config {
            source_: source_.clone(),
            message: e.to_string(),
        }
    };
    let config = match kubeconfig {
        Some(path) => {
            let err = config_err(path.display().to_string());
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| err(&e))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| err(&e))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| config_err("kubeconfig".into())(&e))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| config_err("in-cluster or kubeconfig".into())(&e))?,
    };
    kube::Client::try_from(config).map_err(|e| config_err("client".into())(&e))
}

#[derive(Debug)]
struct Inner {
    cluster: Arc<dyn Cluster>,
    settings: KubeSettings,
}

/// The backend. Cheap to share: sandboxes hold the same inner state.
#[derive(Debug, Clone)]
pub struct KubeBackend {
    inner: Arc<Inner>,
}

/// Empty lists and absent ones mean the same to the API server; compare without the
/// difference.
fn normalized(
    spec: Option<k8s_openapi::api::networking::v1::NetworkPolicySpec>,
) -> Option<k8s_openapi::api::networking::v1::NetworkPolicySpec> {
    spec.map(|mut s| {
        if s.ingress.as_ref().is_some_and(Vec::is_empty) {
            s.ingress = None;
        }
        if s.egress.as_ref().is_some_and(Vec::is_empty) {
            s.egress = None;
        }
        s
    })
}

impl KubeBackend {
    /// Connects with the settings' kubeconfig (or inference) and starts.
    pub async fn connect(settings: KubeSettings) -> Result<KubeBackend, StartupError> {
        let client = client(settings.kubeconfig.as_deref(), settings.context.as_deref()).await?;
        let cluster = Arc::new(KubeCluster::new(client, &settings.namespace));
        KubeBackend::start(cluster, settings).await
    }

    /// Starts on a cluster: creates or verifies the NetworkPolicies first.
    pub async fn start(
        cluster: Arc<dyn Cluster>,
        settings: KubeSettings,
    ) -> Result<KubeBackend, StartupError> {
        let wanted = [
            objects::deny_all_policy(&settings.namespace),
            objects::egress_policy(&settings.namespace, &settings.egress_blocked_cidrs),
        ];
        for policy in wanted {
            let name = policy.metadata.name.clone().unwrap_or_default();
            match cluster.get_network_policy(&name).await? {
                Some(found) => {
                    if normalized(found.spec) != normalized(policy.spec.clone()) {
                        return Err(StartupError::PolicyDiffers {
                            name,
                            namespace: settings.namespace.clone(),
                        });
                    }
                }
                None if settings.manage_network_policy => {
                    cluster.create_network_policy(&policy).await?;
                }
                None => {
                    return Err(StartupError::PolicyMissing {
                        name,
                        namespace: settings.namespace.clone(),
                    });
                }
            }
        }
        Ok(KubeBackend {
            inner: Arc::new(Inner { cluster, settings }),
        })
    }

    /// The pod a sandbox gets.
    pub fn pod_for(
        &self,
        spec: &SandboxSpec,
    ) -> Result<k8s_openapi::api::core::v1::Pod, BackendError> {
        let s = &self.inner.settings;
        let image = spec.image.clone().ok_or_else(no_image)?;
        if spec.id.len() > 63 {
            return Err(BackendError::Refused(format!(
                "sandbox id {:?} is longer than a Kubernetes label value (63)",
                spec.id
            )));
        }
        Ok(objects::sandbox_pod(&PodParams {
            namespace: s.namespace.clone(),
            sandbox_id: spec.id.clone(),
            instance: s.instance.clone(),
            image,
            image_pull_policy: s.image_pull_policy.clone(),
            limits: spec.limits.clone(),
            network_enabled: spec.network_enabled,
            runtime_class: s
                .runtime_classes
                .get(&spec.profile)
                .or(s.runtime_class.as_ref())
                .cloned(),
            uid: s.uid_for(&spec.id),
            keepalive_command: s.keepalive_command.clone(),
            user_labels: spec.labels.clone(),
        }))
    }

    /// Creates the pod and waits until it is ready; a pod that will not be is deleted.
    async fn start_pod(&self, spec: &SandboxSpec) -> Result<String, BackendError> {
        let pod = self.pod_for(spec)?;
        let name = objects::pod_name(&spec.id);
        let cluster = &self.inner.cluster;
        cluster.create_pod(&pod).await.map_err(backend_error)?;
        if let Err(e) = self.wait_ready(&name).await {
            let _ = cluster.delete_pod(&name).await;
            return Err(e);
        }
        Ok(name)
    }

    /// Reads the pod's status until it is ready, failed, or the deadline passes.
    pub async fn wait_ready(&self, name: &str) -> Result<(), BackendError> {
        let s = &self.inner.settings;
        let cluster = &self.inner.cluster;
        let deadline = Instant::now() + s.ready_timeout;
        loop {
            let pod = cluster.get_pod(name).await.map_err(backend_error)?;
            let state = readiness::classify(&pod, &[]);
            match state {
                PodState::Ready => return Ok(()),
                PodState::Failed(_) => {
                    let events = cluster.pod_events(name).await.unwrap_or_default();
                    return Err(start_error(readiness::classify(&pod, &events)));
                }
                PodState::Waiting(_) if Instant::now() >= deadline => {
                    let events = cluster.pod_events(name).await.unwrap_or_default();
                    let last = readiness::classify(&pod, &events);
                    return Err(setup(readiness::deadline_error(
                        &last,
                        s.ready_timeout.as_secs(),
                    )));
                }
                PodState::Waiting(_) => tokio::time::sleep(s.poll_interval).await,
            }
        }
    }

    fn sandbox_for(&self, pod: String, spec: &SandboxSpec) -> KubeSandbox {
        KubeSandbox {
            inner: self.inner.clone(),
            pod,
            limits: spec.limits.clone(),
            destroyed: AtomicBool::new(false),
            one_at_a_time: tokio::sync::Mutex::new(()),
        }
    }
}

fn no_image() -> BackendError {
    BackendError::Refused(
        "the kubernetes backend runs an image: set the profile's runtime.image or the runtime's image".into(),
    )
}

fn setup(e: StartError) -> BackendError {
    BackendError::Setup(e.to_string())
}

fn start_error(state: PodState) -> BackendError {
    match state {
        PodState::Failed(e) => setup(e),
        PodState::Waiting(why) => BackendError::Setup(why),
        PodState::Ready => BackendError::Internal("a ready pod reported as failed".into()),
    }
}

/// How a cluster failure reaches the engine.
pub fn backend_error(e: ClusterError) -> BackendError {
    match e {
        ClusterError::NotFound { .. } => BackendError::Gone(e.to_string()),
        ClusterError::Forbidden { .. } | ClusterError::Invalid { .. } => {
            BackendError::Setup(e.to_string())
        }
        ClusterError::AlreadyExists { .. }
        | ClusterError::Unavailable { .. }
        | ClusterError::Api { .. } => BackendError::Internal(e.to_string()),
    }
}

fn run_error(e: RunError) -> BackendError {
    match e {
        RunError::Prepare(m) => BackendError::Setup(m),
        RunError::NotStarted(m) => BackendError::Command(m),
        RunError::Cluster(c) => backend_error(c),
        RunError::ImportGuard(e) => e,
        RunError::PodEnded(reason) => {
            BackendError::Gone(format!("the sandbox pod ended: {reason}"))
        }
    }
}

/// A unique id for a one-shot run's pod.
fn one_shot_id() -> String {
    format!("run-{}", uuid::Uuid::now_v7().simple())
}

#[async_trait::async_trait]
impl Backend for KubeBackend {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    /// An execution's own environment, working directory and live stdin are not given
    /// through the API server's exec yet: plans asking for them are refused.
    fn unsupported(&self) -> Vec<Unsupported> {
        vec![Unsupported {
            promise: "run_env_and_stdin",
            check: None,
            why: "the kubernetes backend does not give an execution its own env, cwd or live stdin"
                .into(),
        }]
    }

    fn check(&self, plan: &ExecPlan) -> Result<(), BackendError> {
        if plan.image.is_none() {
            return Err(no_image());
        }
        refuse_container_runtime(plan.container_runtime.as_deref())?;
        refuse_egress_rules(plan.network_enabled, &plan.egress)
    }

    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        // The engine checked the plan (`Backend::check`, once, before handing it here).
        let spec = SandboxSpec {
            id: one_shot_id(),
            profile: plan.profile.clone(),
            limits: plan.limits.clone(),
            network_enabled: plan.network_enabled,
            egress: plan.egress.clone(),
            container_runtime: None,
            image: plan.image.clone(),
            labels: BTreeMap::new(),
            env: Default::default(),
            home: None,
        };
        let pod = self.start_pod(&spec).await?;
        let sandbox = self.sandbox_for(pod, &spec);
        let result = sandbox.exec(plan, events).await;
        // The pod goes whatever happened. The answer does not wait for the kubelet to finish
        // the deletion (every process of the run is already dead: the run's last step killed
        // them); a pod whose deletion failed is reaped at the daemon's next start-up.
        let _ = self.inner.cluster.delete_pod(&sandbox.pod).await;
        result
    }

    async fn create_sandbox(
        &self,
        spec: SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        refuse_container_runtime(spec.container_runtime.as_deref())?;
        refuse_egress_rules(spec.network_enabled, &spec.egress)?;
        spec.refuse_env_and_home(self.name())?;
        let pod = self.start_pod(&spec).await?;
        Ok(Arc::new(self.sandbox_for(pod, &spec)))
    }

    async fn remove_orphans(&self, live: &[String]) -> Result<usize, BackendError> {
        let cluster = &self.inner.cluster;
        let pods = cluster
            .list_pods(&objects::instance_selector(&self.inner.settings.instance))
            .await
            .map_err(backend_error)?;
        let mut removed = 0;
        for pod in pods {
            let id = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(objects::SANDBOX_ID_LABEL))
                .cloned()
                .unwrap_or_default();
            // A pod of a live sandbox is adopted: left running for the registry that owns it.
            if live.contains(&id) {
                continue;
            }
            let Some(name) = pod.metadata.name else {
                continue;
            };
            if cluster.delete_pod(&name).await.map_err(backend_error)? {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// A sandbox's pod.
#[derive(Debug)]
pub struct KubeSandbox {
    inner: Arc<Inner>,
    pod: String,
    limits: Limits,
    destroyed: AtomicBool,
    one_at_a_time: tokio::sync::Mutex<()>,
}

/// Bytes of a listing line at most (type, size, a path of up to 4096 bytes).
const LIST_LINE_MAX: u64 = 4200;

impl KubeSandbox {
    fn check_live(&self) -> Result<(), BackendError> {
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(BackendError::Gone(format!("{} was destroyed", self.pod)));
        }
        Ok(())
    }

    /// Runs a short command in the pod.
    async fn command(
        &self,
        argv: Vec<String>,
        stdin: &[u8],
        cap: u64,
    ) -> Result<commands::Output, BackendError> {
        commands::call(self.inner.cluster.as_ref(), &self.pod, argv, stdin, cap)
            .await
            .map_err(backend_error)
    }
}

/// The meaning of the file scripts' exit codes.
fn file_status(
    status: ExitStatus,
    stderr: String,
    path: &WorkspacePath,
) -> Result<(), BackendError> {
    match status {
        ExitStatus::Code(0) => Ok(()),
        ExitStatus::Code(3) => Err(BackendError::BadPath(format!("{path}: {stderr}"))),
        ExitStatus::Code(4) => Err(BackendError::NotFound(path.to_string())),
        ExitStatus::Code(c) => Err(BackendError::Internal(format!(
            "file access to {path} failed ({c}): {stderr}"
        ))),
        ExitStatus::NotStarted(m) => Err(BackendError::Internal(format!(
            "the image cannot run sh for file access: {m}"
        ))),
        ExitStatus::Lost => Err(BackendError::Internal(format!(
            "file access to {path}: the exec stream closed without a status"
        ))),
    }
}

/// Parses `find -printf '%y %s %P\0'` output.
pub fn parse_listing(out: &[u8], max_entries: usize) -> Vec<FileEntry> {
    // Only NUL-terminated records are whole: what follows the last NUL was cut at the cap.
    let whole = match out.iter().rposition(|b| *b == 0) {
        Some(end) => &out[..end],
        None => return Vec::new(),
    };
    whole
        .split(|b| *b == 0)
        .filter_map(|rec| {
            let text = std::str::from_utf8(rec).ok()?;
            let mut parts = text.splitn(3, ' ');
            let (kind, size, path) = (parts.next()?, parts.next()?, parts.next()?);
            if path.is_empty() {
                return None;
            }
            Some(FileEntry {
                path: path.to_owned(),
                size: size.parse().ok()?,
                is_dir: kind == "d",
            })
        })
        .take(max_entries)
        .collect()
}

#[async_trait::async_trait]
impl BackendSandbox for KubeSandbox {
    async fn exec(
        &self,
        mut plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        self.check_live()?;
        plan.refuse_env_and_cwd("kubernetes")?;
        let _turn = self.one_at_a_time.lock().await;
        // Memory and CPU are the pod's; a run may only lower the per-process limits.
        plan.limits.max_pids = plan.limits.max_pids.min(self.limits.max_pids);
        plan.limits.max_file_size_bytes = plan
            .limits
            .max_file_size_bytes
            .min(self.limits.max_file_size_bytes);
        run::execute(
            self.inner.cluster.as_ref(),
            &self.pod,
            &self.inner.settings.layout,
            &plan,
            events,
        )
        .await
        .map_err(run_error)
    }

    async fn write_file(&self, path: &WorkspacePath, bytes: Vec<u8>) -> Result<(), BackendError> {
        self.check_live()?;
        let _turn = self.one_at_a_time.lock().await;
        let out = self
            .command(
                commands::write_file(&self.inner.settings.layout, path.as_str()),
                &bytes,
                4096,
            )
            .await?;
        file_status(out.status, out.stderr, path)
    }

    async fn read_file(
        &self,
        path: &WorkspacePath,
        max_bytes: u64,
    ) -> Result<Vec<u8>, BackendError> {
        self.check_live()?;
        let _turn = self.one_at_a_time.lock().await;
        let out = self
            .command(
                commands::read_file(&self.inner.settings.layout, path.as_str()),
                &[],
                max_bytes,
            )
            .await?;
        if out.cut {
            return Err(BackendError::BadPath(format!(
                "{path}: larger than {max_bytes} bytes"
            )));
        }
        file_status(out.status, out.stderr, path)?;
        Ok(out.stdout)
    }

    async fn list_files(&self, max_entries: usize) -> Result<Vec<FileEntry>, BackendError> {
        self.check_live()?;
        let _turn = self.one_at_a_time.lock().await;
        // /tmp is the workspace's `.tmp` folder (one size cap for both); it is not listed.
        let cap = LIST_LINE_MAX * max_entries as u64;
        let out = self
            .command(commands::list(&self.inner.settings.layout), &[], cap)
            .await?;
        if !out.cut && out.status != ExitStatus::Code(0) {
            return Err(BackendError::Internal(format!(
                "list the workspace: {}",
                out.stderr
            )));
        }
        Ok(parse_listing(&out.stdout, max_entries))
    }

    async fn destroy(&self) -> Result<(), BackendError> {
        self.destroyed.store(true, Ordering::SeqCst);
        let cluster = &self.inner.cluster;
        cluster.delete_pod(&self.pod).await.map_err(backend_error)?;
        // Gone means gone: wait until the API server no longer has the pod (the kubelet has
        // stopped its containers), within the readiness deadline.
        let deadline = Instant::now() + self.inner.settings.ready_timeout;
        loop {
            match cluster.get_pod(&self.pod).await {
                Err(ClusterError::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(backend_error(e)),
                Ok(_) if Instant::now() >= deadline => {
                    return Err(BackendError::Internal(format!(
                        "pod {} still exists {}s after its deletion",
                        self.pod,
                        self.inner.settings.ready_timeout.as_secs()
                    )));
                }
                Ok(_) => tokio::time::sleep(self.inner.settings.poll_interval).await,
            }
        }
    }
}

/// Which credentials a client made with `kubeconfig` uses, for `warden doctor`'s report.
pub fn describe_kubeconfig(kubeconfig: Option<&Path>) -> String {
    match (kubeconfig, std::env::var_os("KUBECONFIG")) {
        (Some(p), _) => format!("kubeconfig {}", p.display()),
        (None, _) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            "in-cluster service account".into()
        }
        (None, Some(k)) => format!("$KUBECONFIG {}", PathBuf::from(k).display()),
        (None, None) => "~/.kube/config (none set in the settings)".into(),
    }
}

/// The environment variable naming a kubeconfig of a real cluster for the live tests and the
/// conformance suite; without it those tests do not run.
pub const TEST_KUBECONFIG_ENV: &str = "WARDEN_TEST_KUBECONFIG";

/// For the live tests and the conformance suite: the backend on the cluster of
/// `$WARDEN_TEST_KUBECONFIG` (namespace `$WARDEN_TEST_KUBE_NAMESPACE`, default
/// "warden-sandboxes"), or `None` when it is not set.
pub async fn from_test_env() -> Option<Result<KubeBackend, StartupError>> {
    let kubeconfig = std::env::var_os(TEST_KUBECONFIG_ENV)?;
    let mut settings = KubeSettings {
        kubeconfig: Some(PathBuf::from(kubeconfig)),
        instance: "warden-test".into(),
        ..KubeSettings::default()
    };
    if let Ok(ns) = std::env::var("WARDEN_TEST_KUBE_NAMESPACE") {
        settings.namespace = ns;
    }
    Some(KubeBackend::connect(settings).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_uid_is_stable_in_range_and_never_root() {
        let s = KubeSettings::default();
        let a = s.uid_for("sb-1");
        assert_eq!(a, s.uid_for("sb-1"), "stable across calls and processes");
        assert_ne!(a, s.uid_for("sb-2"));
        for id in ["a", "sb-1", "run-0192", &"x".repeat(63)] {
            let uid = s.uid_for(id);
            assert!((200_000..200_000 + 65_536).contains(&uid), "{uid}");
        }
        let mut one = s.clone();
        one.uid_count = 1;
        assert_eq!(one.uid_for("anything"), 200_000);
    }

    #[test]
    fn listings_parse_and_stop_at_the_cap() {
        let out = b"d 4096 data\0f 2 data/in.txt\0f 5 we ird name\0l 11 link\0";
        let entries = parse_listing(out, 10);
        assert_eq!(entries.len(), 4);
        assert_eq!(
            entries[1],
            FileEntry {
                path: "data/in.txt".into(),
                size: 2,
                is_dir: false
            }
        );
        assert!(entries[0].is_dir);
        assert_eq!(entries[2].path, "we ird name");
        assert_eq!(parse_listing(out, 2).len(), 2);
        // A record cut at the stream's cap is dropped, not misread.
        assert_eq!(parse_listing(b"f 2 a\0f 1", 10).len(), 1);
        let cut = parse_listing(b"f 2 a\0f 10 data/lon", 10);
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].path, "a");
    }

    #[test]
    fn file_script_codes_become_the_files_api_errors() {
        let p = WorkspacePath::new("a/b").unwrap();
        assert!(file_status(ExitStatus::Code(0), String::new(), &p).is_ok());
        assert!(matches!(
            file_status(ExitStatus::Code(3), "symlink: ./a".into(), &p),
            Err(BackendError::BadPath(m)) if m.contains("symlink")
        ));
        assert!(matches!(
            file_status(ExitStatus::Code(4), String::new(), &p),
            Err(BackendError::NotFound(_))
        ));
        assert!(matches!(
            file_status(ExitStatus::Code(1), "boom".into(), &p),
            Err(BackendError::Internal(_))
        ));
        assert!(matches!(
            file_status(ExitStatus::Lost, String::new(), &p),
            Err(BackendError::Internal(_))
        ));
    }
}
