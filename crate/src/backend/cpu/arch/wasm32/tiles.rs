//! wasm32 SIMD128 register tiles for mul_mat (the SIMD build: `-C target-feature=+simd128`).
//!
//! Same design as `arch/x86/tiles.rs`: an R×C tile computes R weight rows against C src1 columns, every
//! weight block is decoded once for all C columns and every column block once for all R rows.
//! SIMD128 has no FMA (the relaxed-SIMD build fuses the f32 tile's products, see [`madd`]), so f32 products are mul + add, and
//! V8 on x86-64 keeps 15 XMM registers: tile shapes (in `ops/matmul/mod.rs`) keep R·C accumulators plus the
//! operands of one step under that.
//!
//! Every kernel is its own wasm function (`inline(never)`): engines compile wasm lazily, per
//! function, and tier up from a baseline compiler to an optimizing one without on-stack
//! replacement, so one huge function holding every type's tile would make the first batches of a
//! model run slow code while the optimizer works through kernels the model never uses.
//!
//! 8-bit dots: both sides are sign-extended to i16 once (weights per row, columns per column) and
//! multiplied with `i32x4.dot_i16x8_s` (pmaddwd on x86), which is exact for these ranges; only
//! the f32 accumulation order differs from the scalar `vec_dot` references.

use core::arch::wasm32::*;

use super::gemv::{f16_consts, f16x4_exact, F16Consts};
#[cfg(not(target_feature = "relaxed-simd"))]
use super::quants::q5_high;
use super::quants::{f16x4_to_f32x4, nibbles, q6_consts, q6_quants};
use crate::backend::cpu::arch::Tiled;

/// `body` for `i` = 0, 1, … while `i < n` (n a const generic ≤ 8), with literal indices: LLVM
/// does not always unroll loops over tile rows/columns for wasm, and arrays indexed by a loop
/// variable stay in linear memory (the shadow stack) instead of becoming locals.
macro_rules! unroll {
    ($i:ident < $n:expr => $body:block) => {
        unroll!(@ $i, $n, $body, 0 1 2 3 4 5 6 7)
    };
    (@ $i:ident, $n:expr, $body:block, $($k:literal)*) => {{
        const { assert!($n <= 8, "unroll! handles at most 8 iterations") };
        $( if $k < $n { let $i: usize = $k; $body } )*
    }};
}

/// R×C dot products of type `t` (see `arch::tile`).
///
/// # Safety
/// Every pointer must address at least `n` elements of `t` (whole blocks for quantized types).
#[inline(always)]
pub(crate) unsafe fn tile<const R: usize, const C: usize>(
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match t {
            Tiled::F32 => tile_f32::<R, C>(n, a, b, out),
            Tiled::F16 => tile_f16::<R, C>(n, a, b, out),
            Tiled::Bf16 => tile_bf16::<R, C>(n, a, b, out),
            Tiled::Q4_0 => tile_q4_0::<R, C>(n, a, b, out),
            Tiled::Q8_0 => tile_q8_0::<R, C>(n, a, b, out),
            Tiled::Q4K => tile_q4_k::<R, C>(n, a, b, out),
            Tiled::Q4_1 => tile_q4_1::<R, C>(n, a, b, out),
            Tiled::Q5_0 => tile_q5_0::<R, C>(n, a, b, out),
            Tiled::Q5_1 => tile_q5_1::<R, C>(n, a, b, out),
            Tiled::Q5K => tile_q5_k::<R, C>(n, a, b, out),
            Tiled::Q6K => tile_q6_k::<R, C>(n, a, b, out),
        }
    }
}

/// a·b + c: one fused `f32x4.relaxed_madd` in the relaxed-simd build (an FMA on x86 with FMA3,
/// so the low bits may differ from mul + add, within the tests' tolerance), mul + add otherwise.
/// The f32 tile only: the f16/bf16 tiles (the LLMs' attention over their f16 KV cache) and the
/// quantized tiles keep mul + add (an LLM's activations are re-quantized to 8 bits, which turns
/// last-bit differences into whole steps: FMA in the f16 tile moved SmolLM2's last-position
/// logits vs llama.cpp's from 0.52 to 0.98 max abs, against a test bound of 1.0). The f16 tile's
/// speed is bound by its conversions, the quantized tiles' by their integer dots, not by this.
#[inline(always)]
fn madd(a: v128, b: v128, c: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        f32x4_relaxed_madd(a, b, c)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        f32x4_add(f32x4_mul(a, b), c)
    }
}

/// a·b + c, unfused in every build (see [`madd`]).
#[inline(always)]
fn qacc(a: v128, b: v128, c: v128) -> v128 {
    f32x4_add(f32x4_mul(a, b), c)
}

/// The exact sum of four i32 lanes (the callers' sums stay below 2^31).
#[inline(always)]
fn hsum_i32(v: v128) -> i32 {
    let s = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    i32x4_extract_lane::<0>(s).wrapping_add(i32x4_extract_lane::<1>(s))
}

#[inline(always)]
fn hsum_f32(v: v128) -> f32 {
    // Pairwise, as the lanes are independent partial sums.
    let s = f32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    f32x4_extract_lane::<0>(s) + f32x4_extract_lane::<1>(s)
}

/// 16 bytes at `p` (any alignment).
///
/// # Safety
/// `p..p+16` must be readable.
#[inline(always)]
pub(super) unsafe fn load16(p: *const u8) -> v128 {
    // SAFETY: the caller guarantees 16 readable bytes; v128_load has no alignment requirement.
    unsafe { v128_load(p as *const v128) }
}

/// f16 bits → f32 without branches (wasm has no F16C): the magnitude shifted into f32 position
/// and scaled by 2^112 is exact for normals and subnormals; exponent 31 becomes inf/NaN.
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let m = h & 0x7fff;
    let v = f32::from_bits(m << 13) * f32::from_bits(0x7780_0000); // 2^112
    let v = if m >= 0x7c00 {
        f32::from_bits((m << 13) | 0x7f80_0000)
    } else {
        v
    };
    f32::from_bits(v.to_bits() | ((h & 0x8000) << 16))
}

/// The f16 at `p` as f32.
///
/// # Safety
/// `p..p+2` must be readable.
#[inline(always)]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: caller.
    f16_to_f32(unsafe { (p as *const u16).read_unaligned() })
}

// ---------------------------------------------------------------------------------------------
// float tiles: out[r][c] = Σ a[r][i]·b[c][i], R×C f32x4 accumulators, 4 elements a step

