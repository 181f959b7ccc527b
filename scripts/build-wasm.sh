#!/usr/bin/env bash
# Build the wasm engine of the npm package `ggweb` in four variants and write them into www/wasm/:
#   www/wasm/threads/ relaxed, plus shared memory and atomics: the CPU backend on Web Workers
#                     (CPU only; the loader's default where the page is cross-origin isolated).
#                     Built with the pinned nightly (scripts/lib.sh) and -Z build-std.
#   www/wasm/simd/    -C target-feature=+simd128 (SIMD128 kernels) and the WebGPU backend (wgpu)
#   www/wasm/relaxed/ as simd, plus +relaxed-simd (i8 x i7 dots in the 4/5-bit quantized tiles, bit
#                     for bit the simd build's results; fused multiply-add in the f32 tile); the
#                     loader's default where WebAssembly.validate accepts relaxed SIMD
#   www/wasm/scalar/  no SIMD, CPU only (engines without wasm SIMD have no WebGPU either)
# Each holds wasm-bindgen's `--target web` glue (ggweb.js, ggweb.d.ts) and ggweb_bg.wasm optimised
# by wasm-opt from the npm package `binaryen`. The loader (www/src/wasm.ts) picks one at run time.
#
# Installs what it needs, idempotently: the wasm32 target, wasm-bindgen-cli (= the crate's
# wasm-bindgen version, cached under ~/.cache/ggweb/tools), and www/'s npm dependencies.
# Env: PROFILE=release|dev (default release), VARIANTS="simd scalar" (default: all, scripts/lib.sh),
#      NO_OPT=1 skips wasm-opt, WASM_FEATURES="..." sets the crate features of every variant
#      (default: scripts/lib.sh's per variant).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

source "$ROOT/scripts/lib.sh"
WB_VERSION=$(ggweb_wasm_bindgen_version)
WB_ROOT="$(dirname "$(ggweb_wasm_bindgen_bin)")"
WB="$WB_ROOT/bin/wasm-bindgen"
PROFILE="${PROFILE:-release}"
VARIANTS="${VARIANTS:-$GGWEB_VARIANTS}"
TARGET_BASE="${CARGO_TARGET_DIR:-$ROOT/target}"

log() { echo "[build-wasm] $*" >&2; }

# 1. toolchain
if ! rustup target list --installed 2>/dev/null | grep -x wasm32-unknown-unknown >/dev/null; then
  log "adding rust target wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi
if ! [ -x "$WB" ] || [ "$("$WB" --version 2>/dev/null | awk '{print $2}')" != "$WB_VERSION" ]; then
  log "installing wasm-bindgen-cli $WB_VERSION into $WB_ROOT (several minutes, once)"
  cargo install wasm-bindgen-cli --version "$WB_VERSION" --root "$WB_ROOT" --force
