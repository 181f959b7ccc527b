//! Kernels with one workgroup per row: norm and rms_norm (`norm.wgsl`), soft_max
//! (`soft_max.wgsl`), and the row reductions sum_rows, mean, argmax, sum (`rows.wgsl`).

use super::{Kernel, Planner};
use crate::backend::webgpu::shader::{
    elem, op_codes, plain, reader, shader, tname, NORM, ROWS, SOFT_MAX,
};
use crate::tensor::{Alibi, Op};
use crate::{DType, Result};

op_codes!(
    /// The reductions of `rows.wgsl`.
    RowsFn, "ROWS" { SumRows = "SUM_ROWS", Mean = "MEAN", Argmax = "ARGMAX", Sum = "SUM" }
);

pub(super) fn norm<'a>(p: &mut Planner<'a>, eps: f32) -> Result<Kernel<'a>> {
    let t = p.t();
    p.tensors(&[0])?;
    let rows = t.nrows();
    p.u(0, rows as u32);
    p.u(1, matches!(t.op, Op::RmsNorm { .. }) as u32);
    p.f(2, eps);
    Ok(Kernel {
        key: "norm".into(),
        entry: "main",
        groups: p.grid(rows, 1),
        make_src: norm_src(),
    })
}

pub(super) fn norm_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0"], String::new(), NORM)
}

/// soft_max with an optional f32/f16 mask (without one, src0 is bound in its place) and ALiBi.
pub(super) fn soft_max<'a>(p: &mut Planner<'a>, scale: f32, max_bias: f32) -> Result<Kernel<'a>> {
    let t = p.t();
    p.tensors(&[0])?;
    let mask = t.src[1];
    let mt = mask.map(|m| p.ctx.tensor(m).dtype).unwrap_or(DType::F32);
    p.tensor(mask.unwrap_or(p.src(0)))?;
    let rows = t.nrows();
    p.u(0, rows as u32);
    p.f(1, scale);
    p.u(2, mask.is_some() as u32);
    let alibi = Alibi::new(max_bias, t.ne[2]);
    p.f(3, alibi.max_bias);
    p.u(4, alibi.n_head_log2);
    p.f(5, alibi.m0);
    p.f(6, alibi.m1);
    Ok(Kernel {
        key: format!("soft_max_{}", tname(mt)),
        entry: "main",
        groups: p.grid(rows, 1),
        make_src: soft_max_src(mt),
    })
}

/// soft_max with a mask of type `mt` (f32 when there is none).
pub(super) fn soft_max_src(mt: DType) -> Box<dyn Fn(bool) -> String> {
    Box::new(move |f16| {
        shader(
            f16,
            &[("dst", "u32"), ("src0", "u32"), ("src1", elem(mt, f16))],
            &reader("read_mask", "src1", mt, f16),
            SOFT_MAX,
        )
    })
}

pub(super) fn rows<'a>(p: &mut Planner<'a>) -> Result<Kernel<'a>> {
    let t = p.t();
    p.tensors(&[0])?;
    let rows = match t.op {
        Op::Sum => 1,
        _ => p.ctx.tensor(p.src(0)).nrows(),
    };
    p.u(0, rows as u32);
    let f = match t.op {
        Op::SumRows => RowsFn::SumRows,
        Op::Mean => RowsFn::Mean,
        Op::Argmax => RowsFn::Argmax,
        _ => RowsFn::Sum,
    };
    p.u(1, f.code());
    Ok(Kernel {
        key: "rows".into(),
        entry: "main",
        groups: p.grid(rows, 1),
        make_src: rows_src(),
    })
}

pub(super) fn rows_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0"], RowsFn::wgsl(), ROWS)
}
