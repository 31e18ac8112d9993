#!/usr/bin/env bash
# pgtest.sh: a throwaway PostgreSQL cluster for the Postgres tests.
#
#   scripts/pgtest.sh start DIR   installs PostgreSQL if needed (apt, as root), creates a fresh
#                                 cluster in DIR/data on a free 127.0.0.1 port with the database
#                                 styx_test, and prints its DSN as the last stdout line (also DIR/dsn)
#   scripts/pgtest.sh stop DIR    stops that cluster (no error if it is not running)
#
# PGTEST_PORT=N (what `make pg-start PG_PORT=N` sets) starts on port N only, and fails saying so when
# N is taken; unset, a free port of 25432-25531 is used, in a random order, those handed out in the
# last 10 minutes last.
#
# The cluster is a copy of a template that initdb makes once (in $TMPDIR, per user and PostgreSQL
# build); PGTEST_TEMPLATE=0 runs initdb for every start instead.
#
# DIR/env holds PGTEST_PGCTL, PGTEST_DATA, PGTEST_USER, PGTEST_OPTS and PGTEST_LOG, so a test can
# restart the server: [runuser -u $PGTEST_USER --] $PGTEST_PGCTL -D $PGTEST_DATA -m fast -w stop,
# then ... -D $PGTEST_DATA -w start -o "$PGTEST_OPTS" -l $PGTEST_LOG.
# PostgreSQL refuses to run as root, so as root the server runs as the postgres (or styxpg) user.
# All output but the DSN goes to stderr.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 && -n $2 && ($1 == start || $1 == stop) ]] || usage
cmd=$1
if [[ $cmd == start && -n ${PGTEST_PORT:-} ]] && ! [[ $PGTEST_PORT =~ ^[0-9]+$ && $PGTEST_PORT -ge 1 && $PGTEST_PORT -le 65535 ]]; then
	echo "pgtest: PGTEST_PORT=$PGTEST_PORT is not a TCP port (1-65535)" >&2; exit 2
fi
if [[ $cmd == stop && ! -d $2 ]]; then exit 0; fi
mkdir -p "$2"
DIR=$(cd "$2" && pwd)
cd / # the server user may not be able to read the caller's working directory

# as_user runs a command as $user (when set, i.e. when we are root).
as_user() { if [[ -n $user ]]; then runuser -u "$user" -- "$@"; else "$@"; fi; }

