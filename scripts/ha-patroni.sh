#!/usr/bin/env bash
# ha-patroni.sh: a Patroni switchover (or failover) under load, with the built styx binary (make ha-patroni).
#
#   scripts/ha-patroni.sh [RUNS]    RUNS defaults to $HA_RUNS, else 3
#
# Starts, in a temporary directory, a one-node etcd (deploy/patroni/etcd.sh) and two Patroni-managed
# PostgreSQL nodes configured by deploy/patroni/node1.yml and node2.yml (ports, paths and bin_dir rewritten to
# free ones here; synchronous_mode on), waits for a leader and a streaming synchronous standby, creates the
# styx role and database, and then per run: two styx nodes on the multi-host URL with
# target_session_attrs=read-write, the load of scripts/haload on both (produce, lease, complete, dead-letter,
# redrive), and
#
#   HA_PATRONI_KILL=switchover (default)  `patronictl switchover --force` from the leader to the other node
#   HA_PATRONI_KILL=postmaster            SIGKILL of the leader's postmaster; Patroni fails over by itself
#                                         (primary_start_timeout 0, loop_wait 1, ttl 10, retry_timeout 3)
#
# HA_PATRONI_STRICT=true turns synchronous_mode_strict on (default: node1.yml's false).
# haload's --promote waits until the other member is the leader (Patroni's GET /primary answers 200) and
# accepts writes (transaction_read_only = off). The old leader comes back as the synchronous standby
# (pg_rewind after a crash) before the next run, so runs alternate between the two nodes.
# Each run prints haload's JSON line (seconds from the kill to the promotion and until each styx node writes
# again, items acknowledged, lost (must be 0), doubled, leased twice at once (must be 0), 453 answers, redrive
# tasks resumed), then a pass count. HA_WARMUP and HA_AFTER (Go durations, default 2s and 3s) set the load
# before the kill and after both nodes write again. Exits 1 when a run fails; a failed run's logs are kept
# in /tmp/styx-ha-patroni-failed.*.
# Needs patroni, etcd and PostgreSQL's server binaries; as root on Debian it installs what is missing
# (patroni etcd-server postgresql) and runs etcd and Patroni as the postgres (or styxpg) user.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
runs=${1:-${HA_RUNS:-3}}
mode=${HA_PATRONI_KILL:-switchover}
[[ $mode == switchover || $mode == postmaster ]] || { echo "ha-patroni: HA_PATRONI_KILL=$mode: want switchover or postmaster" >&2; exit 2; }

