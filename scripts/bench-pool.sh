#!/usr/bin/env bash
# Pooled one-shots (issue 24, point 1): `POST /v1/execute` of `print(1)` on the default profile
# from a daemon with a one-shot pool, from one without (every one-shot cold), and the process
# start of bare `python3 -c 'print(1)'`, interleaved, at 1 client and at 8 (bench/pool.py).
# Usage: scripts/bench-pool.sh [ROUNDS] [POOL_SIZE] (defaults 30 and 8). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-30}"
size="${2:-8}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/warden"
"$warden" run <(echo 'print(1)') >/dev/null 2>&1 || true   # the one-time cgroup set-up
python3 bench/pool.py "$warden" --rounds "$rounds" --size "$size"
