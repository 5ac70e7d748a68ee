#!/usr/bin/env bash
# Property-based REST check: schemathesis (PyPI; scripts/setup-schemathesis.sh installs it into
# its own venv) generates requests from the daemon's own /openapi.json, valid and invalid, and
# checks every answer: never a 5xx, status codes, content types and bodies as documented,
# schema-violating requests refused, created sandboxes usable and destroyed ones gone.
#
# Not checked: `positive_data_acceptance` (a schema-valid request must succeed). Some refusals
# depend on the settings or the workspace and no static schema can say them: memory or a TTL
# above the profile's maximum (422/400), an unknown profile or language (400), a file path that
# names a folder (400). The document states what a request must look like; the profile states
# what it may ask for. Nor `ensure_resource_availability` (a 404 right after a create means the
# created resource is missing): an execution that names a context that does not exist is 404
# `context_not_found` in a sandbox that exists, and the check cannot tell the two apart.
# `use_after_free` (a destroyed sandbox is gone) stays.
#
# Usage: scripts/schemathesis.sh [SECONDS] [EXAMPLES]   (default 90 s, 25 examples per operation)
#   WARDEN_BIN  the daemon (default $CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden)
# The daemon runs as `warden serve` with tests/rest/schemathesis-settings.toml, inside an outer
# pid namespace, on a free loopback port. Needs root (real sandboxes), as the other tests do.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-90}"
examples="${2:-25}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
warden="${WARDEN_BIN:-$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden}"
venv="${WARDEN_SCHEMATHESIS_VENV:-/var/cache/warden/venv-schemathesis}"
bash scripts/setup-schemathesis.sh >&2

work="$(mktemp -d)"
unshare --pid --fork --mount-proc --kill-child \
  "$warden" --config tests/rest/schemathesis-settings.toml serve --listen 127.0.0.1:0 \
  --max-concurrent 2 --max-queued 64 --data-dir "$work/data" 2>"$work/daemon.log" &
daemon=$!
cleanup() {
  # A graceful stop of the daemon (pid 1 of its namespace: unshare passes no signal on), so
  # it tears its sandboxes down; then the namespace goes with unshare.
  local child
  child="$(pgrep -P "$daemon" || true)"
  [ -z "$child" ] || kill -TERM $child 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

addr=""
for _ in $(seq 1 100); do
  addr="$(sed -n 's#^warden: listening on http://##p' "$work/daemon.log" | head -n1)"
  [ -n "$addr" ] && break
  kill -0 "$daemon" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "schemathesis: the daemon did not start:" >&2
  cat "$work/daemon.log" >&2
  exit 1
fi

set +e
# Run from the scratch folder: schemathesis keeps its example database in the working directory.
(cd "$work" && "$venv/bin/st" run "http://$addr/openapi.json" \
  --checks all --exclude-checks positive_data_acceptance,ensure_resource_availability \
  --max-examples "$examples" --max-time "$seconds" --seed "${ST_SEED:-20261129}" \
  --request-timeout 30 --workers 2 --no-color --warnings off \
  --suppress-health-check all >"$work/st.log" 2>&1)
rc=$?
set -e
# The summary, then the failures in full when there are any.
sed -n '/^=* SUMMARY =*$/,$p' "$work/st.log"
if [ "$rc" -ne 0 ]; then
  # Failures (a check that did not hold) and errors (a request that got no answer: a
  # timeout, a reset connection) are reported in sections of their own.
  sed -n '/^=* \(FAILURES\|ERRORS\) =*$/,/^=* SUMMARY =*$/p' "$work/st.log" | head -n 300
  # The daemon's own account of what failed (a 500 says only "see the server's log"); the
  # scratch folder goes with the cleanup.
  echo "schemathesis: the daemon's log, its last error lines:" >&2
  grep -E '^warden( serve)?:' "$work/daemon.log" | grep -v 'listening on' | tail -n 60 >&2 || true
fi
if grep -q 'panicked' "$work/daemon.log"; then
  echo "schemathesis: the daemon panicked:" >&2
  grep -A5 'panicked' "$work/daemon.log" >&2
  rc=1
fi
if ! kill -0 "$daemon" 2>/dev/null; then
  echo "schemathesis: the daemon died during the run" >&2
  tail -n 20 "$work/daemon.log" >&2
  rc=1
fi
exit "$rc"
