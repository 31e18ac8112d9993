#!/usr/bin/env bash
# ha.sh: PostgreSQL failover under load, with the built styx binary (make ha).
#
#   scripts/ha.sh [RUNS]    RUNS defaults to $HA_RUNS, else 10
#
# Each run: a primary (scripts/pgtest.sh) and a synchronous streaming standby (pg_basebackup -R,
# synchronous_standby_names, synchronous_commit = on), two styx nodes whose URL names both hosts with
# target_session_attrs=read-write, and a produce/lease/complete/retry load on both with dead-lettering
# (max_attempts 2) and throttled redrive tasks back from the dead-letter queue (scripts/haload); then the
# primary's postmaster is SIGKILLed and the standby promoted (pg_ctl promote) while the load goes on.
# Each run prints haload's JSON line: seconds from the kill to the promotion and until each node writes
# again, items acknowledged, lost (must be 0), doubled, leased twice at once (must be 0), 453 answers,
# redrive tasks by final status (all must complete) and how many were running at the kill and resumed.
# HA_WARMUP and HA_AFTER (Go durations, default 2s and 3s) set the load before the kill and after both
# nodes write again. Exits 1 when a run fails. Needs what scripts/pgtest.sh needs (root or a
# PostgreSQL on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-${HA_RUNS:-10}}
work=$(mktemp -d /tmp/styx-ha.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/pgtest.sh stop "$work/standby" >/dev/null 2>&1 || true
	scripts/pgtest.sh stop "$work/primary" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/styx" ./cmd/styx
go build -o "$work/haload" ./scripts/haload

# free_port prints a 127.0.0.1 port nobody listens on, below 32768: above it
# (Linux's ephemeral range) a client socket may take the port before the
# server binds it (a standby that failed so left the run waiting forever).
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12768))
		(echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

# start_node starts styx node $1 on URL $2 on a free port, appending its pid to pids and its URL to
# endpoints (one_run's); a port another process took meanwhile is tried again elsewhere, five times.
start_node() {
	local i=$1 url=$2 try port pid
	for try in 1 2 3 4 5; do
		port=$(free_port)
		"$work/styx" server --storage postgres --postgres-url "$url" --listen "127.0.0.1:$port" >"$work/node$i.log" 2>&1 &
		pid=$!
		until curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
			if ! kill -0 "$pid" 2>/dev/null; then
				wait "$pid" 2>/dev/null || true
				grep -q "address already in use" "$work/node$i.log" && continue 2
				echo "ha: node $i did not start:" >&2; cat "$work/node$i.log" >&2
				return 1
			fi
			sleep 0.05
		done
		pids+=("$pid")
		endpoints+=("http://127.0.0.1:$port")
		return 0
	done
	echo "ha: node $i found no free port in 5 tries" >&2
	return 1
}

# end_run stops what a run started, however it ended.
end_run() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
	scripts/pgtest.sh stop "$work/standby" >/dev/null 2>&1 || true
	scripts/pgtest.sh stop "$work/primary" >/dev/null 2>&1 || true
	rm -rf "$work/standby" "$work/primary"
}

# one_run runs one failover and prints haload's JSON line (in a subshell: end_run tears it down).
one_run() {
	local status=0
	run_once || status=$?
	end_run
	return $status
}

