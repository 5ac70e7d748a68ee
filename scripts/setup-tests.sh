#!/usr/bin/env bash
# Installs everything the tests and benchmarks need, idempotently: what Warden needs to run
# (scripts/setup.sh), then the benchmarks' baselines, the networking tools, the Python SDK's,
# the MCP client's and the E2B SDKs' venvs, the docker backend's images and gVisor. Called by scripts/test.sh
# and the benchmark scripts; `scripts/warden` only runs scripts/setup.sh. Safe to run again.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/setup.sh"

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# bubblewrap and hyperfine: the speed benchmark's baselines; wrk: the daemon's load generator;
# util-linux: unshare for the outer pid namespace that attack tests run in, and unshare and
# setpriv for the attacks' positive controls (crates/warden/tests/fixtures/weak_sandbox.sh);
# curl, openssl, python3-requests, python3-pip and nodejs: the real clients (curl, requests,
# pip download, Node's fetch) and the test CA of the egress gateway's tests
# (crates/warden/tests/jail_gateway.rs).
for pkg in bubblewrap hyperfine wrk util-linux curl openssl python3-requests python3-pip nodejs; do
  have "$pkg" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-tests: missing Debian packages ${need[*]}; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# The Python SDK's venv (pytest, langchain-core, openai) for its tests.
bash "$here/setup-python-sdk.sh"
# Networked sandboxes (network_enabled = true): nftables, iproute2, forwarding.
bash "$here/setup-net.sh"
bash "$here/setup-docker-images.sh"
bash "$here/setup-gvisor.sh"
# The official MCP Python client, for the MCP integration tests (crates/warden/tests/mcp.rs).
bash "$here/setup-mcp-client.sh"
# The official E2B SDKs (pinned), for the E2B drop-in's suite (tests/e2b) and benchmark.
bash "$here/setup-e2b-sdk.sh"
