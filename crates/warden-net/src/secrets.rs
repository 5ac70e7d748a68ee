//! Brokered secrets as a backend hands them to a sandbox: which of the settings'
//! `[sandbox.secrets]` a profile names, with their placeholders ([`brokered`]), and what the
//! sandbox is given instead of the values — the per-sandbox CA bundle at
//! [`GATEWAY_CA_BUNDLE`], the variables that point TLS clients at it, and each secret's
//! placeholder in its variable ([`sandbox_env`]). One place for the jail and docker.
//!
//! Invariants: a placeholder carries a random token of this process and the secret's name,
//! never anything derived from the value; [`sandbox_env`] never contains a value; values
//! are read only when asked (`with_values`), for the gateway, never for checks.

use crate::plan::BrokeredSecret;
use std::collections::BTreeMap;
use warden_types::egress::{EgressPolicy, SecretSetting};

/// Where a sandbox with brokered secrets finds its CA bundle (read-only).
pub const GATEWAY_CA_BUNDLE: &str = "/etc/warden/ca-bundle.pem";

/// The variables that point the usual TLS clients at [`GATEWAY_CA_BUNDLE`]: OpenSSL (Python's
/// ssl and urllib, curl's OpenSSL), curl, requests, Node, pip.
pub const CA_BUNDLE_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
];

/// A random token of this process, in every placeholder it hands out: a placeholder says
/// nothing about its value, and differs between daemons.
fn placeholder_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let mut b = [0u8; 12];
        // SAFETY: getrandom fills the buffer it is given.
        unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        b.iter().map(|x| format!("{x:02x}")).collect()
    })
}

/// The profile's brokered secrets (`egress.secrets`), with their values read now
/// (`with_values`) or left empty; the error names the secret and why.
pub fn brokered(
    settings: &BTreeMap<String, SecretSetting>,
    egress: &EgressPolicy,
    with_values: bool,
) -> Result<Vec<BrokeredSecret>, String> {
    let mut out = Vec::new();
    for name in &egress.secrets {
        let s = settings
            .get(name)
            .ok_or_else(|| format!("egress.secrets: no secret {name:?} in [sandbox.secrets]"))?;
        let value = if with_values {
            s.read_value()
                .map_err(|why| format!("secret {name:?}: {why}"))?
        } else {
            String::new()
        };
        out.push(BrokeredSecret {
            name: name.clone(),
            env: s.env.clone().unwrap_or_else(|| name.to_ascii_uppercase()),
            placeholder: format!(
                "WARDEN_SECRET_{}_{}",
                name.to_ascii_uppercase(),
                placeholder_token()
            ),
            value,
            hosts: s.hosts.clone(),
            header: s.header.to_ascii_lowercase(),
        });
    }
    Ok(out)
}

/// The variables a sandbox with these secrets gets: the CA bundle's for each TLS client,
/// then each secret's placeholder. Empty without secrets.
pub fn sandbox_env(secrets: &[BrokeredSecret]) -> Vec<(String, String)> {
    if secrets.is_empty() {
        return Vec::new();
    }
    CA_BUNDLE_VARIABLES
        .iter()
        .map(|v| (v.to_string(), GATEWAY_CA_BUNDLE.to_owned()))
        .chain(
            secrets
                .iter()
                .map(|s| (s.env.clone(), s.placeholder.clone())),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_gets_placeholders_and_the_bundle_never_values() {
        let settings: BTreeMap<String, SecretSetting> = serde_json::from_str(
            r#"{"api": {"from_env": "WARDEN_TEST_SECRETS_RS", "hosts": ["api.test"], "header": "Authorization"}}"#,
        )
        .unwrap();
        let egress = EgressPolicy {
            secrets: vec!["api".into()],
            ..Default::default()
        };
        let s = brokered(&settings, &egress, false).unwrap();
        assert_eq!(s[0].env, "API");
        assert!(s[0].placeholder.starts_with("WARDEN_SECRET_API_"));
        assert_eq!(s[0].value, "");
        assert_eq!(s[0].header, "authorization");
        let env = sandbox_env(&s);
        assert_eq!(env.len(), CA_BUNDLE_VARIABLES.len() + 1);
        assert!(env.contains(&("API".into(), s[0].placeholder.clone())));
        assert!(env.contains(&("NODE_EXTRA_CA_CERTS".into(), GATEWAY_CA_BUNDLE.into())));
        assert!(sandbox_env(&[]).is_empty());
        let unknown = EgressPolicy {
            secrets: vec!["nope".into()],
            ..Default::default()
        };
        assert_eq!(
            brokered(&settings, &unknown, false).unwrap_err(),
            r#"egress.secrets: no secret "nope" in [sandbox.secrets]"#
        );
    }
}
