//! The cluster calls the backend makes, behind a small trait: [`KubeCluster`] makes them over
//! the Kubernetes API (kube's client), and tests put a scripted fake in its place, the way the
//! jail puts its syscalls behind a trait.
//!
//! Invariants: every API error becomes a [`ClusterError`] that names the operation and keeps
//! the API server's reason and message (an operator reading "forbidden: create pods" knows the
//! Role is missing a verb); a 404 is always [`ClusterError::NotFound`], so callers can treat
//! "already gone" as success where it is one (deleting a pod).

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use tokio::io::{AsyncRead, AsyncWrite};

/// A failed cluster call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// 404: the object does not exist (or no longer does).
    #[error("{op}: not found: {message}")]
    NotFound { op: String, message: String },
    /// 409: an object of that name exists.
    #[error("{op}: already exists: {message}")]
    AlreadyExists { op: String, message: String },
    /// 401/403: the credentials lack a permission (see the Role in deploy/kubernetes).
    #[error("{op}: forbidden (check Warden's Role and credentials): {message}")]
    Forbidden { op: String, message: String },
    /// 400/422: the API server rejected the object (an admission policy, a bad value).
    #[error("{op}: rejected by the API server: {message}")]
    Invalid { op: String, message: String },
    /// The API server could not be reached, or answered 5xx/429.
    #[error("{op}: the API server is unavailable: {message}")]
    Unavailable { op: String, message: String },
    /// Any other API answer.
    #[error("{op}: API error {code} {reason}: {message}")]
    Api {
        op: String,
        code: u16,
        reason: String,
        message: String,
    },
}

impl ClusterError {
    /// Maps a kube error of operation `op` (e.g. "create pod warden-sb-1").
    pub fn from_kube(op: &str, e: kube::Error) -> ClusterError {
        let op = op.to_owned();
        match e {
            kube::Error::Api(status) => {
                let message = status.message.clone();
                match status.code {
                    404 => ClusterError::NotFound { op, message },
                    409 => ClusterError::AlreadyExists { op, message },
                    401 | 403 => ClusterError::Forbidden { op, message },
                    400 | 422 => ClusterError::Invalid { op, message },
                    429 | 500..=599 => ClusterError::Unavailable { op, message },
                    code => ClusterError::Api {
                        op,
                        code,
                        reason: status.reason.clone(),
                        message,
                    },
                }
            }
            kube::Error::UpgradeConnection(u) => {
                let message = u.to_string();
                // The websocket upgrade of exec answers with a plain status, not a Status body.
                if message.contains("404") {
                    ClusterError::NotFound { op, message }
                } else if message.contains("403") || message.contains("401") {
                    ClusterError::Forbidden { op, message }
                } else {
                    ClusterError::Unavailable { op, message }
                }
            }
            other => ClusterError::Unavailable {
                op,
                message: other.to_string(),
            },
        }
    }
}

/// How an exec'd command ended, from the exec stream's final status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitStatus {
    /// The command ran and exited with this code (the runtime reports 128+N for signal N).
    Code(i32),
    /// The command could not be run (e.g. the executable is not in the image).
    NotStarted(String),
    /// The stream closed without a status (the connection or the pod went away).
    Lost,
}

impl ExitStatus {
    /// Reads the `Status` object the API server sends on the exec stream's status channel:
    /// `Success`, or `Failure` with reason `NonZeroExitCode` and the code in a cause, or
    /// another failure (the container runtime could not start the command).
    pub fn from_status(status: Option<&Status>) -> ExitStatus {
        let Some(status) = status else {
            return ExitStatus::Lost;
        };
        if status.status.as_deref() == Some("Success") {
            return ExitStatus::Code(0);
        }
        if status.reason.as_deref() == Some("NonZeroExitCode") {
            let code = status
                .details
                .as_ref()
                .and_then(|d| d.causes.as_ref())
                .and_then(|causes| {
                    causes
                        .iter()
                        .find(|c| c.reason.as_deref() == Some("ExitCode"))
                        .and_then(|c| c.message.as_deref()?.parse::<i32>().ok())
                })
                .unwrap_or(1);
            return ExitStatus::Code(code);
        }
        ExitStatus::NotStarted(status.message.clone().unwrap_or_default())
    }
}

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A running exec'd command: write its stdin (then drop it: end of input), read stdout and
/// stderr concurrently, then await the status. Dropping it ends the stream.
pub struct ExecSession {
    pub stdin: BoxWrite,
    pub stdout: BoxRead,
    pub stderr: BoxRead,
    pub status: Pin<Box<dyn Future<Output = ExitStatus> + Send>>,
    /// Keeps the connection alive for as long as the session.
    pub keep: Box<dyn Send + Sync>,
}

impl fmt::Debug for ExecSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExecSession")
    }
}

