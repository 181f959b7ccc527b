//! ggweb's (de)quantization against external references, from the committed fixtures in
//! `native-tests/data/quant/` (written by `scripts/make-quant-fixtures.py`):
//! - dequantization must equal gguf-py's `gguf.quants.dequantize` **bit for bit** (same f32
//!   operations in the same order), for real tensors of SmolLM2/gemma-3 GGUF files, for gguf-py-
//!   and ggml-quantized random data, and for random block bytes;
//!   (q8_1/q8_K, which gguf-py lacks: numpy's d·q);
//! - where a fixture carries its source values, quantizing them must reproduce the fixture's bytes
//!   exactly (gguf-py's `quantize`, or ggml's C `quantize_row_*_ref` on random data and on edge
//!   cases: constant, all-negative, 1e-20-small, ±ties, .5 grid points, outliers), with both the
//!   fast and the scalar table entries.

use std::path::{Path, PathBuf};

use ggweb::quant::{dequantize_row, quantize_row, type_traits_scalar};
use ggweb::DType;

struct Fixture {
    name: String,
    dtype: DType,
    n: usize,
    raw: Vec<u8>,
    deq: Vec<f32>,
    src: Option<Vec<f32>>,
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn load(path: &Path) -> Fixture {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let b = std::fs::read(path).unwrap();
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let dtype = DType::from_id(u32_at(0)).unwrap();
    let n = u32_at(4) as usize;
    let rs = dtype.row_size(n).unwrap();
    let raw = b[8..8 + rs].to_vec();
    let deq = f32s(&b[8 + rs..8 + rs + 4 * n]);
    let rest = &b[8 + rs + 4 * n..];
    let src = match rest.len() {
        0 => None,
        l if l == 4 * n => Some(f32s(rest)),
        l => panic!("{name}: {l} trailing bytes"),
    };
    Fixture {
        name,
        dtype,
        n,
        raw,
        deq,
        src,
    }
}

fn fixtures() -> Vec<Fixture> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/quant");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    paths.sort();
    paths.iter().map(|p| load(p)).collect()
}

#[test]
fn fixtures_cover_every_quantized_weight_type() {
    let fx = fixtures();
    for t in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_1,
        DType::Q8_K,
    ] {
        assert!(fx.iter().any(|f| f.dtype == t), "no fixture for {t}");
        // Quantization is checked against an external reference for every type.
        assert!(
            fx.iter().any(|f| f.dtype == t && f.src.is_some()),
            "no reference quantization for {t}"
        );
    }
    // Real tensors from the GGUF files.
    for name in [
        "q4_1_smollm2",
        "q8_0_smollm2",
        "q4_k_gemma",
        "q5_0_gemma",
        "q6_k_gemma",
    ] {
        assert!(fx.iter().any(|f| f.name == format!("{name}.bin")), "{name}");
    }
}

#[test]
fn dequantize_matches_gguf_py_bit_exactly() {
    let mut count = 0;
    for f in fixtures() {
        let mut y = vec![0f32; f.n];
        dequantize_row(f.dtype, &f.raw, &mut y).unwrap();
        for (i, (a, b)) in y.iter().zip(&f.deq).enumerate() {
            assert!(
                a.to_bits() == b.to_bits(),
                "{}: element {i}: ggweb {a} vs gguf-py {b}",
                f.name
            );
        }
        // Same through the scalar table, and from a misaligned copy of the bytes.
        let mut z = vec![0f32; f.n];
        (type_traits_scalar(f.dtype).unwrap().to_f32)(&f.raw, &mut z);
        assert_eq!(y, z, "{}", f.name);
        let mut shifted = vec![0u8; f.raw.len() + 1];
        shifted[1..].copy_from_slice(&f.raw);
        dequantize_row(f.dtype, &shifted[1..], &mut z).unwrap();
        assert_eq!(y, z, "{} (misaligned)", f.name);
        count += 1;
    }
    assert!(count >= 40, "only {count} fixtures");
}

#[test]
fn quantize_matches_reference_bytes() {
    let mut count = 0;
    for f in fixtures() {
        let Some(src) = &f.src else { continue };
        let mut q = vec![0u8; f.raw.len()];
        quantize_row(f.dtype, src, &mut q).unwrap();
        if let Some(i) = q.iter().zip(&f.raw).position(|(a, b)| a != b) {
            let bs = f.dtype.type_size();
            panic!(
                "{}: first differing byte {i} (block {}, offset {}): ggweb {} vs reference {}",
                f.name,
                i / bs,
                i % bs,
                q[i],
                f.raw[i]
            );
        }
        let mut qs = vec![0u8; f.raw.len()];
        (type_traits_scalar(f.dtype).unwrap().from_f32)(src, &mut qs);
        assert_eq!(qs, f.raw, "{} (scalar)", f.name);
        count += 1;
    }
    assert!(count >= 29, "only {count} fixtures with source data");
}
