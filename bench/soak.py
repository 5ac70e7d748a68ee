#!/usr/bin/env python3
"""The soak: many executions at many concurrent clients against one release-built daemon, mixed
with attack programs, every answer checked against what that program must give, and afterwards
nothing left behind. Needs root (real sandboxes). Bounded in count and in time.

Each request is one program from PROGRAMS, picked in a fixed, seeded order (one attack in every
`--attack-every` requests, the rest ordinary runs) and sent to `POST /v1/execute` by one of
`--clients` threads, each on its own keep-alive connection. Checked per request: HTTP 200 and
the result's reason, exit code and output as the program must have them (an attack must be
stopped by its limit and reported with that limit's reason). Any other answer is an unexpected
error.

Also measured: the daemon's RSS and open descriptors, sampled every second (flat: no growth
that keeps up with the count); and before and after the run — with the daemon still up and
again after it stopped — the processes under it, the sandbox cgroups no live helper owns (under
/sys/fs/cgroup/{memory,pids,cpu}/warden and the name=warden hierarchy), the mounts and tmpfs
mounts of the host and of the daemon's mount namespace, and Docker containers labelled with the daemon's pid namespace (other work's are not counted).

The daemon runs as pid 1 of its own pid namespace (`unshare --pid --fork --mount-proc`), so a
broken sandbox could not signal this script or the machine's other processes.

usage: soak.py WARDEN [--total N] [--clients N] [--attack-every N] [--max-seconds S] [--json F]
Exit status: 0 when every request gave its expected outcome and nothing leaked, else 1.
"""
import argparse, fcntl, http.client, json, os, random, signal, subprocess, sys, tempfile, threading, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)
from procs import descendants  # bench/procs.py

SETTINGS = """
[sandbox]
default_profile = "soak"

[sandbox.profiles.soak]
timeout_seconds = 5
max_memory_mb = 64
max_pids = 32
max_output_bytes = 65536
workspace_mb = 16
enabled_policies = []
"""

MARKER = "\n[warden: output truncated at 65536 bytes]\n"

def ordinary(i):
    return {"code": f"print({i} * {i})"}, lambda r: r["reason"] == "exited" and r["exit_code"] == 0 and r["stdout"] == f"{i * i}\n"

def failing(i):
    return ({"code": f"raise ValueError('soak {i}')"},
            lambda r: r["reason"] == "exited" and r["exit_code"] == 1 and f"ValueError: soak {i}" in r["stderr"])

def with_stdin(i):
    return ({"code": "import sys\nprint(sys.stdin.read()[::-1])", "stdin": f"abc{i}"},
            lambda r: r["reason"] == "exited" and r["stdout"] == f"{i}"[::-1] + "cba\n")

ORDINARY = [ordinary, failing, with_stdin]

# Attacks: each must be stopped by its limit and reported with that limit's reason.
FORK_BOMB = ("import os, time\nkids = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
             "            time.sleep(30)\n        kids += 1\nexcept OSError as e:\n"
             "    print('stopped after', kids, e.strerror)\n    raise SystemExit(1)")
MEMORY_BOMB = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))"
OUTPUT_FLOOD = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"
# The parent exits at once; its grandchild (own session) sleeps on: killed with the sandbox.
SLEEPER = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
           "        time.sleep(600)\n    os._exit(0)\nos.wait()\nprint('parent done')")
SPIN = "while True:\n    pass"

ATTACKS = {
    "fork bomb": (lambda i: {"code": FORK_BOMB},
                  lambda r: r["reason"] == "pids" and "Resource temporarily unavailable" in r["stdout"]),
    "memory bomb": (lambda i: {"code": MEMORY_BOMB},
                    lambda r: r["reason"] == "memory" and r["signal"] == 9),
    "output flood": (lambda i: {"code": OUTPUT_FLOOD},
                     lambda r: r["reason"] == "output" and r["stdout_truncated"] and r["stdout"].endswith(MARKER)),
    "double-forked sleeper": (lambda i: {"code": SLEEPER},
                              lambda r: r["reason"] == "exited" and r["exit_code"] == 0
                              and r["stdout"] == "parent done\n" and r["duration_ms"] < 4000),
    "timeout": (lambda i: {"code": SPIN, "timeout_seconds": 1},
                lambda r: r["reason"] == "timeout" and r["duration_ms"] < 3000),
}

