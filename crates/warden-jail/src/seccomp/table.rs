//! Parsing the checked-in seccomp table `seccomp/x86_64.toml` and compiling it into one
//! classic-BPF program.
//!
//! This file is compiled twice: by `build.rs`, which turns the table into BPF at build time
//! (a bad table fails the build and no run pays for compiling it), and into the crate for
//! tests and `warden doctor`. It depends only on serde, toml and libc.
//!
//! Invariants: every syscall not allowed returns ENOSYS (so libc falls back, e.g. clone3 →
//! clone); every `[[deny]]` entry returns its own errno; x32 numbers return ENOSYS; another
//! architecture kills the process; every entry has a reason; an unknown syscall name, a name
//! both allowed and denied, or a malformed condition is an error, never skipped.
//!
//! The program is a binary search over runs of consecutive syscall numbers that get the same
//! answer, so a syscall costs about log2(runs) comparisons instead of a walk down a list, the
//! program stays small (the kernel compiles it at every sandbox start) and the kernel's
//! per-syscall cache (which emulates the filter once per number at install) is built quickly.

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
    #[error("seccomp table: {name:?} is both allowed and denied")]
    AllowedAndDenied { name: String },
    #[error("compile seccomp filter: {0}")]
    Compile(String),
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

#[derive(Debug, Clone, Deserialize)]
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

/// One classic-BPF instruction, as `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// Classic BPF opcodes used here.
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JA: u16 = 0x05; // BPF_JMP | BPF_JA
const AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const RET_ERRNO: u32 = 0x0005_0000;
pub const RET_ALLOW: u32 = 0x7fff_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
// struct seccomp_data: nr at 0, arch at 4, instruction_pointer at 8, args at 16.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARGS: u32 = 16;

/// A comparison of one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq(u64),
    Ne(u64),
    MaskedEq { mask: u64, value: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgCheck {
    pub arg: u8,
    pub cmp: Cmp,
    /// Compare only the low 32 bits.
    pub low_only: bool,
}

/// What a syscall gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Allow,
    Errno(u32),
    /// Allowed when every check of one alternative holds; ENOSYS otherwise.
    AllowWhen(Vec<Vec<ArgCheck>>),
}

fn numbers() -> HashMap<&'static str, u32> {
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

fn arg_check(name: &str, c: &Condition) -> Result<ArgCheck, SeccompError> {
    let bad = |why: String| SeccompError::BadCondition {
        name: name.to_owned(),
        why,
    };
    if c.arg > 5 {
        return Err(bad(format!("argument index {} (0-5)", c.arg)));
    }
    let cmp = match (c.op.as_str(), c.mask) {
        ("eq", None) => Cmp::Eq(c.value),
        ("ne", None) => Cmp::Ne(c.value),
        ("masked_eq", Some(mask)) => Cmp::MaskedEq {
            mask,
            value: c.value,
        },
        (op, mask) => return Err(bad(format!("op {op:?} with mask {mask:?}"))),
    };
    // 64-bit comparisons fail closed for eq and masked_eq; `ne` on an `int` argument must
    // compare 32 bits, or setting the high half (which the kernel ignores) would slip past.
    let low_only = match c.width {
        None | Some(64) => false,
        Some(32) => true,
        Some(w) => return Err(bad(format!("width {w} (expected 32 or 64)"))),
    };
    Ok(ArgCheck {
        arg: c.arg,
        cmp,
        low_only,
    })
}

/// A summary of the table for `warden doctor` and tests: (allowed, denied) syscall names.
pub fn summary() -> Result<(Vec<String>, Vec<String>), SeccompError> {
    let table: Table = toml::from_str(TABLE).map_err(|e| SeccompError::Parse(e.to_string()))?;
    let mut allowed: Vec<String> = table.allow.into_iter().map(|e| e.name).collect();
    allowed.dedup();
    Ok((allowed, table.deny.into_iter().map(|e| e.name).collect()))
}

