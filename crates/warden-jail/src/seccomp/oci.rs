//! The same seccomp table as an OCI seccomp profile (the JSON a container engine takes in
//! `--security-opt seccomp=…`), so that containers run under Warden's reviewed allow-list
//! rather than the engine's default.
//!
//! Invariants: one entry per rule of [`table::rules`], nothing added: every syscall not allowed
//! gets ENOSYS (`defaultErrnoRet`), every `[[deny]]` its errno; only the x86_64 architecture is
//! listed, so a call made with another architecture's convention is refused (the engine's "bad
//! architecture" action), as the jail kills it. A 32-bit `ne` (a `cmd != X` on an `int`
//! argument, which the kernel truncates, so a 64-bit comparison could be passed by setting the
//! high half) becomes the allowed low words as prefix classes, each an ALLOW with one
//! `SCMP_CMP_MASKED_EQ` on the low 32 bits.

use super::table::{self, ArgCheck, Cmp, NUMBERS, Rule, SeccompError};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The profile as JSON.
pub fn profile() -> Result<Value, SeccompError> {
    let names: HashMap<u32, &str> = NUMBERS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, nr) = l.split_once('\t')?;
            Some((nr.trim().parse().ok()?, name))
        })
        .collect();
    let mut syscalls = Vec::new();
    for (nr, rule) in table::rules()? {
        let name = names.get(&nr).copied().ok_or_else(|| {
            SeccompError::Parse(format!("syscall number {nr} has no name in the table"))
        })?;
        match rule {
            Rule::Allow => syscalls.push(json!({"names": [name], "action": "SCMP_ACT_ALLOW"})),
            Rule::Errno(errno) => syscalls.push(json!({
                "names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": errno,
            })),
            Rule::AllowWhen(alternatives) => {
                for checks in alternatives {
                    syscalls.extend(alternative(name, &checks));
                }
            }
        }
    }
    // Every other named syscall gets ENOSYS explicitly: engines whose runc ignores
    // `defaultErrnoRet` (Docker 20.10's) would answer EPERM, and glibc falls back from clone3
    // to clone only on ENOSYS (threads would fail to start).
    let listed: std::collections::HashSet<&str> = syscalls
        .iter()
        .filter_map(|e| e["names"][0].as_str())
        .collect();
    let mut rest: Vec<&str> = names
        .values()
        .copied()
        .filter(|n| !listed.contains(n))
        .collect();
    rest.sort_unstable();
    syscalls.push(json!({"names": rest, "action": "SCMP_ACT_ERRNO", "errnoRet": libc::ENOSYS}));
    Ok(json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": libc::ENOSYS,
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": syscalls,
    }))
}

/// The entries of one alternative of a conditional rule (its checks ANDed).
fn alternative(name: &str, checks: &[ArgCheck]) -> Vec<Value> {
    let refused_low: Vec<(u8, u64)> = checks
        .iter()
        .filter_map(|c| match c.cmp {
            Cmp::Ne(v) if c.low_only => Some((c.arg, v & 0xffff_ffff)),
            _ => None,
        })
        .collect();
    if !refused_low.is_empty() {
        // Only `ne` checks on 32 bits here (the table's ioctl rule), all on one argument;
        // anything else is not expressible this way: refuse to build rather than allow more
        // than the table says.
        assert!(
            refused_low.len() == checks.len()
                && refused_low.iter().all(|r| r.0 == refused_low[0].0),
            "{name}: a 32-bit `ne` mixed with other checks"
        );
        let arg = refused_low[0].0;
        let refused: Vec<u64> = refused_low.iter().map(|r| r.1).collect();
        // The allowed low words as prefix classes, one ALLOW entry each (a single masked
        // comparison: libseccomp lets an unconditional rule override conditional ones, so
        // "allow, except" cannot be written as an allow plus refusals).
        let mut classes = Vec::new();
        complement_classes(0, 0, &refused, &mut classes);
        return classes
            .into_iter()
            .map(|(mask, value)| {
                json!({
                    "names": [name], "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": arg, "op": "SCMP_CMP_MASKED_EQ", "value": mask, "valueTwo": value}],
                })
            })
            .collect();
    }
    let args: Vec<Value> = checks
        .iter()
        .map(|c| match c.cmp {
            // A 32-bit check compares the low word only: a mask of 0xffffffff.
            Cmp::Eq(v) if c.low_only => json!({
                "index": c.arg, "op": "SCMP_CMP_MASKED_EQ", "value": 0xffff_ffffu64,
                "valueTwo": v & 0xffff_ffff,
            }),
            Cmp::Eq(v) => json!({"index": c.arg, "op": "SCMP_CMP_EQ", "value": v}),
            Cmp::Ne(v) => json!({"index": c.arg, "op": "SCMP_CMP_NE", "value": v}),
            Cmp::MaskedEq { mask, value } => json!({
                "index": c.arg, "op": "SCMP_CMP_MASKED_EQ",
                "value": if c.low_only { mask & 0xffff_ffff } else { mask },
                "valueTwo": value,
            }),
        })
        .collect();
    vec![json!({"names": [name], "action": "SCMP_ACT_ALLOW", "args": args})]
}

