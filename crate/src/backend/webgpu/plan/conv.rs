//! im2col (`im2col.wgsl`, 1-D folded into 2-D) and pool_2d (`pool_2d.wgsl`).

use super::{Kernel, Planner, WG};
use crate::backend::webgpu::shader::{elem, plain, shader, tname, writer, IM2COL, POOL_2D};
use crate::tensor::PoolOp;
use crate::{DType, Result};

/// `conv`: strides, paddings and dilations (s0, s1, p0, p1, d0, d1).
pub(super) fn im2col<'a>(p: &mut Planner<'a>, conv: [usize; 6], is_2d: bool) -> Result<Kernel<'a>> {
    let t = p.t();
    let (n, d) = (t.nelements(), t.dtype);
    let k = p.ctx.tensor(p.src(0));
    let x = p.ctx.tensor(p.src(1));
    p.tensors(&[1])?;
    // Fold the 1-D case into the 2-D one: KH = IH = OH = 1.
    let (kw, kh) = (k.ne[0], if is_2d { k.ne[1] } else { 1 });
    let (iw, ih, ic, nb_) = if is_2d {
        (x.ne[0], x.ne[1], x.ne[2], x.ne[3])
    } else {
        (x.ne[0], 1, x.ne[1], x.ne[2])
    };
    let (ow, oh) = (t.ne[1], if is_2d { t.ne[2] } else { 1 });
    // Strides of src1 (slot 1) as (w, h, c, n) and of dst as (col, ow, oh, n).
    let xs = p.params[9 + 5..9 + 9].to_vec();
    let ds = p.params[5..9].to_vec();
    if !is_2d {
        p.params[9 + 5..9 + 9].copy_from_slice(&[xs[0], 0, xs[1], xs[2]]);
        p.params[5..9].copy_from_slice(&[ds[0], ds[1], 0, ds[2]]);
    }
    let vals = [[kw, kh, ic, iw, ih, ow, oh, nb_].as_slice(), &conv].concat();
    p.u(0, n as u32);
    for (i, v) in vals.iter().enumerate() {
        p.u(1 + i, *v as u32);
    }
    Ok(Kernel {
        key: format!("im2col_{}", tname(d)),
        entry: "main",
        groups: p.grid(n, WG),
        make_src: im2col_src(d),
    })
}

/// im2col writing a `d` (f32, or f16 on the f16 path) destination.
pub(super) fn im2col_src(d: DType) -> Box<dyn Fn(bool) -> String> {
    Box::new(move |f16| {
        shader(
            f16,
            &[("dst", elem(d, f16)), ("src1", "u32")],
            &writer(d, f16),
            IM2COL,
        )
    })
}

/// `window`: kernel size, strides and paddings (k0, k1, s0, s1, p0, p1).
pub(super) fn pool_2d<'a>(
    p: &mut Planner<'a>,
    op: PoolOp,
    window: [usize; 6],
) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    p.tensors(&[0])?;
    p.u(0, n as u32);
    p.u(1, (op == PoolOp::Max) as u32);
    for (i, v) in window.iter().enumerate() {
        p.u(2 + i, *v as u32);
    }
    Ok(Kernel {
        key: "pool_2d".into(),
        entry: "main",
        groups: p.grid(n, WG),
        make_src: pool_2d_src(),
    })
}

pub(super) fn pool_2d_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0"], String::new(), POOL_2D)
}
