//! Quantization and kernel tests on seeded random data.
//!
//! Tolerances (all stated against a scale that does not vanish when a dot product cancels):
//! - SIMD (`type_traits`) vs scalar (`type_traits_scalar`) quantized dots: both compute the same
//!   exact integer sums per block and differ only in f32 accumulation order, so
//!   |fast − scalar| ≤ 1e-5 · Σ|xᵢ·yᵢ| (dequantized values) + 1e-6.
//! - scalar quantized dot vs the f64 dot of the dequantized rows: same bound with 1e-5.
//! - f32 kernels: relative 1e-5 of Σ|xᵢ·yᵢ|; f16 dot: 1e-3 relative (we see ~1e-6);
//!   axpy: 1e-5 relative per element.
//! - quantize→dequantize error on ggml's synthetic data `0.1 + 2·cos(i + offset)`, 4096 values,
//!   measured as ggml's test-quantize-fns does (`sqrt(Σd²)/n`) with its thresholds, plus true RMSE
//!   bounds per type.
//! - q8 quantizers (SIMD) are bit-exact with the reference.

use ggweb::backend::cpu::{arch, type_traits};
use ggweb::quant::{
    dequantize_row, quantize_row, type_traits_scalar, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0,
    BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, GgmlBlock,
};
use ggweb::DType;
use half::f16;

/// xorshift64* — small, seeded, good enough for test data.
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// Roughly normal, with occasional outliers, scaled.
    fn weight(&mut self, scale: f32) -> f32 {
        let s: f32 = (0..4).map(|_| self.f32()).sum::<f32>() * 0.5;
        let outlier = if self.next_u64() % 97 < 1 { 4.0 } else { 1.0 };
        s * scale * outlier
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.weight(scale)).collect()
    }
}

const QUANT_TYPES: [DType; 12] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::Q8_K,
];

const ALL_TYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::Q8_K,
];

fn quantize(t: DType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_size(x.len()).unwrap()];
    quantize_row(t, x, &mut q).unwrap();
    q
}

fn dequantize(t: DType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    dequantize_row(t, q, &mut y).unwrap();
    y
}

fn f16_at(b: &[u8], off: usize) -> f32 {
    f16::from_le_bytes([b[off], b[off + 1]]).to_f32()
}

/// Row lengths to test for a type: several (odd) multiples of its block size.
fn lengths(t: DType) -> Vec<usize> {
    let b = t.block_size();
    if b == 1 {
        vec![1, 7, 31, 64, 257, 1000, 4099]
    } else if b == 32 {
        vec![32, 96, 224, 1056, 4096]
    } else {
        vec![256, 768, 1280, 4096]
    }
}

#[test]
fn fast_vec_dot_matches_scalar_and_dequantized_dot() {
    let mut rng = Rng::new(1);
    for t in ALL_TYPES {
        let fast = type_traits(t).unwrap();
        let scalar = type_traits_scalar(t).unwrap();
        let vd = fast.vec_dot_type;
        for n in lengths(t) {
            // Odd number of rows, varying scales.
            for row in 0..3 {
                let scale = [0.02f32, 1.0, 37.0][row];
                let x = rng.vec(n, scale);
                let y = rng.vec(n, 1.0);
                let qx = quantize(t, &x);
                let qy = quantize(vd, &y);
                let dx = dequantize(t, &qx, n);
                let dy = dequantize(vd, &qy, n);
                let abs: f64 = dx.iter().zip(&dy).map(|(a, b)| (a * b).abs() as f64).sum();
                let exact: f64 = dx.iter().zip(&dy).map(|(a, b)| *a as f64 * *b as f64).sum();
                let s = (scalar.vec_dot)(n, &qx, &qy) as f64;
                let f = (fast.vec_dot)(n, &qx, &qy) as f64;
                let tol = 1e-5 * abs + 1e-6;
                // q8_1 stores s = f16(d_f32·Σq) while its values dequantize with f16(d), so a
                // q4_1/q5_1 dot differs from the dequantized dot by up to 2⁻¹⁰·|m·s| per block
                // (ggml's does too).
                let ms_err = if vd == DType::Q8_1 {
                    let (bx, by) = (t.type_size(), vd.type_size());
                    (0..n / 32)
                        .map(|b| {
                            let m = f16_at(&qx, b * bx + 2).abs();
                            let s = f16_at(&qy, b * by + 2).abs();
                            (m * s) as f64 / 1000.0
                        })
                        .sum()
                } else {
                    0.0
                };
                assert!(
                    (s - exact).abs() <= tol + ms_err,
                    "{t} n={n} row {row}: scalar {s} vs dequantized {exact} (tol {tol} + {ms_err})"
                );
                assert!(
                    (f - s).abs() <= tol,
                    "{t} n={n}: fast {f} vs scalar {s} (tol {tol})"
                );
            }
        }
    }
}

