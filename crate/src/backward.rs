//! The backward pass (ggml_build_backward_expand): from a scalar loss, the gradient of every
//! tensor that depends on a parameter, built as ordinary graph nodes after the forward ones.
//!
//! Walking the forward nodes in reverse, each node with a gradient adds its sources'
//! contributions; a source with several consumers sums them (`add`). Views pass their gradient
//! to the tensor they view. Most gradients are forward ops (mul_mat of transposes, repeat,
//! soft_max, ...); the rest are the `*_BACK` ops of `ops/train.rs`. Nothing is freed early:
//! the backward nodes read the forward tensors they need, so the graph allocator keeps those
//! alive (and does not compute their producers in place) by its ordinary liveness rules.

use crate::tensor::{Flags, Op, MAX_DIMS};
use crate::{Context, DType, Error, Graph, Result, TensorId};

impl Graph {
    /// Add the backward pass of `loss` (an f32 tensor of one element in this graph) to the
    /// graph: afterwards [`Graph::grad`] gives d(loss)/d(p) for every parameter p
    /// ([`Context::set_param`]) the loss depends on, and those gradients are nodes of the graph
    /// flagged as outputs. [`Graph::loss_grad`] is a new input to set to d(loss)/d(loss)
    /// (1 for plain gradients) before each compute.
    ///
    /// Errors: the loss is not a one-element f32 tensor of the graph, depends on no parameter,
    /// or a path from a parameter to it crosses an op without a backward (the error names it).
    pub fn build_backward(&mut self, ctx: &mut Context, loss: TensorId) -> Result<()> {
        let lt = ctx.get(loss)?;
        if !self.contains(loss) || lt.dtype != DType::F32 || lt.nelements() != 1 {
            return Err(Error::InvalidArgument(format!(
                "the loss must be a one-element f32 tensor of the graph, got '{}' {} {:?}",
                lt.name, lt.dtype, lt.ne
            )));
        }
        if self.loss_grad.is_some() {
            return Err(Error::InvalidArgument(
                "the graph already has a backward pass".into(),
            ));
        }
        let forward = self.nodes.clone();
        // Which tensors depend on a parameter through float values.
        let mut needs = vec![false; ctx.len()];
        for &n in &forward {
            let t = ctx.tensor(n);
            let float = matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16);
            needs[n.index()] =
                float && (t.is_param() || (t.op != Op::None && t.srcs().any(|s| needs[s.index()])));
        }
        if !needs[loss.index()] {
            return Err(Error::InvalidArgument(format!(
                "the loss '{}' depends on no parameter",
                ctx.tensor(loss).name
            )));
        }
        ctx.tensor_mut(loss).flags.insert(Flags::LOSS);
        let seed = ctx.new_tensor_1d(DType::F32, 1)?;
        ctx.set_name(seed, "loss_grad")?;
        ctx.set_input(seed);
        let mut grads: Vec<Option<TensorId>> = vec![None; ctx.len()];
        grads[loss.index()] = Some(seed);
        for &n in forward.iter().rev() {
            let Some(g) = grads[n.index()] else { continue };
            if ctx.tensor(n).op == Op::None {
                continue;
            }
            let contribs = node_backward(ctx, n, g, &needs)?;
            for (src, c) in contribs {
                accumulate(ctx, &mut grads, src, c)?;
            }
        }
        grads.resize(ctx.len(), None);
        for &n in &forward {
            if ctx.tensor(n).is_param() {
                if let Some(g) = grads[n.index()] {
                    ctx.set_output(g);
                    self.build_forward_expand(ctx, g);
                }
            }
        }
        self.grads = grads;
        self.loss_grad = Some(seed);
        Ok(())
    }
}

/// Add `c` to the gradient of `src` (a second consumer's contribution is summed).
fn accumulate(
    ctx: &mut Context,
    grads: &mut Vec<Option<TensorId>>,
    src: TensorId,
    c: TensorId,
) -> Result<()> {
    if ctx.tensor(c).ne != ctx.tensor(src).ne {
        return Err(Error::Backend(format!(
            "internal: gradient {:?} for tensor '{}' {:?}",
            ctx.tensor(c).ne,
            ctx.tensor(src).name,
            ctx.tensor(src).ne
        )));
    }
    if grads.len() <= src.index() {
        grads.resize(src.index() + 1, None);
    }
    grads[src.index()] = Some(match grads[src.index()] {
        Some(prev) => ctx.add(prev, c)?,
        None => c,
    });
    Ok(())
}

/// `t` itself when contiguous, else a contiguous copy.
fn contig(ctx: &mut Context, t: TensorId) -> Result<TensorId> {
    if ctx.tensor(t).is_contiguous() {
        Ok(t)
    } else {
        ctx.cont(t)
    }
}

/// `g` summed down to `like`'s shape where `like` was broadcast (repeated) over it.
fn reduce_to(ctx: &mut Context, g: TensorId, like: TensorId) -> Result<TensorId> {
    if ctx.tensor(g).ne == ctx.tensor(like).ne {
        Ok(g)
    } else {
        ctx.repeat_back(g, like)
    }
}

