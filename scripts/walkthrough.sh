#!/usr/bin/env bash
# walkthrough.sh: runs the README's dead-letter walk-through against a fresh server and prints the
# transcript (each command after "$ ", then its stdout and stderr), so the README can be refreshed.
#
#   scripts/walkthrough.sh            build bin/styx if missing, start `styx server` on 127.0.0.1 with a
#                                     free port and a temporary Pebble data directory, run every command of
#                                     the walk-through, stop the server and remove the directory
#
# STYX_WALKTHROUGH_LISTEN (default 127.0.0.1:0, a free port) sets the server's --listen. The commands are
# printed as the README shows them: the endpoint reaches them through STYX_ENDPOINT. Ids, fingerprints
# and times differ on every run. It takes about 30 seconds (1s leases, a redrive at 2 items a second).
# Not part of `make test`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ! -x $root/bin/styx ]]; then
	make -C "$root" build >&2
fi
export PATH="$root/bin:$PATH"
unset STYX_API_KEY STYX_CA_FILE STYX_CONFIG

tmp=$(mktemp -d)
server_pid=
cleanup() {
	if [[ -n $server_pid ]]; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

styx server --listen "${STYX_WALKTHROUGH_LISTEN:-127.0.0.1:0}" --data-dir "$tmp/data" --shutdown-timeout 5s \
	2>"$tmp/server.log" &
server_pid=$!
addr=
for _ in $(seq 1 100); do
	addr=$(sed -n 's/.*msg="styx serving" listen=\([^ ]*\).*/\1/p' "$tmp/server.log")
	[[ -n $addr ]] && break
	if ! kill -0 "$server_pid" 2>/dev/null; then
		cat "$tmp/server.log" >&2
		echo "walkthrough: the server did not start" >&2
		exit 1
	fi
	sleep 0.1
done
[[ -n $addr ]] || { cat "$tmp/server.log" >&2; echo "walkthrough: the server did not start in 10s" >&2; exit 1; }
export STYX_ENDPOINT=http://$addr
echo "# server: styx server --data-dir $tmp/data (listening on $addr)"

# run prints a command line as the README shows it, then runs it with stderr merged into stdout;
# the walk-through stops if it fails.
run() {
	printf '$ %s\n' "$1"
	eval "$1" 2>&1
}

# run_fails is run for a command that must fail (a refusal the README shows).
run_fails() {
	printf '$ %s\n' "$1"
	if eval "$1" 2>&1; then
		echo "walkthrough: expected a failure: $1" >&2
		exit 1
	fi
}

# answer is run for a command that asks [y/N]: it answers $1 on stdin and shows the answer after the
# question, as a terminal would.
answer() {
	local ans=$1 out
	printf '$ %s\n' "$2"
	out=$(printf '%s\n' "$ans" | eval "$2" 2>&1) || true
	printf '%s\n' "$out" | sed "s|\[y/N\] |[y/N] $ans\n|"
	return 0
}

# block separates the README's console blocks.
block() { printf '\n--- %s\n' "$1"; }

block "dead-letter queue and payments queue"
run "styx queues create payments-dead"
run "styx queues create payments --dead-queue payments-dead --max-attempts 2 --lease-timeout 1s"

block "thirty payments"
produce='for i in $(seq 1 30); do
    case $((i % 3)) in 0) kind=refund ;; 1) kind=charge ;; 2) kind=payout ;; esac
    styx produce payments "{\"payment_id\":$i}" --kind $kind --reference pay-$i
  done | uniq -c'
run "$produce"

block "the failing consumer"
consumer='while :; do
  out=$(styx lease payments --timeout 3s) || { echo "lease failed with exit status $?" >&2; break; }
  item=$(tail -n +2 <<< "$out"); [ -n "$item" ] || break  # "no items": the queue is drained
  read -r partition id attempts deadline kind ref payload <<< "$item"
  n=${ref#pay-}
  if [ "$kind" = refund ]; then
    styx retry payments "$id" --partition "$partition" --dead --error "malformed payload: unexpected '"'"'}'"'"' at byte $((n * 7 % 40))"
  elif [ $((n % 4)) = 0 ]; then
    :  # the consumer "crashes": its 1s lease runs out
  elif [ "$attempts" = 2 ] && [ $((n % 2)) = 0 ]; then
    styx retry payments "$id" --partition "$partition" --error "card declined for payment $n (issuer code 51)"
  else
    styx retry payments "$id" --partition "$partition" --error "timeout talking to bank 10.20.0.$((n % 3 + 5)):8443 after $((900 + n * 37))ms"
  fi
done 2>&1 | sort | uniq -c'
run "$consumer"

block "a page of dead items"
run "styx dead list payments-dead --limit 12"

block "counted by last error"
run "styx dead list payments-dead --group-by error"

block "error groups"
run "styx dead groups payments-dead"
groups=$(styx dead groups payments-dead 2>/dev/null)
fingerprint() { awk -v p="$1" 'index($0, p) { print $4; exit }' <<<"$groups"; }
declined=$(fingerprint "card declined")
malformed=$(fingerprint "malformed payload")

block "one group's items"
run "styx dead list payments-dead --fingerprint $declined"

block "by dead reason"
run "styx dead list payments-dead --group-by reason"

block "stats"
run "styx stats payments-dead"
run "styx stats payments-dead --json"

block "an abandoned item in full"
abandoned=$(styx dead list payments-dead --error "lease expired" --limit 1 2>/dev/null | awk 'NR == 2 { print $1 }')
run "styx dead show payments-dead $abandoned"

block "refusals: no filter, not a dead-letter queue"
run_fails "styx dead delete payments-dead --yes"
run_fails "styx dead list payments"

block "delete the malformed refunds"
run "styx dead delete payments-dead --fingerprint $malformed --yes"

block "dry run"
run "styx dead redrive payments-dead --dry-run"

block "redrive"
run_fails "styx dead redrive payments-dead --rate 2"
run "styx dead redrive payments-dead --all --rate 2"

block "tasks"
run "styx redrives list"

block "payment 4, redriven"
echo '$ styx items list payments --json   # payment 4'
styx items list payments --json | grep -E '"reference": ?"pay-4"'

block "retire the dead-letter queue"
run_fails "styx queues delete payments-dead --yes"
run "styx queues update payments --dead-queue '' --max-attempts 0"
run "styx queues update payments --max-attempts 0"
answer y "styx queues delete payments-dead"
answer n "styx queues delete payments"

block "find one item, fix it (queues of its own: the step before deleted payments-dead)"
run "styx queues create billing-dead"
run "styx queues create billing --dead-queue billing-dead"
run "styx produce billing '{\"order\":\"A-17\",\"amount\":\"12,50\"}' --reference order-A-17"
run "id=\$(styx lease billing | awk 'NR == 2 { print \$2 }'); styx retry billing \"\$id\" --dead --error 'parse amount: invalid syntax'"
sleep 0.5 # the dead-letter move
run "styx dead list billing-dead --reference order-A-17"
dead=$(styx dead list billing-dead --reference order-A-17 2>/dev/null | awk 'NR == 2 { print $1 }')
run "styx dead edit billing-dead $dead --payload '{\"order\":\"A-17\",\"amount\":\"12.50\"}'"
run "styx dead show billing-dead $dead"
run "styx dead redrive billing-dead --id $dead"
sleep 1 # the redrive task
run "styx activity billing-dead"
run "styx queues history billing"
