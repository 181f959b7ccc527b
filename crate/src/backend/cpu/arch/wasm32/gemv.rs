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

use super::{u32x4_bytes, v128s, V128s};

use super::kgemv;
use super::kgemv::store_rows;
#[cfg(not(target_feature = "relaxed-simd"))]
use super::tiles::{decode_q4_0, decode_q4_1, decode_q5_0, decode_q5_1};
use super::tiles::{decode_q8_0, dot32, ext_i8x32, f16_at, load16};
use crate::backend::cpu::arch::{Panel, Tiled};

/// Most column blocks per GEMV (k ≤ 16384): their facts live on the stack. Longer rows keep the
/// register tiles.
const MAX_BLOCKS: usize = crate::backend::cpu::repack::MAX_BLOCKS;

/// All rows of `pn` against the one converted column `b` (k elements of the vec_dot type), for
/// the types above and the k-quants (`kgemv.rs`); false (nothing done) for any other type or k.
///
/// # Safety
/// The panel's rows hold k elements of `t`, `b` k elements of its vec_dot type; the panel's
/// results are inside dst and written by this thread only.
pub(crate) unsafe fn gemv(t: Tiled, k: usize, pn: &Panel, b: *const u8, accumulate: bool) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { dispatch::<false>(t, k, pn, b, accumulate) }
}

/// [`gemv`] of weights repacked at load (`backend::cpu::repack`): the panel's rows are whole
/// groups of four (`pn.a0` a group's start, `pn.nrows` a multiple of four, `pn.lda` the plain
/// row bytes). The same results, bit for bit, as [`gemv`] of the plain rows. False (nothing
/// done) for a type or k it does not handle.
///
/// # Safety
/// As [`gemv`], with the panel's rows in the repacked layout.
pub(crate) unsafe fn gemv_repacked(
    t: Tiled,
    k: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
) -> bool {
    // SAFETY: forwarded from the caller.
    pn.nrows.is_multiple_of(4) && unsafe { dispatch::<true>(t, k, pn, b, accumulate) }
}

