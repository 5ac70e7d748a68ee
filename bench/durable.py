#!/usr/bin/env python3
"""Durable sandboxes' costs (issue 20): a release `warden serve` with its data directory on the
host's disk (a temp dir; never the real one), over one keep-alive connection.

1. Create + destroy of a durable sandbox (a preallocated ext4 image on a loop device) against
   a memory-backed one (`durable = false`: a tmpfs), same limits, interleaved round by round.
2. Snapshot time by workspace size (`workspace_mb` 64, 256, 1024, the image half filled with
   random bytes), interleaved with `GET /v1/sandboxes/{id}` (the HTTP round trip) as the
   baseline; each snapshot is deleted before the next round (its delete time is shown too).
3. Fork x10 of a 64 MiB workspace (one request) against ten memory-backed creates and ten
   durable creates made one after another, interleaved; the forks are destroyed each round.

Pause and resume are measured by bench/pause.py.

usage: durable.py WARDEN [--rounds N] [--snapshot-sizes 64,256,1024] [--fork-rounds N]
"""
import argparse, http.client, json, os, statistics, subprocess, sys, tempfile, time, shutil

SETTINGS = """
[server]
snapshot_quota_mb = 100000

[sandbox]
default_profile = "disk64"
"""
PROFILE = """
[sandbox.profiles.{name}]
timeout_seconds = 60
max_memory_mb = 256
max_file_size_mb = 1024
workspace_mb = {mb}
enabled_policies = []
durable = {durable}
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--snapshot-sizes", default="64,256,1024")
    ap.add_argument("--snapshot-rounds", type=int, default=10)
    ap.add_argument("--fork-rounds", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(s) for s in args.snapshot_sizes.split(",")]
    text = SETTINGS + PROFILE.format(name="mem64", mb=64, durable="false")
    for mb in sorted(set(sizes + [64])):
        text += PROFILE.format(name=f"disk{mb}", mb=mb, durable="true")
    work = tempfile.mkdtemp(prefix="warden-bench-durable-", dir="/var/tmp")
    settings = os.path.join(work, "settings.toml")
    with open(settings, "w") as f:
        f.write(text)
    data = os.path.join(work, "data")
    srv = subprocess.Popen([args.warden, "--config", settings, "serve", "--listen", "127.0.0.1:0",
                            "--data-dir", data], stderr=subprocess.PIPE, text=True)
    host = port = None
    for line in srv.stderr:
        if "listening on http://" in line:
            host, port = line.strip().rsplit("http://", 1)[1].split(":")
            break
    conn = http.client.HTTPConnection(host, int(port), timeout=600)

    def call(method, path, body=None):
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        out = r.read()
        if r.status >= 300:
            sys.exit(f"{method} {path}: {r.status} {out[:300]!r}")
        return json.loads(out) if out else None

    def timed(method, path, body=None):
        t = time.perf_counter()
        out = call(method, path, body)
        return time.perf_counter() - t, out

    ms = lambda xs, p: f"{pct(xs, p) * 1000:.1f}"
    print(f"{os.cpu_count()} cores, {os.uname().release}, load {os.getloadavg()[0]:.1f} at start, "
          f"data dir on {data} (host disk); median / p90 in ms")
    try:
        # 1. Create and destroy, durable against memory-backed.
        res = {"disk64": ([], []), "mem64": ([], [])}
        for _ in range(args.rounds):
            for profile in ("mem64", "disk64"):
                dt, sb = timed("POST", "/v1/sandboxes", {"profile": profile})
                res[profile][0].append(dt)
                dt, _ = timed("DELETE", f"/v1/sandboxes/{sb['id']}")
                res[profile][1].append(dt)
        print(f"\n{args.rounds} rounds, 64 MiB workspace, interleaved")
        print("| sandbox | create p50 | create p90 | destroy p50 | destroy p90 |")
        print("|---|---|---|---|---|")
        for profile, label in (("mem64", "memory-backed (`durable = false`, baseline)"), ("disk64", "durable (ext4 image, loop device)")):
            c, d = res[profile]
            print(f"| {label} | {ms(c, 50)} | {ms(c, 90)} | {ms(d, 50)} | {ms(d, 90)} |")

        # 2. Snapshot by workspace size.
        print(f"\n{args.snapshot_rounds} rounds per size, the workspace half filled with random bytes")
        print("| workspace_mb | snapshot p50 | snapshot p90 | delete snapshot p50 | GET sandbox p50 (baseline) |")
        print("|---|---|---|---|---|")
        for mb in sizes:
            sb = call("POST", "/v1/sandboxes", {"profile": f"disk{mb}"})["id"]
            fill = f"import os\nwith open('fill.bin', 'wb') as f:\n    for _ in range({mb // 2}):\n        f.write(os.urandom(1 << 20))\nprint('ok')"
            out = call("POST", f"/v1/sandboxes/{sb}/exec", {"code": fill})
            assert out["stdout"].strip() == "ok", out
            snaps, deletes, gets = [], [], []
            for n in range(args.snapshot_rounds):
                dt, _ = timed("GET", f"/v1/sandboxes/{sb}")
                gets.append(dt)
                dt, info = timed("POST", f"/v1/sandboxes/{sb}/snapshot", {"name": f"s{mb}-{n}"})
                snaps.append(dt)
                dt, _ = timed("DELETE", f"/v1/snapshots/{info['name']}")
                deletes.append(dt)
            call("DELETE", f"/v1/sandboxes/{sb}")
            print(f"| {mb} | {ms(snaps, 50)} | {ms(snaps, 90)} | {ms(deletes, 50)} | {ms(gets, 50)} |")

        # 3. Fork x10 against ten creates of each kind.
        parent = call("POST", "/v1/sandboxes", {"profile": "disk64"})["id"]
        call("POST", f"/v1/sandboxes/{parent}/exec", {"code": "open('a.txt', 'w').write('x' * 1000000)"})
        forks, mems, disks = [], [], []
        for _ in range(args.fork_rounds):
            dt, made = timed("POST", f"/v1/sandboxes/{parent}/fork", {"count": 10})
            forks.append(dt)
            for s in made["sandboxes"]:
                call("DELETE", f"/v1/sandboxes/{s['id']}")
            for profile, into in (("mem64", mems), ("disk64", disks)):
                t = time.perf_counter()
                ids = [call("POST", "/v1/sandboxes", {"profile": profile})["id"] for _ in range(10)]
                into.append(time.perf_counter() - t)
                for i in ids:
                    call("DELETE", f"/v1/sandboxes/{i}")
        call("DELETE", f"/v1/sandboxes/{parent}")
        print(f"\n{args.fork_rounds} rounds, 64 MiB workspace, interleaved")
        print("| ten sandboxes by | p50 | p90 |")
        print("|---|---|---|")
        print(f"| one fork, `count: 10` | {ms(forks, 50)} | {ms(forks, 90)} |")
        print(f"| ten memory-backed creates (baseline) | {ms(mems, 50)} | {ms(mems, 90)} |")
        print(f"| ten durable creates | {ms(disks, 50)} | {ms(disks, 90)} |")
        print(f"\nload {os.getloadavg()[0]:.1f} at the end")
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