macro_rules! float_tile {
    ($name:ident, $load:ident, $scalar:ident, $madd:ident) => {
        /// # Safety
        /// Every pointer addresses `n` elements (any alignment).
        #[inline(never)]
        pub(super) unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            let mut acc = [[f32x4_splat(0.0); C]; R];
            let n4 = n / 4 * 4;
            let mut i = 0;
            while i < n4 {
                // SAFETY: i + 4 <= n and every pointer addresses n elements.
                unsafe {
                    let bv: [v128; C] = core::array::from_fn(|c| $load(b[c], i));
                    for r in 0..R {
                        let av = $load(a[r], i);
                        for c in 0..C {
                            acc[r][c] = $madd(av, bv[c], acc[r][c]);
                        }
                    }
                }
                i += 4;
            }
            for r in 0..R {
                for c in 0..C {
                    let mut s = hsum_f32(acc[r][c]);
                    for j in n4..n {
                        // SAFETY: j < n.
                        s += unsafe { $scalar(a[r], j) * $scalar(b[c], j) };
                    }
                    out[r][c] = s;
                }
            }
        }
    };
}

/// f32 values i..i+4 at `p`.
///
/// # Safety
/// They must be readable.
#[inline(always)]
unsafe fn load_f32(p: *const u8, i: usize) -> v128 {
    // SAFETY: caller.
    unsafe { v128_load((p as *const f32).add(i) as *const v128) }
}

#[inline(always)]
unsafe fn scalar_f32(p: *const u8, j: usize) -> f32 {
    // SAFETY: the caller keeps j inside the row.
    unsafe { (p as *const f32).add(j).read_unaligned() }
}

/// Four u16 at element i of `p` zero-extended into u32 lanes.
///
/// # Safety
/// Elements i..i+4 must be readable.
#[inline(always)]
unsafe fn load_u16x4(p: *const u8, i: usize) -> v128 {
    // SAFETY: caller; 8 bytes.
    unsafe { u32x4_extend_low_u16x8(v128_load64_zero((p as *const u16).add(i) as *const u64)) }
}

#[inline(always)]
unsafe fn load_f16(p: *const u8, i: usize) -> v128 {
    // SAFETY: caller.
    f16x4_to_f32x4(unsafe { load_u16x4(p, i) })
}

#[inline(always)]
unsafe fn scalar_f16(p: *const u8, j: usize) -> f32 {
    // SAFETY: the caller keeps j inside the row.
    f16_to_f32(unsafe { (p as *const u16).add(j).read_unaligned() })
}

#[inline(always)]
unsafe fn load_bf16(p: *const u8, i: usize) -> v128 {
    // SAFETY: caller.
    i32x4_shl(unsafe { load_u16x4(p, i) }, 16)
}

#[inline(always)]
unsafe fn scalar_bf16(p: *const u8, j: usize) -> f32 {
    // SAFETY: the caller keeps j inside the row.
    f32::from_bits((unsafe { (p as *const u16).add(j).read_unaligned() } as u32) << 16)
}

float_tile!(tile_f32, load_f32, scalar_f32, madd);
float_tile!(tile_f16, load_f16, scalar_f16, qacc);
float_tile!(tile_bf16, load_bf16, scalar_bf16, qacc);

// ---------------------------------------------------------------------------------------------
// 32-element blocks × q8_0 columns

/// 32 signed bytes at `p` as four i16x8.
///
/// # Safety
/// `p..p+32` must be readable.
#[inline(always)]
pub(super) unsafe fn ext_i8x32(p: *const u8) -> [v128; 4] {
    // SAFETY: caller.
    let (v0, v1) = unsafe { (load16(p), load16(p.add(16))) };
    ext_pair(v0, v1)
}

/// Two i8x16 as four i16x8 (elements 0..8, 8..16 of `v0`, then of `v1`).
#[inline(always)]
fn ext_pair(v0: v128, v1: v128) -> [v128; 4] {
    [
        i16x8_extend_low_i8x16(v0),
        i16x8_extend_high_i8x16(v0),
        i16x8_extend_low_i8x16(v1),
        i16x8_extend_high_i8x16(v1),
    ]
}

/// Σ x·y of 32 i16 pairs as i32x4 lanes (exact: |x·y| < 2^15 per product here).
#[inline(always)]
pub(super) fn dot32(x: &[v128; 4], y: &[v128; 4]) -> v128 {
    i32x4_add(
        i32x4_add(i32x4_dot_i16x8(x[0], y[0]), i32x4_dot_i16x8(x[1], y[1])),
        i32x4_add(i32x4_dot_i16x8(x[2], y[2]), i32x4_dot_i16x8(x[3], y[3])),
    )
}

/// The f16 at `p[k] + at` for each k < N (N ≤ 8) as f32 lanes, four per vector: lane k % 4
/// of vector k / 4 (lanes past N are 0).
///
/// # Safety
/// Every `p[k] + at .. + 2` must be readable.
#[inline(always)]
unsafe fn scale_lanes<const N: usize>(p: [*const u8; N], at: usize, k: &F16Consts) -> [v128; 2] {
    // Sign-extended, as [`f16x4_exact`] takes them.
    let h = |i: usize| {
        if i < N {
            // SAFETY: caller (only i < N is read).
            unsafe { (p[i].add(at) as *const i16).read_unaligned() as i32 }
        } else {
            0
        }
    };
    let mut out = [f32x4_splat(0.0); 2];
    unroll!(q < 2 => {
        if 4 * q < N {
            out[q] = f16x4_exact(i32x4(h(4 * q), h(4 * q + 1), h(4 * q + 2), h(4 * q + 3)), k);
        }
    });
    out
}

/// Lane c % 4 of `acc[r][c / 4]` into `out[r][c]`.
#[inline(always)]
fn store_lanes<const R: usize, const C: usize>(acc: &[[v128; 2]; R], out: &mut [[f32; C]; R]) {
    for r in 0..R {
        let mut l = [0f32; 8];
        // SAFETY: 32 bytes.
        unsafe {
            v128_store(l.as_mut_ptr() as *mut v128, acc[r][0]);
            v128_store(l.as_mut_ptr().add(4) as *mut v128, acc[r][1]);
        }
        out[r].copy_from_slice(&l[..C]);
    }
}

/// One weight row's exact block sums against four columns 4g.. (`sum(c)` for c < C, 0
/// past it) as i32 lanes, column 4g + i in lane i.
#[inline(always)]
fn block_sums<const C: usize>(g: usize, sum: impl Fn(usize) -> v128) -> v128 {
    let s = |i: usize| {
        if 4 * g + i < C {
            sum(4 * g + i)
        } else {
            i32x4_splat(0)
        }
    };
    super::gemv::reduce4([s(0), s(1), s(2), s(3)])
}

/// One block's term of four columns (lane = column): the scalar reference's f32 steps on the
/// lanes' exact block sums `sf` (`quant/legacy.rs`): q4_0 (sumi·dx)·dy, the others (dx·dy)·sumi.
#[inline(always)]
fn block_term(sf: v128, dx: v128, dy: v128, sumi_dx: bool) -> v128 {
    if sumi_dx {
        f32x4_mul(f32x4_mul(sf, dx), dy)
    } else {
        f32x4_mul(f32x4_mul(dx, dy), sf)
    }
}

