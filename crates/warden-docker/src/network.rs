//! Controlled egress for networked containers (`network_enabled = true`): the container is
//! created with the network mode `none` and its network disabled (its own, empty network
//! namespace; no Docker bridge, no Docker DNS, no engine network sandbox), and Warden's own
//! link, firewall and resolver are attached to that namespace by a keeper process
//! ([`warden_net::keeper`]) started after the container, before the program gets its code;
//! the resolver's address reaches the container through a resolv.conf file Warden writes
//! ([`run_file`], bound read-only). The rules are the jail's, from the same code and the same
//! address pool and slot locks, so a jail sandbox and a container never share a slot.
//!
//! A profile with an egress gateway gets the jail's gateway (forked by the keeper) and its
//! report: after each execution the backend asks the keeper for the events since the last
//! ([`Keeper::egress_report`]), so results carry `egress_denied`, `egress_allowed` and
//! `secrets_used` as the jail's do. Brokered secrets: the container gets the placeholders and
//! the CA bundle variables in its environment ([`warden_net::secrets::sandbox_env`]) and the
//! bundle bound read-only at [`warden_net::secrets::GATEWAY_CA_BUNDLE`] (a [`RunFile`] the
//! keeper fills); the values go to the keeper on its stdin and never into the container's
//! configuration, environment or files.
//!
//! Why not a Docker network: a user-defined bridge puts every sandbox on one L2 segment
//! (sandbox-to-sandbox traffic would bypass the forward hook unless `br_netfilter` is loaded),
//! Docker's embedded DNS answers every name (no allow-list, no pinning), and the rules would
//! have to live in Docker's iptables chains, which Docker rewrites; `none` plus Warden's own
//! veth pair keeps one implementation of the rules for both backends.
//!
//! Invariants: the program of a networked container never starts before the keeper said
//! `ready` (its firewall committed): a one-shot's wrapper waits for its code on stdin, which
//! is sent only after that, and a persistent sandbox is handed out only after that; the keeper
//! is stopped after the container is removed (its rules outlive the link, never the other way
//! round); a keeper that is dropped without [`Keeper::stop`] still tears everything down (it
//! sees end of input); no secret's value is in anything given to the engine; gVisor (`runsc`) is refused, because its netstack takes the namespace's
//! interfaces when the sandbox starts, before Warden's link exists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use warden_engine::BackendError;
use warden_net::keeper::{KEEPER_ENV, KeeperCommand, KeeperReply, KeeperRequest};
use warden_net::{Interface, NetRequest};
use warden_types::egress::{Cidr, EgressPolicy};

/// How networked containers are wired to the host: the jail's `[sandbox.jail.network]`
/// (one pool for both backends) and the executable that is the keeper.
#[derive(Debug, Clone, PartialEq)]
pub struct NetSettings {
    /// The IPv4 range cut into one /30 per networked sandbox, shared with the jail.
    pub pool: Cidr,
    /// The IPv6 range cut into one /126 per networked sandbox, shared with the jail.
    pub pool6: Cidr,
    /// The resolver Warden's per-sandbox DNS server asks; `None`: the host's /etc/resolv.conf.
    pub upstream_dns: Option<SocketAddr>,
    /// The `warden` binary (started with `WARDEN_NET_KEEPER=1`); `None`: networked profiles
    /// are refused.
    pub keeper_exe: Option<PathBuf>,
    /// Where slot locks live (shared with the jail).
    pub run_dir: PathBuf,
    /// The brokered secrets profiles may name (`[sandbox.secrets]`, shared with the jail).
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
            keeper_exe: None,
            run_dir: PathBuf::from(warden_net::RUN_DIR),
            secrets: Default::default(),
            upstream_ca_file: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// The host (or these settings) cannot give the container a controlled network.
    #[error("network_enabled = true: {0}")]
    Refused(String),
    #[error("start the network keeper {exe}: {message}")]
    Start { exe: String, message: String },
    #[error("the network keeper failed: {0}")]
    Keeper(String),
    #[error("the network keeper did not answer within {}s", .0.as_secs_f64())]
    Deadline(Duration),
}

impl From<NetError> for BackendError {
    fn from(e: NetError) -> Self {
        match e {
            NetError::Refused(_) => BackendError::Refused(e.to_string()),
            NetError::Start { .. } | NetError::Keeper(_) | NetError::Deadline(_) => {
                BackendError::Setup(e.to_string())
            }
        }
    }
}

