//! AVX2/FMA/F16C register tiles for mul_mat: float tiles and quantized-weight × q8 tiles.

use std::arch::x86_64::*;

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: AVX is enabled in the calling function.
    unsafe {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

macro_rules! tile_impl {
    ($name:ident, $load:expr, $scalar:expr) => {
        /// # Safety
        /// AVX2/FMA/F16C must be available; pointers address `n` elements.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            let load = $load;
            let scalar = $scalar;
            // SAFETY: i + 8 <= n in the loop; features enabled by the attribute.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); C]; R];
                let n8 = n & !7;
                let mut i = 0;
                while i < n8 {
                    let mut bv = [_mm256_setzero_ps(); C];
                    for c in 0..C {
                        bv[c] = load(b[c], i);
                    }
                    for r in 0..R {
                        let av = load(a[r], i);
                        for c in 0..C {
                            acc[r][c] = _mm256_fmadd_ps(av, bv[c], acc[r][c]);
                        }
                    }
                    i += 8;
                }
                for r in 0..R {
                    for c in 0..C {
                        let mut s = hsum(acc[r][c]);
                        for j in n8..n {
                            s += scalar(a[r], j) * scalar(b[c], j);
                        }
                        out[r][c] = s;
                    }
                }
            }
        }
    };
}

/// Σ over 32 byte pairs of x·y (signed i8 both) as 8 f32 lanes of partial sums, with |x|
/// precomputed (`ax`) so it serves several y.
#[inline(always)]
unsafe fn dot_i8_pairs(ax: __m256i, x: __m256i, y: __m256i) -> __m256 {
    // SAFETY: AVX2 enabled by the caller.
    unsafe {
        let sy = _mm256_sign_epi8(y, x);
        let p16 = _mm256_maddubs_epi16(ax, sy);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
    }
}

#[inline(always)]
unsafe fn half_at(p: *const u8) -> f32 {
    // SAFETY: p addresses 2 bytes; F16C enabled by the caller.
    unsafe {
        let h = (p as *const u16).read_unaligned();
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }
}

macro_rules! qtile_impl {
    ($name:ident, $xsize:expr, $decode:expr) => {
        /// R×C dot products of quantized weight rows against q8_0 columns (ggml block
        /// layouts: f16 scale first). Each weight block is decoded once for all C columns.
        ///
        /// # Safety
        /// AVX2/FMA/F16C available; pointers address n/32 blocks.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            const YS: usize = 34;
            let decode = $decode;
            // SAFETY: block indices < n/32; features enabled by the attribute.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); C]; R];
                for blk in 0..n / 32 {
                    // Scales broadcast once per block (vector multiplies below, no
                    // per-element scalar products and broadcasts).
                    let mut dy = [_mm256_setzero_ps(); C];
                    let mut qy = [_mm256_setzero_si256(); C];
                    for c in 0..C {
                        let yb = b[c].add(blk * YS);
                        dy[c] = _mm256_set1_ps(half_at(yb));
                        qy[c] = _mm256_loadu_si256(yb.add(2) as *const __m256i);
                    }
                    for r in 0..R {
                        let xb = a[r].add(blk * $xsize);
                        let dx = _mm256_set1_ps(half_at(xb));
                        let qx: __m256i = decode(xb.add(2));
                        let ax = _mm256_sign_epi8(qx, qx);
                        for c in 0..C {
                            let p = _mm256_mul_ps(dot_i8_pairs(ax, qx, qy[c]), dy[c]);
                            acc[r][c] = _mm256_fmadd_ps(dx, p, acc[r][c]);
                        }
                    }
                }
                for r in 0..R {
                    for c in 0..C {
                        out[r][c] = hsum(acc[r][c]);
                    }
                }
            }
        }
    };
}

qtile_impl!(tile_q4_0, 18, |qs: *const u8| {
    // 16 bytes → 32 nibbles (low nibbles are elements 0..16, high 16..32), minus 8.
    let t = _mm_loadu_si128(qs as *const __m128i);
    let both = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    let nib = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
    _mm256_sub_epi8(nib, _mm256_set1_epi8(8))
});
qtile_impl!(tile_q8_0, 34, |qs: *const u8| _mm256_loadu_si256(
    qs as *const __m256i
));

