#!/usr/bin/env bash
# Runs the demo N times and tabulates each step's decision per run
# (issue 41: the same decisions in 10 of 10 quiet runs and in 5 of 5 with
# a CPU-heavy process on one core beside it; BENCHMARKS.md).
#   scripts/demo-repeat.sh N [--busy] [-- DEMO FLAGS...]
# --busy keeps one `yes >/dev/null` spinning on one core for each run; it
# is killed when the run ends (and on exit, whatever happens). Each run's
# output and records go to a folder it names at the end. Exit 0 when every
# step came to the same decision in every run, 1 when one did not or a run
# failed. The figures for BENCHMARKS.md: 10 quiet runs, then 5 busy ones.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 N [--busy] [-- demo flags...]" >&2; exit 2; }
[[ $# -ge 1 && "$1" =~ ^[1-9][0-9]*$ ]] || usage
n=$1
shift
busy=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --busy) busy=1; shift ;;
    --) shift; break ;;
    *) usage ;;
  esac
done

out=$(mktemp -d "${TMPDIR:-/tmp}/infergate-demo-repeat-XXXXXX")
go build -o "$out/infergate" ./cmd/infergate

busy_pid=""
stop_busy() {
  if [[ -n "$busy_pid" ]]; then
    kill "$busy_pid" 2>/dev/null || true
    wait "$busy_pid" 2>/dev/null || true
    busy_pid=""
  fi
}
trap stop_busy EXIT INT TERM

for i in $(seq 1 "$n"); do
  if [[ $busy -eq 1 ]]; then
    # One core kept busy, bounded in time should this script be killed
    # before its trap runs.
    timeout 30m yes >/dev/null &
    busy_pid=$!
  fi
  echo "run $i of $n$([[ $busy -eq 1 ]] && echo ', one core busy')..." >&2
  start=$(date +%s)
  status=0
  "$out/infergate" demo --dir "$out/run-$i" "$@" >"$out/run-$i.txt" 2>&1 || status=$?
  stop_busy
  echo "  $(($(date +%s) - start)) s, exit $status" >&2
  # The demo's "== decisions" block: one "key: DECISION (why)" a line.
  awk '/^== decisions$/ {on=1; next} on && /^$/ {exit} on {
         i = index($0, ": "); key = substr($0, 1, i - 1); rest = substr($0, i + 2)
         j = index(rest, " ("); if (j > 0) rest = substr(rest, 1, j - 1)
         print key "\t" rest }' "$out/run-$i.txt" >"$out/run-$i.decisions"
  if [[ $status -ne 0 || ! -s "$out/run-$i.decisions" ]]; then
    printf 'demo\tfailed (exit %s)\n' "$status" >"$out/run-$i.decisions"
  fi
done

# The table: one row per step, one column per run, and whether they agree.
agree=0
awk -F '\t' -v n="$n" '
  FNR == 1 { run++ }
  { if (!($1 in seen)) { seen[$1] = 1; keys[++k] = $1 }; d[$1, run] = $2 }
  END {
    w = 24
    printf "%-" w "s", "step"
    for (r = 1; r <= n; r++) printf " | %-11s", "run " r
    printf " | agree\n"
    same_all = 1
    for (i = 1; i <= k; i++) {
      key = keys[i]; printf "%-" w "s", key
      first = d[key, 1]; same = 1
      for (r = 1; r <= n; r++) {
        v = (key, r) in d ? d[key, r] : "-"
        printf " | %-11s", v
        if (v != first || v ~ /^failed/) same = 0
      }
      if (!same) same_all = 0
      printf " | %s\n", same ? "yes" : "NO"
    }
    exit same_all ? 0 : 1
  }' $(for i in $(seq 1 "$n"); do echo "$out/run-$i.decisions"; done) >"$out/table.txt" || agree=1
cat "$out/table.txt"
echo "runs, outputs and records: $out" >&2
exit "$agree"
