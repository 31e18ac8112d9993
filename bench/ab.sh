#!/usr/bin/env bash
# bench/ab.sh — A/B benchmark of two Styx builds in one run, interleaved.
#
# Builds the server at BENCH_OLD_REV (default main) and from the working
# tree, starts one server of each per mode (both at once, on their own data
# directories and ports), then for BENCH_ROUNDS rounds runs every workload of
# the matrix against the old server and the new one in turn (alternating which
# goes first), so that both see the same machine noise. Prints a table per
# workload and mode: every run's items/s, the medians and new/old, and the
# server CPU time per 1000 items. Servers and temporary files are removed on
# exit.
#
# Environment:
#   BENCH_OLD_REV   git revision of the baseline (default main)
#   BENCH_MODES     any of "sync nosync memory postgres" (default "sync nosync
#                   memory"; postgres starts a throwaway PostgreSQL per build
#                   with scripts/pgtest.sh)
#   BENCH_ROUNDS    rounds (default 3)
#   BENCH_DURATION  measured time per run (default 5s)
#   BENCH_WARMUP    warm-up per run (default 1s)
#   BENCH_MATRIX    workloads, ";"-separated "workload clients batch"
#                   (default "produce 4 1;cycle 4 1;cycle 16 1;produce 4 100;cycle 4 100")
#   BENCH_REPORT    where to write the table (default bench/ab-report.md)
#   BENCH_PROFILE   when set (to a number of seconds, e.g. 6), a last pass runs
#                   every workload once more per mode and build while taking a
#                   CPU profile of that many seconds from the server's
#                   --debug-listen port, and appends each profile's cumulative
#                   CPU per item and its top 10 functions by own CPU to the
#                   report; the profiles stay in BENCH_PROFILE_DIR (default
#                   bench/profiles) as MODE-WORKLOAD-cCLIENTS-bBATCH-WHICH.pprof
#   BENCH_FRESH     when set, every run (but postgres's) is made on a server
#                   started for it on a new data directory: what a server does
#                   in its first seconds after a start. Otherwise
#                   each server serves every run of its mode.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OLD_REV=${BENCH_OLD_REV:-main}
MODES=${BENCH_MODES:-sync nosync memory}
ROUNDS=${BENCH_ROUNDS:-3}
DURATION=${BENCH_DURATION:-5s}
WARMUP=${BENCH_WARMUP:-1s}
MATRIX=${BENCH_MATRIX:-produce 4 1;cycle 4 1;cycle 16 1;produce 4 100;cycle 4 100}
REPORT=${BENCH_REPORT:-$ROOT/bench/ab-report.md}
PROFILE=${BENCH_PROFILE:-}
PROFILE_DIR=${BENCH_PROFILE_DIR:-$ROOT/bench/profiles}
FRESH=${BENCH_FRESH:-}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-ab.XXXXXX")
chmod 755 "$TMP" # PostgreSQL runs as its own user and must reach $TMP/pg-*
PIDS=()
cleanup() {
	# shellcheck source=bench/lib.sh
	((${#PIDS[@]} == 0)) || stop_pids "${PIDS[@]}"
	for pg in "$TMP"/pg-*; do
		[[ -d $pg ]] && "$ROOT/scripts/pgtest.sh" stop "$pg" >/dev/null 2>&1
	done
	rm -rf "$TMP"
}
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "ab: building old ($OLD_REV) and new (working tree) into $TMP" >&2
mkdir -p "$TMP/old-src"
git -C "$ROOT" archive "$OLD_REV" | tar -x -C "$TMP/old-src"
(cd "$TMP/old-src" && go build -o "$TMP/styx-old" ./cmd/styx)
(cd "$ROOT" && go build -o "$TMP/styx-new" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)

declare -A PORT PID DEBUG ARGS
# start_server WHICH MODE starts server WHICH (old or new) of MODE on a new
# data directory and a free port.
start_server() {
	local which=$1 mode=$2 port debug=()
	port=$(free_port "${PORT[*]:-} ${DEBUG[*]:-}")
	if [[ -n $PROFILE ]]; then
		DEBUG[$which-$mode]=$(free_port "${PORT[*]:-} ${DEBUG[*]:-} $port")
		debug=(--debug-listen "127.0.0.1:${DEBUG[$which-$mode]}")
	fi
	rm -rf "$TMP/data-$which-$mode"
	mkdir -p "$TMP/data-$which-$mode"
	# shellcheck disable=SC2086 # ARGS holds the mode's arguments, split
	"$TMP/styx-$which" server ${ARGS[$which-$mode]} "${debug[@]}" --data-dir "$TMP/data-$which-$mode" \
		--listen "127.0.0.1:$port" --log-level warn 2>"$TMP/server-$which-$mode.log" &
	PID[$which-$mode]=$!
	PIDS+=("${PID[$which-$mode]}")
	wait_healthy "${PID[$which-$mode]}" "$port" "$which $mode" "$TMP/server-$which-$mode.log"
	PORT[$which-$mode]=$port
}

for mode in $MODES; do
	case $mode in
	sync) args="--storage pebble --sync=true" ;;
	nosync) args="--storage pebble --sync=false" ;;
	memory) args="--storage memory" ;;
	postgres) args="--storage postgres" ;;
	*) echo "ab: unknown mode $mode" >&2; exit 2 ;;
	esac
	for which in old new; do
		if [[ $mode == postgres ]]; then
			# One database per build, so that neither sees the other's queues.
			args="--storage postgres --postgres-url $("$ROOT/scripts/pgtest.sh" start "$TMP/pg-$which" | tail -n1)"
		fi
		ARGS[$which-$mode]=$args
		start_server "$which" "$mode"
	done