/// The table as a rule per syscall number.
pub fn rules() -> Result<BTreeMap<u32, Rule>, SeccompError> {
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
    let mut rules: BTreeMap<u32, Rule> = BTreeMap::new();
    for entry in &table.allow {
        if entry.reason.trim().is_empty() {
            return Err(SeccompError::NoReason {
                name: entry.name.clone(),
            });
        }
        let n = nr(&entry.name)?;
        if entry.when.is_empty() {
            rules.insert(n, Rule::Allow);
            continue;
        }
        let checks = entry
            .when
            .iter()
            .map(|c| arg_check(&entry.name, c))
            .collect::<Result<Vec<_>, _>>()?;
        match rules.entry(n).or_insert_with(|| Rule::AllowWhen(vec![])) {
            // An unconditional entry for the same name already allows everything.
            Rule::Allow => {}
            Rule::AllowWhen(alternatives) => alternatives.push(checks),
            Rule::Errno(_) => unreachable!("deny entries are added after allow entries"),
        }
    }
    for entry in &table.deny {
        if entry.reason.trim().is_empty() {
            return Err(SeccompError::NoReason {
                name: entry.name.clone(),
            });
        }
        let n = nr(&entry.name)?;
        if rules.contains_key(&n) {
            return Err(SeccompError::AllowedAndDenied {
                name: entry.name.clone(),
            });
        }
        let code = errno(&entry.errno).ok_or_else(|| SeccompError::UnknownErrno {
            name: entry.name.clone(),
            errno: entry.errno.clone(),
        })?;
        rules.insert(n, Rule::Errno(code));
    }
    Ok(rules)
}

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

fn ret(k: u32) -> Insn {
    stmt(RET_K, k)
}

fn enosys() -> Insn {
    ret(RET_ERRNO | libc::ENOSYS as u32)
}

/// Code for one argument check: falls through when it holds, jumps `fail` instructions past
/// its own end when it doesn't. Returns the instructions; `fail` counts from the end.
fn check_code(check: &ArgCheck, fail: usize) -> Result<Vec<Insn>, SeccompError> {
    let lo_off = OFF_ARGS + 8 * check.arg as u32;
    let hi_off = lo_off + 4;
    let lo = |v: u64| v as u32;
    let hi = |v: u64| (v >> 32) as u32;
    // Each test is built as (instructions, index of instructions that jump to "fail" with
    // their jt/jf slot); offsets are patched once the length is known.
    let mut code: Vec<Insn> = Vec::new();
    let mut to_fail: Vec<(usize, bool)> = Vec::new(); // (index, true = jt slot)
    let mut to_pass: Vec<(usize, bool)> = Vec::new();
    match check.cmp {
        Cmp::Eq(v) => {
            code.push(stmt(LD_W_ABS, lo_off));
            code.push(jump(JEQ_K, lo(v), 0, 0));
            to_fail.push((code.len() - 1, false));
            if !check.low_only {
                code.push(stmt(LD_W_ABS, hi_off));
                code.push(jump(JEQ_K, hi(v), 0, 0));
                to_fail.push((code.len() - 1, false));
            }
        }
        Cmp::MaskedEq { mask, value } => {
            code.push(stmt(LD_W_ABS, lo_off));
            code.push(stmt(AND_K, lo(mask)));
            code.push(jump(JEQ_K, lo(value), 0, 0));
            to_fail.push((code.len() - 1, false));
            if !check.low_only {
                code.push(stmt(LD_W_ABS, hi_off));
                code.push(stmt(AND_K, hi(mask)));
                code.push(jump(JEQ_K, hi(value), 0, 0));
                to_fail.push((code.len() - 1, false));
            }
        }
        Cmp::Ne(v) => {
            // Holds when any compared half differs.
            code.push(stmt(LD_W_ABS, lo_off));
            if check.low_only {
                code.push(jump(JEQ_K, lo(v), 0, 0));
                to_fail.push((code.len() - 1, true));
            } else {
                code.push(jump(JEQ_K, lo(v), 0, 0));
                to_pass.push((code.len() - 1, false));
                code.push(stmt(LD_W_ABS, hi_off));
                code.push(jump(JEQ_K, hi(v), 0, 0));
                to_fail.push((code.len() - 1, true));
            }
        }
    }
    let len = code.len();
    let offset = |from: usize, to: usize| -> Result<u8, SeccompError> {
        u8::try_from(to - from - 1)
            .map_err(|_| SeccompError::Compile("argument check jump too long".into()))
    };
    for (i, jt) in to_fail {
        let off = offset(i, len + fail)?;
        if jt {
            code[i].jt = off
        } else {
            code[i].jf = off
        }
    }
    for (i, jt) in to_pass {
        let off = offset(i, len)?;
        if jt {
            code[i].jt = off
        } else {
            code[i].jf = off
        }
    }
    Ok(code)
}

