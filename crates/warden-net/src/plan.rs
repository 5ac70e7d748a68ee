//! The typed plan of one sandbox's network, built before any side effect: its slot, its
//! interfaces and addresses, and the exact nftables and iproute2 batches that set it up and
//! tear it down (snapshot-tested).
//!
//! Invariants: every rule for a sandbox lives in objects named after its slot (`sb<N>…`) in
//! Warden's own table `inet warden`, so removing them never touches anything else; the setup
//! full setup batch removes whatever an earlier holder of the slot left, re-asserts the shared
//! base chains and creates the slot's skeleton (empty chains and sets) and rules in one
//! nftables transaction; a slot whose skeleton is known to be clean gets only additions (the
//! fast path, no grace period), and a sandbox's teardown only empties the skeleton; an
//! interface matching `wdsb*` without rules in its chain is dropped (fail closed); IPv4 and
//! IPv6 take the same path through the sandbox's chain (its own source address, TCP/UDP only,
//! deny, allow, blocked ranges, pinned answers), each with its own sets; the base chains of
//! the IPv4-only ruleset are kept as they were (a concurrently running older Warden re-asserts
//! them), and NAT66 lives in a chain of its own (`postrouting6`).

use crate::blocked::blocked;
use crate::pool::{IF_PREFIX, Slot};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use warden_types::egress::{Cidr, EgressPolicy};

/// Warden's nftables table (family inet). Nothing else is ever changed.
pub const TABLE: &str = "warden";
/// The IPv6 blocked ranges the sandboxes' chains use. Not `blocked6`: an older (IPv4-only)
/// Warden re-fills that set with its own, shorter list whenever it sets up a slot from
/// scratch, and the two run side by side on one host while an upgrade rolls out.
pub const BLOCKED6: &str = "blocked6v2";
/// The interface name inside the sandbox.
pub const SANDBOX_IF: &str = "eth0";
/// Addresses pinned by the resolver, per sandbox, at most.
pub const MAX_PINNED: u32 = 4096;
/// New connections (conntrack entries) a sandbox may open per second, after a burst of
/// [`NEW_CONNECTIONS_BURST`]: the host's connection-tracking table is shared, and a sandbox
/// must not fill it.
pub const NEW_CONNECTIONS_PER_SECOND: u32 = 100;
pub const NEW_CONNECTIONS_BURST: u32 = 200;

/// What a networked sandbox asks for: carried in the jail's plan to the helper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRequest {
    pub egress: EgressPolicy,
    /// The IPv4 range slots are cut from.
    pub pool: Cidr,
    /// The IPv6 range whose /126s go with the IPv4 slots.
    #[serde(default = "default_pool6")]
    pub pool6: Cidr,
    /// The resolver Warden's DNS server asks.
    pub upstream_dns: SocketAddr,
    /// Secrets the egress gateway puts into requests to their hosts (`egress.secrets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<BrokeredSecret>,
    /// CA certificates (PEM) the gateway trusts, besides the host's, when it re-encrypts a
    /// request to a secret's host (`[sandbox.jail.network].upstream_ca_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ca_pem: Option<String>,
}

/// A secret the gateway brokers: the sandbox sees `placeholder` (in its variable `env`);
/// in a request to one of `hosts` over TLS, the gateway replaces the placeholder in the
/// header `header` with `value`. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokeredSecret {
    pub name: String,
    pub env: String,
    pub placeholder: String,
    pub value: String,
    pub hosts: Vec<warden_types::egress::DomainPattern>,
    /// The header's name, lowercase.
    pub header: String,
}

impl std::fmt::Debug for BrokeredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokeredSecret")
            .field("name", &self.name)
            .field("env", &self.env)
            .field("placeholder", &self.placeholder)
            .field("value", &"<redacted>")
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .finish()
    }
}

fn default_pool6() -> Cidr {
    crate::pool::DEFAULT_POOL6.parse().expect("a valid CIDR")
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the upstream resolver {addr} is inside the address pool {pool}")]
    UpstreamInPool { addr: SocketAddr, pool: Cidr },
    #[error(
        "egress.gateway decides by name, so it cannot be combined with egress.{key}: put the names in egress.gateway.allow and .deny"
    )]
    GatewayWith { key: &'static str },
    #[error(
        "egress.secrets needs egress.gateway: only the gateway can put a secret into a request"
    )]
    SecretsWithoutGateway,
}

