#!/usr/bin/env python3
"""Latency of executions in a context through the HTTP API, against a running `warden serve`.

Each round sends `x = 1` then `x + 1` to the same context, over one keep-alive connection, and
times each request from the first byte sent to the last byte of the JSON answer; the two kinds
are reported separately and together (p50, p90, p99, max). For comparison it also times, in
the same rounds, a plain execution of `x + 1` in the same sandbox (a fresh sandboxed process
each time) and, once per round, the creation of a new context plus its first cell.

With --warm-rounds N (issue 4's warm starts) it also times, interleaved in a shuffled order
each round: creating a sandbox of --warm-profile (data_science: a pooled one, its default
context started and pandas imported) plus running WARM_CODE in its default context, through
HTTP; the same with a sandbox that cannot come from the pool (memory_mb one below the
profile's: built on demand, pandas imported by the cell); and bare `/usr/bin/python3 -c
WARM_CODE` outside any sandbox. Before each pooled sample it waits (untimed) until the pool
holds a sandbox again, so the row measures a warm start; whether each create was served by
the pool is read from /metrics (warden_pool_taken_total) and reported. Sandboxes are deleted
untimed.

usage: contexts.py ADDR [--rounds N] [--warmup N] [--profile NAME] [--json FILE]
                        [--warm-rounds N] [--warm-profile NAME]
"""
import argparse, http.client, json, random, statistics, subprocess, sys, time

WARM_CODE = "import pandas as pd; pd.DataFrame({'a':[1,2]}).sum()"


class Api:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port))

    def call(self, method, path, body=None):
        payload = json.dumps(body).encode() if body is not None else b""
        start = time.perf_counter()
        self.conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        elapsed = (time.perf_counter() - start) * 1000
        if response.status >= 300:
            sys.exit(f"{method} {path}: {response.status} {data[:500]!r}")
        return json.loads(data) if data else None, elapsed


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def row(name, samples):
    return (
        f"| {name} | {len(samples)} | {pct(samples, 50):.2f} | {pct(samples, 90):.2f} | "
        f"{pct(samples, 99):.2f} | {max(samples):.2f} | {statistics.mean(samples):.2f} |"
    )


def pool_metric(api, name, profile):
    api.conn.request("GET", "/metrics")
    text = api.conn.getresponse().read().decode()
    prefix = f'warden_pool_{name}{{profile="{profile}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return int(line[len(prefix):])
    sys.exit(f"no {prefix.strip()} in /metrics: is pool_size set for {profile}?")


