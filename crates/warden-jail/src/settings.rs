//! What the jail backend takes from the settings ([`JailSettings`], [`NetSettings`]), and what a
//! networked sandbox asks of the host ([`net_request`]).
//!
//! Invariants: the backend never reads the settings file — the binary maps it to these
//! structs; a networked sandbox without an upstream resolver is refused, never run with the
//! host's network.

use crate::plan::IdMap;
use std::path::PathBuf;
use warden_engine::BackendError;

/// What the jail needs from the settings.
#[derive(Debug, Clone)]
pub struct JailSettings {
    pub host_paths: Vec<PathBuf>,
    /// See [`crate::cgroup::ensure_fast_attach`].
    pub fast_cgroup_attach: bool,
    pub ids: IdMap,
    /// The binary to re-execute as the helper (normally the running `warden`).
    pub helper_exe: PathBuf,
    /// How helpers are started.
    pub helper_start: HelperStart,
    /// Block until a forked helper has removed its sandbox, after the result is in. A process
    /// about to exit must: as pid 1 of a pid namespace (a container's entry point), its exit
    /// would kill the helper before its clean-up.
    pub wait_for_teardown: bool,
    /// The host side of networked sandboxes.
    pub network: NetSettings,
}

/// How the backend starts its helpers (see [`crate::launcher`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelperStart {
    /// Exec each helper (the binary re-executed in helper mode).
    Exec,
    /// Fork the helper when this process has a single thread (the one-shot CLI: the plan is
    /// already in memory, and no exec); exec it otherwise.
    ForkWhenSingleThreaded,
    /// Fork each helper from a fork server, a helper process exec'd once: a daemon, which
    /// starts a helper per sandbox.
    ForkServer,
}

/// How networked sandboxes are wired to the host (`[sandbox.jail.network]`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetSettings {
    /// The IPv4 range cut into one /30 per networked sandbox.
    pub pool: warden_types::egress::Cidr,
    /// The IPv6 range cut into one /126 per networked sandbox (same index as its /30).
    pub pool6: warden_types::egress::Cidr,
    /// The resolver the per-sandbox DNS server asks; `None`: the host's /etc/resolv.conf.
    pub upstream_dns: Option<std::net::SocketAddr>,
    /// The brokered secrets profiles may name (`[sandbox.secrets]`).
    pub secrets: std::collections::BTreeMap<String, warden_types::egress::SecretSetting>,
    /// CA certificates the gateway trusts, besides the host's, towards secrets' hosts.
    pub upstream_ca_file: Option<PathBuf>,
}

impl Default for NetSettings {
    fn default() -> Self {
        NetSettings {
            pool: warden_net::DEFAULT_POOL.parse().expect("a valid CIDR"),
            pool6: warden_net::DEFAULT_POOL6.parse().expect("a valid CIDR"),
            upstream_dns: None,
            secrets: Default::default(),
            upstream_ca_file: None,
        }
    }
}

/// The profile's brokered secrets ([`warden_net::secrets::brokered`]), refused by name.
fn brokered(
    settings: &NetSettings,
    egress: &warden_types::egress::EgressPolicy,
    with_values: bool,
) -> Result<Vec<warden_net::plan::BrokeredSecret>, BackendError> {
    warden_net::secrets::brokered(&settings.secrets, egress, with_values)
        .map_err(BackendError::Refused)
}

/// What a networked sandbox asks of the host; `None` for an offline one.
pub(crate) fn net_request(
    settings: &NetSettings,
    network_enabled: bool,
    egress: &warden_types::egress::EgressPolicy,
) -> Result<Option<warden_net::NetRequest>, BackendError> {
    request(settings, network_enabled, egress, true)
}

/// [`net_request`] without reading brokered secrets' values (for checks, which need none).
pub(crate) fn net_request_without_values(
    settings: &NetSettings,
    network_enabled: bool,
    egress: &warden_types::egress::EgressPolicy,
) -> Result<Option<warden_net::NetRequest>, BackendError> {
    request(settings, network_enabled, egress, false)
}

fn request(
    settings: &NetSettings,
    network_enabled: bool,
    egress: &warden_types::egress::EgressPolicy,
    with_values: bool,
) -> Result<Option<warden_net::NetRequest>, BackendError> {
    if !network_enabled {
        return Ok(None);
    }
    let upstream_dns = match settings.upstream_dns {
        Some(a) => a,
        None => std::fs::read_to_string("/etc/resolv.conf")
            .ok()
            .and_then(|s| warden_net::keeper::first_nameserver(&s))
            .ok_or_else(|| {
                BackendError::Refused(
                    "network_enabled = true: no upstream resolver (set [sandbox.jail.network].upstream_dns, or a nameserver in /etc/resolv.conf)".into(),
                )
            })?,
    };
    let secrets = brokered(settings, egress, with_values)?;
    let upstream_ca_pem = match (&settings.upstream_ca_file, secrets.is_empty()) {
        (Some(path), false) => Some(std::fs::read_to_string(path).map_err(|e| {
            BackendError::Refused(format!(
                "[sandbox.jail.network].upstream_ca_file: read {}: {e}",
                path.display()
            ))
        })?),
        _ => None,
    };
    Ok(Some(warden_net::NetRequest {
        egress: egress.clone(),
        pool: settings.pool,
        pool6: settings.pool6,
        upstream_dns,
        secrets,
        upstream_ca_pem,
    }))
}
