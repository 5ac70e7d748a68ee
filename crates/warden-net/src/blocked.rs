//! The ranges a networked sandbox never reaches unless its profile allows them: a checked-in
//! data file (`data/blocked.toml`) with a reason on every entry, like the seccomp table.
//!
//! Invariant: the table parses at build time of the tests and every entry has a reason; the
//! ruleset renders every entry, in file order.

use serde::Deserialize;
use warden_types::egress::Cidr;

/// The data file, embedded.
pub const BLOCKED_TOML: &str = include_str!("../data/blocked.toml");

/// One blocked range and why.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blocked {
    pub cidr: Cidr,
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    blocked: Vec<Blocked>,
}

/// The blocked ranges, in file order.
pub fn blocked() -> Vec<Blocked> {
    toml::from_str::<File>(BLOCKED_TOML)
        .expect("data/blocked.toml is checked by its tests")
        .blocked
}

/// Whether `ip` falls in a blocked range.
pub fn is_blocked(ip: std::net::IpAddr) -> bool {
    blocked().iter().any(|b| b.cidr.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_parses_has_a_reason_and_is_unique() {
        let list = blocked();
        assert!(list.len() >= 10);
        for (i, b) in list.iter().enumerate() {
            assert!(b.reason.len() > 10, "{} needs a reason", b.cidr);
            assert!(
                !list[..i].iter().any(|o| o.cidr.overlaps(&b.cidr)),
                "{} overlaps an earlier entry",
                b.cidr
            );
        }
    }

    #[test]
    fn the_addresses_that_matter_are_blocked() {
        for ip in [
            "127.0.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "172.17.0.1",
            "192.168.1.1",
            "100.100.100.200",
            "0.0.0.0",
            "::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            "2002:a00:1::1",
            "2001:0:a00:1::1",
            "fec0::1",
            "fd57:6172:6465:6e::2",
        ] {
            assert!(is_blocked(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "203.0.113.10",
            "8.8.8.8",
            "2001:db8::1",
            "2001:db8:113::10",
            "2a00::1",
        ] {
            assert!(!is_blocked(ip.parse().unwrap()), "{ip}");
        }
    }
}
