//! Constructors of the ops the backward pass and the optimizers add (ggml_repeat_back,
//! ggml_soft_max_back's relatives, ggml_opt_step_adamw, ...). Their gradients are f32.

use crate::tensor::{Op, PoolOp, RopeParams, Tensor, UnaryOp, MAX_DIMS};
use crate::{Context, DType, Error, Result, TensorId};

fn need_f32(ctx: &Context, what: &str, ids: &[TensorId]) -> Result<()> {
    for &id in ids {
        let dtype = ctx.get(id)?.dtype;
        if dtype != DType::F32 {
            return Err(Error::UnsupportedType {
                dtype,
                what: format!("{what} (f32 expected)"),
            });
        }
    }
    Ok(())
}

fn same_shape(ctx: &Context, what: &str, a: TensorId, b: TensorId) -> Result<()> {
    let (ta, tb) = (ctx.tensor(a), ctx.tensor(b));
    if ta.ne != tb.ne {
        return Err(Error::Shape(format!(
            "{what}: {:?} and {:?} differ",
            ta.ne, tb.ne
        )));
    }
    Ok(())
}

impl Context {
    /// `a` summed over the tiles that repeat `like`'s shape into `a`'s (ggml_repeat_back): the
    /// result has `like`'s shape and `result[i] = sum of a[j]` over every j with `j % ne == i`.
    pub fn repeat_back(&mut self, a: TensorId, like: TensorId) -> Result<TensorId> {
        let ne = self.get(like)?.ne;
        self.repeat_back_to(a, ne)
    }

    /// [`Context::repeat_back`] to the shape `ne`.
    pub fn repeat_back_to(&mut self, a: TensorId, ne: [usize; MAX_DIMS]) -> Result<TensorId> {
        need_f32(self, "REPEAT_BACK", &[a])?;
        let ane = self.tensor(a).ne;
        if (0..MAX_DIMS).any(|i| ne[i] == 0 || !ane[i].is_multiple_of(ne[i])) {
            return Err(Error::Shape(format!(
                "REPEAT_BACK: {ane:?} is not a tiling of {ne:?}"
            )));
        }
        self.new_op(Op::RepeatBack, DType::F32, ne, &[a])
    }

    /// `grad * f'(x)` for the unary function `u` (its gradient given the result's gradient).
    pub fn unary_back(&mut self, grad: TensorId, x: TensorId, u: UnaryOp) -> Result<TensorId> {
        need_f32(self, "UNARY_BACK", &[grad, x])?;
        same_shape(self, "UNARY_BACK", grad, x)?;
        let ne = self.tensor(x).ne;
        self.new_op(Op::UnaryBack(u), DType::F32, ne, &[grad, x])
    }

    /// The gradient of `norm(x, eps)` (`rms: false`) or `rms_norm(x, eps)` given the result's.
    pub fn norm_back(
        &mut self,
        grad: TensorId,
        x: TensorId,
        eps: f32,
        rms: bool,
    ) -> Result<TensorId> {
        need_f32(self, "NORM_BACK", &[grad, x])?;
        same_shape(self, "NORM_BACK", grad, x)?;
        let ne = self.tensor(x).ne;
        self.new_op(Op::NormBack { eps, rms }, DType::F32, ne, &[grad, x])
    }

