//! wasm32 n = 1 mul_mat (GEMV) of the 32-element quants (q4_0, q5_0, q8_0 against a q8_0
//! column; q4_1, q5_1 against a q8_1 column): four weight rows per pass, f32 lane r = row r.
//!
//! The register tiles (`tiles.rs`) keep an f32x4 accumulator per row and column, each lane a
//! partial sum of a block, so every row × block costs a conversion, two multiplies and an add
//! and every row a horizontal sum at the end; the relaxed build also permutes its operands so
//! that those partial lanes match the SIMD128 build's. Here a block's integer dot is summed
//! whole (exact) for four rows at once by a transpose of their lane sums, so one conversion,
//! two multiplies and one add serve four rows, no permutation is needed, and the column's block
//! scales (and the relaxed build's offset sums Σ off·y) are read once per panel.
//!
//! Every lane's arithmetic depends on its own row only (a remainder row runs in a pass with its
//! pointer repeated), so a row's result is the same whichever pass, chunk or thread computes it;
//! the relaxed and SIMD128 builds sum the same exact integers and then run the scalar
//! reference's f32 operations in its order (`quant/legacy.rs` `vec_dot`: per block, the integer
//! sum times the two scales, added to the row's sum), so their results are bit for bit equal to
//! each other and to the scalar build's.

use core::arch::wasm32::*;

use super::kgemv;
#[cfg(not(target_feature = "relaxed-simd"))]
use super::tiles::{decode_q4_0, decode_q4_1, decode_q5_0, decode_q5_1};
use super::tiles::{decode_q8_0, dot32, ext_i8x32, f16_at, load16};
use crate::backend::cpu::arch::{Panel, Tiled};

/// Most column blocks per GEMV (k ≤ 16384): their facts live on the stack. Longer rows keep the
/// register tiles.
const MAX_BLOCKS: usize = 512;

/// All rows of `pn` against the one converted column `b` (k elements of the vec_dot type), for
/// the types above and the k-quants (`kgemv.rs`); false (nothing done) for any other type or k.
///
/// # Safety
/// The panel's rows hold k elements of `t`, `b` k elements of its vec_dot type; the panel's
/// results are inside dst and written by this thread only.
pub(crate) unsafe fn gemv(t: Tiled, k: usize, pn: &Panel, b: *const u8, accumulate: bool) -> bool {
    if t.is_k_quant() {
        if !k.is_multiple_of(256) {
            return false;
        }
        let nb = k / 256;
        // SAFETY: forwarded from the caller.
        unsafe {
            match t {
                Tiled::Q4K => kgemv::gemv_q4_k(nb, pn, b, accumulate),
                Tiled::Q5K => kgemv::gemv_q5_k(nb, pn, b, accumulate),
                _ => kgemv::gemv_q6_k(nb, pn, b, accumulate),
            }
        }
        return true;
    }
    let nb = k / 32;
    if !k.is_multiple_of(32) || nb > MAX_BLOCKS {
        return false;
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        match t {
            Tiled::Q4_0 => gemv_q4_0(nb, pn, b, accumulate),
            Tiled::Q5_0 => gemv_q5_0(nb, pn, b, accumulate),
            Tiled::Q8_0 => gemv_q8_0(nb, pn, b, accumulate),
            Tiled::Q4_1 => gemv_q4_1(nb, pn, b, accumulate),
            Tiled::Q5_1 => gemv_q5_1(nb, pn, b, accumulate),
            _ => return false,
        }
    }
    true
}

/// Four i32x4 of partial sums → lane r = the sum of `p[r]`'s lanes (exact).
#[inline(always)]
pub(super) fn reduce4(p: [v128; 4]) -> v128 {
    let t0 = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(p[0], p[1]),
        i32x4_shuffle::<2, 6, 3, 7>(p[0], p[1]),
    );
    let t1 = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(p[2], p[3]),
        i32x4_shuffle::<2, 6, 3, 7>(p[2], p[3]),
    );
    i32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(t0, t1),
        i32x4_shuffle::<2, 3, 6, 7>(t0, t1),
    )
}

