#!/usr/bin/env bash
# bench/peers.sh — Styx side by side with its peers in one run
# (`make bench-peers`; `make bench` runs it after its own matrix unless
# BENCH_PEERS=0).
#
# Two comparisons, each row run on every system in turn, for several rounds
# (interleaved, so that the ratios compare runs seconds apart under the same
# machine load), 4 clients, 1 KiB payloads, workloads produce and cycle at
# batch 1 and 100:
#
#   - Styx on PostgreSQL beside River (github.com/riverqueue/river, pgx v5),
#     on one throwaway PostgreSQL cluster (scripts/pgtest.sh), with a fresh
#     database per system per round;
#   - Styx on Pebble (its defaults: fsync before every acknowledgement)
#     beside RabbitMQ quorum queues (Debian's rabbitmq-server, publisher
#     confirms, manual acks) and NATS JetStream (nats-server built from its
#     Go module, `sync_interval: always`), each on a private node started
#     here; a fresh Styx data directory per round, a fresh queue or stream
#     per run.
#
# Styx runs under styx-bench; the peers under peer-bench (bench/peers, a Go
# module of its own, so that Styx's module never sees River, amqp091-go or
# nats.go). The definitions of the workloads per system are in
# docs/benchmarks.md ("The peers side by side") and at the top of
# bench/peers/main.go. The report (bench/peers-report.md) gives the median
# of the rounds with each round's figure, and the ratios Styx / River and
# Styx / best durable peer.
#
# A peer that cannot be installed or started (no root for apt, no module
# proxy, a server that does not come up) is reported as "not run" with the
# reason; it does not fail the Styx rows. The script exits 1 when a run
# failed. Every server listens on 127.0.0.1 only, on a port below 32768,
# and is stopped on exit (also on failure or Ctrl-C), with its temporary
# files.
#
# Environment:
#   BENCH_PEERS_DURATION  measured time per run (default: BENCH_DURATION if
#                         set, else 5s; with 2 rounds the whole takes about
#                         7 minutes)
#   BENCH_PEERS_WARMUP    unmeasured warm-up per run (default 2s)
#   BENCH_PEERS_ROUNDS    rounds (default 2)
#   BENCH_PEERS_SYSTEMS   the peers to run (default "river rabbitmq nats")
#   BENCH_PEERS_REPORT    where to write the report (default
#                         bench/peers-report.md)
#   BENCH_STYX_REV        build Styx at this git revision (in a temporary
#                         worktree) instead of the working tree
#   BENCH_PEERS_CEILINGS  1 (default) also runs the ceilings each round, as
#                         rows under Styx's: the row work in bare SQL on the
#                         same PostgreSQL (every row), Styx on Pebble without
#                         fsync and bare Go net/http with Styx's requests
#                         (the batch-1 rows); 0 skips them (about 1 minute
#                         less per round)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_PEERS_DURATION:-${BENCH_DURATION:-5s}}
WARMUP=${BENCH_PEERS_WARMUP:-2s}
ROUNDS=${BENCH_PEERS_ROUNDS:-2}
SYSTEMS=$(echo ${BENCH_PEERS_SYSTEMS:-river rabbitmq nats})
REPORT=${BENCH_PEERS_REPORT:-$ROOT/bench/peers-report.md}
STYX_REV=${BENCH_STYX_REV:-}
CEILINGS=${BENCH_PEERS_CEILINGS:-1}
CLIENTS=4
ROWS=("produce 1" "produce 100" "cycle 1" "cycle 100")
NATS_VERSION=v2.15.2
if ! [[ $ROUNDS =~ ^[1-9][0-9]*$ ]]; then
	echo "bench: BENCH_PEERS_ROUNDS=$ROUNDS is not a positive number" >&2
	exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/styx-peers.XXXXXX")
# As root, PostgreSQL and RabbitMQ run as their own users, which must be
# able to reach their directories inside $TMP.
chmod 711 "$TMP"
RUNS=$TMP/runs.jsonl
ERRS=$TMP/runs.err
: >"$RUNS"
: >"$ERRS"

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STYX_PID=""
FLOOR_PID=""
NATS_PID=""
RMQ_PID="" # runuser (or rabbitmq-server) as started here
RMQ_BEAM="" # the Erlang VM, from RabbitMQ's pid file
EPMD_PID=""
PG_DIR=""
USED_PORTS=""

