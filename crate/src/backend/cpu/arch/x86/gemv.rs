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
//! byte mask (a zero-masked move of 16s, merged with the nibbles by one ternary op, instead of
//! a shuffle, a test and a compare), and the nibbles of a block come from one broadcast load
//! and a per-lane shift.
//!
//! Paths, detected at run time ([`super::gemm::Isa`], shared with the prompt GEMM): AVX-512
//! VNNI + VL + BW, AVX-VNNI, and plain AVX2 (`vpmaddubsw` + `vpmaddwd`), whose q8_0 uses the
//! sign trick and sums four rows' integer dots before the float work ([`q8_rows`]; q8_0 + 128
//! would saturate `vpmaddubsw`). On AVX-512 and plain AVX2 the 4- and 5-bit 32-element types
//! take the paired GEMV ([`pair_rows`]: two rows per vector), with the same results on both.

use std::arch::x86_64::*;

use super::gemm::Isa;
use super::tiles::{bits_32, prefetch_block, LOOKAHEAD};
use crate::backend::cpu::arch::{store_tile, Panel, Tiled};

/// Weight rows per tile (each block of the column is loaded once for them).
const R: usize = 4;

/// Whether the GEMV paths handle weights `t` (all three the same types).
pub(crate) fn handles(t: Tiled) -> bool {
    // (q8_0 on AVX2: the sign trick of q8_rows, not q8_0 + 128, whose pair of products
    // would saturate vpmaddubsw's i16.)
    matches!(
        t,
        Tiled::Q4_0
            | Tiled::Q4_1
            | Tiled::Q5_0
            | Tiled::Q5_1
            | Tiled::Q8_0
            | Tiled::Q4K
            | Tiled::Q5K
            | Tiled::Q6K
    )
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

thread_local! {
    /// This thread's next weight read after the current node ([`set_next_read`]).
    static NEXT_READ: std::cell::Cell<(*const u8, usize)> =
        const { std::cell::Cell::new((std::ptr::null(), 0)) };
}

/// See `arch::set_next_read`.
pub fn set_next_read(p: *const u8, len: usize) {
    NEXT_READ.with(|c| c.set((p, len)));
}

/// Where a tile whose prefetch target `ahead` on from panel offset `at` would pass the panel's
/// `total` bytes prefetches instead: as far into the next weight read (the thread's next
/// node's, when known) as the target is past the end — a small weight read cold costs
/// ~20 % of its time at 1 thread (q5_0 m = 128: 27.5 vs 33 GB/s) — or else `here`, in cache.
#[inline(always)]
fn prefetch_target(at: usize, ahead: usize, total: usize, here: *const u8) -> *const u8 {
    let end = at.saturating_add(ahead);
    if end < total {
        return here.wrapping_add(ahead);
    }
    next_read_at(false, end - total, here)
}

/// Where the first half's prefetch goes once its target passes the half's end by `over`
/// bytes: as far into the second half of the thread's next weight read (from its middle,
/// rounded down to a line) — that node's second stream, which would otherwise start cold — or
/// else `here`, in cache. (The second half's run-over covers the next read's start, see
/// [`prefetch_target`].) From DRAM, 1 thread, 16 rounds alternating with a switch: the small
/// weights 1.03–1.05× (SmolLM2's 576×576 and 576×192 q4_1, gemma3's 640×256 q5_0, Qwen2.5's
/// 896×128 q5_0 and q8_0), the large level (0.98–1.02); 2 threads 1.01×.
#[inline(always)]
fn next_half_target(over: usize, here: *const u8) -> *const u8 {
    next_read_at(true, over, here)
}

/// `off` bytes into the thread's next weight read — from its start, or from its middle
/// (`half`, rounded down to a line) — where that is inside it, else `here`.
#[inline(always)]
fn next_read_at(half: bool, off: usize, here: *const u8) -> *const u8 {
    let (next, len) = NEXT_READ.with(|c| c.get());
    let at = if half { (len / 2) & !63 } else { 0 }.saturating_add(off);
    if !next.is_null() && at < len {
        next.wrapping_add(at)
    } else {
        here
    }
}

/// The order in which a GEMV reads the panel's whole tiles of `rows` rows: two interleaved
/// halves — tile 0, tile h, tile 1, tile h + 1, … (h = ⌈tiles / 2⌉) — so that one thread reads
/// its share of a weight as two streams. From DRAM a loop that reads 64 bytes and works on them
/// streams 12.5–13.3 GB/s as one stream and 14.4–15.5 as two, alternating by 64 bytes to 4 KiB
/// (Emerald Rapids, 1 thread, `prefetcht1` 8 KiB ahead on both); the GEMVs of SmolLM2's,
/// gemma3's and Qwen2.5's 20 weight shapes from DRAM 1.08× (geometric mean, 8 rounds 1.00–1.16;
/// the AVX2 path 1.06×), at 2 threads level (1.01×). Past its half, the first half's prefetch
/// runs on into the second half of the thread's next weight read ([`next_half_target`]), the
/// second's into its first half ([`prefetch_target`]). A tile's results do not depend on the
/// order.
/// (Visit j gives the tile and its prefetch target, rather than a loop taking the tile as a
/// closure: a closure defined outside the `target_feature` function would not inline its
/// intrinsics.)
struct TwoStreams {
    a0: *const u8,
    rows: usize,
    span: usize,
    ahead: usize,
    /// Whole tiles, tiles in the first half.
    n: usize,
    h: usize,
}

impl TwoStreams {
    /// The order of `pn`'s tiles; requests both halves' first `ahead` bytes (the blocks'
    /// prefetch runs `ahead` on, so never covers them).
    #[inline(always)]
    fn new(pn: &Panel, rows: usize, ahead: usize) -> Self {
        let span = rows.saturating_mul(pn.lda);
        let n = pn.nrows / rows.max(1);
        let h = n.div_ceil(2);
        let mid = h * span;
        super::tiles::prefetch(pn.a0, mid.min(ahead));
        super::tiles::prefetch(pn.a0.wrapping_add(mid), (n * span - mid).min(ahead));
        TwoStreams {
            a0: pn.a0,
            rows,
            span,
            ahead,
            n,
            h,
        }
    }

    /// Visits: the whole tiles.
    #[inline(always)]
    fn len(&self) -> usize {
        self.n
    }

    /// Visit j (< len): its tile's first row and where its blocks' prefetch starts.
    #[inline(always)]
    fn visit(&self, j: usize) -> (usize, *const u8) {
        let (h, span) = (self.h, self.span);
        // (An odd n: the first half's last tile is the last visit.)
        let t = if j.is_multiple_of(2) {
            j / 2
        } else {
            h + j / 2
        };
        let at = t * span;
        let a = self.a0.wrapping_add(at);
        let pf = if t >= h || h == self.n {
            prefetch_target(at, self.ahead, self.n * span, a)
        } else if at + self.ahead < h * span {
            a.wrapping_add(self.ahead)
        } else {
            next_half_target(at + self.ahead - h * span, a)
        };
        (t * self.rows, pf)
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
unsafe fn rows<
    const XS: usize,
    const YS: usize,
    const BIAS: i32,
    const MIN: bool,
    const R4: bool,
>(
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
    decode: impl Fn(*const u8) -> __m256i + Copy,
    dot: impl Fn(__m256i, __m256i, __m256i) -> __m256i + Copy,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        // Saturating as in tiles.rs (a panel of fewer than R rows may have any row stride).
        let span = R.saturating_mul(pn.lda);
        let ahead = span.saturating_mul(LOOKAHEAD.div_ceil(span.max(1)));
        let order = TwoStreams::new(pn, R, ahead);
        for j in 0..order.len() {
            let (i, pf) = order.visit(j);
            // (R4: a[0] is the group.)
            let a: [*const u8; R] = std::array::from_fn(|r| pn.a0.add((i + r) * pn.lda));
            let o = tile::<R, XS, YS, BIAS, MIN, R4>(k, a, pf, y, decode, dot);
            store_tile::<R, 1>(pn, i, &o, accumulate);
        }
        let mut i = order.len() * R;
        let total = pn.nrows.saturating_mul(pn.lda);
        let pf =
            |i: usize, a: *const u8| prefetch_target(i.saturating_mul(pn.lda), ahead, total, a);
        // (Repacked groups are whole: nothing is left.)
        while !R4 && i < pn.nrows {
            let a = pn.a0.add(i * pn.lda);
            let o = tile::<1, XS, YS, BIAS, MIN, false>(k, [a], pf(i, a), y, decode, dot);
            store_tile::<1, 1>(pn, i, &o, accumulate);
            i += 1;
        }
    }
}

/// RR rows · one column (see [`rows`]). `R4`: `a[0]` is a repacked group (`repack.rs`; q8_0
/// only: the four d, then each row's quants), read as the plain rows are: the same bits.
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
    const R4: bool,
>(
    k: usize,
    a: [*const u8; RR],
    pf: *const u8,
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
            prefetch_block(pf.wrapping_add(blk * RR * XS), RR * XS);
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
                // (R4: `xb` such that the decoder's quant offset, 2, lands on row r's quants,
                // and d from the group's scales.)
                let (xb, d) = if R4 {
                    let g = a[0].add(blk * RR * XS);
                    (g.add(8 + r * (XS - 2) - 2), g.add(2 * r))
                } else {
                    let xb = a[r].add(blk * XS);
                    (xb, xb)
                };
                let prod = _mm_mul_ps(head(d), ys);
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
        // (A loop, not `array::from_fn`: its closure would not inline the intrinsics.)
        let mut out = [[0f32; 1]; RR];
        for (r, o) in out.iter_mut().enumerate() {
            let m = if MIN {
                _mm_cvtss_f32(_mm_movehdup_ps(accm[r]))
            } else {
                0.0
            };
            *o = [hsum(acc[r]) + m];
        }
        out
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

/// Rows per tile of the paired GEMV ([`pair_rows`]).
const PR: usize = 4;

/// The 4- and 5-bit 32-element types with AVX-512 or plain AVX2: two rows per vector, so the
/// per-block float work (conversion and FMA) serves two rows, and the R rows' f16 scales are
/// converted and multiplied by the column's at once. A vector holds elements 0..16 of rows r (low 128 bits)
/// and r + 1 (high), the low nibbles of both rows' 16 quant bytes (one load each); a second
/// one elements 16..32 (their high nibbles); the column's two halves are broadcast to both
/// 128-bit lanes. Each lane's integer sum (8 products, start −bias · Σ column quants) is exact,
/// then scaled with one FMA, as in [`tile`]. The column's per-block facts (that start, and its
/// scales) are computed once per panel, not per tile: q5_0 in cache 18.6–19.3 → 21.0–21.7 GB/s
/// with the ternary fifth-bit merge (AVX-512, Zen 4; a 512-bit variant, four rows per vector,
/// measured 16 % slower there: its lane inserts and shuffles cost two passes each). The lanes' integers are the same on both paths, so
/// are their results, bit for bit.
///
/// `QS` / `QH`: offsets of the nibbles and (`HI`) of the 32 fifth bits in a block. `dot(acc, lo,
/// ylo, hi, yhi)`: acc + the products of lo·ylo and hi·yhi, four of each per i32 lane (unsigned
/// · signed bytes, each ≤ 31 · 128); `fifth(lo, hi, x0, x1)`: given the quant bytes unmasked
/// (lo) and shifted right by 4 (hi), their low nibbles with the fifth bits of rows x0 and x1
/// (at `QH`) added as 16.
///
/// # Safety
/// The caller's target features cover `dot` and `fifth`, and AVX2/FMA/F16C; as [`rows`]
/// otherwise.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pair_rows<
    const XS: usize,
    const YS: usize,
    const BIAS: i32,
    const MIN: bool,
    const QS: usize,
    const QH: usize,
    const HI: bool,
    const R4: bool,
>(
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
    dot: impl Fn(__m256i, __m256i, __m256i, __m256i, __m256i) -> __m256i + Copy,
    fifth: impl Fn(__m256i, __m256i, Fifth) -> (__m256i, __m256i) + Copy,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let nb = k / 32;
        if nb <= PAIR_MAX_BLOCKS {
            // The column's per-block facts once per panel instead of once per tile.
            let mut facts = core::mem::MaybeUninit::<[ColFacts; PAIR_MAX_BLOCKS]>::uninit();
            let fp = facts.as_mut_ptr() as *mut ColFacts;
            for blk in 0..nb {
                let (start, ys) = col_facts::<YS, BIAS, MIN>(y, blk, dot);
                fp.add(blk).write(ColFacts {
                    start: _mm256_castsi256_si128(start),
                    ys: _mm256_castps256_ps128(ys),
                });
            }
            let col = |blk: usize| {
                let f = fp.add(blk);
                let start = if BIAS != 0 {
                    _mm256_broadcastsi128_si256((*f).start)
                } else {
                    _mm256_setzero_si256()
                };
                (start, _mm256_broadcast_ps(&(*f).ys))
            };
            pair_panel::<XS, YS, MIN, QS, QH, HI, R4>(k, pn, y, accumulate, dot, fifth, col);
        } else {
            let col = |blk: usize| col_facts::<YS, BIAS, MIN>(y, blk, dot);
            pair_panel::<XS, YS, MIN, QS, QH, HI, R4>(k, pn, y, accumulate, dot, fifth, col);
        }
    }
}

/// Where a pair of rows' fifth bits are, for [`pair_rows`]' `fifth`.
#[derive(Clone, Copy)]
enum Fifth {
    /// Plain rows: the rows' blocks' 4-byte words of them.
    Words(*const u8, *const u8),
    /// A repacked group block (`repack.rs`: bit 2r of byte j is row r's element j, bit 2r + 1
    /// its element j + 16) in both 128-bit lanes, and the pair (rows 2p, 2p + 1).
    Group(__m256i, usize),
}

/// Most column blocks (k ≤ 16384) whose facts [`pair_rows`] keeps on the stack (16 KiB).
const PAIR_MAX_BLOCKS: usize = 512;

/// A column block's facts for [`pair_tile`]: the integer start −bias · Σ quants per 32-bit
/// lane of a 128-bit half, and the f32 scales ([dy, sy, dy, sy] for q8_1, dy in every lane
/// for q8_0).
#[derive(Clone, Copy)]
struct ColFacts {
    start: __m128i,
    ys: __m128,
}

/// Block `blk` of column `y`: its facts as 256-bit vectors (both 128-bit halves the same).
///
/// # Safety
/// Block `blk` is inside the column; `dot`'s features enabled by the caller.
#[inline(always)]
unsafe fn col_facts<const YS: usize, const BIAS: i32, const MIN: bool>(
    y: *const u8,
    blk: usize,
    dot: impl Fn(__m256i, __m256i, __m256i, __m256i, __m256i) -> __m256i,
) -> (__m256i, __m256) {
    // SAFETY: the caller's.
    unsafe {
        let yb = y.add(blk * YS);
        let yq = yb.add(YS - 32);
        let start = if BIAS != 0 {
            let ylo = _mm256_broadcastsi128_si256(_mm_loadu_si128(yq as *const __m128i));
            let yhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(yq.add(16) as *const __m128i));
            let b = _mm256_set1_epi8(BIAS as u8 as i8);
            let zero = _mm256_setzero_si256();
            _mm256_sub_epi32(zero, dot(zero, b, ylo, b, yhi))
        } else {
            _mm256_setzero_si256()
        };
        // [dy, sy] (q8_1) in every pair of lanes, or dy everywhere (q8_0).
        let ys = head(yb);
        let ys = if MIN {
            _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(ys)))
        } else {
            _mm256_broadcastss_ps(ys)
        };
        (start, ys)
    }
}