macro_rules! q8_0_tile {
    ($name:ident, $xsize:expr, $sumi_dx:expr, $decode:ident) => {
        /// R×C dot products of weight rows (blocks of 32 with an f16 scale first) against q8_0
        /// columns (C ≤ 8); each weight block is decoded once for all C columns. Each block's
        /// exact integer sums of four columns meet in one vector's lanes (lane = column), then
        /// the scalar reference's f32 steps run on the lanes (`quant/legacy.rs`: q4_0
        /// (sumi·dx)·dy, q5_0 and q8_0 (dx·dy)·sumi): bit for bit the scalar `vec_dot`, and
        /// the relaxed build's tiles.
        ///
        /// # Safety
        /// Pointers address n/32 blocks.
        #[inline(never)]
        pub(super) unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            const YS: usize = 34;
            const { assert!(C <= 8) };
                let fk = f16_consts();
            let mut acc = [[f32x4_splat(0.0); 2]; R];
            for blk in 0..n / 32 {
                // SAFETY: blk < n/32, so every block read lies inside its row.
                unsafe {
                    let yb: [*const u8; C] = core::array::from_fn(|c| b[c].add(blk * YS));
                    let dy = scale_lanes(yb, 0, &fk);
                    let mut qy = [[i16x8_splat(0); 4]; C];
                    unroll!(c < C => {
                        qy[c] = ext_i8x32(yb[c].add(2));
                    });
                    unroll!(r < R => {
                        let xb = a[r].add(blk * $xsize);
                        let dx = f32x4_splat(f16_at(xb));
                        let qx: [v128; 4] = $decode(xb);
                        unroll!(g < 2 => {
                            if 4 * g < C {
                                let sf = f32x4_convert_i32x4(block_sums::<C>(g, |c| {
                                    dot32(&qx, &qy[c])
                                }));
                                let t = block_term(sf, dx, dy[g], $sumi_dx);
                                acc[r][g] = f32x4_add(acc[r][g], t);
                            }
                        });
                    });
                }
            }
            store_lanes(&acc, out);
        }
    };
}

/// The quants of the q4_0 block at `xb` (f16 d, 16 bytes of nibbles) as q − 8 in four i16x8.
///
/// # Safety
/// The 18-byte block must be readable.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) unsafe fn decode_q4_0(xb: *const u8) -> [v128; 4] {
    // SAFETY: caller.
    let (lo, hi) = nibbles(unsafe { load16(xb.add(2)) });
    let s8 = i8x16_splat(8);
    ext_pair(i8x16_sub(lo, s8), i8x16_sub(hi, s8))
}

/// The quants of the q8_0 block at `xb` (f16 d, 32 i8).
///
/// # Safety
/// The 34-byte block must be readable.
#[inline(always)]
pub(super) unsafe fn decode_q8_0(xb: *const u8) -> [v128; 4] {
    // SAFETY: caller.
    unsafe { ext_i8x32(xb.add(2)) }
}

/// The quants of the q5_0 block at `xb` (f16 d, 4 bytes of high bits, 16 bytes of nibbles) as
/// q − 16.
///
/// # Safety
/// The 22-byte block must be readable.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) unsafe fn decode_q5_0(xb: *const u8) -> [v128; 4] {
    // SAFETY: caller.
    let (qh, qs) = unsafe {
        (
            (xb.add(2) as *const [u8; 4]).read_unaligned(),
            load16(xb.add(6)),
        )
    };
    let (h0, h1) = q5_high(qh);
    let (lo, hi) = nibbles(qs);
    let s16 = i8x16_splat(16);
    ext_pair(
        i8x16_sub(v128_or(lo, h0), s16),
        i8x16_sub(v128_or(hi, h1), s16),
    )
}

/// The quants (0..15) of the q4_1 block at `xb` (f16 d, f16 m, 16 bytes of nibbles).
///
/// # Safety
/// The 20-byte block must be readable.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) unsafe fn decode_q4_1(xb: *const u8) -> [v128; 4] {
    // SAFETY: caller.
    let (lo, hi) = nibbles(unsafe { load16(xb.add(4)) });
    ext_pair(lo, hi)
}

/// The quants (0..31) of the q5_1 block at `xb` (f16 d, f16 m, 4 bytes of high bits, 16 bytes of
/// nibbles).
///
/// # Safety
/// The 24-byte block must be readable.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) unsafe fn decode_q5_1(xb: *const u8) -> [v128; 4] {
    // SAFETY: caller.
    let (qh, qs) = unsafe {
        (
            (xb.add(4) as *const [u8; 4]).read_unaligned(),
            load16(xb.add(8)),
        )
    };
    let (h0, h1) = q5_high(qh);
    let (lo, hi) = nibbles(qs);
    ext_pair(v128_or(lo, h0), v128_or(hi, h1))
}

#[cfg(not(target_feature = "relaxed-simd"))]
q8_0_tile!(tile_q4_0, 18, true, decode_q4_0);
#[cfg(not(target_feature = "relaxed-simd"))]
q8_0_tile!(tile_q5_0, 22, false, decode_q5_0);
q8_0_tile!(tile_q8_0, 34, false, decode_q8_0);

#[cfg(not(target_feature = "relaxed-simd"))]
macro_rules! q8_1_tile {
    ($name:ident, $xsize:expr, $decode:ident) => {
        /// R×C dot products of weight rows with a min (x = d·q + m: f16 d, f16 m first) against
        /// q8_1 columns (f16 d, f16 s = d·Σq, 32 i8; C ≤ 8): per block and column (lane)
        /// (dx·dy)·Σ q·y, and m·s summed apart and added at the end (as llama.cpp's CPU dot),
        /// the relaxed build's `min_tile` bit for bit.
        ///
        /// # Safety
        /// Pointers address n/32 blocks.
        #[inline(never)]
        pub(super) unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            const YS: usize = 36;
            const { assert!(C <= 8) };
                let fk = f16_consts();
            let mut acc = [[f32x4_splat(0.0); 2]; R];
            let mut summ = [[f32x4_splat(0.0); 2]; R];
            for blk in 0..n / 32 {
                // SAFETY: blk < n/32, so every block read lies inside its row.
                unsafe {
                    let yb: [*const u8; C] = core::array::from_fn(|c| b[c].add(blk * YS));
                    let dy = scale_lanes(yb, 0, &fk);
                    let sy = scale_lanes(yb, 2, &fk);
                    let mut qy = [[i16x8_splat(0); 4]; C];
                    unroll!(c < C => {
                        qy[c] = ext_i8x32(yb[c].add(4));
                    });
                    unroll!(r < R => {
                        let xb = a[r].add(blk * $xsize);
                        let dx = f32x4_splat(f16_at(xb));
                        let mx = f32x4_splat(f16_at(xb.add(2)));
                        let qx: [v128; 4] = $decode(xb);
                        unroll!(g < 2 => {
                            if 4 * g < C {
                                let sf = f32x4_convert_i32x4(block_sums::<C>(g, |c| {
                                    dot32(&qx, &qy[c])
                                }));
                                let t = block_term(sf, dx, dy[g], false);
                                acc[r][g] = f32x4_add(acc[r][g], t);
                                summ[r][g] = f32x4_add(summ[r][g], f32x4_mul(mx, sy[g]));
                            }
                        });
                    });
                }
            }
            for r in 0..R {
                for g in 0..2 {
                    acc[r][g] = f32x4_add(acc[r][g], summ[r][g]);
                }
            }
            store_lanes(&acc, out);
        }
    };
}

