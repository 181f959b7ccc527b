//! wasm32 SIMD128 (the SIMD builds: `-C target-feature=+simd128`, plus `+relaxed-simd` in the
//! relaxed one). `quants.rs` holds the vec dots and the quant decoders the tiles share,
//! `tiles.rs` the mul_mat register tiles, `gemv.rs` and `kgemv.rs` the n = 1 mul_mat,
//! `attention.rs` the fused attention's f16 kernels.

pub(crate) mod attention;
mod gemv;
mod kgemv;
mod quants;
pub(crate) mod tiles;
pub(crate) mod unary;

pub(crate) use gemv::{gemv, gemv_repacked, page_touch, set_page_touch};

#[cfg(target_feature = "relaxed-simd")]
use core::arch::wasm32::*;

/// A table of N kernel constants, 16-aligned for v128 loads.
#[repr(C, align(16))]
pub(crate) struct V128s<const N: usize>(pub(crate) [[u8; 16]; N]);

/// The 16 bytes of four copies of `x` (little-endian), for [`V128s`] tables of u32 lanes.
pub(crate) const fn u32x4_bytes(x: u32) -> [u8; 16] {
    let b = x.to_le_bytes();
    [
        b[0], b[1], b[2], b[3], b[0], b[1], b[2], b[3], b[0], b[1], b[2], b[3], b[0], b[1], b[2],
        b[3],
    ]
}

/// The kernels' constants, read from memory once per kernel call and kept in registers: V8
/// rebuilds a `v128.const` (or the splat of a constant) with 2–5 instructions at every use,
/// inside the loops. Volatile loads, so that LLVM keeps them loads, not constants.
#[inline(always)]
pub(crate) fn v128s<const N: usize>(t: &'static V128s<N>) -> [core::arch::wasm32::v128; N] {
    core::array::from_fn(|i| {
        // SAFETY: entry i < N of a 16-aligned static table.
        unsafe {
            core::ptr::read_volatile(
                (t as *const V128s<N> as *const core::arch::wasm32::v128).add(i),
            )
        }
    })
}
pub use quants::*;

/// How this engine runs `i32x4.relaxed_dot_i8x16_i7x16_add_s`, probed once ([`split_dots`]):
/// 0 not yet, 1 fused, 2 split.
#[cfg(target_feature = "relaxed-simd")]
static DOT_MODE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// Whether the relaxed kernels sum their 8-bit dots as two i16 dots added in i16 and one
/// widening ([`dot2_add`]) rather than with dot-adds: true where the engine lowers a dot-add as
/// x86 without VNNI does, `pmaddubsw` (pairs saturating in i16) + `pmaddwd` + `paddd`, plus two
/// instructions that rebuild its i16 ones in V8: 10 instructions per two dot-adds, against 5
/// split. With AVX-VNNI (V8: one `vpdpbusd`) or Arm's dot product (`sdot`) a dot-add is one
/// instruction and the dot-adds stay. Told apart by an operand outside i7, where the lowerings
/// differ: 255 · 127, four per lane, is 65534 through `pmaddubsw` (each pair saturated to
/// 32767), 129540 through `vpdpbusd` (unsigned), −508 through a signed dot. The kernels' sums
/// are exact either way (i7 operands): the choice changes speed, never a result.
#[cfg(target_feature = "relaxed-simd")]
pub(crate) fn split_dots() -> bool {
    use core::sync::atomic::Ordering::Relaxed;
    match DOT_MODE.load(Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let y = core::hint::black_box(i8x16_splat(127));
            let u = core::hint::black_box(u8x16_splat(255));
            let v = i32x4_relaxed_dot_i8x16_i7x16_add(y, u, i32x4_splat(0));
            let split = i32x4_extract_lane::<0>(v) == 65534;
            DOT_MODE.store(if split { 2 } else { 1 }, Relaxed);
            split
        }
    }
}

/// Tests: `Some(split)` makes the relaxed kernels take that path whatever the probe says, `None`
/// gives the choice back to the probe.
#[cfg(target_feature = "relaxed-simd")]
pub(crate) fn force_split_dots(split: Option<bool>) {
    let m = match split {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    };
    DOT_MODE.store(m, core::sync::atomic::Ordering::Relaxed);
}