fn blocks<B: GgmlBlock>(x: &[f32]) -> Vec<B> {
    let mut v = vec![B::zeroed(); x.len() / B::BLCK];
    B::from_f32(x, &mut v);
    v
}
fn deq<B: GgmlBlock>(b: &[B]) -> Vec<f32> {
    let mut v = vec![0f32; b.len() * B::BLCK];
    B::to_f32(b, &mut v);
    v
}
/// A block-typed SIMD kernel against the scalar `GgmlBlock::vec_dot`, odd block counts.
#[allow(dead_code)]
fn check_kernel<X: GgmlBlock>(
    name: &str,
    rng: &mut Rng,
    kernel: fn(usize, &[X], &[X::VecDot]) -> f32,
) {
    for nb in [1usize, 3, 7, 33] {
        let n = nb * X::BLCK;
        let xs: Vec<X> = blocks(&rng.vec(n, 0.7));
        let ys: Vec<X::VecDot> = blocks(&rng.vec(n, 1.3));
        let abs: f64 = deq(&xs)
            .iter()
            .zip(deq(&ys))
            .map(|(a, b)| (a * b).abs() as f64)
            .sum();
        let s = X::vec_dot(n, &xs, &ys) as f64;
        let f = kernel(n, &xs, &ys) as f64;
        assert!(
            (f - s).abs() <= 1e-5 * abs + 1e-6,
            "{name} nb={nb}: {f} vs {s}"
        );
    }
}

/// Each NEON kernel against its scalar reference (run with scripts/test-aarch64.sh on x86).
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_kernels_match_reference() {
    use ggweb::backend::cpu::arch::aarch64 as neon;
    let mut rng = Rng::new(5);
    check_kernel::<BlockQ4_0>("q4_0", &mut rng, neon::vec_dot_q4_0_q8_0);
    check_kernel::<BlockQ4_1>("q4_1", &mut rng, neon::vec_dot_q4_1_q8_1);
    check_kernel::<BlockQ5_0>("q5_0", &mut rng, neon::vec_dot_q5_0_q8_0);
    check_kernel::<BlockQ5_1>("q5_1", &mut rng, neon::vec_dot_q5_1_q8_1);
    check_kernel::<BlockQ8_0>("q8_0", &mut rng, neon::vec_dot_q8_0_q8_0);
    check_kernel::<BlockQ4K>("q4_K", &mut rng, neon::vec_dot_q4_k_q8_k);
    check_kernel::<BlockQ5K>("q5_K", &mut rng, neon::vec_dot_q5_k_q8_k);
    check_kernel::<BlockQ6K>("q6_K", &mut rng, neon::vec_dot_q6_k_q8_k);
}

