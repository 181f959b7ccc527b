//! Token-generation GEMV (one src1 column) for the 32-element weight types (q4_0, q4_1, q5_0,
//! q5_1, q8_0) with integer dot products of 4 bytes per i32 lane (`vpdpbusd`).
//!
//! These products are compute-bound with the AVX2 tiles (`tiles.rs`: q4_1 / q5_0 streamed at
//! 40–55 % of the read bandwidth). Per weight block and row the AVX2 tile spends two sign
//! operations, `vpmaddubsw` and `vpmaddwd` on the integer dot; here the quants are decoded
//! unsigned (q + bias: q4_0 8, q5_0 16, q8_0 128 by flipping the sign bit), one `vpdpbusd`
//! adds their products with the column to a start value of −bias · Σ column quants (computed
//! once per block for all the tile's rows), so each block's integer dot is exactly the scalar
//! reference's, then scaled with one FMA. With AVX-512 BW the fifth bits of q5_0 / q5_1 are a
//! byte mask (one masked add instead of a shuffle, a test and a compare), and the nibbles of a
//! block come from one broadcast load and a per-lane shift.
//!
//! Paths, detected at run time ([`super::gemm::Isa`], shared with the prompt GEMM): AVX-512
//! VNNI + VL + BW, AVX-VNNI, and plain AVX2 (`vpmaddubsw` + `vpmaddwd`, quants ≤ 31 only, so
//! not q8_0, which keeps its AVX2 tile).

use std::arch::x86_64::*;

use super::gemm::Isa;
use super::tiles::{bits_32, prefetch, LOOKAHEAD, PREFETCH_MAX};
use crate::backend::cpu::arch::{store_tile, Panel, Tiled};

/// Weight rows per tile (each block of the column is loaded once for them).
const R: usize = 4;

/// Whether the path has a GEMV for weights `t`.
pub(crate) fn handles(isa: Isa, t: Tiled) -> bool {
    match t {
        Tiled::Q4_0 | Tiled::Q4_1 | Tiled::Q5_0 | Tiled::Q5_1 => true,
        // q8_0 + 128 is up to 255: a pair of its products saturates vpmaddubsw's i16.
        Tiled::Q8_0 => isa != Isa::Avx2,
        _ => false,
    }
}

/// The first 4 bytes of a block (f16 d, then f16 m / s or quant bytes) as f32 lanes 0 and 1.
#[inline(always)]
unsafe fn head(p: *const u8) -> __m128 {
    // SAFETY: p addresses 4 bytes; F16C enabled by the caller.
    unsafe { _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned())) }
}

/// 16 bytes → 32 nibbles (low nibbles are elements 0..16, high 16..32): one broadcast load,
/// the upper lane shifted by 4.
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    // SAFETY: qs addresses 16 bytes; AVX2 enabled by the caller.
    unsafe {
        let t = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs as *const __m128i));
        let s = _mm256_srlv_epi64(t, _mm256_set_epi64x(4, 4, 0, 0));
        _mm256_and_si256(s, _mm256_set1_epi8(0x0F))
    }
}

/// All rows of the panel against one column, [`R`] rows at a time, then one at a time.
///
/// `XS`/`YS`: weight / column block bytes (column: q8_0, 34, or q8_1, 36); `BIAS`: subtracted
/// from every decoded quant; `MIN`: x = d·q + m, whose dot with a q8_1 column is m·s.
///
/// # Safety
/// The caller's target features cover `decode` and `dot`; panel rows and the column hold
/// k/32 blocks; the results are inside dst.
#[inline(always)]
unsafe fn rows<const XS: usize, const YS: usize, const BIAS: i32, const MIN: bool>(
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
    decode: impl Fn(*const u8) -> __m256i + Copy,
    dot: impl Fn(__m256i, __m256i, __m256i) -> __m256i + Copy,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let span = R * pn.lda;
        let ahead = span * LOOKAHEAD.div_ceil(span.max(1));
        let mut i = 0;
        while i + R <= pn.nrows {
            let a: [*const u8; R] = std::array::from_fn(|r| pn.a0.add((i + r) * pn.lda));
            // Short rows defeat the hardware prefetcher (see tiles.rs panel_impl).
            prefetch(a[0].wrapping_add(ahead), span.min(PREFETCH_MAX));
            let o = tile::<R, XS, YS, BIAS, MIN>(k, a, y, decode, dot);
            store_tile::<R, 1>(pn, i, &o, accumulate);
            i += R;
        }
        while i < pn.nrows {
            let o = tile::<1, XS, YS, BIAS, MIN>(k, [pn.a0.add(i * pn.lda)], y, decode, dot);
            store_tile::<1, 1>(pn, i, &o, accumulate);
            i += 1;
        }
    }
}

