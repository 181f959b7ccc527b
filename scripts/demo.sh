#!/usr/bin/env bash
# The main job: build the wasm package and the demo, then serve it at http://localhost:${PORT:-8080}
# (MNIST drawing + test-set evaluation on the embedded models, GGUF inspector).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
bash scripts/build-web.sh
echo "serving the demo at http://localhost:${PORT:-8080}/demo/"
exec node scripts/serve.mjs
