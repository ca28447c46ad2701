#!/usr/bin/env bash
# Set-up for persist-playground: installs, idempotently and only what is missing,
# everything the build, the page and the three test layers need.
#
#   - the wasm32-unknown-unknown Rust target
#   - wasm-pack 0.15.1 and wasm-bindgen-cli 0.2.130 (must equal the crate's pinned wasm-bindgen)
#   - Debian's chromium and chromium-driver (same source package, versions always match)
#   - the npm dev dependencies (playwright-core drives /usr/bin/chromium; it never downloads a browser;
#     binaryen: the wasm-opt that scripts/build.sh runs)
#
# A rerun on a machine that has everything does no network work and takes seconds.
set -euo pipefail

WASM_PACK_VERSION=0.15.1
WASM_BINDGEN_VERSION=0.2.130

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf '[setup] %s\n' "$*"; }

export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v cargo >/dev/null 2>&1; then
  echo "[setup] cargo is missing: this project needs the machine's Rust toolchain (rustup)" >&2
  exit 1
fi

# 1. The wasm32 target.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  log "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

# 2. Chromium and its driver, from Debian. On a fresh machine the download and unpacking (mostly
# waiting on the network and the disk) run in the background while cargo compiles the tools
# below; the script waits for it before step 4.
apt_pid=""
apt_log="$(mktemp)"
trap 'rm -f "$apt_log"' EXIT
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  log "installing Debian's chromium and chromium-driver (in the background)"
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  ( $sudo_cmd apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq chromium chromium-driver ) \
    >"$apt_log" 2>&1 &
  apt_pid=$!
fi

# 3. wasm-pack and wasm-bindgen-cli at the exact versions the crate needs.
have_version() { # tool expected-version
  command -v "$1" >/dev/null 2>&1 && "$1" --version 2>/dev/null | grep -q " $2\$\| $2 "
}
if ! have_version wasm-pack "$WASM_PACK_VERSION"; then
  log "installing wasm-pack $WASM_PACK_VERSION (a few minutes, once)"
  cargo install wasm-pack --version "$WASM_PACK_VERSION" --locked
fi
if ! have_version wasm-bindgen "$WASM_BINDGEN_VERSION"; then
  log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (a few minutes, once)"
  # Not --locked: its lockfile names a crate version the registry here lacks.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
fi


if [ -n "$apt_pid" ]; then
  if ! wait "$apt_pid"; then
    cat "$apt_log" >&2
    echo "[setup] installing chromium and chromium-driver failed" >&2
    exit 1
  fi
  log "chromium and chromium-driver installed"
fi

# 4. npm dev dependencies (playwright-core; binaryen, whose wasm-opt build.sh runs). Reinstalled only when package-lock.json changed.
if ! command -v npm >/dev/null 2>&1; then
  echo "[setup] npm is missing: install Node.js 20 or later" >&2
  exit 1
fi
stamp="node_modules/.setup-stamp"
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
  log "installing npm dev dependencies"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_sum" > "$stamp"
fi

log "ready: $(wasm-pack --version), $(wasm-bindgen --version), $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
