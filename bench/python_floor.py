#!/usr/bin/env python3
"""The floor under a pooled one-shot (issue 24, point 1), measured without Warden.

A pooled one-shot's interpreter has already started and waits at its gate; what is left when
the code comes is CPython's own work: the rest of its start-up after `sitecustomize`, reading
and compiling the program, running it, and the interpreter's exit (atexit, flushing, module
teardown, freeing). This script measures exactly that on the host, with no sandbox, no
daemon and no HTTP: `/usr/bin/python3 PROGRAM` with a `sitecustomize` on `PYTHONPATH` that
blocks on a pipe (as Warden's import guard does at its gate); the time runs from the byte
written to the pipe to the process's exit. Beside it, in the same interleaved blocks:

- `bare`: the process start of `/usr/bin/python3 -c 'print(1)'` (the issue's baseline);
- `gate -> exit, start-up frozen`: the same, with the `sitecustomize` running before its gate
  the import guard's own `_freeze_start_up` (taken from `warden-engine/src/import_guard/guard.py`:
  `gc.freeze()`, then a `__main__` made after it), so the exit leaves the start-up's objects
  to the kernel — the floor of a pooled one-shot under the guard;
- `gate -> exit, os._exit`: the same gated program ending with `os._exit(0)` after flushing,
  i.e. without the interpreter's normal exit — what the exit costs (a sandbox cannot skip it:
  atexit handlers, `__del__` and flushing at exit are the program's observable behaviour).

The gated cases pay one thing after the gate that a Warden run does not: `site` then looks for
a `usercustomize` along the import path (stat calls, a folder listing), where in the jail the
guard is that `usercustomize`. So the floors are slightly high.

usage: python_floor.py [--rounds N]
"""
import argparse, ast, os, statistics, subprocess, sys, tempfile, time

GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "warden-engine",
                     "src", "import_guard", "guard.py")

SITE = """import os
fd = int(os.environ.pop("FLOOR_GATE_FD"))
os.read(fd, 1)
os.close(fd)
"""


def guard_freeze():
    """The guard's `_freeze_start_up`, from its source, and a call of it."""
    text = open(GUARD).read()
    function = next(node for node in ast.parse(text).body
                    if isinstance(node, ast.FunctionDef) and node.name == "_freeze_start_up")
    return ("import sys\n" + ast.get_source_segment(text, function)
            + "\n_freeze_start_up()\ndel _freeze_start_up, sys\n")


def gated(folder, program):
    r, w = os.pipe()
    env = dict(os.environ, PYTHONPATH=folder, FLOOR_GATE_FD=str(r))
    p = subprocess.Popen(["/usr/bin/python3", program], env=env, pass_fds=(r,),
                         stdout=subprocess.DEVNULL)
    os.close(r)
    time.sleep(0.1)  # the interpreter reaches its gate
    t = time.perf_counter()
    os.write(w, b"s")
    os.close(w)
    p.wait()
    return (time.perf_counter() - t) * 1000


def bare():
    t = time.perf_counter()
    subprocess.run(["/usr/bin/python3", "-c", "print(1)"], stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=60)
    a = ap.parse_args()
    folder = tempfile.mkdtemp()
    open(os.path.join(folder, "sitecustomize.py"), "w").write(SITE)
    frozen = tempfile.mkdtemp()
    open(os.path.join(frozen, "sitecustomize.py"), "w").write(guard_freeze() + SITE)
    open(os.path.join(frozen, "main.py"), "w").write("print(1)\n")
    normal = os.path.join(folder, "main.py")
    open(normal, "w").write("print(1)\n")
    quick = os.path.join(folder, "quick.py")
    open(quick, "w").write("print(1)\nimport os, sys\nsys.stdout.flush()\nos._exit(0)\n")
    cases = {
        "bare python3 -c 'print(1)' (process)": bare,
        "gate -> exit, print(1) (no sandbox)": lambda: gated(folder, normal),
        "gate -> exit, print(1), start-up frozen (no sandbox)": lambda: gated(
            frozen, os.path.join(frozen, "main.py")),
        "gate -> exit, print(1) then os._exit (no sandbox)": lambda: gated(folder, quick),
    }
    samples = {k: [] for k in cases}
    for _ in range(a.rounds):
        for name, run in cases.items():
            samples[name].append(run())
    print(f"{os.cpu_count()} cores, {a.rounds} interleaved rounds, "
          f"{time.strftime('%F %H:%M', time.gmtime())} UTC, load {os.getloadavg()[0]:.1f}\n")
    print("| case | p50 ms | p10 | p90 |")
    print("|---|---:|---:|---:|")
    for name, xs in samples.items():
        xs = sorted(xs)
        print(f"| {name} | {statistics.median(xs):.2f} | {xs[len(xs) // 10]:.2f} "
              f"| {xs[len(xs) * 9 // 10]:.2f} |")
    b = statistics.median(samples["bare python3 -c 'print(1)' (process)"])
    f = statistics.median(samples["gate -> exit, print(1) (no sandbox)"])
    g = statistics.median(samples["gate -> exit, print(1), start-up frozen (no sandbox)"])
    print(f"\nfloor / bare = {f / b:.2f}, with the start-up frozen as the guard does {g / b:.2f} "
          "(point 1's target for the whole pooled request: <= 0.25)")


if __name__ == "__main__":
    sys.exit(main())
