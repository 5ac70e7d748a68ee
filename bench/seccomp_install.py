#!/usr/bin/env python3
"""What installing the sandbox's seccomp filter costs (issue 24, point 3): the kernel checks,
converts and JIT-compiles the program at every installation, in init's step "apply seccomp".

Reads the program the build generated (`seccomp_filters.rs` in `warden-jail`'s `OUT_DIR`, the
filter every sandbox installs), compiles a small C timer with `cc`, and times
`seccomp(SECCOMP_SET_MODE_FILTER)` in freshly forked children (one installation each, so that
no filter stacks on another), for that program and for a one-instruction program that allows
everything, in alternating blocks. Prints the medians and p10/p90 in microseconds.

usage: seccomp_install.py [--rounds N] [--blocks N] [SECCOMP_FILTERS_RS]
"""
import argparse, glob, os, re, struct, subprocess, sys, tempfile
from interleave import print_spreads  # bench/interleave.py (a script's own folder is on sys.path)

TIMER = r"""
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* usage: timer FILE N: N installations of the program in FILE, one per forked child; prints
   each one's time in nanoseconds. */
int main(int argc, char **argv) {
    static struct sock_filter prog[4096];
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    unsigned short n = (unsigned short)fread(prog, sizeof prog[0], 4096, f);
    fclose(f);
    struct sock_fprog fprog = {n, prog};
    for (int i = 0; i < atoi(argv[2]); i++) {
        int fd[2];
        if (pipe(fd)) return 2;
        pid_t child = fork();
        if (child == 0) {
            struct timespec a, b;
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) _exit(3);
            clock_gettime(CLOCK_MONOTONIC, &a);
            long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog);
            clock_gettime(CLOCK_MONOTONIC, &b);
            long long ns = r ? -1 : (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
            if (write(fd[1], &ns, sizeof ns) != sizeof ns) _exit(4);
            _exit(0);
        }
        long long ns;
        if (read(fd[0], &ns, sizeof ns) != sizeof ns || ns < 0) return 5;
        waitpid(child, 0, 0);
        close(fd[0]);
        close(fd[1]);
        printf("%lld\n", ns);
    }
    return 0;
}
"""

ALLOW_ALL = struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000)  # BPF_RET | BPF_K, SECCOMP_RET_ALLOW


def the_build_s_program():
    target = os.environ.get("CARGO_TARGET_DIR", "/var/cache/warden/target")
    found = sorted(
        glob.glob(f"{target}/*/release/build/warden-jail-*/out/seccomp_filters.rs"),
        key=os.path.getmtime,
    )
    if not found:
        sys.exit("no seccomp_filters.rs: build warden (release) first, or name the file")
    return found[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200, help="installations per block")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("filters", nargs="?", help="a seccomp_filters.rs (default: the newest build's)")
    a = ap.parse_args()
    source = a.filters or the_build_s_program()
    insns = re.findall(r"\((\d+),(\d+),(\d+),(\d+)\)", open(source).read())
    work = tempfile.mkdtemp()
    programs = {
        f"Warden's filter ({len(insns)} instructions)": b"".join(
            struct.pack("<HBBI", *map(int, i)) for i in insns
        ),
        "allow everything (1 instruction)": ALLOW_ALL,
    }
    paths = {}
    for i, (name, code) in enumerate(programs.items()):
        paths[name] = os.path.join(work, f"{i}.bpf")
        with open(paths[name], "wb") as f:
            f.write(code)
    timer = os.path.join(work, "timer")
    with open(timer + ".c", "w") as f:
        f.write(TIMER)
    subprocess.run(["cc", "-O2", "-o", timer, timer + ".c"], check=True)
    times = {name: [] for name in programs}
    for _ in range(a.blocks):
        for name in programs:
            out = subprocess.run([timer, paths[name], str(a.rounds)], capture_output=True,
                                 text=True, check=True).stdout
            times[name] += [int(line) / 1000 for line in out.split()]
    print(f"{source}\n")
    print_spreads("program", "installations", "µs", times, 1)


if __name__ == "__main__":
    main()
