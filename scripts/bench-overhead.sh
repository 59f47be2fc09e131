#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: direct vs infergate vs nginx, interleaved, on
# 127.0.0.1 only. Installs Debian's nginx when it is missing. Takes about
# 15 minutes with the defaults; pass infergate overhead flags to change them,
# e.g. scripts/bench-overhead.sh --rounds 3 --scenarios paced,idle
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light
fi
# 5000 idle streams need about 20000 descriptors across the processes.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
go build -o bin/infergate ./cmd/infergate
exec bin/infergate overhead "$@"
