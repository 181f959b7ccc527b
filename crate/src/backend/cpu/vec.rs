//! Plain vector kernels (ggml's `vec.h`): scalar references and run-time dispatch to SIMD.
//!
//! The `_ref` functions are the truth every SIMD path is tested against. Dot products accumulate
//! in f64 there, as ggml's scalar `ggml_vec_dot_f32/f16` do (`ggml_float`). All functions panic
//! when the slice lengths differ (an internal contract).

use half::f16;

fn check(a: usize, b: usize) {
    assert!(a == b, "vector lengths differ: {a} vs {b}");
}

/// Σ x·y, scalar, accumulated in f64.
pub fn dot_f32_ref(x: &[f32], y: &[f32]) -> f32 {
    check(x.len(), y.len());
    let mut sum = 0f64;
    for (a, b) in x.iter().zip(y) {
        sum += (a * b) as f64;
    }
    sum as f32
}

/// y += a·x, scalar.
pub fn axpy_f32_ref(a: f32, x: &[f32], y: &mut [f32]) {
    check(x.len(), y.len());
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// Σ x·y over f16 inputs (products in f32), accumulated in f64.
pub fn dot_f16_ref(x: &[f16], y: &[f16]) -> f32 {
    check(x.len(), y.len());
    let mut sum = 0f64;
    for (a, b) in x.iter().zip(y) {
        sum += (a.to_f32() * b.to_f32()) as f64;
    }
    sum as f32
}

/// y += a·x with f16 `x` and f32 `y`, scalar.
pub fn axpy_f16_ref(a: f32, x: &[f16], y: &mut [f32]) {
    check(x.len(), y.len());
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi.to_f32();
    }
}

/// Σ x·y, the fastest kernel available.
pub fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::dot_f32(x, y)
    }
    #[cfg(target_arch = "aarch64")]
    {
        super::aarch64::dot_f32(x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        super::wasm32::dot_f32(x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        dot_f32_ref(x, y)
    }
}

/// y += a·x, the fastest kernel available.
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::axpy_f32(a, x, y)
    }
    #[cfg(target_arch = "aarch64")]
    {
        super::aarch64::axpy_f32(a, x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        super::wasm32::axpy_f32(a, x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        axpy_f32_ref(a, x, y)
    }
}

/// Σ x·y over f16 inputs, the fastest kernel available.
pub fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::dot_f16(x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        super::wasm32::dot_f16(x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        dot_f16_ref(x, y)
    }
}

/// y += a·x with f16 `x` and f32 `y`, the fastest kernel available.
pub fn axpy_f16(a: f32, x: &[f16], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::axpy_f16(a, x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        super::wasm32::axpy_f16(a, x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        axpy_f16_ref(a, x, y)
    }
}
