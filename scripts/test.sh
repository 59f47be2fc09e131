#!/usr/bin/env bash
# The tests: both Go modules with the race detector, side by side. The
# gateway's module is at the root; deploy/ (the chart, the compose stack,
# the image builder, with Helm, the Kubernetes types and BuildKit as its
# requirements) is a module of its own, which the root's ./... does not
# reach. Arguments go to both `go test` commands, after this script's own
# flags, so they win (-count=1, -run X, -short, -p N).
#
# The suite mostly waits: its long tests run loads against simulators in
# real time (tune's walk 60 s on 30 s of CPU, the gateway process tests
# 90 s on 45 s). Run one package at a time per core (go's default) and
# the cores sit half idle (2026-12-07, 2 cores: 371 s wall on 339 s of
# CPU for the root module, then 55 s for deploy's). So:
#
#   - one more test binary at once than there are cores (-p);
#   - the longest packages first, so that none starts last and runs
#     alone at the end (go starts packages in the order they are named;
#     ./... after them adds the rest once);
#   - deploy's module beside the root's, at a lower priority (nice): its
#     image and chart tests are mostly compile and gzip work, which fills
#     the root's waits without taking CPU from the simulators that the
#     root's timing tests measure; its output is printed when the root's
#     is done, not interleaved with it;
#   - up to four tests at once within a package (-parallel 4): the long
#     end-to-end tests that mostly wait on simulated time are t.Parallel;
#     the ones that bound milliseconds or run A/A arms one after the
#     other stay serial.
#
# Measured in one quiet sitting on 2 cores (BENCHMARKS.md, "The test
# suite"): see there for the figures and the command.
set -uo pipefail
cd "$(dirname "$0")/.."
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
slowest="./tune ./cmd/infergate ./diagnose/collect ./bench ./proxy ./internal/doctest ./sim ./shaping ./bench/rank ./mirror/ab ./internal/tokens"

deploy_out=$(mktemp)
trap 'rm -f "$deploy_out"' EXIT
(cd deploy && nice -n 10 go test -race -parallel 4 "$@" ./...) >"$deploy_out" 2>&1 &
deploy_pid=$!
# shellcheck disable=SC2086 # $slowest is a list of packages
go test -race -p $((cores + 1)) -parallel 4 "$@" $slowest ./...
root=$?
wait "$deploy_pid"
dep=$?
echo "# deploy/ (its own module, run beside the root's):"
cat "$deploy_out"
if [ "$root" -ne 0 ] || [ "$dep" -ne 0 ]; then
  echo "tests failed: root module exit $root, deploy module exit $dep" >&2
  exit 1
fi
