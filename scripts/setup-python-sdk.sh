#!/usr/bin/env bash
# Installs the Python SDK's test environment, idempotently: a venv outside the clone
# (WARDEN_VENV, default /var/cache/warden/venv) with the SDK from this clone installed editable,
# plus pytest, pytest-asyncio and langchain-core (from PyPI) for its tests. Safe to run again:
# it reinstalls only when python/pyproject.toml or the clone's location changed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${WARDEN_VENV:-/var/cache/warden/venv}"
sdk="$(pwd)/python"

if ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-python-sdk: python3-venv is missing; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-venv
fi

if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
fi

stamp="$venv/.warden-sdk-stamp"
want="$(cat "$sdk/pyproject.toml" | sha256sum | cut -d' ' -f1) $sdk"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet -e "$sdk[test]" httpx pydantic
  echo "$want" > "$stamp"
fi
