#!/usr/bin/env bash
# WebGPU on a machine with a real GPU (the `device` tool), through the GPU's Vulkan adapter:
# which adapter is chosen, MNIST accuracy on it, every WebGPU op against the CPU backend, the
# mul_mat benchmark, and LLM generation (`generate --backend webgpu` beside `--backend cpu`).
#
#   bash scripts/device-check.sh --prepare   here: build release binaries into target/device/
#                                            (stripped, ~30 MiB) for a machine without cargo or
#                                            network; carry `target/device` to the device
#   bash scripts/device-check.sh             there: run (uses target/device/ when present, else
#                                            builds with cargo)
#
# GGWEB_WEBGPU_ADAPTER=<name substring> picks the adapter (default: "nvidia" when nvidia-smi
# exists). LLM steps need the GGUFs in GGWEB_MODELS (default ~/.cache/ggweb/models) and are
# skipped, saying so, without them. Each step has a time limit so one run fits a short lease.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dev=$root/target/device

if [ "${1:-}" = "--prepare" ]; then
  set -e
  target=${CARGO_TARGET_DIR:-$root/target}
  cargo build -q --release --bin ggweb
  mkdir -p "$dev"
  cp "$target/release/ggweb" "$dev/ggweb"
  # The test binaries cargo built (their names carry a hash).
  cargo test -q --release -p ggweb-native-tests --test webgpu --test webgpu_llm --no-run \
    --message-format=json 2>/dev/null |
    python3 -c "
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get('executable')
    if exe and m.get('target', {}).get('name') in ('webgpu', 'webgpu_llm'):
        shutil.copy(exe, '$dev/' + m['target']['name'] + '-tests')
"
  for f in "$dev"/*; do strip --strip-debug "$f" 2>/dev/null || true; done
  du -sh "$dev"/*
  exit 0
fi

step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }
failed=0
run() { # run LIMIT_S DESCRIPTION CMD...: a failing or timed-out step is reported, the rest go on
  local limit=$1 what=$2; shift 2
  timeout "$limit" "$@"; local rc=$?
  if [ $rc -ne 0 ]; then echo "device-check: '$what' failed (exit $rc)"; failed=$((failed+1)); fi
  return 0
}

source scripts/setup-gpu.sh
if [ -z "${GGWEB_WEBGPU_ADAPTER:-}" ] && command -v nvidia-smi >/dev/null 2>&1; then
  export GGWEB_WEBGPU_ADAPTER=nvidia
fi
step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
command -v vulkaninfo >/dev/null && vulkaninfo --summary 2>/dev/null | grep -E "deviceName|driverName" || true
nproc; uptime

if [ -x "$dev/ggweb" ]; then
  bin=$dev/ggweb
  ops=("$dev/webgpu-tests")
  llm_tests=() # its fixture paths are this checkout's, not the device's
else
  step "build"
  cargo build -q --release --bin ggweb || exit 1
  bin=${CARGO_TARGET_DIR:-$root/target}/release/ggweb
  ops=(cargo test -q --release -p ggweb-native-tests --test webgpu --)
  llm_tests=(cargo test -q --release -p ggweb-native-tests --test webgpu_llm -- --nocapture)
fi

step "adapter and MNIST on WebGPU"
out=$(timeout 120 "$bin" mnist --model cnn --backend webgpu --json); echo "$out"
if ! echo "$out" | grep '"backend":"WebGPU' >/dev/null; then
  echo "device-check: no WebGPU adapter (Vulkan driver missing?)"; exit 1
fi
if [ -n "${GGWEB_WEBGPU_ADAPTER:-}" ] && echo "$out" | grep -i llvmpipe >/dev/null; then
  echo "device-check: got lavapipe, not the GPU '$GGWEB_WEBGPU_ADAPTER'"; failed=$((failed+1))
fi

step "WebGPU ops vs the CPU backend (f16 and f32 paths, split weights)"
# MNIST cases read crate/assets through a compile-time path; MNIST ran above.
run 300 "webgpu op tests" "${ops[@]}" --skip mnist --test-threads 4

step "mul_mat GFLOP/s: WebGPU vs CPU (m = k = 4096)"
run 120 "bench webgpu" "$bin" bench --backend webgpu --types f32,f16,q4_0,q8_0,q4_K --n 1,512 --size 4096 --seconds 0.3
run 120 "bench cpu" "$bin" bench --types q4_0,q4_K --threads "$(nproc)" --n 1,512 --size 4096 --seconds 0.3

models=${GGWEB_MODELS:-$HOME/.cache/ggweb/models}
prompt="Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker who"
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
  step "LLM $m: generate on WebGPU and on the CPU"
  if [ ! -f "$models/$m" ]; then echo "skipped: $models/$m missing"; continue; fi
  GGWEB_SCHED_DEBUG=1 run 180 "generate webgpu $m" "$bin" generate -m "$models/$m" -p "$prompt" -n 32 --json --backend webgpu 2> >(grep -E "^backend|split [0-9]|split into" >&2)
  run 180 "generate cpu $m" "$bin" generate -m "$models/$m" -p "$prompt" -n 32 --json --threads "$(nproc)"
done
if [ ${#llm_tests[@]} -gt 0 ] && [ -d "$models" ]; then
  step "LLM parity WebGPU vs CPU"
  run 300 "webgpu_llm tests" "${llm_tests[@]}"
fi

step "summary"
echo "device-check: $failed step(s) failed"
[ "$failed" -eq 0 ]
