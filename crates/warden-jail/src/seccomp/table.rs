//! Parsing and compiling the checked-in seccomp table `seccomp/x86_64.toml` into BPF.
//!
//! This file is compiled twice: by `build.rs`, which turns the table into BPF at build time
//! (so a bad table fails the build and no run pays for compiling it), and into the crate for
//! tests and `warden doctor`. It depends only on serde, toml, seccompiler and libc.
//!
//! Invariants: every syscall not allowed returns ENOSYS (so libc falls back, e.g. clone3 →
//! clone); every `[[deny]]` entry returns its own errno (EPERM) — filters installed after the
//! allow-list, whose errno wins for equal actions; every entry has a reason; an unknown
//! syscall name in the table is a build error of the filter, never silently skipped.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

pub const TABLE: &str = include_str!("../../seccomp/x86_64.toml");
pub const NUMBERS: &str = include_str!("../../seccomp/syscalls_x86_64.tsv");

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp table: {0}")]
    Parse(String),
    #[error("seccomp table: unknown syscall {name:?}")]
    UnknownSyscall { name: String },
    #[error("seccomp table: entry {name:?} has no reason")]
    NoReason { name: String },
    #[error("seccomp table: unknown errno {errno:?} for {name:?}")]
    UnknownErrno { name: String, errno: String },
    #[error("seccomp table: bad condition on {name:?}: {why}")]
    BadCondition { name: String, why: String },
    #[error("compile seccomp filter: {0}")]
    Compile(String),
    #[error("install seccomp filter: {0}")]
    Install(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    allow: Vec<AllowEntry>,
    #[serde(default)]
    deny: Vec<DenyEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowEntry {
    name: String,
    reason: String,
    #[serde(default)]
    when: Vec<Condition>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyEntry {
    name: String,
    errno: String,
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Condition {
    arg: u8,
    op: String,
    #[serde(default)]
    mask: Option<u64>,
    value: u64,
    /// 32 compares the low half only (`int` arguments); default 64.
    #[serde(default)]
    width: Option<u8>,
}

/// The two compiled filters, installed in order.
#[derive(Debug, Clone)]
pub struct Filters {
    pub allow: BpfProgram,
    /// One program per errno used by `[[deny]]` entries.
    pub deny: Vec<BpfProgram>,
}

fn numbers() -> HashMap<&'static str, i64> {
    NUMBERS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, nr) = l.split_once('\t')?;
            Some((name, nr.trim().parse().ok()?))
        })
        .collect()
}

fn errno(name: &str) -> Option<u32> {
    Some(match name {
        "EPERM" => libc::EPERM,
        "ENOSYS" => libc::ENOSYS,
        "EACCES" => libc::EACCES,
        "EINVAL" => libc::EINVAL,
        _ => return None,
    } as u32)
}

fn condition(name: &str, c: &Condition) -> Result<SeccompCondition, SeccompError> {
    let bad = |why: String| SeccompError::BadCondition {
        name: name.to_owned(),
        why,
    };
    let op = match (c.op.as_str(), c.mask) {
        ("eq", None) => SeccompCmpOp::Eq,
        ("ne", None) => SeccompCmpOp::Ne,
        ("masked_eq", Some(mask)) => SeccompCmpOp::MaskedEq(mask),
        (op, mask) => return Err(bad(format!("op {op:?} with mask {mask:?}"))),
    };
    // 64-bit comparisons fail closed for eq and masked_eq; `ne` on an `int` argument must
    // compare 32 bits, or setting the high half (which the kernel ignores) would slip past.
    let len = match c.width {
        None | Some(64) => SeccompCmpArgLen::Qword,
        Some(32) => SeccompCmpArgLen::Dword,
        Some(w) => return Err(bad(format!("width {w} (expected 32 or 64)"))),
    };
    SeccompCondition::new(c.arg, len, op, c.value)
        .map_err(|e| bad(e.to_string()))
}

