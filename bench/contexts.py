#!/usr/bin/env python3
"""Latency of executions in a context through the HTTP API, against a running `warden serve`.

Each round sends `x = 1` then `x + 1` to the same context, over one keep-alive connection, and
times each request from the first byte sent to the last byte of the JSON answer; the two kinds
are reported separately and together (p50, p90, p99, max). For comparison it also times, in
the same rounds, a plain execution of `x + 1` in the same sandbox (a fresh sandboxed process
each time) and, once per round, the creation of a new context plus its first cell.

usage: contexts.py ADDR [--rounds N] [--warmup N] [--profile NAME] [--json FILE]
"""
import argparse, http.client, json, statistics, sys, time


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--profile", default="standard")
    ap.add_argument("--create-rounds", type=int, default=20)
    ap.add_argument("--json")
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
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"assign": assign, "read": read, "plain": plain, "create": create}, f)


if __name__ == "__main__":
    main()
