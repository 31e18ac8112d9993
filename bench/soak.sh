#!/usr/bin/env bash
# bench/soak.sh — a long mixed load on a local Styx server (`make soak`).
#
# Builds styx and styx-bench into a temporary directory, starts
# `styx server` (pebble, the default storage, sync on) on a free loopback
# port with a temporary data directory, and runs styx-bench's soak workload
# against it for SOAK_DURATION: one producer at SOAK_RATE items/s in
# batches of 1..SOAK_BATCH items, SOAK_CLIENTS consumers that complete most
# items, fail 10% with a counted attempt (max_attempts 3) and dead-letter 2%,
# and a dead.redrive of the dead-letter queue every SOAK_REDRIVE_EVERY.
# Every SOAK_INTERVAL it adds a row (the server's RSS, goroutines from
# /metrics, open files, items moved, p99 of produce and of lease+complete)
# to bench/soak-report.md and bench/soak.csv, and ends with a verdict: after
# the first SOAK_WARMUP_INTERVALS intervals, do the peaks of RSS and
# goroutines in the last SOAK_VERDICT_WINDOW intervals stay within the
# tolerances of their peaks in the first SOAK_VERDICT_WINDOW? The server
# is stopped with SIGTERM at the end, and it and the temporary files are
# removed on exit, including on failure or Ctrl-C. Exits 1 when the soak
# failed or was not flat.
#
# Environment:
#   SOAK_DURATION          how long (default 30m)
#   SOAK_INTERVAL          a row every (default 1m)
#   SOAK_RATE              produce rate in items/s (default 300)
#   SOAK_BATCH             largest produce and lease batch (default 50)
#   SOAK_CLIENTS           consumers (default 4)
#   SOAK_REDRIVE_EVERY     redrive period (default 2m; 0: never)
#   SOAK_WARMUP_INTERVALS  intervals of warm-up (default 10: at the default load Pebble's memtables and block cache take about 7 minutes to fill)
#   SOAK_VERDICT_WINDOW    intervals whose peaks the verdict compares (default 3)
#   SOAK_RSS_TOLERANCE     flat RSS: within this fraction (default 0.2: ±20%)
#   SOAK_GOROUTINE_TOLERANCE  flat goroutines: within this fraction (default 0.1)
#   SOAK_REPORT            Markdown report (default bench/soak-report.md)
#   SOAK_CSV               CSV of the rows (default bench/soak.csv)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${SOAK_DURATION:-30m}
INTERVAL=${SOAK_INTERVAL:-1m}
RATE=${SOAK_RATE:-300}
BATCH=${SOAK_BATCH:-50}
CLIENTS=${SOAK_CLIENTS:-4}
REDRIVE_EVERY=${SOAK_REDRIVE_EVERY:-2m}
WARMUP_INTERVALS=${SOAK_WARMUP_INTERVALS:-10}
VERDICT_WINDOW=${SOAK_VERDICT_WINDOW:-3}
RSS_TOLERANCE=${SOAK_RSS_TOLERANCE:-0.2}
GOROUTINE_TOLERANCE=${SOAK_GOROUTINE_TOLERANCE:-0.1}
REPORT=${SOAK_REPORT:-$ROOT/bench/soak-report.md}
CSV=${SOAK_CSV:-$ROOT/bench/soak.csv}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-soak.XXXXXX")
SERVER_PID=""

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
stop_server_on_exit

echo "soak: building styx and styx-bench into $TMP" >&2
(cd "$ROOT" && go build -o "$TMP/styx" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)

PORT=$(free_port)
LOG="$TMP/server.log"
mkdir -p "$TMP/data"
"$TMP/styx" server --storage pebble --data-dir "$TMP/data" --listen "127.0.0.1:$PORT" --log-level warn 2>"$LOG" &
SERVER_PID=$!
wait_healthy "$SERVER_PID" "$PORT" pebble "$LOG"
echo "soak: styx server (pid $SERVER_PID) on 127.0.0.1:$PORT, data in $TMP/data; $DURATION, a row every $INTERVAL" >&2

LABEL="Generated $(date -u '+%Y-%m-%d %H:%M UTC') by \`make soak\` (bench/soak.sh) at commit \
$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty'), \
$(go version | cut -d' ' -f3), $(nproc) CPUs; \`styx server --storage pebble\` (sync on), styx-bench on the same machine."

status=0
"$TMP/styx-bench" --workload soak --endpoint "http://127.0.0.1:$PORT" --server-pid "$SERVER_PID" \
	--duration "$DURATION" --interval "$INTERVAL" --rate "$RATE" --batch "$BATCH" --clients "$CLIENTS" \
	--redrive-every "$REDRIVE_EVERY" --warmup-intervals "$WARMUP_INTERVALS" --verdict-window "$VERDICT_WINDOW" \
	--rss-tolerance "$RSS_TOLERANCE" --goroutine-tolerance "$GOROUTINE_TOLERANCE" \
	--label "$LABEL" --soak-report "$REPORT" --soak-csv "$CSV" || status=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
	echo "soak: the styx server exited during the soak:" >&2
	cat "$LOG" >&2
	status=1
fi
stop_server
if [[ -s $LOG ]]; then
	{
		echo
		echo "## Server log (warnings and errors)"
		echo
		echo '```'
		tail -n 50 "$LOG"
		echo '```'
	} >>"$REPORT"
fi
[[ -f $REPORT ]] && cat "$REPORT"
echo >&2
echo "soak: report written to $REPORT and $CSV" >&2
exit "$status"
