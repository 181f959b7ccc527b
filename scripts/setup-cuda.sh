#!/usr/bin/env bash
# Installs NVRTC (the CUDA run-time compiler, no driver or GPU needed) from PyPI's
# nvidia-cuda-nvrtc-cu12 wheel into $GGWEB_CACHE/tools/nvrtc-cu12-<version>, where the `cuda`
# feature looks for it (crate/src/backend/cuda/nvrtc.rs), so that native-tests/tests/cuda.rs
# compiles every kernel of shaders/cuda for sm_80 and sm_90 on any machine. Idempotent: a present
# library is kept (one stat). Cost on a fresh machine: a 90 MB download, 217 MB on disk, ~5 s.
# Sourced by scripts/setup.sh; safe under `set -euo pipefail`. A failure is reported, not fatal
# (the test then prints why it skipped).
_ggweb_nvrtc_version=12.9.86
_ggweb_nvrtc_dir="${GGWEB_CACHE:-$HOME/.cache/ggweb}/tools/nvrtc-cu12-$_ggweb_nvrtc_version"
if [ ! -f "$_ggweb_nvrtc_dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
  if ! python3 -m pip install -q --disable-pip-version-check --no-deps --target "$_ggweb_nvrtc_dir" \
       "nvidia-cuda-nvrtc-cu12==$_ggweb_nvrtc_version" 2>&1 | grep -v "Running pip as the 'root' user" >&2; then
    true
  fi
  if [ ! -f "$_ggweb_nvrtc_dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
    echo "setup-cuda: could not install nvidia-cuda-nvrtc-cu12; the CUDA kernel compile test will skip" >&2
  fi
fi
unset _ggweb_nvrtc_version _ggweb_nvrtc_dir
true
