//! Helpers for the mul_mat / conv / pooling tests: writing values into tensors of any type
//! (returning what the tensor actually holds), error measures, and the shared `Rng` and `nmse`.

#![allow(dead_code)]

use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::{alloc, Context, DType, Graph, Result, TensorId};
#[allow(unused_imports)]
pub use ggweb_testing::{nmse, Rng};
use half::{bf16, f16};

/// Write `values` (logical order) into the contiguous tensor `id`, converting to its type, and
/// return the values it now holds (rounded / dequantized).
pub fn set_values(ctx: &Context, id: TensorId, values: &[f32]) -> Result<Vec<f32>> {
    let dtype = ctx.tensor(id).dtype;
    match dtype {
        DType::F32 => {
            ctx.set_f32(id, values)?;
            Ok(values.to_vec())
        }
        DType::F16 => {
            let h: Vec<u16> = values.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
            ctx.set_bytes(id, bytemuck_u16(&h).as_slice())?;
            Ok(h.iter().map(|&b| f16::from_bits(b).to_f32()).collect())
        }
        DType::BF16 => {
            let h: Vec<u16> = values
                .iter()
                .map(|&v| bf16::from_f32(v).to_bits())
                .collect();
            ctx.set_bytes(id, bytemuck_u16(&h).as_slice())?;
            Ok(h.iter().map(|&b| bf16::from_bits(b).to_f32()).collect())
        }
        _ => {
            ctx.set_f32(id, values)?;
            ctx.get_f32(id)
        }
    }
}

fn bytemuck_u16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Read an f32 or f16 tensor as f32 (contiguous).
pub fn get_values(ctx: &Context, id: TensorId) -> Vec<f32> {
    let t = ctx.tensor(id);
    match t.dtype {
        DType::F16 => ctx
            .get_bytes(id)
            .unwrap()
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        _ => ctx.get_f32(id).unwrap(),
    }
}

/// Allocate every tensor of `ctx` on the CPU.
pub fn alloc_all(ctx: &mut Context) {
    alloc::alloc_ctx_tensors(ctx, &cpu_buffer_type()).unwrap();
}

/// Build the graph of `outs` and compute it with `threads` threads.
pub fn compute(ctx: &Context, outs: &[TensorId], threads: usize) -> Result<()> {
    let g = Graph::build(ctx, outs);
    CpuBackend::with_threads_forced(threads).compute(ctx, &g)
}

/// max |got - want| / max |want|.
pub fn max_rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want
        .iter()
        .fold(0f64, |m, &v| m.max(v.abs() as f64))
        .max(1e-30);
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |m, (&g, &w)| m.max((g as f64 - w as f64).abs()));
    err / scale
}

/// Index of (i0, i1, i2, i3) in a dense array of shape `ne`.
pub fn idx(ne: [usize; 4], i0: usize, i1: usize, i2: usize, i3: usize) -> usize {
    i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3))
}
