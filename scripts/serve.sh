#!/usr/bin/env bash
# Serves the repository (index.html, www/, pkg/) on 127.0.0.1. Usage: scripts/serve.sh [PORT]
# The port comes from the argument, else $PORT, else 8080. The browser end-to-end tests start the
# page through this same script.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
port="${1:-${PORT:-8080}}"
if [ ! -f "$root/pkg/persist_playground.js" ]; then
  echo "[serve] pkg/ is missing: build it first (scripts/build.sh, or scripts/run.sh does both)" >&2
  exit 1
fi
echo "[serve] persist-playground at http://127.0.0.1:${port}/  (Ctrl-C stops it)"
exec python3 -m http.server --bind 127.0.0.1 --directory "$root" "$port"
