#!/usr/bin/env bash
# All tests: native unit + integration tests, the wasm build check, CLI checks, and the web
# package's tests (wasm-bindgen-test in node and headless Chromium, node:test, browser e2e).
# Installs what it needs, idempotently, so it passes on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export CARGO_TERM_COLOR=never

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
RUSTFLAGS="-C target-feature=+simd128" CARGO_TARGET_DIR="$root/target/clippy-wasm-simd128" \
  cargo clippy -q --target wasm32-unknown-unknown -p ggweb -p ggweb-wasm -- -D warnings
# Only the CPU kernels differ with relaxed SIMD: skip linting wgpu a second time.
RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" CARGO_TARGET_DIR="$root/target/clippy-wasm-relaxed-simd" \
  cargo clippy -q --target wasm32-unknown-unknown -p ggweb -p ggweb-wasm --no-default-features -- -D warnings
(cd wasm-tests && RUSTFLAGS="-C target-feature=+simd128" CARGO_TARGET_DIR="$root/target/clippy-wasm-simd128" \
  cargo clippy -q --target wasm32-unknown-unknown --all-targets --features webgpu -- -D warnings)

step "GPU driver for the WebGPU tests (lavapipe)"
source scripts/setup-gpu.sh

step "models for the LLM tests (PyPI, cached)"
bash scripts/fetch-models.sh

step "native tests"
cargo build -q --release --bin ggweb
cargo test --release --workspace 2>&1 | tee "$root/target/native-tests.log" | grep -E '^(test result|running|error|failures:|---- )|panicked|FAILED' || true
if grep -qE 'test result: FAILED|error(\[E[0-9]+\])?:|could not compile' "$root/target/native-tests.log"; then
  echo "native tests failed (full log: target/native-tests.log)"; exit 1
fi

step "CLI"
bash scripts/test-cli.sh

step "web package and browser"
bash scripts/test-web.sh

step "summary"
passed=$(grep -hoE 'test result: ok\. [0-9]+ passed' "$root/target/native-tests.log" | awk '{s+=$4} END {print s+0}')
echo "native: $passed passed, 0 failed"
