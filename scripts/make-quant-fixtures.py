#!/usr/bin/env python3
"""Write native-tests/data/quant/*.bin: reference (de)quantization fixtures for ggweb's quant tests.

Fixture format (little endian):
    u32 type id (GGUF), u32 n (elements),
    raw block bytes (row_size(type, n)),
    f32[n]  gguf-py's gguf.quants.dequantize of those bytes,
    optional f32[n] source values: present when the bytes are the quantization of these values by
            an external reference (gguf-py's gguf.quants.quantize, or ggml's C
            quantize_row_*_ref when --ggml-lib is given); ggweb must produce the same bytes.
For Q8_1 and Q8_K (activation types gguf-py cannot dequantize; ggml's Q8_1 is 36 bytes) the
values are numpy's d·q, which is ggml's dequantize_row_q8_*.

Sources:
  * real tensors: the first 2 rows of one tensor per type from the GGUF files given
    (SmolLM2-135M-Instruct.Q4_1.gguf: Q4_1, Q8_0; gemma-3-270m-q4_k_m.gguf: Q4_K, Q5_0, Q6_K, Q8_0);
  * random data quantized by gguf-py for the types it can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0);
  * random block bytes (sane f16 scales) for Q2_K, Q3_K, Q5_K, which appear in neither file and
    which gguf-py cannot quantize: checks dequantization only;
  * optionally (--ggml-lib PATH to a shared library built from ggml's src/ggml-quants.c) random
    data and awkward edge cases quantized by ggml's own quantize_row_*_ref for every type,
    k-quants and q8_1/q8_K included: checks quantization bytes. Build the library with e.g.
      gcc -O2 -ffp-contract=off -fPIC -shared -Iinclude -Isrc -o libq.so src/ggml-quants.c stub.c -lm
    in a ggml checkout, where stub.c defines ggml_abort, ggml_log_internal, ggml_row_size,
    ggml_type_name and ggml_type_size (never called by the *_ref functions).

Usage:
  scripts/make-quant-fixtures.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf \\
      --gguf gemma-3-270m-q4_k_m.gguf [--ggml-lib /tmp/ggmlsrc/libq.so] [--out native-tests/data/quant]
"""
import argparse
import ctypes
import struct
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

SEED = 20240611
# ggml's block_q8_1 is 36 bytes; gguf-py's table may say otherwise, so never use Q8_1 here.
WANT_REAL = [T.Q4_1, T.Q8_0, T.Q4_K, T.Q5_0, T.Q6_K]
GGUFPY_QUANT = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
RANDOM_BYTES = [T.Q2_K, T.Q3_K, T.Q5_K, T.Q4_K, T.Q6_K]
GGML_REF = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
            T.Q8_1, T.Q8_K]
MAX_BYTES = 64 * 1024


# ggml's current sizes where gguf-py's table differs or lacks the type (activation types).
OWN_SIZES = {T.Q8_1: (32, 36), T.Q8_K: (256, 292)}


def sizes(t):
    return OWN_SIZES.get(t) or gguf.GGML_QUANT_SIZES[t]


def own_dequantize(raw: bytes, t) -> np.ndarray:
    """d·q for the activation types gguf-py cannot dequantize (ggml's dequantize_row_q8_*)."""
    bs, ts = sizes(t)
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, ts)
    if t == T.Q8_1:
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = b[:, 4:36].copy().view(np.int8).astype(np.float32)
    else:
        d = b[:, 0:4].copy().view(np.float32)
        q = b[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def row_bytes(t, n):
    bs, ts = sizes(t)
    assert n % bs == 0
    return n // bs * ts


def write(out: Path, name: str, t, raw: bytes, n: int, src=None):
    raw = bytes(raw)
    assert len(raw) == row_bytes(t, n), (name, len(raw), row_bytes(t, n))
    if t in OWN_SIZES:
        deq = own_dequantize(raw, t)
    else:
        deq = dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(1, -1), t).reshape(-1)
    deq = deq.astype(np.float32)
    assert deq.shape == (n,)
    blob = struct.pack("<II", int(t), n) + raw + deq.astype("<f4").tobytes()
    if src is not None:
        blob += np.asarray(src, dtype="<f4").tobytes()
    assert len(blob) < MAX_BYTES, (name, len(blob))
    name = name.lower()
    (out / f"{name}.bin").write_bytes(blob)
    print(f"{name}.bin: {t.name} n={n} {len(blob)} bytes{' (+source)' if src is not None else ''}")


