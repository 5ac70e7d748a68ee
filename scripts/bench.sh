#!/usr/bin/env bash
# Start-up benchmark of the native jail, side by side in one run:
#   `warden run` of a one-line Python program  vs  bare `python3 -c` of the same line
#   vs  `bwrap --unshare-all --ro-bind / / --tmpfs /tmp --proc /proc --dev /dev python3 -c …`,
#   and bwrap with a root of /usr alone and with `warden run`'s own root (the same binds);
# and the sandbox's own overhead: `warden run` of a script that runs `true` vs `bwrap … true`
# and vs `bwrap … bash true.sh` (the same bash start-up that `warden run true.sh` pays).
# The commands are interleaved round by round (bench/interleave.py), so drift in a shared
# machine's speed hits them alike. Beside them, `unshare` of the seven namespaces a sandbox gets:
# the kernel's share, the floor of any sandbox built from namespaces; and the least sandbox with the
# isolation issue 24 asks for (bench/least_sandbox.c: those namespaces, a root of its own, cgroup
# leaves with limits, nothing else), the floor of any sandbox that isolates as Warden's. Then the interpreter's own
# CPU at its program's first line in each (bench/interp_cpu.py). Then the same commands'
# throughput in a loop by as many workers as cores (bench/loops.py), with bwrap also run inside
# the jail's own cgroup leaves, and through the same wrapper without them (the wrapper's own cost).
# Then the docker backend (issue 5), also interleaved: one-shot `print(1)` through the jail,
# through the docker backend and plain `docker run --rm --network none IMAGE python3 -c …`;
# and one execution in an existing sandbox, jail and docker backends vs plain `docker exec`
# (crates/warden/examples/sandbox_exec_bench.rs).
# Usage: scripts/bench.sh [ROUNDS] [DOCKER_ROUNDS] (defaults 200 and 100). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-200}"
docker_rounds="${2:-100}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/warden/target}"
bash scripts/setup-tests.sh >&2
cargo build --release --quiet -p warden
warden="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/warden"
# Runs a command in the jail's own cgroup leaves (or, with --no-cgroups, the same way without
# them): the throughput references below.
cargo build --release --quiet -p warden --example cgroup_wrap
cgroup_wrap="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/examples/cgroup_wrap"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
gcc -O2 -Wall -Werror -o "$work/least_sandbox" bench/least_sandbox.c
least="$work/least_sandbox"
echo 'print(1)' > "$work/one.py"
echo 'true' > "$work/true.sh"
py=/usr/bin/python3
bwrap="bwrap --unshare-all --ro-bind / / --tmpfs /tmp --proc /proc --dev /dev"
# "bwrap with minimal binds" read two more ways: the least root that runs the interpreter (/usr
# and the merged-/usr links), and the root of `warden run`'s binds (the default settings'
# host_paths, taken as the jail takes them: a link is made the same link, a path the host
# lacks is left out; the few small files the jail writes, such as /etc/passwd, are not in it).
bwrap_root() {
  local args="bwrap --unshare-all" path
  for path in "$@"; do
    if [ -L "$path" ]; then args+=" --symlink $(readlink "$path") $path"
    elif [ -e "$path" ]; then args+=" --ro-bind $path $path"; fi
  done
  echo "$args --tmpfs /tmp --proc /proc --dev /dev"
}
bwrap_usr=$(bwrap_root /usr /bin /sbin /lib /lib64)
# shellcheck disable=SC2046  # the paths are words
bwrap_same=$(bwrap_root $(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("profiles/settings.toml", "rb"))["sandbox"]["jail"]["host_paths"]))'))
# The floor of any sandbox made of namespaces: the kernel's part alone, the seven namespaces a
# sandbox gets, with no root of its own, no limits and no policies.
unshare="unshare --user --map-root-user --pid --fork --mount --net --ipc --uts --cgroup"
# bwrap alone, through the cgroup wrapper without leaves (the wrapper's own cost), in the jail's
# cgroup leaves, and the least sandbox with its control (its own start and an exec, no sandbox:
# what the daemon's forked helpers do not pay): the references of both throughput blocks below
# (NAME=COMMAND).
bwrap_references=(
  "bwrap python3 -c=$bwrap $py -c 'print(1)'"
  "bwrap through the wrapper, no cgroups=$cgroup_wrap --no-cgroups $bwrap $py -c 'print(1)'"
  "bwrap in the jail's cgroup leaves=$cgroup_wrap $bwrap $py -c 'print(1)'"
  "least sandbox python3 -c=$least $py -c 'print(1)'"
  "least sandbox's own start, no sandbox=$least --exec-only $py -c 'print(1)'"
)
"$warden" run "$work/one.py" >/dev/null   # the one-time cgroup set-up happens outside the timing
echo "$(nproc) cores, $(uname -r), $rounds rounds, $(date -u +%F)"
# --tree: each command is timed until every process it started has exited (`warden run`'s
# forked helper tears the sandbox down after the CLI exits, and that counts); --gap-ms: a pause
# after each command, so that the kernel's deferred work (a network namespace's asynchronous
# clean-up — warden's and bwrap's alike) does not land on the next command's timing.
python3 bench/interleave.py --rounds "$rounds" --gap-ms 25 --tree --json "$work/startup.json" \
  "python3 -c (bare)=$py -c 'print(1)'" \
  "warden run one.py=$warden run $work/one.py" \
  "bwrap python3 -c=$bwrap $py -c 'print(1)'" \
  "bwrap /usr only python3 -c=$bwrap_usr $py -c 'print(1)'" \
  "bwrap, warden's binds, python3 -c=$bwrap_same $py -c 'print(1)'" \
  "unshare python3 -c=$unshare $py -c 'print(1)'" \
  "least sandbox python3 -c=$least $py -c 'print(1)'" \
  "warden run true.sh=$warden run $work/true.sh" \
  "bwrap true=$bwrap /usr/bin/true" \
  "bwrap bash true.sh=$bwrap --ro-bind $work $work /bin/bash $work/true.sh"