/// The tiles of [`pair_rows`], with the column's facts from `col(blk)`.
///
/// # Safety
/// As [`pair_rows`]; `col` answers for every block.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pair_panel<
    const XS: usize,
    const YS: usize,
    const MIN: bool,
    const QS: usize,
    const QH: usize,
    const HI: bool,
    const R4: bool,
>(
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
    dot: impl Fn(__m256i, __m256i, __m256i, __m256i, __m256i) -> __m256i + Copy,
    fifth: impl Fn(__m256i, __m256i, Fifth) -> (__m256i, __m256i) + Copy,
    col: impl Fn(usize) -> (__m256i, __m256) + Copy,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        // Repacked: a tile is a group, its PR rows one stream of PR·lda bytes (the same span).
        let span = PR.saturating_mul(pn.lda);
        let ahead = span.saturating_mul(LOOKAHEAD.div_ceil(span.max(1)));
        let order = TwoStreams::new(pn, PR, ahead);
        for j in 0..order.len() {
            let (i, pf) = order.visit(j);
            let a: [*const u8; PR] = std::array::from_fn(|r| pn.a0.add((i + r) * pn.lda));
            let o = pair_tile::<XS, YS, MIN, QS, QH, HI, R4>(k, a, pf, y, dot, fifth, col);
            store_tile::<PR, 1>(pn, i, &o, accumulate);
        }
        let i = order.len() * PR;
        let total = pn.nrows.saturating_mul(pn.lda);
        if R4 {
            // (Groups are whole: the caller's rows are a multiple of four.)
            return;
        }
        // The last rows through the same tile (a row's lanes never meet another's, so its
        // result is the same bits in any tile, whatever rows the threads' shares start at),
        // the missing rows repeating the last one.
        if i < pn.nrows {
            let a: [*const u8; PR] =
                std::array::from_fn(|r| pn.a0.add((i + r).min(pn.nrows - 1) * pn.lda));
            let pf = prefetch_target(i.saturating_mul(pn.lda), ahead, total, a[0]);
            let o = pair_tile::<XS, YS, MIN, QS, QH, HI, R4>(k, a, pf, y, dot, fifth, col);
            for (r, v) in o.iter().enumerate().take(pn.nrows - i) {
                store_tile::<1, 1>(pn, i + r, &[*v], accumulate);
            }
        }
    }
}

/// [`PR`] rows · one column (see [`pair_rows`]).
///
/// # Safety
/// As [`pair_rows`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pair_tile<
    const XS: usize,
    const YS: usize,
    const MIN: bool,
    const QS: usize,
    const QH: usize,
    const HI: bool,
    const R4: bool,
>(
    k: usize,
    a: [*const u8; PR],
    pf: *const u8,
    y: *const u8,
    dot: impl Fn(__m256i, __m256i, __m256i, __m256i, __m256i) -> __m256i,
    fifth: impl Fn(__m256i, __m256i, Fifth) -> (__m256i, __m256i),
    col: impl Fn(usize) -> (__m256i, __m256),
) -> [[f32; 1]; PR] {
    // SAFETY: block indices < k/32; features enabled by the caller.
    unsafe {
        const P: usize = PR / 2;
        let mut acc = [_mm256_setzero_ps(); P];
        let mut accm = _mm256_setzero_ps();
        let m4 = _mm256_set1_epi8(0x0F);
        let word = |p: *const u8| (p as *const i32).read_unaligned();
        for blk in 0..k / 32 {
            prefetch_block(pf.wrapping_add(blk * PR * XS), PR * XS);
            let yb = y.add(blk * YS);
            let yq = yb.add(YS - 32);
            let ylo = _mm256_broadcastsi128_si256(_mm_loadu_si128(yq as *const __m128i));
            let yhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(yq.add(16) as *const __m128i));
            let (start, ys) = col(blk);
            // The rows' first 4 bytes (f16 d, then f16 m or quant bytes, masked off: only d).
            let xb: [*const u8; PR] = std::array::from_fn(|r| a[r].add(blk * XS));
            // A repacked group block (`repack.rs`): the four d (then the four m), for q5_* the
            // fifth bits, then each row's 16 quant bytes. The same words and vectors as the
            // plain rows give, so the same results.
            let g = a[0].add(blk * PR * XS);
            let f = if MIN { 2 } else { 1 };
            let body = g.add(8 * f + if HI { 16 } else { 0 });
            let h = if R4 {
                if MIN {
                    let v = _mm_loadu_si128(g as *const __m128i);
                    _mm_unpacklo_epi16(v, _mm_srli_si128::<8>(v))
                } else {
                    _mm_cvtepu16_epi32(_mm_loadl_epi64(g as *const __m128i))
                }
            } else {
                let mut h = _mm_cvtsi32_si128(word(xb[0]));
                h = _mm_insert_epi32::<1>(h, word(xb[1]));
                h = _mm_insert_epi32::<2>(h, word(xb[2]));
                h = _mm_insert_epi32::<3>(h, word(xb[3]));
                if !MIN {
                    h = _mm_and_si128(h, _mm_set1_epi32(0xFFFF));
                }
                h
            };
            let hv = if R4 && HI {
                _mm256_broadcastsi128_si256(_mm_loadu_si128(g.add(8 * f) as *const __m128i))
            } else {
                _mm256_setzero_si256()
            };
            // Lane 2r: d_r·dy; lane 2r + 1: m_r·sy (MIN).
            let prod = _mm256_mul_ps(_mm256_cvtph_ps(h), ys);
            if MIN {
                accm = _mm256_add_ps(accm, prod);
            }
            // Lanes 2r of the scale products, four times each: rows 0 and 1, rows 2 and 3
            // (one lane duplication for both, then a 64-bit permute each).
            let dup = _mm256_castps_pd(_mm256_moveldup_ps(prod));
            let sel = [
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0x50>(dup)),
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0xFA>(dup)),
            ];
            for p in 0..P {
                let (x0, x1) = (xb[2 * p], xb[2 * p + 1]);
                let v = if R4 {
                    _mm256_loadu_si256(body.add(32 * p) as *const __m256i)
                } else {
                    _mm256_inserti128_si256::<1>(
                        _mm256_castsi128_si256(_mm_loadu_si128(x0.add(QS) as *const __m128i)),
                        _mm_loadu_si128(x1.add(QS) as *const __m128i),
                    )
                };
                let (lo, hi) = if HI {
                    let at = if R4 {
                        Fifth::Group(hv, p)
                    } else {
                        Fifth::Words(x0.add(QH), x1.add(QH))
                    };
                    fifth(v, _mm256_srli_epi16(v, 4), at)
                } else {
                    (
                        _mm256_and_si256(v, m4),
                        _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                    )
                };
                let isum = dot(start, lo, ylo, hi, yhi);
                acc[p] = _mm256_fmadd_ps(sel[p], _mm256_cvtepi32_ps(isum), acc[p]);
            }
        }
        let mut mins = [0f32; 8];
        if MIN {
            _mm256_storeu_ps(mins.as_mut_ptr(), accm);
        }
        // (A loop, not `array::from_fn`: its closure would not inline the intrinsics.)
        let mut out = [[0f32; 1]; PR];
        for (r, o) in out.iter_mut().enumerate() {
            let v = acc[r / 2];
            let half = if r % 2 == 0 {
                _mm256_castps256_ps128(v)
            } else {
                _mm256_extractf128_ps::<1>(v)
            };
            let s = _mm_add_ps(half, _mm_movehl_ps(half, half));
            let s = _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)));
            *o = [s + mins[2 * r + 1]];
        }
        out
    }
}

