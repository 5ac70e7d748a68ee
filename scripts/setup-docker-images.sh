#!/usr/bin/env bash
# Builds the docker backend's images locally, idempotently (no registry is reachable): each
# image is a root filesystem made of the host's own Debian packages — the runtime's packages
# and everything they depend on, file by file from `dpkg -L` — imported with `docker import`.
# An image is rebuilt only when this script or its packages' versions change (a label holds a
# hash of both), so a second run takes well under a second. Usage: scripts/setup-docker-images.sh
# Needs a running Docker Engine. Without one it says so and exits 0 — the docker tests then
# skip visibly (`SKIPPED: …` in scripts/test.sh's summary) — except under CI (CI=true, as
# .ci/run sets it), where it fails, as those tests would.
set -euo pipefail

if ! err="$(docker version --format '{{.Server.Version}}' 2>&1 >/dev/null)"; then
  case "${CI:-}" in
  "" | 0 | false)
    echo "setup-docker-images: no Docker Engine reachable; skipping the images (the docker tests will be skipped): $err" >&2
    exit 0
    ;;
  *)
    echo "setup-docker-images: no Docker Engine reachable, and CI=$CI needs one: $err" >&2
    exit 1
    ;;
  esac
fi

base=(dash bash coreutils tar grep sed findutils util-linux procps libc-bin)
# name:tag → the packages it is made of (their dependencies come along).
declare -A images=(
  ["warden-python:3.11"]="${base[*]} python3 python3.11 python-is-python3 media-types"
  ["warden-node:20"]="${base[*]} nodejs"
  ["warden-python:3.11-data-science"]="${base[*]} python3 python3.11 python-is-python3 media-types python3-numpy python3-pandas python3-matplotlib"
)

script_hash="$(sha256sum "$0" | cut -c1-16)"

closure() {
  # The packages and their Depends/Pre-Depends, as installed on this host.
  apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$@" 2>/dev/null |
    grep -v '^ ' | grep -v '^<' | sort -u |
    while read -r p; do
      dpkg-query -W -f='${Status} ${Package}\n' "$p" 2>/dev/null |
        awk '$3 == "installed" { print $4 }'
    done
}

build() {
  local name="$1"; shift
  local pkgs p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      { echo "setup-docker-images: $name needs the Debian package $p (scripts/setup.sh installs it)" >&2; exit 1; }
  done
  # The recipe: this script and the versions of the packages named (an upgrade of one of them
  # rebuilds; the dependencies' closure is only computed for a build).
  local recipe
  recipe="$(printf '%s\n%s\n' "$script_hash" "$(dpkg-query -W "$@" | sort)" | sha256sum | cut -c1-32)"
  if [ "$(docker image inspect -f '{{index .Config.Labels "warden.recipe"}}' "$name" 2>/dev/null)" = "$recipe" ]; then
    echo "setup-docker-images: $name is up to date" >&2
    return
  fi
  pkgs="$(closure "$@")"
  echo "setup-docker-images: building $name from $(echo "$pkgs" | wc -w) packages" >&2
  local root
  root="$(mktemp -d)"
  # Paths of merged-/usr systems are stored under /usr; /bin, /lib, … become the same links.
  dpkg -L $pkgs 2>/dev/null | sed -E 's#^/(bin|sbin|lib|lib64)(/|$)#/usr/\1\2#' |
    grep -v -E '^/usr/share/(doc|man|info|locale|lintian)/' | sort -u > "$root/files"
  mkdir -p "$root/fs"
  # Regular files, links and folders as they are on the host (no recursion: only listed paths).
  tar -C / --no-recursion -cf - -T <(sed 's#^/##' "$root/files" | while read -r f; do
      [ -e "/$f" ] || [ -L "/$f" ] && echo "$f"; done) 2>/dev/null | tar -C "$root/fs" -xf -
  cp -a /etc/ld.so.cache "$root/fs/etc/" 2>/dev/null || true
  for d in bin sbin lib lib64; do
    [ -d "$root/fs/usr/$d" ] && ln -sfn "usr/$d" "$root/fs/$d"
  done
  # Debian's alternatives (libblas.so.3, liblapack.so.3, …) are links that update-alternatives
  # makes and no package lists: take each one whose host choice is in the image (numpy fails to
  # import without its BLAS). /var/lib/dpkg/alternatives/NAME names the link on its second
  # line. After the merged-/usr links, so that a link under /lib lands in /usr/lib.
  local alt link chosen
  for alt in /var/lib/dpkg/alternatives/*; do
    link="$(sed -n 2p "$alt")"
    chosen="$(readlink -f "$link" 2>/dev/null)" || continue
    [ -e "$root/fs$chosen" ] || continue
    mkdir -p "$root/fs$(dirname "$link")" "$root/fs/etc/alternatives"
    cp -P "/etc/alternatives/$(basename "$alt")" "$root/fs/etc/alternatives/"
    [ -e "$root/fs$link" ] || [ -L "$root/fs$link" ] || cp -P "$link" "$root/fs$link"
  done
  mkdir -p "$root/fs"/{workspace,tmp,code,proc,sys,dev,etc}
  chmod 1777 "$root/fs/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:65534:65534:sandbox:/workspace:/bin/sh\n' > "$root/fs/etc/passwd"
  printf 'root:x:0:\nsandbox:x:65534:\n' > "$root/fs/etc/group"
  tar -C "$root/fs" -cf - . | docker import \
    --change "LABEL warden.recipe=$recipe" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin LANG=C.UTF-8' \
    --change 'WORKDIR /workspace' \
    - "$name" >/dev/null
  rm -rf "$root"
  echo "setup-docker-images: built $name ($(docker image inspect -f '{{.Size}}' "$name") bytes)" >&2
}

for name in "${!images[@]}"; do
  # shellcheck disable=SC2086
  build "$name" ${images[$name]}
done
