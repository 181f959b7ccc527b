//! x86 kernels of the fused attention. AVX2: four f16 K rows against one f32 query at a time, so
//! the horizontal sums of four dots share their shuffles (one hsum per position dominates a
//! one-row dot of a 64-wide head). A block of positions a call (`dots_f16_block`,
//! `v_block_f16`): with AVX-512 each four K rows of a head up to 64 long are converted once for
//! all the lanes, and the V update keeps 64 columns of three lanes in registers over the block.

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

/// [`crate::backend::cpu::arch::dots_f16_block`] with AVX2/FMA/F16C (AVX-512 F for heads of
/// 16, 32, 48 or 64 values, unless `GGWEB_X86_ISA` caps it); false without them.
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
    let dk = q.len() / nl;
    if super::quants::avx512_quantizers() && dk.is_multiple_of(16) && dk <= 64 {
        // SAFETY: the CPU has AVX-512 F besides avx2/fma/f16c (checked above); dk = 16·W; the
        // rest as the caller guarantees.
        unsafe {
            match dk / 16 {
                1 => avx512::dots_f16_block::<1>(k0, kstride, n, q, nl, out, ostride),
                2 => avx512::dots_f16_block::<2>(k0, kstride, n, q, nl, out, ostride),
                3 => avx512::dots_f16_block::<3>(k0, kstride, n, q, nl, out, ostride),
                _ => avx512::dots_f16_block::<4>(k0, kstride, n, q, nl, out, ostride),
            }
        }
        return true;
    }
    // SAFETY: the CPU has avx2/fma/f16c (checked above); the rest as the caller guarantees.
    unsafe { avx2::dots_f16_block(k0, kstride, n, q, nl, out, ostride) };
    true
}

/// [`crate::backend::cpu::arch::v_block_f16`] with AVX2/FMA/F16C (and AVX-512 F where
/// there, unless `GGWEB_X86_ISA` caps it); false without them. Each lane's accumulators of
/// many columns stay in registers while the rows go by: per row a few conversions, then per
/// lane one broadcast and a fused multiply-add per vector.
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
    let wide = super::quants::avx512_quantizers();
    let group = if wide { 3 } else { 2 };
    let mut l0 = 0;
    while l0 < nl {
        let lanes = (nl - l0).min(group);
        // SAFETY: the CPU has avx2/fma/f16c (and AVX-512 F where `wide`; checked above); lanes
        // l0.. < nl have their weights at l · wstride (n each) and their dv accumulators at
        // l · dv (caller).
        unsafe {
            let w = ws.as_ptr().add(l0 * wstride);
            let a = accs.as_mut_ptr().add(l0 * dv);
            match (wide, lanes) {
                (true, 1) => avx512::v_lanes::<1>(w, wstride, v0, vstride, n, a, dv),
                (true, 2) => avx512::v_lanes::<2>(w, wstride, v0, vstride, n, a, dv),
                (true, _) => avx512::v_lanes::<3>(w, wstride, v0, vstride, n, a, dv),
                (false, 1) => avx2::v_lanes::<1>(w, wstride, v0, vstride, n, a, dv),
                (false, _) => avx2::v_lanes::<2>(w, wstride, v0, vstride, n, a, dv),
            }
        }
        l0 += lanes;
    }
    true
}

/// [`crate::backend::cpu::arch::max_f32`] compiled for AVX2 (8-wide).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn max_f32(sc: &[f32]) -> f32 {
    crate::backend::cpu::arch::max_f32_body(sc)
}

/// [`crate::backend::cpu::arch::exp_sum_f32`] compiled for AVX2 (8-wide; the same operations
/// per element, no contraction into fused multiply-adds).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_sum_f32(sc: &mut [f32], max: f32) -> f32 {
    crate::backend::cpu::arch::exp_sum_f32_body(sc, max)
}

/// Whether any of the lanes' weights of row j is 0 (that lane skips the row).
///
/// # Safety
/// `w + l · wstride + j` is readable for l < L.
#[inline(always)]
unsafe fn any_zero<const L: usize>(w: *const f32, wstride: usize, j: usize) -> bool {
    // SAFETY: caller.
    (0..L).any(|l| unsafe { *w.add(l * wstride + j) } == 0.0)
}

