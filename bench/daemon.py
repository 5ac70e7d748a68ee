#!/usr/bin/env python3
"""The daemon's speed and load, side by side in one run (needs root and a release build).

1. Latency, interleaved round by round: `print(1)` executed over HTTP in an existing sandbox
   (keep-alive connection), the same one-shot over HTTP, `warden run` of the same file, and
   `warden --version` (the CLI's process start). Target: the sandbox exec's p50 within 1.3x
   of `warden run` minus process start.
2. Load: wrk with 32 connections for DURATION seconds against `POST /v1/execute`; errors,
   executions per second, the daemon's RSS before and after, and what is left afterwards
   (processes of the sandbox user, stale cgroups); beside it, the rate of a bare
   `python3 -c 'print(1)'` loop run by as many workers as cores for the same time, and of any
   `--reference NAME=COMMAND` (another sandbox running the same line, say) looped the same way,
   so that the daemon's rate is set beside theirs in the same run.

usage: daemon.py WARDEN [--rounds N] [--duration S] [--max-concurrent N] [--reference NAME=COMMAND ...]
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

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--duration", type=int, default=60)
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
        rss_before = rss_kb(srv.pid)
        cg_before = stale_cgroups(srv.pid)
        out = subprocess.run(["wrk", "-t2", "-c32", f"-d{a.duration}s", "--timeout", "30s", "--latency", "-s", lua,
                              f"http://{host}:{port}/v1/execute"], capture_output=True, text=True).stdout
        rss_after = rss_kb(srv.pid)
        rate = float(out.split("Requests/sec:")[1].split()[0])
        errors = [int(x) for x in out.split("errors ")[1].split()[:5]]
        non2xx = int(out.split("Non-2xx or 3xx responses:")[1].split()[0]) if "Non-2xx" in out else 0
        time.sleep(1)
        leftover = len(descendants(srv.pid))
        cg = stale_cgroups(srv.pid)
        # Bare python3 loop, one worker per core, same duration.
        bare = loop_rate(["/usr/bin/python3", "-c", "print(1)"], a.duration)
        reference_rates = [(name, loop_rate(argv, a.duration)) for name, argv in references]
        print(f"## Load: wrk, 32 connections, {a.duration} s, POST /v1/execute print(1)\n")
        print("| measure | value |")
        print("|---|---|")
        print(f"| executions per second (warden, isolated) | {rate:.1f} |")
        print(f"| bare `python3 -c` per second, {os.cpu_count()} workers | {bare:.1f} |")
        print(f"| ratio warden / bare | {rate / bare:.2f} |")
        for name, ref in reference_rates:
            print(f"| {name} per second, {os.cpu_count()} workers (/ bare; warden / it) | "
                  f"{ref:.1f} ({ref / bare:.2f}; {rate / ref:.2f}) |")
        print(f"| errors (connect, read, write, status, timeout) + non-2xx | {errors} + {non2xx} |")
        print(f"| daemon RSS before / after (KiB) | {rss_before} / {rss_after} |")
        print(f"| left afterwards: processes under the daemon, unowned cgroups (before the run: {cg_before}) | {leftover}, {cg} |")
        print("\nwrk latency distribution:\n```\n" + out.split("Latency Distribution")[1].split("\n\n")[0].strip() + "\n```" if "Latency Distribution" in out else "")
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(work)

if __name__ == "__main__":
    main()
