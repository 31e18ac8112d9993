#!/usr/bin/env bash
# bench/run.sh — end-to-end benchmark of a local Styx server (`make bench`).
#
# Builds styx and styx-bench into a temporary directory, measures t_fsync
# (styx-bench --fsync-probe: synced 4 KiB writes in the temporary
# directory's file system), then starts one `styx server` per storage backend
# (pebble with sync on, pebble with --sync=false, memory) on free loopback
# ports, runs a fixed matrix of styx-bench workloads, each row on every
# backend in turn (so that the ratios compare runs made under the same
# machine load), stops the servers, and finally writes bench/report.md and
# prints it: first sync on,
# sync off and memory side by side with issue 13's ratios (on/off, the limit
# C / (t_nosync + t_fsync) with the t_nosync and t_fsync beside it, on/limit,
# the items per fsync of the log with sync on, the goal of each row and
# whether it is met, the server's CPU per 1,000 items; styx-bench --summary),
# then a markdown table per backend (with items/fsync, read from the server's
# styx_storage_syncs_total, and server CPU ms per 1,000 items). Servers and
# temporary files are removed on exit, including on failure or Ctrl-C.
#
# Environment:
#   BENCH_DURATION  measured time per run (default 10s; the matrix then takes
#                   about 5 minutes)
#   BENCH_WARMUP    unmeasured warm-up per run (default 2s)
#   BENCH_BACKENDS  backends to run (default "pebble pebble-nosync memory")
#   BENCH_ROUNDS    runs of each row on each backend (default 1; the
#                   side-by-side table shows medians)
#   BENCH_REPORT    where to write the report (default bench/report.md)
#   BENCH_MATRIX    rows to run instead of the matrix below, "workload clients
#                   batch [styx-bench flags]" separated by ";"
#   BENCH_PEERS     0 skips bench/peers.sh (Styx beside River, RabbitMQ and
#                   NATS; bench/peers-report.md), which runs last otherwise
#                   (its own variables: see bench/peers.sh)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
BACKENDS=${BENCH_BACKENDS:-pebble pebble-nosync memory}
ROUNDS=${BENCH_ROUNDS:-1}
REPORT=${BENCH_REPORT:-$ROOT/bench/report.md}

# The matrix: workload, clients, batch, extra flags.
MATRIX=(
	"produce 4 1"
	"produce 4 100"
	"cycle 4 1"
	"cycle 4 100"
	"cycle 16 1"
	"cycle 4 10"
	"cycle 4 10 --groups 1000 --ordered"
	"fair 4 10 --fair-groups=false"
	"fair 4 10"
	"dead 4 100"
	"latency 4 1 --rate 1000"
)

if [[ -n ${BENCH_MATRIX:-} ]]; then
	IFS=';' read -r -a MATRIX <<<"$BENCH_MATRIX"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-bench.XXXXXX")
PIDS=()

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap '((${#PIDS[@]} == 0)) || stop_pids "${PIDS[@]}"; rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

declare -A PORT PID

# start_server BACKEND PORT starts a server, waits for GET /health and
# records its port and pid.
start_server() {
	local backend=$1 port=$2 data="$TMP/data-$1" log="$TMP/server-$1.log"
	local args=(server --data-dir "$data" --listen "127.0.0.1:$port" --log-level warn)
	case $backend in
	pebble) args+=(--storage pebble --sync=true) ;;
	pebble-nosync) args+=(--storage pebble --sync=false) ;;
	*) args+=(--storage "$backend") ;;
	esac
	mkdir -p "$data"
	"$TMP/styx" "${args[@]}" 2>"$log" &
	local pid=$!
	PIDS+=("$pid")
	wait_healthy "$pid" "$port" "$backend" "$log"
	PORT[$backend]=$port
	PID[$backend]=$pid
}

echo "bench: building styx and styx-bench into $TMP" >&2
(cd "$ROOT" && go build -o "$TMP/styx" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)

echo "bench: measuring t_fsync in $TMP" >&2
"$TMP/styx-bench" --fsync-probe "$TMP" >"$TMP/fsync.json"
FSYNC_MS=$(sed -n 's/.*"p50_ms":\([0-9.]*\).*/\1/p' "$TMP/fsync.json")
FSYNC_MEAN_MS=$(sed -n 's/.*"mean_ms":\([0-9.]*\).*/\1/p' "$TMP/fsync.json")

# Every backend's server runs from the start, and each row of the matrix runs
# on the backends one after another (ROUNDS times), so that the side-by-side
# ratios compare runs minutes apart at most, under the same machine load.
failures=0
for backend in $BACKENDS; do
	port=$(free_port "${PORT[*]:-}")
	echo "bench: $backend server on 127.0.0.1:$port" >&2
	start_server "$backend" "$port"
	: >"$TMP/$backend.jsonl"
	: >"$TMP/$backend.err"
