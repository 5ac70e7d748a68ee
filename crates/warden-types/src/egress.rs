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

#[cfg(test)]
mod tests {
    use super::*;

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
