#!/usr/bin/env python3
"""Clients that misbehave, against `warden serve` (issue 24, point 5). Needs root only for the
descriptor limit; a release build.

1. Held: CONNS connections each send half a request head and stop; after HOLD seconds, how many
   are still open (the daemon closes a connection whose head does not arrive in
   `[server] request_head_timeout_seconds`, 10 s by default).
2. Flood: FLOOD such connections opened as fast as they can be, and, while they are held, a
   normal client's `GET /healthz` and one-shot `POST /v1/execute` of `print(1)` (fresh
   connections each), against the same requests on an idle daemon just before.

usage: slow_clients.py WARDEN [--conns N] [--hold S] [--flood N] [--rounds N]
"""
import argparse, http.client, json, resource, socket, statistics, subprocess, sys, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)

HALF = b"POST /v1/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def start(warden):
    srv = subprocess.Popen([warden, "serve", "--listen", "127.0.0.1:0", "--data-dir", scratch.data_dir()],
                           stderr=subprocess.PIPE, text=True)
    for line in srv.stderr:
        if "listening on http://" in line:
            host, port = line.strip().rsplit("http://", 1)[1].split(":")
            return srv, (host, int(port))
    raise SystemExit("the daemon did not start")


def half_open(addr, n):
    out = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(addr)
            s.sendall(HALF)
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        out.append(s)
    return out


def still_open(conns):
    n = 0
    for s in conns:
        try:
            data = s.recv(1)
            if data:  # an answer: the server is done with it
                continue
        except BlockingIOError:
            n += 1  # nothing to read and not closed: held
            continue
        except OSError:
            continue
    return n


def timed(addr, method, path, body=None):
    t = time.perf_counter()
    try:
        c = http.client.HTTPConnection(*addr, timeout=30)
        headers = {"Content-Type": "application/json"} if body else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        r.read()
        c.close()
        ok = r.status == 200
    except OSError:
        ok = False
    return (time.perf_counter() - t) * 1000, ok


def normal(addr, rounds):
    health, execs, failed = [], [], 0
    for _ in range(rounds):
        ms, ok = timed(addr, "GET", "/healthz")
        health.append(ms)
        failed += not ok
        ms, ok = timed(addr, "POST", "/v1/execute", json.dumps({"code": "print(1)"}))
        execs.append(ms)
        failed += not ok
    return health, execs, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--conns", type=int, default=3000)
    ap.add_argument("--hold", type=float, default=35)
    ap.add_argument("--flood", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    srv, addr = start(a.warden)
    try:
        conns = half_open(addr, a.conns)
        opened = len(conns)
        time.sleep(a.hold)
        held = still_open(conns)
        for s in conns:
            s.close()
        time.sleep(1)
        idle_h, idle_e, idle_failed = normal(addr, a.rounds)
        flood = half_open(addr, a.flood)
        flood_opened = len(flood)
        busy_h, busy_e, busy_failed = normal(addr, a.rounds)
        flood_held = still_open(flood)
        for s in flood:
            s.close()
        alive = srv.poll() is None
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    print(f"\n## Clients that misbehave ({a.warden})\n")
    print("| measure | value |\n|---|---|")
    print(f"| half-request connections opened / still open after {a.hold:.0f} s | {opened} / {held} |")
    print(f"| normal `GET /healthz`, idle daemon, p50 / max ms | {pct(idle_h, 50):.1f} / {max(idle_h):.1f} |")
    print(f"| normal one-shot `print(1)`, idle daemon, p50 / max ms | {pct(idle_e, 50):.1f} / {max(idle_e):.1f} |")
    print(f"| flood: half-request connections opened / held when the normal requests ended | {flood_opened} / {flood_held} |")
    print(f"| normal `GET /healthz` during the flood, p50 / max ms | {pct(busy_h, 50):.1f} / {max(busy_h):.1f} |")
    print(f"| normal one-shot `print(1)` during the flood, p50 / max ms | {pct(busy_e, 50):.1f} / {max(busy_e):.1f} |")
    print(f"| normal requests failed (idle, flood) | {idle_failed}, {busy_failed} |")
    print(f"| daemon alive at the end | {alive} |")


if __name__ == "__main__":
    main()
