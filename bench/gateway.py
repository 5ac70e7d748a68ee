#!/usr/bin/env python3
"""The egress gateway's cost (issue 21), measured inside sandboxes: run by scripts/bench-gateway.sh.

Each round runs one `warden run` per profile, in turn (interleaved), with the same program:
REQUESTS sequential GETs of a small page over fresh connections (HTTP, then HTTPS), timed one
by one, then one download of /big (plain HTTP), timed whole. The profiles:

- `direct`: controlled egress by address (allow_domains: the resolver pins the name);
- `gateway`: egress.gateway (every connection through the gateway; TLS passed through);
- `brokered`: egress.gateway with a brokered secret bound to the host (TLS ended and
  re-encrypted by the gateway; HTTPS only).

Prints the median of each round's median per request, and of the download's MB/s.
"""
import json
import statistics
import subprocess
import sys

warden, config, rounds, requests = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ca = open(sys.argv[5]).read()

PROGRAM = r'''
import http.client, json, os, ssl, time
open("ca.pem", "w").write(CA)
N = REQUESTS
def timed(make):
    out = []
    for i in range(N):
        t = time.perf_counter()
        c = make()
        c.request("GET", "/small", headers={"Authorization": "Bearer " + os.environ.get("API_KEY", "none")})
        c.getresponse().read()
        c.close()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)
import statistics
R = {}
if not BROKERED:
    R["http_ms"] = timed(lambda: http.client.HTTPConnection("bench.test", 80, timeout=10))
    t = time.perf_counter()
    c = http.client.HTTPConnection("bench.test", 80, timeout=60)
    c.request("GET", "/big"); n = len(c.getresponse().read())
    R["download_mb_s"] = n / 1e6 / (time.perf_counter() - t)
ctx = ssl.create_default_context() if BROKERED else ssl.create_default_context(cafile="ca.pem")
R["https_ms"] = timed(lambda: http.client.HTTPSConnection("bench.test", 443, timeout=10, context=ctx))
print(json.dumps(R))
'''

results = {}
for _ in range(rounds):
    for profile in ["direct", "gateway", "brokered"]:
        code = (
            f"CA = {ca!r}\nREQUESTS = {requests}\nBROKERED = {profile == 'brokered'}\n" + PROGRAM
        )
        out = subprocess.run(
            [warden, "--config", config, "run", "--json", "--profile", profile, "-l", "python", "-"],
            input=code, capture_output=True, text=True,
        )
        v = json.loads(out.stdout)
        if v.get("exit_code") != 0:
            sys.exit(f"{profile}: {v}")
        line = [l for l in v["stdout"].splitlines() if l.startswith("{")][-1]
        for k, x in json.loads(line).items():
            results.setdefault((profile, k), []).append(x)

print(f"{'profile':<10} {'metric':<14} {'median':>10}  (of {rounds} rounds, {requests} requests each)")
for (profile, k), xs in sorted(results.items()):
    print(f"{profile:<10} {k:<14} {statistics.median(xs):>10.2f}")
