//! wasm32 SIMD128 (the SIMD builds: `-C target-feature=+simd128`, plus `+relaxed-simd` in the
//! relaxed one). `quants.rs` holds the vec dots and the quant decoders the tiles share,
//! `tiles.rs` the mul_mat register tiles, `gemv.rs` and `kgemv.rs` the n = 1 mul_mat,
//! `attention.rs` the fused attention's f16 kernels.

pub(crate) mod attention;
mod gemv;
mod kgemv;
mod quants;
pub(crate) mod tiles;

pub(crate) use gemv::{gemv, gemv_repacked};

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
    t.entry(DType::Q8_0).from_f32 = quant_q8_0;
    t.entry(DType::Q8_1).from_f32 = quant_q8_1;
}
