#!/usr/bin/env bash
# The egress gateway's cost on a request and on a download (issue 21): sandboxes reach a test
# host in a network namespace of this machine (203.0.113.50, HTTP and HTTPS with its own CA)
# directly (controlled egress by address), through the gateway (TLS passed through), and with
# a brokered secret (TLS ended and re-encrypted); bench/gateway.py interleaves the three.
# Usage: scripts/bench-gateway.sh [ROUNDS] [REQUESTS] (defaults 10, 100). Needs root, nft, ip,
# openssl.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-10}"
requests="${2:-100}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/warden"
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  ip netns del wb-inet 2>/dev/null || true
  ip link del wb-inet-h 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns del wb-inet 2>/dev/null || true
ip link del wb-inet-h 2>/dev/null || true
(
  cd "$work"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
    -out ca.pem -days 2 -subj '/CN=bench CA' 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
    -out server.csr -subj '/CN=bench.test' 2>/dev/null
  printf 'subjectAltName=DNS:bench.test\n' > san.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
    -days 2 -extfile san.ext 2>/dev/null
  echo "bench-secret-value" > api-key
)
ip netns add wb-inet
ip link add wb-inet-h type veth peer name eth0 netns wb-inet
ip addr add 203.0.113.49/28 dev wb-inet-h && ip link set wb-inet-h up
ip -n wb-inet link set lo up && ip -n wb-inet link set eth0 up
ip -n wb-inet addr add 203.0.113.50/28 dev eth0
ip -n wb-inet route add default via 203.0.113.49
ip netns exec wb-inet python3 crates/warden/tests/fixtures/world_server.py \
  --addr 203.0.113.50 --log "$work/server.log" --dns bench.test=203.0.113.50 \
  --tls "$work/server.pem,$work/server.key" --big-bytes 100000000 >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do grep -q ready "$work/server.log" 2>/dev/null && break; sleep 0.1; done
net='network_enabled = true
enabled_policies = []
timeout_seconds = 120'
cat > "$work/settings.toml" <<TOML
[sandbox]
default_profile = "direct"
[sandbox.jail.network]
upstream_dns = "203.0.113.50:53"
upstream_ca_file = "$work/ca.pem"
[sandbox.secrets.api_key]
from_file = "$work/api-key"
hosts = ["bench.test"]
header = "Authorization"
[sandbox.profiles.direct]
$net
[sandbox.profiles.direct.egress]
allow_domains = ["bench.test"]
[sandbox.profiles.gateway]
$net
[sandbox.profiles.gateway.egress.gateway]
allow = ["bench.test"]
[sandbox.profiles.brokered]
$net
[sandbox.profiles.brokered.egress]
secrets = ["api_key"]
[sandbox.profiles.brokered.egress.gateway]
allow = ["bench.test"]
TOML
echo "egress gateway vs direct: $(nproc) cores, $(uname -r), $(date -u +%F)"
python3 bench/gateway.py "$warden" "$work/settings.toml" "$rounds" "$requests" "$work/ca.pem"
