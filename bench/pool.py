#!/usr/bin/env python3
"""Pooled one-shots against the process start of the bare interpreter, side by side in one run
(needs root and a release build): Python (`print(1)`), or with --language javascript node
(`console.log(1)`).

Two daemons from the same settings (the embedded profiles/settings.toml), one with the default
profile's one-shot pool (`oneshot_pool_size = SIZE`) and one without (0: every one-shot cold),
and the baseline: `/usr/bin/python3 -c 'print(1)'` (`/usr/bin/node -e 'console.log(1)'`) as a
whole process. Both daemons hold one-shots of the measured language only
(`oneshot_pool_languages`). For 1 client and for 8
clients (threads, each with its own keep-alive connection), blocks of the three cases are
interleaved in a shuffled order, block after block, so that drift in the machine's speed hits
them alike. Each client pauses a think time between requests (random, 0.5x to 1.5x THINK_MS of
its case's clients), during which the pool refills: the refill (building and starting the next
sandbox), and the teardown of the used one, happen there, outside the request's latency but on
the same two cores while other clients' requests run. The baseline's clients pause alike.

With --baseline OLD_WARDEN, a pooled daemon of that build (the same settings) is a fourth case
in the same blocks: a before/after of a change in one run.

With --lean, two more cases measure the same two things with the least client work, in the same
blocks: the pooled daemon over a raw keep-alive socket (the request in one send, the answer read
to its Content-Length; `http.client` sends the head and the body apart and parses the answer's
head with `email`), and the bare interpreter started by `os.posix_spawn` and `os.waitpid`
(`subprocess.run` builds a `Popen`, an error pipe and a descriptor sweep around it). Both ratios
are printed; the default pair is the one docs/benchmarks.md has used since the pool was built.

usage: pool.py WARDEN [--language python|javascript] [--rounds N] [--size SIZE]
               [--think-ms-1 MS] [--think-ms-8 MS] [--baseline OLD_WARDEN] [--lean]
"""
import argparse, concurrent.futures, http.client, json, os, random, shutil, socket, statistics
import subprocess, sys, tempfile, threading, time
import scratch  # bench/scratch.py (a script's own folder is on sys.path)
from procs import descendants  # bench/procs.py

HERE = os.path.dirname(os.path.abspath(__file__))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def start_daemon(warden, settings):
    # A data directory of its own: one daemon per data_dir (the other daemon's is another).
    srv = subprocess.Popen([warden, "--config", settings, "serve", "--listen", "127.0.0.1:0",
                            "--data-dir", scratch.data_dir(),
                            "--max-concurrent", "16", "--max-queued", "64"],
                           stderr=subprocess.PIPE, text=True)
    line = ""
    while "listening on http://" not in line:
        line = srv.stderr.readline()
        if not line:
            sys.exit("warden serve did not start")
    # Keep reading its log so that it never blocks on a full pipe.
    threading.Thread(target=lambda: [print("  daemon:", l.rstrip(), file=sys.stderr)
                                     for l in srv.stderr if "warden:" in l and "listening" not in l],
                     daemon=True).start()
    host, port = line.strip().rsplit("http://", 1)[1].split(":")
    return srv, (host, int(port))


# Per language: the program, and the bare interpreter's command that runs it.
PROGRAMS = {
    "python": ("print(1)", ["/usr/bin/python3", "-c", "print(1)"]),
    "javascript": ("console.log(1)", ["/usr/bin/node", "-e", "console.log(1)"]),
}


