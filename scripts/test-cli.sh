#!/usr/bin/env bash
# The CLI as a user runs it: MNIST on the embedded models, GGUF info, errors on bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/ggweb
fail() { echo "CLI check failed: $*"; exit 1; }
pass=0

out=$($bin mnist --model fc --json); echo "$out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert abs(d['accuracy']-0.9805)<1e-9, d" "$out" || fail "mnist fc accuracy"
pass=$((pass+1))
out=$($bin mnist --model cnn --json); echo "$out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert abs(d['accuracy']-0.9812)<1e-9, d" "$out" || fail "mnist cnn accuracy"
pass=$((pass+1))

out=$($bin mnist --model cnn --backend auto --json); echo "$out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert abs(d['accuracy']-0.9812)<1e-9 and 'WebGPU' in d['backend'], d" "$out" || fail "mnist cnn on WebGPU (auto)"
pass=$((pass+1))

out=$($bin info crate/assets/mnist-cnn-f32.gguf --json)
python3 -c "
import json,sys; d=json.loads(sys.argv[1])
assert d['version']==3 and d['alignment']==32, d
assert d['metadata']['general.architecture']=='mnist-cnn'
t={x['name']:x for x in d['tensors']}
assert t['conv1.kernel']['shape']==[3,3,1,8] and t['conv1.kernel']['type']=='f32', t
" "$out" || fail "info --json"
$bin info crate/assets/mnist-fc-f32.gguf | grep -q 'fc1.weight' || fail "info text"
pass=$((pass+1))

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 100 crate/assets/mnist-fc-f32.gguf > "$tmp/trunc.gguf"
for args in "info $tmp/trunc.gguf" "info $tmp/missing.gguf" "mnist --model $tmp/trunc.gguf" "bench --types q9_9" "nosuchcommand"; do
  set +e; err=$($bin $args 2>&1 >/dev/null); rc=$?; set -e
  [ $rc -eq 1 ] || fail "'ggweb $args' exited $rc, expected 1"
  [ "$(echo "$err" | wc -l)" -eq 1 ] && [[ "$err" == error:* ]] || fail "'ggweb $args' printed '$err'"
  pass=$((pass+1))
done
out=$($bin bench --json --types q4_0 --threads 1 --n 1 --size 256 --seconds 0.05)
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d[0]['op']=='mul_mat' and d[0]['type']=='q4_0' and d[0]['gflops']>0, d" "$out" || fail "bench --json"
pass=$((pass+1))
echo "cli: $pass passed, 0 failed"
