#!/usr/bin/env bash
# Pastes README.md's quick tour line by line, as written (full durations,
# about four minutes), from a fresh clone of this repository, with no
# environment but PATH and HOME: what a newcomer on a laptop without a GPU
# does. Each line must succeed. CI runs the same lines with shortened
# durations (internal/doctest).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git clone -q "$src" "$tmp/infergate"
cd "$tmp/infergate"
go="$(command -v go)"
env -i PATH="$(dirname "$go"):/usr/local/bin:/usr/bin:/bin" HOME="$tmp" GOCACHE="$(go env GOCACHE)" GOMODCACHE="$(go env GOMODCACHE)" \
  INFERGATE_DOCTEST_AS_WRITTEN=1 go test -count=1 -v -run '^TestREADME$' ./internal/doctest
