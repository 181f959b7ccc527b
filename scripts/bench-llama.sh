#!/usr/bin/env bash
# Side by side with llama.cpp (a benchmark, never a test): interleaved rounds, in one run, of
#  1. LLM tokens/s: `llama-bench -p 120 -n 32` vs `ggweb generate` on a ~120-token prompt, 32
#     tokens, 1 and 2 threads, per model (SmolLM2, gemma3, Qwen2.5; the ones present);
#  2. the same mul_mat shapes (every weight matrix of those models, n = 1 and 120) through
#     ggml's `test-backend-ops perf` (a --test-file of the shapes; it runs 1 thread and re-runs
#     one weight, so weights that fit stay in cache) vs `ggweb bench --llm --stream-mib 0
#     --threads 1` (the same conditions); then ggweb's DRAM-streamed figures for the record.
# The rounds repeat part 1; part 2 runs once after them (~8 min: ggml times each case for a
# while). Prints llama.cpp, ggweb and the ratio ggweb / llama.cpp (> 1: ggweb faster).
#   scripts/bench-llama.sh [ROUNDS]     (env: LLAMA_BIN, GGWEB, MODELS_DIR; SKIP_OPS=1: tokens/s only;
#   GGWEB_OLD=path: also an older ggweb build in the same rounds, for a before/after ratio;
#   ONLY=smollm2,qwen2.5: only these models; DEPTH=N: also 64 tokens generated after a ~N-token
#   prompt, llama-bench -d with ggweb's prompt length)
# llama.cpp: the v0.5.0 bundle built with GGML_NATIVE at $LLAMA_BIN; by default scripts/build-llama.sh
# builds it (once, cached) and gives its path;
# ggweb: a release build (cargo build --release -p ggweb-cli).
# Note: llama-bench's tg32 generates from an empty context, ggweb's after its prompt (a longer
# KV cache), so the generation ratio slightly favours llama.cpp.
set -u
ROUNDS=${1:-2}
if [ -z "${LLAMA_BIN:-}" ]; then
  LLAMA_BIN=$("$(dirname "$0")/build-llama.sh") || { echo "bench-llama.sh: building llama.cpp failed" >&2; exit 1; }
fi
GGWEB=${GGWEB:-target/release/ggweb}
MD=${MODELS_DIR:-$HOME/.cache/ggweb/models}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PROMPT=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog near the river bank.']*9))")

models=()
for m in smollm2:SmolLM2-135M-Instruct.Q4_1.gguf gemma3:gemma-3-270m-q4_k_m.gguf \
  qwen2.5:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; do
  [ -f "$MD/${m#*:}" ] || continue
  [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",${m%%:*},"* ]] || continue
  models+=("$m")
done

# The test-backend-ops file: one MUL_MAT line per shape and n (op, type, ne, params, sources).
"$GGWEB" bench --llm --json --threads 1 --n 1 --seconds 0.01 --stream-mib 0 2>/dev/null |
  python3 -c '
import json, sys
ids = {"q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24),
       "q8_0": (8, 32, 34), "q4_K": (12, 256, 144), "q5_K": (13, 256, 176), "q6_K": (14, 256, 210)}
seen = set()
for r in json.load(sys.stdin):
    if r["op"] != "mul_mat" or (r["type"], r["k"], r["m"]) in seen:
        continue
    seen.add((r["type"], r["k"], r["m"]))
    name = r["type"]
    t, bs, ts = ids[name]
    k, m = r["k"], r["m"]
    row = k // bs * ts
    for n in (1, 120):
        print(29, 0, m, n, 1, 1, 0, 2, t, k, m, 1, 1, ts, row, row * m, row * m,
              0, k, n, 1, 1, 4, 4 * k, 4 * k * n, 4 * k * n, f"{name}_{k}x{m}_n{n}")
' >"$TMP/shapes.txt"