/// The f16 scales at `p[r] + at` of the four rows as f32x4: exact for finite values, ±inf for
/// infinities, NaN for NaNs (the payload's quiet bit is not forced).
///
/// # Safety
/// Each `p[r] + at .. + 2` must be readable.
#[inline(always)]
pub(super) unsafe fn scales4(p: [*const u8; 4], at: usize) -> v128 {
    // SAFETY: caller; 2 bytes each.
    let h = unsafe {
        let v = v128_load16_lane::<0>(i16x8_splat(0), p[0].add(at) as *const u16);
        let v = v128_load16_lane::<1>(v, p[1].add(at) as *const u16);
        let v = v128_load16_lane::<2>(v, p[2].add(at) as *const u16);
        v128_load16_lane::<3>(v, p[3].add(at) as *const u16)
    };
    let h = u32x4_extend_low_u16x8(h);
    let m = v128_and(h, u32x4_splat(0x7fff));
    // m << 13 in f32 position times 2^112: exact for normals and subnormals.
    let v = f32x4_mul(i32x4_shl(m, 13), f32x4_splat(f32::from_bits(0x7780_0000)));
    // Exponent 31 (then v ≥ 2^16) becomes 255 with the mantissa kept: inf or NaN.
    let inf = v128_and(i32x4_ge(m, i32x4_splat(0x7c00)), u32x4_splat(0x7f80_0000));
    let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    v128_or(v128_or(v, inf), sign)
}

/// Passes ahead whose weight bytes a pass touches (one byte per 64, as it goes): wasm has no
/// prefetch, and a GEMV over weights that come from DRAM otherwise waits on every new page
/// (hardware prefetchers stop at 4 KiB pages). Measured: Qwen2.5-0.5B generation in Node ~2×;
/// 1 pass ahead the same, 4 passes 15 % slower.
/// The k-quant GEMV (one row per register tile) touching the row two ahead before each row
/// measured 15 % slower: a burst of loads, not spread over the work; two rows per k-quant tile
/// (the column decoded once per two rows) 5 % slower.
pub(super) const PF_PASSES: usize = 2;

/// Per column block: f32 scale, and the f16 s of a q8_1 block or the relaxed build's
/// off · Σ y (i32 bits).
type Facts = [[u32; 2]; MAX_BLOCKS];

/// The facts of the nb blocks of column `b` (block bytes `ys`, quants at `qat`) into `f[..nb]`.
///
/// # Safety
/// `b` addresses nb blocks of `ys` bytes; `f` has room for nb ≤ MAX_BLOCKS entries.
#[inline(always)]
unsafe fn column_facts(
    f: *mut [u32; 2],
    nb: usize,
    b: *const u8,
    ys: usize,
    qat: usize,
    min: bool,
    off: i32,
) {
    for blk in 0..nb {
        // SAFETY: blk < nb, inside the column and `f`.
        unsafe {
            let yb = b.add(blk * ys);
            let mut fb = [f16_at(yb).to_bits(), 0];
            if min {
                fb[1] = f16_at(yb.add(2)).to_bits();
            } else if off != 0 {
                let (q0, q1) = (load16(yb.add(qat)), load16(yb.add(qat + 16)));
                let s16 = i16x8_add(
                    i16x8_extadd_pairwise_i8x16(q0),
                    i16x8_extadd_pairwise_i8x16(q1),
                );
                let s = i32x4_extadd_pairwise_i16x8(s16);
                let s = i32x4_add(s, i32x4_shuffle::<2, 3, 0, 1>(s, s));
                let s = i32x4_extract_lane::<0>(s) + i32x4_extract_lane::<1>(s);
                fb[1] = (off * s) as u32;
            }
            f.add(blk).write(fb);
        }
    }
}

