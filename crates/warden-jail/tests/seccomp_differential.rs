//! A second opinion on Warden's seccomp compiler: the same table (`seccomp/x86_64.toml`)
//! compiled by `seccompiler` (Firecracker's compiler, an independent implementation), and the
//! two programs run through one classic-BPF interpreter for every syscall number, numbers past
//! the table, x32 numbers, other architectures and the edge values of every argument
//! condition. Their verdicts must agree.
//!
//! seccompiler gives one filter a single match action, so the table becomes several filters,
//! as the kernel would stack them: the allow entries (match: allow, otherwise ENOSYS), then one
//! filter per errno of the `[[deny]]` entries (match: that errno, otherwise allow). The verdict
//! of the stack is the kernel's rule (`seccomp_run_filters`): the action of highest precedence
//! wins, and on a tie the most recently installed filter's.
//!
//! The program compared is the one that runs: the build-time program
//! (`warden_jail::seccomp::filters()`), not a fresh compile. `a_broken_program_is_caught` shows
//! the comparison failing on deliberately broken copies of it.

use std::collections::BTreeMap;
use warden_jail::seccomp::table::{self, ArgCheck, Cmp, RET_ALLOW, RET_ERRNO, Rule};

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// One instruction, whoever compiled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// What a filter sees: `struct seccomp_data`.
#[derive(Debug, Clone, Copy)]
struct Data {
    nr: u32,
    arch: u32,
    args: [u64; 6],
}

/// A classic-BPF interpreter for what seccomp filters may use here: word loads from
/// `seccomp_data`, `and`, the constant jumps and returns. Anything else, a load outside the
/// data, a jump out of the program or running off its end panics (the kernel's checker would
/// refuse such a program).
fn run(prog: &[Insn], d: &Data) -> u32 {
    let word = |off: u32| -> u32 {
        assert!(off.is_multiple_of(4) && off < 64, "load at {off}");
        match off {
            0 => d.nr,
            4 => d.arch,
            // instruction_pointer: not used by either compiler; any value.
            8 | 12 => 0x5555_5555,
            _ => {
                let i = ((off - 16) / 8) as usize;
                // Little-endian: the low half first.
                if (off - 16).is_multiple_of(8) {
                    d.args[i] as u32
                } else {
                    (d.args[i] >> 32) as u32
                }
            }
        }
    };
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let i = *prog
            .get(pc)
            .unwrap_or_else(|| panic!("ran off the program at {pc}"));
        pc += 1;
        let jump = |taken: bool| if taken { i.jt } else { i.jf } as usize;
        match i.code {
            0x20 => a = word(i.k),            // ld w abs
            0x54 => a &= i.k,                 // and k
            0x05 => pc += i.k as usize,       // ja
            0x15 => pc += jump(a == i.k),     // jeq k
            0x25 => pc += jump(a > i.k),      // jgt k
            0x35 => pc += jump(a >= i.k),     // jge k
            0x45 => pc += jump(a & i.k != 0), // jset k
            0x06 => return i.k,               // ret k
            c => panic!("opcode {c:#06x} at {}", pc - 1),
        }
        assert!(pc < prog.len(), "jump past the end to {pc}");
    }
}

/// The verdict of filters installed in this order, by the kernel's rule.
fn stacked(filters: &[Vec<Insn>], d: &Data) -> u32 {
    const ACTION_FULL: u32 = 0xffff_0000;
    let mut ret = RET_ALLOW;
    // Newest first; a later one replaces the verdict only with a strictly higher precedence.
    for f in filters.iter().rev() {
        let cur = run(f, d);
        if ((cur & ACTION_FULL) as i32) < ((ret & ACTION_FULL) as i32) {
            ret = cur;
        }
    }
    ret
}

fn condition(c: &ArgCheck) -> seccompiler::SeccompCondition {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp};
    let len = if c.low_only {
        SeccompCmpArgLen::Dword
    } else {
        SeccompCmpArgLen::Qword
    };
    let (op, value) = match c.cmp {
        Cmp::Eq(v) => (SeccompCmpOp::Eq, v),
        Cmp::Ne(v) => (SeccompCmpOp::Ne, v),
        Cmp::MaskedEq { mask, value } => (SeccompCmpOp::MaskedEq(mask), value),
    };
    seccompiler::SeccompCondition::new(c.arg, len, op, value).unwrap()
}

