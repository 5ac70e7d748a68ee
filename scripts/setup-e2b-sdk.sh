#!/usr/bin/env bash
# Installs the official E2B SDKs (`e2b-code-interpreter`, which pulls `e2b`) from PyPI into a
# venv, with pytest and pytest-asyncio, for the E2B drop-in's tests (tests/e2b, run by
# scripts/test.sh) and its benchmark (bench/e2b_create_run.py). Idempotent: a venv that already
# has the pinned version is left as it is. The venv's path can be changed with WARDEN_E2B_VENV.
set -euo pipefail

venv="${WARDEN_E2B_VENV:-/var/cache/warden/venv-e2b}"
# The pinned SDK whose protocol the drop-in implements (docs/api.md, "Using the E2B SDK").
spec=(e2b-code-interpreter==2.11.0 e2b==2.63.0 'pytest>=8,<9' 'pytest-asyncio>=0.23,<2')
check='import importlib.metadata as m, sys; import pytest, pytest_asyncio, e2b_code_interpreter
sys.exit(0 if m.version("e2b-code-interpreter") == "2.11.0" and m.version("e2b") == "2.63.0" else 1)'

. "$(dirname "$0")/lib/venv.sh"
ensure_venv setup-e2b-sdk "$venv" "$check" "${spec[@]}"
