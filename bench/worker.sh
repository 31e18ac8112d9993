#!/usr/bin/env bash
# bench/worker.sh — the worker library (package worker) against hand-written
# consumers, on one default durable server.
#
# Builds styx and styx-bench into a temporary directory, starts ONE
# `styx server --storage pebble` (sync on, the default) on a free loopback
# port, and runs against it, one after another on the same server, for each
# of BENCH_ROUNDS rounds:
#   cycle   16 clients, batch 1 (produce, lease, complete; hand-written)
#   drain   16 clients, batch 1, BENCH_PREFILL prefilled items (lease,
#           complete; hand-written)
#   worker  one worker.Worker, Concurrency 16, no-op handler, the same
#           prefill
# then writes bench/worker-report.md (a markdown table, styx-bench's CPU
# time per run, and the ratios worker / cycle and worker / drain per round)
# and prints it. The server and temporary files are removed on exit,
# including on failure or Ctrl-C.
#
# Environment:
#   BENCH_DURATION  measured time of cycle (default 10s)
#   BENCH_WARMUP    unmeasured warm-up of cycle (default 2s)
#   BENCH_PREFILL   items prefilled for drain and worker (default 20000)
#   BENCH_LIMIT     upper bound on the measured time of drain and worker
#                   (default 2m; a run that hits it reports what it did)
#   BENCH_ROUNDS    rounds of the three runs (default 1)
#   BENCH_REPORT    where to write the report (default bench/worker-report.md)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
PREFILL=${BENCH_PREFILL:-20000}
LIMIT=${BENCH_LIMIT:-2m}
ROUNDS=${BENCH_ROUNDS:-1}
REPORT=${BENCH_REPORT:-$ROOT/bench/worker-report.md}

# The runs of a round: workload and its flags.
RUNS=(
	"cycle --clients 16 --batch 1 --duration $DURATION --warmup $WARMUP"
	"drain --clients 16 --batch 1 --prefill $PREFILL --duration $LIMIT"
	"worker --clients 16 --prefill $PREFILL --duration $LIMIT"
)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-bench-worker.XXXXXX")
SERVER_PID=""

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
stop_server_on_exit

# ratios prints, per round, items/s of worker / cycle and worker / drain
# from the JSON lines in $1 (three per round, in the order of RUNS).
ratios() {
	awk '
		{
			match($0, /"workload":"[^"]*"/); w = substr($0, RSTART + 12, RLENGTH - 13)
			match($0, /"items_per_sec":[^,}]*/); r[w] = substr($0, RSTART + 16, RLENGTH - 16) + 0
			if (w == "worker") {
				n++
				printf "| %d | %.0f | %.0f | %.0f | %.2f× | %.2f× |\n", n, r["cycle"], r["drain"], r["worker"],
					(r["cycle"] > 0 ? r["worker"] / r["cycle"] : 0), (r["drain"] > 0 ? r["worker"] / r["drain"] : 0)
			}
		}' "$1"
}

echo "bench: building styx and styx-bench into $TMP" >&2
(cd "$ROOT" && go build -o "$TMP/styx" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)

# Another process may take the free port first (other tests run on the
# machine): try up to three ports.
for attempt in 1 2 3; do
	port=$(free_port)
	echo "bench: pebble server (sync on) on 127.0.0.1:$port" >&2
	rm -rf "$TMP/data" && mkdir -p "$TMP/data"
	"$TMP/styx" server --storage pebble --data-dir "$TMP/data" --listen "127.0.0.1:$port" --log-level warn 2>"$TMP/server.log" &
	SERVER_PID=$!
	if wait_healthy "$SERVER_PID" "$port" pebble "$TMP/server.log"; then
		break
	fi
	stop_server
	((attempt < 3)) || exit 1
done

failures=0
: >"$TMP/runs.jsonl"
: >"$TMP/runs.err"
: >"$TMP/cpu.md"
for round in $(seq "$ROUNDS"); do
	for entry in "${RUNS[@]}"; do
		read -r workload flags <<<"$entry"
		tag="[round $round $workload]"
		echo "bench: round $round: $workload $flags" >&2
		# In a subshell whose `times` then reports styx-bench's CPU time.
		# shellcheck disable=SC2086 # $flags holds separate flags
		if ! (
			rc=0
			"$TMP/styx-bench" --endpoint "http://127.0.0.1:$port" --server-pid "$SERVER_PID" \
				--workload "$workload" $flags --label pebble --json \
				>>"$TMP/runs.jsonl" 2>"$TMP/run.stderr" || rc=$?
			times >"$TMP/run.times" # its own, then its children's: styx-bench's
			exit "$rc"
		); then
			echo "run failed" >>"$TMP/run.stderr"
			failures=$((failures + 1))
		fi
		sed "s/^/$tag /" "$TMP/run.stderr" >&2
		# The prefill notice is not a warning.
		grep -v '^styx-bench: prefilling ' "$TMP/run.stderr" | sed "s/^/$tag /" >>"$TMP/runs.err" || true
		tail -n1 "$TMP/run.times" | awk -v r="$round" -v w="$workload" '
			function sec(t) { sub(/s$/, "", t); split(t, p, "m"); return p[1] * 60 + p[2] }
			{ printf "| %d | %s | %.2f |\n", r, w, sec($1) + sec($2) }' >>"$TMP/cpu.md"
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			echo "bench: the server has exited; stopping" >&2
			failures=$((failures + 1))
			break 2
		fi
	done
done
stop_server
if [[ -s $TMP/server.log ]]; then
	sed "s/^/[server] /" "$TMP/server.log" >>"$TMP/runs.err"
fi

{
	echo "# Styx benchmark: the worker library against hand-written consumers"
	echo
	echo "Generated $(date -u '+%Y-%m-%d %H:%M UTC') by bench/worker.sh at commit" \
		"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')," \
		"$(go version | cut -d' ' -f3), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || echo unknown))."
	echo
	echo "One pebble server (sync on) runs every row, one after another; 1 KiB random payloads; one queue with"
	echo "1 partition per run; styx-bench and the server share the machine's CPUs. \`cycle\`: 16 clients each"
	echo "produce one item, lease one, complete it (${WARMUP} warm-up, ${DURATION} measured). \`drain\`: ${PREFILL} items"
	echo "prefilled, then 16 clients lease one item and complete it until the queue is empty, measured from the"
	echo "first lease to the last completion. \`worker\`: the same prefill, then one worker.Worker (Concurrency 16,"
	echo "a handler that returns nil) until the server has acknowledged ${PREFILL} completions, measured from its"
	echo "start; its requests are the library's own, so it has no request latencies and no empty-lease count."
	echo "items/s counts completed items. Server CPU-s is the server's CPU time over the measured window."
	echo
	"$TMP/styx-bench" --markdown "$TMP/runs.jsonl"
	echo
	echo "Ratios of items/s:"
	echo
	echo "| round | cycle 16×1 | drain 16×1 | worker 16 | worker / cycle | worker / drain |"
	echo "|--:|--:|--:|--:|--:|--:|"
	ratios "$TMP/runs.jsonl"
	echo
	echo "styx-bench's own CPU time (user+system) over each whole run, prefill and queue setup included:"
	echo
	echo "| round | workload | styx-bench CPU-s |"
	echo "|--:|---|--:|"
	cat "$TMP/cpu.md"
	errors_section
} >"$REPORT"

report_done "$failures" "$REPORT"
