#!/usr/bin/env python3
"""Writes small decoder GGUFs with random weights in the real tensor layouts of families that have
no small real file on the registries (test fixtures for native-tests/tests/llm_families.rs):

  qwen3   per-head q/k RMSNorm, head_dim (key_length) != n_embd / n_head, no biases, tied output
  phi3    fused attn_qkv, fused gate+up ffn_up (2 * n_ff rows), separate output
  llama3  llama with Llama-3 rope frequency factors (rope_freqs.weight), separate output

Tokenizer "none" with `<arch>.vocab_size`, so llama.cpp loads them; prompts are token ids.
Matrices are F16 and Q8_0 (as real files mix types), norms F32. Deterministic (numpy seed).

    python3 scripts/make-random-gguf.py OUT_DIR     (needs the PyPI packages gguf and numpy)
"""
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

N_VOCAB, N_EMBD, N_LAYER, N_FF, N_CTX = 384, 128, 2, 320, 512


def add(w, name, a, qtype):
    """a: numpy array in (rows = outputs, cols = inputs) order, ggml's [ne0 = cols, ne1 = rows]."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if qtype == T.F32:
        w.add_tensor(name, a)
    elif qtype == T.F16:
        w.add_tensor(name, a.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)


def write(path, arch, rng, *, n_head, n_head_kv, head_dim, rope_base, extra):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"random {arch} test model")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(N_VOCAB)
    w.add_tokenizer_model("none")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)

    def mat(n_out, n_in, scale=1.0):
        return rng.standard_normal((n_out, n_in)) * (scale / np.sqrt(n_in))

    def norm(n):
        return 1.0 + 0.2 * rng.standard_normal(n)

    nq, nkv = n_head * head_dim, n_head_kv * head_dim
    # A tied output reads the embedding: smaller values keep the logits from being one-hot.
    embd_std = 1.0 if extra.get("output", True) else 0.3
    add(w, "token_embd.weight", embd_std * rng.standard_normal((N_VOCAB, N_EMBD)), T.F16)
    add(w, "output_norm.weight", norm(N_EMBD), T.F32)
    if extra.get("output", True):
        add(w, "output.weight", mat(N_VOCAB, N_EMBD, extra.get("out_scale", 10.0)), T.Q8_0)
    if "rope_freqs" in extra:
        add(w, "rope_freqs.weight", extra["rope_freqs"], T.F32)
    for il in range(N_LAYER):
        b = f"blk.{il}."
        add(w, b + "attn_norm.weight", norm(N_EMBD), T.F32)
        if extra.get("fused_qkv"):
            add(w, b + "attn_qkv.weight", mat(nq + 2 * nkv, N_EMBD, 2.0), T.F16)
        else:
            add(w, b + "attn_q.weight", mat(nq, N_EMBD, 2.0), T.F16)
            add(w, b + "attn_k.weight", mat(nkv, N_EMBD, 2.0), T.F16)
            add(w, b + "attn_v.weight", mat(nkv, N_EMBD), T.Q8_0)
        if extra.get("qk_norm"):
            add(w, b + "attn_q_norm.weight", norm(head_dim), T.F32)
            add(w, b + "attn_k_norm.weight", norm(head_dim), T.F32)
        add(w, b + "attn_output.weight", mat(N_EMBD, nq), T.Q8_0)
        add(w, b + "ffn_norm.weight", norm(N_EMBD), T.F32)
        if extra.get("fused_up"):
            add(w, b + "ffn_up.weight", mat(2 * N_FF, N_EMBD), T.Q8_0)
        else:
            add(w, b + "ffn_gate.weight", mat(N_FF, N_EMBD), T.Q8_0)
            add(w, b + "ffn_up.weight", mat(N_FF, N_EMBD), T.Q8_0)
        add(w, b + "ffn_down.weight", mat(N_EMBD, N_FF), T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    write(out / "qwen3-random.gguf", "qwen3", np.random.default_rng(3),
          n_head=4, n_head_kv=2, head_dim=64, rope_base=1e6,
          extra={"qk_norm": True, "output": False})
    write(out / "phi3-random.gguf", "phi3", np.random.default_rng(4),
          n_head=4, n_head_kv=4, head_dim=32, rope_base=1e4,
          extra={"fused_qkv": True, "fused_up": True})
    # Llama-3's factors: 1 for high frequencies, up to 8 for low ones, a ramp between.
    head_dim = 32
    f = np.ones(head_dim // 2, dtype=np.float32)
    f[head_dim // 4:] = np.linspace(1.0, 8.0, head_dim // 4)
    write(out / "llama3-random.gguf", "llama", np.random.default_rng(6),
          n_head=4, n_head_kv=2, head_dim=head_dim, rope_base=100.0,
          extra={"rope_freqs": f, "out_scale": 6.0})


if __name__ == "__main__":
    main()
