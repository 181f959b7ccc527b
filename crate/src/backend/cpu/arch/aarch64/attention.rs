//! NEON kernels of the fused attention over an f16 KV cache (as `x86/attention.rs`): four f16 K
//! rows against one f32 query, so the four dots share one pairwise reduction, and the V update
//! of every head of a group from one conversion of the row. `fcvtl` (base Armv8) converts four
//! f16 per instruction, so a K row is converted per head, as on x86 with F16C.

use core::arch::aarch64::*;

use half::f16;

use super::tiles::f16x4_to_f32x4;

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
    for (o, row) in out.iter_mut().zip(k) {
        for (j, qj) in q.iter().enumerate().skip(n8) {
            // SAFETY: j < n, inside the row.
            *o += unsafe { *row.add(j) }.to_f32() * qj;
        }
    }
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
    for j in n8..n {
        let x = v[j].to_f32();
        for (h, &w) in ws.iter().enumerate() {
            if w != 0.0 {
                accs[h * n + j] += w * x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, seed: usize) -> Vec<Vec<f16>> {
        (0..4)
            .map(|r| {
                (0..n)
                    .map(|i| f16::from_f32(((i * 7 + r * 3 + seed) % 11) as f32 / 5.0 - 1.0))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn dot4_matches_scalar_on_odd_lengths() {
        for n in [1usize, 7, 8, 9, 20, 64, 67] {
            let rows = rows(n, 0);
            let q: Vec<f32> = (0..n).map(|i| ((i * 5) % 13) as f32 / 6.0 - 1.0).collect();
            let ptrs = [0, 1, 2, 3].map(|r| rows[r].as_ptr());
            // SAFETY: every row holds n values.
            let got = unsafe { dot4_f16_f32(ptrs, &q) };
            for r in 0..4 {
                let want: f64 = rows[r]
                    .iter()
                    .zip(&q)
                    .map(|(k, q)| k.to_f64() * *q as f64)
                    .sum();
                assert!(
                    (got[r] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "n {n} row {r}: {} vs {want}",
                    got[r]
                );
            }
        }
    }

    #[test]
    fn axpy_heads_matches_scalar_on_odd_lengths() {
        for n in [1usize, 7, 8, 9, 20, 64, 67] {
            let v = &rows(n, 5)[0];
            let ws = [0.5f32, 0.0, -1.25];
            let init: Vec<f32> = (0..3 * n).map(|i| (i % 7) as f32 / 3.0 - 1.0).collect();
            let mut got = init.clone();
            axpy_heads_f16(&ws, v, &mut got);
            for (h, w) in ws.iter().enumerate() {
                for j in 0..n {
                    let want = init[h * n + j] as f64 + *w as f64 * v[j].to_f64();
                    let g = got[h * n + j] as f64;
                    assert!(
                        (g - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "n {n} head {h} [{j}]: {g} vs {want}"
                    );
                }
            }
        }
    }
}