/// The paired GEMV for q4_0 / q4_1 / q5_0 / q5_1 (see [`pair_rows`]) with the path's `dot` and
/// `fifth`; false for other types.
macro_rules! pairs_fn {
    ($name:ident, $feat:literal, $dot:expr, $fifth:expr) => {
        /// # Safety
        /// As [`panel`] (`R4`: [`panel_repacked`]), with the path's features present.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R4: bool>(
            t: Tiled,
            k: usize,
            pn: &Panel,
            y: *const u8,
            accumulate: bool,
        ) -> bool {
            let (dot, fifth) = ($dot, $fifth);
            // SAFETY: forwarded from the caller; features enabled by the attribute.
            unsafe {
                match t {
                    Tiled::Q4_0 => pair_rows::<18, 34, 8, false, 2, 0, false, R4>(
                        k, pn, y, accumulate, dot, fifth,
                    ),
                    Tiled::Q4_1 => pair_rows::<20, 36, 0, true, 4, 0, false, R4>(
                        k, pn, y, accumulate, dot, fifth,
                    ),
                    Tiled::Q5_0 => pair_rows::<22, 34, 16, false, 6, 2, true, R4>(
                        k, pn, y, accumulate, dot, fifth,
                    ),
                    Tiled::Q5_1 => pair_rows::<24, 36, 0, true, 8, 4, true, R4>(
                        k, pn, y, accumulate, dot, fifth,
                    ),
                    _ => return false,
                }
            }
            true
        }
    };
}

/// Row x's 4 bytes of fifth bits (bit j: element j's).
#[inline(always)]
unsafe fn qh_word(x: *const u8) -> u32 {
    // SAFETY: the caller passes 4 readable bytes.
    unsafe { (x as *const u32).read_unaligned() }
}

/// The fifth bits of the paired GEMV without AVX-512 (plain AVX2 and AVX-VNNI): the closure
/// `fifth(lo, hi, at)` of [`pairs_fn`].
macro_rules! avx2_fifth {
    () => {
        // Both rows' words in every 64 bits; byte i of lo's low 128-bit lane tests bit i of row
        // x0's word (its byte i/8), of the high lane bit i of x1's (byte 4 + i/8); hi the same for
        // bits 16..32.
        // (A repacked group's bits: the rows' bit of each byte, one per 128-bit lane.)
        |lo, hi, at: Fifth| {
            let b16 = _mm256_set1_epi8(0x10);
            let m4 = _mm256_set1_epi8(0x0F);
            let (x0, x1) = match at {
                Fifth::Words(x0, x1) => (x0, x1),
                Fifth::Group(hv, p) => {
                    // Row r's bit (2r: elements 0..16, 2r + 1: 16..32) of each byte to bit 4 by one
                    // 32-bit shift per 128-bit lane (rows 2p, 2p + 1): left for pair 0 (bits 0..3),
                    // right for pair 1 (bits 4..7); what crosses into a neighbouring byte misses
                    // bit 4 and is masked off.
                    let shift = |lane0: i32, lane1: i32| {
                        let n = _mm256_set_epi32(
                            lane1, lane1, lane1, lane1, lane0, lane0, lane0, lane0,
                        );
                        if p == 0 {
                            _mm256_sllv_epi32(hv, n)
                        } else {
                            _mm256_srlv_epi32(hv, n)
                        }
                    };
                    let (s_lo, s_hi) = if p == 0 {
                        (shift(4, 2), shift(3, 1))
                    } else {
                        (shift(0, 2), shift(1, 3))
                    };
                    let add = |v: __m256i, s: __m256i| {
                        _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(s, b16))
                    };
                    return (add(lo, s_lo), add(hi, s_hi));
                }
            };
            let q = _mm256_set1_epi64x((qh_word(x0) as u64 | (qh_word(x1) as u64) << 32) as i64);
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
            let add = |v: __m256i, idx: __m256i| {
                let t = _mm256_and_si256(_mm256_shuffle_epi8(q, idx), bit);
                let v = _mm256_and_si256(v, m4);
                _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi8(t, bit), b16))
            };
            (
                add(
                    lo,
                    _mm256_set_epi64x(
                        0x0505_0505_0505_0505,
                        0x0404_0404_0404_0404,
                        0x0101_0101_0101_0101,
                        0,
                    ),
                ),
                add(
                    hi,
                    _mm256_set_epi64x(
                        0x0707_0707_0707_0707,
                        0x0606_0606_0606_0606,
                        0x0303_0303_0303_0303,
                        0x0202_0202_0202_0202,
                    ),
                ),
            )
        }
    };
}

pairs_fn!(
    gemv_avx512_pairs,
    "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni",
    |acc, lo, ylo, hi, yhi| _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, lo, ylo), hi, yhi),
    // lo holds elements 0..16 of both rows, hi 16..32: byte masks of the bits, 16 where set,
    // merged with the nibbles in one ternary op ((nibble byte & 0x0F) | 16 or 0).
    |lo, hi, at: Fifth| {
        let (m_lo, m_hi) = match at {
            Fifth::Words(x0, x1) => {
                let (h0, h1) = (qh_word(x0), qh_word(x1));
                ((h0 & 0xFFFF) | (h1 << 16), (h0 >> 16) | (h1 & 0xFFFF_0000))
            }
            Fifth::Group(..) => {
                unreachable!("AVX-512 reads repacked groups with gemv_avx512_quads")
            }
        };
        let (b16, m4) = (_mm256_set1_epi8(0x10), _mm256_set1_epi8(0x0F));
        let f_lo = _mm256_maskz_mov_epi8(m_lo, b16);
        let f_hi = _mm256_maskz_mov_epi8(m_hi, b16);
        // imm 0xEC: (A & C) | B.
        (
            _mm256_ternarylogic_epi32::<0xEC>(lo, f_lo, m4),
            _mm256_ternarylogic_epi32::<0xEC>(hi, f_hi, m4),
        )
    }
);
pairs_fn!(
    gemv_avx2_pairs,
    "avx2,fma,f16c",
    // A product pair ≤ 2·31·128 and two pairs ≤ 15872 fit i16: the lanes' sums are exact and
    // those of vpdpbusd.
    |acc, lo, ylo, hi, yhi| _mm256_add_epi32(
        acc,
        _mm256_madd_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_maddubs_epi16(hi, yhi)),
            _mm256_set1_epi16(1),
        )
    ),
    avx2_fifth!()
);
pairs_fn!(
    gemv_avxvnni_pairs,
    "avx2,fma,f16c,avxvnni",
    |acc, lo, ylo, hi, yhi| _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, lo, ylo), hi, yhi),
    avx2_fifth!()
);

/// The paired GEMV's types over repacked groups with AVX-512 VNNI at full width: a group
/// block's four rows' 16 quant bytes are one 64-byte load (row r in 128-bit lane r), their fifth
/// bits one 16-byte broadcast, so one vector op serves the four rows where [`pair_tile`] spends
/// two. Each lane gets the same bytes, integer sums, scale and FMA as there, and each row's
/// lanes are summed in the same order: the same results, bit for bit. (With plain rows the
/// four rows need lane inserts; a 512-bit variant of those was slower, see [`pair_rows`].)
///
/// # Safety
/// As [`panel_repacked`], with AVX-512 F/VL/BW/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn gemv_avx512_quads(
    t: Tiled,
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
) -> bool {
    // SAFETY: forwarded from the caller; features enabled by the attribute.
    unsafe {
        match t {
            Tiled::Q4_0 => quad_rows::<18, 34, 8, false, false>(k, pn, y, accumulate),
            Tiled::Q4_1 => quad_rows::<20, 36, 0, true, false>(k, pn, y, accumulate),
            Tiled::Q5_0 => quad_rows::<22, 34, 16, false, true>(k, pn, y, accumulate),
            Tiled::Q5_1 => quad_rows::<24, 36, 0, true, true>(k, pn, y, accumulate),
            _ => return false,
        }
    }
    true
}

/// [`gemv_avx512_quads`] for one type (`XS`, `YS`, `BIAS`, `MIN` as [`pair_rows`]; `HI`: fifth
/// bits). Every group of the panel, the column's block facts computed once per panel where
/// they fit.
///
/// # Safety
/// As [`gemv_avx512_quads`].
#[inline(always)]
unsafe fn quad_rows<
    const XS: usize,
    const YS: usize,
    const BIAS: i32,
    const MIN: bool,
    const HI: bool,
>(
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
) {
    // SAFETY: forwarded from the caller; blocks < k / 32, groups inside the panel.
    unsafe {
        let dot =
            |acc, lo, ylo, hi, yhi| _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, lo, ylo), hi, yhi);
        let nb = k / 32;
        let span = PR.saturating_mul(pn.lda);
        let ahead = span.saturating_mul(LOOKAHEAD.div_ceil(span.max(1)));
        if nb <= PAIR_MAX_BLOCKS {
            let mut facts = core::mem::MaybeUninit::<[ColFacts; PAIR_MAX_BLOCKS]>::uninit();
            let fp = facts.as_mut_ptr() as *mut ColFacts;
            for blk in 0..nb {
                let (start, ys) = col_facts::<YS, BIAS, MIN>(y, blk, dot);
                fp.add(blk).write(ColFacts {
                    start: _mm256_castsi256_si128(start),
                    ys: _mm256_castps256_ps128(ys),
                });
            }
            quad_groups::<XS, YS, MIN, HI>(k, pn, y, accumulate, ahead, |blk| {
                let f = fp.add(blk);
                (
                    _mm512_broadcast_i32x4((*f).start),
                    _mm256_broadcast_ps(&(*f).ys),
                )
            });
        } else {
            quad_groups::<XS, YS, MIN, HI>(k, pn, y, accumulate, ahead, |blk| {
                let (start, ys) = col_facts::<YS, BIAS, MIN>(y, blk, dot);
                (_mm512_broadcast_i32x4(_mm256_castsi256_si128(start)), ys)
            });
        }
    }
}

