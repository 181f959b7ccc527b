//! aarch64 register tiles for mul_mat: NEON, plus SDOT (`dotprod`) and SMMLA (`i8mm`) paths
//! detected at run time ([`Isa`], [`best`]).
//!
//! Same design as `arch/x86/tiles.rs`: an R×C tile computes R weight rows against C src1
//! columns; every weight block is decoded once for all C columns and every column block loaded
//! once for all R rows. aarch64 has 32 vector registers: the 32-element types without a min run
//! 4×4 (16 f32 sums, 8 registers of column quants, 2 of decoded row), the min types and the
//! k-quants 2×4 (their per-row extra terms and the k-quants' 4-register sub-block groups need
//! the room); floats use the shared 4×3 (24 accumulator registers: two f32x4 per dot).
//!
//! Operation counts per 32-element block and (row, column) pair, after decoding (decoding is
//! shared by the tile's C columns): NEON 8 (smull/smull2/sadalp ×2) + addv + scvtf + 2–4 scalar
//! f32; SDOT 2 + the same 4–6; SMMLA 1 (a quarter of 4 for the pair of pairs) + ~1.5 vector f32
//! plus the 8-byte interleaving (zip1/zip2, 2 per row and column per tile). Shapes and paths
//! were chosen by these counts and register budgets: no aarch64 hardware was at hand (qemu
//! timings mean nothing), so none of it is measured.
//!
//! The 8-bit dots come in three kinds, all exact in i32, so every path gives the scalar
//! reference's integer block sums; the f32 steps per block are the reference's too (a block's
//! lanes are summed in integers first), so the quantized tiles are bit-identical to the scalar
//! `vec_dot` (and to the NEON vec dots, which LLM results were checked with before the tiles):
//! - NEON (every aarch64): `smull`/`smull2` + `sadalp`, 4 instructions per 16 byte pairs;
//! - SDOT (`dotprod`, Armv8.2+, e.g. Apple M1+, Neoverse N1+): 1 instruction per 16 pairs;
//! - SMMLA (`i8mm`, Armv8.6+, e.g. Apple M2+, Neoverse V1/N2+): a 2×2 block of 8-pair dots per
//!   instruction, so a 32-element block of a row pair × column pair is 4 instructions instead
//!   of SDOT's 8, and one set of vector f32 steps serves the 4 results (32-element types only; the
//!   k-quants' per-sub-block scales keep them on SDOT). Every tile shape runs it (an odd row or
//!   column paired with zeros), so results never depend on the tile shape.
//!
//! So a (row, column) result has the same bits in every tile shape and path: mul_mat gives the
//! same bits on any thread count (chunks cut rows into different tiles) and any aarch64 CPU.
//!
//! `vdotq_s32`/`vmmlaq_s32` are unstable intrinsics, so SDOT/SMMLA are emitted with `asm!` inside
//! functions compiled with the feature enabled, and only called after the run-time check.

use core::arch::aarch64::*;
use core::arch::asm;
use std::sync::OnceLock;

use super::quants::q5_high_masks;
use crate::backend::cpu::arch::Tiled;
use crate::quant::k_quants::scales_mins_k4;

/// An 8-bit dot instruction set of the quantized tiles.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Isa {
    /// SMMLA 2×2 blocks for the 32-element types (and SDOT for the rest).
    I8mm,
    /// SDOT.
    Dotprod,
    /// Widening multiplies and pairwise adds (every aarch64 CPU).
    Neon,
}

impl Isa {
    /// Every path, fastest first.
    pub const ALL: [Isa; 3] = [Isa::I8mm, Isa::Dotprod, Isa::Neon];