# find_bin prints the directory with the highest-version initdb, pg_ctl and postgres (as scripts/pgtest.sh).
find_bin() {
	local d dirs=(/usr/lib/postgresql/*/bin)
	command -v initdb >/dev/null && dirs+=("$(dirname "$(readlink -f "$(command -v initdb)")")")
	for d in "${dirs[@]}"; do
		[[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]] || continue
		echo "$("$d/postgres" --version | awk '{print $3}') $d"
	done | sort -V | tail -n1 | cut -d' ' -f2-
}
missing=()
command -v patroni >/dev/null || missing+=(patroni)
command -v etcd >/dev/null || missing+=(etcd-server)
[[ -n $(find_bin) ]] || missing+=(postgresql)
if ((${#missing[@]})); then
	[[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null ||
		{ echo "ha-patroni: missing ${missing[*]}: install them (Debian: apt-get install patroni etcd-server postgresql)" >&2; exit 1; }
	echo "ha-patroni: installing ${missing[*]}" >&2
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
bin=$(find_bin)

# PostgreSQL, and so Patroni, refuses to run as root.
user=
if [[ $(id -u) -eq 0 ]]; then
	user=postgres
	if ! id "$user" >/dev/null 2>&1; then
		user=styxpg
		id "$user" >/dev/null 2>&1 || useradd --system --no-create-home "$user"
	fi
fi
as() { if [[ -n $user ]]; then runuser -u "$user" -- "$@"; else "$@"; fi; }

work=$(mktemp -d /tmp/styx-ha-patroni.XXXXXX)
chmod 755 "$work"
[[ -z $user ]] || chown "$user" "$work"
pids=()
# stop_pidfile sends SIGTERM to the process whose pid FILE holds and waits up to 30 s for it to end.
stop_pidfile() {
	local pid i
	pid=$(cat "$1" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
}
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	stop_pidfile "$work/node1/patroni.pid"
	stop_pidfile "$work/node2/patroni.pid"
	for n in node1 node2; do # a postgres Patroni did not stop (Patroni killed, or stuck)
		[[ -f $work/$n/data/postmaster.pid ]] && as "$bin/pg_ctl" -D "$work/$n/data" -m immediate -w stop >/dev/null 2>&1 || true
	done
	stop_pidfile "$work/etcd.pid"
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
cd / # the server user may not be able to read the caller's working directory

go -C "$repo" build -o "$work/styx" ./cmd/styx
go -C "$repo" build -o "$work/haload" ./scripts/haload

# free_port prints a 127.0.0.1 port nobody listens on and no earlier call printed.
taken=" "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12768)) # below 32768: above, a client socket may take it first
		[[ $taken == *" $p "* ]] && continue
		(echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { taken+="$p "; echo "$p"; return; }
	done
}
etcd_port=$(free_port)
declare -A pg rest
for n in node1 node2; do pg[$n]=$(free_port); rest[$n]=$(free_port); done

# The deploy/ configurations with this run's ports, paths and binaries; the postmaster variant also makes
# Patroni fail over at once on a crash and notice it within a second.
for n in node1 node2; do
	mkdir -p "$work/$n"
	[[ -z $user ]] || chown "$user" "$work/$n"
	sed -e "s#127.0.0.1:12379#127.0.0.1:$etcd_port#" \
		-e "s#127.0.0.1:18008#127.0.0.1:${rest[node1]}#g" -e "s#127.0.0.1:18009#127.0.0.1:${rest[node2]}#g" \
		-e "s#127.0.0.1:15432#127.0.0.1:${pg[node1]}#g" -e "s#127.0.0.1:15433#127.0.0.1:${pg[node2]}#g" \
		-e "s#/var/lib/styx-patroni#$work#g" -e "s#bin_dir: .*#bin_dir: $bin#" \
		"$repo/deploy/patroni/$n.yml" >"$work/$n.yml"
	if [[ ${HA_PATRONI_STRICT:-} == true ]]; then
		sed -i 's/^    synchronous_mode_strict: .*/    synchronous_mode_strict: true/' "$work/$n.yml"
	fi
	if [[ $mode == postmaster ]]; then
		sed -i -e 's/^    ttl: .*/    ttl: 10/' -e 's/^    loop_wait: .*/    loop_wait: 1/' \
			-e 's/^    retry_timeout: .*/    retry_timeout: 3/' -e 's/^    primary_start_timeout: .*/    primary_start_timeout: 0/' "$work/$n.yml"
	fi
done
ctl=(patronictl -c "$work/node1.yml")

# start_as FILE LOG CMD... starts CMD as $user in the background with its pid in FILE.
start_as() {
	local file=$1 log=$2; shift 2
	as bash -c 'echo $$ >"$0"; exec "$@"' "$file" "$@" >"$log" 2>&1 &
}
start_as "$work/etcd.pid" "$work/etcd.log" env ETCD_CLIENT_PORT="$etcd_port" ETCD_PEER_PORT="$(free_port)" \
	"$repo/deploy/patroni/etcd.sh" "$work/etcd"
until curl -fsS "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1; do sleep 0.1; done
start_as "$work/node1/patroni.pid" "$work/node1/patroni.log" patroni "$work/node1.yml"
start_as "$work/node2/patroni.pid" "$work/node2/patroni.log" patroni "$work/node2.yml"

# roles prints the running leader and the synchronous standby that replicates (Patroni 3.0.2 says
# "running", later versions "streaming"), or nothing when either is missing.
roles() {
	"${ctl[@]}" list -f json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
ms = json.load(sys.stdin)
leader = [m["Member"] for m in ms if m.get("Role") == "Leader" and m.get("State") == "running"]
sync = [m["Member"] for m in ms if m.get("Role") == "Sync Standby" and m.get("State") in ("running", "streaming")]
if leader and sync:
    print(leader[0], sync[0])'
}
# wait_healthy waits up to 120 s for a running leader and a replicating synchronous standby, and prints them.
wait_healthy() {
	local deadline=$((SECONDS + 120)) r
	while ((SECONDS < deadline)); do
		r=$(roles)
		if [[ -n $r ]]; then echo "$r"; return 0; fi
		sleep 0.2
	done
	echo "ha-patroni: no leader with a synchronous standby after 120 s:" >&2
	"${ctl[@]}" list >&2 || true
	tail -n 20 "$work"/node*/patroni.log >&2
	return 1
}
wait_healthy >/dev/null
psql=("$bin/psql" -X -q -t -A)
super="postgresql://postgres:postgres-example@127.0.0.1:${pg[node1]},127.0.0.1:${pg[node2]}/postgres?sslmode=disable&target_session_attrs=read-write"
if [[ $("${psql[@]}" "$super" -c "SELECT count(*) FROM pg_roles WHERE rolname = 'styx'") == 0 ]]; then
	"${psql[@]}" "$super" -c "CREATE ROLE styx LOGIN PASSWORD 'styx-example'" -c "CREATE DATABASE styx OWNER styx"
fi
url="postgres://styx:styx-example@127.0.0.1:${pg[node1]},127.0.0.1:${pg[node2]}/styx?sslmode=disable&target_session_attrs=read-write"

# The command haload runs once the kill returned: wait until CANDIDATE is Patroni's primary and writable.
cat >"$work/promoted.sh" <<EOF
#!/usr/bin/env bash
# promoted.sh CANDIDATE: returns once CANDIDATE's Patroni answers GET /primary 200 and its PostgreSQL accepts writes.
declare -A pg=([node1]=${pg[node1]} [node2]=${pg[node2]}) rest=([node1]=${rest[node1]} [node2]=${rest[node2]})
for ((i = 0; i < 1200; i++)); do
	if curl -fsS -o /dev/null "http://127.0.0.1:\${rest[\$1]}/primary" 2>/dev/null &&
		[[ \$("$bin/psql" -X -q -t -A "postgresql://postgres:postgres-example@127.0.0.1:\${pg[\$1]}/postgres?sslmode=disable&connect_timeout=1" -c "SHOW transaction_read_only" 2>/dev/null) == off ]]; then
		exit 0
	fi
	sleep 0.02
done
echo "promoted.sh: \$1 not a writable primary after 24 s" >&2
exit 1
EOF
chmod +x "$work/promoted.sh"

# one_run runs one switchover or failover and prints haload's JSON line.
one_run() {
	local status=0
	run_load || status=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait "${pids[@]}" 2>/dev/null || true
	pids=()
	if grep -qi "deadlock\|panic" "$work"/styx*.log; then echo "ha-patroni: a styx node logged a deadlock or a panic" >&2; status=1; fi
	return $status
}

# run_load starts the styx nodes (pids) and runs haload.
run_load() {
	local leader candidate i status=0 kill endpoints=()
	read -r leader candidate < <(wait_healthy) && [[ -n $candidate ]] || return 1
	echo "$leader -> $candidate" >"$work/last"
	rm -f "$work"/styx*.log
	pids=()
	for i in 0 1; do
		local port; port=$(free_port)
		"$work/styx" server --storage postgres --postgres-url "$url" --listen "127.0.0.1:$port" >"$work/styx$i.log" 2>&1 &
		pids+=($!)
		endpoints+=("http://127.0.0.1:$port")
		until curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
			kill -0 "${pids[-1]}" 2>/dev/null || { echo "ha-patroni: styx node $i did not start:" >&2; cat "$work/styx$i.log" >&2; return 1; }
			sleep 0.05
		done
	done
	# A node listens before it opens storage: wait for its start-up line.
	for i in 0 1; do
		local waited=0
		until grep -q "on a synchronous standby" "$work/styx$i.log"; do
			((waited++ < 200)) || { echo "ha-patroni: styx node $i did not log the synchronous guarantee:" >&2; cat "$work/styx$i.log" >&2; return 1; }
			sleep 0.05
		done
	done
	if [[ $mode == switchover ]]; then
		kill="${ctl[*]} switchover --leader $leader --candidate $candidate --force >/dev/null"
	else
		kill="kill -9 \$(head -n1 $work/$leader/data/postmaster.pid)"
	fi
	"$work/haload" --endpoints "$(IFS=,; echo "${endpoints[*]}")" --warmup "${HA_WARMUP:-2s}" --after "${HA_AFTER:-3s}" \
		--kill "$kill" --promote "$work/promoted.sh $candidate" || status=$?
	return $status
}

failed=0
for run in $(seq 1 "$runs"); do
	if out=$(one_run); then
		echo "run $run/$runs ($mode $(cat "$work/last")): ok $out"
	else
		echo "run $run/$runs ($mode $(cat "$work/last" 2>/dev/null)): FAILED $out"
		failed=$((failed + 1))
		kept=$(mktemp -d /tmp/styx-ha-patroni-failed.XXXXXX)
		cp "$work"/styx*.log "$work"/etcd.log "$kept"/ 2>/dev/null || true
		for n in node1 node2; do cp "$work/$n/patroni.log" "$kept/$n-patroni.log" 2>/dev/null || true; done
		echo "ha-patroni: run $run's logs (styx nodes, Patroni, etcd) kept in $kept" >&2
	fi
done
echo "ha-patroni: $((runs - failed)) of $runs runs passed ($mode)"
[[ $failed -eq 0 ]]