/// The contributions of node `n` (with gradient `g`) to the gradients of its sources that
/// need one.
fn node_backward(
    ctx: &mut Context,
    n: TensorId,
    g: TensorId,
    needs: &[bool],
) -> Result<Vec<(TensorId, TensorId)>> {
    let t = ctx.tensor(n).clone();
    let need = |i: usize| t.src[i].filter(|s| needs[s.index()]);
    let no_backward = |what: &str| {
        Error::UnsupportedOp(format!(
            "{} has no backward{what} (node '{}')",
            t.op.name(),
            t.name
        ))
    };
    let mut out = Vec::new();
    let s0 = t.src[0];
    match t.op {
        Op::None => {}
        Op::Dup | Op::Cont => {
            if let Some(a) = need(0) {
                out.push((a, g));
            }
        }
        Op::Cpy => {
            // The destination's old values are overwritten: they get no gradient from here.
            if let Some(a) = need(0) {
                let ne = ctx.tensor(a).ne;
                let gc = contig(ctx, g)?;
                out.push((a, ctx.reshape(gc, &ne)?));
            }
        }
        Op::Reshape => {
            if let Some(a) = need(0) {
                let ne = ctx.tensor(a).ne;
                let gc = contig(ctx, g)?;
                out.push((a, ctx.reshape(gc, &ne)?));
            }
        }
        Op::View => {
            if let Some(a) = need(0) {
                let ta = ctx.tensor(a);
                if !ta.is_contiguous() || ta.dtype != DType::F32 {
                    return Err(no_backward(
                        " for a view of a non-contiguous or non-f32 tensor",
                    ));
                }
                let base_offs = if ta.view_src.is_some() {
                    ta.view_offs
                } else {
                    0
                };
                let ne = ta.ne;
                let rel = t.view_offs.checked_sub(base_offs).ok_or_else(|| {
                    Error::Backend(format!("internal: view '{}' before its source", t.name))
                })?;
                out.push((a, ctx.view_back(g, ne, t.nb, rel)?));
            }
        }
        Op::Permute(axes) => {
            if let Some(a) = need(0) {
                let mut inv = [0; MAX_DIMS];
                for (i, &ax) in axes.iter().enumerate() {
                    inv[ax] = i;
                }
                let p = ctx.permute(g, inv)?;
                out.push((a, ctx.cont(p)?));
            }
        }
        Op::Transpose => {
            if let Some(a) = need(0) {
                let p = ctx.transpose(g)?;
                out.push((a, ctx.cont(p)?));
            }
        }
        Op::Add | Op::Sub => {
            if let Some(a) = need(0) {
                out.push((a, g));
            }
            if let Some(b) = need(1) {
                let r = reduce_to(ctx, g, b)?;
                let r = if t.op == Op::Sub {
                    ctx.scale(r, -1.0)?
                } else {
                    r
                };
                out.push((b, r));
            }
        }
        Op::Mul => {
            let (a, b) = (t.src[0], t.src[1]);
            if let (Some(ga), Some(b)) = (need(0), b) {
                out.push((ga, ctx.mul(g, b)?));
            }
            if let (Some(gb), Some(a)) = (need(1), a) {
                let m = ctx.mul(g, a)?;
                out.push((gb, reduce_to(ctx, m, gb)?));
            }
        }
        Op::Div => {
            let b = t.src[1];
            if let (Some(ga), Some(b)) = (need(0), b) {
                out.push((ga, ctx.div(g, b)?));
            }
            if let (Some(gb), Some(b)) = (need(1), b) {
                // d(a/b)/db = -(a/b)/b.
                let m = ctx.mul(g, n)?;
                let m = ctx.div(m, b)?;
                let m = ctx.scale(m, -1.0)?;
                out.push((gb, reduce_to(ctx, m, gb)?));
            }
        }
        Op::Scale { s, .. } => {
            if let Some(a) = need(0) {
                out.push((a, ctx.scale(g, s)?));
            }
        }
        Op::Sqr => {
            if let Some(a) = need(0) {
                let m = ctx.mul(g, a)?;
                out.push((a, ctx.scale(m, 2.0)?));
            }
        }
        Op::Sqrt => {
            if let Some(a) = need(0) {
                let d = ctx.div(g, n)?;
                out.push((a, ctx.scale(d, 0.5)?));
            }
        }
        Op::Log => {
            if let Some(a) = need(0) {
                out.push((a, ctx.div(g, a)?));
            }
        }
        Op::Sum | Op::SumRows | Op::Mean => {
            if let Some(a) = need(0) {
                let r = ctx.repeat(g, a)?;
                let r = if t.op == Op::Mean {
                    let ne0 = ctx.tensor(a).ne[0];
                    ctx.scale(r, 1.0 / ne0 as f32)?
                } else {
                    r
                };
                out.push((a, r));
            }
        }
        Op::Repeat => {
            if let Some(a) = need(0) {
                out.push((a, ctx.repeat_back(g, a)?));
            }
        }
        Op::Concat { dim } => {
            let gc = contig(ctx, g)?;
            let nb = ctx.tensor(gc).nb;
            let mut offset = 0;
            for i in 0..2 {
                let Some(part) = t.src[i] else { continue };
                let ne = ctx.tensor(part).ne;
                if needs[part.index()] {
                    let v = ctx.view(gc, &ne, &nb[1..], offset)?;
                    out.push((part, ctx.cont(v)?));
                }
                offset += ne[dim] * nb[dim];
            }
        }
        Op::Unary(u) => {
            if let Some(a) = need(0) {
                out.push((a, ctx.unary_back(g, a, u)?));
            }
        }
        Op::Norm { eps } | Op::RmsNorm { eps } => {
            if let Some(a) = need(0) {
                let rms = matches!(t.op, Op::RmsNorm { .. });
                out.push((a, ctx.norm_back(g, a, eps, rms)?));
            }
        }
        Op::MulMat => {
            let (Some(a), Some(b)) = (t.src[0], t.src[1]) else {
                return Ok(out);
            };
            if needs[a.index()] {
                out.push((a, mul_mat_grad_a(ctx, a, b, g)?));
            }
            if needs[b.index()] {
                // d/dB[k, j] = sum_i A[k, i] g[i, j]: A^T (as rows) times g.
                let at = ctx.transpose(a)?;
                let at = ctx.cont(at)?;
                out.push((b, ctx.mul_mat(at, g)?));
            }
        }
        Op::SoftMax { scale, .. } => {
            if need(1).is_some() {
                return Err(no_backward(" for its mask"));
            }
            if let Some(a) = need(0) {
                // dx = scale * y * (g - sum_rows(g * y)).
                let gy = ctx.mul(g, n)?;
                let s = ctx.sum_rows(gy)?;
                let d = ctx.sub(g, s)?;
                let d = ctx.mul(d, n)?;
                out.push((a, ctx.scale(d, scale)?));
            }
        }
        Op::Rope(params) => {
            if let (Some(a), Some(pos)) = (need(0), t.src[1]) {
                out.push((a, ctx.rope_back(g, pos, t.src[2], params)?));
            }
        }
        Op::GetRows => {
            if let (Some(a), Some(rows)) = (need(0), t.src[1]) {
                out.push((a, ctx.get_rows_back(g, rows, a)?));
            }
        }
        Op::Im2Col { .. } => {
            // The kernel gives only its shape; its values are not read.
            if let (Some(input), Some(kernel)) = (need(1), s0) {
                let ne = ctx.tensor(input).ne;
                out.push((input, ctx.im2col_back(g, kernel, ne, t.op)?));
            }
        }
        Op::Pool2d {
            op,
            k0,
            k1,
            s0,
            s1,
            p0,
            p1,
        } => {
            if let Some(a) = need(0) {
                out.push((a, ctx.pool_2d_back(g, a, op, k0, k1, s0, s1, p0, p1)?));
            }
        }
        Op::CrossEntropyLoss => {
            if need(1).is_some() {
                return Err(no_backward(" for its labels"));
            }
            if let (Some(a), Some(labels)) = (need(0), t.src[1]) {
                // d/dx = (softmax(x) - labels) * g / nrows.
                let nrows = ctx.tensor(a).nrows();
                let sm = ctx.soft_max(a)?;
                let d = ctx.sub(sm, labels)?;
                let d = ctx.mul(d, g)?;
                out.push((a, ctx.scale(d, 1.0 / nrows as f32)?));
            }
        }
        _ => {
            if t.srcs().any(|s| needs[s.index()]) {
                return Err(no_backward(""));
            }
        }
    }
    Ok(out)
}

