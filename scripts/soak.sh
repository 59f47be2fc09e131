#!/usr/bin/env bash
# The soak (BENCHMARKS.md; docs/benchmarks-log.md, "2026-12-03: The soak"): the gateway, the simulator and Redis as
# processes on 127.0.0.1 under a sustained mix of streams and plain calls,
# client aborts at random points, backend faults (resets, stalls, 5xx,
# 429) and a Redis restart halfway; at the end goroutines, open files,
# slots in flight, Redis leases and queue depth must be back to their
# baseline, and every request must have a logged outcome.
#   scripts/soak.sh [DURATION]    (default 10m; the test suite runs 8s)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
d="${1:-10m}"
INFERGATE_SOAK="$d" exec go test -run '^TestSoak$' -count=1 -v -timeout 0 ./cmd/infergate
