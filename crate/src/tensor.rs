//! Tensor descriptors: type, shape `ne`, byte strides `nb`, the op that produces the tensor and its
//! sources, view information, name, flags, and where its data lives (if anywhere yet).
//!
//! A descriptor carries no data of its own (ggml's `no_alloc = true` world): data lives in backend
//! buffers and a tensor points into one with [`TensorData`].

use std::sync::Arc;

use crate::backend::Buffer;
use crate::DType;

/// Maximum number of dimensions, as in ggml.
pub const MAX_DIMS: usize = 4;
/// Maximum number of sources of one op.
pub const MAX_SRC: usize = 4;
/// Longest tensor name accepted (ggml's GGML_MAX_NAME - 1).
pub const MAX_NAME: usize = 63;

/// Handle of a tensor in a [`crate::Context`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Tensor flags (ggml's `GGML_TENSOR_FLAG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// Set by the user before compute; the allocator never places anything on top of it.
    pub const INPUT: Flags = Flags(1);
    /// Read after compute; never freed or overwritten by the allocator.
    pub const OUTPUT: Flags = Flags(2);
    /// A trainable parameter.
    pub const PARAM: Flags = Flags(4);
    /// A loss (scalar) for the backward pass.
    pub const LOSS: Flags = Flags(8);
    /// Weights in the CPU's repacked layout (`backend::cpu::repack`), not the GGUF one.
    pub const REPACKED: Flags = Flags(16);

    pub fn contains(self, f: Flags) -> bool {
        self.0 & f.0 == f.0
    }
    pub fn insert(&mut self, f: Flags) {
        self.0 |= f.0;
    }
}

/// Elementwise unary functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Abs,
    Neg,
    Relu,
    /// tanh approximation, as ggml's `gelu`.
    Gelu,
    /// exact erf form (ggml's `gelu_erf`).
    GeluErf,
    Silu,
    Tanh,
    Sigmoid,
    Exp,
}

impl UnaryOp {
    /// Every unary op (for tests and fuzzers that cover them all).
    pub const ALL: [UnaryOp; 9] = [
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Silu,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Exp,
    ];
}

// A new variant must join `ALL`: this match stops compiling without its arm.
const _: fn(UnaryOp) = |op| match op {
    UnaryOp::Abs
    | UnaryOp::Neg
    | UnaryOp::Relu
    | UnaryOp::Gelu
    | UnaryOp::GeluErf
    | UnaryOp::Silu
    | UnaryOp::Tanh
    | UnaryOp::Sigmoid
    | UnaryOp::Exp => {}
};

/// Pooling kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolOp {
    Max,
    Avg,
}

/// RoPE variants (ggml's `mode`): normal rotates adjacent pairs, NeoX rotates halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeMode {
    Normal = 0,
    Neox = 2,
}

/// RoPE parameters (ggml_rope_ext's arguments).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams {
    pub n_dims: usize,
    pub mode: RopeMode,
    pub n_ctx_orig: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

