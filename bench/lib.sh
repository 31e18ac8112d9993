# Shared helpers of the bench scripts; sourced, not run.

# free_port prints a loopback TCP port nothing listens on, other than $1.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 20000))
		[[ $p == "${1:-}" ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	echo "bench: no free port found" >&2
	return 1
}
