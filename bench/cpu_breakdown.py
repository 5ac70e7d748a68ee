#!/usr/bin/env python3
"""Where the CPU of a one-shot goes: `perf` samples of every process a one-shot makes, by stage.

Usage (root, a release build):
  python3 bench/cpu_breakdown.py WARDEN [--runs 200] [--blocks 4] [--mode cli|daemon] [--clients 4]
      [--reference "NAME=COMMAND"]

`cli`: N times `WARDEN run one.py` (`print(1)`, the default profile) under `perf record -g`
(following every child: the CLI, the jail's helper, supervisor, init and the interpreter), and
N times bare `/usr/bin/python3 -c 'print(1)'` the same way, in BLOCKS alternated blocks. `daemon`: `WARDEN serve`, once its pools
are full, under `perf record -g -p` of the daemon and its helpers' fork server (which follows
every process they start from then on), and
N `POST /v1/execute` of `print(1)` from CLIENTS threads on
keep-alive connections; the bare loop the same N times. Both also record the whole machine
(`perf record -a`) during the Warden part to count the kernel's worker threads (network
namespace clean-up, cgroup release), which no process of the tree is charged for; other work on
the machine shows there too, so that part is an upper bound. `--reference` replaces bare python
with another command run the same way (e.g. bwrap running `python3 -c 'print(1)'`); the
kernel's workers are counted on Warden's side only, so compare the trees.

Prints CPU milliseconds per run by process and stage (the root-most system call of each kernel
sample, page faults, user space by library), as a Markdown table, and the totals' ratio.
"""
import argparse
import collections
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import procs  # bench/procs.py (a script's own folder is on sys.path)

SYSCALL = re.compile(r"^(?:__x64_sys_|__do_sys_|__se_sys_|__ia32_sys_|ksys_)(\w+)$")

# The stage of a system call, for the table (anything else is "other syscalls").
STAGES = {
    "namespaces (unshare, clone, setns)": {"unshare", "clone", "clone3", "setns", "vfork", "fork"},
    "mounts and the root (mount, pivot_root, mkdir, ...)": {
        "mount", "umount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig",
        "fsmount", "mount_setattr", "mkdir", "mkdirat", "mknod", "mknodat", "symlink", "symlinkat",
        "chroot", "fchdir", "chdir", "rmdir"},
    "exec (execve)": {"execve", "execveat"},
    "exit and reaping (exit_group, wait4, kill)": {"exit_group", "exit", "wait4", "waitid", "kill", "tgkill", "pidfd_send_signal"},
    "seccomp, landlock, prctl, capabilities": {
        "seccomp", "prctl", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
        "capset", "setresuid", "setresgid", "setgroups"},
    "memory (mmap, munmap, mprotect, brk)": {"mmap", "munmap", "mprotect", "brk", "madvise", "mremap"},
    "files (open, read, write, close, stat)": {
        "openat", "open", "openat2", "read", "write", "close", "close_range", "newfstatat", "fstat",
        "statx", "lseek", "getdents64", "readlink", "readlinkat", "pread64", "pwrite64", "writev",
        "readv", "ioctl", "fcntl", "dup2", "dup3", "pipe2", "access", "faccessat", "faccessat2",
        "sendfile", "copy_file_range", "splice", "unlinkat", "unlink", "rename", "renameat2",
        "fchown", "fchownat", "fchmod", "fchmodat", "ftruncate", "fallocate", "memfd_create"},
    "sockets and polling": {"sendmsg", "recvmsg", "sendto", "recvfrom", "socket", "connect", "accept4",
                            "epoll_wait", "epoll_ctl", "poll", "ppoll", "select", "pselect6", "socketpair",
                            "shutdown", "bind", "listen", "futex", "sched_yield", "nanosleep", "clock_nanosleep"},
}
STAGE_OF = {name: stage for stage, names in STAGES.items() for name in names}