cleanup() {
	[[ -z $STYX_PID ]] || stop_pids "$STYX_PID"
	[[ -z $FLOOR_PID ]] || stop_pids "$FLOOR_PID"
	[[ -z $NATS_PID ]] || stop_pids "$NATS_PID"
	stop_rabbitmq
	[[ -z $PG_DIR ]] || "$ROOT/scripts/pgtest.sh" stop "$PG_DIR" >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# low_port VAR sets VAR to a free loopback TCP port in 20000-31999 that
# this script has not handed out yet.
low_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000))
		[[ " $USED_PORTS " == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			USED_PORTS+=" $p"
			printf -v "$1" '%s' "$p"
			return 0
		fi
	done
	echo "bench: no free port below 32768" >&2
	return 1
}

# note_missing SYSTEM REASON records a peer (or Styx's PostgreSQL rows) that
# could not run.
note_missing() {
	echo "bench: $1 not run: $2" >&2
	printf '{"label":"%s","missing":"%s"}\n' "$1" "$(printf '%s' "$2" | tr -d '"\\' | tr '\n' ' ')" >>"$RUNS"
	SYSTEMS=$(echo " $SYSTEMS " | sed "s/ $1 / /")
	SYSTEMS=$(echo $SYSTEMS) # one space between names
}

has() { [[ " $SYSTEMS " == *" $1 "* ]]; }

for s in river rabbitmq nats; do
	has "$s" || note_missing "$s" "not selected (BENCH_PEERS_SYSTEMS=\"$SYSTEMS\")"
done

# --- build ---------------------------------------------------------------

SRC=$ROOT
if [[ -n $STYX_REV ]]; then
	echo "bench: building styx at $STYX_REV (worktree in $TMP/src)" >&2
	git -C "$ROOT" worktree add -q --detach "$TMP/src" "$STYX_REV"
	SRC=$TMP/src
fi
echo "bench: building styx, styx-bench and peer-bench into $TMP" >&2
(cd "$SRC" && go build -o "$TMP/styx" ./cmd/styx && go build -o "$TMP/styx-bench" ./cmd/styx-bench)
STYX_COMMIT=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$SRC" diff --quiet 2>/dev/null || echo '+dirty')
if [[ -n $STYX_REV ]]; then
	git -C "$ROOT" worktree remove --force "$TMP/src"
fi
if ! (cd "$ROOT/bench/peers" && GOFLAGS=-mod=mod go build -o "$TMP/peer-bench" .) 2>"$TMP/peer-build.log"; then
	cat "$TMP/peer-build.log" >&2
	for s in $SYSTEMS; do note_missing "$s" "peer-bench did not build (bench/peers): $(tail -n1 "$TMP/peer-build.log")"; done
fi

# --- the peers' servers ----------------------------------------------------

# ensure_nats sets NATS_SERVER to a nats-server binary, installing it with
# go install when there is none.
ensure_nats() {
	NATS_SERVER=$(command -v nats-server || true)
	local gobin
	gobin=$(go env GOBIN)
	gobin=${gobin:-$(go env GOPATH)/bin}
	[[ -n $NATS_SERVER ]] || { [[ -x $gobin/nats-server ]] && NATS_SERVER=$gobin/nats-server; } || true
	if [[ -z $NATS_SERVER ]]; then
		echo "bench: installing nats-server $NATS_VERSION (go install)" >&2
		if (cd "$TMP" && go install "github.com/nats-io/nats-server/v2@$NATS_VERSION") >"$TMP/nats-install.log" 2>&1; then
			NATS_SERVER=$gobin/nats-server
		else
			note_missing nats "go install nats-server@$NATS_VERSION failed: $(tail -n1 "$TMP/nats-install.log")"
			return 1
		fi
	fi
}

# start_nats starts nats-server with JetStream (sync_interval: always) on a
# free port, its store in $TMP, and waits until JetStream answers.
start_nats() {
	local port dir=$TMP/nats
	low_port port
	mkdir -p "$dir/js"
	cat >"$dir/nats.conf" <<EOF
listen: 127.0.0.1:$port
jetstream {
  store_dir: "$dir/js"
  sync_interval: always
}
EOF
	"$NATS_SERVER" -c "$dir/nats.conf" >"$dir/log" 2>&1 &
	NATS_PID=$!
	NATS_URL=nats://127.0.0.1:$port
	if ! "$TMP/peer-bench" --system nats --url "$NATS_URL" --ping 30s 2>>"$dir/log"; then
		note_missing nats "nats-server did not answer within 30s: $(tail -n1 "$dir/log")"
		stop_pids "$NATS_PID"
		NATS_PID=""
		return 1
	fi
	echo "bench: nats-server $("$NATS_SERVER" --version | awk '{print $2}') on 127.0.0.1:$port" >&2
}

# ensure_rabbitmq installs Debian's rabbitmq-server when it is missing (as
# root, with apt).
ensure_rabbitmq() {
	[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] && return 0
	if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
		note_missing rabbitmq "rabbitmq-server is not installed, and installing it needs root and apt-get"
		return 1
	fi
	echo "bench: installing rabbitmq-server (apt)" >&2
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server; } >"$TMP/rabbitmq-install.log" 2>&1; then
		note_missing rabbitmq "apt-get install rabbitmq-server failed: $(tail -n1 "$TMP/rabbitmq-install.log")"
		return 1
	fi
}

