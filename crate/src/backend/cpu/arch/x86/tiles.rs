//! AVX2/FMA/F16C register tiles for mul_mat: float tiles and quantized-weight × q8 tiles.

use std::arch::x86_64::*;

use crate::backend::cpu::arch::{panel_generic, store_tile, Panel};

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

/// R×C dot products of 32-element weight blocks (`XS` bytes, f16 scale first) against q8_0
/// (`YS` = 34: f16 d, 32 i8) or q8_1 (`YS` = 36: f16 d, f16 s = d·Σq, 32 i8) columns. Each weight
/// block is decoded once (`decode`: block → 32 quants, signed when `SIGNED`, else 0..=31) for all
/// C columns. With `MIN` the block has an f16 min `m` at byte 2 (x = d·q + m), whose dot with
/// the column is m·s.
///
/// # Safety
/// AVX2/FMA/F16C enabled in the caller; pointers address n/32 blocks; C ≤ 8.
#[inline(always)]
unsafe fn tile_legacy<
    const R: usize,
    const C: usize,
    const XS: usize,
    const YS: usize,
    const SIGNED: bool,
    const MIN: bool,
>(
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
    decode: impl Fn(*const u8) -> __m256i,
) {
    const { assert!(C <= 8, "one f32 lane per column") };
    if C == 1 {
        // SAFETY: forwarded (one column).
        unsafe { gemv_legacy::<R, C, XS, YS, SIGNED, MIN>(n, a, b[0], out, decode) };
        return;
    }
    // SAFETY: block indices < n/32; features enabled by the caller.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        // Min terms m·s of row r, one lane per column (C ≤ 8): one FMA per row and block
        // instead of R·C scalar ones that would spill the tile's registers.
        let mut accm = [_mm256_setzero_ps(); R];
        let mut sbits = [0u16; 8];
        for blk in 0..n / 32 {
            // Column scales broadcast once per block (vector multiplies below, no per-element
            // scalar products and broadcasts).
            let mut dy = [_mm256_setzero_ps(); C];
            let mut qy = [_mm256_setzero_si256(); C];
            for c in 0..C {
                let yb = b[c].add(blk * YS);
                dy[c] = _mm256_set1_ps(half_at(yb));
                qy[c] = _mm256_loadu_si256(yb.add(YS - 32) as *const __m256i);
                if MIN {
                    sbits[c] = (yb.add(2) as *const u16).read_unaligned();
                }
            }
            let sy = if MIN {
                _mm256_cvtph_ps(_mm_loadu_si128(sbits.as_ptr() as *const __m128i))
            } else {
                _mm256_setzero_ps()
            };
            for r in 0..R {
                let xb = a[r].add(blk * XS);
                let dx = _mm256_set1_ps(half_at(xb));
                let qx: __m256i = decode(xb);
                if SIGNED {
                    let ax = _mm256_sign_epi8(qx, qx);
                    for c in 0..C {
                        let p = _mm256_mul_ps(dot_i8_pairs(ax, qx, qy[c]), dy[c]);
                        acc[r][c] = _mm256_fmadd_ps(dx, p, acc[r][c]);
                    }
                } else {
                    // Unsigned quants (≤ 31) × signed column: maddubs directly.
                    for c in 0..C {
                        let p16 = _mm256_maddubs_epi16(qx, qy[c]);
                        let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                        acc[r][c] = _mm256_fmadd_ps(dx, _mm256_mul_ps(p, dy[c]), acc[r][c]);
                    }
                }
                if MIN {
                    accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(half_at(xb.add(2))), sy, accm[r]);
                }
            }
        }
        for r in 0..R {
            let mut m = [0f32; 8];
            _mm256_storeu_ps(m.as_mut_ptr(), accm[r]);
            for c in 0..C {
                out[r][c] = hsum(acc[r][c]) + m[c];
            }
        }
    }
}

