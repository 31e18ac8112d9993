#!/usr/bin/env bash
# bench/postgres.sh — end-to-end benchmark of Styx on PostgreSQL, with one
# and with two nodes sharing the database (`make bench-postgres`).
#
# Builds styx and styx-bench into a temporary directory, then for each node
# count starts a fresh private PostgreSQL cluster (scripts/pgtest.sh, in the
# temporary directory), starts that many `styx server --storage postgres`
# processes on free loopback ports against it, runs a fixed matrix of
# styx-bench workloads with the clients spread over all the nodes
# (comma-separated --endpoint: client i uses node i mod n), stops the nodes
# and the cluster, and finally writes bench/postgres-report.md (markdown
# tables per node count) and prints it. Besides styx-bench's figures it
# records the CPU used by the nodes, by PostgreSQL (postmaster and
# backends) and by the whole machine over each styx-bench run. Servers,
# PostgreSQL and temporary files are removed on exit, including on failure
# or Ctrl-C; when a run fails, the tail of every node's log and of
# PostgreSQL's log is printed (and kept in the report).
#
# Environment:
#   BENCH_DURATION  measured time per run (default 10s; the matrix then takes
#                   about 2 minutes)
#   BENCH_WARMUP    unmeasured warm-up per run (default 2s)
#   BENCH_NODES     node counts to run (default "1 2")
#   BENCH_REPORT    where to write the report (default bench/postgres-report.md)
#   BENCH_OLD_REV   a git revision to compare with (A/B in one run, as
#                   bench/ab.sh for the embedded backends): its styx is built
#                   too, and each node count N also runs as "N@base" (on a
#                   fresh cluster, just before N) with that build
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
NODE_COUNTS=${BENCH_NODES:-1 2}
REPORT=${BENCH_REPORT:-$ROOT/bench/postgres-report.md}
BASE=${BENCH_OLD_REV:-}
if [[ -n $BASE ]]; then
	with_base=""
	for n in $NODE_COUNTS; do with_base+="$n@base $n "; done
	NODE_COUNTS=$with_base
fi

# The matrix: workload, clients, batch.
MATRIX=(
	"produce 4 1"
	"produce 4 100"
	"cycle 4 1"
	"cycle 4 100"
)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-bench-pg.XXXXXX")
# As root, pgtest.sh runs PostgreSQL as another user, which must be able to
# reach its directory inside $TMP.
chmod 711 "$TMP"
NODE_PIDS=()
PG_DIRS=()
PG_DIR=""
TICKS=$(getconf CLK_TCK)

# stop_nodes ends the running nodes (SIGTERM, then SIGKILL after 20s).
stop_nodes() {
	stop_pids "${NODE_PIDS[@]}"
	NODE_PIDS=()
}

cleanup() {
	local d
	stop_nodes
	for d in "${PG_DIRS[@]}"; do
		"$ROOT/scripts/pgtest.sh" stop "$d" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# start_pg NODES starts a fresh PostgreSQL cluster in $TMP/pg-NODES and sets
# PG_DIR and DSN.
start_pg() {
	PG_DIR="$TMP/pg-$1"
	PG_DIRS+=("$PG_DIR")
	if ! DSN=$("$ROOT/scripts/pgtest.sh" start "$PG_DIR" 2>"$TMP/pgtest-$1.log" | tail -n1) || [[ -z $DSN ]]; then
		echo "bench: PostgreSQL did not start:" >&2
		cat "$TMP/pgtest-$1.log" >&2
		return 1
	fi
}

# start_node NODES I PORT starts node I of NODES on PORT against $DSN and
# waits for its GET /health.
start_node() {
	local log="$TMP/node-$1-$2.log" pid
	local bin="$TMP/styx"
	if [[ $1 == *@base ]]; then bin="$TMP/styx-base"; fi
	(cd "$TMP" && exec "$bin" server --storage postgres --postgres-url "$DSN" \
		--listen "127.0.0.1:$3" --log-level warn) 2>"$log" &
	pid=$!
	NODE_PIDS+=("$pid")
	wait_healthy "$pid" "$3" "node $2" "$log"
}

# show_logs NODES prints the tail of every node's log and of PostgreSQL's.
show_logs() {
	local f
	for f in "$TMP"/node-"$1"-*.log "$PG_DIR/log"; do
		echo "--- tail of ${f#"$TMP"/}"
		tail -n 20 "$f" 2>&1 || true
	done
}

# cpu_sample prints the wall clock (ns) and the CPU time (clock ticks) used
# so far by PostgreSQL, by the nodes and by the whole machine. PostgreSQL's
# is the postmaster's own and its exited children's (cutime, cstime) plus
# its live children's (backends, background processes); the machine's is
# user+nice+system+irq+softirq of /proc/stat.
cpu_sample() {
	local pm
	pm=$(head -n1 "$PG_DIR/data/postmaster.pid")
	echo "$(date +%s%N)" \
		"$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v pm="$pm" -v nodes=" ${NODE_PIDS[*]} " '
			{ s = $0; sub(/.*[)] /, "", s); split(s, f, " ") }
			$1 == pm { pg += f[12] + f[13] + f[14] + f[15] }
			f[2] == pm { pg += f[12] + f[13] }
			index(nodes, " " $1 " ") { styx += f[12] + f[13] }
			END { print pg + 0, styx + 0 }')" \
		"$(awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat)"
}

