#!/usr/bin/env bash
# Builds llama.cpp's llama-server and llama-quantize from the source that
# npm's node-llama-cpp ships (package/llama/gitRelease.bundle), into a
# cache directory, once per machine; a second run finds them and returns.
#
#   scripts/llamacpp-build.sh            # prints the directory holding bin/
#
# The directory is $INFERGATE_LLAMACPP_DIR, or
# ${XDG_CACHE_HOME:-$HOME/.cache}/infergate-llamacpp/<version>. It needs
# npm, git, cmake and g++ (Debian's cmake is installed when missing and
# apt-get is there). About 10 minutes on 2 cores.
set -euo pipefail

version="${INFERGATE_LLAMACPP_NPM_VERSION:-3.21.1}"
root="${INFERGATE_LLAMACPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/infergate-llamacpp/$version}"

# The build's recipe: bumped when its flags change, so a cached build of
# an older recipe is rebuilt. 2: no AMX (see the cmake line).
recipe=2
built() {
  [ -x "$root/bin/llama-server" ] && [ -x "$root/bin/llama-quantize" ] && [ -d "$root/src/gguf-py" ] &&
    [ "$(cat "$root/RECIPE" 2>/dev/null)" = "$recipe" ]
}

if built; then
  echo "$root"
  exit 0
fi

need() { command -v "$1" >/dev/null; }
if ! need cmake || ! need g++; then
  if need apt-get; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ >/dev/null
  else
    echo "llamacpp-build: cmake and g++ are needed" >&2
    exit 1
  fi
fi
need npm || { echo "llamacpp-build: npm is needed to fetch node-llama-cpp@$version" >&2; exit 1; }

mkdir -p "$root"
# One build at a time: a second run (another test session, a helper) would
# delete the sources under the first one's compiler. It waits, then finds
# the finished build.
exec 9>"$root/.lock"
if command -v flock >/dev/null; then
  flock 9
  if built; then
    echo "$root"
    exit 0
  fi
fi
work=$(mktemp -d "$root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "llamacpp-build: fetching node-llama-cpp@$version" >&2
(cd "$work" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
tar -xzf "$work/node-llama-cpp-$version.tgz" -C "$work" package/llama/gitRelease.bundle
rm -rf "$root/src"
git clone --quiet "$work/package/llama/gitRelease.bundle" "$root/src" >&2

# Native code, but without AMX: on a Sapphire Rapids VM whose kernel or
# hypervisor does not grant the tile state, ggml's AMX kernels (used for
# quantized weights) die with a general protection fault at ldtilecfg
# during the server's warm-up. GCC's explicit -mno-* flags win over
# -march=native whatever their order.
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
echo "llamacpp-build: building llama-server and llama-quantize ($(nproc) jobs)" >&2
cmake -S "$root/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON \
  -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" >&2
cmake --build "$work/build" -j"$(nproc)" --target llama-server llama-quantize >&2

mkdir -p "$root/bin"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-quantize" "$root/bin/"
(cd "$root/src" && git rev-parse HEAD) >"$root/COMMIT"
echo "$recipe" >"$root/RECIPE"
echo "$root"
