//! What a networked sandbox may reach: the egress policy of a profile, as domain types.
//!
//! Invariants: a [`Cidr`] has no host bits set below its prefix (`10.1.2.3/8` is refused, not
//! silently widened); a [`DomainPattern`] is lowercase, without a trailing dot, made of valid
//! labels, and is either an exact name or `*.` followed by a name (every name below it, not the
//! name itself); an [`EgressPolicy`] with both allow-lists empty means "the public internet",
//! with either non-empty it means "only these".

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Why a CIDR, a domain pattern or a bandwidth could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressParseError {
    BadCidr { input: String, why: &'static str },
    BadDomain { input: String, why: &'static str },
    BadBandwidth { input: String, why: &'static str },
}

impl fmt::Display for EgressParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressParseError::BadCidr { input, why } => {
                write!(f, "invalid CIDR {input:?}: {why}")
            }
            EgressParseError::BadDomain { input, why } => {
                write!(f, "invalid domain {input:?}: {why}")
            }
            EgressParseError::BadBandwidth { input, why } => {
                write!(f, "invalid bandwidth {input:?}: {why}")
            }
        }
    }
}

impl std::error::Error for EgressParseError {}

/// An IPv4 or IPv6 network: an address and a prefix length, host bits zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// A network; refuses a prefix longer than the address or host bits set.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, &'static str> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err("prefix longer than the address");
        }
        let c = Cidr { addr, prefix };
        if c.network_bits() != c.bits() {
            return Err("host bits set below the prefix");
        }
        Ok(c)
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    fn width(&self) -> u32 {
        if self.is_ipv4() { 32 } else { 128 }
    }

    /// The address as a 128-bit number (IPv4 in the low 32 bits).
    fn bits(&self) -> u128 {
        ip_bits(self.addr)
    }

    fn mask(&self) -> u128 {
        let width = self.width();
        let all = if width == 32 {
            u32::MAX as u128
        } else {
            u128::MAX
        };
        match width - self.prefix as u32 {
            0 => all,
            128 => 0,
            host => all & !((1u128 << host) - 1),
        }
    }

    fn network_bits(&self) -> u128 {
        self.bits() & self.mask()
    }

    /// Whether `ip` is inside this network (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.is_ipv4() && ip_bits(ip) & self.mask() == self.network_bits()
    }

    /// Whether the two networks share an address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.contains(other.addr) || other.contains(self.addr)
    }

    /// The `n`-th address of the network (0 is the network address); `None` past its end.
    pub fn nth(&self, n: u128) -> Option<IpAddr> {
        let size_bits = self.width() - self.prefix as u32;
        if size_bits < 128 && n >> size_bits != 0 {
            return None;
        }
        let v = self.network_bits() + n;
        Some(if self.is_ipv4() {
            IpAddr::V4(Ipv4Addr::from(v as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(v))
        })
    }
}

fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

impl FromStr for Cidr {
    type Err = EgressParseError;
    fn from_str(s: &str) -> Result<Cidr, EgressParseError> {
        let bad = |why| EgressParseError::BadCidr {
            input: s.into(),
            why,
        };
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad("not an IP address"))?;
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .map_err(|_| bad("the prefix is not a number"))?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Cidr::new(addr, prefix).map_err(bad)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Cidr, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A domain name a sandbox may resolve: `example.com` (that name only) or `*.example.com`
/// (every name below it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainPattern {
    name: String,
    subdomains: bool,
}

impl DomainPattern {
    /// Whether `name` (any case, with or without a trailing dot) matches.
    pub fn matches(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if self.subdomains {
            name.len() > self.name.len()
                && name.ends_with(&self.name)
                && name.as_bytes()[name.len() - self.name.len() - 1] == b'.'
        } else {
            name == self.name
        }
    }
}

