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
