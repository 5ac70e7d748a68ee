#!/usr/bin/env bash
# The soak (bench/soak.py): 10 000 executions at 32 concurrent clients against a release-built
# daemon, one in ten an attack program (fork bomb, memory bomb, output flood, double-forked
# sleeper, timeout), each answer checked; the daemon's RSS sampled; afterwards no leaked
# process, cgroup, mount, tmpfs or container. Needs root. Bounded: it stops issuing requests
# after MAX_SECONDS and then fails as incomplete.
# Usage: scripts/soak.sh [TOTAL] [CLIENTS] [MAX_SECONDS]   (defaults 10000, 32, 1800)
set -euo pipefail
cd "$(dirname "$0")/.."
total="${1:-10000}"
clients="${2:-32}"
max_seconds="${3:-1800}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
bash scripts/setup-tests.sh >&2
cargo build --release --quiet -p warden
python3 bench/soak.py "$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/warden" --total "$total" --clients "$clients" \
  --max-seconds "$max_seconds"
