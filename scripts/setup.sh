#!/usr/bin/env bash
# Sourced by the other scripts: makes sure the Rust targets and cached tools exist (idempotent).
# wasm32 for the web build; aarch64-apple-darwin for the type check of the Metal path (test.sh).
for target in wasm32-unknown-unknown aarch64-apple-darwin; do
  if ! rustup target list --installed 2>/dev/null | grep -x "$target" >/dev/null; then
    rustup target add "$target"
  fi
done
# The pinned nightly + rust-src of the wasm threads build (scripts/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ggweb_nightly >/dev/null
export GGWEB_CACHE="${GGWEB_CACHE:-$HOME/.cache/ggweb}"
mkdir -p "$GGWEB_CACHE"
# NVRTC from PyPI for the CUDA kernel compile test (scripts/setup-cuda.sh).
source "$(dirname "${BASH_SOURCE[0]}")/setup-cuda.sh"
