//! CPU kernels of the backward-pass ops and the optimizer steps (f32). Every kernel writes a
//! disjoint part of its destination per thread: scatters (view_back, get_rows_back) split by
//! destination columns or run on one thread, the window ops (im2col_back, pool_2d_back) gather.

use super::super::{thread_range, ComputeParams, NodeRef, TensorRef};
use crate::tensor::{Op, PoolOp, UnaryOp};
use crate::DType;

/// Ops whose kernels live here.
pub fn is_train_op(op: &Op) -> bool {
    matches!(
        op,
        Op::RepeatBack
            | Op::UnaryBack(_)
            | Op::NormBack { .. }
            | Op::ViewBack { .. }
            | Op::GetRowsBack
            | Op::Im2ColBack { .. }
            | Op::Pool2dBack { .. }
            | Op::OptStepAdamW
            | Op::OptStepSgd
    )
}

fn f32s(ts: &[Option<&TensorRef>]) -> bool {
    ts.iter().all(|t| t.is_some_and(|t| t.dtype == DType::F32))
}

pub fn supported(node: &NodeRef) -> bool {
    let (d, s0, s1) = (Some(&node.dst), node.src[0].as_ref(), node.src[1].as_ref());
    match node.op {
        Op::RepeatBack | Op::ViewBack { .. } => f32s(&[d, s0]),
        Op::UnaryBack(_) | Op::NormBack { .. } | Op::Pool2dBack { .. } => f32s(&[d, s0, s1]),
        Op::GetRowsBack => f32s(&[d, s0]) && s1.is_some_and(|r| r.dtype == DType::I32),
        Op::Im2ColBack { .. } => f32s(&[d, s0]) && s1.is_some(),
        Op::OptStepAdamW => {
            let s2 = node.src[2].as_ref();
            f32s(&[d, s0, s1, s2, node.src[3].as_ref()])
                && [s0, s1, s2]
                    .iter()
                    .all(|t| t.is_some_and(|t| t.is_contiguous()))
        }
        Op::OptStepSgd => {
            f32s(&[d, s0, s1, node.src[2].as_ref()])
                && [s0, s1]
                    .iter()
                    .all(|t| t.is_some_and(|t| t.is_contiguous()))
        }
        _ => false,
    }
}

pub fn forward(p: &ComputeParams, node: &NodeRef) {
    match node.op {
        Op::RepeatBack => repeat_back(p, node),
        Op::UnaryBack(u) => unary_back(p, node, u),
        Op::NormBack { eps, rms } => norm_back(p, node, eps, rms),
        Op::ViewBack { offset, nb } => view_back(p, node, offset, nb),
        Op::GetRowsBack => get_rows_back(p, node),
        Op::Im2ColBack {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        } => im2col_back(p, node, [s0, s1], [p0, p1], [d0, d1], is_2d),
        Op::Pool2dBack {
            op,
            k0,
            k1,
            s0,
            s1,
            p0,
            p1,
        } => pool_2d_back(p, node, op, [k0, k1], [s0, s1], [p0, p1]),
        Op::OptStepAdamW => adamw(p, node),
        Op::OptStepSgd => sgd(p, node),
        _ => unreachable!("checked by supported"),
    }
}

/// Read the f32 at (i0, i1, i2, i3).
///
/// # Safety
/// The indices are inside `t`, an f32 tensor.
#[inline(always)]
unsafe fn rd(t: &TensorRef, i0: usize, i1: usize, i2: usize, i3: usize) -> f32 {
    // SAFETY: the caller keeps the indices inside the tensor.
    unsafe { (t.at(i0, i1, i2, i3) as *const f32).read_unaligned() }
}

/// Write the f32 at (i0, i1, i2, i3).
///
/// # Safety
/// As [`rd`]; no other thread writes the element.
#[inline(always)]
unsafe fn wr(t: &TensorRef, i0: usize, i1: usize, i2: usize, i3: usize, v: f32) {
    // SAFETY: as rd.
    unsafe { (t.at(i0, i1, i2, i3) as *mut f32).write_unaligned(v) }
}

fn row_index(ir: usize, ne: &[usize; 4]) -> (usize, usize, usize) {
    (ir % ne[1], (ir / ne[1]) % ne[2], ir / (ne[1] * ne[2]))
}

