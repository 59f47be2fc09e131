#!/usr/bin/env bash
# The tests: both Go modules with the race detector, side by side. The
# gateway's module is at the root; deploy/ (the chart, the compose stack,
# the image builder, with Helm, the Kubernetes types and BuildKit as its
# requirements) is a module of its own, which the root's ./... does not
# reach. Run one after the other, deploy's minute came after the root's
# longest package; much of the root's suite waits on simulated time (the
# simulator sleeps where a GPU would compute), so the two overlap well.
# deploy's output is held and printed after the root's, so neither is cut
# into the other. Arguments go to both `go test` commands (-count=1,
# -run X, -short, -p N).
#
# More test binaries at once than go's default (one per CPU) would shorten
# the wall time further, but not safely: on 2 cores, -p 4 took the suite
# from 466 s (before the structure work, one module after the other) to
# 352 s and passed; -p 8 took it to 272 s and failed seven timing tests,
# the simulator's real-time latencies starved of CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
(cd deploy && go test -race "$@" ./...) >"$out" 2>&1 &
deploy=$!
go test -race "$@" ./...
root=$?
wait "$deploy"
dep=$?
cat "$out"
if [ "$root" -ne 0 ] || [ "$dep" -ne 0 ]; then
  echo "tests failed: root module exit $root, deploy module exit $dep" >&2
  exit 1
fi
