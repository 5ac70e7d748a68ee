//! Prometheus metrics (`GET /metrics`, OpenMetrics text): executions by profile, language and
//! outcome; their duration; policy violations; executions running and waiting; the warm
//! pools and the one-shot pools (ready, size, taken, discarded, failed builds, misses), read
//! from the engine at each scrape.

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OneShotPoolLabels {
    pub profile: String,
    pub language: String,
}

/// A pool's gauges and counters, by its labels.
#[derive(Debug, Clone)]
pub struct PoolFamilies<L> {
    pub ready: Family<L, Gauge>,
    pub size: Family<L, Gauge>,
    pub taken: Family<L, Counter>,
    pub discarded: Family<L, Counter>,
    pub failed: Family<L, Counter>,
    pub missed: Family<L, Counter>,
}

impl<L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static>
    PoolFamilies<L>
{
    /// Registers the families under `prefix` (`pool`, `oneshot_pool`), with the help texts of
    /// ready, size, taken, discarded, failed builds and misses.
    fn register(registry: &mut Registry, prefix: &str, help: [&str; 6]) -> Self {
        let families = PoolFamilies {
            ready: Family::default(),
            size: Family::default(),
            taken: Family::default(),
            discarded: Family::default(),
            failed: Family::default(),
            missed: Family::default(),
        };
        let [ready, size, taken, discarded, failed, missed] = help;
        registry.register(format!("{prefix}_ready"), ready, families.ready.clone());
        registry.register(format!("{prefix}_size"), size, families.size.clone());
        registry.register(format!("{prefix}_taken"), taken, families.taken.clone());
        registry.register(
            format!("{prefix}_discarded"),
            discarded,
            families.discarded.clone(),
        );
        registry.register(
            format!("{prefix}_build_failures"),
            failed,
            families.failed.clone(),
        );
        registry.register(format!("{prefix}_missed"), missed, families.missed.clone());
        families
    }

    fn observe(&self, labels: &L, ready: usize, size: u32, totals: [u64; 4]) {
        self.ready.get_or_create(labels).set(ready as i64);
        self.size.get_or_create(labels).set(i64::from(size));
        for (family, total) in [&self.taken, &self.discarded, &self.failed, &self.missed]
            .into_iter()
            .zip(totals)
        {
            let counter = family.get_or_create(labels);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }
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
    pub pools: PoolFamilies<PoolLabels>,
    pub oneshot_pools: PoolFamilies<OneShotPoolLabels>,
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
        let pools = PoolFamilies::register(
            &mut registry,
            "pool",
            [
                "Warm sandboxes waiting in a profile's pool",
                "A profile's configured pool size",
                "Creates that got a warm sandbox",
                "Pooled sandboxes found dead while waiting, destroyed and never handed out",
                "Builds of pooled sandboxes that failed",
                "Creates of a pooled profile that found no fitting warm sandbox and built one then",
            ],
        );
        let oneshot_pools = PoolFamilies::register(
            &mut registry,
            "oneshot_pool",
            [
                "Held one-shot sandboxes waiting in a profile's pool of a language",
                "A one-shot pool's configured size (its profile's oneshot_pool_size)",
                "One-shots that ran in a held sandbox",
                "Held one-shot sandboxes found dead while waiting, destroyed and never used",
                "Builds of held one-shot sandboxes that failed",
                "One-shots of a pooled profile and language that found no fitting held sandbox and ran cold",
            ],
        );
        Metrics {
            sandboxes_live,
            pools,
            oneshot_pools,
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
            self.pools.observe(
                &labels,
                p.ready,
                p.size,
                [p.taken, p.discarded, p.failed, p.missed],
            );
        }
    }

    /// Copies the engine's one-shot pool counters into the metrics (at each scrape).
    pub fn observe_oneshot_pools(
        &self,
        pools: &std::collections::BTreeMap<
            warden_engine::OneShotPoolId,
            warden_engine::OneShotPoolStatus,
        >,
    ) {
        for (pool, p) in pools {
            let labels = OneShotPoolLabels {
                profile: pool.profile.clone(),
                language: pool.language.to_string(),
            };
            self.oneshot_pools.observe(
                &labels,
                p.ready,
                p.size,
                [p.taken, p.discarded, p.failed, p.missed],
            );
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