impl FromStr for DomainPattern {
    type Err = EgressParseError;
    fn from_str(s: &str) -> Result<DomainPattern, EgressParseError> {
        let bad = |why| EgressParseError::BadDomain {
            input: s.into(),
            why,
        };
        let lower = s.trim_end_matches('.').to_ascii_lowercase();
        let (name, subdomains) = match lower.strip_prefix("*.") {
            Some(rest) => (rest.to_owned(), true),
            None => (lower, false),
        };
        if name.is_empty() || name.len() > 253 {
            return Err(bad("must be a name of 1 to 253 characters"));
        }
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(bad("every label must have 1 to 63 characters"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                || label.starts_with('-')
                || label.ends_with('-')
            {
                return Err(bad(
                    "labels are letters, digits, '-' and '_' ('*.' only as a prefix)",
                ));
            }
        }
        Ok(DomainPattern { name, subdomains })
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.subdomains {
            write!(f, "*.{}", self.name)
        } else {
            f.write_str(&self.name)
        }
    }
}

impl Serialize for DomainPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DomainPattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DomainPattern, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A bandwidth in bits per second, written `"10mbit"`, `"512kbit"`, `"1gbit"` or `"8000bit"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bandwidth {
    bits_per_second: u64,
}

impl Bandwidth {
    pub fn bits_per_second(&self) -> u64 {
        self.bits_per_second
    }

    pub fn bytes_per_second(&self) -> u64 {
        self.bits_per_second.div_ceil(8)
    }
}

impl FromStr for Bandwidth {
    type Err = EgressParseError;
    fn from_str(s: &str) -> Result<Bandwidth, EgressParseError> {
        let bad = |why| EgressParseError::BadBandwidth {
            input: s.into(),
            why,
        };
        let lower = s.trim().to_ascii_lowercase();
        let split = lower
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| bad("needs a unit: bit, kbit, mbit or gbit"))?;
        let (number, unit) = lower.split_at(split);
        let number: u64 = number
            .parse()
            .map_err(|_| bad("must start with a whole number"))?;
        let scale = match unit {
            "bit" => 1,
            "kbit" => 1_000,
            "mbit" => 1_000_000,
            "gbit" => 1_000_000_000,
            _ => return Err(bad("the unit must be bit, kbit, mbit or gbit")),
        };
        let bits_per_second = number.checked_mul(scale).ok_or_else(|| bad("too large"))?;
        if bits_per_second < 8_000 {
            return Err(bad("must be at least 8kbit"));
        }
        Ok(Bandwidth { bits_per_second })
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}bit", self.bits_per_second)
    }
}

impl Serialize for Bandwidth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Bandwidth {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bandwidth, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A profile's egress rules (used only when its network is enabled).
///
/// Precedence, first match wins: `deny_cidrs` → `allow_cidrs` → the blocked ranges (host,
/// loopback, private, shared, link-local, …) → addresses pinned by resolving an
/// `allow_domains` name → the rest of the internet only when both allow-lists are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressPolicy {
    /// Networks the sandbox may reach even inside the blocked ranges (never the host itself).
    pub allow_cidrs: Vec<Cidr>,
    /// Networks never reachable, whatever else allows them.
    pub deny_cidrs: Vec<Cidr>,
    /// Names the sandbox's resolver answers; their addresses become reachable as resolved.
    pub allow_domains: Vec<DomainPattern>,
    /// Cap on each direction of the sandbox's traffic.
    pub max_bandwidth: Option<Bandwidth>,
    /// Brokered secrets (names of `[sandbox.secrets]`) the gateway puts into requests to
    /// their hosts; the sandbox sees only placeholders. Needs `gateway`.
    pub secrets: Vec<String>,
    /// The egress gateway: when set, every outbound TCP connection goes through Warden's
    /// gateway, which allows it by the name it is for (TLS SNI or HTTP Host), not by address.
    pub gateway: Option<GatewayRules>,
}

impl EgressPolicy {
    /// Whether only the listed networks and names are reachable (an allow-list is given).
    pub fn is_allow_list(&self) -> bool {
        !self.allow_cidrs.is_empty() || !self.allow_domains.is_empty()
    }

    /// Whether the resolver answers `name`: any name without an allow-list, else only listed ones.
    pub fn allows_name(&self, name: &str) -> bool {
        !self.is_allow_list() || self.allow_domains.iter().any(|d| d.matches(name))
    }
}

/// A host rule of the gateway: a domain pattern and, optionally, one port —
/// `api.example.com:443`, `*.pythonhosted.org` (any port).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostRule {
    pub domain: DomainPattern,
    pub port: Option<u16>,
}

impl HostRule {
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.domain.matches(host)
    }
}

impl FromStr for HostRule {
    type Err = EgressParseError;
    fn from_str(s: &str) -> Result<HostRule, EgressParseError> {
        let (name, port) = match s.rsplit_once(':') {
            Some((name, port)) => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| EgressParseError::BadDomain {
                        input: s.into(),
                        why: "the port after ':' must be a number from 1 to 65535",
                    })?;
                (name, Some(port))
            }
            None => (s, None),
        };
        let domain = name.parse().map_err(|e| match e {
            EgressParseError::BadDomain { why, .. } => EgressParseError::BadDomain {
                input: s.into(),
                why,
            },
            other => other,
        })?;
        Ok(HostRule { domain, port })
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}:{p}", self.domain),
            None => write!(f, "{}", self.domain),
        }
    }
}

impl Serialize for HostRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<HostRule, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The gateway's rules, by name and port. Precedence: a `deny` match refuses; then, when
/// `allow` is not empty, only a match there passes (default deny); with `allow` empty every
/// other name passes. Whatever the rules say, the gateway dials only public addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayRules {
    /// Host rules (`name`, `*.name`, either with `:port`) a connection must match, when any.
    #[schemars(with = "Vec<String>")]
    pub allow: Vec<HostRule>,
    /// Host rules that refuse a connection, whatever `allow` says.
    #[schemars(with = "Vec<String>")]
    pub deny: Vec<HostRule>,
}

impl GatewayRules {
    /// Whether a connection to `host` (a name, lowercase) on `port` may go out; `Err` says why not.
    pub fn decide(&self, host: &str, port: u16) -> Result<(), String> {
        if let Some(rule) = self.deny.iter().find(|r| r.matches(host, port)) {
            return Err(format!("denied by the rule {rule}"));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.matches(host, port)) {
            return Err("not in the allow-list".into());
        }
        Ok(())
    }
}

/// A connection the gateway refused, as the execution's result reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EgressDenied {
    /// The name the program asked for (TLS SNI or HTTP Host), or the address when it gave none.
    pub host: String,
    pub port: u16,
    /// Why, in words: a rule, the allow-list, a non-public address, no name.
    pub why: String,
}

/// A connection the gateway let through, with what it carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EgressAllowed {
    pub host: String,
    pub port: u16,
    /// Bytes from the sandbox to the host.
    pub bytes_sent: u64,
    /// Bytes from the host to the sandbox.
    pub bytes_received: u64,
}

/// A secret the egress gateway brokers (`[sandbox.secrets.NAME]`): where the daemon reads its
/// value (never the settings file), which hosts get it and in which header. A sandbox whose
/// profile lists it (`egress.secrets`) sees only a placeholder, in its variable `env`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSetting {
    /// The daemon's environment variable that holds the value.
    #[serde(default)]
    pub from_env: Option<String>,
    /// A file that holds the value (one trailing newline is dropped).
    #[serde(default)]
    pub from_file: Option<std::path::PathBuf>,
    /// The hosts the value is sent to (`name` or `*.name`), over TLS only.
    pub hosts: Vec<DomainPattern>,
    /// The request header whose placeholder is replaced, e.g. `Authorization`, `x-api-key`.
    pub header: String,
    /// The sandbox's environment variable that holds the placeholder. Default: the secret's
    /// name in capitals.
    #[serde(default)]
    pub env: Option<String>,
}

impl SecretSetting {
    /// Checks the setting (not the value); `Err` says which field and why.
    pub fn check(&self) -> Result<(), String> {
        match (&self.from_env, &self.from_file) {
            (Some(_), None) | (None, Some(_)) => {}
            _ => return Err("set exactly one of from_env and from_file".into()),
        }
        if self.hosts.is_empty() {
            return Err("hosts: name at least one host".into());
        }
        if self.header.is_empty()
            || !self
                .header
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("header: {:?} is not a header name", self.header));
        }
        if let Some(env) = &self.env
            && (env.is_empty()
                || env.contains('=')
                || !env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            return Err(format!("env: {env:?} is not a variable name"));
        }
        Ok(())
    }

    /// The value, read now from the daemon's environment or the file.
    pub fn read_value(&self) -> Result<String, String> {
        let value = match (&self.from_env, &self.from_file) {
            (Some(var), _) => std::env::var(var)
                .map_err(|_| format!("the environment variable {var} is not set"))?,
            (_, Some(path)) => {
                let mut v = std::fs::read_to_string(path)
                    .map_err(|e| format!("read {}: {e}", path.display()))?;
                if v.ends_with('\n') {
                    v.pop();
                }
                v
            }
            (None, None) => return Err("no source".into()),
        };
        if value.is_empty() || value.contains(['\r', '\n']) {
            return Err("the value is empty or has a line break".into());
        }
        Ok(value)
    }
}

/// A brokered secret the gateway put into a request (never its value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretUse {
    /// The secret's name in the settings.
    pub name: String,
    pub host: String,
}

/// What the egress gateway saw during one execution (empty without a gateway).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EgressReport {
    /// Connections refused, with why (the program saw an HTTP 403 or a TLS alert).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_denied: Vec<EgressDenied>,
    /// Connections let through, with their byte counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_allowed: Vec<EgressAllowed>,
    /// Brokered secrets put into requests, by name and host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets_used: Vec<SecretUse>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_rules_deny_first_then_allow_list() {
        let rules = GatewayRules {
            allow: vec![
                "api.test:443".parse().unwrap(),
                "*.cdn.test".parse().unwrap(),
            ],
            deny: vec!["bad.cdn.test".parse().unwrap()],
        };
        assert_eq!(rules.decide("api.test", 443), Ok(()));
        assert!(rules.decide("api.test", 80).is_err());
        assert_eq!(rules.decide("a.cdn.test", 8080), Ok(()));
        assert!(
            rules
                .decide("bad.cdn.test", 443)
                .unwrap_err()
                .contains("bad.cdn.test")
        );
        assert!(rules.decide("other.test", 443).is_err());
        let open = GatewayRules {
            allow: vec![],
            deny: vec!["evil.test".parse().unwrap()],
        };
        assert_eq!(open.decide("anything.test", 1), Ok(()));
        assert!(open.decide("evil.test", 1).is_err());
        for bad in ["a.test:0", "a.test:x", "a.test:70000", ":443", "*:443"] {
            assert!(bad.parse::<HostRule>().is_err(), "{bad}");
        }
        assert_eq!(
            "*.Cdn.test:443".parse::<HostRule>().unwrap().to_string(),
            "*.cdn.test:443"
        );
    }

    #[test]
    fn cidrs_parse_and_refuse_host_bits() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.200.1.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::a00:1".parse().unwrap()));
        assert_eq!("1.2.3.4".parse::<Cidr>().unwrap().to_string(), "1.2.3.4/32");
        assert_eq!("::1".parse::<Cidr>().unwrap().to_string(), "::1/128");
        assert!("10.1.2.3/8".parse::<Cidr>().is_err());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("fc00::/7".parse::<Cidr>().is_ok());
        assert!(
            "0.0.0.0/0"
                .parse::<Cidr>()
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        let a: Cidr = "10.213.0.0/16".parse().unwrap();
        assert!(a.overlaps(&"10.0.0.0/8".parse().unwrap()));
        assert!(!a.overlaps(&"10.214.0.0/16".parse().unwrap()));
        assert_eq!(a.nth(5).unwrap().to_string(), "10.213.0.5");
        assert_eq!(a.nth(65536), None);
    }

    #[test]
    fn domain_patterns_match_names_and_subdomains() {
        let exact: DomainPattern = "PyPI.org.".parse().unwrap();
        assert!(exact.matches("pypi.org") && exact.matches("PYPI.ORG."));
        assert!(!exact.matches("files.pypi.org") && !exact.matches("evilpypi.org"));
        let sub: DomainPattern = "*.pythonhosted.org".parse().unwrap();
        assert!(sub.matches("files.pythonhosted.org"));
        assert!(!sub.matches("pythonhosted.org") && !sub.matches("xpythonhosted.org"));
        for bad in ["", "*", "a..b", "-a.com", "a*.com", "*.*.com", "sp ace.com"] {
            assert!(bad.parse::<DomainPattern>().is_err(), "{bad}");
        }
    }

    #[test]
    fn bandwidths_need_a_unit() {
        assert_eq!(
            "10mbit".parse::<Bandwidth>().unwrap().bits_per_second(),
            10_000_000
        );
        assert_eq!(
            "8kbit".parse::<Bandwidth>().unwrap().bytes_per_second(),
            1000
        );
        for bad in ["10", "10mb", "mbit", "1bit", "99999999999999gbit"] {
            assert!(bad.parse::<Bandwidth>().is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_answered_only_when_listed_or_without_a_list() {
        let open = EgressPolicy::default();
        assert!(!open.is_allow_list() && open.allows_name("anything.example"));
        let listed = EgressPolicy {
            allow_domains: vec!["pypi.org".parse().unwrap()],
            ..Default::default()
        };
        assert!(listed.allows_name("pypi.org") && !listed.allows_name("evil.example"));
        let cidrs_only = EgressPolicy {
            allow_cidrs: vec!["203.0.113.0/24".parse().unwrap()],
            ..Default::default()
        };
        assert!(!cidrs_only.allows_name("pypi.org"));
    }
}