/// RR rows · one column (see [`rows`]).
///
/// # Safety
/// As [`rows`].
#[inline(always)]
unsafe fn tile<
    const RR: usize,
    const XS: usize,
    const YS: usize,
    const BIAS: i32,
    const MIN: bool,
>(
    k: usize,
    a: [*const u8; RR],
    y: *const u8,
    decode: impl Fn(*const u8) -> __m256i,
    dot: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [[f32; 1]; RR] {
    // SAFETY: block indices < k/32; features enabled by the caller.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); RR];
        let mut accm = [_mm_setzero_ps(); RR];
        let zero = _mm256_setzero_si256();
        for blk in 0..k / 32 {
            let yb = y.add(blk * YS);
            // [dy, sy] (q8_1) or [dy, quant bytes] (q8_0: lane 1 never read).
            let ys = head(yb);
            let qy = _mm256_loadu_si256(yb.add(YS - 32) as *const __m256i);
            let start = if BIAS != 0 {
                _mm256_sub_epi32(zero, dot(zero, _mm256_set1_epi8(BIAS as u8 as i8), qy))
            } else {
                zero
            };
            for r in 0..RR {
                let xb = a[r].add(blk * XS);
                let prod = _mm_mul_ps(head(xb), ys);
                let isum = dot(start, decode(xb), qy);
                acc[r] = _mm256_fmadd_ps(
                    _mm256_broadcastss_ps(prod),
                    _mm256_cvtepi32_ps(isum),
                    acc[r],
                );
                if MIN {
                    accm[r] = _mm_add_ps(accm[r], prod);
                }
            }
        }
        std::array::from_fn(|r| {
            let m = if MIN {
                _mm_cvtss_f32(_mm_movehdup_ps(accm[r]))
            } else {
                0.0
            };
            [hsum(acc[r]) + m]
        })
    }
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: AVX enabled by the caller.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }
}

/// One GEMV per path: `$dot` the integer dot (acc + Σ of 4 u8·i8 products per lane), `$hi`
/// the q5 fifth bits (qh pointer, nibbles → quants 0..=31).
macro_rules! gemv_fn {
    ($name:ident, $feat:literal, $dot:expr, $hi:expr) => {
        #[target_feature(enable = $feat)]
        unsafe fn $name(t: Tiled, k: usize, pn: &Panel, y: *const u8, accumulate: bool) {
            let dot = $dot;
            let hi = $hi;
            // SAFETY: forwarded from the caller; features enabled by the attribute.
            unsafe {
                match t {
                    // f16 d, 16 bytes of nibbles; x = d·(q − 8).
                    Tiled::Q4_0 => rows::<18, 34, 8, false>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| nibbles(xb.add(2)),
                        dot,
                    ),
                    // f16 d, f16 m, 16 bytes of nibbles; x = d·q + m.
                    Tiled::Q4_1 => rows::<20, 36, 0, true>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| nibbles(xb.add(4)),
                        dot,
                    ),
                    // f16 d, 4 bytes qh, 16 bytes of nibbles; x = d·(q − 16).
                    Tiled::Q5_0 => rows::<22, 34, 16, false>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| hi(nibbles(xb.add(6)), xb.add(2)),
                        dot,
                    ),
                    // f16 d, f16 m, 4 bytes qh, 16 bytes of nibbles; x = d·q + m.
                    Tiled::Q5_1 => rows::<24, 36, 0, true>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| hi(nibbles(xb.add(8)), xb.add(4)),
                        dot,
                    ),
                    // f16 d, 32 i8; the sign bit flipped: q + 128.
                    Tiled::Q8_0 => rows::<34, 34, 128, false>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| {
                            _mm256_xor_si256(
                                _mm256_loadu_si256(xb.add(2) as *const __m256i),
                                _mm256_set1_epi8(0x80u8 as i8),
                            )
                        },
                        dot,
                    ),
                    _ => unreachable!("checked by handles"),
                }
            }
        }
    };
}