fn repeat_back(p: &ComputeParams, node: &NodeRef) {
    let (d, a) = (&node.dst, node.src0());
    let mut reps = [
        a.ne[0] / d.ne[0],
        a.ne[1] / d.ne[1],
        a.ne[2] / d.ne[2],
        a.ne[3] / d.ne[3],
    ];
    // An empty source sums to zeros; its other dims may claim 2^40 repeats of nothing (found
    // by the graph fuzzer: a hang).
    if reps.contains(&0) {
        reps = [0; 4];
    }
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        for i0 in 0..d.ne[0] {
            let mut s = 0f64;
            for t3 in 0..reps[3] {
                for t2 in 0..reps[2] {
                    for t1 in 0..reps[1] {
                        let (j1, j2, j3) =
                            (i1 + t1 * d.ne[1], i2 + t2 * d.ne[2], i3 + t3 * d.ne[3]);
                        for t0 in 0..reps[0] {
                            // SAFETY: j* < d.ne * reps = a.ne.
                            s += unsafe { rd(a, i0 + t0 * d.ne[0], j1, j2, j3) } as f64;
                        }
                    }
                }
            }
            // SAFETY: inside dst; this thread's row.
            unsafe { wr(d, i0, i1, i2, i3, s as f32) };
        }
    }
}

/// f'(x) of each unary function.
pub fn unary_derivative(u: UnaryOp, x: f32) -> f32 {
    match u {
        UnaryOp::Abs => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Neg => -1.0,
        UnaryOp::Relu => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        UnaryOp::Gelu => {
            const C: f32 = 0.797_884_6; // sqrt(2/pi)
            const A: f32 = 0.044_715;
            let t = (C * (x + A * x * x * x)).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3.0 * A * x * x)
        }
        UnaryOp::GeluErf => {
            let cdf = 0.5 * (1.0 + super::basic::erf(x as f64 / std::f64::consts::SQRT_2) as f32);
            let pdf = (-0.5 * x * x).exp() * 0.398_942_3; // 1/sqrt(2 pi)
            cdf + x * pdf
        }
        UnaryOp::Silu => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 + x * (1.0 - s))
        }
        UnaryOp::Tanh => {
            let t = x.tanh();
            1.0 - t * t
        }
        UnaryOp::Sigmoid => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 - s)
        }
        UnaryOp::Exp => x.exp(),
    }
}

fn unary_back(p: &ComputeParams, node: &NodeRef, u: UnaryOp) {
    let (d, g, x) = (&node.dst, node.src0(), node.src1());
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        for i0 in 0..d.ne[0] {
            // SAFETY: the three tensors have the same shape (checked at build time).
            unsafe {
                let v = rd(g, i0, i1, i2, i3) * unary_derivative(u, rd(x, i0, i1, i2, i3));
                wr(d, i0, i1, i2, i3, v);
            }
        }
    }
}

fn norm_back(p: &ComputeParams, node: &NodeRef, eps: f32, rms: bool) {
    let (d, g, x) = (&node.dst, node.src0(), node.src1());
    let n = d.ne[0];
    let mut y = vec![0f32; n];
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        // SAFETY: same shapes (checked at build time); this thread's row.
        unsafe {
            let mean = if rms {
                0.0
            } else {
                (0..n).map(|i| rd(x, i, i1, i2, i3) as f64).sum::<f64>() / n as f64
            };
            let var = (0..n)
                .map(|i| {
                    let c = rd(x, i, i1, i2, i3) as f64 - mean;
                    c * c
                })
                .sum::<f64>()
                / n as f64;
            let inv = 1.0 / (var + eps as f64).sqrt();
            let (mut gm, mut gy) = (0f64, 0f64);
            for (i, yi) in y.iter_mut().enumerate() {
                let v = (rd(x, i, i1, i2, i3) as f64 - mean) * inv;
                *yi = v as f32;
                let gi = rd(g, i, i1, i2, i3) as f64;
                gm += gi;
                gy += gi * v;
            }
            let (gm, gy) = (gm / n as f64, gy / n as f64);
            for (i, &yi) in y.iter().enumerate() {
                let gi = rd(g, i, i1, i2, i3) as f64;
                // rms_norm: inv * (g - y mean(g y)); norm also removes the mean of g.
                let c = if rms { 0.0 } else { gm };
                wr(d, i, i1, i2, i3, (inv * (gi - c - yi as f64 * gy)) as f32);
            }
        }
    }
}

fn view_back(p: &ComputeParams, node: &NodeRef, offset: usize, nb: [usize; 4]) {
    // Views may select an element more than once (stride 0): one thread adds them in order.
    if p.ith != 0 {
        return;
    }
    let (d, g) = (&node.dst, node.src0());
    let n = d.nelements();
    // SAFETY: dst is a contiguous f32 tensor of n elements.
    let out = unsafe { std::slice::from_raw_parts_mut(d.ptr as *mut f32, n) };
    out.fill(0.0);
    for i3 in 0..g.ne[3] {
        for i2 in 0..g.ne[2] {
            for i1 in 0..g.ne[1] {
                for i0 in 0..g.ne[0] {
                    let byte = offset + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
                    // SAFETY: the view lies inside dst (checked at build time).
                    out[byte / 4] += unsafe { rd(g, i0, i1, i2, i3) };
                }
            }
        }
    }
}

