#!/usr/bin/env python3
"""The CPU an interpreter has used when its program's first line runs, per command, interleaved:
what a sandbox adds to the interpreter's own start (its environment, an import guard, seccomp,
Landlock), apart from the sandbox's set-up and teardown, which run in other processes.

The program is a one-line probe that prints the time its own process has spent on a CPU, from
`/proc/self/schedstat` (nanoseconds, exact: not the tick-sampled `utime`); it reads no module
outside the built-ins, so a profile that restricts imports runs it too. Each COMMAND names the
probe's path as `{probe}`; its output's last line is the figure. Rounds run every command once
in a shuffled order (`interleave.py`'s `interleaved`). Prints a markdown table: median, p10,
p25 and p90 (ms), and each median's difference to the first command's.

usage: interp_cpu.py [--rounds N] NAME=COMMAND ...   (e.g. "bare=/usr/bin/python3 {probe}")
"""
import argparse, os, shlex, statistics, subprocess, sys, tempfile
from interleave import interleaved, parse_commands  # bench/interleave.py (a script's own folder is on sys.path)

PROBE = "print(int(open('/proc/self/schedstat').read().split()[0]) / 1e6)\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=80)
    ap.add_argument("commands", nargs="+", help="NAME=COMMAND, COMMAND naming the probe as {probe}")
    a = ap.parse_args()
    # Not under /tmp: a sandbox mounts a /tmp of its own (bwrap's --tmpfs /tmp).
    folder = tempfile.mkdtemp(prefix="warden-interp-cpu-", dir="/var/tmp")
    os.chmod(folder, 0o755)  # a sandbox's user reads the probe where a command binds it
    probe = os.path.join(folder, "probe.py")
    with open(probe, "w") as f:
        f.write(PROBE)
    os.chmod(probe, 0o644)
    cmds = [(name, [w.replace("{probe}", probe) for w in argv])
            for name, argv in parse_commands(a.commands)]

    def once(argv):
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        lines = r.stdout.strip().splitlines()
        if r.returncode != 0 or not lines:
            sys.exit(f"command failed ({r.returncode}): {shlex.join(argv)}\n{r.stderr}")
        return float(lines[-1])

    samples = {name: [] for name, _ in cmds}
    try:
        for name, ms in interleaved(cmds, a.rounds, once):
            samples[name].append(ms)
    finally:
        os.remove(probe)
        os.rmdir(folder)
    first = statistics.median(samples[cmds[0][0]])
    print(f"\nthe interpreter's CPU at its program's first line, {a.rounds} interleaved rounds\n")
    print("| command | median ms | p10 | p25 | p90 | median - first |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, _ in cmds:
        v = samples[name]
        m = statistics.median(v)
        q = statistics.quantiles(v, n=20)  # as interleave.py computes its p10 and p90
        print(f"| {name} | {m:.2f} | {q[1]:.2f} | {q[4]:.2f} | {q[17]:.2f} | {m - first:+.2f} |")


if __name__ == "__main__":
    main()
