#!/usr/bin/env bash
# Installs the official MCP Python client (the `mcp` package from PyPI) into a venv that the MCP
# integration tests (crates/warden/tests/mcp.rs) run their client script with. Idempotent: a
# venv that already imports `mcp` is left as it is. The venv's path can be changed with
# WARDEN_MCP_VENV (the tests read the same variable).
set -euo pipefail

venv="${WARDEN_MCP_VENV:-/var/cache/warden/venv-mcp}"
# The client script uses the 2.x API (`mcp.Client`).
spec='mcp>=2.3,<3'

check='from mcp import Client; from mcp.client.stdio import StdioServerParameters'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  exit 0
fi
if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-mcp-client: python3-venv is missing; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-venv
fi
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec"
"$venv/bin/python" -c "$check"
echo "setup-mcp-client: the mcp client is in $venv"