gemv_fn!(
    gemv_avx512,
    "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni",
    |acc, w, y| _mm256_dpbusd_epi32(acc, w, y),
    // Bit j of qh is element j's fifth bit: a byte mask, +16 where set.
    |nib: __m256i, qh: *const u8| _mm256_mask_add_epi8(
        nib,
        (qh as *const u32).read_unaligned(),
        nib,
        _mm256_set1_epi8(0x10)
    )
);
gemv_fn!(
    gemv_avxvnni,
    "avx2,fma,f16c,avxvnni",
    |acc, w, y| _mm256_dpbusd_avx_epi32(acc, w, y),
    |nib: __m256i, qh: *const u8| _mm256_or_si256(
        nib,
        _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10))
    )
);
gemv_fn!(
    gemv_avx2,
    "avx2,fma,f16c",
    // Quants ≤ 31 here (handles): a pair of u8·i8 products fits i16.
    |acc, w, y| _mm256_add_epi32(
        acc,
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1))
    ),
    |nib: __m256i, qh: *const u8| _mm256_or_si256(
        nib,
        _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10))
    )
);

/// Every row of the panel against the column `y` (k elements of the weight type's vec_dot
/// type) with `isa`; false (nothing done) when the path does not handle `t` or the CPU lacks it.
///
/// # Safety
/// Panel rows hold k elements of `t` (k a multiple of 32), the results are inside dst and
/// written by this thread only.
pub(crate) unsafe fn panel(
    isa: Isa,
    t: Tiled,
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
) -> bool {
    if !handles(isa, t) || !isa.supported() || !k.is_multiple_of(32) {
        return false;
    }
    // SAFETY: the CPU has the path's features (checked); the rest from the caller.
    unsafe {
        match isa {
            Isa::Avx512Vnni => gemv_avx512(t, k, pn, y, accumulate),
            Isa::AvxVnni => gemv_avxvnni(t, k, pn, y, accumulate),
            Isa::Avx2 => gemv_avx2(t, k, pn, y, accumulate),
        }
    }
    true
}

/// `m` weight rows of `dtype` (k elements each, contiguous) times one column of its vec_dot
/// type, with the GEMV path `isa`. `None` when the path does not handle `dtype` or this CPU
/// lacks it. For tests: every path against the scalar reference on the same bytes.
pub fn gemv_with(
    isa: Isa,
    dtype: crate::DType,
    k: usize,
    m: usize,
    weights: &[u8],
    col: &[u8],
) -> Option<Vec<f32>> {
    let t = match dtype {
        crate::DType::Q4_0 => Tiled::Q4_0,
        crate::DType::Q4_1 => Tiled::Q4_1,
        crate::DType::Q5_0 => Tiled::Q5_0,
        crate::DType::Q5_1 => Tiled::Q5_1,
        crate::DType::Q8_0 => Tiled::Q8_0,
        _ => return None,
    };
    let lda = dtype.row_size(k).ok()?;
    let ldb = crate::quant::type_traits_scalar(dtype)?
        .vec_dot_type
        .row_size(k)
        .ok()?;
    if weights.len() != lda * m || col.len() != ldb {
        return None;
    }
    let mut out = vec![0f32; m];
    let pn = Panel {
        a0: weights.as_ptr(),
        lda,
        nrows: m,
        out0: out.as_mut_ptr() as *mut u8,
        ldo: 4 * m,
    };
    // SAFETY: the lengths were checked above; out holds m results.
    unsafe { panel(isa, t, k, &pn, col.as_ptr(), false) }.then_some(out)
}