def classify(frames):
    """frames: [(sym, dso)] leaf first. Returns a stage name."""
    leaf_sym, leaf_dso = frames[0]
    if "kernel" not in leaf_dso:
        lib = os.path.basename(leaf_dso.strip("()"))
        if lib.startswith("python3"):
            return "user: the interpreter"
        if lib == "warden":
            return "user: warden"
        if lib.startswith("ld-linux"):
            return "user: the dynamic loader"
        if lib.startswith("libc"):
            return "user: libc"
        return "user: other libraries"
    syscall = None
    fault = False
    for sym, dso in frames:
        m = SYSCALL.match(sym)
        if m:
            syscall = m.group(1)
        if sym in ("asm_exc_page_fault", "exc_page_fault"):
            fault = True
    if syscall is None:
        return "kernel: page faults" if fault else "kernel: other (scheduling, interrupts, return to user)"
    return STAGE_OF.get(syscall, "other syscalls")


def samples(perf_data):
    """Yields (comm, period_ns, frames) from `perf script`."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "comm,tid,period,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    for block in out.split("\n\n"):
        lines = [l for l in block.split("\n") if l.strip()]
        if not lines:
            continue
        head = lines[0].split()
        try:
            period = int(head[-1])
        except ValueError:
            continue
        comm = " ".join(head[:-2])
        frames = []
        for l in lines[1:]:
            parts = l.strip().split(None, 1)
            if len(parts) < 2:
                continue
            rest = parts[1]
            if " (" in rest:
                sym, dso = rest.rsplit(" (", 1)
                frames.append((sym.split("+")[0], dso.rstrip(")")))
            else:
                frames.append((rest, ""))
        if frames:
            yield comm, period, frames


def who(comm):
    if comm.startswith("python"):
        return "the interpreter process"
    if comm in ("warden", "tokio-rt-worker") or comm.startswith("warden"):
        return "warden (CLI or daemon, helper, supervisor, init)"
    return "other (" + comm + ")"


def table(perf_files, runs, filter_comm=None):
    by = collections.Counter()
    total = 0
    for perf_data in perf_files:
        for comm, period, frames in samples(perf_data):
            if filter_comm and not filter_comm(comm, frames):
                continue
            if comm in ("sh", "seq"):  # the loop that starts the runs, not a run
                continue
            if filter_comm:
                key = ("kernel workers", kworker_stage(frames))
            else:
                key = (who(comm), classify(frames))
            by[key] += period
            total += period
    return {k: v / 1e6 / runs for k, v in by.items()}, total / 1e6 / runs


def kworker_stage(frames):
    syms = {s for s, _ in frames}
    if syms & {"cleanup_net", "ops_undo_list", "default_device_exit_batch", "unregister_netdevice_many"}:
        return "network namespace clean-up (cleanup_net)"
    if any("css" in s or "cgroup" in s for s in syms):
        return "cgroup release"
    if any("rcu" in s for s in syms):
        return "RCU callbacks"
    return "other kernel work"


def is_kworker(comm, frames):
    return comm.startswith("kworker") or comm.startswith("ksoftirqd") or comm.startswith("rcu")


def perf_record(out, *, argv=None, pid=None, system=False):
    cmd = ["perf", "record", "-q", "-g", "-o", out]
    if system:
        cmd += ["-a", "-F", "1000"]
    else:
        cmd += ["-F", "4000"]
    if pid is not None:
        cmd += ["-p", str(pid)]
    if argv:
        cmd += ["--"] + argv
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(recorder):
    recorder.send_signal(signal.SIGINT)
    recorder.wait(timeout=120)


class Daemon:
    """`warden serve` on a free port, its pools full before anything is counted."""

    def __init__(self, warden, work):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([warden, "serve", "--listen", f"127.0.0.1:{self.port}",
                                      "--data-dir", os.path.join(work, "data")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        time.sleep(5)  # the pools fill (data_science's warm interpreters) before counting starts

    def one_shots(self, clients, per_client):
        errors = []
        body = json.dumps({"code": "print(1)"})

        def client():
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            for _ in range(per_client):
                c.request("POST", "/v1/execute", body, {"content-type": "application/json"})
                r = c.getresponse()
                answer = r.read()
                if r.status != 200 or json.loads(answer)["stdout"] != "1\n":
                    errors.append(answer)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            sys.exit(f"{len(errors)} failed requests, e.g. {errors[0][:200]!r}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--runs", type=int, default=200, help="runs of each side, over all blocks")
    ap.add_argument("--blocks", type=int, default=4, help="blocks of each side, alternated")
    ap.add_argument("--mode", choices=["cli", "daemon"], default="cli")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--reference", default="bare python=/usr/bin/python3 -c 'print(1)'",
                    help="NAME=COMMAND of the other side (a shell command line)")
    a = ap.parse_args()
    ref_name, _, ref_cmd = a.reference.partition("=")
    work = tempfile.mkdtemp(prefix="warden-cpu-")
    one = os.path.join(work, "one.py")
    open(one, "w").write("print(1)\n")
    per_block = a.runs // a.blocks
    if a.mode == "daemon":
        per_block = per_block // a.clients * a.clients
    runs = per_block * a.blocks
    daemon = Daemon(a.warden, work) if a.mode == "daemon" else None
    ref_files, tree_files, sys_files = [], [], []
    wall = 0.0
    for block in range(a.blocks):
        # The reference (bare python by default): the block's starts under perf, following children.
        ref_files.append(os.path.join(work, f"ref{block}.data"))
        stop_ref = perf_record(ref_files[-1], argv=[
            "sh", "-c", f"for i in $(seq {per_block}); do {ref_cmd} >/dev/null; done"])
        stop_ref.wait(timeout=600)
        # Warden: its tree, and the whole machine for the kernel's workers.
        sys_files.append(os.path.join(work, f"sys{block}.data"))
        tree_files.append(os.path.join(work, f"tree{block}.data"))
        system = perf_record(sys_files[-1], system=True)
        time.sleep(0.5)
        t0 = time.time()
        if daemon is None:
            perf_record(tree_files[-1], argv=[
                "sh", "-c", f"for i in $(seq {per_block}); do {a.warden} run {one} >/dev/null || exit 1; done"]).wait(timeout=600)
        else:
            # Follows what the daemon and its fork server start from now on.
            roots = [daemon.proc.pid] + procs.fork_servers(daemon.proc.pid)
            tree = perf_record(tree_files[-1], pid=",".join(map(str, roots)))
            time.sleep(0.5)
            daemon.one_shots(a.clients, per_block // a.clients)
            time.sleep(1)  # the last teardowns and the pool's refill, counted
            stop(tree)
        wall += time.time() - t0
        stop(system)
    if daemon is not None:
        daemon.stop()

    ref, ref_total = table(ref_files, runs)
    tree, tree_total = table(tree_files, runs)
    kw, kw_total = table(sys_files, runs, filter_comm=is_kworker)
    print(f"# CPU per one-shot, {a.mode} mode, {runs} runs each side in {a.blocks} alternated blocks "
          f"({wall:.1f} s for Warden's part)\n")
    print(f"| process | stage | Warden ms/run | {ref_name} ms/run |")
    print("|---|---|---:|---:|")
    keys = sorted(set(tree) | set(ref), key=lambda k: -(tree.get(k, 0)))
    for k in keys:
        if tree.get(k, 0) < 0.05 and ref.get(k, 0) < 0.05:
            continue
        print(f"| {k[0]} | {k[1]} | {tree.get(k, 0):.2f} | {ref.get(k, 0):.2f} |")
    for k in sorted(kw, key=lambda k: -kw[k]):
        if kw[k] >= 0.05:
            print(f"| {k[0]} (whole machine) | {k[1]} | {kw[k]:.2f} | |")
    print(f"| **total** | | **{tree_total + kw_total:.2f}** ({tree_total:.2f} in the tree) | **{ref_total:.2f}** |")
    print(f"\nWarden / {ref_name} CPU per run: {(tree_total + kw_total) / ref_total:.2f} "
          f"(the tree alone {tree_total / ref_total:.2f})")
    shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
