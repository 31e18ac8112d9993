.PHONY: ha ha-short ha-patroni help test test-short lint proto build bench bench-peers bench-cpu soak bench-postgres bench-postgres-ceiling bench-clusters bench-go pg-start pg-stop cluster-stress faults
help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'
build: ## build the styx binary into ./bin
	go build -ldflags "-X main.version=$$(git describe --tags --always --dirty 2>/dev/null)" -o bin/styx ./cmd/styx
# gotestsum formats `go test -json`: a line per package as it finishes, with
# its time; a failing test's log as it fails and again at the end; the
# skipped tests with their reasons at the end. It exits with go test's
# status. Installed into bin/ by the Go toolchain (the module proxy).
GOTESTSUM_VERSION := v1.13.0
GOTESTSUM := bin/gotestsum
GOTESTSUM_FLAGS := --format pkgname-and-test-fails --format-icons text --format-hide-empty-pkg
# The packages whose tests take longest, named first: go test starts the
# packages' test binaries in the order it is given them, two at a time on two
# cores, so the longest ones start at once and the short ones fill in beside
# them (named in alphabetical order, the service package started two minutes
# in and the suite ended when it did). The rest follow in ./...'s order.
TEST_FIRST := ./service/ ./web/ ./sqs/ ./internal/backend/postgres/ ./cmd/styx/ ./worker/ ./internal/backend/embedded/
# -trimpath: the compiled packages do not depend on the checkout's directory,
# so a fresh clone (CI's) finds them in Go's build cache instead of compiling
# the module again with -race (here 17 s against 77 s before the first test).
# GORACE=atexit_sleep_ms=0: a race-enabled binary otherwise sleeps 1 s
# before it exits (to report races of goroutines still running), once per
# test binary and per race-built server a test stops. GOGC=400: the race
# detector's heap is collected less often (about a tenth less CPU in the
# service package); the memory-budget tests set their own. Both only when
# not set already.
test: ## run every test with the race detector (the CI command); says first which suites will skip; prints each package as it finishes and lists the skipped tests with their reasons at the end
	@[ -n "$$STYX_TEST_POSTGRES_URL" ] || echo "make test: STYX_TEST_POSTGRES_URL is not set: the PostgreSQL tests will skip (make pg-start prints the exports to include them)" >&2
	@command -v chromium >/dev/null || echo "make test: chromium is not installed: the browser tests will skip (apt-get install chromium)" >&2
	@GOBIN="$(CURDIR)/bin" go install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	GORACE="$${GORACE:-atexit_sleep_ms=0}" GOGC="$${GOGC:-400}" $(GOTESTSUM) $(GOTESTSUM_FLAGS) -- -race -trimpath -count=1 -timeout 20m $(TEST_FIRST) ./...
faults: ## the fault-injection suites over many seeds (STYX_FAULT_SEEDS=300; about 2 minutes): power loss, write and sync errors, a full disk, loop panics, PostgreSQL faults (with STYX_TEST_POSTGRES_URL); a failure names its seed. Then the real binary under strace, every store syscall failing with ENOSPC and EIO (STYX_SYSCALL_FAULTS=all, or case names; about 10 minutes; needs strace)
	STYX_FAULT_SEEDS=$${STYX_FAULT_SEEDS:-300} go test -race -count=1 -timeout 60m -run 'TestCrashRecovery|TestWriteFaults|TestDiskFullStaysUpAndHeals|TestPanicNeverAcknowledged|TestWALRotationFaults|TestPostgres' ./service/
	go test -race -count=1 -run 'Fault|Watermark|Panic|Died' ./internal/backend/embedded/pebble/ ./internal/engine/
	STYX_SYSCALL_FAULTS=$${STYX_SYSCALL_FAULTS:-all} STYX_TEST_REQUIRE_STRACE=1 go test -race -count=1 -timeout 60m -v -run 'TestSyscallFaults' ./cmd/styx/
lint: ## gofmt, go vet and staticcheck (installed at v0.8.2 when missing)
	test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))"
	go vet ./...
	command -v staticcheck >/dev/null || test -x "$$(go env GOPATH)/bin/staticcheck" || go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	"$$(command -v staticcheck || echo "$$(go env GOPATH)/bin/staticcheck")" ./...
proto: ## regenerate styxpb from proto/ (needs protoc and protoc-gen-go)
	protoc -I proto --go_out=. --go_opt=module=github.com/styxq/styx proto/styx/v1/styx.proto
