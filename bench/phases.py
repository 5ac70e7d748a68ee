#!/usr/bin/env python3
"""Where the time of one sandboxed run goes, in three phases, per command, interleaved.

Each run of a command is recorded with `perf record` on two scheduler tracepoints only
(`sched_process_exec`, `sched_process_exit`: no sampling, little overhead) and split at the
interpreter's own exec and exit:

- `before`: from the command's exec to the interpreter's exec (the sandbox's set-up: the
  launcher's own start, namespaces, the root, limits; 0 for the bare interpreter);
- `program`: from the interpreter's exec to its exit (its start-up, the program, its exit);
- `after`: from the interpreter's exit to the command's exit (the kernel's teardown of the
  interpreter, then the launcher noticing, reporting and exiting).

The three add up to the command's run time as the tracepoints see it (from its exec, so
without the fork that started it). Rounds run every command once in a shuffled order
(`interleave.py`'s `interleaved`); prints the medians (ms) per phase.

A command may start with `VAR=VALUE` words (its environment, as in `interleave.py`).

usage: phases.py [--rounds N] [--gap-ms MS] [--program NAME] NAME=COMMAND ...
"""
import argparse, os, re, shlex, statistics, subprocess, sys, tempfile, time
from interleave import interleaved, parse_commands, split_env  # bench/interleave.py (a script's own folder is on sys.path)

EVENT = re.compile(r"\s(\d+\.\d+):\s+sched:(\w+):(.*)")


def sched_events(argv, events, data, machine_wide=False, wrapper=()):
    """Runs `argv` once (leading `VAR=VALUE` words: its environment, as in `interleave.py`)
    under `perf record` on the scheduler tracepoints `events` (e.g. `sched_process_exec`), of
    the command's own processes or, with `machine_wide`, of every CPU; `wrapper` goes between
    perf and the command. Returns the events in order as (ms, event, fields, pid); a failure
    ends the script. `data` is perf's file."""
    env, argv = split_env(argv)
    record = ["perf", "record", "-q", "-o", data] + (["-a"] if machine_wide else [])
    for event in events:
        record += ["-e", "sched:" + event]
    r = subprocess.run(record + ["--", *wrapper, *argv], env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {shlex.join(argv)}")
    out = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = EVENT.search(line)
        if m and m.group(2) in events:
            found.append((float(m.group(1)) * 1e3, m.group(2), m.group(3), line.split()[1]))
    return found


def phases(argv, program, data):
    """One run of `argv` under perf: (before, program, after) in ms."""
    events = sched_events(argv, ["sched_process_exec", "sched_process_exit"], data)
    start = events[0]
    top_pid = start[3]
    execs = [t for t, kind, rest, _ in events
             if kind == "sched_process_exec" and f"/{program} " in rest + " "]
    exits = [t for t, kind, rest, _ in events
             if kind == "sched_process_exit" and f"comm={program} " in rest]
    ends = [t for t, kind, _, pid in events if kind == "sched_process_exit" and pid == top_pid]
    if not (execs and exits and ends):
        sys.exit(f"no exec and exit of {program!r} (or of the command) recorded for "
                 f"{shlex.join(argv)}: is --program the interpreter's file name?")
    exec_at, exit_at, end = execs[0], exits[0], ends[-1]
    return (exec_at - start[0], exit_at - exec_at, end - exit_at)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--gap-ms", type=float, default=25.0)
    ap.add_argument("--program", default="python3",
                    help="the interpreter's file name, as exec'd (default python3)")
    ap.add_argument("commands", nargs="+", help="NAME=COMMAND")
    a = ap.parse_args()
    cmds = parse_commands(a.commands)
    samples = {name: [] for name, _ in cmds}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        for _, argv in cmds:  # warm-up
            phases(argv, a.program, data)
        def once(argv):
            split = phases(argv, a.program, data)
            time.sleep(a.gap_ms / 1000)
            return split
        for name, split in interleaved(cmds, a.rounds, once):
            samples[name].append(split)
    print(f"| command | before ms | program | after | total (medians of {a.rounds}) |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in cmds:
        runs = samples[name]
        cols = [statistics.median(c) for c in zip(*runs)]
        total = statistics.median(sum(r) for r in runs)
        print(f"| {name} | {cols[0]:.2f} | {cols[1]:.2f} | {cols[2]:.2f} | {total:.2f} |")


if __name__ == "__main__":
    main()