# start_rabbitmq starts a private RabbitMQ node (its own node name, epmd
# port, AMQP and distribution ports, all on 127.0.0.1; no plugins; every
# directory in $TMP/rabbitmq), as the rabbitmq user when run as root, and
# waits until AMQP answers.
start_rabbitmq() {
	local dir=$TMP/rabbitmq epmd_port amqp_port dist_port
	local as=()
	low_port epmd_port
	low_port amqp_port
	low_port dist_port
	mkdir -p "$dir"
	echo '[].' >"$dir/enabled_plugins"
	if [[ $(id -u) -eq 0 ]]; then
		chown -R rabbitmq: "$dir"
		as=(runuser -u rabbitmq --)
	fi
	epmd -port "$epmd_port" -address 127.0.0.1 >"$TMP/epmd.log" 2>&1 &
	EPMD_PID=$!
	(cd "$dir" && exec "${as[@]}" env HOME="$dir" ERL_EPMD_PORT="$epmd_port" ERL_EPMD_ADDRESS=127.0.0.1 \
		RABBITMQ_NODENAME="styxbench$$@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT="$dist_port" \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}' \
		RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" RABBITMQ_PID_FILE="$dir/pid" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" RABBITMQ_CONFIG_FILE="$dir/rabbitmq" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
		/usr/lib/rabbitmq/bin/rabbitmq-server) >"$TMP/rabbitmq.out" 2>&1 &
	RMQ_PID=$!
	RMQ_URL=amqp://guest:guest@127.0.0.1:$amqp_port/
	if ! "$TMP/peer-bench" --system rabbitmq --url "$RMQ_URL" --ping 90s 2>>"$TMP/rabbitmq.out"; then
		note_missing rabbitmq "RabbitMQ did not answer within 90s: $(tail -n3 "$TMP/rabbitmq.out" | tr '\n' ' ')"
		stop_rabbitmq
		return 1
	fi
	RMQ_BEAM=$(cat "$dir/pid" 2>/dev/null || true)
	echo "bench: RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null) on 127.0.0.1:$amqp_port (epmd $epmd_port, distribution $dist_port)" >&2
}

# stop_rabbitmq stops the RabbitMQ node and the epmd started for it.
stop_rabbitmq() {
	if [[ -z $RMQ_BEAM && -s $TMP/rabbitmq/pid ]]; then RMQ_BEAM=$(cat "$TMP/rabbitmq/pid"); fi
	if [[ -n $RMQ_BEAM ]]; then kill -TERM "$RMQ_BEAM" 2>/dev/null || true; fi
	[[ -z $RMQ_PID ]] || stop_pids "$RMQ_PID"
	[[ -z $RMQ_BEAM ]] || stop_pids "$RMQ_BEAM"
	[[ -z $EPMD_PID ]] || stop_pids "$EPMD_PID"
	RMQ_PID="" RMQ_BEAM="" EPMD_PID=""
}