fn get_rows_back(p: &ComputeParams, node: &NodeRef) {
    let (d, g, rows) = (&node.dst, node.src0(), node.src1());
    // Each thread owns a range of columns of every row, so scattered rows never collide.
    let cols = thread_range(d.ne[0], p.ith, p.nth);
    for i3 in 0..d.ne[3] {
        for i2 in 0..d.ne[2] {
            for i1 in 0..d.ne[1] {
                for i0 in cols.clone() {
                    // SAFETY: inside dst.
                    unsafe { wr(d, i0, i1, i2, i3, 0.0) };
                }
            }
            for j in 0..g.ne[1] {
                // SAFETY: rows has shape [g.ne1, d.ne2, d.ne3] (checked at build time).
                let r = unsafe { (rows.at(j, i2, i3, 0) as *const i32).read_unaligned() };
                if r < 0 || r as usize >= d.ne[1] {
                    p.fault(|| format!("GET_ROWS_BACK: row id {r} out of range [0, {})", d.ne[1]));
                    continue;
                }
                for i0 in cols.clone() {
                    // SAFETY: r checked above; j inside g.
                    unsafe {
                        let v = rd(d, i0, r as usize, i2, i3) + rd(g, i0, j, i2, i3);
                        wr(d, i0, r as usize, i2, i3, v);
                    }
                }
            }
        }
    }
}

/// The output positions `o` with `o * s + k * dil - pad == i` for some k < ks, o < on:
/// calls `f(o, k)` for each.
#[inline(always)]
fn windows_covering(
    i: usize,
    ks: usize,
    s: usize,
    pad: usize,
    dil: usize,
    on: usize,
    mut f: impl FnMut(usize, usize),
) {
    if dil == 1 {
        // Without dilation the covering windows are a range: o*s in [i+pad-(ks-1), i+pad].
        let hi = i + pad;
        let o_lo = hi.saturating_sub(ks - 1).div_ceil(s);
        let o_end = (hi / s + 1).min(on);
        for o in (o_lo..o_end).rev() {
            f(o, hi - o * s);
        }
        return;
    }
    // Only the k with o = (i + pad − k·dil) / s < on can match, so k·dil > i + pad − on·s:
    // start there (in the same ascending order). Scanning every k cost ks per element: a
    // 65536-wide dilated kernel took 22 s for one 65536-element row (found by fuzzing).
    let hi = i + pad;
    let k_lo = hi
        .checked_sub(on.saturating_mul(s))
        .map_or(0, |over| over / dil + 1);
    for k in k_lo..ks {
        let Some(num) = hi.checked_sub(k * dil) else {
            break;
        };
        if num % s == 0 && num / s < on {
            f(num / s, k);
        }
    }
}

fn im2col_back(
    p: &ComputeParams,
    node: &NodeRef,
    s: [usize; 2],
    pd: [usize; 2],
    dl: [usize; 2],
    is_2d: bool,
) {
    let (d, g, kernel) = (&node.dst, node.src0(), node.src1());
    // The 1D case as 2D with height 1: input [IW, IC, N], columns [IC*KW, OW, N].
    let (kw, kh) = if is_2d {
        (kernel.ne[0], kernel.ne[1])
    } else {
        (kernel.ne[0], 1)
    };
    let (ow, oh) = if is_2d {
        (g.ne[1], g.ne[2])
    } else {
        (g.ne[1], 1)
    };
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        // (iy, ic, n) of this input row.
        let (iy, ic, n) = if is_2d { (i1, i2, i3) } else { (0, i1, i2) };
        for ix in 0..d.ne[0] {
            let mut acc = 0f32;
            let mut add_rows = |oy: usize, ky: usize| {
                windows_covering(ix, kw, s[0], pd[0], dl[0], ow, |ox, kx| {
                    let k = (ic * kh + ky) * kw + kx;
                    // SAFETY: k < IC*KH*KW, ox < OW, oy < OH, n < N: inside the columns.
                    acc += unsafe {
                        if is_2d {
                            rd(g, k, ox, oy, n)
                        } else {
                            rd(g, k, ox, n, 0)
                        }
                    };
                });
            };
            if is_2d {
                windows_covering(iy, kh, s[1], pd[1], dl[1], oh, &mut add_rows);
            } else {
                add_rows(0, 0);
            }
            // SAFETY: inside dst; this thread's row.
            unsafe { wr(d, ix, i1, i2, i3, acc) };
        }
    }
}

