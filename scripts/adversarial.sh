#!/usr/bin/env bash
# The fast adversarial part of issue 6 (docs/threat-model.md, "How this is tested"): the attack
# suite against every backend present, bad input at the REST API (in process and against a
# real daemon), and the fault tests (a killed helper, the Docker engine going away, a full
# workspace, a kill -9 of the daemon). They are ordinary cargo tests, so scripts/test.sh (CI)
# runs them too; this runs only them. Each attack prints `held:`, `gap:` (a declared gap of that
# backend) or `unavailable:` (a backend not on this host); a failure lists every attack that got
# through. Real sandboxes need root; the long part (fuzzing, the soak) is not here.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
cargo test --locked -p warden-server --test bad_input
cargo test --locked -p warden --test attacks --test faults --test bad_input
cargo test --locked -p warden --test serve -- after_a_kill_9
