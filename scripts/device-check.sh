#!/usr/bin/env bash
# The GPU backends on a machine with a real NVIDIA GPU (the `device` tool's H200), in ~10 minutes:
# CUDA first (feature `cuda`: NVRTC, the op table / MNIST / LLM parity tests, mul_mat GFLOP/s and
# GB/s per weight type, decode tok/s), then WebGPU through the GPU's Vulkan adapter when a Vulkan
# loader is there (MNIST, every WebGPU op against the CPU, the mul_mat benchmark).
#
#   bash scripts/device-check.sh --prepare   here: build release binaries with --features cuda into
#                                            target/device/ (stripped; ~45 MiB), for the device,
#                                            which has no cargo and no network; then carry
#                                            `target/device` (run's `carry`)
#   bash scripts/device-check.sh             there: run (uses target/device/ when present, else
#                                            builds with cargo)
#
# Nothing is installed from the network. libcuda comes from the driver; libnvrtc from the
# machine's CUDA toolkit or PyPI package (found with `find`, or GGWEB_NVRTC_LIB). Real model files
# (GGWEB_MODELS, default ~/.cache/ggweb/models) are too large to carry (98-490 MB); without them
# the LLM parity tests and `generate` runs are skipped, saying so, and decode speed is measured on
# a random-weight model of SmolLM2-135M's shapes built in memory by the test binary. When $OUT is
# set the whole log is also written to $OUT/device-check.log. Each step has a time limit.
# GGWEB_WEBGPU_ADAPTER=<name substring> picks the Vulkan adapter (default "nvidia").
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dev=$root/target/device

if [ "${1:-}" = "--prepare" ]; then
  set -e
  target=${CARGO_TARGET_DIR:-$root/target}
  cargo build -q --release -p ggweb-cli --features cuda --bin ggweb
  mkdir -p "$dev"
  cp "$target/release/ggweb" "$dev/ggweb"
  # The test binaries cargo built (their names carry a hash).
  cargo test -q --release -p ggweb-native-tests --features cuda --test cuda --test webgpu --no-run \
    --message-format=json 2>/dev/null |
    python3 -c "
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get('executable')
    if exe and m.get('target', {}).get('name') in ('cuda', 'webgpu'):
        shutil.copy(exe, '$dev/' + m['target']['name'] + '-tests')