/// [`tile_legacy`] for one column (GEMV, token generation), fewer operations per block: the
/// first 4 bytes of a block (f16 d and, in q4_1/q5_1/q8_1, the f16 m or s) are converted
/// with one instruction for the row and the column, multiplied once into [dx·dy, mx·sy],
/// lane 0 scales the integer dot and lane 1 (the min term) is summed as it is. (Lane 1 of a
/// block without a min holds its first quants as an f16: never read.)
///
/// # Safety
/// As [`tile_legacy`], with C = 1.
#[inline(always)]
unsafe fn gemv_legacy<
    const R: usize,
    const C: usize,
    const XS: usize,
    const YS: usize,
    const SIGNED: bool,
    const MIN: bool,
>(
    n: usize,
    a: [*const u8; R],
    b: *const u8,
    out: &mut [[f32; C]; R],
    decode: impl Fn(*const u8) -> __m256i,
) {
    // SAFETY: block indices < n/32 (each block holds at least 4 bytes); features enabled by
    // the caller.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut accm = [_mm_setzero_ps(); R];
        let head =
            |p: *const u8| _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        for blk in 0..n / 32 {
            let yb = b.add(blk * YS);
            let ys = head(yb);
            let qy = _mm256_loadu_si256(yb.add(YS - 32) as *const __m256i);
            for r in 0..R {
                let xb = a[r].add(blk * XS);
                let prod = _mm_mul_ps(head(xb), ys);
                let qx: __m256i = decode(xb);
                let p = if SIGNED {
                    dot_i8_pairs(_mm256_sign_epi8(qx, qx), qx, qy)
                } else {
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(qx, qy), ones))
                };
                acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(prod), p, acc[r]);
                if MIN {
                    accm[r] = _mm_add_ps(accm[r], prod);
                }
            }
        }
        for r in 0..R {
            let m = if MIN {
                _mm_cvtss_f32(_mm_movehdup_ps(accm[r]))
            } else {
                0.0
            };
            out[r][0] = hsum(acc[r]) + m;
        }
    }
}

/// 16 bytes → 32 nibbles (low nibbles are elements 0..16, high 16..32).
#[inline(always)]
pub(super) unsafe fn nibbles_32(qs: *const u8) -> __m256i {
    // SAFETY: qs addresses 16 bytes; AVX2 enabled by the caller.
    unsafe {
        let t = _mm_loadu_si128(qs as *const __m128i);
        let both = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }
}

/// The 4 bytes of a q5 `qh` → 32 bytes, 0xFF where element j's fifth bit is set.
#[inline(always)]
pub(super) unsafe fn bits_32(qh: *const u8) -> __m256i {
    // SAFETY: qh addresses 4 bytes; AVX2 enabled by the caller.
    unsafe {
        let x = (qh as *const u32).read_unaligned();
        // Byte j of the result takes byte j/8 of x, then tests bit j%8.
        let shuf = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit)
    }
}

macro_rules! legacy_tile {
    ($name:ident, $xs:expr, $ys:expr, $signed:expr, $min:expr, $decode:expr) => {
        /// R×C tile of this weight type (see `tile_legacy`).
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
            // SAFETY: forwarded from the caller; features enabled by the attribute.
            unsafe { tile_legacy::<R, C, $xs, $ys, $signed, $min>(n, a, b, out, $decode) }
        }
    };
}

// q4_0: f16 d, 16 bytes of nibbles; x = d·(q − 8).
legacy_tile!(tile_q4_0, 18, 34, true, false, |xb: *const u8| {
    _mm256_sub_epi8(nibbles_32(xb.add(2)), _mm256_set1_epi8(8))
});
// q8_0: f16 d, 32 i8.
legacy_tile!(tile_q8_0, 34, 34, true, false, |xb: *const u8| {
    _mm256_loadu_si256(xb.add(2) as *const __m256i)
});
// q4_1: f16 d, f16 m, 16 bytes of nibbles; x = d·q + m.
legacy_tile!(tile_q4_1, 20, 36, false, true, |xb: *const u8| nibbles_32(
    xb.add(4)
));
// q5_0: f16 d, 4 bytes qh, 16 bytes of nibbles; x = d·(q − 16): a clear fifth bit makes the
// byte negative (high nibble set), a set one leaves the nibble as is.
legacy_tile!(tile_q5_0, 22, 34, true, false, |xb: *const u8| {
    let hi = bits_32(xb.add(2));
    _mm256_or_si256(
        nibbles_32(xb.add(6)),
        _mm256_andnot_si256(hi, _mm256_set1_epi8(0xF0u8 as i8)),
    )
});
// q5_1: f16 d, f16 m, 4 bytes qh, 16 bytes of nibbles; x = d·q + m.
legacy_tile!(tile_q5_1, 24, 36, false, true, |xb: *const u8| {
    let hi = _mm256_and_si256(bits_32(xb.add(4)), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles_32(xb.add(8)), hi)
});

