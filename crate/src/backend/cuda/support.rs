//! Which nodes the CUDA backend computes exactly (types, strides, launch limits); the scheduler
//! places everything else on the CPU. The same op coverage as the WebGPU backend's
//! `support.rs`, checked against the kernels of `shaders/cuda/`.

use crate::tensor::{Op, Tensor};
use crate::{Context, DType, TensorId};

/// Weight types of mul_mat and get_rows (dequantized in the kernels).
pub const WEIGHT_TYPES: [DType; 10] = crate::backend::WEBGPU_WEIGHT_TYPES;

/// Largest grid y / z dimension of a launch.
const MAX_GRID_YZ: usize = 65535;

/// Exact support check: `Ok` when the node can run here, otherwise why not.
pub(crate) fn check(ctx: &Context, id: TensorId) -> std::result::Result<(), String> {
    let t = ctx.tensor(id);
    if t.op.is_view() || t.op == Op::None {
        return Ok(());
    }
    let src = |i: usize| t.src[i].map(|s| ctx.tensor(s));
    // f32/f16/i32 tensors are read and written as whole elements.
    for xid in std::iter::once(id).chain(t.src.iter().flatten().copied()) {
        let x = ctx.tensor(xid);
        let u = match x.dtype {
            DType::F32 | DType::I32 => 4,
            DType::F16 => 2,
            _ => 1,
        };
        if x.nb.iter().any(|&nb| nb % u != 0) {
            return Err(format!(
                "{}: strides {:?} of '{}' are not multiples of {u} bytes",
                t.op.name(),
                x.nb,
                x.name
            ));
        }
        if let Some((_, off)) = ctx.data_location(xid) {
            if off % u != 0 {
                return Err(format!(
                    "{}: '{}' at byte offset {off} is not aligned to its element size",
                    t.op.name(),
                    x.name
                ));
            }
        }
    }
    let ty = |x: Option<&Tensor>| x.map(|x| x.dtype);
    let (s0, s1, s2) = (ty(src(0)), ty(src(1)), ty(src(2)));
    let d = t.dtype;
    use DType::*;
    let f32s = |v: &[Option<DType>]| v.iter().all(|x| *x == Some(F32));
    let ok = match t.op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => f32s(&[s0, s1, Some(d)]),
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Log | Op::Unary(_) | Op::Repeat => {
            f32s(&[s0, Some(d)])
        }
        Op::Dup | Op::Cont | Op::Cpy => {
            matches!(s0, Some(F32) | Some(F16))
                && matches!(d, F32 | F16)
                && src(0).map(|x| x.nelements()) == Some(t.nelements())
        }
        Op::Concat { dim } => dim < 4 && matches!(d, F32 | I32) && s0 == Some(d) && s1 == Some(d),
        Op::Norm { .. } | Op::RmsNorm { .. } => f32s(&[s0, Some(d)]),
        Op::MulMat => {
            let (a, b) = (src(0), src(1));
            s0.is_some_and(|x| WEIGHT_TYPES.contains(&x))
                && a.is_some_and(|x| x.nb[0] == x.dtype.type_size())
                && s1 == Some(F32)
                && d == F32
                && b.is_some_and(|b| {
                    b.ne[2] * b.ne[3] <= MAX_GRID_YZ && b.ne[1].div_ceil(64) <= MAX_GRID_YZ
                })
        }
        Op::SoftMax { .. } => f32s(&[s0, Some(d)]) && matches!(s1, None | Some(F32) | Some(F16)),
        Op::Rope(p) => {
            f32s(&[s0, Some(d)])
                && s1 == Some(I32)
                && matches!(s2, None | Some(F32))
                && t.ne[0].is_multiple_of(2)
                && p.n_dims.is_multiple_of(2)
                && p.n_dims <= t.ne[0]
        }
        Op::GetRows => {
            s0.is_some_and(|x| WEIGHT_TYPES.contains(&x))
                && src(0).is_some_and(|x| x.nb[0] == x.dtype.type_size())
                && s1 == Some(I32)
                && d == F32
        }
        Op::Im2Col { .. } => s1 == Some(F32) && matches!(d, F32 | F16),
        Op::Pool2d { .. } => f32s(&[s0, Some(d)]),
        Op::SumRows | Op::Mean | Op::Sum => f32s(&[s0, Some(d)]),
        Op::Argmax => s0 == Some(F32) && d == I32,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        let types: Vec<String> = t.srcs().map(|s| ctx.tensor(s).dtype.to_string()).collect();
        Err(format!(
            "{} for src types [{}] -> {} is not implemented on CUDA",
            t.op.name(),
            types.join(", "),
            d
        ))
    }
}
