#!/usr/bin/env bash
# Refreshes the playground's vendored CodeMirror (crates/warden-server/playground/vendor/codemirror)
# from Debian's libjs-codemirror package, installing the package if needed (as root). The files
# are copied into the repository, not read from /usr/share at build time, so that building
# Warden never needs the package (any worktree, CI runner or `cargo package` builds it) and the
# embedded editor changes only when this script is run and the result committed.
set -euo pipefail
cd "$(dirname "$0")/.."
src=/usr/share/javascript/codemirror
dst=crates/warden-server/playground/vendor/codemirror
if ! dpkg-query -W -f='${Status}' libjs-codemirror 2>/dev/null | grep -q "install ok installed"; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "update-codemirror: libjs-codemirror is missing; run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends libjs-codemirror >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends libjs-codemirror; }
fi
mkdir -p "$dst/mode" "$dst/addon"
cp "$src/lib/codemirror.js" "$src/lib/codemirror.css" "$dst/"
for mode in python javascript shell; do
  cp "$src/mode/$mode/$mode.js" "$dst/mode/$mode.js"
done
cp "$src/addon/edit/matchbrackets.js" "$dst/addon/matchbrackets.js"
cp /usr/share/doc/libjs-codemirror/copyright "$dst/COPYRIGHT"
version="$(dpkg-query -W -f='${Version}' libjs-codemirror)"
cat > "$dst/README.md" <<MD
# CodeMirror (vendored)

The playground's editor: [CodeMirror](https://codemirror.net/5/) 5, copied from Debian 12's
package \`libjs-codemirror\` version \`$version\` by \`scripts/update-codemirror.sh\` (run it to
refresh; never edit these files by hand). MIT licence: see \`COPYRIGHT\` (Debian's copyright
file, with the licence text).

| file here | from \`/usr/share/javascript/codemirror/\` |
|---|---|
| \`codemirror.js\`, \`codemirror.css\` | \`lib/\` |
| \`mode/python.js\`, \`mode/javascript.js\`, \`mode/shell.js\` | \`mode/NAME/NAME.js\` |
| \`addon/matchbrackets.js\` | \`addon/edit/matchbrackets.js\` |

They are embedded into the \`warden\` binary by \`crates/warden-server/src/playground.rs\`
(\`include_str!\`) and served at \`/playground/{file}\`.
MD
echo "update-codemirror: copied CodeMirror $version into $dst" >&2