/// A summary of the table for `warden doctor` and tests: (allowed, denied) syscall names.
pub fn summary() -> Result<(Vec<String>, Vec<String>), SeccompError> {
    let table: Table = toml::from_str(TABLE).map_err(|e| SeccompError::Parse(e.to_string()))?;
    Ok((
        table.allow.into_iter().map(|e| e.name).collect(),
        table.deny.into_iter().map(|e| e.name).collect(),
    ))
}

/// Compiles the checked-in table.
pub fn compile() -> Result<Filters, SeccompError> {
    let table: Table = toml::from_str(TABLE).map_err(|e| SeccompError::Parse(e.to_string()))?;
    let numbers = numbers();
    let nr = |name: &str| {
        numbers
            .get(name)
            .copied()
            .ok_or_else(|| SeccompError::UnknownSyscall {
                name: name.to_owned(),
            })
    };
    let mut allow: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // A syscall allowed without conditions must not also get conditional rules: an empty rule
    // list means "always".
    let mut unconditional = Vec::new();
    for entry in &table.allow {
        if entry.reason.trim().is_empty() {
            return Err(SeccompError::NoReason {
                name: entry.name.clone(),
            });
        }
        let n = nr(&entry.name)?;
        if entry.when.is_empty() {
            unconditional.push(n);
            allow.insert(n, vec![]);
            continue;
        }
        if unconditional.contains(&n) {
            continue;
        }
        let conds = entry
            .when
            .iter()
            .map(|c| condition(&entry.name, c))
            .collect::<Result<Vec<_>, _>>()?;
        let rule = SeccompRule::new(conds).map_err(|e| SeccompError::Compile(e.to_string()))?;
        allow.entry(n).or_default().push(rule);
    }
    let allow = SeccompFilter::new(
        allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        SeccompAction::Allow,
        TargetArch::x86_64,
    )
    .map_err(|e| SeccompError::Compile(e.to_string()))?;

    // The deny filter: each errno gets its own filter section; seccompiler has one match
    // action per filter, so entries are grouped by errno and each group compiled separately.
    let mut by_errno: BTreeMap<u32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for entry in &table.deny {
        if table.allow.iter().any(|a| a.name == entry.name) {
            return Err(SeccompError::BadCondition {
                name: entry.name.clone(),
                why: "listed both as allowed and as denied".into(),
            });
        }
        if entry.reason.trim().is_empty() {
            return Err(SeccompError::NoReason {
                name: entry.name.clone(),
            });
        }
        let code = errno(&entry.errno).ok_or_else(|| SeccompError::UnknownErrno {
            name: entry.name.clone(),
            errno: entry.errno.clone(),
        })?;
        by_errno
            .entry(code)
            .or_default()
            .insert(nr(&entry.name)?, vec![]);
    }
    let mut deny = Vec::new();
    for (code, rules) in by_errno {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(code),
            TargetArch::x86_64,
        )
        .map_err(|e| SeccompError::Compile(e.to_string()))?;
        let program: BpfProgram = filter
            .try_into()
            .map_err(|e: seccompiler::BackendError| SeccompError::Compile(e.to_string()))?;
        deny.push(program);
    }
    Ok(Filters {
        allow: allow
            .try_into()
            .map_err(|e: seccompiler::BackendError| SeccompError::Compile(e.to_string()))?,
        deny,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_compiles_and_every_entry_has_a_reason() {
        compile().unwrap();
    }

    #[test]
    fn escape_routes_are_not_allowed() {
        let (allowed, denied) = summary().unwrap();
        for name in [
            "ptrace", "mount", "unshare", "setns", "bpf", "keyctl", "perf_event_open",
            "io_uring_setup", "userfaultfd", "clock_settime", "reboot", "kexec_load",
            "init_module", "pivot_root", "chroot", "open_by_handle_at",
        ] {
            assert!(!allowed.iter().any(|a| a == name), "{name} is allowed");
            assert!(denied.iter().any(|d| d == name), "{name} is not explicitly denied");
        }
    }

    #[test]
    fn every_number_is_known() {
        let n = numbers();
        assert_eq!(n["read"], 0);
        assert_eq!(n["clone3"], 435);
        assert_eq!(n["mseal"], 462);
    }
}
