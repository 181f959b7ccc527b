#!/usr/bin/env bash
# Same-run A/B of two native builds (a benchmark, never a test): interleaved rounds of
# `ggweb bench` (mul_mat GFLOP/s), SmolLM2 greedy generation at 1 and 2 threads (ids hashed, so a
# changed result shows) and MNIST fc/cnn images/s.
#   scripts/bench-ab.sh OLD/ggweb NEW/ggweb [ROUNDS]   (models: scripts/fetch-models.sh)
set -u
OLD=${1:?old ggweb binary}; NEW=${2:?new ggweb binary}; ROUNDS=${3:-2}
M=${GGWEB_SMOLLM2:-$HOME/.cache/ggweb/models/SmolLM2-135M-Instruct.Q4_1.gguf}
P="Once upon a time there was a little robot who lived in a small house at the edge of the forest. Every morning it"
for round in $(seq "$ROUNDS"); do
  for which in old new; do
    B=$OLD; [ $which = new ] && B=$NEW
    echo "## round $round $which ($(cut -d' ' -f1 /proc/loadavg) load)"
    $B bench --json --types f32,f16,q4_0,q8_0,q4_K,q6_K --threads 1 --n 1,16 --seconds 0.5 2>/dev/null |
      python3 -c "import json,sys; [print(f\"bench {d['type']} n={d['n']} {d['gflops']:.1f}\") for d in json.load(sys.stdin)]"
    for t in 1 2; do
      $B generate -m "$M" -p "$P" -n 64 --temp 0 --threads $t --json 2>/dev/null |
        python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"generate t=$t pp {d['prompt_tok_per_s']:.1f} tg {d['gen_tok_per_s']:.1f} ids {hash(tuple(d['ids']))}\")"
    done
    for m in fc cnn; do
      $B mnist --model $m --threads 2 --json 2>/dev/null |
        python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"mnist $m accuracy {d['accuracy']} img/s {d['images_per_s']:.0f}\")"
    done
  done
done