    /// Zeros of the contiguous f32 shape `ne` with `grad` added where a view with byte strides
    /// `nb` at byte `offset` of such a tensor lies (the gradient of a view into its source).
    pub fn view_back(
        &mut self,
        grad: TensorId,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offset: usize,
    ) -> Result<TensorId> {
        need_f32(self, "VIEW_BACK", &[grad])?;
        let g = self.tensor(grad);
        let ts = DType::F32.type_size();
        let bytes = crate::context::checked_contiguous_bytes(DType::F32, &ne)?;
        // The last byte the view touches must lie inside the source.
        let span = (0..MAX_DIMS).try_fold(offset.checked_add(ts), |end, i| {
            let step = g.ne[i].checked_sub(1)?.checked_mul(nb[i])?;
            Some(end?.checked_add(step))
        });
        let fits = span.flatten().is_some_and(|end| end <= bytes) || g.nelements() == 0;
        if !fits || !offset.is_multiple_of(ts) || nb.iter().any(|s| !s.is_multiple_of(ts)) {
            return Err(Error::Shape(format!(
                "VIEW_BACK: a view {:?} / {nb:?} at {offset} does not fit {ne:?}",
                g.ne
            )));
        }
        self.new_op(Op::ViewBack { offset, nb }, DType::F32, ne, &[grad])
    }

    /// The gradient of `get_rows(a, rows)` with respect to `a`, whose shape is `like`'s.
    pub fn get_rows_back(
        &mut self,
        grad: TensorId,
        rows: TensorId,
        like: TensorId,
    ) -> Result<TensorId> {
        need_f32(self, "GET_ROWS_BACK", &[grad])?;
        let (tg, tr, tl) = (self.tensor(grad), self.get(rows)?, self.get(like)?);
        if tr.dtype != DType::I32 {
            return Err(Error::UnsupportedType {
                dtype: tr.dtype,
                what: "GET_ROWS_BACK indices (i32)".into(),
            });
        }
        let ne = tl.ne;
        if tg.ne != [ne[0], tr.ne[0], tr.ne[1], tr.ne[2]] || tr.ne[1] != ne[2] || tr.ne[2] != ne[3]
        {
            return Err(Error::Shape(format!(
                "GET_ROWS_BACK: gradient {:?} / rows {:?} do not fit {:?}",
                tg.ne, tr.ne, ne
            )));
        }
        self.new_op(Op::GetRowsBack, DType::F32, ne, &[grad, rows])
    }

    /// The gradient of `im2col(kernel, input, ...)` with respect to the input (of shape
    /// `input_ne`), given the columns' gradient.
    pub fn im2col_back(
        &mut self,
        grad: TensorId,
        kernel: TensorId,
        input_ne: [usize; MAX_DIMS],
        op: Op,
    ) -> Result<TensorId> {
        need_f32(self, "IM2COL_BACK", &[grad])?;
        let Op::Im2Col {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        } = op
        else {
            return Err(Error::InvalidArgument(format!(
                "IM2COL_BACK of a {} node",
                op.name()
            )));
        };
        // The forward shape check decides whether the columns fit this input and kernel.
        let probe = self.mark();
        let input = self.new_tensor(DType::F32, &input_ne)?;
        let cols = self.im2col(kernel, input, s0, s1, p0, p1, d0, d1, is_2d, DType::F32);
        let want = cols.map(|c| self.tensor(c).ne);
        self.reset_to(probe);
        if want? != self.tensor(grad).ne {
            return Err(Error::Shape(format!(
                "IM2COL_BACK: gradient {:?} does not fit input {input_ne:?}",
                self.tensor(grad).ne
            )));
        }
        let back = Op::Im2ColBack {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        };
        self.new_op(back, DType::F32, input_ne, &[grad, kernel])
    }

    /// The gradient of `pool_2d(x, ...)` with respect to `x`, given the result's gradient.
    #[allow(clippy::too_many_arguments)]
    pub fn pool_2d_back(
        &mut self,
        grad: TensorId,
        x: TensorId,
        op: PoolOp,
        k0: usize,
        k1: usize,
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
    ) -> Result<TensorId> {
        need_f32(self, "POOL_2D_BACK", &[grad, x])?;
        let probe = self.mark();
        let pooled = self.pool_2d(x, op, k0, k1, s0, s1, p0, p1);
        let want = pooled.map(|p| self.tensor(p).ne);
        self.reset_to(probe);
        if want? != self.tensor(grad).ne {
            return Err(Error::Shape(format!(
                "POOL_2D_BACK: gradient {:?} does not fit input {:?}",
                self.tensor(grad).ne,
                self.tensor(x).ne
            )));
        }
        let ne = self.tensor(x).ne;
        let back = Op::Pool2dBack {
            op,
            k0,
            k1,
            s0,
            s1,
            p0,
            p1,
        };
        self.new_op(back, DType::F32, ne, &[grad, x])
    }