impl RopeParams {
    /// Plain RoPE with base `freq_base` and no context extension.
    pub fn new(n_dims: usize, mode: RopeMode, freq_base: f32) -> Self {
        RopeParams {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    /// Ratio of consecutive pair frequencies: pair i rotates by `pos * theta_scale^i`.
    pub fn theta_scale(&self) -> f32 {
        self.freq_base.powf(-2.0 / self.n_dims as f32)
    }

    /// YaRN correction dims (ggml_rope_yarn_corr_dims): the pairs between which the rotation
    /// ramps from extrapolated to interpolated. Computed here once for every backend.
    pub fn yarn_corr_dims(&self) -> [f32; 2] {
        let n_dims = self.n_dims as f32;
        let corr_dim = |n_rot: f32| {
            n_dims * (self.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let start = corr_dim(self.beta_fast).floor();
        let end = corr_dim(self.beta_slow).ceil();
        [start.max(0.0), end.min(n_dims - 1.0)]
    }
}

/// ALiBi slopes of a soft_max with `max_bias` over `n_head` heads (ggml's formula): head `h`
/// gets `m0^(h+1)` below `n_head_log2`, `m1^(2(h-n_head_log2)+1)` above. Computed here once for
/// every backend (the WebGPU kernel gets these three numbers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Alibi {
    pub max_bias: f32,
    /// Largest power of two <= n_head (1 for no heads).
    pub n_head_log2: u32,
    pub m0: f32,
    pub m1: f32,
}

impl Alibi {
    pub fn new(max_bias: f32, n_head: usize) -> Alibi {
        let n_head_log2 = 1u32 << (usize::BITS - 1 - n_head.max(1).leading_zeros());
        Alibi {
            max_bias,
            n_head_log2,
            m0: 2f32.powf(-max_bias / n_head_log2 as f32),
            m1: 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32),
        }
    }

    /// The slope of head `h`; 1 when `max_bias` is 0 (no ALiBi).
    pub fn slope(&self, h: usize) -> f32 {
        if self.max_bias <= 0.0 {
            return 1.0;
        }
        let nhl = self.n_head_log2 as usize;
        if h < nhl {
            self.m0.powi(h as i32 + 1)
        } else {
            self.m1.powi(2 * (h - nhl) as i32 + 1)
        }
    }
}

/// What produces a tensor. Parameters live in the variant (ggml keeps them in `op_params`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// A leaf: data set from outside (input, weight, constant).
    None,
    /// src0 copied into a new contiguous tensor of the same type.
    Dup,
    /// src0 copied (with type conversion) into src1; the result is a view of src1.
    Cpy,
    /// src0 made contiguous, converting to the result's type.
    Cont,
    /// Views: no computation, the result shares src0's data.
    Reshape,
    View,
    Permute([usize; 4]),
    Transpose,
    /// Elementwise binary ops; src1 is broadcast (repeated) to src0's shape.
    Add,
    Sub,
    Mul,
    Div,
    /// `x * s + b`.
    Scale {
        s: f32,
        b: f32,
    },
    Sqr,
    Sqrt,
    Log,
    /// Sum of all elements → 1 element.
    Sum,
    /// Sum of each row → ne0 = 1.
    SumRows,
    /// Mean of each row → ne0 = 1.
    Mean,
    /// Index of the maximum of each row (i32) → [ne1].
    Argmax,
    /// src0 tiled to src1's shape.
    Repeat,
    Concat {
        dim: usize,
    },
    Unary(UnaryOp),
    Norm {
        eps: f32,
    },
    RmsNorm {
        eps: f32,
    },
    /// `dst[i,j] = sum_k src0[k,i] * src1[k,j]`, broadcast over dims 2–3.
    MulMat,
    /// soft_max(src0 * scale + mask) over rows; src1 is the optional mask (f32 or f16).
    SoftMax {
        scale: f32,
        max_bias: f32,
    },
    /// Attention in one pass (ggml_flash_attn_ext). src0: q f32 [dk, n_tokens, n_head, ne3];
    /// src1: k [dk, n_kv, n_head_kv, ne3]; src2: v [dv, n_kv, n_head_kv, ne3] (k and v f16 or
    /// f32, any strides: views of a KV cache); src3: an optional mask (f32 or f16) as
    /// soft_max's, [n_kv, >= n_tokens, …]. The result, f32 [dv, n_head, n_tokens, ne3], is
    /// softmax(s) · v per query row with s = scale · q·k (then softcap · tanh(s / softcap)
    /// when softcap > 0) + slope · mask; head h reads kv head h / (n_head / n_head_kv).
    FlashAttnExt {
        scale: f32,
        max_bias: f32,
        softcap: f32,
    },
    /// src1: positions (i32, one per ne2 row); src2: optional frequency factors.
    Rope(RopeParams),
    /// Rows of src0 picked by the i32 indices in src1.
    GetRows,
    /// src0: kernel (for its shape), src1: input → columns for a conv as a mul_mat.
    Im2Col {
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
        d0: usize,
        d1: usize,
        is_2d: bool,
    },
    Pool2d {
        op: PoolOp,
        k0: usize,
        k1: usize,
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
    },
    /// Mean over the batch of -sum(softmax-log(src0) * src1) along rows → 1 element.
    CrossEntropyLoss,
    // Ops of the backward pass and the optimizers (`crate::backward`, `ops/train.rs`).
    /// src0 summed over the tiles of a repeat down to the result's shape (ggml_repeat_back).
    RepeatBack,
    /// src0 (the gradient of `unary(src1)`) times the derivative of the function at src1.
    UnaryBack(UnaryOp),
    /// Gradient of norm (`rms: false`) or rms_norm over rows: src0 the result's gradient, src1
    /// the input.
    NormBack {
        eps: f32,
        rms: bool,
    },
    /// Zeros of the result's (contiguous) shape with src0 added at the elements a view with
    /// byte strides `nb` at byte `offset` selects (the gradient of a view into its source).
    ViewBack {
        offset: usize,
        nb: [usize; 4],
    },
    /// Rows of src0 added into zeros of the result's shape at the i32 indices in src1
    /// (the gradient of get_rows).
    GetRowsBack,
    /// The gradient of im2col: src0 the columns' gradient, src1 the kernel (for its shape);
    /// the result has the input's shape.
    Im2ColBack {
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
        d0: usize,
        d1: usize,
        is_2d: bool,
    },
    /// The gradient of pool_2d: src0 the result's gradient, src1 the pooled input.
    Pool2dBack {
        op: PoolOp,
        k0: usize,
        k1: usize,
        s0: usize,
        s1: usize,
        p0: usize,
        p1: usize,
    },
    /// The gradient of rope: rope by the negated angles (src0 the result's gradient, src1 the
    /// positions, src2 the optional frequency factors).
    RopeBack(RopeParams),
    /// One AdamW step in place (ggml's OPT_STEP_ADAMW): src0 the parameter, src1 its gradient,
    /// src2 the optimizer state f32 [n, 2] (row 0 the first moment, row 1 the second, n the
    /// parameter's element count; updated in place), src3 the hyper-parameters f32 [alpha,
    /// beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t)], a tensor so that one static graph
    /// serves every step. The result is a view of the parameter.
    OptStepAdamW,
    /// One SGD step in place: src0 the parameter, src1 its gradient, src2 f32 [alpha, wd].
    /// The result is a view of the parameter.
    OptStepSgd,
}

impl Op {
    /// Ops whose result shares its source's data and runs no kernel.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Reshape | Op::View | Op::Permute(_) | Op::Transpose
        )
    }

    /// Short name for debugging and error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Dup => "DUP",
            Op::Cpy => "CPY",
            Op::Cont => "CONT",
            Op::Reshape => "RESHAPE",
            Op::View => "VIEW",
            Op::Permute(_) => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::Add => "ADD",
            Op::Sub => "SUB",
            Op::Mul => "MUL",
            Op::Div => "DIV",
            Op::Scale { .. } => "SCALE",
            Op::Sqr => "SQR",
            Op::Sqrt => "SQRT",
            Op::Log => "LOG",
            Op::Sum => "SUM",
            Op::SumRows => "SUM_ROWS",
            Op::Mean => "MEAN",
            Op::Argmax => "ARGMAX",
            Op::Repeat => "REPEAT",
            Op::Concat { .. } => "CONCAT",
            Op::Unary(_) => "UNARY",
            Op::Norm { .. } => "NORM",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::MulMat => "MUL_MAT",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::FlashAttnExt { .. } => "FLASH_ATTN_EXT",
            Op::Rope(_) => "ROPE",
            Op::GetRows => "GET_ROWS",
            Op::Im2Col { .. } => "IM2COL",
            Op::Pool2d { .. } => "POOL_2D",
            Op::CrossEntropyLoss => "CROSS_ENTROPY_LOSS",
            Op::RepeatBack => "REPEAT_BACK",
            Op::UnaryBack(_) => "UNARY_BACK",
            Op::NormBack { .. } => "NORM_BACK",
            Op::ViewBack { .. } => "VIEW_BACK",
            Op::GetRowsBack => "GET_ROWS_BACK",
            Op::Im2ColBack { .. } => "IM2COL_BACK",
            Op::Pool2dBack { .. } => "POOL_2D_BACK",
            Op::RopeBack(_) => "ROPE_BACK",
            Op::OptStepAdamW => "OPT_STEP_ADAMW",
            Op::OptStepSgd => "OPT_STEP_SGD",
        }
    }

    /// Elementwise ops whose result may take over the memory of src0 (ggml_op_can_inplace).
    pub fn can_inplace(&self) -> bool {
        matches!(
            self,
            Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Div
                | Op::Scale { .. }
                | Op::Sqr
                | Op::Sqrt
                | Op::Log
                | Op::Unary(_)
                | Op::RmsNorm { .. }
                | Op::SoftMax { .. }
                | Op::Rope(_)
        )
    }
}

