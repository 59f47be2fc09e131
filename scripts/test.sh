#!/usr/bin/env bash
# The tests: both Go modules with the race detector, one after the
# other. The gateway's module is at the root; deploy/ (the chart, the
# compose stack, the image builder, with Helm, the Kubernetes types and
# BuildKit as its requirements) is a module of its own, which the root's
# ./... does not reach. Arguments go to both `go test` commands (-count=1,
# -run X, -short, -p N).
#
# Not side by side, nor more test binaries at once than go's default (one
# per CPU), though much of the suite waits on simulated time: on 2 cores
# (2026-12-07), the two modules side by side at -p 4 took the suite from
# 466 s to 352 s and passed once, at -p 8 to 272 s with seven timing tests
# failed, and side by side at go's -p (525 s) failed three: the
# simulator's real-time latencies starved of CPU, and A/A checks that run
# their two arms one after the other seeing the load change between them.
set -uo pipefail
cd "$(dirname "$0")/.."
go test -race "$@" ./...
root=$?
(cd deploy && go test -race "$@" ./...)
dep=$?
if [ "$root" -ne 0 ] || [ "$dep" -ne 0 ]; then
  echo "tests failed: root module exit $root, deploy module exit $dep" >&2
  exit 1
fi