/// q8_K column block: f32 d, 256 i8 quants, 16 i16 sums of 16 quants.
const Q8K_SIZE: usize = 292;
const Q8K_QS: usize = 4;
const Q8K_BSUMS: usize = 260;

/// Decode the d, dmin and 12 packed scale bytes shared by q4_K and q5_K (at `xb`): the 8
/// group scales as i16 vectors, the mins spread over the 16 bsums, d, dmin.
///
/// # Safety
/// `xb` addresses the 16 header bytes; AVX2/F16C enabled by the caller.
#[inline(always)]
unsafe fn k4_header(xb: *const u8) -> ([__m256i; 8], __m256i, f32, f32) {
    // SAFETY: as documented.
    unsafe {
        let s = &*(xb.add(4) as *const [u8; 12]);
        let (sc, m) = crate::quant::k_quants::scales_mins_k4(s);
        let mut mn = [0i16; 16];
        // Plain loops (no closures) so the intrinsics inline into the AVX2 caller.
        let mut scv = [_mm256_setzero_si256(); 8];
        for j in 0..8 {
            // Each min covers two 16-element bsums.
            mn[2 * j] = m[j] as i16;
            mn[2 * j + 1] = m[j] as i16;
            scv[j] = _mm256_set1_epi16(sc[j] as i16);
        }
        (
            scv,
            _mm256_loadu_si256(mn.as_ptr() as *const __m256i),
            half_at(xb),
            half_at(xb.add(2)),
        )
    }
}

/// isum[c] += Σ over group g (32 quants `q`, scale vector `sc`) of sc·q·y for each column's
/// q8_K block `blk`. Groups are processed one at a time for all columns, so only the decoded
/// group and the C integer sums stay live (no spills at any C).
///
/// # Safety
/// Columns address at least blk+1 q8_K blocks; AVX2 enabled by the caller.
#[inline(always)]
unsafe fn k_group<const C: usize>(
    q: __m256i,
    sc: __m256i,
    b: [*const u8; C],
    blk: usize,
    g: usize,
    isum: &mut [__m256i; C],
) {
    // SAFETY: as documented.
    unsafe {
        for c in 0..C {
            let y = b[c].add(blk * Q8K_SIZE + Q8K_QS + 32 * g);
            let y = _mm256_loadu_si256(y as *const __m256i);
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), sc);
            isum[c] = _mm256_add_epi32(isum[c], p);
        }
    }
}

/// acc[c] += d·dy·isum − dmin·dy·Σ_j m_j·bsum_j (q4_K/q5_K).
///
/// # Safety
/// As [`k_group`]; AVX2/FMA enabled by the caller.
#[inline(always)]
unsafe fn k4_finish<const C: usize>(
    isum: &[__m256i; C],
    mins: __m256i,
    d: f32,
    dmin: f32,
    b: [*const u8; C],
    blk: usize,
    acc: &mut [__m256; C],
) {
    // SAFETY: as documented.
    unsafe {
        for c in 0..C {
            let yb = b[c].add(blk * Q8K_SIZE);
            let dy = (yb as *const f32).read_unaligned();
            let bs = _mm256_loadu_si256(yb.add(Q8K_BSUMS) as *const __m256i);
            let msum = _mm256_madd_epi16(bs, mins);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum[c]), acc[c]);
            acc[c] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dy), _mm256_cvtepi32_ps(msum), acc[c]);
        }
    }
}

