#!/usr/bin/env bash
# The README's test command: set up, then run every test layer, failing if any layer fails or runs
# fewer tests than it should.
#
#   1. native:  cargo test (unit, integration and doc tests; the simulator's randomized suites)
#   2. browser: wasm-pack test --headless --chrome (IndexedDB, the browser runtime), in Chromium
#   3. page:    build pkg/, check that its .wasm is under its size guard (440 KiB gzipped), and drive
#               index.html in Chromium with playwright-core (tests/e2e/)
#   +  package: scripts/package.sh packs the npm package; examples/node installs the tarball and
#               runs its tests under Node with no Rust toolchain on PATH (examples/node/run.sh);
#               examples/web/ loads the web build in Chromium (and runs the README's library
#               snippets there; examples/node runs them under Node); examples/vite-app is
#               built by Vite from the tarball and run in Chromium; examples/node-postgres
#               proves a node-postgres Consensus with runLocationConformance
#   4. native backends: the #[ignore]d tests of tests/native_*.rs, with -- --ignored (the conformance suites
#               on PostgreSQL, file:// and S3, seeded fault runs under tokio, races of OS
#               processes with SIGKILL and pg_ctl restart, bad input)
#
# PostgreSQL (a throwaway cluster, Debian's package) and the S3 emulator (moto's server mode, from
# PyPI: an emulator for tests, not a store) are installed if missing and started once by
# scripts/services.sh, before the layers, and stopped at exit.
#
# Each layer prints its time; the summary lists them, and the e2e files by their time.
#
# Work that repeats nothing: the integration tests are two binaries (tests/native.rs,
# tests/browser.rs), so the crate is linked once per layer, not once per file; the page's e2e
# files run E2E_CONCURRENCY (default 2) at a time; the npm package's release build and the native
# backends layer run in the background while they do (each prints its own time); the package
# layer's four parts (examples/node, examples/web, examples/vite-app, examples/node-postgres) run
# side by side.
#
# A browser test file without wasm_bindgen_test_configure!(run_in_browser) is silently skipped by
# the runner, and a layer can "pass" having run nothing; so each layer's count is checked against
# the number of tests its files declare.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"

t_start=$SECONDS
bash scripts/setup.sh

logs="$(mktemp -d)"
package_pid=""
backends_pid=""
# A failing layer leaves nothing behind in the background (the package build and the native
# backends layer run in process groups of their own).
trap 'for p in $package_pid $backends_pid; do kill -- "-$p" 2>/dev/null || true; done; rm -rf "$logs"' EXIT
times=""
t_layer=$SECONDS
layer_done() { # name
  local took=$((SECONDS - t_layer))
  echo "[test] $1 took ${took}s"
  times="$times $1 ${took}s,"
  t_layer=$SECONDS
}

# shellcheck source=scripts/services.sh
source scripts/services.sh
services_start
layer_done "set-up"
fail() { echo "[test] FAILED: $*" >&2; exit 1; }
sum_passed() { # cargo/libtest summaries: "test result: ok. N passed; ..."
  grep -aoE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$1" | awk '{s += $4} END {print s + 0}'
}

