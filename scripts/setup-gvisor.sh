#!/usr/bin/env bash
# Installs gVisor's runsc (Debian's package) and registers it with the local Docker Engine as
# the OCI runtime "runsc", idempotently, so that profiles with container_runtime = "runsc" run.
# It is registered with --network=none: Warden's containers never have a network, and runsc
# cannot set up Docker's "none" network namespace on this kind of host.
# The engine reloads its runtimes on SIGHUP (no restart, running containers are untouched); if
# the engine does not list runsc afterwards, daemon.json is put back and the script says so —
# such profiles are then refused, as `warden doctor` reports. Safe to run again.
set -euo pipefail

conf=/etc/docker/daemon.json
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
  echo "setup-gvisor: no Docker Engine reachable; skipping runsc" >&2
  exit 0
fi
if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
  echo "setup-gvisor: runsc is registered" >&2
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-gvisor: runsc is not registered; run this script as root to register it" >&2
  exit 0
fi
if ! command -v runsc >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends runsc >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends runsc >/dev/null; } ||
    { echo "setup-gvisor: could not install runsc; runsc profiles will be refused" >&2; exit 0; }
fi
pid="$(pidof dockerd || true)"
if [ -z "$pid" ]; then
  echo "setup-gvisor: dockerd is not a local process; register runsc with your engine by hand" >&2
  exit 0
fi
backup="$(mktemp)"
[ -f "$conf" ] && cp "$conf" "$backup" || echo '{}' > "$backup"
python3 - "$backup" "$conf" "$(command -v runsc)" <<'PY'
import json, sys
src, dst, runsc = sys.argv[1:]
d = json.load(open(src)) if open(src).read().strip() else {}
d.setdefault("runtimes", {})["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
json.dump(d, open(dst, "w"), indent=2)
PY
kill -HUP "$pid"
for _ in $(seq 50); do
  if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    echo "setup-gvisor: registered runsc with the engine" >&2
    rm -f "$backup"
    exit 0
  fi
  sleep 0.1
done
cp "$backup" "$conf"
kill -HUP "$pid"
rm -f "$backup"
echo "setup-gvisor: the engine did not take runsc; daemon.json restored, runsc profiles will be refused" >&2
