#!/usr/bin/env python3
"""Scale on one host (issue 24, point 4): how many sandboxes and contexts one `warden serve`
holds, how fast it creates them, what each costs the daemon, and that destroying them all
leaves nothing behind.

A release `warden serve` with one jail profile (no policies, long TTLs) and `max_sandboxes`
raised to fit. Phases, each timed:

1. create SANDBOXES idle sandboxes from CLIENTS clients (keep-alive connections), reporting
   the rate per thousand; then the daemon's RSS and descriptors per sandbox;
2. one execution (`print(1)`) in every one of them, from CLIENTS clients;
3. a live Python context in CONTEXTS of them (`x = <i>`), then a cell in each reading it back;
   the host's available memory before and after;
4. destroy them all; then, the clients' connections closed, count what is left: processes
   under the daemon, the daemon's descriptors (each named when their count differs from the
   start's), uid leases still held.

usage: scale.py WARDEN [--sandboxes 10000] [--contexts 2000] [--clients 8]
"""
import argparse, http.client, json, os, subprocess, sys, tempfile, threading, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)
from procs import descendants  # bench/procs.py

SETTINGS = """
[server]
max_sandboxes = {max_sandboxes}
max_connections = 256
max_concurrent = {clients}
[sandbox]
default_profile = "idle"
[sandbox.jail]
# A uid range of its own: other daemons on the host lease from the default one.
uid_base = {uid_base}
[sandbox.profiles.idle]
enabled_policies = []
max_memory_mb = 64
durable = false
idle_ttl_seconds = 7200
max_lifetime_seconds = 7200
"""


