//! The `resource_quota` policy: a request may not ask for more time or memory than the profile
//! allows, nor for none.
//!
//! Invariants: a requested timeout or memory of zero is refused; one above the maximum is
//! refused; the comparison is exact (a timeout of 30.001 s exceeds a maximum of 30 s). The
//! maximum is the profile's own limits unless the profile's `resource_quota` settings give
//! another ([`ResourceQuota::from_settings`]). This policy only refuses early: the backend
//! enforces whatever limits the execution finally runs with.

use std::time::Duration;

use crate::settings::ResourceQuotaSettings;
use crate::{Policy, PolicyInput, Requested, Violation, ViolationKind};

/// The policy's name in `enabled_policies`.
pub const NAME: &str = "resource_quota";

/// Invalid `resource_quota` settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResourceQuotaError {
    #[error("invalid max_timeout_seconds {value}: expected a positive, finite number of seconds")]
    InvalidMaxTimeout { value: f64 },
    #[error("invalid max_memory_mb 0: expected at least 1")]
    ZeroMaxMemory,
}

/// Refuses requests for zero resources or for more than `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceQuota {
    max: Requested,
}

impl ResourceQuota {
    /// A quota whose maximum is `max` (usually the profile's own timeout and memory).
    pub fn new(max: Requested) -> Self {
        Self { max }
    }

    /// A quota from a profile's settings: each `Some` maximum replaces the matching field of
    /// `profile_max`, each `None` keeps it.
    pub fn from_settings(
        settings: &ResourceQuotaSettings,
        profile_max: Requested,
    ) -> Result<Self, ResourceQuotaError> {
        let timeout = match settings.max_timeout_seconds {
            None => profile_max.timeout,
            Some(value) if value > 0.0 => Duration::try_from_secs_f64(value)
                .map_err(|_| ResourceQuotaError::InvalidMaxTimeout { value })?,
            Some(value) => return Err(ResourceQuotaError::InvalidMaxTimeout { value }),
        };
        let memory_mb = match settings.max_memory_mb {
            None => profile_max.memory_mb,
            Some(0) => return Err(ResourceQuotaError::ZeroMaxMemory),
            Some(value) => value,
        };
        Ok(Self::new(Requested { timeout, memory_mb }))
    }

    /// The maximum this quota allows.
    pub fn max(&self) -> Requested {
        self.max
    }

    fn violation(field: &'static str, requested: u64, maximum: u64, message: String) -> Violation {
        Violation {
            policy: NAME,
            kind: ViolationKind::QuotaExceeded {
                field,
                requested,
                maximum,
            },
            message,
            line: None,
            column: None,
        }
    }
}

impl Policy for ResourceQuota {
    fn name(&self) -> &'static str {
        NAME
    }

    fn check(&self, input: &PolicyInput<'_>) -> Result<(), Violation> {
        let requested = input.requested;
        let (timeout, max_timeout) = (requested.timeout, self.max.timeout);
        if timeout.is_zero() || timeout > max_timeout {
            let message = if timeout.is_zero() {
                "requested timeout 0s: a timeout must be greater than zero".to_owned()
            } else {
                format!(
                    "requested timeout {} exceeds the profile's maximum {}",
                    seconds(timeout),
                    seconds(max_timeout)
                )
            };
            return Err(Self::violation(
                "timeout",
                millis(timeout),
                millis(max_timeout),
                message,
            ));
        }
        let (memory, max_memory) = (requested.memory_mb, self.max.memory_mb);
        if memory == 0 || memory > max_memory {
            let message = if memory == 0 {
                "requested memory 0 MiB: memory must be greater than zero".to_owned()
            } else {
                format!(
                    "requested memory {memory} MiB exceeds the profile's maximum {max_memory} MiB"
                )
            };
            return Err(Self::violation("memory", memory, max_memory, message));
        }
        Ok(())
    }
}

