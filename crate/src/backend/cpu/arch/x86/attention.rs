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

/// [`crate::backend::cpu::arch::dots_f16_block`] with AVX2/FMA/F16C; false without them.
///
/// # Safety
/// As `arch::dots_f16_block` (lengths checked there).
pub unsafe fn dots_f16_block(
    k0: *const u8,
    kstride: usize,
    n: usize,
    q: &[f32],
    nl: usize,
    out: &mut [f32],
    ostride: usize,
) -> bool {
    if !available() {
        return false;
    }
    // SAFETY: the CPU has avx2/fma/f16c (checked above); the rest as the caller guarantees.
    unsafe { avx2::dots_f16_block(k0, kstride, n, q, nl, out, ostride) };
    true
}

/// [`crate::backend::cpu::arch::v_block_f16`] with AVX2/FMA/F16C; false without them.
///
/// # Safety
/// As `arch::v_block_f16` (lengths checked there).
pub unsafe fn v_block_f16(
    ws: &[f32],
    wstride: usize,
    nl: usize,
    v0: *const u8,
    vstride: usize,
    n: usize,
    accs: &mut [f32],
) -> bool {
    if !available() {
        return false;
    }
    let dv = accs.len() / nl;
    let mut l0 = 0;
    while l0 < nl {
        let lanes = (nl - l0).min(4);
        // SAFETY: the CPU has avx2/fma/f16c (checked above); lanes l0.. < nl have their weights
        // at l · wstride (n each) and their dv accumulators at l · dv (caller).
        unsafe {
            let w = ws.as_ptr().add(l0 * wstride);
            let a = accs.as_mut_ptr().add(l0 * dv);
            match lanes {
                1 => avx2::v_lanes::<1>(w, wstride, v0, vstride, n, a, dv),
                2 => avx2::v_lanes::<2>(w, wstride, v0, vstride, n, a, dv),
                3 => avx2::v_lanes::<3>(w, wstride, v0, vstride, n, a, dv),
                _ => avx2::v_lanes::<4>(w, wstride, v0, vstride, n, a, dv),
            }
        }
        l0 += lanes;
    }
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
    pub unsafe fn dots_f16_block(
        k0: *const u8,
        kstride: usize,
        n: usize,
        q: &[f32],
        nl: usize,
        out: &mut [f32],
        ostride: usize,
    ) {
        let dk = q.len() / nl;
        let mut j = 0;
        while j < n {
            let cnt = (n - j).min(4);
            // Past the last row the last row again (its dots are not stored).
            // SAFETY: rows j..j + cnt < n, each dk f16 values (caller).
            let rows = [0, 1, 2, 3]
                .map(|r| unsafe { k0.add((j + r.min(cnt - 1)) * kstride) } as *const f16);
            for l in 0..nl {
                // SAFETY: as above; query l is q[l·dk..(l + 1)·dk].
                let d = unsafe { dot4_f16_f32(rows, &q[l * dk..(l + 1) * dk]) };
                out[l * ostride + j..l * ostride + j + cnt].copy_from_slice(&d[..cnt]);
            }
            j += cnt;
        }
    }

    /// The V update of `L` lanes over n rows: each 16 (then 8) columns' accumulators stay in
    /// registers over all rows; per element the same fused multiply-adds in row order as
    /// [`axpy_heads_f16`] row by row, and the same scalar tail.
    ///
    /// # Safety
    /// Lane l's weights at `w + l · wstride` (n each) and accumulators at `a + l · dv` (dv each);
    /// row j's dv f16 values at `v0 + j · vstride`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn v_lanes<const L: usize>(
        w: *const f32,
        wstride: usize,
        v0: *const u8,
        vstride: usize,
        n: usize,
        a: *mut f32,
        dv: usize,
    ) {
        let mut c = 0;
        // SAFETY (all blocks below): c + 16 (8) ≤ dv inside every row and every lane's
        // accumulators; j < n and l < L inside the weights (caller).
        while c + 16 <= dv {
            let mut acc = [[_mm256_setzero_ps(); 2]; L];
            for (l, al) in acc.iter_mut().enumerate() {
                unsafe {
                    al[0] = _mm256_loadu_ps(a.add(l * dv + c));
                    al[1] = _mm256_loadu_ps(a.add(l * dv + c + 8));
                }
            }
            for j in 0..n {
                let (x0, x1) = unsafe {
                    let p = (v0.add(j * vstride) as *const f16).add(c);
                    (
                        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
                        _mm256_cvtph_ps(_mm_loadu_si128(p.add(8) as *const __m128i)),
                    )
                };
                for (l, al) in acc.iter_mut().enumerate() {
                    let wl = unsafe { *w.add(l * wstride + j) };
                    if wl != 0.0 {
                        let vw = _mm256_set1_ps(wl);
                        al[0] = _mm256_fmadd_ps(vw, x0, al[0]);
                        al[1] = _mm256_fmadd_ps(vw, x1, al[1]);
                    }
                }
            }
            for (l, al) in acc.iter().enumerate() {
                unsafe {
                    _mm256_storeu_ps(a.add(l * dv + c), al[0]);
                    _mm256_storeu_ps(a.add(l * dv + c + 8), al[1]);
                }
            }
            c += 16;
        }
        if c + 8 <= dv {
            let mut acc = [_mm256_setzero_ps(); L];
            for (l, al) in acc.iter_mut().enumerate() {
                *al = unsafe { _mm256_loadu_ps(a.add(l * dv + c)) };
            }
            for j in 0..n {
                let x = unsafe {
                    let p = (v0.add(j * vstride) as *const f16).add(c);
                    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
                };
                for (l, al) in acc.iter_mut().enumerate() {
                    let wl = unsafe { *w.add(l * wstride + j) };
                    if wl != 0.0 {
                        *al = _mm256_fmadd_ps(_mm256_set1_ps(wl), x, *al);
                    }
                }
            }
            for (l, al) in acc.iter().enumerate() {
                unsafe { _mm256_storeu_ps(a.add(l * dv + c), *al) };
            }
            c += 8;
        }
        if c < dv {
            for j in 0..n {
                let p = unsafe { v0.add(j * vstride) as *const f16 };
                for l in 0..L {
                    let wl = unsafe { *w.add(l * wstride + j) };
                    if wl == 0.0 {
                        continue;
                    }
                    for i in c..dv {
                        unsafe { *a.add(l * dv + i) += wl * (*p.add(i)).to_f32() };
                    }
                }
            }
        }
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