# start_pg starts the PostgreSQL cluster of the run and sets DSN and PSQL.
start_pg() {
	PG_DIR=$TMP/pg
	local port
	for _ in 1 2 3 4 5; do
		low_port port
		if DSN=$(PGTEST_PORT=$port "$ROOT/scripts/pgtest.sh" start "$PG_DIR" 2>"$TMP/pgtest.log" | tail -n1) && [[ -n $DSN ]]; then
			# shellcheck source=/dev/null
			PSQL=$(dirname "$(source "$PG_DIR/env" && echo "$PGTEST_PGCTL")")/psql
			[[ -x $PSQL ]] || PSQL=$(command -v psql)
			PG_VERSION=$("$(dirname "$PSQL")/postgres" --version 2>/dev/null || "$PSQL" --version)
			echo "bench: PostgreSQL on 127.0.0.1:$port" >&2
			return 0
		fi
		grep -q 'is taken' "$TMP/pgtest.log" || break
	done
	cat "$TMP/pgtest.log" >&2
	return 1
}

# dsn_of DB prints the cluster's DSN for database DB.
dsn_of() { echo "${DSN/\/styx_test?//$1?}"; }

# --- Styx servers ------------------------------------------------------------

# start_styx NAME ARGS... starts a styx server with ARGS on a free port and
# sets STYX_PID and STYX_URL.
start_styx() {
	local name=$1 port log=$TMP/styx-$1.log
	shift
	low_port port
	(cd "$TMP" && exec "$TMP/styx" server --listen "127.0.0.1:$port" --log-level warn "$@") 2>"$log" &
	STYX_PID=$!
	STYX_URL=http://127.0.0.1:$port
	wait_healthy "$STYX_PID" "$port" "$name" "$log"
}

stop_styx() {
	[[ -z $STYX_PID ]] || stop_pids "$STYX_PID"
	STYX_PID=""
}

failures=0

# run_styx LABEL ROUND WORKLOAD BATCH [FLAGS...] runs styx-bench on $STYX_URL.
run_styx() {
	echo "bench: round $2: $1: $3, batch $4 ${*:5}" >&2
	if ! "$TMP/styx-bench" --endpoint "$STYX_URL" --server-pid "$STYX_PID" --workload "$3" --clients "$CLIENTS" \
		--batch "$4" --duration "$DURATION" --warmup "$WARMUP" --label "$1" --json "${@:5}" \
		>>"$RUNS" 2> >(sed "s/^/[$1 $3 b$4 r$2] /" | tee -a "$ERRS" >&2); then
		printf '{"label":"%s","workload":"%s","batch":%d,"failed":"styx-bench failed"}\n' "$1" "$3" "$4" >>"$RUNS"
		failures=$((failures + 1))
	fi
}

# worker_concurrency BATCH prints the handlers of the worker in River's shape
# (styx-bench --worker-consumer), tuned as River's MaxWorkers is: 1000 at
# batch 100 (twice 100's rate on both backends), 100 at batch 1 (1000 was
# no faster on PostgreSQL and slower on Pebble); docs/benchmarks.md.
worker_concurrency() {
	if (($1 > 1)); then echo 1000; else echo 100; fi
}

# run_peer SYSTEM URL ROUND WORKLOAD BATCH runs peer-bench.
run_peer() {
	echo "bench: round $3: $1: $4, batch $5" >&2
	if ! "$TMP/peer-bench" --system "$1" --url "$2" --round "$3" --workload "$4" --clients "$CLIENTS" \
		--batch "$5" --duration "$DURATION" --warmup "$WARMUP" \
		>>"$RUNS" 2> >(sed "s/^/[$1 $4 b$5 r$3] /" | tee -a "$ERRS" >&2); then
		printf '{"label":"%s","workload":"%s","batch":%d,"failed":"peer-bench failed"}\n' "$1" "$4" "$5" >>"$RUNS"
		failures=$((failures + 1))
	fi
}

