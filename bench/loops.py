#!/usr/bin/env python3
"""Throughput of whole commands: each command run in a loop by as many workers as cores for
SECONDS, in blocks interleaved in a shuffled order (each block runs every command once), so
that drift in a shared machine's speed hits them alike. Prints a markdown table: runs per
second per block, their mean, and the mean's ratio to the first command's.

Issue 24, point 2 compares the daemon's one-shots per second with a bare `python3 -c` loop run
this way; the same loop over a minimal sandbox (`unshare` of the namespaces a sandbox gets,
bwrap) says what any sandbox built from namespaces can reach on the machine.

usage: loops.py [--seconds S] [--blocks N] [--gap S] [--workers N] [--json FILE] NAME=COMMAND ...
"""
import argparse, concurrent.futures, json, os, statistics, subprocess, time
from interleave import interleaved, parse_commands  # bench/interleave.py (a script's own folder is on sys.path)


def loop_rate(argv, seconds, workers=None):
    """Runs `argv` to its end over and over in `workers` threads (default: one per core) for
    `seconds`; returns completed runs per second. A failed run stops the loop with an error."""
    workers = workers or os.cpu_count()
    deadline = time.monotonic() + seconds

    def worker():
        n = 0
        while time.monotonic() < deadline:
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
            n += 1
        return n

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        done = sum(ex.map(lambda _: worker(), range(workers)))
    # The last runs end after the deadline: divide by the time they really took.
    return done / (time.monotonic() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--gap", type=float, default=1.0, help="pause between two blocks (s)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(),
                    help="loops at once (default: one per core)")
    ap.add_argument("--json")
    ap.add_argument("commands", nargs="+", help="NAME=COMMAND")
    a = ap.parse_args()
    cmds = parse_commands(a.commands)
    rates = {name: [] for name, _ in cmds}

    def block(argv):
        rate = loop_rate(argv, a.seconds, a.workers)
        time.sleep(a.gap)
        return rate

    for name, rate in interleaved(cmds, a.blocks, block):
        rates[name].append(rate)
    first = statistics.mean(rates[cmds[0][0]])
    print(f"| command ({a.workers} workers, {a.blocks} blocks of {a.seconds:g} s) "
          "| runs/s per block | mean | mean / first |")
    print("|---|---|---:|---:|")
    for name, xs in rates.items():
        m = statistics.mean(xs)
        print(f"| {name} | {' '.join(f'{x:.1f}' for x in xs)} | {m:.1f} | {m / first:.2f} |")
    if a.json:
        json.dump({"rates": rates}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