# The integration tests are two binaries (Cargo.toml: autotests = false): tests/native.rs and
# tests/browser.rs, each tests/NAME.rs a module of one of them. A file listed in neither would not
# be built at all, so every file must be (browser_*.rs in browser.rs, the others in native.rs).
for f in tests/*.rs; do
  name="$(basename "$f")"
  case "$name" in native.rs | browser.rs) continue ;; browser_*) group=tests/browser.rs ;; *) group=tests/native.rs ;; esac
  grep -qxF "#[path = \"$name\"]" "$group" \
    || fail "$f is not a module of $group: with autotests = false it would never be built or run"
done

echo "[test] 1/4 native: cargo test"
cargo test --all-targets 2>&1 | tee "$logs/native.log"
cargo test --doc 2>&1 | tee -a "$logs/native.log"
native=$(sum_passed "$logs/native.log")
# Declared: the #[test]s of src/ (unit tests) and of tests/*.rs but the native_* files (their
# tests are #[ignore]d until the native backends layer); the doc tests come on top.
native_expected=$(( $(grep -rhE '^\s*#\[test\]' src | wc -l) \
  + $(find tests -maxdepth 1 -name '*.rs' ! -name 'native_*' -exec cat {} + | grep -cE '^\s*#\[test\]' || true) ))
[ "$native" -ge "$native_expected" ] && [ "$native" -gt 0 ] \
  || fail "native layer passed $native tests; src/ and tests/ declare $native_expected (and the doc tests)"
layer_done "native"

echo "[test] 2/4 browser: wasm-pack test --headless --chrome"
for f in tests/*.rs; do
  if grep -q 'wasm_bindgen_test\]' "$f" && ! grep -q 'run_in_browser' "$f"; then
    fail "$f has browser tests but no wasm_bindgen_test_configure!(run_in_browser): they would be skipped"
  fi
done
browser_expected=$(cat tests/*.rs | grep -cE '^\s*#\[wasm_bindgen_test\]' || true)
# Only the test targets that declare browser tests: every other tests/*.rs file is native-only
# (or has no #[wasm_bindgen_test]) and would be linked, run through wasm-bindgen and opened in
# Chromium for 0 tests. src/ has no browser tests (checked here, so one added there is not lost).
if grep -rqE '#\[wasm_bindgen_test\]' src; then
  fail "src/ has #[wasm_bindgen_test]s: the browser layer runs tests/ targets only (add them there)"
fi
# Every browser test file is a module of the one browser test binary (tests/browser.rs).
for f in tests/*.rs; do
  if grep -qE '^\s*#\[wasm_bindgen_test\]' "$f" && [[ "$(basename "$f")" != browser_* ]]; then
    fail "$f has browser tests but is not a tests/browser_*.rs module of tests/browser.rs"
  fi
done
browser_targets=(--test browser)
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-120}"
wasm-pack test --mode no-install --headless --chrome --chromedriver /usr/bin/chromedriver \
  -- "${browser_targets[@]}" 2>&1 | tee "$logs/browser.log"
# Only wasm-bindgen-test-runner's summaries (they have no "measured" count): `cargo test` under
# wasm-pack also runs the doc tests natively, which must not stand in for browser tests.
browser=$(grep -av 'measured' "$logs/browser.log" > "$logs/browser-only.log" || true; sum_passed "$logs/browser-only.log")
[ "$browser" -ge "$browser_expected" ] \
  || fail "browser layer ran $browser tests; the test files declare $browser_expected"
[ "$browser" -gt 0 ] || fail "browser layer ran no test"
layer_done "browser"

echo "[test] 3/4 page: build pkg/ and run tests/e2e/ in Chromium"
# The native backends layer (4/4) starts here, in the background: it needs only the services and
# the test binary the native layer built (`-- --ignored` runs the native_* modules' #[ignore]d
# tests, which a plain `cargo test` skips), and nothing of the page layer uses PostgreSQL or the
# S3 emulator. It is over before the package layer starts, whose node-postgres example needs a
# PostgreSQL that native_race does not restart under it.
backends_expected=$(cat tests/native_*.rs | grep -cE '^\s*#\[test\]' || true)
setsid bash -c 't0=$SECONDS; cargo test --test native -- --ignored >"$1/backends.log" 2>&1; rc=$?; echo $((SECONDS - t0)) >"$1/backends.took"; exit $rc' \
  backends "$logs" &
backends_pid=$!
bash scripts/build.sh
# The page's size guard: its whole .wasm under 440 KiB gzipped (gzip -9). Issue 10 set 400 KiB
# (409,600 bytes); the leak-free maintenance of issue 17 (tickets, sweeps, the merge worker) and the
# engine's page table (issue 19) took it to about 414,000 bytes, so the guard was raised to 420 KiB;
# issue 16's engine side (the stage walk, the live clock, the since's holders, the writers' kept
# outcomes) and issue 17's run merge and carried merges took it to about 431,300 bytes, so it is
# 440 KiB now. The cut back below 400 KiB is open work.
budget=450560
wasm_gz=$(gzip -9 -c pkg/persist_playground_bg.wasm | wc -c)
echo "[test] page .wasm: $wasm_gz bytes gzipped (gzip -9), budget under $budget"
[ "$wasm_gz" -lt "$budget" ] || fail "the page's .wasm is $wasm_gz bytes gzipped; the budget is under $budget (issue 10)"
e2e_expected=$(cat tests/e2e/*.test.mjs | grep -cE '^\s*test\(' || true)
# tour-walk.test.mjs declares one test per tour in a loop (counted once above), and
# a11y.test.mjs one for each of two tours in a loop: count the tours.
tours=$(node -e 'console.log(require("./www/tours/index.json").tours.length)')
e2e_expected=$((e2e_expected + (tours - 1) + 1))
# The npm package's release build (scripts/package.sh: one more LTO build of the crate, single
# threaded at its end) runs while the page's tests drive Chromium; the package layer waits for it.
setsid bash scripts/package.sh --release >"$logs/package-build.log" 2>&1 &
package_pid=$!
# The e2e files share nothing (each starts its own server on a free port, and every browser
# context has its own fresh profile): they run E2E_CONCURRENCY at a time.
# The runner starts the files in the order given: the longest first (as the summary's list of
# files by time had them, 2026-12-02; tour-walk.test.mjs since it walks the tours alone), so that
# the shorter ones fill in beside them rather than leaving a long one at the end to run alone. A second reporter (scripts/e2e-times.mjs) sums each
# file's test times for that list.
e2e_files=()
for f in tour-walk page rules; do
  if [ -f "tests/e2e/$f.test.mjs" ]; then e2e_files+=("tests/e2e/$f.test.mjs"); fi
done
for f in tests/e2e/*.test.mjs; do
  case " ${e2e_files[*]} " in *" $f "*) ;; *) e2e_files+=("$f") ;; esac
done
node --test --test-concurrency="${E2E_CONCURRENCY:-2}" --test-reporter=tap --test-reporter-destination=stdout \
  --test-reporter=./scripts/e2e-times.mjs --test-reporter-destination="$logs/e2e-times.txt" "${e2e_files[@]}" 2>&1 | tee "$logs/e2e.log"
sed 's/^/[test] /' "$logs/e2e-times.txt" 2>/dev/null || true
e2e=$(grep -aoE '^# pass [0-9]+' "$logs/e2e.log" | awk '{print $3}' | tail -n1)
e2e=${e2e:-0}
[ "$e2e" -ge "$e2e_expected" ] && [ "$e2e" -gt 0 ] \
  || fail "page layer passed $e2e tests; the test files declare $e2e_expected"
layer_done "page"

echo "[test] 4/4 native backends: PostgreSQL + S3 emulator, tests/native_*.rs (run beside the page layer)"
backends_rc=0
wait "$backends_pid" || backends_rc=$?
backends_pid=""
cat "$logs/backends.log"
[ "$backends_rc" = 0 ] || fail "the native backends layer failed (cargo test --test native -- --ignored)"
backends=$(sum_passed "$logs/backends.log")
[ "$backends" -ge "$backends_expected" ] && [ "$backends" -gt 0 ] \
  || fail "native-backends layer passed $backends tests; the test files declare $backends_expected"
# Its own time, from its start beside the page layer to its end; the page layer's time includes
# the wait for it, if it ended last.
backends_took=$(cat "$logs/backends.took")
echo "[test] native backends took ${backends_took}s (beside the page layer)"
times="$times native backends ${backends_took}s (beside page),"
t_layer=$SECONDS

echo "[test] package: npm pack the library, install it in examples/node, run it with no Rust on PATH"
wait "$package_pid" || { cat "$logs/package-build.log" >&2; package_pid=""; fail "scripts/package.sh --release failed"; }
package_pid=""
cat "$logs/package-build.log"
# The layer's four parts share nothing but the tarball (each its own directory, node_modules,
# browser and, for node-postgres, schema): they run side by side, each into its own log, printed
# in order once all are done.
#   examples/node: the package under Node, with no Rust toolchain on PATH
#   examples/web: the example page imports the web build of the same package (IndexedDB, in Chromium)
#   examples/vite-app: a fresh Vite app built from the tarball with no configuration, run in Chromium
#   examples/node-postgres: a Consensus on PostgreSQL through node-postgres, as PersistLocation.custom
part_pids=()
for part in package web vite node-postgres; do
  case "$part" in
    package) cmd=(bash examples/node/run.sh) ;;
    web) cmd=(node --test --test-reporter=tap examples/web/) ;;
    vite) cmd=(bash examples/vite-app/run.sh) ;;
    node-postgres) cmd=(bash examples/node-postgres/run.sh) ;;
  esac
  "${cmd[@]}" >"$logs/$part.log" 2>&1 &
  part_pids+=("$!")
done
part_failed=""
for i in 0 1 2 3; do
  part=$(echo package web vite node-postgres | cut -d' ' -f$((i + 1)))
  rc=0
  wait "${part_pids[$i]}" || rc=$?
  cat "$logs/$part.log"
  [ "$rc" = 0 ] || part_failed="$part_failed $part"
done
[ -z "$part_failed" ] || fail "the package layer's part(s)$part_failed failed"
passed_in() { grep -aoE '^# pass [0-9]+' "$1" | awk '{print $3}' | tail -n1; }
# Top-level test() calls, plus one test per bad( case of the bad-input list.
pkg_expected=$(( $(cat examples/node/test/*.test.mjs | grep -cE '^test\(' || true) \
  + $(cat examples/node/test/*.test.mjs | grep -cE '^\s*bad\(' || true) ))
pkg=$(passed_in "$logs/package.log")
pkg=${pkg:-0}
[ "$pkg" -ge "$pkg_expected" ] && [ "$pkg" -gt 0 ] \
  || fail "package layer passed $pkg tests; the test files declare $pkg_expected"
web_expected=$(cat examples/web/*.test.mjs | grep -cE '^test\(' || true)
# readme.test.mjs declares its IndexedDB visit test once per variant (seed 7, no seed) in a loop.
web_expected=$((web_expected + 1))
web=$(passed_in "$logs/web.log")
web=${web:-0}
[ "$web" -ge "$web_expected" ] && [ "$web" -gt 0 ] \
  || fail "example page passed $web tests; the test files declare $web_expected"
pkg=$((pkg + web)); pkg_expected=$((pkg_expected + web_expected))
vite_expected=$(grep -cE '^test\(' examples/vite-app/vite.test.mjs || true)
vite=$(passed_in "$logs/vite.log")
vite=${vite:-0}
[ "$vite" -ge "$vite_expected" ] && [ "$vite" -gt 0 ] \
  || fail "vite app passed $vite tests; the test file declares $vite_expected"
pkg=$((pkg + vite)); pkg_expected=$((pkg_expected + vite_expected))
pgjs_expected=$(cat examples/node-postgres/test/*.test.mjs | grep -cE '^test\(' || true)
pgjs=$(passed_in "$logs/node-postgres.log")
pgjs=${pgjs:-0}
[ "$pgjs" -ge "$pgjs_expected" ] && [ "$pgjs" -gt 0 ] \
  || fail "node-postgres example passed $pgjs tests; the test files declare $pgjs_expected"
pkg=$((pkg + pgjs)); pkg_expected=$((pkg_expected + pgjs_expected))
layer_done "package"

services_stop

total=$((native + browser + e2e + pkg + backends))
echo "[test] native $native (of $native_expected declared, plus doc tests), browser $browser (of $browser_expected declared), page $e2e (of $e2e_expected declared), package $pkg (of $pkg_expected declared), native backends $backends (of $backends_expected declared)"
echo "[test] times:${times%,}; total $((SECONDS - t_start))s"
sed 's/^/[test] /' "$logs/e2e-times.txt" 2>/dev/null || true
echo "test: $total passed, 0 failed"
