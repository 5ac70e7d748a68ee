#!/usr/bin/env python3
"""Where a pooled one-shot's time goes (issue 24, point 1), per stage.

Starts `warden serve` (the embedded settings, a data directory of its own) with
`WARDEN_TRACE_TIMING=1`, posts `print(1)` N times from one keep-alive client, 150 ms apart (the
pool refills between), and puts each request's trace lines (the daemon's monotonic clock, the
same CLOCK_MONOTONIC as this client's `time.monotonic`) between its send and its answer. Prints
the median of each stage: request → the held run's start (HTTP, admission, policy, take, the
`Exec` frame), → init reaping the program (the gate, the interpreter's rest of start-up, the
program, its exit), → artifacts collected (status, output, artifacts), → the client has the answer.

usage: pool_stages.py WARDEN [--requests N]
"""
import argparse, http.client, json, os, re, statistics, subprocess, sys, tempfile, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)

STAGES = ["held run starts", "init reaped the program", "supervisor artifacts collected"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--requests", type=int, default=40)
    a = ap.parse_args()
    log = tempfile.NamedTemporaryFile(prefix="warden-trace-", suffix=".log", delete=False)
    srv = subprocess.Popen([a.warden, "serve", "--listen", "127.0.0.1:0",
                            "--data-dir", scratch.data_dir()],
                           stderr=log, env=dict(os.environ, WARDEN_TRACE_TIMING="1"))
    try:
        addr = None
        for _ in range(100):
            m = re.search(r"listening on http://([\d.]+):(\d+)", open(log.name).read())
            if m:
                addr = (m.group(1), int(m.group(2)))
                break
            time.sleep(0.1)
        if addr is None:
            sys.exit("warden serve did not start")
        time.sleep(3)  # the pool fills
        conn = http.client.HTTPConnection(*addr)
        spans = []
        for _ in range(a.requests):
            t0 = time.monotonic() * 1000
            conn.request("POST", "/v1/execute", json.dumps({"code": "print(1)"}),
                         {"content-type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200 and json.loads(r.read())["stdout"] == "1\n"
            spans.append((t0, time.monotonic() * 1000))
            time.sleep(0.15)
    finally:
        srv.terminate()
        srv.wait()
    trace = []
    for line in open(log.name, errors="replace"):
        m = re.match(r"warden-trace: (\d+\.\d+) (.*)$", line)
        if m:
            trace.append((float(m.group(1)), m.group(2)))
    os.unlink(log.name)
    rows = []
    for t0, t1 in spans:
        seen = {what: t - t0 for t, what in trace if t0 <= t <= t1}
        if all(s in seen for s in STAGES):
            marks = [0.0] + [seen[s] for s in STAGES] + [t1 - t0]
            rows.append([b - a for a, b in zip(marks, marks[1:])] + [t1 - t0])
    if not rows:
        sys.exit("no request had all its trace lines (was the pool empty?)")
    names = ["request -> held run starts", "-> init reaped the program",
             "-> artifacts collected", "-> the client has the answer", "total"]
    print(f"{len(rows)} of {len(spans)} requests traced whole, "
          f"{time.strftime('%F %H:%M', time.gmtime())} UTC, load {os.getloadavg()[0]:.1f}\n")
    print("| stage | median ms |\n|---|---:|")
    for i, name in enumerate(names):
        print(f"| {name} | {statistics.median(r[i] for r in rows):.2f} |")


if __name__ == "__main__":
    main()