/// Where a tensor's bytes are: a backend buffer and an offset in it.
#[derive(Clone)]
pub struct TensorData {
    pub buffer: Arc<dyn Buffer>,
    pub offset: usize,
}

impl std::fmt::Debug for TensorData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.buffer.name(), self.offset)
    }
}

/// One tensor descriptor.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub dtype: DType,
    /// Elements per dimension; unused trailing dimensions are 1.
    pub ne: [usize; MAX_DIMS],
    /// Byte stride per dimension: nb[0] = type size, nb[1] = row size for contiguous tensors.
    pub nb: [usize; MAX_DIMS],
    pub op: Op,
    pub src: [Option<TensorId>; MAX_SRC],
    /// For views (and `Cpy`): the tensor whose data this one shares, and the byte offset in it.
    pub view_src: Option<TensorId>,
    pub view_offs: usize,
    pub name: String,
    pub flags: Flags,
    pub data: Option<TensorData>,
}

impl Tensor {
    /// A new contiguous tensor with no op and no data. `ne[0]` must be a multiple of the block size
    /// (checked by the caller, see `Context::new_tensor`).
    pub fn contiguous(dtype: DType, ne: [usize; MAX_DIMS]) -> Tensor {
        Tensor {
            dtype,
            ne,
            nb: contiguous_strides(dtype, ne),
            op: Op::None,
            src: [None; MAX_SRC],
            view_src: None,
            view_offs: 0,
            name: String::new(),
            flags: Flags::default(),
            data: None,
        }
    }