done

# bench_run WHICH MODE DURATION runs the row in $workload, $clients and
# $batch against server WHICH of MODE and prints its JSON report.
bench_run() {
	"$TMP/styx-bench" --endpoint "http://127.0.0.1:${PORT[$1-$2]}" --server-pid "${PID[$1-$2]}" \
		--workload "$workload" --clients "$clients" --batch "$batch" \
		--duration "$3" --warmup "$WARMUP" --label "$1 $2" --json
}

: >"$TMP/runs.jsonl"
IFS=';' read -r -a rows <<<"$MATRIX"
for round in $(seq "$ROUNDS"); do
	order="old new"
	((round % 2 == 0)) && order="new old"
	for row in "${rows[@]}"; do
		read -r workload clients batch <<<"$row"
		for mode in $MODES; do
			for which in $order; do
				echo "ab: round $round: $which $mode $workload c$clients b$batch" >&2
				if [[ -n $FRESH && $mode != postgres ]]; then
					stop_pids "${PID[$which-$mode]}"
					start_server "$which" "$mode"
				fi
				bench_run "$which" "$mode" "$DURATION" >>"$TMP/runs.jsonl" || echo "ab: run failed" >&2
			done
		done
	done
done

# The profile pass: each run lasts the warm-up, the profile and a second
# more; the profile starts after the warm-up, so it sees the measured load
# only. Its runs are not in the table above.
if [[ -n $PROFILE ]]; then
	mkdir -p "$PROFILE_DIR"
	: >"$TMP/profiles.md"
	for row in "${rows[@]}"; do
		read -r workload clients batch <<<"$row"
		for mode in $MODES; do
			for which in old new; do
				name="$mode-$workload-c$clients-b$batch-$which"
				echo "ab: profile: $which $mode $workload c$clients b$batch" >&2
				bench_run "$which" "$mode" "$((PROFILE + 1))s" >"$TMP/$name.json" &
				bench=$!
				case $WARMUP in # a Go duration of ms or s
				*ms) sleep "$(awk "BEGIN { print ${WARMUP%ms} / 1000 }")" ;;
				*) sleep "${WARMUP%s}" ;;
				esac
				curl -fsS --max-time $((PROFILE + 30)) -o "$PROFILE_DIR/$name.pprof" \
					"http://127.0.0.1:${DEBUG[$which-$mode]}/debug/pprof/profile?seconds=$PROFILE" ||
					echo "ab: profile of $name failed" >&2
				wait "$bench" || echo "ab: run failed" >&2
				"$TMP/styx-bench" --profile-summary "$PROFILE_DIR/$name.pprof" --profile-run "$TMP/$name.json" \
					--label "$which $mode $workload c$clients b$batch" >>"$TMP/profiles.md" ||
					echo "ab: summary of $name failed" >&2
			done
		done
	done
fi

{
	echo "# Styx A/B: $OLD_REV ($(git -C "$ROOT" rev-parse --short "$OLD_REV")) vs working tree ($(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty'))"
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $ROUNDS rounds interleaved, $WARMUP warm-up + $DURATION per run${FRESH:+ (each on a server started for it on a new data directory)}, $(nproc) CPUs, load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	"$TMP/styx-bench" --compare "$TMP/runs.jsonl"
	if [[ -n $PROFILE ]]; then
		echo
		echo "## CPU profiles ($PROFILE s per run, after the warm-up; files in ${PROFILE_DIR#"$ROOT"/})"
		echo
		cat "$TMP/profiles.md"
	fi
} >"$REPORT"
cat "$REPORT"
