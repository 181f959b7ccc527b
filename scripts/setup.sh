#!/usr/bin/env bash
# Sourced by the other scripts: makes sure the Rust targets and cached tools exist (idempotent).
if ! rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
# The pinned nightly + rust-src of the wasm threads build (scripts/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ggweb_nightly >/dev/null
export GGWEB_CACHE="${GGWEB_CACHE:-$HOME/.cache/ggweb}"
mkdir -p "$GGWEB_CACHE"