python3 - "$work/startup.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
w, p, b = (s[k]["median"] for k in ("warden run one.py", "python3 -c (bare)", "bwrap python3 -c"))
print(f"\nwarden / bare python3 = {w / p:.2f} (target <= 1.10, issue 24)")
print(f"warden / bwrap        = {w / b:.2f} (target <= 1.0)")
for name in ("bwrap /usr only python3 -c", "bwrap, warden's binds, python3 -c"):
    print(f"warden / {name} = {w / s[name]['median']:.2f}")
u = s["unshare python3 -c"]["median"]
print(f"unshare / bare python3 = {u / p:.2f} (the namespaces alone)")
l = s["least sandbox python3 -c"]["median"]
print(f"least sandbox / bare python3 = {l / p:.2f} (namespaces, a root, limits: the floor)")
PY

# The interpreter's own CPU when its program's first line runs (bench/interp_cpu.py): what each
# sandbox adds to the interpreter itself (its environment, the import guard, seccomp, Landlock),
# apart from the set-up and teardown that other processes do; `warden run` with and without the
# default profile's import guard.
sed 's/^runtime_import_check = true /runtime_import_check = false/' profiles/settings.toml > "$work/noguard.toml"
grep -q '^runtime_import_check = false' "$work/noguard.toml"
python3 bench/interp_cpu.py --rounds "$rounds" \
  "python3 (bare)=$py {probe}" \
  "bwrap python3=$bwrap $py {probe}" \
  "warden run=$warden run {probe}" \
  "warden run, import guard off=$warden --config $work/noguard.toml run {probe}"