/// [`gemv`] (`R4`: [`gemv_repacked`]) by type.
///
/// # Safety
/// As those.
unsafe fn dispatch<const R4: bool>(
    t: Tiled,
    k: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
) -> bool {
    if t.is_k_quant() {
        if !k.is_multiple_of(256) {
            return false;
        }
        let nb = k / 256;
        // The relaxed build repacks the k-quants chunked (`repack.rs`).
        #[cfg(target_feature = "relaxed-simd")]
        if R4 {
            if nb > kgemv::chunked::MAX_SB {
                return false;
            }
            use kgemv::chunked::{gemv_q4_k, gemv_q5_k, gemv_q6_k};
            // SAFETY: forwarded from the caller; nb ≤ MAX_SB.
            unsafe {
                match (t, super::split_dots()) {
                    (Tiled::Q4K, false) => gemv_q4_k::<false>(nb, pn, b, accumulate),
                    (Tiled::Q4K, true) => gemv_q4_k::<true>(nb, pn, b, accumulate),
                    (Tiled::Q5K, false) => gemv_q5_k::<false>(nb, pn, b, accumulate),
                    (Tiled::Q5K, true) => gemv_q5_k::<true>(nb, pn, b, accumulate),
                    (_, false) => gemv_q6_k::<false>(nb, pn, b, accumulate),
                    (_, true) => gemv_q6_k::<true>(nb, pn, b, accumulate),
                }
            }
            return true;
        }
        // SAFETY: forwarded from the caller.
        unsafe {
            match t {
                Tiled::Q4K => kgemv::gemv_q4_k::<R4>(nb, pn, b, accumulate),
                Tiled::Q5K => kgemv::gemv_q5_k::<R4>(nb, pn, b, accumulate),
                _ => kgemv::gemv_q6_k::<R4>(nb, pn, b, accumulate),
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
            Tiled::Q4_0 => gemv_q4_0::<R4>(nb, pn, b, accumulate),
            Tiled::Q5_0 => gemv_q5_0::<R4>(nb, pn, b, accumulate),
            Tiled::Q8_0 => gemv_q8_0::<R4>(nb, pn, b, accumulate),
            Tiled::Q4_1 => gemv_q4_1::<R4>(nb, pn, b, accumulate),
            Tiled::Q5_1 => gemv_q5_1::<R4>(nb, pn, b, accumulate),
            _ => return false,
        }
    }
    true
}

/// `[f(0), f(1), f(2), f(3)]` written out: a pass's four rows as straight-line code. Over
/// `[_; 4]::map` (a loop) LLVM either unrolled the rows or kept the loop, its results through a
/// stack array, depending on unrelated code elsewhere in the crate: the SIMD128 build's GEMVs
/// below ran 1.1–1.9× apart by that alone (Node 24, AMD Zen 3; written out is the faster).
#[inline(always)]
pub(super) fn each4<T>(mut f: impl FnMut(usize) -> T) -> [T; 4] {
    [f(0), f(1), f(2), f(3)]
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

/// The constants of the f16 conversions ([`super::v128s`]; 195 rebuilds in the attention's K
/// conversion and 3–6 a block in the GEMV's without it, seen in V8 14's code).
#[derive(Clone, Copy)]
pub(super) struct F16Consts {
    exp: v128,
    bits: v128,
    rebias: v128,
    inf: v128,
}

static F16_CONSTS: V128s<4> = V128s([
    u32x4_bytes(0x7c00),
    u32x4_bytes(0x8fff_e000),
    u32x4_bytes(0x7780_0000),
    u32x4_bytes(0x3800_0000),
]);

#[inline(always)]
pub(super) fn f16_consts() -> F16Consts {
    let [exp, bits, rebias, inf] = v128s(&F16_CONSTS);
    F16Consts {
        exp,
        bits,
        rebias,
        inf,
    }
}

/// f16 bits in i16 lanes 0..4 of `h` → f32x4, exact for every value: ±0, subnormals, normals,
/// ±inf, NaN (payload kept). Branch-free: V8 spills every live vector around a branch or a
/// call in the block loop.
#[inline(always)]
fn f16x4_to_f32(h: v128, k: &F16Consts) -> v128 {
    f16x4_exact(i32x4_extend_low_i16x8(h), k)
}

/// f16 bits in i16 lanes 0..8 → f32x4 of lanes 0..4 and 4..8, exact as [`f16x4_to_f32`].
#[inline(always)]
pub(super) fn f16x8_to_f32(h: v128, k: &F16Consts) -> [v128; 2] {
    [
        f16x4_exact(i32x4_extend_low_i16x8(h), k),
        f16x4_exact(i32x4_extend_high_i16x8(h), k),
    ]
}

/// f16 bits in i16 lanes 0..8 → f32x4 of lanes 0..4 and 4..8, exact for every finite value
/// (±0, subnormals, normals) but not for inf and NaN: four operations per four values, not
/// [`f16x8_to_f32`]'s eight, for callers that have checked their values (the attention).
#[inline(always)]
pub(super) fn f16x8_finite(h: v128, k: &F16Consts) -> [v128; 2] {
    [
        f32x4_mul(f16x4_unbiased(i32x4_extend_low_i16x8(h), k), k.rebias),
        f32x4_mul(f16x4_unbiased(i32x4_extend_high_i16x8(h), k), k.rebias),
    ]
}

/// f16 values sign-extended to i32 lanes. `<< 13` puts the exponent and mantissa at f32's
/// positions and a copy of the sign at bit 31 (bits 28..31 all hold it; 28..30 are masked off):
/// × 2^112 rebiases the exponent, exactly for normals and subnormals. An exponent-31 lane (inf,
/// NaN) comes out as ±2^16·1.m, f32 exponent 143 (0x47800000): setting bits 0x38000000 makes it
/// 255 with the mantissa kept. (The exponent test is on the i32 lanes: widening an i16 mask
/// made LLVM move each lane through a general register.)
#[inline(always)]
pub(super) fn f16x4_exact(s: v128, k: &F16Consts) -> v128 {
    let special = i32x4_eq(v128_and(s, k.exp), k.exp);
    let bits = v128_and(i32x4_shl(s, 13), k.bits);
    let v = f32x4_mul(bits, k.rebias);
    v128_or(v, v128_and(special, k.inf))
}

/// The f16 scales at `p[r] + at` of the four rows as f32x4 (exact, see [`f16x4_to_f32`]).
///
/// # Safety
/// Each `p[r] + at .. + 2` must be readable.
#[inline(always)]
pub(super) unsafe fn scales4(p: [*const u8; 4], at: usize, k: &F16Consts) -> v128 {
    // SAFETY: caller; 2 bytes each.
    let h = unsafe {
        let v = v128_load16_lane::<0>(i16x8_splat(0), p[0].add(at) as *const u16);
        let v = v128_load16_lane::<1>(v, p[1].add(at) as *const u16);
        let v = v128_load16_lane::<2>(v, p[2].add(at) as *const u16);
        v128_load16_lane::<3>(v, p[3].add(at) as *const u16)
    };
    f16x4_to_f32(h, k)
}

/// The two adjacent f16 scales at `p[r] + at` and `+ 2` of the four rows (q4_1's d and m, q4_K's
/// d and dmin) as two f32x4: four 4-byte loads instead of eight 2-byte ones.
///
/// # Safety
/// Each `p[r] + at .. + 4` must be readable.
#[inline(always)]
pub(super) unsafe fn scale_pairs4(p: [*const u8; 4], at: usize, k: &F16Consts) -> (v128, v128) {
    // SAFETY: caller; 4 bytes each.
    let h = unsafe {
        let v = v128_load32_lane::<0>(i32x4_splat(0), p[0].add(at) as *const u32);
        let v = v128_load32_lane::<1>(v, p[1].add(at) as *const u32);
        let v = v128_load32_lane::<2>(v, p[2].add(at) as *const u32);
        v128_load32_lane::<3>(v, p[3].add(at) as *const u32)
    };
    // [d0 m0 d1 m1], [d2 m2 d3 m3] → [d0 d1 d2 d3], [m0 m1 m2 m3].
    let [lo, hi] = f16x8_to_f32(h, k);
    (
        i32x4_shuffle::<0, 2, 4, 6>(lo, hi),
        i32x4_shuffle::<1, 3, 5, 7>(lo, hi),
    )
}

/// 2^112: an f16's bits moved to f32's positions are its value times 2^-112.
const F16_REBIAS: f32 = f32::from_bits(0x7780_0000);

/// f16 values sign-extended to i32 lanes → f32 values times 2^-112 (the bits moved, no
/// rebias): exact for every finite value, subnormal f16 as f32 denormals (repacked weights have
/// finite scales only; the column carries the 2^112, see [`run`]).
#[inline(always)]
pub(super) fn f16x4_unbiased(s: v128, k: &F16Consts) -> v128 {
    v128_and(i32x4_shl(s, 13), k.bits)
}

/// A repacked group block's scales (`repack.rs`): d of its four rows, and m when `min`, as
/// f32x4 times 2^-112 ([`f16x4_unbiased`]; m zero otherwise); one load.
///
/// # Safety
/// 8 bytes (16 when `min`) at `g` must be readable.
#[inline(always)]
unsafe fn group_scales(g: *const u8, min: bool, k: &F16Consts) -> (v128, v128) {
    if min {
        // SAFETY: caller, 16 bytes.
        let h = unsafe { load16(g) };
        (
            f16x4_unbiased(i32x4_extend_low_i16x8(h), k),
            f16x4_unbiased(i32x4_extend_high_i16x8(h), k),
        )
    } else {
        // SAFETY: caller, 8 bytes.
        let h = unsafe { v128_load64_zero(g as *const u64) };
        (
            f16x4_unbiased(i32x4_extend_low_i16x8(h), k),
            f32x4_splat(0.0),
        )
    }
}

/// A group block of the SIMD128 build's repacked layout (`repack.rs`, not chunked: the four
/// rows' scales, for q5_* their fifth bits, then each row's nibbles, or q8_0's quants, whole):
/// xb[r], where row r's plain block would start, so that the plain decoders' quant offsets
/// apply, and where the fifth bits are (q5_* only).
///
/// # Safety
/// `g` addresses a group block of `xs`-byte blocks (`min`: with d and m).
#[inline(always)]
unsafe fn group_rows(g: *const u8, xs: usize, min: bool) -> ([*const u8; 4], *const u8) {
    let f = if min { 2 } else { 1 };
    let hb = if xs - 2 * f == 20 { 1 } else { 0 };
    let body = xs - 2 * f - 4 * hb;
    // SAFETY: caller; x0 = g + 6f + 12hb, and the rows' bytes from it lie in the group block.
    unsafe {
        let x0 = g.add(8 * f + 16 * hb - (2 * f + 4 * hb));
        let xb = [x0, x0.add(body), x0.add(2 * body), x0.add(3 * body)];
        (xb, g.add(8 * f))
    }
}

/// The fifth bits (as 0x10) of row p / 2, elements 16·(p % 2)..+16 of a repacked q5 group
/// block, from its 16 bytes of them `hv` (`repack.rs`: bit p of byte j): shifted to bit 4 within
/// i16 lanes, whose spill into the neighbour byte stays out of bit 4 for p ≤ 7.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) fn hbit(hv: v128, p: u32, x10: v128) -> v128 {
    let s = match p.cmp(&4) {
        core::cmp::Ordering::Less => i16x8_shl(hv, 4 - p),
        core::cmp::Ordering::Greater => u16x8_shr(hv, p - 4),
        core::cmp::Ordering::Equal => hv,
    };
    v128_and(s, x10)
}

/// Passes ahead whose weight bytes a pass touches (one byte per 64, as it goes): wasm has no
/// prefetch, and a GEMV over weights that come from DRAM otherwise waits on every new page
/// (hardware prefetchers stop at 4 KiB pages). Measured: Qwen2.5-0.5B generation in Node ~2×;
/// 1 pass ahead the same, 4 passes 15 % slower.
/// The k-quant GEMV (one row per register tile) touching the row two ahead before each row
/// measured 15 % slower: a burst of loads, not spread over the work; two rows per k-quant tile
/// (the column decoded once per two rows) 5 % slower.
pub(super) const PF_PASSES: usize = 2;

/// How far ahead of the repacked stream's work the GEMVs touch the start of each 4 KiB page
/// (a load of one byte): the hardware prefetcher follows a stream within a page and starts over
/// at each new one, so the touch starts it early, while the one load that may miss comes once a
/// page. Touching every line instead (4–16 KiB ahead) measured 0.68–0.83× (session 23); one byte
/// a page 8 KiB ahead, on an Intel Emerald Rapids in Node 26: the GEMVs from DRAM 1.06–1.23×,
/// from cache 0.97–1.0×; Chromium 1-thread generation 1.10× SmolLM2, 1.11× Qwen2.5 (session 26;
/// 4 and 12–16 KiB ahead a little less). On an AMD Zen 3 they only stall: chosen per machine
/// ([`PAGE_TOUCH`]).
pub(super) const PAGE_AHEAD: usize = 8192;

/// Whether the repacked GEMVs touch pages ahead ([`touch_page_ahead`]): 0 not chosen (they
/// do), 1 chosen on, 2 chosen off. The touch is a load that must complete before the code after
/// it retires, so where the hardware prefetchers already cross pages it only stalls: on an AMD
/// EPYC Zen 3 (V8 13.6) the GEMVs streamed 1.25–1.30× faster from DRAM without it (q4_1, q5_0,
/// q8_0, q4_K, q6_K), Chromium's generation 1.3–1.5×, where on an Intel Emerald Rapids it had
/// measured 1.06–1.23×. Neither the engine nor the page can tell the CPUs apart, so the npm
/// package times both at a model's load (`llm.ts`) and sets the faster here.
static PAGE_TOUCH: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// The page-touch choice ([`PAGE_TOUCH`]): `None` not made (the GEMVs touch).
pub(crate) fn page_touch() -> Option<bool> {
    match PAGE_TOUCH.load(core::sync::atomic::Ordering::Relaxed) {
        1 => Some(true),
        2 => Some(false),
        _ => None,
    }
}

/// Make the page-touch choice (`None`: back to not made). It changes speed, never a result.
pub(crate) fn set_page_touch(on: Option<bool>) {
    let m = match on {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    PAGE_TOUCH.store(m, core::sync::atomic::Ordering::Relaxed);
}

/// Before the work on `bytes` bytes at `p` of a repacked stream that ends at `end`: touches the
/// page starts that the span PAGE_AHEAD ahead of them crosses, if any ([`PAGE_AHEAD`]; kept
/// stateless: a page cursor carried across a block loop measured slower, V8 keeping fewer of
/// the kernel's values in registers), unless chosen off ([`PAGE_TOUCH`]).
///
/// # Safety
/// Every byte from `p` to `end` must be readable.
#[inline(always)]
pub(super) unsafe fn touch_page_ahead(p: *const u8, bytes: usize, end: usize) {
    if PAGE_TOUCH.load(core::sync::atomic::Ordering::Relaxed) == 2 {
        return;
    }
    let t = p as usize + PAGE_AHEAD;
    let mut page = (t & !4095) + 4096;
    while page <= t + bytes && page < end {
        // SAFETY: p < page < end: a readable byte (the caller).
        unsafe { core::ptr::read_volatile(page as *const u8) };
        page += 4096;
    }
}

/// A column block as the pass loop reads it: its f32 scale d and second fact f in every lane (a
/// q8_1 block's s, or the relaxed build's off · Σ y as i32), then its 32 quants. One aligned
/// pointer serves all of them, and the splats are loaded, not rebuilt, in the loop: V8 keeps
/// few values in registers there and spills the rest on every block.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct ColBlock {
    d: v128,
    f: v128,
    q: [u8; 32],
    /// The relaxed build's q8_0 over chunked groups: q holds |y|, `m` the masks y < 0 (and f
    /// Σ y over y < 0), see `relaxed::gemv_q8_0`.
    #[cfg(target_feature = "relaxed-simd")]
    m: [u8; 32],
}

/// The nb blocks of column `b` (block bytes `ys`, quants at `qat`) into `c[..nb]`, its f16
/// facts (d, and s for q8_1) times `pre` (1 or 2^112, exact either way).
///
/// # Safety
/// `b` addresses nb blocks of `ys` bytes; `c` has room for nb ≤ MAX_BLOCKS entries.
#[inline(always)]
unsafe fn column_blocks(
    c: *mut ColBlock,
    nb: usize,
    b: *const u8,
    ys: usize,
    qat: usize,
    (min, off, signs): (bool, i32, bool),
    pre: f32,
) {
    for blk in 0..nb {
        // SAFETY: blk < nb, inside the column and `c`.
        unsafe {
            let yb = b.add(blk * ys);
            let (q0, q1) = (load16(yb.add(qat)), load16(yb.add(qat + 16)));
            #[cfg(target_feature = "relaxed-simd")]
            if signs {
                let zero = i8x16_splat(0);
                let (m0, m1) = (i8x16_lt(q0, zero), i8x16_lt(q1, zero));
                // Σ y over y < 0: the negative quants' pair sums, widened.
                let neg = i16x8_add(
                    i16x8_extadd_pairwise_i8x16(v128_and(q0, m0)),
                    i16x8_extadd_pairwise_i8x16(v128_and(q1, m1)),
                );
                let s = i32x4_extadd_pairwise_i16x8(neg);
                let s = i32x4_add(s, i32x4_shuffle::<2, 3, 0, 1>(s, s));
                let s = i32x4_extract_lane::<0>(s) + i32x4_extract_lane::<1>(s);
                let cb = c.add(blk);
                let m = (&raw mut (*cb).m) as *mut v128;
                m.write(m0);
                m.add(1).write(m1);
                (&raw mut (*cb).d).write(f32x4_splat(f16_at(yb) * pre));
                (&raw mut (*cb).f).write(i32x4_splat(s));
                // |y| ≤ 127: the quantizer's range (`quantize_row_q8_0`: round(x / d), d = amax / 127).
                let q = (&raw mut (*cb).q) as *mut v128;
                q.write(i8x16_abs(q0));
                q.add(1).write(i8x16_abs(q1));
                continue;
            }
            let _ = signs;
            let f = if min {
                f32x4_splat(f16_at(yb.add(2)) * pre)
            } else if off != 0 {
                let s16 = i16x8_add(
                    i16x8_extadd_pairwise_i8x16(q0),
                    i16x8_extadd_pairwise_i8x16(q1),
                );
                let s = i32x4_extadd_pairwise_i16x8(s16);
                let s = i32x4_add(s, i32x4_shuffle::<2, 3, 0, 1>(s, s));
                let s = i32x4_extract_lane::<0>(s) + i32x4_extract_lane::<1>(s);
                i32x4_splat(off * s)
            } else {
                i32x4_splat(0)
            };
            let cb = c.add(blk);
            (&raw mut (*cb).d).write(f32x4_splat(f16_at(yb) * pre));
            (&raw mut (*cb).f).write(f);
            let q = (&raw mut (*cb).q) as *mut v128;
            q.write(q0);
            q.add(1).write(q1);
        }
    }
}

/// One block's f32 term of four rows: their exact integer dots `s` (before the relaxed build's
/// `off · Σ y` / q8_0's sign sum, `cb.f`, taken off here), scales `dx` (and mins `mx`) times the
/// column block `cb`'s, in the scalar reference's order (quant/legacy.rs): q4_0 (sumi·dx)·dy,
/// the others (dx·dy)·sumi, plus m·s for those with a min.
///
/// # Safety
/// `cb` addresses a column block set by [`column_blocks`].
#[inline(always)]
unsafe fn block_term(
    s: v128,
    cb: *const ColBlock,
    (dx, mx): (v128, v128),
    (min, sumi_dx, signs): (bool, bool, bool),
    off: i32,
) -> v128 {
    // SAFETY: caller.
    let (dy, f) = unsafe { ((*cb).d, (*cb).f) };
    let s = if off != 0 || signs {
        i32x4_sub(s, f)
    } else {
        s
    };
    let sf = f32x4_convert_i32x4(s);
    let t = if sumi_dx {
        f32x4_mul(f32x4_mul(sf, dx), dy)
    } else {
        f32x4_mul(f32x4_mul(dx, dy), sf)
    };
    if min {
        f32x4_add(t, f32x4_mul(mx, f))
    } else {
        t
    }
}

/// Every row of `pn` in passes of four: `sums(rows, yq)` gives the four rows' exact integer dots
/// of one block (`yq`: the column block's 32 quants, 16-aligned) as i32x4 (the relaxed build's
/// offset types before their `off · Σ y`).
///
/// # Safety
/// As [`gemv`]; `sums` reads one block of each row and 32 bytes at `yq`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run<const R4: bool>(
    nb: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
    (xs, ys, qat): (usize, usize, usize),
    (min, sumi_dx, signs): (bool, bool, bool),
    off: i32,
    sums: impl Fn([*const u8; 4], *const u8, *const u8) -> v128,
) {
    // Written for blocks 0..nb below, read only there (no memset per panel). 48 KiB at most: the
    // main thread's stack is 1 MiB (rustc's wasm32 default), a worker's 2 MiB (wasm-bindgen's).
    let mut col = core::mem::MaybeUninit::<[ColBlock; MAX_BLOCKS]>::uninit();
    let cp = col.as_mut_ptr() as *mut ColBlock;
    // Repacked weights: the column carries their scales' 2^112, one multiply per row vector and
    // block fewer, the same bits. (dx·2^-112)·(dy·2^112) is dx·dy as a real, so it rounds the
    // same (no overflow: |dy| ≤ 65504); for q4_0's (sumi·dx)·dy, sumi·dx·2^-112 is sumi·dx's
    // rounding scaled where it is an f32 normal (|sumi·dx| ≥ 2^-14), and exact below that (there
    // dx is an f16 subnormal m·2^-24 with |sumi·m| < 2^10).
    let pre = if R4 { F16_REBIAS } else { 1.0 };
    let fk = f16_consts();
    // SAFETY: caller; nb ≤ MAX_BLOCKS (checked by `gemv`).
    unsafe { column_blocks(cp, nb, b, ys, qat, (min, off, signs), pre) };
    let n = pn.nrows;
    let lda = pn.lda;
    // The last row's last byte + 1: what the touches stay below.
    let end = (n.max(1) - 1) * lda + nb * xs;
    // Its address: where the repacked stream's page touches stop.
    let lim = pn.a0 as usize + end;
    let mut i = 0;
    while i < n {
        // Four rows at one stride, so the loop steps one pointer: rows i..i + 4, or for a last
        // pass short of four rows, n − 4..n (the rows before i come out the same bits again
        // and are not written twice); a panel of under four rows goes one row per pass
        // (stride 0).
        let (first, stride, fresh) = if R4 {
            // Repacked: whole groups (the caller's rows), one pass per group.
            (i, 0, 4)
        } else if n < 4 {
            (i, 0, 1)
        } else if i + 4 > n {
            (n - 4, lda, n - i)
        } else {
            (i, lda, 4)
        };
        // SAFETY: row `first` is inside the panel.
        let base = unsafe { pn.a0.add(first * lda) };
        let mut acc = f32x4_splat(0.0);
        // The bytes of the pass PF_PASSES ahead, 4·xs of them per block (see PF_PASSES): the
        // first `touched` blocks touch them, those whose touches stay below `end` (ahead +
        // blk·4·xs + 64 < end). Counted once per pass, so that the block loop holds no
        // bounds arithmetic (V8 kept ~15 scalar instructions per block for it).
        let ahead = (first + 4 * PF_PASSES).saturating_mul(lda);
        // Repacked groups are one sequential stream, which the hardware prefetcher follows:
        // touching ahead there measured 30 % slower (SmolLM2 generation in Node 20, 86–91 vs
        // 117–138 tok/s), a touch that misses holding up the work behind it; one byte a page
        // is touched instead (`touch_page_ahead`).
        let touched = if !R4 && ahead.saturating_add(64) < end {
            nb.min((end - ahead - 64).div_ceil(4 * xs))
        } else {
            0
        };
        let mut block = |blk: usize| {
            // SAFETY: blk < nb: one block of every row (rows first..first + 3·stride are in
            // the panel) and of the column copy, which is set for it.
            unsafe {
                let cb = cp.add(blk);
                let (xb, hp, (dx, mx)) = if R4 {
                    let g = base.add(blk * 4 * xs);
                    let (xb, hp) = group_rows(g, xs, min);
                    (xb, hp, group_scales(g, min, &fk))
                } else {
                    let x0 = base.add(blk * xs);
                    let x1 = x0.add(stride);
                    let x2 = x1.add(stride);
                    let xb = [x0, x1, x2, x2.add(stride)];
                    let sc = if min {
                        scale_pairs4(xb, 0, &fk)
                    } else {
                        (scales4(xb, 0, &fk), f32x4_splat(0.0))
                    };
                    (xb, x0, sc)
                };
                let s = sums(xb, (&raw const (*cb).q) as *const u8, hp);
                let t = block_term(s, cb, (dx, mx), (min, sumi_dx, signs), off);
                acc = f32x4_add(acc, t);
            }
        };
        // SAFETY: the touched bytes: a0 + ahead + blk·4·xs (+ 64) < end for blk < touched,
        // inside the panel's rows (before the last row's end).
        let touch = |blk: usize| unsafe {
            let t = pn.a0.add(ahead + blk * 4 * xs);
            core::ptr::read_volatile(t);
            core::ptr::read_volatile(t.add(64));
        };
        for blk in 0..touched {
            touch(blk);
            block(blk);
        }
        if R4 {
            // One pass's page touches at its start: passes are short (1–3 KiB for these
            // models), and a check per block cost 6–8 % from cache (q4_1, q5_0; Node 26).
            // SAFETY: the panel's bytes run to a0 + end.
            unsafe { touch_page_ahead(base, nb * 4 * xs, lim) };
        }
        for blk in touched..nb {
            block(blk);
        }
        let mut o = [0f32; 4];
        // SAFETY: 16 bytes.
        unsafe { v128_store(o.as_mut_ptr() as *mut v128, acc) };
        for (r, v) in o.iter().enumerate().skip(4 - fresh) {
            let row = if n < 4 { first } else { first + r };
            // SAFETY: row < n of the panel's single column.
            unsafe {
                let p = pn.out0.add(row * 4) as *mut f32;
                if accumulate {
                    *p += *v
                } else {
                    *p = *v
                }
            }
        }
        i += fresh;
    }
}

