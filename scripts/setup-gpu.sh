#!/usr/bin/env bash
# Installs a Vulkan driver so wgpu finds an adapter without a GPU: Mesa's lavapipe ("llvmpipe", a CPU
# emulation of a Vulkan device). Idempotent; source it (it exports XDG_RUNTIME_DIR) or run it.
set -e
if ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null
fi
# The Vulkan loader warns when XDG_RUNTIME_DIR is unset or not private.
if [ -z "$XDG_RUNTIME_DIR" ] || [ ! -d "$XDG_RUNTIME_DIR" ]; then
  export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/ggweb-xdg-$(id -u)"
fi
mkdir -p "$XDG_RUNTIME_DIR"
chmod 0700 "$XDG_RUNTIME_DIR"
set +e