# Throughput floors (issue 24, point 2): the same `print(1)` in a loop by as many workers as
# cores, bare, in the namespaces alone, in bwrap, in bwrap inside the jail's own cgroup leaves
# (crates/warden/examples/cgroup_wrap.rs), through that wrapper without the leaves (its own cost:
# the limits' cost is the difference between those two), and `warden run`.
# LOOP_SECONDS=0 skips it.
if [ "${LOOP_SECONDS:-20}" != 0 ]; then
  echo
  python3 bench/loops.py --seconds "${LOOP_SECONDS:-20}" --blocks 3 \
    "bare python3 -c=$py -c 'print(1)'" \
    "unshare python3 -c=$unshare $py -c 'print(1)'" \
    "${bwrap_references[@]}" \
    "warden run one.py=$warden run $work/one.py"
fi

# The daemon: HTTP exec latency against `warden run`, and a 32-connection load run, with the
# loop rates of bwrap, of bwrap through the wrapper and of bwrap in the jail's cgroup leaves
# beside it (issue 24, point 2: what a sandbox without HTTP, policies, Landlock or seccomp does).
# Set DAEMON_ROUNDS / LOAD_SECONDS / LOAD_BLOCKS (the load and its loops in turn, that many
# times) to change; LOAD_SECONDS=0 skips the daemon part.
if [ "${LOAD_SECONDS:-60}" != 0 ]; then
  references=()
  for r in "${bwrap_references[@]}"; do references+=(--reference "$r"); done
  python3 bench/daemon.py "$warden" --rounds "${DAEMON_ROUNDS:-200}" --duration "${LOAD_SECONDS:-60}" \
    --blocks "${LOAD_BLOCKS:-1}" "${references[@]}"
fi

# Extra start-up of a networked sandbox (issue 9): the same `true.sh` in an offline profile and
# in a networked one (own veth pair, NAT, firewall, resolver), interleaved. Needs root, nft, ip.
if [ "${WARDEN_BENCH_NET:-1}" = 1 ]; then
  cat > "$work/net.toml" <<'TOML'
[sandbox]
default_profile = "offline"
[sandbox.jail.network]
upstream_dns = "127.0.0.1:53"
[sandbox.profiles.offline]
enabled_policies = []
[sandbox.profiles.networked]
network_enabled = true
enabled_policies = []
TOML
  "$warden" --config "$work/net.toml" run --profile networked "$work/true.sh" >/dev/null
  echo
  python3 bench/interleave.py --rounds "$rounds" --json "$work/net.json" \
    "offline true.sh=$warden --config $work/net.toml run $work/true.sh" \
    "networked true.sh=$warden --config $work/net.toml run --profile networked $work/true.sh"
  python3 - "$work/net.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
extra = s["networked true.sh"]["median"] - s["offline true.sh"]["median"]
print(f"\nnetworked - offline = {extra:.1f} ms (target < 20 ms)")
PY
fi
# ---- the docker backend ----
image=warden-python:3.11
cargo build --release --quiet -p warden --example sandbox_exec_bench
printf '[sandbox]\nbackend = "docker"\n' > "$work/docker.toml"
"$warden" --config "$work/docker.toml" run "$work/one.py" >/dev/null
echo
echo "docker backend: $(docker version --format 'engine {{.Server.Version}}, API {{.Server.APIVersion}}'), $docker_rounds rounds"
python3 bench/interleave.py --rounds "$docker_rounds" --json "$work/docker.json" \
  "docker run --rm=docker run --rm --network none $image python3 -c 'print(1)'" \
  "warden run one.py (docker backend)=$warden --config $work/docker.toml run $work/one.py" \
  "warden run one.py (jail)=$warden run $work/one.py"
python3 - "$work/docker.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
d, p = (s[k]["median"] for k in ("warden run one.py (docker backend)", "docker run --rm"))
print(f"\nwarden (docker backend) / docker run = {d / p:.2f} (target <= 1.2)")
PY
echo
"$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/examples/sandbox_exec_bench" "$warden" "$docker_rounds"

# Extra start-up of a networked sandbox on the docker backend (issue 9, docker part).
if [ "${WARDEN_BENCH_NET:-1}" = 1 ]; then
  echo
  bash scripts/bench-docker-net.sh "$docker_rounds"
fi