/// d(loss)/dA for `g = mul_mat(A, B)`: `dA[k, i] = sum_j B[k, j] g[i, j]`, a mul_mat of the
/// transposes, summed over the batches that broadcast A (ne12 / ne02 consecutive slices of B
/// share one slice of A, so the reduction groups them with reshapes).
fn mul_mat_grad_a(ctx: &mut Context, a: TensorId, b: TensorId, g: TensorId) -> Result<TensorId> {
    let (ane, bne) = (ctx.tensor(a).ne, ctx.tensor(b).ne);
    let bt = ctx.transpose(b)?;
    let bt = ctx.cont(bt)?;
    let gt = ctx.transpose(g)?;
    let gt = ctx.cont(gt)?;
    let full = ctx.mul_mat(bt, gt)?; // [k, m, ne12, ne13]
    if ane[2] == bne[2] && ane[3] == bne[3] {
        return Ok(full);
    }
    let (km, r2, r3) = (ane[0] * ane[1], bne[2] / ane[2], bne[3] / ane[3]);
    let x = ctx.reshape(full, &[km, r2, ane[2], bne[3]])?;
    let x = ctx.repeat_back_to(x, [km, 1, ane[2], bne[3]])?;
    let x = ctx.reshape(x, &[km * ane[2], r3, ane[3], 1])?;
    let x = ctx.repeat_back_to(x, [km * ane[2], 1, ane[3], 1])?;
    ctx.reshape(x, &ane)
}
