#!/usr/bin/env python3
"""Sandbox.create() + the first run_code through the official E2B SDK, against the same through
Warden's native API, interleaved, against a running `warden serve` (docs/benchmarks.md, "The
E2B SDK").

Each round runs both, in a shuffled order, each timed from the call's start to its answer:
- e2b: `Sandbox.create(template=PROFILE)` then `run_code("x = 1\\nx + 1")` (the SDK's own HTTP
  clients, as an agent would use them; E2B_API_URL, E2B_SANDBOX_URL = ADDR);
- native: `POST /v1/sandboxes {"profile"}` then `POST /v1/sandboxes/{id}/exec` of the same code
  in the default context, over one keep-alive connection (httpx).
Both sandboxes are destroyed afterwards, untimed. The profile should have no warm pool
(`pool_size = 0`): a sandbox made through E2B is never a pooled one (it has /home/user).

usage: e2b_create_run.py URL [--rounds N] [--warmup N] [--profile NAME]
Run with the E2B venv's python (scripts/setup-e2b-sdk.sh).
"""
import argparse, os, random, statistics, time

import httpx

CODE = "x = 1\nx + 1"


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", default="e2b")
    a = ap.parse_args()
    os.environ.update(E2B_API_URL=a.url, E2B_SANDBOX_URL=a.url)
    os.environ.setdefault("E2B_API_KEY", "e2b_" + "0" * 40)
    from e2b_code_interpreter import Sandbox

    native = httpx.Client(base_url=a.url, timeout=60)

    def e2b_once():
        t = time.perf_counter()
        sbx = Sandbox.create(template=a.profile)
        text = sbx.run_code(CODE).text
        ms = (time.perf_counter() - t) * 1000
        assert text == "2", text
        sbx.kill()
        return ms

    def native_once():
        t = time.perf_counter()
        r = native.post("/v1/sandboxes", json={"profile": a.profile})
        r.raise_for_status()
        sid = r.json()["id"]
        r = native.post(f"/v1/sandboxes/{sid}/exec", json={"code": CODE, "context": "default"})
        r.raise_for_status()
        ms = (time.perf_counter() - t) * 1000
        assert r.json()["text"] == "2", r.text
        native.delete(f"/v1/sandboxes/{sid}")
        return ms

    kinds = {"e2b SDK: Sandbox.create() + run_code": e2b_once, "native: POST /v1/sandboxes + exec": native_once}
    for _ in range(a.warmup):
        for f in kinds.values():
            f()
    samples = {k: [] for k in kinds}
    for _ in range(a.rounds):
        order = list(kinds)
        random.shuffle(order)
        for k in order:
            samples[k].append(kinds[k]())
    print(f"{a.rounds} rounds, profile {a.profile}, {a.url}")
    print("| path | n | p50 ms | p90 | p99 | max | mean |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k, s in samples.items():
        print(f"| {k} | {len(s)} | {pct(s, 50):.1f} | {pct(s, 90):.1f} | {pct(s, 99):.1f} | {max(s):.1f} | {statistics.mean(s):.1f} |")
    e, n = (statistics.median(s) for s in samples.values())
    print(f"median ratio e2b/native: {e / n:.2f}")


if __name__ == "__main__":
    main()
