#!/usr/bin/env bash
# Installs what the Go SDK's tests (sdk/go) need, idempotently: Debian's golang-go (Go 1.19 on
# Debian 12; the SDK uses the standard library only, so no module download is needed). Called by
# scripts/test.sh, not by scripts/setup.sh: running Warden (scripts/warden) does not need Go.
set -euo pipefail

if dpkg-query -W -f='${Status}' golang-go 2>/dev/null | grep -q "install ok installed"; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-go-sdk: golang-go is missing; run this script as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends golang-go >/dev/null 2>&1 ||
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends golang-go; }
