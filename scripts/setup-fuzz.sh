#!/usr/bin/env bash
# Installs what the fuzz targets (fuzz/) need, idempotently: cargo-fuzz from crates.io, built
# with the stable toolchain. cargo fuzz itself asks for nightly-only flags (-Zsanitizer); the
# callers set RUSTC_BOOTSTRAP=1 so the stable compiler accepts them (see scripts/fuzz.sh).
# libFuzzer is compiled from source by the libfuzzer-sys crate (needs a C++ compiler).
set -euo pipefail
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
if ! command -v c++ >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-fuzz: a C++ compiler (g++) is missing; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends g++
fi