for round in $(seq "$ROUNDS"); do
  echo "## round $round (load $(cut -d' ' -f1 /proc/loadavg))"
  for m in "${models[@]}"; do
    name=${m%%:*}; file=$MD/${m#*:}
    for t in 1 2; do
      "$LLAMA_BIN/llama-bench" -m "$file" -p 120 -n 32 -t "$t" -r 2 -o json 2>/dev/null >"$TMP/l.json"
      "$GGWEB" generate -m "$file" -p "$PROMPT" -n 32 --temp 0 --threads "$t" --json 2>/dev/null >"$TMP/g.json"
      echo '{}' >"$TMP/o.json"
      if [ -n "${GGWEB_OLD:-}" ]; then
        "$GGWEB_OLD" generate -m "$file" -p "$PROMPT" -n 32 --temp 0 --threads "$t" --json 2>/dev/null >"$TMP/o.json"
      fi
      python3 - "$TMP/l.json" "$TMP/g.json" "$name" "$t" "$TMP/o.json" <<'EOF'
import json, sys
l = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2])); o = json.load(open(sys.argv[5]))
pp = next(r["avg_ts"] for r in l if r["n_prompt"] > 0)
tg = next(r["avg_ts"] for r in l if r["n_gen"] > 0)
gpp, gtg = g["prompt_tok_per_s"], g["gen_tok_per_s"]
line = (f"{sys.argv[3]:<8} threads={sys.argv[4]} llama.cpp pp {pp:7.1f} tg {tg:6.1f} | ggweb pp {gpp:7.1f}"
        f" ({len(g['prompt_ids'])} tok) tg {gtg:6.1f} | ratio pp {gpp/pp:.2f} tg {gtg/tg:.2f}")
if o:
    opp, otg = o["prompt_tok_per_s"], o["gen_tok_per_s"]
    line += f" | old pp {opp:7.1f} tg {otg:6.1f} ratio pp {opp/pp:.2f} tg {otg/tg:.2f}"
print(line)
EOF
      if [ -n "${DEPTH:-}" ]; then
        # Generation at depth: ggweb after a ~DEPTH-token prompt, llama.cpp (-d) after as many.
        DP=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog near the river bank.']*max(1, $DEPTH // 13)))")
        "$GGWEB" generate -m "$file" -p "$DP" -n 64 --temp 0 --threads "$t" --ctx-size $((DEPTH + 512)) \
          --json 2>/dev/null >"$TMP/gd.json"
        d=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["prompt_ids"]))' "$TMP/gd.json")
        "$LLAMA_BIN/llama-bench" -m "$file" -p 0 -n 64 -d "$d" -t "$t" -r 1 -o json 2>/dev/null >"$TMP/ld.json"
        python3 - "$TMP/ld.json" "$TMP/gd.json" "$name" "$t" "$d" <<'EOF'
import json, sys
l = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]))
tg = next(r["avg_ts"] for r in l if r["n_gen"] > 0)
print(f"{sys.argv[3]:<8} threads={sys.argv[4]} depth {sys.argv[5]}: llama.cpp tg64 {tg:6.1f} | ggweb tg64 "
      f"{g['gen_tok_per_s']:6.1f} | ratio {g['gen_tok_per_s']/tg:.2f}")
EOF
      fi
    done
  done
done
[ "${SKIP_OPS:-0}" = 1 ] && exit 0
echo "## mul_mat shapes (once, after the rounds: ggml runs each case for a while)"
"$LLAMA_BIN/test-backend-ops" perf -o MUL_MAT -b CPU --test-file "$TMP/shapes.txt" 2>/dev/null >"$TMP/tbo.txt"
"$GGWEB" bench --llm --json --threads 1 --n 1,120 --seconds 0.2 --stream-mib 0 2>/dev/null >"$TMP/gb.json"
python3 - "$TMP/tbo.txt" "$TMP/gb.json" <<'EOF'
import json, re, sys
us = {}
for line in open(sys.argv[1]):
    mm = re.search(r"name=(\S+?),.*?([0-9.]+) us/run", line)
    if mm:
        us[mm.group(1)] = float(mm.group(2))
print("mul_mat, 1 thread, weights re-used (in cache when they fit): us per mul_mat")
for r in json.load(open(sys.argv[2])):
    if r["op"] != "mul_mat":
        continue
    key = f"{r['type']}_{r['k']}x{r['m']}_n{r['n']}"
    if key in us:
        print(f"  {r['model']:<8} {r['tensor']:<19} {key:<22} ggml {us[key]:9.1f} ggweb {r['us']:9.1f}"
              f"  ratio {us[key]/r['us']:.2f}")
EOF
echo "## ggweb, weights streamed from DRAM (128 MiB of copies), with the read bandwidth"
"$GGWEB" bench --llm --threads 1,2 --n 1 --seconds 0.3