# cpu_row WORKLOAD CLIENTS BATCH BEFORE AFTER TIMES prints a markdown row of
# the cores used between two cpu_samples; TIMES is styx-bench's user and
# system time as `times` prints it ("0m1.250s 0m0.310s").
cpu_row() {
	awk -v w="$1" -v c="$2" -v b="$3" -v hz="$TICKS" -v before="$4" -v after="$5" -v times="$6" '
		function sec(t) { sub(/s$/, "", t); split(t, p, "m"); return p[1] * 60 + p[2] }
		BEGIN {
			split(before, x, " "); split(after, y, " "); split(times, t, " ")
			s = (y[1] - x[1]) / 1e9
			pg = (y[2] - x[2]) / hz / s; styx = (y[3] - x[3]) / hz / s; busy = (y[4] - x[4]) / hz / s
			gen = (sec(t[1]) + sec(t[2])) / s
			printf "| %s | %d | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", w, c, b, s, styx, pg, gen, busy - styx - pg - gen, busy
		}'
}

echo "bench: building styx and styx-bench into $TMP" >&2
(cd "$ROOT" && go build -o "$TMP/styx" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)
if [[ -n $BASE ]]; then
	echo "bench: building styx at $BASE into $TMP/styx-base" >&2
	git -C "$ROOT" worktree add -q --detach "$TMP/base" "$BASE"
	(cd "$TMP/base" && go build -o "$TMP/styx-base" ./cmd/styx)
	git -C "$ROOT" worktree remove --force "$TMP/base"
fi

