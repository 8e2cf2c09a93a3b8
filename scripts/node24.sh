# Source me: puts Node.js 24 (from the npm registry, kept in .tools/) first on PATH.
# These machines ship Node 20; the project runs .ts files directly, which needs Node 24.
# shellcheck shell=bash
_svc_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
_svc_node_pkg="$_svc_root/.tools/node_modules/node"
if ! "$_svc_node_pkg/bin/node" --version 2>/dev/null | grep -q '^v24\.'; then
  echo "node24.sh: installing node@24 into .tools/ (once)" >&2
  npm install --silent --no-save --prefix "$_svc_root/.tools" node@24 >&2 || return 1
  # npm may skip the package's preinstall step; it is what links the platform binary into bin/.
  if ! "$_svc_node_pkg/bin/node" --version >/dev/null 2>&1; then
    (cd "$_svc_node_pkg" && node installArchSpecificPackage.js) >&2 || return 1
  fi
fi
export PATH="$_svc_node_pkg/bin:$PATH"
# Native addons must build against this Node's headers, not the machine's Node 20 ones.
for _svc_dir in "$_svc_node_pkg"/node_modules/node-*; do
  [ -f "$_svc_dir/include/node/node.h" ] && export npm_config_nodedir="$_svc_dir"
done
unset _svc_root _svc_node_pkg _svc_dir