fi
# 2. npm deps (binaryen's wasm-opt, typescript)
if ! [ -x www/node_modules/.bin/wasm-opt ] || ! [ -x www/node_modules/.bin/tsc ]; then
  log "installing npm dependencies in www/"
  (cd www && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi
WASM_OPT="$ROOT/www/node_modules/.bin/wasm-opt"

# 3. build the variants (separate target dirs: RUSTFLAGS differ)
for v in $VARIANTS; do
  ggweb_variant "$v"
  FLAGS="$VARIANT_RUSTFLAGS"; OPT_FEATURES="$VARIANT_OPT_FLAGS"; FEATS="${WASM_FEATURES-$VARIANT_FEATURES}"
  TD="$TARGET_BASE/wasm-$v"
  TOOLCHAIN=(); BUILD_STD=()
  if [ -n "$VARIANT_NIGHTLY" ]; then
    TOOLCHAIN=("+$(ggweb_nightly)"); BUILD_STD=(-Z build-std=std,panic_abort)
  fi
  log "cargo ${TOOLCHAIN[*]} build ($v, $PROFILE, features: ${FEATS:-none})"
  if [ "$PROFILE" = release ]; then PFLAG=--release; PDIR=release; else PFLAG=; PDIR=debug; fi
  # shellcheck disable=SC2086 # FLAGS is a list of flags
  RUSTFLAGS="$(echo $FLAGS) ${EXTRA_RUSTFLAGS:-}" CARGO_TARGET_DIR="$TD" \
    cargo "${TOOLCHAIN[@]}" build "${BUILD_STD[@]}" -p ggweb-wasm --lib --target wasm32-unknown-unknown $PFLAG \
    --no-default-features ${FEATS:+--features "$FEATS"}
  OUT="www/wasm/$v"
  rm -rf "$OUT"; mkdir -p "$OUT"
  "$WB" --target web --out-dir "$OUT" --out-name ggweb \
    "$TD/wasm32-unknown-unknown/$PDIR/ggweb_wasm.wasm"
  OPT_BASE="--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
    --enable-mutable-globals --enable-reference-types --enable-multivalue $OPT_FEATURES"
  if [ -z "${NO_OPT:-}" ] && [ "$VARIANT_WASM_OPT" = strip ]; then
    # shellcheck disable=SC2086 # OPT_BASE is a list of flags
    "$WASM_OPT" --strip-debug --strip-producers $OPT_BASE "$OUT/ggweb_bg.wasm" -o "$OUT/ggweb_bg.wasm.opt"
    mv "$OUT/ggweb_bg.wasm.opt" "$OUT/ggweb_bg.wasm"
  elif [ -z "${NO_OPT:-}" ]; then
    # Keep every feature rustc emits (bulk memory, sign-ext, non-trapping f2i, mutable globals,
    # reference types, multivalue) and SIMD for the SIMD build; -O3 for speed. The CPU kernels
    # stay separate functions (--no-inline, before -O3): -O3 would inline every op into one
    # 120 kB function that engines run in their baseline tier until the optimizing compiler is
    # done with it (no on-stack replacement), which made the first ~second of work 3-5x slower.
    # The rule names functions by module path, so a move of the kernels would silently stop it
    # working: first check it against the name section (there until --strip-debug). wasm-opt's
    # only wildcard is `*` (a regex `.*` here; the rest of the pattern is letters and `::`).
    NO_INLINE='ggweb::backend::cpu::*'
    OPT_FLAGS="$OPT_BASE"
    # shellcheck disable=SC2086 # OPT_FLAGS is a list of flags
    FUNCS="$("$WASM_OPT" $OPT_FLAGS --print-function-map "$OUT/ggweb_bg.wasm" | cut -d: -f2-)"
    count() { grep -cE -e "$1" <<<"$FUNCS" || true; }
    KEPT=$(count "^${NO_INLINE//\*/.*}\$")
    # What must stay separate: the op kernels and, in the SIMD builds, the register tiles
    # (`inline(never)`, one function per type: see crate/src/backend/cpu/arch/wasm32/tiles.rs).
    OPS=$(count '^ggweb::backend::cpu::ops::')
    TILES_RE='^ggweb::backend::cpu::arch::wasm32::tiles::(relaxed::)?tile_'
    TILES=$(count "$TILES_RE")
    COVERED=$(grep -E -e '^ggweb::backend::cpu::ops::' -e "$TILES_RE" <<<"$FUNCS" \
      | grep -cE -e "^${NO_INLINE//\*/.*}\$" || true)
    log "--no-inline='$NO_INLINE' keeps $KEPT functions: $OPS op kernels, $TILES tiles"
    if [ "$OPS" -lt 20 ] || { [ "$v" != scalar ] && [ "$TILES" -lt 11 ]; } \
      || [ "$COVERED" -ne $((OPS + TILES)) ]; then
      log "error: the CPU kernels moved or --no-inline no longer covers them; update NO_INLINE and this check"
      exit 1
    fi
    # shellcheck disable=SC2086
    "$WASM_OPT" --no-inline="$NO_INLINE" -O3 --strip-debug --strip-producers $OPT_FLAGS \
      "$OUT/ggweb_bg.wasm" -o "$OUT/ggweb_bg.wasm.opt"
    mv "$OUT/ggweb_bg.wasm.opt" "$OUT/ggweb_bg.wasm"
  fi
  log "$OUT/ggweb_bg.wasm: $(wc -c < "$OUT/ggweb_bg.wasm") bytes"
done
