#!/usr/bin/env bash
# All tests: native unit + integration tests, the wasm build check, CLI checks, and the web
# package's tests (wasm-bindgen-test in node and headless Chromium, node:test, browser e2e).
# Installs what it needs, idempotently, so it passes on a fresh machine.
# `scripts/test.sh --full` also runs the long native checks (`long_*`: gemma3 on lavapipe, minutes
# each): run it before resolving an issue that touches WebGPU. The NEON kernels under qemu are
# scripts/test-aarch64.sh (needs qemu-user and the aarch64 cross gcc; see its header).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export CARGO_TERM_COLOR=never
full=""
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
  esac
done
export GGWEB_TEST_FULL="$full"
source scripts/lib.sh

step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

step "toolchain"
source scripts/setup.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -q -- -D warnings

step "wasm32 lints (scalar, SIMD128, relaxed SIMD; the wasm tests)"
# The SIMD paths are behind target features, so each build's code is linted with its own flags
# (own target dir: RUSTFLAGS differ).
cargo clippy -q --target wasm32-unknown-unknown -p ggweb -p ggweb-wasm --no-default-features -- -D warnings
ggweb_variant simd
RUSTFLAGS="$VARIANT_RUSTFLAGS" CARGO_TARGET_DIR="$root/target/clippy-wasm-simd128" \
  cargo clippy -q --target wasm32-unknown-unknown -p ggweb -p ggweb-wasm -- -D warnings
(cd wasm-tests && RUSTFLAGS="$VARIANT_RUSTFLAGS" CARGO_TARGET_DIR="$root/target/clippy-wasm-simd128" \
  cargo clippy -q --target wasm32-unknown-unknown --all-targets --features webgpu -- -D warnings)
# Only the CPU kernels differ with relaxed SIMD: skip linting wgpu a second time.
ggweb_variant relaxed
RUSTFLAGS="$VARIANT_RUSTFLAGS" CARGO_TARGET_DIR="$root/target/clippy-wasm-relaxed-simd" \
  cargo clippy -q --target wasm32-unknown-unknown -p ggweb -p ggweb-wasm --no-default-features -- -D warnings

step "macOS type check (the Metal path: wgpu's Metal backend; no Apple SDK needed to check)"
CARGO_TARGET_DIR="$root/target/check-apple" \
  cargo check -q --target aarch64-apple-darwin -p ggweb -p ggweb-cli

step "CUDA backend (feature cuda): lints; NVRTC compiles every kernel for sm_80/sm_90 (no GPU here: device tests skip)"
cargo clippy --release -q -p ggweb -p ggweb-cli -p ggweb-native-tests --features ggweb-native-tests/cuda,ggweb-cli/cuda --all-targets -- -D warnings
if ! cargo test --release -q -p ggweb-native-tests --features cuda --test cuda -- --nocapture \
    >"$root/target/cuda-tests.log" 2>&1; then
  cat "$root/target/cuda-tests.log"; echo "CUDA tests failed"; exit 1
fi
grep -E 'test result|skipped|CUBIN|NVRTC' "$root/target/cuda-tests.log"

step "GPU driver for the WebGPU tests (lavapipe)"
source scripts/setup-gpu.sh

step "models for the LLM tests (PyPI, cached)"
bash scripts/fetch-models.sh

step "native tests"
cargo build -q --release --bin ggweb
# cargo_tests LOG ARGS...: cargo test, its summary lines shown, the whole output in LOG; fails
# exactly when cargo test does (its exit status, not what it prints).
cargo_tests() {
  local log=$1; shift
  set +e
  cargo test --release --workspace --no-fail-fast "$@" 2>&1 | tee "$log" |
    grep -E '^(test result|running|error|failures:|---- )|panicked|FAILED'
  local status=${PIPESTATUS[0]}
  set -e
  if [ "$status" != 0 ]; then
    echo "native tests failed: cargo test exited $status (full log: $log)"; exit 1
  fi
}
cargo_tests "$root/target/native-tests.log"
if [ -n "$full" ]; then
  # The long checks are #[ignore = "long: ..."] tests named long_*; the other ignored tests are benchmarks.
  step "native tests: the long checks (--full)"
  cargo_tests "$root/target/native-tests-long.log" -- --ignored long_
fi

step "fuzz smoke (cargo-fuzz, nightly: each target briefly; long runs: scripts/fuzz.sh)"
bash scripts/fuzz.sh --smoke

step "CLI"
bash scripts/test-cli.sh

step "web package and browser"
bash scripts/test-web.sh

step "summary"
passed=$(cat "$root/target/native-tests.log" ${full:+"$root/target/native-tests-long.log"} |
  grep -oE 'test result: ok\. [0-9]+ passed' | awk '{s+=$4} END {print s+0}')
echo "native: $passed passed, 0 failed"