/// R×C dot products of k-quant weight rows (`$xs`-byte super-blocks of 256) against q8_K
/// columns; `$cols` decodes one super-block and adds its products with all C columns. (A macro
/// rather than a generic taking a closure: the closure was not inlined, a call per block.)
macro_rules! k_tile {
    ($(#[$doc:meta])* $name:ident, $xs:expr, $cols:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// AVX2/FMA/F16C available; pointers address n/256 super-blocks.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            // SAFETY: block indices < n/256; features enabled by the attribute.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); C]; R];
                for blk in 0..n / 256 {
                    for r in 0..R {
                        $cols::<C>(a[r].add(blk * $xs), b, blk, &mut acc[r]);
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

/// q4_K super-block (144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of
/// nibbles) against C columns.
///
/// # Safety
/// As [`k_group`]; `xb` addresses one super-block.
#[inline(always)]
unsafe fn q4_k_cols<const C: usize>(
    xb: *const u8,
    b: [*const u8; C],
    blk: usize,
    acc: &mut [__m256; C],
) {
    // SAFETY: as documented.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let (sc, mins, d, dmin) = k4_header(xb);
        let qs = xb.add(16);
        let mut isum = [_mm256_setzero_si256(); C];
        for g in 0..4 {
            let v = _mm256_loadu_si256(qs.add(32 * g) as *const __m256i);
            let lo = _mm256_and_si256(v, m4);
            k_group::<C>(lo, sc[2 * g], b, blk, 2 * g, &mut isum);
            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            k_group::<C>(hi, sc[2 * g + 1], b, blk, 2 * g + 1, &mut isum);
        }
        k4_finish::<C>(&isum, mins, d, dmin, b, blk, acc);
    }
}

/// q5_K super-block (176 bytes: f16 d, f16 dmin, 12 scale bytes, 32 bytes qh, 128 bytes of
/// nibbles; bit 2g / 2g+1 of qh byte i is the fifth bit of element i of group 2g / 2g+1).
///
/// # Safety
/// As [`q4_k_cols`].
#[inline(always)]
unsafe fn q5_k_cols<const C: usize>(
    xb: *const u8,
    b: [*const u8; C],
    blk: usize,
    acc: &mut [__m256; C],
) {
    // SAFETY: as documented.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m1 = _mm256_set1_epi8(1);
        let (sc, mins, d, dmin) = k4_header(xb);
        // Bit 0 of every byte of `hb` is the next high bit (16-bit shifts only bring the
        // neighbouring byte's bits in above bit 0).
        let mut hb = _mm256_loadu_si256(xb.add(16) as *const __m256i);
        let qs = xb.add(48);
        let mut isum = [_mm256_setzero_si256(); C];
        for g in 0..4 {
            let v = _mm256_loadu_si256(qs.add(32 * g) as *const __m256i);
            let hl = _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4);
            hb = _mm256_srli_epi16(hb, 1);
            let hh = _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4);
            hb = _mm256_srli_epi16(hb, 1);
            let lo = _mm256_or_si256(_mm256_and_si256(v, m4), hl);
            k_group::<C>(lo, sc[2 * g], b, blk, 2 * g, &mut isum);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), hh);
            k_group::<C>(hi, sc[2 * g + 1], b, blk, 2 * g + 1, &mut isum);
        }
        k4_finish::<C>(&isum, mins, d, dmin, b, blk, acc);
    }
}

/// Scale vector of q6_K group g (32 quants): s[2g] for its first 16, s[2g + 1] for the rest.
///
/// # Safety
/// AVX enabled by the caller.
#[inline(always)]
unsafe fn q6_scale(s: &[i8; 16], g: usize) -> __m256i {
    // SAFETY: as documented.
    unsafe {
        _mm256_set_m128i(
            _mm_set1_epi16(s[2 * g + 1] as i16),
            _mm_set1_epi16(s[2 * g] as i16),
        )
    }
}

