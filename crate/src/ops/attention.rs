//! The fused attention constructor (ggml_flash_attn_ext).

use crate::tensor::Op;
use crate::{Context, DType, Error, Result, TensorId};

impl Context {
    /// softmax(scale · q·kᵀ + slope · mask) · v in one op, without materialising the scores
    /// (ggml_flash_attn_ext). `q`: f32 [dk, n_tokens, n_head, ne3]; `k`: [dk, n_kv, n_head_kv,
    /// ne3]; `v`: [dv, n_kv, n_head_kv, ne3] (f16 or f32; strided views of a cache are fine);
    /// `mask`: f32 or f16 [n_kv, >= n_tokens, …] broadcast over heads as in
    /// [`Context::soft_max_ext`]. n_head must be a multiple of n_head_kv (grouped-query
    /// attention). `softcap > 0` caps the scaled scores (gemma2's attention softcapping);
    /// `max_bias > 0` adds ALiBi slopes per head and needs a mask. Result: f32 [dv, n_head,
    /// n_tokens, ne3], i.e. heads side by side per token, ready for the output projection.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        softcap: f32,
    ) -> Result<TensorId> {
        const WHAT: &str = "FLASH_ATTN_EXT";
        let (tq, tk, tv) = (self.tensor(q), self.tensor(k), self.tensor(v));
        if tq.dtype != DType::F32 {
            return Err(Error::UnsupportedType {
                dtype: tq.dtype,
                what: format!("{WHAT} q (f32)"),
            });
        }
        for (name, t) in [("k", tk), ("v", tv)] {
            if !matches!(t.dtype, DType::F32 | DType::F16) {
                return Err(Error::UnsupportedType {
                    dtype: t.dtype,
                    what: format!("{WHAT} {name} (f16 or f32)"),
                });
            }
        }
        let (qn, kn, vn) = (tq.ne, tk.ne, tv.ne);
        let (n_head, n_head_kv) = (qn[2], kn[2]);
        let shapes_fit = qn[0] == kn[0]
            && kn[1] == vn[1]
            && kn[2] == vn[2]
            && kn[3] == vn[3]
            && n_head.checked_rem(n_head_kv) == Some(0)
            && qn[3].checked_rem(kn[3]) == Some(0);
        if !shapes_fit {
            return Err(Error::Shape(format!(
                "{WHAT}: q {qn:?}, k {kn:?}, v {vn:?} (want q [dk, n_tokens, n_head, ne3], k [dk, n_kv, \
                 n_head_kv, ne3], v [dv, n_kv, n_head_kv, ne3], n_head a multiple of n_head_kv)"
            )));
        }
        if !(scale.is_finite() && max_bias.is_finite() && softcap.is_finite())
            || max_bias < 0.0
            || softcap < 0.0
        {
            return Err(Error::InvalidArgument(format!(
                "{WHAT}: scale {scale} / max_bias {max_bias} / softcap {softcap}"
            )));
        }
        let mut srcs = vec![q, k, v];
        if let Some(m) = mask {
            let tm = self.tensor(m);
            if !matches!(tm.dtype, DType::F32 | DType::F16) {
                return Err(Error::UnsupportedType {
                    dtype: tm.dtype,
                    what: format!("{WHAT} mask (f32 or f16)"),
                });
            }
            // The mask is indexed [kv, token, head % ne2, seq % ne3], as soft_max's over the
            // scores [n_kv, n_tokens, n_head, ne3] would be.
            if tm.ne[0] != kn[1]
                || tm.ne[1] < qn[1]
                || n_head.checked_rem(tm.ne[2]) != Some(0)
                || qn[3].checked_rem(tm.ne[3]) != Some(0)
            {
                return Err(Error::Shape(format!(
                    "{WHAT}: mask {:?} does not fit {} kv positions × {} tokens × {n_head} heads",
                    tm.ne, kn[1], qn[1]
                )));
            }
            srcs.push(m);
        } else if max_bias > 0.0 {
            return Err(Error::InvalidArgument(format!(
                "{WHAT}: max_bias > 0 needs a mask"
            )));
        }
        let ne = [vn[0], n_head, qn[1], qn[3]];
        self.new_op(
            Op::FlashAttnExt {
                scale,
                max_bias,
                softcap,
            },
            DType::F32,
            ne,
            &srcs,
        )
    }
}
