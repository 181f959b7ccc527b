#!/usr/bin/env bash
# Builds llama_logits (our reference dumper) against a llama.cpp build tree (static libs).
#   LLAMA_SRC=/path/to/llama.cpp scripts/llama-ref/build.sh   -> target/llama-ref/llama_logits
# Only for producing test references; nothing of llama.cpp is linked into the project.
set -euo pipefail
src="${LLAMA_SRC:-${GGWEB_CACHE:-$HOME/.cache/ggweb}/llama.cpp/src}"   # scripts/build-llama.sh builds it
b="$src/build"
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../target/llama-ref"
mkdir -p "$out"
libs=("$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a")
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" "$here/llama_logits.cpp" \
    -Wl,--start-group "${libs[@]}" -Wl,--end-group -fopenmp -lpthread -ldl -lm -o "$out/llama_logits"
echo "$out/llama_logits"
