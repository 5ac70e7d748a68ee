//! What a profile requires of Landlock, the kernel's unprivileged access control that the jail
//! applies as one of its containment steps (a profile's `landlock` setting).
//!
//! Landlock grew by ABI versions; Warden uses five parts of it, each brought by one version
//! ([`LandlockPart`]). A kernel enforces the parts of its ABI and no others.
//!
//! Invariants: the jail always enforces every part the kernel offers (never fewer); a
//! requirement names the parts without which the profile is refused rather than run, and the
//! filesystem rules are always among them.

use std::collections::BTreeSet;
use std::fmt;

/// One part of Landlock that Warden uses, in the order the kernel gained them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LandlockPart {
    /// Writing, creating, removing, linking and renaming only beneath the writable folders and
    /// devices (ABI 1; renaming and linking across folders beneath them, ABI 2).
    Filesystem,
    /// Truncating only beneath the writable folders (ABI 3).
    Truncate,
    /// No TCP port bound; no TCP connection unless the sandbox is networked (ABI 4).
    Tcp,
    /// No ioctl on device files outside the writable devices (ABI 5).
    DeviceIoctl,
    /// Neither signals nor abstract unix sockets reach outside the sandbox (ABI 6).
    Scope,
}

impl LandlockPart {
    /// Every part, in ABI order.
    pub const ALL: [LandlockPart; 5] = [
        LandlockPart::Filesystem,
        LandlockPart::Truncate,
        LandlockPart::Tcp,
        LandlockPart::DeviceIoctl,
        LandlockPart::Scope,
    ];

    /// The newest Landlock ABI Warden uses.
    pub const NEWEST_ABI: u32 = 6;

    /// The settings' name of the part.
    pub fn as_str(self) -> &'static str {
        match self {
            LandlockPart::Filesystem => "filesystem",
            LandlockPart::Truncate => "truncate",
            LandlockPart::Tcp => "tcp",
            LandlockPart::DeviceIoctl => "device_ioctl",
            LandlockPart::Scope => "scope",
        }
    }

    /// The Landlock ABI version that brought the part.
    pub fn abi(self) -> u32 {
        match self {
            LandlockPart::Filesystem => 1,
            LandlockPart::Truncate => 3,
            LandlockPart::Tcp => 4,
            LandlockPart::DeviceIoctl => 5,
            LandlockPart::Scope => 6,
        }
    }

    /// What the part restricts, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            LandlockPart::Filesystem => "writes only beneath the workspace, /tmp, /dev/shm",
            LandlockPart::Truncate => "truncation only beneath the writable folders",
            LandlockPart::Tcp => "no TCP bind; TCP connect only when networked",
            LandlockPart::DeviceIoctl => "no ioctl on other devices",
            LandlockPart::Scope => "signals and abstract unix sockets stay in the sandbox",
        }
    }

    /// The part of a settings' name.
    pub fn parse(name: &str) -> Option<LandlockPart> {
        LandlockPart::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The parts a kernel of Landlock ABI `abi` enforces.
    pub fn enforced_at(abi: u32) -> Vec<LandlockPart> {
        LandlockPart::ALL
            .into_iter()
            .filter(|p| p.abi() <= abi)
            .collect()
    }
}

impl fmt::Display for LandlockPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A profile's `landlock` setting: which parts it cannot run without.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LandlockRequirement {
    /// `"available"` (the default): every part this kernel offers; a kernel without Landlock
    /// refuses the profile.
    #[default]
    Available,
    /// `"all"`: every part Warden uses (a kernel below ABI 6 refuses the profile).
    All,
    /// A list of parts, `filesystem` among them: a kernel without one of them refuses the
    /// profile; the others are still enforced where the kernel offers them.
    Parts(BTreeSet<LandlockPart>),
}

/// Why a kernel cannot run a profile's requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockShortfall {
    /// The kernel's Landlock ABI (0: none).
    pub kernel_abi: u32,
    /// The required parts the kernel does not have, in ABI order.
    pub missing: Vec<LandlockPart>,
    pub requirement: LandlockRequirement,
}

impl fmt::Display for LandlockShortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let missing: Vec<String> = self
            .missing
            .iter()
            .map(|p| format!("{p} (ABI {}: {})", p.abi(), p.describe()))
            .collect();
        let kernel = if self.kernel_abi == 0 {
            "this kernel does not enforce Landlock".to_owned()
        } else {
            format!("this kernel's Landlock ABI is {}", self.kernel_abi)
        };
        write!(
            f,
            "landlock = {}: {kernel}, so it cannot enforce {}",
            self.requirement,
            missing.join(", ")
        )
    }
}

impl LandlockRequirement {
    /// The parts required on a kernel of Landlock ABI `kernel_abi`.
    pub fn required(&self, kernel_abi: u32) -> BTreeSet<LandlockPart> {
        let mut parts: BTreeSet<LandlockPart> = match self {
            LandlockRequirement::Available => {
                LandlockPart::enforced_at(kernel_abi).into_iter().collect()
            }
            LandlockRequirement::All => LandlockPart::ALL.into_iter().collect(),
            LandlockRequirement::Parts(parts) => parts.clone(),
        };
        parts.insert(LandlockPart::Filesystem);
        parts
    }

