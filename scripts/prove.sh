#!/usr/bin/env bash
# Proving the boundary, all of it from one script (docs/threat-model.md), bounded in time:
#   the fast part (also run by scripts/test.sh, i.e. CI):
#   1. the attack suite, bad input and fault tests (scripts/adversarial.sh);
#   2. schemathesis against /openapi.json for SCHEMATHESIS_SECONDS (default 60);
#   the long part, on demand (skipped with PROVE_LONG=0):
#   3. every fuzz target for FUZZ_SECONDS each (scripts/fuzz.sh; default 300 s a target);
#   4. the soak (scripts/soak.sh): SOAK_TOTAL executions (default 10 000) at 32 clients mixed
#      with attack programs, stopped after SOAK_MAX_SECONDS (default 1800 s).
# Needs root. Exits non-zero when any part failed; every part always runs.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
echo "== attacks, bad input, faults"
bash scripts/adversarial.sh || status=1
echo
echo "== schemathesis: ${SCHEMATHESIS_SECONDS:-60} s"
cargo build --locked --quiet -p warden && bash scripts/schemathesis.sh "${SCHEMATHESIS_SECONDS:-60}" || status=1
echo
if [ "${PROVE_LONG:-1}" = 0 ]; then
  [ "$status" -eq 0 ] && echo "prove (fast part): ok" || echo "prove (fast part): FAILED" >&2
  exit "$status"
fi
echo "== fuzz: ${FUZZ_SECONDS:-300} s per target"
bash scripts/fuzz.sh "${FUZZ_SECONDS:-300}" || status=1
echo
echo "== soak: ${SOAK_TOTAL:-10000} executions, at most ${SOAK_MAX_SECONDS:-1800} s"
bash scripts/soak.sh "${SOAK_TOTAL:-10000}" 32 "${SOAK_MAX_SECONDS:-1800}" || status=1
echo
[ "$status" -eq 0 ] && echo "prove: ok" || echo "prove: FAILED" >&2
exit "$status"
