#!/usr/bin/env bash
# Installs what Warden's tests and benchmarks need, idempotently. Safe to run again.
set -euo pipefail

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# bubblewrap and hyperfine: the speed benchmark's baselines; wrk: the daemon's load generator; util-linux: unshare for the outer pid
# namespace that attack tests run in; nodejs: the javascript runtime; python-is-python3: the
# source document's settings name the interpreter `python`; numpy, pandas, matplotlib: the
# data_science profile's runtime (the jail binds the host's /usr).
for pkg in bubblewrap hyperfine wrk util-linux nodejs python3 python-is-python3 bash \
  python3-numpy python3-pandas python3-matplotlib; do
  have "$pkg" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages ${need[*]}; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# The Python SDK's venv (pytest, langchain-core, openai) for its tests.
bash "$(dirname "$0")/setup-python-sdk.sh"