def one_shot(addr, language):
    """A client of one daemon: POST /v1/execute of the language's program on a keep-alive
    connection."""
    conn = http.client.HTTPConnection(*addr)
    body = json.dumps({"language": language, "code": PROGRAMS[language][0]})

    def call():
        conn.request("POST", "/v1/execute", body, {"content-type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            sys.exit(f"POST /v1/execute: {r.status} {data[:200]!r}")
        out = json.loads(data)
        assert out["stdout"] == "1\n", out
    return call


def one_shot_lean(addr, language):
    """The same request as `one_shot` over a raw keep-alive socket: sent in one piece, the answer
    read to its Content-Length (no header parsing beyond that)."""
    body = json.dumps({"language": language, "code": PROGRAMS[language][0]}).encode()
    request = (f"POST /v1/execute HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\n"
               f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
               ).encode() + body
    sock = socket.create_connection(addr)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call():
        sock.sendall(request)
        got = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                sys.exit("POST /v1/execute: the daemon closed the connection")
            got += chunk
            head, sep, rest = got.partition(b"\r\n\r\n")
            if not sep:
                continue
            lines = head.split(b"\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in lines
                          if line.lower().startswith(b"content-length:"))
            if len(rest) >= length:
                break
        if not lines[0].startswith(b"HTTP/1.1 200 "):
            sys.exit(f"POST /v1/execute: {lines[0]!r} {rest[:200]!r}")
        out = json.loads(rest[:length])
        assert out["stdout"] == "1\n", out
    return call


# The bare interpreter's environment: a sandbox's kind (this shell's variables can change the
# start-up: NODE_EXTRA_CA_CERTS makes node read a CA bundle, ≈ 35 ms).
BARE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}


def bare(language):
    command = PROGRAMS[language][1]
    return lambda: subprocess.run(command, stdout=subprocess.DEVNULL, check=True, env=BARE_ENV)


def bare_lean(language):
    command = PROGRAMS[language][1]
    quiet = [(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)]

    def call():
        pid = os.posix_spawn(command[0], command, BARE_ENV, file_actions=quiet)
        _, status = os.waitpid(pid, 0)
        assert status == 0, f"{command}: wait status {status}"
    return call


def block(make_call, clients, per_client, think_ms):
    """`clients` threads each make `per_client` timed calls with a think time between them."""
    def client(_):
        call = make_call()
        times = []
        for _ in range(per_client):
            time.sleep(random.uniform(0.5, 1.5) * think_ms / 1000)
            t = time.perf_counter()
            call()
            times.append((time.perf_counter() - t) * 1000)
        return times
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        return [t for ts in ex.map(client, range(clients)) for t in ts]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("warden")
    ap.add_argument("--language", choices=sorted(PROGRAMS), default="python")
    ap.add_argument("--rounds", type=int, default=30, help="blocks per case and client count")
    ap.add_argument("--size", type=int, default=8, help="the pooled daemon's oneshot_pool_size")
    ap.add_argument("--think-ms-1", type=float, default=60)
    ap.add_argument("--think-ms-8", type=float, default=250)
    ap.add_argument("--baseline", metavar="OLD_WARDEN",
                    help="another build (e.g. main's) whose pooled daemon runs as a fourth case")
    ap.add_argument("--lean", action="store_true",
                    help="also the least client work: a raw socket, os.posix_spawn")
    a = ap.parse_args()
    work = tempfile.mkdtemp()
    base = open(os.path.join(HERE, "..", "profiles", "settings.toml")).read()
    assert "oneshot_pool_size = 2 " in base
    languages = 'oneshot_pool_languages = ["python", "javascript"]'
    assert languages in base
    base = base.replace(languages, f'oneshot_pool_languages = ["{a.language}"]')
    settings = {}
    for name, size in (("pooled", a.size), ("cold", 0)):
        settings[name] = os.path.join(work, f"{name}.toml")
        open(settings[name], "w").write(
            base.replace("oneshot_pool_size = 2 ", f"oneshot_pool_size = {size} "))
    daemons = {}
    try:
        for name in ("pooled", "cold"):
            daemons[name] = start_daemon(a.warden, settings[name])
        if a.baseline:
            daemons["baseline"] = start_daemon(a.baseline, settings["pooled"])
        time.sleep(3)  # the pool fills
        bare_case = "bare " + " ".join(PROGRAMS[a.language][1][:2]) + " (process)"
        cases = {
            "pooled one-shot (HTTP)": lambda: one_shot(daemons["pooled"][1], a.language),
            "cold one-shot (HTTP)": lambda: one_shot(daemons["cold"][1], a.language),
            bare_case: lambda: bare(a.language),
        }
        if a.baseline:
            cases["pooled one-shot, baseline build (HTTP)"] = lambda: one_shot(
                daemons["baseline"][1], a.language)
        lean_pooled, lean_bare = "pooled one-shot (HTTP, raw socket)", bare_case.replace(
            "(process)", "(process, posix_spawn)")
        if a.lean:
            cases[lean_pooled] = lambda: one_shot_lean(daemons["pooled"][1], a.language)
            cases[lean_bare] = lambda: bare_lean(a.language)
        print(f"{a.language}, {os.cpu_count()} cores, {os.uname().release}, pool size {a.size}, "
              f"{a.rounds} interleaved blocks per case, {time.strftime('%F', time.gmtime())}\n")
        results = {}
        for clients, per_client, think in ((1, 10, a.think_ms_1), (8, 4, a.think_ms_8)):
            for make in cases.values():  # warm-up
                block(make, clients, 2, think)
            before = pool_counts(daemons["pooled"][1], a.language)
            samples = {k: [] for k in cases}
            for _ in range(a.rounds):
                order = list(cases.items())
                random.shuffle(order)
                for name, make in order:
                    samples[name] += block(make, clients, per_client, think)
            results[clients] = samples
            print(f"### {clients} client{'s' if clients > 1 else ''} (think time "
                  f"{think:.0f} ms ± 50 %), {len(samples[next(iter(samples))])} requests per case\n")
            print("| case | p50 ms | p90 ms | p99 ms | max ms | mean ms |")
            print("|---|---|---|---|---|---|")
            for name, xs in samples.items():
                print(f"| {name} | {pct(xs, 50):.2f} | {pct(xs, 90):.2f} | {pct(xs, 99):.2f} "
                      f"| {max(xs):.2f} | {statistics.mean(xs):.2f} |")
            taken, missed = (x - y for x, y in
                             zip(pool_counts(daemons["pooled"][1], a.language), before))
            print(f"\npooled daemon: {taken} one-shots took a held sandbox, {missed} found "
                  f"none and ran cold (warden_oneshot_pool_missed_total)")
            b = pct(samples[bare_case], 50)
            p = samples["pooled one-shot (HTTP)"]
            print(f"\npooled p50 / bare p50 = {pct(p, 50) / b:.2f} (target <= 0.25); "
                  f"pooled p99 / bare p50 = {pct(p, 99) / b:.2f} (target <= 1.0)\n")
            if a.lean:
                lb, lp = pct(samples[lean_bare], 50), samples[lean_pooled]
                print(f"least client work: pooled p50 / bare p50 = {pct(lp, 50) / lb:.2f}; "
                      f"pooled p99 / bare p50 = {pct(lp, 99) / lb:.2f}\n")
            if a.baseline:
                o = samples["pooled one-shot, baseline build (HTTP)"]
                print(f"baseline build: pooled p50 / bare p50 = {pct(o, 50) / b:.2f}; "
                      f"pooled p99 / bare p50 = {pct(o, 99) / b:.2f}\n")
        for name in daemons:
            print(f"left under the {name} daemon after the run: "
                  f"{len(descendants(daemons[name][0].pid))} processes (its held sandboxes)")
    finally:
        for srv, _ in daemons.values():
            srv.terminate()
            srv.wait()
        shutil.rmtree(work)


def pool_counts(addr, language):
    """The standard profile's one-shot pool of `language`: (taken, missed) from /metrics."""
    conn = http.client.HTTPConnection(*addr)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    labels = f'{{language="{language}",profile="standard"}}'
    def value(series):
        for line in text.splitlines():
            if line.startswith(series + labels) or line.startswith(
                    series + f'{{profile="standard",language="{language}"}}'):
                return int(float(line.split()[-1]))
        sys.exit(f"/metrics has no {series}{labels}")
    return (value("warden_oneshot_pool_taken_total"), value("warden_oneshot_pool_missed_total"))


if __name__ == "__main__":
    main()