/// q6_K super-block (210 bytes: 128 bytes ql, 64 bytes qh, 16 i8 scales, f16 d; x =
/// d·sc_s·(q − 32) with 6-bit q) against C columns. The −32 offset is applied through the
/// column's bsums: Σ sc_s·Σ(q − 32)·y = Σ sc_s·Σ q·y − 32·Σ sc_s·bsum_s.
///
/// # Safety
/// As [`q4_k_cols`].
#[inline(always)]
unsafe fn q6_k_cols<const C: usize>(
    xb: *const u8,
    b: [*const u8; C],
    blk: usize,
    acc: &mut [__m256; C],
) {
    // SAFETY: as documented.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(0x03);
        let s = &*(xb.add(192) as *const [i8; 16]);
        let mut isum = [_mm256_setzero_si256(); C];
        for half in 0..2 {
            let ql = xb.add(64 * half);
            let q4b1 = _mm256_loadu_si256(ql as *const __m256i);
            let q4b2 = _mm256_loadu_si256(ql.add(32) as *const __m256i);
            let qh = _mm256_loadu_si256(xb.add(128 + 32 * half) as *const __m256i);
            let g = 4 * half;
            // The two high bits of group g + k sit at bits 2k..2k+2 of each qh byte.
            let h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4);
            let q0 = _mm256_or_si256(_mm256_and_si256(q4b1, m4), h0);
            k_group::<C>(q0, q6_scale(s, g), b, blk, g, &mut isum);
            let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4);
            let q1 = _mm256_or_si256(_mm256_and_si256(q4b2, m4), h1);
            k_group::<C>(q1, q6_scale(s, g + 1), b, blk, g + 1, &mut isum);
            let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4);
            let q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4b1, 4), m4), h2);
            k_group::<C>(q2, q6_scale(s, g + 2), b, blk, g + 2, &mut isum);
            let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4);
            let q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4b2, 4), m4), h3);
            k_group::<C>(q3, q6_scale(s, g + 3), b, blk, g + 3, &mut isum);
        }
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(s.as_ptr() as *const __m128i));
        let d = half_at(xb.add(208));
        for c in 0..C {
            let yb = b[c].add(blk * Q8K_SIZE);
            let dy = (yb as *const f32).read_unaligned();
            let bs = _mm256_loadu_si256(yb.add(Q8K_BSUMS) as *const __m256i);
            let corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
            let isum = _mm256_sub_epi32(isum[c], corr);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum), acc[c]);
        }
    }
}

k_tile!(
    /// R×C dot products of q4_K weight rows against q8_K columns (one decode per row block).
    tile_q4_k, 144, q4_k_cols
);
k_tile!(
    /// R×C dot products of q5_K weight rows against q8_K columns.
    tile_q5_k, 176, q5_k_cols
);
k_tile!(
    /// R×C dot products of q6_K weight rows against q8_K columns.
    tile_q6_k, 210, q6_k_cols
);

/// Most bytes of a tile a quantized panel prefetches at once.
pub(super) const PREFETCH_MAX: usize = 4096;

/// Bytes ahead of the current tile that a quantized panel prefetches: about DRAM latency ×
/// bandwidth with margin. (Prefetching only the next tile was too late for short rows: q8_0
/// 49152 × 576, rows of 612 bytes, streamed at a third of the read bandwidth; 4 KiB ahead
/// still left the GEMVs that are close to compute-bound, q4_1 / q4_K, 10-25 % below 8 KiB on
/// an EPYC streaming ~36 GB/s: latency × bandwidth alone is ~4 KiB there. 16 KiB gained no more
/// and slowed the large q8_0 GEMVs.)
pub(super) const LOOKAHEAD: usize = 8192;

/// Prefetch `bytes` from `p` into L2 (a hint: never faults, any address is fine). Into L2, not
/// L1: lines fetched LOOKAHEAD ahead then wait in L2 without holding the few L1 fill buffers the
/// loads of the current tile need (on a 2-core Intel Xeon VM, AVX-512, 2026-12-02: 1-thread q4_1
/// GEMV 7.0 → 8.7 GB/s, q5_0 7.9 → 8.8, q4_K 9.2 → 10.0; Qwen2.5 generation +5–7 %).
#[inline(always)]
pub(super) fn prefetch(p: *const u8, bytes: usize) {
    let mut off = 0;
    while off < bytes {
        // SAFETY: prefetch only hints the cache; it does not access memory architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(off) as *const i8) };
        off += 64;
    }
}

