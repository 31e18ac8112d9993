#!/usr/bin/env bash
# bench/postgres.sh — end-to-end benchmark of Styx on PostgreSQL, with one
# or more nodes sharing the database (`make bench-postgres`; the ceiling of
# one primary, 1, 2 and 4 nodes: `make bench-postgres-ceiling`).
#
# Builds styx and styx-bench into a temporary directory, then for each node
# count starts a fresh private PostgreSQL cluster (scripts/pgtest.sh, in the
# temporary directory), starts that many `styx server --storage postgres`
# processes on free loopback ports against it, runs a fixed matrix of
# styx-bench workloads with the clients spread over all the nodes
# (comma-separated --endpoint: client i uses node i mod n), stops the nodes
# and the cluster, and finally writes bench/postgres-report.md (markdown
# tables per node count) and prints it. Besides styx-bench's figures it
# records the CPU used by each node, by PostgreSQL (postmaster and
# backends), by styx-bench and by the whole machine over each styx-bench
# run, and the report opens with one table of every row (items/s, p50/p99,
# those cores and what bounds the row: see limit_of). Servers,
# PostgreSQL and temporary files are removed on exit, including on failure
# or Ctrl-C; when a run fails, the tail of every node's log and of
# PostgreSQL's log is printed (and kept in the report).
#
# Environment:
#   BENCH_DURATION  measured time per run (default 10s; the matrix then takes
#                   about 2 minutes)
#   BENCH_WARMUP    unmeasured warm-up per run (default 2s)
#   BENCH_NODES     node counts to run (default "1 2")
#   BENCH_MATRIX    the rows, "workload clients batch [styx-bench flags]"
#                   separated by ";"
#                   (default "produce 4 1; produce 4 100; cycle 4 1;
#                   cycle 4 100")
#   BENCH_ROUNDS    how many times to run the node counts, interleaved
#                   (default 1; 2 runs "1 2 4 1 2 4", each on a fresh
#                   cluster), so that each row is measured that many times
#                   at different moments of a noisy machine
#   BENCH_REPORT    where to write the report (default bench/postgres-report.md)
#   BENCH_STANDBY   "sync": each cluster gets a streaming standby
#                   (pg_basebackup -R) that every commit waits for
#                   (synchronous_standby_names), as a primary that must
#                   survive its loss runs; "async": a standby no commit
#                   waits for; empty (the default): none
#   BENCH_OLD_REV   a git revision to compare with (A/B in one run, as
#                   bench/ab.sh for the embedded backends): its styx is built
#                   too, and each node count N also runs as "N@base" (on a
#                   fresh cluster, just before N) with that build
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
NODE_COUNTS=${BENCH_NODES:-1 2}
ROUNDS=${BENCH_ROUNDS:-1}
REPORT=${BENCH_REPORT:-$ROOT/bench/postgres-report.md}
BASE=${BENCH_OLD_REV:-}
BENCH_STANDBY=${BENCH_STANDBY:-}
if [[ -n $BENCH_STANDBY && $BENCH_STANDBY != sync && $BENCH_STANDBY != async ]]; then
	echo "bench: BENCH_STANDBY=$BENCH_STANDBY is not sync, async or empty" >&2
	exit 2
fi
if [[ -n $BASE ]]; then
	with_base=""
	for n in $NODE_COUNTS; do with_base+="$n@base $n "; done
	NODE_COUNTS=$with_base
fi
if ! [[ $ROUNDS =~ ^[1-9][0-9]*$ ]]; then
	echo "bench: BENCH_ROUNDS=$ROUNDS is not a positive number" >&2
	exit 2
fi
# RUNS lists one key per cluster to start, in order: the node count (with
# @base for BENCH_OLD_REV's build), then .rR for round R > 1.
RUNS=()
for r in $(seq "$ROUNDS"); do
	for n in $NODE_COUNTS; do
		RUNS+=("$n$( ((r == 1)) || echo ".r$r")")
	done
done

