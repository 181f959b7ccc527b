//! aarch64 kernels: NEON (part of the aarch64 baseline, so no run-time detection is needed).
//!
//! Public functions are safe: they check slice lengths (panicking on a mismatch, an internal
//! contract) and call the NEON kernels, which only use unaligned loads/stores inside the slices
//! or fixed-size block arrays they are given. Integer sums are exact; only the f32 accumulation
//! order differs from the scalar reference.

use std::arch::aarch64::*;

use crate::dtype::QK_K;
use crate::quant::k_quants::scales_mins_k4;
use crate::quant::{
    BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0,
    BlockQ8_1, GgmlBlock,
};

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

/// Σ of 16 signed byte products, as one i32.
#[inline(always)]
unsafe fn dot16(a: int8x16_t, b: int8x16_t) -> i32 {
    vaddvq_s32(dot_i8x16(a, b))
}

/// The 5th bits of a q5 block as two 16-byte masks (0xFF where set), elements 0..16 and 16..32.
#[inline(always)]
pub(super) unsafe fn q5_high_masks(qh: [u8; 4]) -> (uint8x16_t, uint8x16_t) {
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bits = vld1q_u8(BITS.as_ptr());
    let lo = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
    let hi = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
    (vtstq_u8(lo, bits), vtstq_u8(hi, bits))
}

/// q4_1 · q8_1.
pub fn vec_dot_q4_1_q8_1(n: usize, x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    check("vec_dot_q4_1_q8_1", x.len() * BlockQ4_1::BLCK, n);
    check("vec_dot_q4_1_q8_1", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: NEON is always present; loads read the 16-byte `qs` of x and the two 16-byte
        // halves of y's `qs`.
        let sumi = unsafe {
            let v = vld1q_u8(bx.qs.as_ptr());
            let lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));
            let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(v));
            dot16(lo, vld1q_s8(by.qs.as_ptr())) + dot16(hi, vld1q_s8(by.qs.as_ptr().add(16)))
        };
        sumf += (bx.d.to_f32() * by.d.to_f32()) * sumi as f32 + bx.m.to_f32() * by.s.to_f32();
    }
    sumf
}

/// q5_0 · q8_0.
pub fn vec_dot_q5_0_q8_0(n: usize, x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    check("vec_dot_q5_0_q8_0", x.len() * BlockQ5_0::BLCK, n);
    check("vec_dot_q5_0_q8_0", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: NEON is always present; loads read x's 16-byte `qs`, a local table and the two
        // halves of y's 32-byte `qs`.
        let sumi = unsafe {
            let (h0, h1) = q5_high_masks(bx.qh);
            let f0 = vdupq_n_u8(0xF0);
            let v = vld1q_u8(bx.qs.as_ptr());
            // A clear 5th bit means q − 16 < 0: fill the high nibble to make the byte negative.
            let lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), vbicq_u8(f0, h0));
            let hi = vorrq_u8(vshrq_n_u8::<4>(v), vbicq_u8(f0, h1));
            dot16(vreinterpretq_s8_u8(lo), vld1q_s8(by.qs.as_ptr()))
                + dot16(vreinterpretq_s8_u8(hi), vld1q_s8(by.qs.as_ptr().add(16)))
        };
        sumf += (bx.d.to_f32() * by.d.to_f32()) * sumi as f32;
    }
    sumf
}

/// q5_1 · q8_1.
pub fn vec_dot_q5_1_q8_1(n: usize, x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    check("vec_dot_q5_1_q8_1", x.len() * BlockQ5_1::BLCK, n);
    check("vec_dot_q5_1_q8_1", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: NEON is always present; loads read x's 16-byte `qs`, a local table and the two
        // halves of y's 32-byte `qs`.
        let sumi = unsafe {
            let (h0, h1) = q5_high_masks(bx.qh);
            let b10 = vdupq_n_u8(0x10);
            let v = vld1q_u8(bx.qs.as_ptr());
            let lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), vandq_u8(h0, b10));
            let hi = vorrq_u8(vshrq_n_u8::<4>(v), vandq_u8(h1, b10));
            dot16(vreinterpretq_s8_u8(lo), vld1q_s8(by.qs.as_ptr()))
                + dot16(vreinterpretq_s8_u8(hi), vld1q_s8(by.qs.as_ptr().add(16)))
        };
        sumf += (bx.d.to_f32() * by.d.to_f32()) * sumi as f32 + bx.m.to_f32() * by.s.to_f32();
    }
    sumf
}

/// Σ bsums[j]·mins[j/2].
fn mins_dot(bsums: &[i16; 16], mins: &[u8; 8]) -> i32 {
    bsums
        .iter()
        .enumerate()
        .map(|(j, b)| *b as i32 * mins[j / 2] as i32)
        .sum()
}

/// q4_K · q8_K.
pub fn vec_dot_q4_k_q8_k(n: usize, x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    check("vec_dot_q4_k_q8_k", x.len() * QK_K, n);
    check("vec_dot_q4_k_q8_k", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (sc, mins) = scales_mins_k4(&bx.scales);
        let summ = mins_dot(&by.bsums, &mins);
        let mut isum = 0i32;
        for j in 0..QK_K / 64 {
            // SAFETY: NEON is always present; loads read 32 bytes of x's 128-byte `qs` at 32·j
            // and 64 bytes of y's 256-byte `qs` at 64·j (j < 4).
            let (s1, s2) = unsafe {
                let q = bx.qs.as_ptr().add(32 * j);
                let q8 = by.qs.as_ptr().add(64 * j);
                let m4 = vdupq_n_u8(0x0F);
                let (v0, v1) = (vld1q_u8(q), vld1q_u8(q.add(16)));
                let l0 = vreinterpretq_s8_u8(vandq_u8(v0, m4));
                let l1 = vreinterpretq_s8_u8(vandq_u8(v1, m4));
                let h0 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(v0));
                let h1 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(v1));
                (
                    dot16(l0, vld1q_s8(q8)) + dot16(l1, vld1q_s8(q8.add(16))),
                    dot16(h0, vld1q_s8(q8.add(32))) + dot16(h1, vld1q_s8(q8.add(48))),
                )
            };
            isum += sc[2 * j] as i32 * s1 + sc[2 * j + 1] as i32 * s2;
        }
        sumf += bx.d.to_f32() * by.d * isum as f32 - bx.dmin.to_f32() * by.d * summ as f32;
    }
    sumf
}