def warm_starts(api, rounds, profile, memory_mb):
    """Returns the samples (ms) of: pooled create + cell, on-demand create + cell, bare python."""
    samples = {"pool": [], "on_demand": [], "bare": []}
    served = 0

    def sandbox_cell(body):
        start = time.perf_counter()
        sb, _ = api.call("POST", "/v1/sandboxes", body)
        r, _ = api.call("POST", f"/v1/sandboxes/{sb['id']}/exec", {"code": WARM_CODE, "context": "default"})
        elapsed = (time.perf_counter() - start) * 1000
        if r.get("error") or "a    3" not in (r.get("text") or ""):
            sys.exit(f"unexpected warm answer: {r}")
        api.call("DELETE", f"/v1/sandboxes/{sb['id']}")
        return elapsed

    def bare():
        start = time.perf_counter()
        out = subprocess.run(["/usr/bin/python3", "-c", WARM_CODE], capture_output=True)
        elapsed = (time.perf_counter() - start) * 1000
        if out.returncode != 0:
            sys.exit(f"bare python failed: {out.stderr[-500:]!r}")
        return elapsed

    for _ in range(rounds):
        kinds = list(samples)
        random.shuffle(kinds)
        for kind in kinds:
            if kind == "pool":
                deadline = time.time() + 120
                while pool_metric(api, "ready", profile) < 1:
                    if time.time() > deadline:
                        sys.exit("the pool did not refill within 120 s")
                    time.sleep(0.05)
                taken = pool_metric(api, "taken_total", profile)
                samples[kind].append(sandbox_cell({"profile": profile}))
                served += pool_metric(api, "taken_total", profile) - taken
            elif kind == "on_demand":
                samples[kind].append(sandbox_cell({"profile": profile, "memory_mb": memory_mb}))
            else:
                samples[kind].append(bare())
    return samples, served


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--profile", default="standard")
    ap.add_argument("--create-rounds", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--warm-rounds", type=int, default=0)
    ap.add_argument("--warm-profile", default="data_science")
    ap.add_argument("--warm-memory-mb", type=int, default=511,
                    help="the on-demand row's memory_mb: anything but the profile's own")
    a = ap.parse_args()
    api = Api(a.addr)
    sandbox, _ = api.call("POST", "/v1/sandboxes", {"profile": a.profile})
    sid = sandbox["id"]
    ctx, _ = api.call("POST", f"/v1/sandboxes/{sid}/contexts", {})
    exec_path = f"/v1/sandboxes/{sid}/exec"
    assign, read, plain, create = [], [], [], []
    for i in range(a.warmup + a.rounds):
        r1, t1 = api.call("POST", exec_path, {"code": "x = 1", "context": ctx["id"]})
        r2, t2 = api.call("POST", exec_path, {"code": "x + 1", "context": ctx["id"]})
        if r2.get("text") != "2" or r1.get("error") or r2.get("error"):
            sys.exit(f"unexpected answers: {r1} {r2}")
        if i >= a.warmup:
            assign.append(t1)
            read.append(t2)
    for i in range(a.create_rounds):
        r, t = api.call("POST", exec_path, {"code": "x = 1\nprint(x + 1)"})
        if r["stdout"] != "2\n":
            sys.exit(f"unexpected plain answer: {r}")
        plain.append(t)
        start = time.perf_counter()
        c, _ = api.call("POST", f"/v1/sandboxes/{sid}/contexts", {})
        r, _ = api.call("POST", exec_path, {"code": "1 + 1", "context": c["id"]})
        create.append((time.perf_counter() - start) * 1000)
        api.call("DELETE", f"/v1/sandboxes/{sid}/contexts/{c['id']}")
    api.call("DELETE", f"/v1/sandboxes/{sid}")
    print("| request | n | p50 ms | p90 | p99 | max | mean |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(row("context: `x = 1`", assign))
    print(row("context: `x + 1`", read))
    print(row("context: both", assign + read))
    print(row("plain exec in the sandbox (fresh process): `x = 1; print(x + 1)`", plain))
    print(row("create a context + its first cell `1 + 1`", create))
    p50 = pct(assign + read, 50)
    print(f"\ncontext exec p50 = {p50:.2f} ms (target < 5 ms): {'met' if p50 < 5 else 'not met'}")
    results = {"assign": assign, "read": read, "plain": plain, "create": create}
    if a.warm_rounds:
        warm, served = warm_starts(api, a.warm_rounds, a.warm_profile, a.warm_memory_mb)
        print(f"\nWarm starts: `{WARM_CODE}`, {a.warm_rounds} interleaved rounds\n")
        print("| request | n | p50 ms | p90 | p99 | max | mean |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print(row(f"create ({a.warm_profile}, pooled) + the cell in its default context", warm["pool"]))
        print(row(f"create ({a.warm_profile}, memory_mb {a.warm_memory_mb}: on demand) + the cell", warm["on_demand"]))
        print(row("bare `/usr/bin/python3 -c` (no sandbox)", warm["bare"]))
        ratio = pct(warm["bare"], 50) / pct(warm["pool"], 50)
        print(f"\npooled creates served by the pool: {served} of {len(warm['pool'])}")
        print(f"bare python p50 / pooled p50 = {ratio:.1f}x (target >= 10x): "
              f"{'met' if ratio >= 10 else 'not met'}")
        results["warm"] = warm
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
