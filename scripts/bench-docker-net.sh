#!/usr/bin/env bash
# Extra start-up of a networked sandbox on the docker backend (issue 9, docker part): a one-shot
# `print(1)` through `warden run` with the docker backend, in an offline profile and in a
# networked one (network mode `none` plus Warden's keeper, veth pair, firewall and resolver),
# interleaved round by round (bench/interleave.py). Run by scripts/bench.sh (its last block);
# alone: scripts/bench-docker-net.sh [ROUNDS] (default 60). Needs root, docker, nft, ip.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-60}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/warden"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo 'print(1)' > "$work/one.py"
cat > "$work/docker-net.toml" <<'TOML'
[sandbox]
backend = "docker"
default_profile = "offline"
[sandbox.jail.network]
upstream_dns = "127.0.0.1:53"
[sandbox.profiles.offline]
enabled_policies = []
runtime = { image = "warden-python:3.11" }
[sandbox.profiles.networked]
network_enabled = true
enabled_policies = []
runtime = { image = "warden-python:3.11" }
TOML
"$warden" --config "$work/docker-net.toml" run --profile networked "$work/one.py" >/dev/null
echo "docker backend, offline vs networked one-shot: $(nproc) cores, $rounds rounds, $(date -u +%F)"
python3 bench/interleave.py --rounds "$rounds" --json "$work/docker-net.json" \
  "docker offline one.py=$warden --config $work/docker-net.toml run $work/one.py" \
  "docker networked one.py=$warden --config $work/docker-net.toml run --profile networked $work/one.py"
python3 - "$work/docker-net.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
extra = s["docker networked one.py"]["median"] - s["docker offline one.py"]["median"]
print(f"\ndocker networked - offline = {extra:.1f} ms (medians)")
PY