/// The calls the backend makes, all in one namespace.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync + fmt::Debug {
    async fn create_pod(&self, pod: &Pod) -> Result<(), ClusterError>;
    async fn get_pod(&self, name: &str) -> Result<Pod, ClusterError>;
    /// The events whose involved object is this pod, oldest first.
    async fn pod_events(&self, name: &str) -> Result<Vec<Event>, ClusterError>;
    /// Deletes with no grace period. A pod that is already gone is `Ok(false)`.
    async fn delete_pod(&self, name: &str) -> Result<bool, ClusterError>;
    async fn list_pods(&self, label_selector: &str) -> Result<Vec<Pod>, ClusterError>;
    /// `Ok(None)` when it does not exist.
    async fn get_network_policy(&self, name: &str) -> Result<Option<NetworkPolicy>, ClusterError>;
    async fn create_network_policy(&self, policy: &NetworkPolicy) -> Result<(), ClusterError>;
    /// Runs `command` in the pod's sandbox container, with stdin, stdout and stderr attached.
    async fn exec(&self, pod: &str, command: Vec<String>) -> Result<ExecSession, ClusterError>;
    /// The API server's version (`v1.33.1`): proves it is reachable with these credentials.
    async fn version(&self) -> Result<String, ClusterError>;
}

/// [`Cluster`] over the Kubernetes API.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    namespace: String,
}

impl fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeCluster")
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl KubeCluster {
    pub fn new(client: Client, namespace: &str) -> KubeCluster {
        KubeCluster {
            client,
            namespace: namespace.to_owned(),
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

#[async_trait::async_trait]
impl Cluster for KubeCluster {
    async fn create_pod(&self, pod: &Pod) -> Result<(), ClusterError> {
        let name = pod.metadata.name.as_deref().unwrap_or("");
        self.pods()
            .create(&PostParams::default(), pod)
            .await
            .map(drop)
            .map_err(|e| ClusterError::from_kube(&format!("create pod {name}"), e))
    }

    async fn get_pod(&self, name: &str) -> Result<Pod, ClusterError> {
        self.pods()
            .get(name)
            .await
            .map_err(|e| ClusterError::from_kube(&format!("get pod {name}"), e))
    }

    async fn pod_events(&self, name: &str) -> Result<Vec<Event>, ClusterError> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = ListParams::default().fields(&format!(
            "involvedObject.kind=Pod,involvedObject.name={name}"
        ));
        let mut list = events
            .list(&params)
            .await
            .map_err(|e| ClusterError::from_kube(&format!("list events of pod {name}"), e))?
            .items;
        list.sort_by(|a, b| a.last_timestamp.cmp(&b.last_timestamp));
        Ok(list)
    }

    async fn delete_pod(&self, name: &str) -> Result<bool, ClusterError> {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        match self.pods().delete(name, &params).await {
            Ok(_) => Ok(true),
            Err(e) => match ClusterError::from_kube(&format!("delete pod {name}"), e) {
                ClusterError::NotFound { .. } => Ok(false),
                other => Err(other),
            },
        }
    }

    async fn list_pods(&self, label_selector: &str) -> Result<Vec<Pod>, ClusterError> {
        self.pods()
            .list(&ListParams::default().labels(label_selector))
            .await
            .map(|l| l.items)
            .map_err(|e| ClusterError::from_kube(&format!("list pods {label_selector}"), e))
    }

    async fn get_network_policy(&self, name: &str) -> Result<Option<NetworkPolicy>, ClusterError> {
        let api: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        match api.get(name).await {
            Ok(p) => Ok(Some(p)),
            Err(e) => match ClusterError::from_kube(&format!("get networkpolicy {name}"), e) {
                ClusterError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn create_network_policy(&self, policy: &NetworkPolicy) -> Result<(), ClusterError> {
        let api: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        let name = policy.metadata.name.as_deref().unwrap_or("");
        api.create(&PostParams::default(), policy)
            .await
            .map(drop)
            .map_err(|e| ClusterError::from_kube(&format!("create networkpolicy {name}"), e))
    }

    async fn exec(&self, pod: &str, command: Vec<String>) -> Result<ExecSession, ClusterError> {
        let params = AttachParams {
            container: Some(crate::objects::CONTAINER.into()),
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
            // Larger pipes than kube's 1 KiB default: fewer wake-ups for output floods.
            max_stdin_buf_size: Some(64 * 1024),
            max_stdout_buf_size: Some(64 * 1024),
            max_stderr_buf_size: Some(64 * 1024),
        };
        let mut process = self
            .pods()
            .exec(pod, command, &params)
            .await
            .map_err(|e| ClusterError::from_kube(&format!("exec in pod {pod}"), e))?;
        let missing = |what: &str| ClusterError::Unavailable {
            op: format!("exec in pod {pod}"),
            message: format!("the exec stream has no {what}"),
        };
        let stdin = process.stdin().ok_or_else(|| missing("stdin"))?;
        let stdout = process.stdout().ok_or_else(|| missing("stdout"))?;
        let stderr = process.stderr().ok_or_else(|| missing("stderr"))?;
        let status = process.take_status().ok_or_else(|| missing("status"))?;
        Ok(ExecSession {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            status: Box::pin(async move { ExitStatus::from_status(status.await.as_ref()) }),
            keep: Box::new(std::sync::Mutex::new(process)),
        })
    }

    async fn version(&self) -> Result<String, ClusterError> {
        self.client
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .map_err(|e| ClusterError::from_kube("get the API server's version", e))
    }
}
