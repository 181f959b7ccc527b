//! AVX2 kernel of the fused attention: four f16 K rows against one f32 query at a time, so the
//! horizontal sums of four dots share their shuffles (one hsum per position dominates a
//! one-row dot of a 64-wide head).

use half::f16;

use super::quants::available;

/// Dots of the f16 rows `k` (each `q.len()` long) with `q`; `None` without AVX2/FMA/F16C.
///
/// # Safety
/// Each `k[r]` points at `q.len()` readable f16 values.
pub unsafe fn dot4_f16_f32(k: [*const f16; 4], q: &[f32]) -> Option<[f32; 4]> {
    if !available() {
        return None;
    }
    // SAFETY: the CPU has avx2/fma/f16c (checked above); rows as the caller guarantees.
    Some(unsafe { avx2::dot4_f16_f32(k, q) })
}

/// `accs[h] += ws[h] · v` for every head h (accs: heads × v.len() values), converting each
/// piece of the f16 row once for all heads; `false` without AVX2/FMA/F16C (nothing done).
pub fn axpy_heads_f16(ws: &[f32], v: &[f16], accs: &mut [f32]) -> bool {
    if !available() {
        return false;
    }
    assert_eq!(accs.len(), ws.len() * v.len(), "axpy_heads_f16: lengths");
    // SAFETY: the CPU has avx2/fma/f16c (checked above); lengths checked.
    unsafe { avx2::axpy_heads_f16(ws, v, accs) };
    true
}

mod avx2 {
    use half::f16;

    use crate::backend::cpu::arch::portable::{axpy_heads_f16_tail, dot4_f16_tail};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy_heads_f16(ws: &[f32], v: &[f16], accs: &mut [f32]) {
        let n = v.len();
        let mut i = 0;
        // SAFETY: i + 8 <= n inside v and inside each head's n accumulators (accs = heads × n).
        unsafe {
            while i + 8 <= n {
                let x = _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(i) as *const __m128i));
                for (h, &w) in ws.iter().enumerate() {
                    if w == 0.0 {
                        continue;
                    }
                    let a = accs.as_mut_ptr().add(h * n + i);
                    _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_set1_ps(w), x, _mm256_loadu_ps(a)));
                }
                i += 8;
            }
        }
        axpy_heads_f16_tail(ws, v, accs, i);
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot4_f16_f32(k: [*const f16; 4], q: &[f32]) -> [f32; 4] {
        let n = q.len();
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: i + 8 <= n, inside q and (by the caller) inside every row.
        unsafe {
            while i + 8 <= n {
                let vq = _mm256_loadu_ps(q.as_ptr().add(i));
                for (a, row) in acc.iter_mut().zip(k) {
                    let vk = _mm256_cvtph_ps(_mm_loadu_si128(row.add(i) as *const __m128i));
                    *a = _mm256_fmadd_ps(vk, vq, *a);
                }
                i += 8;
            }
        }
        // Per 128-bit lane, hadd(hadd(a, b), hadd(c, d)) leaves [Σa, Σb, Σc, Σd] of that lane.
        let s = _mm256_hadd_ps(
            _mm256_hadd_ps(acc[0], acc[1]),
            _mm256_hadd_ps(acc[2], acc[3]),
        );
        let r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        let mut out = [0f32; 4];
        // SAFETY: out holds four f32.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), r) };
        // SAFETY: as the caller guarantees.
        unsafe { dot4_f16_tail(k, q, i, &mut out) };
        out
    }
}
