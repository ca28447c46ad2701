#!/usr/bin/env bash
# The node-postgres example against the PostgreSQL at PERSIST_TEST_POSTGRES_URL (scripts/services.sh
# starts a throwaway cluster and exports it): installs pg from the lockfile and the packed package,
# then runs test/ under Node. Without the URL the test fails: it does not skip.
#
#   PERSIST_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres bash examples/node-postgres/run.sh [tgz]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tgz="${1:-$(ls "$root"/dist/persist-playground-*.tgz 2>/dev/null | head -n1)}"
[ -f "$tgz" ] || { echo "[node-postgres] no packed package: run scripts/package.sh first" >&2; exit 1; }
tgz="$(cd "$(dirname "$tgz")" && pwd)/$(basename "$tgz")"
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
npm install --no-save --no-audit --no-fund --loglevel=error "$tgz"
timeout 600 node --test --test-reporter=tap test/