# start_floor starts peer-bench's http-floor server (a ceiling) and sets
# FLOOR_URL; on failure the ceilings' HTTP rows are reported as not run.
start_floor() {
	local port
	low_port port
	"$TMP/peer-bench" --serve-http-floor "127.0.0.1:$port" 2>"$TMP/floor.log" &
	FLOOR_PID=$!
	FLOOR_URL=http://127.0.0.1:$port
	if ! "$TMP/peer-bench" --system http-floor --url "$FLOOR_URL" --ping 20s 2>>"$TMP/floor.log"; then
		note_missing http-floor "the http-floor server did not answer: $(tail -n1 "$TMP/floor.log")"
		stop_pids "$FLOOR_PID"
		FLOOR_PID=""
		return 1
	fi
}

# --- the run -------------------------------------------------------------------

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
PG_OK=0
if start_pg; then
	PG_OK=1
else
	note_missing styx-postgres "PostgreSQL did not start (scripts/pgtest.sh)"
	has river && note_missing river "PostgreSQL did not start (scripts/pgtest.sh)"
fi
if has nats; then ensure_nats && start_nats || true; fi
if ((CEILINGS)) && [[ -x $TMP/peer-bench ]]; then start_floor || true; fi
if has rabbitmq; then ensure_rabbitmq && start_rabbitmq || true; fi

for round in $(seq "$ROUNDS"); do
	if ((PG_OK)); then
		"$PSQL" -q "$DSN" -c "CREATE DATABASE styx_r$round" -c "CREATE DATABASE river_r$round" -c "CREATE DATABASE sql_r$round"
		start_styx postgres --storage postgres --postgres-url "$(dsn_of "styx_r$round")"
		for row in "${ROWS[@]}"; do
			read -r workload batch <<<"$row"
			order="styx river"
			((round % 2 == 0)) && order="river styx"
			for s in $order; do
				if [[ $s == styx ]]; then
					run_styx styx-postgres "$round" "$workload" "$batch"
					if [[ $workload == cycle && $batch == 1 ]]; then
						run_styx styx-postgres-cwl "$round" cycle 1 --complete-with-lease
						run_styx styx-postgres-ahead "$round" cycle 1 --complete-with-lease --lease-ahead
					fi
					if [[ $workload == cycle ]]; then
						run_styx styx-postgres-worker "$round" cycle "$batch" --worker-consumer --complete-with-lease \
							--worker-concurrency "$(worker_concurrency "$batch")"
					fi
				elif has river; then
					run_peer river "$(dsn_of "river_r$round")" "$round" "$workload" "$batch"
				fi
			done
			if ((CEILINGS)) && [[ -x $TMP/peer-bench ]]; then
				run_peer sql "$(dsn_of "sql_r$round")" "$round" "$workload" "$batch"
			fi
		done
		stop_styx
		"$PSQL" -q "$DSN" -c "DROP DATABASE styx_r$round" -c "DROP DATABASE river_r$round" -c "DROP DATABASE sql_r$round"
	fi

	start_styx pebble --data-dir "$TMP/pebble-r$round"
	order=(styx rabbitmq nats)
	for ((k = 1; k < round; k++)); do order=("${order[@]:1}" "${order[0]}"); done
	for row in "${ROWS[@]}"; do
		read -r workload batch <<<"$row"
		for s in "${order[@]}"; do
			case $s in
			styx)
				run_styx styx-pebble "$round" "$workload" "$batch"
				if [[ $workload == cycle && $batch == 1 ]]; then
					run_styx styx-pebble-cwl "$round" cycle 1 --complete-with-lease
					run_styx styx-pebble-ahead "$round" cycle 1 --complete-with-lease --lease-ahead
				fi
				if [[ $workload == cycle ]]; then
					run_styx styx-pebble-worker "$round" cycle "$batch" --worker-consumer --complete-with-lease \
						--worker-concurrency "$(worker_concurrency "$batch")"
				fi
				;;
			rabbitmq) if has rabbitmq; then run_peer rabbitmq "$RMQ_URL" "$round" "$workload" "$batch"; fi ;;
			nats) if has nats; then run_peer nats "$NATS_URL" "$round" "$workload" "$batch"; fi ;;
			esac
		done
	done
	stop_styx
	rm -rf "$TMP/pebble-r$round"
	if ((CEILINGS)); then
		start_styx pebble-nosync --data-dir "$TMP/nosync-r$round" --sync=false
		for row in "${ROWS[@]}"; do
			read -r workload batch <<<"$row"
			((batch == 1)) || continue
			run_styx styx-pebble-nosync "$round" "$workload" "$batch"
			[[ -z $FLOOR_PID ]] || run_peer http-floor "$FLOOR_URL" "$round" "$workload" "$batch"
		done
		stop_styx
		rm -rf "$TMP/nosync-r$round"
	fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
