//! Prometheus metrics (`GET /metrics`, OpenMetrics text): executions by profile, language and
//! outcome; their duration; policy violations; executions running and waiting.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecLabels {
    pub profile: String,
    pub language: String,
    /// The run's reason (`exited`, `timeout`, …) or the error code that refused it.
    pub outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub executions: Family<ExecLabels, Counter>,
    pub duration: Histogram,
    pub policy_violations: Family<PolicyLabels, Counter>,
    pub running: Gauge,
    pub queued: Gauge,
    pub sandboxes_live: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("warden");
        let executions = Family::<ExecLabels, Counter>::default();
        registry.register(
            "executions",
            "Executions by profile, language and outcome",
            executions.clone(),
        );
        // 5 ms … ~80 s.
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 15));
        registry.register(
            "execution_duration_seconds",
            "Wall time of executions that ran",
            duration.clone(),
        );
        let policy_violations = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "policy_violations",
            "Requests refused by a policy",
            policy_violations.clone(),
        );
        let running = Gauge::default();
        registry.register(
            "executions_running",
            "Executions running now",
            running.clone(),
        );
        let queued = Gauge::default();
        registry.register(
            "executions_queued",
            "Requests waiting for an execution slot (the queue depth)",
            queued.clone(),
        );
        let sandboxes_live = Gauge::default();
        registry.register(
            "sandboxes_live",
            "Sandboxes with a lifetime that exist now",
            sandboxes_live.clone(),
        );
        Metrics {
            sandboxes_live,
            registry: Arc::new(registry),
            executions,
            duration,
            policy_violations,
            running,
            queued,
        }
    }
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
