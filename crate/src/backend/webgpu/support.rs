//! Which nodes the WebGPU backend computes exactly: types, strides, and tensors that fit a
//! storage binding (or can be split over several, see `split.rs`).

use super::split::split_of;
use super::Shared;
use crate::tensor::{Op, Tensor};
use crate::{Context, DType, TensorId};

/// Weight types of mul_mat and get_rows.
const MATMUL_TYPES: [DType; 10] = crate::backend::WEBGPU_WEIGHT_TYPES;

/// Elements of a binding: bytes per unit of offsets and strides.
pub(super) fn unit(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::I32 => 4,
        DType::F16 => 2,
        _ => 1,
    }
}

/// Exact support check: `Ok` when the node can run here, otherwise why not.
pub(crate) fn check(
    shared: &Shared,
    ctx: &Context,
    id: TensorId,
) -> std::result::Result<(), String> {
    let t = ctx.tensor(id);
    if t.op.is_view() || t.op == Op::None {
        return Ok(());
    }
    let src = |i: usize| t.src[i].map(|s| ctx.tensor(s));
    let max = shared.max_binding();
    let align = shared.alignment();
    let split = split_of(shared, ctx, t);
    for (k, x) in std::iter::once(Some(t)).chain((0..4).map(src)).enumerate() {
        let Some(x) = x else { continue };
        // im2col reads only the shape of its kernel (src0), im2col_back (src1): never bound.
        let bound = !(k == 1 && matches!(t.op, Op::Im2Col { .. })
            || k == 2 && matches!(t.op, Op::Im2ColBack { .. }));
        let splits = match k {
            1 => split.rows.is_some(),
            0 | 2 => split.cols.is_some(),
            _ => false,
        };
        if bound && x.nbytes() + align > max && !splits {
            return Err(format!(
                "{}: tensor '{}' ({}) is {} bytes, more than one storage binding \
                 (max_storage_buffer_binding_size {} bytes) allows and it cannot be split \
                 by rows or columns{}; keep it on the CPU",
                t.op.name(),
                x.name,
                if k == 0 {
                    "dst".to_string()
                } else {
                    format!("src{}", k - 1)
                },
                x.nbytes(),
                max,
                split
                    .why_not
                    .as_deref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ));
        }
        let u = unit(x.dtype);
        if x.nb.iter().any(|&nb| nb % u != 0) {
            return Err(format!(
                "{}: strides {:?} of '{}' are not multiples of {u} bytes",
                t.op.name(),
                x.nb,
                x.name
            ));
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
            let s = src(0).map(|x| x.nelements());
            matches!(s0, Some(F32) | Some(F16))
                && matches!(d, F32 | F16)
                && s == Some(t.nelements())
                && (d != F16 || shared.use_f16 || pairs_whole_words(t))
        }
        Op::Concat { dim } => dim < 4 && matches!(d, F32 | I32) && s0 == Some(d) && s1 == Some(d),
        Op::Norm { .. } | Op::RmsNorm { .. } => f32s(&[s0, Some(d)]),
        Op::MulMat => {
            s0.is_some_and(|x| MATMUL_TYPES.contains(&x))
                && src(0).is_some_and(|x| x.nb[0] == x.dtype.type_size())
                && s1 == Some(F32)
                && d == F32
        }
        Op::SoftMax { .. } => f32s(&[s0, Some(d)]) && matches!(s1, None | Some(F32) | Some(F16)),
        Op::Rope(p) | Op::RopeBack(p) => {
            f32s(&[s0, Some(d)])
                && s1 == Some(I32)
                && matches!(s2, None | Some(F32))
                && t.ne[0].is_multiple_of(2)
                && p.n_dims.is_multiple_of(2)
                && p.n_dims <= t.ne[0]
        }
        Op::GetRows => {
            s0.is_some_and(|x| MATMUL_TYPES.contains(&x))
                && src(0).is_some_and(|x| x.nb[0] == x.dtype.type_size())
                && s1 == Some(I32)
                && d == F32
        }
        Op::Im2Col { .. } => s1 == Some(F32) && (d == F32 || (d == F16 && shared.use_f16)),
        Op::Pool2d { .. } => f32s(&[s0, Some(d)]),
        Op::SumRows | Op::Mean | Op::Sum => f32s(&[s0, Some(d)]),
        Op::Argmax => s0 == Some(F32) && d == I32,
        Op::CrossEntropyLoss => f32s(&[s0, s1, Some(d)]),
        Op::RepeatBack | Op::ViewBack { .. } => f32s(&[s0, Some(d)]),
        Op::UnaryBack(_) | Op::NormBack { .. } | Op::Pool2dBack { .. } => f32s(&[s0, s1, Some(d)]),
        Op::GetRowsBack => f32s(&[s0, Some(d)]) && s1 == Some(I32),
        Op::Im2ColBack { .. } => f32s(&[s0, Some(d)]),
        // The kernels index the parameter, gradient and state as flat arrays.
        Op::OptStepAdamW | Op::OptStepSgd => {
            let n = if t.op == Op::OptStepAdamW { 4 } else { 3 };
            (0..n).all(|i| src(i).is_some_and(|x| x.dtype == F32))
                && (0..n - 1).all(|i| src(i).is_some_and(|x| x.is_contiguous()))
                && d == F32
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        let types: Vec<String> = t.srcs().map(|s| ctx.tensor(s).dtype.to_string()).collect();
        Err(format!(
            "{} for src types [{}] -> {} is not implemented on WebGPU{}",
            t.op.name(),
            types.join(", "),
            d,
            if shared.use_f16 { "" } else { " (f32 path)" }
        ))
    }
}

/// Whether the f32 path can write the f16 destination `t` two halves a word (`cpy.wgsl`'s
/// `main_pairs`): contiguous, or rows of an even number of contiguous halves whose strides are
/// whole words (the planner checks the offset), so that no two invocations share a word.
fn pairs_whole_words(t: &Tensor) -> bool {
    t.is_contiguous()
        || (t.ne[0].is_multiple_of(2) && t.nb[0] == 2 && t.nb[1..].iter().all(|nb| nb % 4 == 0))
}