fn pool_2d_back(
    p: &ComputeParams,
    node: &NodeRef,
    op: PoolOp,
    k: [usize; 2],
    s: [usize; 2],
    pd: [usize; 2],
) {
    let (d, g, x) = (&node.dst, node.src0(), node.src1());
    let area = (k[0] * k[1]) as f32;
    let mut row = vec![0f32; d.ne[0]];
    // Each thread owns whole input rows: the windows of every output row covering the input
    // row add their gradient into it (max: at the window's pick, if it lies in this row).
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (iy, i2, i3) = row_index(ir, &d.ne);
        row.fill(0.0);
        windows_covering(iy, k[1], s[1], pd[1], 1, g.ne[1], |oy, _| {
            let y0 = (oy * s[1]) as isize - pd[1] as isize;
            for ox in 0..g.ne[0] {
                // SAFETY: (ox, oy) inside the pooled gradient.
                let gv = unsafe { rd(g, ox, oy, i2, i3) };
                let x0 = (ox * s[0]) as isize - pd[0] as isize;
                // Clamped at both ends: with padding wider than the kernel a window can end
                // before column 0.
                let cols = (x0.max(0) as usize)
                    ..((x0 + k[0] as isize).clamp(0, x.ne[0] as isize) as usize);
                match op {
                    PoolOp::Avg => {
                        for c in cols {
                            row[c] += gv / area;
                        }
                    }
                    PoolOp::Max => {
                        // The forward's pick: the first strict maximum in scan order.
                        let mut best = (-f32::MAX, usize::MAX, usize::MAX);
                        for wy in 0..k[1] as isize {
                            let y = y0 + wy;
                            if y < 0 || y as usize >= x.ne[1] {
                                continue;
                            }
                            for c in cols.clone() {
                                // SAFETY: (c, y) inside the input.
                                let v = unsafe { rd(x, c, y as usize, i2, i3) };
                                if v > best.0 {
                                    best = (v, c, y as usize);
                                }
                            }
                        }
                        if best.2 == iy {
                            row[best.1] += gv;
                        }
                    }
                }
            }
        });
        for (ix, &v) in row.iter().enumerate() {
            // SAFETY: inside dst; this thread's row.
            unsafe { wr(d, ix, iy, i2, i3, v) };
        }
    }
}

/// The elements of thread `ith`'s share of a contiguous f32 tensor.
///
/// # Safety
/// `t` is contiguous f32; the range is this thread's alone when written.
unsafe fn flat<'a>(t: &TensorRef, range: &std::ops::Range<usize>) -> &'a mut [f32] {
    // SAFETY: the caller guarantees a contiguous f32 tensor; the range lies inside it.
    unsafe { std::slice::from_raw_parts_mut((t.ptr as *mut f32).add(range.start), range.len()) }
}

/// f32 hyper-parameter `i` of the tensor `hp`.
fn hparam(hp: &TensorRef, i: usize) -> f32 {
    // SAFETY: the constructors check the hyper-parameter tensor's length.
    unsafe { rd(hp, i, 0, 0, 0) }
}

fn adamw(p: &ComputeParams, node: &NodeRef) {
    let (w, g, state, hp) = (&node.dst, node.src1(), node.src[2], node.src[3]);
    let (Some(state), Some(hp)) = (state, hp) else {
        unreachable!("checked by supported")
    };
    let [alpha, beta1, beta2, eps, wd, beta1h, beta2h] =
        [0, 1, 2, 3, 4, 5, 6].map(|i| hparam(&hp, i));
    let keep = 1.0 - alpha * wd;
    let n = w.nelements();
    let r = thread_range(n, p.ith, p.nth);
    // SAFETY: w (the parameter, which dst views), g and state are contiguous f32 (supported);
    // state holds 2n elements; each thread owns its range.
    let (ws, gs, ms, vs) = unsafe {
        (
            flat(w, &r),
            flat(g, &r),
            flat(&state, &r),
            flat(&state, &(r.start + n..r.end + n)),
        )
    };
    for i in 0..r.len() {
        let gi = gs[i];
        ms[i] = ms[i] * beta1 + gi * (1.0 - beta1);
        vs[i] = vs[i] * beta2 + gi * gi * (1.0 - beta2);
        let mh = ms[i] * beta1h;
        let vh = (vs[i] * beta2h).sqrt() + eps;
        ws[i] = ws[i] * keep - alpha * mh / vh;
    }
}

fn sgd(p: &ComputeParams, node: &NodeRef) {
    let (w, g) = (&node.dst, node.src1());
    let Some(hp) = node.src[2] else {
        unreachable!("checked by supported")
    };
    let (alpha, wd) = (hparam(&hp, 0), hparam(&hp, 1));
    let keep = 1.0 - alpha * wd;
    let r = thread_range(w.nelements(), p.ith, p.nth);
    // SAFETY: contiguous f32 parameter and gradient (supported); each thread owns its range.
    let (ws, gs) = unsafe { (flat(w, &r), flat(g, &r)) };
    for (wi, gi) in ws.iter_mut().zip(gs.iter()) {
        *wi = *wi * keep - alpha * gi;
    }
}