/// `acc` + the lane sums of two relaxed dots, y0·u0 and y1·u1 (lane l: bytes 4l..4l + 4 of
/// each), `u0`, `u1` the i7 operands, every pair of products within ±16383 (u ≤ 63, |y| ≤ 128).
/// `S` ([`split_dots`]): two `i16x8.relaxed_dot_i8x16_i7x16_s` added in i16, widened by one
/// `i32x4.dot_i16x8_s` against `ones` (i16 ones, kept in a register by the caller), then added;
/// else two dot-adds. The same exact sums.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
pub(crate) fn dot2_add<const S: bool>(
    y0: v128,
    u0: v128,
    y1: v128,
    u1: v128,
    acc: v128,
    ones: v128,
) -> v128 {
    if S {
        let p = i16x8_add(
            i16x8_relaxed_dot_i8x16_i7x16(y0, u0),
            i16x8_relaxed_dot_i8x16_i7x16(y1, u1),
        );
        i32x4_add(acc, i32x4_dot_i16x8(p, ones))
    } else {
        i32x4_relaxed_dot_i8x16_i7x16_add(y1, u1, i32x4_relaxed_dot_i8x16_i7x16_add(y0, u0, acc))
    }
}

/// `acc` + one relaxed dot y·u (pairs of products within ±32767), as [`dot2_add`]: `S` one
/// i16 dot widened against `ones` and added (three instructions; V8's dot-add is five there).
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
pub(crate) fn dot_add<const S: bool>(y: v128, u: v128, acc: v128, ones: v128) -> v128 {
    if S {
        i32x4_add(
            acc,
            i32x4_dot_i16x8(i16x8_relaxed_dot_i8x16_i7x16(y, u), ones),
        )
    } else {
        i32x4_relaxed_dot_i8x16_i7x16_add(y, u, acc)
    }
}

use half::f16;

use crate::backend::cpu::traits::{Table, VecDot};
use crate::quant::{
    cast_blocks, with_blocks_mut, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1,
};
use crate::DType;

erase_dot!(erased_f32, f32, f32, vec_dot_f32);
erase_dot!(erased_f16, f16, f16, vec_dot_f16);
erase_dot!(erased_q4_0, BlockQ4_0, BlockQ8_0, vec_dot_q4_0_q8_0);
erase_dot!(erased_q4_1, BlockQ4_1, BlockQ8_1, vec_dot_q4_1_q8_1);
erase_dot!(erased_q5_0, BlockQ5_0, BlockQ8_0, vec_dot_q5_0_q8_0);
erase_dot!(erased_q5_1, BlockQ5_1, BlockQ8_1, vec_dot_q5_1_q8_1);
erase_dot!(erased_q8_0, BlockQ8_0, BlockQ8_0, vec_dot_q8_0_q8_0);
erase_dot!(erased_q4_k, BlockQ4K, BlockQ8K, vec_dot_q4_k_q8_k);
erase_dot!(erased_q5_k, BlockQ5K, BlockQ8K, vec_dot_q5_k_q8_k);
erase_dot!(erased_q6_k, BlockQ6K, BlockQ8K, vec_dot_q6_k_q8_k);

fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    f16_to_f32_row(&cast_blocks::<f16>(src), dst);
}
fn f32_to_f16(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<f16, ()>(dst, |ys| f32_to_f16_row(src, ys));
}
fn quant_q8_0(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<BlockQ8_0, ()>(dst, |ys| quantize_row_q8_0(src, ys));
}
fn quant_q8_1(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<BlockQ8_1, ()>(dst, |ys| quantize_row_q8_1(src, ys));
}

/// The SIMD128 vec dots and row conversions.
pub(crate) fn install(t: &mut Table) {
    let dots: [(DType, VecDot); 10] = [
        (DType::F32, erased_f32),
        (DType::F16, erased_f16),
        (DType::Q4_0, erased_q4_0),
        (DType::Q4_1, erased_q4_1),
        (DType::Q5_0, erased_q5_0),
        (DType::Q5_1, erased_q5_1),
        (DType::Q8_0, erased_q8_0),
        (DType::Q4_K, erased_q4_k),
        (DType::Q5_K, erased_q5_k),
        (DType::Q6_K, erased_q6_k),
    ];
    for (d, f) in dots {
        t.entry(d).vec_dot = f;
    }
    // The KV cache's f16 rows and the activations of every legacy-quant dot.
    t.entry(DType::F16).to_f32 = f16_to_f32;
    t.entry(DType::F16).from_f32 = f32_to_f16;
    t.entry(DType::Q8_0).from_f32 = quant_q8_0;
    t.entry(DType::Q8_1).from_f32 = quant_q8_1;
}
