//! The engine's reports of executions, recorded: Prometheus counters and, with tracing on, the
//! execution's spans. The engine calls [`Recorder`] once per admitted execution, whichever
//! front-end asked (REST, the compatibility routes, `/mcp`).

use crate::metrics::{self, Metrics};
use crate::otlp::Tracer;
use warden_engine::{EngineError, ExecRecord, Observer};

#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) metrics: Metrics,
    pub(crate) tracer: Tracer,
}

impl Observer for Recorder {
    fn execution(&self, record: ExecRecord<'_>) {
        let outcome = match record.outcome {
            Ok(result) => {
                self.metrics
                    .duration
                    .observe(result.duration_ms as f64 / 1000.0);
                result.reason.as_str().to_owned()
            }
            Err(e) => {
                if let EngineError::PolicyViolation(v) = e {
                    self.metrics
                        .policy_violations
                        .get_or_create(&metrics::PolicyLabels {
                            policy: v.policy.to_owned(),
                        })
                        .inc();
                }
                e.code().to_owned()
            }
        };
        self.metrics
            .executions
            .get_or_create(&metrics::ExecLabels {
                profile: record.profile.to_owned(),
                language: record.language.to_owned(),
                outcome: outcome.clone(),
            })
            .inc();
        let mut attributes = vec![
            ("warden.profile", record.profile.to_owned()),
            ("warden.language", record.language.to_owned()),
            ("warden.outcome", outcome),
        ];
        if let Ok(r) = record.outcome {
            attributes.push(("warden.duration_ms", r.duration_ms.to_string()));
            if let Some(code) = r.exit_code {
                attributes.push(("warden.exit_code", code.to_string()));
            }
        }
        let error = record.outcome.err().map(ToString::to_string);
        self.tracer
            .record(record.trace, &attributes, error.as_deref());
    }
}
