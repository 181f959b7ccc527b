#!/usr/bin/env bash
# Run ggweb's tests for aarch64 under qemu-user (exercises the NEON / SDOT / SMMLA kernels on an
# x86 host). Needs: rustup target add aarch64-unknown-linux-gnu;
#        apt-get install qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross
#
#   scripts/test-aarch64.sh            the aarch64 kernels' tests (release), on three emulated CPUs:
#                                      qemu's `max` (dotprod + i8mm), neoverse-n1 (dotprod, no
#                                      i8mm) and cortex-a72 (NEON only), so every run-time path
#                                      runs: the CPU module's unit tests (the fused attention's
#                                      kernels among them), --test ops_matmul,
#                                      and the small random-weight LLMs of --test
#                                      llm_families (F16 / Q8_0 matrices); then, on `max` only,
#                                      --test ops_basic flash_attn, --test quant and the real LLMs against llama.cpp (--test
#                                      llm, llm_gemma3, llm_families: SmolLM2 Q4_1, gemma3 and
#                                      Qwen2.5 Q4_K_M; the quantized tiles are bit-identical to the
#                                      scalar vec_dot on every path, so once is enough). ~8 min.
#   scripts/test-aarch64.sh ARGS...    `cargo test --target aarch64-unknown-linux-gnu -p ggweb
#                                      -p ggweb-native-tests ARGS...` (QEMU_CPU picks the CPU)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
if [ $# -gt 0 ]; then
  exec cargo test --target aarch64-unknown-linux-gnu -p ggweb -p ggweb-native-tests "$@"
fi

t() { cargo test -q --release --target aarch64-unknown-linux-gnu "$@"; }
for cpu in max neoverse-n1 cortex-a72; do
  echo "== qemu -cpu $cpu"
  export QEMU_CPU=$cpu
  t -p ggweb --lib backend::cpu
  # --nocapture: the tile test prints which paths this CPU skipped.
  t -p ggweb-native-tests --test ops_matmul -- --nocapture aarch64_tile_paths
  t -p ggweb-native-tests --test ops_matmul -- --skip aarch64_tile_paths
  t -p ggweb-native-tests --test llm_families random
done
export QEMU_CPU=max
# The fused attention's NEON kernels (the LLMs' default attention on aarch64) against the
# reference, then the real LLMs through it.
t -p ggweb-native-tests --test ops_basic flash_attn
t -p ggweb-native-tests --test quant --test llm --test llm_gemma3 --test llm_families
