#!/usr/bin/env bash
# Cost of the import guard (the forbidden_imports allow-list enforced by the interpreter at run
# time, issue 23): `warden run` of `print(1)` and of `import pandas` in a profile with the guard
# and in the same profile with `runtime_import_check = false`, interleaved round by round
# (bench/interleave.py); and the interpreter alone, bare `python3` vs `python3` started with the
# guard as the jail delivers it (no sandbox: the guard's own cost, without the jail's start-up
# noise).
# Usage: scripts/bench-import-guard.sh [ROUNDS] (default 60). Needs root (the jail).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-60}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/warden"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo 'print(1)' > "$work/one.py"
echo 'import pandas' > "$work/import_pandas.py"
# Both profiles check imports before the run; only `guarded` also checks them at run time.
allowed='["json", "math", "numpy", "pandas"]'
cat > "$work/settings.toml" <<TOML
[sandbox]
default_profile = "guarded"
[sandbox.profiles.guarded]
timeout_seconds = 60
max_memory_mb = 512
max_pids = 128
enabled_policies = ["forbidden_imports"]
[sandbox.profiles.guarded.policies.forbidden_imports]
allowed_modules = $allowed
[sandbox.profiles.unguarded]
timeout_seconds = 60
max_memory_mb = 512
max_pids = 128
enabled_policies = ["forbidden_imports"]
runtime_import_check = false
[sandbox.profiles.unguarded.policies.forbidden_imports]
allowed_modules = $allowed
TOML
run="$warden --config $work/settings.toml run"
# The guard outside any sandbox: the file and environment the jail gives the interpreter (its
# user site-packages, `import_guard::Delivery::UserSite`).
py=/usr/bin/python3
site="$work/guard/lib/python$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages"
mkdir -p "$site"
cp crates/warden-engine/src/import_guard/guard.py "$site/usercustomize.py"
guarded_py="env PYTHONUSERBASE=$work/guard WARDEN_IMPORT_ALLOW=json,math,numpy,pandas $py"
for p in guarded unguarded; do $run -p "$p" "$work/import_pandas.py" >/dev/null; done   # warm caches
echo "$(nproc) cores, $(uname -r), $rounds rounds, $(date -u +%F), $($py --version)"
# The interpreter alone, both through `sh -c` (descriptor 3 is the guard's report channel,
# here /dev/null; the same redirection for both).
python3 bench/interleave.py --rounds "$rounds" --gap-ms 25 \
  "python3 print(1)=sh -c '$py $work/one.py 3>/dev/null'" \
  "python3 + guard print(1)=sh -c '$guarded_py $work/one.py 3>/dev/null'" \
  "python3 import pandas=sh -c '$py $work/import_pandas.py 3>/dev/null'" \
  "python3 + guard import pandas=sh -c '$guarded_py $work/import_pandas.py 3>/dev/null'"
echo
python3 bench/interleave.py --rounds "$rounds" --gap-ms 25 \
  "warden run print(1), no guard=$run -p unguarded $work/one.py" \
  "warden run print(1), guard=$run -p guarded $work/one.py" \
  "warden run import pandas, no guard=$run -p unguarded $work/import_pandas.py" \
  "warden run import pandas, guard=$run -p guarded $work/import_pandas.py"
