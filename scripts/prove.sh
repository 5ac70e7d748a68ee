#!/usr/bin/env bash
# The long part of proving the boundary, on demand and bounded in time (docs/threat-model.md):
#   1. every fuzz target for FUZZ_SECONDS each (scripts/fuzz.sh; default 300 s a target);
#   2. the soak (scripts/soak.sh): SOAK_TOTAL executions (default 10 000) at 32 clients mixed
#      with attack programs, stopped after SOAK_MAX_SECONDS (default 1800 s).
# The fast part (attacks, bad input, the fuzz regression corpus, schemathesis) runs in
# scripts/test.sh. Needs root. Exits non-zero when either part failed; both always run.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
echo "== fuzz: ${FUZZ_SECONDS:-300} s per target"
bash scripts/fuzz.sh "${FUZZ_SECONDS:-300}" || status=1
echo
echo "== soak: ${SOAK_TOTAL:-10000} executions, at most ${SOAK_MAX_SECONDS:-1800} s"
bash scripts/soak.sh "${SOAK_TOTAL:-10000}" 32 "${SOAK_MAX_SECONDS:-1800}" || status=1
echo
[ "$status" -eq 0 ] && echo "prove: ok" || echo "prove: FAILED" >&2
exit "$status"