# find_bin prints the directory with the highest-version initdb, pg_ctl and postgres, found on
# PATH or in /usr/lib/postgresql/*/bin.
find_bin() {
	local d dirs=(/usr/lib/postgresql/*/bin)
	command -v initdb >/dev/null && dirs+=("$(dirname "$(readlink -f "$(command -v initdb)")")")
	for d in "${dirs[@]}"; do
		[[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]] || continue
		echo "$("$d/postgres" --version | awk '{print $3}') $d"
	done | sort -V | tail -n1 | cut -d' ' -f2-
}

# stop_cluster stops the cluster DIR/env describes, if it is running.
stop_cluster() {
	[[ -f $DIR/env ]] || return 0
	source "$DIR/env"
	user=$PGTEST_USER
	if as_user "$PGTEST_PGCTL" -D "$PGTEST_DATA" status >/dev/null 2>&1; then
		as_user "$PGTEST_PGCTL" -D "$PGTEST_DATA" -m fast -w stop >&2
	fi
}

if [[ $cmd == stop ]]; then stop_cluster; exit 0; fi

bin=$(find_bin)
if [[ -z $bin ]]; then
	[[ $(id -u) -eq 0 ]] || { echo "pgtest: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; install the postgresql package or run as root" >&2; exit 1; }
	echo "pgtest: installing postgresql" >&2
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
	bin=$(find_bin)
	[[ -n $bin ]] || { echo "pgtest: no initdb/pg_ctl/postgres even after installing postgresql" >&2; exit 1; }
fi
createdb=$bin/createdb
[[ -x $createdb ]] || createdb=$(command -v createdb) || { echo "pgtest: createdb not found" >&2; exit 1; }

user=
if [[ $(id -u) -eq 0 ]]; then
	user=postgres
	if ! id "$user" >/dev/null 2>&1; then
		user=styxpg
		id "$user" >/dev/null 2>&1 || useradd --system --no-create-home "$user"
	fi
fi

# A fresh cluster: drop whatever an earlier start left in DIR.
(stop_cluster)
rm -rf "$DIR/data" "$DIR/log" "$DIR/env" "$DIR/dsn"
if [[ -n $user ]]; then chown "$user" "$DIR"; fi
as_user test -w "$DIR" || { echo "pgtest: $DIR is not writable by ${user:-$(id -un)} (check its parent directories)" >&2; exit 1; }

# The cluster is a copy of a template made by initdb once per user, PostgreSQL build and initdb
# arguments: initdb costs about a CPU-second, the tests that start clusters of their own start
# dozens in a run, and a copy costs a tenth of that. The template is made under a lock in a
# directory of its own and renamed into place when complete, so a start interrupted while making
# it leaves no half-made template. Clusters copied from one template share its system identifier
# (pg_control_system()); no test tells two unrelated clusters apart by it. PGTEST_TEMPLATE=0 runs
# initdb for every start.
initdb_args=(-A trust -U styx --encoding=UTF8 --no-locale)
template="${TMPDIR:-/tmp}/styx-pgtest-template.$(id -u).$(printf '%s' "$bin $("$bin/postgres" --version) ${initdb_args[*]}" | md5sum | cut -c1-12)"
if [[ ${PGTEST_TEMPLATE:-1} != 0 ]]; then
	if [[ ! -d $template/data ]]; then
		exec 8>"$template.lock"
		flock 8
		if [[ ! -d $template/data ]]; then
			rm -rf "$template.new"
			mkdir -p "$template.new"
			if [[ -n $user ]]; then chown "$user" "$template.new"; fi
			as_user "$bin/initdb" --no-sync -D "$template.new/data" "${initdb_args[@]}" >&2
			rm -rf "$template"
			mv "$template.new" "$template"
		fi
		flock -u 8
		exec 8>&-
	fi
	as_user cp -a "$template/data" "$DIR/data"
else
	as_user "$bin/initdb" -D "$DIR/data" "${initdb_args[@]}" >&2
fi

# Pick the port and start under a lock, so that concurrent starts get different ports.
exec 9>"${TMPDIR:-/tmp}/styx-pgtest.$(id -u).lock"
flock 9
# The ports are below Linux's ephemeral range (32768 and up), where no client
# socket is given a local port. A port that looks free can still be refused
# (a server of something else started after the probe), so a start that fails
# to bind moves on to the next port.
# A port another start handed out in the last 10 minutes comes last: a test
# that stops its cluster and starts it again later (pgtest.Server.Stop, Start)
# would otherwise find its port taken by a new cluster of another test, and
# its clients, whose URL still names that port, would reach the wrong
# database (function styx_check_item_ids() does not exist, a 500). The free
# ports are tried in a random order for the same reason.
recent="${TMPDIR:-/tmp}/styx-pgtest.$(id -u).ports"
touch "$recent"
now=$(date +%s)
awk -v now="$now" '$2 > now - 600' "$recent" >"$recent.new" 2>/dev/null && mv "$recent.new" "$recent"
port=
ports="$(seq 25432 25531 | grep -vxF -f <(awk '{print $1}' "$recent") | shuf) $(awk '{print $1}' "$recent")"
if [[ -n ${PGTEST_PORT:-} ]]; then ports=$PGTEST_PORT; fi
for p in $ports; do
	if (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi
	opts="-c listen_addresses=127.0.0.1 -p $p -k $DIR -c fsync=on -c max_connections=200 -c shared_buffers=128MB"
	cat >"$DIR/env" <<EOF
PGTEST_PGCTL=$bin/pg_ctl
PGTEST_DATA=$DIR/data
PGTEST_USER=$user
PGTEST_OPTS="$opts"
PGTEST_LOG=$DIR/log
EOF
	# 9>&-: the server must not inherit (and hold) the lock.
	if as_user "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -t 60 -o "$opts" start >&2 9>&-; then
		port=$p
		echo "$p $now" >>"$recent"
		break
	fi
	if ! grep -q 'could not bind\|could not create any TCP/IP sockets' "$DIR/log" 2>/dev/null; then
		echo "pgtest: server did not start; $DIR/log:" >&2; tail -n 20 "$DIR/log" >&2; exit 1
	fi
	echo "pgtest: port $p is taken; trying the next" >&2
	rm -f "$DIR/log"
done
if [[ -z $port && -n ${PGTEST_PORT:-} ]]; then
	echo "pgtest: port $PGTEST_PORT is taken; choose another (PG_PORT=N, PGTEST_PORT=N) or leave it unset for a free one" >&2
	exit 1
fi
[[ -n $port ]] || { echo "pgtest: no port in 25432-25531 to start on" >&2; exit 1; }
flock -u 9

"$createdb" -h 127.0.0.1 -p "$port" -U styx styx_test
dsn="postgres://styx@127.0.0.1:$port/styx_test?sslmode=disable"
echo "$dsn" >"$DIR/dsn"
echo "$dsn"