bench: ## end-to-end benchmark of a local server with styx-bench; writes bench/report.md (BENCH_DURATION=10s), then Styx beside its peers (bench/peers.sh; BENCH_PEERS=0 skips them)
	./bench/run.sh
bench-peers: ## Styx beside River (on one throwaway PostgreSQL), RabbitMQ quorum queues and NATS JetStream (beside Styx on Pebble), 2 interleaved rounds, with the ceilings (bare SQL, Styx without fsync, bare net/http; BENCH_PEERS_CEILINGS=0 skips them); installs what is missing; writes bench/peers-report.md (about 10 minutes)
	./bench/peers.sh
soak: ## mixed load with retries, dead letters and redrives on a pebble server; RSS, goroutines, open files and p99 every minute into bench/soak-report.md and bench/soak.csv; fails unless flat (SOAK_DURATION=30m SOAK_INTERVAL=1m)
	./bench/soak.sh
bench-postgres: ## benchmark of styx on a throwaway PostgreSQL, one and two nodes; writes bench/postgres-report.md (BENCH_DURATION=10s)
	./bench/postgres.sh
bench-postgres-ceiling: ## the ceiling of one PostgreSQL primary: cycle at batch 1 (32 clients) and 100 (16) with 1, 2 and 4 nodes, twice interleaved; writes bench/postgres-ceiling-report.md (about 5 minutes)
	BENCH_NODES="$${BENCH_NODES:-1 2 4}" BENCH_ROUNDS=$${BENCH_ROUNDS:-2} BENCH_MATRIX="$${BENCH_MATRIX:-cycle 32 1; cycle 16 100}" \
		BENCH_REPORT=$${BENCH_REPORT:-bench/postgres-ceiling-report.md} ./bench/postgres.sh
bench-clusters: ## two PostgreSQL clusters against one (ADR 0023): cycle over two queues, 4 clients, batch 1 and 100, one queue per cluster against both on one, interleaved; writes bench/clusters-report.md (about 3 minutes)
	./bench/clusters.sh
bench-cpu: ## server CPU per 1,000 items beside items/s on Pebble, memory and PostgreSQL, BENCH_OLD_REV (default HEAD) against the working tree, interleaved; writes bench/cpu-report.md
	./bench/cpu.sh
bench-go: ## run the Go benchmarks
	go test -run '^$$' -bench . -benchmem ./...
# PG_DIR is where pg-start keeps its PostgreSQL (data, log, dsn, env); give each checkout its own
# (make pg-start PG_DIR=/tmp/styx-pgtest-b) to run one per checkout side by side.
PG_DIR ?= /tmp/styx-pgtest
pg-start: ## start a throwaway PostgreSQL in PG_DIR (default /tmp/styx-pgtest) for the Postgres tests (PG_PORT=N: on port N, else a free one of 25432-25531, below the ephemeral ports); prints the exports to paste
	@PGTEST_PORT='$(PG_PORT)' scripts/pgtest.sh start '$(PG_DIR)' >/dev/null
	@echo "export STYX_TEST_POSTGRES_URL='$$(cat '$(PG_DIR)/dsn')'"
	@echo "export STYX_TEST_POSTGRES_ENV='$(PG_DIR)/env'"
pg-stop: ## stop the PostgreSQL started by pg-start (the same PG_DIR)
	scripts/pgtest.sh stop '$(PG_DIR)'
cluster-stress: ## run the two-node PostgreSQL cluster tests 30 times under CPU load (needs STYX_TEST_POSTGRES_URL)
	scripts/cluster-stress.sh 30
ha: ## PostgreSQL failover under load with the built binary: a primary and a synchronous standby, two nodes on a multi-host URL under produce/lease/complete/dead-letter/redrive load, SIGKILL the primary, promote the standby; prints the failover times, items lost (must be 0), doubled, leased twice (must be 0), redrive tasks resumed per run (HA_RUNS=10)
	scripts/ha.sh $${HA_RUNS:-10}
ha-short: ## one short run of `make ha` (the CI variant)
	HA_WARMUP=1s HA_AFTER=1s scripts/ha.sh 1
ha-patroni: ## the load of `make ha` on two Patroni-managed PostgreSQL nodes and etcd (deploy/patroni, installed with apt as root): a `patronictl switchover` per run, or SIGKILL of the leader's postmaster and Patroni's own failover with HA_PATRONI_KILL=postmaster; prints the same figures per run (HA_RUNS=3)
	scripts/ha-patroni.sh $${HA_RUNS:-3}