/// Every group of the panel through [`quad_tile`].
///
/// # Safety
/// As [`gemv_avx512_quads`]; `col` answers for every block.
#[inline(always)]
unsafe fn quad_groups<const XS: usize, const YS: usize, const MIN: bool, const HI: bool>(
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
    ahead: usize,
    col: impl Fn(usize) -> (__m512i, __m256) + Copy,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        // The panel's first `ahead` bytes at once (the blocks' prefetch runs `ahead` on, so
        // never covers them), and past the panel's end only the thread's next weight read
        // ([`prefetch_target`]): a thread's panel is its whole share of a weight, and in a
        // model the next weight read is elsewhere (2 threads, DRAM, bench --llm with the copies
        // in reverse: q5_0 m = 128 25.9 → 34.1 GB/s without the next weight, the head alone).
        let order = TwoStreams::new(pn, PR, ahead);
        for j in 0..order.len() {
            let (i, pf) = order.visit(j);
            let o = quad_tile::<XS, YS, MIN, HI>(k, pn.a0.add(i * pn.lda), pf, y, col);
            store_tile::<PR, 1>(pn, i, &o, accumulate);
        }
    }
}

/// One repacked group `g` (four rows) · one column, see [`gemv_avx512_quads`].
///
/// # Safety
/// As [`gemv_avx512_quads`]; `col` answers for every block.
#[inline(always)]
unsafe fn quad_tile<const XS: usize, const YS: usize, const MIN: bool, const HI: bool>(
    k: usize,
    g: *const u8,
    pf: *const u8,
    y: *const u8,
    col: impl Fn(usize) -> (__m512i, __m256),
) -> [[f32; 1]; PR] {
    // SAFETY: block indices < k/32; features enabled by the caller.
    unsafe {
        let mut acc = _mm512_setzero_ps();
        let mut accm = _mm256_setzero_ps();
        let m4 = _mm512_set1_epi8(0x0F);
        let b16 = _mm512_set1_epi8(0x10);
        // Row r's fifth bits: bit 2r (elements 0..16) and 2r + 1 (16..32) of each byte.
        let c_lo = _mm512_set_epi32(
            0x4040_4040,
            0x4040_4040,
            0x4040_4040,
            0x4040_4040,
            0x1010_1010,
            0x1010_1010,
            0x1010_1010,
            0x1010_1010,
            0x0404_0404,
            0x0404_0404,
            0x0404_0404,
            0x0404_0404,
            0x0101_0101,
            0x0101_0101,
            0x0101_0101,
            0x0101_0101,
        );
        let c_hi = _mm512_add_epi8(c_lo, c_lo);
        // Lanes 2r of the scale products, in row r's 128-bit lane.
        let sel = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
        let f = if MIN { 2 } else { 1 };
        for blk in 0..k / 32 {
            let gb = g.add(blk * PR * XS);
            prefetch_block(pf.wrapping_add(blk * PR * XS), PR * XS);
            let yq = y.add(blk * YS + YS - 32);
            let ylo = _mm512_broadcast_i32x4(_mm_loadu_si128(yq as *const __m128i));
            let yhi = _mm512_broadcast_i32x4(_mm_loadu_si128(yq.add(16) as *const __m128i));
            let (start, ys) = col(blk);
            // The four d (then the four m), as pair_tile reads them.
            let h = if MIN {
                let v = _mm_loadu_si128(gb as *const __m128i);
                _mm_unpacklo_epi16(v, _mm_srli_si128::<8>(v))
            } else {
                _mm_cvtepu16_epi32(_mm_loadl_epi64(gb as *const __m128i))
            };
            let prod = _mm256_mul_ps(_mm256_cvtph_ps(h), ys);
            if MIN {
                accm = _mm256_add_ps(accm, prod);
            }
            let scale = _mm512_permutexvar_ps(sel, _mm512_castps256_ps512(prod));
            let v = _mm512_loadu_si512(gb.add(8 * f + if HI { 16 } else { 0 }) as *const _);
            let (lo, hi) = if HI {
                let hv = _mm512_broadcast_i32x4(_mm_loadu_si128(gb.add(8 * f) as *const __m128i));
                let f_lo = _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(hv, c_lo), b16);
                let f_hi = _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(hv, c_hi), b16);
                // imm 0xEC: (A & C) | B.
                (
                    _mm512_ternarylogic_epi32::<0xEC>(v, f_lo, m4),
                    _mm512_ternarylogic_epi32::<0xEC>(_mm512_srli_epi16(v, 4), f_hi, m4),
                )
            } else {
                (
                    _mm512_and_si512(v, m4),
                    _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                )
            };
            let isum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo, ylo), hi, yhi);
            acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), acc);
        }
        let mut mins = [0f32; 8];
        if MIN {
            _mm256_storeu_ps(mins.as_mut_ptr(), accm);
        }
        let lanes = [
            _mm512_extractf32x4_ps::<0>(acc),
            _mm512_extractf32x4_ps::<1>(acc),
            _mm512_extractf32x4_ps::<2>(acc),
            _mm512_extractf32x4_ps::<3>(acc),
        ];
        // (A loop, not `array::from_fn`: its closure would not inline the intrinsics.)
        let mut out = [[0f32; 1]; PR];
        for (r, o) in out.iter_mut().enumerate() {
            let half = lanes[r];
            let s = _mm_add_ps(half, _mm_movehl_ps(half, half));
            let s = _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)));
            *o = [s + mins[2 * r + 1]];
        }
        out
    }
}

/// Rows per tile of the AVX2 q8_0 GEMV ([`q8_rows`]).
const QR: usize = 4;
// (q8_tile spells out its four rows.)
const _: () = assert!(QR == 4);

/// q8_0 with plain AVX2 (no VNNI; the +128 bias of [`rows`] would saturate `vpmaddubsw`): the
/// sign trick, |x| against sign(x)·y, whose pair of products fits in i16 (2·128·127 < 2^15,
/// −128 weights included). The integer dots of four rows are summed into one vector with
/// horizontal adds, so the per-block float work (the scales' conversion, their product with the
/// column's, the int → float conversion and the FMA) is done once for four rows. Lane r of a
/// tile's sums holds row r's dot over elements 0..16 of the block, lane r + 4 over 16..32.
///
/// (The same four-row scheme for q4_0 / q5_0, with `vphaddw` merging two rows before
/// `vpmaddwd`, was 5 % faster in cache and no faster end to end: three `vphaddd` cost about
/// what they save. The 4- and 5-bit types take [`pair_rows`] instead.)
///
/// # Safety
/// As [`panel`], with AVX2/FMA/F16C present.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_rows(k: usize, pn: &Panel, y: *const u8, accumulate: bool) {
    // SAFETY: forwarded from the caller; features enabled by the attribute.
    unsafe {
        let span = QR.saturating_mul(pn.lda);
        let ahead = span.saturating_mul(LOOKAHEAD.div_ceil(span.max(1)));
        let order = TwoStreams::new(pn, QR, ahead);
        for j in 0..order.len() {
            let (i, pf) = order.visit(j);
            let a: [*const u8; QR] = std::array::from_fn(|r| pn.a0.add((i + r) * pn.lda));
            let o = q8_tile(k, a, pf, y);
            store_tile::<QR, 1>(pn, i, &o, accumulate);
        }
        let i = order.len() * QR;
        let total = pn.nrows.saturating_mul(pn.lda);
        let pf =
            |i: usize, a: *const u8| prefetch_target(i.saturating_mul(pn.lda), ahead, total, a);
        // The last rows through the same tile, the missing ones repeating the last row: a row's
        // lanes never meet another's, so its bits do not depend on the tile or the thread's
        // share it falls in.
        if i < pn.nrows {
            let a: [*const u8; QR] =
                std::array::from_fn(|r| pn.a0.add((i + r).min(pn.nrows - 1) * pn.lda));
            let o = q8_tile(k, a, pf(i, a[0]), y);
            for (r, v) in o.iter().enumerate().take(pn.nrows - i) {
                store_tile::<1, 1>(pn, i + r, &[*v], accumulate);
            }
        }
    }
}

/// [`QR`] q8_0 rows (f16 d, 32 i8) · one q8_0 column (see [`q8_rows`]).
///
/// # Safety
/// As [`q8_rows`].
#[inline(always)]
unsafe fn q8_tile(k: usize, a: [*const u8; QR], pf: *const u8, y: *const u8) -> [[f32; 1]; QR] {
    // SAFETY: block indices < k/32; features enabled by the caller.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let ones = _mm256_set1_epi16(1);
        // The rows' first 4 bytes, one i32 each → their f16 d (bytes 0, 1) in the low 64 bits.
        let gather = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
        let word = |p: *const u8| (p as *const i32).read_unaligned();
        for blk in 0..k / 32 {
            prefetch_block(pf.wrapping_add(blk * QR * 34), QR * 34);
            let yb = y.add(blk * 34);
            let qy = _mm256_loadu_si256(yb.add(2) as *const __m256i);
            // (No closures over intrinsics here, e.g. in `array::from_fn`: a closure is not
            // compiled with the caller's target features, so its intrinsics stay calls. That made
            // this GEMV 10× slower: gemma3's generation 34 → 5 tok/s with GGWEB_X86_ISA=avx2.)
            let (x0, x1, x2, x3) = (
                a[0].add(blk * 34),
                a[1].add(blk * 34),
                a[2].add(blk * 34),
                a[3].add(blk * 34),
            );
            let h = _mm_setr_epi32(word(x0), word(x1), word(x2), word(x3));
            let h = _mm_shuffle_epi8(h, gather);
            // d_r·dy in lanes r and r + 4.
            let prod = _mm_mul_ps(_mm_cvtph_ps(h), _mm_broadcastss_ps(head(yb)));
            let sc = _mm256_set_m128(prod, prod);
            let (p0, p1) = (q8_pairs(x0, qy, ones), q8_pairs(x1, qy, ones));
            let (p2, p3) = (q8_pairs(x2, qy, ones), q8_pairs(x3, qy, ones));
            let isum = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
            acc = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(isum), acc);
        }
        let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
        let mut o = [0f32; QR];
        _mm_storeu_ps(o.as_mut_ptr(), s);
        [[o[0]], [o[1]], [o[2]], [o[3]]]
    }
}