/// Whole milliseconds, rounded up so that a sub-millisecond excess still shows as larger.
fn millis(duration: Duration) -> u64 {
    let nanos = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

/// `30s`, `1.5s`, `0.25s`: seconds without trailing zeros.
fn seconds(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_types::Language;

    fn max() -> Requested {
        Requested {
            timeout: Duration::from_secs(30),
            memory_mb: 128,
        }
    }

    fn check(quota: &ResourceQuota, timeout: Duration, memory_mb: u64) -> Result<(), Violation> {
        let language = Language::new("python").unwrap();
        quota.check(&PolicyInput {
            code: "",
            language: &language,
            requested: Requested { timeout, memory_mb },
        })
    }

    #[test]
    fn within_the_maximum_passes() {
        let quota = ResourceQuota::new(max());
        assert_eq!(check(&quota, Duration::from_secs(30), 128), Ok(()));
        assert_eq!(check(&quota, Duration::from_millis(1), 1), Ok(()));
    }

    #[test]
    fn timeout_above_the_maximum_is_refused() {
        let violation =
            check(&ResourceQuota::new(max()), Duration::from_secs(120), 64).unwrap_err();
        assert_eq!(violation.policy, "resource_quota");
        assert_eq!(
            violation.kind,
            ViolationKind::QuotaExceeded {
                field: "timeout",
                requested: 120_000,
                maximum: 30_000
            }
        );
        assert_eq!(
            violation.message,
            "requested timeout 120s exceeds the profile's maximum 30s"
        );
        assert_eq!((violation.line, violation.column), (None, None));
    }

    #[test]
    fn a_fraction_of_a_second_over_is_refused() {
        let violation = check(
            &ResourceQuota::new(max()),
            Duration::from_millis(30_500),
            64,
        )
        .unwrap_err();
        assert_eq!(
            violation.message,
            "requested timeout 30.5s exceeds the profile's maximum 30s"
        );
        let violation = check(
            &ResourceQuota::new(max()),
            Duration::from_secs(30) + Duration::from_nanos(1),
            64,
        )
        .unwrap_err();
        assert_eq!(
            violation.kind,
            ViolationKind::QuotaExceeded {
                field: "timeout",
                requested: 30_001,
                maximum: 30_000
            }
        );
    }

    #[test]
    fn memory_above_the_maximum_is_refused() {
        let violation = check(&ResourceQuota::new(max()), Duration::from_secs(1), 512).unwrap_err();
        assert_eq!(
            violation.kind,
            ViolationKind::QuotaExceeded {
                field: "memory",
                requested: 512,
                maximum: 128
            }
        );
        assert_eq!(
            violation.message,
            "requested memory 512 MiB exceeds the profile's maximum 128 MiB"
        );
    }

    #[test]
    fn zero_is_refused_and_names_the_field() {
        let quota = ResourceQuota::new(max());
        let violation = check(&quota, Duration::ZERO, 64).unwrap_err();
        assert!(matches!(
            violation.kind,
            ViolationKind::QuotaExceeded {
                field: "timeout",
                requested: 0,
                ..
            }
        ));
        let violation = check(&quota, Duration::from_secs(1), 0).unwrap_err();
        assert!(matches!(
            violation.kind,
            ViolationKind::QuotaExceeded {
                field: "memory",
                requested: 0,
                ..
            }
        ));
        assert_eq!(
            violation.message,
            "requested memory 0 MiB: memory must be greater than zero"
        );
    }

    #[test]
    fn settings_replace_the_profile_maximum_field_by_field() {
        let settings = ResourceQuotaSettings {
            max_timeout_seconds: Some(120.0),
            max_memory_mb: None,
        };
        let quota = ResourceQuota::from_settings(&settings, max()).unwrap();
        assert_eq!(
            quota.max(),
            Requested {
                timeout: Duration::from_secs(120),
                memory_mb: 128
            }
        );
        let defaults = ResourceQuota::from_settings(&ResourceQuotaSettings::default(), max());
        assert_eq!(defaults.unwrap().max(), max());
    }

    #[test]
    fn invalid_settings_are_errors() {
        for value in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e30] {
            let settings = ResourceQuotaSettings {
                max_timeout_seconds: Some(value),
                max_memory_mb: None,
            };
            let error = ResourceQuota::from_settings(&settings, max()).unwrap_err();
            assert!(matches!(
                error,
                ResourceQuotaError::InvalidMaxTimeout { .. }
            ));
        }
        let settings = ResourceQuotaSettings {
            max_timeout_seconds: None,
            max_memory_mb: Some(0),
        };
        assert_eq!(
            ResourceQuota::from_settings(&settings, max())
                .unwrap_err()
                .to_string(),
            "invalid max_memory_mb 0: expected at least 1"
        );
    }
}
