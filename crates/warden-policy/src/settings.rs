//! Per-profile policy settings: the `[sandbox.profiles.NAME.policies]` table of settings.toml.
//!
//! ```toml
//! [sandbox.profiles.standard.policies.forbidden_imports]
//! allowed_modules = ["math", "datetime", "json", "random", "string"]
//!
//! [sandbox.profiles.standard.policies.resource_quota]
//! max_timeout_seconds = 60
//! max_memory_mb = 512
//! ```
//!
//! Invariants: unknown keys are errors; every field has a documented default, and the default is
//! the restrictive choice (the checked-in allow-list, the profile's own limits as the maximum).
//! These are plain data: they are validated when a [`crate::PolicySet`] is built, not here.

use serde::Deserialize;

use crate::forbidden_imports::default_allowed_modules;

/// Settings of every policy, for one profile. Settings of a policy that is not in the profile's
/// `enabled_policies` are accepted and unused.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicySettings {
    /// Settings of `forbidden_imports`. Default: see [`ForbiddenImportsSettings`].
    pub forbidden_imports: ForbiddenImportsSettings,
    /// Settings of `resource_quota`. Default: see [`ResourceQuotaSettings`].
    pub resource_quota: ResourceQuotaSettings,
}

/// Settings of the `forbidden_imports` policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForbiddenImportsSettings {
    /// The modules code may import. An entry `a` allows `a` and every `a.*`; an entry `a.b`
    /// allows only `a.b` and its children. Setting it replaces the default list, it does not
    /// extend it.
    ///
    /// Default: the checked-in list `data/default_allowed_modules.toml` (pure-computation parts
    /// of the standard library plus numpy, pandas, scipy and matplotlib; no `os`, `sys`,
    /// `subprocess`, `socket`, `ctypes`, `importlib`, `builtins`, …).
    pub allowed_modules: Vec<String>,
}

impl Default for ForbiddenImportsSettings {
    fn default() -> Self {
        Self {
            allowed_modules: default_allowed_modules()
                .iter()
                .map(|module| module.name.clone())
                .collect(),
        }
    }
}

/// Settings of the `resource_quota` policy.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceQuotaSettings {
    /// The longest timeout a request may ask for, in seconds (a positive, finite number).
    /// Default: none, meaning the profile's own `timeout_seconds` is the maximum.
    pub max_timeout_seconds: Option<f64>,
    /// The most memory a request may ask for, in MiB (at least 1).
    /// Default: none, meaning the profile's own `max_memory_mb` is the maximum.
    pub max_memory_mb: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_table_gives_the_defaults() {
        let settings: PolicySettings = toml::from_str("").unwrap();
        assert_eq!(settings, PolicySettings::default());
        assert!(
            settings
                .forbidden_imports
                .allowed_modules
                .contains(&"math".to_owned())
        );
        assert_eq!(settings.resource_quota.max_timeout_seconds, None);
        assert_eq!(settings.resource_quota.max_memory_mb, None);
    }

    #[test]
    fn allowed_modules_replaces_the_default_list() {
        let settings: PolicySettings = toml::from_str(
            r#"
            [forbidden_imports]
            allowed_modules = ["math", "json"]
            [resource_quota]
            max_timeout_seconds = 1.5
            max_memory_mb = 256
            "#,
        )
        .unwrap();
        assert_eq!(settings.forbidden_imports.allowed_modules, ["math", "json"]);
        assert_eq!(settings.resource_quota.max_timeout_seconds, Some(1.5));
        assert_eq!(settings.resource_quota.max_memory_mb, Some(256));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let error = toml::from_str::<PolicySettings>("[forbidden_imports]\nallowed = []\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `allowed`"), "{error}");
        let error = toml::from_str::<PolicySettings>("[network]\n").unwrap_err();
        assert!(error.to_string().contains("unknown field `network`"));
    }
}
