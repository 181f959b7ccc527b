#!/usr/bin/env bash
# Sourced by the build and test scripts: the one place for the wasm build variants and for how the
# wasm-bindgen-cli version is found. Defines functions and GGWEB_ROOT only; changes no shell options.
GGWEB_ROOT="${GGWEB_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"

# The wasm engine's builds, in the loader's order of preference (threads only where the page is
# cross-origin isolated; see www/src/wasm.ts).
GGWEB_VARIANTS="threads relaxed simd scalar"

# The threads build rebuilds the standard library with atomics (-Z build-std): a nightly
# toolchain, pinned here. ggweb_nightly prints the toolchain to use: `nightly-$DATE` when that is
# installed, else the `nightly` channel when its manifest has that date, else it installs
# `nightly-$DATE` (minimal profile + rust-src). Idempotent.
GGWEB_NIGHTLY_DATE="2026-05-20"
ggweb_nightly() {
  local tc="nightly-$GGWEB_NIGHTLY_DATE" manifest
  if ! rustup run "$tc" rustc -V >/dev/null 2>&1; then
    manifest="$(rustup run nightly rustc --print sysroot 2>/dev/null)/lib/rustlib/multirust-channel-manifest.toml"
    if [ -f "$manifest" ] && grep -qx "date = \"$GGWEB_NIGHTLY_DATE\"" "$manifest"; then
      tc=nightly
    else
      echo "[lib.sh] installing rust toolchain $tc (minimal + rust-src)" >&2
      rustup toolchain install "$tc" --profile minimal --component rust-src >&2 || return 1
    fi
  fi
  if ! [ -d "$(rustup run "$tc" rustc --print sysroot)/lib/rustlib/src/rust/library" ]; then
    rustup component add rust-src --toolchain "$tc" >&2 || return 1
  fi
  echo "$tc"
}

# ggweb_variant NAME sets, for one build:
#   VARIANT_RUSTFLAGS  rustc target features
#   VARIANT_OPT_FLAGS  the wasm-opt features beyond the baseline ones
#   VARIANT_FEATURES   the crate features of the npm package's build (engines without wasm SIMD have
#                      no WebGPU either, so the scalar build is CPU-only)
#   VARIANT_NIGHTLY    1 when the build needs the pinned nightly and -Z build-std (threads)
#   VARIANT_WASM_OPT   O3 (wasm-opt -O3, kernels kept out of line) or strip (no optimization passes)
ggweb_variant() {
  VARIANT_NIGHTLY=
  VARIANT_WASM_OPT=O3
  case "$1" in
    # Relaxed SIMD + shared memory and atomics: the CPU backend on Web Workers. CPU only: wgpu's
    # web types are neither Send nor Sync with atomics. The memory is imported (one for the main
    # instance and every worker's), shared, and may grow to 4 GiB; the TLS exports let
    # wasm-bindgen give each worker thread its own TLS block and stack. Legacy symbol names (the
    # nightly's default is v0) keep build-wasm.sh's --no-inline rule matching the kernels.
    threads) VARIANT_RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd,+atomics,+bulk-memory,+mutable-globals
               -C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296
               -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size
               -C link-arg=--export=__tls_align -C link-arg=--export=__tls_base
               -Z unstable-options -C symbol-mangling-version=legacy"
             VARIANT_OPT_FLAGS="--enable-simd --enable-relaxed-simd --enable-threads"
             VARIANT_FEATURES=""
             VARIANT_NIGHTLY=1
             # binaryen 132's optimizations break the shared-memory build: after -O3 two or three
             # threads give wrong MNIST logits, after -O1 they hang; with no passes it is right
             # (www/test/threads.test.mjs). rustc's output is optimized already.
             VARIANT_WASM_OPT=strip ;;
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