/// [`run`] over repacked groups (the relaxed build's chunked layout, and the SIMD128 build's
/// q8_0) two at a time, far apart:
/// group i with group i + h, h half the panel's groups rounded up (an odd count's middle group
/// runs alone, beside itself, written once). Per block `sums(ga, gb, yq)` gives both groups'
/// exact integer dots (`ga`, `gb`: their group blocks, `yq` the column block's quants), so the
/// column's splats and block facts and the loop's bookkeeping serve eight rows, not four; each
/// row's float steps are [`run`]'s, in its order: the same bits. Two streams, pages apart, keep
/// more of the weights in flight from DRAM: against one group a pass, `gemv-ab.mjs --mib 64`
/// (Node 24, AMD Zen 3) q4_1 576×1536 1.15×, q4_0 / q5_0 896×4864 1.17× / 1.11× without page
/// touches, 1.16–1.17× with them; from cache 1.05–1.14×. (Adjacent groups — two streams
/// interleaved in the same pages — measured 0.56–0.75× from DRAM, and one stream of eight rows
/// interleaved level: the hardware prefetchers gain from separate streams, not from fewer
/// instructions.)
///
/// # Safety
/// As [`gemv`], the panel repacked (whole groups); `sums` reads one group block at each of
/// `ga`, `gb` and 32 bytes at `yq` (64 for q8_0's masks after them).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run2(
    nb: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
    (xs, ys, qat): (usize, usize, usize),
    (min, sumi_dx, signs): (bool, bool, bool),
    off: i32,
    sums: impl Fn(*const u8, *const u8, *const u8) -> [v128; 2],
) {
    let mut col = core::mem::MaybeUninit::<[ColBlock; MAX_BLOCKS]>::uninit();
    let cp = col.as_mut_ptr() as *mut ColBlock;
    let fk = f16_consts();
    // SAFETY: caller; nb ≤ MAX_BLOCKS (checked by `gemv`).
    unsafe { column_blocks(cp, nb, b, ys, qat, (min, off, signs), F16_REBIAS) };
    let groups = pn.nrows / 4;
    let gbytes = 4 * pn.lda;
    let lim = pn.a0 as usize + groups * gbytes;
    // Two streams far apart: group i with group i + h (h = half the groups, rounded up).
    let h = groups.div_ceil(2);
    for g0 in 0..h {
        let (g1, both) = if g0 + h < groups {
            (g0 + h, true)
        } else {
            (g0, false)
        };
        // SAFETY: g0, g1 < groups: inside the panel.
        let (base0, base1) = unsafe { (pn.a0.add(g0 * gbytes), pn.a0.add(g1 * gbytes)) };
        // SAFETY: the panel's bytes run to `lim`.
        unsafe {
            touch_page_ahead(base0, nb * 4 * xs, lim);
            touch_page_ahead(base1, nb * 4 * xs, lim);
        }
        let mut acc = [f32x4_splat(0.0); 2];
        for blk in 0..nb {
            // SAFETY: blk < nb: one group block of each group and the column copy's entry.
            unsafe {
                let cb = cp.add(blk);
                let (ga, gb) = (base0.add(blk * 4 * xs), base1.add(blk * 4 * xs));
                let s = sums(ga, gb, (&raw const (*cb).q) as *const u8);
                for (j, gp) in [ga, gb].into_iter().enumerate() {
                    let sc = group_scales(gp, min, &fk);
                    let t = block_term(s[j], cb, sc, (min, sumi_dx, signs), off);
                    acc[j] = f32x4_add(acc[j], t);
                }
            }
        }
        // SAFETY: the groups' rows are the panel's.
        unsafe {
            store_rows(pn, 4 * g0, 4, acc[0], accumulate);
            if both {
                store_rows(pn, 4 * g1, 4, acc[1], accumulate);
            }
        }
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
unsafe fn gemv_q8_0_i16<const R4: bool>(nb: usize, pn: &Panel, b: *const u8, accumulate: bool) {
    // Four rows' sums against the column's widened quants `qy`.
    let rows =
        |xb: [*const u8; 4], qy: &[v128; 4]| reduce4(each4(|r| dot32(&decode_q8_0(xb[r]), qy)));
    if R4 {
        // The SIMD128 build's repacked groups (the relaxed build's are chunked), two a pass
        // ([`run2`]), the column's widened quants shared by eight rows: against one a pass
        // (`gemv-ab.mjs`, Node 24, AMD Zen 3) 576 × 49152 1.17× from DRAM, 1.18–1.21× from
        // cache, 896 × 4864 1.07–1.19× / 1.08–1.10×. (The 4/5-bit types stay one a pass.)
        // SAFETY: forwarded; each closure call reads one 136-byte group block of each group
        // and the column block's 32 quants.
        unsafe {
            run2(
                nb,
                pn,
                b,
                accumulate,
                (34, 34, 2),
                (false, false, false),
                0,
                |ga, gb, yq| {
                    let qy = ext_i8x32(yq);
                    let group = |g| rows(group_rows(g, 34, false).0, &qy);
                    [group(ga), group(gb)]
                },
            )
        }
        return;
    }
    // SAFETY: forwarded; each closure call reads one 34-byte block per row and of the column.
    unsafe {
        run::<false>(
            nb,
            pn,
            b,
            accumulate,
            (34, 34, 2),
            (false, false, false),
            0,
            |xb, yq, _| rows(xb, &ext_i8x32(yq)),
        )
    }
}

#[cfg(not(target_feature = "relaxed-simd"))]
macro_rules! simd_gemv {
    ($name:ident, $xs:expr, $ys:expr, $order:expr, $decode:ident) => {
        simd_gemv!($name, $xs, $ys, $order, $decode, |x, _h, _r| $decode(x));
    };
    ($name:ident, $xs:expr, $ys:expr, $order:expr, $decode:ident, |$x:ident, $h:ident, $r:ident| $r4:expr) => {
        /// # Safety
        /// As [`gemv`].
        #[inline(never)]
        unsafe fn $name<const R4: bool>(nb: usize, pn: &Panel, b: *const u8, accumulate: bool) {
            let qat = $ys - 32;
            // Repacked: one group a pass. Two far apart, as q8_0 ([`run2`], the column's
            // widened quants shared), measured against one (`gemv-ab.mjs`, Node 24, AMD Zen 3)
            // from DRAM q4_1 1.01–1.02×, q4_0 0.99–1.00×, q5_0 1.00×, q5_1 0.96–0.98× (from
            // cache 1.01–1.05×): at 3–5 GB/s these are bound by their decode, not the stream.
            // SAFETY: forwarded; each closure call reads one block per row and of the column.
            unsafe {
                run::<R4>(
                    nb,
                    pn,
                    b,
                    accumulate,
                    ($xs, $ys, qat),
                    $order,
                    0,
                    |xb, yq, hp| {
                        let qy = ext_i8x32(yq);
                        if R4 {
                            let $h = load16(hp);
                            reduce4(each4(|r| {
                                let ($x, $r) = (xb[r], r as u32);
                                dot32(&$r4, &qy)
                            }))
                        } else {
                            reduce4(each4(|r| dot32(&$decode(xb[r]), &qy)))
                        }
                    },
                )
            }
        }
    };
}

#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(gemv_q4_0, 18, 34, (false, true, false), decode_q4_0);
#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(
    gemv_q5_0,
    22,
    34,
    (false, false, false),
    decode_q5_0,
    |x, h, r| { q5_r4(x.add(6), h, r, 16) }
);
#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(gemv_q4_1, 20, 36, (true, false, false), decode_q4_1);
#[cfg(not(target_feature = "relaxed-simd"))]
simd_gemv!(
    gemv_q5_1,
    24,
    36,
    (true, false, false),
    decode_q5_1,
    |x, h, r| { q5_r4(x.add(8), h, r, 0) }
);

/// Row r's quants − `off` of a repacked q5 group block as four i16x8: nibbles at `qs`, fifth
/// bits from the group's `hv` ([`hbit`]).
///
/// # Safety
/// 16 bytes at `qs` must be readable.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn q5_r4(qs: *const u8, hv: v128, r: u32, off: i8) -> [v128; 4] {
    // SAFETY: caller.
    let v = unsafe { load16(qs) };
    let x10 = u8x16_splat(0x10);
    let m = u8x16_splat(0x0F);
    let lo = v128_or(v128_and(v, m), hbit(hv, 2 * r, x10));
    let hi = v128_or(u8x16_shr(v, 4), hbit(hv, 2 * r + 1, x10));
    let o = i8x16_splat(off);
    let (lo, hi) = (i8x16_sub(lo, o), i8x16_sub(hi, o));
    [
        i16x8_extend_low_i8x16(lo),
        i16x8_extend_high_i8x16(lo),
        i16x8_extend_low_i8x16(hi),
        i16x8_extend_high_i8x16(hi),
    ]
}