    /// The Landlock ABI to enforce (every part Warden uses up to it) on a kernel of ABI
    /// `kernel_abi`, or why the kernel cannot run this requirement.
    pub fn enforce_on(&self, kernel_abi: u32) -> Result<u32, LandlockShortfall> {
        let missing: Vec<LandlockPart> = self
            .required(kernel_abi)
            .into_iter()
            .filter(|p| p.abi() > kernel_abi)
            .collect();
        if missing.is_empty() {
            Ok(kernel_abi.min(LandlockPart::NEWEST_ABI))
        } else {
            Err(LandlockShortfall {
                kernel_abi,
                missing,
                requirement: self.clone(),
            })
        }
    }
}

impl fmt::Display for LandlockRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LandlockRequirement::Available => f.write_str("\"available\""),
            LandlockRequirement::All => f.write_str("\"all\""),
            LandlockRequirement::Parts(parts) => {
                let names: Vec<String> = parts.iter().map(|p| format!("\"{p}\"")).collect();
                write!(f, "[{}]", names.join(", "))
            }
        }
    }
}

/// The names the setting takes, for its error messages.
fn expected() -> String {
    let parts: Vec<&str> = LandlockPart::ALL.iter().map(|p| p.as_str()).collect();
    format!(
        "\"available\", \"all\" or a list of parts with \"filesystem\" among them ({})",
        parts.join(", ")
    )
}

impl<'de> serde::Deserialize<'de> for LandlockRequirement {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = LandlockRequirement;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&expected())
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "available" => Ok(LandlockRequirement::Available),
                    "all" => Ok(LandlockRequirement::All),
                    other => Err(E::custom(format!(
                        "unknown level {other:?}: expected {}",
                        expected()
                    ))),
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                use serde::de::Error;
                let mut parts = BTreeSet::new();
                while let Some(name) = seq.next_element::<String>()? {
                    let part = LandlockPart::parse(&name).ok_or_else(|| {
                        A::Error::custom(format!("unknown part {name:?}: expected {}", expected()))
                    })?;
                    parts.insert(part);
                }
                if !parts.contains(&LandlockPart::Filesystem) {
                    return Err(A::Error::custom(
                        "the list must name \"filesystem\": the jail never runs without Landlock's filesystem rules",
                    ));
                }
                Ok(LandlockRequirement::Parts(parts))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(names: &[&str]) -> LandlockRequirement {
        LandlockRequirement::Parts(
            names
                .iter()
                .map(|n| LandlockPart::parse(n).unwrap())
                .collect(),
        )
    }

    #[test]
    fn the_default_requires_what_the_kernel_offers_and_at_least_the_filesystem_rules() {
        let r = LandlockRequirement::default();
        for abi in 1..=9 {
            assert_eq!(r.enforce_on(abi), Ok(abi.min(6)), "ABI {abi}");
        }
        let refused = r.enforce_on(0).unwrap_err();
        assert_eq!(refused.missing, [LandlockPart::Filesystem]);
        assert_eq!(
            refused.to_string(),
            "landlock = \"available\": this kernel does not enforce Landlock, so it cannot enforce filesystem (ABI 1: writes only beneath the workspace, /tmp, /dev/shm)"
        );
    }

    #[test]
    fn a_required_part_the_kernel_lacks_refuses_and_is_named() {
        let r = parts(&["filesystem", "tcp", "scope"]);
        assert_eq!(r.enforce_on(7), Ok(6));
        assert_eq!(r.enforce_on(6), Ok(6));
        let e = r.enforce_on(5).unwrap_err();
        assert_eq!(e.missing, [LandlockPart::Scope]);
        let e = r.enforce_on(3).unwrap_err();
        assert_eq!(e.missing, [LandlockPart::Tcp, LandlockPart::Scope]);
        assert_eq!(
            e.to_string(),
            "landlock = [\"filesystem\", \"tcp\", \"scope\"]: this kernel's Landlock ABI is 3, so it cannot enforce tcp (ABI 4: no TCP bind; TCP connect only when networked), scope (ABI 6: signals and abstract unix sockets stay in the sandbox)"
        );
        // Parts not required are still enforced where the kernel has them.
        assert_eq!(parts(&["filesystem"]).enforce_on(5), Ok(5));
        assert_eq!(LandlockRequirement::All.enforce_on(6), Ok(6));
        assert_eq!(
            LandlockRequirement::All.enforce_on(4).unwrap_err().missing,
            [LandlockPart::DeviceIoctl, LandlockPart::Scope]
        );
    }

    #[test]
    fn the_setting_is_a_level_or_a_list_with_the_filesystem_rules() {
        let parse = |json: &str| serde_json::from_str::<LandlockRequirement>(json);
        assert_eq!(
            parse("\"available\"").unwrap(),
            LandlockRequirement::Available
        );
        assert_eq!(parse("\"all\"").unwrap(), LandlockRequirement::All);
        assert_eq!(
            parse("[\"tcp\", \"filesystem\"]").unwrap(),
            parts(&["filesystem", "tcp"])
        );
        let e = parse("\"strict\"").unwrap_err().to_string();
        assert!(e.contains("unknown level \"strict\""), "{e}");
        let e = parse("[\"filesystem\", \"udp\"]").unwrap_err().to_string();
        assert!(e.contains("unknown part \"udp\""), "{e}");
        let e = parse("[\"tcp\"]").unwrap_err().to_string();
        assert!(e.contains("must name \"filesystem\""), "{e}");
        let e = parse("[]").unwrap_err().to_string();
        assert!(e.contains("must name \"filesystem\""), "{e}");
        assert!(parse("true").is_err());
    }
}