fn insns(p: seccompiler::BpfProgram) -> Vec<Insn> {
    p.into_iter()
        .map(|i| Insn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// The table compiled by seccompiler: the filters in the order they would be installed.
fn seccompiler_filters(rules: &BTreeMap<u32, Rule>) -> Vec<Vec<Insn>> {
    use seccompiler::{SeccompAction, SeccompFilter, SeccompRule, TargetArch};
    let enosys = SeccompAction::Errno(libc::ENOSYS as u32);
    let mut allowed: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut denied: BTreeMap<u32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for (&nr, rule) in rules {
        match rule {
            Rule::Allow => {
                allowed.insert(nr.into(), vec![]);
            }
            Rule::AllowWhen(alternatives) => {
                let alternatives = alternatives
                    .iter()
                    .map(|alt| SeccompRule::new(alt.iter().map(condition).collect()).unwrap())
                    .collect();
                allowed.insert(nr.into(), alternatives);
            }
            Rule::Errno(e) => {
                denied.entry(*e).or_default().insert(nr.into(), vec![]);
            }
        }
    }
    let mut filters = vec![
        SeccompFilter::new(allowed, enosys, SeccompAction::Allow, TargetArch::x86_64).unwrap(),
    ];
    for (errno, names) in denied {
        filters.push(
            SeccompFilter::new(
                names,
                SeccompAction::Allow,
                SeccompAction::Errno(errno),
                TargetArch::x86_64,
            )
            .unwrap(),
        );
    }
    filters
        .into_iter()
        .map(|f| insns(f.try_into().unwrap()))
        .collect()
}

/// The program the jail installs.
fn wardens() -> Vec<Insn> {
    warden_jail::seccomp::filters()
        .program
        .iter()
        .map(|i| Insn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// Argument values at the edges of one condition: the value itself, one bit off (each bit of
/// a mask, and bits outside it), the other half set or changed, neighbours, zero and all-ones.
fn edges(c: &ArgCheck) -> Vec<u64> {
    let (value, mask) = match c.cmp {
        Cmp::Eq(v) | Cmp::Ne(v) => (v, u64::MAX),
        Cmp::MaskedEq { mask, value } => (value, mask),
    };
    let mut out = vec![
        0,
        u64::MAX,
        value,
        value ^ 1,
        value.wrapping_add(1),
        value.wrapping_sub(1),
        value | (1 << 32),
        value ^ (1 << 32),
        value ^ (1 << 63),
        value | 0xffff_ffff_0000_0000,
        value & 0xffff_ffff,
        mask,
        !mask,
        value | !mask,
        value | mask,
    ];
    for bit in 0..64 {
        if mask & (1 << bit) != 0 {
            out.push(value ^ (1 << bit));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A value of the argument that meets the condition.
fn meeting(c: &ArgCheck) -> u64 {
    match c.cmp {
        Cmp::Eq(v) => v,
        Cmp::Ne(v) => v ^ 1,
        Cmp::MaskedEq { value, .. } => value,
    }
}

/// Every call the comparison makes: (nr, args) on x86_64.
fn calls(rules: &BTreeMap<u32, Rule>) -> Vec<(u32, [u64; 6])> {
    let max = table::NUMBERS
        .lines()
        .filter_map(|l| l.split_once('\t')?.1.trim().parse::<u32>().ok())
        .max()
        .unwrap();
    let plain = [
        [0; 6],
        [u64::MAX; 6],
        [1, 2, 3, 4, 5, 6],
        [0x7e02_0000, 0x1_0000_0000, 0, 0, 0, 0],
    ];
    let mut numbers: Vec<u32> = (0..=max + 64).collect();
    numbers.extend([0x3fff_ffff, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, u32::MAX]);
    // x32 numbers: the x32 bit on every known number.
    numbers.extend((0..=max).map(|n| n | X32_SYSCALL_BIT));
    let mut out = Vec::new();
    for &nr in &numbers {
        out.extend(plain.iter().map(|&args| (nr, args)));
        // Conditioned syscalls: every combination of the values the conditions name (so
        // that every alternative, and every mix of alternatives, is met), and from each
        // alternative met, every edge value of each argument it looks at; the other
        // arguments zero or all-ones.
        if let Some(Rule::AllowWhen(alternatives)) = rules.get(&nr) {
            for rest in [0, u64::MAX] {
                let mut named: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
                for c in alternatives.iter().flatten() {
                    named.entry(c.arg).or_default().push(meeting(c));
                }
                let mut combos = vec![[rest; 6]];
                for (&arg, values) in &named {
                    combos = combos
                        .iter()
                        .flat_map(|base| {
                            values.iter().map(move |&v| {
                                let mut args = *base;
                                args[arg as usize] = v;
                                args
                            })
                        })
                        .collect();
                }
                for alt in alternatives {
                    let mut met = [rest; 6];
                    for c in alt {
                        met[c.arg as usize] = meeting(c);
                    }
                    for c in alt {
                        for v in edges(c) {
                            let mut args = met;
                            args[c.arg as usize] = v;
                            combos.push(args);
                        }
                    }
                }
                combos.sort_unstable();
                combos.dedup();
                out.extend(combos.into_iter().map(|args| (nr, args)));
            }
        }
    }
    out
}

/// The calls on which Warden's program and seccompiler's filters disagree (the first
/// `limit`).
fn disagreements(warden: &[Insn], limit: usize) -> Vec<String> {
    let rules = table::rules().unwrap();
    let theirs = seccompiler_filters(&rules);
    let x86_64 = calls(&rules).into_iter().map(|(nr, args)| Data {
        nr,
        arch: AUDIT_ARCH_X86_64,
        args,
    });
    let others = [AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, 0]
        .into_iter()
        .flat_map(|arch| {
            [0, 1, 56, 59, 101, 435, u32::MAX].map(|nr| Data {
                nr,
                arch,
                args: [0; 6],
            })
        });
    x86_64
        .chain(others)
        .filter_map(|d| {
            let (w, s) = (run(warden, &d), stacked(&theirs, &d));
            (w != s).then(|| {
                format!(
                    "nr {} arch {:#x} args {:x?}: warden {w:#x}, seccompiler {s:#x}",
                    d.nr, d.arch, d.args
                )
            })
        })
        .take(limit)
        .collect()
}

#[test]
fn seccompiler_and_warden_agree_on_every_syscall_and_argument_edge() {
    let rules = table::rules().unwrap();
    // The comparison covers what it should: every kind of rule, every argument condition.
    assert!(rules.values().any(|r| *r == Rule::Allow));
    assert!(
        rules
            .values()
            .any(|r| *r == Rule::Errno(libc::EPERM as u32))
    );
    let conditioned = rules
        .values()
        .filter(|r| matches!(r, Rule::AllowWhen(_)))
        .count();
    assert!(conditioned >= 5, "{conditioned} conditioned syscalls");
    let calls = calls(&rules);
    assert!(calls.len() > 4_000, "{} calls", calls.len());
    // Both verdicts occur (a comparison of two programs that allow nothing proves little).
    let warden = wardens();
    let verdicts: std::collections::BTreeSet<u32> = calls
        .iter()
        .map(|&(nr, args)| {
            run(
                &warden,
                &Data {
                    nr,
                    arch: AUDIT_ARCH_X86_64,
                    args,
                },
            )
        })
        .collect();
    for want in [
        RET_ALLOW,
        RET_ERRNO | libc::ENOSYS as u32,
        RET_ERRNO | libc::EPERM as u32,
    ] {
        assert!(verdicts.contains(&want), "no call gets {want:#x}");
    }
    let differ = disagreements(&warden, 20);
    assert!(
        differ.is_empty(),
        "the two compilers disagree:\n{}",
        differ.join("\n")
    );
}

/// The comparison fails on a broken program: each mutation of the real program below (an
/// allowed syscall refused, a refused one allowed, an argument check inverted, a search pivot
/// moved by one) is found.
#[test]
fn a_broken_program_is_caught() {
    let good = wardens();
    let allow_at = good.iter().position(|i| i.code == 0x06 && i.k == RET_ALLOW);
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let eperm_at = good.iter().position(|i| i.code == 0x06 && i.k == eperm);
    // The first argument check: a `jeq` on a value loaded from the arguments (offset >= 16).
    let arg_jeq_at = good
        .windows(2)
        .position(|w| w[0].code == 0x20 && w[0].k >= 16 && w[1].code == 0x15)
        .map(|i| i + 1);
    // The first pivot of the binary search (after the arch and x32 checks).
    let pivot_at = good
        .iter()
        .enumerate()
        .skip(6)
        .find(|(_, i)| i.code == 0x35)
        .map(|(n, _)| n);
    type Mutation = Box<dyn Fn(&mut Insn)>;
    let mutations: Vec<(&str, Option<usize>, Mutation)> = vec![
        (
            "an allow becomes ENOSYS",
            allow_at,
            Box::new(|i: &mut Insn| i.k = RET_ERRNO | libc::ENOSYS as u32) as Mutation,
        ),
        (
            "an EPERM becomes allow",
            eperm_at,
            Box::new(|i: &mut Insn| i.k = RET_ALLOW),
        ),
        (
            "an argument check inverted",
            arg_jeq_at,
            Box::new(|i: &mut Insn| std::mem::swap(&mut i.jt, &mut i.jf)),
        ),
        (
            "a pivot moved by one",
            pivot_at,
            Box::new(|i: &mut Insn| i.k += 1),
        ),
    ];
    for (what, at, mutate) in mutations {
        let at = at.unwrap_or_else(|| panic!("{what}: no such instruction"));
        let mut broken = good.clone();
        mutate(&mut broken[at]);
        let differ = disagreements(&broken, 1);
        assert!(
            !differ.is_empty(),
            "{what} (instruction {at}) went unnoticed"
        );
    }
}