# The matrix: workload, clients, batch.
MATRIX=()
IFS=';' read -r -a rows <<<"${BENCH_MATRIX:-produce 4 1; produce 4 100; cycle 4 1; cycle 4 100}"
for entry in "${rows[@]}"; do
	read -r workload clients batch extra <<<"$entry"
	[[ -z $workload ]] && continue
	if ! [[ $clients =~ ^[1-9][0-9]*$ && $batch =~ ^[1-9][0-9]*$ ]]; then
		echo "bench: BENCH_MATRIX row \"$entry\" is not \"workload clients batch [flags]\"" >&2
		exit 2
	fi
	MATRIX+=("$workload $clients $batch${extra:+ $extra}")
done

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

# start_standby NODES gives the cluster of NODES a streaming standby
# (BENCH_STANDBY) on a free port, in $TMP/pg-NODES-standby (stopped with the
# clusters), and with "sync" waits until the primary waits for it.
start_standby() {
	local sdir="$TMP/pg-$1-standby" pport sport state
	mkdir -p "$sdir"
	PG_DIRS+=("$sdir")
	pport=$(sed -E 's|.*@[^:]+:([0-9]+)/.*|\1|' <<<"$DSN")
	sport=$(free_port)
	(
		# shellcheck source=/dev/null
		source "$PG_DIR/env"
		as() { if [[ -n $PGTEST_USER ]]; then runuser -u "$PGTEST_USER" -- "$@"; else "$@"; fi; }
		[[ -z $PGTEST_USER ]] || chown "$PGTEST_USER" "$sdir"
		bin=$(dirname "$PGTEST_PGCTL")
		opts="-c listen_addresses=127.0.0.1 -p $sport -k $sdir -c fsync=on -c max_connections=200 -c shared_buffers=128MB -c cluster_name=bench_standby"
		printf 'PGTEST_PGCTL=%s\nPGTEST_DATA=%s\nPGTEST_USER=%s\nPGTEST_OPTS="%s"\nPGTEST_LOG=%s\n' \
			"$PGTEST_PGCTL" "$sdir/data" "$PGTEST_USER" "$opts" "$sdir/log" >"$sdir/env"
		cd /
		as "$bin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U styx -D "$sdir/data" -R -X stream -c fast -C -S bench_standby
		as "$PGTEST_PGCTL" -D "$sdir/data" -w -t 60 -o "$opts" -l "$sdir/log" start >/dev/null
	) >"$TMP/standby-$1.log" 2>&1 || { echo "bench: the standby did not start:" >&2; cat "$TMP/standby-$1.log" >&2; return 1; }
	if [[ $BENCH_STANDBY == sync ]]; then
		psql -q "$DSN" -c "ALTER SYSTEM SET synchronous_standby_names = 'bench_standby'" -c "SELECT pg_reload_conf()" >/dev/null
	fi
	for _ in $(seq 300); do
		state=$(psql -qtA "$DSN" -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'bench_standby' AND state = 'streaming'")
		if [[ $state == "$BENCH_STANDBY" ]]; then return 0; fi
		sleep 0.1
	done
	echo "bench: the standby is not $BENCH_STANDBY (pg_stat_replication: '$state')" >&2
	return 1
}

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
	if [[ $1 == *@base* ]]; then bin="$TMP/styx-base"; fi
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
# so far by the whole machine, by PostgreSQL, by the nodes together and by
# each node (in NODE_PIDS order). PostgreSQL's is the postmaster's own and
# its exited children's (cutime, cstime) plus its live children's
# (backends, background processes); the machine's is
# user+nice+system+irq+softirq of /proc/stat.
cpu_sample() {
	local pm
	pm=$(head -n1 "$PG_DIR/data/postmaster.pid")
	echo "$(date +%s%N)" \
		"$(awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat)" \
		"$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v pm="$pm" -v nodes="${NODE_PIDS[*]}" '
			BEGIN { k = split(nodes, np, " "); for (i = 1; i <= k; i++) at[np[i]] = i }
			{ s = $0; sub(/.*[)] /, "", s); split(s, f, " ") }
			$1 == pm { pg += f[12] + f[13] + f[14] + f[15] }
			f[2] == pm { pg += f[12] + f[13] }
			$1 in at { n[at[$1]] = f[12] + f[13]; styx += f[12] + f[13] }
			END { printf "%d %d", pg, styx; for (i = 1; i <= k; i++) printf " %d", n[i]; print "" }')"
}

