#!/usr/bin/env bash
# The CLI as a user runs it: MNIST on the embedded models, LLMs on WebGPU vs the CPU, GGUF info,
# errors on bad input. GGWEB_BIN names the binary (default target/release/ggweb).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${GGWEB_BIN:-target/release/ggweb}
fail() { echo "CLI check failed: $*"; exit 1; }
pass=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# Every SIMD intrinsic is inlined into its kernel. One compiled out of line means a kernel calls
# it: e.g. a closure over intrinsics (`array::from_fn`) is not compiled with its caller's target
# features. So the AVX2 q8_0 GEMV ran 10x slower (gemma3 generation 5 tok/s instead of 39).
# (std's CPU feature detection keeps `_xgetbv` out of line: not a kernel.) nm is binutils, which
# the Rust linker needs anyway.
calls=$(nm -C "$bin" | grep -E 'core::core_arch::[a-z0-9_]+::[a-z0-9_]+::_' | grep -v '::_xgetbv$' || true)
[ -z "$calls" ] || fail "SIMD intrinsics compiled out of line (kernels call them): $calls"
pass=$((pass+1))

out=$($bin mnist --model fc --json); echo "$out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert abs(d['accuracy']-0.9805)<1e-9, d" "$out" || fail "mnist fc accuracy"
pass=$((pass+1))
out=$($bin mnist --model cnn --json); echo "$out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert abs(d['accuracy']-0.9812)<1e-9, d" "$out" || fail "mnist cnn accuracy"
pass=$((pass+1))

# (fc: cnn on lavapipe is a minute of the test budget; native-tests/tests/webgpu.rs runs both.)
out=$($bin mnist --model fc --backend auto --json); echo "$out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert abs(d['accuracy']-0.9805)<1e-9 and 'WebGPU' in d['backend'], d" "$out" || fail "mnist fc on WebGPU (auto)"
pass=$((pass+1))

# LLMs on WebGPU (lavapipe in CI: scripts/test.sh sources scripts/setup-gpu.sh). SmolLM2 greedy
# equals the CPU's; gemma3's 170 MiB embedding/output is over a 128 MiB binding limit (lavapipe's;
# forced here so a GPU with a larger limit splits too), so its get_rows and output mul_mat run
# split over two bindings, which GGWEB_SCHED_DEBUG=1 reports.
models=${GGWEB_MODELS:-$HOME/.cache/ggweb/models}
smol=$models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=$models/gemma-3-270m-q4_k_m.gguf
if [ -f "$smol" ] && [ -f "$gemma" ]; then
  cpu=$($bin generate -m "$smol" -p "Once upon a time" -n 6 --json --threads 2 2>/dev/null)
  gpu=$($bin generate -m "$smol" -p "Once upon a time" -n 6 --json --backend webgpu 2>/dev/null); echo "$gpu"
  python3 -c "
import json,sys; c=json.loads(sys.argv[1]); g=json.loads(sys.argv[2])
assert 'WebGPU' in g['backend'] and c['backend'].startswith('CPU'), (c['backend'], g['backend'])
assert g['ids']==c['ids'] and len(g['ids'])==6, (g['ids'], c['ids'])
" "$cpu" "$gpu" || fail "generate --backend webgpu (SmolLM2) equals the CPU"
  pass=$((pass+1))
  gpu=$(GGWEB_SCHED_DEBUG=1 GGWEB_WEBGPU_MAX_BINDING=134217728 $bin generate -m "$gemma" -p "Once upon a time" -n 4 --json --backend webgpu 2>"$tmp/sched.txt"); echo "$gpu"
  python3 -c "
import json,sys; g=json.loads(sys.argv[1])
assert 'WebGPU' in g['backend'] and len(g['ids'])==4 and g['text'].strip(), g
" "$gpu" || fail "generate --backend webgpu (gemma3)"
  grep -q "token_embd.weight.*split into 2 bindings/dispatches" "$tmp/sched.txt" || fail "gemma3: no split reported by GGWEB_SCHED_DEBUG"
  grep -q "inputs copied: \[\]" "$tmp/sched.txt" && [ "$(grep -c '^  split ' "$tmp/sched.txt")" -ge 1 ] || fail "gemma3: sched debug output"
  pass=$((pass+1))
  $bin eval -m "$smol" -p "The capital of France is" --logits-out "$tmp/cpu.f32" 2>/dev/null
  $bin eval -m "$smol" -p "The capital of France is" --logits-out "$tmp/gpu.f32" --backend auto 2>"$tmp/eval.txt"
  grep -q "backend: WebGPU" "$tmp/eval.txt" || fail "eval --backend auto did not pick WebGPU"
  python3 -c "
