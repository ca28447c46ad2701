#!/usr/bin/env bash
# A fresh Vite app with the packed package: npm ci (Vite from the lockfile), npm install of the
# npm pack output, `vite build` with no configuration, then vite.test.mjs serves dist/ and runs
# it in headless Chromium (playwright-core from the repository's dev dependencies).
#
#   bash examples/vite-app/run.sh [path/to/persist-playground-<version>.tgz]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tgz="${1:-$(ls "$root"/dist/persist-playground-*.tgz 2>/dev/null | head -n1)}"
[ -f "$tgz" ] || { echo "[vite-app] no packed package: run scripts/package.sh first" >&2; exit 1; }
tgz="$(cd "$(dirname "$tgz")" && pwd)/$(basename "$tgz")"
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
npm install --no-save --no-audit --no-fund --loglevel=error "$tgz"
rm -rf dist
npx --no-install vite build --logLevel warn
node --test --test-reporter=tap vite.test.mjs
