#!/usr/bin/env bash
# Start-up benchmark of the native jail, side by side in one hyperfine run:
#   warden run of a one-line Python program  vs  bare python3 -c  vs  bubblewrap.
# Also the sandbox's own overhead: `warden run` of an empty bash script vs `bwrap … true`.
# Usage: scripts/bench.sh [RUNS]   (default 100). Needs root; prints markdown tables and writes
# them to $CARGO_TARGET_DIR/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-100}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
bash scripts/setup.sh >&2
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/release/warden"
out="$CARGO_TARGET_DIR/bench"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo 'print(1)' > "$work/one.py"
echo 'true' > "$work/empty.sh"
py=/usr/bin/python3
bwrap_args="--unshare-all --ro-bind / / --tmpfs /tmp --proc /proc --dev /dev"

# Warm the page cache and the one-time cgroup set-up before timing.
"$warden" run "$work/one.py" >/dev/null

hyperfine -N --warmup 10 --runs "$runs" --export-markdown "$out/python.md" --export-json "$out/python.json" \
  -n "warden run (jail)" "$warden run $work/one.py" \
  -n "python3 -c (bare)" "$py -c 'print(1)'" \
  -n "bwrap python3 -c" "bwrap $bwrap_args $py -c 'print(1)'"

hyperfine -N --warmup 10 --runs "$runs" --export-markdown "$out/overhead.md" --export-json "$out/overhead.json" \
  -n "warden run (jail) of true" "$warden run $work/empty.sh" \
  -n "bwrap true" "bwrap $bwrap_args /usr/bin/true"

python3 - "$out/python.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
w, p, b = (r[k]["median"] * 1000 for k in ("warden run (jail)", "python3 -c (bare)", "bwrap python3 -c"))
print(f"\nmedians: warden {w:.1f} ms, bare python3 {p:.1f} ms, bwrap {b:.1f} ms")
print(f"warden / bare python3 = {w / p:.2f} (target <= 1.5)")
print(f"warden / bwrap        = {w / b:.2f} (target <= 1.0)")
PY