/// Every row of `pn` in passes of four: `sums(rows, yb)` gives the four rows' exact integer dots
/// of one block as i32x4 (the relaxed build's offset types before their `off · Σ y`).
///
/// # Safety
/// As [`gemv`]; `sums` reads one block of each row and of the column.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run(
    nb: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
    (xs, ys, qat): (usize, usize, usize),
    (min, sumi_dx): (bool, bool),
    off: i32,
    sums: impl Fn([*const u8; 4], *const u8) -> v128,
) {
    // Written for blocks 0..nb below, read only there (no 4 KB memset per panel).
    let mut facts = core::mem::MaybeUninit::<Facts>::uninit();
    let fp = facts.as_mut_ptr() as *mut [u32; 2];
    // SAFETY: caller; nb ≤ MAX_BLOCKS (checked by `gemv`).
    unsafe { column_facts(fp, nb, b, ys, qat, min, off) };
    let n = pn.nrows;
    // The last row's last byte + 1: what the touches stay below.
    let end = (n.max(1) - 1) * pn.lda + nb * xs;
    let mut i = 0;
    while i < n {
        let rows: [*const u8; 4] =
            // SAFETY: row min(i + r, n − 1) is inside the panel.
            core::array::from_fn(|r| unsafe { pn.a0.add((i + r).min(n - 1) * pn.lda) });
        let mut acc = f32x4_splat(0.0);
        // The bytes of the pass PF_PASSES ahead, 4·xs of them per block (see PF_PASSES).
        // Saturating: past the last row (a panel of a few rows may have any row stride) the
        // touch is skipped anyway.
        let ahead = (i + 4 * PF_PASSES).saturating_mul(pn.lda);
        for blk in 0..nb {
            let t = ahead.saturating_add(blk * 4 * xs);
            if t.saturating_add(64) < end {
                // SAFETY: inside the panel's rows (before the last row's end).
                unsafe {
                    core::ptr::read_volatile(pn.a0.add(t));
                    core::ptr::read_volatile(pn.a0.add(t + 64));
                }
            }
            // SAFETY: blk < nb: one block of every row and of the column; facts[blk] is set.
            unsafe {
                let fb = *fp.add(blk);
                let xb = rows.map(|p| p.add(blk * xs));
                let mut s = sums(xb, b.add(blk * ys));
                if off != 0 {
                    s = i32x4_sub(s, i32x4_splat(fb[1] as i32));
                }
                // The scalar reference's operations in its order (quant/legacy.rs): q4_0
                // (sumi·dx)·dy, the others (dx·dy)·sumi, plus m·s for those with a min.
                let (sf, dx) = (f32x4_convert_i32x4(s), scales4(xb, 0));
                let dy = f32x4_splat(f32::from_bits(fb[0]));
                let mut t = if sumi_dx {
                    f32x4_mul(f32x4_mul(sf, dx), dy)
                } else {
                    f32x4_mul(f32x4_mul(dx, dy), sf)
                };
                if min {
                    let sy = f32x4_splat(f32::from_bits(fb[1]));
                    t = f32x4_add(t, f32x4_mul(scales4(xb, 2), sy));
                }
                acc = f32x4_add(acc, t);
            }
        }
        let mut o = [0f32; 4];
        // SAFETY: 16 bytes.
        unsafe { v128_store(o.as_mut_ptr() as *mut v128, acc) };
        for (r, v) in o.iter().enumerate().take((n - i).min(4)) {
            // SAFETY: row i + r < n of the panel's single column.
            unsafe {
                let p = pn.out0.add((i + r) * 4) as *mut f32;
                if accumulate {
                    *p += *v
                } else {
                    *p = *v
                }
            }
        }
        i += 4;
    }
}

