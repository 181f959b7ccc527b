#!/usr/bin/env bash
# All tests: native unit + integration tests, the wasm build check, CLI checks, and the web
# package's tests (wasm-bindgen-test in node and headless Chromium, node:test, browser e2e).
# Installs what it needs, idempotently, so it passes on a fresh machine.
# `scripts/test.sh --full` also runs the long native checks (`long_*`: gemma3, MNIST on all of
# t10k and a training epoch on lavapipe, minutes each), the macOS type check and the fuzz smoke
# under ASan: run it before resolving an issue that touches WebGPU, Metal or a parser. The NEON
# kernels under qemu are scripts/test-aarch64.sh (needs qemu-user and the aarch64 cross gcc).
# Budget: the default run within 45 minutes on a fresh 2-core machine (docs/PERFORMANCE.md).
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
# No debug info in the test builds: the release profile keeps it for profiling, but here it only
# makes ~25 test binaries slower to link.
export CARGO_PROFILE_RELEASE_DEBUG=0
source scripts/lib.sh

step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

step "toolchain"
source scripts/setup.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -q -- -D warnings

step "wasm32 lints (scalar, SIMD128, relaxed SIMD; the wasm tests)"
# The SIMD paths are behind target features, so each build's code is linted with its own flags.
# They go to clippy (after --), which gives them to the workspace's crates only: the
# dependencies are checked once, in one target dir, for all builds (with RUSTFLAGS each build
# checked them again: 15 of a fresh run's minutes), and cargo re-lints our crates whenever
# those flags change.
WASM_LINT=(env CARGO_TARGET_DIR="$root/target/clippy-wasm" cargo clippy -q --target wasm32-unknown-unknown)
"${WASM_LINT[@]}" -p ggweb -p ggweb-wasm --no-default-features -- -D warnings
ggweb_variant simd
# (Unquoted: the variant's flags are words.)
# shellcheck disable=SC2086
"${WASM_LINT[@]}" -p ggweb -p ggweb-wasm -- $VARIANT_RUSTFLAGS -D warnings
# shellcheck disable=SC2086
(cd wasm-tests && "${WASM_LINT[@]}" --all-targets --features webgpu -- $VARIANT_RUSTFLAGS -D warnings)
# Only the CPU kernels differ with relaxed SIMD: wgpu is linted above.
ggweb_variant relaxed
# shellcheck disable=SC2086
"${WASM_LINT[@]}" -p ggweb -p ggweb-wasm --no-default-features -- $VARIANT_RUSTFLAGS -D warnings

if [ -n "$full" ]; then
  # (--full only: ~6 minutes of a fresh 2-core run. The Metal shaders are checked in every run:
  # native-tests/tests/metal_msl.rs translates every WebGPU kernel to MSL as wgpu's Metal backend.)
  step "macOS type check (--full; the Metal path: wgpu's Metal backend; no Apple SDK needed to check)"
  CARGO_TARGET_DIR="$root/target/check-apple" \
    cargo check -q --target aarch64-apple-darwin -p ggweb -p ggweb-cli
fi

step "CUDA backend (feature cuda): lints (its tests run with the native tests)"
cargo clippy --release -q -p ggweb -p ggweb-cli -p ggweb-native-tests --features ggweb-native-tests/cuda,ggweb-cli/cuda --all-targets -- -D warnings

step "GPU driver for the WebGPU tests (lavapipe)"
source scripts/setup-gpu.sh

step "models for the LLM tests (PyPI, cached)"
bash scripts/fetch-models.sh

step "native tests (with the CUDA tests: NVRTC compiles every kernel for sm_80/sm_90; no GPU here: device tests skip)"
# The feature cuda on for the whole run, so the library is built once for the tests, the CUDA
# tests and the CLI (which then also offers --backend cuda).
CUDA_FEATURES=(--features ggweb-native-tests/cuda,ggweb-cli/cuda)
cargo build -q --release --bin ggweb "${CUDA_FEATURES[@]}"
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
cargo_tests "$root/target/native-tests.log" "${CUDA_FEATURES[@]}"
grep -E 'skipped|CUBIN|NVRTC' "$root/target/native-tests.log" | grep -iE 'cuda|nvrtc|cubin' || true
# The LLM checks again on the plain-AVX2 path when this CPU has a wider one (GGWEB_X86_ISA caps
# it): ops_matmul tests every path's kernels, but the LLM checks against llama.cpp run only the
# path picked, and AVX2-only CPUs are common (a session-12 kernel passed every op test and
# failed gemma3's near-tie check on an AVX2-only CI machine). Seconds: the binaries are built.
if grep -qwE 'avx512_vnni|avx_vnni' /proc/cpuinfo 2>/dev/null && grep -qw avx2 /proc/cpuinfo; then
  step "native LLM checks on the AVX2 path (GGWEB_X86_ISA=avx2)"
  GGWEB_X86_ISA=avx2 cargo_tests "$root/target/native-tests-avx2.log" "${CUDA_FEATURES[@]}" \
    --test llm --test llm_gemma3 --test llm_families --test bert --test repack
fi
# The same on the AVX-VNNI path (Intel client CPUs since Alder Lake: VEX vpdpbusd, no AVX-512)
# when this CPU has it below AVX-512.
if grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null && grep -qw avx_vnni /proc/cpuinfo; then
  step "native LLM checks on the AVX-VNNI path (GGWEB_X86_ISA=avxvnni)"
  GGWEB_X86_ISA=avxvnni cargo_tests "$root/target/native-tests-avxvnni.log" "${CUDA_FEATURES[@]}" \
    --test llm --test llm_gemma3 --test llm_families --test bert --test repack
fi
if [ -n "$full" ]; then
  # The long checks are #[ignore = "long: ..."] tests named long_*; the other ignored tests are benchmarks.
  step "native tests: the long checks (--full)"
  cargo_tests "$root/target/native-tests-long.log" "${CUDA_FEATURES[@]}" -- --ignored long_
fi

if [ -n "$full" ]; then
  # (--full only: cargo-fuzz and the ASan build are ~8 minutes of a fresh 2-core run. Every
  # run replays crate/fuzz/regressions natively: native-tests/tests/fuzz_regressions.rs.)
  step "fuzz smoke (--full; cargo-fuzz, nightly: each target briefly; long runs: scripts/fuzz.sh)"
  bash scripts/fuzz.sh --smoke
fi

step "CLI"
bash scripts/test-cli.sh

step "web package and browser"
bash scripts/test-web.sh

step "summary"
passed=$(cat "$root/target/native-tests.log" ${full:+"$root/target/native-tests-long.log"} |
  grep -oE 'test result: ok\. [0-9]+ passed' | awk '{s+=$4} END {print s+0}')
echo "native: $passed passed, 0 failed"