#[cfg(not(target_feature = "relaxed-simd"))]
use gemv_q8_0_i16 as gemv_q8_0;
#[cfg(target_feature = "relaxed-simd")]
use relaxed::{gemv_q4_0, gemv_q4_1, gemv_q5_0, gemv_q5_1, gemv_q8_0};

/// The relaxed build's 4/5-bit rows: the unsigned quants u (0..15 or 0..31) are the i7 operand
/// of `i16x8.relaxed_dot_i8x16_i7x16_s` (exact for every engine), the column's i8 quants the
/// other; Σ (u − off)·y = Σ u·y − off·Σ y with off·Σ y once per column block ([`column_blocks`]).
/// Repacked weights come in the chunked layout (`repack.rs`, `Spec::chunked`) and are summed by
/// `i32x4.relaxed_dot_i8x16_i7x16_add_s`, one per 16 bytes with each row in its own lane
/// ([`chunked_sums2`]): one `vpdpbusd` in V8 on x86 with AVX-VNNI, one `sdot` on ARM with dot
/// product, five in V8 elsewhere (x86 without VNNI: there the pairs of chunks are split into i16
/// dots, `wasm32::dot2_add`) — against two `pmaddubsw`, an add and a share of the four rows'
/// transpose per row and block before. Chromium 156, this Zen 5: SmolLM2 and
/// Qwen2.5 generation at 1 thread +20 %.
#[cfg(target_feature = "relaxed-simd")]
pub(super) mod relaxed {
    use super::super::{dot_add, split_dots};
    use super::*;

