#!/usr/bin/env python3
"""What idle sandboxes cost the work beside them: one-shots and executions in a sandbox, timed
with no idle sandbox in the daemon and again beside IDLE of them, and the time to create and
destroy a sandbox either way (issue 24, point 4: a daemon holding thousands of sandboxes must
still serve the rest at the same speed). With `--contexts`, each idle sandbox also holds a live
Python context (`x = 1` run in its context `default`): a process and cgroup leaves of its own,
as point 4's 2,000 live contexts.

A release `warden serve` with `bench/scale.py`'s settings (one jail profile, no policies, long
TTLs, `max_sandboxes` raised to fit). Phases, each measured from one client, one request at a
time (keep-alive connection), so that a figure is a request's own latency:

1. ROUNDS `POST /v1/execute` of `print(1)`, ROUNDS `POST /v1/sandboxes/{id}/exec` of `print(1)`
   in one sandbox, and ROUNDS create + destroy of a sandbox;
2. IDLE sandboxes created (from 8 clients), each with a live context with `--contexts`;
3. the same as 1, beside them;
4. the idle ones destroyed.

Prints the medians and 90th percentiles of each, and their ratio (beside / alone).

usage: beside_idle.py WARDEN [--idle 2000] [--contexts] [--rounds 40]
"""
import argparse, os, statistics, threading, time
from scale import SETTINGS, Api, fan_out, serve  # bench/scale.py
from daemon import pct  # bench/daemon.py


def timed(rounds, work):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        work()
        times.append((time.perf_counter() - t) * 1000)
    return times


def measure(api, rounds):
    sid = api.call("POST", "/v1/sandboxes", {})["id"]
    try:
        out = {
            "one-shot `POST /v1/execute`": timed(
                rounds, lambda: api.call("POST", "/v1/execute", {"code": "print(1)"})),
            "exec in a sandbox": timed(
                rounds, lambda: api.call("POST", f"/v1/sandboxes/{sid}/exec", {"code": "print(1)"})),
        }
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sid}")
    ids = []
    out["create a sandbox"] = timed(
        rounds, lambda: ids.append(api.call("POST", "/v1/sandboxes", {})["id"]))
    out["destroy a sandbox"] = timed(
        rounds, lambda: api.call("DELETE", f"/v1/sandboxes/{ids.pop()}"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--contexts", action="store_true")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--uid-base", type=int, default=1_950_000_000)
    a = ap.parse_args()
    clients = 8
    conf, srv, host, port, _ = serve(a.warden, SETTINGS.format(
        max_sandboxes=a.idle + a.rounds + 16, clients=clients, uid_base=a.uid_base))
    try:
        api = Api(host, port)
        api.call("POST", "/v1/execute", {"code": "print(1)"})  # warm-up
        alone = measure(api, a.rounds)
        apis = [Api(host, port) for _ in range(clients)]
        ids, lock = [], threading.Lock()

        def create(api_, _):
            sid = api_.call("POST", "/v1/sandboxes", {})["id"]
            if a.contexts:
                api_.call("POST", f"/v1/sandboxes/{sid}/exec", {"code": "x = 1", "context": "default"})
            with lock:
                ids.append(sid)

        start = time.perf_counter()
        errors = fan_out(apis, list(range(a.idle)), create)
        created_s = time.perf_counter() - start
        # A new connection: the daemon closes one left idle while the others worked.
        beside = measure(Api(host, port), a.rounds)
        start = time.perf_counter()
        errors += fan_out(apis, ids, lambda api_, sid: api_.call("DELETE", f"/v1/sandboxes/{sid}"))
        destroyed_s = time.perf_counter() - start
        print(f"{os.cpu_count()} cores, {os.uname().release}; {len(ids)} idle sandboxes{' with a live context each' if a.contexts else ''} created in "
              f"{created_s:.1f} s and destroyed in {destroyed_s:.1f} s from {clients} clients; "
              f"{len(errors)} errors{': ' + errors[0] if errors else ''}\n")
        print(f"| request ({a.rounds} each, one client) | alone p50 / p90 ms | beside {len(ids)} idle p50 / p90 ms | p50 beside / alone |")
        print("|---|---:|---:|---:|")
        for name in alone:
            x, y = alone[name], beside[name]
            print(f"| {name} | {statistics.median(x):.2f} / {pct(x, 90):.2f} | "
                  f"{statistics.median(y):.2f} / {pct(y, 90):.2f} | {statistics.median(y) / statistics.median(x):.2f} |")
    finally:
        srv.terminate()
        srv.wait(timeout=60)
        os.unlink(conf)


if __name__ == "__main__":
    main()
