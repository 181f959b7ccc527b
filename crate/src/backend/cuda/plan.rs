//! How the CUDA backend computes a node: its kernel launches (entry point, parameter block, grid),
//! one function per op family, mirroring the WebGPU planners (`backend/webgpu/plan/`). Slots of
//! the parameter block are fixed: 0 = dst, 1 = src0, 2 = src1, 3 = src2 (or the q8 scratch of
//! a quantized mat_vec).

use super::buffer::CudaBuffer;
use super::kernels::{KParams, KTensor};
use super::support::check;
use crate::backend::Buffer as _;
use crate::tensor::{Alibi, Op, RopeMode, UnaryOp};
use crate::{Context, DType, Error, Result, TensorId};

/// Threads per block of the elementwise and per-row kernels.
const BLOCK: u32 = 256;
/// Rows per mat_vec block (`MV_ROWS` in mul_mat.cu): one warp each.
const MV_ROWS: usize = 4;
/// Output tile of mat_mat (`TILE` in mul_mat.cu).
const TILE: usize = 64;
/// Bytes of one `Q8Y` block (mul_mat.cu / quants.cuh): 4 floats + 32 int8.
pub(crate) const Q8Y_BYTES: usize = 48;

/// One kernel launch.
pub(crate) struct Launch {
    pub entry: String,
    pub params: KParams,
    pub grid: (u32, u32, u32),
    pub block: u32,
}

/// The kernel name suffix of a weight type (as in mul_mat.cu's WEIGHT_KERNELS).
pub(crate) fn tname(t: DType) -> &'static str {
    match t {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::Q4_0 => "q4_0",
        DType::Q4_1 => "q4_1",
        DType::Q5_0 => "q5_0",
        DType::Q5_1 => "q5_1",
        DType::Q8_0 => "q8_0",
        DType::Q4_K => "q4_K",
        DType::Q5_K => "q5_K",
        _ => "q6_K",
    }
}

fn is_quant(t: DType) -> bool {
    !matches!(t, DType::F32 | DType::F16)
}

/// Bytes of q8 scratch node `id` needs (a quantized mat_vec quantizes src1 into it first).
pub(crate) fn scratch_bytes(ctx: &Context, id: TensorId) -> usize {
    let t = ctx.tensor(id);
    if t.op != Op::MulMat {
        return 0;
    }
    let (Some(a), Some(b)) = (t.src[0], t.src[1]) else {
        return 0;
    };
    let (a, b) = (ctx.tensor(a), ctx.tensor(b));
    if !is_quant(a.dtype) || b.ne[1] != 1 {
        return 0;
    }
    b.ne[0] / 32 * b.ne[1] * b.ne[2] * b.ne[3] * Q8Y_BYTES
}

/// Device address of tensor `id`'s first byte.
fn device_ptr(ctx: &Context, id: TensorId) -> Result<u64> {
    let t = ctx.tensor(id);
    let (data, offset) = ctx
        .data_location(id)
        .ok_or_else(|| Error::Backend(format!("tensor '{}' has no data", t.name)))?;
    let buf = data.as_any().downcast_ref::<CudaBuffer>().ok_or_else(|| {
        Error::Backend(format!(
            "tensor '{}' is in a {} buffer, not a CUDA buffer",
            t.name,
            data.name()
        ))
    })?;
    if offset + t.nbytes() > buf.size() {
        return Err(Error::Backend(format!(
            "tensor '{}' lies outside its buffer",
            t.name
        )));
    }
    Ok(buf.ptr + offset as u64)
}

/// The address a kernel reads tensor `id` at.
pub(crate) type Locate<'a> = &'a dyn Fn(&Context, TensorId) -> Result<u64>;

struct Planner<'a> {
    ctx: &'a Context,
    id: TensorId,
    p: KParams,
    locate: Locate<'a>,
}

impl Planner<'_> {
    fn src(&self, i: usize) -> TensorId {
        self.ctx.tensor(self.id).src[i].expect("checked by `check`")
    }
    /// Describe tensor `id` in slot `slot`.
    fn slot(&mut self, slot: usize, id: TensorId) -> Result<()> {
        let t = self.ctx.tensor(id);
        self.p.ptr[slot] = (self.locate)(self.ctx, id)?;
        self.p.t[slot] = KTensor {
            ne: t.ne.map(|x| x as i64),
            nb: t.nb.map(|x| x as i64),
        };
        Ok(())
    }
    /// dst in slot 0 and each of `srcs` in slot 1 + its index.
    fn tensors(&mut self, srcs: &[usize]) -> Result<()> {
        self.slot(0, self.id)?;
        for &i in srcs {
            self.slot(1 + i, self.src(i))?;
        }
        Ok(())
    }
    fn launch(&self, entry: String, grid: (u32, u32, u32), block: u32) -> Launch {
        Launch {
            entry,
            params: self.p,
            grid,
            block,
        }
    }
    /// One thread per item.
    fn per_item(&mut self, entry: impl Into<String>, n: usize) -> Result<Launch> {
        self.p.n = n as i64;
        Ok(self.launch(entry.into(), (blocks(n, BLOCK as usize)?, 1, 1), BLOCK))
    }
    /// One block per row.
    fn per_row(&mut self, entry: impl Into<String>, rows: usize) -> Result<Launch> {
        self.p.n = rows as i64;
        Ok(self.launch(entry.into(), (blocks(rows, 1)?, 1, 1), BLOCK))
    }
}

