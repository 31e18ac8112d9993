#!/usr/bin/env bash
# bench/cpu.sh — server CPU per 1,000 items, beside items/s, on Pebble (fsync),
# memory and PostgreSQL, old build against new in one interleaved run.
#
# A thin front for bench/ab.sh with the rows of issue 29: produce and cycle
# (produce, lease, complete) at batch 100 and batch 1, 4 clients, 1 KiB random
# payloads. The server's CPU time comes from /proc (user + system) over the
# measured window, divided by the items moved. BENCH_OLD_REV (default HEAD)
# is the baseline; with a clean tree and the default, both columns are the
# same build and their spread is the run's noise.
#
# Environment: as bench/ab.sh (BENCH_OLD_REV, BENCH_ROUNDS, BENCH_DURATION,
# BENCH_WARMUP); BENCH_MODES defaults to "sync memory postgres" and
# BENCH_MATRIX to the four rows above; BENCH_REPORT to bench/cpu-report.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export BENCH_OLD_REV=${BENCH_OLD_REV:-HEAD}
export BENCH_MODES=${BENCH_MODES:-sync memory postgres}
export BENCH_MATRIX=${BENCH_MATRIX:-produce 4 100;cycle 4 100;produce 4 1;cycle 4 1}
export BENCH_REPORT=${BENCH_REPORT:-$ROOT/bench/cpu-report.md}
exec "$ROOT/bench/ab.sh"