    /// The constants of the decoders ([`super::super::v128s`]).
    static CONSTS: V128s<9> = V128s([
        [0x0F; 16],
        // Byte k/8 of the high bits into lane k, for elements 0..16 and 16..32.
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
        [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3],
        // Bit k % 8.
        [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128],
        [0x10; 16],
        // i16 ones: `i32x4.dot_i16x8_s` with them is the pairwise widening sum, one `pmaddwd`
        // with a register operand (V8's `extadd_pairwise` loads its constant each time).
        [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0],
        // The chunked q5 layout's masks (`chunked_sums2`).
        [0x1F; 16],
        [0x07; 16],
        [0x18; 16],
    ]);

    /// The decoders' constants; the relaxed prompt tiles (`tiles.rs`) decode with them too.
    #[derive(Clone, Copy)]
    pub(in super::super) struct K {
        m0f: v128,
        idx_lo: v128,
        idx_hi: v128,
        bits: v128,
        x10: v128,
        pub(in super::super) ones: v128,
        x1f: v128,
        x07: v128,
        x18: v128,
    }

    #[inline(always)]
    pub(in super::super) fn consts() -> K {
        let [m0f, idx_lo, idx_hi, bits, x10, ones, x1f, x07, x18] = v128s(&CONSTS);
        K {
            m0f,
            idx_lo,
            idx_hi,
            bits,
            x10,
            ones,
            x1f,
            x07,
            x18,
        }
    }

