#!/usr/bin/env bash
# Build everything the web side needs: both wasm variants (scripts/build-wasm.sh), the TypeScript
# package (www/dist/), and the demo's assets (models, the MNIST test set and, for the training
# demo, the training set from ../shared/fixtures/mnist, copied into www/demo/assets).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/build-wasm.sh"
echo "[build-web] tsc" >&2
(cd www && node_modules/.bin/tsc -p tsconfig.json)
mkdir -p www/demo/assets
for f in mnist-fc-f32.gguf mnist-cnn-f32.gguf t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  if [ -f "crate/assets/$f" ]; then
    cp -f "crate/assets/$f" "www/demo/assets/$f"
  else
    echo "[build-web] warning: crate/assets/$f is missing; the demo will not find it" >&2
  fi
done
# The MNIST training set for the training demo (train.html): the project's fixtures.
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz; do
  if [ -f "../shared/fixtures/mnist/$f" ]; then
    cp -f "../shared/fixtures/mnist/$f" "www/demo/assets/$f"
  else
    echo "[build-web] warning: ../shared/fixtures/mnist/$f is missing; the training demo will not find it" >&2
  fi
done
echo "[build-web] done: www/dist (JS + .d.ts), www/wasm/{threads,relaxed,simd,scalar}, www/demo/assets" >&2
