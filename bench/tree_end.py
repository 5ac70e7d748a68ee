#!/usr/bin/env python3
"""How long a command's processes go on after the command itself has exited (issue 24, point
3): the last part of `interleave.py --tree`'s run time, taken apart.

Runs each `NAME=COMMAND` N times in a shell loop under `perf record -a` on three tracepoints
(`sched_process_fork`, `sys_enter_exit_group`, `sys_enter_exit`), rebuilds each run's process
tree from the forks, and measures from the command's own `exit_group` to the last `exit_group`
(or a thread's `exit`) of a process it started: how long its processes go on working after it
(for `warden run`: the helper waiting for the sandbox's init to end, then its teardown). A
process's own end after its `exit_group` (its memory and namespaces torn down) is not in it, so
a launcher whose last process begins to exit before the launcher itself measures 0. The
commands' loops alternate, in blocks. Prints the medians and p10/p90 in milliseconds.

usage: tree_end.py [--runs N] [--blocks N] NAME=COMMAND ...
"""
import argparse, os, re, subprocess, tempfile
from interleave import print_spreads  # bench/interleave.py (a script's own folder is on sys.path)

EVENT = re.compile(r"\s*(.+?)\s+(\d+)\s+([\d.]+):\s+(?:sched|syscalls):(\w+):\s*(.*)")


def tree_ends(command, runs, data):
    """The command's `runs` runs: for each, ms from its exit_group to its tree's last one."""
    loop_pid_file = data + ".loop"
    loop = (f"echo $$ > {loop_pid_file}; "
            f"for i in $(seq {runs}); do {command} >/dev/null; sleep 0.02; done")
    subprocess.run(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-a", "-o", data,
                    "-e", "sched:sched_process_fork", "-e", "syscalls:sys_enter_exit_group",
                    "-e", "syscalls:sys_enter_exit", "--", "sh", "-c", loop],
                   stderr=subprocess.DEVNULL, check=True)
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    loop_pid = int(open(loop_pid_file).read())
    parent, comm_of, exited = {}, {}, {}
    for line in out.splitlines():
        m = EVENT.match(line)
        if not m:
            continue
        comm, pid, ms, event, rest = m[1], int(m[2]), float(m[3]) * 1000, m[4], m[5]
        if event == "sched_process_fork":
            child = int(re.search(r"child_pid=(\d+)", rest)[1])
            # "comm=P pid=P child_comm=C child_pid=C" (older kernels: parent_pid=P)
            parent[child] = int(re.search(r"(?:^|\s)(?:parent_)?pid=(\d+)", rest)[1])
        else:
            exited[pid] = max(exited.get(pid, 0), ms)
            comm_of[pid] = comm

    def root_of(pid):
        while parent.get(pid) not in (loop_pid, None):
            pid = parent[pid]
        return pid if parent.get(pid) == loop_pid else None

    trees = {}
    for pid, ms in exited.items():
        root = root_of(pid)
        # The loop's own `seq` and `sleep` are not runs of the command.
        if root is not None and root in exited and comm_of.get(root) not in ("seq", "sleep"):
            trees.setdefault(root, []).append(ms)
    return [max(ends) - exited[root] for root, ends in trees.items()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40, help="runs per command per block")
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("commands", nargs="+", metavar="NAME=COMMAND")
    a = ap.parse_args()
    commands = [c.split("=", 1) for c in a.commands]
    data = os.path.join(tempfile.mkdtemp(), "perf.data")
    ends = {name: [] for name, _ in commands}
    for _ in range(a.blocks):
        for name, command in commands:
            ends[name] += tree_ends(command, a.runs, data)
    print_spreads("command", "runs", "ms after its exit", ends, 3)


if __name__ == "__main__":
    main()
