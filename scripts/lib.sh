#!/usr/bin/env bash
# Sourced by the build and test scripts: the one place for the wasm build variants and for how the
# wasm-bindgen-cli version is found. Defines functions and GGWEB_ROOT only; changes no shell options.
GGWEB_ROOT="${GGWEB_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"

# The wasm engine's builds, in the loader's order of preference.
GGWEB_VARIANTS="relaxed simd scalar"

# ggweb_variant NAME sets, for one build:
#   VARIANT_RUSTFLAGS  rustc target features
#   VARIANT_OPT_FLAGS  the wasm-opt features beyond the baseline ones
#   VARIANT_FEATURES   the crate features of the npm package's build (engines without wasm SIMD have
#                      no WebGPU either, so the scalar build is CPU-only)
ggweb_variant() {
  case "$1" in
    simd)    VARIANT_RUSTFLAGS="-C target-feature=+simd128"
             VARIANT_OPT_FLAGS="--enable-simd"
             VARIANT_FEATURES="webgpu" ;;
    relaxed) VARIANT_RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd"
             VARIANT_OPT_FLAGS="--enable-simd --enable-relaxed-simd"
             VARIANT_FEATURES="webgpu" ;;
    scalar)  VARIANT_RUSTFLAGS=""
             VARIANT_OPT_FLAGS=""
             VARIANT_FEATURES="" ;;
    *) echo "unknown wasm variant '$1' (known: $GGWEB_VARIANTS)" >&2; return 2 ;;
  esac
}

# wasm-bindgen-cli must be exactly the version of the wasm-bindgen crate the build links. The
# crate's `=x.y.z` requirement in Cargo.toml is the one place it is written; this reads what
# Cargo resolved from the lock file (wasm-tests/, its own workspace, is checked against it).
ggweb_wasm_bindgen_version() { ggweb_locked_version "$GGWEB_ROOT/Cargo.lock" wasm-bindgen; }

# ggweb_locked_version LOCKFILE CRATE: the version of CRATE that LOCKFILE resolved.
ggweb_locked_version() {
  awk -v want="name = \"$2\"" '$0 == want { getline; gsub(/^version = "|"$/, ""); print; exit }' "$1"
}

# Where wasm-bindgen-cli (and wasm-bindgen-test-runner) of that version are cached.
ggweb_wasm_bindgen_bin() {
  echo "${GGWEB_TOOLS:-$HOME/.cache/ggweb/tools}/wasm-bindgen-$(ggweb_wasm_bindgen_version)/bin"
}
