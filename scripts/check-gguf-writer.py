#!/usr/bin/env python3
"""Reads a GGUF file with gguf-py (pip package `gguf`) and prints a canonical description,
one line per KV pair and per tensor. native-tests/tests/gguf.rs prints the same description
from ggweb's reader and compares the two (test `gguf_py_reads_our_files`).

usage: check-gguf-writer.py FILE.gguf
"""
import struct
import sys

from gguf import GGUFReader, GGUFValueType as T

INT = {T.UINT8: "u8", T.INT8: "i8", T.UINT16: "u16", T.INT16: "i16", T.UINT32: "u32",
       T.INT32: "i32", T.UINT64: "u64", T.INT64: "i64"}


def fnv(b: bytes) -> str:
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def scalar(t, v):
    if t in INT:
        return str(int(v))
    if t == T.FLOAT32:
        return struct.pack("<f", float(v)).hex()
    if t == T.FLOAT64:
        return struct.pack("<d", float(v)).hex()
    if t == T.BOOL:
        return "true" if bool(v) else "false"
    if t == T.STRING:
        return bytes(v).hex()
    raise ValueError(t)


def name(t):
    return INT.get(t) or {T.FLOAT32: "f32", T.FLOAT64: "f64", T.BOOL: "bool", T.STRING: "string"}[t]


def main():
    r = GGUFReader(sys.argv[1])
    print(f"alignment {r.alignment}")
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        t = f.types[0]
        if t == T.ARRAY:
            if len(f.data) == 0:
                print(f"kv {f.name} empty-array")
                continue
            if len(f.types) > 1 and f.types[1] == T.ARRAY:
                print(f"kv {f.name} nested-array")
                continue
            sub = f.types[-1]
            items = [scalar(sub, f.parts[i] if sub == T.STRING else f.parts[i][0]) for i in f.data]
            print(f"kv {f.name} [{name(sub)}:{','.join(items)}]")
        else:
            v = f.parts[-1] if t == T.STRING else f.parts[-1][0]
            print(f"kv {f.name} {name(t)}:{scalar(t, v)}")
    for t in r.tensors:
        shape = ",".join(str(int(x)) for x in t.shape)
        print(f"t {t.name} {int(t.tensor_type)} [{shape}] {t.data_offset} {t.n_bytes} {fnv(t.data.tobytes())}")


main()
