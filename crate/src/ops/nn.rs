//! Constructors for mul_mat and the convolution / pooling / loss ops (ggml_mul_mat, ggml_im2col,
//! ggml_conv_2d, ggml_pool_2d, ggml_argmax, ggml_cross_entropy_loss).

use crate::tensor::{Op, PoolOp};
use crate::{Context, DType, Error, Result, TensorId};

/// Output length of a convolution (ggml_calc_conv_output_size); `None` when the input is too small.
pub(crate) fn conv_output_size(
    ins: usize,
    ks: usize,
    s: usize,
    p: usize,
    d: usize,
) -> Option<usize> {
    let span = d.checked_mul(ks.checked_sub(1)?)?.checked_add(1)?;
    let padded = ins.checked_add(p.checked_mul(2)?)?;
    if s == 0 || padded < span {
        return None;
    }
    Some((padded - span) / s + 1)
}

/// Output length of a pooling window (ggml_calc_pool_output_size); `None` when the input is too small.
/// Window parameters (kernel, stride, padding, dilation) are i32 in ggml and in the kernels'
/// index arithmetic (negative offsets from padding): larger ones are rejected, not wrapped.
fn check_window_params(what: &str, params: &[usize]) -> Result<()> {
    match params.iter().find(|&&p| p > i32::MAX as usize) {
        Some(p) => Err(Error::InvalidArgument(format!(
            "{what}: parameter {p} is larger than {}",
            i32::MAX
        ))),
        None => Ok(()),
    }
}

pub(crate) fn pool_output_size(ins: usize, ks: usize, s: usize, p: usize) -> Option<usize> {
    let padded = ins.checked_add(p.checked_mul(2)?)?;
    if s == 0 || ks == 0 || padded < ks {
        return None;
    }
    Some((padded - ks) / s + 1)
}

