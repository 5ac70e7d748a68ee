#!/usr/bin/env bash
# Installs schemathesis (from PyPI) into its own venv, idempotently: the property-based REST
# check of the daemon against its own /openapi.json (scripts/schemathesis.sh). A venv of its
# own (WARDEN_SCHEMATHESIS_VENV, default /var/cache/warden/venv-schemathesis) so its pins never
# touch the Python SDK's test venv. A venv that already has the wanted version is left as it is.
set -euo pipefail

venv="${WARDEN_SCHEMATHESIS_VENV:-/var/cache/warden/venv-schemathesis}"
# The 4.x CLI (`st run URL --max-examples … --checks …`).
version='4.32.5'
check="import importlib.metadata as m, os, sys; sys.exit(0 if m.version('schemathesis') == '$version' and os.access(sys.prefix + '/bin/st', os.X_OK) else 1)"

. "$(dirname "$0")/lib/venv.sh"
ensure_venv setup-schemathesis "$venv" "$check" "schemathesis==$version"
