#!/usr/bin/env bash
# Makes sure wgpu finds an adapter without a GPU: installs Mesa's lavapipe (Vulkan adapter
# "llvmpipe", a CPU emulation of a GPU) and the Vulkan loader. Idempotent. Source it (it exports
# XDG_RUNTIME_DIR, a private dir, which silences a loader warning) or run it. Safe under
# `set -euo pipefail`; does not change the caller's shell options.
if ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then _ggweb_sudo=""; else _ggweb_sudo="sudo"; fi
  if ! { $_ggweb_sudo apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $_ggweb_sudo apt-get install -y -qq --no-install-recommends \
           mesa-vulkan-drivers libvulkan1 >/dev/null; }; then
    echo "setup-gpu: could not install mesa-vulkan-drivers libvulkan1; WebGPU tests will report 'no adapter'" >&2
  fi
  unset _ggweb_sudo
fi
if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -d "${XDG_RUNTIME_DIR:-}" ] || [ ! -O "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/ggweb-xdg-$(id -u)"
fi
mkdir -p "$XDG_RUNTIME_DIR" && chmod 0700 "$XDG_RUNTIME_DIR"
true
