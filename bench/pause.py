#!/usr/bin/env python3
"""Pause and resume against the memory a context holds (issue 20, point 2): a release
`warden serve`, one jail sandbox per size, its context holding SIZE MiB (a bytearray touched
page by page), then ROUNDS rounds of `POST …/pause` and `POST …/resume`, interleaved with
`GET /v1/sandboxes/{id}` (the HTTP round trip, the baseline in the same run), over one
keep-alive connection. After the rounds, a cell checks the memory's contents survived.

With --evict the pause is `{"evict": true}`: the context's variables are pickled into the
workspace and its interpreter ended, and the resume loads them into a fresh one. The table then
adds the saved state's size and the resident memory of the daemon's descendants (the
sandboxes' processes) before the pause and while paused: what eviction frees. (The state file
is on the workspace's tmpfs, so it is memory too: its size is the `state` column.)

usage: pause.py WARDEN [--rounds N] [--sizes 0,64,256,1024] [--evict]
"""
import argparse, http.client, json, os, statistics, subprocess, sys, tempfile, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)

SETTINGS = """
[sandbox]
default_profile = "big"
[sandbox.profiles.big]
timeout_seconds = 120
max_memory_mb = 1400
max_file_size_mb = 1024
workspace_mb = 1024
enabled_policies = []
durable = false
"""


def descendants_rss_mib(root):
    """The resident memory of every process descending from `root`, in MiB."""
    parent, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        parent[int(entry)] = int(fields["PPid"])
        rss[int(entry)] = int(fields.get("VmRSS", "0 kB").split()[0])
    total = 0
    for pid in parent:
        at = pid
        while at in parent and at != root and at > 1:
            at = parent[at]
        if at == root and pid != root:
            total += rss[pid]
    return total / 1024


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sizes", default="0,64,256,1024")
    ap.add_argument("--evict", action="store_true")
    args = ap.parse_args()
    settings = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    settings.write(SETTINGS)
    settings.close()
    srv = subprocess.Popen([args.warden, "--config", settings.name, "serve", "--listen", "127.0.0.1:0", "--data-dir", scratch.data_dir()],
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

    print(f"{os.cpu_count()} cores, {os.uname().release}, {args.rounds} rounds per size, median / p90 in ms"
          + (", pause with evict" if args.evict else ""))
    extra = " state | RSS running | RSS paused |" if args.evict else ""
    print("| context memory | pause p50 | pause p90 | resume p50 | resume p90 | GET sandbox p50 (HTTP baseline) |" + extra)
    print("|---|---|---|---|---|---|" + ("---|---|---|" if args.evict else ""))
    pause_body = {"evict": True} if args.evict else None
    try:
        for mib in [int(s) for s in args.sizes.split(",")]:
            sb = call("POST", "/v1/sandboxes", {})["id"]
            fill = (f"import os\nblob = bytearray({mib} * 1024 * 1024)\n"
                    f"for i in range(0, len(blob), 4096):\n    blob[i] = (i // 4096) % 251\nprint(len(blob))")
            out = call("POST", f"/v1/sandboxes/{sb}/exec", {"code": fill, "context": "default"})
            assert out["stdout"].strip() == str(mib * 1024 * 1024), out
            pauses, resumes, gets = [], [], []
            state = rss_running = rss_paused = 0
            for _ in range(args.rounds):
                t = time.perf_counter(); call("GET", f"/v1/sandboxes/{sb}"); gets.append(time.perf_counter() - t)
                rss_running = descendants_rss_mib(srv.pid)
                t = time.perf_counter(); info = call("POST", f"/v1/sandboxes/{sb}/pause", pause_body); pauses.append(time.perf_counter() - t)
                assert info["state"] == "paused", info
                if args.evict:
                    [evicted] = info["evicted"]
                    assert "blob" in evicted["saved"], info
                    state = evicted["bytes"]
                    rss_paused = descendants_rss_mib(srv.pid)
                t = time.perf_counter(); info = call("POST", f"/v1/sandboxes/{sb}/resume"); resumes.append(time.perf_counter() - t)
                assert info["state"] == "running", info
            check = ("print(all(blob[i] == (i // 4096) % 251 for i in range(0, len(blob), 4096)))")
            out = call("POST", f"/v1/sandboxes/{sb}/exec", {"code": check, "context": "default"})
            assert out["stdout"].strip() == "True", out
            call("DELETE", f"/v1/sandboxes/{sb}")
            ms = lambda xs, p: f"{pct(xs, p) * 1000:.2f}"
            extra = (f" {state / 2**20:.1f} MiB | {rss_running:.0f} MiB | {rss_paused:.0f} MiB |"
                     if args.evict else "")
            print(f"| {mib} MiB | {ms(pauses, 50)} | {ms(pauses, 90)} | {ms(resumes, 50)} | {ms(resumes, 90)} | {ms(gets, 50)} |" + extra)
    finally:
        srv.terminate()
        srv.wait()
        os.unlink(settings.name)


if __name__ == "__main__":
    main()