impl Context {
    /// Matrix product as ggml_mul_mat: `a` is [k, m, ne02, ne03] of any computable type (rows
    /// contiguous), `b` is [k, n, ne12, ne13] f32 or f16 (any strides); the result is f32
    /// [m, n, ne12, ne13] with `result[i, j] = sum_k a[k, i] * b[k, j]`. `a` is broadcast over
    /// dims 2 and 3 (ne12 % ne02 == 0, ne13 % ne03 == 0).
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (ta, tb) = (self.get(a)?, self.get(b)?);
        if !ta.dtype.is_computable() {
            return Err(Error::UnsupportedType {
                dtype: ta.dtype,
                what: "mul_mat weights".into(),
            });
        }
        if !matches!(tb.dtype, DType::F32 | DType::F16) {
            return Err(Error::UnsupportedType {
                dtype: tb.dtype,
                what: "mul_mat src1 (f32 or f16 expected)".into(),
            });
        }
        if ta.ne[0] != tb.ne[0] {
            return Err(Error::Shape(format!(
                "mul_mat: inner dimensions differ: {:?} x {:?}",
                ta.ne, tb.ne
            )));
        }
        if ta.ne[2] == 0 || ta.ne[3] == 0 || tb.ne[2] % ta.ne[2] != 0 || tb.ne[3] % ta.ne[3] != 0 {
            return Err(Error::Shape(format!(
                "mul_mat: {:?} cannot be broadcast over {:?} in dims 2-3",
                ta.ne, tb.ne
            )));
        }
        if !ta.is_row_contiguous() {
            return Err(Error::Shape(
                "mul_mat: the rows of src0 must be contiguous (transpose views need cont)".into(),
            ));
        }
        let ne = [ta.ne[1], tb.ne[1], tb.ne[2], tb.ne[3]];
        self.new_op(Op::MulMat, DType::F32, ne, &[a, b])
    }

    /// Unfold `input` into columns for a convolution with `kernel` (ggml_im2col).
    ///
    /// 2D: kernel [KW, KH, IC, OC], input [IW, IH, IC, N] → [IC*KH*KW, OW, OH, N].
    /// 1D: kernel [KW, IC, OC], input [IW, IC, N] → [IC*KW, OW, N].
    /// `dst_type` is f32 or f16; the input must be f32 or f16.
    #[allow(clippy::too_many_arguments)]
    pub fn im2col(
        &mut self,
        kernel: TensorId,
        input: TensorId,
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
        d0: usize,
        d1: usize,
        is_2d: bool,
        dst_type: DType,
    ) -> Result<TensorId> {
        let (tk, ti) = (self.get(kernel)?, self.get(input)?);
        if !matches!(dst_type, DType::F32 | DType::F16) {
            return Err(Error::UnsupportedType {
                dtype: dst_type,
                what: "im2col result (f32 or f16 expected)".into(),
            });
        }
        if !matches!(ti.dtype, DType::F32 | DType::F16) {
            return Err(Error::UnsupportedType {
                dtype: ti.dtype,
                what: "im2col input (f32 or f16 expected)".into(),
            });
        }
        if s0 == 0 || (is_2d && s1 == 0) || d0 == 0 || (is_2d && d1 == 0) {
            return Err(Error::InvalidArgument(
                "im2col: strides and dilations must be >= 1".into(),
            ));
        }
        check_window_params("im2col", &[s0, s1, p0, p1, d0, d1])?;
        if is_2d {
            if tk.ne[2] != ti.ne[2] {
                return Err(Error::Shape(format!(
                    "im2col: kernel channels {} != input channels {}",
                    tk.ne[2], ti.ne[2]
                )));
            }
        } else {
            if tk.ne[1] != ti.ne[1] {
                return Err(Error::Shape(format!(
                    "im2col: kernel channels {} != input channels {}",
                    tk.ne[1], ti.ne[1]
                )));
            }
            if ti.ne[3] != 1 {
                return Err(Error::Shape("im2col 1D: input has 4 dimensions".into()));
            }
        }
        let too_small = || {
            Error::Shape(format!(
                "im2col: input {:?} too small for kernel {:?}",
                ti.ne, tk.ne
            ))
        };
        let ow = conv_output_size(ti.ne[0], tk.ne[0], s0, p0, d0).ok_or_else(too_small)?;
        let oh = if is_2d {
            conv_output_size(ti.ne[1], tk.ne[1], s1, p1, d1).ok_or_else(too_small)?
        } else {
            0
        };
        let overflow = || Error::Overflow(format!("im2col of kernel {:?}", tk.ne));
        let ne = if is_2d {
            let k = tk.ne[2]
                .checked_mul(tk.ne[1])
                .and_then(|n| n.checked_mul(tk.ne[0]));
            [k.ok_or_else(overflow)?, ow, oh, ti.ne[3]]
        } else {
            let k = tk.ne[1].checked_mul(tk.ne[0]);
            [k.ok_or_else(overflow)?, ow, ti.ne[2], 1]
        };
        if ne.contains(&0) {
            return Err(too_small());
        }
        let op = Op::Im2Col {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        };
        self.new_op(op, dst_type, ne, &[kernel, input])
    }

    /// 2D convolution as ggml_conv_2d: im2col → mul_mat → permute → cont.
    /// kernel [KW, KH, IC, OC] (f32 or f16, contiguous), input [IW, IH, IC, N] → [OW, OH, OC, N] f32.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_2d(
        &mut self,
        kernel: TensorId,
        input: TensorId,
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
        d0: usize,
        d1: usize,
    ) -> Result<TensorId> {
        let kdt = self.get(kernel)?.dtype;
        let kne = self.tensor(kernel).ne;
        // [IC*KH*KW, OW, OH, N]
        let cols = self.im2col(kernel, input, s0, s1, p0, p1, d0, d1, true, kdt)?;
        let cne = self.tensor(cols).ne;
        let cols2 = self.reshape(cols, &[cne[0], cne[3] * cne[2] * cne[1]])?;
        let k2 = self.reshape(kernel, &[kne[0] * kne[1] * kne[2], kne[3]])?;
        // [N*OH*OW, OC]
        let prod = self.mul_mat(cols2, k2)?;
        let r = self.reshape(prod, &[cne[1], cne[2], cne[3], kne[3]])?; // [OW, OH, N, OC]
        let p = self.permute(r, [0, 1, 3, 2])?; // [OW, OH, OC, N]
        self.cont(p)
    }

    /// 2D pooling over dims 0-1 of `a` (ggml_pool_2d): result f32
    /// [(ne0 + 2*p0 - k0)/s0 + 1, (ne1 + 2*p1 - k1)/s1 + 1, ne2, ne3]. Padded cells are skipped by
    /// max and count as zeros for avg (the sum is divided by k0*k1).
    #[allow(clippy::too_many_arguments)]
    pub fn pool_2d(
        &mut self,
        a: TensorId,
        op: PoolOp,
        k0: usize,
        k1: usize,
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
    ) -> Result<TensorId> {
        let ta = self.get(a)?;
        if !matches!(ta.dtype, DType::F32 | DType::F16) {
            return Err(Error::UnsupportedType {
                dtype: ta.dtype,
                what: "pool_2d (f32 or f16 expected)".into(),
            });
        }
        if k0 == 0 || k1 == 0 || s0 == 0 || s1 == 0 {
            return Err(Error::InvalidArgument(
                "pool_2d: kernel sizes and strides must be >= 1".into(),
            ));
        }
        check_window_params("pool_2d", &[k0, k1, s0, s1, p0, p1])?;
        let too_small = || {
            Error::Shape(format!(
                "pool_2d: input {:?} smaller than the {k0}x{k1} window",
                ta.ne
            ))
        };
        let ne = [
            pool_output_size(ta.ne[0], k0, s0, p0).ok_or_else(too_small)?,
            pool_output_size(ta.ne[1], k1, s1, p1).ok_or_else(too_small)?,
            ta.ne[2],
            ta.ne[3],
        ];
        let op = Op::Pool2d {
            op,
            k0,
            k1,
            s0,
            s1,
            p0,
            p1,
        };
        self.new_op(op, DType::F32, ne, &[a])
    }

    /// Index of the maximum of each row of an f32 matrix (ggml_argmax) → i32 [ne1]. Ties pick the
    /// last maximal element, as ggml.
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        let ta = self.get(a)?;
        if ta.dtype != DType::F32 {
            return Err(Error::UnsupportedType {
                dtype: ta.dtype,
                what: "argmax (f32 expected)".into(),
            });
        }
        if ta.ne[2] != 1 || ta.ne[3] != 1 {
            return Err(Error::Shape(format!(
                "argmax needs a matrix, got {:?}",
                ta.ne
            )));
        }
        if ta.ne[0] > i32::MAX as usize {
            return Err(Error::Shape("argmax: rows longer than i32::MAX".into()));
        }
        let ne = [ta.ne[1], 1, 1, 1];
        self.new_op(Op::Argmax, DType::I32, ne, &[a])
    }

    /// Cross-entropy loss (ggml_cross_entropy_loss): `-(1/nrows) * sum_rows sum_i labels[i] *
    /// log_softmax(logits)[i]` → f32 [1]. Both f32 with the same shape.
    pub fn cross_entropy_loss(&mut self, logits: TensorId, labels: TensorId) -> Result<TensorId> {
        let (ta, tb) = (self.get(logits)?, self.get(labels)?);
        if ta.dtype != DType::F32 || tb.dtype != DType::F32 {
            return Err(Error::UnsupportedType {
                dtype: if ta.dtype != DType::F32 {
                    ta.dtype
                } else {
                    tb.dtype
                },
                what: "cross_entropy_loss (f32 expected)".into(),
            });
        }
        if ta.ne != tb.ne {
            return Err(Error::Shape(format!(
                "cross_entropy_loss: logits {:?} and labels {:?} differ",
                ta.ne, tb.ne
            )));
        }
        if ta.nelements() == 0 {
            return Err(Error::Shape("cross_entropy_loss of an empty tensor".into()));
        }
        self.new_op(
            Op::CrossEntropyLoss,
            DType::F32,
            [1, 1, 1, 1],
            &[logits, labels],
        )
    }
}