#[cfg(not(target_feature = "relaxed-simd"))]
q8_1_tile!(tile_q4_1, 20, decode_q4_1);
#[cfg(not(target_feature = "relaxed-simd"))]
q8_1_tile!(tile_q5_1, 24, decode_q5_1);

#[cfg(target_feature = "relaxed-simd")]
use relaxed::{tile_q4_0, tile_q4_1, tile_q4_k, tile_q5_0, tile_q5_1, tile_q5_k, tile_q6_k};

/// The 4- and 5-bit 32-element-block tiles of the relaxed-SIMD build: the weight quants before
/// their offset (0..15 or 0..31) are a valid i7 operand of `i32x4.relaxed_dot_i8x16_i7x16_add_s`
/// (one `vpdpbusd` on x86 with AVX-VNNI), where every engine must give the exact sums: two of them
/// per weight row × column block, started from the column's −off·Σ y, instead of the SIMD128
/// build's 4 multiply-adds plus its sign extensions. The lanes of four columns' sums are then
/// added into one vector of whole block sums (exact), so the f32 steps run once per four
/// columns, on lanes = columns: the same integers and f32 steps as the SIMD128 build's tiles
/// (`q8_0_tile`, `q8_1_tile`), so both builds give the same bits, q4_0/q5_0 those of the scalar
/// `vec_dot` (and of the GEMVs). (npm `builds-parity.test.mjs` checks SmolLM2's logits.)
/// q8_0 weights keep the i16 dots: |x| as the i7 operand with the sign moved onto the column
/// (`i8x16.relaxed_laneselect`) measured 40 % slower in Node 20's V8. The k-quant tiles at the end
/// need no permutation: both builds sum each super-block whole (exact) before any f32 step.
#[cfg(target_feature = "relaxed-simd")]
mod relaxed {
    use super::super::gemv::relaxed::{consts, u4, u5};
    use super::super::{dot2_add, split_dots};
    use super::*;

    /// The f16 at `p[k] + at` for each k < N as f32 splats: one vector conversion per 4 (the
    /// scalar [`f16_to_f32`] takes ~10 instructions per scale, as much as a row × column dot).
    ///
    /// # Safety
    /// Every `p[k] + at .. + 2` must be readable.
    #[inline(always)]
    unsafe fn scales<const N: usize>(p: [*const u8; N], at: usize, k: &F16Consts) -> [v128; N] {
        let mut out = [f32x4_splat(0.0); N];
        // Sign-extended, as [`f16x4_exact`] takes them.
        let h = |i: usize| {
            if i < N {
                // SAFETY: caller (only i < N is read).
                unsafe { (p[i].add(at) as *const i16).read_unaligned() as i32 }
            } else {
                0
            }
        };
        unroll!(q < N.div_ceil(4) => {
            let v = f16x4_exact(i32x4(h(4 * q), h(4 * q + 1), h(4 * q + 2), h(4 * q + 3)), k);
            if 4 * q < N {
                out[4 * q] = i32x4_shuffle::<0, 0, 0, 0>(v, v);
            }
            if 4 * q + 1 < N {
                out[4 * q + 1] = i32x4_shuffle::<1, 1, 1, 1>(v, v);
            }
            if 4 * q + 2 < N {
                out[4 * q + 2] = i32x4_shuffle::<2, 2, 2, 2>(v, v);
            }
            if 4 * q + 3 < N {
                out[4 * q + 3] = i32x4_shuffle::<3, 3, 3, 3>(v, v);
            }
        });
        out
    }

    /// `acc` + Σ u·y over both halves of a block as i32x4 (u in 0..31, the i7 operand; y any
    /// i8): lane l sums bytes 4l..4l + 4 of each half. `i32x4.relaxed_dot_i8x16_i7x16_add_s` is one `vpdpbusd` in
    /// V8 on CPUs with AVX-VNNI, else `pmaddubsw` + `pmaddwd` + `paddd` (what the i16 dot, its
    /// widening and the add took). Exact on every engine: |u·y| ≤ 31·128, no i16 saturation.
    /// A relaxed tile's two instantiations, split dots (`split`) and dot-adds (`fused`).
    type TileFn<const R: usize, const C: usize> =
        unsafe fn(usize, [*const u8; R], [*const u8; C], &mut [[f32; C]; R]);

    /// Runs the instantiation of the path `split_dots` chose.
    ///
    /// # Safety
    /// As the tile's.
    #[inline(always)]
    unsafe fn on_dot_path<const R: usize, const C: usize>(
        split: TileFn<R, C>,
        fused: TileFn<R, C>,
        n: usize,
        a: [*const u8; R],
        b: [*const u8; C],
        out: &mut [[f32; C]; R],
    ) {
        let f = if split_dots() { split } else { fused };
        // SAFETY: forwarded.
        unsafe { f(n, a, b, out) }
    }

    /// `S`: split dots (`wasm32::dot2_add`, the tile's choice: `split_dots`).
    #[inline(always)]
    fn dot32<const S: bool>(y: &[v128; 2], u: &[v128; 2], acc: v128, ones: v128) -> v128 {
        dot2_add::<S>(y[0], u[0], y[1], u[1], acc, ones)
    }

    /// Quants of column block `yb`, at `qat`.
    ///
    /// # Safety
    /// The block must be readable.
    #[inline(always)]
    unsafe fn column(yb: *const u8, qat: usize) -> [v128; 2] {
        // SAFETY: caller; 32 quants at `qat`.
        unsafe { [load16(yb.add(qat)), load16(yb.add(qat + 16))] }
    }

