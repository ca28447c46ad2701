#!/usr/bin/env bash
# Builds the wasm package for the web into pkg/: the playground page (default features: no library,
# no benchmark writer), release profile (opt-level "z", lto, one codegen unit). Then binaryen
# (below) reorders the .wasm's functions by name and drops its custom sections (debug names;
# producers; target_features): engines ignore them and the page never reads them.
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
  # Two binaryen passes that change no code: one copy of functions that are identical, and
  # functions in name order, so the many copies of one generic function (a BTreeMap's insert for
  # each key type, ...) sit side by side, where gzip's 32 KiB window finds their likeness: ~25 KB
  # off the gzipped file. They need the names, so the strip passes run after them, in the same
  # run: the custom sections go (debug names, producers, target_features; engines ignore them).
  # Checked once against the Python script that stripped them before (2026-12-01): the same
  # bytes. No optimising pass: -Oz made the gzipped file larger. npm's binaryen (package.json),
  # never Debian's 108, whose output fails at load time.
  wasm_opt="$root/node_modules/.bin/wasm-opt"
  [ -x "$wasm_opt" ] || { echo "[build] $wasm_opt is missing: run scripts/setup.sh (npm ci)" >&2; exit 1; }
  "$wasm_opt" --duplicate-function-elimination --reorder-functions-by-name \
    --strip-debug --strip-producers --strip-target-features "$wasm" -o "$wasm"
fi
echo "[build] $wasm: $(gzip -9 -c "$wasm" | wc -c) bytes gzipped"
