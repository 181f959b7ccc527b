//! SIMD128 element-wise kernels on `exp_approx`: the LLMs' SiLU / GELU and the softmax's
//! exponentials. LLVM vectorizes the scalar loops too, but V8 then rebuilds each of their
//! dozen constants at every use inside the loop (2–3 instructions each, more than the
//! arithmetic); here they come from memory once a call ([`super::v128s`]). The same operations
//! in the same order as `portable::exp_approx` and the scalar closures (no FMA), so the same
//! bits.

use core::arch::wasm32::*;

use super::{u32x4_bytes, v128s, V128s};
use crate::backend::cpu::arch::portable::{
    EXP_POLY, EXP_RANGE, GELU_COEF_A, GELU_SQRT_2_OVER_PI, LN2_HI, LN2_LO, LOG2E, MAGIC,
};
use crate::backend::cpu::arch::UnaryRow;

/// `exp_approx`'s constants (`portable.rs`), then those of the callers.
static K: V128s<16> = {
    const fn f(x: f32) -> [u8; 16] {
        u32x4_bytes(x.to_bits())
    }
    let [lo, hi] = EXP_RANGE;
    let c = EXP_POLY;
    V128s([
        f(lo),
        f(hi),
        f(LOG2E),
        f(MAGIC),
        f(LN2_HI),
        f(LN2_LO),
        f(c[0]),
        f(c[1]),
        f(c[2]),
        f(c[3]),
        f(c[4]),
        f(c[5]),
        f(1.0),
        u32x4_bytes(127),
        f(GELU_SQRT_2_OVER_PI),
        f(GELU_COEF_A),
    ])
};

type Consts = [v128; 16];

/// `exp_approx` of four lanes.
#[inline(always)]
fn exp4(xin: v128, k: &Consts) -> v128 {
    let [lo, hi, log2e, magic, ln2_hi, ln2_lo, c0, c1, c2, c3, c4, c5, one, bias, _, _] = *k;
    // f32::clamp, a NaN kept (both comparisons false), as the scalar clamp does.
    let below = f32x4_lt(xin, lo);
    let x = v128_bitselect(lo, xin, below);
    let x = v128_bitselect(hi, x, f32x4_gt(x, hi));
    let v = f32x4_add(f32x4_mul(x, log2e), magic);
    let n = f32x4_sub(v, magic);
    let ni = i32x4_sub(v, magic);
    let r = f32x4_sub(f32x4_sub(x, f32x4_mul(n, ln2_hi)), f32x4_mul(n, ln2_lo));
    let mut p = c0;
    for c in [c1, c2, c3, c4, c5] {
        p = f32x4_add(f32x4_mul(p, r), c);
    }
    let er = f32x4_add(f32x4_add(f32x4_mul(f32x4_mul(p, r), r), r), one);
    let y = f32x4_mul(er, i32x4_shl(i32x4_add(ni, bias), 23));
    // Below −87.3: 0 (a NaN input fails the test and stays NaN, as the scalar select).
    v128_andnot(y, below)
}

#[inline(always)]
fn apply(f: UnaryRow, x: v128, k: &Consts) -> v128 {
    let one = k[12];
    match f {
        UnaryRow::Silu => f32x4_div(x, f32x4_add(one, exp4(f32x4_neg(x), k))),
        UnaryRow::Sigmoid => f32x4_div(one, f32x4_add(one, exp4(f32x4_neg(x), k))),
        UnaryRow::Gelu => {
            let (s, a) = (k[14], k[15]);
            let u = f32x4_mul(
                f32x4_mul(s, x),
                f32x4_add(one, f32x4_mul(f32x4_mul(a, x), x)),
            );
            let m2u = f32x4_mul(f32x4_splat(-2.0), u);
            f32x4_div(x, f32x4_add(one, exp4(m2u, k)))
        }
    }
}

/// `dst[i] = f(src[i])` for i < n, four at a time; the last n % 4 through a padded vector.
///
/// # Safety
/// `src..src + n` readable and `dst..dst + n` writable f32 (they may be the same row).
pub unsafe fn unary_row(f: UnaryRow, src: *const f32, dst: *mut f32, n: usize) {
    let k = v128s(&K);
    let n4 = n / 4 * 4;
    let mut i = 0;
    // SAFETY: i + 4 <= n4 inside both rows (caller); unaligned v128 access is allowed.
    unsafe {
        while i < n4 {
            let x = v128_load(src.add(i) as *const v128);
            v128_store(dst.add(i) as *mut v128, apply(f, x, &k));
            i += 4;
        }
        if i < n {
            let mut t = [0f32; 4];
            core::ptr::copy_nonoverlapping(src.add(i), t.as_mut_ptr(), n - i);
            let y = apply(f, v128_load(t.as_ptr() as *const v128), &k);
            v128_store(t.as_mut_ptr() as *mut v128, y);
            core::ptr::copy_nonoverlapping(t.as_ptr(), dst.add(i), n - i);
        }
    }
}

/// `sc[i] = exp_approx(sc[i] − max)` and their sum: eight running sums over the whole groups of
/// eight, then those and the tail's in order (`arch::exp_sum_f32_body`'s order, so its bits).
pub fn exp_sum_f32(sc: &mut [f32], max: f32) -> f32 {
    let k = v128s(&K);
    let m = f32x4_splat(max);
    let n8 = sc.len() / 8 * 8;
    let (mut s0, mut s1) = (f32x4_splat(0.0), f32x4_splat(0.0));
    let p = sc.as_mut_ptr();
    let mut i = 0;
    // SAFETY: i + 8 <= n8 inside sc.
    unsafe {
        while i < n8 {
            let a = exp4(f32x4_sub(v128_load(p.add(i) as *const v128), m), &k);
            let b = exp4(f32x4_sub(v128_load(p.add(i + 4) as *const v128), m), &k);
            v128_store(p.add(i) as *mut v128, a);
            v128_store(p.add(i + 4) as *mut v128, b);
            s0 = f32x4_add(s0, a);
            s1 = f32x4_add(s1, b);
            i += 8;
        }
    }
    for x in sc[n8..].iter_mut() {
        *x = crate::backend::cpu::arch::exp_approx(*x - max);
    }
    let tail: f32 = sc[n8..].iter().sum();
    let mut s = [0f32; 8];
    // SAFETY: 32 bytes.
    unsafe {
        v128_store(s.as_mut_ptr() as *mut v128, s0);
        v128_store(s.as_mut_ptr().add(4) as *mut v128, s1);
    }
    s.iter().sum::<f32>() + tail
}