/// q5_K · q8_K.
pub fn vec_dot_q5_k_q8_k(n: usize, x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    check("vec_dot_q5_k_q8_k", x.len() * QK_K, n);
    check("vec_dot_q5_k_q8_k", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (sc, mins) = scales_mins_k4(&bx.scales);
        let summ = mins_dot(&by.bsums, &mins);
        let mut isum = 0i32;
        // SAFETY: NEON is always present; loads read x's 32-byte `qh`, 32 bytes of its 128-byte
        // `qs` at 32·j and 64 bytes of y's 256-byte `qs` at 64·j (j < 4).
        unsafe {
            let m4 = vdupq_n_u8(0x0F);
            let m1 = vdupq_n_u8(1);
            let mut hb0 = vld1q_u8(bx.qh.as_ptr());
            let mut hb1 = vld1q_u8(bx.qh.as_ptr().add(16));
            for j in 0..QK_K / 64 {
                let q = bx.qs.as_ptr().add(32 * j);
                let q8 = by.qs.as_ptr().add(64 * j);
                let (v0, v1) = (vld1q_u8(q), vld1q_u8(q.add(16)));
                let l0 = vorrq_u8(vandq_u8(v0, m4), vshlq_n_u8::<4>(vandq_u8(hb0, m1)));
                let l1 = vorrq_u8(vandq_u8(v1, m4), vshlq_n_u8::<4>(vandq_u8(hb1, m1)));
                hb0 = vshrq_n_u8::<1>(hb0);
                hb1 = vshrq_n_u8::<1>(hb1);
                let h0 = vorrq_u8(vshrq_n_u8::<4>(v0), vshlq_n_u8::<4>(vandq_u8(hb0, m1)));
                let h1 = vorrq_u8(vshrq_n_u8::<4>(v1), vshlq_n_u8::<4>(vandq_u8(hb1, m1)));
                hb0 = vshrq_n_u8::<1>(hb0);
                hb1 = vshrq_n_u8::<1>(hb1);
                let s1 = dot16(vreinterpretq_s8_u8(l0), vld1q_s8(q8))
                    + dot16(vreinterpretq_s8_u8(l1), vld1q_s8(q8.add(16)));
                let s2 = dot16(vreinterpretq_s8_u8(h0), vld1q_s8(q8.add(32)))
                    + dot16(vreinterpretq_s8_u8(h1), vld1q_s8(q8.add(48)));
                isum += sc[2 * j] as i32 * s1 + sc[2 * j + 1] as i32 * s2;
            }
        }
        sumf += bx.d.to_f32() * by.d * isum as f32 - bx.dmin.to_f32() * by.d * summ as f32;
    }
    sumf
}

/// q6_K · q8_K.
pub fn vec_dot_q6_k_q8_k(n: usize, x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    check("vec_dot_q6_k_q8_k", x.len() * QK_K, n);
    check("vec_dot_q6_k_q8_k", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let mut isum = 0i32;
        for half in 0..2 {
            let sc = &bx.scales[8 * half..8 * half + 8];
            // SAFETY: NEON is always present; loads read 64 bytes of x's 128-byte `ql` and 32
            // bytes of its 64-byte `qh` at the half's offset, and 128 bytes of y's `qs`.
            let s: [i32; 8] = unsafe {
                let ql = bx.ql.as_ptr().add(64 * half);
                let qh = bx.qh.as_ptr().add(32 * half);
                let q8 = by.qs.as_ptr().add(128 * half);
                let m4 = vdupq_n_u8(0x0F);
                let m3 = vdupq_n_u8(0x03);
                let s32 = vdupq_n_s8(32);
                let mut out = [0i32; 8];
                for part in 0..2 {
                    // Elements l (0..32) split into two 16-lane parts.
                    let o = 16 * part;
                    let a = vld1q_u8(ql.add(o));
                    let b = vld1q_u8(ql.add(32 + o));
                    let h = vld1q_u8(qh.add(o));
                    let q = [
                        vorrq_u8(vandq_u8(a, m4), vshlq_n_u8::<4>(vandq_u8(h, m3))),
                        vorrq_u8(
                            vandq_u8(b, m4),
                            vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(h), m3)),
                        ),
                        vorrq_u8(
                            vshrq_n_u8::<4>(a),
                            vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(h), m3)),
                        ),
                        vorrq_u8(vshrq_n_u8::<4>(b), vshlq_n_u8::<4>(vshrq_n_u8::<6>(h))),
                    ];
                    for (k, qk) in q.iter().enumerate() {
                        let v = vsubq_s8(vreinterpretq_s8_u8(*qk), s32);
                        // Group k covers elements 32k..32k+32; this part is its 16·part half,
                        // whose scale is sc[2k + part].
                        out[2 * k + part] = dot16(v, vld1q_s8(q8.add(32 * k + o)));
                    }
                }
                out
            };
            for (si, sv) in sc.iter().zip(s) {
                isum += *si as i32 * sv;
            }
        }
        sumf += bx.d.to_f32() * by.d * isum as f32;
    }
    sumf
}
