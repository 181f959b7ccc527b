#!/usr/bin/env bash
# Fuzzing with cargo-fuzz (libFuzzer, nightly): scripts/fuzz.sh [--smoke] [TARGET...] [-- LIBFUZZER_ARGS]
#   scripts/fuzz.sh gguf -- -runs=10000000      a long run of one target (what docs/RELIABILITY.md records)
#   scripts/fuzz.sh --smoke                     every target for a few seconds (scripts/test.sh runs this)
#   FUZZ_SANITIZER=none scripts/fuzz.sh graph -- -runs=10000000
#                                               without AddressSanitizer (default: address): ~4x the
#                                               executions per second; overflow checks, debug assertions
#                                               and every panic still count, only unsafe code loses ASan
# Targets: crate/fuzz/fuzz_targets/*.rs. Seed corpora are built from ../shared/fixtures into
# target/fuzz/corpus/TARGET (kept between runs, so long runs build on each other). Built with
# overflow checks and debug assertions. A crash leaves its input in target/fuzz/artifacts/TARGET/:
# add it to crate/fuzz/regressions/TARGET/ and native-tests replays it (fuzz_regressions.rs).
# Never pause a long run with SIGSTOP (to quiet a benchmark): libFuzzer's -timeout counts wall
# time, so the input running when it resumes is reported as a timeout (a false one: session 13's
# graph run stopped so after 1.04 M runs; the input replays in 0 ms). Run it at nice 19 instead.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
smoke=""
targets=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --) shift; extra=("$@"); break ;;
    *) targets+=("$1") ;;
  esac
  shift
done
all=(gguf model_meta tokenizer chat_template graph mnist_idx)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# cargo-fuzz needs a nightly toolchain (installed on these machines; rustup adds it elsewhere)
# and cargo-fuzz itself, pinned and cached like wasm-bindgen-cli.
cargo_fuzz_version=0.13.2
fuzz_tools="${GGWEB_CACHE:-$HOME/.cache/ggweb}/tools/cargo-fuzz-$cargo_fuzz_version"
rustup toolchain list | grep '^nightly' >/dev/null || rustup toolchain install nightly --profile minimal
if [ ! -x "$fuzz_tools/bin/cargo-fuzz" ]; then
  cargo install --quiet --locked --root "$fuzz_tools" cargo-fuzz --version "=$cargo_fuzz_version"
fi
export PATH="$fuzz_tools/bin:$PATH"

fixtures="$root/../shared/fixtures"
out="$root/target/fuzz"
mkdir -p "$out"
export GGWEB_FUZZ_VOCAB_DIR="$fixtures/vocab"

seed() { # seed TARGET: writes the seed corpus once
  local t=$1 dir="$out/corpus/$1"
  [ -d "$dir" ] && return 0
  mkdir -p "$dir"
  case "$t" in
    gguf)
      cp "$fixtures/models/mnist-cnn-f32.gguf" "$dir/"
      for f in "$fixtures"/vocab/*.gguf; do head -c 8192 "$f" > "$dir/prefix-$(basename "$f")"; done ;;
    tokenizer)
      # One seed per (vocab, test string): the first byte selects the vocab in sorted order.
      python3 - "$fixtures/vocab" "$dir" <<'PY'
import os, sys
src, dst = sys.argv[1], sys.argv[2]
vocabs = sorted(f for f in os.listdir(src) if f.endswith(".gguf"))
for i, v in enumerate(vocabs):
    texts = open(os.path.join(src, v + ".inp"), encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    for j, t in enumerate(texts):
        open(os.path.join(dst, f"{i}-{j}"), "wb").write(bytes([i]) + t.encode())
PY
      ;;
    chat_template)
      cp "$fixtures/reference/chat_template_smollm2.jinja" "$dir/smollm2"
      printf '<start_of_turn>\1gemma3\1You are kind.\1Hi there\1Hello' > "$dir/gemma"
      printf '<|start_header_id|>\1llama\1sys\1user text\1reply' > "$dir/llama3"
      printf '<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\1llama\1a\1b' > "$dir/chatml"
      # The real templates of native-tests/tests/chat_template.rs, each with a short conversation.
      for f in "$root"/native-tests/data/chat/templates/*.jinja; do
        { cat "$f"; printf '\1llama\1sys\1Hi\1Hello\1<think>x</think>y'; } > "$dir/real-$(basename "$f" .jinja)"
      done ;;
    mnist_idx)
      # Prefixes read in Python: `gzip -dc | head -c` dies of SIGPIPE under pipefail (CI exit 141).
      python3 - "$fixtures/mnist" "$dir" <<'PY'
import gzip, os, sys
src, dst = sys.argv[1], sys.argv[2]
for name, gz, n in (("images", "t10k-images-idx3-ubyte.gz", 16 + 784 * 3), ("labels", "t10k-labels-idx1-ubyte.gz", 40)):
    with gzip.open(os.path.join(src, gz)) as f:
        open(os.path.join(dst, name), "wb").write(f.read(n))
PY
      ;;
    *) ;;  # model_meta, graph: the empty input is a valid case; libFuzzer grows from it
  esac
}

max_len() { case "$1" in gguf) echo 65536 ;; chat_template) echo 8192 ;; tokenizer) echo 4096 ;; *) echo 2048 ;; esac; }

# Each sanitizer keeps its own build directory, so switching does not rebuild the other.
san="${FUZZ_SANITIZER:-address}"
build=(-O -a -s "$san" --fuzz-dir .)
[ "$san" = address ] || build+=(--target-dir "$root/target/fuzz-$san")

cd crate/fuzz
cargo +nightly fuzz build "${build[@]}" 2>&1 | grep -E '^(error|warning)' || true
test "${PIPESTATUS[0]}" -eq 0
for t in "${targets[@]}"; do
  seed "$t"
  mkdir -p "$out/artifacts/$t"
  args=(-max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
        -artifact_prefix="$out/artifacts/$t/")
  if [ -n "$smoke" ]; then args+=(-max_total_time=10); fi
  echo "=== fuzz $t ($(date +%T), sanitizer $san)"
  # Regression inputs run first: each must pass.
  if [ -d regressions/$t ] && [ -n "$(ls regressions/$t)" ]; then
    cargo +nightly fuzz run "${build[@]}" "$t" regressions/$t/* -- -runs=0 2>&1 | tail -2
  fi
  set +e
  cargo +nightly fuzz run "${build[@]}" "$t" "$out/corpus/$t" -- "${args[@]}" "${extra[@]}" \
    > "$out/$t${FUZZ_LOG_SUFFIX:-}.log" 2>&1
  status=$?
  set -e
  grep -E '^(stat::|==[0-9]+== ERROR|SUMMARY|Done [0-9]+ runs)|panicked at|Test unit written' "$out/$t${FUZZ_LOG_SUFFIX:-}.log" || true
  if [ "$status" -ne 0 ]; then
    grep -A12 'panicked at' "$out/$t${FUZZ_LOG_SUFFIX:-}.log" | head -20 || true
    echo "fuzz $t: FAILED (exit $status; log $out/$t${FUZZ_LOG_SUFFIX:-}.log)" >&2
    exit 1
  fi
done