def real_tensors(paths, out):
    done = set()
    for p in paths:
        r = gguf.GGUFReader(p)
        stem = Path(p).name.split("-")[0].split(".")[0].lower()
        for tensor in r.tensors:
            t = tensor.tensor_type
            if t not in WANT_REAL or (t, stem) in done:
                continue
            ne0 = int(tensor.shape[0])
            rows = 2
            while rows > 1 and rows * ne0 * 8 > MAX_BYTES - 4096:
                rows -= 1
            n = rows * ne0
            # tensor.data is (rows, row_bytes) uint8 for quantized types.
            raw = np.asarray(tensor.data).reshape(-1)[: row_bytes(t, n)].tobytes()
            write(out, f"{t.name.lower()}_{stem}", t, raw, n)
            done.add((t, stem))


def weights(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    x[rng.integers(0, n, n // 50)] *= 6  # outliers
    return x * np.float32(0.05)


def gguf_py_quantized(out, rng):
    for t in GGUFPY_QUANT:
        n = 2048
        x = weights(rng, n)
        raw = quantize(x.reshape(1, -1), t).tobytes()
        write(out, f"{t.name.lower()}_ggufpy", t, raw, n, src=x)


def random_blocks(out, rng):
    for t in RANDOM_BYTES:
        bs, ts = gguf.GGML_QUANT_SIZES[t]
        nb = 8
        raw = bytearray(rng.integers(0, 256, nb * ts, dtype=np.uint8).tobytes())
        # Replace the f16 scale fields with finite values of plausible size.
        offs = {T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}[t]
        for b in range(nb):
            for o in offs:
                v = np.float16(rng.uniform(1e-4, 0.05) * (1 if rng.random() < 0.9 else -1))
                raw[b * ts + o : b * ts + o + 2] = v.tobytes()
        write(out, f"{t.name.lower()}_randbytes", t, raw, nb * bs)


def edge_cases(rng, n):
    """Awkward inputs, one 256-value segment each (repeated to n): constant, all negative,
    denormal-small, ±equal extremes (sign ties), exact .5 grid points, one huge outlier, ramps."""
    segs = [
        np.full(256, 0.75),
        -np.abs(rng.standard_normal(256)),
        rng.standard_normal(256) * 1e-20,
        np.where(np.arange(256) % 2 == 0, 3.0, -3.0),
        (np.arange(256) % 16 - 7.5) / 8.0,
        np.concatenate([[1e4], rng.standard_normal(255) * 0.01]),
        np.linspace(-1, 1, 256) ** 3,
        np.arange(256) * 0.25 - 20,
    ]
    x = np.concatenate(segs)
    x = np.tile(x, n // len(x) + 1)[:n]
    return np.ascontiguousarray(x, dtype=np.float32)


def ggml_reference(out, rng, lib_path):
    lib = ctypes.CDLL(str(lib_path))
    for t in GGML_REF:
        bs, ts = sizes(t)
        n = 2048
        # mixed scales per block, some all-zero blocks
        x = weights(rng, n) * np.repeat(rng.uniform(0.1, 10, n // bs), bs).astype(np.float32)
        x[bs : 2 * bs] = 0
        x = np.ascontiguousarray(x, dtype=np.float32)
        name = {T.Q2_K: "q2_K", T.Q3_K: "q3_K", T.Q4_K: "q4_K", T.Q5_K: "q5_K", T.Q6_K: "q6_K",
                T.Q8_K: "q8_K"}.get(t, t.name.lower())
        fn = getattr(lib, f"quantize_row_{name}_ref")
        fn.restype = None
        for label, data in [("ggmlref", x), ("ggmledge", edge_cases(rng, n))]:
            buf = ctypes.create_string_buffer(row_bytes(t, n))
            fn(data.ctypes.data_as(ctypes.c_void_p), buf, ctypes.c_int64(n))
            write(out, f"{t.name.lower()}_{label}", t, buf.raw, n, src=data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", action="append", default=[], help="GGUF file to take real tensors from")
    ap.add_argument("--ggml-lib", help="shared library built from ggml's src/ggml-quants.c")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "native-tests/data/quant"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    real_tensors(a.gguf, out)
    gguf_py_quantized(out, rng)
    random_blocks(out, rng)
    if a.ggml_lib:
        ggml_reference(out, rng, a.ggml_lib)


if __name__ == "__main__":
    main()