/// What a networked sandbox asks of the host (the jail's rules: one [`NetRequest`]), with
/// its brokered secrets' values read now (`with_values`: for the keeper) or left empty (for
/// checks).
pub fn request(
    settings: &NetSettings,
    egress: &EgressPolicy,
    with_values: bool,
) -> Result<NetRequest, NetError> {
    let secrets = warden_net::secrets::brokered(&settings.secrets, egress, with_values)
        .map_err(NetError::Refused)?;
    let upstream_ca_pem = match (&settings.upstream_ca_file, secrets.is_empty()) {
        (Some(path), false) if with_values => Some(std::fs::read_to_string(path).map_err(|e| {
            NetError::Refused(format!(
                "[sandbox.jail.network].upstream_ca_file: read {}: {e}",
                path.display()
            ))
        })?),
        _ => None,
    };
    let upstream_dns = match settings.upstream_dns {
        Some(a) => a,
        None => std::fs::read_to_string("/etc/resolv.conf")
            .ok()
            .and_then(|s| warden_net::keeper::first_nameserver(&s))
            .ok_or_else(|| {
                NetError::Refused(
                    "no upstream resolver (set [sandbox.jail.network].upstream_dns, or a nameserver in /etc/resolv.conf)".into(),
                )
            })?,
    };
    Ok(NetRequest {
        egress: egress.clone(),
        pool: settings.pool,
        pool6: settings.pool6,
        upstream_dns,
        secrets,
        upstream_ca_pem,
    })
}

/// The files Warden writes for a networked container and binds read-only into it, each
/// filled by the keeper once the network is up (in place: the bind shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunFile {
    /// Its `/etc/resolv.conf`.
    ResolvConf,
    /// Its CA bundle ([`warden_net::secrets::GATEWAY_CA_BUNDLE`]), with brokered secrets.
    CaBundle,
}

impl RunFile {
    fn suffix(self) -> &'static str {
        match self {
            RunFile::ResolvConf => "resolv.conf",
            RunFile::CaBundle => "ca-bundle.pem",
        }
    }
}

/// The file `which` of the networked container `container`: under the slot-lock folder, a
/// tmpfs, so nothing stays after a reboot.
pub fn run_file(settings: &NetSettings, container: &str, which: RunFile) -> PathBuf {
    // One file name, whatever the container's name holds (never a path out of the folder).
    let name: String = container
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    settings
        .run_dir
        .join("docker")
        .join(format!("{name}.{}", which.suffix()))
}

/// Creates the (still empty) file `which` of `container`, world-readable.
pub fn create_run_file(
    settings: &NetSettings,
    container: &str,
    which: RunFile,
) -> Result<PathBuf, NetError> {
    let path = run_file(settings, container, which);
    let made = path
        .parent()
        .map(std::fs::create_dir_all)
        .unwrap_or(Ok(()))
        .and_then(|()| std::fs::write(&path, b""));
    made.map_err(|e| NetError::Keeper(format!("create {}: {e}", path.display())))?;
    Ok(path)
}

/// Removes the files Warden wrote for `container` (gone already: fine).
pub fn remove_run_files(settings: &NetSettings, container: &str) {
    for which in [RunFile::ResolvConf, RunFile::CaBundle] {
        let _ = std::fs::remove_file(run_file(settings, container, which));
    }
}

/// Refuses, before any container exists, what the keeper could not enforce here.
pub fn check(settings: &NetSettings, req: &NetRequest) -> Result<(), NetError> {
    match &settings.keeper_exe {
        Some(exe) if exe.is_file() => {}
        Some(exe) => {
            return Err(NetError::Refused(format!(
                "the network keeper {} does not exist",
                exe.display()
            )));
        }
        None => {
            return Err(NetError::Refused(
                "this docker backend has no network keeper (the `warden` binary) configured".into(),
            ));
        }
    }
    warden_net::check(req).map_err(|e| NetError::Refused(e.to_string()))
}

/// A running keeper: holds one container's link, firewall and resolver.
#[derive(Debug)]
pub struct Keeper {
    child: tokio::process::Child,
    /// Closing it tells the keeper to remove everything.
    stdin: Option<tokio::process::ChildStdin>,
    /// Its answers to commands (after the first line).
    stdout: BufReader<tokio::process::ChildStdout>,
    pub interface: Interface,
    pub resolv_conf: String,
    pub host_if: String,
}

