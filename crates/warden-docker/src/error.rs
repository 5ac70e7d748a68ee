//! Errors of talking to the engine, each named for the call that failed, and how they become
//! the engine-neutral [`BackendError`].

use std::time::Duration;
use warden_engine::BackendError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerError {
    #[error("cannot reach the docker engine at {host}: {message}")]
    Unreachable { host: String, message: String },
    #[error("the docker engine did not answer {call} within {}s", .after.as_secs_f64())]
    Deadline { call: &'static str, after: Duration },
    #[error(
        "image {image:?} is not present on the docker engine (Warden never pulls; scripts/setup-docker-images.sh builds the default ones)"
    )]
    ImageMissing { image: String },
    #[error(
        "the OCI runtime {runtime:?} is not registered with the docker engine (registered: {registered})"
    )]
    RuntimeMissing { runtime: String, registered: String },
    #[error("container {container} is gone")]
    ContainerGone { container: String },
    #[error("docker engine: {call}: {message}")]
    Call { call: &'static str, message: String },
    #[error("could not deliver the code to the sandbox: {0}")]
    Delivery(String),
    #[error("{0}")]
    Command(String),
    /// The wrapper neither reported nor was killed by a signal: the container runtime failed
    /// the execution (e.g. runsc's `exec` losing its sandbox: exit 128). `message`: the last
    /// line of the run's stderr, where the runtime writes its own error.
    #[error("the container runtime failed the run (exit {exit}): {message}")]
    RuntimeFailed { exit: i64, message: String },
}

impl DockerError {
    /// Whether the engine could not be reached (or did not answer) rather than refused.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            DockerError::Unreachable { .. } | DockerError::Deadline { .. }
        )
    }

    /// Classifies a bollard error of `call` on `container` (if it names one).
    pub fn from_bollard(call: &'static str, container: &str, e: bollard::errors::Error) -> Self {
        use bollard::errors::Error as B;
        match e {
            B::DockerResponseServerError {
                status_code: 404,
                message,
            } if !container.is_empty() && message.contains("container") => {
                DockerError::ContainerGone {
                    container: container.to_owned(),
                }
            }
            B::DockerResponseServerError {
                status_code: 409,
                message,
            } if message.contains("is not running") || message.contains("is paused") => {
                DockerError::ContainerGone {
                    container: container.to_owned(),
                }
            }
            B::DockerResponseServerError { message, .. } => DockerError::Call { call, message },
            B::SocketNotFoundError(path) => DockerError::Unreachable {
                host: path,
                message: "no socket".into(),
            },
            B::HyperResponseError { .. }
            | B::HyperLegacyError { .. }
            | B::IOError { .. }
            | B::RequestTimeoutError => DockerError::Unreachable {
                host: "the engine".into(),
                message: e.to_string(),
            },
            other => DockerError::Call {
                call,
                message: other.to_string(),
            },
        }
    }
}

impl From<DockerError> for BackendError {
    fn from(e: DockerError) -> Self {
        match e {
            DockerError::ImageMissing { .. } | DockerError::RuntimeMissing { .. } => {
                BackendError::Refused(e.to_string())
            }
            DockerError::ContainerGone { .. } => BackendError::Gone(e.to_string()),
            DockerError::Delivery(_) => BackendError::Setup(e.to_string()),
            DockerError::Command(m) => BackendError::Command(m),
            // The runtime's own message names host-side ids: it goes to the log (`finish`),
            // the caller learns what was lost.
            DockerError::RuntimeFailed { exit, .. } => BackendError::Lost(format!(
                "the container runtime failed the run (exit {exit}) before the program's result was reported"
            )),
            DockerError::Unreachable { .. }
            | DockerError::Deadline { .. }
            | DockerError::Call { .. } => BackendError::Internal(e.to_string()),
        }
    }
}