/// The code for one syscall's rule; always ends in a return.
fn rule_code(rule: &Rule) -> Result<Vec<Insn>, SeccompError> {
    match rule {
        Rule::Allow => Ok(vec![ret(RET_ALLOW)]),
        Rule::Errno(e) => Ok(vec![ret(RET_ERRNO | e)]),
        Rule::AllowWhen(alternatives) => {
            // alternative 1: checks…, ret ALLOW; (a failing check jumps to alternative 2) …
            // after the last: ret ENOSYS.
            let mut out = Vec::new();
            for alt in alternatives {
                let mut block: Vec<Insn> = Vec::new();
                let mut checks = Vec::new();
                for check in alt {
                    checks.push(check);
                }
                // Build from the last check backwards so each knows how far the end is.
                let mut tail = vec![ret(RET_ALLOW)];
                for check in checks.iter().rev() {
                    let mut c = check_code(check, tail.len())?;
                    c.extend(tail);
                    tail = c;
                }
                block.extend(tail);
                out.extend(block);
            }
            out.push(enosys());
            Ok(out)
        }
    }
}

/// A run of consecutive syscall numbers that get the same answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interval<'a> {
    start: u32,
    rule: Option<&'a Rule>,
}

/// Splits 0..X32_SYSCALL_BIT into runs with one answer each: consecutive numbers with the same
/// plain answer (allow, or the same errno, or absent = ENOSYS) share a run; a number with
/// argument conditions is a run of its own.
fn intervals(rules: &BTreeMap<u32, Rule>) -> Vec<Interval<'_>> {
    let mut out: Vec<Interval<'_>> = vec![Interval {
        start: 0,
        rule: None,
    }];
    let mut next = 0u32;
    for (&nr, rule) in rules {
        if nr != next {
            // A gap of absent numbers: ENOSYS.
            if out.last().is_some_and(|i| i.rule.is_some()) {
                out.push(Interval {
                    start: next,
                    rule: None,
                });
            }
        }
        let mergeable = !matches!(rule, Rule::AllowWhen(_));
        let same = out
            .last()
            .is_some_and(|i| mergeable && i.rule == Some(rule) && nr == next);
        if !same {
            if out.last().is_some_and(|i| i.start == nr) {
                out.pop();
            }
            out.push(Interval {
                start: nr,
                rule: Some(rule),
            });
        }
        next = nr + 1;
    }
    out.push(Interval {
        start: next,
        rule: None,
    });
    out
}

