#!/usr/bin/env python3
"""Pause and resume against the memory a context holds (issue 20, point 2): a release
`warden serve`, one jail sandbox per size, its context holding SIZE MiB (a bytearray touched
page by page), then ROUNDS rounds of `POST …/pause` and `POST …/resume`, interleaved with
`GET /v1/sandboxes/{id}` (the HTTP round trip, the baseline in the same run), over one
keep-alive connection. After the rounds, a cell checks the memory's contents survived.

usage: pause.py WARDEN [--rounds N] [--sizes 0,64,256,1024]
"""
import argparse, http.client, json, os, statistics, subprocess, sys, tempfile, time

SETTINGS = """
[sandbox]
default_profile = "big"
[sandbox.profiles.big]
timeout_seconds = 120
max_memory_mb = 1400
enabled_policies = []
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sizes", default="0,64,256,1024")
    args = ap.parse_args()
    settings = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    settings.write(SETTINGS)
    settings.close()
    srv = subprocess.Popen([args.warden, "--config", settings.name, "serve", "--listen", "127.0.0.1:0", "--data-dir", tempfile.mkdtemp(prefix="warden-bench-data-")],
                           stderr=subprocess.PIPE, text=True)
    host = port = None
    for line in srv.stderr:
        if "listening on http://" in line:
            host, port = line.strip().rsplit("http://", 1)[1].split(":")
            break
    conn = http.client.HTTPConnection(host, int(port), timeout=300)

    def call(method, path, body=None):
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status >= 300:
            sys.exit(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None

    print(f"{os.cpu_count()} cores, {os.uname().release}, {args.rounds} rounds per size, median / p90 in ms")
    print("| context memory | pause p50 | pause p90 | resume p50 | resume p90 | GET sandbox p50 (HTTP baseline) |")
    print("|---|---|---|---|---|---|")
    try:
        for mib in [int(s) for s in args.sizes.split(",")]:
            sb = call("POST", "/v1/sandboxes", {})["id"]
            fill = (f"import os\nblob = bytearray({mib} * 1024 * 1024)\n"
                    f"for i in range(0, len(blob), 4096):\n    blob[i] = (i // 4096) % 251\nprint(len(blob))")
            out = call("POST", f"/v1/sandboxes/{sb}/exec", {"code": fill, "context": "default"})
            assert out["stdout"].strip() == str(mib * 1024 * 1024), out
            pauses, resumes, gets = [], [], []
            for _ in range(args.rounds):
                t = time.perf_counter(); call("GET", f"/v1/sandboxes/{sb}"); gets.append(time.perf_counter() - t)
                t = time.perf_counter(); info = call("POST", f"/v1/sandboxes/{sb}/pause"); pauses.append(time.perf_counter() - t)
                assert info["state"] == "paused", info
                t = time.perf_counter(); info = call("POST", f"/v1/sandboxes/{sb}/resume"); resumes.append(time.perf_counter() - t)
                assert info["state"] == "running", info
            check = ("print(all(blob[i] == (i // 4096) % 251 for i in range(0, len(blob), 4096)))")
            out = call("POST", f"/v1/sandboxes/{sb}/exec", {"code": check, "context": "default"})
            assert out["stdout"].strip() == "True", out
            call("DELETE", f"/v1/sandboxes/{sb}")
            ms = lambda xs, p: f"{pct(xs, p) * 1000:.2f}"
            print(f"| {mib} MiB | {ms(pauses, 50)} | {ms(pauses, 90)} | {ms(resumes, 50)} | {ms(resumes, 90)} | {ms(gets, 50)} |")
    finally:
        srv.terminate()
        srv.wait()
        os.unlink(settings.name)


if __name__ == "__main__":
    main()