done
for entry in "${MATRIX[@]}"; do
	read -r workload clients batch extra <<<"$entry"
	[[ -z $workload ]] && continue
	for round in $(seq "$ROUNDS"); do
		for backend in $BACKENDS; do
			echo "bench: $backend: $workload, $clients clients, batch $batch ${extra:-} (round $round)" >&2
			# shellcheck disable=SC2086 # $extra holds separate flags
			if ! "$TMP/styx-bench" --endpoint "http://127.0.0.1:${PORT[$backend]}" --server-pid "${PID[$backend]}" \
				--workload "$workload" --clients "$clients" --batch "$batch" ${extra:-} \
				--duration "$DURATION" --warmup "$WARMUP" --label "$backend" --json \
				>>"$TMP/$backend.jsonl" 2> >(sed "s/^/[$backend $workload c$clients b$batch] /" | tee -a "$TMP/$backend.err" >&2); then
				echo "[$backend $workload c$clients b$batch] run failed" | tee -a "$TMP/$backend.err" >&2
				failures=$((failures + 1))
			fi
		done
	done
done
stop_pids "${PIDS[@]}"
PIDS=()
for backend in $BACKENDS; do
	if [[ -s $TMP/server-$backend.log ]]; then
		sed "s/^/[$backend server] /" "$TMP/server-$backend.log" >>"$TMP/$backend.err"
	fi
done
sleep 0.2 # let the stderr tees finish

{
	echo "# Styx benchmark"
	echo
	echo "Generated $(date -u '+%Y-%m-%d %H:%M UTC') by \`make bench\` (bench/run.sh) at commit" \
		"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')," \
		"$(go version | cut -d' ' -f3), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || echo unknown))."
	echo
	echo "Each run: ${WARMUP} warm-up, then ${DURATION} measured; 1 KiB random payloads; one queue with 1 partition;"
	echo "protobuf over HTTP on loopback, with styx-bench and the server sharing the machine's CPUs."
	echo "Latencies are per request (HDR histograms, milliseconds); items/s counts items, not requests:"
	echo "produced (produce), completed (cycle, latency) or arrived in the dead-letter queue (dead: half the"
	echo "clients produce, half lease and fail every item; max_attempts 1). \`latency\` produces open-loop at the"
	echo "given rate and reports produce→lease latency from the send time stamped in each payload. Server CPU-s is"
	echo "the server's user+system CPU time over the measured window (CPU ms/1k items: per 1,000 items); RSS is at its"
	echo "end. items/fsync is items per fsync of the server's write-ahead log (styx_storage_syncs_total): – on memory,"
	echo "which never syncs; with --sync=false only the log's rotations sync it, hence the large figures. A lease's latency includes"
	echo "its long-poll wait when the queue is momentarily empty (notably in \`latency\`); leases that found nothing"
	echo "within 1s (454) are counted as empty leases, not errors. \`cycle 1000 groups ordered\` gives every item one of"
	echo "1,000 groups on an ordered queue (issue 37's goal: within 20 % of \`cycle\` at the same batch); \`fair\` drains a"
	echo "hot group's backlog of 20,000 items produced before 100 small groups of 10, and gives when the groups finished"
	echo "(\`no groups\`: the same items without their group, the FIFO baseline)."
	echo
	echo "## Sync on, sync off and memory side by side"
	echo
	echo "t_fsync: median ${FSYNC_MS} ms, mean ${FSYNC_MEAN_MS} ms over 500 synced 4 KiB writes (styx-bench --fsync-probe); the limit uses the median."
	cat "$TMP"/*.jsonl >"$TMP/all.runs"
	"$TMP/styx-bench" --summary "$TMP/all.runs" --fsync-ms "$FSYNC_MS"
	for backend in $BACKENDS; do
		echo
		case $backend in
		pebble) echo "## pebble (sync on)" ;;
		pebble-nosync) echo "## pebble, --sync=false" ;;
		*) echo "## $backend" ;;
		esac
		echo
		"$TMP/styx-bench" --markdown "$TMP/$backend.jsonl"
	done
	errors_section
} >"$REPORT"

# Then Styx beside its peers (River, RabbitMQ, NATS), unless BENCH_PEERS=0;
# it prints and writes its own report.
if [[ ${BENCH_PEERS:-1} != 0 ]]; then
	echo "bench: Styx beside its peers (bench/peers.sh; BENCH_PEERS=0 skips this)" >&2
	if ! "$ROOT/bench/peers.sh"; then
		echo "bench: bench/peers.sh failed" >&2
		failures=$((failures + 1))
	fi
fi

report_done "$failures" "$REPORT"
