#!/usr/bin/env bash
# On a machine with a real GPU (the `device` tool): build, run the WebGPU op tests on the GPU's
# Vulkan adapter, and the mul_mat benchmark. Prints the adapter chosen. Usage:
#   bash scripts/device-check.sh            (GGWEB_WEBGPU_ADAPTER=<name substring> to choose)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-gpu.sh
# Prefer a hardware adapter over lavapipe when one exists.
if [ -z "${GGWEB_WEBGPU_ADAPTER:-}" ] && command -v nvidia-smi >/dev/null 2>&1; then
  export GGWEB_WEBGPU_ADAPTER=nvidia
fi
cargo test -p ggweb-native-tests --test webgpu -- --test-threads 2 2>&1 | tail -20
cargo test -p ggweb-native-tests --test webgpu bench -- --ignored --nocapture 2>&1 | grep -E "adapter|GFLOP"