import struct,sys
a=open(sys.argv[1],'rb').read(); b=open(sys.argv[2],'rb').read()
x=struct.unpack('%df'%(len(a)//4),a); y=struct.unpack('%df'%(len(b)//4),b)
assert len(x)==len(y)==49152
assert x.index(max(x))==y.index(max(y)) and max(abs(p-q) for p,q in zip(x,y))<1.5
" "$tmp/cpu.f32" "$tmp/gpu.f32" || fail "eval --backend auto logits vs CPU"
  pass=$((pass+1))
else
  echo "LLM checks skipped: $smol or $gemma missing (scripts/fetch-models.sh)"
fi

# Sentence embeddings: one normalised vector per text, sentence-transformers' ≈0.755 for this pair.
minilm=$models/all-MiniLM-L6-v2.f16.gguf
if [ -f "$minilm" ]; then
  out=$($bin embed -m "$minilm" --json --threads 2 "A man is eating food." "A man is eating a piece of bread." 2>/dev/null)
  python3 -c "
import json,math,sys; d=json.loads(sys.argv[1]); a,b=d['embeddings']
assert d['n_embd']==384 and len(a)==len(b)==384, d['n_embd']
assert abs(math.fsum(x*x for x in a)-1)<1e-3
s=math.fsum(x*y for x,y in zip(a,b)); assert abs(s-0.755)<0.005, s
" "$out" || fail "embed --json (all-MiniLM-L6-v2)"
  gpu=$($bin embed -m "$minilm" --json --backend webgpu "A man is eating food." "A man is eating a piece of bread." 2>/dev/null)
  python3 -c "
import json,math,sys; c=json.loads(sys.argv[1])['embeddings']; g=json.loads(sys.argv[2])['embeddings']
for a,b in zip(c,g):
    cos=math.fsum(x*y for x,y in zip(a,b)); assert cos>=0.999, cos
" "$out" "$gpu" || fail "embed --backend webgpu equals the CPU (cosine >= 0.999)"
  pass=$((pass+1))
else
  echo "embed check skipped: $minilm missing (scripts/fetch-models.sh)"
fi

out=$($bin info crate/assets/mnist-cnn-f32.gguf --json)
python3 -c "
import json,sys; d=json.loads(sys.argv[1])
assert d['version']==3 and d['alignment']==32, d
assert d['metadata']['general.architecture']=='mnist-cnn'
t={x['name']:x for x in d['tensors']}
assert t['conv1.kernel']['shape']==[3,3,1,8] and t['conv1.kernel']['type']=='f32', t
" "$out" || fail "info --json"
$bin info crate/assets/mnist-fc-f32.gguf | grep 'fc1.weight' >/dev/null || fail "info text"
pass=$((pass+1))

head -c 100 crate/assets/mnist-fc-f32.gguf > "$tmp/trunc.gguf"
for args in "info $tmp/trunc.gguf" "info $tmp/missing.gguf" "mnist --model $tmp/trunc.gguf" "bench --types q9_9" "generate -m $tmp/missing.gguf -p x --backend nosuch" "generate -m $tmp/missing.gguf -p x --flash-attn maybe" "train mnist --data $tmp --out $tmp/x.gguf --backend webgpu" "train mnist --data $tmp --out $tmp/x.gguf" "nosuchcommand"; do
  set +e; err=$($bin $args 2>&1 >/dev/null); rc=$?; set -e
  [ $rc -eq 1 ] || fail "'ggweb $args' exited $rc, expected 1"
  [ "$(echo "$err" | wc -l)" -eq 1 ] && [[ "$err" == error:* ]] || fail "'ggweb $args' printed '$err'"
  pass=$((pass+1))
done
# Training: fc one epoch on 6,000 training images, saved, then evaluated by `ggweb mnist`.
data=../shared/fixtures/mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  out=$($bin train mnist --model fc --data "$data" --epochs 1 --limit 6000 --batch 32 --lr 2e-3 --threads 2 --out "$tmp/fc.gguf" --json | tail -1); echo "$out"
  ev=$($bin mnist --model "$tmp/fc.gguf" --json --threads 2)
  python3 -c "
import json,sys; t=json.loads(sys.argv[1]); e=json.loads(sys.argv[2])
assert t['test_accuracy']>=0.90 and abs(t['test_accuracy']-e['accuracy'])<1e-9, (t, e)
" "$out" "$ev" || fail "train mnist fc -> mnist round trip"
  pass=$((pass+1))
  # The same training on WebGPU (every node there) follows the CPU's.
  for b in cpu webgpu; do
    $bin train mnist --model fc --data "$data" --epochs 1 --limit 2000 --batch 500 --threads 2 --backend $b --out "$tmp/fc-$b.gguf" --json 2>/dev/null | tail -1 > "$tmp/train-$b.json"
  done
  python3 -c "
import json,sys; c=json.load(open(sys.argv[1])); g=json.load(open(sys.argv[2]))
assert 'WebGPU' in g['backend'] and c['backend'].startswith('CPU'), (c['backend'], g['backend'])
assert abs(g['test_accuracy']-c['test_accuracy'])<=0.005 and abs(g['test_loss']-c['test_loss'])<=2e-3, (c, g)
" "$tmp/train-cpu.json" "$tmp/train-webgpu.json" || fail "train mnist --backend webgpu follows the CPU"
  pass=$((pass+1))
else
  echo "train check skipped: $data missing"
fi
out=$($bin bench --json --types q4_0 --threads 1 --n 1 --size 256 --seconds 0.05)
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d[0]['op']=='mul_mat' and d[0]['type']=='q4_0' and d[0]['gflops']>0, d" "$out" || fail "bench --json"
pass=$((pass+1))
# --as-types: SmolLM2's q8_0 output shape (k = 576) as q4_0 and q5_1; q5_K needs k % 256 = 0: skipped.
out=$($bin bench --llm --json --models smollm2 --types q8_0 --as-types q4_0,q5_1,q5_K --threads 1 --n 1 --seconds 0.01 --stream-mib 0)
python3 -c "
import json,sys
d=[r for r in json.loads(sys.argv[1]) if r['op']=='mul_mat']
assert [(r['type'],r['k'],r['m']) for r in d]==[('q4_0',576,49152),('q5_1',576,49152)], d
assert all(r['gbps']>0 for r in d), d" "$out" || fail "bench --llm --as-types"
pass=$((pass+1))
echo "cli: $pass passed, 0 failed"
