//! Prometheus metrics (`GET /metrics`, OpenMetrics text): executions by profile, language and
//! outcome; their duration; policy violations; executions running and waiting; the warm
//! pools (ready, size, taken, discarded, failed builds), read from the engine at each scrape.

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub profile: String,
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
    pub pool_ready: Family<PoolLabels, Gauge>,
    pub pool_size: Family<PoolLabels, Gauge>,
    pub pool_taken: Family<PoolLabels, Counter>,
    pub pool_discarded: Family<PoolLabels, Counter>,
    pub pool_failed: Family<PoolLabels, Counter>,
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
        let pool_ready = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "pool_ready",
            "Warm sandboxes waiting in a profile's pool",
            pool_ready.clone(),
        );
        let pool_size = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "pool_size",
            "A profile's configured pool size",
            pool_size.clone(),
        );
        let pool_taken = Family::<PoolLabels, Counter>::default();
        registry.register(
            "pool_taken",
            "Creates that got a warm sandbox",
            pool_taken.clone(),
        );
        let pool_discarded = Family::<PoolLabels, Counter>::default();
        registry.register(
            "pool_discarded",
            "Pooled sandboxes found dead while waiting, destroyed and never handed out",
            pool_discarded.clone(),
        );
        let pool_failed = Family::<PoolLabels, Counter>::default();
        registry.register(
            "pool_build_failures",
            "Builds of pooled sandboxes that failed",
            pool_failed.clone(),
        );
        Metrics {
            sandboxes_live,
            pool_ready,
            pool_size,
            pool_taken,
            pool_discarded,
            pool_failed,
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
    /// Copies the engine's pool counters into the metrics (at each scrape).
    pub fn observe_pools(&self, pools: &[warden_engine::PoolStatus]) {
        for p in pools {
            let labels = PoolLabels {
                profile: p.profile.clone(),
            };
            self.pool_ready.get_or_create(&labels).set(p.ready as i64);
            self.pool_size.get_or_create(&labels).set(i64::from(p.size));
            for (family, total) in [
                (&self.pool_taken, p.taken),
                (&self.pool_discarded, p.discarded),
                (&self.pool_failed, p.failed),
            ] {
                let counter = family.get_or_create(&labels);
                counter.inc_by(total.saturating_sub(counter.get()));
            }
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