/// A q8_0 weight block's quants at `xb` (after its f16 d) against the column's `qy`: eight i32
/// sums of four products each, with the sign trick (|x| · sign(x)·y).
///
/// # Safety
/// AVX2 enabled by the caller; `xb` addresses a block.
#[inline(always)]
unsafe fn q8_pairs(xb: *const u8, qy: __m256i, ones: __m256i) -> __m256i {
    // SAFETY: 32 readable bytes after the scale; AVX2 enabled by the caller.
    unsafe {
        let x = _mm256_loadu_si256(xb.add(2) as *const __m256i);
        let pr = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(qy, x));
        _mm256_madd_epi16(pr, ones)
    }
}

/// q8_K column block: f32 d, 256 i8 quants, 16 i16 sums of 16 quants.
const Q8K_SIZE: usize = 292;
const Q8K_QS: usize = 4;
const Q8K_BSUMS: usize = 260;

/// pshufb controls (tables, so a loop that is not unrolled loads them rather than building
/// them): `SPLAT[j]` repeats the i16 at index j (bytes 2j, 2j + 1) over all lanes;
/// `SPLAT_PAIR[j]` the i16 at index 2j in the low 128-bit lane, 2j + 1 in the high one.
static SPLAT: Controls<32, 8> = Controls(splat_table(false));
static SPLAT_PAIR: [[u8; 32]; 4] = splat_table(true);

/// pshufb controls read by volatile (so aligned) loads: every row aligned to its width.
#[repr(C, align(64))]
struct Controls<const W: usize, const N: usize>([[u8; W]; N]);

const fn splat_table<const N: usize>(pair: bool) -> [[u8; 32]; N] {
    let mut t = [[0u8; 32]; N];
    let mut j = 0;
    while j < N {
        let mut b = 0;
        while b < 32 {
            let idx = if pair { 2 * j + b / 16 } else { j };
            // An index within the 128-bit lane (pair: j < 4, so 2j + 1 < 8 i16s).
            t[j][b] = (2 * idx + b % 2) as u8;
            b += 1;
        }
        j += 1;
    }
    t
}

#[inline(always)]
unsafe fn control(t: &[u8; 32]) -> __m256i {
    // SAFETY: 32 readable bytes; AVX enabled by the caller.
    unsafe { _mm256_loadu_si256(t.as_ptr() as *const __m256i) }
}

/// [`control`], opaque to the compiler: LLVM otherwise rewrites each constant `vpshufb` splat
/// of [`SPLAT`] as a lane extract and a cross-lane `vpbroadcastw`, two shuffles in place of
/// one (the volatile load is free beside them): AVX-512 q4_K GEMV in cache +4–9 %, q5_K
/// +2–5 % (Zen 4). Not for [`SPLAT_PAIR`] (q6_K measured 3–5 % slower with it).
#[inline(always)]
unsafe fn control_opaque(t: &[u8; 32]) -> __m256i {
    // SAFETY: 32 readable bytes; AVX enabled by the caller.
    unsafe { core::ptr::read_volatile(t.as_ptr() as *const __m256i) }
}

/// The 8 scales and 8 mins of a q4_K / q5_K super-block (12 packed bytes, 6 bits each) as two
/// 8-byte words: j < 4 are the low 6 bits of bytes j (scales) and j + 4 (mins); j ≥ 4 take
/// their low 4 bits from byte j + 4 (scale: low nibble, min: high nibble) and their top 2
/// from the top bits of bytes j − 4 (scale) and j (min).
#[inline(always)]
fn k4_scales(s: &[u8; 12]) -> (u64, u64) {
    let w = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
    let (a, b, c) = (w(0), w(4), w(8));
    let sc_hi = (c & 0x0f0f_0f0f) | (((a >> 6) & 0x0303_0303) << 4);
    let m_hi = ((c >> 4) & 0x0f0f_0f0f) | (((b >> 6) & 0x0303_0303) << 4);
    (
        (a & 0x3f3f_3f3f) as u64 | (sc_hi as u64) << 32,
        (b & 0x3f3f_3f3f) as u64 | (m_hi as u64) << 32,
    )
}

/// The k-quant rows of the panel against one q8_K column, one row at a time (several rows at
/// once only add register pressure: a super-block's work per row is large). `block` adds one
/// super-block's dot (its index, weight and column block) to the row's accumulator.
///
/// # Safety
/// As [`rows`], with k/256 super-blocks of `XS` bytes.
#[inline(always)]
unsafe fn krows<const XS: usize>(
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
    block: impl Fn(usize, *const u8, *const u8, __m256) -> __m256,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let ahead = pn.lda * LOOKAHEAD.div_ceil(pn.lda.max(1));
        let order = TwoStreams::new(pn, 1, ahead);
        for j in 0..order.len() {
            let (i, pf) = order.visit(j);
            let a = pn.a0.add(i * pn.lda);
            let mut acc = _mm256_setzero_ps();
            for blk in 0..k / 256 {
                prefetch_block(pf.wrapping_add(blk * XS), XS);
                acc = block(blk, a.add(blk * XS), y.add(blk * Q8K_SIZE), acc);
            }
            store_tile::<1, 1>(pn, i, &[[hsum(acc)]], accumulate);
        }
    }
}

/// acc + d·dy·Σ_g sc_g·(q_g·y_g) − dmin·dy·Σ_j m_j·bsum_j for a q4_K / q5_K super-block at
/// `xb` (f16 d, f16 dmin, 12 scale bytes) whose 8 groups of 32 quants `quants(g)` yields;
/// `dotw` is acc + Σ pairs of i16 products (`vpdpwssd`).
///
/// # Safety
/// AVX2/FMA/F16C enabled by the caller; `xb` and `yb` address one block each.
#[inline(always)]
unsafe fn k4_block<const OPAQUE: bool>(
    xb: *const u8,
    yb: *const u8,
    acc: __m256,
    quants: impl Fn(usize) -> __m256i,
    dotw: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> __m256 {
    // SAFETY: as documented.
    unsafe {
        let (sc, mn) = k4_scales(&*(xb.add(4) as *const [u8; 12]));
        let scb = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let m8 = _mm_cvtsi64_si128(mn as i64);
        // Each min covers two 16-element bsums.
        let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        // Two chains of accumulation (even and odd groups): one would serialize eight
        // dependent `vpdpwssd`s per super-block.
        let mut isum = [_mm256_setzero_si256(); 2];
        for (g, ctl) in SPLAT.0.iter().enumerate() {
            let qy = _mm256_loadu_si256(yb.add(Q8K_QS + 32 * g) as *const __m256i);
            let p = _mm256_maddubs_epi16(quants(g), qy);
            let ctl = if OPAQUE {
                control_opaque(ctl)
            } else {
                control(ctl)
            };
            isum[g % 2] = dotw(isum[g % 2], p, _mm256_shuffle_epi8(scb, ctl));
        }
        let isum = _mm256_add_epi32(isum[0], isum[1]);
        k4_finish(xb, yb, isum, mins, acc)
    }
}

/// A q4_K / q5_K super-block's float steps (the one-row blocks'): acc + d·dy·isum − dmin·dy·msum,
/// msum the mins (each repeated for its two 16-element sums) against the column block's sums.
///
/// # Safety
/// AVX2/FMA/F16C enabled by the caller; `xb` and `yb` address one block each.
#[inline(always)]
unsafe fn k4_finish(
    xb: *const u8,
    yb: *const u8,
    isum: __m256i,
    mins: __m256i,
    acc: __m256,
) -> __m256 {
    // SAFETY: as documented.
    unsafe {
        let bs = _mm256_loadu_si256(yb.add(Q8K_BSUMS) as *const __m256i);
        let msum = _mm256_madd_epi16(bs, mins);
        let dy = (yb as *const f32).read_unaligned();
        let (d, dmin) = (half(xb), half(xb.add(2)));
        let acc = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum), acc);
        _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dy), _mm256_cvtepi32_ps(msum), acc)
    }
}

#[inline(always)]
unsafe fn half(p: *const u8) -> f32 {
    // SAFETY: p addresses 2 bytes; F16C enabled by the caller.
    unsafe {
        let h = (p as *const u16).read_unaligned();
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }
}

