#!/usr/bin/env bash
# Runs each cargo-fuzz target (fuzz/) for a bounded time: the settings parser (`settings`), the
# policy analyser (`forbidden_imports`), the REST request decoding (`rest`) and the E2B drop-in's
# decoders (`e2b`: Connect envelopes, multipart bodies, percent-decoding). Installs
# cargo-fuzz first (scripts/setup-fuzz.sh, idempotent). The stable toolchain takes cargo fuzz's
# nightly flags with RUSTC_BOOTSTRAP=1.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default: 60 s, every target)
#   FUZZ_SANITIZER  none (default: the code under test is safe Rust; faster) or address
#   FUZZ_WORK_DIR   the growing working corpus, kept between runs (default
#                   /var/cache/warden/fuzz-work); the checked-in fuzz/corpus/TARGET/ is only
#                   read: it is the small regression corpus that `cargo test` replays
#   FUZZ_TARGET_DIR the build directory (default /var/cache/warden/target-cargo-fuzz)
# Exits 1 when a target crashed (or hung past 10 s on one input); the input is in
# fuzz/artifacts/TARGET/. After fixing the bug, copy it into fuzz/corpus/TARGET/ under a name
# that says what it found, so the ordinary tests keep replaying it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(settings forbidden_imports rest e2b)

bash scripts/setup-fuzz.sh
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-/var/cache/warden/target-cargo-fuzz}"
sanitizer="${FUZZ_SANITIZER:-none}"
work="${FUZZ_WORK_DIR:-/var/cache/warden/fuzz-work}"
cd fuzz
cargo fuzz build --sanitizer "$sanitizer"

failed=()
echo "fuzzing ${targets[*]}: ${seconds} s each, sanitizer $sanitizer, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for target in "${targets[@]}"; do
  mkdir -p "$work/$target"
  log="$work/$target.log"
  set +e
  cargo fuzz run --sanitizer "$sanitizer" "$target" "$work/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)"
  took="$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n1)"
  units="$(find "$work/$target" -type f | wc -l)"
  if [ "$rc" -eq 0 ]; then
    rate=$(( ${runs:-0} / ${took:-$seconds} ))
    [ "${took:-0}" -gt 0 ] || rate=$(( ${runs:-0} / seconds ))
    echo "$target: ok, ${runs:-?} runs in ${took:-$seconds} s (${rate} exec/s), working corpus $units inputs"
  else
    echo "$target: FAILED (exit $rc); the end of $log:"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -n 20
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]}; the inputs are in fuzz/artifacts/" >&2
  exit 1
fi
