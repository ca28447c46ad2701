#!/usr/bin/env bash
# Assembles the npm package `persist-playground` into dist/npm/ from wasm-bindgen's outputs for
# the three targets (one cargo build of the .wasm), and packs it with `npm pack` into dist/persist-playground-<version>.tgz.
#
#   bash scripts/package.sh            # release build (opt-level "z", lto: slow on 2 cores), in
#                                      # Cargo profile `npm` (the release settings; the page's
#                                      # build keeps `release` to itself, see Cargo.toml)
#   bash scripts/package.sh --dev      # dev build, for iterating
#
# Layout of the package (one import path picks the build through conditional exports):
#   web/      wasm-bindgen --target web: ES module; call `await init()` once before use
#   bundler/  wasm-bindgen --target bundler: for bundlers that import .wasm as a module; it holds
#             the one .wasm file, which the web and node glue load from there
#   fs/       persist-playground/fs: a node:fs location (plain JS over PersistLocation.custom)
#   node/     wasm-bindgen --target nodejs (CommonJS, loads the .wasm synchronously), with an ES
#             module wrapper (index.mjs) whose default export `init()` is a no-op, so code that
#             calls `await init()` runs unchanged in Node and in browsers
# Every entry point adds `Listen.prototype[Symbol.asyncIterator]` (scripts/npm/listen-iterator.js).
# The package's package.json is generated here; the repository's root package.json is only the
# private dev-dependency manifest of the end-to-end tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
profile="${1:---release}"

name=persist-playground
crate=persist_playground
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
# The repository field of the published package.json (no remote is configured here: set it).
repository="${PACKAGE_REPOSITORY:-https://github.com/persist-playground/persist-playground}"
out="dist/npm"
build="dist/build"
rm -rf "$out" "$build"
mkdir -p "$out" "$build"

# The library's API is Cargo feature `library` (the playground page's build leaves it out).
# The three targets differ only in their JS glue, so the crate is built for wasm32 once and
# wasm-bindgen (the one on PATH, which scripts/setup.sh pins) runs once per target, with the
# flags wasm-pack would pass for this profile (Cargo.toml's [package.metadata.wasm-pack]: no
# --debug glue in release, demangled names, no DWARF).
case "$profile" in
  --release) cargo_profile=(--profile npm); cargo_dir=npm; bindgen_profile=() ;;
  --dev) cargo_profile=(); cargo_dir=debug; bindgen_profile=(--debug) ;;
  *) echo "[package] unknown profile $profile (--release or --dev)" >&2; exit 1 ;;
esac
echo "[package] cargo build --lib --target wasm32-unknown-unknown ${cargo_profile[*]} --features library"
cargo build --lib --target wasm32-unknown-unknown "${cargo_profile[@]}" --features library \
  >"$build/cargo.log" 2>&1 || { cat "$build/cargo.log" >&2; exit 1; }
built="$root/target/wasm32-unknown-unknown/$cargo_dir/$crate.wasm"
# The three wasm-bindgen runs read the same .wasm and write to their own directories: they run
# side by side (each is single threaded).
targets=(web bundler nodejs)
bindgen_pids=()
for target in "${targets[@]}"; do
  echo "[package] wasm-bindgen --target $target"
  wasm-bindgen "$built" --out-dir "$root/$build/$target" --typescript --weak-refs \
    --target "$target" --out-name "$crate" "${bindgen_profile[@]}" \
    >"$build/$target.log" 2>&1 &
  bindgen_pids+=("$!")
done
for i in "${!targets[@]}"; do
  wait "${bindgen_pids[$i]}" || { cat "$build/${targets[$i]}.log" >&2; exit 1; }
done

# Their .wasm files are the same bytes, so the package ships one. It stays in bundler/, because
# a bundler resolves the module's own import ("./persist_playground_bg.js") next to it; the web
# and node glue are pointed at it.
wasm="${crate}_bg.wasm"
for target in bundler nodejs; do
  cmp -s "$build/web/$wasm" "$build/$target/$wasm" \
    || { echo "[package] the $target build's .wasm differs from the web build's" >&2; exit 1; }
