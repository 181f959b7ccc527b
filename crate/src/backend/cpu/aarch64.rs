//! aarch64 kernels: NEON (part of the aarch64 baseline, so no run-time detection is needed).
//!
//! Public functions are safe: they check slice lengths (panicking on a mismatch, an internal
//! contract) and call the NEON kernels, which only use unaligned loads/stores inside the slices
//! or fixed-size block arrays they are given. Integer sums are exact; only the f32 accumulation
//! order differs from the scalar reference.

use std::arch::aarch64::*;

use crate::quant::{BlockQ4_0, BlockQ8_0, GgmlBlock};

fn check(what: &str, a: usize, b: usize) {
    assert!(a == b, "{what}: lengths differ ({a} vs {b})");
}

/// Σ x·y.
pub fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    check("dot_f32", x.len(), y.len());
    let n = x.len();
    let mut sum;
    let mut i = 0;
    // SAFETY: NEON is always present on aarch64; every load reads 4 floats at `i < n - 3`.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        while i + 16 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = i + 4 * k;
                *a = vfmaq_f32(
                    *a,
                    vld1q_f32(x.as_ptr().add(o)),
                    vld1q_f32(y.as_ptr().add(o)),
                );
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vfmaq_f32(
                acc[0],
                vld1q_f32(x.as_ptr().add(i)),
                vld1q_f32(y.as_ptr().add(i)),
            );
            i += 4;
        }
        sum = vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
        ));
    }
    for j in i..n {
        sum += x[j] * y[j];
    }
    sum
}

/// y += a·x.
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    check("axpy_f32", x.len(), y.len());
    let n = x.len();
    let mut i = 0;
    // SAFETY: NEON is always present on aarch64; loads/stores touch 4 floats at `i < n - 3`.
    unsafe {
        let va = vdupq_n_f32(a);
        while i + 4 <= n {
            let v = vfmaq_f32(
                vld1q_f32(y.as_ptr().add(i)),
                va,
                vld1q_f32(x.as_ptr().add(i)),
            );
            vst1q_f32(y.as_mut_ptr().add(i), v);
            i += 4;
        }
    }
    for j in i..n {
        y[j] += a * x[j];
    }
}

/// `vec_dot`-shaped f32 dot (`n` elements).
pub fn vec_dot_f32(n: usize, x: &[f32], y: &[f32]) -> f32 {
    check("vec_dot_f32", x.len(), n);
    dot_f32(x, y)
}

/// Σ a·b of 16 signed bytes as 4 i32 lanes.
#[inline(always)]
unsafe fn dot_i8x16(a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let p0 = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let p1 = vmull_high_s8(a, b);
    vpadalq_s16(vpaddlq_s16(p0), p1)
}

/// q4_0 · q8_0.
pub fn vec_dot_q4_0_q8_0(n: usize, x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    check("vec_dot_q4_0_q8_0", x.len() * BlockQ4_0::BLCK, n);
    check("vec_dot_q4_0_q8_0", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: NEON is always present; loads read the 16-byte `qs` of x and the 32-byte `qs`
        // of y (two 16-byte halves).
        let sumi = unsafe {
            let v = vld1q_u8(bx.qs.as_ptr());
            let s8 = vdupq_n_s8(8);
            let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), s8);
            let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)), s8);
            let y0 = vld1q_s8(by.qs.as_ptr());
            let y1 = vld1q_s8(by.qs.as_ptr().add(16));
            vaddvq_s32(vaddq_s32(dot_i8x16(lo, y0), dot_i8x16(hi, y1)))
        };
        sumf += sumi as f32 * bx.d.to_f32() * by.d.to_f32();
    }
    sumf
}

/// q8_0 · q8_0.
pub fn vec_dot_q8_0_q8_0(n: usize, x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    check("vec_dot_q8_0_q8_0", x.len() * BlockQ8_0::BLCK, n);
    check("vec_dot_q8_0_q8_0", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: NEON is always present; loads read the two 16-byte halves of each 32-byte `qs`.
        let sumi = unsafe {
            let x0 = vld1q_s8(bx.qs.as_ptr());
            let x1 = vld1q_s8(bx.qs.as_ptr().add(16));
            let y0 = vld1q_s8(by.qs.as_ptr());
            let y1 = vld1q_s8(by.qs.as_ptr().add(16));
            vaddvq_s32(vaddq_s32(dot_i8x16(x0, y0), dot_i8x16(x1, y1)))
        };
        sumf += sumi as f32 * (bx.d.to_f32() * by.d.to_f32());
    }
    sumf
}
