//! The registry: policy names to constructors, and the ordered set a profile enables.
//!
//! Invariants: the registry is one table (`REGISTRY`) of name → constructor; adding a policy
//! means adding a row, nothing else. [`build_policies`] fails closed: an unknown or repeated name,
//! or settings a policy cannot use, is an error, never a set that checks less than it was asked
//! to. A [`PolicySet`] runs its policies in the order of `enabled_policies` and stops at the
//! first violation. An empty set lets everything through.

use crate::forbidden_imports::{self, ForbiddenImports, ForbiddenImportsError};
use crate::resource_quota::{self, ResourceQuota, ResourceQuotaError};
use crate::settings::PolicySettings;
use crate::{Policy, PolicyInput, Requested, Violation};

/// A profile's policies could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown policy {name:?} in enabled_policies (known: {known})")]
    UnknownPolicy { name: String, known: String },
    #[error("policy {name:?} is listed more than once in enabled_policies")]
    DuplicatePolicy { name: String },
    #[error("invalid forbidden_imports settings: {0}")]
    ForbiddenImports(#[from] ForbiddenImportsError),
    #[error("invalid resource_quota settings: {0}")]
    ResourceQuota(#[from] ResourceQuotaError),
}

/// What a constructor gets: the profile's policy settings and limits.
#[derive(Debug, Clone, Copy)]
struct BuildContext<'a> {
    settings: &'a PolicySettings,
    strict_mode: bool,
    profile_max: Requested,
}

/// One row of the registry.
struct Registration {
    name: &'static str,
    build: fn(&BuildContext<'_>) -> Result<Box<dyn Policy>, PolicyError>,
}

/// Every policy Warden knows, by name.
const REGISTRY: [Registration; 2] = [
    Registration {
        name: forbidden_imports::NAME,
        build: |context| {
            let policy =
                ForbiddenImports::new(&context.settings.forbidden_imports, context.strict_mode)?;
            Ok(Box::new(policy))
        },
    },
    Registration {
        name: resource_quota::NAME,
        build: |context| {
            let policy = ResourceQuota::from_settings(
                &context.settings.resource_quota,
                context.profile_max,
            )?;
            Ok(Box::new(policy))
        },
    },
];

/// The registry's names, in its order.
const KNOWN: [&str; REGISTRY.len()] = {
    let mut names = [""; REGISTRY.len()];
    let mut i = 0;
    while i < REGISTRY.len() {
        names[i] = REGISTRY[i].name;
        i += 1;
    }
    names
};

/// The names `enabled_policies` may contain: `["forbidden_imports", "resource_quota"]`.
pub fn known_policies() -> &'static [&'static str] {
    &KNOWN
}

/// Builds the policies a profile enables, in the order given.
///
/// `settings` are the profile's `policies` table, `strict_mode` its `strict_mode`, and
/// `profile_max` its own timeout and memory (the quota's maximum unless `settings` say
/// otherwise).
pub fn build_policies(
    enabled: &[String],
    settings: &PolicySettings,
    strict_mode: bool,
    profile_max: Requested,
) -> Result<PolicySet, PolicyError> {
    let context = BuildContext {
        settings,
        strict_mode,
        profile_max,
    };
    let mut policies: Vec<Box<dyn Policy>> = Vec::with_capacity(enabled.len());
    for name in enabled {
        let Some(registration) = REGISTRY.iter().find(|row| row.name == name) else {
            return Err(PolicyError::UnknownPolicy {
                name: name.clone(),
                known: known_policies().join(", "),
            });
        };
        if policies
            .iter()
            .any(|policy| policy.name() == registration.name)
        {
            return Err(PolicyError::DuplicatePolicy { name: name.clone() });
        }
        policies.push((registration.build)(&context)?);
    }
    Ok(PolicySet { policies })
}

/// The policies of one profile, in order.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: Vec<Box<dyn Policy>>,
}

impl PolicySet {
    /// Runs every policy in order; the first violation wins.
    pub fn check_all(&self, input: &PolicyInput<'_>) -> Result<(), Violation> {
        self.policies
            .iter()
            .try_for_each(|policy| policy.check(input))
    }