    /// 0 when any dim is 0 (checked first: the other dims' product may not fit).
    pub fn nelements(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
        self.ne.iter().product()
    }

    /// Rows holding at least one element: 0 for an empty tensor, whatever its other dims (a
    /// [0, 2^40] tensor has nothing to visit, and its dims' product may not fit).
    pub fn nrows(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes spanned by the tensor (ggml_nbytes): from the first to one past the last element.
    pub fn nbytes(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
        let bs = self.dtype.block_size();
        let mut n = if bs == 1 {
            self.dtype.type_size() + (self.ne[0] - 1) * self.nb[0]
        } else {
            self.ne[0] / bs * self.nb[0]
        };
        for i in 1..MAX_DIMS {
            n += (self.ne[i] - 1) * self.nb[i];
        }
        n
    }

    /// Number of dimensions ignoring trailing 1s (at least 1), as ggml_n_dims.
    pub fn n_dims(&self) -> usize {
        (1..MAX_DIMS)
            .rev()
            .find(|&i| self.ne[i] > 1)
            .map_or(1, |i| i + 1)
    }

    /// True when the elements are laid out densely in order (ggml_is_contiguous); dimensions of
    /// size 1 may have any stride.
    pub fn is_contiguous(&self) -> bool {
        let bs = self.dtype.block_size();
        let mut next = self.dtype.type_size();
        if self.ne[0] != bs && self.nb[0] != next {
            return false;
        }
        // Saturating: an empty view may have dims whose product does not fit (found by fuzzing);
        // a saturated stride never equals a real one.
        next = next.saturating_mul(self.ne[0] / bs);
        for i in 1..MAX_DIMS {
            if self.ne[i] != 1 {
                if self.nb[i] != next {
                    return false;
                }
                next = next.saturating_mul(self.ne[i]);
            }
        }
        true
    }

    /// Rows contiguous (nb[0] is the element size), any strides above.
    pub fn is_row_contiguous(&self) -> bool {
        self.nb[0] == self.dtype.type_size()
    }

    /// Same type, shape and strides (ggml_are_same_layout).
    pub fn same_layout(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype && self.ne == other.ne && self.nb == other.nb
    }

    pub fn same_shape(&self, other: &Tensor) -> bool {
        self.ne == other.ne
    }

    pub fn is_input(&self) -> bool {
        self.flags.contains(Flags::INPUT)
    }
    pub fn is_output(&self) -> bool {
        self.flags.contains(Flags::OUTPUT)
    }
    pub fn is_param(&self) -> bool {
        self.flags.contains(Flags::PARAM)
    }

    pub fn srcs(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.src.iter().flatten().copied()
    }
}

/// Strides of a dense tensor of `dtype` and shape `ne`. Saturating: shapes that own data were
/// checked to fit (`Context::new_tensor`); a view's placeholder strides, replaced by its own,
/// may not fit (found by fuzzing).
pub fn contiguous_strides(dtype: DType, ne: [usize; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let mut nb = [0usize; MAX_DIMS];
    nb[0] = dtype.type_size();
    nb[1] = nb[0].saturating_mul(ne[0] / dtype.block_size());
    for i in 2..MAX_DIMS {
        nb[i] = nb[i - 1].saturating_mul(ne[i - 1]);
    }
    nb
}