/// q4_K super-block (144 bytes: header, 128 bytes of nibbles; group 2i is the low nibbles of
/// bytes 32i..32i+32, group 2i + 1 their high nibbles).
///
/// # Safety
/// As [`k4_block`].
#[inline(always)]
unsafe fn q4_k_block<const OPAQUE: bool>(
    xb: *const u8,
    yb: *const u8,
    acc: __m256,
    dotw: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> __m256 {
    // SAFETY: as documented.
    unsafe {
        let qs = xb.add(16);
        let quants = |g: usize| {
            let v = _mm256_loadu_si256(qs.add(32 * (g / 2)) as *const __m256i);
            let v = if g.is_multiple_of(2) {
                v
            } else {
                _mm256_srli_epi16(v, 4)
            };
            _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
        };
        k4_block::<OPAQUE>(xb, yb, acc, quants, dotw)
    }
}

/// pshufb controls of [`q4_k_block512p`]: entry 2j splats scale 4j over the low 256 bits and
/// 4j + 2 over the high (the low nibbles of a 64-byte load), entry 2j + 1 scales 4j + 1 and
/// 4j + 3 (its high nibbles).
static SPLAT_Q: Controls<64, 4> = Controls({
    let mut t = [[0u8; 64]; 4];
    let mut e = 0;
    while e < 4 {
        let (j, h) = (e / 2, e % 2);
        let mut b = 0;
        while b < 64 {
            let idx = 4 * j + h + 2 * (b / 32);
            t[e][b] = (2 * idx + b % 2) as u8;
            b += 1;
        }
        e += 1;
    }
    t
});

/// Most super-blocks whose column quants [`gemv_avx512_q4k`] reorders on the stack (k ≤ 16384).
const Q4K_PERM_MAX: usize = 64;

/// Groups as one 64-byte load of a q4_K super-block's nibbles gives them (low nibbles: groups
/// 4j and 4j + 2; high: 4j + 1 and 4j + 3).
const Q4K_PERM: [usize; 8] = [0, 2, 1, 3, 4, 6, 5, 7];

/// [`q4_k_block`] with 512-bit vectors (AVX-512 BW/VNNI) over the column's quants reordered as
/// [`Q4K_PERM`] (`yq`: the super-block's eight 32-byte groups): a 64-byte load of nibbles holds
/// groups 4j and 4j + 2 (low nibbles), 4j + 1 and 4j + 3 (high), so it meets its column bytes
/// without a lane insert, and the four splat controls stay in registers (`ctl`, loaded opaquely
/// once). Each i32 lane sums the same products as the 256-bit block's (a group's bytes keep
/// their lane; the halves added at the end, integers, so exact) and the float work is the same:
/// the same results, bit for bit.
///
/// # Safety
/// AVX-512 F/BW/VNNI, AVX2, FMA and F16C enabled by the caller; `xb` and `yb` address one block
/// each, `yq` 256 readable bytes.
///
/// `Q5`: a q5_K super-block (176 bytes: the same header, 32 bytes qh, the nibbles at 48), see
/// [`k4_isum512`].
#[inline(always)]
unsafe fn q4_k_block512p<const Q5: bool>(
    xb: *const u8,
    yb: *const u8,
    yq: *const u8,
    ctl: &[__m512i; 4],
    acc: __m256,
) -> __m256 {
    // SAFETY: as documented.
    unsafe {
        let (sc, mn) = k4_scales(&*(xb.add(4) as *const [u8; 12]));
        let scz = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let m8 = _mm_cvtsi64_si128(mn as i64);
        let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        let yv = col_groups(yq);
        let qs = xb.add(if Q5 { 48 } else { 16 });
        let isum = k4_isum512::<Q5>(qs, xb.add(16), scz, &yv, ctl);
        let isum = _mm256_add_epi32(
            _mm512_castsi512_si256(isum),
            _mm512_extracti64x4_epi64::<1>(isum),
        );
        k4_finish(xb, yb, isum, mins, acc)
    }
}

/// A super-block's reordered column quants ([`Q4K_PERM`], 256 bytes at `yq`) as four vectors:
/// 2j the low nibbles' of load j, 2j + 1 its high nibbles'.
///
/// # Safety
/// AVX-512 F enabled by the caller; 256 readable bytes at `yq`.
#[inline(always)]
unsafe fn col_groups(yq: *const u8) -> [__m512i; 4] {
    // SAFETY: as documented.
    unsafe {
        [
            _mm512_loadu_si512(yq as *const _),
            _mm512_loadu_si512(yq.add(64) as *const _),
            _mm512_loadu_si512(yq.add(128) as *const _),
            _mm512_loadu_si512(yq.add(192) as *const _),
        ]
    }
}

/// One q4_K / q5_K row's super-block against the column's reordered quants (`yv`, see
/// [`col_groups`]), each group's pair products weighted by its scale (`scz` through the pshufb
/// controls `ctl`): 16 i32 lanes, whose two 256-bit halves make the block's integer sum.
/// `qs`: the row's 128 bytes of nibbles; `qh` (`Q5`): its 32 bytes of fifth bits — group g's,
/// bit g of qh byte i, go to bit 4 of each byte by one 16-bit shift per 256-bit half (what
/// crosses a byte edge misses bit 4), masked and merged with the nibbles.
///
/// # Safety
/// AVX-512 F/BW/VNNI enabled by the caller; 128 readable bytes at `qs` (and 32 at `qh`).
#[inline(always)]
unsafe fn k4_isum512<const Q5: bool>(
    qs: *const u8,
    qh: *const u8,
    scz: __m512i,
    yv: &[__m512i; 4],
    ctl: &[__m512i; 4],
) -> __m512i {
    // SAFETY: as documented.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let b16 = _mm512_set1_epi8(0x10);
        let qh = if Q5 {
            _mm512_broadcast_i64x4(_mm256_loadu_si256(qh as *const __m256i))
        } else {
            _mm512_setzero_si512()
        };
        // Bit g to bit 4: counts for the low and high 256-bit halves (groups of lo, hi).
        let fifth = |v: __m512i, left: bool, n0: i16, n1: i16| {
            let n = _mm512_set_epi16(
                n1, n1, n1, n1, n1, n1, n1, n1, n1, n1, n1, n1, n1, n1, n1, n1, n0, n0, n0, n0, n0,
                n0, n0, n0, n0, n0, n0, n0, n0, n0, n0, n0,
            );
            let h = if left {
                _mm512_sllv_epi16(qh, n)
            } else {
                _mm512_srlv_epi16(qh, n)
            };
            // imm 0xEC: (A & C) | B.
            _mm512_ternarylogic_epi32::<0xEC>(v, _mm512_and_si512(h, b16), m4)
        };
        let mut isum = [_mm512_setzero_si512(); 2];
        for j in 0..2 {
            let v = _mm512_loadu_si512(qs.add(64 * j) as *const _);
            let (lo, hi) = if Q5 {
                let vh = _mm512_srli_epi16(v, 4);
                if j == 0 {
                    (fifth(v, true, 4, 2), fifth(vh, true, 3, 1))
                } else {
                    (fifth(v, false, 0, 2), fifth(vh, false, 1, 3))
                }
            } else {
                (
                    _mm512_and_si512(v, m4),
                    _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                )
            };
            let (plo, phi) = (
                _mm512_maddubs_epi16(lo, yv[2 * j]),
                _mm512_maddubs_epi16(hi, yv[2 * j + 1]),
            );
            isum[0] = _mm512_dpwssd_epi32(isum[0], plo, _mm512_shuffle_epi8(scz, ctl[2 * j]));
            isum[1] = _mm512_dpwssd_epi32(isum[1], phi, _mm512_shuffle_epi8(scz, ctl[2 * j + 1]));
        }
        _mm512_add_epi32(isum[0], isum[1])
    }
}

/// q4_K rows with [`q4_k_block512p`] (the column's quants reordered once per panel on the
/// stack), or the 256-bit block past [`Q4K_PERM_MAX`] super-blocks.
///
/// # Safety
/// As [`panel`], with AVX-512 F/VL/BW/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn gemv_avx512_q4k(k: usize, pn: &Panel, y: *const u8, accumulate: bool) {
    // SAFETY: forwarded.
    unsafe { gemv_avx512_k4::<false>(k, pn, y, accumulate) }
}

/// q5_K rows with [`q4_k_block512p`] (`Q5`), or the 256-bit block past [`Q4K_PERM_MAX`]
/// super-blocks.
///
/// # Safety
/// As [`gemv_avx512_q4k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn gemv_avx512_q5k(k: usize, pn: &Panel, y: *const u8, accumulate: bool) {
    // SAFETY: forwarded.
    unsafe { gemv_avx512_k4::<true>(k, pn, y, accumulate) }
}

/// [`gemv_avx512_q4k`] (`Q5`: [`gemv_avx512_q5k`]).
///
/// # Safety
/// As [`gemv_avx512_q4k`].
#[inline(always)]
unsafe fn gemv_avx512_k4<const Q5: bool>(k: usize, pn: &Panel, y: *const u8, accumulate: bool) {
    // SAFETY: forwarded from the caller; features enabled by the attribute; the reordered
    // copy holds k/256 ≤ Q4K_PERM_MAX super-blocks of 256 bytes.
    unsafe {
        let nsb = k / 256;
        if nsb > Q4K_PERM_MAX {
            let dotw = |acc, p, s| _mm256_dpwssd_epi32(acc, p, s);
            if Q5 {
                krows::<176>(k, pn, y, accumulate, |_, xb, yb, acc| {
                    q5_k_block::<true>(xb, yb, acc, dotw)
                });
            } else {
                krows::<144>(k, pn, y, accumulate, |_, xb, yb, acc| {
                    q4_k_block::<true>(xb, yb, acc, dotw)
                });
            }
            return;
        }
        let mut perm = core::mem::MaybeUninit::<[u8; Q4K_PERM_MAX * 256]>::uninit();
        let mut sums = core::mem::MaybeUninit::<[__m256i; Q4K_PERM_MAX]>::uninit();
        let pp = perm.as_mut_ptr() as *mut u8;
        let sp = sums.as_mut_ptr() as *mut __m256i;
        for sb in 0..nsb {
            let yb = y.add(sb * Q8K_SIZE);
            for (i, g) in Q4K_PERM.iter().enumerate() {
                let v = _mm256_loadu_si256(yb.add(Q8K_QS + 32 * g) as *const __m256i);
                _mm256_storeu_si256(pp.add(256 * sb + 32 * i) as *mut __m256i, v);
            }
            // Group j's two 16-element sums (|b + b'| ≤ 2 · 16 · 128), for k4_tile's mins.
            let bs = _mm256_loadu_si256(yb.add(Q8K_BSUMS) as *const __m256i);
            sp.add(sb)
                .write_unaligned(_mm256_madd_epi16(bs, _mm256_set1_epi16(1)));
        }
        // (Opaque, as control_opaque: LLVM would rewrite the constant splats.)
        let opaque = |t: &Controls<64, 4>| {
            [
                core::ptr::read_volatile(t.0[0].as_ptr() as *const __m512i),
                core::ptr::read_volatile(t.0[1].as_ptr() as *const __m512i),
                core::ptr::read_volatile(t.0[2].as_ptr() as *const __m512i),
                core::ptr::read_volatile(t.0[3].as_ptr() as *const __m512i),
            ]
        };
        let pp = pp as *const u8;
        // Four rows a tile (k4_tile), the panel's tiles as two streams.
        let ctlb = opaque(&SPLAT_QB);
        let span = PR.saturating_mul(pn.lda);
        let ahead = span.saturating_mul(LOOKAHEAD.div_ceil(span.max(1)));
        let order = TwoStreams::new(pn, PR, ahead);
        for j in 0..order.len() {
            let (i, pf) = order.visit(j);
            let a: [*const u8; PR] = std::array::from_fn(|r| pn.a0.add((i + r) * pn.lda));
            let o = if Q5 {
                k4_tile::<176, true>(nsb, a, pf, y, pp, sp, &ctlb)
            } else {
                k4_tile::<144, false>(nsb, a, pf, y, pp, sp, &ctlb)
            };
            store_tile::<PR, 1>(pn, i, &o, accumulate);
        }
        // The last rows one at a time (a row's bits are the same either way).
        let done = order.len() * PR;
        if done == pn.nrows {
            return;
        }
        let rest = Panel {
            a0: pn.a0.add(done * pn.lda),
            lda: pn.lda,
            nrows: pn.nrows - done,
            out0: pn.out0.add(done * 4),
            ldo: pn.ldo,
        };
        let ctl = opaque(&SPLAT_Q);
        if Q5 {
            krows::<176>(k, &rest, y, accumulate, |sb, xb, yb, acc| {
                q4_k_block512p::<true>(xb, yb, pp.add(256 * sb), &ctl, acc)
            });
        } else {
            krows::<144>(k, &rest, y, accumulate, |sb, xb, yb, acc| {
                q4_k_block512p::<false>(xb, yb, pp.add(256 * sb), &ctl, acc)
            });
        }
    }
}

/// pshufb controls of [`k4_tile`]: [`SPLAT_Q`]'s, but each scale taken from its byte of the
/// decoded scales and zero-extended to i16 by the control's 0x80 (a zeroed byte), so a row's
/// scales need no widening.
static SPLAT_QB: Controls<64, 4> = Controls({
    let mut t = [[0u8; 64]; 4];
    let mut e = 0;
    while e < 4 {
        let (j, h) = (e / 2, e % 2);
        let mut b = 0;
        while b < 64 {
            let idx = 4 * j + h + 2 * (b / 32);
            t[e][b] = if b % 2 == 0 { idx as u8 } else { 0x80 };
            b += 1;
        }
        e += 1;
    }
    t
});