/// The 32-bit words other than `refused`, as (mask, value) classes over the top `depth` bits
/// of the low word: a class holds the words whose top bits equal `prefix`.
fn complement_classes(depth: u32, prefix: u64, refused: &[u64], out: &mut Vec<(u64, u64)>) {
    let mask = |depth: u32| (0xffff_ffffu64 >> (32 - depth)) << (32 - depth);
    let under: Vec<u64> = refused
        .iter()
        .copied()
        .filter(|r| depth == 0 || r & mask(depth) == prefix)
        .collect();
    if under.is_empty() {
        out.push((if depth == 0 { 0 } else { mask(depth) }, prefix));
        return;
    }
    if depth == 32 {
        return; // a refused word itself
    }
    let bit = 1u64 << (31 - depth);
    complement_classes(depth + 1, prefix, &under, out);
    complement_classes(depth + 1, prefix | bit, &under, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_of_the_table_is_in_the_profile_and_nothing_else() {
        let p = profile().unwrap();
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(p["defaultErrnoRet"], libc::ENOSYS);
        assert_eq!(p["architectures"], json!(["SCMP_ARCH_X86_64"]));
        let entries = p["syscalls"].as_array().unwrap();
        let names = |action: &str| -> std::collections::BTreeSet<String> {
            entries
                .iter()
                .filter(|e| e["action"] == action && e.get("args").is_none())
                .filter(|e| e["names"].as_array().unwrap().len() == 1)
                .map(|e| e["names"][0].as_str().unwrap().to_owned())
                .collect()
        };
        let (allowed, denied) = table::summary().unwrap();
        let conditional = ["clone", "mknod", "mknodat", "socket", "socketpair"];
        for name in &allowed {
            let found = entries.iter().any(|e| e["names"][0] == name.as_str());
            assert!(found, "{name} missing");
        }
        for name in names("SCMP_ACT_ALLOW") {
            assert!(
                allowed.contains(&name) && !conditional.contains(&name.as_str()),
                "{name} allowed without its conditions, or not in the table"
            );
        }
        assert_eq!(
            names("SCMP_ACT_ERRNO"),
            denied.into_iter().collect(),
            "the deny entries"
        );
        // The ioctl rule: every cmd but TIOCSTI and TIOCLINUX, judged on the low 32 bits.
        let ioctl: Vec<(u64, u64)> = entries
            .iter()
            .filter(|e| e["names"][0] == "ioctl")
            .map(|e| {
                let a = &e["args"][0];
                assert_eq!(
                    (&a["index"], &a["op"]),
                    (&json!(1), &json!("SCMP_CMP_MASKED_EQ"))
                );
                (
                    a["value"].as_u64().unwrap(),
                    a["valueTwo"].as_u64().unwrap(),
                )
            })
            .collect();
        let allowed = |cmd: u64| ioctl.iter().any(|(m, v)| cmd & m == *v);
        for cmd in [
            0x5412u64,
            0x541c,
            (1 << 32) | 0x5412,
            (0xdead << 32) | 0x541c,
        ] {
            assert!(!allowed(cmd), "{cmd:#x} allowed");
        }
        for cmd in [
            0u64,
            0x541b,
            0x5413,
            0x5411,
            0x541d,
            0x2_5412,
            0xffff_ffff,
            u64::MAX,
            1 << 32,
        ] {
            assert!(allowed(cmd), "{cmd:#x} refused");
        }
        // clone keeps its namespace-flag rule.
        let clone = entries.iter().find(|e| e["names"][0] == "clone").unwrap();
        assert_eq!(clone["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        assert_eq!(clone["args"][0]["value"], 0x7E02_0000u64);
        assert_eq!(clone["args"][0]["valueTwo"], 0);
        // Everything else is ENOSYS by name (clone3 among them: glibc falls back on ENOSYS).
        let rest = entries.last().unwrap();
        assert_eq!(rest["errnoRet"], libc::ENOSYS);
        assert!(rest["names"].as_array().unwrap().contains(&json!("clone3")));
        // Nothing of what the jail refuses is allowed: ptrace, io_uring, bpf, mount.
        for refused in [
            "ptrace",
            "io_uring_setup",
            "bpf",
            "mount",
            "unshare",
            "clone3",
        ] {
            assert!(
                !entries
                    .iter()
                    .any(|e| e["names"][0] == refused && e["action"] == "SCMP_ACT_ALLOW"),
                "{refused} allowed"
            );
        }
    }
}
