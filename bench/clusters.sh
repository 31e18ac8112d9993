#!/usr/bin/env bash
# bench/clusters.sh — two PostgreSQL clusters against one (ADR 0023, issue
# 47; `make bench-clusters`).
#
# Builds styx and styx-bench into a temporary directory, then, for each
# round and each mode, starts fresh private PostgreSQL clusters
# (scripts/pgtest.sh) and one styx node on them, and runs the cycle
# workload (produce, lease, complete) over two queues at once, one
# styx-bench process per queue with half the clients each:
#   one  both queues on one cluster (the node has --postgres-url only)
#   two  one queue per cluster (--postgres-cluster east=..., each queue
#        created with --cluster)
# Modes are interleaved (one two one two ...), each on fresh clusters. For
# each run it records the items/s of both processes summed, and each
# cluster's commits per second (pg_stat_database.xact_commit of the test
# database, before and after the run's measured window plus its warm-up).
# Writes bench/clusters-report.md (one row per run) and prints it.
#
# Environment:
#   BENCH_DURATION  measured time per run (default 10s)
#   BENCH_WARMUP    unmeasured warm-up per run (default 2s)
#   BENCH_ROUNDS    rounds of "one two" (default 2)
#   BENCH_CLIENTS   clients in all, split over the two queues (default 4)
#   BENCH_BATCHES   batch sizes (default "1 100")
#   BENCH_REPORT    where to write the report (default bench/clusters-report.md)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
ROUNDS=${BENCH_ROUNDS:-2}
CLIENTS=${BENCH_CLIENTS:-4}
BATCHES=${BENCH_BATCHES:-1 100}
REPORT=${BENCH_REPORT:-$ROOT/bench/clusters-report.md}
PER_QUEUE=$((CLIENTS / 2))
if ((PER_QUEUE < 1)); then
	echo "bench: BENCH_CLIENTS=$CLIENTS; want at least 2 (one per queue)" >&2
	exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-bench-clusters.XXXXXX")
chmod 711 "$TMP" # PostgreSQL runs as another user when we are root
PG_DIRS=()
SERVER_PID=""

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cleanup() {
	local d
	stop_server
	for d in "${PG_DIRS[@]}"; do
		"$ROOT/scripts/pgtest.sh" stop "$d" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "bench: building styx and styx-bench" >&2
(cd "$ROOT" && go build -o "$TMP/styx" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)

# start_cluster NAME starts a fresh cluster in $TMP/NAME and prints its DSN.
start_cluster() {
	local dir="$TMP/$1"
	PG_DIRS+=("$dir")
	"$ROOT/scripts/pgtest.sh" start "$dir" | tail -1
}

# commits DSN prints the test database's committed transactions so far.
commits() {
	psql "$1" -Atc "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
}

rows=()
run=0
for round in $(seq "$ROUNDS"); do
	for mode in one two; do
		run=$((run + 1))
		main=$(start_cluster "pg-$run-main")
		east=""
		args=(--storage postgres --postgres-url "$main")
		cluster2=main
		if [[ $mode == two ]]; then
			east=$(start_cluster "pg-$run-east")
			args+=(--postgres-cluster "east=$east")
			cluster2=east
		fi
		port=$(free_port)
		"$TMP/styx" server "${args[@]}" --listen "127.0.0.1:$port" --log-level warn >"$TMP/node-$run.log" 2>&1 &
		SERVER_PID=$!
		wait_healthy "$SERVER_PID" "$port" "$mode" "$TMP/node-$run.log"
		for batch in $BATCHES; do
			m0=$(commits "$main")
			e0=""
			[[ -z $east ]] || e0=$(commits "$east")
			t0=$(date +%s.%N)
			pids=()
			for q in 1 2; do
				c=main
				((q == 1)) || c=$cluster2
				"$TMP/styx-bench" --endpoint "http://127.0.0.1:$port" --workload cycle --clients "$PER_QUEUE" --batch "$batch" \
					--duration "$DURATION" --warmup "$WARMUP" --queue "q$q-b$batch-r$run" --cluster "$c" --json \
					>"$TMP/run-$run-$batch-$q.json" 2>"$TMP/run-$run-$batch-$q.err" &
				pids+=($!)
			done
			for p in "${pids[@]}"; do
				if ! wait "$p"; then
					cat "$TMP"/run-"$run"-"$batch"-*.err >&2
					exit 1
				fi
			done
			t1=$(date +%s.%N)
			m1=$(commits "$main")
			secs=$(echo "$t1 - $t0" | bc -l)
			a=$(jq -r .items_per_sec "$TMP/run-$run-$batch-1.json")
			b=$(jq -r .items_per_sec "$TMP/run-$run-$batch-2.json")
			mc=$(printf '%.0f' "$(echo "($m1 - $m0) / $secs" | bc -l)")
			ec="-"
			if [[ -n $east ]]; then
				e1=$(commits "$east")
				ec=$(printf '%.0f' "$(echo "($e1 - $e0) / $secs" | bc -l)")
			fi
			load=$(cut -d' ' -f1 /proc/loadavg)
			rows+=("| $round | $mode | $batch | $(printf '%.0f' "$(echo "$a + $b" | bc -l)") | $(printf '%.0f' "$a") | $(printf '%.0f' "$b") | $mc | $ec | $load |")
			echo "bench: round $round $mode batch $batch: ${rows[-1]}" >&2
		done
		stop_server
		for d in "$TMP/pg-$run-main" "$TMP/pg-$run-east"; do
			"$ROOT/scripts/pgtest.sh" stop "$d" 2>/dev/null || true
		done
	done
done

{
	echo "# Two PostgreSQL clusters against one (bench/clusters.sh)"
	echo
	echo "cycle, $CLIENTS clients in all ($PER_QUEUE per queue, two queues), $DURATION measured after $WARMUP of warm-up, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)."
	echo "one: both queues on one cluster; two: one queue per cluster. Commits/s: each cluster's xact_commit over the run (warm-up included)."
	echo
	echo "| round | mode | batch | items/s | queue 1 | queue 2 | main commits/s | east commits/s | load (1 min) |"
	echo "|---|---|--:|--:|--:|--:|--:|--:|--:|"
	printf '%s\n' "${rows[@]}"
} >"$REPORT"
cat "$REPORT"
