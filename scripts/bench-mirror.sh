#!/usr/bin/env bash
# What mirroring costs the primary: the same load through a gateway
# without a mirror and through one that mirrors every request to a
# candidate five times slower (TTFT 250 ms and 50 ms a token against 50
# and 10), three rounds each, interleaved. Everything on 127.0.0.1.
#   go build -o bin/infergate ./cmd/infergate && scripts/bench-mirror.sh
# Reports in $OUT (default /tmp): mb_19201_N.txt (no mirror), mb_19202_N.txt
# (mirror), mb_pairs.jsonl (the pairs; infergate ab report reads it).
set -u
B=${INFERGATE:-bin/infergate}
$B sim --listen 127.0.0.1:19101 --ttft 50ms --itl 10ms --mean-output-tokens 64 >${OUT:-/tmp}/mb_sim1.log 2>&1 &
P1=$!
$B sim --listen 127.0.0.1:19102 --ttft 250ms --itl 50ms --mean-output-tokens 64 >${OUT:-/tmp}/mb_sim2.log 2>&1 &
P2=$!
sleep 1
$B serve --listen 127.0.0.1:19201 --admin-listen off --log-level warn --upstream http://127.0.0.1:19101 >${OUT:-/tmp}/mb_gw1.log 2>&1 &
G1=$!
# Every request copied: the rule's cap above what the slow candidate holds.
cat > ${OUT:-/tmp}/mb_mirror.yaml <<YAML
server: {listen: 127.0.0.1:19202, admin_listen: "off"}
pools:
  primary: {backends: [{url: http://127.0.0.1:19101}]}
  candidate: {backends: [{url: http://127.0.0.1:19102}]}
default_pool: primary
mirror:
  rules: [{name: slow, pool: candidate, sample: 1, max_in_flight: 512}]
  record: {path: ${OUT:-/tmp}/mb_pairs.jsonl}
YAML
rm -f ${OUT:-/tmp}/mb_pairs.jsonl
$B serve --config ${OUT:-/tmp}/mb_mirror.yaml --log-level warn >${OUT:-/tmp}/mb_gw2.log 2>&1 &
G2=$!
sleep 1
for round in 1 2 3; do
  for gw in 19201 19202; do
    $B bench --url http://127.0.0.1:$gw --input-tokens 64 --output-tokens 64 --force-output-length --concurrency 16 --duration 15s --warmup 2s --out ${OUT:-/tmp}/mb_${gw}_$round.json > ${OUT:-/tmp}/mb_${gw}_$round.txt 2>&1
  done
done
kill $G1 $G2 $P1 $P2
wait
