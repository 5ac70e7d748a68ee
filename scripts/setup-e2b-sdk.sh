#!/usr/bin/env bash
# Installs the official E2B SDKs (`e2b-code-interpreter`, which pulls `e2b`) from PyPI into a
# venv, with pytest and pytest-asyncio, for the E2B drop-in's tests (tests/e2b, run by
# scripts/test.sh) and its benchmark (bench/e2b_create_run.py). Idempotent: a venv that already
# has the pinned version is left as it is. The venv's path can be changed with WARDEN_E2B_VENV.
set -euo pipefail

venv="${WARDEN_E2B_VENV:-/var/cache/warden/venv-e2b}"
# The pinned SDK whose protocol the drop-in implements (docs/api.md, "Using the E2B SDK").
spec=(e2b-code-interpreter==2.11.0 e2b==2.63.0 'pytest>=8,<9' 'pytest-asyncio>=0.23,<2')

check='import importlib.metadata as m, sys; sys.exit(0 if m.version("e2b-code-interpreter") == "2.11.0" and m.version("e2b") == "2.63.0" else 1)'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null && "$venv/bin/python" -c "import pytest, pytest_asyncio, e2b_code_interpreter" 2>/dev/null; then
  exit 0
fi
if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-e2b-sdk: python3-venv is missing; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-venv
fi
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${spec[@]}"
"$venv/bin/python" -c "$check"; "$venv/bin/python" -c "import pytest, pytest_asyncio, e2b_code_interpreter"
echo "setup-e2b-sdk: the E2B SDK is in $venv"