    /// Quants 0..16 and 16..32 (0..15) from 16 bytes of nibbles at `p`.
    ///
    /// # Safety
    /// 16 bytes at `p` must be readable.
    #[inline(always)]
    pub(in super::super) unsafe fn u4(p: *const u8, k: &K) -> [v128; 2] {
        // SAFETY: caller.
        let v = unsafe { load16(p) };
        [v128_and(v, k.m0f), v128_and(u16x8_shr(v, 4), k.m0f)]
    }

    /// Quants 0..32 (0..31) from 4 bytes of high bits at `qh` and 16 bytes of nibbles at `qs`.
    ///
    /// # Safety
    /// Both must be readable.
    #[inline(always)]
    pub(in super::super) unsafe fn u5(qh: *const u8, qs: *const u8, k: &K) -> [v128; 2] {
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
    fn reduce4_i16(p: [v128; 4], k: &K) -> v128 {
        let t0 = i32x4_dot_i16x8(
            i16x8_add(
                i32x4_shuffle::<0, 4, 1, 5>(p[0], p[1]),
                i32x4_shuffle::<2, 6, 3, 7>(p[0], p[1]),
            ),
            k.ones,
        );
        let t1 = i32x4_dot_i16x8(
            i16x8_add(
                i32x4_shuffle::<0, 4, 1, 5>(p[2], p[3]),
                i32x4_shuffle::<2, 6, 3, 7>(p[2], p[3]),
            ),
            k.ones,
        );
        i32x4_add(
            i32x4_shuffle::<0, 1, 4, 5>(t0, t1),
            i32x4_shuffle::<2, 3, 6, 7>(t0, t1),
        )
    }

    /// The four rows' exact Σ u·y of one chunked group block (`repack.rs`, `Spec::chunked`) for
    /// each of two groups at `qa`, `qb` ([`run2`]): their quant bytes (16-byte chunk c: each
    /// row's bytes 4c..4c + 4: nibbles, or for `Q5` element 4c + j whole and three bits of
    /// element 16 + 4c + j, whose bits 3, 4 are bits 2c, 2c + 1 of the group's shared bytes
    /// `ha` / `hb`, byte 4r + j), the column's 32 quants at `yq`. One relaxed dot per 16 bytes
    /// of elements 4c.. or 16 + 4c.. against the column's four matching quants splatted sums
    /// each row in its own lane; each splat serves both groups. `S`, split dots
    /// ([`split_dots`]): a chunk's two i16 dots added in i16, then a group's 4-bit chunks all
    /// four (8 · 2·15·128 = 30720 ≤ 32767) and its 5-bit ones two by two (4 · 2·31·128 = 31744)
    /// before one widening each; else dot-adds, four chains (vpdpbusd's latency).
    ///
    /// # Safety
    /// 64 bytes at each of `qa`, `qb` and 32 at `yq` must be readable.
    #[inline(always)]
    unsafe fn chunked_sums2<const Q5: bool, const S: bool>(
        qa: *const u8,
        qb: *const u8,
        [ha, hb]: [v128; 2],
        yq: *const u8,
        k: &K,
    ) -> [v128; 2] {
        let quants = |q: *const u8, hv: v128, c: usize| {
            // SAFETY: caller; chunk c < 4.
            let v = unsafe { load16(q.add(16 * c)) };
            if Q5 {
                let top = match c {
                    0 => i16x8_shl(hv, 3),
                    1 => i16x8_shl(hv, 1),
                    2 => u16x8_shr(hv, 1),
                    _ => u16x8_shr(hv, 3),
                };
                (
                    v128_and(v, k.x1f),
                    v128_or(v128_and(u16x8_shr(v, 5), k.x07), v128_and(top, k.x18)),
                )
            } else {
                (v128_and(v, k.m0f), v128_and(u16x8_shr(v, 4), k.m0f))
            }
        };
        // SAFETY: caller.
        let ycol = |c: usize| unsafe {
            (
                v128_load32_splat(yq.add(4 * c) as *const u32),
                v128_load32_splat(yq.add(16 + 4 * c) as *const u32),
            )
        };
        if S {
            let mut t = [[i16x8_splat(0); 4]; 2];
            // (c also picks the chunk's offsets.)
            #[allow(clippy::needless_range_loop)]
            for c in 0..4 {
                let (ylo, yhi) = ycol(c);
                for (j, (q, hv)) in [(qa, ha), (qb, hb)].into_iter().enumerate() {
                    let (lo, hi) = quants(q, hv, c);
                    t[j][c] = i16x8_add(
                        i16x8_relaxed_dot_i8x16_i7x16(ylo, lo),
                        i16x8_relaxed_dot_i8x16_i7x16(yhi, hi),
                    );
                }
            }
            t.map(|t| {
                let (h01, h23) = (i16x8_add(t[0], t[1]), i16x8_add(t[2], t[3]));
                if Q5 {
                    i32x4_add(i32x4_dot_i16x8(h01, k.ones), i32x4_dot_i16x8(h23, k.ones))
                } else {
                    i32x4_dot_i16x8(i16x8_add(h01, h23), k.ones)
                }
            })
        } else {
            let mut acc = [[i32x4_splat(0); 2]; 2];
            for c in 0..4 {
                let (ylo, yhi) = ycol(c);
                for (j, (q, hv)) in [(qa, ha), (qb, hb)].into_iter().enumerate() {
                    let (lo, hi) = quants(q, hv, c);
                    acc[j][0] = i32x4_relaxed_dot_i8x16_i7x16_add(ylo, lo, acc[j][0]);
                    acc[j][1] = i32x4_relaxed_dot_i8x16_i7x16_add(yhi, hi, acc[j][1]);
                }
            }
            acc.map(|a| i32x4_add(a[0], a[1]))
        }
    }

    macro_rules! relaxed_gemv {
        ($name:ident, $xs:expr, $ys:expr, $order:expr, $off:expr, $q5:expr, |$x:ident, $k:ident| $decode:expr) => {
            /// # Safety
            /// As [`gemv`].
            #[inline(always)]
            pub(super) unsafe fn $name<const R4: bool>(
                nb: usize,
                pn: &Panel,
                b: *const u8,
                accumulate: bool,
            ) {
                /// `S`: split dots (repacked rows only: the plain rows' dots are i16 already).
                ///
                /// # Safety
                /// As [`gemv`].
                #[inline(never)]
                unsafe fn imp<const R4: bool, const S: bool>(
                    nb: usize,
                    pn: &Panel,
                    b: *const u8,
                    accumulate: bool,
                ) {
                    let qat = $ys - 32;
                    let consts = consts();
                    if R4 {
                        let f = if $order.0 { 2 } else { 1 };
                        let head = 8 * f + if $q5 { 16 } else { 0 };
                        // SAFETY: forwarded.
                        unsafe {
                            run2(
                                nb,
                                pn,
                                b,
                                accumulate,
                                ($xs, $ys, qat),
                                $order,
                                $off,
                                |ga, gb, yq| {
                                    let hv = if $q5 {
                                        [load16(ga.add(8 * f)), load16(gb.add(8 * f))]
                                    } else {
                                        [i32x4_splat(0); 2]
                                    };
                                    chunked_sums2::<{ $q5 }, S>(
                                        ga.add(head),
                                        gb.add(head),
                                        hv,
                                        yq,
                                        &consts,
                                    )
                                },
                            )
                        };
                        return;
                    }
                    // SAFETY: forwarded; each closure call reads one block per row and of the
                    // column.
                    unsafe {
                        run::<false>(
                            nb,
                            pn,
                            b,
                            accumulate,
                            ($xs, $ys, qat),
                            $order,
                            $off,
                            |xb, yq, _| {
                                let $k = &consts;
                                let y = [load16(yq), load16(yq.add(16))];
                                reduce4_i16(xb.map(|$x| dot16(y, $decode)), $k)
                            },
                        )
                    }
                }
                // SAFETY: forwarded.
                unsafe {
                    if R4 && split_dots() {
                        imp::<R4, true>(nb, pn, b, accumulate)
                    } else {
                        imp::<R4, false>(nb, pn, b, accumulate)
                    }
                }
            }
        };
    }

    relaxed_gemv!(
        gemv_q4_0,
        18,
        34,
        (false, true, false),
        8,
        false,
        |x, k| u4(x.add(2), k)
    );
    relaxed_gemv!(
        gemv_q5_0,
        22,
        34,
        (false, false, false),
        16,
        true,
        |x, k| u5(x.add(2), x.add(6), k)
    );
    relaxed_gemv!(
        gemv_q4_1,
        20,
        36,
        (true, false, false),
        0,
        false,
        |x, k| u4(x.add(4), k)
    );
    relaxed_gemv!(gemv_q5_1, 24, 36, (true, false, false), 0, true, |x, k| u5(
        x.add(4),
        x.add(8),
        k
    ));

    /// q8_0 over chunked groups: the weights are full i8 (−128 may occur), so the column's |y|
    /// (≤ 127) is the i7 operand and y's sign moves onto the weights as w ^ m (m: y < 0, so
    /// ~w = −w − 1 where y < 0): Σ (w ^ m)·|y| = Σ w·y + Σ_{y<0} y, the last term subtracted
    /// per column block (`column_blocks`' `signs`). Plain rows keep the i16 dots.
    ///
    /// # Safety
    /// As [`gemv`].
    #[inline(always)]
    pub(super) unsafe fn gemv_q8_0<const R4: bool>(
        nb: usize,
        pn: &Panel,
        b: *const u8,
        accumulate: bool,
    ) {
        // SAFETY: forwarded.
        unsafe {
            if !R4 {
                super::gemv_q8_0_i16::<false>(nb, pn, b, accumulate)
            } else if split_dots() {
                q8_0_chunked::<true>(nb, pn, b, accumulate)
            } else {
                q8_0_chunked::<false>(nb, pn, b, accumulate)
            }
        }
    }

    /// [`gemv_q8_0`] over chunked groups; `S`: split dots ([`dot_add`]: a pair of products may
    /// reach 2·128·127, so no two are added in i16).
    ///
    /// # Safety
    /// As [`gemv`], the panel repacked.
    #[inline(never)]
    unsafe fn q8_0_chunked<const S: bool>(nb: usize, pn: &Panel, b: *const u8, accumulate: bool) {
        let ones = consts().ones;
        // SAFETY: forwarded; each closure call reads one 136-byte group block of each group
        // and the column block's |y| and masks (`ColBlock::q`, `m`, 32 bytes apart).
        unsafe {
            run2(
                nb,
                pn,
                b,
                accumulate,
                (34, 34, 2),
                (false, false, true),
                0,
                |ga, gb, ay| {
                    // The quants after the four d; each splat serves both groups, two chains
                    // of four dot-adds a group (vpdpbusd's latency).
                    let (qa, qb, m) = (ga.add(8), gb.add(8), ay.add(32));
                    let mut acc = [[i32x4_splat(0); 2]; 2];
                    for c in 0..8 {
                        let ms = v128_load32_splat(m.add(4 * c) as *const u32);
                        let a = v128_load32_splat(ay.add(4 * c) as *const u32);
                        for (j, q) in [qa, qb].into_iter().enumerate() {
                            let w = v128_xor(load16(q.add(16 * c)), ms);
                            acc[j][c % 2] = dot_add::<S>(w, a, acc[j][c % 2], ones);
                        }
                    }
                    acc.map(|a| i32x4_add(a[0], a[1]))
                },
            )
        }
    }
}
