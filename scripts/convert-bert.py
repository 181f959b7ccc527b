#!/usr/bin/env python3
"""Convert a Hugging Face BERT sentence-embedding model (safetensors + vocab.txt, e.g.
sentence-transformers/all-MiniLM-L6-v2) to a GGUF in llama.cpp's `bert` layout.

Usage: scripts/convert-bert.py MODEL_DIR OUT.gguf [--f32]

MODEL_DIR holds config.json, model.safetensors, vocab.txt, tokenizer_config.json and optionally
1_Pooling/config.json (sentence-transformers' pooling; default mean). Matrices are written as f16
(f32 with --f32), biases and norms as f32. The vocabulary is written in llama.cpp's WordPiece form:
special tokens as they are (type CONTROL), continuation pieces without their `##`, every other
token with a leading U+2581. Needs numpy and the PyPI `gguf` package (not a runtime dependency).
"""
import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType, PoolingType, TokenType

POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3}


def read_safetensors(path):
    """name -> float32 array, from the safetensors container (JSON header + raw little-endian)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "F16": np.float16, "BF16": None}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] not in ("F32", "F16", "BF16"):
            continue  # integer buffers (position_ids) are not weights
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtypes[info["dtype"]]).astype(np.float32)
        out[name] = arr.reshape(info["shape"])
    return out


def tensor_name(hf):
    """llama.cpp's name for a Hugging Face BERT tensor (None: not used for embeddings)."""
    n = hf.removeprefix("bert.")
    fixed = {
        "embeddings.word_embeddings.weight": "token_embd.weight",
        "embeddings.position_embeddings.weight": "position_embd.weight",
        "embeddings.token_type_embeddings.weight": "token_types.weight",
        "embeddings.LayerNorm.weight": "token_embd_norm.weight",
        "embeddings.LayerNorm.bias": "token_embd_norm.bias",
    }
    if n in fixed:
        return fixed[n]
    if not n.startswith("encoder.layer."):
        return None  # pooler, position_ids, heads
    rest = n[len("encoder.layer."):]
    il, sub = rest.split(".", 1)
    parts = {
        "attention.self.query": "attn_q",
        "attention.self.key": "attn_k",
        "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output",
        "attention.output.LayerNorm": "attn_output_norm",
        "intermediate.dense": "ffn_up",
        "output.dense": "ffn_down",
        "output.LayerNorm": "layer_output_norm",
    }
    base, kind = sub.rsplit(".", 1)
    kind = {"gamma": "weight", "beta": "bias"}.get(kind, kind)
    if base not in parts:
        raise SystemExit(f"unknown tensor {hf}")
    return f"blk.{il}.{parts[base]}.{kind}"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    f32 = "--f32" in sys.argv
    model_dir, out = args
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tok_cfg = {}
    p = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(p):
        tok_cfg = json.load(open(p))
    pooling = "mean"
    p = os.path.join(model_dir, "1_Pooling", "config.json")
    if os.path.exists(p):
        pc = json.load(open(p))
        if pc.get("pooling_mode_cls_token"):
            pooling = "cls"
        elif pc.get("pooling_mode_lasttoken"):
            pooling = "last"
        elif not pc.get("pooling_mode_mean_tokens", True):
            raise SystemExit("unsupported pooling in 1_Pooling/config.json")

    vocab = [l.rstrip("\n") for l in open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8")]
    specials = {tok_cfg.get(k, d) for k, d in [("unk_token", "[UNK]"), ("sep_token", "[SEP]"),
                ("pad_token", "[PAD]"), ("cls_token", "[CLS]"), ("mask_token", "[MASK]")]}
    tokens, types = [], []
    for t in vocab:
        if t in specials:
            tokens.append(t)
            types.append(TokenType.CONTROL)
        elif t.startswith("##"):
            tokens.append(t[2:])
            types.append(TokenType.NORMAL)
        else:
            tokens.append("\u2581" + t)
            types.append(TokenType.NORMAL)
    ids = {t: i for i, t in enumerate(vocab)}

    w = GGUFWriter(out, "bert")
    w.add_name(os.path.basename(os.path.normpath(model_dir)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg.get("layer_norm_eps", 1e-12))
    w.add_causal_attention(False)
    w.add_pooling_type(PoolingType(POOLING[pooling]))
    w.add_file_type(0 if f32 else 1)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(cfg.get("type_vocab_size", 2))
    for key, name in [("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"),
                      ("cls_token", "[CLS]"), ("mask_token", "[MASK]")]:
        tid = ids[tok_cfg.get(key, name)]
        {"unk_token": w.add_unk_token_id, "sep_token": w.add_sep_token_id,
         "pad_token": w.add_pad_token_id, "cls_token": w.add_bos_token_id,
         "mask_token": w.add_mask_token_id}[key](tid)
    lower = tok_cfg.get("do_lower_case", True)
    w.add_bool("tokenizer.ggml.normalizer.lowercase", lower)

    weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    for hf, arr in weights.items():
        name = tensor_name(hf)
        if name is None:
            continue
        # token_types is added as a row view (llama.cpp adds only f32 to f32); the position
        # table is small: both stay f32 as llama.cpp's converter writes them.
        small = name in ("token_types.weight", "position_embd.weight")
        if arr.ndim >= 2 and not f32 and not small:
            w.add_tensor(name, arr.astype(np.float16), raw_dtype=GGMLQuantizationType.F16)
        else:
            w.add_tensor(name, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
