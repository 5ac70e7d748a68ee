#!/usr/bin/env bash
# The whole test suite: installs what the tests need (idempotent), then checks formatting and
# lints, then runs every test. Tests that build real sandboxes need root (CI runs as root).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
bash scripts/setup-tests.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The Python SDK's suite, against the daemon binary the tests above just built.
WARDEN_BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden" "${WARDEN_VENV:-/var/cache/warden/venv}/bin/python" -m pytest -q -p no:cacheprovider python/tests
# The Go SDK's suite (sdk/go), against the same binary: go vet, then go test (standard library
# only: no module download; its caches under /var/cache/warden/go).
bash scripts/setup-go-sdk.sh
(
  cd sdk/go
  export GOCACHE="${GOCACHE:-/var/cache/warden/go/cache}" GOPATH="${GOPATH:-/var/cache/warden/go/path}" GOPROXY=off GOFLAGS=
  go vet ./...
  WARDEN_BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden" go test -count=1 ./...
)
# The REST API against its own /openapi.json: schemathesis, bounded to 60 s (scripts/schemathesis.sh).
WARDEN_BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden" bash scripts/schemathesis.sh 60
# The playground page in a real browser: Debian's chromium, headless, driven by Playwright for
# Python (scripts/setup-playground-tests.sh installs both), against the same binary.
bash scripts/setup-playground-tests.sh
WARDEN_BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden" "${WARDEN_PLAYWRIGHT_VENV:-/var/cache/warden/venv-playwright}/bin/python" -m pytest -q -p no:cacheprovider tests/playground