run_once() {
	local dsn pport sport user bin sopts url i logs try
	dsn=$(scripts/pgtest.sh start "$work/primary" 2>"$work/pgtest.log" | tail -n1)
	source "$work/primary/env"
	user=$PGTEST_USER
	bin=$(dirname "$PGTEST_PGCTL")
	as() { if [[ -n $user ]]; then runuser -u "$user" -- "$@"; else "$@"; fi; }
	pport=${dsn#*127.0.0.1:}; pport=${pport%%/*}

	# The standby: a base backup through a slot, streaming, then synchronous.
	mkdir -p "$work/standby"; [[ -z $user ]] || chown "$user" "$work/standby"
	as "$bin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U styx -D "$work/standby/data" -R -X stream -c fast -C -S styx_standby >&2
	# A port another process took meanwhile is tried again elsewhere, five times.
	local started=
	for try in 1 2 3 4 5; do
		sport=$(free_port)
		sopts="-c listen_addresses=127.0.0.1 -p $sport -k $work/standby -c fsync=on -c max_connections=200 -c shared_buffers=32MB -c cluster_name=styx_standby"
		cat >"$work/standby/env" <<ENV
PGTEST_PGCTL=$PGTEST_PGCTL
PGTEST_DATA=$work/standby/data
PGTEST_USER=$user
PGTEST_OPTS="$sopts"
PGTEST_LOG=$work/standby/log
ENV
		if as "$PGTEST_PGCTL" -D "$work/standby/data" -l "$work/standby/log" -w -t 60 -o "$sopts" start >&2; then
			started=1
			break
		fi
		grep -q "could not bind\|could not create any TCP/IP sockets" "$work/standby/log" || break
		echo "ha: standby port $sport is taken; trying another" >&2
	done
	[[ -n $started ]] || { echo "ha: the standby did not start:" >&2; tail -n 20 "$work/standby/log" >&2; return 1; }
	psql=("$bin/psql" -X -q -t -A -h 127.0.0.1 -p "$pport" -U styx -d styx_test)
	# wait_for QUERY VALUE: until the primary answers QUERY with VALUE, for at most 60 s.
	wait_for() {
		local until=$((SECONDS + 60))
		until [[ $("${psql[@]}" -c "$1") == "$2" ]]; do
			((SECONDS < until)) || { echo "ha: the primary did not answer $2 to: $1" >&2; return 1; }
			sleep 0.05
		done
	}
	wait_for "SELECT count(*) FROM pg_stat_replication WHERE application_name='styx_standby' AND state='streaming'" 1 || return 1
	"${psql[@]}" -c "ALTER SYSTEM SET synchronous_standby_names = 'styx_standby'" -c "SELECT pg_reload_conf()" >/dev/null
	wait_for "SELECT sync_state FROM pg_stat_replication WHERE application_name='styx_standby'" sync || return 1

	url="postgres://styx@127.0.0.1:$pport,127.0.0.1:$sport/styx_test?sslmode=disable&target_session_attrs=read-write"
	local endpoints=()
	pids=()
	for i in 0 1; do
		start_node "$i" "$url" || return 1
	done
	# A node listens before it opens storage: wait for its start-up line.
	for i in 0 1; do
		local waited=0
		until grep -q "on a synchronous standby" "$work/node$i.log"; do
			((waited++ < 200)) || { echo "ha: node $i did not log the synchronous guarantee:" >&2; cat "$work/node$i.log" >&2; return 1; }
			sleep 0.05
		done
	done

	local status=0
	"$work/haload" --endpoints "$(IFS=,; echo "${endpoints[*]}")" --warmup "${HA_WARMUP:-2s}" --after "${HA_AFTER:-3s}" \
		--kill "kill -9 \$(head -n1 $work/primary/data/postmaster.pid)" \
		--promote "$(if [[ -n $user ]]; then echo "runuser -u $user -- "; fi)$PGTEST_PGCTL -D $work/standby/data -w -t 60 promote >/dev/null" || status=$?

	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
	if grep -qi "deadlock\|panic" "$work"/node*.log; then echo "ha: a node logged a deadlock or a panic" >&2; status=1; fi
	return $status
}

failed=0
for run in $(seq 1 "$runs"); do
	if out=$(one_run); then
		echo "run $run/$runs: ok $out"
	else
		echo "run $run/$runs: FAILED $out"
		failed=$((failed + 1))
	fi
done
echo "ha: $((runs - failed)) of $runs runs passed"
[[ $failed -eq 0 ]]
