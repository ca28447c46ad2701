#!/usr/bin/env bash
# Builds the wasm package for the web into pkg/: the playground page (default features: no library,
# no benchmark writer), release profile (opt-level "z", lto, one codegen unit). Then binaryen
# (scripts/wasm-passes.sh) shrinks the .wasm's code, orders its functions for gzip and drops its
# custom sections (debug names; producers; target_features): engines ignore them and the page
# never reads them.
# --mode no-install: use the wasm-bindgen on PATH (scripts/setup.sh installs the pinned version);
# a mismatch then fails at once instead of a silent 4-minute cargo install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
#
#   bash scripts/build.sh [--dev]           # the page, into pkg/
#   bash scripts/build.sh --bench [--dev]   # with feature `bench` (BenchWriter), into pkg-bench/,
#                                           # for www/bench.html (scripts/bench-browser.mjs)
out=pkg
cargo_args=()
if [ "${1:-}" = "--bench" ]; then
  out=pkg-bench
  cargo_args=(-- --features bench)
  shift
fi
profile="${1:---release}"
wasm-pack build --target web "$profile" --mode no-install --out-dir "$out" "${cargo_args[@]}"
wasm="$out/persist_playground_bg.wasm"
if [ "$profile" = "--release" ]; then
  # binaryen's size passes, function order for gzip, custom sections dropped: scripts/wasm-passes.sh
  # (the npm package's build, scripts/package.sh, runs the same).
  wasm_opt="$root/node_modules/.bin/wasm-opt"
  [ -x "$wasm_opt" ] || { echo "[build] $wasm_opt is missing: run scripts/setup.sh (npm ci)" >&2; exit 1; }
  # shellcheck source=scripts/wasm-passes.sh
  source "$root/scripts/wasm-passes.sh"
  shrink_wasm "$wasm_opt" "$wasm"
fi
echo "[build] $wasm: $(gzip -9 -c "$wasm" | wc -c) bytes gzipped"