impl Keeper {
    /// Starts a keeper for the network namespace of `pid` and waits for it to be ready.
    pub async fn start(
        settings: &NetSettings,
        request: NetRequest,
        pid: i32,
        resolv_conf: Option<PathBuf>,
        ca_bundle: Option<PathBuf>,
        deadline: Duration,
    ) -> Result<Keeper, NetError> {
        let exe = settings
            .keeper_exe
            .clone()
            .ok_or_else(|| NetError::Refused("no network keeper configured".into()))?;
        let start_error = |e: std::io::Error| NetError::Start {
            exe: exe.display().to_string(),
            message: e.to_string(),
        };
        let mut child = tokio::process::Command::new(&exe)
            .env_clear()
            .env(KEEPER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C meant for the CLI must not kill it before it
            // removed the rules (it ends when its input closes).
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .map_err(start_error)?;
        let mut stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = serde_json::to_string(&KeeperRequest {
            request,
            pid,
            run_dir: settings.run_dir.clone(),
            resolv_conf,
            ca_bundle,
        })
        .map_err(|e| NetError::Keeper(e.to_string()))?;
        line.push('\n');
        let answer = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await?;
            let mut reply = String::new();
            stdout.read_line(&mut reply).await?;
            Ok::<String, std::io::Error>(reply)
        };
        let reply = match tokio::time::timeout(deadline, answer).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                let _ = child.start_kill();
                return Err(NetError::Keeper(e.to_string()));
            }
            Err(_) => {
                // Killed mid-setup: its slot stays dirty and is emptied by its next user.
                let _ = child.start_kill();
                return Err(NetError::Deadline(deadline));
            }
        };
        match serde_json::from_str::<KeeperReply>(&reply) {
            Ok(KeeperReply::Ready {
                interface,
                resolv_conf,
                host_if,
            }) => Ok(Keeper {
                child,
                stdin: Some(stdin),
                stdout,
                interface,
                resolv_conf,
                host_if,
            }),
            Ok(KeeperReply::Refused { message }) => Err(NetError::Refused(message)),
            Ok(KeeperReply::Failed { message }) => Err(NetError::Keeper(message)),
            Err(_) => {
                let _ = child.start_kill();
                Err(NetError::Keeper(format!(
                    "unexpected answer {:?}",
                    reply.trim()
                )))
            }
        }
    }

    /// What the sandbox's egress gateway reported since the last call (`finish`: stopping
    /// the gateway, with the connections still open). A keeper that does not answer within
    /// `deadline` gives an empty report (the run's result does not wait on it).
    pub async fn egress_report(
        &mut self,
        finish: bool,
        deadline: Duration,
    ) -> warden_types::egress::EgressReport {
        let command = if finish {
            KeeperCommand::Finish
        } else {
            KeeperCommand::Report
        };
        self.command(command, deadline)
            .await
            .and_then(|reply| serde_json::from_str(&reply).ok())
            .unwrap_or_default()
    }

    /// Gives the container's running gateway new rules (taken for every connection opened
    /// after this returned `Ok`).
    pub async fn set_rules(
        &mut self,
        rules: warden_types::egress::GatewayRules,
        deadline: Duration,
    ) -> Result<(), NetError> {
        self.command(KeeperCommand::Rules(rules), deadline)
            .await
            .map(drop)
            .ok_or_else(|| NetError::Keeper("the network keeper did not take the new rules".into()))
    }

    /// Sends one command and returns the keeper's one-line answer (`None`: it did not
    /// answer within `deadline`, or is gone).
    async fn command(&mut self, command: KeeperCommand, deadline: Duration) -> Option<String> {
        let stdin = self.stdin.as_mut()?;
        let mut line = serde_json::to_string(&command).expect("a command serializes");
        line.push('\n');
        let stdout = &mut self.stdout;
        let asked = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await?;
            let mut reply = String::new();
            stdout.read_line(&mut reply).await?;
            Ok::<String, std::io::Error>(reply)
        };
        match tokio::time::timeout(deadline, asked).await {
            Ok(Ok(reply)) if !reply.is_empty() => Some(reply),
            _ => None,
        }
    }

    /// Tells the keeper to remove everything and waits for it (at most `deadline`; after
    /// that it is killed, which leaves a dirty slot for its next user or the sweep).
    pub async fn stop(mut self, deadline: Duration) {
        drop(self.stdin.take());
        if tokio::time::timeout(deadline, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // End of input: the keeper removes everything on its own.
        drop(self.stdin.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_use_the_configured_resolver_and_pool() {
        let settings = NetSettings {
            upstream_dns: Some("192.0.2.53:53".parse().unwrap()),
            ..Default::default()
        };
        let egress = EgressPolicy {
            allow_domains: vec!["pypi.org".parse().unwrap()],
            ..Default::default()
        };
        let r = request(&settings, &egress, false).unwrap();
        assert_eq!(r.upstream_dns, "192.0.2.53:53".parse().unwrap());
        assert_eq!(r.pool, settings.pool);
        assert_eq!(r.egress, egress);
    }

    #[test]
    fn run_files_stay_in_their_folder() {
        let settings = NetSettings {
            run_dir: "/run/warden/net".into(),
            ..Default::default()
        };
        assert_eq!(
            run_file(&settings, "warden-run-1a", RunFile::ResolvConf),
            PathBuf::from("/run/warden/net/docker/warden-run-1a.resolv.conf")
        );
        assert_eq!(
            run_file(&settings, "../../etc/x", RunFile::CaBundle),
            PathBuf::from("/run/warden/net/docker/______etc_x.ca-bundle.pem")
        );
    }

    #[test]
    fn without_a_keeper_networked_profiles_are_refused() {
        let settings = NetSettings {
            upstream_dns: Some("192.0.2.53:53".parse().unwrap()),
            ..Default::default()
        };
        let r = request(&settings, &EgressPolicy::default(), false).unwrap();
        let e = check(&settings, &r).unwrap_err();
        assert!(matches!(e, NetError::Refused(_)), "{e}");
        assert!(matches!(BackendError::from(e), BackendError::Refused(_)));
        let missing = NetSettings {
            keeper_exe: Some("/nonexistent/warden".into()),
            ..settings
        };
        assert!(
            check(&missing, &r)
                .unwrap_err()
                .to_string()
                .contains("/nonexistent/warden")
        );
    }
}
