# The post-build passes of a release .wasm, one definition for the page's build (scripts/build.sh)
# and the npm package's (scripts/package.sh): both source this file and call
#
#   shrink_wasm WASM_OPT FILE.wasm      # rewrites FILE.wasm in place
#
# WASM_OPT is binaryen's wasm-opt from npm (package.json; never Debian's 108, whose output fails
# at load time). FILE must keep its function names (wasm-bindgen's output does). Two wasm-opt
# runs with scripts/order-functions.mjs between them:
# 1. Size passes that keep the code's meaning (the names kept, -g): one copy of functions that
#    are identical, then branches, blocks, no-op code, redundant sets and constant expressions
#    simplified, dead module items dropped, and the duplicates looked for again, twice over
#    (the second round finds what the first made identical). Not -Oz, whose inlining made the
#    gzipped file larger: every pass here was measured for gzip -9 alone, and the ones that
#    made it larger (inlining, local-cse, coalesce/reorder-locals, merge-similar-functions) are
#    left out. ~4 KB off the page's gzipped file (2026-12-03), and ~2.4 KB more with --dealign:
#    every load and store says "alignment 1". The alignment of a wasm memory access is a hint
#    with no meaning (an access that is not aligned works all the same; engines do not rely on
#    the hint), and one value everywhere compresses better.
# 2. The functions in an order gzip's 32 KiB window likes: order-functions.mjs renames them so
#    that --reorder-functions-by-name puts the copies of one generic function (a BTreeMap's
#    insert for each key type, ...) side by side, the most alike next to each other: ~27 KB off
#    the page's gzipped file. The strip passes run in the same run: the custom sections go
#    (debug names, producers, target_features; engines ignore them and nothing reads them).
#    binaryen re-encodes the module, so the strip passes alone are not byte-identical to
#    dropping the sections by hand.
shrink_wasm() { # wasm-opt file.wasm
  local wasm_opt="$1" wasm="$2"
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  local size_passes=(--remove-unused-brs --vacuum --optimize-instructions --rse --remove-unused-module-elements
    --code-folding --precompute --merge-blocks --duplicate-function-elimination)
  "$wasm_opt" -g --duplicate-function-elimination "${size_passes[@]}" "${size_passes[@]}" --dealign \
    "$wasm" -o "$wasm"
  node "$here/order-functions.mjs" "$wasm" "$wasm"
  "$wasm_opt" --reorder-functions-by-name \
    --strip-debug --strip-producers --strip-target-features "$wasm" -o "$wasm"
}
