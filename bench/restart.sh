#!/usr/bin/env bash
# bench/restart.sh — memory per queued item and restart time with 1M items.
#
# Builds styx and styx-bench into a temporary directory and starts
# `styx server` (pebble, sync on) on a free loopback port, with a temporary
# data directory and --debug-listen (pprof) on a second port. It then
#
#  1. produces RESTART_ITEMS (default 1,000,000) items of 1 KiB random
#     payload into one queue as fast as it can (styx-bench produce,
#     --count, 4 clients, batch 1000) and checks the queue holds them all;
#  2. reports the server's RSS (VmRSS of /proc/PID/status) and Go heap
#     (HeapAlloc and HeapInuse from /debug/pprof/heap?debug=1) before and
#     after, and (RSS_after - RSS_before) / items: bytes of RSS per queued
#     item (payloads are written to pebble, so beyond pebble's bounded
#     memtables and block cache they live in the page cache, not in RSS);
#  3. kills the server with SIGKILL, starts it again on the same data
#     directory and measures the time from starting the process to the first
#     successful GET /health and to the first successful lease (batch_size 1,
#     an item returned), polling every 10 ms; then reports RSS and heap of
#     the restarted server holding the items.
#
# Finally it prints a table. The server and temporary files are removed on
# exit, including on failure or Ctrl-C.
#
# Environment:
#   RESTART_ITEMS    items to queue (default 1000000)
#   RESTART_CLIENTS  produce clients (default 4)
#   RESTART_BATCH    produce batch size (default 1000)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ITEMS=${RESTART_ITEMS:-1000000}
CLIENTS=${RESTART_CLIENTS:-4}
BATCH=${RESTART_BATCH:-1000}
QUEUE=restart-bench
POLL=0.01

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-restart.XXXXXX")
DATA="$TMP/data"
LOG="$TMP/server.log"
SERVER_PID=""