sleep 0.2 # let the stderr tees finish

river_version=$(awk '$1 == "github.com/riverqueue/river" { print $2 }' "$ROOT/bench/peers/go.mod")
{
	echo "# Styx beside its peers"
	echo
	echo "Generated $STARTED by bench/peers.sh (BENCH_PEERS_ROUNDS=$ROUNDS BENCH_PEERS_DURATION=$DURATION" \
		"BENCH_PEERS_WARMUP=$WARMUP) with Styx at commit $STYX_COMMIT, $(go version | cut -d' ' -f3), $(nproc) CPUs" \
		"($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || echo unknown));" \
		"load average ${LOAD_BEFORE// / \/ } before, ${LOAD_AFTER// / \/ } after."
	echo
	echo "Peers: River $river_version (riverpgxv5) on ${PG_VERSION:-PostgreSQL}; RabbitMQ" \
		"$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '(not installed)') (Debian) with Erlang/OTP" \
		"$(dpkg-query -W -f '${Version}' erlang-base 2>/dev/null || echo '?'); nats-server" \
		"$([[ -n ${NATS_SERVER:-} ]] && "$NATS_SERVER" --version | awk '{print $2}' || echo '(not installed)')."
	echo
	echo "Each run: $CLIENTS clients, 1 KiB payloads (each item of a batch its own random one), ${WARMUP} warm-up, then"
	echo "${DURATION} measured. Each row ran on every system in turn, $ROUNDS round(s), the order rotated per round; the"
	echo "PostgreSQL rows on one throwaway cluster (scripts/pgtest.sh: fsync on, synchronous_commit on), a fresh"
	echo "database per system per round; Styx on Pebble on its defaults (fsync before every acknowledgement), a fresh"
	echo "data directory per round; RabbitMQ and NATS a fresh queue or stream per run. Every server, the load"
	echo "generators and River's workers share the machine's CPUs. What each figure counts: docs/benchmarks.md,"
	echo "\"The peers side by side\"."
	if ((CEILINGS)); then
		echo
		echo "The rows marked \"ceiling\" (BENCH_PEERS_CEILINGS=1) are no queue a user could run: the same loop with"
		echo "a queue server's work taken out, to read each ratio against what this machine gives at all. Bare SQL:"
		echo "the row work of a leased queue on the same PostgreSQL (insert; lease by UPDATE … FOR UPDATE SKIP LOCKED;"
		echo "delete), each statement its own transaction, a connection per client. Styx on Pebble without fsync"
		echo "(--sync=false), a fresh data directory. Bare Go net/http: a server that reads each request and answers"
		echo "bytes of Styx's sizes, with Styx's requests (cycle: produce, lease, complete), no storage."
	fi
	echo
	if [[ -x $TMP/peer-bench ]]; then
		"$TMP/peer-bench" --table "$RUNS"
	else
		echo "peer-bench did not build, so only Styx's rows (styx-bench --markdown):"
		echo
		grep -v '"missing"\|"failed"' "$RUNS" >"$TMP/styx.jsonl" || true
		"$TMP/styx-bench" --markdown "$TMP/styx.jsonl"
	fi
	if [[ -s $ERRS ]]; then
		echo
		echo "## Errors and warnings"
		echo
		echo '```'
		cat "$ERRS"
		echo '```'
	fi
} >"$REPORT"

report_done "$failures" "$REPORT"
