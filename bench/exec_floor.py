#!/usr/bin/env python3
"""What one more process start costs on this machine, before any sandbox work: the floor
under a launcher's share of a run (issue 24, point 3).

A sandbox launcher (`warden run`, bwrap, `unshare`) is one more exec'd process before the
interpreter's own. On a virtual machine a process linked with glibc pays, before `main`,
glibc's reading of the CPU's features and cache sizes with the CPUID instruction, which the
hypervisor traps: the price of one trap is the CPU's and hypervisor's, not Warden's. This
script measures, with small programs it compiles itself (`cc`):

- `cpuid`: one CPUID instruction (leaf 4 and leaf 2, which glibc's cache-size probe issues),
  timed in a loop;
- the process start, interleaved (`interleave.py`'s `interleaved` and `timed`), wall and CPU
  (the child's user + system time) of:
  - `raw`: a static program without libc that only calls `exit` (the kernel's exec and exit);
  - `glibc static`: `int main(){return 0;}` linked statically with glibc;
  - `/usr/bin/true`: glibc, dynamically linked (what most launchers are);
  - and any `NAME=COMMAND` given (e.g. `warden --version`, `bwrap --version`).

The difference between `glibc static` and `raw` is glibc's start-up; divided by the price of
one CPUID it says about how many of them that start-up makes.

usage: exec_floor.py [--rounds N] [NAME=COMMAND ...]
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile
from interleave import interleaved, parse_commands, timed  # bench/interleave.py (a script's own folder is on sys.path)

RAW = """.globl _start
_start:
    mov $60, %eax
    xor %edi, %edi
    syscall
"""

NOP = "int main(void) { return 0; }\n"

CPUID = r"""
#include <cpuid.h>
#include <stdio.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
int main(void) {
    unsigned a, b, c, d, n = 2000;
    double t = now();
    for (unsigned i = 0; i < n; i++) __cpuid_count(4, i & 3, a, b, c, d);
    double leaf4 = (now() - t) / n;
    t = now();
    for (unsigned i = 0; i < n; i++) __cpuid(2, a, b, c, d);
    printf("%.3f %.3f\n", leaf4, (now() - t) / n);
    return 0;
}
"""


def build(folder):
    cc = shutil.which("cc") or sys.exit("needs a C compiler (cc)")
    paths = {}
    for name, source, suffix, flags in [
        ("raw", RAW, ".s", ["-nostdlib", "-static"]),
        ("nop", NOP, ".c", ["-O2", "-static"]),
        ("cpuid", CPUID, ".c", ["-O2"]),
    ]:
        src = os.path.join(folder, name + suffix)
        with open(src, "w") as f:
            f.write(source)
        out = os.path.join(folder, name)
        subprocess.run([cc, *flags, "-o", out, src], check=True)
        paths[name] = out
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("commands", nargs="*", help="NAME=COMMAND, timed beside the others")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        bins = build(folder)
        leaf4, leaf2 = (float(x) for x in subprocess.run(
            [bins["cpuid"]], capture_output=True, text=True, check=True).stdout.split())
        cmds = [("raw (no libc)", [bins["raw"]]), ("glibc static", [bins["nop"]]),
                ("/usr/bin/true", ["/usr/bin/true"])] + parse_commands(a.commands)
        wall = {name: [] for name, _ in cmds}
        cpu = {name: [] for name, _ in cmds}

        for name, (dt, _, c) in interleaved(cmds, a.rounds, timed):
            wall[name].append(dt)
            cpu[name].append(c)
    print(f"One CPUID instruction: leaf 4 {leaf4:.2f} us, leaf 2 {leaf2:.2f} us (mean of 2000 each).\n")
    print("| process start | wall median ms | p10 | p90 | CPU median ms |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in cmds:
        q = statistics.quantiles(wall[name], n=10)
        print(f"| {name} | {statistics.median(wall[name]):.2f} | {q[0]:.2f} | {q[-1]:.2f} "
              f"| {statistics.median(cpu[name]):.2f} |")
    glibc = statistics.median(wall["glibc static"]) - statistics.median(wall["raw (no libc)"])
    print(f"\nglibc's start-up: {glibc:.2f} ms, the price of about {glibc * 1000 / leaf4:.0f} "
          f"CPUID instructions at {leaf4:.2f} us.")


if __name__ == "__main__":
    main()
