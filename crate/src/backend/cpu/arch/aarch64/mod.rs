//! aarch64: NEON (always present), SDOT and SMMLA where the CPU has them (detected at run time).
//! `quants.rs` holds the vec dots, `tiles.rs` the mul_mat register tiles (float and quantized),
//! `attention.rs` the fused attention's f16 kernels.

pub mod attention;
mod quants;
pub mod tiles;

pub use quants::*;

use crate::backend::cpu::traits::{Table, VecDot};
use crate::quant::{
    BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0,
    BlockQ8_1,
};
use crate::DType;

erase_dot!(erased_f32, f32, f32, vec_dot_f32);
erase_dot!(erased_q4_0, BlockQ4_0, BlockQ8_0, vec_dot_q4_0_q8_0);
erase_dot!(erased_q4_1, BlockQ4_1, BlockQ8_1, vec_dot_q4_1_q8_1);
erase_dot!(erased_q5_0, BlockQ5_0, BlockQ8_0, vec_dot_q5_0_q8_0);
erase_dot!(erased_q5_1, BlockQ5_1, BlockQ8_1, vec_dot_q5_1_q8_1);
erase_dot!(erased_q8_0, BlockQ8_0, BlockQ8_0, vec_dot_q8_0_q8_0);
erase_dot!(erased_q4_k, BlockQ4K, BlockQ8K, vec_dot_q4_k_q8_k);
erase_dot!(erased_q5_k, BlockQ5K, BlockQ8K, vec_dot_q5_k_q8_k);
erase_dot!(erased_q6_k, BlockQ6K, BlockQ8K, vec_dot_q6_k_q8_k);

/// The NEON vec dots.
pub(crate) fn install(t: &mut Table) {
    let dots: [(DType, VecDot); 9] = [
        (DType::F32, erased_f32),
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
}