    macro_rules! offset_tile {
        ($name:ident, $xsize:expr, $off:expr, $sumi_dx:expr, |$xb:ident, $k:ident| $decode:expr) => {
            /// R×C dot products of weight rows (f16 d, then quants u − off, u in 0..32) against
            /// q8_0 columns (C ≤ 8): each block's exact Σ (u − off)·y = Σ u·y − off·Σ y of four
            /// columns in one vector's lanes, then the scalar reference's f32 steps on the
            /// lanes (`quant/legacy.rs`: q4_0 (sumi·dx)·dy, q5_0 (dx·dy)·sumi, added to the
            /// column's sum): bit for bit the scalar `vec_dot` and this build's GEMV.
            ///
            /// # Safety
            /// Pointers address n/32 blocks.
            #[inline(always)]
            pub(super) unsafe fn $name<const R: usize, const C: usize>(
                n: usize,
                a: [*const u8; R],
                b: [*const u8; C],
                out: &mut [[f32; C]; R],
            ) {
                // SAFETY: forwarded.
                unsafe { on_dot_path(imp::<R, C, true>, imp::<R, C, false>, n, a, b, out) }

            /// The tile; `S`: split dots.
            ///
            /// # Safety
            /// As the tile's.
            #[inline(never)]
            unsafe fn imp<const R: usize, const C: usize, const S: bool>(
                n: usize,
                a: [*const u8; R],
                b: [*const u8; C],
                out: &mut [[f32; C]; R],
            ) {
                const YS: usize = 34;
                const { assert!(C <= 8) };
                let fk = f16_consts();
                let $k = &consts();
                let mut acc = [[f32x4_splat(0.0); 2]; R];
                let off = i8x16_splat($off);
                for blk in 0..n / 32 {
                    // SAFETY: blk < n/32, so every block read lies inside its row.
                    unsafe {
                        let yb: [*const u8; C] = core::array::from_fn(|c| b[c].add(blk * YS));
                        let xbs: [*const u8; R] = core::array::from_fn(|r| a[r].add(blk * $xsize));
                        let dy = scale_lanes(yb, 0, &fk);
                        let dxs = scales(xbs, 0, &fk);
                        let mut qy = [[i8x16_splat(0); 2]; C];
                        // −off·Σ y per lane: the dot-adds below start from it.
                        let mut base = [i32x4_splat(0); C];
                        unroll!(c < C => {
                            let q = column(yb[c], 2);
                            qy[c] = q;
                            base[c] = i32x4_neg(dot32::<S>(&q, &[off, off], i32x4_splat(0), $k.ones));
                        });
                        unroll!(r < R => {
                            let $xb = xbs[r];
                            let dx = dxs[r];
                            let u: [v128; 2] = $decode;
                            unroll!(g < 2 => {
                                if 4 * g < C {
                                    let sf = f32x4_convert_i32x4(block_sums::<C>(g, |c| {
                                        dot32::<S>(&qy[c], &u, base[c], $k.ones)
                                    }));
                                    let t = block_term(sf, dx, dy[g], $sumi_dx);
                                    acc[r][g] = f32x4_add(acc[r][g], t);
                                }
                            });
                        });
                    }
                }
                store_lanes(&acc, out);
            }
            }
        };
    }

    offset_tile!(tile_q4_0, 18, 8, true, |xb, k| u4(xb.add(2), k));
    offset_tile!(tile_q5_0, 22, 16, false, |xb, k| u5(
        xb.add(2),
        xb.add(6),
        k
    ));

    macro_rules! min_tile {
        ($name:ident, $xsize:expr, |$xb:ident, $k:ident| $decode:expr) => {
            /// R×C dot products of weight rows with a min (f16 d, f16 m, quants u in 0..32)
            /// against q8_1 columns (C ≤ 8), as [`offset_tile`]'s, except that the min terms
            /// mx·sy are summed apart and added at the end, as llama.cpp's CPU dot does: per
            /// block and lane, the scalar's (dx·dy)·sumi + mx·sy moved SmolLM2's last-position
            /// logits from llama.cpp's by up to 1.48 (KL 7e-3; the tests' bound is 1.0), apart
            /// 0.88 (KL 2e-3; the partial-lane tiles before: 0.61, 2.6e-3).
            ///
            /// # Safety
            /// Pointers address n/32 blocks.
            #[inline(always)]
            pub(super) unsafe fn $name<const R: usize, const C: usize>(
                n: usize,
                a: [*const u8; R],
                b: [*const u8; C],
                out: &mut [[f32; C]; R],
            ) {
                // SAFETY: forwarded.
                unsafe { on_dot_path(imp::<R, C, true>, imp::<R, C, false>, n, a, b, out) }

            /// The tile; `S`: split dots.
            ///
            /// # Safety
            /// As the tile's.
            #[inline(never)]
            unsafe fn imp<const R: usize, const C: usize, const S: bool>(
                n: usize,
                a: [*const u8; R],
                b: [*const u8; C],
                out: &mut [[f32; C]; R],
            ) {
                const YS: usize = 36;
                const { assert!(C <= 8) };
                let fk = f16_consts();
                let $k = &consts();
                let mut acc = [[f32x4_splat(0.0); 2]; R];
                let mut summ = [[f32x4_splat(0.0); 2]; R];
                for blk in 0..n / 32 {
                    // SAFETY: blk < n/32, so every block read lies inside its row.
                    unsafe {
                        let yb: [*const u8; C] = core::array::from_fn(|c| b[c].add(blk * YS));
                        let xbs: [*const u8; R] = core::array::from_fn(|r| a[r].add(blk * $xsize));
                        let dy = scale_lanes(yb, 0, &fk);
                        let sy = scale_lanes(yb, 2, &fk);
                        let dxs = scales(xbs, 0, &fk);
                        let mxs = scales(xbs, 2, &fk);
                        let mut qy = [[i8x16_splat(0); 2]; C];
                        unroll!(c < C => {
                            qy[c] = column(yb[c], 4);
                        });
                        unroll!(r < R => {
                            let $xb = xbs[r];
                            let (dx, mx) = (dxs[r], mxs[r]);
                            let u: [v128; 2] = $decode;
                            unroll!(g < 2 => {
                                if 4 * g < C {
                                    let sf = f32x4_convert_i32x4(block_sums::<C>(g, |c| {
                                        dot32::<S>(&qy[c], &u, i32x4_splat(0), $k.ones)
                                    }));
                                    let t = block_term(sf, dx, dy[g], false);
                                    acc[r][g] = f32x4_add(acc[r][g], t);
                                    summ[r][g] = f32x4_add(summ[r][g], f32x4_mul(mx, sy[g]));
                                }
                            });
                        });
                    }
                }
                for r in 0..R {
                    for g in 0..2 {
                        acc[r][g] = f32x4_add(acc[r][g], summ[r][g]);
                    }
                }
                store_lanes(&acc, out);
            }
            }
        };
    }

    min_tile!(tile_q4_1, 20, |xb, k| u4(xb.add(4), k));
    min_tile!(tile_q5_1, 24, |xb, k| u5(xb.add(4), xb.add(8), k));

