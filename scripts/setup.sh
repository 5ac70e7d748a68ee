#!/usr/bin/env bash
# Installs what Warden needs to run (`scripts/warden`), idempotently: the jail's runtimes for
# the built-in profiles and nothing else. What the tests and benchmarks need besides (Docker
# images, gVisor, venvs, networking tools, a browser) is installed by scripts/setup-tests.sh
# and the scripts of the features that use it; `warden doctor` names, for each missing
# optional part, the one command that installs it. Safe to run again.
set -euo pipefail

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# python3 and python-is-python3: the python runtime (the source document's settings name the
# interpreter `python`); nodejs: the javascript runtime; bash: the bash runtime; numpy, pandas,
# matplotlib: the data_science profile's runtime (the jail binds the host's /usr); e2fsprogs:
# mkfs.ext4, for the workspace images of durable sandboxes (the standard profile's).
for pkg in python3 python-is-python3 nodejs bash python3-numpy python3-pandas python3-matplotlib e2fsprogs; do
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