    /// The gradient of `rope_ext(x, pos, freq_factors, params)` given the result's: the same
    /// rotation by the negated angles.
    pub fn rope_back(
        &mut self,
        grad: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        params: RopeParams,
    ) -> Result<TensorId> {
        need_f32(self, "ROPE_BACK", &[grad])?;
        // The forward constructor checks positions, factors and params.
        let probe = self.mark();
        let checked = self.rope_ext(grad, pos, freq_factors, params);
        self.reset_to(probe);
        checked?;
        let ne = self.tensor(grad).ne;
        let mut srcs = vec![grad, pos];
        srcs.extend(freq_factors);
        self.new_op(Op::RopeBack(params), DType::F32, ne, &srcs)
    }

    /// A node that updates `param` in place; the result is a view of it.
    fn opt_step(&mut self, op: Op, param: TensorId, srcs: &[TensorId]) -> Result<TensorId> {
        let p = self.tensor(param);
        if !p.is_contiguous() || p.view_src.is_some() {
            return Err(Error::Shape(format!(
                "{}: the parameter must be a contiguous tensor of its own",
                op.name()
            )));
        }
        let mut t = Tensor::contiguous(DType::F32, p.ne);
        t.op = op;
        t.src[0] = Some(param);
        for (slot, s) in t.src[1..].iter_mut().zip(srcs) {
            *slot = Some(*s);
        }
        t.view_src = Some(param);
        Ok(self.push(t))
    }

    /// One AdamW step on `param` in place (ggml_opt_step_adamw): `state` f32 [n, 2] holds the
    /// first and second moments (n = param's element count), `hp` f32 [7] the hyper-parameters
    /// [alpha, beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t)] (see [`Op::OptStepAdamW`]).
    pub fn opt_step_adamw(
        &mut self,
        param: TensorId,
        grad: TensorId,
        state: TensorId,
        hp: TensorId,
    ) -> Result<TensorId> {
        need_f32(self, "OPT_STEP_ADAMW", &[param, grad, state, hp])?;
        same_shape(self, "OPT_STEP_ADAMW gradient", param, grad)?;
        let n = self.tensor(param).nelements();
        if self.tensor(state).ne != [n, 2, 1, 1] || self.tensor(hp).ne != [7, 1, 1, 1] {
            return Err(Error::Shape(format!(
                "OPT_STEP_ADAMW: state {:?} / hyper-parameters {:?}, expected [{n}, 2] / [7]",
                self.tensor(state).ne,
                self.tensor(hp).ne
            )));
        }
        self.opt_step(Op::OptStepAdamW, param, &[grad, state, hp])
    }

    /// One SGD step on `param` in place: `hp` f32 [2] = [alpha, wd];
    /// `param = param * (1 - alpha * wd) - alpha * grad`.
    pub fn opt_step_sgd(
        &mut self,
        param: TensorId,
        grad: TensorId,
        hp: TensorId,
    ) -> Result<TensorId> {
        need_f32(self, "OPT_STEP_SGD", &[param, grad, hp])?;
        same_shape(self, "OPT_STEP_SGD gradient", param, grad)?;
        if self.tensor(hp).ne != [2, 1, 1, 1] {
            return Err(Error::Shape(format!(
                "OPT_STEP_SGD: hyper-parameters {:?}, expected [2]",
                self.tensor(hp).ne
            )));
        }
        self.opt_step(Op::OptStepSgd, param, &[grad, hp])
    }
}
