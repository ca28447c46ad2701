#!/usr/bin/env bash
# compare_and_append per second on PostgreSQL (issue 18), with 1 and 4 processes, beside a raw
# single-row INSERT of the same bytes and pgbench's simple-update, all in one run against one
# throwaway cluster (scripts/services.sh; fsync off, loopback). Measures; asserts nothing.
# Like with like: the raw INSERT, PostgresConsensus's compare_and_set and pgbench all commit on
# the same cluster (fsync off for all of them); the bench's counts line shows the Blob calls a
# compare_and_append adds (a small update is inlined in the state diff: no blob part written).
# Each bench line runs 20 interleaved rounds and prints every kind's median rate, the median of
# the per-round ratios, and each kind's median latency of one call.
# The "ceiling" line is the raw INSERT against the conditional insert alone: a compare_and_append
# sends that statement, so its ratio to the raw INSERT can never exceed the ceiling.
#
#   bash scripts/bench-postgres.sh [COUNT]      (COUNT compare_and_appends per process, default 2000)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
count="${1:-2000}"
# shellcheck source=scripts/services.sh
source scripts/services.sh
services_start
cargo build --profile native-release --bin persistcli >/dev/null
bin=target/native-release/persistcli
blob_dir=$(mktemp -d)
trap 'rm -rf "$blob_dir"; services_stop' EXIT
url="$PERSIST_TEST_POSTGRES_URL"

echo "== 1 process: compare_and_append beside a raw INSERT of the same bytes (interleaved rounds)"
"$bin" --consensus "$url" --blob "file://$blob_dir/one" --seed 1 bench --shard s-bench-1 --count "$count" --rounds 20

echo "== 1 process, --command-turns false: its own background commands race its appends (as before turns)"
"$bin" --consensus "$url" --blob "file://$blob_dir/race" --seed 3 --command-turns false \
  bench --shard s-bench-race --count "$count" --rounds 20

echo "== 1 process, --rollup-threshold 128 (the original's, and branch maint3's default)"
"$bin" --consensus "$url" --blob "file://$blob_dir/r128" --seed 4 --rollup-threshold 128 \
  bench --shard s-bench-r128 --count "$count" --rounds 20

echo "== 1 process, maintenance off (--gc false --compaction false): the write path alone"
"$bin" --consensus "$url" --blob "file://$blob_dir/alone" --seed 2 --gc false --compaction false \
  bench --shard s-bench-alone --count "$count" --rounds 20

echo "== 4 processes on one shard (each retries on a lost race; acked CaA counted)"
start=$(date +%s%N)
pids=()
for i in 1 2 3 4; do
  "$bin" --consensus "$url" --blob "file://$blob_dir/four" --seed $((10 + i)) --progress-every 1000000 \
    writer --shard s-bench-4 --name "b$i" --count "$count" >"$blob_dir/w$i.out" 2>/dev/null &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
end=$(date +%s%N)
ms=$(( (end - start) / 1000000 ))
mism=$(cat "$blob_dir"/w*.out | awk '{s += $4} END {print s + 0}')
echo "caa x4: $((4 * count)) acked in $ms ms = $(( 4 * count * 1000 / (ms > 0 ? ms : 1) ))/s (lost races retried: $mism; includes process start)"

echo "== 4 processes, each on its own shard"
start=$(date +%s%N)
pids=()
for i in 1 2 3 4; do
  "$bin" --consensus "$url" --blob "file://$blob_dir/sep" --seed $((20 + i)) --progress-every 1000000 \
    writer --shard "s-bench-sep-$i" --name "c$i" --count "$count" >/dev/null 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
end=$(date +%s%N)
ms=$(( (end - start) / 1000000 ))
echo "caa x4 shards: $((4 * count)) in $ms ms = $(( 4 * count * 1000 / (ms > 0 ? ms : 1) ))/s (includes process start)"

echo "== pgbench simple-update (-N), 1 and 4 clients, 10 s each"
export PGPASSWORD
PGPASSWORD=$(echo "$url" | sed -E 's#^postgres://[^:]+:([^@]+)@.*#\1#')
host_port=$(echo "$url" | sed -E 's#^postgres://[^@]+@([^/]+)/.*#\1#')
pg_host=${host_port%:*}; pg_port=${host_port##*:}
"$PERSIST_TEST_PG_BIN/pgbench" -q -i -s 1 -h "$pg_host" -p "$pg_port" -U persist persist >/dev/null 2>&1
for c in 1 4; do
  "$PERSIST_TEST_PG_BIN/pgbench" -N -c "$c" -j "$c" -T 10 -h "$pg_host" -p "$pg_port" -U persist persist 2>/dev/null \
    | grep -E '^tps' | sed "s/^/pgbench simple-update, $c client(s): /"
done
