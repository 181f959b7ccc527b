//! Training kernels: the loss (`train_cross_entropy.wgsl`), the backward-pass ops of
//! `ops/train.rs` (`train_*_back.wgsl`; rope_back is rope's kernel with the sine negated, see
//! `rope.rs`) and the optimizer steps (`train_opt_step.wgsl`). The scatters of the CPU kernels
//! (view_back, get_rows_back, im2col_back, pool_2d_back) are gathers here, one invocation per
//! destination element, so no two invocations write one element and no atomics are needed.

use super::{Kernel, Planner, WG};
use crate::backend::webgpu::shader::{op_codes, plain};
use crate::tensor::{PoolOp, UnaryOp};
use crate::{Error, Result};

const CROSS_ENTROPY: &str = include_str!("../../../../../shaders/train_cross_entropy.wgsl");
const REPEAT_BACK: &str = include_str!("../../../../../shaders/train_repeat_back.wgsl");
const UNARY_BACK: &str = include_str!("../../../../../shaders/train_unary_back.wgsl");
const NORM_BACK: &str = include_str!("../../../../../shaders/train_norm_back.wgsl");
const VIEW_BACK: &str = include_str!("../../../../../shaders/train_view_back.wgsl");
const GET_ROWS_BACK: &str = include_str!("../../../../../shaders/train_get_rows_back.wgsl");
const IM2COL_BACK: &str = include_str!("../../../../../shaders/train_im2col_back.wgsl");
const POOL_2D_BACK: &str = include_str!("../../../../../shaders/train_pool_2d_back.wgsl");
const OPT_STEP: &str = include_str!("../../../../../shaders/train_opt_step.wgsl");

/// Entry points of `train_opt_step.wgsl`.
pub(super) const OPT_STEP_ENTRIES: [&str; 2] = ["main_adamw", "main_sgd"];

op_codes!(
    /// The derivatives of `train_unary_back.wgsl`.
    UnaryBackFn, "UNARY_BACK" {
        Abs = "ABS",
        Neg = "NEG",
        Relu = "RELU",
        Gelu = "GELU",
        GeluErf = "GELU_ERF",
        Silu = "SILU",
        Tanh = "TANH",
        Sigmoid = "SIGMOID",
        Exp = "EXP",
    }
);

/// A kernel over `n` items, one invocation each.
fn per_item<'a>(
    p: &Planner<'a>,
    key: &str,
    entry: &'static str,
    n: usize,
    src: Box<dyn Fn(bool) -> String>,
) -> Kernel<'a> {
    Kernel {
        key: key.into(),
        entry,
        groups: p.grid(n, WG),
        make_src: src,
    }
}

pub(super) fn cross_entropy<'a>(p: &mut Planner<'a>) -> Result<Kernel<'a>> {
    let rows = p.ctx.tensor(p.src(0)).nrows();
    p.tensors(&[0, 1])?;
    p.u(0, rows as u32);
    Ok(Kernel {
        key: "cross_entropy_loss".into(),
        entry: "main",
        groups: [1, 1, 1],
        make_src: cross_entropy_src(),
    })
}

pub(super) fn cross_entropy_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1"], String::new(), CROSS_ENTROPY)
}

pub(super) fn repeat_back<'a>(p: &mut Planner<'a>) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    let tiles = p.ctx.tensor(p.src(0)).nelements() / n;
    p.tensors(&[0])?;
    p.u(0, n as u32);
    p.u(1, tiles as u32);
    // One workgroup per element.
    Ok(Kernel {
        key: "repeat_back".into(),
        entry: "main",
        groups: p.grid(n, 1),
        make_src: repeat_back_src(),
    })
}

pub(super) fn repeat_back_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0"], String::new(), REPEAT_BACK)
}

pub(super) fn unary_back<'a>(p: &mut Planner<'a>, u: UnaryOp) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    p.tensors(&[0, 1])?;
    p.u(0, n as u32);
    let f = match u {
        UnaryOp::Abs => UnaryBackFn::Abs,
        UnaryOp::Neg => UnaryBackFn::Neg,
        UnaryOp::Relu => UnaryBackFn::Relu,
        UnaryOp::Gelu => UnaryBackFn::Gelu,
        UnaryOp::GeluErf => UnaryBackFn::GeluErf,
        UnaryOp::Silu => UnaryBackFn::Silu,
        UnaryOp::Tanh => UnaryBackFn::Tanh,
        UnaryOp::Sigmoid => UnaryBackFn::Sigmoid,
        UnaryOp::Exp => UnaryBackFn::Exp,
    };
    p.u(1, f.code());
    Ok(per_item(p, "unary_back", "main", n, unary_back_src()))
}

pub(super) fn unary_back_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1"], UnaryBackFn::wgsl(), UNARY_BACK)
}

pub(super) fn norm_back<'a>(p: &mut Planner<'a>, eps: f32, rms: bool) -> Result<Kernel<'a>> {
    let rows = p.t().nrows();
    p.tensors(&[0, 1])?;
    p.u(0, rows as u32);
    p.u(1, rms as u32);
    p.f(2, eps);
    Ok(Kernel {
        key: "norm_back".into(),
        entry: "main",
        groups: p.grid(rows, 1),
        make_src: norm_back_src(),
    })
}

pub(super) fn norm_back_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1"], String::new(), NORM_BACK)
}