/// q8_0 rows: i16 dots in both builds (|x| may be 128, no i7 operand). The relaxed dot with
/// the column's |y| as the i7 operand and its sign moved onto the weights (w ^ m, plus
/// Σ |y|·[y < 0] per block) measured 5-10 % slower in Node 20: as many multiplies (two relaxed
/// dots and two widening pmaddwd per block, the i16 halves may not be added in i16).
///
/// # Safety
/// As [`gemv`].
#[inline(never)]
unsafe fn gemv_q8_0(nb: usize, pn: &Panel, b: *const u8, accumulate: bool) {
    // SAFETY: forwarded; each closure call reads one 34-byte block per row and of the column.
    unsafe {
        run(
            nb,
            pn,
            b,
            accumulate,
            (34, 34, 2),
            (false, false),
            0,
            |xb, yb| {
                let qy = ext_i8x32(yb.add(2));
                reduce4(xb.map(|x| dot32(&decode_q8_0(x), &qy)))
            },
        )
    }
}

#[cfg(not(target_feature = "relaxed-simd"))]
macro_rules! simd_gemv {
    ($name:ident, $xs:expr, $ys:expr, $order:expr, $decode:ident) => {
        /// # Safety
        /// As [`gemv`].
        #[inline(never)]
        unsafe fn $name(nb: usize, pn: &Panel, b: *const u8, accumulate: bool) {
            let qat = $ys - 32;
            // SAFETY: forwarded; each closure call reads one block per row and of the column.
            unsafe {
                run(
                    nb,
                    pn,
                    b,
                    accumulate,
                    ($xs, $ys, qat),
                    $order,
                    0,
                    |xb, yb| {
                        let qy = ext_i8x32(yb.add(qat));
                        reduce4(xb.map(|x| dot32(&$decode(x), &qy)))
                    },
                )
            }
        }
    };
}

#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(gemv_q4_0, 18, 34, (false, true), decode_q4_0);
#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(gemv_q5_0, 22, 34, (false, false), decode_q5_0);
#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(gemv_q4_1, 20, 36, (true, false), decode_q4_1);
#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(gemv_q5_1, 24, 36, (true, false), decode_q5_1);

#[cfg(target_feature = "relaxed-simd")]
use relaxed::{gemv_q4_0, gemv_q4_1, gemv_q5_0, gemv_q5_1};

/// The relaxed build's 4/5-bit rows: the unsigned quants u (0..15 or 0..31) are the i7 operand
/// of `i16x8.relaxed_dot_i8x16_i7x16_s` (exact for every engine), the column's i8 quants the
/// other; Σ (u − off)·y = Σ u·y − off·Σ y with off·Σ y once per column block ([`column_facts`]).
#[cfg(target_feature = "relaxed-simd")]
mod relaxed {
    use super::*;

    /// The constants of the decoders, read from memory once per call: V8 rebuilds a
    /// `v128.const` with several instructions at every use.
    #[repr(C, align(16))]
    struct Consts([[u8; 16]; 5]);

    static CONSTS: Consts = Consts([
        [0x0F; 16],
        // Byte k/8 of the high bits into lane k, for elements 0..16 and 16..32.
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
        [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3],
        // Bit k % 8.
        [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128],
        [0x10; 16],
    ]);

    #[derive(Clone, Copy)]
    struct K {
        m0f: v128,
        idx_lo: v128,
        idx_hi: v128,
        bits: v128,
        x10: v128,
    }

    #[inline(always)]
    fn consts() -> K {
        // SAFETY: a 16-aligned static of five v128; volatile so that LLVM keeps loads, not
        // constants it would rematerialize in the loop.
        let l = |i: usize| unsafe {
            core::ptr::read_volatile((&CONSTS as *const Consts as *const v128).add(i))
        };
        K {
            m0f: l(0),
            idx_lo: l(1),
            idx_hi: l(2),
            bits: l(3),
            x10: l(4),
        }
    }

    /// Quants 0..16 and 16..32 (0..15) from 16 bytes of nibbles at `p`.
    ///
    /// # Safety
    /// 16 bytes at `p` must be readable.
    #[inline(always)]
    unsafe fn u4(p: *const u8, k: &K) -> [v128; 2] {
        // SAFETY: caller.
        let v = unsafe { load16(p) };
        [v128_and(v, k.m0f), v128_and(u16x8_shr(v, 4), k.m0f)]
    }

