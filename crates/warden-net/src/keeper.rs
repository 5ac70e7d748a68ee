//! The keeper: a small single-threaded process (the `warden` binary started with
//! [`KEEPER_ENV`] set) that holds one networked container's network for as long as the
//! container lives. Backends whose sandboxes are not started by Warden's own helper (the
//! docker backend) use it, because [`crate::attach`] forks the resolver and must run in a
//! single-threaded process, and because the lease, the rules and the resolver must outlive
//! the call that set them up.
//!
//! The protocol, over the keeper's stdin and stdout:
//! 1. the backend writes one JSON line, a [`KeeperRequest`] (the request, the pid whose
//!    network namespace the sandbox end goes into, the folder of slot locks);
//! 2. the keeper checks the host, attaches the link and the resolver, configures the sandbox
//!    end from inside the namespace (`setns`, then back), waits for the firewall, and answers
//!    one JSON line, a [`KeeperReply`];
//!    (having first written the sandbox's resolv.conf into the file it was given, if any);
//!    (and the sandbox's CA bundle into the file it was given, for brokered secrets);
//! 3. it then answers commands, one line each ([`KeeperCommand`]): the egress gateway's report
//!    since the last one (`report`) or with the gateway stopped (`finish`), or new rules for
//!    the running gateway (`rules`), one JSON line of [`EgressReport`] each;
//! 4. at end of input — the backend closing its stdin (destroy), or the backend dying (the
//!    kernel closes the pipe) — it removes everything ([`crate::Attached`]'s drop, the
//!    resolv.conf file and the CA bundle file).
//!
//! Invariants: a `Ready` reply is only sent after the firewall transaction committed and the
//! sandbox end is addressed, so a backend that lets the program start only after `Ready`
//! never runs it without its rules; a keeper that is killed leaves what a crashed jail helper
//! leaves (a dirty slot: emptied by the slot's next user or by [`crate::sweep`]; the resolver
//! dies with it by its parent-death signal; the veth pair dies with the container's
//! namespace); the keeper never leaves the host's network namespace for longer than the
//! configuration of the sandbox end, and exits if it cannot go back.

use crate::host::HostError;
use crate::plan::{Interface, NetRequest};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use warden_types::egress::EgressReport;

/// Set (to any value) in the environment of a `warden` process that is to be a keeper.
pub const KEEPER_ENV: &str = "WARDEN_NET_KEEPER";

/// What the backend asks of a keeper (its first line of input).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeeperRequest {
    pub request: NetRequest,
    /// A process in the sandbox's network namespace (a container's first process).
    pub pid: i32,
    /// The folder of slot locks ([`crate::RUN_DIR`]), shared with every other backend on
    /// the host so that slots are never given twice.
    pub run_dir: PathBuf,
    /// A file to fill with the sandbox's resolv.conf once ready (the container has it bound
    /// on its /etc/resolv.conf), and to remove at teardown.
    #[serde(default)]
    pub resolv_conf: Option<PathBuf>,
    /// A file to fill with the sandbox's CA bundle once ready, when it has brokered secrets
    /// (the container has it bound read-only), and to remove at teardown.
    #[serde(default)]
    pub ca_bundle: Option<PathBuf>,
}

/// A command to a ready keeper (one JSON line); each is answered with one JSON line, an
/// [`EgressReport`] (empty without a gateway).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeeperCommand {
    /// What the gateway reported since the last command (an execution ended).
    Report,
    /// Stops the gateway and returns the rest, open connections with their counts so far
    /// (the sandbox ended).
    Finish,
    /// New rules for the running gateway (`PATCH /v1/sandboxes/{id}/egress`); answered with
    /// the report since the last command, like `report`.
    Rules(warden_types::egress::GatewayRules),
}

