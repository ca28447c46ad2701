#!/usr/bin/env bash
# Builds the wasm package for the web into pkg/ (the playground page: default features, no library,
# no benchmark writer) (release profile: opt-level "z", lto, one codegen unit),
# then drops the .wasm's custom sections (debug names: ~40% of the file; producers; target_features):
# engines ignore them and the page never reads them.
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
if [ "$profile" = "--release" ]; then
  python3 scripts/strip-wasm-names.py "$out/persist_playground_bg.wasm"
fi
echo "[build] $out/persist_playground_bg.wasm: $(gzip -9 -c "$out/persist_playground_bg.wasm" | wc -c) bytes gzipped"