    /// Whether this CPU can run the path.
    pub fn supported(self) -> bool {
        match self {
            Isa::I8mm => {
                std::arch::is_aarch64_feature_detected!("i8mm")
                    && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            Isa::Dotprod => std::arch::is_aarch64_feature_detected!("dotprod"),
            Isa::Neon => true,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::I8mm => "neon+dotprod+i8mm",
            Isa::Dotprod => "neon+dotprod",
            Isa::Neon => "neon",
        }
    }
}

/// The fastest path this CPU has (detected once).
pub fn best() -> Isa {
    static BEST: OnceLock<Isa> = OnceLock::new();
    *BEST.get_or_init(|| {
        Isa::ALL
            .into_iter()
            .find(|i| i.supported())
            .unwrap_or(Isa::Neon)
    })
}

/// R×C dot products of type `t` (see `arch::tile`) with the 8-bit dots of `isa`.
///
/// # Safety
/// Every pointer must address at least `n` elements of `t` (whole blocks for quantized types);
/// `isa` must be supported by this CPU.
#[inline(always)]
pub(crate) unsafe fn tile<const R: usize, const C: usize>(
    isa: Isa,
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    // SAFETY: forwarded from the caller (pointers, and the CPU features of `isa`).
    unsafe {
        match t {
            Tiled::F32 => tile_f32::<R, C>(n, a, b, out),
            Tiled::F16 => tile_f16::<R, C>(n, a, b, out),
            Tiled::Bf16 => tile_bf16::<R, C>(n, a, b, out),
            _ => match isa {
                Isa::I8mm if !t.is_k_quant() => tile_i8mm::<R, C>(t, n, a, b, out),
                Isa::I8mm | Isa::Dotprod => tile_sdot::<R, C>(t, n, a, b, out),
                Isa::Neon => tile_neon::<R, C>(t, n, a, b, out),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 8-bit dots

/// `acc` plus the dots of 16 signed byte pairs, spread over the 4 i32 lanes (which lane holds
/// which partial sum differs between the kinds; callers only use lane totals).
trait Dot {
    /// # Safety
    /// The CPU must have the kind's feature.
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

struct NeonDot;
struct SdotDot;

impl Dot for NeonDot {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // Each i16 product is at most 128·128 = 2^14, a pair 2^15: exact in the i32 lanes.
        let p0 = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let p1 = vmull_high_s8(a, b);
        vpadalq_s16(vpadalq_s16(acc, p0), p1)
    }
}

impl Dot for SdotDot {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut r = acc;
        // SAFETY: SDOT only reads and writes registers; the caller runs in a `dotprod` function
        // reached after the run-time check.
        unsafe {
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) r,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        r
    }
}

/// SMMLA: `acc` + the 2×2 product of the row pair `a` (bytes 0..8: row 0, 8..16: row 1) and the
/// column pair `b`, lanes [r0·c0, r0·c1, r1·c0, r1·c1].
///
/// # Safety
/// The CPU must have `i8mm`.
#[inline(always)]
unsafe fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut r = acc;
    // SAFETY: SMMLA only reads and writes registers; reached from an `i8mm` function after the
    // run-time check.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) r,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

#[target_feature(enable = "dotprod")]
unsafe fn tile_sdot<const R: usize, const C: usize>(
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    // SAFETY: forwarded from the caller; dotprod is enabled here.
    unsafe { tile_quant::<SdotDot, R, C>(t, n, a, b, out) }
}

#[inline(never)]
unsafe fn tile_neon<const R: usize, const C: usize>(
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    // SAFETY: forwarded from the caller.
    unsafe { tile_quant::<NeonDot, R, C>(t, n, a, b, out) }
}

/// # Safety
/// As [`tile`]; `D`'s feature is enabled in the caller.
#[inline(always)]
unsafe fn tile_quant<D: Dot, const R: usize, const C: usize>(
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match t {
            Tiled::Q4_0 => tile_b32::<D, Q4_0, R, C>(n, a, b, out),
            Tiled::Q4_1 => tile_b32::<D, Q4_1, R, C>(n, a, b, out),
            Tiled::Q5_0 => tile_b32::<D, Q5_0, R, C>(n, a, b, out),
            Tiled::Q5_1 => tile_b32::<D, Q5_1, R, C>(n, a, b, out),
            Tiled::Q8_0 => tile_b32::<D, Q8_0, R, C>(n, a, b, out),
            Tiled::Q4K => tile_k4::<D, false, R, C>(n, a, b, out),
            Tiled::Q5K => tile_k4::<D, true, R, C>(n, a, b, out),
            Tiled::Q6K => tile_q6_k::<D, R, C>(n, a, b, out),
            Tiled::F32 | Tiled::F16 | Tiled::Bf16 => unreachable!("float tiles dispatch first"),
        }
    }
}

#[target_feature(enable = "i8mm")]
unsafe fn tile_i8mm<const R: usize, const C: usize>(
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    // SAFETY: forwarded from the caller; i8mm is enabled here.
    unsafe {
        match t {
            Tiled::Q4_0 => tile_b32_mm::<Q4_0, R, C>(n, a, b, out),
            Tiled::Q4_1 => tile_b32_mm::<Q4_1, R, C>(n, a, b, out),
            Tiled::Q5_0 => tile_b32_mm::<Q5_0, R, C>(n, a, b, out),
            Tiled::Q5_1 => tile_b32_mm::<Q5_1, R, C>(n, a, b, out),
            Tiled::Q8_0 => tile_b32_mm::<Q8_0, R, C>(n, a, b, out),
            _ => unreachable!("k-quants and floats do not take the SMMLA tile"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// scalars

/// f16 bits → f32 (`fcvt`, base Armv8; the `half` crate's conversion checks a CPU feature per
/// call).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let r: f32;
    // SAFETY: FCVT only reads and writes registers; the f16 bits sit in the low half of the
    // source register.
    unsafe {
        asm!(
            "fcvt {r:s}, {h:h}",
            r = lateout(vreg) r,
            h = in(vreg) f32::from_bits(h as u32),
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// The f16 at `p` as f32.
///
/// # Safety
/// `p..p+2` must be readable.
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: caller.
    f16_to_f32(unsafe { (p as *const u16).read_unaligned() })
}

// ---------------------------------------------------------------------------------------------
// float tiles: out[r][c] = Σ a[r][i]·b[c][i], R×C f32x4 accumulators, 4 elements a step

/// Four f16 (as bits) → f32 (`fcvtl`, base Armv8; the f16 vector types are unstable in Rust).
#[inline(always)]
pub(super) fn f16x4_to_f32x4(h: uint16x4_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: FCVTL only reads and writes registers.
    unsafe {
        asm!(
            "fcvtl {r:v}.4s, {h:v}.4h",
            r = lateout(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

macro_rules! float_tile {
    ($name:ident, $load:ident, $scalar:ident) => {
        /// The portable tile's arithmetic (`arch/portable.rs`: 8 partial sums per dot, products
        /// added unfused, summed in lane order, then the tail) in two f32x4 accumulators, so
        /// results are those the LLM tests were calibrated with on aarch64 before these tiles
        /// (the activations' re-quantization to 8 bits turns last-bit changes in attention
        /// into whole steps: gemma3's prompt test failed with 4 FMA lanes).
        ///
        /// # Safety
        /// Every pointer addresses `n` elements (any alignment).
        #[inline(never)]
        unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            a: [*const u8; R],
            b: [*const u8; C],
            out: &mut [[f32; C]; R],
        ) {
            // SAFETY: NEON is baseline; every load reads 4 elements at i + 8 <= n, the scalar
            // tail elements j < n.
            unsafe {
                let mut acc = [[[vdupq_n_f32(0.0); 2]; C]; R];
                let n8 = n / 8 * 8;
                let mut i = 0;
                while i < n8 {
                    let bv: [[float32x4_t; 2]; C] =
                        core::array::from_fn(|c| [$load(b[c], i), $load(b[c], i + 4)]);
                    for r in 0..R {
                        let av = [$load(a[r], i), $load(a[r], i + 4)];
                        for c in 0..C {
                            for h in 0..2 {
                                acc[r][c][h] = vaddq_f32(acc[r][c][h], vmulq_f32(av[h], bv[c][h]));
                            }
                        }
                    }
                    i += 8;
                }
                for r in 0..R {
                    for c in 0..C {
                        let l: [f32; 8] = core::mem::transmute(acc[r][c]);
                        let mut s = l[0];
                        for v in &l[1..] {
                            s += *v;
                        }
                        for j in n8..n {
                            s += $scalar(a[r], j) * $scalar(b[c], j);
                        }
                        out[r][c] = s;
                    }
                }
            }
        }
    };
}

#[inline(always)]
unsafe fn load_f32(p: *const u8, i: usize) -> float32x4_t {
    // SAFETY: the caller keeps elements i..i+4 inside the row.
    unsafe { vld1q_f32((p as *const f32).add(i)) }
}

#[inline(always)]
unsafe fn scalar_f32(p: *const u8, j: usize) -> f32 {
    // SAFETY: the caller keeps j inside the row.
    unsafe { (p as *const f32).add(j).read_unaligned() }
}

#[inline(always)]
unsafe fn load_f16(p: *const u8, i: usize) -> float32x4_t {
    // SAFETY: the caller keeps elements i..i+4 inside the row.
    f16x4_to_f32x4(unsafe { vld1_u16((p as *const u16).add(i)) })
}

#[inline(always)]
unsafe fn scalar_f16(p: *const u8, j: usize) -> f32 {
    // SAFETY: the caller keeps j inside the row.
    unsafe { f16_at((p as *const u16).add(j) as *const u8) }
}

#[inline(always)]
unsafe fn load_bf16(p: *const u8, i: usize) -> float32x4_t {
    // SAFETY: the caller keeps elements i..i+4 inside the row; bf16 is the top half of an f32.
    unsafe { vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16((p as *const u16).add(i)))) }
}

#[inline(always)]
unsafe fn scalar_bf16(p: *const u8, j: usize) -> f32 {
    // SAFETY: the caller keeps j inside the row.
    f32::from_bits((unsafe { (p as *const u16).add(j).read_unaligned() } as u32) << 16)
}

float_tile!(tile_f32, load_f32, scalar_f32);
float_tile!(tile_f16, load_f16, scalar_f16);
float_tile!(tile_bf16, load_bf16, scalar_bf16);

// ---------------------------------------------------------------------------------------------
// 32-element blocks × q8_0 / q8_1 columns

/// A 32-element weight block type: its size, whether it has a min (x = d·q + m, q8_1
/// columns: f16 d, f16 s = d·Σq, 32 i8) or not (q8_0 columns: f16 d, 32 i8), and its quants.
trait Block32 {
    /// Weight block bytes.
    const XS: usize;
    const MIN: bool;
    /// The block's 32 quants (elements 0..16, 16..32), offset-free: q − 8 / q − 16 for
    /// q4_0 / q5_0, 0..15 / 0..31 for q4_1 / q5_1.
    ///
    /// # Safety
    /// The XS-byte block at `xb` must be readable.
    unsafe fn quants(xb: *const u8) -> [int8x16_t; 2];
    /// `sumf` plus one block (integer dot `s`, scales dx/dy, min mx and column sum sy) in the
    /// scalar reference's f32 operations and order (`quant/legacy.rs`), so the tiles give its
    /// bits.
    fn add(sumf: f32, s: f32, dx: f32, dy: f32, mx: f32, sy: f32) -> f32;
    /// [`Block32::add`] on 4 lanes (mul and add, never fused, as the scalar code).
    fn add_v(
        sumf: float32x4_t,
        s: float32x4_t,
        dx: float32x4_t,
        dy: float32x4_t,
        mx: float32x4_t,
        sy: float32x4_t,
    ) -> float32x4_t;
}

/// The reference's `sumf += s * dx * dy` (q4_0).
macro_rules! add_s_dx_dy {
    () => {
        #[inline(always)]
        fn add(sumf: f32, s: f32, dx: f32, dy: f32, _: f32, _: f32) -> f32 {
            sumf + s * dx * dy
        }
        #[inline(always)]
        fn add_v(
            sumf: float32x4_t,
            s: float32x4_t,
            dx: float32x4_t,
            dy: float32x4_t,
            _: float32x4_t,
            _: float32x4_t,
        ) -> float32x4_t {
            // SAFETY: register-only NEON (baseline).
            unsafe { vaddq_f32(sumf, vmulq_f32(vmulq_f32(s, dx), dy)) }
        }
    };
}

/// The reference's `sumf += (dx * dy) * s` (q5_0), `sumf += s * (dx * dy)` (q8_0: the same
/// product), or with the min term `sumf += (dx * dy) * s + mx * sy` (q4_1, q5_1).
macro_rules! add_dxdy_s {
    ($min:expr) => {
        #[inline(always)]
        fn add(sumf: f32, s: f32, dx: f32, dy: f32, mx: f32, sy: f32) -> f32 {
            if $min {
                sumf + ((dx * dy) * s + mx * sy)
            } else {
                sumf + (dx * dy) * s
            }
        }
        #[inline(always)]
        fn add_v(
            sumf: float32x4_t,
            s: float32x4_t,
            dx: float32x4_t,
            dy: float32x4_t,
            mx: float32x4_t,
            sy: float32x4_t,
        ) -> float32x4_t {
            // SAFETY: register-only NEON (baseline).
            unsafe {
                let t = vmulq_f32(vmulq_f32(dx, dy), s);
                if $min {
                    vaddq_f32(sumf, vaddq_f32(t, vmulq_f32(mx, sy)))
                } else {
                    vaddq_f32(sumf, t)
                }
            }
        }
    };
}

struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Q8_0;

/// Low and high nibbles of the 16 bytes at `p`.
///
/// # Safety
/// `p..p+16` must be readable.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: caller.
    let v = unsafe { vld1q_u8(p) };
    (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
}

impl Block32 for Q4_0 {
    add_s_dx_dy!();
    const XS: usize = 18;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(xb: *const u8) -> [int8x16_t; 2] {
        // SAFETY: caller; the nibbles at 2..18.
        let (lo, hi) = unsafe { nibbles(xb.add(2)) };
        let s8 = vdupq_n_s8(8);
        [
            vsubq_s8(vreinterpretq_s8_u8(lo), s8),
            vsubq_s8(vreinterpretq_s8_u8(hi), s8),
        ]
    }
}

impl Block32 for Q4_1 {
    add_dxdy_s!(true);
    const XS: usize = 20;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(xb: *const u8) -> [int8x16_t; 2] {
        // SAFETY: caller; the nibbles at 4..20.
        let (lo, hi) = unsafe { nibbles(xb.add(4)) };
        [vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)]
    }
}

impl Block32 for Q5_0 {
    add_dxdy_s!(false);
    const XS: usize = 22;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(xb: *const u8) -> [int8x16_t; 2] {
        // SAFETY: caller; high bits at 2..6, nibbles at 6..22.
        let ((h0, h1), (lo, hi)) = unsafe {
            (
                q5_high_masks((xb.add(2) as *const [u8; 4]).read_unaligned()),
                nibbles(xb.add(6)),
            )
        };
        // A clear 5th bit means q − 16 < 0: fill the high nibble to make the byte negative.
        let f0 = vdupq_n_u8(0xF0);
        [
            vreinterpretq_s8_u8(vorrq_u8(lo, vbicq_u8(f0, h0))),
            vreinterpretq_s8_u8(vorrq_u8(hi, vbicq_u8(f0, h1))),
        ]
    }
}

impl Block32 for Q5_1 {
    add_dxdy_s!(true);
    const XS: usize = 24;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(xb: *const u8) -> [int8x16_t; 2] {
        // SAFETY: caller; high bits at 4..8, nibbles at 8..24.
        let ((h0, h1), (lo, hi)) = unsafe {
            (
                q5_high_masks((xb.add(4) as *const [u8; 4]).read_unaligned()),
                nibbles(xb.add(8)),
            )
        };
        let b10 = vdupq_n_u8(0x10);
        [
            vreinterpretq_s8_u8(vorrq_u8(lo, vandq_u8(h0, b10))),
            vreinterpretq_s8_u8(vorrq_u8(hi, vandq_u8(h1, b10))),
        ]
    }
}

impl Block32 for Q8_0 {
    add_dxdy_s!(false);
    const XS: usize = 34;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(xb: *const u8) -> [int8x16_t; 2] {
        // SAFETY: caller; the quants at 2..34.
        unsafe {
            [
                vld1q_s8(xb.add(2) as *const i8),
                vld1q_s8(xb.add(18) as *const i8),
            ]
        }
    }
}

/// Column block facts: (d, s — 0 for q8_0 —, quants).
///
/// # Safety
/// The column block (34 or 36 bytes) at `yb` must be readable.
#[inline(always)]
unsafe fn column32<B: Block32>(yb: *const u8) -> (f32, f32, [int8x16_t; 2]) {
    let q = if B::MIN { 4 } else { 2 };
    // SAFETY: caller; d at 0, s at 2 (q8_1), the quants at q..q+32.
    unsafe {
        (
            f16_at(yb),
            if B::MIN { f16_at(yb.add(2)) } else { 0.0 },
            [
                vld1q_s8(yb.add(q) as *const i8),
                vld1q_s8(yb.add(q + 16) as *const i8),
            ],
        )
    }
}

/// R×C dot products of 32-element weight rows against q8_0 / q8_1 columns: per block,
/// dx·dy·Σ q·y (+ m·s for the min types), bit-identical to the scalar reference.
///
/// # Safety
/// Pointers address n/32 blocks; `D`'s feature is enabled in the caller.
#[inline(always)]
unsafe fn tile_b32<D: Dot, B: Block32, const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    let ys = if B::MIN { 36 } else { 34 };
    // SAFETY: blk < n/32, so every block read lies inside its row; D's feature from the caller.
    unsafe {
        let mut sumf = [[0f32; C]; R];
        let zero = vdupq_n_s32(0);
        for blk in 0..n / 32 {
            let cols: [(f32, f32, [int8x16_t; 2]); C] =
                core::array::from_fn(|c| column32::<B>(b[c].add(blk * ys)));
            for r in 0..R {
                let xb = a[r].add(blk * B::XS);
                let dx = f16_at(xb);
                let mx = if B::MIN { f16_at(xb.add(2)) } else { 0.0 };
                let q = B::quants(xb);
                for c in 0..C {
                    let (dy, sy, y) = cols[c];
                    // The block's integer dot, exact, then the reference's f32 steps.
                    let s = vaddvq_s32(D::dot(D::dot(zero, q[0], y[0]), q[1], y[1]));
                    sumf[r][c] = B::add(sumf[r][c], s as f32, dx, dy, mx, sy);
                }
            }
        }
        *out = sumf;
    }
}

/// Row pairs (or column pairs) of a block interleaved 8 bytes at a time for SMMLA: chunk k holds
/// elements 8k..8k+8 of `x` then of `y`.
#[inline(always)]
fn pair_chunks(x: [int8x16_t; 2], y: [int8x16_t; 2]) -> [int8x16_t; 4] {
    // SAFETY: register-only NEON operations (baseline).
    unsafe {
        let z = |a: int8x16_t, b: int8x16_t, hi: bool| {
            let (a, b) = (vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b));
            vreinterpretq_s8_s64(if hi {
                vzip2q_s64(a, b)
            } else {
                vzip1q_s64(a, b)
            })
        };
        [
            z(x[0], y[0], false),
            z(x[0], y[0], true),
            z(x[1], y[1], false),
            z(x[1], y[1], true),
        ]
    }
}

/// The lanes [p0, p0, p1, p1] and [q0, q1, q0, q1]: row and column facts of SMMLA's 4 results.
#[inline(always)]
fn lanes2(p: [f32; 2], q: [f32; 2]) -> (float32x4_t, float32x4_t) {
    // SAFETY: register-only NEON operations (baseline).
    unsafe {
        let pv = vcombine_f32(vdup_n_f32(p[0]), vdup_n_f32(p[1]));
        let qh = vset_lane_f32::<1>(q[1], vdup_n_f32(q[0]));
        (pv, vcombine_f32(qh, qh))
    }
}

/// As [`tile_b32`] with SMMLA: each row pair × column pair is one accumulator whose lanes are
/// the 4 dots, each lane taking the reference's f32 steps (bit-identical to it). An odd last
/// row or column is paired with zeros.
///
/// # Safety
/// Pointers address n/32 blocks; the caller has `i8mm` enabled.
// Pair indices address the row pairs, the column pairs and their accumulators together.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile_b32_mm<B: Block32, const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    let ys = if B::MIN { 36 } else { 34 };
    // Arrays are sized R and C (pairs use the first half), as const generic arithmetic is not
    // stable.
    let (rp, cp) = (R.div_ceil(2), C.div_ceil(2));
    let none = (0f32, 0f32, [vdupq_n_s8(0); 2]);
    // SAFETY: blk < n/32, so every block read lies inside its row; i8mm from the caller.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); C]; R];
        let zero = vdupq_n_s32(0);
        for blk in 0..n / 32 {
            let cols: [(f32, f32, [int8x16_t; 2]); C] =
                core::array::from_fn(|c| column32::<B>(b[c].add(blk * ys)));
            let col = |c: usize| if c < C { cols[c] } else { none };
            let mut yc = [[vdupq_n_s8(0); 4]; C];
            for j in 0..cp {
                yc[j] = pair_chunks(col(2 * j).2, col(2 * j + 1).2);
            }
            for i in 0..rp {
                // (d, m, quants) of row 2i + h, zeros past the last row.
                let row = |h: usize| {
                    let r = 2 * i + h;
                    if r < R {
                        let xb = a[r].add(blk * B::XS);
                        let m = if B::MIN { f16_at(xb.add(2)) } else { 0.0 };
                        (f16_at(xb), m, B::quants(xb))
                    } else {
                        none
                    }
                };
                let (x0, x1) = (row(0), row(1));
                let xc = pair_chunks(x0.2, x1.2);
                for j in 0..cp {
                    let y = &yc[j];
                    let mut s = smmla(zero, xc[0], y[0]);
                    s = smmla(s, xc[1], y[1]);
                    s = smmla(s, xc[2], y[2]);
                    s = smmla(s, xc[3], y[3]);
                    let (c0, c1) = (col(2 * j), col(2 * j + 1));
                    let (dx, dy) = lanes2([x0.0, x1.0], [c0.0, c1.0]);
                    let (mx, sy) = lanes2([x0.1, x1.1], [c0.1, c1.1]);
                    acc[i][j] = B::add_v(acc[i][j], vcvtq_f32_s32(s), dx, dy, mx, sy);
                }
            }
        }
        for (r, orow) in out.iter_mut().enumerate() {
            for (c, o) in orow.iter_mut().enumerate() {
                let v = acc[r / 2][c / 2];
                *o = match (r % 2, c % 2) {
                    (0, 0) => vgetq_lane_f32::<0>(v),
                    (0, _) => vgetq_lane_f32::<1>(v),
                    (_, 0) => vgetq_lane_f32::<2>(v),
                    _ => vgetq_lane_f32::<3>(v),
                };
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// k-quants × q8_K (256-element super-blocks; q8_K: f32 d, 256 i8, 16 i16 bsums)

const Q8K_SIZE: usize = 292;

/// Σ_j bsums[j]·mins[j/2] of a q8_K column block at `yb` and a row's 8 mins, in i32 lanes.
///
/// # Safety
/// The 292-byte block at `yb` must be readable.
#[inline(always)]
unsafe fn mins_dot(yb: *const u8, mn: &[u8; 8]) -> int32x4_t {
    // SAFETY: caller; bsums at 260..292; `mn` is 8 bytes.
    unsafe {
        let b0 = vld1q_s16(yb.add(260) as *const i16);
        let b1 = vld1q_s16(yb.add(276) as *const i16);
        // Each min covers two 16-element bsums.
        let m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn.as_ptr())));
        let m0 = vzip1q_s16(m, m);
        let m1 = vzip2q_s16(m, m);
        vmlal_high_s16(
            vmlal_s16(
                vmlal_high_s16(vmull_s16(vget_low_s16(b0), vget_low_s16(m0)), b0, m0),
                vget_low_s16(b1),
                vget_low_s16(m1),
            ),
            b1,
            m1,
        )
    }
}

/// 16 column quants at element `e` of the q8_K block at `yb`.
///
/// # Safety
/// e + 16 <= 256.
#[inline(always)]
unsafe fn y16(yb: *const u8, e: usize) -> int8x16_t {
    // SAFETY: caller; the quants at 4..260.
    unsafe { vld1q_s8(yb.add(4 + e) as *const i8) }
}

/// R×C dot products of q4_K (`Q5` false: 144 bytes) or q5_K (176 bytes: 32 bytes of high bits
/// before the nibbles) rows against q8_K columns: x = d·sc_j·q − dmin·m_j, so dot =
/// d·dy·Σ_j sc_j·Σ q·y − dmin·dy·Σ_j m_j·bsum_j, the integer sums exact in i32 (≤ 2^26), the
/// f32 steps the scalar reference's (bit-identical to it).
///
/// # Safety
/// Pointers address n/256 super-blocks; `D`'s feature is enabled in the caller.
#[inline(always)]
unsafe fn tile_k4<D: Dot, const Q5: bool, const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    let xs = if Q5 { 176 } else { 144 };
    let qs = if Q5 { 48 } else { 16 };
    // SAFETY: blk < n/256: every read lies inside its super-block; D's feature from the caller.
    unsafe {
        let mut sumf = [[0f32; C]; R];
        let zero = vdupq_n_s32(0);
        let m4 = vdupq_n_u8(0x0F);
        let m1 = vdupq_n_u8(1);
        for blk in 0..n / 256 {
            let yb: [*const u8; C] = core::array::from_fn(|c| b[c].add(blk * Q8K_SIZE));
            let dy: [f32; C] = core::array::from_fn(|c| (yb[c] as *const f32).read_unaligned());
            for r in 0..R {
                let xb = a[r].add(blk * xs);
                let d = f16_at(xb);
                let dmin = f16_at(xb.add(2));
                let (sc, mn) = scales_mins_k4(&*(xb.add(4) as *const [u8; 12]));
                let mut isum = [zero; C];
                let (mut hb0, mut hb1) = if Q5 {
                    (vld1q_u8(xb.add(16)), vld1q_u8(xb.add(32)))
                } else {
                    (vdupq_n_u8(0), vdupq_n_u8(0))
                };
                for g in 0..4 {
                    let v0 = vld1q_u8(xb.add(qs + 32 * g));
                    let v1 = vld1q_u8(xb.add(qs + 32 * g + 16));
                    let mut q = [
                        vandq_u8(v0, m4),
                        vandq_u8(v1, m4),
                        vshrq_n_u8::<4>(v0),
                        vshrq_n_u8::<4>(v1),
                    ];
                    if Q5 {
                        // Bit 2g of qh is the 5th bit of sub-block 2g, bit 2g+1 of 2g+1.
                        q[0] = vorrq_u8(q[0], vshlq_n_u8::<4>(vandq_u8(hb0, m1)));
                        q[1] = vorrq_u8(q[1], vshlq_n_u8::<4>(vandq_u8(hb1, m1)));
                        q[2] = vorrq_u8(q[2], vshlq_n_u8::<3>(vandq_u8(hb0, vdupq_n_u8(2))));
                        q[3] = vorrq_u8(q[3], vshlq_n_u8::<3>(vandq_u8(hb1, vdupq_n_u8(2))));
                        hb0 = vshrq_n_u8::<2>(hb0);
                        hb1 = vshrq_n_u8::<2>(hb1);
                    }
                    let q = q.map(|v| vreinterpretq_s8_u8(v));
                    let (sl, sh) = (sc[2 * g] as i32, sc[2 * g + 1] as i32);
                    for c in 0..C {
                        let e = 64 * g;
                        let lo =
                            D::dot(D::dot(zero, q[0], y16(yb[c], e)), q[1], y16(yb[c], e + 16));
                        let hi = D::dot(
                            D::dot(zero, q[2], y16(yb[c], e + 32)),
                            q[3],
                            y16(yb[c], e + 48),
                        );
                        isum[c] = vmlaq_n_s32(vmlaq_n_s32(isum[c], lo, sl), hi, sh);
                    }
                }
                for c in 0..C {
                    // Exact integer sums, then the reference's f32 steps.
                    let (is, ms) = (vaddvq_s32(isum[c]), vaddvq_s32(mins_dot(yb[c], &mn)));
                    sumf[r][c] += d * dy[c] * is as f32 - dmin * dy[c] * ms as f32;
                }
            }
        }
        *out = sumf;
    }
}

/// R×C dot products of q6_K rows (210 bytes: 128 bytes of low nibbles `ql`, 64 bytes of high
/// 2-bit pairs `qh`, 16 i8 scales, f16 d; x = d·sc·(q − 32)) against q8_K columns; Σ per
/// super-block < 2^28 in i32, then the scalar reference's f32 steps (bit-identical to it).
///
/// # Safety
/// Pointers address n/256 super-blocks; `D`'s feature is enabled in the caller.
#[inline(always)]
unsafe fn tile_q6_k<D: Dot, const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    const XS: usize = 210;
    // SAFETY: blk < n/256: every read lies inside its super-block; D's feature from the caller.
    unsafe {
        let mut sumf = [[0f32; C]; R];
        let zero = vdupq_n_s32(0);
        let m4 = vdupq_n_u8(0x0F);
        let m3 = vdupq_n_u8(0x03);
        let s32 = vdupq_n_s8(32);
        for blk in 0..n / 256 {
            let yb: [*const u8; C] = core::array::from_fn(|c| b[c].add(blk * Q8K_SIZE));
            for r in 0..R {
                let xb = a[r].add(blk * XS);
                let sc = &*(xb.add(192) as *const [i8; 16]);
                let d = f16_at(xb.add(208));
                let mut isum = [zero; C];
                for half in 0..2 {
                    for part in 0..2 {
                        // Elements 128·half + 32k + 16·part + (0..16), k = 0..4.
                        let o = 16 * part;
                        let ql_a = vld1q_u8(xb.add(64 * half + o));
                        let ql_b = vld1q_u8(xb.add(64 * half + 32 + o));
                        let h = vld1q_u8(xb.add(128 + 32 * half + o));
                        let q = [
                            vorrq_u8(vandq_u8(ql_a, m4), vshlq_n_u8::<4>(vandq_u8(h, m3))),
                            vorrq_u8(
                                vandq_u8(ql_b, m4),
                                vshlq_n_u8::<2>(vandq_u8(h, vdupq_n_u8(0x0C))),
                            ),
                            vorrq_u8(vshrq_n_u8::<4>(ql_a), vandq_u8(h, vdupq_n_u8(0x30))),
                            vorrq_u8(
                                vshrq_n_u8::<4>(ql_b),
                                vshrq_n_u8::<2>(vandq_u8(h, vdupq_n_u8(0xC0))),
                            ),
                        ];
                        for (k, qk) in q.iter().enumerate() {
                            let v = vsubq_s8(vreinterpretq_s8_u8(*qk), s32);
                            let e = 128 * half + 32 * k + o;
                            let s = sc[e / 16] as i32;
                            for c in 0..C {
                                isum[c] = vmlaq_n_s32(isum[c], D::dot(zero, v, y16(yb[c], e)), s);
                            }
                        }
                    }
                }
                for c in 0..C {
                    let dy = (yb[c] as *const f32).read_unaligned();
                    sumf[r][c] += d * dy * vaddvq_s32(isum[c]) as f32;
                }
            }
        }
        *out = sumf;
    }
}

// ---------------------------------------------------------------------------------------------
// Tests' entry point

/// `m` weight rows of `dtype` (k elements each, contiguous) times `n` columns of its vec_dot
/// type (contiguous), with the tiles of `isa`, every tile shape mul_mat uses (4×4, 2×4, 4×3,
/// 4×2, 1×4, 1×2, 4×1, 1×1; remainder rows and columns 1×1): one result (result[c·m + r]) per
/// shape. `None` when `dtype` has no tile or this CPU lacks `isa`. For tests: every path
/// against the scalar reference on the same bytes.
pub fn tiles_with(
    isa: Isa,
    dtype: crate::DType,
    k: usize,
    m: usize,
    n: usize,
    weights: &[u8],
    cols: &[u8],
) -> Option<Vec<(&'static str, Vec<f32>)>> {
    use crate::DType as D;
    let t = match dtype {
        D::F32 => Tiled::F32,
        D::F16 => Tiled::F16,
        D::BF16 => Tiled::Bf16,
        d => Tiled::quantized(d)?,
    };
    if !isa.supported() {
        return None;
    }
    let lda = dtype.row_size(k).ok()?;
    let ldb = match t {
        Tiled::F32 | Tiled::F16 | Tiled::Bf16 => lda,
        _ => crate::quant::type_traits_scalar(dtype)?
            .vec_dot_type
            .row_size(k)
            .ok()?,
    };
    if weights.len() != lda * m || cols.len() != ldb * n {
        return None;
    }
    let g = Whole {
        isa,
        t,
        k,
        m,
        n,
        a: weights.as_ptr(),
        lda,
        b: cols.as_ptr(),
        ldb,
    };
    // SAFETY: the lengths were checked above; the CPU has `isa`.
    unsafe {
        Some(vec![
            ("4x4", g.run::<4, 4>()),
            ("2x4", g.run::<2, 4>()),
            ("4x3", g.run::<4, 3>()),
            ("4x2", g.run::<4, 2>()),
            ("1x4", g.run::<1, 4>()),
            ("1x2", g.run::<1, 2>()),
            ("4x1", g.run::<4, 1>()),
            ("1x1", g.run::<1, 1>()),
        ])
    }
}

/// A whole product for [`tiles_with`].
struct Whole {
    isa: Isa,
    t: Tiled,
    k: usize,
    m: usize,
    n: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
}

impl Whole {
    /// All m×n results with R×C tiles (1×1 for the remainders).
    ///
    /// # Safety
    /// `a` holds m rows of lda bytes, `b` n columns of ldb bytes; the CPU has `isa`.
    unsafe fn run<const R: usize, const C: usize>(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.m * self.n];
        // SAFETY: caller; every (row, column) is inside the operands.
        unsafe {
            let one = |i: usize, j: usize, out: &mut [f32]| {
                let mut o = [[0f32; 1]; 1];
                tile::<1, 1>(
                    self.isa,
                    self.t,
                    self.k,
                    [self.a.add(i * self.lda)],
                    [self.b.add(j * self.ldb)],
                    &mut o,
                );
                out[j * self.m + i] = o[0][0];
            };
            let (mt, nt) = (self.m / R * R, self.n / C * C);
            for j in (0..nt).step_by(C) {
                for i in (0..mt).step_by(R) {
                    let mut o = [[0f32; C]; R];
                    tile::<R, C>(
                        self.isa,
                        self.t,
                        self.k,
                        core::array::from_fn(|r| self.a.add((i + r) * self.lda)),
                        core::array::from_fn(|c| self.b.add((j + c) * self.ldb)),
                        &mut o,
                    );
                    for (r, row) in o.iter().enumerate() {
                        for (c, v) in row.iter().enumerate() {
                            out[(j + c) * self.m + i + r] = *v;
                        }
                    }
                }
                for i in mt..self.m {
                    for jj in j..j + C {
                        one(i, jj, &mut out);
                    }
                }
            }
            for j in nt..self.n {
                for i in 0..self.m {
                    one(i, j, &mut out);
                }
            }
        }
        out
    }
}
