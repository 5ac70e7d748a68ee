#!/usr/bin/env bash
# Installs schemathesis (from PyPI) into its own venv, idempotently: the property-based REST
# check of the daemon against its own /openapi.json (scripts/schemathesis.sh). A venv of its
# own (WARDEN_SCHEMATHESIS_VENV, default /var/cache/warden/venv-schemathesis) so its pins never
# touch the Python SDK's test venv. A venv that already has the wanted version is left as it is.
set -euo pipefail

venv="${WARDEN_SCHEMATHESIS_VENV:-/var/cache/warden/venv-schemathesis}"
# The 4.x CLI (`st run URL --max-examples … --checks …`).
version='4.32.5'

if [ -x "$venv/bin/st" ] && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null)" = "$version" ]; then
  exit 0
fi
if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-schemathesis: python3-venv is missing; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-venv
fi
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$version"
"$venv/bin/st" --version
echo "setup-schemathesis: schemathesis $version is in $venv"