/// Four q4_K / q5_K rows (`a`: their first super-blocks, `XS` bytes each) · the column, with
/// AVX-512 VNNI. The one-row block ([`q4_k_block512p`]) spends about half its work per
/// super-block on what is not the dot: twelve scale bytes decoded with ~20 scalar operations,
/// the column's quants loaded, two f16 conversions, the integer sum's reduction and its float
/// steps. Here the four rows' 16-byte heads (d, dmin, scale bytes) are one vector, their scales
/// decoded together (two dword permutes, shifts and masks), the column's quants loaded once for
/// the four rows, their d and dmin converted by one `vcvtph2ps`, and the float work done two
/// rows per vector. Each row's 8 i32 lanes and float steps are [`q4_k_block512p`]'s, and the
/// mins' sum is the same integers (m·(b + b') for m·b + m·b'): the same results, bit for bit.
/// `yq`: the column's reordered quants ([`Q4K_PERM`]); `bsum`: per super-block, its 8 groups'
/// sums of quants as i32; `pf`: where the tile's prefetch starts.
///
/// # Safety
/// As [`gemv_avx512_q4k`]; the rows hold nsb super-blocks, `yq` and `bsum` nsb each.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn k4_tile<const XS: usize, const Q5: bool>(
    nsb: usize,
    a: [*const u8; PR],
    pf: *const u8,
    y: *const u8,
    yq: *const u8,
    bsum: *const __m256i,
    ctl: &[__m512i; 4],
) -> [[f32; 1]; PR] {
    // SAFETY: super-block indices < nsb; features enabled by the caller.
    unsafe {
        // Row r's head is 128-bit lane r: dword 4r its d and dmin, 4r + 1.. its scale bytes
        // (a, b, c). The lane of its decoded scales is [a, c, b, c >> 4] masked 3f, 0f, 3f, 0f,
        // or-ed with [0, a >> 2, 0, b >> 2] masked 30 (the scales' and mins' top two bits):
        // bytes 0..8 its 8 scales, 8..16 its 8 mins (k4_scales' words).
        let ix = _mm512_set_epi32(15, 14, 15, 13, 11, 10, 11, 9, 7, 6, 7, 5, 3, 2, 3, 1);
        let iy = _mm512_set_epi32(14, 14, 13, 13, 10, 10, 9, 9, 6, 6, 5, 5, 2, 2, 1, 1);
        let sh = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
        let (lo6, lo4, hi2) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x3030_3030);
        let m1 = _mm512_set_epi32(
            lo4, lo6, lo4, lo6, lo4, lo6, lo4, lo6, lo4, lo6, lo4, lo6, lo4, lo6, lo4, lo6,
        );
        let m2 = _mm512_set_epi32(
            hi2, 0, hi2, 0, hi2, 0, hi2, 0, hi2, 0, hi2, 0, hi2, 0, hi2, 0,
        );
        // The four rows' (d, dmin) words, in the low 128 bits.
        let idm = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
        // The mins (qword 1 of each row's lane), rows 0..4 in the low 256 bits.
        let imin = _mm512_set_epi64(7, 5, 3, 1, 7, 5, 3, 1);
        // d·dy of rows (0, 1), (2, 3) and dmin·dy of them, each over 8 lanes, from the
        // converted [d0, dmin0, d1, dmin1, …].
        let pick =
            |a: i32, b: i32| _mm512_set_epi32(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a);
        let (d01, d23, m01, m23) = (pick(0, 2), pick(4, 6), pick(1, 3), pick(5, 7));
        let qoff = if Q5 { 48 } else { 16 };
        let mut acc = [_mm512_setzero_ps(); 2];
        for sb in 0..nsb {
            let xb = a.map(|r| r.add(sb * XS));
            prefetch_block(pf.wrapping_add(sb * PR * XS), PR * XS);
            let head = _mm512_castsi128_si512(_mm_loadu_si128(xb[0] as *const __m128i));
            let head = _mm512_inserti32x4::<1>(head, _mm_loadu_si128(xb[1] as *const __m128i));
            let head = _mm512_inserti32x4::<2>(head, _mm_loadu_si128(xb[2] as *const __m128i));
            let head = _mm512_inserti32x4::<3>(head, _mm_loadu_si128(xb[3] as *const __m128i));
            let sa = _mm512_srlv_epi32(_mm512_permutexvar_epi32(ix, head), sh);
            let sb2 = _mm512_srli_epi32::<2>(_mm512_permutexvar_epi32(iy, head));
            let sc = _mm512_or_si512(_mm512_and_si512(sa, m1), _mm512_and_si512(sb2, m2));
            let dy = (y.add(sb * Q8K_SIZE) as *const f32).read_unaligned();
            let dm = _mm512_castsi512_si128(_mm512_permutexvar_epi32(idm, head));
            let dd = _mm256_mul_ps(_mm256_cvtph_ps(dm), _mm256_set1_ps(dy));
            let dd = _mm512_castps256_ps512(dd);
            let yv = col_groups(yq.add(256 * sb));
            let row = |r: usize, scz: __m512i| {
                k4_isum512::<Q5>(xb[r].add(qoff), xb[r].add(16), scz, &yv, ctl)
            };
            let i0 = row(0, _mm512_shuffle_i32x4::<0x00>(sc, sc));
            let i1 = row(1, _mm512_shuffle_i32x4::<0x55>(sc, sc));
            let i2 = row(2, _mm512_shuffle_i32x4::<0xAA>(sc, sc));
            let i3 = row(3, _mm512_shuffle_i32x4::<0xFF>(sc, sc));
            // Rows (0, 1) and (2, 3): each row's two 256-bit halves added.
            let i01 = _mm512_add_epi32(
                _mm512_shuffle_i64x2::<0x44>(i0, i1),
                _mm512_shuffle_i64x2::<0xEE>(i0, i1),
            );
            let i23 = _mm512_add_epi32(
                _mm512_shuffle_i64x2::<0x44>(i2, i3),
                _mm512_shuffle_i64x2::<0xEE>(i2, i3),
            );
            let bs = _mm512_broadcast_i64x4(bsum.add(sb).read_unaligned());
            let mq = _mm512_permutexvar_epi64(imin, sc);
            let ms01 = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(mq)), bs);
            let ms23 =
                _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32::<1>(mq)), bs);
            let fin = |acc: __m512, i: __m512i, ms: __m512i, d: __m512i, m: __m512i| {
                let acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(d, dd), _mm512_cvtepi32_ps(i), acc);
                _mm512_fnmadd_ps(_mm512_permutexvar_ps(m, dd), _mm512_cvtepi32_ps(ms), acc)
            };
            acc[0] = fin(acc[0], i01, ms01, d01, m01);
            acc[1] = fin(acc[1], i23, ms23, d23, m23);
        }
        let half = |v: __m512, hi: bool| {
            let v = _mm512_castps_pd(v);
            _mm256_castpd_ps(if hi {
                _mm512_extractf64x4_pd::<1>(v)
            } else {
                _mm512_castpd512_pd256(v)
            })
        };
        [
            [hsum(half(acc[0], false))],
            [hsum(half(acc[0], true))],
            [hsum(half(acc[1], false))],
            [hsum(half(acc[1], true))],
        ]
    }
}

/// q5_K super-block (176 bytes: header, 32 bytes qh, 128 bytes of nibbles as q4_K; bit g of
/// qh byte i is the fifth bit of element i of group g).
///
/// # Safety
/// As [`k4_block`].
#[inline(always)]
unsafe fn q5_k_block<const OPAQUE: bool>(
    xb: *const u8,
    yb: *const u8,
    acc: __m256,
    dotw: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> __m256 {
    // SAFETY: as documented.
    unsafe {
        let qh = _mm256_loadu_si256(xb.add(16) as *const __m256i);
        let qs = xb.add(48);
        let quants = |g: usize| {
            let v = _mm256_loadu_si256(qs.add(32 * (g / 2)) as *const __m256i);
            let v = if g.is_multiple_of(2) {
                v
            } else {
                _mm256_srli_epi16(v, 4)
            };
            let lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
            // Bit g of each qh byte to bit 4 (16-bit shifts: bits of the neighbouring byte
            // land elsewhere and are masked off).
            let h = match g {
                0 => _mm256_slli_epi16(qh, 4),
                1 => _mm256_slli_epi16(qh, 3),
                2 => _mm256_slli_epi16(qh, 2),
                3 => _mm256_slli_epi16(qh, 1),
                4 => qh,
                5 => _mm256_srli_epi16(qh, 1),
                6 => _mm256_srli_epi16(qh, 2),
                _ => _mm256_srli_epi16(qh, 3),
            };
            _mm256_or_si256(lo, _mm256_and_si256(h, _mm256_set1_epi8(0x10)))
        };
        k4_block::<OPAQUE>(xb, yb, acc, quants, dotw)
    }
}

/// q6_K super-block (210 bytes: 128 bytes ql, 64 bytes qh, 16 i8 scales, f16 d; x =
/// d·sc_s·(q − 32) with 6-bit q, one scale per 16 elements): the −32 is taken back through
/// the column's bsums, 32·Σ sc_s·bsum_s.
///
/// # Safety
/// As [`k4_block`].
#[inline(always)]
unsafe fn q6_k_block(
    xb: *const u8,
    yb: *const u8,
    acc: __m256,
    dotw: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> __m256 {
    // SAFETY: as documented.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(0x30);
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(xb.add(192) as *const __m128i));
        let mut isum = _mm256_setzero_si256();
        for h in 0..2 {
            // Scales of this half's 4 groups (8 sub-blocks) in both 128-bit lanes.
            let sch = if h == 0 {
                _mm256_permute2x128_si256(sc16, sc16, 0x00)
            } else {
                _mm256_permute2x128_si256(sc16, sc16, 0x11)
            };
            let ql = xb.add(64 * h);
            let l0 = _mm256_loadu_si256(ql as *const __m256i);
            let l1 = _mm256_loadu_si256(ql.add(32) as *const __m256i);
            let qh = _mm256_loadu_si256(xb.add(128 + 32 * h) as *const __m256i);
            // Group j of the half: low 4 bits from l0 / l1 (low nibbles for j < 2, high for
            // j ≥ 2), the two high bits at bits 2j..2j+2 of each qh byte.
            for (j, ctl) in SPLAT_PAIR.iter().enumerate() {
                let l = if j % 2 == 0 { l0 } else { l1 };
                let lo = if j < 2 {
                    _mm256_and_si256(l, m4)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16(l, 4), m4)
                };
                let hb = match j {
                    0 => _mm256_slli_epi16(qh, 4),
                    1 => _mm256_slli_epi16(qh, 2),
                    2 => qh,
                    _ => _mm256_srli_epi16(qh, 2),
                };
                let q = _mm256_or_si256(lo, _mm256_and_si256(hb, m2));
                let g = 4 * h + j;
                let qy = _mm256_loadu_si256(yb.add(Q8K_QS + 32 * g) as *const __m256i);
                let p = _mm256_maddubs_epi16(q, qy);
                isum = dotw(isum, p, _mm256_shuffle_epi8(sch, control(ctl)));
            }
        }
        let bs = _mm256_loadu_si256(yb.add(Q8K_BSUMS) as *const __m256i);
        let corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
        let dy = (yb as *const f32).read_unaligned();
        let d = half(xb.add(208));
        let isum = _mm256_sub_epi32(isum, corr);
        _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(isum), acc)
    }
}

