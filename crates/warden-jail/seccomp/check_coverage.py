#!/usr/bin/env python3
"""Check that the seccomp allow-list (x86_64.toml) covers the reference workloads.

Each workload (Python, Node, bash; embedded below) runs under

    strace -f -qq -e raw=all -o TRACE -- PROGRAM ...

and every traced call is evaluated against the policy, arguments included (raw=all makes
strace print arguments as numbers, so the [[allow.when]] rules can be checked). Any call the
filter would refuse is reported unless it is listed in EXPECTED_DENIED with a reason.

    python3 check_coverage.py              lint the TOML, trace the workloads, report gaps
    python3 check_coverage.py --enforce    also run every workload under the real filter,
                                           compiled from the TOML to BPF by this script, and
                                           run the negative probes (escape attempts must fail)
    python3 check_coverage.py --list       print the syscalls the workloads use (to re-derive)
    python3 check_coverage.py --only NAME  run one workload (repeatable)

Exit status 1 if the TOML is malformed, a workload fails, or a used syscall is not allowed.
Needs: strace, /usr/bin/python3, /usr/bin/node, /usr/bin/bash, linux-libc-dev (syscall
numbers); python3-numpy/pandas/matplotlib are optional (that workload is skipped without them).
Run as root or as a user allowed to ptrace its children.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
POLICY = HERE / "x86_64.toml"
UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
# Syscalls newer than Debian 12's kernel headers (6.1) that the policy may name.
NEWER_SYSCALLS = {"cachestat": 451, "fchmodat2": 452, "map_shadow_stack": 453,
                  "futex_wake": 454, "futex_wait": 455, "futex_requeue": 456}

# Calls the workloads make that the filter refuses on purpose, and why that is harmless.
# GLOBAL ones may come from any workload; the others only from workloads that list them.
GLOBAL_EXPECTED_DENIED = {"clone3"}
EXPECTED_DENIED = {
    "clone3": "glibc >= 2.34 tries clone3 first for threads and posix_spawn; ENOSYS makes it "
              "fall back to clone, which the policy allows with the namespace-flag rule",
    "io_uring_setup": "libuv (node) probes io_uring when UV_USE_IO_URING=1; any error makes it "
                      "use epoll and its thread pool (node_uring checks the output is unchanged)",
    "io_uring_enter": "only reachable after a successful io_uring_setup (see io_uring_setup)",
}

# ───────────────────────── policy ─────────────────────────


@dataclass
class Cond:
    arg: int
    op: str
    value: int
    mask: int = 0
    width: int = 64

    def holds(self, x: int) -> bool:
        full = (1 << self.width) - 1
        x &= full
        if self.op == "eq":
            return x == self.value & full
        if self.op == "ne":
            return x != self.value & full
        return x & self.mask & full == self.value


@dataclass
class Policy:
    default_errno: int = errno.ENOSYS
    allow: dict[str, list[list[Cond]]] = field(default_factory=dict)  # name -> alternatives
    deny: dict[str, int] = field(default_factory=dict)  # name -> errno

    def action(self, name: str, args: list[int] | None) -> str:
        """'allow', or the errno name the filter returns. args=None: unknown, judge by name."""
        if name in self.deny:
            return errno.errorcode[self.deny[name]]
        alts = self.allow.get(name)
        if alts is None:
            return errno.errorcode[self.default_errno]
        for conds in alts:
            if not conds or args is None:
                return "allow"
            if all(c.arg < len(args) and c.holds(args[c.arg]) for c in conds):
                return "allow"
        return errno.errorcode[self.default_errno]


def syscall_table() -> dict[str, int]:
    table = dict(NEWER_SYSCALLS)
    if not UNISTD.exists():
        sys.exit(f"{UNISTD} is missing: apt-get install -y linux-libc-dev")
    for m in re.finditer(r"#define __NR_(\w+) (\d+)", UNISTD.read_text()):
        table[m.group(1)] = int(m.group(2))
    return table


def load_policy(path: Path, table: dict[str, int]) -> tuple[Policy, list[str]]:
    """Parse and lint the TOML. Returns the policy and a list of problems."""
    problems: list[str] = []
    doc = tomllib.loads(path.read_text())
    pol = Policy()
    extra = set(doc) - {"allow", "deny"}
    if extra:
        problems.append(f"unknown top-level keys: {sorted(extra)}")
    for i, e in enumerate(doc.get("allow", [])):
        where = f"allow[{i}] {e.get('name', '?')}"
        if set(e) - {"name", "reason", "when"}:
            problems.append(f"{where}: unknown keys {sorted(set(e) - {'name', 'reason', 'when'})}")
        name = e.get("name", "")
        if name not in table:
            problems.append(f"{where}: not an x86_64 syscall name")
        if not str(e.get("reason", "")).strip():
            problems.append(f"{where}: missing reason")
        conds = []
        for c in e.get("when", []):
            if set(c) - {"arg", "op", "value", "mask", "width"}:
                problems.append(f"{where}: unknown condition keys {sorted(set(c))}")
            op, arg, width = c.get("op"), c.get("arg"), c.get("width", 64)
            if op not in ("eq", "ne", "masked_eq"):
                problems.append(f"{where}: bad op {op!r}")
            if not isinstance(arg, int) or not 0 <= arg <= 5:
                problems.append(f"{where}: arg must be 0..5")
            if width not in (32, 64):
                problems.append(f"{where}: width must be 32 or 64")
            if not isinstance(c.get("value"), int) or c["value"] < 0:
                problems.append(f"{where}: value must be a non-negative integer")
            if op == "masked_eq":
                if "mask" not in c:
                    problems.append(f"{where}: masked_eq needs a mask")
                elif c["value"] & ~c["mask"]:
                    problems.append(f"{where}: value has bits outside mask (never matches)")
            elif "mask" in c:
                problems.append(f"{where}: mask only applies to masked_eq")
            if width == 32 and c.get("value", 0) >> 32:
                problems.append(f"{where}: value does not fit width 32")
            conds.append(Cond(arg=arg, op=op, value=c.get("value", 0), mask=c.get("mask", 0),
                              width=width))
        if conds:
            pol.allow.setdefault(name, []).append(conds)
        elif name in pol.allow:
            problems.append(f"{where}: duplicate unconditional entry")
        else:
            pol.allow[name] = [[]]
    for name, alts in pol.allow.items():
        if len(alts) > 1 and any(not a for a in alts):
            problems.append(f"allow {name}: an unconditional entry makes its conditional ones moot")
    for i, e in enumerate(doc.get("deny", [])):
        name = e.get("name", "")
        where = f"deny[{i}] {name}"
        if set(e) - {"name", "errno", "reason"}:
            problems.append(f"{where}: unknown keys")
        if name not in table:
            problems.append(f"{where}: not an x86_64 syscall name")
        if not str(e.get("reason", "")).strip():
            problems.append(f"{where}: missing reason")
        err = getattr(errno, str(e.get("errno", "")), None)
        if not isinstance(err, int):
            problems.append(f"{where}: unknown errno {e.get('errno')!r}")
            err = errno.EPERM
        if name in pol.deny:
            problems.append(f"{where}: duplicate")
        if name in pol.allow:
            problems.append(f"{where}: also in [[allow]]")
        pol.deny[name] = err
    return pol, problems


# ───────────────────────── BPF compiler (for --enforce) ─────────────────────────
# A reference filter with the same meaning as the jail's (src/seccomp/table.rs): arch check (kill), then one block per
# syscall; conditions compare 64-bit arguments as two 32-bit words unless width = 32.

LD_ABS, JEQ, JGE, JA, AND, RET = 0x20, 0x15, 0x35, 0x05, 0x54, 0x06
AUDIT_ARCH_X86_64 = 0xC000003E
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
FAIL = "FAIL"


def _cond_code(c: Cond) -> list:
    lo_off, hi_off = 16 + 8 * c.arg, 20 + 8 * c.arg
    lo, hi = c.value & 0xFFFFFFFF, c.value >> 32
    mlo, mhi = c.mask & 0xFFFFFFFF, c.mask >> 32
    wide = c.width == 64
    if c.op == "eq":
        code = [(LD_ABS, 0, 0, lo_off), (JEQ, 0, FAIL, lo)]
        return ([(LD_ABS, 0, 0, hi_off), (JEQ, 0, FAIL, hi)] if wide else []) + code
    if c.op == "masked_eq":
        code = [(LD_ABS, 0, 0, lo_off), (AND, 0, 0, mlo), (JEQ, 0, FAIL, lo)]
        return ([(LD_ABS, 0, 0, hi_off), (AND, 0, 0, mhi), (JEQ, 0, FAIL, hi)] if wide else []) + code
    # ne: refuse only when every compared word is equal
    code = [(LD_ABS, 0, 0, lo_off), (JEQ, FAIL, 0, lo)]
    return ([(LD_ABS, 0, 0, hi_off), (JEQ, 0, 2, hi)] if wide else []) + code


def compile_bpf(pol: Policy, table: dict[str, int]) -> list[tuple[int, int, int, int]]:
    default = RET_ERRNO | pol.default_errno
    prog = [(LD_ABS, 0, 0, 4), (JEQ, 1, 0, AUDIT_ARCH_X86_64), (RET, 0, 0, RET_KILL_PROCESS),
            (LD_ABS, 0, 0, 0), (JGE, 0, 1, 0x40000000), (RET, 0, 0, default)]
    names = sorted(set(pol.allow) | set(pol.deny), key=lambda n: table[n])
    for name in names:
        nr = table[name]
        if name in pol.deny:
            prog += [(JEQ, 0, 1, nr), (RET, 0, 0, RET_ERRNO | pol.deny[name])]
            continue
        alts = pol.allow[name]
        if alts == [[]]:
            prog += [(JEQ, 0, 1, nr), (RET, 0, 0, RET_ALLOW)]
            continue
        block = []
        for conds in alts:
            rule = [ins for c in conds for ins in _cond_code(c)] + [(RET, 0, 0, RET_ALLOW)]
            end = len(rule)  # failing a condition jumps past this rule's RET
            for i, (code, jt, jf, k) in enumerate(rule):
                jt = end - i - 1 if jt == FAIL else jt
                jf = end - i - 1 if jf == FAIL else jf
                assert jt < 256 and jf < 256
                rule[i] = (code, jt, jf, k)
            block += rule
        block.append((RET, 0, 0, default))
        prog += [(JEQ, 1, 0, nr), (JA, 0, 0, len(block))] + block
    prog.append((RET, 0, 0, default))
    assert len(prog) <= 4096
    return prog


def exec_filtered(argv: list[str]) -> None:
    """Install the policy's filter in this process and exec argv (internal, for --enforce)."""
    table = syscall_table()
    pol, problems = load_policy(POLICY, table)
    if problems:
        sys.exit("policy problems: " + "; ".join(problems))
    prog = compile_bpf(pol, table)

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    arr = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), arr)
    libc = ctypes.CDLL(None, use_errno=True)
    ul = ctypes.c_ulong
    if libc.prctl(38, ul(1), ul(0), ul(0), ul(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.exit(f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(22, ul(2), ctypes.byref(fprog), ul(0), ul(0)) != 0:  # PR_SET_SECCOMP, FILTER
        sys.exit(f"PR_SET_SECCOMP: {os.strerror(ctypes.get_errno())}")
    os.execve(argv[0], argv, os.environ)


# ───────────────────────── workloads ─────────────────────────

PY_BASIC = r'''
import asyncio, concurrent.futures, fcntl, hashlib, json, mmap, multiprocessing as mp, os, pathlib
import random, re, resource, select, shutil, signal, socket, sqlite3, subprocess, sys, tempfile
import threading, time, zlib, uuid, datetime, locale, getpass, platform, queue, zipfile, tarfile
import termios

def square(x):
    return x * x

def main():
    work = tempfile.mkdtemp(prefix="wl-", dir="/tmp")
    p = pathlib.Path(work)
    # file I/O in /tmp
    (p / "a.txt").write_text("hello\nworld\n")
    with open(p / "a.txt", "a") as f:
        f.write("more\n"); f.flush(); os.fsync(f.fileno()); os.fdatasync(f.fileno())
    assert (p / "a.txt").read_text().count("\n") == 3
    os.makedirs(p / "d" / "e", exist_ok=True)
    shutil.copy(p / "a.txt", p / "d" / "b.txt"); shutil.copy2(p / "a.txt", p / "d" / "c.txt")
    shutil.copytree(p / "d", p / "d2"); os.rename(p / "d2", p / "d3"); shutil.move(p / "d3", p / "d4")
    os.symlink(p / "a.txt", p / "link"); os.readlink(p / "link"); os.link(p / "a.txt", p / "hard")
    os.chmod(p / "a.txt", 0o600); os.utime(p / "a.txt"); os.path.realpath(p / "link")
    os.stat(p / "a.txt"); os.lstat(p / "link"); os.access(p / "a.txt", os.R_OK); os.statvfs(work)
    sorted(p.rglob("*")); list(os.scandir(work)); os.listdir(work); os.walk(work)
    os.mkfifo(p / "fifo"); os.unlink(p / "fifo")
    with open(p / "a.txt", "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX); fcntl.lockf(f, fcntl.LOCK_UN)
        m = mmap.mmap(f.fileno(), 0); m[:5]; m.flush(); m.close()
        f.truncate(5); os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    with open(p / "a.txt", "rb") as f:
        os.pread(f.fileno(), 3, 0); os.sendfile(os.open(p / "s.txt", os.O_WRONLY | os.O_CREAT), f.fileno(), 0, 5)
    with open(p / "big", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, 65536)
    with tempfile.NamedTemporaryFile(dir=work) as t:
        t.write(b"x" * 100000); t.flush()
    with tempfile.TemporaryFile() as t:
        t.write(b"y"); t.seek(0); t.read()
    with zipfile.ZipFile(p / "z.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.write(p / "a.txt", "a.txt")
    with tarfile.open(p / "t.tgz", "w:gz") as t:
        t.add(p / "d", "d")
    with tarfile.open(p / "t.tgz") as t:
        t.extractall(p / "x")
    shutil.disk_usage(work)
    # sqlite
    con = sqlite3.connect(str(p / "db.sqlite")); con.execute("create table t(x)")
    con.executemany("insert into t values (?)", [(i,) for i in range(100)]); con.commit()
    assert con.execute("select sum(x) from t").fetchone()[0] == 4950; con.close()
    # misc stdlib and process info
    hashlib.sha256(b"x").hexdigest(); zlib.compress(b"x" * 1000); uuid.uuid4(); os.urandom(16)
    random.random(); json.dumps({"a": [1, 2]}); re.findall(r"\w+", "a b c")
    datetime.datetime.now().astimezone(); time.localtime(); time.strftime("%c")
    import zoneinfo; datetime.datetime.now(zoneinfo.ZoneInfo("Europe/Paris"))
    locale.setlocale(locale.LC_ALL, ""); getpass.getuser(); platform.platform(); os.cpu_count()
    os.getloadavg(); resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    os.times(); os.getpid(); os.getppid(); os.getuid(); os.getgid(); os.getgroups(); os.uname()
    os.getresuid(); os.getpgrp(); os.getsid(0); os.sched_getaffinity(0); os.sched_yield(); os.nice(0)
    os.getpriority(os.PRIO_PROCESS, 0); os.getrandom(8); time.clock_getres(time.CLOCK_MONOTONIC)
    threading.get_native_id(); os.umask(0o022)
    sys.stdin.isatty(); sys.stdout.isatty()
    fd = os.memfd_create("x"); os.write(fd, b"abc"); os.close(fd)
    efd = os.eventfd(0); os.eventfd_write(efd, 1); os.eventfd_read(efd); os.close(efd)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    pidfd = os.pidfd_open(pid); select.select([pidfd], [], [], 5); os.waitpid(pid, 0); os.close(pidfd)
    # time / select / signal
    time.sleep(0.05); time.monotonic(); time.perf_counter(); time.process_time(); time.thread_time()
    r, w = os.pipe(); os.write(w, b"x"); select.select([r], [], [], 1.0)
    fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0"); os.read(r, 1)
    pl = select.poll(); pl.register(r, select.POLLIN); pl.poll(10)
    ep = select.epoll(); ep.register(r, select.EPOLLIN); ep.poll(0.01); ep.close()
    got = []
    signal.signal(signal.SIGUSR1, lambda s, f: got.append(s)); os.kill(os.getpid(), signal.SIGUSR1)
    signal.signal(signal.SIGALRM, lambda s, f: got.append(s)); signal.setitimer(signal.ITIMER_REAL, 0.01)
    time.sleep(0.1); signal.alarm(0); signal.getitimer(signal.ITIMER_REAL)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2]); os.kill(os.getpid(), signal.SIGUSR2)
    signal.sigpending(); signal.sigtimedwait([signal.SIGUSR2], 0.1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR2])
    signal.raise_signal(signal.SIGUSR1)
    assert signal.SIGUSR1 in got and signal.SIGALRM in got, got
    import faulthandler; faulthandler.enable()
    # threads
    lock = threading.Lock(); ev = threading.Event(); q = queue.Queue()
    def worker(i):
        with lock:
            pass
        q.put(i); ev.wait(1)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in ts]; time.sleep(0.02); ev.set(); [t.join() for t in ts]
    assert sorted(q.get() for _ in range(4)) == [0, 1, 2, 3]
    threading.Timer(0.01, lambda: None).start()
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert list(ex.map(square, range(10)))[-1] == 81
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        assert list(ex.map(square, range(10)))[-1] == 81
    # subprocesses
    assert subprocess.run(["ls", work], capture_output=True).returncode == 0
    assert subprocess.check_output(["echo", "hi"]) == b"hi\n"
    assert subprocess.run("echo a | tr a b", shell=True, capture_output=True, text=True).stdout == "b\n"
    subprocess.run([sys.executable, "-c", "print(1)"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["true"], start_new_session=True, check=True)
    try:
        subprocess.run(["sleep", "5"], timeout=0.2)
    except subprocess.TimeoutExpired:
        pass
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert os.WEXITSTATUS(os.waitpid(pid, 0)[1]) == 7
    pid = os.posix_spawn("/bin/true", ["true"], os.environ); os.waitpid(pid, 0)
    for method in ("fork", "spawn", "forkserver"):
        ctx = mp.get_context(method)
        with ctx.Pool(2) as pool:
            assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]
        qq = ctx.Queue(); pr = ctx.Process(target=qq.put, args=(method,)); pr.start(); qq.get(); pr.join()
    with mp.Manager() as mgr:
        d = mgr.dict(); d["a"] = 1
    from multiprocessing import shared_memory
    sm = shared_memory.SharedMemory(create=True, size=4096); sm.close(); sm.unlink()
    lk = mp.Lock(); lk.acquire(); lk.release(); sem = mp.Semaphore(2); sem.acquire(); sem.release()
    # sockets (loopback only; the sandbox has a private net namespace)
    a, b = socket.socketpair(); a.sendall(b"x"); b.recv(1); a.close(); b.close()
    try:
        srv = socket.create_server(("127.0.0.1", 0)); port = srv.getsockname()[1]
        c = socket.create_connection(("127.0.0.1", port), timeout=1); s, _ = srv.accept()
        c.sendall(b"ping"); s.recv(4); c.shutdown(socket.SHUT_WR); c.close(); s.close(); srv.close()
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
        u.sendto(b"x", u.getsockname()); u.recv(1); u.close()
        socket.getaddrinfo("localhost", 80); socket.gethostname()
    except OSError as e:
        print("net:", e)
    us = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); us.bind(str(p / "sock")); us.listen(); us.close()
    # asyncio incl. subprocess
    async def amain():
        await asyncio.sleep(0.01)
        proc = await asyncio.create_subprocess_exec("echo", "x", stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate(); assert out == b"x\n"
        await asyncio.gather(*(asyncio.sleep(0.001) for _ in range(10)))
        await asyncio.get_running_loop().run_in_executor(None, square, 3)
    asyncio.run(amain())
    data = sys.stdin.read()
    shutil.rmtree(work)
    print("py_basic ok", len(data))

if __name__ == "__main__":
    main()
'''

PY_SCI = r'''
import os, shutil, tempfile
work = tempfile.mkdtemp(dir="/tmp")
os.environ["MPLCONFIGDIR"] = os.path.join(work, "mpl")  # fresh font cache, as in a new sandbox
import numpy as np, pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = np.random.default_rng(0).random((300, 300))
b = a @ a.T; np.linalg.inv(b + np.eye(300) * 300); np.linalg.eigvalsh(b); np.fft.fft(a[0])
np.save(os.path.join(work, "a.npy"), a); np.load(os.path.join(work, "a.npy"), mmap_mode="r")
df = pd.DataFrame({"k": np.arange(1000) % 7, "v": np.arange(1000.0)})
g = df.groupby("k")["v"].agg(["sum", "mean"]); df.describe()
df.to_csv(os.path.join(work, "d.csv")); pd.read_csv(os.path.join(work, "d.csv"))
pd.date_range("2024-01-01", periods=10, tz="Europe/Paris"); df.to_json(); pd.to_datetime(["2024-01-01"])
fig, ax = plt.subplots(); ax.plot(a[0]); ax.set_title("t"); ax.hist(a[1]); ax.text(0.5, 0.5, "hé")
for ext in ("png", "svg", "pdf"):
    fig.savefig(os.path.join(work, "p." + ext))
shutil.rmtree(work)
print("py_sci ok", g.shape)
'''

PY_ERR = r'''
import sys
print("to stderr", file=sys.stderr)
def f(): raise ValueError("boom")
f()
'''

NODE_BASIC = r'''
'use strict';
const fs = require('fs'), fsp = require('fs/promises'), path = require('path'), os = require('os');
const cp = require('child_process'), crypto = require('crypto'), zlib = require('zlib');
const net = require('net'), http = require('http'), dns = require('dns');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
const timersP = require('timers/promises'), assert = require('assert');

if (!isMainThread) {
  const ia = new Int32Array(workerData.sab);
  let s = 0; for (let i = 0; i < 1e6; i++) s += i;
  Atomics.store(ia, 0, 1); Atomics.notify(ia, 0);
  parentPort.postMessage({ s });
  return;
}
if (process.argv[2] === 'child') {
  process.on('message', (m) => { process.send({ echo: m }); process.disconnect(); });
  return;
}

async function main() {
  const work = fs.mkdtempSync(path.join('/tmp', 'wl-node-'));
  // timers and promises
  await new Promise((r) => setTimeout(r, 20));
  await timersP.setTimeout(5);
  let n = 0; await new Promise((r) => { const t = setInterval(() => { if (++n === 3) { clearInterval(t); r(); } }, 2); });
  await new Promise((r) => setImmediate(r)); queueMicrotask(() => {}); await Promise.all([1, 2, 3].map(async (x) => x * 2));
  // fs: sync, callback, promises, streams, watch
  const f = path.join(work, 'a.txt');
  fs.writeFileSync(f, 'hello\n'); fs.appendFileSync(f, 'world\n'); assert.strictEqual(fs.readFileSync(f, 'utf8'), 'hello\nworld\n');
  await fsp.writeFile(path.join(work, 'b.txt'), 'x'.repeat(100000)); await fsp.readFile(path.join(work, 'b.txt'));
  await new Promise((r, j) => fs.readFile(f, (e, d) => (e ? j(e) : r(d))));
  await fsp.mkdir(path.join(work, 'd/e'), { recursive: true }); await fsp.readdir(work, { withFileTypes: true });
  await fsp.stat(f); fs.lstatSync(f); fs.existsSync(f); fs.accessSync(f);
  await fsp.copyFile(f, path.join(work, 'c.txt')); fs.copyFileSync(f, path.join(work, 'c2.txt'));
  await fsp.rename(path.join(work, 'c.txt'), path.join(work, 'c3.txt')); await fsp.unlink(path.join(work, 'c3.txt'));
  fs.symlinkSync(f, path.join(work, 'ln')); fs.readlinkSync(path.join(work, 'ln')); fs.realpathSync(path.join(work, 'ln'));
  fs.chmodSync(f, 0o644); fs.utimesSync(f, new Date(), new Date()); fs.truncateSync(path.join(work, 'c2.txt'), 2);
  const fd = fs.openSync(f, 'r+'); fs.fstatSync(fd); fs.readSync(fd, Buffer.alloc(5), 0, 5, 0); fs.fsyncSync(fd); fs.closeSync(fd);
  await new Promise((r, j) => fs.createReadStream(path.join(work, 'b.txt')).pipe(zlib.createGzip()).pipe(fs.createWriteStream(path.join(work, 'b.gz'))).on('finish', r).on('error', j));
  await fsp.cp(path.join(work, 'd'), path.join(work, 'd2'), { recursive: true });
  const w = fs.watch(work, () => {}); fs.writeFileSync(path.join(work, 'w.txt'), '1'); await timersP.setTimeout(5); w.close();
  fs.watchFile(f, { interval: 5 }, () => {}); await timersP.setTimeout(10); fs.unwatchFile(f);
  // child processes
  assert.strictEqual(cp.execSync('echo hi').toString(), 'hi\n');
  cp.execFileSync('ls', ['-la', work]); cp.spawnSync('sh', ['-c', 'cat | wc -c'], { input: 'abc' });
  await new Promise((r, j) => cp.exec('echo a | tr a b', (e, out) => (e ? j(e) : (assert.strictEqual(out, 'b\n'), r()))));
  await new Promise((r) => cp.spawn('ls', [work]).on('close', r));
  await new Promise((r) => { const c = cp.fork(__filename, ['child']); c.on('message', () => {}); c.on('exit', r); c.send('ping'); });
  await new Promise((r) => { const c = cp.spawn('sleep', ['10']); c.on('exit', r); setTimeout(() => c.kill('SIGTERM'), 20); });
  await new Promise((r) => cp.spawn('true', [], { detached: true }).on('exit', r));
  // worker threads
  const sab = new SharedArrayBuffer(4);
  const res = await Promise.all([0, 1].map(() => new Promise((r, j) => { const wk = new Worker(__filename, { workerData: { sab } }); wk.on('message', r); wk.on('error', j); })));
  assert.strictEqual(res[0].s, 499999500000);
  // crypto, zlib (libuv thread pool)
  crypto.randomBytes(32); crypto.createHash('sha256').update('x').digest('hex'); crypto.randomUUID();
  await new Promise((r, j) => crypto.pbkdf2('p', 's', 1000, 32, 'sha256', (e) => (e ? j(e) : r())));
  await new Promise((r, j) => crypto.scrypt('p', 's', 32, (e) => (e ? j(e) : r())));
  await new Promise((r, j) => zlib.gzip(Buffer.alloc(100000), (e) => (e ? j(e) : r())));
  crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  // os, process, signals
  os.cpus(); os.totalmem(); os.freemem(); os.loadavg(); os.uptime(); os.hostname(); os.userInfo();
  os.networkInterfaces(); os.tmpdir(); os.homedir(); os.release(); os.getPriority();
  process.hrtime.bigint(); process.memoryUsage(); process.resourceUsage(); process.cpuUsage(); performance.now(); process.uptime();
  await new Promise((r) => { const keep = setTimeout(() => {}, 5000); process.once('SIGUSR2', () => { clearTimeout(keep); r(); }); process.kill(process.pid, 'SIGUSR2'); });
  // net: unix socket, loopback tcp, http, dns, udp
  const sock = path.join(work, 's.sock');
  await new Promise((r) => { const s = net.createServer((c) => c.end('x')).listen(sock, () => { net.connect(sock).on('data', () => {}).on('close', () => { s.close(r); }); }); });
  try {
    await new Promise((r, j) => { const s = http.createServer((q, a) => a.end('ok')).listen(0, '127.0.0.1', () => {
      http.get({ host: '127.0.0.1', port: s.address().port }, (res2) => { res2.resume(); res2.on('end', () => s.close(r)); }).on('error', j); }); });
    await new Promise((r) => dns.lookup('localhost', () => r()));
    const s2 = net.createServer((c) => c.end()).listen(0); await new Promise((r) => s2.on('listening', r));
    await new Promise((r) => net.connect(s2.address().port, 'localhost').on('close', r).on('error', r)); s2.close();
    const u = require('dgram').createSocket('udp4'); await new Promise((r) => u.bind(0, '127.0.0.1', r)); u.close();
  } catch (e) { console.log('net:', e.message); }
  // runtime: Intl, wasm, GC pressure
  new Intl.DateTimeFormat('fr-FR', { timeZone: 'Asia/Tokyo' }).format(new Date()); (1234.5).toLocaleString('de-DE');
  const wasm = new Uint8Array([0,97,115,109,1,0,0,0,1,7,1,96,2,127,127,1,127,3,2,1,0,7,7,1,3,97,100,100,0,0,10,9,1,7,0,32,0,32,1,106,11]);
  const { instance } = await WebAssembly.instantiate(wasm); assert.strictEqual(instance.exports.add(2, 3), 5);
  let arrs = []; for (let i = 0; i < 50; i++) arrs.push(new Array(100000).fill(i)); arrs = null;
  const big = Buffer.alloc(64 * 1024 * 1024); big[0] = 1;
  structuredClone({ a: [1, 2] }); new TextEncoder().encode('é'); JSON.parse(JSON.stringify({ a: 1 }));
  const chunks = []; for await (const c of process.stdin) chunks.push(c);
  fs.rmSync(work, { recursive: true, force: true });
  console.log('node_basic ok', Buffer.concat(chunks).length);
}
main().catch((e) => { console.error(e); process.exit(1); });
'''

NODE_ERR = r'''
console.error('to stderr'); setTimeout(() => { throw new Error('boom'); }, 1);
'''

BASH_BASIC = r'''
set -eu  # no pipefail: head closing a pipe early (SIGPIPE upstream) is normal, not a failure
work=$(mktemp -d /tmp/wl-sh-XXXXXX)
cd "$work"
cleanup() { cd /; rm -rf "$work"; }
trap 'echo got-usr1 >&2' USR1
printf '%s\n' banana apple cherry apple date > fruits.txt
seq 1 2000 | sort -rn | head -n 3 > top.txt; [ "$(head -n 1 top.txt)" = 2000 ]
sort fruits.txt | uniq -c | sort -k1,1nr -k2 > counts.txt
[ "$(wc -l < fruits.txt)" -eq 5 ]
grep -c apple fruits.txt >/dev/null; grep -E '^(a|b)' fruits.txt | sed 's/a/A/g' | awk '{ n += length($0) } END { print n }' > n.txt
cat fruits.txt | tr a-z A-Z | cut -c1-3 | tee upper.txt | tail -n 2 >/dev/null
x=$(echo "$(echo nested)"); [ "$x" = nested ]
( cd /tmp && pwd ) >/dev/null; { echo group; } >> group.txt
diff <(sort fruits.txt) <(sort -u fruits.txt) >/dev/null || true
while read -r line; do : "$line"; done < fruits.txt
cat <<HEREDOC > heredoc.txt
line one $x
line two
HEREDOC
read -r first rest <<< "here string"; [ "$first" = here ]
arr=(a b c); [ "${#arr[@]}" -eq 3 ]; declare -A map=([k]=v); [ "${map[k]}" = v ]; (( i = 3 * 4 ))
f() { local a=$1; echo "$((a + 1))"; }; [ "$(f 1)" = 2 ]
sleep 0.1 & p1=$!
( sleep 0.05; echo bg > bg.txt ) &
sleep 0.02 & wait "$p1"; wait
kill -USR1 $$
sleep 5 & k=$!; kill "$k"; wait "$k" || true
coproc CP { cat; }; echo hi >&"${CP[1]}"; exec {CP[1]}>&-; read -r got <&"${CP[0]}"; wait "$CP_PID" || true; [ "$got" = hi ]
mkfifo ff; ( echo via-fifo > ff ) & read -r v < ff; wait; [ "$v" = via-fifo ]
mkdir -p a/b/c; touch a/b/c/f1 a/f2; cp -r a a2; cp -a a a3; mv a2 a4; ln -s a4 lnk; chmod -R u+rwX a4
ls -la . > ls.txt; ls -R a >/dev/null; find . -name 'f*' -type f | xargs -n1 basename | sort > found.txt
stat fruits.txt >/dev/null; du -sh . >/dev/null; df -h . >/dev/null || true
head -c 100000 /dev/urandom | base64 | gzip > r.gz; zcat r.gz | wc -c >/dev/null; md5sum fruits.txt >/dev/null
sha256sum fruits.txt >/dev/null; tar czf a.tgz a; tar xzf a.tgz -C a4
date +%s >/dev/null; date -d @0 -u >/dev/null; env >/dev/null; id >/dev/null; whoami >/dev/null || true; uname -a >/dev/null; nproc >/dev/null
yes | head -n 1000 | wc -l >/dev/null; seq 100000 | sort -R | sort -n | tail -1 >/dev/null
timeout 2 sleep 0.05; timeout 0.1 sleep 5 || true
printf '%05d|%-4s|%x\n' 42 ab 255 > printf.txt; echo $RANDOM >/dev/null; echo "${PWD##*/}" >/dev/null
test -f fruits.txt && [[ -d a ]] && [[ fruits.txt == *.txt ]]
exec 3> fd3.txt; echo via-fd3 >&3; exec 3>&-
rm -rf a3; rmdir a4/b/c 2>/dev/null || true
cat > /dev/null
bash -c 'exit 3' || [ $? -eq 3 ]
sh -c 'echo dash-ok' >/dev/null
echo "bash_basic ok $(cat n.txt)"; cleanup
'''

# Negative probes, run only under the filter (--enforce): each escape attempt must fail with
# the errno the policy promises, and the ordinary calls next to them must still work.
PROBE = r'''
import ctypes, errno, json, os, tempfile
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & (2**64 - 1)) for a in args])
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
d = tempfile.mkdtemp(dir="/tmp").encode()
buf = ctypes.create_string_buffer(64)
addr = ctypes.addressof(buf)
nul = os.open("/dev/null", os.O_RDWR)
fifo = ctypes.create_string_buffer(d + b"/fifo"); dev = ctypes.create_string_buffer(d + b"/null")
AT_FDCWD = -100
out = {
  "ptrace": sc(101, 0x4206, 1, 0, 0),                  # PTRACE_SEIZE pid 1
  "unshare_user": sc(272, 0x10000000),
  "setns": sc(308, nul, 0),
  "mount": sc(165, 0, 0, 0, 0, 0),
  "chroot": sc(161, addr),
  "bpf": sc(321, 0, 0, 0),
  "keyctl": sc(250, 0, 0, 0, 0, 0),
  "userfaultfd": sc(323, 0),
  "io_uring_setup": sc(425, 1, addr),
  "personality_query": sc(135, 0xFFFFFFFF),
  "perf_event_open": sc(298, 0, 0, -1, -1, 0),
  "open_by_handle_at": sc(304, AT_FDCWD, 0, 0),
  "clone_newuser": sc(56, 0x10000000 | 0x200, 0, 0, 0, 0),   # CLONE_NEWUSER|CLONE_FS
  "clone_newns": sc(56, 0x00020000 | 17, 0, 0, 0, 0),
  "clone3": sc(435, 0, 0),
  "socket_packet": sc(41, 17, 3, 0),                   # AF_PACKET SOCK_RAW
  "socket_inet_raw": sc(41, 2, 3, 1),                  # AF_INET SOCK_RAW ICMP
  "socket_inet_ping": sc(41, 2, 2, 1),                 # AF_INET SOCK_DGRAM ICMP
  "socket_inet_sctp": sc(41, 2, 1, 132),               # AF_INET SOCK_STREAM SCTP
  "socket_netlink_netfilter": sc(41, 16, 3, 12),
  "socket_vsock": sc(41, 40, 1, 0),
  "socket_inet_highbits": sc(41, (1 << 32) | 2, 1, 0),
  "ioctl_tiocsti": sc(16, nul, 0x5412, addr),
  "ioctl_tiocsti_highbits": sc(16, nul, (1 << 32) | 0x5412, addr),
  "ioctl_tiocsti_bit63": sc(16, nul, (1 << 63) | 0x5412, addr),
  "ioctl_tioclinux": sc(16, nul, 0x541C, addr),
  "ioctl_tcgets": sc(16, nul, 0x5401, addr),           # allowed: ENOTTY from the kernel
  "mknod_fifo": sc(259, AT_FDCWD, ctypes.addressof(fifo), 0o010600, 0),
  "mknod_chardev": sc(259, AT_FDCWD, ctypes.addressof(dev), 0o020600, (1 << 8) | 3),
  "msgget_unlisted": sc(68, 0, 0),
  "sync_unlisted": sc(162),
  "x32_getpid": sc(0x40000000 | 39),
}
s = sc(41, 2, 1 | 0x80000, 0)                          # AF_INET SOCK_STREAM|SOCK_CLOEXEC
out["socket_inet_tcp"] = s
import shutil; shutil.rmtree(d)
print(json.dumps(out))
'''

PROBE_EXPECT = {
    "ptrace": "EPERM", "unshare_user": "EPERM", "setns": "EPERM", "mount": "EPERM",
    "chroot": "EPERM", "bpf": "EPERM", "keyctl": "EPERM", "userfaultfd": "EPERM",
    "io_uring_setup": "EPERM", "personality_query": "EPERM", "perf_event_open": "EPERM",
    "open_by_handle_at": "EPERM", "clone_newuser": "ENOSYS", "clone_newns": "ENOSYS",
    "clone3": "ENOSYS", "socket_packet": "ENOSYS", "socket_inet_raw": "ENOSYS",
    "socket_inet_ping": "ENOSYS", "socket_inet_sctp": "ENOSYS",
    "socket_netlink_netfilter": "ENOSYS", "socket_vsock": "ENOSYS",
    "socket_inet_highbits": "ENOSYS", "ioctl_tiocsti": "ENOSYS",
    "ioctl_tiocsti_highbits": "ENOSYS", "ioctl_tiocsti_bit63": "ENOSYS",
    "ioctl_tioclinux": "ENOSYS", "ioctl_tcgets": "ENOTTY", "mknod_fifo": "ok",
    "mknod_chardev": "ENOSYS", "msgget_unlisted": "ENOSYS", "sync_unlisted": "ENOSYS",
    "x32_getpid": "ENOSYS", "socket_inet_tcp": "ok",
}


@dataclass
class Workload:
    name: str
    argv: list[str]            # "{script}" is replaced by the script's path
    script: str
    suffix: str
    expect_rc: int = 0
    expect_out: str = ""       # substring of stdout+stderr
    env: dict[str, str] = field(default_factory=dict)
    requires: list[str] | None = None  # command that must succeed, else the workload is skipped
    enforce_only: bool = False
    expect_denied: set[str] = field(default_factory=set)


WORKLOADS = [
    Workload("py_basic", ["/usr/bin/python3", "{script}"], PY_BASIC, ".py", expect_out="py_basic ok 11"),
    Workload("py_sci", ["/usr/bin/python3", "{script}"], PY_SCI, ".py", expect_out="py_sci ok",
             requires=["/usr/bin/python3", "-c", "import numpy, pandas, matplotlib"]),
    Workload("py_err", ["/usr/bin/python3", "{script}"], PY_ERR, ".py", expect_rc=1,
             expect_out="ValueError: boom"),
    Workload("node_basic", ["/usr/bin/node", "{script}"], NODE_BASIC, ".js", expect_out="node_basic ok 11"),
    Workload("node_uring", ["/usr/bin/node", "{script}"], NODE_BASIC, ".js", expect_out="node_basic ok 11",
             env={"UV_USE_IO_URING": "1"}, expect_denied={"io_uring_setup", "io_uring_enter"}),
    Workload("node_err", ["/usr/bin/node", "{script}"], NODE_ERR, ".js", expect_rc=1,
             expect_out="Error: boom"),
    Workload("bash_basic", ["/usr/bin/bash", "{script}"], BASH_BASIC, ".sh", expect_out="bash_basic ok 16"),
    Workload("probe", ["/usr/bin/python3", "{script}"], PROBE, ".py", enforce_only=True),
]
STDIN = b"some stdin\n"

# ───────────────────────── tracing ─────────────────────────

LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\((.*))$")
RESULT = re.compile(r"\) += (-1 (\w+)|\S+)")


@dataclass
class Call:
    pid: int
    name: str
    args: list[int] | None     # None when strace did not print them (resumed lines)
    errno: str | None          # error name when the call failed, if visible on this line


def parse_trace(path: Path, table_by_nr: dict[int, str]) -> list[Call]:
    calls = []
    for raw in path.read_text(errors="replace").splitlines():
        m = LINE.match(raw)
        if not m:
            continue
        pid = int(m.group(1))
        if m.group(2):  # "<... name resumed>": already counted on the unfinished line
            continue
        name, rest = m.group(3), m.group(4)
        if name.startswith("syscall_0x"):
            name = table_by_nr.get(int(name[len("syscall_"):], 16), name)
        head = rest.split(" <unfinished", 1)[0]
        res = RESULT.search(head)
        arg_text = head[: res.start()] if res else head
        args: list[int] | None = []
        for tok in (t.strip() for t in arg_text.split(",")) if arg_text.strip() else []:
            try:
                args.append(int(tok, 0) & (2**64 - 1))
            except ValueError:
                args = None
                break
        calls.append(Call(pid, name, args, res.group(2) if res and res.group(2) else None))
    return calls


def run_workload(w: Workload, tmp: Path, enforce: bool, by_nr: dict[int, str]) -> tuple[bool, str, list[Call]]:
    script = tmp / f"{w.name}{w.suffix}"
    script.write_text(w.script)
    argv = [a.replace("{script}", str(script)) for a in w.argv]
    if enforce:
        argv = [sys.executable, str(Path(__file__).resolve()), "--exec-filtered", "--", *argv]
    trace = tmp / f"{w.name}{'.enforce' if enforce else ''}.trace"
    cmd = ["strace", "-f", "-qq", "-e", "raw=all", "-o", str(trace), "--", *argv]
    env = {**os.environ, **w.env}
    try:
        p = subprocess.run(cmd, input=STDIN, capture_output=True, env=env, timeout=600, cwd=tmp)
        out = (p.stdout + p.stderr).decode(errors="replace")
        rc = p.returncode
    except subprocess.TimeoutExpired:
        out, rc = "timeout", -1
    ok = rc == w.expect_rc and w.expect_out in out
    if ok and w.name == "probe":
        got = json.loads(p.stdout.decode().strip().splitlines()[-1])
        bad = {k: (got.get(k), v) for k, v in PROBE_EXPECT.items() if got.get(k) != v}
        if bad:
            ok, out = False, "probe mismatches (got, expected): " + json.dumps(bad)
    calls = parse_trace(trace, by_nr) if trace.exists() else []
    if enforce:  # keep only what ran after the wrapper exec'd the workload under the filter
        first = calls[0].pid if calls else 0
        execs = [i for i, c in enumerate(calls) if c.pid == first and c.name == "execve"]
        calls = calls[execs[1] + 1:] if len(execs) > 1 else []
    return ok, out, calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--enforce", action="store_true", help="also run the workloads under the filter")
    ap.add_argument("--list", action="store_true", help="print the syscalls used by the workloads")
    ap.add_argument("--only", action="append", help="run only this workload (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the traces (path is printed)")
    if sys.argv[1:3] == ["--exec-filtered", "--"]:  # internal: see run_workload
        exec_filtered(sys.argv[3:])
        return 127
    a = ap.parse_args()

    table = syscall_table()
    by_nr = {v: k for k, v in table.items()}
    pol, problems = load_policy(POLICY, table)
    for p in problems:
        print(f"policy: {p}")
    if shutil.which("strace") is None:
        print("strace is not installed: apt-get install -y strace")
        return 1
    failed = bool(problems)
    used: dict[str, set[str]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="warden-seccomp-"))
    modes = [False, True] if a.enforce else [False]
    for w in WORKLOADS:
        if a.only and w.name not in a.only:
            continue
        if w.requires and subprocess.run(w.requires, capture_output=True).returncode != 0:
            print(f"{w.name}: skipped ({' '.join(w.requires)} failed)")
            continue
        for enforce in modes:
            if w.enforce_only and not enforce:
                continue
            label = f"{w.name}{' (enforced)' if enforce else ''}"
            ok, out, calls = run_workload(w, tmp, enforce, by_nr)
            if not ok:
                failed = True
                print(f"{label}: FAILED (expected rc {w.expect_rc} and {w.expect_out!r})\n{out[-3000:]}")
            if w.enforce_only:
                print(f"{label}: {'ok' if ok else 'FAILED'}")
                continue
            names = {c.name for c in calls}
            if not enforce:
                for n in names:
                    used.setdefault(n, set()).add(w.name)
            refused: dict[str, str] = {}
            for c in calls:
                act = pol.action(c.name, c.args)
                if act != "allow":
                    shown = ", ".join(hex(x) for x in (c.args or [])[:3])
                    refused.setdefault(c.name, f"{c.name}({shown}) -> {act}")
            expected = GLOBAL_EXPECTED_DENIED | w.expect_denied
            unexpected = {n: s for n, s in refused.items() if n not in expected}
            if unexpected:
                failed = True
                for s in sorted(unexpected.values()):
                    print(f"{label}: not allowed: {s}")
            note = f", refused as expected: {', '.join(sorted(refused))}" if refused else ""
            print(f"{label}: {'ok' if ok else 'FAILED'}, {len(names)} syscalls{note}")
    if a.list:
        for n in sorted(used):
            print(f"{n:24} {' '.join(sorted(used[n]))}")
    allowed_unused = sorted(set(pol.allow) - set(used))
    print(f"policy: {len(pol.allow)} allowed ({sum(len(v) for v in pol.allow.values())} entries), "
          f"{len(pol.deny)} denied; workloads used {len(used)} distinct syscalls; "
          f"{len(allowed_unused)} allowed names unused by the workloads")
    if a.keep:
        print(f"traces kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("missing: none" if not failed else "FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