/// Blocks for `n` items at `per` a block (grid.x allows 2^31 - 1).
fn blocks(n: usize, per: usize) -> Result<u32> {
    u32::try_from(n.div_ceil(per).max(1))
        .ok()
        .filter(|&b| b < i32::MAX as u32)
        .ok_or_else(|| Error::Backend(format!("{n} items need too many CUDA blocks")))
}

/// The launches of node `id` (none for views, leafs and empty tensors). `scratch`: device address
/// of at least [`scratch_bytes`] bytes.
pub(crate) fn plan(ctx: &Context, id: TensorId, scratch: u64) -> Result<Vec<Launch>> {
    plan_at(ctx, id, scratch, &device_ptr)
}

/// [`plan`] with the tensors' addresses given by `locate` (the host check of the kernels plans
/// over host memory).
pub(crate) fn plan_at(
    ctx: &Context,
    id: TensorId,
    scratch: u64,
    locate: Locate,
) -> Result<Vec<Launch>> {
    let t = ctx.tensor(id);
    if t.op.is_view() || t.op == Op::None || t.nelements() == 0 {
        return Ok(Vec::new());
    }
    check(ctx, id).map_err(|m| Error::UnsupportedOp(format!("{m} (node '{}')", t.name)))?;
    let mut p = Planner {
        ctx,
        id,
        p: KParams::default(),
        locate,
    };
    let n = t.nelements();
    let one = |l: Result<Launch>| l.map(|l| vec![l]);
    match t.op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            p.tensors(&[0, 1])?;
            p.p.i[0] = match t.op {
                Op::Add => 0,
                Op::Sub => 1,
                Op::Mul => 2,
                _ => 3,
            };
            one(p.per_item("binary", n))
        }
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Log | Op::Unary(_) | Op::Repeat => {
            p.tensors(&[0])?;
            // Codes of unary.cu's switch.
            let (code, s, b) = match t.op {
                Op::Unary(u) => (
                    match u {
                        UnaryOp::Abs => 0,
                        UnaryOp::Neg => 1,
                        UnaryOp::Relu => 2,
                        UnaryOp::Gelu => 3,
                        UnaryOp::GeluErf => 4,
                        UnaryOp::Silu => 5,
                        UnaryOp::Tanh => 6,
                        UnaryOp::Sigmoid => 7,
                        UnaryOp::Exp => 8,
                    },
                    0.0,
                    0.0,
                ),
                Op::Scale { s, b } => (9, s, b),
                Op::Sqr => (10, 0.0, 0.0),
                Op::Sqrt => (11, 0.0, 0.0),
                Op::Log => (12, 0.0, 0.0),
                _ => (13, 0.0, 0.0),
            };
            p.p.i[0] = code;
            p.p.f[0] = s;
            p.p.f[1] = b;
            one(p.per_item("unary", n))
        }
        Op::Dup | Op::Cont | Op::Cpy => {
            p.tensors(&[0])?;
            let s0 = ctx.tensor(p.src(0)).dtype;
            one(p.per_item(format!("cpy_{}_{}", tname(s0), tname(t.dtype)), n))
        }
        Op::Concat { dim } => {
            p.tensors(&[0, 1])?;
            p.p.i[0] = dim as i32;
            one(p.per_item("concat", n))
        }
        Op::Norm { eps } | Op::RmsNorm { eps } => {
            p.tensors(&[0])?;
            p.p.i[0] = matches!(t.op, Op::RmsNorm { .. }) as i32;
            p.p.f[0] = eps;
            one(p.per_row("norm_rows", t.nrows()))
        }
        Op::SoftMax { scale, max_bias } => {
            p.tensors(&[0])?;
            let mask = t.src[1];
            let mt = mask.map_or(DType::F32, |m| ctx.tensor(m).dtype);
            if let Some(m) = mask {
                p.slot(2, m)?;
            }
            let alibi = Alibi::new(max_bias, t.ne[2]);
            p.p.i[0] = mask.is_some() as i32;
            p.p.i[1] = alibi.n_head_log2 as i32;
            p.p.f[0] = scale;
            p.p.f[1] = alibi.max_bias;
            p.p.f[2] = alibi.m0;
            p.p.f[3] = alibi.m1;
            one(p.per_row(format!("soft_max_{}", tname(mt)), t.nrows()))
        }
        Op::SumRows | Op::Mean | Op::Argmax | Op::Sum => {
            p.tensors(&[0])?;
            p.p.i[0] = match t.op {
                Op::SumRows => 0,
                Op::Mean => 1,
                Op::Argmax => 2,
                _ => 3,
            };
            let rows = if t.op == Op::Sum {
                1
            } else {
                ctx.tensor(p.src(0)).nrows()
            };
            one(p.per_row("rows", rows))
        }
        Op::Rope(rp) => {
            p.tensors(&[0, 1])?;
            if let Some(ff) = t.src[2] {
                p.slot(3, ff)?;
            }
            p.p.i[0] = rp.n_dims as i32;
            p.p.i[1] = (rp.mode == RopeMode::Neox) as i32;
            p.p.i[2] = t.src[2].is_some() as i32;
            let corr = rp.yarn_corr_dims();
            p.p.f[..6].copy_from_slice(&[
                rp.theta_scale(),
                rp.freq_scale,
                rp.ext_factor,
                rp.attn_factor,
                corr[0],
                corr[1],
            ]);
            one(p.per_item("rope", n / 2))
        }
        Op::GetRows => {
            p.tensors(&[0, 1])?;
            let s0 = ctx.tensor(p.src(0)).dtype;
            one(p.per_item(format!("get_rows_{}", tname(s0)), n))
        }
        Op::MulMat => mul_mat(&mut p, scratch),
        Op::Im2Col {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        } => {
            p.tensors(&[1])?;
            let k = ctx.tensor(p.src(0));
            let x = ctx.tensor(p.src(1));
            // The 1-D case folded into the 2-D one: KH = IH = OH = 1, and the strides of src1
            // as (w, h, c, n) and of dst as (col, ow, oh, n).
            let (kw, kh) = (k.ne[0], if is_2d { k.ne[1] } else { 1 });
            let (iw, ih, ic, nb_) = if is_2d {
                (x.ne[0], x.ne[1], x.ne[2], x.ne[3])
            } else {
                (x.ne[0], 1, x.ne[1], x.ne[2])
            };
            let (ow, oh) = (t.ne[1], if is_2d { t.ne[2] } else { 1 });
            if !is_2d {
                let xs = p.p.t[2].nb;
                p.p.t[2].nb = [xs[0], 0, xs[1], xs[2]];
                let ds = p.p.t[0].nb;
                p.p.t[0].nb = [ds[0], ds[1], 0, ds[2]];
            }
            for (i, v) in [kw, kh, ic, iw, ih, ow, oh, nb_, s0, s1, p0, p1, d0, d1]
                .into_iter()
                .enumerate()
            {
                p.p.i[i] = v as i32;
            }
            one(p.per_item(format!("im2col_{}", tname(t.dtype)), n))
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
            p.tensors(&[0])?;
            p.p.i[0] = (op == crate::tensor::PoolOp::Max) as i32;
            for (i, v) in [k0, k1, s0, s1, p0, p1].into_iter().enumerate() {
                p.p.i[1 + i] = v as i32;
            }
            one(p.per_item("pool_2d", n))
        }
        other => Err(Error::UnsupportedOp(format!(
            "{} on CUDA (node '{}')",
            other.name(),
            t.name
        ))),
    }
}

