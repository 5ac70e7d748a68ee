#!/usr/bin/env python3
"""How long a sandbox's pid 1 takes to end, per command, interleaved (issue 24, point 3).

A sandbox's namespaces end with its last process, its pid 1 (Warden's init, bwrap's own pid 1):
its exit unmounts the root, ends the pid, network and other namespaces and frees its memory,
and the run is not over until it has. Each run of a command is recorded machine-wide with
`perf record -a` on scheduler tracepoints only (fork, exec, exit, switch: no sampling); pid 1 is
the parent of the process that execs the interpreter, and its end is measured from its
`sched_process_exit` (the start of `do_exit`, before its memory is freed, on kernels ≥ 6.16;
earlier kernels fire it later, after the memory) to its last switch away from its CPU, dead.
Of that time, `off CPU` is what it spent switched out before it was done (waiting for the
kernel, e.g. an RCU grace period, or for a CPU another process held). Rounds run every command
once in a shuffled order (`interleave.py`'s `interleaved`); prints the medians (ms).

usage: pid1_exit.py [--rounds N] [--program NAME] NAME=COMMAND ...
"""
import argparse, os, re, statistics, subprocess, sys, tempfile
from interleave import become_subreaper, interleaved, parse_commands, reap_orphans  # bench/interleave.py
from phases import sched_events  # bench/phases.py

EVENTS = ["sched_process_fork", "sched_process_exec", "sched_process_exit", "sched_switch"]


def pid1_end(argv, program, data):
    """One run of `argv` under `perf record -a`: (ms from pid 1's exit to its end, ms of that
    off CPU), or None when no pid 1 was seen."""
    # Recorded until every process of the command has ended, pid 1 too: a command may exit
    # before its pid 1 (bwrap does), and perf stops with the process it started.
    pid_file = data + ".reaper"
    reaper = [sys.executable, os.path.abspath(__file__), "--run-and-reap", pid_file, "--"]
    events = sched_events(argv, EVENTS, data, machine_wide=True, wrapper=reaper)
    with open(pid_file) as f:
        reaper_pid = f.read().strip()  # a Python interpreter too, never the sandbox's
    parent, interpreter, exit_at, gone, off, out_since = {}, None, None, None, 0.0, None
    for t, kind, fields, _ in events:
        if kind == "sched_process_fork":
            f = re.search(r"pid=(\d+) .*child_pid=(\d+)", fields)
            if f:
                parent[f.group(2)] = f.group(1)
        elif kind == "sched_process_exec" and interpreter is None:
            f = re.search(r"filename=(\S+) pid=(\d+)", fields)
            if f and os.path.basename(f.group(1)) == program and f.group(2) != reaper_pid:
                interpreter = f.group(2)
        elif kind == "sched_process_exit" and interpreter is not None:
            f = re.search(r"pid=(\d+)", fields)
            if f and f.group(1) == parent.get(interpreter):
                exit_at = t
        elif kind == "sched_switch" and exit_at is not None and gone is None:
            f = re.search(r"prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)", fields)
            pid1 = parent[interpreter]
            if f.group(1) == pid1:
                if f.group(2)[0] in "XZ":
                    gone = t
                else:
                    out_since = t
            elif f.group(3) == pid1 and out_since is not None:
                off += t - out_since
                out_since = None
    if exit_at is None or gone is None:
        return None
    return gone - exit_at, off


def run_and_reap(pid_file, argv):
    """Runs `argv` as the subreaper of everything it starts; exits once all of it has ended,
    with its status. Writes this process's pid to `pid_file` first."""
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    become_subreaper()
    code = subprocess.run(argv, stdin=subprocess.DEVNULL).returncode
    reap_orphans()
    sys.exit(code)


def main():
    if sys.argv[1:2] == ["--run-and-reap"]:
        run_and_reap(sys.argv[2], sys.argv[4:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--program", default="python3", help="the interpreter's file name")
    ap.add_argument("commands", nargs="+", help="NAME=COMMAND")
    a = ap.parse_args()
    cmds = parse_commands(a.commands)
    ends = {name: [] for name, _ in cmds}
    missed = {name: 0 for name, _ in cmds}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        for name, got in interleaved(cmds, a.rounds, lambda argv: pid1_end(argv, a.program, data)):
            if got is None:
                missed[name] += 1
            else:
                ends[name].append(got)
    print("| command | pid 1's end, median ms | p10 | p90 | of it off CPU (median) | runs |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, _ in cmds:
        if len(ends[name]) < 2:
            print(f"| {name} | no pid 1 seen | | | | {missed[name]} missed |")
            continue
        total = sorted(e for e, _ in ends[name])
        q = statistics.quantiles(total, n=10)
        off = statistics.median(o for _, o in ends[name])
        runs = f"{len(total)}" + (f" ({missed[name]} missed)" if missed[name] else "")
        print(f"| {name} | {statistics.median(total):.3f} | {q[0]:.3f} | {q[-1]:.3f} | {off:.3f} | {runs} |")


if __name__ == "__main__":
    main()