"
  for f in "$dev"/*; do strip --strip-debug "$f" 2>/dev/null || true; done
  du -sh "$dev"/*
  exit 0
fi

if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  exec > >(tee "$OUT/device-check.log") 2>&1
fi
step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }
failed=0
run() { # run LIMIT_S DESCRIPTION CMD...: a failing or timed-out step is reported, the rest go on
  local limit=$1 what=$2; shift 2
  timeout "$limit" "$@"; local rc=$?
  if [ $rc -ne 0 ]; then echo "device-check: '$what' failed (exit $rc)"; failed=$((failed+1)); fi
  return 0
}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
nproc; uptime
# Kernels are compiled by NVRTC at run time: find a libnvrtc (toolkit or PyPI), newest first.
if [ -z "${GGWEB_NVRTC_LIB:-}" ]; then
  GGWEB_NVRTC_LIB=$(find /usr/local /opt /usr/lib /usr/lib64 "$HOME/.cache/ggweb/tools" -name 'libnvrtc.so*' \
    ! -name '*builtins*' ! -name '*alt*' 2>/dev/null | sort -rV | head -n 1 || true)
  export GGWEB_NVRTC_LIB
fi
echo "libnvrtc: ${GGWEB_NVRTC_LIB:-none found}"
# CUBINs compiled here are cached for the later steps (each a new process).
export GGWEB_CACHE=${GGWEB_CACHE:-$root/target/device-cache}
mkdir -p "$GGWEB_CACHE"

if [ -x "$dev/ggweb" ]; then
  bin=$dev/ggweb
  cuda_tests=("$dev/cuda-tests")
  webgpu_tests=("$dev/webgpu-tests")
else
  step "build (--features cuda)"
  cargo build -q --release -p ggweb-cli --features cuda --bin ggweb || exit 1
  bin=${CARGO_TARGET_DIR:-$root/target}/release/ggweb
  cuda_tests=(cargo test -q --release -p ggweb-native-tests --features cuda --test cuda --)
  webgpu_tests=(cargo test -q --release -p ggweb-native-tests --test webgpu --)
fi

models=${GGWEB_MODELS:-$HOME/.cache/ggweb/models}
skip_llm=()
for t in smollm2:SmolLM2-135M-Instruct.Q4_1.gguf gemma3:gemma-3-270m-q4_k_m.gguf qwen2:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; do
  if [ ! -f "$models/${t#*:}" ]; then
    echo "skipped: ${t%%:*} parity (no $models/${t#*:})"; skip_llm+=(--skip "${t%%:*}_cuda")
  fi
done

step "CUDA: device, NVRTC, op table, buffers, MNIST, LLM parity vs the CPU"
GGWEB_MODELS=$models run 300 "cuda tests" "${cuda_tests[@]}" --nocapture --test-threads 1 "${skip_llm[@]}"
out=$(timeout 120 "$bin" mnist --model cnn --backend cuda --json); echo "$out"
echo "$out" | grep '"backend":"CUDA' >/dev/null || { echo "device-check: MNIST did not run on CUDA"; failed=$((failed+1)); }

step "CUDA mul_mat: GFLOP/s and GB/s of weights per type (m = k = 4096; H200: 4.8 TB/s HBM3e)"
run 180 "bench cuda" "$bin" bench --backend cuda --types f32,f16,q4_0,q4_1,q5_0,q5_1,q8_0,q4_K,q5_K,q6_K --n 1,512 --size 4096 --seconds 0.3
run 60 "bench cpu" "$bin" bench --types q4_0,q4_K --threads "$(nproc)" --n 1 --size 4096 --seconds 0.3

step "CUDA decode speed: random-weight SmolLM2-135M shapes (CUDA vs CPU)"
run 180 "decode bench" "${cuda_tests[@]}" --ignored --nocapture bench_decode_random_smollm2_shape

prompt="Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker who"
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
  step "LLM $m: generate on CUDA and on the CPU"
  if [ ! -f "$models/$m" ]; then echo "skipped: $models/$m missing"; continue; fi
  GGWEB_SCHED_DEBUG=1 run 120 "generate cuda $m" "$bin" generate -m "$models/$m" -p "$prompt" -n 64 --json --backend cuda 2> >(grep -E "^backend|split [0-9]" >&2)
  run 120 "generate cpu $m" "$bin" generate -m "$models/$m" -p "$prompt" -n 64 --json --threads "$(nproc)"
done

step "WebGPU on the GPU's Vulkan adapter"
if ! ldconfig -p 2>/dev/null | grep -q libvulkan; then
  echo "skipped: no Vulkan loader (carry .gl as scripts/setup-gpu.sh's notes and the device README say)"
else
  export GGWEB_WEBGPU_ADAPTER=${GGWEB_WEBGPU_ADAPTER:-nvidia}
  out=$(timeout 120 "$bin" mnist --model cnn --backend webgpu --json); echo "$out"
  if echo "$out" | grep '"backend":"WebGPU' >/dev/null; then
    run 200 "webgpu op tests" "${webgpu_tests[@]}" --skip mnist --test-threads 4
    run 90 "bench webgpu" "$bin" bench --backend webgpu --types f32,q4_0,q4_K --n 1,512 --size 4096 --seconds 0.3
  else
    echo "skipped: no WebGPU adapter"
  fi
fi

step "summary"
echo "device-check: $failed step(s) failed"
[ "$failed" -eq 0 ]
