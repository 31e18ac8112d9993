#!/usr/bin/env bash
# scripts/cluster-stress.sh N — runs the two-node PostgreSQL cluster tests
# (service: TestCluster*) N times in a row, with -race, while two busy loops
# keep both CPUs loaded, and counts the runs that failed and the runs whose
# output mentions a deadlock (40P01). Needs STYX_TEST_POSTGRES_URL (make
# pg-start prints it). Logs: $TMPDIR/styx-cluster-stress.*/run-<i>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-30}
: "${STYX_TEST_POSTGRES_URL:?set it: make pg-start prints the export}"
dir=$(mktemp -d "${TMPDIR:-/tmp}/styx-cluster-stress.XXXXXX")
go test -race -c -o "$dir/service.test" ./service/
burn() { while :; do :; done; }
burn & b1=$!
burn & b2=$!
trap 'kill $b1 $b2 2>/dev/null' EXIT
pass=0 fail=0
for i in $(seq 1 "$n"); do
	if (cd service && "$dir/service.test" -test.run 'TestCluster' -test.count=1 >"$dir/run-$i.log" 2>&1); then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		echo "run $i failed: $dir/run-$i.log" >&2
	fi
done
deadlocks=$({ grep -l 'deadlock\|40P01' "$dir"/run-*.log || true; } | wc -l)
echo "cluster tests under load: $pass passed, $fail failed, $deadlocks runs mentioning a deadlock (logs in $dir)"
[ "$fail" = 0 ] && [ "$deadlocks" = 0 ]
