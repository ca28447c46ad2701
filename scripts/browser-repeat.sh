#!/usr/bin/env bash
# Runs the whole browser layer (every tests/browser_*.rs, headless Chromium through wasm-pack)
# N times in a row and reports how many runs passed.
#
#   bash scripts/browser-repeat.sh [N]        (default 20)
#
# Every run must start from a fresh Chromium profile, so that a run cannot pass on what an earlier
# one left behind (IndexedDB databases, caches). wasm-pack's runner starts a new chromedriver
# session for each test file, and chromedriver gives each session a new temporary
# --user-data-dir unless webdriver.json names one (ours does not). This script does not take that
# on trust: while each run goes, it samples the command lines of the Chromium processes, records
# every --user-data-dir it sees (of the Chromium processes that descend from that run's wasm-pack,
# not other programs' browsers), and checks at the end that no directory served two runs, that
# none existed before the run that used it, and that every run had a profile of its own for each
# test file.
#
# Logs go to target/browser-repeat/run-<i>.log; the summary line is the last one printed.
set -uo pipefail

runs="${1:-20}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-120}"

if grep -q -- "--user-data-dir" webdriver.json 2>/dev/null; then
  echo "[browser-repeat] webdriver.json fixes a --user-data-dir: runs would share a profile" >&2
  exit 2
fi

# The browser tests are one binary (tests/browser.rs, every tests/browser_*.rs a module of it).
tests=(--test browser)
out="target/browser-repeat"
rm -rf "$out"
mkdir -p "$out"

# Build once, so that the runs only run (and a build failure is not counted as N failed runs).
if ! cargo build --target wasm32-unknown-unknown --tests >"$out/build.log" 2>&1; then
  echo "[browser-repeat] the browser tests do not build: see $out/build.log" >&2
  exit 2
fi

sample_profiles() { # root-pid run file: appends "run dir" for every --user-data-dir of a Chromium
  # that descends from root-pid (this run's wasm-pack; other programs' browsers are not ours),
  # until killed
  while :; do
    ps -eo pid=,ppid=,args= 2>/dev/null | awk -v root="$1" -v run="$2" '
      { pid = $1; ppid[pid] = $2; $1 = ""; $2 = ""; args[pid] = $0 }
      END {
        for (p in args) {
          if (args[p] !~ /^ *\/usr\/lib\/chromium\/chromium /) continue
          q = p
          for (depth = 0; depth < 32 && q != "" && q != root && q != 1; depth++) q = ppid[q]
          if (q != root) continue
          if (match(args[p], /--user-data-dir=[^ ]*/))
            print run, substr(args[p], RSTART + 16, RLENGTH - 16)
        }
      }' >>"$3"
    sleep 0.2
  done
}

passed=0
failed_runs=()
: >"$out/profiles.txt"
for i in $(seq 1 "$runs"); do
  log="$out/run-$i.log"
  before="$out/dirs-before-$i.txt"
  ls -d /tmp/*hromium* /tmp/*Chrome* 2>/dev/null | sort >"$before"
  # Sample the profiles of the Chromium processes of this run (chromedriver's are
  # /tmp/org.chromium.Chromium.scoped_dir.XXXXXX).
  wasm-pack test --mode no-install --headless --chrome --chromedriver /usr/bin/chromedriver \
    "${tests[@]}" >"$log" 2>&1 &
  runner=$!
  sample_profiles "$runner" "$i" "$out/profiles-$i.txt" &
  sampler=$!
  wait "$runner"
  status=$?
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  touch "$out/profiles-$i.txt"
  sort -u "$out/profiles-$i.txt" >>"$out/profiles.txt"
  files=$(grep -c "^test result:" "$log")
  ok=$(grep -c "^test result: ok" "$log")
  if [ "$status" -eq 0 ] && [ "$files" -eq $(( ${#tests[@]} / 2 )) ] && [ "$ok" -eq "$files" ]; then
    passed=$((passed + 1))
    echo "[browser-repeat] run $i: ok ($ok test files)"
  else
    failed_runs+=("$i")
    echo "[browser-repeat] run $i: FAILED (exit $status, $ok of ${files} test files ok; see $log)"
    grep -E "^test .* FAILED|panicked at" "$log" | head -5
  fi
done

# Fresh profiles: every directory seen served exactly one run, and none existed before its run.
profiles_total=$(awk '{print $2}' "$out/profiles.txt" | wc -l)
profiles_distinct=$(awk '{print $2}' "$out/profiles.txt" | sort -u | wc -l)
reused=$(awk '{print $2}' "$out/profiles.txt" | sort | uniq -d | wc -l)
preexisting=0
while read -r run dir; do
  if grep -qxF -- "$dir" "$out/dirs-before-$run.txt"; then
    preexisting=$((preexisting + 1))
  fi
done <"$out/profiles.txt"
short=0
for i in $(seq 1 "$runs"); do
  n=$(awk -v r="$i" '$1 == r' "$out/profiles.txt" | wc -l)
  if [ "$n" -lt $(( ${#tests[@]} / 2 )) ]; then
    short=$((short + 1))
  fi
done
fresh="yes"
if [ "$profiles_total" -eq 0 ] || [ "$reused" -ne 0 ] || [ "$preexisting" -ne 0 ] || [ "$short" -ne 0 ]; then
  fresh="NO"
fi
echo "[browser-repeat] profiles: $profiles_distinct distinct --user-data-dir seen over $runs runs ($(( ${#tests[@]} / 2 )) test files a run), $reused reused across runs, $preexisting existing before their run, $short runs with fewer profiles than test files: fresh=$fresh"
echo "[browser-repeat] browser layer passed $passed/$runs runs${failed_runs[*]:+ (failed: ${failed_runs[*]})}"
[ "$passed" -eq "$runs" ] && [ "$fresh" = "yes" ]