/// Each block-typed SIMD kernel (x86) against its scalar reference, including the byte-level
/// wrappers' fallbacks.
#[cfg(target_arch = "x86_64")]
#[test]
fn x86_kernels_match_reference() {
    use bytemuck::Zeroable;
    use ggweb::backend::cpu::arch::x86;
    use ggweb::quant::BlockQ8_1;
    let mut rng = Rng::new(2);

    check_kernel::<BlockQ4_0>("q4_0", &mut rng, x86::vec_dot_q4_0_q8_0);
    check_kernel::<BlockQ4_1>("q4_1", &mut rng, x86::vec_dot_q4_1_q8_1);
    check_kernel::<BlockQ5_0>("q5_0", &mut rng, x86::vec_dot_q5_0_q8_0);
    check_kernel::<BlockQ5_1>("q5_1", &mut rng, x86::vec_dot_q5_1_q8_1);
    check_kernel::<BlockQ8_0>("q8_0", &mut rng, x86::vec_dot_q8_0_q8_0);
    check_kernel::<BlockQ2K>("q2_K", &mut rng, x86::vec_dot_q2_k_q8_k);
    check_kernel::<BlockQ3K>("q3_K", &mut rng, x86::vec_dot_q3_k_q8_k);
    check_kernel::<BlockQ4K>("q4_K", &mut rng, x86::vec_dot_q4_k_q8_k);
    check_kernel::<BlockQ5K>("q5_K", &mut rng, x86::vec_dot_q5_k_q8_k);
    check_kernel::<BlockQ6K>("q6_K", &mut rng, x86::vec_dot_q6_k_q8_k);

    // SIMD dequantizers: bit-exact with the scalar ones.
    fn deq_exact<B: GgmlBlock>(rng: &mut Rng, kernel: fn(&[B], &mut [f32])) {
        for nb in [1usize, 5, 17] {
            let xs: Vec<B> = blocks(&rng.vec(nb * B::BLCK, 3.0));
            let mut a = vec![0f32; nb * B::BLCK];
            let mut b = vec![1f32; nb * B::BLCK];
            B::to_f32(&xs, &mut a);
            kernel(&xs, &mut b);
            let (ab, bb): (Vec<u32>, Vec<u32>) = (
                a.iter().map(|v| v.to_bits()).collect(),
                b.iter().map(|v| v.to_bits()).collect(),
            );
            assert_eq!(ab, bb, "{}", B::DTYPE);
        }
    }
    deq_exact::<BlockQ4_0>(&mut rng, x86::dequantize_row_q4_0);
    deq_exact::<BlockQ8_0>(&mut rng, x86::dequantize_row_q8_0);
    deq_exact::<BlockQ4K>(&mut rng, x86::dequantize_row_q4_k);

    // f16 row conversions: bit-exact with `half` (round to nearest even), specials included.
    let mut v = rng.vec(1003, 100.0);
    v.extend([
        0.0,
        -0.0,
        65504.0,
        65520.0,
        -1e9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-8,
        -3e-5,
        6.1e-5,
        5.96e-8,
        2.98e-8,
        2.99e-8,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
    ]);
    let mut h = vec![f16::ZERO; v.len()];
    x86::f32_to_f16_row(&v, &mut h);
    for (a, b) in h.iter().zip(&v) {
        assert_eq!(a.to_bits(), f16::from_f32(*b).to_bits(), "f32→f16 of {b}");
    }
    let mut back = vec![0f32; v.len()];
    x86::f16_to_f32_row(&h, &mut back);
    for (a, b) in back.iter().zip(&h) {
        assert_eq!(a.to_bits(), b.to_f32().to_bits());
    }

    let mut paths = std::collections::BTreeSet::new();
    // q8 quantizers: bit-exact, including ties (x·id landing on .5) and sign ties for q8_K;
    // the AVX-512 q8_0 / q8_1 path takes four blocks at a time (odd counts: a tail of 1–3).
    for n in [32usize, 96, 256, 512, 576, 4096, 4864 + 32] {
        let mut x = rng.vec(n, 3.0);
        x[5] = 0.0;
        let mut ties = x.clone();
        for (i, v) in ties.iter_mut().enumerate() {
            *v = (i % 255) as f32 - 127.0 + if i % 3 == 0 { 0.5 } else { 0.0 };
        }
        let mut signtie = rng.vec(n, 1.0);
        signtie[3] = -9.0;
        signtie[100 % n] = 9.0;
        let zeros = vec![0f32; n];
        // Ties where a block's largest magnitude is not its first value (the maximum is
        // gathered lane-wise) and the block maxima differ widely.
        let mut wide = rng.vec(n, 1.0);
        for (i, v) in wide.iter_mut().enumerate() {
            *v *= (10f32).powi((i / 32 % 7) as i32 - 3);
        }
        for data in [&x, &ties, &signtie, &zeros, &wide] {
            let a: Vec<BlockQ8_0> = blocks(data);
            let mut b = vec![BlockQ8_0::zeroed(); n / 32];
            x86::quantize_row_q8_0(data, &mut b);
            assert_eq!(a, b, "q8_0 n={n}");
            let a1: Vec<BlockQ8_1> = blocks(data);
            let mut b1 = vec![BlockQ8_1::zeroed(); n / 32];
            x86::quantize_row_q8_1(data, &mut b1);
            assert_eq!(a1, b1, "q8_1 n={n}");
            for avx512 in [true, false] {
                let mut b = vec![BlockQ8_0::zeroed(); n / 32];
                if x86::quantize_row_q8_0_with(avx512, data, &mut b) {
                    assert_eq!(a, b, "q8_0 avx512={avx512} n={n}");
                    paths.insert(("q8_0", avx512));
                }
                let mut b1 = vec![BlockQ8_1::zeroed(); n / 32];
                if x86::quantize_row_q8_1_with(avx512, data, &mut b1) {
                    assert_eq!(a1, b1, "q8_1 avx512={avx512} n={n}");
                    paths.insert(("q8_1", avx512));
                }
            }
            if n % 256 == 0 {
                let a: Vec<BlockQ8K> = blocks(data);
                let mut b = vec![BlockQ8K::zeroed(); n / 256];
                x86::quantize_row_q8_k(data, &mut b);
                assert_eq!(a, b);
            }
        }
    }
    eprintln!(
        "q8 quantizer paths run (avx512 = true/false): {paths:?}; AVX-512 on this CPU: {}",
        x86::avx512_quantizers()
    );
    assert_eq!(
        paths.iter().filter(|p| p.1).count(),
        if x86::avx512_quantizers() { 2 } else { 0 }
    );
}