/// mul_mat: n == 1 mat_vec (quantized weights: src1 quantized to q8 blocks first), else mat_mat.
fn mul_mat(p: &mut Planner, scratch: u64) -> Result<Vec<Launch>> {
    let ctx = p.ctx;
    let a = ctx.tensor(p.src(0));
    let b = ctx.tensor(p.src(1));
    p.tensors(&[0, 1])?;
    p.p.i[0] = (b.ne[2] / a.ne[2].max(1)) as i32;
    p.p.i[1] = (b.ne[3] / a.ne[3].max(1)) as i32;
    let (m, nn, batch) = (a.ne[1], b.ne[1], b.ne[2] * b.ne[3]);
    let ty = tname(a.dtype);
    let mut out = Vec::new();
    if nn == 1 {
        if is_quant(a.dtype) {
            p.p.ptr[3] = scratch;
            let nblocks = b.ne[0] / 32 * nn * batch;
            p.p.n = nblocks as i64;
            // One warp per block, 8 warps per thread block.
            out.push(p.launch("quantize_q8".into(), (blocks(nblocks, 8)?, 1, 1), BLOCK));
        }
        let rows = blocks(m, MV_ROWS)?;
        out.push(p.launch(
            format!("mat_vec_{ty}"),
            (rows, batch as u32, 1),
            32 * MV_ROWS as u32,
        ));
    } else {
        out.push(p.launch(
            format!("mat_mat_{ty}"),
            (blocks(m, TILE)?, nn.div_ceil(TILE) as u32, batch as u32),
            BLOCK,
        ));
    }
    Ok(out)
}
