//! The wasm kernels (SIMD128 in the simd build, scalar otherwise) against the scalar references,
//! through the same dispatch the CPU backend uses (`backend::cpu::type_traits`, `backend::cpu::arch`).
//! Quantized dots: the integer sums are exact, so SIMD and scalar agree to f32 rounding of the
//! per-block scale products (relative 1e-5 of Σ|terms|).
use ggweb::backend::cpu::{arch, type_traits};
use ggweb::quant::type_traits_scalar;
use ggweb::DType;
use ggweb_testing::Rng;
use half::f16;
use wasm_bindgen_test::*;

#[wasm_bindgen_test]
fn build_reports_kernels() {
    let name = ggweb::backend::cpu::ops::simd_name();
    assert_eq!(
        name.starts_with("wasm32 simd128"),
        cfg!(target_feature = "simd128"),
        "{name}"
    );
    assert_eq!(
        name.ends_with("+ relaxed-simd"),
        cfg!(target_feature = "relaxed-simd"),
        "{name}"
    );
}

#[wasm_bindgen_test]
fn f32_and_f16_vectors() {
    let mut rng = Rng::new(7);
    for n in [0usize, 1, 3, 4, 15, 16, 17, 63, 64, 100, 1000, 4097] {
        let (x, y) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
        let scale: f32 = x.iter().zip(&y).map(|(a, b)| (a * b).abs()).sum::<f32>() + 1e-6;
        let d = arch::dot_f32(&x, &y) - arch::dot_f32_ref(&x, &y);
        assert!(d.abs() <= 1e-5 * scale, "dot_f32 n={n}: {d}");
        let (xh, yh): (Vec<f16>, Vec<f16>) = (
            x.iter().map(|&v| f16::from_f32(v)).collect(),
            y.iter().map(|&v| f16::from_f32(v)).collect(),
        );
        let d = arch::dot_f16(&xh, &yh) - arch::dot_f16_ref(&xh, &yh);
        assert!(d.abs() <= 1e-5 * scale, "dot_f16 n={n}: {d}");
        let mut y1 = y.clone();
        let mut y2 = y.clone();
        arch::axpy_f32(0.37, &x, &mut y1);
        arch::axpy_f32_ref(0.37, &x, &mut y2);
        assert_eq!(y1, y2, "axpy_f32 n={n}");
        let mut y1 = y.clone();
        let mut y2 = y.clone();
        arch::axpy_f16(-1.5, &xh, &mut y1);
        arch::axpy_f16_ref(-1.5, &xh, &mut y2);
        assert_eq!(y1, y2, "axpy_f16 n={n}");
    }
}

#[wasm_bindgen_test]
fn quantized_dots_vs_scalar() {
    let mut rng = Rng::new(99);
    let types = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    for dt in types {
        let fast = type_traits(dt).expect("computable");
        let slow = type_traits_scalar(dt).expect("computable");
        let vdt = fast.vec_dot_type;
        let yt = type_traits_scalar(vdt).unwrap();
        for blocks in [1usize, 3, 8] {
            let n = blocks * dt.block_size().max(vdt.block_size());
            let (x, y) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
            let mut xq = vec![0u8; dt.row_size(n).unwrap()];
            let mut yq = vec![0u8; vdt.row_size(n).unwrap()];
            (slow.from_f32)(&x, &mut xq);
            (yt.from_f32)(&y, &mut yq);
            let a = (fast.vec_dot)(n, &xq, &yq);
            let b = (slow.vec_dot)(n, &xq, &yq);
            let scale: f32 = x.iter().zip(&y).map(|(p, q)| (p * q).abs()).sum::<f32>();
            assert!(
                (a - b).abs() <= 1e-5 * scale.max(1.0),
                "{dt} n={n}: simd {a} vs scalar {b}"
            );
        }
    }
}

