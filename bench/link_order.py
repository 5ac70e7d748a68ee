#!/usr/bin/env python3
"""Regenerates crates/warden/link-order.txt: the functions a `warden run` executes, which the
linker places side by side at the start of .text (`--symbol-ordering-file`, crates/warden/build.rs).

Why: every `warden run` maps this 16 MB binary three times over — the CLI, the helper it forks,
and the sandbox's init forked from the helper; fork copies no page-table entries of file-backed
text, so each process faults in, 64 KB at a time, every stretch of text it runs. Scattered
through .text, the code of one run cost ≈ 160 such faults per run; gathered, far fewer
(docs/benchmarks.md, "The code of one run, side by side").

How: with a release build, `perf` records (1) every page fault of RUNS runs of
`WARDEN run one.py` (`print(1)`), keeping the faults on instruction fetches (the faulting
address is the instruction pointer: code not yet mapped), and (2) samples with call chains of
SAMPLE_RUNS more runs. Every function of the binary seen either way is listed, the most
sampled first; the entries of the current list that the binary still has are kept, so that
running this again on a build linked with the list adds what is still scattered. Names are
mangled, as the linker wants them; a name the binary no longer has is ignored by the linker.

usage (root, perf): bench/link_order.py WARDEN [--runs 60] [--sample-runs 300] [--out FILE]
"""
import argparse, collections, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "crates", "warden", "link-order.txt")


def perf_script(data, fields):
    return subprocess.run(["perf", "script", "-i", data, "--no-demangle", "-F", fields],
                          capture_output=True, text=True, check=True).stdout


def loop(warden, runs, program):
    return ["sh", "-c", f'for i in $(seq {runs}); do "{warden}" run "{program}" >/dev/null; done']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--sample-runs", type=int, default=300)
    ap.add_argument("--out", default=DEFAULT_OUT)
    a = ap.parse_args()
    warden = os.path.realpath(a.warden)
    binary = os.path.basename(warden)
    work = tempfile.mkdtemp()
    program = os.path.join(work, "one.py")
    with open(program, "w") as f:
        f.write("print(1)\n")
    faults, samples = os.path.join(work, "faults.data"), os.path.join(work, "samples.data")
    subprocess.run(["perf", "record", "-q", "-e", "page-faults", "-c", "1", "-d", "-o", faults,
                    "--"] + loop(warden, a.runs, program), check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["perf", "record", "-q", "-F", "20000", "-g", "-o", samples, "--"]
                   + loop(warden, a.sample_runs, program), check=True, stdout=subprocess.DEVNULL)

    seen = collections.Counter()
    # Instruction fetches: the faulting address is the instruction pointer itself.
    fault = re.compile(r"\s*([0-9a-f]+)\s+(\S+)\s+\((.*?)\)\s+([0-9a-f]+)\s+(\S+)\s+\((.*?)\)")
    fetches = 0
    for line in perf_script(faults, "addr,ip,sym,dso").splitlines():
        m = fault.match(line)
        if m and m.group(1) == m.group(4) and m.group(6).endswith(binary):
            fetches += 1
            seen[m.group(5)] += 1
    # Samples: every frame of the binary on the call chain.
    frame = re.compile(r"\s*[0-9a-f]+\s+(\S+)\s+\((.*?)\)\s*$")
    for line in perf_script(samples, "ip,sym,dso").splitlines():
        m = frame.match(line)
        if m and m.group(2).endswith(binary):
            seen[re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))] += 1
    seen.pop("[unknown]", None)

    defined = set()
    for line in subprocess.run(["nm", "--no-demangle", "--defined-only", warden],
                               capture_output=True, text=True, check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            defined.add(parts[2])
    kept = []
    if os.path.exists(a.out):
        kept = [s for s in open(a.out).read().split() if s in defined]
    names = list(dict.fromkeys(kept + [s for s, _ in seen.most_common() if s in defined]))
    with open(a.out, "w") as f:
        f.write("\n".join(names) + "\n")
    print(f"{fetches / a.runs:.0f} instruction-fetch faults per run in {binary}; "
          f"{len(kept)} names kept, {len(names) - len(kept)} added: {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
