#!/usr/bin/env bash
# The seed's story on a real engine: llama.cpp's server (built from source
# by scripts/llamacpp-build.sh, the generated model of
# scripts/llamacpp-model.sh, on the CPU) behind the gateway. Each part
# prints what it measured; BENCHMARKS.md quotes the figures.
#
#   go build -o bin/infergate ./cmd/infergate && scripts/bench-llamacpp.sh [PART ...]
#
# Parts (all by default, in this order):
#   baseline  bench straight at llama-server -np 4 and through the gateway
#             (concurrency 4), the gateway's added TTFT (paired requests),
#             a sweep 1,4,8 through the gateway (the knee at the slot count),
#             sessions (4 users, 3 turns, 6 s think time: past the server's
#             5 s idle close) straight and through the gateway
#   diagnose  -np 1 under 8 clients (the slot limit), then -np 4 under 1
#   tune      tune through the gateway in front of -np 4
#   shadow    f16 primary, Q4_0 candidate, every request mirrored; ab report
#   prefix    two servers (-np 2, --cache-ram 0): prefix routing against
#             least outstanding, 2 system prompts (one per server when routed by prefix)
# Everything on 127.0.0.1, on ports free when the script starts; output
# under $OUT (default /tmp/bench-llamacpp). Takes about 15 minutes on 2
# cores.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${INFERGATE:-bin/infergate}
OUT=${OUT:-/tmp/bench-llamacpp}
DUR=${DUR:-20s}
mkdir -p "$OUT"
LL="$(scripts/llamacpp-model.sh)"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(baseline diagnose tune shadow prefix)

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# port: a port free now (the kernel's pick, released at once).
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# await PID URL TRIES LOG: PID (a background server, stopped at exit)
# answers 200 at URL within TRIES tenths of a second, or the last lines
# of LOG are printed and it fails.
await() {
  local pid=$1 url=$2 tries=$3 log=$4
  pids+=($pid)
  for _ in $(seq "$tries"); do
    kill -0 "$pid" 2>/dev/null || break
    curl -fs "$url" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$url did not answer:" >&2
  tail -3 "$log" >&2
  return 1
}

# llama PORT VARIANT NP [ARGS...]: a server in the background, waited for.
llama() {
  local port=$1 variant=$2 np=$3
  shift 3
  ${PIN:+taskset -c $PIN} "$LL/bin/llama-server" -m "$LL/models/infergate-tiny-$variant.gguf" --host 127.0.0.1 --port "$port" \
    -np "$np" -c $((2048 * np)) -n 1024 -t ${THREADS:-1} --metrics --slots --no-webui --alias infergate-tiny "$@" \
    >"$OUT/llama-$port.log" 2>&1 &
  await $! "http://127.0.0.1:$port/health" 600 "$OUT/llama-$port.log"
}

# gateway PORT ADMIN [serve flags...]
gateway() {
  local port=$1 admin=$2
  shift 2
  "$B" serve --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" --log-level warn "$@" >"$OUT/gw-$port.log" 2>&1 &
  await $! "http://127.0.0.1:$admin/readyz" 100 "$OUT/gw-$port.log"
}

stop_all() { cleanup; pids=(); }

LA=$(port) LB=$(port) LC=$(port) LD=$(port) LE=$(port) G=$(port) GADM=$(port)

W=(--input-tokens 256 --output-tokens 64 --force-output-length --quiet)

