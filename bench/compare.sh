#!/usr/bin/env bash
# Two builds of warden side by side in one run (e.g. the commit before a change and after):
# start-up interleaved round by round (`warden run` of `print(1)` and of `true.sh`, with bare
# python3 and bwrap beside them as the fixed points), then the daemon's HTTP latency and load
# (bench/daemon.py) for each build, alternated A B A B so that drift hits both alike.
# Usage: bench/compare.sh BASE_WARDEN NEW_WARDEN [ROUNDS] [LOAD_SECONDS]. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
base="$1"; new="$2"; rounds="${3:-300}"; load="${4:-15}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo 'print(1)' > "$work/one.py"
echo 'true' > "$work/true.sh"
py=/usr/bin/python3
bwrap="bwrap --unshare-all --ro-bind / / --tmpfs /tmp --proc /proc --dev /dev"
"$base" run "$work/one.py" >/dev/null
"$new" run "$work/one.py" >/dev/null
echo "$(nproc) cores, $(uname -r), $rounds rounds, $(date -u +%F)"
python3 bench/interleave.py --rounds "$rounds" --gap-ms 25 \
  "python3 -c (bare)=$py -c 'print(1)'" \
  "base run one.py=$base run $work/one.py" \
  "new run one.py=$new run $work/one.py" \
  "bwrap python3 -c=$bwrap $py -c 'print(1)'" \
  "base run true.sh=$base run $work/true.sh" \
  "new run true.sh=$new run $work/true.sh"
for pass in 1 2; do
  for which in base new; do
    bin="$base"; [ "$which" = new ] && bin="$new"
    echo "== daemon, $which, pass $pass"
    python3 bench/daemon.py "$bin" --rounds "${DAEMON_ROUNDS:-150}" --duration "$load"
  done
done
