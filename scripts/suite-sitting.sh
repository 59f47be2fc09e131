#!/usr/bin/env bash
# Times the race suite against an earlier commit's, in one sitting: each
# round runs REV's `go test -race -count=1 ./...` (the suite as it was
# then, one module) and this checkout's `scripts/test.sh -count=1`, one
# after the other, and prints each one's wall time, CPU time (user + sys,
# children included) and failed tests.
#
#   scripts/suite-sitting.sh [REV] [ROUNDS]   # default: 6fb128b (the suite
#                                             # issue 42 measured), 2 rounds
#
# Run it with the services and the environment .ci/run sets up (Redis,
# Chromium, llama.cpp's server, the INFERGATE_* variables) on a machine
# doing nothing else. Both sides' race-built packages are compiled first,
# untimed, so that each timed run finds the build cache warm, as CI's do.
# The output of a run with a failed test is kept, and its path printed.
set -uo pipefail
cd "$(dirname "$0")/.."
rev=${1:-6fb128b}
rounds=${2:-2}
tmp=$(mktemp -d)
before="$tmp/before"
git worktree add -q --detach "$before" "$rev" || exit 1
trap 'git worktree remove --force "$before"; rm -rf "$tmp"' EXIT

echo "warming the build caches (not timed)" >&2
(cd "$before" && go test -race -count=1 -run '^$' ./... >/dev/null) || exit 1
go test -race -count=1 -run '^$' ./... >/dev/null || exit 1
(cd deploy && go test -race -count=1 -run '^$' ./... >/dev/null) || exit 1

TIMEFORMAT='%R %U %S'
for round in $(seq "$rounds"); do
  for arm in before after; do
    log="$tmp/$arm-$round.log"
    if [ "$arm" = before ]; then
      { time (cd "$before" && go test -race -count=1 ./... >"$log" 2>&1); } 2>"$log.time"
    else
      { time (scripts/test.sh -count=1 >"$log" 2>&1); } 2>"$log.time"
    fi
    read -r wall user sys <"$log.time"
    failed=$(grep -c -- '--- FAIL' "$log")
    if [ "$failed" -gt 0 ]; then
      kept=$(mktemp --suffix ".$arm-$round.log")
      cp "$log" "$kept"
      echo "($arm round $round's output: $kept)" >&2
    fi
    printf '%-6s round %d: %4.0f s wall, %4.0f s CPU, %d failed tests%s\n' "$arm" "$round" "$wall" \
      "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" "$failed" "$(grep -- '--- FAIL' "$log" | sed 's/^ *--- FAIL: / /; s/ (.*//' | tr -d '\n')"
  done
done
