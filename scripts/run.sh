#!/usr/bin/env bash
# The README's run command: set up, build the wasm package for the web into pkg/, and serve the
# playground on 127.0.0.1 (port: first argument or $PORT, default 8080).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/build.sh
exec bash scripts/serve.sh "$@"
