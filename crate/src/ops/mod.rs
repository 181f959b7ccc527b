//! Op constructors with shape and type checks (ggml.c's ggml_add, ggml_mul_mat, …).
//!
//! Every constructor returns `Err(Error::Shape)` / `Err(Error::UnsupportedType)` for inputs that
//! can never make sense; whether a backend implements a particular type combination is decided
//! later by the backend (`supports_op`), which gives a clean `Error::UnsupportedOp` at compute.

use crate::tensor::{Op, RopeParams, UnaryOp};
use crate::{Context, DType, Error, Result, TensorId};

mod attention;
mod nn;
mod train;

impl Context {
    /// True when `b` can be broadcast (repeated) to `a`'s shape (ggml_can_repeat).
    pub fn can_repeat(&self, b: TensorId, a: TensorId) -> bool {
        let (tb, ta) = (self.tensor(b), self.tensor(a));
        (0..4).all(|i| tb.ne[i] != 0 && ta.ne[i] % tb.ne[i] == 0)
    }

    /// `Err(UnsupportedType)` unless `id`'s type is one ops can compute with.
    fn check_computable(&self, what: &str, id: TensorId) -> Result<()> {
        let dtype = self.tensor(id).dtype;
        if dtype.is_computable() {
            Ok(())
        } else {
            Err(Error::UnsupportedType {
                dtype,
                what: what.to_string(),
            })
        }
    }

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.check_computable(op.name(), a)?;
        self.check_computable(op.name(), b)?;
        if !self.can_repeat(b, a) {
            return Err(Error::Shape(format!(
                "{}: {:?} cannot be broadcast to {:?}",
                op.name(),
                self.tensor(b).ne,
                self.tensor(a).ne
            )));
        }
        let t = self.tensor(a);
        let (dtype, ne) = (t.dtype, t.ne);
        self.new_op(op, dtype, ne, &[a, b])
    }

    /// An elementwise op with one source: same type and shape as `a`.
    fn unary_like(&mut self, op: Op, a: TensorId) -> Result<TensorId> {
        self.check_computable(op.name(), a)?;
        let t = self.tensor(a);
        let (dtype, ne) = (t.dtype, t.ne);
        self.new_op(op, dtype, ne, &[a])
    }

    /// a + b, b broadcast to a's shape. The result has a's type.
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Add, a, b)
    }

    /// a - b, b broadcast to a's shape.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Sub, a, b)
    }

    /// a * b (elementwise), b broadcast to a's shape.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Mul, a, b)
    }

    /// a / b (elementwise), b broadcast to a's shape.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Div, a, b)
    }

    /// a * s.
    pub fn scale(&mut self, a: TensorId, s: f32) -> Result<TensorId> {
        self.unary_like(Op::Scale { s, b: 0.0 }, a)
    }

    /// a * s + b.
    pub fn scale_bias(&mut self, a: TensorId, s: f32, b: f32) -> Result<TensorId> {
        self.unary_like(Op::Scale { s, b }, a)
    }

    /// a².
    pub fn sqr(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary_like(Op::Sqr, a)
    }

    /// √a.
    pub fn sqrt(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary_like(Op::Sqrt, a)
    }

    /// ln a.
    pub fn log(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary_like(Op::Log, a)
    }

    /// Sum of all elements → shape [1], a's type.
    pub fn sum(&mut self, a: TensorId) -> Result<TensorId> {
        self.check_computable("SUM", a)?;
        let dtype = self.tensor(a).dtype;
        self.new_op(Op::Sum, dtype, [1, 1, 1, 1], &[a])
    }

    /// Sum of each row → ne0 = 1, a's type.
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        self.check_computable("SUM_ROWS", a)?;
        let t = self.tensor(a);
        let (dtype, ne) = (t.dtype, t.ne);
        self.new_op(Op::SumRows, dtype, [1, ne[1], ne[2], ne[3]], &[a])
    }

    /// Mean of each row → ne0 = 1, f32.
    pub fn mean(&mut self, a: TensorId) -> Result<TensorId> {
        self.check_computable("MEAN", a)?;
        let ne = self.tensor(a).ne;
        self.new_op(Op::Mean, DType::F32, [1, ne[1], ne[2], ne[3]], &[a])
    }

    /// `a` tiled to `b`'s shape (every dim of b a multiple of a's); a's type.
    pub fn repeat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        if !self.can_repeat(a, b) {
            return Err(Error::Shape(format!(
                "REPEAT: {:?} cannot be tiled to {:?}",
                self.tensor(a).ne,
                self.tensor(b).ne
            )));
        }
        let dtype = self.tensor(a).dtype;
        if dtype.is_quantized() {
            return Err(Error::UnsupportedType {
                dtype,
                what: "REPEAT".into(),
            });
        }
        let ne = self.tensor(b).ne;
        self.new_op(Op::Repeat, dtype, ne, &[a])
    }

    /// `a` and `b` joined along `dim`; every other dim must match and the types must be equal.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let (ta, tb) = (self.tensor(a), self.tensor(b));
        if dim >= 4 {
            return Err(Error::Shape(format!("CONCAT: dim {dim} out of range")));
        }
        if ta.dtype != tb.dtype {
            return Err(Error::UnsupportedType {
                dtype: tb.dtype,
                what: format!("CONCAT of {} with {}", ta.dtype, tb.dtype),
            });
        }
        if ta.dtype.is_quantized() {
            return Err(Error::UnsupportedType {
                dtype: ta.dtype,
                what: "CONCAT".into(),
            });
        }
        if (0..4).any(|i| i != dim && ta.ne[i] != tb.ne[i]) {
            return Err(Error::Shape(format!(
                "CONCAT along {dim}: {:?} and {:?} differ in another dim",
                ta.ne, tb.ne
            )));
        }
        let mut ne = ta.ne;
        ne[dim] += tb.ne[dim];
        let dtype = ta.dtype;
        self.new_op(Op::Concat { dim }, dtype, ne, &[a, b])
    }

    /// An elementwise unary function.
    pub fn unary(&mut self, a: TensorId, op: UnaryOp) -> Result<TensorId> {
        self.unary_like(Op::Unary(op), a)
    }

    pub fn abs(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Abs)
    }
    pub fn neg(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Neg)
    }
    pub fn relu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Relu)
    }
    /// GELU, tanh approximation (ggml_gelu). Computed exactly in f32 on the CPU (ggml uses an f16
    /// lookup table; results differ from ggml's by up to ~1e-3 relative).
    pub fn gelu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Gelu)
    }
    /// GELU, exact erf form (ggml_gelu_erf).
    pub fn gelu_erf(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::GeluErf)
    }
    pub fn silu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Silu)
    }
    pub fn tanh(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Tanh)
    }
    pub fn sigmoid(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Sigmoid)
    }
    pub fn exp(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Exp)
    }

    /// (x - mean) / sqrt(var + eps) per row.
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.unary_like(Op::Norm { eps }, a)
    }

    /// x / sqrt(mean(x²) + eps) per row.
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.unary_like(Op::RmsNorm { eps }, a)
    }

    /// Softmax of each row.
    pub fn soft_max(&mut self, a: TensorId) -> Result<TensorId> {
        self.soft_max_ext(a, None, 1.0, 0.0)
    }

    /// softmax(a * scale + slope * mask) per row (ggml_soft_max_ext). The mask (f32 or f16) has
    /// ne0 == a.ne0 and ne1 >= a.ne1 (row i1 of a uses mask row i1) and is broadcast over dims
    /// 2 and 3 (a.ne2 and a.ne3 multiples of the mask's). With `max_bias > 0` the slope is the
    /// ALiBi slope of head i2 (a.ne2 heads); otherwise 1.
    pub fn soft_max_ext(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        self.check_computable("SOFT_MAX", a)?;
        let ta = self.tensor(a);
        let (dtype, ne) = (ta.dtype, ta.ne);
        if !scale.is_finite() || !max_bias.is_finite() || max_bias < 0.0 {
            return Err(Error::InvalidArgument(format!(
                "SOFT_MAX: scale {scale} / max_bias {max_bias}"
            )));
        }
        let mut srcs = vec![a];
        if let Some(m) = mask {
            let tm = self.tensor(m);
            if !matches!(tm.dtype, DType::F32 | DType::F16) {
                return Err(Error::UnsupportedType {
                    dtype: tm.dtype,
                    what: "SOFT_MAX mask (f32 or f16)".into(),
                });
            }
            if tm.ne[0] != ne[0]
                || tm.ne[1] < ne[1]
                || ne[2].checked_rem(tm.ne[2]) != Some(0)
                || ne[3].checked_rem(tm.ne[3]) != Some(0)
            {
                return Err(Error::Shape(format!(
                    "SOFT_MAX: mask {:?} does not fit {:?}",
                    tm.ne, ne
                )));
            }
            srcs.push(m);
        } else if max_bias > 0.0 {
            return Err(Error::InvalidArgument(
                "SOFT_MAX: max_bias > 0 needs a mask".into(),
            ));
        }
        self.new_op(Op::SoftMax { scale, max_bias }, dtype, ne, &srcs)
    }

    /// Rotary position embedding (ggml_rope_ext). `pos`: i32 [a.ne2], the position of each
    /// index i2; `freq_factors`: optional f32 [>= n_dims/2] dividing each pair's angle.
    /// Dims n_dims..ne0 are copied unchanged.
    pub fn rope_ext(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        params: RopeParams,
    ) -> Result<TensorId> {
        self.check_computable("ROPE", a)?;
        let (ta, tp) = (self.tensor(a), self.tensor(pos));
        let (dtype, ne) = (ta.dtype, ta.ne);
        if tp.dtype != DType::I32 {
            return Err(Error::UnsupportedType {
                dtype: tp.dtype,
                what: "ROPE positions (i32)".into(),
            });
        }
        if tp.n_dims() != 1 || tp.ne[0] != ne[2] {
            return Err(Error::Shape(format!(
                "ROPE: positions {:?} must be a vector of a.ne[2] = {}",
                tp.ne, ne[2]
            )));
        }
        if params.n_dims == 0 || params.n_dims & 1 != 0 || params.n_dims > ne[0] {
            return Err(Error::Shape(format!(
                "ROPE: n_dims {} must be even, positive and <= ne0 {}",
                params.n_dims, ne[0]
            )));
        }
        if params.freq_base.is_nan()
            || params.freq_base <= 0.0
            || params.freq_scale.is_nan()
            || params.freq_scale <= 0.0
        {
            return Err(Error::InvalidArgument(format!(
                "ROPE: freq_base {} / freq_scale {} must be positive",
                params.freq_base, params.freq_scale
            )));
        }
        let mut srcs = vec![a, pos];
        if let Some(f) = freq_factors {
            let tf = self.tensor(f);
            if tf.dtype != DType::F32 {
                return Err(Error::UnsupportedType {
                    dtype: tf.dtype,
                    what: "ROPE freq_factors (f32)".into(),
                });
            }
            if tf.ne[0] < params.n_dims / 2 {
                return Err(Error::Shape(format!(
                    "ROPE: freq_factors has {} elements, needs n_dims/2 = {}",
                    tf.ne[0],
                    params.n_dims / 2
                )));
            }
            srcs.push(f);
        }
        self.new_op(Op::Rope(params), dtype, ne, &srcs)
    }

    /// Rows of `a` picked by `rows` (ggml_get_rows): a [ne0, ne1, ne2, ne3], rows i32
    /// [n, ne2, ne3] → f32 [ne0, n, ne2, ne3] (i32 when a is i32). Row indices are read at
    /// compute time; an index outside 0..ne1 yields a row of NaN (0 for i32).
    pub fn get_rows(&mut self, a: TensorId, rows: TensorId) -> Result<TensorId> {
        let (ta, tr) = (self.tensor(a), self.tensor(rows));
        if tr.dtype != DType::I32 {
            return Err(Error::UnsupportedType {
                dtype: tr.dtype,
                what: "GET_ROWS indices (i32)".into(),
            });
        }
        if !(ta.dtype.is_computable() || ta.dtype == DType::I32) {
            return Err(Error::UnsupportedType {
                dtype: ta.dtype,
                what: "GET_ROWS".into(),
            });
        }
        if ta.ne[2] != tr.ne[1] || ta.ne[3] != tr.ne[2] || tr.ne[3] != 1 {
            return Err(Error::Shape(format!(
                "GET_ROWS: rows {:?} do not fit a {:?} (need [n, a.ne2, a.ne3])",
                tr.ne, ta.ne
            )));
        }
        let dtype = if ta.dtype == DType::I32 {
            DType::I32
        } else {
            DType::F32
        };
        let ne = [ta.ne[0], tr.ne[0], tr.ne[1], tr.ne[2]];
        self.new_op(Op::GetRows, dtype, ne, &[a, rows])
    }
}
