//! Whether a new sandbox pod is ready, still coming, or will never run — read from the pod's
//! status and its events, as the API server reports them.
//!
//! Invariants: [`classify`] is pure (recorded API responses test it); a state that cannot get
//! better by waiting (image cannot be pulled, container cannot be created, pod evicted or
//! ended) is a [`StartError`] at once, never a wait until the deadline; an unschedulable pod
//! is waited for (a cluster autoscaler may add a node) and reported as unschedulable, with the
//! scheduler's message, when the deadline passes.

use k8s_openapi::api::core::v1::{Event, Pod};

/// Why a sandbox pod did not become ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    #[error("the image {image:?} cannot be pulled ({reason}): {message}")]
    ImagePull {
        image: String,
        reason: String,
        message: String,
    },
    #[error("the pod cannot be scheduled: {message}")]
    Unschedulable { message: String },
    #[error("the pod was evicted: {message}")]
    Evicted { message: String },
    #[error("the sandbox container cannot start ({reason}): {message}")]
    Container { reason: String, message: String },
    #[error("the pod ended ({phase}): {message}")]
    Ended { phase: String, message: String },
    #[error("the pod was not ready within {seconds}s (last seen: {last})")]
    Deadline { seconds: u64, last: String },
}

/// What the pod's status says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    Ready,
    /// Still coming; what it is waiting for.
    Waiting(String),
    Failed(StartError),
}

const IMAGE_PULL_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
];
const CONTAINER_REASONS: &[&str] = &[
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
    "ContainerCannotRun",
];

/// The most recent warning event's message, for errors that need the cluster's words.
fn last_warning(events: &[Event]) -> Option<String> {
    events
        .iter()
        .rev()
        .find(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or("Warning"),
                e.message.as_deref().unwrap_or("")
            )
        })
}

/// Classifies a pod and its events (oldest first).
pub fn classify(pod: &Pod, events: &[Event]) -> PodState {
    let Some(status) = &pod.status else {
        return PodState::Waiting("no status yet".into());
    };
    let phase = status.phase.as_deref().unwrap_or("Unknown");
    let message = status.message.clone().unwrap_or_default();
    if status.reason.as_deref() == Some("Evicted") {
        return PodState::Failed(StartError::Evicted { message });
    }
    for cs in status.container_statuses.iter().flatten() {
        let Some(state) = &cs.state else { continue };
        if let Some(waiting) = &state.waiting {
            let reason = waiting.reason.clone().unwrap_or_default();
            // The kubelet's short message, then the latest warning event (which usually holds
            // the registry's or runtime's own words).
            let message = match (waiting.message.clone(), last_warning(events)) {
                (Some(m), Some(w)) => format!("{m}; {w}"),
                (m, w) => m.or(w).unwrap_or_default(),
            };
            if IMAGE_PULL_REASONS.contains(&reason.as_str()) {
                return PodState::Failed(StartError::ImagePull {
                    image: cs.image.clone(),
                    reason,
                    message,
                });
            }
            if CONTAINER_REASONS.contains(&reason.as_str()) {
                return PodState::Failed(StartError::Container { reason, message });
            }
        }
        if let Some(t) = &state.terminated {
            let reason = t.reason.clone().unwrap_or_else(|| "Terminated".into());
            return PodState::Failed(StartError::Container {
                message: format!(
                    "exited with code {}{}",
                    t.exit_code,
                    t.message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ),
                reason,
            });
        }
    }
    if phase == "Failed" || phase == "Succeeded" {
        return PodState::Failed(StartError::Ended {
            phase: phase.into(),
            message,
        });
    }
    let condition = |kind: &str| status.conditions.iter().flatten().find(|c| c.type_ == kind);
    if condition("Ready").is_some_and(|c| c.status == "True") {
        return PodState::Ready;
    }
    if let Some(c) = condition("PodScheduled").filter(|c| c.status == "False") {
        return PodState::Waiting(format!(
            "unschedulable: {}",
            c.message
                .clone()
                .or_else(|| last_warning(events))
                .unwrap_or_default()
        ));
    }
    PodState::Waiting(last_warning(events).unwrap_or_else(|| format!("phase {phase}")))
}

/// The error for a pod still not ready at the deadline.
pub fn deadline_error(last: &PodState, seconds: u64) -> StartError {
    match last {
        PodState::Failed(e) => e.clone(),
        PodState::Waiting(why) => match why.strip_prefix("unschedulable: ") {
            Some(message) => StartError::Unschedulable {
                message: message.into(),
            },
            None => StartError::Deadline {
                seconds,
                last: why.clone(),
            },
        },
        PodState::Ready => StartError::Deadline {
            seconds,
            last: "ready".into(),
        },
    }
}

/// Whether a running sandbox's pod has ended, and how: for a pod that vanished or failed
/// during an execution. `Some("OOMKilled")` when the kernel killed the container for memory.
pub fn termination_reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if status.reason.as_deref() == Some("Evicted") {
        return Some("Evicted".into());
    }
    status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|cs| {
            let state = cs.state.as_ref()?;
            state
                .terminated
                .as_ref()
                .map(|t| t.reason.clone().unwrap_or_else(|| "Terminated".into()))
        })
        .or_else(|| {
            matches!(status.phase.as_deref(), Some("Failed" | "Succeeded"))
                .then(|| status.phase.clone().unwrap_or_default())
        })
}
