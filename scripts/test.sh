#!/usr/bin/env bash
# The whole test suite: installs what the tests need (idempotent), then checks formatting and
# lints, then runs every test, and ends with a summary (also when a step fails): the tests
# run (passed, failed, ignored, from cargo's own `test result:` lines, and pytest's), the
# ignored ones with cargo's reason, and the skipped ones with theirs.
#
# A test that cannot run here for want of root, the Docker engine, runsc, an interpreter or a
# package that scripts/setup.sh installs is skipped and recorded in $WARDEN_SKIP_LOG
# (tests/support/prerequisite.rs); with CI=true (as .ci/run sets it) it fails instead.
# Tests that need what no setup provides (a live cluster) are `#[ignore]`d.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
export WARDEN_SKIP_LOG="${WARDEN_SKIP_LOG:-$CARGO_TARGET_DIR/warden-skipped.log}"
mkdir -p "$(dirname "$WARDEN_SKIP_LOG")"
: >"$WARDEN_SKIP_LOG"
outputs="$(mktemp -d)"
summary() {
  local status=$?
  echo
  echo "== test summary${CI:+ (CI=$CI: a missing prerequisite fails)} =="
  awk '
    /^test result:/ {
      for (i = 1; i < NF; i++) {
        if ($(i + 1) ~ /^passed/) p += $i
        if ($(i + 1) ~ /^failed/) f += $i
        if ($(i + 1) ~ /^ignored/) g += $i
      }
    }
    END { printf "cargo: %d passed, %d failed, %d ignored\n", p, f, g }' "$outputs"/cargo.log 2>/dev/null  || true
  grep -h -E '^test .* \.\.\. ignored' "$outputs"/cargo.log 2>/dev/null |
    sed -E 's/^test (.*) \.\.\. ignored(, )?/  ignored: \1: /' | sort -u || true
  if [ -s "$outputs"/pytest.log ]; then
    echo "python SDK: $(tail -n 1 "$outputs"/pytest.log)"
  fi
  if [ -s "$outputs"/pytest-e2b.log ]; then
    echo "E2B SDK: $(tail -n 1 "$outputs"/pytest-e2b.log)"
  fi
  local skipped
  skipped="$(sort -u "$WARDEN_SKIP_LOG" 2>/dev/null | grep -c '^SKIPPED:' || true)"
  echo "skipped for a missing prerequisite: $skipped (listed in $WARDEN_SKIP_LOG)"
  sort -u "$WARDEN_SKIP_LOG" 2>/dev/null | sed 's/^SKIPPED: /  skipped: /' || true
  [ "$status" -eq 0 ] && echo "result: ok" || echo "result: FAILED (exit $status)"
  rm -rf "$outputs"
  return "$status"
}
trap summary EXIT
bash scripts/setup-tests.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked 2>&1 | tee "$outputs"/cargo.log
# The Python SDK's suite, against the daemon binary the tests above just built (-rs: pytest
# lists its skips with their reasons).
WARDEN_BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden" "${WARDEN_VENV:-/var/cache/warden/venv}/bin/python" -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | tee "$outputs"/pytest.log
# The E2B drop-in, driven by the official E2B SDKs (sync and async, pinned versions installed by
# scripts/setup-e2b-sdk.sh from scripts/setup-tests.sh) against the same binary.
WARDEN_BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden" "${WARDEN_E2B_VENV:-/var/cache/warden/venv-e2b}/bin/python" -m pytest -q -rs -p no:cacheprovider tests/e2b 2>&1 | tee "$outputs"/pytest-e2b.log
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
