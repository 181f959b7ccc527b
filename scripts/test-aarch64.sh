#!/usr/bin/env bash
# Run ggweb's tests for aarch64 under qemu-user (exercises the NEON kernels on an x86 host).
# Needs: rustup target add aarch64-unknown-linux-gnu;
#        apt-get install qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
exec cargo test --target aarch64-unknown-linux-gnu -p ggweb -p ggweb-native-tests "$@"
