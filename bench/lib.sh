# Shared helpers of the bench scripts; sourced, not run.

# free_port prints a loopback TCP port nothing listens on, other than the
# ports in $1 (space-separated).
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 12768)) # below 32768: above, a client socket may take it first
		[[ " ${1:-} " == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	echo "bench: no free port found" >&2
	return 1
}

# owns_port PID PORT succeeds when process PID holds the socket listening on
# TCP PORT (so that /health is not answered by some other server that took
# the port first).
owns_port() {
	local hex inode
	hex=$(printf '%04X' "$2")
	for inode in $(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
		if find "/proc/$1/fd" -maxdepth 1 -lname "socket:\[$inode\]" 2>/dev/null | grep -q .; then
			return 0
		fi
	done
	return 1
}

# errors_section prints the report's "Errors and warnings" section from the
# runs' stderr files ($TMP/*.err), if any has text.
errors_section() {
	if cat "$TMP"/*.err 2>/dev/null | grep -q .; then
		echo
		echo "## Errors and warnings"
		echo
		echo '```'
		cat "$TMP"/*.err
		echo '```'
	fi
}

# report_done prints the report $2 and exits 1 when $1 runs failed.
report_done() {
	cat "$2"
	echo >&2
	echo "bench: report written to $2" >&2
	if (($1 > 0)); then
		echo "bench: $1 run(s) failed" >&2
		exit 1
	fi
}

# wait_healthy waits up to 20s for the styx server $1 (pid) to answer
# /health on port $2 and own the port; $3 names it in messages, $4 is its
# log, printed if it exits.
wait_healthy() {
	for _ in $(seq 200); do
		if curl -fsS "http://127.0.0.1:$2/health" >/dev/null 2>&1 && owns_port "$1" "$2"; then
			return 0
		fi
		if ! kill -0 "$1" 2>/dev/null; then
			echo "bench: styx server ($3) exited:" >&2
			cat "$4" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "bench: styx server ($3) not healthy after 20s" >&2
	return 1
}

# stop_pids ends the given processes: SIGTERM, then SIGKILL after 20s.
stop_pids() {
	local pid
	for pid in "$@"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "$@"; do
		for _ in $(seq 200); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}

# stop_server ends the server whose pid is in $SERVER_PID, if any (SIGTERM,
# then SIGKILL after 20s), and clears it.
stop_server() {
	[[ -n ${SERVER_PID:-} ]] || return 0
	stop_pids "$SERVER_PID"
	SERVER_PID=""
}

# stop_server_on_exit makes the script stop $SERVER_PID and remove $TMP when
# it exits, on failure, Ctrl-C and SIGTERM too.
stop_server_on_exit() {
	trap 'stop_server; rm -rf "$TMP"' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}