/// The sandbox side of the link, as its init configures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub address: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
    pub address6: Ipv6Addr,
    pub prefix6: u8,
    pub gateway6: Ipv6Addr,
}

/// One sandbox's network, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPlan {
    pub slot: Slot,
    pub egress: EgressPolicy,
    pub upstream_dns: SocketAddr,
    /// This sandbox's mark on its connections (conntrack): replies to a connection marked by
    /// an earlier holder of the slot (same address) are dropped, never delivered to it.
    pub generation: u32,
}

impl NetPlan {
    /// Checks the request against what the jail can enforce and fixes the names and addresses.
    pub fn build(req: &NetRequest, slot: Slot, generation: u32) -> Result<NetPlan, PlanError> {
        check_request(req)?;
        Ok(NetPlan {
            slot,
            egress: req.egress.clone(),
            upstream_dns: req.upstream_dns,
            generation,
        })
    }

    pub fn host_if(&self) -> String {
        self.slot.if_name()
    }

    fn chain(&self) -> String {
        format!("sb{}", self.slot.index)
    }

    /// The set the resolver pins answers into.
    pub fn pin_set(&self) -> String {
        format!("sb{}_dns", self.slot.index)
    }

    /// The set the resolver pins IPv6 answers into.
    pub fn pin_set6(&self) -> String {
        format!("sb{}_dns6", self.slot.index)
    }

    /// What the sandbox's init configures on its side.
    pub fn interface(&self) -> Interface {
        Interface {
            address: self.slot.sandbox,
            prefix: 30,
            gateway: self.slot.host,
            address6: self.slot.sandbox6,
            prefix6: crate::pool::SLOT_PREFIX6,
            gateway6: self.slot.host6,
        }
    }

    /// The sandbox's /etc/resolv.conf: Warden's resolver on the host end of its link.
    pub fn resolv_conf(&self) -> String {
        format!(
            "nameserver {}\noptions timeout:2 attempts:2\n",
            self.slot.host
        )
    }

    /// The iproute2 batch (`ip -batch -`) that creates the veth pair with its sandbox end in
    /// the network namespace `netns` (a pid, or a namespace file such as
    /// `/proc/<pid>/ns/net`), without a link-local IPv6 address on the host end, addressed
    /// (IPv4 and IPv6, no duplicate address detection) and up. Both ends have the slot's MAC
    /// address and ARP off (the sandbox's init turns it off on its side): every frame goes to
    /// that address, so no ARP or neighbour discovery is needed — the host's output chain
    /// drops everything towards a sandbox that is not a reply, neighbour advertisements too.
    pub fn ip_setup(&self, netns: impl std::fmt::Display) -> String {
        let host_if = self.host_if();
        let net = self.slot.network();
        let mac = self.slot.mac();
        format!(
            "link add {host_if} address {mac} type veth peer name {SANDBOX_IF} address {mac} netns {netns}\n\
             link set {host_if} addrgenmode none arp off\n\
             addr add {}/{} dev {host_if}\n\
             addr add {}/{} dev {host_if} nodad\n\
             link set {host_if} up\n",
            self.slot.host,
            net.prefix(),
            self.slot.host6,
            crate::pool::SLOT_PREFIX6,
        )
    }

    /// The slot's objects: its chains and its sets (with their specs).
    fn objects(&self) -> (Vec<String>, Vec<(String, String)>) {
        let c = self.chain();
        let chains = vec![
            c.clone(),
            format!("{c}_in"),
            format!("{c}_down"),
            format!("{c}_gw"),
        ];
        let interval = "type ipv4_addr; flags interval;".to_owned();
        let interval6 = "type ipv6_addr; flags interval;".to_owned();
        let sets = vec![
            (format!("{c}_allow"), interval.clone()),
            (format!("{c}_deny"), interval),
            (
                format!("{c}_dns"),
                format!("type ipv4_addr; size {MAX_PINNED};"),
            ),
            (format!("{c}_allow6"), interval6.clone()),
            (format!("{c}_deny6"), interval6),
            (
                format!("{c}_dns6"),
                format!("type ipv6_addr; size {MAX_PINNED};"),
            ),
        ];
        (chains, sets)
    }