done
copy() { # from-dir to-dir
  mkdir -p "$2"
  cp "$1/$crate.js" "$1/$crate.d.ts" "$2/"
  if [ -f "$1/${crate}_bg.js" ]; then cp "$1/${crate}_bg.js" "$2/"; fi
}
copy "$build/web" "$out/web"
copy "$build/bundler" "$out/bundler"
copy "$build/nodejs" "$out/node"
cp "$build/bundler/$wasm" "$build/bundler/$wasm.d.ts" "$out/bundler/"
if [ "$profile" = "--release" ]; then
  # The page's binaryen passes (scripts/wasm-passes.sh, which scripts/build.sh runs too, says why
  # each): size passes, functions in an order gzip likes, custom sections dropped (debug names:
  # ~40% of the file; producers; target_features), which engines ignore. 2026-12-03: 539,276
  # bytes gzipped, against 550,179 with the two passes the package ran before.
  wasm_opt="$root/node_modules/.bin/wasm-opt"
  [ -x "$wasm_opt" ] || { echo "[package] $wasm_opt is missing: run scripts/setup.sh (npm ci)" >&2; exit 1; }
  # shellcheck source=scripts/wasm-passes.sh
  source "$root/scripts/wasm-passes.sh"
  before=$(wc -c <"$out/bundler/$wasm")
  shrink_wasm "$wasm_opt" "$out/bundler/$wasm"
  echo "[package] $out/bundler/$wasm: $before -> $(wc -c <"$out/bundler/$wasm") bytes ($(gzip -9 -c "$out/bundler/$wasm" | wc -c) gzipped)"
fi
repoint() { # file old-reference new-reference
  grep -qF "$2" "$1" || { echo "[package] $1 does not load the .wasm as $2" >&2; exit 1; }
  sed -i "s#$2#$3#" "$1"
}
repoint "$out/web/$crate.js" "new URL('$wasm', import.meta.url)" "new URL('../bundler/$wasm', import.meta.url)"
repoint "$out/node/$crate.js" "\${__dirname}/$wasm" "\${__dirname}/../bundler/$wasm"
# The raw wasm exports (the web build's InitOutput and the *_bg.wasm.d.ts files) take and return
# externrefs, which wasm-bindgen declares as `any`: they are unknown JS values, so say `unknown`.
sed -i '/^export interface InitOutput/,/^}/ s/\bany\b/unknown/g' "$out/web/$crate.d.ts"
sed -i 's/\bany\b/unknown/g' "$out/bundler/$wasm.d.ts"
# wasm-bindgen declares `[Symbol.dispose]()` on every class: pull in that lib for the user.
for f in "$out"/*/"$crate.d.ts"; do
  sed -i '1i /// <reference lib="esnext.disposable" />' "$f"
done
cp scripts/npm/listen-iterator.js "$out/listen-iterator.js"
cp scripts/npm/listen-iterator.cjs "$out/node/listen-iterator.cjs"
# persist-playground/fs: a file-system location for Node (node:fs; plain JS over
# PersistLocation.custom).
mkdir -p "$out/fs"
echo '{ "type": "commonjs" }' >"$out/fs/package.json"
cp scripts/npm/fs-location.cjs "$out/fs/index.cjs"
cp scripts/npm/fs-location.mjs "$out/fs/index.mjs"
cp scripts/npm/fs-location.d.ts "$out/fs/index.d.ts"

# ES module entry points of the web and bundler builds: the module plus the iterator.
for dir in web bundler; do
  cat >"$out/$dir/index.js" <<EOF
import * as m from "./$crate.js";
import { addListenIterator } from "../listen-iterator.js";
addListenIterator(m.Listen);
export * from "./$crate.js";
EOF
  cat >"$out/$dir/index.d.ts" <<EOF
export * from "./$crate.js";
import type { ListenEventView } from "./$crate.js";
declare module "./$crate.js" {
    interface Listen {
        /** Yields each batch's events until the shard is finished. */
        [Symbol.asyncIterator](): AsyncIterator<ListenEventView[]>;
    }
}
EOF
done
# The web build's default export is wasm-bindgen's init (fetches and instantiates the .wasm).
echo "export { default } from \"./$crate.js\";" >>"$out/web/index.js"
echo "export { default } from \"./$crate.js\";" >>"$out/web/index.d.ts"
# Bundlers instantiate the module on import: init is a no-op there.
echo "export default async function init() {}" >>"$out/bundler/index.js"
printf '%s\n' "/** A no-op: a bundler instantiates the module on import. */" \
  "export default function init(): Promise<void>;" >>"$out/bundler/index.d.ts"