    /// Scale, quants (i8) and bsums of super-block `blk` of the C q8_K columns.
    ///
    /// # Safety
    /// Every column holds more than `blk` super-blocks.
    #[inline(always)]
    unsafe fn q8k_columns<const C: usize>(
        b: [*const u8; C],
        blk: usize,
        dy: &mut [f32; C],
        qy: &mut [[v128; 16]; C],
        bs: &mut [[v128; 2]; C],
    ) {
        const YS: usize = 292;
        // SAFETY: caller; offsets inside the 292-byte block.
        unsafe {
            unroll!(c < C => {
                let yb = b[c].add(blk * YS);
                dy[c] = (yb as *const f32).read_unaligned();
                for (i, q) in qy[c].iter_mut().enumerate() {
                    *q = load16(yb.add(4 + 16 * i));
                }
                bs[c] = [load16(yb.add(260)), load16(yb.add(276))];
            });
        }
    }

    /// q4_K sub-blocks 2g, 2g+1 as the SIMD128 build's `q4_k_quants`.
    ///
    /// # Safety
    /// The 144-byte block must be readable; g < 4.
    #[inline(always)]
    unsafe fn q4_k_quants(xb: *const u8, g: usize) -> [v128; 4] {
        // SAFETY: caller; qs at 16..144.
        let (lo0, hi0) = nibbles(unsafe { load16(xb.add(16 + 32 * g)) });
        // SAFETY: as above.
        let (lo1, hi1) = nibbles(unsafe { load16(xb.add(32 + 32 * g)) });
        [lo0, lo1, hi0, hi1]
    }

    /// q5_K sub-blocks 2g, 2g+1 as the SIMD128 build's `q5_k_quants`.
    ///
    /// # Safety
    /// The 176-byte block must be readable; g < 4.
    #[inline(always)]
    unsafe fn q5_k_quants(xb: *const u8, g: usize) -> [v128; 4] {
        // SAFETY: caller; qh at 16..48, qs at 48..176.
        let (qh0, qh1, q0, q1) = unsafe {
            (
                load16(xb.add(16)),
                load16(xb.add(32)),
                load16(xb.add(48 + 32 * g)),
                load16(xb.add(64 + 32 * g)),
            )
        };
        let one = u8x16_splat(1);
        let hb = |v: v128, s: u32| u8x16_shl(v128_and(u8x16_shr(v, s), one), 4);
        let (lo0, hi0) = nibbles(q0);
        let (lo1, hi1) = nibbles(q1);
        let g = g as u32;
        [
            v128_or(lo0, hb(qh0, 2 * g)),
            v128_or(lo1, hb(qh1, 2 * g)),
            v128_or(hi0, hb(qh0, 2 * g + 1)),
            v128_or(hi1, hb(qh1, 2 * g + 1)),
        ]
    }

