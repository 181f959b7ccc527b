//! NEON kernels of the fused attention over an f16 KV cache (as `x86/attention.rs`): four f16 K
//! rows against one f32 query, so the four dots share one pairwise reduction, and the V update
//! of every head of a group from one conversion of the row. `fcvtl` (base Armv8) converts four
//! f16 per instruction, so a K row is converted per head, as on x86 with F16C.

use core::arch::aarch64::*;

use half::f16;

use super::tiles::f16x4_to_f32x4;
use crate::backend::cpu::arch::portable::{axpy_heads_f16_tail, dot4_f16_tail};

/// Eight f16 at `p` as two f32x4 (exact).
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline(always)]
unsafe fn load8(p: *const f16) -> [float32x4_t; 2] {
    // SAFETY: caller; NEON loads have no alignment needs beyond the element's.
    let h = unsafe { vld1q_u16(p as *const u16) };
    [
        f16x4_to_f32x4(vget_low_u16(h)),
        f16x4_to_f32x4(vget_high_u16(h)),
    ]
}

/// Dots of the f16 rows `k` (each `q.len()` long) with `q`.
///
/// # Safety
/// Each `k[r]` points at `q.len()` readable f16 values.
pub unsafe fn dot4_f16_f32(k: [*const f16; 4], q: &[f32]) -> [f32; 4] {
    let n = q.len();
    let n8 = n / 8 * 8;
    // SAFETY: register-only.
    let mut acc = [unsafe { vdupq_n_f32(0.0) }; 4];
    let mut i = 0;
    // SAFETY: i + 8 <= n8 ≤ n, inside q and (by the caller) inside every row.
    unsafe {
        while i < n8 {
            let q0 = vld1q_f32(q.as_ptr().add(i));
            let q1 = vld1q_f32(q.as_ptr().add(i + 4));
            for (a, row) in acc.iter_mut().zip(k) {
                let [lo, hi] = load8(row.add(i));
                *a = vfmaq_f32(*a, lo, q0);
                *a = vfmaq_f32(*a, hi, q1);
            }
            i += 8;
        }
    }
    let mut out = [0f32; 4];
    // SAFETY: register-only, then a 16-byte store into `out`. Pairwise adds leave
    // [Σacc0, Σacc1, Σacc2, Σacc3].
    unsafe {
        let s = vpaddq_f32(vpaddq_f32(acc[0], acc[1]), vpaddq_f32(acc[2], acc[3]));
        vst1q_f32(out.as_mut_ptr(), s);
    }
    // SAFETY: as the caller guarantees.
    unsafe { dot4_f16_tail(k, q, n8, &mut out) };
    out
}

/// `accs[h] += ws[h] · v` for every head h (`accs`: `ws.len()` rows of `v.len()` values), each
/// eight values of the f16 row converted once for all heads; a head whose weight is 0 is skipped.
pub fn axpy_heads_f16(ws: &[f32], v: &[f16], accs: &mut [f32]) {
    let n = v.len();
    assert_eq!(accs.len(), ws.len() * n, "axpy_heads_f16: lengths");
    let n8 = n / 8 * 8;
    let mut i = 0;
    // SAFETY: i + 8 <= n8 ≤ n inside v and inside each head's n accumulators (accs = heads × n).
    unsafe {
        while i < n8 {
            let [lo, hi] = load8(v.as_ptr().add(i));
            for (h, &w) in ws.iter().enumerate() {
                if w == 0.0 {
                    continue;
                }
                let a = accs.as_mut_ptr().add(h * n + i);
                vst1q_f32(a, vfmaq_n_f32(vld1q_f32(a), lo, w));
                vst1q_f32(a.add(4), vfmaq_n_f32(vld1q_f32(a.add(4)), hi, w));
            }
            i += 8;
        }
    }
    axpy_heads_f16_tail(ws, v, accs, n8);
}