#[test]
fn f32_and_f16_vector_kernels() {
    let mut rng = Rng::new(3);
    for n in [
        0usize, 1, 3, 7, 8, 15, 16, 17, 31, 33, 63, 67, 127, 129, 255, 1023, 4099,
    ] {
        let x = rng.vec(n, 1.0);
        let y = rng.vec(n, 2.0);
        let abs: f64 = x.iter().zip(&y).map(|(a, b)| (a * b).abs() as f64).sum();
        let r = arch::dot_f32_ref(&x, &y) as f64;
        let f = arch::dot_f32(&x, &y) as f64;
        assert!(
            (f - r).abs() <= 1e-5 * abs + 1e-7,
            "dot_f32 n={n}: {f} vs {r}"
        );

        let mut ya = y.clone();
        let mut yb = y.clone();
        arch::axpy_f32(0.37, &x, &mut ya);
        arch::axpy_f32_ref(0.37, &x, &mut yb);
        for (a, b) in ya.iter().zip(&yb) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "axpy_f32 n={n}");
        }

        let hx: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
        let hy: Vec<f16> = y.iter().map(|v| f16::from_f32(*v)).collect();
        let r = arch::dot_f16_ref(&hx, &hy) as f64;
        let f = arch::dot_f16(&hx, &hy) as f64;
        assert!(
            (f - r).abs() <= 1e-3 * abs + 1e-6,
            "dot_f16 n={n}: {f} vs {r}"
        );

        let mut ya = y.clone();
        let mut yb = y.clone();
        arch::axpy_f16(-1.25, &hx, &mut ya);
        arch::axpy_f16_ref(-1.25, &hx, &mut yb);
        for (a, b) in ya.iter().zip(&yb) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "axpy_f16 n={n}");
        }
    }
}

/// ggml's test-quantize-fns data and metric.
fn ggml_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
        .collect()
}

