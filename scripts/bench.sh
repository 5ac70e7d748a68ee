#!/usr/bin/env bash
# Start-up benchmark of the native jail, side by side in one run:
#   `warden run` of a one-line Python program  vs  bare `python3 -c` of the same line
#   vs  `bwrap --unshare-all --ro-bind / / --tmpfs /tmp --proc /proc --dev /dev python3 -c …`;
# and the sandbox's own overhead: `warden run` of a script that runs `true` vs `bwrap … true`.
# The commands are interleaved round by round (bench/interleave.py), so drift in a shared
# machine's speed hits them alike. Usage: scripts/bench.sh [ROUNDS] (default 200). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-200}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
bash scripts/setup.sh >&2
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/release/warden"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo 'print(1)' > "$work/one.py"
echo 'true' > "$work/true.sh"
py=/usr/bin/python3
bwrap="bwrap --unshare-all --ro-bind / / --tmpfs /tmp --proc /proc --dev /dev"
"$warden" run "$work/one.py" >/dev/null   # the one-time cgroup set-up happens outside the timing
echo "$(nproc) cores, $(uname -r), $rounds rounds, $(date -u +%F)"
python3 bench/interleave.py --rounds "$rounds" --json "$work/startup.json" \
  "python3 -c (bare)=$py -c 'print(1)'" \
  "warden run one.py=$warden run $work/one.py" \
  "bwrap python3 -c=$bwrap $py -c 'print(1)'" \
  "warden run true.sh=$warden run $work/true.sh" \
  "bwrap true=$bwrap /usr/bin/true"
python3 - "$work/startup.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
w, p, b = (s[k]["median"] for k in ("warden run one.py", "python3 -c (bare)", "bwrap python3 -c"))
print(f"\nwarden / bare python3 = {w / p:.2f} (target <= 1.5)")
print(f"warden / bwrap        = {w / b:.2f} (target <= 1.0)")
PY

# The daemon: HTTP exec latency against `warden run`, and a 32-connection load run.
# Set DAEMON_ROUNDS / LOAD_SECONDS to change; LOAD_SECONDS=0 skips the daemon part.
if [ "${LOAD_SECONDS:-60}" != 0 ]; then
  python3 bench/daemon.py "$warden" --rounds "${DAEMON_ROUNDS:-200}" --duration "${LOAD_SECONDS:-60}"
fi
