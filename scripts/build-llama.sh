#!/usr/bin/env bash
# Builds the anchor the benchmarks compare with: llama.cpp from the source bundle inside the npm
# package node-llama-cpp@3.22.1 (llama/gitRelease.bundle), with GGML_NATIVE=ON, into
# ${GGWEB_CACHE:-~/.cache/ggweb}/llama.cpp/src/build/bin. Idempotent: prints that bin directory
# and does nothing else when the tools are already built. Never part of scripts/test.sh; nothing of
# llama.cpp is linked into the project (scripts/llama-ref/ builds a reference dumper against it).
#   scripts/build-llama.sh            -> .../build/bin (llama-bench, test-backend-ops, llama-completion,
#                                        llama-tokenize)
#   scripts/build-llama.sh avx2       -> .../build-avx2/bin: GGML_NATIVE=OFF, so AVX2/FMA/F16C/BMI2 and
#                                        no AVX-512 or VNNI: the anchor of an AVX2-only CPU on a wider
#                                        one (beside ggweb with GGWEB_X86_ISA=avx2)
# Needs git, cmake, g++ and npm; installs cmake with apt-get when it is missing and we are root.
# About 20 minutes on 2 cores.
set -euo pipefail
ver=3.22.1
variant=${1:-native}
case "$variant" in
  native) build=build; native=ON ;;
  avx2) build=build-avx2; native=OFF ;;
  *) echo "usage: scripts/build-llama.sh [native|avx2]" >&2; exit 2 ;;
esac
dir="${GGWEB_CACHE:-$HOME/.cache/ggweb}/llama.cpp"
src="$dir/src"
bin="$src/$build/bin"
tools=(llama-bench test-backend-ops llama-completion llama-tokenize)
done_all=1
for t in "${tools[@]}"; do [ -x "$bin/$t" ] || done_all=""; done
[ "$(cat "$src/$build/.ggweb-flags" 2>/dev/null)" = "$variant,no-amx" ] || done_all=""
if [ -n "$done_all" ]; then
  echo "$bin"
  exit 0
fi
if ! command -v cmake >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq cmake >&2
  else
    echo "build-llama.sh: cmake is missing (apt-get install cmake)" >&2
    exit 1
  fi
fi
mkdir -p "$dir"
if [ ! -d "$src/.git" ]; then
  # The bundle is a git bundle of llama.cpp at the release node-llama-cpp pins.
  (cd "$dir" && npm pack --silent "node-llama-cpp@$ver" >&2 && tar -xzf "node-llama-cpp-$ver.tgz" package/llama/gitRelease.bundle)
  git clone -q "$dir/package/llama/gitRelease.bundle" "$src" >&2
  rm -rf "$dir/package" "$dir/node-llama-cpp-$ver.tgz"
fi
# Without AMX: ggml's AMX path (an extra buffer type picked when -march=native has AMX) crashed
# llama-bench on a session VM that lists amx_int8 (2026-12-02: SIGSEGV in ggml_backend_amx_mul_mat,
# every model); ggweb has no AMX kernels, so the AVX-512 / VNNI paths are the comparison. GCC keeps
# explicit -mno-* over -march=native whatever the order.
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
stamp="$src/$build/.ggweb-flags"
flags="$variant,no-amx"
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$flags" ] || rm -rf "${src:?}/$build"
cmake -S "$src" -B "$src/$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$native -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=ON -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" >&2
echo "$flags" >"$stamp"
cmake --build "$src/$build" -j"$(nproc)" --target "${tools[@]}" >&2
echo "$bin"