/// The columns `c..dv` of every lane past the vector part: scalar, rows in order (the tail of
/// `axpy_heads_f16`).
///
/// # Safety
/// As `v_lanes`.
#[allow(clippy::too_many_arguments)]
unsafe fn v_tail<const L: usize>(
    w: *const f32,
    wstride: usize,
    v0: *const u8,
    vstride: usize,
    n: usize,
    a: *mut f32,
    dv: usize,
    c: usize,
) {
    for j in 0..n {
        // SAFETY: row j holds dv f16 values; lane l's weights and accumulators (caller).
        unsafe {
            let p = v0.add(j * vstride) as *const f16;
            for l in 0..L {
                let wl = *w.add(l * wstride + j);
                if wl == 0.0 {
                    continue;
                }
                for i in c..dv {
                    *a.add(l * dv + i) += wl * (*p.add(i)).to_f32();
                }
            }
        }
    }
}

/// The V update and (heads up to 64 long) the scores at AVX-512 width.
mod avx512 {
    use half::f16;

    use std::arch::x86_64::*;

    /// Four f32x16 sums → their four totals.
    #[inline(always)]
    fn reduce4(a: [__m512; 4]) -> __m128 {
        // SAFETY: register operations only (the caller's target features).
        unsafe {
            let half = |a: __m512| {
                _mm256_add_ps(
                    _mm512_castps512_ps256(a),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)),
                )
            };
            // Per 128-bit lane, hadd(hadd(a, b), hadd(c, d)) leaves [Σa, Σb, Σc, Σd].
            let s = _mm256_hadd_ps(
                _mm256_hadd_ps(half(a[0]), half(a[1])),
                _mm256_hadd_ps(half(a[2]), half(a[3])),
            );
            _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1))
        }
    }

    /// `arch::dots_f16_block` for heads of 16·W values: each four K rows converted once into
    /// 4·W registers for all the lanes, two lanes at a time (eight chains of fused
    /// multiply-adds).
    ///
    /// # Safety
    /// As `arch::dots_f16_block`, dk = `q.len() / nl` = 16·W; the CPU has AVX-512 F, AVX2,
    /// FMA and F16C.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub unsafe fn dots_f16_block<const W: usize>(
        k0: *const u8,
        kstride: usize,
        n: usize,
        q: &[f32],
        nl: usize,
        out: &mut [f32],
        ostride: usize,
    ) {
        let dk = 16 * W;
        let mut j = 0;
        while j < n {
            let cnt = (n - j).min(4);
            let mut x = [[_mm512_setzero_ps(); W]; 4];
            for (r, xr) in x.iter_mut().enumerate() {
                // Past the last row the last row again (its dots are not stored).
                // SAFETY: row j + min(r, cnt − 1) < n holds dk = 16·W f16 values (caller).
                let row = unsafe { k0.add((j + r.min(cnt - 1)) * kstride) } as *const f16;
                for (v, xv) in xr.iter_mut().enumerate() {
                    *xv = unsafe {
                        _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16 * v) as *const __m256i))
                    };
                }
            }
            let mut l = 0;
            while l < nl {
                // Lanes l and l + 1 (the last lane of an odd count twice, stored once).
                let l2 = (l + 1).min(nl - 1);
                let (qa, qb) = (&q[l * dk..(l + 1) * dk], &q[l2 * dk..(l2 + 1) * dk]);
                let (mut aa, mut ab) = ([_mm512_setzero_ps(); 4], [_mm512_setzero_ps(); 4]);
                #[allow(clippy::needless_range_loop)] // (v indexes the rows' vectors and q)
                for v in 0..W {
                    // SAFETY: 16v + 16 ≤ dk inside both queries.
                    let (va, vb) = unsafe {
                        (
                            _mm512_loadu_ps(qa.as_ptr().add(16 * v)),
                            _mm512_loadu_ps(qb.as_ptr().add(16 * v)),
                        )
                    };
                    for r in 0..4 {
                        aa[r] = _mm512_fmadd_ps(x[r][v], va, aa[r]);
                        ab[r] = _mm512_fmadd_ps(x[r][v], vb, ab[r]);
                    }
                }
                let mut d = [0f32; 8];
                // SAFETY: d holds eight f32.
                unsafe {
                    _mm_storeu_ps(d.as_mut_ptr(), reduce4(aa));
                    _mm_storeu_ps(d.as_mut_ptr().add(4), reduce4(ab));
                }
                crate::backend::cpu::arch::put4(
                    out,
                    l * ostride + j,
                    &[d[0], d[1], d[2], d[3]],
                    cnt,
                );
                if l2 > l {
                    crate::backend::cpu::arch::put4(
                        out,
                        l2 * ostride + j,
                        &[d[4], d[5], d[6], d[7]],
                        cnt,
                    );
                }
                l += 2;
            }
            j += cnt;
        }
    }

    /// `L` lanes of `v_block_f16`: 64 columns a pass (four vectors a lane in registers), then
    /// 16, then 8 (AVX2), then the scalar tail; per element the fused multiply-adds of
    /// `axpy_heads_f16` in row order, so the same bits as AVX2.
    ///
    /// # Safety
    /// As `super::avx2::v_lanes`; the CPU has AVX-512 F, AVX2, FMA and F16C.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub unsafe fn v_lanes<const L: usize>(
        w: *const f32,
        wstride: usize,
        v0: *const u8,
        vstride: usize,
        n: usize,
        a: *mut f32,
        dv: usize,
    ) {
        let n8 = dv / 8 * 8;
        let mut c = 0;
        while c + 64 <= n8 {
            // SAFETY: c + 64 ≤ dv (caller's rows and accumulators).
            unsafe { pass::<L, 4>(w, wstride, v0, vstride, n, a, dv, c) };
            c += 64;
        }
        while c + 16 <= n8 {
            // SAFETY: c + 16 ≤ dv.
            unsafe { pass::<L, 1>(w, wstride, v0, vstride, n, a, dv, c) };
            c += 16;
        }
        // SAFETY: the rest as AVX2 does it (8 columns, then the tail).
        unsafe { super::avx2::v_lanes_from::<L>(w, wstride, v0, vstride, n, a, dv, c) };
    }

    /// Columns c..c + 16·NV of `L` lanes over all rows.
    ///
    /// # Safety
    /// As `v_lanes`, and c + 16·NV ≤ dv.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn pass<const L: usize, const NV: usize>(
        w: *const f32,
        wstride: usize,
        v0: *const u8,
        vstride: usize,
        n: usize,
        a: *mut f32,
        dv: usize,
        c: usize,
    ) {
        // SAFETY (all blocks): columns c..c + 16·NV of every row and lane; weights j < n, l < L.
        let mut acc = [[_mm512_setzero_ps(); NV]; L];
        for (l, al) in acc.iter_mut().enumerate() {
            for (v, x) in al.iter_mut().enumerate() {
                *x = unsafe { _mm512_loadu_ps(a.add(l * dv + c + 16 * v)) };
            }
        }
        for j in 0..n {
            let p = unsafe { (v0.add(j * vstride) as *const f16).add(c) };
            let mut x = [_mm512_setzero_ps(); NV];
            for (v, xv) in x.iter_mut().enumerate() {
                *xv =
                    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.add(16 * v) as *const __m256i)) };
            }
            let skip = unsafe { super::any_zero::<L>(w, wstride, j) };
            for (l, al) in acc.iter_mut().enumerate() {
                let wl = unsafe { *w.add(l * wstride + j) };
                if skip && wl == 0.0 {
                    continue;
                }
                let vw = _mm512_set1_ps(wl);
                for (v, x) in al.iter_mut().zip(&x) {
                    *v = _mm512_fmadd_ps(vw, *x, *v);
                }
            }
        }
        for (l, al) in acc.iter().enumerate() {
            for (v, x) in al.iter().enumerate() {
                unsafe { _mm512_storeu_ps(a.add(l * dv + c + 16 * v), *x) };
            }
        }
    }
}