    /// The names of the policies, in the order they run.
    pub fn names(&self) -> Vec<&'static str> {
        self.policies.iter().map(|policy| policy.name()).collect()
    }

    /// Whether the set has no policy (and so lets everything through).
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ViolationKind;
    use std::time::Duration;
    use warden_types::Language;

    fn max() -> Requested {
        Requested {
            timeout: Duration::from_secs(30),
            memory_mb: 128,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|&name| name.to_owned()).collect()
    }

    fn build(list: &[&str]) -> Result<PolicySet, PolicyError> {
        build_policies(&names(list), &PolicySettings::default(), true, max())
    }

    fn check(set: &PolicySet, code: &str, requested: Requested) -> Result<(), Violation> {
        let language = Language::new("python").unwrap();
        set.check_all(&PolicyInput {
            code,
            language: &language,
            requested,
        })
    }

    #[test]
    fn known_policies_are_the_registry() {
        assert_eq!(known_policies(), ["forbidden_imports", "resource_quota"]);
    }

    #[test]
    fn an_unknown_name_is_an_error_listing_the_known_ones() {
        let error = build(&["forbidden_imports", "x"]).unwrap_err();
        assert_eq!(
            error,
            PolicyError::UnknownPolicy {
                name: "x".into(),
                known: "forbidden_imports, resource_quota".into()
            }
        );
        assert_eq!(
            error.to_string(),
            "unknown policy \"x\" in enabled_policies (known: forbidden_imports, resource_quota)"
        );
    }

    #[test]
    fn a_repeated_name_is_an_error() {
        let error = build(&["resource_quota", "resource_quota"]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "policy \"resource_quota\" is listed more than once in enabled_policies"
        );
    }

    #[test]
    fn policies_run_in_the_order_enabled() {
        let too_much = Requested {
            timeout: Duration::from_secs(60),
            memory_mb: 64,
        };
        let imports_first = build(&["forbidden_imports", "resource_quota"]).unwrap();
        assert_eq!(
            imports_first.names(),
            ["forbidden_imports", "resource_quota"]
        );
        let violation = check(&imports_first, "import os\n", too_much).unwrap_err();
        assert_eq!(violation.policy, "forbidden_imports");

        let quota_first = build(&["resource_quota", "forbidden_imports"]).unwrap();
        assert_eq!(quota_first.names(), ["resource_quota", "forbidden_imports"]);
        let violation = check(&quota_first, "import os\n", too_much).unwrap_err();
        assert_eq!(violation.policy, "resource_quota");
        assert!(matches!(
            violation.kind,
            ViolationKind::QuotaExceeded {
                field: "timeout",
                ..
            }
        ));

        assert_eq!(check(&quota_first, "import math\n", max()), Ok(()));
    }

    #[test]
    fn an_empty_set_passes_everything() {
        let set = build(&[]).unwrap();
        assert!(set.is_empty());
        assert!(set.names().is_empty());
        let nothing = Requested {
            timeout: Duration::ZERO,
            memory_mb: 0,
        };
        assert_eq!(check(&set, "import os\nprint((\n", nothing), Ok(()));
    }

    #[test]
    fn invalid_settings_fail_the_build() {
        let mut settings = PolicySettings::default();
        settings.resource_quota.max_memory_mb = Some(0);
        let error =
            build_policies(&names(&["resource_quota"]), &settings, true, max()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid resource_quota settings: invalid max_memory_mb 0: expected at least 1"
        );
        // Settings of a policy that is not enabled are not used.
        assert!(build_policies(&names(&["forbidden_imports"]), &settings, true, max()).is_ok());

        let mut settings = PolicySettings::default();
        settings.forbidden_imports.allowed_modules = vec![String::new()];
        let error =
            build_policies(&names(&["forbidden_imports"]), &settings, true, max()).unwrap_err();
        assert!(matches!(error, PolicyError::ForbiddenImports(_)));
    }

    #[test]
    fn strict_mode_reaches_forbidden_imports() {
        let code = "__import__('o' + 's')\n";
        let enabled = names(&["forbidden_imports"]);
        let settings = PolicySettings::default();
        let strict = build_policies(&enabled, &settings, true, max()).unwrap();
        let lenient = build_policies(&enabled, &settings, false, max()).unwrap();
        assert_eq!(
            check(&strict, code, max()).unwrap_err().kind,
            ViolationKind::DynamicImport
        );
        assert_eq!(check(&lenient, code, max()), Ok(()));
    }
}