failures=0
stopped=0
RAN=() # node counts run, in order
for nodes in $NODE_COUNTS; do
	build=""
	if [[ $nodes == *@base ]]; then build=" (base)"; fi
	label="postgres, ${nodes%@base} node$([[ ${nodes%@base} == 1 ]] || echo s)$build"
	echo "bench: $label: starting PostgreSQL" >&2
	start_pg "$nodes"
	echo "bench: $label: PostgreSQL at $DSN" >&2
	endpoints=""
	for i in $(seq "${nodes%@base}"); do
		port=$(free_port)
		echo "bench: $label: node $i on 127.0.0.1:$port" >&2
		start_node "$nodes" "$i" "$port"
		endpoints+="${endpoints:+,}http://127.0.0.1:$port"
	done
	pids=$(IFS=,; echo "${NODE_PIDS[*]}")
	RAN+=("$nodes")
	: >"$TMP/$nodes.jsonl"
	: >"$TMP/$nodes.err"
	: >"$TMP/$nodes.cpu"
	for entry in "${MATRIX[@]}"; do
		read -r workload clients batch <<<"$entry"
		tag="[$nodes node(s) $workload c$clients b$batch]"
		echo "bench: $label: $workload, $clients clients, batch $batch" >&2
		before=$(cpu_sample)
		alive=1
		# In a subshell whose `times` then reports styx-bench's CPU time.
		if ! (
			rc=0
			"$TMP/styx-bench" --endpoint "$endpoints" --server-pid "$pids" \
				--workload "$workload" --clients "$clients" --batch "$batch" \
				--duration "$DURATION" --warmup "$WARMUP" --label "$label" --json \
				>>"$TMP/$nodes.jsonl" 2>"$TMP/run.stderr" || rc=$?
			times >"$TMP/run.times" # its own, then its children's: styx-bench's
			exit "$rc"
		); then
			echo "run failed" >>"$TMP/run.stderr"
			failures=$((failures + 1))
		fi
		cpu_row "$workload" "$clients" "$batch" "$before" "$(cpu_sample)" "$(tail -n1 "$TMP/run.times")" >>"$TMP/$nodes.cpu"
		for pid in "${NODE_PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null || { echo "node pid $pid has exited" >>"$TMP/run.stderr"; alive=0; }
		done
		if [[ -s $TMP/run.stderr ]]; then
			{
				sed "s/^/$tag /" "$TMP/run.stderr"
				show_logs "$nodes" | sed "s/^/$tag /"
			} | tee -a "$TMP/$nodes.err" >&2
		fi
		# A node that exits has crashed, or was interrupted with the script
		# (Ctrl-C reaches the whole process group; styx-bench handles SIGINT
		# itself, so bash does not run the INT trap): stop here.
		if ((alive == 0)); then
			echo "bench: $label: a node has exited; stopping" >&2
			failures=$((failures + 1))
			stopped=1
			break
		fi
	done
	stop_nodes
	for f in "$TMP"/node-"$nodes"-*.log; do
		if [[ -s $f ]]; then
			sed "s/^/[$nodes node(s) server ${f##*/}] /" "$f" >>"$TMP/$nodes.err"
		fi
	done
	# shellcheck source=/dev/null
	PG_VERSION=$(source "$PG_DIR/env" && "$(dirname "$PGTEST_PGCTL")/postgres" --version)
	"$ROOT/scripts/pgtest.sh" stop "$PG_DIR" 2>/dev/null
	((stopped == 0)) || break
done

{
	echo "# Styx benchmark: PostgreSQL, one and two nodes"
	echo
	echo "Generated $(date -u '+%Y-%m-%d %H:%M UTC') by \`make bench-postgres\` (bench/postgres.sh) at commit" \
		"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')," \
		"$(go version | cut -d' ' -f3), ${PG_VERSION:-PostgreSQL}, $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || echo unknown))."
	echo
	echo "Each node count gets a fresh local PostgreSQL cluster (scripts/pgtest.sh: fsync on, synchronous_commit on,"
	echo "shared_buffers 128MB) and that many \`styx server --storage postgres\` processes on it; styx-bench spreads"
	echo "its clients over the nodes (client i on node i mod n; the queue is created and deleted through the first)."
	echo "PostgreSQL, the node(s) and styx-bench all share the machine's $(nproc) CPUs."
	echo "Each run: ${WARMUP} warm-up, then ${DURATION} measured; 1 KiB random payloads; one queue with 1 partition."
	echo "Latencies are per request (HDR histograms, milliseconds); items/s counts produced (produce) or completed"
	echo "(cycle) items. Server CPU-s is the user+system CPU time of the node processes together over the measured"
	echo "window, RSS their sum at its end. The CPU table covers each whole styx-bench run (queue setup, warm-up,"
	echo "measured window, queue deletion), in cores busy on average: the nodes, PostgreSQL (postmaster and"
	echo "backends), styx-bench, the rest (the kernel's own threads, e.g. for disk flushes, and anything else"
	echo "running), and the whole machine (user+nice+system+irq+softirq of /proc/stat). The kernel accounts these"
	echo "counters differently, so \"other\" within ±0.1 of 0 means nothing else ran."
	for nodes in "${RAN[@]}"; do
		echo
		build=""
		if [[ $nodes == *@base ]]; then build=" (styx at $BASE)"; fi
		echo "## ${nodes%@base} node$([[ ${nodes%@base} == 1 ]] || echo s)$build"
		echo
		"$TMP/styx-bench" --markdown "$TMP/$nodes.jsonl"
		echo
		echo "| workload | clients | batch | run s | styx cores | PostgreSQL cores | styx-bench cores | other cores | machine busy cores |"
		echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
		cat "$TMP/$nodes.cpu"
	done
	errors_section
} >"$REPORT"

report_done "$failures" "$REPORT"