# Node: CommonJS module (nodejs target), a CommonJS entry and an ES module wrapper whose named
# exports are listed from the module itself.
echo '{ "type": "commonjs" }' >"$out/node/package.json"
cat >"$out/node/index.cjs" <<EOF
const m = require("./$crate.js");
require("./listen-iterator.cjs").addListenIterator(m.Listen);
module.exports = m;
EOF
names="$(node -e "console.log(Object.keys(require('./$out/node/$crate.js')).filter(n => /^[A-Za-z_]\w*\$/.test(n) && !n.startsWith('__')).join(', '))")"
[ -n "$names" ] || { echo "[package] no exports found in the nodejs build" >&2; exit 1; }
cat >"$out/node/index.mjs" <<EOF
import { createRequire } from "node:module";
const m = createRequire(import.meta.url)("./index.cjs");
export const { $names } = m;
/** A no-op under Node: the module is instantiated when it is imported. */
export default async function init() {}
EOF
cat >"$out/node/index.d.mts" <<EOF
export * from "./$crate.js";
import type { ListenEventView } from "./$crate.js";
declare module "./$crate.js" {
    interface Listen {
        /** Yields each batch's events until the shard is finished. */
        [Symbol.asyncIterator](): AsyncIterator<ListenEventView[]>;
    }
}
/** A no-op under Node: the module is instantiated when it is imported. */
export default function init(): Promise<void>;
EOF
cp "$out/node/index.d.mts" "$out/node/index.d.cts"
sed -i '/no-op under Node/,$d' "$out/node/index.d.cts"

cp README.md "$out/README.md"
cat >"$out/package.json" <<EOF
{
  "name": "$name",
  "version": "$version",
  "description": "A teaching-sized re-implementation of Materialize's storage layer (persist, the timestamp oracle, the differential write task) in Rust and WebAssembly, for browsers and Node: IndexedDB or in-memory storage, seeded fault injection, typed events.",
  "license": "MIT OR Apache-2.0",
  "repository": { "type": "git", "url": "git+$repository.git" },
  "keywords": ["materialize", "persist", "wasm", "indexeddb", "timestamp-oracle", "differential"],
  "type": "module",
  "sideEffects": ["./web/index.js", "./bundler/index.js", "./bundler/${crate}.js", "./node/index.cjs", "./node/index.mjs"],
  "files": ["web/", "bundler/", "node/", "fs/", "listen-iterator.js", "README.md"],
  "main": "./node/index.cjs",
  "module": "./bundler/index.js",
  "browser": "./web/index.js",
  "types": "./web/index.d.ts",
  "exports": {
    ".": {
      "node": {
        "import": { "types": "./node/index.d.mts", "default": "./node/index.mjs" },
        "require": { "types": "./node/index.d.cts", "default": "./node/index.cjs" }
      },
      "webpack": { "types": "./bundler/index.d.ts", "default": "./bundler/index.js" },
      "browser": { "types": "./web/index.d.ts", "default": "./web/index.js" },
      "default": { "types": "./web/index.d.ts", "default": "./web/index.js" }
    },
    "./web": { "types": "./web/index.d.ts", "default": "./web/index.js" },
    "./bundler": { "types": "./bundler/index.d.ts", "default": "./bundler/index.js" },
    "./node": {
      "import": { "types": "./node/index.d.mts", "default": "./node/index.mjs" },
      "require": { "types": "./node/index.d.cts", "default": "./node/index.cjs" }
    },
    "./fs": {
      "types": "./fs/index.d.ts",
      "import": "./fs/index.mjs",
      "require": "./fs/index.cjs"
    },
    "./package.json": "./package.json"
  },
  "engines": { "node": ">=20" }
}
EOF

rm -f dist/"$name"-*.tgz
(cd dist && npm pack ./npm --silent >/dev/null)
tgz="$(ls dist/"$name"-"$version".tgz)"
echo "[package] $tgz ($(du -k "$tgz" | cut -f1) KiB): web, bundler and node builds"