cleanup() {
	if [[ -n $SERVER_PID ]]; then
		kill -KILL "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# now_ns prints the wall clock in nanoseconds.
now_ns() { date +%s%N; }

# start_server starts the server in the background and records its start time
# (just before the fork) in START_NS.
start_server() {
	START_NS=$(now_ns)
	"$TMP/styx" server --storage pebble --sync=true --data-dir "$DATA" \
		--listen "127.0.0.1:$PORT" --debug-listen "127.0.0.1:$DEBUG_PORT" --log-level warn 2>>"$LOG" &
	SERVER_PID=$!
}

# alive fails, printing the server log, when the server has exited.
alive() {
	if ! kill -0 "$SERVER_PID" 2>/dev/null; then
		echo "restart: styx server exited:" >&2
		cat "$LOG" >&2
		exit 1
	fi
}

# health succeeds when GET /health answers 200.
health() { curl -fsS -o /dev/null --max-time 1 "$ENDPOINT/health" 2>/dev/null; }

# lease_one succeeds when a lease of one item returns an item.
lease_one() {
	local out
	out=$(curl -sS --max-time 2 -H 'Content-Type: application/json' \
		-d "{\"queue_name\":\"$QUEUE\",\"batch_size\":1,\"client_id\":\"restart-probe\",\"request_timeout\":\"20ms\"}" \
		"$ENDPOINT/v1/queue.lease" 2>/dev/null) || return 1
	[[ $out == *'"items"'* && $out == *'"id"'* ]]
}

# wait_until FN prints the milliseconds from START_NS to the first success of
# FN, polling every 10 ms (at most 120 s).
wait_until() {
	local deadline=$(($(now_ns) + 120000000000))
	until "$1"; do
		alive
		if (($(now_ns) > deadline)); then
			echo "restart: $1 did not succeed within 120s" >&2
			exit 1
		fi
		sleep "$POLL"
	done
	echo $((($(now_ns) - START_NS) / 1000000))
}

# rss_kb prints the server's VmRSS in KiB.
rss_kb() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$SERVER_PID/status"; }

# heap NAME prints the runtime.MemStats field NAME (bytes) from the pprof heap
# profile's trailer ("# HeapAlloc = 123").
heap() {
	curl -fsS --max-time 30 "http://127.0.0.1:$DEBUG_PORT/debug/pprof/heap?debug=1" |
		awk -v k="$1" '$1 == "#" && $2 == k && $3 == "=" && !done { print $4; done = 1 }'
}

# queued prints the number of items in the queue (sum of partition totals).
queued() {
	curl -fsS -H 'Content-Type: application/json' -d "{\"queue_name\":\"$QUEUE\"}" "$ENDPOINT/v1/queue.stats" |
		grep -o '"total":[^,}]*' | tr -dc '0-9\n' | awk '{ n += $1 } END { print n + 0 }'
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

echo "restart: building styx and styx-bench into $TMP" >&2
(cd "$ROOT" && go build -o "$TMP/styx" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)

PORT=$(free_port)
DEBUG_PORT=$(free_port "$PORT")
ENDPOINT="http://127.0.0.1:$PORT"
mkdir -p "$DATA"

echo "restart: pebble server on 127.0.0.1:$PORT (pprof on :$DEBUG_PORT), data in $DATA" >&2
start_server
first_health_ms=$(wait_until health)
sleep 1 # let start-up garbage settle
rss_before=$(rss_kb)
heap_before=$(heap HeapAlloc)
inuse_before=$(heap HeapInuse)

echo "restart: producing $ITEMS items of 1 KiB ($CLIENTS clients, batch $BATCH)" >&2
"$TMP/styx-bench" --endpoint "$ENDPOINT" --server-pid "$SERVER_PID" --workload produce \
	--clients "$CLIENTS" --batch "$BATCH" --payload 1024 --count "$ITEMS" --warmup 0 --duration 1h \
	--queue "$QUEUE" --keep --json >"$TMP/produce.json"
produce_s=$(grep -o '"seconds":[0-9.e+-]*' "$TMP/produce.json" | head -1 | cut -d: -f2)
produce_rate=$(grep -o '"items_per_sec":[0-9.e+-]*' "$TMP/produce.json" | head -1 | cut -d: -f2)
produce_errors=$(grep -o '"errors":[0-9]*' "$TMP/produce.json" | head -1 | cut -d: -f2)
depth=$(queued)
if [[ $depth != "$ITEMS" ]]; then
	echo "restart: the queue holds $depth items, want $ITEMS" >&2
	exit 1
fi
rss_after=$(rss_kb)
heap_after=$(heap HeapAlloc)
inuse_after=$(heap HeapInuse)
data_mb=$(du -sm "$DATA" | cut -f1)

echo "restart: kill -9 $SERVER_PID and restart on the same data directory" >&2
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
start_server
restart_health_ms=$(wait_until health)
restart_lease_ms=$(wait_until lease_one)
sleep 1
rss_restarted=$(rss_kb)
heap_restarted=$(heap HeapAlloc)
inuse_restarted=$(heap HeapInuse)
depth_restarted=$(queued)

per_item() { awk -v a="$1" -v b="$2" -v n="$ITEMS" 'BEGIN { printf "%.0f", (a - b) / n }'; }

cat <<EOF
# Styx restart benchmark

$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty'), $(go version | cut -d' ' -f3), $(nproc) CPUs.
pebble, sync on; $ITEMS items of 1 KiB random payload in one queue ($CLIENTS clients, batch $BATCH); data dir ${data_mb} MB after produce.

| measure | value |
|---|--:|
| produce $ITEMS items | $(printf '%.1f' "$produce_s") s ($(printf '%.0f' "$produce_rate") items/s, $produce_errors errors) |
| server RSS before / after produce | $(mib $((rss_before * 1024))) / $(mib $((rss_after * 1024))) MiB |
| Go HeapAlloc before / after produce | $(mib "$heap_before") / $(mib "$heap_after") MiB |
| Go HeapInuse before / after produce | $(mib "$inuse_before") / $(mib "$inuse_after") MiB |
| RSS per queued item, (RSS_after - RSS_before) / items | $(per_item $((rss_after * 1024)) $((rss_before * 1024))) B |
| HeapAlloc per queued item | $(per_item "$heap_after" "$heap_before") B |
| first start: process start → /health | $first_health_ms ms |
| restart after kill -9: process start → /health | $restart_health_ms ms |
| restart after kill -9: process start → first lease (batch 1) | $restart_lease_ms ms |
| restarted server: RSS / HeapAlloc / HeapInuse | $(mib $((rss_restarted * 1024))) / $(mib "$heap_restarted") / $(mib "$inuse_restarted") MiB |
| restarted server: RSS per queued item, (RSS - RSS_before) / items | $(per_item $((rss_restarted * 1024)) $((rss_before * 1024))) B |
| items in the queue after restart | $depth_restarted |
EOF
if [[ -s $LOG ]]; then
	echo
	echo "Server log (warnings and errors):"
	echo
	echo '```'
	cat "$LOG"
	echo '```'
fi
