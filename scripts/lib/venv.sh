# Sourced by the setup scripts that put a tool from PyPI in a venv of its own.
#
# ensure_venv NAME VENV CHECK SPEC...: leaves VENV as it is when its python runs CHECK (Python
# code) successfully; otherwise installs Debian's python3-venv if missing (as root), makes the
# venv with /usr/bin/python3, pip-installs SPEC and runs CHECK again (a failure stops the
# script). NAME prefixes the messages.
ensure_venv() {
  local name="$1" venv="$2" check="$3"
  shift 3
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
    return 0
  fi
  if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "$name: python3-venv is missing; run this script as root" >&2
      return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
  fi
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
  "$venv/bin/python" -c "$check"
  echo "$name: installed in $venv"
}
