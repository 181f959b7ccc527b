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

/// e^x without a libm call, branch-free so loops over it vectorize (gelu, silu, sigmoid and
/// soft_max call it per element; libm's expf/tanhf were 6 % of a gemma3 prompt). Cody-Waite
/// reduction x = n·ln2 + r, |r| ≤ ln2/2, Cephes' degree-7 polynomial for e^r, 2^n through the
/// exponent bits. Relative error ≤ 2e-7 over [-87.3, 88]; below it the result is 0 (instead of
/// a subnormal; e^-inf = 0 for masked softmax entries), above it e^88 instead of inf (callers
/// use it in x/(1 + e^y) and softmax, where that is harmless). NaN in → NaN out.
#[inline(always)]
pub fn exp_approx(xin: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let x = xin.clamp(-87.3, 88.0);
    let v = x * LOG2E + MAGIC;
    let n = v - MAGIC;
    let ni = (v.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    let y = er * f32::from_bits(((ni + 127) as u32) << 23);
    // A select, not a branch (vectorizes).
    if xin < -87.3 {
        0.0
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::exp_approx;

    /// Against libm's expf on a dense grid of [-87, 88] and at the edges.
    #[test]
    fn exp_approx_matches_libm() {
        let mut worst = 0f64;
        let mut i = 0;
        while i <= 175_000 {
            let x = (-87.0 + i as f32 * 0.001).min(88.0);
            let (got, want) = (exp_approx(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
            i += 1;
        }
        assert!(worst <= 2e-7, "max rel err {worst:e}");
        assert_eq!(exp_approx(0.0), 1.0);
        assert_eq!(exp_approx(-1000.0), 0.0);
        assert_eq!(exp_approx(f32::NEG_INFINITY), 0.0);
        assert!(exp_approx(1000.0).is_finite() && exp_approx(1000.0) > 1e38);
        assert!(exp_approx(f32::NAN).is_nan());
    }
}
