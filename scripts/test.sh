#!/usr/bin/env bash
# The tests: both Go modules with the race detector, side by side. The
# gateway's module is at the root; deploy/ (the chart, the compose stack,
# the image builder, with Helm, the Kubernetes types and BuildKit as its
# requirements) is a module of its own, which the root's ./... does not
# reach. Run one after the other, deploy's minute came after the root's
# longest package; much of the root's suite waits on simulated time (the
# simulator sleeps where a GPU would compute), so the two overlap well.
# For the same reason each runs twice as many test binaries at once as
# the machine has CPUs (go test's -p; its default is one per CPU):
# INFERGATE_TEST_P sets another number. deploy's output is held and
# printed after the root's, so neither is cut into the other. Arguments
# go to both `go test` commands (-count=1, -run X, -short).
set -uo pipefail
cd "$(dirname "$0")/.."
p=${INFERGATE_TEST_P:-$(($(nproc) * 2))}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
(cd deploy && go test -race -p "$p" "$@" ./...) >"$out" 2>&1 &
deploy=$!
go test -race -p "$p" "$@" ./...
root=$?
wait "$deploy"
dep=$?
cat "$out"
if [ "$root" -ne 0 ] || [ "$dep" -ne 0 ]; then
  echo "tests failed: root module exit $root, deploy module exit $dep" >&2
  exit 1
fi