/// Prefetch into L2 the `bytes` a GEMV tile consumes per block (a constant where inlined), `p`
/// being where they start LOOKAHEAD (or more) ahead: called once per block, so the lines are
/// requested evenly over the work. `bytes.div_ceil(64)` hints cover [p, p + bytes) whatever p's
/// offset in its line, the line holding p + bytes being the next call's first. (The GEMVs had
/// requested a tile's lines in one burst at its start, up to 4 KiB: 1 thread on a Zen 4 EPYC,
/// DRAM-streamed, the large q8_0 outputs went 14–17 → 18–24 GB/s with AVX2, Qwen2.5-0.5B's
/// generation 31.7 → 38.2 tok/s with AVX2 and 35.5 → 43.5 with AVX-512.)
#[inline(always)]
pub(super) fn prefetch_block(p: *const u8, bytes: usize) {
    let mut j = 0;
    while j < bytes.div_ceil(64) {
        // SAFETY: prefetch only hints the cache; it does not access memory architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(64 * j) as *const i8) };
        j += 1;
    }
}

macro_rules! panel_impl {
    ($name:ident, $tile:ident, $prefetch:expr) => {
        /// Every row of the panel against C columns with the tile kernel, stores inlined.
        ///
        /// # Safety
        /// AVX2/FMA/F16C available; panel rows and columns hold `n` elements.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            pn: &Panel,
            b: [*const u8; C],
            accumulate: bool,
        ) {
            // SAFETY: forwarded from the caller.
            unsafe {
                // Saturating: a panel of fewer than R rows may have any row stride (a view of
                // one row with a huge nb1), and the prefetch address is only a hint.
                let span = R.saturating_mul(pn.lda);
                // Whole tiles ahead, at least LOOKAHEAD bytes.
                let ahead = span.saturating_mul(LOOKAHEAD.div_ceil(span.max(1)));
                panel_generic::<R, C>(pn, accumulate, |ar, o| {
                    if $prefetch {
                        // Whole rows (quantized tiles run over all of k): the tiles ahead are
                        // the next bytes. Short rows (k of a few hundred, as in small LLMs)
                        // defeat the hardware prefetcher, and the R rows of a tile are R
                        // interleaved streams; fetching this tile's span `ahead` bytes on
                        // hides the DRAM latency. Capped at 4 KiB: a burst over a whole
                        // tile of long rows (k = 4096) slowed GEMV by 20 %, and those
                        // rows are long enough for the hardware prefetcher.
                        prefetch(ar[0].wrapping_add(ahead), span.min(PREFETCH_MAX));
                    }
                    $tile::<R, C>(n, ar, b, o)
                });
                let mut i = pn.nrows / R * R;
                while i < pn.nrows {
                    let mut o = [[0f32; C]; 1];
                    $tile::<1, C>(n, [pn.a0.add(i * pn.lda)], b, &mut o);
                    store_tile::<1, C>(pn, i, &o, accumulate);
                    i += 1;
                }
            }
        }
    };
}

panel_impl!(panel_f32, tile_f32, false);
panel_impl!(panel_f16, tile_f16, false);
panel_impl!(panel_bf16, tile_bf16, false);
panel_impl!(panel_q4_0, tile_q4_0, true);
panel_impl!(panel_q8_0, tile_q8_0, true);
panel_impl!(panel_q4_k, tile_q4_k, true);
panel_impl!(panel_q4_1, tile_q4_1, true);
panel_impl!(panel_q5_0, tile_q5_0, true);
panel_impl!(panel_q5_1, tile_q5_1, true);
panel_impl!(panel_q5_k, tile_q5_k, true);
panel_impl!(panel_q6_k, tile_q6_k, true);

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