/// R×C dot products of q4_K weight rows (144-byte super-blocks: f16 d, f16 dmin, 12 bytes of
/// packed 6-bit scales/mins, 128 bytes of nibbles) against q8_K columns (292 bytes: f32 d,
/// 256 i8, 16 i16 partial sums). Each weight super-block is decoded once for all C columns:
/// x = d·sc_j·q − dmin·m_j, so dot = d·dy·Σ_j sc_j·Σ q·y − dmin·dy·Σ_j m_j·bsum_j.
///
/// # Safety
/// AVX2/FMA/F16C available; pointers address n/256 super-blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_q4_k<const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    const XS: usize = 144;
    const YS: usize = 292;
    // SAFETY: block indices < n/256; features enabled by the attribute.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let m4 = _mm256_set1_epi8(0x0F);
        for blk in 0..n / 256 {
            for r in 0..R {
                let xb = a[r].add(blk * XS);
                let d = half_at(xb);
                let dmin = half_at(xb.add(2));
                let s = &*(xb.add(4) as *const [u8; 12]);
                // 6-bit scales and mins of the 8 sub-blocks of 32.
                let mut sc = [0i16; 8];
                let mut mn = [0i16; 16];
                for j in 0..8 {
                    let (c, m) = if j < 4 {
                        (s[j] & 63, s[j + 4] & 63)
                    } else {
                        (
                            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
                            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
                        )
                    };
                    sc[j] = c as i16;
                    // Each min covers two 16-element bsums.
                    mn[2 * j] = m as i16;
                    mn[2 * j + 1] = m as i16;
                }
                let mins = _mm256_loadu_si256(mn.as_ptr() as *const __m256i);
                let qs = xb.add(16);
                let mut qx = [_mm256_setzero_si256(); 8];
                for g in 0..4 {
                    let v = _mm256_loadu_si256(qs.add(32 * g) as *const __m256i);
                    qx[2 * g] = _mm256_and_si256(v, m4);
                    qx[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
                for c in 0..C {
                    let yb = b[c].add(blk * YS);
                    let dy = (yb as *const f32).read_unaligned();
                    let qy = yb.add(4);
                    let mut isum = _mm256_setzero_si256();
                    for j in 0..8 {
                        let y = _mm256_loadu_si256(qy.add(32 * j) as *const __m256i);
                        let p = _mm256_maddubs_epi16(qx[j], y);
                        isum =
                            _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16(sc[j])));
                    }
                    let bs = _mm256_loadu_si256(yb.add(260) as *const __m256i);
                    let msum = _mm256_madd_epi16(bs, mins);
                    acc[r][c] = _mm256_fmadd_ps(
                        _mm256_set1_ps(d * dy),
                        _mm256_cvtepi32_ps(isum),
                        acc[r][c],
                    );
                    acc[r][c] = _mm256_fnmadd_ps(
                        _mm256_set1_ps(dmin * dy),
                        _mm256_cvtepi32_ps(msum),
                        acc[r][c],
                    );
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                out[r][c] = hsum(acc[r][c]);
            }
        }
    }
}

macro_rules! panel_impl {
    ($name:ident, $tile:ident) => {
        /// Every row of the panel against C columns with the tile kernel, stores inlined.
        ///
        /// # Safety
        /// AVX2/FMA/F16C available; panel rows and columns hold `n` elements.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            pn: &super::Panel,
            b: [*const u8; C],
            accumulate: bool,
        ) {
            // SAFETY: forwarded from the caller.
            unsafe {
                super::panel_generic::<R, C>(pn, accumulate, |ar, o| $tile::<R, C>(n, ar, b, o));
                let mut i = pn.nrows / R * R;
                while i < pn.nrows {
                    let mut o = [[0f32; C]; 1];
                    $tile::<1, C>(n, [pn.a0.add(i * pn.lda)], b, &mut o);
                    super::store_tile::<1, C>(pn, i, &o, accumulate);
                    i += 1;
                }
            }
        }
    };
}

panel_impl!(panel_f32, tile_f32);
panel_impl!(panel_f16, tile_f16);
panel_impl!(panel_bf16, tile_bf16);
panel_impl!(panel_q4_0, tile_q4_0);
panel_impl!(panel_q8_0, tile_q8_0);
panel_impl!(panel_q4_k, tile_q4_k);

tile_impl!(
    tile_f32,
    |p: *const u8, i: usize| _mm256_loadu_ps((p as *const f32).add(i)),
    |p: *const u8, i: usize| (p as *const f32).add(i).read_unaligned()
);
tile_impl!(
    tile_f16,
    |p: *const u8, i: usize| _mm256_cvtph_ps(_mm_loadu_si128(
        (p as *const u16).add(i) as *const __m128i
    )),
    |p: *const u8, i: usize| half::f16::from_bits((p as *const u16).add(i).read_unaligned())
        .to_f32()
);
tile_impl!(
    tile_bf16,
    |p: *const u8, i: usize| _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((p as *const u16).add(i) as *const __m128i)),
        16
    )),
    |p: *const u8, i: usize| f32::from_bits(
        ((p as *const u16).add(i).read_unaligned() as u32) << 16
    )
);