/// The keeper's one line of output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum KeeperReply {
    /// The link, the firewall and the resolver are up; the program may start.
    Ready {
        interface: Interface,
        /// The sandbox's /etc/resolv.conf (Warden's resolver on the host end of the link).
        resolv_conf: String,
        /// The host end of the link (`wdsb<N>`).
        host_if: String,
    },
    /// The host cannot enforce the request: the profile is refused.
    Refused { message: String },
    /// Setting up failed; nothing is left (or what is left is marked for the sweep).
    Failed { message: String },
}

/// The keeper's entry point; returns the process's exit status.
pub fn main() -> i32 {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = String::new();
    if input.read_line(&mut line).is_err() {
        return 2;
    }
    let mut out = std::io::stdout().lock();
    let req: KeeperRequest = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => {
            return answer(
                &mut out,
                &KeeperReply::Failed {
                    message: format!("keeper: malformed request: {e}"),
                },
            );
        }
    };
    let attached = match set_up(&req) {
        Ok(a) => a,
        Err(e) => {
            let message = e.to_string();
            let reply = match e {
                HostError::Unavailable(_) | HostError::Plan(_) => KeeperReply::Refused { message },
                _ => KeeperReply::Failed { message },
            };
            return answer(&mut out, &reply);
        }
    };
    if let Some(path) = &req.resolv_conf {
        // In place (same inode): the container's bind mount shows it.
        if let Err(e) = std::fs::write(path, attached.plan().resolv_conf()) {
            return answer(
                &mut out,
                &KeeperReply::Failed {
                    message: format!("write {}: {e}", path.display()),
                },
            );
        }
    }
    let written = match (&req.ca_bundle, attached.ca_bundle()) {
        // In place, like the resolv.conf; readable by the container's user.
        (Some(path), Some(bundle)) => {
            std::fs::write(path, bundle).map_err(|e| format!("write {}: {e}", path.display()))
        }
        (Some(path), None) => Err(format!(
            "{}: a CA bundle was asked for, but the sandbox has no brokered secrets",
            path.display()
        )),
        (None, _) => Ok(()),
    };
    if let Err(message) = written {
        return answer(&mut out, &KeeperReply::Failed { message });
    }
    let ready = KeeperReply::Ready {
        interface: attached.interface(),
        resolv_conf: attached.plan().resolv_conf(),
        host_if: attached.plan().host_if(),
    };
    if answer(&mut out, &ready) != 0 {
        return 1;
    }
    let mut attached = attached;
    // Answer commands until the backend closes our input (or dies); then remove everything.
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        let report = match serde_json::from_str::<KeeperCommand>(line.trim()) {
            Ok(KeeperCommand::Report) => attached.egress_report(),
            Ok(KeeperCommand::Finish) => attached.finish_egress(),
            Ok(KeeperCommand::Rules(rules)) => {
                attached.set_gateway_rules(&rules);
                attached.egress_report()
            }
            // An unknown command gets an empty answer: the backend never waits forever.
            Err(_) => EgressReport::default(),
        };
        let mut text = serde_json::to_string(&report).unwrap_or_else(|_| "{}".into());
        text.push('\n');
        if out
            .write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            break;
        }
    }
    drop(attached);
    for path in [&req.resolv_conf, &req.ca_bundle].into_iter().flatten() {
        let _ = std::fs::remove_file(path);
    }
    0
}

fn answer(out: &mut impl Write, reply: &KeeperReply) -> i32 {
    let mut text = serde_json::to_string(reply).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    let written = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    match (reply, written) {
        (KeeperReply::Ready { .. }, Ok(())) => 0,
        (KeeperReply::Ready { .. }, Err(_)) => 1,
        (KeeperReply::Refused { .. }, _) => 3,
        (KeeperReply::Failed { .. }, _) => 4,
    }
}