    /// The slot's entries in the base maps: (map, target chain).
    fn map_entries(&self) -> [(&'static str, String); 4] {
        let c = self.chain();
        [
            ("egress", c.clone()),
            ("local", format!("{c}_in")),
            ("download", format!("{c}_down")),
            ("gateway", format!("{c}_gw")),
        ]
    }

    /// The nftables batch that deletes the slot's objects; valid whether or not they exist
    /// (each is added first, which is a no-op when present), so it also clears a crash's
    /// leftovers, whatever state they are in.
    pub fn nft_remove(&self) -> String {
        let mut s = self.nft_skeleton();
        let host_if = self.host_if();
        let (chains, sets) = self.objects();
        for (map, _) in self.map_entries() {
            let _ = writeln!(s, "delete element inet {TABLE} {map} {{ \"{host_if}\" }}");
        }
        for chain in &chains {
            let _ = writeln!(s, "flush chain inet {TABLE} {chain}");
            let _ = writeln!(s, "delete chain inet {TABLE} {chain}");
        }
        for (set, _) in &sets {
            let _ = writeln!(s, "delete set inet {TABLE} {set}");
        }
        s
    }

    /// The slot's empty chains and sets and its map entries (idempotent). An empty chain
    /// returns to the base chain, whose next rule drops: a skeleton without rules is closed.
    fn nft_skeleton(&self) -> String {
        let mut s = String::new();
        let (chains, sets) = self.objects();
        for chain in &chains {
            let _ = writeln!(s, "add chain inet {TABLE} {chain}");
        }
        for (set, spec) in &sets {
            let _ = writeln!(s, "add set inet {TABLE} {set} {{ {spec} }}");
        }
        let host_if = self.host_if();
        for (map, target) in self.map_entries() {
            let _ = writeln!(
                s,
                "add element inet {TABLE} {map} {{ \"{host_if}\" : jump {target} }}"
            );
        }
        s
    }

    /// The batch that empties the slot's chains and sets (the teardown of one sandbox): the
    /// skeleton stays for the slot's next sandbox, holding no rule and no address.
    pub fn nft_reset(&self) -> String {
        let mut s = String::new();
        let (chains, sets) = self.objects();
        for chain in &chains {
            let _ = writeln!(s, "flush chain inet {TABLE} {chain}");
        }
        for (set, _) in &sets {
            let _ = writeln!(s, "flush set inet {TABLE} {set}");
        }
        s
    }

    /// The sandbox's own rules and set elements, added to the slot's empty skeleton. Only
    /// additions: an nftables transaction that deletes waits for an RCU grace period
    /// (~10 ms here), one that only adds does not.
    pub fn nft_rules(&self) -> String {
        let mut s = String::new();
        let c = self.chain();
        let e = &self.egress;
        let of = |list: &[Cidr], v4: bool| {
            list.iter()
                .filter(|c| c.is_ipv4() == v4)
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
        };
        for (set, list) in [
            ("allow", of(&e.allow_cidrs, true)),
            ("deny", of(&e.deny_cidrs, true)),
            ("allow6", of(&e.allow_cidrs, false)),
            ("deny6", of(&e.deny_cidrs, false)),
        ] {
            if !list.is_empty() {
                let _ = writeln!(
                    s,
                    "add element inet {TABLE} {c}_{set} {{ {} }}",
                    list.join(", ")
                );
            }
        }
        let rule = |s: &mut String, chain: &str, body: &str| {
            let _ = writeln!(s, "add rule inet {TABLE} {chain} {body}");
        };
        // Egress: from the sandbox, forwarded. First match wins.
        rule(&mut s, &c, "meta nfproto != { ipv4, ipv6 } drop");
        rule(
            &mut s,
            &c,
            &format!("meta nfproto ipv4 ip saddr != {} drop", self.slot.sandbox),
        );
        rule(
            &mut s,
            &c,
            &format!("meta nfproto ipv6 ip6 saddr != {} drop", self.slot.sandbox6),
        );
        rule(&mut s, &c, "meta l4proto != tcp meta l4proto != udp drop");
        rule(
            &mut s,
            &c,
            &format!(
                "ct state new limit rate over {NEW_CONNECTIONS_PER_SECOND}/second burst {NEW_CONNECTIONS_BURST} packets drop"
            ),
        );
        rule(
            &mut s,
            &c,
            &format!("ct mark set {:#010x}", self.generation),
        );
        if let Some(bw) = e.max_bandwidth {
            rule(
                &mut s,
                &c,
                &format!(
                    "limit rate over {} bytes/second drop",
                    bw.bytes_per_second()
                ),
            );
        }
        if e.gateway.is_some() {
            // Every TCP connection is redirected to the gateway before it gets here (the
            // `_gw` chain below); anything else (UDP, QUIC) goes nowhere.
            rule(&mut s, &c, "drop");
        } else {
            rule(&mut s, &c, &format!("ip daddr @{c}_deny drop"));
            rule(&mut s, &c, &format!("ip6 daddr @{c}_deny6 drop"));
            rule(&mut s, &c, &format!("ip daddr @{c}_allow accept"));
            rule(&mut s, &c, &format!("ip6 daddr @{c}_allow6 accept"));
            rule(&mut s, &c, "ip daddr @blocked4 drop");
            rule(&mut s, &c, &format!("ip6 daddr @{BLOCKED6} drop"));
            if e.is_allow_list() {
                rule(&mut s, &c, &format!("ip daddr @{c}_dns accept"));
                rule(&mut s, &c, &format!("ip6 daddr @{c}_dns6 accept"));
                rule(&mut s, &c, "drop");
            } else {
                rule(&mut s, &c, "accept");
            }
        }
        // To the host itself: only Warden's resolver on the host end of the link.
        let host = self.slot.host;
        rule(
            &mut s,
            &format!("{c}_in"),
            &format!(
                "ip saddr {} ip daddr {host} udp dport 53 accept",
                self.slot.sandbox
            ),
        );
        if e.gateway.is_some() {
            let port = crate::gateway::GATEWAY_PORT;
            rule(
                &mut s,
                &format!("{c}_in"),
                &format!(
                    "ct state new limit rate over {NEW_CONNECTIONS_PER_SECOND}/second burst {NEW_CONNECTIONS_BURST} packets drop"
                ),
            );
            rule(
                &mut s,
                &format!("{c}_in"),
                &format!(
                    "ip saddr {} ip daddr {host} tcp dport {port} accept",
                    self.slot.sandbox
                ),
            );
            rule(
                &mut s,
                &format!("{c}_in"),
                &format!(
                    "ip6 saddr {} ip6 daddr {} tcp dport {port} accept",
                    self.slot.sandbox6, self.slot.host6
                ),
            );
            // Every TCP connection, whatever its address: to the gateway on this link.
            rule(
                &mut s,
                &format!("{c}_gw"),
                &format!("meta l4proto tcp redirect to :{port}"),
            );
        }
        rule(&mut s, &format!("{c}_in"), "drop");
        // Towards the sandbox (replies only, the base chain drops new connections): only
        // this sandbox's own connections, then the download cap.
        rule(
            &mut s,
            &format!("{c}_down"),
            &format!("ct mark != {:#010x} drop", self.generation),
        );
        if let Some(bw) = e.max_bandwidth {
            rule(
                &mut s,
                &format!("{c}_down"),
                &format!(
                    "limit rate over {} bytes/second drop",
                    bw.bytes_per_second()
                ),
            );
        }
        s
    }

    /// The full batch for a slot in an unknown state, as one transaction: the shared base
    /// (re-asserted), the removal of whatever the slot holds, a fresh skeleton, the rules.
    pub fn nft_setup(&self) -> String {
        let mut s = base_ruleset();
        s.push_str(&self.nft_remove());
        s.push_str(&self.nft_skeleton());
        s.push_str(&self.nft_rules());
        s
    }
}

fn check_request(req: &NetRequest) -> Result<(), PlanError> {
    let e = &req.egress;
    if e.gateway.is_none() && (!req.secrets.is_empty() || !e.secrets.is_empty()) {
        return Err(PlanError::SecretsWithoutGateway);
    }
    if e.gateway.is_some() {
        for (key, set) in [
            ("allow_domains", !e.allow_domains.is_empty()),
            ("allow_cidrs", !e.allow_cidrs.is_empty()),
            ("deny_cidrs", !e.deny_cidrs.is_empty()),
            // The gateway's own connections are the host's, outside the sandbox's chains.
            ("max_bandwidth", e.max_bandwidth.is_some()),
        ] {
            if set {
                return Err(PlanError::GatewayWith { key });
            }
        }
    }
    for pool in [req.pool, req.pool6] {
        if pool.contains(req.upstream_dns.ip()) {
            return Err(PlanError::UpstreamInPool {
                addr: req.upstream_dns,
                pool,
            });
        }
    }
    Ok(())
}

/// Checks a request without a slot (the backend's `check`, before anything starts).
pub fn check(req: &NetRequest) -> Result<(), PlanError> {
    check_request(req)
}

/// The shared part of Warden's table, as idempotent commands: the table, the maps from a
/// sandbox interface to its chains, the blocked ranges, and the base chains, whose rules are
/// flushed and re-added in the same transaction.
pub fn base_ruleset() -> String {
    let p = IF_PREFIX;
    let mut s = String::new();
    let _ = writeln!(s, "add table inet {TABLE}");
    for map in ["egress", "local", "download", "gateway"] {
        let _ = writeln!(s, "add map inet {TABLE} {map} {{ type ifname : verdict; }}");
    }
    for (set, family, v4) in [
        ("blocked4", "ipv4_addr", true),
        // Still asserted for an older Warden's base rule that names it (more entries than it
        // had only make that rule stricter).
        ("blocked6", "ipv6_addr", false),
        (BLOCKED6, "ipv6_addr", false),
    ] {
        let _ = writeln!(
            s,
            "add set inet {TABLE} {set} {{ type {family}; flags interval; }}"
        );
        let _ = writeln!(s, "flush set inet {TABLE} {set}");
        let list: Vec<String> = blocked()
            .iter()
            .filter(|b| b.cidr.is_ipv4() == v4)
            .map(|b| b.cidr.to_string())
            .collect();
        let _ = writeln!(
            s,
            "add element inet {TABLE} {set} {{ {} }}",
            list.join(", ")
        );
    }
    let chains: [(&str, &str, &[String]); 6] = [
        (
            "forward",
            "type filter hook forward priority filter - 10; policy accept;",
            &[
                // Towards a sandbox first, whoever sends it (another sandbox too, even one
                // whose allow-list covers the pool): replies only.
                format!("oifname \"{p}*\" ct state established,related oifname vmap @download"),
                format!("oifname \"{p}*\" ct state established,related accept"),
                format!("oifname \"{p}*\" drop"),
                // A sandbox's own traffic is never DNATed: what was is the host's (a published
                // port of a container, a port forward) and counts as the host itself.
                format!("iifname \"{p}*\" ct status dnat drop"),
                format!("iifname \"{p}*\" iifname vmap @egress"),
                format!("iifname \"{p}*\" drop"),
            ],
        ),
        (
            "input",
            "type filter hook input priority filter - 10; policy accept;",
            &[
                format!("iifname \"{p}*\" iifname vmap @local"),
                format!("iifname \"{p}*\" drop"),
            ],
        ),
        (
            "output",
            "type filter hook output priority filter - 10; policy accept;",
            &[
                format!("oifname \"{p}*\" ct state established,related accept"),
                format!("oifname \"{p}*\" drop"),
            ],
        ),
        (
            "postrouting",
            "type nat hook postrouting priority srcnat - 10; policy accept;",
            &[format!(
                "iifname \"{p}*\" oifname != \"{p}*\" meta nfproto ipv4 masquerade"
            )],
        ),
        // The egress gateway: a sandbox's `_gw` chain redirects its TCP connections (empty
        // without a gateway: nothing is redirected).
        (
            "prerouting",
            "type nat hook prerouting priority dstnat - 10; policy accept;",
            &[format!("iifname \"{p}*\" iifname vmap @gateway")],
        ),
        // NAT66, in a chain of its own: the chain above keeps the rule an older Warden
        // re-asserts when it sets up a slot, and that must not remove this one.
        (
            "postrouting6",
            "type nat hook postrouting priority srcnat - 10; policy accept;",
            &[format!(
                "iifname \"{p}*\" oifname != \"{p}*\" meta nfproto ipv6 masquerade"
            )],
        ),
    ];
    for (name, spec, rules) in chains {
        let _ = writeln!(s, "add chain inet {TABLE} {name} {{ {spec} }}");
        let _ = writeln!(s, "flush chain inet {TABLE} {name}");
        for r in rules {
            let _ = writeln!(s, "add rule inet {TABLE} {name} {r}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;

    fn request(egress: EgressPolicy) -> NetRequest {
        NetRequest {
            egress,
            pool: "10.213.0.0/16".parse().unwrap(),
            pool6: default_pool6(),
            upstream_dns: "192.0.2.53:53".parse().unwrap(),
            secrets: Vec::new(),
            upstream_ca_pem: None,
        }
    }

    fn plan(egress: EgressPolicy) -> NetPlan {
        let slot = Pool::new("10.213.0.0/16".parse().unwrap())
            .unwrap()
            .slot(7)
            .unwrap();
        NetPlan::build(&request(egress), slot, 0x5eed_0007).unwrap()
    }

    #[test]
    fn base_ruleset() {
        insta::assert_snapshot!(super::base_ruleset());
    }

    #[test]
    fn open_internet_setup() {
        let p = plan(EgressPolicy::default());
        insta::assert_snapshot!(p.nft_setup().strip_prefix(&super::base_ruleset()).unwrap());
        insta::assert_snapshot!(p.ip_setup(4242));
        assert_eq!(
            p.resolv_conf(),
            "nameserver 10.213.0.29\noptions timeout:2 attempts:2\n"
        );
    }

    #[test]
    fn allow_list_setup() {
        let p = plan(EgressPolicy {
            allow_cidrs: vec![
                "203.0.113.0/24".parse().unwrap(),
                "10.9.0.0/16".parse().unwrap(),
                "fd12:3456::/32".parse().unwrap(),
            ],
            deny_cidrs: vec![
                "203.0.113.66".parse().unwrap(),
                "2001:db8::/32".parse().unwrap(),
            ],
            allow_domains: vec!["pypi.org".parse().unwrap()],
            max_bandwidth: Some("8mbit".parse().unwrap()),
            gateway: None,
            secrets: vec![],
        });
        let setup = p.nft_setup();
        let own = setup.strip_prefix(&super::base_ruleset()).unwrap();
        insta::assert_snapshot!(own);
        // The removal of the slot's leftovers comes first; the fast path is the rules alone.
        assert!(own.starts_with(&p.nft_remove()));
        assert!(own.ends_with(&p.nft_rules()));
        assert!(!p.nft_rules().contains("delete") && !p.nft_rules().contains("flush"));
        insta::assert_snapshot!(p.nft_reset());
    }

    #[test]
    fn gateway_setup() {
        let p = plan(EgressPolicy {
            gateway: Some(warden_types::egress::GatewayRules {
                allow: vec!["api.test:443".parse().unwrap()],
                deny: vec![],
            }),
            ..Default::default()
        });
        let rules = p.nft_rules();
        insta::assert_snapshot!(rules);
        // TCP to the gateway on this link only; everything forwarded is dropped.
        assert!(
            rules.contains("add rule inet warden sb7_gw meta l4proto tcp redirect to :15001\n")
        );
        assert!(rules.contains("add rule inet warden sb7 drop\n"));
        // Without a gateway, nothing is redirected.
        assert!(!plan(EgressPolicy::default()).nft_rules().contains("sb7_gw"));
        let mut both = request(p.egress.clone());
        both.egress.allow_domains = vec!["pypi.org".parse().unwrap()];
        assert_eq!(
            check(&both),
            Err(PlanError::GatewayWith {
                key: "allow_domains"
            })
        );
    }

    #[test]
    fn ipv6_allow_entries_are_taken_and_an_upstream_in_a_pool_is_refused() {
        let mut r = request(EgressPolicy {
            allow_cidrs: vec!["2001:db8::/32".parse().unwrap()],
            ..Default::default()
        });
        assert_eq!(check(&r), Ok(()));
        r.egress = EgressPolicy::default();
        r.upstream_dns = "10.213.0.1:53".parse().unwrap();
        assert!(matches!(check(&r), Err(PlanError::UpstreamInPool { .. })));
        r.upstream_dns = "[fd57:6172:6465:6e::9]:53".parse().unwrap();
        assert!(matches!(check(&r), Err(PlanError::UpstreamInPool { .. })));
    }

    #[test]
    fn the_ipv4_nat_chain_is_unchanged_and_nat66_has_its_own() {
        // An older Warden (IPv4 only) re-asserts its base chains whenever it sets up a slot
        // from scratch: NAT66 must not live in a chain it rewrites.
        let base = super::base_ruleset();
        assert!(base.contains(
            "add rule inet warden postrouting iifname \"wdsb*\" oifname != \"wdsb*\" meta nfproto ipv4 masquerade\n"
        ));
        assert!(base.contains(
            "add rule inet warden postrouting6 iifname \"wdsb*\" oifname != \"wdsb*\" meta nfproto ipv6 masquerade\n"
        ));
    }
}