for part in "${parts[@]}"; do
  echo "=== $part"
  case $part in
  baseline)
    llama $LA f16 4
    gateway $G $GADM --upstream http://127.0.0.1:$LA
    "$B" bench --url http://127.0.0.1:$LA "${W[@]}" --concurrency 4 --duration "$DUR" --out "$OUT/direct.json" | tee "$OUT/direct.txt"
    "$B" bench --url http://127.0.0.1:$G "${W[@]}" --concurrency 4 --duration "$DUR" --out "$OUT/gateway.json" \
      --gateway-timing --direct-url http://127.0.0.1:$LA --pairs 30 | tee "$OUT/gateway.txt"
    "$B" bench --url http://127.0.0.1:$G "${W[@]}" --sweep 1,4,8 --no-sweep-stop --duration "$DUR" --out "$OUT/sweep.json" | tee "$OUT/sweep.txt"
    for url in http://127.0.0.1:$LA http://127.0.0.1:$G; do
      "$B" bench --url $url --input-tokens 128 --output-tokens 32 --force-output-length --quiet \
        --sessions 4 --turns 3 --think-time 6s | tee -a "$OUT/sessions.txt"
    done
    stop_all
    ;;
  diagnose)
    llama $LB f16 1
    gateway $G $GADM --upstream http://127.0.0.1:$LB
    "$B" bench --url http://127.0.0.1:$G "${W[@]}" --concurrency 8 --duration 40s >"$OUT/diag-np1-load.txt" 2>&1 &
    load=$!
    sleep 8
    "$B" diagnose --admin http://127.0.0.1:$GADM --window 20s | tee "$OUT/diag-np1.txt"
    wait $load
    stop_all
    llama $LB f16 4
    gateway $G $GADM --upstream http://127.0.0.1:$LB
    "$B" bench --url http://127.0.0.1:$G "${W[@]}" --concurrency 1 --duration 40s >"$OUT/diag-np4-load.txt" 2>&1 &
    load=$!
    sleep 8
    "$B" diagnose --admin http://127.0.0.1:$GADM --window 20s | tee "$OUT/diag-np4.txt"
    wait $load
    stop_all
    ;;
  tune)
    # Eight users on four slots, short requests; a 5-point quality
    # tolerance keeps each measurement near 114 requests.
    llama $LA f16 4
    gateway $G $GADM --upstream http://127.0.0.1:$LA
    "$B" tune --admin http://127.0.0.1:$GADM --url http://127.0.0.1:$G --slo "${TUNE_SLO:-ttft=1s,tpot=60ms}" \
      --concurrency 8 --input-tokens 64 --output-tokens 32 --force-output-length --quiet --quality-tolerance 5% \
      --budget "${TUNE_BUDGET:-6m}" --max-steps 3 --journal "$OUT/tune.jsonl" --dir "$OUT/tune" | tee "$OUT/tune.txt"
    stop_all
    ;;
  shadow)
    # Each server on a core of its own: on a shared CPU the copy, sent
    # second, would wait on the primary's prefill and read as a slower
    # TTFT (unpinned here: TTFT +24% for a build that, run alone, is 15-30%
    # faster to its first token).
    PIN=0 llama $LA f16 4
    PIN=1 llama $LC q4_0 4
    cat >"$OUT/shadow.yaml" <<YAML
server: {listen: 127.0.0.1:$G, admin_listen: 127.0.0.1:$GADM}
pools:
  primary: {backends: [{url: http://127.0.0.1:$LA}]}
  candidate: {backends: [{url: http://127.0.0.1:$LC}]}
default_pool: primary
mirror:
  rules: [{name: q4_0, pool: candidate, sample: 1, max_in_flight: 64}]
  record: {path: $OUT/pairs.jsonl}
YAML
    rm -f "$OUT/pairs.jsonl"
    "$B" serve --config "$OUT/shadow.yaml" --log-level warn >"$OUT/gw-shadow.log" 2>&1 &
    await $! "http://127.0.0.1:$GADM/readyz" 100 "$OUT/gw-shadow.log"
    # Short requests, so that a minute or two gives the pairs a verdict needs.
    "$B" bench --url http://127.0.0.1:$G --input-tokens 64 --output-tokens 32 --force-output-length --quiet \
      --concurrency 4 --duration "${SHADOW_DUR:-90s}" | tee "$OUT/shadow-load.txt"
    sleep 2
    "$B" ab report "$OUT/pairs.jsonl" | tee "$OUT/shadow.txt" || true
    stop_all
    ;;
  prefix)
    llama $LD f16 2 --cache-ram 0
    llama $LE f16 2 --cache-ram 0
    for sel in least_outstanding prefix; do
      gateway $G $GADM --upstream http://127.0.0.1:$LD --upstream http://127.0.0.1:$LE --selection $sel
      "$B" bench --url http://127.0.0.1:$G --prefix-groups 2 --prefix-tokens 768 --input-tokens 32 --output-tokens 16 \
        --force-output-length --quiet --concurrency 4 --duration "$DUR" --out "$OUT/prefix-$sel.json" | tee "$OUT/prefix-$sel.txt"
      kill "${pids[-1]}"
      wait "${pids[-1]}" 2>/dev/null || true
      unset 'pids[-1]'
    done
    stop_all
    ;;
  *)
    echo "unknown part $part" >&2
    exit 2
    ;;
  esac
done