fn set_up(req: &KeeperRequest) -> Result<crate::Attached, HostError> {
    crate::host::check(&req.request)?;
    // The pid came from the engine a moment ago; if that process died and its number went
    // to a process of the host, never wire the host's own namespace.
    let theirs = format!("/proc/{}/ns/net", req.pid);
    if std::fs::metadata(&theirs).is_err() {
        return Err(HostError::Unavailable(format!(
            "the sandbox's process {} is not visible here (is Warden in another pid namespace than the engine's containers?)",
            req.pid
        )));
    }
    if same_namespace("/proc/self/ns/net", &theirs) {
        return Err(HostError::Unavailable(format!(
            "process {} is not in a network namespace of its own",
            req.pid
        )));
    }
    std::fs::create_dir_all(&req.run_dir).map_err(HostError::Resolver)?;
    // By its namespace file, not the pid: `ip` would read a pid in its own pid namespace,
    // which is not the engine's when Warden runs in one of its own.
    let mut attached = crate::attach(
        &req.request,
        &theirs,
        &req.run_dir,
        Box::new(crate::sys::RealSys),
    )?;
    configure_inside(req.pid, &attached.interface()).map_err(|e| HostError::Setup {
        what: "sandbox end of the link",
        source: crate::sys::SysError::Failed {
            tool: "setns",
            stderr: e.to_string(),
        },
    })?;
    attached.wait_firewall()?;
    Ok(attached)
}

/// Whether two namespace files are the same namespace (or the second cannot be read, which
/// counts as the same: refuse rather than guess).
fn same_namespace(a: &str, b: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => true,
    }
}

/// Configures the sandbox end of the link from inside the network namespace of `pid`, then
/// comes back to the host's.
fn configure_inside(pid: i32, iface: &Interface) -> std::io::Result<()> {
    let own = std::fs::File::open("/proc/self/ns/net")?;
    let theirs = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    let enter = |fd: &std::fs::File| {
        // SAFETY: setns on a namespace descriptor we own; this process is single-threaded.
        if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    enter(&theirs)?;
    let configured = crate::inside::configure(iface);
    if enter(&own).is_err() {
        // Never go on (or tear down) from inside the sandbox's namespace.
        // SAFETY: _exit ends the process without running destructors.
        unsafe { libc::_exit(5) };
    }
    configured
}

/// The first `nameserver` of a resolv.conf text, on port 53.
pub fn first_nameserver(resolv_conf: &str) -> Option<std::net::SocketAddr> {
    resolv_conf.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next() == Some("nameserver"))
            .then(|| words.next()?.parse::<std::net::IpAddr>().ok())
            .flatten()
            .map(|ip| std::net::SocketAddr::new(ip, 53))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_round_trip_and_name_their_status() {
        let ready = KeeperReply::Ready {
            interface: Interface {
                address: "10.213.0.2".parse().unwrap(),
                prefix: 30,
                gateway: "10.213.0.1".parse().unwrap(),
                address6: "fd57:6172:6465:6e::2".parse().unwrap(),
                prefix6: 126,
                gateway6: "fd57:6172:6465:6e::1".parse().unwrap(),
            },
            resolv_conf: "nameserver 10.213.0.1\n".into(),
            host_if: "wdsb0".into(),
        };
        let text = serde_json::to_string(&ready).unwrap();
        assert!(text.starts_with("{\"status\":\"ready\""), "{text}");
        assert_eq!(serde_json::from_str::<KeeperReply>(&text).unwrap(), ready);
        let refused: KeeperReply =
            serde_json::from_str(r#"{"status":"refused","message":"no root"}"#).unwrap();
        assert_eq!(
            refused,
            KeeperReply::Refused {
                message: "no root".into()
            }
        );
    }

    #[test]
    fn the_hosts_own_namespace_is_never_a_sandboxs() {
        assert!(same_namespace("/proc/self/ns/net", "/proc/self/ns/net"));
        assert!(same_namespace("/proc/self/ns/net", "/proc/0/ns/net"));
    }

    #[test]
    fn nameserver_of_resolv_conf() {
        assert_eq!(
            first_nameserver("# x\nsearch a\nnameserver 10.255.255.53\nnameserver 1.1.1.1\n"),
            Some("10.255.255.53:53".parse().unwrap())
        );
        assert_eq!(first_nameserver("search a\n"), None);
        assert_eq!(first_nameserver("nameserver bogus\n"), None);
    }
}
