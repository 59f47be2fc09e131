#!/usr/bin/env bash
# Makes the test model for llama.cpp's server: a small llama-architecture
# model with seeded random weights (scripts/llamacpp-model.py) and its
# Q8_0 and Q4_0 variants made by llama-quantize, in <dir>/models/, where
# <dir> is what scripts/llamacpp-build.sh prints (it is run first). Once
# made, the files are reused.
#
#   scripts/llamacpp-model.sh        # prints <dir>
#
# Needs Python 3 with numpy (Debian's python3-numpy, installed when
# missing and apt-get is there).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$("$here/llamacpp-build.sh")"
models="$root/models"
f16="$models/infergate-tiny-f16.gguf"

if [ -f "$f16" ] && [ -f "$models/infergate-tiny-q8_0.gguf" ] && [ -f "$models/infergate-tiny-q4_0.gguf" ]; then
  echo "$root"
  exit 0
fi

py=""
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import numpy' 2>/dev/null; then py="$p"; break; fi
done
if [ -z "$py" ]; then
  if command -v apt-get >/dev/null; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null
    py=/usr/bin/python3
  else
    echo "llamacpp-model: Python 3 with numpy is needed" >&2
    exit 1
  fi
fi

mkdir -p "$models"
tmp="$models/.tmp.$$"
trap 'rm -f "$tmp"' EXIT
"$py" "$here/llamacpp-model.py" "$root/src" "$tmp"
mv "$tmp" "$f16"
for q in q8_0 q4_0; do
  "$root/bin/llama-quantize" "$f16" "$tmp" "$(echo "$q" | tr a-z A-Z)" >/dev/null 2>&1 ||
    { echo "llamacpp-model: llama-quantize $q failed" >&2; exit 1; }
  mv "$tmp" "$models/infergate-tiny-$q.gguf"
done
echo "$root"