/// `offset` and `nb` in bytes of the (contiguous f32) destination.
pub(super) fn view_back<'a>(
    p: &mut Planner<'a>,
    offset: usize,
    nb: [usize; 4],
) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    p.tensors(&[0])?;
    p.u(0, n as u32);
    p.u(1, (offset / 4) as u32);
    for (i, s) in nb.iter().enumerate() {
        p.u(2 + i, (s / 4) as u32);
    }
    Ok(per_item(p, "view_back", "main", n, view_back_src()))
}

pub(super) fn view_back_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0"], String::new(), VIEW_BACK)
}

pub(super) fn get_rows_back<'a>(p: &mut Planner<'a>) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    p.tensors(&[0, 1])?;
    p.u(0, n as u32);
    Ok(per_item(p, "get_rows_back", "main", n, get_rows_back_src()))
}

pub(super) fn get_rows_back_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1"], String::new(), GET_ROWS_BACK)
}

/// `conv`: strides, paddings and dilations (s0, s1, p0, p1, d0, d1). The kernel (src1) gives
/// only its shape: it is not bound.
pub(super) fn im2col_back<'a>(
    p: &mut Planner<'a>,
    conv: [usize; 6],
    is_2d: bool,
) -> Result<Kernel<'a>> {
    let t = p.t();
    let n = t.nelements();
    let k = p.ctx.tensor(p.src(1));
    let g = p.ctx.tensor(p.src(0));
    p.tensors(&[0])?;
    let (kw, kh) = (k.ne[0], if is_2d { k.ne[1] } else { 1 });
    let (ow, oh) = (g.ne[1], if is_2d { g.ne[2] } else { 1 });
    let mut conv = conv;
    if !is_2d {
        // Fold the 1-D case into the 2-D one: input [IW, IC, N] as [IW, 1, IC, N], columns
        // [IC*KW, OW, N] as [IC*KW, OW, 1, N]; the unused axis has stride 1, no padding.
        let (dn, ds) = (p.params[1..5].to_vec(), p.params[5..9].to_vec());
        p.params[1..5].copy_from_slice(&[dn[0], 1, dn[1], dn[2]]);
        p.params[5..9].copy_from_slice(&[ds[0], 0, ds[1], ds[2]]);
        let gs = p.params[9 + 5..9 + 9].to_vec();
        p.params[9 + 5..9 + 9].copy_from_slice(&[gs[0], gs[1], 0, gs[2]]);
        conv = [conv[0], 1, conv[2], 0, conv[4], 1];
    }
    p.u(0, n as u32);
    for (i, v) in [kw, kh, ow, oh].into_iter().chain(conv).enumerate() {
        p.u(1 + i, v as u32);
    }
    Ok(per_item(p, "im2col_back", "main", n, im2col_back_src()))
}

pub(super) fn im2col_back_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0"], String::new(), IM2COL_BACK)
}

/// `window`: kernel size, strides and paddings (k0, k1, s0, s1, p0, p1).
pub(super) fn pool_2d_back<'a>(
    p: &mut Planner<'a>,
    op: PoolOp,
    window: [usize; 6],
) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    p.tensors(&[0, 1])?;
    p.u(0, n as u32);
    p.u(1, (op == PoolOp::Max) as u32);
    for (i, v) in window.iter().enumerate() {
        p.u(2 + i, *v as u32);
    }
    Ok(per_item(p, "pool_2d_back", "main", n, pool_2d_back_src()))
}

pub(super) fn pool_2d_back_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1"], String::new(), POOL_2D_BACK)
}

/// OPT_STEP_ADAMW (srcs: param, grad, state, hp) or OPT_STEP_SGD (param, grad, hp). The
/// parameter is bound once, as dst (the node is a view of it).
pub(super) fn opt_step<'a>(p: &mut Planner<'a>, adamw: bool) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    p.tensor(p.id)?;
    p.tensor(p.src(1))?;
    p.tensor(p.src(if adamw { 3 } else { 2 }))?;
    if adamw {
        p.tensor(p.src(2))?;
        // The state is written: a binding that overlaps another would be read from a copy
        // (compute.rs) and the update lost.
        let s = &p.binds[3];
        if p.binds[..3]
            .iter()
            .any(|b| b.buf == s.buf && b.offset < s.offset + s.size && s.offset < b.offset + b.size)
        {
            return Err(Error::Backend(format!(
                "OPT_STEP_ADAMW '{}': the optimizer state shares a storage binding with the \
                 parameter, gradient or hyper-parameters",
                p.t().name
            )));
        }
    }
    p.u(0, n as u32);
    let entry = OPT_STEP_ENTRIES[if adamw { 0 } else { 1 }];
    Ok(per_item(p, "opt_step", entry, n, opt_step_src()))
}

pub(super) fn opt_step_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src1", "src2", "src3"], String::new(), OPT_STEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `shader::tests`: the kernel names every generated code and no literal one.
    #[test]
    fn unary_back_switches_on_the_generated_codes() {
        for line in UnaryBackFn::wgsl().lines() {
            let name = line.split_whitespace().nth(1).expect("const NAME: ...");
            let name = name.trim_end_matches(':');
            assert!(UNARY_BACK.contains(name), "{name} unused in its shader");
        }
        assert!(
            !UNARY_BACK.contains("case 0u"),
            "literal op code in a shader"
        );
    }
}
