#!/usr/bin/env bash
# Installs the official MCP Python client (the `mcp` package from PyPI) into a venv that the MCP
# integration tests (crates/warden/tests/mcp.rs) run their client script with. Idempotent: a
# venv that already imports `mcp` is left as it is. The venv's path can be changed with
# WARDEN_MCP_VENV (the tests read the same variable).
set -euo pipefail

venv="${WARDEN_MCP_VENV:-/var/cache/warden/venv-mcp}"
# The client script uses the 2.x API (`mcp.Client`).
check='from mcp import Client; from mcp.client.stdio import StdioServerParameters'

. "$(dirname "$0")/lib/venv.sh"
ensure_venv setup-mcp-client "$venv" "$check" 'mcp>=2.3,<3'
