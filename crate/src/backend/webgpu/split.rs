//! Nodes whose tensors are larger than one storage binding: mul_mat and get_rows over ranges
//! of src0's rows, mul_mat over ranges of dst/src1 columns, one binding and dispatch each.

use super::Shared;
use crate::tensor::{Op, Tensor};
use crate::{Context, DType, TensorId};

/// Rows of src0 per binding when `x` (src0 of `t`) is too large for one storage binding and the
/// op can run over row ranges instead: mul_mat and get_rows of a 2-D src0 (a weight matrix such
/// as a large vocabulary's embedding/output). `None` when it fits or cannot be split.
fn row_split(shared: &Shared, t: &Tensor, x: &Tensor) -> Option<usize> {
    let align = shared.alignment();
    let max = shared.max_binding();
    if x.nbytes() + align <= max {
        return None;
    }
    if !matches!(t.op, Op::MulMat | Op::GetRows) || x.ne[2] != 1 || x.ne[3] != 1 {
        return None;
    }
    // A binding starts up to `align` bytes before the range and is padded to a word.
    let row = x.nb[1].max(span_bytes(x.dtype, [x.ne[0], 1, 1, 1], x.nb));
    let rows = max.checked_sub(align + 4)? / row;
    (rows >= 1).then_some(rows)
}

/// How a node is split over bindings and dispatches (see [`split_of`]).
#[derive(Debug, Default)]
pub(super) struct Split {
    /// Rows of src0 per dispatch (src0 over one binding).
    pub rows: Option<usize>,
    /// Columns of src1 and dst per dispatch (mul_mat whose dst or src1 is over one binding).
    pub cols: Option<usize>,
    /// Why dst/src1 cannot be split by columns, when one of them is over a binding.
    pub why_not: Option<String>,
}

/// The split of node `t`: rows of src0 ([`row_split`]) and, for a mul_mat whose output (e.g.
/// logits [vocab, n_tokens]) or src1 is over one binding, ranges of columns (tokens): each
/// dispatch binds the slice of dst and src1 of its columns. A slice's binding starts at the
/// storage offset alignment at or below it and the kernel gets the element offset inside the
/// binding, so any column start works as long as `align` + one slice fits.
pub(super) fn split_of(shared: &Shared, ctx: &Context, t: &Tensor) -> Split {
    let mut s = Split::default();
    let Some(x) = t.src[0].map(|i| ctx.tensor(i)) else {
        return s;
    };
    s.rows = row_split(shared, t, x);
    if t.op != Op::MulMat {
        return s;
    }
    let Some(b) = t.src[1].map(|i| ctx.tensor(i)) else {
        return s;
    };
    let align = shared.alignment();
    let max = shared.max_binding();
    if t.nbytes() + align <= max && b.nbytes() + align <= max {
        return s;
    }
    if t.ne[2] * t.ne[3] != 1 || b.ne[2] * b.ne[3] != 1 {
        s.why_not = Some("a batched mul_mat is split by columns only in 2-D".into());
        return s;
    }
    // Largest column count c with span(c) = span(1) + (c - 1) * nb[1] + align + 4 <= max, for
    // dst (all its rows, though a row split binds fewer) and src1.
    let fit = |dtype: DType, ne0: usize, nb: [usize; 4]| -> Option<usize> {
        let one = span_bytes(dtype, [ne0, 1, 1, 1], nb);
        let room = max.checked_sub(align + 4 + one)?;
        Some(1 + room.checked_div(nb[1]).unwrap_or(usize::MAX))
    };
    match (fit(t.dtype, t.ne[0], t.nb), fit(b.dtype, b.ne[0], b.nb)) {
        (Some(cd), Some(cb)) => s.cols = Some(cd.min(cb).min(t.ne[1]).max(1)),
        _ => {
            s.why_not = Some(format!(
                "one column of dst ({} bytes) or src1 ({} bytes) is over a binding",
                span_bytes(t.dtype, [t.ne[0], 1, 1, 1], t.nb),
                span_bytes(b.dtype, [b.ne[0], 1, 1, 1], b.nb)
            ))
        }
    }
    s
}

/// How many bindings (and dispatches) node `id` is split over when one of its tensors is larger
/// than a storage binding; `None` when it runs as one dispatch.
pub(crate) fn split_note(shared: &Shared, ctx: &Context, id: TensorId) -> Option<String> {
    let t = ctx.tensor(id);
    let x = ctx.tensor(t.src[0]?);
    let s = split_of(shared, ctx, t);
    let mut parts = Vec::new();
    if let Some(rows) = s.rows {
        parts.push(format!(
            "src0 '{}' ({} bytes) split into {} bindings/dispatches of up to {rows} rows",
            x.name,
            x.nbytes(),
            x.ne[1].div_ceil(rows)
        ));
    }
    if let Some(cols) = s.cols {
        parts.push(format!(
            "dst '{}' ({} bytes) and src1 split into {} bindings/dispatches of up to {cols} \
             columns",
            t.name,
            t.nbytes(),
            t.ne[1].div_ceil(cols)
        ));
    }
    if parts.is_empty() {
        return None;
    }
    Some(format!(
        "over max_storage_buffer_binding_size ({} bytes): {}",
        shared.max_binding(),
        parts.join("; ")
    ))
}

/// Bytes from the first to the last byte of a tensor of `dtype` with shape `ne`, strides `nb`.
pub(super) fn span_bytes(dtype: DType, ne: [usize; 4], nb: [usize; 4]) -> usize {
    if ne.contains(&0) {
        return 0;
    }
    let bs = dtype.block_size();
    let mut n = if bs == 1 {
        dtype.type_size() + (ne[0] - 1) * nb[0]
    } else {
        ne[0] / bs * nb[0]
    };
    for i in 1..4 {
        n += (ne[i] - 1) * nb[i];
    }
    n
}

/// The rows [r0, r1) of src0 and the columns [c0, c1) of src1/dst one dispatch computes.
#[derive(Clone, Copy)]
pub(super) struct Part {
    pub rows: (usize, usize),
    pub cols: (usize, usize),
}

/// The parts of node `t` split as `s`: every column range with every row range.
pub(super) fn parts(ctx: &Context, t: &Tensor, s: &Split) -> Vec<Part> {
    let ranges = |n: usize, per: Option<usize>| -> Vec<(usize, usize)> {
        let per = per.unwrap_or(n).max(1);
        (0..n).step_by(per).map(|a| (a, (a + per).min(n))).collect()
    };
    let rows = ranges(t.src[0].map_or(0, |x| ctx.tensor(x).ne[1]), s.rows);
    let cols = ranges(t.ne[1], s.cols);
    cols.iter()
        .flat_map(|&c| rows.iter().map(move |&r| Part { rows: r, cols: c }))
        .collect()
}