def plan(total, attack_every, seed):
    rnd = random.Random(seed)
    names = list(ATTACKS)
    out = []
    for i in range(total):
        if attack_every and i % attack_every == attack_every - 1:
            name = names[(i // attack_every) % len(names)]
            body, ok = ATTACKS[name][0](i), ATTACKS[name][1]
        else:
            f = rnd.choice(ORDINARY)
            name = f.__name__
            body, ok = f(i)
        out.append((name, body, ok))
    return out

def status_field(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0

def cgroup_parents():
    """The folders that hold sandbox cgroups: warden/ in the memory, pids, cpu and freezer
    hierarchies and in every mount of the name=warden hierarchy."""
    parents = [f"/sys/fs/cgroup/{c}/warden" for c in ("memory", "pids", "cpu", "freezer")]
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        sep = fields.index("-")
        if fields[sep + 1] == "cgroup" and "name=warden" in fields[sep + 3]:
            parents += [fields[4], os.path.join(fields[4], "warden")]
    return sorted({p for p in parents if os.path.isdir(p)})

def stale_cgroups():
    """Sandbox cgroups that no live helper owns: a live sandbox's memory leaf is flock'ed by
    its helper (with cgroup v1 its leaves in the other hierarchies are made after that one and
    removed before it), so an empty run-* leaf whose run's memory leaf is unlocked or gone is a
    leak (of this daemon or any other)."""
    stale = set()
    memory = "/sys/fs/cgroup/memory/warden"
    for parent in cgroup_parents():
        for e in os.listdir(parent):
            path = os.path.join(parent, e)
            if not e.startswith("run-") or not os.path.isdir(path):
                continue
            owner = os.path.join(memory, e) if parent.startswith("/sys/fs/cgroup/") else path
            try:
                fd = os.open(owner, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                procs = open(os.path.join(path, "cgroup.procs")).read().split()
                if not procs:
                    stale.add(path)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                pass
            except OSError:
                pass
            finally:
                os.close(fd)
    return stale

class Mounts(frozenset):
    """The mounts of a mount namespace as (mount point, type, source); printed as the counts
    (all, tmpfs). A leak is a mount that is there after and was not before: other work on the
    machine may unmount things meanwhile (this namespace's mounts propagate into the daemon's)."""
    def __str__(self):
        return str((len(self), sum(1 for m in self if m[1] == "tmpfs")))

def mounts(pid="self"):
    try:
        lines = open(f"/proc/{pid}/mountinfo").read().splitlines()
    except OSError:
        return Mounts()
    out = set()
    for line in lines:
        fields, rest = line.split(" - ", 1)
        fstype, source = (rest.split() + ["", ""])[:2]
        out.add((fields.split()[4], fstype, source))
    return Mounts(out)

def new_mounts(before, after):
    """Mounts that appeared, leaving out the Docker engine's container roots (other work's
    containers; this daemon's own are counted by label)."""
    if before is None or after is None:
        return []
    return sorted(m for m in after - before if not m[0].startswith("/var/lib/docker/"))

def containers(pidns):
    """Docker containers this daemon made: Warden labels each with its pid namespace
    (dev.warden.pidns), and this daemon's is its own. Other work's containers do not count."""
    if not pidns:
        return None
    try:
        out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.warden.pidns={pidns}"],
                             capture_output=True, text=True, timeout=30)
        return len(out.stdout.split()) if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None

def pid_namespace(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid").split("[")[1].rstrip("]")
    except (OSError, IndexError):
        return None

def snapshot(daemon):
    return {
        "processes under the daemon": len(descendants(daemon)) if daemon else 0,
        "unowned sandbox cgroups": len(stale_cgroups()),
        "host mounts (all, tmpfs)": mounts(),
        "daemon mounts (all, tmpfs)": mounts(daemon) if daemon else None,
        "daemon open descriptors": fd_count(daemon) if daemon else None,
        "docker containers of this daemon": containers(pid_namespace(daemon) if daemon else None),
    }

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--total", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--attack-every", type=int, default=10)
    ap.add_argument("--max-seconds", type=int, default=1800)
    ap.add_argument("--max-concurrent", type=int, default=8)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp()
    settings = os.path.join(work, "settings.toml")
    open(settings, "w").write(SETTINGS)
    requests = plan(a.total, a.attack_every, a.seed)
    load_start = os.getloadavg()

    before_daemon = {"unowned sandbox cgroups": len(stale_cgroups()), "host mounts (all, tmpfs)": mounts()}
    srv = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", a.warden,
                            "--config", settings, "serve", "--listen", "127.0.0.1:0", "--data-dir", scratch.data_dir(),
                            "--max-concurrent", str(a.max_concurrent), "--max-queued", str(4 * a.clients)],
                           stderr=subprocess.PIPE, text=True)
    daemon = None
    pidns = None
    ok = True
    try:
        line = ""
        while "listening on http://" not in line:
            line = srv.stderr.readline()
            if not line:
                sys.exit("warden serve did not start")
        host, port = line.strip().rsplit("http://", 1)[1].split(":")
        threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
        kids = descendants(srv.pid)
        daemon = kids[0] if kids else None   # warden itself: pid 1 of the namespace
        pidns = pid_namespace(daemon) if daemon else None
        # Warm-up (allocator, first cgroups), outside the counts.
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        for i in range(20):
            conn.request("POST", "/v1/execute", json.dumps({"code": "print(1)"}), {"content-type": "application/json"})
            conn.getresponse().read()
        conn.close()
        time.sleep(1)
        before = snapshot(daemon)

        samples = []   # (elapsed s, done, rss KiB, fds)
        done = [0]
        unexpected = []
        by_kind = {}
        latencies = []
        lock = threading.Lock()
        next_index = [0]
        start = time.time()
        deadline = start + a.max_seconds
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                samples.append((round(time.time() - start, 1), done[0], status_field(daemon, "VmRSS"), fd_count(daemon)))
                stop.wait(1.0)

        def client():
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            while True:
                with lock:
                    i = next_index[0]
                    if i >= len(requests) or time.time() > deadline:
                        return
                    next_index[0] += 1
                name, body, check = requests[i]
                t = time.perf_counter()
                try:
                    conn.request("POST", "/v1/execute", json.dumps(body), {"content-type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                    status = resp.status
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    conn = http.client.HTTPConnection(host, int(port), timeout=120)
                    status, data = None, repr(e).encode()
                ms = (time.perf_counter() - t) * 1000
                good = False
                if status == 200:
                    try:
                        good = bool(check(json.loads(data)))
                    except (ValueError, KeyError, TypeError):
                        good = False
                with lock:
                    done[0] += 1
                    latencies.append(ms)
                    k = by_kind.setdefault(name, [0, 0])
                    k[0] += 1
                    if not good:
                        k[1] += 1
                        unexpected.append((i, name, status, data[:300]))

        t_sampler = threading.Thread(target=sampler, daemon=True)
        t_sampler.start()
        threads = [threading.Thread(target=client) for _ in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - start
        stop.set()
        t_sampler.join()
        time.sleep(2)   # teardown of the last sandboxes
        after = snapshot(daemon)
        daemon_rss_final = status_field(daemon, "VmRSS")
    finally:
        # A graceful stop: SIGTERM to the daemon itself (unshare passes no signal on).
        if daemon:
            try:
                os.kill(daemon, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    time.sleep(1)
    after_stop = {"unowned sandbox cgroups": len(stale_cgroups()), "host mounts (all, tmpfs)": mounts()}
    after_stop_containers = containers(pidns)
    load_end = os.getloadavg()

    latencies.sort()
    def pct(p):
        return latencies[min(len(latencies) - 1, int(round(p / 100 * (len(latencies) - 1))))] if latencies else 0
    rss = [s[2] for s in samples if s[2]]
    fds = [s[3] for s in samples if s[3]]
    # Flat: the RSS of the last fifth of the run against the first fifth (after warm-up).
    fifth = max(1, len(rss) // 5)
    rss_first, rss_last = (max(rss[:fifth]), max(rss[-fifth:])) if rss else (0, 0)
    leaks = []
    if after["processes under the daemon"] != 0:
        leaks.append("processes under the daemon after the run")
    if after["unowned sandbox cgroups"] > before["unowned sandbox cgroups"]:
        leaks.append("unowned cgroups after the run")
    if after_stop["unowned sandbox cgroups"] > before_daemon["unowned sandbox cgroups"]:
        leaks.append("unowned cgroups after the daemon stopped")
    for where, new in (("the daemon's namespace", new_mounts(before["daemon mounts (all, tmpfs)"], after["daemon mounts (all, tmpfs)"])),
                       ("the host", new_mounts(before_daemon["host mounts (all, tmpfs)"], after_stop["host mounts (all, tmpfs)"]))):
        if new:
            leaks.append(f"new mounts in {where}: {new[:5]}")
    if after["daemon open descriptors"] != before["daemon open descriptors"]:
        leaks.append("daemon descriptors")
    if after["docker containers of this daemon"] or after_stop_containers:
        leaks.append("docker containers")
    rss_grew = rss_last > rss_first + 16 * 1024   # more than 16 MiB of growth is not flat
    complete = done[0] == len(requests)
    ok = complete and not unexpected and not leaks and not rss_grew

    print(f"## Soak: {done[0]} of {len(requests)} executions, {a.clients} clients, one attack in {a.attack_every}\n")
    print(f"{os.cpu_count()} cores; load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end "
          f"(other work shares this machine); daemon --max-concurrent {a.max_concurrent}\n")
    print("| measure | value |")
    print("|---|---|")
    print(f"| wall time | {elapsed:.0f} s |")
    print(f"| executions per second | {done[0] / elapsed:.1f} |")
    print(f"| latency p50 / p99 / max | {pct(50):.0f} / {pct(99):.0f} / {pct(100):.0f} ms |")
    print(f"| unexpected outcomes | {len(unexpected)} |")
    print(f"| daemon RSS: first fifth max / last fifth max / final (KiB) | {rss_first} / {rss_last} / {daemon_rss_final} |")
    print(f"| daemon RSS min / max over the run (KiB) | {min(rss) if rss else 0} / {max(rss) if rss else 0} |")
    print(f"| daemon descriptors min / max during the run | {min(fds) if fds else 0} / {max(fds) if fds else 0} |")
    for key in before:
        print(f"| {key}: before / after the run | {before[key]!s} / {after[key]!s} |")
    for key in after_stop:
        print(f"| {key}: before the daemon / after it stopped | {before_daemon[key]!s} / {after_stop[key]!s} |")
    print(f"| docker containers of this daemon after it stopped | {after_stop_containers} |")
    print("\n| program | runs | unexpected |")
    print("|---|---|---|")
    for name, (n, bad) in sorted(by_kind.items()):
        print(f"| {name} | {n} | {bad} |")
    if unexpected:
        print("\nunexpected (first 10):")
        for u in unexpected[:10]:
            print(f"  #{u[0]} {u[1]}: status {u[2]}: {u[3]!r}")
    if not complete:
        print(f"\nINCOMPLETE: the {a.max_seconds} s bound ended the run")
    if leaks:
        print(f"\nLEAKS: {', '.join(leaks)}")
    if rss_grew:
        print(f"\nRSS GREW: {rss_first} -> {rss_last} KiB")
    print(f"\nresult: {'ok' if ok else 'FAILED'}")
    if a.json:
        json.dump({"done": done[0], "total": len(requests), "elapsed_s": elapsed, "unexpected": len(unexpected),
                   "by_kind": by_kind, "samples": samples, "before": before, "after": after,
                   "before_daemon": before_daemon, "after_stop": after_stop, "leaks": leaks,
                   "load_start": load_start, "load_end": load_end}, open(a.json, "w"), default=str)
    subprocess.run(["rm", "-rf", work])
    sys.exit(0 if ok else 1)

if __name__ == "__main__":
    main()
