//! Portable code: the scalar references of the vector kernels, the float tile of targets without
//! an ISA folder, and scalar math written so that every target's compiler vectorizes it.

use half::f16;

use super::Tiled;

fn check(a: usize, b: usize) {
    assert!(a == b, "vector lengths differ: {a} vs {b}");
}

/// y += a·x, scalar.
pub fn axpy_f32_ref(a: f32, x: &[f32], y: &mut [f32]) {
    check(x.len(), y.len());
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// y += a·x with f16 `x` and f32 `y`, scalar.
pub fn axpy_f16_ref(a: f32, x: &[f16], y: &mut [f32]) {
    check(x.len(), y.len());
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi.to_f32();
    }
}

/// The fused attention's kernels past their vector part: the dots of the four f16 rows `k` with
/// `q` from element `from` on, added to `out`.
///
/// # Safety
/// Each `k[r]` points at `q.len()` readable f16 values.
#[cfg_attr(
    not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )),
    allow(dead_code)
)]
pub(crate) unsafe fn dot4_f16_tail(k: [*const f16; 4], q: &[f32], from: usize, out: &mut [f32; 4]) {
    for (o, row) in out.iter_mut().zip(k) {
        for (j, qj) in q.iter().enumerate().skip(from) {
            // SAFETY: j < q.len(), inside the row (caller).
            *o += unsafe { *row.add(j) }.to_f32() * qj;
        }
    }
}

/// `accs[h][j] += ws[h] · v[j]` for j ≥ `from` and every head h whose weight is not 0 (`accs`:
/// `ws.len()` rows of `v.len()` values): the V update's elements past its vector part.
#[cfg_attr(
    not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )),
    allow(dead_code)
)]
pub(crate) fn axpy_heads_f16_tail(ws: &[f32], v: &[f16], accs: &mut [f32], from: usize) {
    let n = v.len();
    for (j, x) in v.iter().enumerate().skip(from) {
        let x = x.to_f32();
        for (h, &w) in ws.iter().enumerate() {
            if w != 0.0 {
                accs[h * n + j] += w * x;
            }
        }
    }
}

#[allow(clippy::needless_range_loop)]
#[cfg_attr(
    any(
        all(target_arch = "wasm32", target_feature = "simd128"),
        target_arch = "aarch64"
    ),
    allow(dead_code)
)]
/// Portable tile: 8 partial sums per dot product (vectorizes where the target allows).
///
/// # Safety
/// As [`super::tile`].
pub(crate) unsafe fn tile_portable<const R: usize, const C: usize>(
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    const L: usize = 8;
    let load = |p: *const u8, i: usize| -> f32 {
        // SAFETY: i < n and the caller guarantees n elements behind p.
        unsafe {
            match t {
                Tiled::F32 => (p as *const f32).add(i).read_unaligned(),
                Tiled::F16 => f16::from_bits((p as *const u16).add(i).read_unaligned()).to_f32(),
                Tiled::Bf16 => {
                    f32::from_bits(((p as *const u16).add(i).read_unaligned() as u32) << 16)
                }
                _ => unreachable!("quantized tiles exist only with AVX2 or SIMD128"),
            }
        }
    };
    let mut acc = [[[0f32; L]; C]; R];
    let nl = n / L * L;
    let mut i = 0;
    while i < nl {
        let mut bv = [[0f32; L]; C];
        for c in 0..C {
            for l in 0..L {
                bv[c][l] = load(b[c], i + l);
            }
        }
        for r in 0..R {
            let mut av = [0f32; L];
            for (l, v) in av.iter_mut().enumerate() {
                *v = load(a[r], i + l);
            }
            for c in 0..C {
                for l in 0..L {
                    acc[r][c][l] += av[l] * bv[c][l];
                }
            }
        }
        i += L;
    }
    for r in 0..R {
        for c in 0..C {
            let mut s: f32 = acc[r][c].iter().sum();
            for j in nl..n {
                s += load(a[r], j) * load(b[c], j);
            }
            out[r][c] = s;
        }
    }
}
/// [`exp_approx`]'s constants, shared with the SIMD kernels that compute it lane-wise (the same
/// bits): its input range, log2(e), ln 2 in two parts, 1.5·2^23 (adding it rounds to an integer
/// held in the low mantissa bits), the polynomial's coefficients from the highest.
pub(crate) const EXP_RANGE: [f32; 2] = [-87.3, 88.0];
pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
pub(crate) const MAGIC: f32 = 12_582_912.0;
pub(crate) const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];
/// GELU's tanh form: √(2/π) and the cubic coefficient.
pub(crate) const GELU_SQRT_2_OVER_PI: f32 = 0.797_884_6;
pub(crate) const GELU_COEF_A: f32 = 0.044_715;

/// e^x without a libm call, branch-free so loops over it vectorize (gelu, silu, sigmoid and
/// soft_max call it per element; libm's expf/tanhf were 6 % of a gemma3 prompt). Cody-Waite
/// reduction x = n·ln2 + r, |r| ≤ ln2/2, Cephes' degree-7 polynomial for e^r, 2^n through the
/// exponent bits. Relative error ≤ 2e-7 over [-87.3, 88]; below it the result is 0 (instead of
/// a subnormal; e^-inf = 0 for masked softmax entries), above it e^88 instead of inf (callers
/// use it in x/(1 + e^y) and softmax, where that is harmless). NaN in → NaN out.
#[inline(always)]
pub fn exp_approx(xin: f32) -> f32 {
    let [lo, hi] = EXP_RANGE;
    let x = xin.clamp(lo, hi);
    let v = x * LOG2E + MAGIC;
    let n = v - MAGIC;
    let ni = (v.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p * r + c;
    }
    let er = p * r * r + r + 1.0;
    let y = er * f32::from_bits(((ni + 127) as u32) << 23);
    // A select, not a branch (vectorizes).
    if xin < lo {
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
