//! x86-64: AVX2 + FMA + F16C, detected once at run time. `quants.rs` holds the vec dots and row
//! conversions (safe wrappers with a scalar fallback), `tiles.rs` the mul_mat register tiles.

pub(crate) mod attention;
pub(crate) mod gemm;
pub(crate) mod gemv;
mod quants;
pub(crate) mod tiles;

pub use gemm::{gemm_with, Isa};
pub use gemv::{gemv_repacked_with, gemv_with, set_next_read};
pub use quants::*;

use half::{bf16, f16};

use crate::backend::cpu::traits::{Table, VecDot};
use crate::quant::{
    cast_blocks, with_blocks_mut, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1,
};
use crate::DType;

erase_dot!(erased_f32, f32, f32, vec_dot_f32);
erase_dot!(erased_f16, f16, f16, vec_dot_f16);
erase_dot!(erased_bf16, bf16, bf16, vec_dot_bf16);
erase_dot!(erased_q4_0, BlockQ4_0, BlockQ8_0, vec_dot_q4_0_q8_0);
erase_dot!(erased_q4_1, BlockQ4_1, BlockQ8_1, vec_dot_q4_1_q8_1);
erase_dot!(erased_q5_0, BlockQ5_0, BlockQ8_0, vec_dot_q5_0_q8_0);
erase_dot!(erased_q5_1, BlockQ5_1, BlockQ8_1, vec_dot_q5_1_q8_1);
erase_dot!(erased_q8_0, BlockQ8_0, BlockQ8_0, vec_dot_q8_0_q8_0);
erase_dot!(erased_q2_k, BlockQ2K, BlockQ8K, vec_dot_q2_k_q8_k);
erase_dot!(erased_q3_k, BlockQ3K, BlockQ8K, vec_dot_q3_k_q8_k);
erase_dot!(erased_q4_k, BlockQ4K, BlockQ8K, vec_dot_q4_k_q8_k);
erase_dot!(erased_q5_k, BlockQ5K, BlockQ8K, vec_dot_q5_k_q8_k);
erase_dot!(erased_q6_k, BlockQ6K, BlockQ8K, vec_dot_q6_k_q8_k);

fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    f16_to_f32_row(&cast_blocks::<f16>(src), dst);
}
fn f32_to_f16(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<f16, ()>(dst, |ys| f32_to_f16_row(src, ys));
}
fn deq_q4_0(src: &[u8], dst: &mut [f32]) {
    dequantize_row_q4_0(&cast_blocks::<BlockQ4_0>(src), dst);
}
fn deq_q8_0(src: &[u8], dst: &mut [f32]) {
    dequantize_row_q8_0(&cast_blocks::<BlockQ8_0>(src), dst);
}
fn deq_q4_k(src: &[u8], dst: &mut [f32]) {
    dequantize_row_q4_k(&cast_blocks::<BlockQ4K>(src), dst);
}
fn quant_q8_0(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<BlockQ8_0, ()>(dst, |ys| quantize_row_q8_0(src, ys));
}
fn quant_q8_1(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<BlockQ8_1, ()>(dst, |ys| quantize_row_q8_1(src, ys));
}
fn quant_q8_k(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<BlockQ8K, ()>(dst, |ys| quantize_row_q8_k(src, ys));
}

/// The AVX2 vec dots and row conversions, when this CPU has them.
pub(crate) fn install(t: &mut Table) {
    if !available() {
        return;
    }
    let dots: [(DType, VecDot); 13] = [
        (DType::F32, erased_f32),
        (DType::F16, erased_f16),
        (DType::BF16, erased_bf16),
        (DType::Q4_0, erased_q4_0),
        (DType::Q4_1, erased_q4_1),
        (DType::Q5_0, erased_q5_0),
        (DType::Q5_1, erased_q5_1),
        (DType::Q8_0, erased_q8_0),
        (DType::Q2_K, erased_q2_k),
        (DType::Q3_K, erased_q3_k),
        (DType::Q4_K, erased_q4_k),
        (DType::Q5_K, erased_q5_k),
        (DType::Q6_K, erased_q6_k),
    ];
    for (d, f) in dots {
        t.entry(d).vec_dot = f;
    }
    t.entry(DType::F16).to_f32 = f16_to_f32;
    t.entry(DType::Q4_0).to_f32 = deq_q4_0;
    t.entry(DType::Q8_0).to_f32 = deq_q8_0;
    t.entry(DType::Q4_K).to_f32 = deq_q4_k;
    t.entry(DType::F16).from_f32 = f32_to_f16;
    t.entry(DType::Q8_0).from_f32 = quant_q8_0;
    t.entry(DType::Q8_1).from_f32 = quant_q8_1;
    t.entry(DType::Q8_K).from_f32 = quant_q8_k;
}