mod avx2 {
    use half::f16;

    use crate::backend::cpu::arch::portable::{axpy_heads_f16_tail, dot4_f16_tail};
    use crate::backend::cpu::arch::rows4;
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
            // SAFETY: rows j..j + cnt < n, each dk f16 values (caller).
            let rows = unsafe { rows4(k0, kstride, j, cnt) };
            for l in 0..nl {
                // SAFETY: as above; query l is q[l·dk..(l + 1)·dk].
                let d = unsafe { dot4_f16_f32(rows, &q[l * dk..(l + 1) * dk]) };
                crate::backend::cpu::arch::put4(out, l * ostride + j, &d, cnt);
            }
            j += cnt;
        }
    }

    /// `L` lanes of `v_block_f16`: 32 columns a pass (four vectors a lane in registers),
    /// then 8, then the scalar tail; per element the fused multiply-adds of
    /// `axpy_heads_f16` in row order.
    ///
    /// # Safety
    /// Lane l's weights at `w + l · wstride` (n each) and accumulators at `a + l · dv` (dv
    /// each); row j's dv f16 values at `v0 + j · vstride`.
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
        let n8 = dv / 8 * 8;
        let mut c = 0;
        while c + 32 <= n8 {
            // SAFETY: c + 32 ≤ dv (caller's rows and accumulators).
            unsafe { pass::<L, 4>(w, wstride, v0, vstride, n, a, dv, c) };
            c += 32;
        }
        // SAFETY: caller; c is a multiple of 8.
        unsafe { v_lanes_from::<L>(w, wstride, v0, vstride, n, a, dv, c) };
    }

    /// [`v_lanes`] from column c (a multiple of 8) on.
    ///
    /// # Safety
    /// As `v_lanes`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn v_lanes_from<const L: usize>(
        w: *const f32,
        wstride: usize,
        v0: *const u8,
        vstride: usize,
        n: usize,
        a: *mut f32,
        dv: usize,
        mut c: usize,
    ) {
        let n8 = dv / 8 * 8;
        while c + 8 <= n8 {
            // SAFETY: c + 8 ≤ dv.
            unsafe { pass::<L, 1>(w, wstride, v0, vstride, n, a, dv, c) };
            c += 8;
        }
        // SAFETY: caller.
        unsafe { super::v_tail::<L>(w, wstride, v0, vstride, n, a, dv, c) };
    }

    /// Columns c..c + 8·NV of `L` lanes over all rows.
    ///
    /// # Safety
    /// As `v_lanes`, and c + 8·NV ≤ dv.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn pass<const L: usize, const NV: usize>(
        w: *const f32,
        wstride: usize,
        v0: *const u8,
        vstride: usize,
        n: usize,
        a: *mut f32,
        dv: usize,
        c: usize,
    ) {
        // SAFETY (all blocks): columns c..c + 8·NV of every row and lane; weights j < n, l < L.
        let mut acc = [[_mm256_setzero_ps(); NV]; L];
        for (l, al) in acc.iter_mut().enumerate() {
            for (v, x) in al.iter_mut().enumerate() {
                *x = unsafe { _mm256_loadu_ps(a.add(l * dv + c + 8 * v)) };
            }
        }
        for j in 0..n {
            let p = unsafe { (v0.add(j * vstride) as *const f16).add(c) };
            let mut x = [_mm256_setzero_ps(); NV];
            for (v, xv) in x.iter_mut().enumerate() {
                *xv = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(8 * v) as *const __m128i)) };
            }
            let skip = unsafe { super::any_zero::<L>(w, wstride, j) };
            for (l, al) in acc.iter_mut().enumerate() {
                let wl = unsafe { *w.add(l * wstride + j) };
                if skip && wl == 0.0 {
                    continue;
                }
                let vw = _mm256_set1_ps(wl);
                for (v, x) in al.iter_mut().zip(&x) {
                    *v = _mm256_fmadd_ps(vw, *x, *v);
                }
            }
        }
        for (l, al) in acc.iter().enumerate() {
            for (v, x) in al.iter().enumerate() {
                unsafe { _mm256_storeu_ps(a.add(l * dv + c + 8 * v), *x) };
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot4_f16_f32(k: [*const f16; 4], q: &[f32]) -> [f32; 4] {
        let n = q.len();
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: i + 16 (8) <= n, inside q and (by the caller) inside every row.
        unsafe {
            // Two sums a row while 16 values remain: eight independent chains of fused
            // multiply-adds instead of four (their latency, not the conversions, bounded the
            // four-chain loop).
            if n >= 16 {
                let mut acc2 = [_mm256_setzero_ps(); 4];
                while i + 16 <= n {
                    let q0 = _mm256_loadu_ps(q.as_ptr().add(i));
                    let q1 = _mm256_loadu_ps(q.as_ptr().add(i + 8));
                    for ((a, a2), row) in acc.iter_mut().zip(acc2.iter_mut()).zip(k) {
                        let k0 = _mm256_cvtph_ps(_mm_loadu_si128(row.add(i) as *const __m128i));
                        let k1 = _mm256_cvtph_ps(_mm_loadu_si128(row.add(i + 8) as *const __m128i));
                        *a = _mm256_fmadd_ps(k0, q0, *a);
                        *a2 = _mm256_fmadd_ps(k1, q1, *a2);
                    }
                    i += 16;
                }
                for (a, a2) in acc.iter_mut().zip(acc2) {
                    *a = _mm256_add_ps(*a, a2);
                }
            }
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
        if i < n {
            // SAFETY: as the caller guarantees.
            unsafe { dot4_f16_tail(k, q, i, &mut out) };
        }
        out
    }
}