#[test]
fn quantization_error_within_ggml_bounds() {
    const N: usize = 32 * 128;
    let x = ggml_data(0.0, N);
    let x2 = ggml_data(1.0, N);
    let dot_ref: f64 = x.iter().zip(&x2).map(|(a, b)| (a * b) as f64).sum();
    // (type, ggml's threshold for sqrt(Σd²)/n, our bound on the true RMSE)
    let cases: [(DType, f32, f32); 14] = [
        (DType::F16, 0.002, 0.0004),
        (DType::BF16, 0.002, 0.0027),
        (DType::Q4_0, 0.002, 0.08),
        (DType::Q4_1, 0.002, 0.08),
        (DType::Q5_0, 0.002, 0.042),
        (DType::Q5_1, 0.002, 0.04),
        (DType::Q8_0, 0.002, 0.0055),
        (DType::Q8_1, 0.002, 0.0055),
        (DType::Q2_K, 0.0075, 0.33),
        (DType::Q3_K, 0.0040, 0.18),
        (DType::Q4_K, 0.002, 0.07),
        (DType::Q5_K, 0.002, 0.038),
        (DType::Q6_K, 0.002, 0.019),
        (DType::Q8_K, 0.002, 0.0055),
    ];
    for (t, ggml_max, rmse_max) in cases {
        let q = quantize(t, &x);
        let y = dequantize(t, &q, N);
        let ss: f64 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum();
        let ggml_metric = (ss.sqrt() / N as f64) as f32;
        let rmse = (ss / N as f64).sqrt() as f32;
        eprintln!("{t:>5}: ggml metric {ggml_metric:.6}, rmse {rmse:.6}");
        assert!(ggml_metric < ggml_max, "{t}: {ggml_metric} ≥ {ggml_max}");
        assert!(rmse < rmse_max, "{t}: rmse {rmse} ≥ {rmse_max}");

        // Re-quantizing the dequantized values reproduces them (idempotence of the grid).
        let q2 = quantize(t, &y);
        let y2 = dequantize(t, &q2, N);
        let drift: f32 = y
            .iter()
            .zip(&y2)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(drift <= 0.05 * amax, "{t}: re-quantization drift {drift}");
        if matches!(t, DType::F16 | DType::BF16 | DType::Q8_0 | DType::Q4_0) {
            assert_eq!(q, q2, "{t}: quantize(dequantize(q)) != q");
        }

        // ggml's dot-product error test: |vec_dot − f64 dot| / n.
        let tt = type_traits(t).unwrap();
        let q2 = quantize(tt.vec_dot_type, &x2);
        let r = (tt.vec_dot)(N, &q, &q2) as f64;
        let err = ((r - dot_ref).abs() / N as f64) as f32;
        let max = if t == DType::Q2_K { 0.04 } else { 0.02 };
        assert!(err < max, "{t}: dot error {err}");
    }
}

#[test]
fn quantize_is_deterministic_and_dequantize_total() {
    // Every type, odd row counts: quantize twice gives the same bytes; multi-row quantization is
    // row-by-row quantization; dequantized values are finite.
    let mut rng = Rng::new(4);
    for t in QUANT_TYPES {
        let n = t.block_size() * 3;
        let rows = 5;
        let x = rng.vec(n * rows, 2.0);
        let all = quantize(t, &x);
        let rs = t.row_size(n).unwrap();
        for r in 0..rows {
            let one = quantize(t, &x[r * n..(r + 1) * n]);
            assert_eq!(one, all[r * rs..(r + 1) * rs], "{t} row {r}");
        }
        assert_eq!(all, quantize(t, &x), "{t}");
        let y = dequantize(t, &all, n * rows);
        assert!(y.iter().all(|v| v.is_finite()), "{t}");
        // All-zero input → all-zero output.
        let z = dequantize(t, &quantize(t, &vec![0f32; n]), n);
        assert!(z.iter().all(|v| *v == 0.0), "{t}: zeros");
    }
}

#[test]
fn block_types_are_exported_for_all_formats() {
    fn size<B: GgmlBlock>() -> (DType, usize) {
        (B::DTYPE, std::mem::size_of::<B>())
    }
    for (t, s) in [
        size::<BlockQ2K>(),
        size::<BlockQ3K>(),
        size::<BlockQ4K>(),
        size::<BlockQ5K>(),
        size::<BlockQ6K>(),
        size::<BlockQ8K>(),
    ] {
        assert_eq!(t.type_size(), s);
    }
}