    macro_rules! k4_tile {
        ($name:ident, $xsize:expr, $quants:ident) => {
            /// R×C dot products of q4_K / q5_K rows against q8_K columns, the results of the
            /// SIMD128 build's tile (the scalar `vec_dot`'s bit for bit): the sub-block dots
            /// Σ u·y as relaxed i8 × i7 pair sums (u ≤ 31: two halves ≤ 15872 in i16), scaled
            /// and widened by one `i32x4.dot_i16x8_s`; each super-block's exact sums then give
            /// the scalar (d·dy)·isum − (dmin·dy)·summ.
            ///
            /// # Safety
            /// Pointers address n/256 super-blocks.
            #[inline(never)]
            pub(super) unsafe fn $name<const R: usize, const C: usize>(
                n: usize,
                a: [*const u8; R],
                b: [*const u8; C],
                out: &mut [[f32; C]; R],
            ) {
                let mut acc = [[0f32; C]; R];
                let mut qy = [[i8x16_splat(0); 16]; C];
                let mut dy = [0f32; C];
                let mut bs = [[i16x8_splat(0); 2]; C];
                for blk in 0..n / 256 {
                    // SAFETY: blk < n/256: every read lies inside its super-block.
                    unsafe {
                        q8k_columns::<C>(b, blk, &mut dy, &mut qy, &mut bs);
                        unroll!(r < R => {
                            let xb = a[r].add(blk * $xsize);
                            let d = f16_at(xb);
                            let dmin = f16_at(xb.add(2));
                            let (sc, mn) = scales_mins_k4(&*(xb.add(4) as *const [u8; 12]));
                            let mins = [
                                i16x8(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3]),
                                i16x8(mn[4], mn[4], mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]),
                            ];
                            let mut isum = [i32x4_splat(0); C];
                            for g in 0..4 {
                                let [lo0, lo1, hi0, hi1] = $quants(xb, g);
                                let sl = i16x8_splat(sc[2 * g]);
                                let sh = i16x8_splat(sc[2 * g + 1]);
                                unroll!(c < C => {
                                    let q = &qy[c];
                                    let dl = i16x8_add(
                                        i16x8_relaxed_dot_i8x16_i7x16(q[4 * g], lo0),
                                        i16x8_relaxed_dot_i8x16_i7x16(q[4 * g + 1], lo1),
                                    );
                                    let dh = i16x8_add(
                                        i16x8_relaxed_dot_i8x16_i7x16(q[4 * g + 2], hi0),
                                        i16x8_relaxed_dot_i8x16_i7x16(q[4 * g + 3], hi1),
                                    );
                                    let s = i32x4_add(
                                        i32x4_dot_i16x8(dl, sl),
                                        i32x4_dot_i16x8(dh, sh),
                                    );
                                    isum[c] = i32x4_add(isum[c], s);
                                });
                            }
                            unroll!(c < C => {
                                let (isum, summ) = k4_sums(isum[c], bs[c], mins);
                                acc[r][c] += d * dy[c] * isum as f32 - dmin * dy[c] * summ as f32;
                            });
                        });
                    }
                }
                *out = acc;
            }
        };
    }

    k4_tile!(tile_q4_k, 144, q4_k_quants);
    k4_tile!(tile_q5_k, 176, q5_k_quants);

    /// R×C dot products of q6_K rows against q8_K columns, the results of the SIMD128 build's
    /// tile (the scalar `vec_dot`'s bit for bit): each 16-element group's Σ q·y as relaxed i8 ×
    /// i7 pair sums (q = 0..63 before its −32: pairs ≤ 16128), scaled and widened by one
    /// `i32x4.dot_i16x8_s`; −32·Σ sc·y taken out per super-block as 32·Σ_g sc_g·bsum_g, and the
    /// super-block's exact sum then gives the scalar (d·dy)·isum.
    ///
    /// # Safety
    /// Pointers address n/256 super-blocks.
    #[inline(never)]
    pub(super) unsafe fn tile_q6_k<const R: usize, const C: usize>(
        n: usize,
        a: [*const u8; R],
        b: [*const u8; C],
        out: &mut [[f32; C]; R],
    ) {
        const XS: usize = 210;
        let mut acc = [[0f32; C]; R];
        let mut qy = [[i8x16_splat(0); 16]; C];
        let mut dy = [0f32; C];
        let mut bs = [[i16x8_splat(0); 2]; C];
        let q6k = q6_consts();
        for blk in 0..n / 256 {
            // SAFETY: blk < n/256: every read lies inside its super-block.
            unsafe {
                q8k_columns::<C>(b, blk, &mut dy, &mut qy, &mut bs);
                unroll!(r < R => {
                    let xb = a[r].add(blk * XS);
                    let scb = load16(xb.add(192));
                    let sc16 = [i16x8_extend_low_i8x16(scb), i16x8_extend_high_i8x16(scb)];
                    let sc = &*(xb.add(192) as *const [i8; 16]);
                    let d = f16_at(xb.add(208));
                    let mut isum = [i32x4_splat(0); C];
                    for half in 0..2 {
                        for cc in 0..2 {
                            let ql_a = load16(xb.add(64 * half + 16 * cc));
                            let ql_b = load16(xb.add(64 * half + 32 + 16 * cc));
                            let qh = load16(xb.add(128 + 32 * half + 16 * cc));
                            let vals = q6_quants(ql_a, ql_b, qh, &q6k);
                            for (k, v) in vals.into_iter().enumerate() {
                                let g = 8 * half + 2 * k + cc;
                                let s = i16x8_splat(sc[g] as i16);
                                unroll!(c < C => {
                                    let d16 = i16x8_relaxed_dot_i8x16_i7x16(qy[c][g], v);
                                    isum[c] = i32x4_add(isum[c], i32x4_dot_i16x8(d16, s));
                                });
                            }
                        }
                    }
                    unroll!(c < C => {
                        // 32·Σ_g sc_g·bsum_g (|Σ| < 2^23): the column's bsums are Σ of its
                        // quants per group (this backend's conversion).
                        let off = i32x4_add(
                            i32x4_dot_i16x8(sc16[0], bs[c][0]),
                            i32x4_dot_i16x8(sc16[1], bs[c][1]),
                        );
                        let isum = hsum_i32(i32x4_sub(isum[c], i32x4_shl(off, 5)));
                        acc[r][c] += d * dy[c] * isum as f32;
                    });
                });
            }
        }
        *out = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// k-quants × q8_K (256-element super-blocks; q8_K: f32 d, 256 i8, 16 i16 bsums)

#[cfg(not(target_feature = "relaxed-simd"))]
/// Scale, quants sign-extended to i16 (once for all R rows) and bsums of super-block `blk` of
/// the C q8_K columns.
///
/// # Safety
/// Every column holds more than `blk` super-blocks.
#[inline(always)]
unsafe fn q8k_columns<const C: usize>(
    b: [*const u8; C],
    blk: usize,
    dy: &mut [f32; C],
    qy: &mut [[v128; 32]; C],
    bs: &mut [[v128; 2]; C],
) {
    const YS: usize = 292;
    // SAFETY: caller; offsets inside the 292-byte block.
    unsafe {
        unroll!(c < C => {
            let yb = b[c].add(blk * YS);
            dy[c] = (yb as *const f32).read_unaligned();
            for g in 0..8 {
                let e = ext_i8x32(yb.add(4 + 32 * g));
                qy[c][4 * g..4 * g + 4].copy_from_slice(&e);
            }
            bs[c] = [load16(yb.add(260)), load16(yb.add(276))];
        });
    }
}

#[cfg(not(target_feature = "relaxed-simd"))]
/// Four i16x8 of the column quants starting at element 8·`at`.
#[inline(always)]
fn y4(q: &[v128; 32], at: usize) -> [v128; 4] {
    [q[at], q[at + 1], q[at + 2], q[at + 3]]
}

#[cfg(not(target_feature = "relaxed-simd"))]
/// q4_K sub-blocks 2g, 2g+1 of the block at `xb`: (low nibbles of bytes 32g..32g+16 and
/// 32g+16..32g+32, their high nibbles), 0..15.
///
/// # Safety
/// The 144-byte block must be readable; g < 4.
#[inline(always)]
unsafe fn q4_k_quants(xb: *const u8, g: usize) -> [v128; 4] {
    // SAFETY: caller; qs at 16..144.
    let (lo0, hi0) = nibbles(unsafe { load16(xb.add(16 + 32 * g)) });
    // SAFETY: as above.
    let (lo1, hi1) = nibbles(unsafe { load16(xb.add(32 + 32 * g)) });
    [lo0, lo1, hi0, hi1]
}

#[cfg(not(target_feature = "relaxed-simd"))]
/// q5_K (176 bytes: f16 d, f16 dmin, 12 bytes of scales, 32 bytes of high bits, 128 bytes of
/// nibbles) sub-blocks 2g, 2g+1 as [`q4_k_quants`], plus bit 2g / 2g+1 of `qh` × 16: 0..31.
///
/// # Safety
/// The 176-byte block must be readable; g < 4.
#[inline(always)]
unsafe fn q5_k_quants(xb: *const u8, g: usize) -> [v128; 4] {
    // SAFETY: caller; qh at 16..48, qs at 48..176.
    let (qh0, qh1, q0, q1) = unsafe {
        (
            load16(xb.add(16)),
            load16(xb.add(32)),
            load16(xb.add(48 + 32 * g)),
            load16(xb.add(64 + 32 * g)),
        )
    };
    let one = u8x16_splat(1);
    let hb = |v: v128, s: u32| u8x16_shl(v128_and(u8x16_shr(v, s), one), 4);
    let (lo0, hi0) = nibbles(q0);
    let (lo1, hi1) = nibbles(q1);
    let g = g as u32;
    [
        v128_or(lo0, hb(qh0, 2 * g)),
        v128_or(lo1, hb(qh1, 2 * g)),
        v128_or(hi0, hb(qh0, 2 * g + 1)),
        v128_or(hi1, hb(qh1, 2 * g + 1)),
    ]
}

#[cfg(not(target_feature = "relaxed-simd"))]
macro_rules! k4_tile {
    ($name:ident, $xsize:expr, $quants:ident) => {
        /// R×C dot products of q4_K / q5_K rows (f16 d, f16 dmin, 12 bytes of 6-bit
        /// scales/mins, then the quants) against q8_K columns: x = d·sc_j·q − dmin·m_j, so
        /// dot = d·dy·Σ_j Σ (sc_j·q)·y − dmin·dy·Σ_j m_j·bsum_j. sc_j·q is formed in i16
        /// (≤ 63·31) once per row; Σ over a super-block stays below 2^30 in i32 and is summed
        /// whole, then the scalar reference's f32 terms are added in its order: every result is
        /// the scalar `vec_dot`'s bit for bit, in this build and the relaxed one.
        ///
        /// # Safety
        /// Pointers address n/256 super-blocks.
        #[inline(never)]
        pub(super) unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            let mut acc = [[0f32; C]; R];
            // The columns' quants (C × 512 bytes, read back from the shadow stack: too many to
            // stay in registers).
            let mut qy = [[i16x8_splat(0); 32]; C];
            let mut dy = [0f32; C];
            let mut bs = [[i16x8_splat(0); 2]; C];
            for blk in 0..n / 256 {
                // SAFETY: blk < n/256: every read lies inside its super-block.
                unsafe {
                    q8k_columns::<C>(b, blk, &mut dy, &mut qy, &mut bs);
                    unroll!(r < R => {
                        let xb = a[r].add(blk * $xsize);
                        let d = f16_at(xb);
                        let dmin = f16_at(xb.add(2));
                        let (sc, mn) = scales_mins_k4(&*(xb.add(4) as *const [u8; 12]));
                        // Each min covers two 16-element bsums.
                        let mins = [
                            i16x8(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3]),
                            i16x8(mn[4], mn[4], mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]),
                        ];
                        let mut isum = [i32x4_splat(0); C];
                        for g in 0..4 {
                            let [lo0, lo1, hi0, hi1] = $quants(xb, g);
                            // Sub-blocks 2g (low nibbles) and 2g+1 (high), scaled in i16.
                            let sl = i16x8_splat(sc[2 * g]);
                            let sh = i16x8_splat(sc[2 * g + 1]);
                            let xl = ext_pair(lo0, lo1).map(|v| i16x8_mul(v, sl));
                            let xh = ext_pair(hi0, hi1).map(|v| i16x8_mul(v, sh));
                            unroll!(c < C => {
                                let s = i32x4_add(
                                    dot32(&xl, &y4(&qy[c], 8 * g)),
                                    dot32(&xh, &y4(&qy[c], 8 * g + 4)),
                                );
                                isum[c] = i32x4_add(isum[c], s);
                            });
                        }
                        unroll!(c < C => {
                            let (isum, summ) = k4_sums(isum[c], bs[c], mins);
                            acc[r][c] += d * dy[c] * isum as f32 - dmin * dy[c] * summ as f32;
                        });
                    });
                }
            }
            *out = acc;
        }
    };
}

