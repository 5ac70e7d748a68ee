#!/usr/bin/env python3
"""The daemon's speed and load, side by side in one run (needs root and a release build).

1. Latency, interleaved round by round: `print(1)` executed over HTTP in an existing sandbox
   (keep-alive connection), the same one-shot over HTTP, `warden run` of the same file, and
   `warden --version` (the CLI's process start). Target: the sandbox exec's p50 within 1.3x
   of `warden run` minus process start.
2. Load: wrk with 32 connections for DURATION seconds (in each of BLOCKS blocks) against `POST /v1/execute`; errors,
   executions per second, the daemon's RSS before and after, and what is left afterwards
   against the same counts taken before the load, each once the one-shot pool has refilled:
   processes under the daemon, its descriptors, the host's mounts and network namespaces, and
   cgroups no live sandbox owns; beside it, the rate of a bare
   `python3 -c 'print(1)'` loop run by as many workers as cores for the same time, and of any
   `--reference NAME=COMMAND` (another sandbox running the same line, say) looped the same way,
   so that the daemon's rate is set beside theirs in the same run.

usage: daemon.py WARDEN [--rounds N] [--duration S] [--blocks N] [--max-concurrent N] [--reference NAME=COMMAND ...]
"""
import argparse, http.client, json, os, random, shutil, statistics, subprocess, sys, tempfile, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)
from procs import descendants  # bench/procs.py
from loops import loop_rate  # bench/loops.py
from interleave import parse_commands  # bench/interleave.py

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def stale_cgroups(pid):
    """Sandbox cgroups (of the daemon's hierarchy) that no live helper owns: a live sandbox's
    memory leaf is flock'ed by its helper (its leaves in the other hierarchies are made after it
    and removed before it), so an empty leaf whose run's memory leaf is unlocked or gone is a
    leak."""
    import fcntl
    own = {}
    for line in open(f"/proc/{pid}/cgroup"):
        _, controllers, path = line.strip().split(":", 2)
        for c in controllers.split(","):
            own[c] = path.rstrip("/")
    memory = f"/sys/fs/cgroup/memory{own.get('memory', '')}/warden"
    n = 0
    for c in ("memory", "pids", "cpu", "freezer"):
        if c not in own:
            continue
        base = f"/sys/fs/cgroup/{c}{own[c]}/warden"
        for e in (os.listdir(base) if os.path.isdir(base) else []):
            if not e.startswith("run-"):
                continue
            try:
                if open(f"{base}/{e}/cgroup.procs").read().split():
                    continue
            except FileNotFoundError:
                continue  # removed since the listing: a teardown that was finishing
            try:
                fd = os.open(f"{memory}/{e}", os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                n += 1
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                n += 1
            except BlockingIOError:
                pass
            finally:
                os.close(fd)
    return n

def leftovers(pid):
    """What a run could leave behind, counted from the host: processes under the daemon (its
    held sandboxes among them), the daemon's descriptors, the mounts of the host's mount
    namespace, the network namespaces any process is in (each held sandbox has one), and
    cgroups that no live sandbox owns."""
    nets = set()
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            nets.add(os.readlink(f"/proc/{p}/ns/net"))
        except OSError:
            continue
    with open("/proc/self/mountinfo") as f:
        mounts = sum(1 for _ in f)
    return {"processes": len(descendants(pid)), "descriptors": len(os.listdir(f"/proc/{pid}/fd")),
            "mounts": mounts, "network namespaces": len(nets), "unowned cgroups": stale_cgroups(pid)}

def settled(pid, seconds=15):
    """`leftovers` once two readings half a second apart agree (the pool refilling, the last
    teardowns ending), or the last reading after `seconds`."""
    last = leftovers(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = leftovers(pid)
        if now == last:
            return now
        last = now
    return last

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--duration", type=int, default=60, help="seconds of each case in a block")
    ap.add_argument("--blocks", type=int, default=1,
                    help="blocks of the load, each the daemon, the bare loop and the references in turn")
    ap.add_argument("--max-concurrent", type=int,
                    help="the daemon's --max-concurrent (unless given, its default: twice the CPUs)")
    ap.add_argument("--reference", action="append", default=[], metavar="NAME=COMMAND",
                    help="a command whose loop rate is measured after the bare loop's, the same way")
    a = ap.parse_args()
    references = parse_commands(a.reference)
    work = tempfile.mkdtemp()
    one = os.path.join(work, "one.py")
    open(one, "w").write("print(1)\n")
    slots = ["--max-concurrent", str(a.max_concurrent)] if a.max_concurrent else []
    srv = subprocess.Popen([a.warden, "serve", "--listen", "127.0.0.1:0", "--data-dir", scratch.data_dir(), *slots,
                            "--max-queued", "64"], stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "listening on http://" not in line:
            line = srv.stderr.readline()
            if not line:
                sys.exit("warden serve did not start")
        host, port = line.strip().rsplit("http://", 1)[1].split(":")
        conn = http.client.HTTPConnection(host, int(port))
        def call(method, path, body=None):
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"content-type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.status >= 300:
                sys.exit(f"{method} {path}: {r.status} {data[:200]!r}")
            return json.loads(data)
        sb = call("POST", "/v1/sandboxes", {"profile": "standard"})["id"]
        def http_exec():
            out = call("POST", f"/v1/sandboxes/{sb}/exec", {"code": "print(1)"})
            assert out["stdout"] == "1\n", out
        def http_one_shot():
            out = call("POST", "/v1/execute", {"code": "print(1)"})
            assert out["stdout"] == "1\n", out
        def run(argv):
            return lambda: subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        cases = {
            "HTTP exec in a sandbox": http_exec,
            "HTTP one-shot /v1/execute": http_one_shot,
            "warden run one.py": run([a.warden, "run", one]),
            "warden --version (process start)": run([a.warden, "--version"]),
        }
        samples = {k: [] for k in cases}
        for _ in range(10):
            for f in cases.values():
                f()
        for _ in range(a.rounds):
            order = list(cases.items())
            random.shuffle(order)
            for name, f in order:
                t = time.perf_counter()
                f()
                samples[name].append((time.perf_counter() - t) * 1000)
        print(f"## Latency ({os.cpu_count()} cores, {a.rounds} interleaved rounds)\n")
        print("| case | p50 ms | p99 ms | mean ms |")
        print("|---|---|---|---|")
        for name, xs in samples.items():
            print(f"| {name} | {pct(xs, 50):.1f} | {pct(xs, 99):.1f} | {statistics.mean(xs):.1f} |")
        p50 = {k: pct(v, 50) for k, v in samples.items()}
        base = p50["warden run one.py"] - p50["warden --version (process start)"]
        print(f"\nHTTP exec p50 / (warden run - process start) p50 = "
              f"{p50['HTTP exec in a sandbox']:.1f} / {base:.1f} = {p50['HTTP exec in a sandbox'] / base:.2f} (target <= 1.3)\n")
        call("DELETE", f"/v1/sandboxes/{sb}")
        conn.close()

        # Load.
        lua = os.path.join(work, "post.lua")
        open(lua, "w").write('wrk.method = "POST"\nwrk.body = \'{"code": "print(1)"}\'\n'
                             'wrk.headers["Content-Type"] = "application/json"\n'
                             'done = function(summary, latency, requests)\n'
                             '  io.write(string.format("errors %d %d %d %d %d\\n", summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.status, summary.errors.timeout))\nend\n')
        warm = subprocess.run(["wrk", "-t2", "-c32", "-d5s", "--timeout", "30s", "-s", lua, f"http://{host}:{port}/v1/execute"],
                              capture_output=True, text=True)
        left_before = settled(srv.pid)
        rss_before = rss_kb(srv.pid)
        # The daemon and its baselines alternate block by block, so that a host that speeds up
        # or slows down during the run moves them alike.
        rates, bare, refs, errors, non2xx = [], [], {name: [] for name, _ in references}, [0] * 5, 0
        for _ in range(a.blocks):
            out = subprocess.run(["wrk", "-t2", "-c32", f"-d{a.duration}s", "--timeout", "30s", "--latency", "-s", lua,
                                  f"http://{host}:{port}/v1/execute"], capture_output=True, text=True).stdout
            rates.append(float(out.split("Requests/sec:")[1].split()[0]))
            errors = [e + int(x) for e, x in zip(errors, out.split("errors ")[1].split()[:5])]
            non2xx += int(out.split("Non-2xx or 3xx responses:")[1].split()[0]) if "Non-2xx" in out else 0
            # Bare python3 loop, one worker per core, same duration.
            bare.append(loop_rate(["/usr/bin/python3", "-c", "print(1)"], a.duration))
            for name, argv in references:
                refs[name].append(loop_rate(argv, a.duration))
        rss_after = rss_kb(srv.pid)
        left_after = settled(srv.pid)
        rate, bare_rate = statistics.mean(rates), statistics.mean(bare)
        blocks = lambda xs: " ".join(f"{x:.1f}" for x in xs) + (f", mean {statistics.mean(xs):.1f}" if len(xs) > 1 else "")
        print(f"## Load: wrk, 32 connections, {a.blocks} × {a.duration} s, POST /v1/execute print(1)\n")
        print("| measure | value |")
        print("|---|---|")
        print(f"| executions per second (warden, isolated), by block | {blocks(rates)} |")
        print(f"| bare `python3 -c` per second, {os.cpu_count()} workers, by block | {blocks(bare)} |")
        print(f"| ratio warden / bare | {rate / bare_rate:.2f} |")
        for name, xs in refs.items():
            ref = statistics.mean(xs)
            print(f"| {name} per second, {os.cpu_count()} workers, by block (/ bare; warden / it) | "
                  f"{blocks(xs)} ({ref / bare_rate:.2f}; {rate / ref:.2f}) |")
        print(f"| errors (connect, read, write, status, timeout) + non-2xx | {errors} + {non2xx} |")
        print(f"| daemon RSS before / after (KiB) | {rss_before} / {rss_after} |")
        for what, before in left_before.items():
            print(f"| {what}: before the load, after it | {before}, {left_after[what]} |")
        print("\nwrk latency distribution (the last block):\n```\n" + out.split("Latency Distribution")[1].split("\n\n")[0].strip() + "\n```" if "Latency Distribution" in out else "")
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(work)

if __name__ == "__main__":
    main()