def meminfo_mib(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Api:
    def __init__(self, host, port):
        self.conn = http.client.HTTPConnection(host, port, timeout=600)

    def call(self, method, path, body=None, ok=(200, 201)):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        if r.status not in ok:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None


def serve(warden, settings):
    """`warden serve` on a free port with `settings` (a settings.toml's text) and a scratch
    data folder: (its settings file, the process, host, port, its standard error's lines so
    far, which a thread goes on collecting)."""
    conf = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    conf.write(settings)
    conf.close()
    srv = subprocess.Popen([warden, "--config", conf.name, "serve", "--listen", "127.0.0.1:0",
                            "--data-dir", scratch.data_dir()],
                           stderr=subprocess.PIPE, text=True)
    host = port = None
    log = []
    for line in srv.stderr:
        log.append(line.rstrip())
        if "listening on http://" in line:
            host, port = line.strip().rsplit("http://", 1)[1].split(":")
            port = int(port)
            break
    threading.Thread(target=lambda: [log.append(l.rstrip()) for l in srv.stderr], daemon=True).start()
    return conf.name, srv, host, port, log


def fan_out(apis, items, work):
    """Runs work(api, item) for every item, the items split over the clients; the errors."""
    errors = []
    lock = threading.Lock()
    chunks = [items[i::len(apis)] for i in range(len(apis))]

    def run(api, chunk):
        for item in chunk:
            try:
                work(api, item)
            except Exception as e:  # noqa: BLE001 - counted and shown
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=run, args=(a, c)) for a, c in zip(apis, chunks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--sandboxes", type=int, default=10000)
    ap.add_argument("--contexts", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--uid-base", type=int, default=1_950_000_000)
    a = ap.parse_args()
    conf, srv, host, port, log = serve(a.warden, SETTINGS.format(
        max_sandboxes=a.sandboxes, clients=a.clients, uid_base=a.uid_base))
    for line in log:
        if "lowered" in line or "room for" in line:
            print(line)
    apis = [Api(host, port) for _ in range(a.clients)]
    pid = srv.pid
    rss0, fds0 = status_kib(pid, "VmRSS"), len(os.listdir(f"/proc/{pid}/fd"))
    print(f"{os.cpu_count()} cores, {os.uname().release}, {meminfo_mib('MemTotal') / 1024:.1f} GiB, "
          f"{a.clients} clients, descriptor limit {open(f'/proc/{pid}/limits').read().split('Max open files')[1].split()[0]}")
    try:
        # 1. creates
        ids, lock = [], threading.Lock()
        marks = []
        start = time.perf_counter()

        def create(api, _):
            sb = api.call("POST", "/v1/sandboxes", {})
            with lock:
                ids.append(sb["id"])
                if len(ids) % 1000 == 0:
                    marks.append((len(ids), time.perf_counter() - start))

        errors = fan_out(apis, list(range(a.sandboxes)), create)
        took = time.perf_counter() - start
        print(f"\ncreated {len(ids)} sandboxes in {took:.1f} s: {len(ids) / took:.0f}/s; errors {len(errors)} {errors[:2]}")
        last = (0, 0.0)
        for n, t in marks:
            print(f"  sandboxes {last[0] + 1}-{n}: {(n - last[0]) / (t - last[1]):.0f}/s")
            last = (n, t)
        rss, fds = status_kib(pid, "VmRSS"), len(os.listdir(f"/proc/{pid}/fd"))
        print(f"daemon RSS {rss0} -> {rss} KiB: {(rss - rss0) * 1024 / max(1, len(ids)):.0f} bytes per idle sandbox; "
              f"descriptors {fds0} -> {fds}: {(fds - fds0) / max(1, len(ids)):.2f} per sandbox")
        # 2. an execution in each
        start = time.perf_counter()

        def run_one(api, sid):
            r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"code": "print(1)"})
            if r["stdout"] != "1\n":
                raise RuntimeError(f"{sid}: {r}")

        errors = fan_out(apis, ids, run_one)
        took = time.perf_counter() - start
        print(f"an execution in each of {len(ids)}: {took:.1f} s ({len(ids) / took:.0f}/s), errors {len(errors)} {errors[:2]}")
        # 3. contexts
        avail0 = meminfo_mib("MemAvailable")
        with_ctx = ids[: a.contexts]
        start = time.perf_counter()

        failed = set()

        def define(api, i):
            try:
                r = api.call("POST", f"/v1/sandboxes/{with_ctx[i]}/exec", {"code": f"x = {i}", "context": "default"})
            except RuntimeError:
                failed.add(with_ctx[i])
                raise
            if r.get("error"):
                raise RuntimeError(f"{with_ctx[i]}: {r}")

        fds_before = len(os.listdir(f"/proc/{pid}/fd"))
        errors = fan_out(apis, list(range(len(with_ctx))), define)
        took = time.perf_counter() - start
        avail1 = meminfo_mib("MemAvailable")
        started = len(with_ctx) - len(errors)
        fds_after = len(os.listdir(f"/proc/{pid}/fd"))
        codes = {}
        for e in errors:
            key = e.split(": ", 2)[1][:3] + " " + (e.split('"code":"', 1)[1].split('"', 1)[0] if '"code":"' in e else "?")
            codes[key] = codes.get(key, 0) + 1
        print(f"contexts started {started}, refused {len(errors)} by status and code {codes}; "
              f"descriptors {fds_before} -> {fds_after}: {(fds_after - fds_before) / max(1, started):.2f} per context")
        print(f"{len(with_ctx)} live contexts started in {took:.1f} s, errors {len(errors)} {errors[:2]}; "
              f"host memory available {avail0:.0f} -> {avail1:.0f} MiB: "
              f"{(avail0 - avail1) / max(1, started):.1f} MiB per context")

        def read(api, i):
            if with_ctx[i] in failed:
                return
            r = api.call("POST", f"/v1/sandboxes/{with_ctx[i]}/exec", {"code": "x", "context": "default"})
            if r.get("text") != str(i):
                raise RuntimeError(f"{with_ctx[i]}: {r}")

        start = time.perf_counter()
        errors = fan_out(apis, list(range(len(with_ctx))), read)
        print(f"a cell in each context, reading its variable: {time.perf_counter() - start:.1f} s, "
              f"errors {len(errors)} {errors[:2]}; daemon RSS {status_kib(pid, 'VmRSS')} KiB")
        # 4. destroy
        start = time.perf_counter()
        errors = fan_out(apis, ids, lambda api, sid: api.call("DELETE", f"/v1/sandboxes/{sid}"))
        print(f"destroyed {len(ids)} in {time.perf_counter() - start:.1f} s, errors {len(errors)} {errors[:2]}")
        # The clients' keep-alive connections are the daemon's descriptors too: closed first.
        for api in apis:
            api.conn.close()
        time.sleep(2)
        left = descendants(pid)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        if fds != fds0:
            for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
                try:
                    what = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if what == "anon_inode:[pidfd]":  # whose: the process and its command line
                        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                            of = [l.split()[1] for l in f if l.startswith("Pid:")][0]
                        with open(f"/proc/{of}/environ", "rb") as f:
                            mode = [v for v in f.read().split(b"\0") if v.startswith(b"WARDEN_JAIL_HELPER=")]
                        what += f" of process {of} ({b' '.join(mode).decode() or 'no helper mode'})"
                    print(f"  descriptor {fd}: {what}")
                except (OSError, IndexError):
                    pass
        held = 0
        for name in os.listdir("/run/warden/uids"):
            if not name.endswith(".record"):
                continue
            try:
                with open(f"/run/warden/uids/{name}") as f:
                    held += f"held by {pid}" in f.read()
            except OSError:
                pass
        print(f"left: {len(left)} processes under the daemon, {fds} descriptors (at start {fds0}), "
              f"{held} uid records of the daemon")
    finally:
        srv.terminate()
        srv.wait()
        os.unlink(conf)


if __name__ == "__main__":
    main()
