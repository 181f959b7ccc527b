//! mul_mat (`mul_mat.wgsl`: tiled mat_mat, mat_vec, mat_vec_rows) and get_rows
//! (`get_rows.wgsl`), both with the weight (src0) dequantized in the shader, over a part of
//! src0's rows (and for mul_mat of dst/src1's columns) when split.

use super::{Kernel, Part, Planner, WG};
use crate::backend::webgpu::shader::{elem, load_a, shader, tname, GET_ROWS, MUL_MAT};
use crate::{DType, Error, Result};

/// Output tile of the tiled mul_mat.
const TILE: usize = 64;

pub(super) fn mul_mat<'a>(p: &mut Planner<'a>, part: Option<Part>) -> Result<Kernel<'a>> {
    let (t, id) = (p.t(), p.id);
    let a = p.ctx.tensor(p.src(0));
    let b = p.ctx.tensor(p.src(1));
    let s0 = a.dtype;
    let (m, nn) = match part {
        // Rows r0..r1 of src0 give elements r0..r1 of the dst columns c0..c1, which come from
        // src1's columns c0..c1 (2-D only when c0..c1 is not all of them).
        Some(Part {
            rows: (r0, r1),
            cols: (c0, c1),
        }) => {
            p.tensor_part(
                id,
                r0 * t.nb[0] + c0 * t.nb[1],
                [r1 - r0, c1 - c0, t.ne[2], t.ne[3]],
            )?;
            p.tensor_part(p.src(0), r0 * a.nb[1], [a.ne[0], r1 - r0, 1, 1])?;
            p.tensor_part(p.src(1), c0 * b.nb[1], [b.ne[0], c1 - c0, b.ne[2], b.ne[3]])?;
            (r1 - r0, c1 - c0)
        }
        None => {
            p.tensors(&[0, 1])?;
            (a.ne[1], b.ne[1])
        }
    };
    let batch = b.ne[2] * b.ne[3];
    p.u(0, (b.ne[2] / a.ne[2].max(1)) as u32);
    p.u(1, (b.ne[3] / a.ne[3].max(1)) as u32);
    let vec = nn == 1;
    let rows = vec && p.shared.matvec_rows;
    let maxd = p.shared.limits.max_compute_workgroups_per_dimension;
    let groups = if rows {
        p.grid(m * batch, 64)
    } else if vec {
        p.grid(m * batch, 1)
    } else {
        [
            m.div_ceil(TILE) as u32,
            nn.div_ceil(TILE) as u32,
            batch as u32,
        ]
    };
    if !vec && groups.iter().any(|&g| g > maxd) {
        return Err(Error::Backend(format!(
            "mul_mat '{}' needs more workgroups than the adapter allows",
            t.name
        )));
    }
    Ok(Kernel {
        key: format!("mul_mat_{}", tname(s0)),
        entry: MUL_MAT_ENTRIES[if rows {
            2
        } else if vec {
            1
        } else {
            0
        }],
        groups,
        make_src: mul_mat_src(s0),
    })
}

pub(super) fn get_rows<'a>(p: &mut Planner<'a>, part: Option<Part>) -> Result<Kernel<'a>> {
    let t = p.t();
    let n = t.nelements();
    let a = p.ctx.tensor(p.src(0));
    p.tensor(p.id)?;
    let (r0, r1) = part.map_or((0, a.ne[1]), |p| p.rows);
    p.tensor_part(p.src(0), r0 * a.nb[1], [a.ne[0], r1 - r0, a.ne[2], a.ne[3]])?;
    p.tensor(p.src(1))?;
    p.u(0, n as u32);
    // Rows outside [r0, r1) are another dispatch's; indices outside all rows give NaN (written
    // by the dispatch of the first range).
    p.u(1, r0 as u32);
    p.u(2, a.ne[1] as u32);
    Ok(Kernel {
        key: format!("get_rows_{}", tname(a.dtype)),
        entry: "main",
        groups: p.grid(n, WG),
        make_src: get_rows_src(a.dtype),
    })
}

/// The entry points of `mul_mat.wgsl`: tiled, one column, one column with a row per invocation.
pub(super) const MUL_MAT_ENTRIES: [&str; 3] = ["mat_mat", "mat_vec", "mat_vec_rows"];

pub(super) fn mul_mat_src(s0: DType) -> Box<dyn Fn(bool) -> String> {
    weight_kernel(s0, MUL_MAT)
}

pub(super) fn get_rows_src(s0: DType) -> Box<dyn Fn(bool) -> String> {
    weight_kernel(s0, GET_ROWS)
}

/// The source of a kernel reading a weight of type `s0` (dst, src0 = the weight, src1).
fn weight_kernel(s0: DType, body: &'static str) -> Box<dyn Fn(bool) -> String> {
    Box::new(move |f16| {
        shader(
            f16,
            &[("dst", "u32"), ("src0", elem(s0, f16)), ("src1", "u32")],
            &load_a(s0, f16),
            body,
        )
    })
}
