#!/usr/bin/env bash
# Installs what the playground's browser tests (tests/playground) and its screenshot script
# need, idempotently: Debian's chromium (run headless) and a venv with Playwright for Python
# and pytest from PyPI (WARDEN_PLAYWRIGHT_VENV, default /var/cache/warden/venv-playwright).
# Playwright drives the system's /usr/bin/chromium: no browser download (`playwright install`
# is never run). Called by scripts/test.sh, not by scripts/setup.sh: running Warden does not
# need a browser.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${WARDEN_PLAYWRIGHT_VENV:-/var/cache/warden/venv-playwright}"
spec=(playwright 'pytest>=7')

need=()
for pkg in chromium python3-venv; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-playground-tests: missing Debian packages ${need[*]}; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; }
fi

check='import playwright.sync_api, pytest'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  exit 0
fi
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${spec[@]}"
"$venv/bin/python" -c "$check"
echo "setup-playground-tests: playwright and pytest are in $venv" >&2