/// One GEMV per path: `$opaque` whether the k-quant scale splats use [`control_opaque`]
/// (measured faster on AVX-512 only; AVX2 q5_K 6 % slower with it, AVX-VNNI unmeasured), `$dot`
/// the integer dot (acc + Σ of 4 u8·i8 products per lane), `$hi` the q5 fifth bits (qh
/// pointer, nibbles → quants 0..=31).
macro_rules! gemv_fn {
    ($name:ident, $feat:literal, $opaque:literal, $dot:expr, $dotw:expr, $hi:expr) => {
        /// (`R4`: repacked groups, q8_0 only; see [`panel_repacked`].)
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R4: bool>(
            t: Tiled,
            k: usize,
            pn: &Panel,
            y: *const u8,
            accumulate: bool,
        ) {
            let dot = $dot;
            let dotw = $dotw;
            let hi = $hi;
            if R4 && t != Tiled::Q8_0 {
                unreachable!("checked by handles_repacked");
            }
            // SAFETY: forwarded from the caller; features enabled by the attribute.
            unsafe {
                match t {
                    // f16 d, 16 bytes of nibbles; x = d·(q − 8).
                    Tiled::Q4_0 => rows::<18, 34, 8, false, false>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| nibbles(xb.add(2)),
                        dot,
                    ),
                    // f16 d, f16 m, 16 bytes of nibbles; x = d·q + m.
                    Tiled::Q4_1 => rows::<20, 36, 0, true, false>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| nibbles(xb.add(4)),
                        dot,
                    ),
                    // f16 d, 4 bytes qh, 16 bytes of nibbles; x = d·(q − 16).
                    Tiled::Q5_0 => rows::<22, 34, 16, false, false>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| hi(nibbles(xb.add(6)), xb.add(2)),
                        dot,
                    ),
                    // f16 d, f16 m, 4 bytes qh, 16 bytes of nibbles; x = d·q + m.
                    Tiled::Q5_1 => rows::<24, 36, 0, true, false>(
                        k,
                        pn,
                        y,
                        accumulate,
                        |xb: *const u8| hi(nibbles(xb.add(8)), xb.add(4)),
                        dot,
                    ),
                    // f16 d, 32 i8; the sign bit flipped: q + 128.
                    Tiled::Q8_0 => rows::<34, 34, 128, false, R4>(
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
                    Tiled::Q4K => krows::<144>(k, pn, y, accumulate, |_, xb, yb, acc| {
                        q4_k_block::<$opaque>(xb, yb, acc, dotw)
                    }),
                    Tiled::Q5K => krows::<176>(k, pn, y, accumulate, |_, xb, yb, acc| {
                        q5_k_block::<$opaque>(xb, yb, acc, dotw)
                    }),
                    Tiled::Q6K => krows::<210>(k, pn, y, accumulate, |_, xb, yb, acc| {
                        q6_k_block(xb, yb, acc, dotw)
                    }),
                    _ => unreachable!("checked by handles"),
                }
            }
        }
    };
}

gemv_fn!(
    gemv_avx512,
    "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni",
    true,
    |acc, w, y| _mm256_dpbusd_epi32(acc, w, y),
    |acc, a, b| _mm256_dpwssd_epi32(acc, a, b),
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
    false,
    |acc, w, y| _mm256_dpbusd_avx_epi32(acc, w, y),
    |acc, a, b| _mm256_dpwssd_avx_epi32(acc, a, b),
    |nib: __m256i, qh: *const u8| _mm256_or_si256(
        nib,
        _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10))
    )
);
gemv_fn!(
    gemv_avx2,
    "avx2,fma,f16c",
    false,
    // Quants ≤ 31 here (q8_0 takes q8_rows' sign trick): a pair of u8·i8 products
    // fits i16.
    |acc, w, y| _mm256_add_epi32(
        acc,
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1))
    ),
    |acc, a, b| _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)),
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
    let bs = if t.is_k_quant() { 256 } else { 32 };
    if !handles(t) || !isa.supported() || !k.is_multiple_of(bs) {
        return false;
    }
    // SAFETY: the CPU has the path's features (checked); the rest from the caller.
    unsafe {
        match isa {
            Isa::Avx512Vnni if t == Tiled::Q4K => gemv_avx512_q4k(k, pn, y, accumulate),
            Isa::Avx512Vnni if t == Tiled::Q5K => gemv_avx512_q5k(k, pn, y, accumulate),
            Isa::Avx512Vnni => {
                if !gemv_avx512_pairs::<false>(t, k, pn, y, accumulate) {
                    gemv_avx512::<false>(t, k, pn, y, accumulate)
                }
            }
            Isa::AvxVnni => {
                if !gemv_avxvnni_pairs::<false>(t, k, pn, y, accumulate) {
                    gemv_avxvnni::<false>(t, k, pn, y, accumulate)
                }
            }
            Isa::Avx2 if t == Tiled::Q8_0 => q8_rows(k, pn, y, accumulate),
            Isa::Avx2 => {
                if !gemv_avx2_pairs::<false>(t, k, pn, y, accumulate) {
                    gemv_avx2::<false>(t, k, pn, y, accumulate)
                }
            }
        }
    }
    true
}

/// Whether [`panel_repacked`] handles weights `t` with `isa`: the paired GEMV's types on every
/// path (AVX-512 VNNI at full width, AVX-VNNI and plain AVX2 paired), q8_0 on the VNNI paths
/// (plain AVX2's q8_0 is [`q8_rows`]).
pub(crate) fn handles_repacked(isa: Isa, t: Tiled) -> bool {
    match t {
        Tiled::Q4_0 | Tiled::Q4_1 | Tiled::Q5_0 | Tiled::Q5_1 => true,
        Tiled::Q8_0 => matches!(isa, Isa::Avx512Vnni | Isa::AvxVnni),
        _ => false,
    }
}

/// [`panel`] of weights repacked at load (`backend::cpu::repack`): the panel's rows are whole
/// groups of four (`pn.a0` a group's start, `pn.nrows` a multiple of four, `pn.lda` the plain
/// row bytes), each read as one stream. The same results, bit for bit, as [`panel`] of the plain
/// rows with the same `isa`. False (nothing done) where [`handles_repacked`] says no.
///
/// # Safety
/// As [`panel`], with the panel's rows in the repacked layout.
pub(crate) unsafe fn panel_repacked(
    isa: Isa,
    t: Tiled,
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
) -> bool {
    if !handles_repacked(isa, t)
        || !isa.supported()
        || !k.is_multiple_of(32)
        || !pn.nrows.is_multiple_of(PR)
    {
        return false;
    }
    // SAFETY: the CPU has the path's features (checked); the rest from the caller.
    unsafe {
        match (isa, t) {
            (Isa::Avx512Vnni, Tiled::Q8_0) => gemv_avx512::<true>(t, k, pn, y, accumulate),
            (Isa::AvxVnni, Tiled::Q8_0) => gemv_avxvnni::<true>(t, k, pn, y, accumulate),
            (Isa::AvxVnni, _) => return gemv_avxvnni_pairs::<true>(t, k, pn, y, accumulate),
            (Isa::Avx512Vnni, _) => return gemv_avx512_quads(t, k, pn, y, accumulate),
            _ => return gemv_avx2_pairs::<true>(t, k, pn, y, accumulate),
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
    let (t, lda) = gemv_args(dtype, k, m, weights, col)?;
    // SAFETY: gemv_args checked the lengths; the panel covers `weights` and the output.
    with_panel(weights, lda, m, |pn| unsafe {
        panel(isa, t, k, pn, col.as_ptr(), false)
    })
}

/// The tile type and row bytes of `m` rows of `dtype` and one column, when the slices hold
/// exactly that ([`gemv_with`], [`gemv_repacked_with`]).
fn gemv_args(
    dtype: crate::DType,
    k: usize,
    m: usize,
    weights: &[u8],
    col: &[u8],
) -> Option<(Tiled, usize)> {
    let t = Tiled::quantized(dtype)?;
    let lda = dtype.row_size(k).ok()?;
    let ldb = crate::quant::type_traits_scalar(dtype)?
        .vec_dot_type
        .row_size(k)
        .ok()?;
    (weights.len() == lda * m && col.len() == ldb).then_some((t, lda))
}

/// The `m` results of `run` over a panel of `weights` (`m` rows of `lda` bytes), or `None`
/// when it did nothing.
fn with_panel(
    weights: &[u8],
    lda: usize,
    m: usize,
    run: impl FnOnce(&Panel) -> bool,
) -> Option<Vec<f32>> {
    let mut out = vec![0f32; m];
    let pn = Panel {
        a0: weights.as_ptr(),
        lda,
        nrows: m,
        out0: out.as_mut_ptr() as *mut u8,
        ldo: 4 * m,
    };
    run(&pn).then_some(out)
}

/// [`gemv_with`] of the weights repacked (`backend::cpu::repack`; `m` a multiple of four, given
/// plain) through [`panel_repacked`] with `isa`: `None` where that path does not read `dtype`
/// repacked or this CPU lacks it. For tests: bit for bit [`gemv_with`]'s results.
pub fn gemv_repacked_with(
    isa: Isa,
    dtype: crate::DType,
    k: usize,
    m: usize,
    weights: &[u8],
    col: &[u8],
) -> Option<Vec<f32>> {
    let (t, lda) = gemv_args(dtype, k, m, weights, col)?;
    let s = crate::backend::cpu::repack::spec(dtype)?;
    if !m.is_multiple_of(4) {
        return None;
    }
    let mut packed = vec![0u8; weights.len()];
    for (src, dst) in weights
        .chunks_exact(4 * lda)
        .zip(packed.chunks_exact_mut(4 * lda))
    {
        crate::backend::cpu::repack::pack_group(s, s.blocks(k), src, dst);
    }
    // SAFETY: gemv_args checked the lengths; the panel's rows are whole groups.
    with_panel(&packed, lda, m, |pn| unsafe {
        panel_repacked(isa, t, k, pn, col.as_ptr(), false)
    })
}
