#!/usr/bin/env python3
"""Times whole commands side by side, interleaved: each round runs every command once, in a
shuffled order, so that drift in the machine's speed (a shared VM's neighbours, frequency
changes) hits every command alike instead of whichever block hyperfine happened to run in.

usage: interleave.py [--rounds N] [--warmup N] [--gap-ms MS] [--tree] [--cpu] [--json FILE] NAME=COMMAND ...

--gap-ms pauses between two commands, so that work one command leaves to the kernel or to
its own background processes after it exits (a sandbox's teardown, a network namespace's
asynchronous clean-up) does not land on the next command's timing.
--tree times each command until every process it started has exited, not only the command
itself: the harness is their subreaper (`PR_SET_CHILD_SUBREAPER`) and reaps the orphans too, so
work a command leaves to a child that outlives it (a forked helper's teardown) is counted; a
last column gives the median time from the command's own exit to its last orphan's.
(The kernel's own deferred work, such as a network namespace's clean-up, is not a process and
stays uncounted either way.)
--cpu adds the median CPU time (user + system) of each command and of every process it started
that was waited for (`RUSAGE_CHILDREN`; with --tree the orphans too), in ms.
A command may start with `VAR=VALUE` words, as in a shell: they are set in its environment
(no shell is started for them).
Prints a markdown table: median, p10, p90, mean (ms) and each median's ratio to the first
command's; with --json, the raw samples too.
"""
import argparse, ctypes, json, os, random, re, resource, shlex, statistics, subprocess, sys, time

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Makes this process the subreaper of everything it starts (their orphans come to it)."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")


def reap_orphans():
    """Waits for every process left to this subreaper (the orphans of the last command)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return

def parse_commands(specs):
    """`NAME=COMMAND` arguments as (name, argv) pairs, in their order."""
    return [(name, shlex.split(cmd)) for name, _, cmd in (s.partition("=") for s in specs)]


def interleaved(cmds, rounds, run):
    """Runs `run(argv)` for every (name, argv) of `cmds` once per round, in a new shuffled order
    each round; yields (name, what it returned)."""
    for _ in range(rounds):
        order = list(cmds)
        random.shuffle(order)
        for name, argv in order:
            yield name, run(argv)


ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def split_env(argv):
    """A command's leading `VAR=VALUE` words as an environment (this one's, with them set),
    and the rest of its words; `None` for no such words."""
    n = 0
    while n < len(argv) - 1 and ASSIGNMENT.match(argv[n]):
        n += 1
    if n == 0:
        return None, argv
    env = dict(os.environ)
    env.update(word.split("=", 1) for word in argv[:n])
    return env, argv[n:]


def spread(samples):
    """The median, p10 and p90 of `samples`, as every table of these scripts gives them."""
    q = statistics.quantiles(samples, n=10)
    return statistics.median(samples), q[0], q[-1]


def print_spreads(what, count, value, samples, digits):
    """A markdown table of `samples` (name → values): one row per name with its number of
    values (column `count`) and their `spread` (in `value`'s unit), `digits` decimals."""
    print(f"| {what} | {count} | {value}, median | p10 | p90 |")
    print("|---|---:|---:|---:|---:|")
    for name, t in samples.items():
        med, p10, p90 = spread(t)
        print(f"| {name} | {len(t)} | {med:.{digits}f} | {p10:.{digits}f} | {p90:.{digits}f} |")


def timed(argv, tree=False, gap_ms=0.0):
    """Runs `argv` once (no input, output discarded; a failure ends the script): ms until it,
    or with `tree` its last process (this process must be their subreaper), exited; ms from its
    own exit to that; CPU ms of everything that was waited for. Then pauses `gap_ms`."""
    env, argv = split_env(argv)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    exited = time.perf_counter()
    if tree:
        reap_orphans()
    done = time.perf_counter()
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = (now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime) * 1000
    if gap_ms:
        time.sleep(gap_ms / 1000)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {shlex.join(argv)}")
    return (done - t) * 1000, (done - exited) * 1000, cpu_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--gap-ms", type=float, default=0.0)
    ap.add_argument("--tree", action="store_true",
                    help="time until every process the command started has exited")
    ap.add_argument("--cpu", action="store_true",
                    help="also the CPU time of the command and the processes it started")
    ap.add_argument("--json")
    ap.add_argument("commands", nargs="+", help="NAME=COMMAND")
    a = ap.parse_args()
    cmds = parse_commands(a.commands)
    samples = {name: [] for name, _ in cmds}
    after = {name: [] for name, _ in cmds}  # ms from the command's exit to its last orphan's
    cpu = {name: [] for name, _ in cmds}  # CPU ms of the command and what it started
    if a.tree:
        become_subreaper()
    def once(argv):
        return timed(argv, tree=a.tree, gap_ms=a.gap_ms)
    for _ in range(a.warmup):
        for _, argv in cmds:
            once(argv)
    for name, (dt, past, cpu_ms) in interleaved(cmds, a.rounds, once):
        samples[name].append(dt)
        after[name].append(past)
        cpu[name].append(cpu_ms)
    base = statistics.median(samples[cmds[0][0]])
    extra = (" after the command's exit (median ms) |" if a.tree else "") + \
        (" CPU ms (median) |" if a.cpu else "")
    print("| command | median ms | p10 | p90 | mean | median / first |" + extra)
    print("|---|---:|---:|---:|---:|---:|" + ("---:|" if a.tree else "") + ("---:|" if a.cpu else ""))
    summary = {}
    for name, _ in cmds:
        s = samples[name]
        med, p10, p90 = spread(s)
        summary[name] = {"median": med, "p10": p10, "p90": p90, "mean": statistics.fmean(s)}
        tail = ""
        if a.tree:
            summary[name]["after_exit_median"] = statistics.median(after[name])
            tail = f" {summary[name]['after_exit_median']:.2f} |"
        if a.cpu:
            summary[name]["cpu_median"] = statistics.median(cpu[name])
            tail += f" {summary[name]['cpu_median']:.2f} |"
        print(f"| {name} | {med:.1f} | {p10:.1f} | {p90:.1f} | {statistics.fmean(s):.1f} | {med / base:.2f} |" + tail)
    if a.json:
        json.dump({"rounds": a.rounds, "summary": summary, "samples": samples}, open(a.json, "w"))

if __name__ == "__main__":
    main()
