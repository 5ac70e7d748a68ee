#!/usr/bin/env python3
"""Where one `warden run` spends its time, stage by stage (issue 24, point 3).

Runs `WARDEN [ARGS...] run PROGRAM` N times with `WARDEN_TRACE_TIMING=1` (the CLI, its
helper and the sandbox's init each print `warden-trace: <ms> <stage>` on standard error, from
one CLOCK_MONOTONIC) and prints, for every stage, the median of its time after the run's first
trace line, in the order of those medians. Standard error goes to a file, not a pipe, so that
the trace does not wake this script while the run goes on.

usage: cli_stages.py WARDEN [--runs N] [--program FILE] [-- ARGS before `run`]
"""
import argparse, collections, os, re, statistics, subprocess, tempfile, time

# A whole line only: the processes print at once into one file, and a line written in pieces
# can be cut by another process's (such lines are dropped, and counted).
LINE = re.compile(r'warden-trace: (\d+\.\d+) ((?:cli|helper|backend|supervisor|init) [a-z ,"_-]+)')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--program", help="the program to run (default: print(1))")
    ap.add_argument("args", nargs="*", help="arguments before `run`, e.g. --config FILE")
    a = ap.parse_args()
    work = tempfile.mkdtemp()
    program = a.program or os.path.join(work, "one.py")
    if not a.program:
        with open(program, "w") as f:
            f.write("print(1)\n")
    err = os.path.join(work, "trace.log")
    env = dict(os.environ, WARDEN_TRACE_TIMING="1")
    stages = collections.defaultdict(list)
    dropped = 0
    for _ in range(a.runs):
        with open(err, "w") as log:
            subprocess.run([a.warden, *a.args, "run", program], stdout=subprocess.DEVNULL,
                           stderr=log, env=env, check=True)
        lines = open(err).read().splitlines()
        events = [(float(m.group(1)), m.group(2)) for m in map(LINE.fullmatch, lines) if m]
        dropped += len(lines) - len(events)
        first = min(t for t, _ in events)
        for t, stage in events:
            stages[stage].append(t - first)
        time.sleep(0.025)
    print("| stage | median ms after the first trace line |")
    print("|---|---:|")
    for stage, times in sorted(stages.items(), key=lambda kv: statistics.median(kv[1])):
        print(f"| {stage} | {statistics.median(times):.3f} |")
    print(f"\n{a.runs} runs; {dropped} trace lines cut by another process's dropped.")


if __name__ == "__main__":
    main()