/// The fast row conversions (f16 → f32 of the KV cache, f32 → q8_0/q8_1 activations) are
/// bit-exact with the scalar references: every f16 value (subnormals, ±0, ±inf, NaNs), and
/// blocks with exact halves, zeros, huge values and NaN.
#[wasm_bindgen_test]
fn row_conversions_bit_exact() {
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    let (fast, slow) = (
        type_traits(DType::F16).unwrap(),
        type_traits_scalar(DType::F16).unwrap(),
    );
    let n = all.len() / 2;
    let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
    (fast.to_f32)(&all, &mut a);
    (slow.to_f32)(&all, &mut b);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "f16 {i:#06x}: {x} vs {y}");
    }
    let mut rng = Rng::new(5);
    let mut x = rng.vec(32 * 40, -3.0, 3.0);
    // Exact halves after scaling: a block whose amax is 127 makes x·(1/d) = x.
    for (j, v) in x[..32].iter_mut().enumerate() {
        *v = j as f32 - 15.5;
    }
    x[31] = 127.0;
    x[32..64].fill(0.0);
    x[64] = f32::NAN;
    x[100] = 1e30;
    x[130] = -1e-30;
    for dt in [DType::Q8_0, DType::Q8_1] {
        let (fast, slow) = (type_traits(dt).unwrap(), type_traits_scalar(dt).unwrap());
        for len in [32usize, 96, x.len()] {
            let mut qa = vec![0u8; dt.row_size(len).unwrap()];
            let mut qb = vec![0u8; dt.row_size(len).unwrap()];
            (fast.from_f32)(&x[..len], &mut qa);
            (slow.from_f32)(&x[..len], &mut qb);
            assert_eq!(qa, qb, "{dt} from_f32, {len} values");
        }
    }
}

/// The fused attention's f16 kernels (SIMD128: K rows converted once for all heads) against
/// f64 sums, on odd head sizes and head counts, and the V update bit for bit against the
/// scalar axpy (the same mul then add per element).
#[wasm_bindgen_test]
fn attention_f16_kernels_vs_scalar() {
    let mut rng = Rng::new(2024);
    for dk in [1usize, 7, 8, 9, 20, 64, 67, 128, 520] {
        for g in [1usize, 2, 3, 8] {
            let rows: Vec<Vec<f16>> = (0..4)
                .map(|_| rng.vec(dk, -1.0, 1.0).into_iter().map(f16::from_f32).collect())
                .collect();
            let q = rng.vec(g * dk, -1.0, 1.0);
            let ptrs = [0, 1, 2, 3].map(|r| rows[r].as_ptr());
            let mut out = vec![[0f32; 4]; g];
            // SAFETY: every row holds dk values, q holds g queries of dk.
            let have = unsafe { arch::dot4_heads_f16_f32(ptrs, &q, &mut out) };
            assert_eq!(have, cfg!(target_feature = "simd128"), "dk {dk}");
            if !have {
                return;
            }
            for h in 0..g {
                let qh = &q[h * dk..(h + 1) * dk];
                // SAFETY: as above.
                let one = unsafe { arch::dot4_f16_f32(ptrs, qh) }.expect("simd128 has it");
                assert_eq!(one, out[h], "dk {dk} heads {g}: one head vs all heads, head {h}");
                for r in 0..4 {
                    let terms = rows[r].iter().zip(qh).map(|(k, q)| k.to_f64() * *q as f64);
                    let want: f64 = terms.clone().sum();
                    let scale: f64 = terms.map(f64::abs).sum::<f64>() + 1e-6;
                    let d = (out[h][r] as f64 - want).abs();
                    assert!(d <= 1e-6 * scale, "dk {dk} heads {g} head {h} row {r}: {d}");
                }
            }
            let v: Vec<f16> = rng.vec(dk, -2.0, 2.0).into_iter().map(f16::from_f32).collect();
            let mut ws = rng.vec(g, -1.0, 1.0);
            ws[0] = 0.0;
            let accs = rng.vec(g * dk, -1.0, 1.0);
            let mut got = accs.clone();
            arch::axpy_heads_f16(&ws, &v, &mut got);
            let mut want = accs.clone();
            for (h, w) in ws.iter().enumerate() {
                if *w != 0.0 {
                    arch::axpy_f16_ref(*w, &v, &mut want[h * dk..(h + 1) * dk]);
                }
            }
            assert_eq!(got, want, "axpy_heads_f16 dk {dk} heads {g}");
        }
    }
}