/// Emits a binary search over the runs (the accumulator holds the syscall number, known to be
/// at least `runs[0].start`); each leaf is its run's answer. Every path ends in a return.
fn search(runs: &[Interval<'_>]) -> Result<Vec<Insn>, SeccompError> {
    if let [run] = runs {
        return match run.rule {
            None => Ok(vec![enosys()]),
            Some(rule) => rule_code(rule),
        };
    }
    let mid = runs.len() / 2;
    let pivot = runs[mid].start;
    let low = search(&runs[..mid])?;
    let high = search(&runs[mid..])?;
    let mut out = Vec::with_capacity(low.len() + high.len() + 2);
    // nr >= pivot: go to `high`, else fall into `low`.
    if low.len() <= 255 {
        out.push(jump(JGE_K, pivot, low.len() as u8, 0));
    } else {
        out.push(jump(JGE_K, pivot, 0, 1));
        out.push(stmt(JA, low.len() as u32));
    }
    out.extend(low);
    out.extend(high);
    Ok(out)
}

/// Compiles the rules into one program.
pub fn compile_rules(rules: &BTreeMap<u32, Rule>) -> Result<Vec<Insn>, SeccompError> {
    if rules.keys().any(|&nr| nr >= X32_SYSCALL_BIT) {
        return Err(SeccompError::Compile("syscall number out of range".into()));
    }
    let mut prog = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        ret(RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
        jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
        enosys(),
    ];
    prog.extend(search(&intervals(rules))?);
    if prog.len() > 4096 {
        return Err(SeccompError::Compile(format!(
            "{} instructions (the kernel takes at most 4096)",
            prog.len()
        )));
    }
    Ok(prog)
}

/// Parses and compiles the checked-in table.
pub fn compile() -> Result<Vec<Insn>, SeccompError> {
    compile_rules(&rules()?)
}

/// Runs a program on (nr, arch, args), as the kernel would; for tests.
pub fn evaluate(prog: &[Insn], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
    let load = |off: u32| -> u32 {
        match off {
            OFF_NR => nr,
            OFF_ARCH => arch,
            o if (OFF_ARGS..OFF_ARGS + 48).contains(&o) => {
                let i = ((o - OFF_ARGS) / 8) as usize;
                if (o - OFF_ARGS).is_multiple_of(8) {
                    args[i] as u32
                } else {
                    (args[i] >> 32) as u32
                }
            }
            _ => panic!("load at {off}"),
        }
    };
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let i = prog[pc];
        pc += 1;
        match i.code {
            LD_W_ABS => a = load(i.k),
            AND_K => a &= i.k,
            JA => pc += i.k as usize,
            JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
            JGE_K => pc += if a >= i.k { i.jt } else { i.jf } as usize,
            RET_K => return i.k,
            c => panic!("opcode {c:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(check: &ArgCheck, args: &[u64; 6]) -> bool {
        let mut v = args[check.arg as usize];
        let widen = |x: u64| if check.low_only { x & 0xffff_ffff } else { x };
        v = widen(v);
        match check.cmp {
            Cmp::Eq(x) => v == widen(x),
            Cmp::Ne(x) => v != widen(x),
            Cmp::MaskedEq { mask, value } => v & widen(mask) == widen(value),
        }
    }

    /// What the table says for a call, computed directly from the rules.
    fn expected(rules: &BTreeMap<u32, Rule>, nr: u32, args: &[u64; 6]) -> u32 {
        match rules.get(&nr) {
            None => RET_ERRNO | libc::ENOSYS as u32,
            Some(Rule::Allow) => RET_ALLOW,
            Some(Rule::Errno(e)) => RET_ERRNO | e,
            Some(Rule::AllowWhen(alts)) => {
                if alts.iter().any(|alt| alt.iter().all(|c| holds(c, args))) {
                    RET_ALLOW
                } else {
                    RET_ERRNO | libc::ENOSYS as u32
                }
            }
        }
    }

    #[test]
    fn the_program_does_what_the_table_says_for_every_syscall() {
        let rules = rules().unwrap();
        let prog = compile_rules(&rules).unwrap();
        // Argument values that hit each condition's edges: the compared values themselves,
        // with high bits set, zero and all-ones.
        let mut probes: Vec<u64> = vec![0, u64::MAX, 1 << 32, 0x7fff_ffff];
        for rule in rules.values() {
            if let Rule::AllowWhen(alts) = rule {
                for c in alts.iter().flatten() {
                    let v = match c.cmp {
                        Cmp::Eq(v) | Cmp::Ne(v) => v,
                        Cmp::MaskedEq { value, .. } => value,
                    };
                    probes.extend([v, v | (1 << 40), v ^ 1]);
                }
            }
        }
        for nr in (0..600u32).chain([X32_SYSCALL_BIT - 1, u32::MAX]) {
            for &p in &probes {
                for arg in 0..3 {
                    let mut args = [0u64; 6];
                    args[arg] = p;
                    assert_eq!(
                        evaluate(&prog, nr, AUDIT_ARCH_X86_64, args),
                        expected(&rules, nr, &args),
                        "nr {nr} args {args:x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_architectures_are_killed_and_x32_gets_enosys() {
        let prog = compile().unwrap();
        assert_eq!(evaluate(&prog, 0, 0x4000_0003, [0; 6]), RET_KILL_PROCESS);
        assert_eq!(
            evaluate(&prog, X32_SYSCALL_BIT, AUDIT_ARCH_X86_64, [0; 6]),
            RET_ERRNO | libc::ENOSYS as u32
        );
    }

    #[test]
    fn the_program_is_a_small_search_not_a_list() {
        let rules = rules().unwrap();
        let prog = compile_rules(&rules).unwrap();
        assert!(prog.len() < 600, "{} instructions", prog.len());
        // Count instructions executed for each allowed syscall without arguments.
        let mut worst = 0;
        for (nr, rule) in &rules {
            if *rule == Rule::Allow {
                let mut steps = 0;
                let (mut pc, mut a) = (0usize, 0u32);
                loop {
                    let i = prog[pc];
                    pc += 1;
                    steps += 1;
                    match i.code {
                        LD_W_ABS => {
                            a = if i.k == OFF_ARCH {
                                AUDIT_ARCH_X86_64
                            } else {
                                *nr
                            }
                        }
                        JA => pc += i.k as usize,
                        JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
                        JGE_K => pc += if a >= i.k { i.jt } else { i.jf } as usize,
                        _ => {
                            assert_eq!(i.k, RET_ALLOW, "nr {nr}");
                            break;
                        }
                    }
                }
                worst = worst.max(steps);
            }
        }
        assert!(worst < 30, "an allowed syscall walks {worst} instructions");
    }

    #[test]
    fn escape_routes_are_not_allowed() {
        let (allowed, denied) = summary().unwrap();
        for name in [
            "ptrace",
            "mount",
            "unshare",
            "setns",
            "bpf",
            "keyctl",
            "perf_event_open",
            "io_uring_setup",
            "userfaultfd",
            "clock_settime",
            "reboot",
            "kexec_load",
            "init_module",
            "pivot_root",
            "chroot",
            "open_by_handle_at",
        ] {
            assert!(!allowed.iter().any(|a| a == name), "{name} is allowed");
            assert!(
                denied.iter().any(|d| d == name),
                "{name} is not explicitly denied"
            );
        }
    }

    #[test]
    fn every_number_is_known() {
        let n = numbers();
        assert_eq!(n["read"], 0);
        assert_eq!(n["clone3"], 435);
        assert_eq!(n["mseal"], 462);
    }

    #[test]
    fn clone_with_namespace_flags_is_refused() {
        let prog = compile().unwrap();
        let clone = numbers()["clone"];
        let fork_like = 0x0100_0000 | 0x0020_0000 | 17; // CLONE_CHILD_SETTID|CLEARTID|SIGCHLD
        assert_eq!(
            evaluate(&prog, clone, AUDIT_ARCH_X86_64, [fork_like, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        for ns in [
            0x1000_0000u64,
            0x4000_0000,
            0x2000_0000,
            0x0002_0000,
            0x0800_0000,
            0x0400_0000,
            0x0200_0000,
        ] {
            assert_ne!(
                evaluate(
                    &prog,
                    clone,
                    AUDIT_ARCH_X86_64,
                    [fork_like | ns, 0, 0, 0, 0, 0]
                ),
                RET_ALLOW,
                "clone with {ns:#x}"
            );
        }
    }
}
