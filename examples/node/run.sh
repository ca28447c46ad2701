#!/usr/bin/env bash
# Installs the packed package (npm pack output) into this example project the way a user would,
# then runs its tests under Node with a PATH that holds no Rust toolchain.
#
#   bash examples/node/run.sh [path/to/persist-playground-<version>.tgz]
#
# Default tarball: the one scripts/package.sh left in dist/. Prints node's TAP output.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tgz="${1:-$(ls "$root"/dist/persist-playground-*.tgz 2>/dev/null | head -n1)}"
[ -f "$tgz" ] || { echo "[example] no packed package: run scripts/package.sh first" >&2; exit 1; }
tgz="$(cd "$(dirname "$tgz")" && pwd)/$(basename "$tgz")"

# The PATH of a user without Rust: every entry that holds cargo, rustc or wasm tools is dropped.
clean_path=""
IFS=: read -r -a entries <<<"$PATH"
for dir in "${entries[@]}"; do
  case "$dir" in *cargo*|*rustup*) continue ;; esac
  if [ -x "$dir/cargo" ] || [ -x "$dir/rustc" ] || [ -x "$dir/wasm-pack" ]; then continue; fi
  clean_path="${clean_path:+$clean_path:}$dir"
done

cd "$here"
export PATH="$clean_path"
npm ci --no-audit --no-fund --loglevel=error
npm install --no-save --no-audit --no-fund --loglevel=error "$tgz"
node --test --test-reporter=tap test/