# cpu_cores BEFORE AFTER TIMES prints the cores used between two
# cpu_samples, space-separated: seconds, nodes, PostgreSQL, styx-bench,
# other, machine busy, then each node's joined by "+" (e.g. 0.41+0.39);
# TIMES is styx-bench's user and system time as `times` prints it
# ("0m1.250s 0m0.310s").
cpu_cores() {
	awk -v hz="$TICKS" -v before="$1" -v after="$2" -v times="$3" '
		function sec(t) { sub(/s$/, "", t); split(t, p, "m"); return p[1] * 60 + p[2] }
		BEGIN {
			k = split(before, x, " "); split(after, y, " "); split(times, t, " ")
			s = (y[1] - x[1]) / 1e9
			busy = (y[2] - x[2]) / hz / s; pg = (y[3] - x[3]) / hz / s; styx = (y[4] - x[4]) / hz / s
			gen = (sec(t[1]) + sec(t[2])) / s
			each = ""
			for (i = 5; i <= k; i++) each = each (i > 5 ? "+" : "") sprintf("%.2f", (y[i] - x[i]) / hz / s)
			printf "%.1f %.2f %.2f %.2f %.2f %.2f %s\n", s, styx, pg, gen, busy - styx - pg - gen, busy, each
		}'
}

# limit_of STYX PG OTHER BUSY prints what bounds a row, from its cores:
# "CPU" when the machine was at least 90 % busy, naming the larger of
# PostgreSQL's and the nodes' shares, and the cores other work took when
# that was at least 0.2; otherwise "latency", the wait of each node's one
# transaction at a time for its round trips and its commit's WAL flush.
limit_of() {
	awk -v styx="$1" -v pg="$2" -v other="$3" -v busy="$4" -v cpus="$(nproc)" 'BEGIN {
		if (busy < 0.9 * cpus) { printf "latency (%.1f of %d cores busy)\n", busy, cpus; exit }
		printf "CPU: %s first", (pg >= styx ? "PostgreSQL" : "styx")
		if (other >= 0.2) printf ", other work %.1f", other
		print ""
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

# count_of KEY prints the node count of a run key ("4@base.r2": 4).
count_of() { echo "${1%%[@.]*}"; }

# round_of KEY prints the round of a run key ("4@base.r2": 2).
round_of() { if [[ $1 == *.r* ]]; then echo "${1##*.r}"; else echo 1; fi; }

# title_of KEY prints a run key as a heading ("4 nodes (styx at REV), round 2").
title_of() {
	local n
	n=$(count_of "$1")
	echo "$n node$([[ $n == 1 ]] || echo s)$([[ $1 == *@base* ]] && echo " (styx at $BASE)")$( ((ROUNDS == 1)) || echo ", round $(round_of "$1")")"
}

# summary_row KEY CORES OK prints the opening table's row of the matrix row
# in $entry, run on KEY: sort keys first (workload, batch, clients, build,
# node count, round), then "|" and the markdown row, from the last line of
# $TMP/KEY.jsonl (when OK is "ok"; else the row says it failed) and
# cpu_cores' line CORES.
summary_row() {
	local n r b w c batch flags s styx pg gen other busy each
	n=$(count_of "$1")
	r=$(round_of "$1")
	b=$([[ $1 == *@base* ]] && echo base || echo new)
	read -r w c batch flags <<<"$entry"
	w+=${flags:+ $flags}
	read -r s styx pg gen other busy each <<<"$2"
	printf '%s %06d %06d %s %03d %03d|' "${w// /_}" "$batch" "$c" "$b" "$n" "$r"
	printf '| %s | %d × %d | %d%s | %d | ' "$w" "$c" "$batch" "$n" "$([[ $b == base ]] && echo " (base)")" "$r"
	if [[ $3 == ok ]]; then
		tail -n1 "$TMP/$1.jsonl" | jq -r '
			def lat(k): if .requests[k] then "\(.requests[k].p50_ms * 100 | round / 100) / \(.requests[k].p99_ms * 100 | round / 100)" else "–" end;
			"\(.items_per_sec | round) | \(lat("produce")) | \(lat("lease")) | \(lat("complete")) | " ' | tr -d '\n'
	else
		printf 'failed | – | – | – | '
	fi
	printf '%s (%s) | %s | %s | %s | %s | %s |\n' "$styx" "$each" "$pg" "$gen" "$other" "$busy" "$(limit_of "$styx" "$pg" "$other" "$busy")"
}

failures=0
stopped=0
RAN=() # run keys run, in order
: >"$TMP/summary"
for nodes in "${RUNS[@]}"; do
	build=""
	if [[ $nodes == *@base* ]]; then build=" (base)"; fi
	count=$(count_of "$nodes")
	label="postgres, $count node$([[ $count == 1 ]] || echo s)$build$( ((ROUNDS == 1)) || echo ", round $(round_of "$nodes")")"
	echo "bench: $label: starting PostgreSQL" >&2
	start_pg "$nodes"
	if [[ -n $BENCH_STANDBY ]]; then start_standby "$nodes"; fi
	echo "bench: $label: PostgreSQL at $DSN${BENCH_STANDBY:+ with a $BENCH_STANDBY standby}" >&2
	endpoints=""
	for i in $(seq "$count"); do
		# Another process may take the free port before the node binds it
		# (other jobs on the machine): then try another, up to 3 times.
		for try in 1 2 3; do
			port=$(free_port)
			echo "bench: $label: node $i on 127.0.0.1:$port" >&2
			if start_node "$nodes" "$i" "$port" 2>"$TMP/start.err"; then break; fi
			unset 'NODE_PIDS[-1]'
			if ((try == 3)) || ! grep -q 'address already in use' "$TMP/start.err"; then
				cat "$TMP/start.err" >&2
				exit 1
			fi
			echo "bench: $label: port $port was taken meanwhile; trying another" >&2
		done
		endpoints+="${endpoints:+,}http://127.0.0.1:$port"
	done
	pids=$(IFS=,; echo "${NODE_PIDS[*]}")
	RAN+=("$nodes")
	: >"$TMP/$nodes.jsonl"
	: >"$TMP/$nodes.err"
	: >"$TMP/$nodes.cpu"
	for entry in "${MATRIX[@]}"; do
		read -r workload clients batch extra <<<"$entry"
		tag="[$nodes node(s) $workload c$clients b$batch${extra:+ $extra}]"
		echo "bench: $label: $workload, $clients clients, batch $batch ${extra:-}" >&2
		before=$(cpu_sample)
		lines=$(wc -l <"$TMP/$nodes.jsonl")
		alive=1
		# In a subshell whose `times` then reports styx-bench's CPU time.
		if ! (
			rc=0
			# shellcheck disable=SC2086 # $extra holds separate flags
			"$TMP/styx-bench" --endpoint "$endpoints" --server-pid "$pids" \
				--workload "$workload" --clients "$clients" --batch "$batch" ${extra:-} \
				--duration "$DURATION" --warmup "$WARMUP" --label "$label" --json \
				>>"$TMP/$nodes.jsonl" 2>"$TMP/run.stderr" || rc=$?
			times >"$TMP/run.times" # its own, then its children's: styx-bench's
			exit "$rc"
		); then
			echo "run failed" >>"$TMP/run.stderr"
			failures=$((failures + 1))
		fi
		cores=$(cpu_cores "$before" "$(cpu_sample)" "$(tail -n1 "$TMP/run.times")")
		read -r s styx pg gen other busy each <<<"$cores"
		echo "| $workload${extra:+ $extra} | $clients | $batch | $s | $styx | $each | $pg | $gen | $other | $busy |" >>"$TMP/$nodes.cpu"
		summary_row "$nodes" "$cores" "$( (($(wc -l <"$TMP/$nodes.jsonl") > lines)) && echo ok)" >>"$TMP/summary"
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
	[[ -z $BENCH_STANDBY ]] || "$ROOT/scripts/pgtest.sh" stop "$PG_DIR-standby" 2>/dev/null
	((stopped == 0)) || break
done

{
	echo "# Styx benchmark: PostgreSQL, $(echo "$NODE_COUNTS" | tr -s ' ' '\n' | grep -v @base | paste -sd, | sed 's/,/, /g') node(s)"
	echo
	echo "Generated $(date -u '+%Y-%m-%d %H:%M UTC') by bench/postgres.sh" \
		"(BENCH_NODES=\"${BENCH_NODES:-1 2}\" BENCH_ROUNDS=$ROUNDS BENCH_MATRIX=\"$(IFS=';'; echo "${MATRIX[*]}" | sed 's/;/; /g')\") at commit" \
		"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')," \
		"$(go version | cut -d' ' -f3), ${PG_VERSION:-PostgreSQL}, $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || echo unknown))."
	echo
	echo "Each node count gets a fresh local PostgreSQL cluster (scripts/pgtest.sh: fsync on, synchronous_commit on,"
	echo "shared_buffers 128MB) and that many \`styx server --storage postgres\` processes on it; styx-bench spreads"
	echo "its clients over the nodes (client i on node i mod n; the queue is created and deleted through the first)."
	echo "PostgreSQL, the node(s) and styx-bench all share the machine's $(nproc) CPUs."
	echo "Each run: ${WARMUP} warm-up, then ${DURATION} measured; 1 KiB random payloads; one queue with 1 partition."
	if ((ROUNDS > 1)); then
		echo "The node counts ran $ROUNDS times, interleaved (${RUNS[*]}), each time on a fresh cluster."
	fi
	echo "Latencies are per request (HDR histograms, milliseconds); items/s counts produced (produce) or completed"
	echo "(cycle) items. Server CPU-s is the user+system CPU time of the node processes together over the measured"
	echo "window, RSS their sum at its end. The CPU table covers each whole styx-bench run (queue setup, warm-up,"
	echo "measured window, queue deletion), in cores busy on average: the nodes, PostgreSQL (postmaster and"
	echo "backends), styx-bench, the rest (the kernel's own threads, e.g. for disk flushes, and anything else"
	echo "running), and the whole machine (user+nice+system+irq+softirq of /proc/stat). The kernel accounts these"
	echo "counters differently, so \"other\" within ±0.1 of 0 means nothing else ran."
	echo
	echo "## Every row"
	echo
	echo "Sorted by workload, batch and node count. Latencies: p50 / p99 in ms. Cores as in the CPU tables below"
	echo "(styx: the nodes together, then each node's). Limit: \"CPU\" when the machine was at least 90 % busy over"
	echo "the run, naming the larger of PostgreSQL's and the nodes' shares (\"other\" is CPU that none of the benchmark's"
	echo "processes used: other work on the machine takes cores from them); \"latency\" otherwise (each node runs a"
	echo "queue's requests one transaction at a time and waits for its round trips and its commit)."
	echo
	echo "| workload | clients × batch | nodes | round | items/s | produce | lease | complete | styx cores (each) | PostgreSQL cores | styx-bench cores | other cores | busy cores (of $(nproc)) | limit |"
	echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"
	sort -k1,1 -k2,2 -k3,3 -k4,4r -k5,5 -k6,6 "$TMP/summary" | cut -d'|' -f2-
	for nodes in "${RAN[@]}"; do
		echo
		echo "## $(title_of "$nodes")"
		echo
		"$TMP/styx-bench" --markdown "$TMP/$nodes.jsonl"
		echo
		echo "| workload | clients | batch | run s | styx cores | each node | PostgreSQL cores | styx-bench cores | other cores | machine busy cores |"
		echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
		cat "$TMP/$nodes.cpu"
	done
	errors_section
} >"$REPORT"

report_done "$failures" "$REPORT"
