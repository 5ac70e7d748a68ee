#!/usr/bin/env bash
# Latency of executions in a context through HTTP (issue 4): `warden serve` (release build,
# default settings), one sandbox, one context; `x = 1` then `x + 1`, ROUNDS times each, over a
# keep-alive connection (bench/contexts.py); p50/p90/p99 per request, next to a plain
# execution in the same sandbox and the creation of a context with its first cell. Then the
# warm starts: create + `import pandas as pd; pd.DataFrame({'a':[1,2]}).sum()` in a pooled
# data_science sandbox vs one built on demand vs bare `/usr/bin/python3 -c`, interleaved,
# WARM_ROUNDS times (the default settings keep two data_science sandboxes warm).
# Usage: scripts/bench-contexts.sh [ROUNDS] [WARM_ROUNDS] (defaults 500, 30). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-500}"
warm_rounds="${2:-30}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
bash scripts/setup-tests.sh >&2
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/warden"
log="$(mktemp)"
data="$(mktemp -d)"   # durable sandboxes: this run's own, removed at the end
"$warden" serve --listen 127.0.0.1:0 --data-dir "$data" 2>"$log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$log" "$data"' EXIT
addr=""
for _ in $(seq 100); do
  addr="$(sed -n 's|^warden: listening on http://||p' "$log")"
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$log" >&2; exit 1; }
echo "$(nproc) cores, $(uname -r), $rounds rounds, $warm_rounds warm rounds, $(date -u +%F)"
python3 bench/contexts.py "$addr" --rounds "$rounds" --warm-rounds "$warm_rounds"
