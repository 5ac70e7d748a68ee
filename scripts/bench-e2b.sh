#!/usr/bin/env bash
# The E2B drop-in's benchmark (docs/benchmarks.md, "The E2B SDK"): Sandbox.create() + the first
# run_code through the official SDK against the same through the native API, interleaved
# (bench/e2b_create_run.py), on a `warden serve` started here with tests/e2b/settings.toml
# (profile `e2b`: no warm pool, no import policy).
#
# Usage: scripts/bench-e2b.sh [ROUNDS]   (default 50)
#   WARDEN_BIN  the binary (default: the release build in $CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-50}"
bash scripts/setup-e2b-sdk.sh
bin="${WARDEN_BIN:-${CARGO_TARGET_DIR:-/var/cache/warden/target}/x86_64-unknown-linux-gnu/release/warden}"
log="$(mktemp)"
data="$(mktemp -d)"   # durable sandboxes: this run's own, removed at the end
"$bin" --config tests/e2b/settings.toml serve --listen 127.0.0.1:0 --data-dir "$data" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$log" "$data"' EXIT
url=""
for _ in $(seq 200); do
  url="$(grep -o 'listening on http://[^ ]*' "$log" | head -n1 | cut -d' ' -f3 || true)"
  [ -n "$url" ] && curl -fsS "$url/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$log"; exit 1; }
echo "binary: $bin ($(git rev-parse --short HEAD)), load $(cut -d' ' -f1-3 /proc/loadavg)"
"${WARDEN_E2B_VENV:-/var/cache/warden/venv-e2b}/bin/python" bench/e2b_create_run.py "$url" --rounds "$rounds"