#[cfg(not(target_feature = "relaxed-simd"))]
k4_tile!(tile_q4_k, 144, q4_k_quants);
#[cfg(not(target_feature = "relaxed-simd"))]
k4_tile!(tile_q5_k, 176, q5_k_quants);

#[cfg(not(target_feature = "relaxed-simd"))]
/// R×C dot products of q6_K rows (210 bytes: 128 bytes of low nibbles `ql`, 64 bytes of high
/// 2-bit pairs `qh`, 16 i8 scales, f16 d; x = d·sc·(q − 32)) against q8_K columns.
/// sc·(q − 32) is formed in i16 (≤ 128·32) once per row; Σ per super-block < 2^28, summed whole
/// (exact) and then the scalar reference's (d·dy)·isum added in its order: every result is the
/// scalar `vec_dot`'s bit for bit, in this build and the relaxed one (whose tile sums the same
/// integers its own way).
///
/// # Safety
/// Pointers address n/256 super-blocks.
#[inline(never)]
pub(super) unsafe fn tile_q6_k<const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    const XS: usize = 210;
    let mut acc = [[0f32; C]; R];
    let mut qy = [[i16x8_splat(0); 32]; C];
    let mut dy = [0f32; C];
    let mut bs = [[i16x8_splat(0); 2]; C];
    let q6k = q6_consts();
    let s32 = i8x16_splat(32);
    for blk in 0..n / 256 {
        // SAFETY: blk < n/256: every read lies inside its super-block.
        unsafe {
            q8k_columns::<C>(b, blk, &mut dy, &mut qy, &mut bs);
            unroll!(r < R => {
                let xb = a[r].add(blk * XS);
                let sc = &*(xb.add(192) as *const [i8; 16]);
                let d = f16_at(xb.add(208));
                let mut isum = [i32x4_splat(0); C];
                for half in 0..2 {
                    for cc in 0..2 {
                        // Elements 128·half + 32k + 16cc + (0..16), k = 0..4.
                        let ql_a = load16(xb.add(64 * half + 16 * cc));
                        let ql_b = load16(xb.add(64 * half + 32 + 16 * cc));
                        let qh = load16(xb.add(128 + 32 * half + 16 * cc));
                        let vals = q6_quants(ql_a, ql_b, qh, &q6k);
                        for (k, v) in vals.into_iter().enumerate() {
                            let e = 128 * half + 32 * k + 16 * cc;
                            let s = i16x8_splat(sc[e / 16] as i16);
                            let v = i8x16_sub(v, s32);
                            let x0 = i16x8_mul(i16x8_extend_low_i8x16(v), s);
                            let x1 = i16x8_mul(i16x8_extend_high_i8x16(v), s);
                            unroll!(c < C => {
                                let p = i32x4_add(
                                    i32x4_dot_i16x8(x0, qy[c][e / 8]),
                                    i32x4_dot_i16x8(x1, qy[c][e / 8 + 1]),
                                );
                                isum[c] = i32x4_add(isum[c], p);
                            });
                        }
                    }
                }
                unroll!(c < C => {
                    acc[r][c] += d * dy[c] * hsum_i32(isum[c]) as f32;
                });
            });
        }
    }
    *out = acc;
}

/// A q4_K / q5_K super-block's exact (isum, summ) of one row and column from the lanes of its
/// scaled dots and the column's bsums against the duplicated mins (Σ_j m_j·bsum_j).
#[inline(always)]
fn k4_sums(isum: v128, bs: [v128; 2], mins: [v128; 2]) -> (i32, i32) {
    let msum = i32x4_add(
        i32x4_dot_i16x8(bs[0], mins[0]),
        i32x4_dot_i16x8(bs[1], mins[1]),
    );
    (hsum_i32(isum), hsum_i32(msum))
}

/// 6-bit scales and mins of q4_K / q5_K sub-blocks (ggml's get_scale_min_k4), as i16.
#[inline(always)]
fn scales_mins_k4(q: &[u8; 12]) -> ([i16; 8], [i16; 8]) {
    let (mut sc, mut m) = ([0i16; 8], [0i16; 8]);
    for j in 0..8 {
        let (s, mm) = if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            (
                (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
                (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
            )
        };
        sc[j] = s as i16;
        m[j] = mm as i16;
    }
    (sc, m)
}
