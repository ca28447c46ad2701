#!/usr/bin/env bash
# Builds the wasm package for the web into pkg/ (release profile: opt-level "z", lto, one codegen unit).
# --mode no-install: use the wasm-bindgen on PATH (scripts/setup.sh installs the pinned version);
# a mismatch then fails at once instead of a silent 4-minute cargo install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
profile="${1:---release}"
wasm-pack build --target web "$profile" --mode no-install --out-dir pkg