    /// Quants 0..32 (0..31) from 4 bytes of high bits at `qh` and 16 bytes of nibbles at `qs`.
    ///
    /// # Safety
    /// Both must be readable.
    #[inline(always)]
    unsafe fn u5(qh: *const u8, qs: *const u8, k: &K) -> [v128; 2] {
        // SAFETY: caller.
        let (h, [lo, hi]) = unsafe { (v128_load32_splat(qh as *const u32), u4(qs, k)) };
        // 0x10 where element k's high bit is set: (byte k/8 & bit k%8) == bit, masked to 0x10.
        let high = |idx: v128| {
            let sel = v128_and(i8x16_relaxed_swizzle(h, idx), k.bits);
            v128_and(i8x16_eq(sel, k.bits), k.x10)
        };
        [v128_or(lo, high(k.idx_lo)), v128_or(hi, high(k.idx_hi))]
    }

    /// Pair sums Σ u·y over both halves of a block as i16x8: |lane| ≤ 4·31·128 = 15872.
    #[inline(always)]
    fn dot16(y: [v128; 2], u: [v128; 2]) -> v128 {
        i16x8_add(
            i16x8_relaxed_dot_i8x16_i7x16(y[0], u[0]),
            i16x8_relaxed_dot_i8x16_i7x16(y[1], u[1]),
        )
    }

    /// [`reduce4`] of four rows' i16 pair sums: two lanes of one row are added in i16 first
    /// (≤ 31744), then widened.
    #[inline(always)]
    fn reduce4_i16(p: [v128; 4]) -> v128 {
        let t0 = i32x4_extadd_pairwise_i16x8(i16x8_add(
            i32x4_shuffle::<0, 4, 1, 5>(p[0], p[1]),
            i32x4_shuffle::<2, 6, 3, 7>(p[0], p[1]),
        ));
        let t1 = i32x4_extadd_pairwise_i16x8(i16x8_add(
            i32x4_shuffle::<0, 4, 1, 5>(p[2], p[3]),
            i32x4_shuffle::<2, 6, 3, 7>(p[2], p[3]),
        ));
        i32x4_add(
            i32x4_shuffle::<0, 1, 4, 5>(t0, t1),
            i32x4_shuffle::<2, 3, 6, 7>(t0, t1),
        )
    }

    macro_rules! relaxed_gemv {
        ($name:ident, $xs:expr, $ys:expr, $order:expr, $off:expr, |$x:ident, $k:ident| $decode:expr) => {
            /// # Safety
            /// As [`gemv`].
            #[inline(never)]
            pub(super) unsafe fn $name(nb: usize, pn: &Panel, b: *const u8, accumulate: bool) {
                let qat = $ys - 32;
                let consts = consts();
                // SAFETY: forwarded; each closure call reads one block per row and of the column.
                unsafe {
                    run(
                        nb,
                        pn,
                        b,
                        accumulate,
                        ($xs, $ys, qat),
                        $order,
                        $off,
                        |xb, yb| {
                            let y = [load16(yb.add(qat)), load16(yb.add(qat + 16))];
                            let $k = &consts;
                            reduce4_i16(xb.map(|$x| dot16(y, $decode)))
                        },
                    )
                }
            }
        };
    }

    relaxed_gemv!(gemv_q4_0, 18, 34, (false, true), 8, |x, k| u4(x.add(2), k));
    relaxed_gemv!(gemv_q5_0, 22, 34, (false, false), 16, |x, k| u5(
        x.add(2),
        x.add(6),
        k
    ));
    relaxed_gemv!(gemv_q4_1, 20, 36, (true, false), 0, |x, k| u4(x.add(4), k));
    relaxed_gemv!(gemv_q5_1, 24, 36, (true, false), 0, |x, k| u5(
        x.add(4),
        x.add(8),
        k
    ));
}
