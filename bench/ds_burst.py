#!/usr/bin/env python3
"""The data-science path under concurrency (issue 24, point 6): CLIENTS clients at once, each
creating a `data_science` sandbox and running the first pandas cell in its default context,
against CLIENTS bare `/usr/bin/python3 -c` processes running the same code at once.

A release `warden serve` with the built-in settings, except that the data_science profile keeps
CLIENTS sandboxes warm (`pool_size`, its default context started with pandas preloaded). Each
round, in a shuffled order: the burst of pooled creates (each client on its own connection,
released together by a barrier; each sample from its first request byte to its last answer
byte), and the burst of bare pythons (each from spawn to exit). Before the pooled burst the
script waits, untimed, until the pool holds CLIENTS again, and reads `warden_pool_taken_total`
to count the creates the pool served. Sandboxes are deleted untimed.

usage: ds_burst.py WARDEN [--clients 8] [--rounds 10]
"""
import argparse, http.client, json, os, random, re, statistics, subprocess, sys, tempfile, threading, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)

CODE = "import pandas as pd; pd.DataFrame({'a':[1,2]}).sum()"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def row(name, xs):
    return (f"| {name} | {len(xs)} | {pct(xs, 50):.1f} | {pct(xs, 90):.1f} | {pct(xs, 99):.1f} | "
            f"{max(xs):.1f} | {statistics.mean(xs):.1f} |")


class Api:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.conn = http.client.HTTPConnection(host, port, timeout=300)

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            sys.exit(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None

    def metric(self, name):
        # A connection of its own each time: the daemon closes one left idle while a pool fills.
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        m = re.search(rf'^warden_pool_{name}{{profile="data_science"}} (\d+)$', text, re.M)
        if not m:
            sys.exit(f"no warden_pool_{name} for data_science in /metrics")
        return int(m.group(1))


def burst(n, one):
    """Runs `one()` in n threads released together; the samples in ms."""
    barrier = threading.Barrier(n)
    out = [None] * n

    def run(i):
        barrier.wait()
        out[i] = one(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "profiles", "settings.toml")) as f:
        settings = f.read()
    # The data_science profile's pool_size, to one warm sandbox per client.
    section = settings.index("[sandbox.profiles.data_science]")
    at = settings.index("pool_size = ", section)
    end = settings.index("\n", at)
    settings = settings[:at] + f"pool_size = {a.clients}" + settings[end:]
    conf = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    conf.write(settings)
    conf.close()
    srv = subprocess.Popen([a.warden, "--config", conf.name, "serve", "--listen", "127.0.0.1:0",
                            "--data-dir", scratch.data_dir(),
                            "--max-concurrent", str(max(4, a.clients))],
                           stderr=subprocess.PIPE, text=True)
    host = port = None
    for line in srv.stderr:
        if "listening on http://" in line:
            host, port = line.strip().rsplit("http://", 1)[1].split(":")
            port = int(port)
            break
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    control = Api(host, port)
    pooled, bare, served = [], [], 0

    def pooled_one(_):
        # A fresh connection per sample: the daemon closes one left idle while the pool refills.
        api = Api(host, port)
        start = time.perf_counter()
        sb = api.call("POST", "/v1/sandboxes", {"profile": "data_science"})
        r = api.call("POST", f"/v1/sandboxes/{sb['id']}/exec", {"code": CODE, "context": "default"})
        elapsed = (time.perf_counter() - start) * 1000
        if r.get("error") or "a    3" not in (r.get("text") or ""):
            sys.exit(f"unexpected answer: {r}")
        api.call("DELETE", f"/v1/sandboxes/{sb['id']}")
        return elapsed

    def bare_one(_):
        start = time.perf_counter()
        out = subprocess.run(["/usr/bin/python3", "-c", CODE], capture_output=True)
        elapsed = (time.perf_counter() - start) * 1000
        if out.returncode != 0:
            sys.exit(f"bare python failed: {out.stderr[-300:]!r}")
        return elapsed

    print(f"{os.cpu_count()} cores, {os.uname().release}, {a.clients} clients at once, "
          f"{a.rounds} rounds, `{CODE}`")
    try:
        for _ in range(a.rounds):
            kinds = ["pooled", "bare"]
            random.shuffle(kinds)
            for kind in kinds:
                if kind == "pooled":
                    deadline = time.time() + 300
                    while control.metric("ready") < a.clients:
                        if time.time() > deadline:
                            sys.exit("the pool did not refill within 300 s")
                        time.sleep(0.1)
                    taken = control.metric("taken_total")
                    pooled += burst(a.clients, pooled_one)
                    served += control.metric("taken_total") - taken
                else:
                    bare += burst(a.clients, bare_one)
    finally:
        srv.terminate()
        srv.wait()
        os.unlink(conf.name)
    print("\n| request | n | p50 ms | p90 | p99 | max | mean |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(row(f"create (data_science, pooled) + the cell, {a.clients} at once", pooled))
    print(row(f"bare `/usr/bin/python3 -c`, {a.clients} at once", bare))
    ratio = pct(bare, 50) / pct(pooled, 50)
    print(f"\ncreates served by the pool: {served} of {len(pooled)}")
    print(f"bare p50 / pooled p50 = {ratio:.0f}x (target >= 50x): {'met' if ratio >= 50 else 'not met'}")


if __name__ == "__main__":
    main()
