#!/usr/bin/env bash
# Builds the wasm package for the web into pkg/: the playground page (default features: no library,
# no benchmark writer), release profile (opt-level "z", lto, one codegen unit). Then binaryen
# (below) shrinks the .wasm's code, orders its functions for gzip and drops its custom sections
# (debug names; producers; target_features): engines ignore them and the page never reads them.
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
  # binaryen (npm's, package.json; never Debian's 108, whose output fails at load time), in two
  # runs with scripts/order-functions.mjs between them.
  # 1. Size passes that keep the code's meaning (the names kept, -g): one copy of functions that
  #    are identical, then branches, blocks, no-op code, redundant sets and constant expressions
  #    simplified, dead module items dropped, and the duplicates looked for again, twice over
  #    (the second round finds what the first made identical). Not -Oz, whose inlining made the
  #    gzipped file larger: every pass here was measured for gzip -9 alone, and the ones that
  #    made it larger (inlining, local-cse, coalesce/reorder-locals, merge-similar-functions) are
  #    left out. ~4 KB off the gzipped file (2026-12-03), and ~2.4 KB more with --dealign (below).
  # 2. The functions in an order gzip's 32 KiB window likes: order-functions.mjs renames them so
  #    that --reorder-functions-by-name puts the copies of one generic function (a BTreeMap's
  #    insert for each key type, ...) side by side, the most alike next to each other: ~27 KB off
  #    the gzipped file. The strip passes run in the same run: the custom sections go (debug
  #    names, producers, target_features; engines ignore them and the page never reads them).
  wasm_opt="$root/node_modules/.bin/wasm-opt"
  [ -x "$wasm_opt" ] || { echo "[build] $wasm_opt is missing: run scripts/setup.sh (npm ci)" >&2; exit 1; }
  size_passes=(--remove-unused-brs --vacuum --optimize-instructions --rse --remove-unused-module-elements
    --code-folding --precompute --merge-blocks --duplicate-function-elimination)
  # --dealign: every load and store says "alignment 1". The alignment of a wasm memory access is
  # a hint with no meaning (an access that is not aligned works all the same; engines do not
  # rely on the hint), and one value everywhere compresses better: ~2.4 KB off the gzipped file.
  "$wasm_opt" -g --duplicate-function-elimination "${size_passes[@]}" "${size_passes[@]}" --dealign \
    "$wasm" -o "$wasm"
  node "$root/scripts/order-functions.mjs" "$wasm" "$wasm"
  "$wasm_opt" --reorder-functions-by-name \
    --strip-debug --strip-producers --strip-target-features "$wasm" -o "$wasm"
fi
echo "[build] $wasm: $(gzip -9 -c "$wasm" | wc -c) bytes gzipped"
