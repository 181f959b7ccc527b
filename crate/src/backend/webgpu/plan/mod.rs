//! How the WebGPU backend computes a node: its dispatches, each a kernel (pipeline key, entry
//! point, WGSL source), the tensor bindings, the parameters and the workgroup counts. One
//! function per op family in the files of this folder.
//!
//! Conventions shared with `shaders/common.wgsl`: binding 0 is a 256-byte uniform of 64 words;
//! bindings 1.. are the tensors (dst, src0, src1, src2) as `array<u32>` (or `array<f16>` on the
//! f16 path), bound at their offsets rounded down to the storage alignment. Words 9t..9t+8
//! describe tensor slot t (0 = dst): element offset inside the binding, ne[4], nb[4] in
//! elements of the binding (4 bytes for f32/i32, 2 for f16, 1 for quantized blocks); the
//! kernel's own scalars start at word 36.

mod conv;
mod elementwise;
#[cfg(test)]
pub(super) use elementwise::{BinaryFn, UnaryFn};
#[cfg(test)]
pub(super) use reduce::RowsFn;
mod matmul;
mod reduce;
mod rope;
mod train;

use super::buffer::WebGpuBuffer;
use super::shader::tname;
use super::split::{parts, span_bytes, split_of, Part};
use super::support::{check, unit};
use super::Shared;
use crate::backend::Buffer as _;
use crate::tensor::{Op, Tensor};
use crate::{Context, Error, Result, TensorId};

/// Workgroup size of the elementwise kernels (see the WGSL files).
const WG: usize = 256;

/// One tensor binding: buffer range.
pub(crate) struct Bind<'a> {
    pub buf: &'a wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

/// A planned dispatch.
pub(crate) struct Dispatch<'a> {
    pub key: String,
    pub entry: &'static str,
    pub make_src: Box<dyn Fn(bool) -> String + 'a>,
    pub binds: Vec<Bind<'a>>,
    pub params: [u32; 64],
    pub groups: [u32; 3],
}

/// The kernel an op family chose: pipeline key (without the entry point), entry point,
/// workgroups, and the WGSL source for the f16 flag.
struct Kernel<'a> {
    key: String,
    entry: &'static str,
    groups: [u32; 3],
    make_src: Box<dyn Fn(bool) -> String + 'a>,
}

/// The bindings and parameters of one dispatch being planned.
struct Planner<'a> {
    ctx: &'a Context,
    shared: &'a Shared,
    id: TensorId,
    binds: Vec<Bind<'a>>,
    params: [u32; 64],
}

impl<'a> Planner<'a> {
    /// The node.
    fn t(&self) -> &'a Tensor {
        self.ctx.tensor(self.id)
    }

    /// Source `i` of the node (present: the support check ran first).
    fn src(&self, i: usize) -> TensorId {
        self.t().src[i].expect("checked by `check`")
    }

    /// Workgroups for `n` items at `per` items per group, as a 2-D grid within the
    /// per-dimension limit (kernels linearise with `wg_index`).
    fn grid(&self, n: usize, per: usize) -> [u32; 3] {
        let groups = n.div_ceil(per).max(1);
        let max = self.shared.limits.max_compute_workgroups_per_dimension as usize;
        if groups <= max {
            [groups as u32, 1, 1]
        } else {
            [max as u32, groups.div_ceil(max) as u32, 1]
        }
    }

    /// Bind tensor `id` as slot `binds.len()` and describe it in the parameters.
    fn tensor(&mut self, id: TensorId) -> Result<()> {
        let ne = self.ctx.tensor(id).ne;
        self.tensor_part(id, 0, ne)
    }

    /// Bind the node and then each of `srcs` (source slots).
    fn tensors(&mut self, srcs: &[usize]) -> Result<()> {
        self.tensor(self.id)?;
        for &i in srcs {
            self.tensor(self.src(i))?;
        }
        Ok(())
    }

    /// Bind the part of tensor `id` that starts `skip` bytes after it and has shape `ne` (same
    /// strides): a row range of a tensor too large for one binding.
    fn tensor_part(&mut self, id: TensorId, skip: usize, ne: [usize; 4]) -> Result<()> {
        let slot = self.binds.len();
        let t = self.ctx.tensor(id);
        let (buf, offset) = locate(self.ctx, id)?;
        let nbytes = span_bytes(t.dtype, ne, t.nb);
        if skip + nbytes > t.nbytes() {
            return Err(Error::Backend(format!(
                "part of '{}' ({nbytes} bytes at {skip}) lies outside it",
                t.name
            )));
        }
        let start = offset + skip;
        let align = self.shared.alignment();
        let bind_off = start / align * align;
        let rel = start - bind_off;
        let u = unit(t.dtype);
        if !rel.is_multiple_of(u) {
            return Err(Error::Backend(format!(
                "tensor '{}' at byte offset {start} is not aligned to its element size",
                t.name
            )));
        }
        let size = ((rel + nbytes).div_ceil(4) * 4).max(4);
        if size > self.shared.max_binding() {
            return Err(Error::Backend(format!(
                "tensor '{}' ({nbytes} bytes) exceeds max_storage_buffer_binding_size",
                t.name
            )));
        }
        self.binds.push(Bind {
            buf: &buf.buf,
            offset: bind_off as u64,
            size: size as u64,
        });
        if slot < 4 {
            let p = &mut self.params[slot * 9..slot * 9 + 9];
            p[0] = (rel / u) as u32;
            for d in 0..4 {
                p[1 + d] = ne[d] as u32;
                p[5 + d] = (t.nb[d] / u) as u32;
            }
        }
        Ok(())
    }
    fn u(&mut self, i: usize, v: u32) {
        self.params[36 + i] = v;
    }
    fn f(&mut self, i: usize, v: f32) {
        self.params[36 + i] = v.to_bits();
    }
}

/// The WebGPU buffer holding tensor `id` and the tensor's offset in it.
fn locate(ctx: &Context, id: TensorId) -> Result<(&WebGpuBuffer, usize)> {
    let t = ctx.tensor(id);
    let (data, offset) = ctx
        .data_location(id)
        .ok_or_else(|| Error::Backend(format!("tensor '{}' has no data", t.name)))?;
    let buf = data
        .as_any()
        .downcast_ref::<WebGpuBuffer>()
        .ok_or_else(|| {
            Error::Backend(format!(
                "tensor '{}' is in a {} buffer, not a WebGPU buffer",
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
    Ok((buf, offset))
}

/// Plan the dispatches of node `id`: none for views, leaves and empty tensors; one per part
/// when a tensor is larger than a storage binding (see `split.rs`); else one.
pub(crate) fn plan<'a>(
    shared: &'a Shared,
    ctx: &'a Context,
    id: TensorId,
) -> Result<Vec<Dispatch<'a>>> {
    let t = ctx.tensor(id);
    if t.op.is_view() || t.op == Op::None || t.nelements() == 0 {
        return Ok(Vec::new());
    }
    check(shared, ctx, id).map_err(|m| Error::UnsupportedOp(format!("{m} (node '{}')", t.name)))?;
    let split = split_of(shared, ctx, t);
    if split.rows.is_none() && split.cols.is_none() {
        return Ok(vec![plan_part(shared, ctx, id, None)?]);
    }
    parts(ctx, t, &split)
        .into_iter()
        .map(|part| plan_part(shared, ctx, id, Some(part)))
        .collect()
}

/// The dispatch of node `id`, over a part of src0's rows (mul_mat and get_rows) and of the
/// columns (mul_mat) only when given (checked by the caller).
fn plan_part<'a>(
    shared: &'a Shared,
    ctx: &'a Context,
    id: TensorId,
    part: Option<Part>,
) -> Result<Dispatch<'a>> {
    let mut p = Planner {
        ctx,
        shared,
        id,
        binds: Vec::new(),
        params: [0; 64],
    };
    let t = p.t();
    let k = match t.op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => elementwise::binary(&mut p)?,
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Log | Op::Unary(_) | Op::Repeat => {
            elementwise::unary(&mut p)?
        }
        Op::Dup | Op::Cont | Op::Cpy => elementwise::cpy(&mut p)?,
        Op::Concat { dim } => elementwise::concat(&mut p, dim)?,
        Op::Norm { eps } | Op::RmsNorm { eps } => reduce::norm(&mut p, eps)?,
        Op::SoftMax { scale, max_bias } => reduce::soft_max(&mut p, scale, max_bias)?,
        Op::SumRows | Op::Mean | Op::Argmax | Op::Sum => reduce::rows(&mut p)?,
        Op::MulMat => matmul::mul_mat(&mut p, part)?,
        Op::GetRows => matmul::get_rows(&mut p, part)?,
        Op::Rope(rp) => rope::rope(&mut p, &rp, 1.0)?,
        Op::RopeBack(rp) => rope::rope(&mut p, &rp, -1.0)?,
        Op::CrossEntropyLoss => train::cross_entropy(&mut p)?,
        Op::RepeatBack => train::repeat_back(&mut p)?,
        Op::UnaryBack(u) => train::unary_back(&mut p, u)?,
        Op::NormBack { eps, rms } => train::norm_back(&mut p, eps, rms)?,
        Op::ViewBack { offset, nb } => train::view_back(&mut p, offset, nb)?,
        Op::GetRowsBack => train::get_rows_back(&mut p)?,
        Op::Im2ColBack {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        } => train::im2col_back(&mut p, [s0, s1, p0, p1, d0, d1], is_2d)?,
        Op::Pool2dBack {
            op,
            k0,
            k1,
            s0,
            s1,
            p0,
            p1,
        } => train::pool_2d_back(&mut p, op, [k0, k1, s0, s1, p0, p1])?,
        Op::OptStepAdamW | Op::OptStepSgd => train::opt_step(&mut p, t.op == Op::OptStepAdamW)?,
        Op::Im2Col {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        } => conv::im2col(&mut p, [s0, s1, p0, p1, d0, d1], is_2d)?,
        Op::Pool2d {
            op,
            k0,
            k1,
            s0,
            s1,
            p0,
            p1,
        } => conv::pool_2d(&mut p, op, [k0, k1, s0, s1, p0, p1])?,
        other => {
            return Err(Error::UnsupportedOp(format!(
                "{} on WebGPU (node '{}')",
                other.name(),
                t.name
            )))
        }
    };
    Ok(Dispatch {
        key: format!("{}:{}", k.key, k.entry),
        entry: k.entry,
        make_src: k.make_src,
        binds: p.binds,
        params: p.params,
        groups: k.groups,
    })
}

/// One WGSL kernel the backend can build: its pipeline key, the entry points it is dispatched
/// with, whether it is the `shader-f16` path's source, and the source.
#[doc(hidden)]
pub struct KernelVariant {
    pub key: String,
    pub entries: Vec<&'static str>,
    pub f16: bool,
    pub source: String,
}

/// Every kernel variant the planners above can choose (op family × types × f16/f32 path), built
/// by the same source builders, so that a shader check (the MSL translation test) covers exactly
/// what the backend compiles.
pub fn kernel_variants() -> Vec<KernelVariant> {
    use crate::DType::{F16, F32};
    type Src = Box<dyn Fn(bool) -> String>;
    let mut out = Vec::new();
    for f16 in [false, true] {
        let mut v: Vec<(String, Vec<&'static str>, Src)> = vec![
            ("binary".into(), vec!["main"], elementwise::binary_src()),
            ("unary".into(), vec!["main"], elementwise::unary_src()),
            ("concat".into(), vec!["main"], elementwise::concat_src()),
            ("norm".into(), vec!["main"], reduce::norm_src()),
            ("rows".into(), vec!["main"], reduce::rows_src()),
            ("rope".into(), vec!["main"], rope::rope_src()),
            ("pool_2d".into(), vec!["main"], conv::pool_2d_src()),
            (
                "cross_entropy_loss".into(),
                vec!["main"],
                train::cross_entropy_src(),
            ),
            ("repeat_back".into(), vec!["main"], train::repeat_back_src()),
            ("unary_back".into(), vec!["main"], train::unary_back_src()),
            ("norm_back".into(), vec!["main"], train::norm_back_src()),
            ("view_back".into(), vec!["main"], train::view_back_src()),
            (
                "get_rows_back".into(),
                vec!["main"],
                train::get_rows_back_src(),
            ),
            ("im2col_back".into(), vec!["main"], train::im2col_back_src()),
            (
                "pool_2d_back".into(),
                vec!["main"],
                train::pool_2d_back_src(),
            ),
            (
                "opt_step".into(),
                train::OPT_STEP_ENTRIES.to_vec(),
                train::opt_step_src(),
            ),
        ];
        for (s0, d) in [(F32, F32), (F32, F16), (F16, F32), (F16, F16)] {
            // As `elementwise::cpy`: the f32 path writes an f16 destination in pairs.
            let pairs = d == F16 && !f16;
            v.push((
                elementwise::cpy_key(s0, d, pairs),
                vec![elementwise::cpy_entry(pairs)],
                elementwise::cpy_src(s0, d, pairs),
            ));
        }
        for mt in [F32, F16] {
            v.push((
                format!("soft_max_{}", tname(mt)),
                vec!["main"],
                reduce::soft_max_src(mt),
            ));
        }
        // An f16 im2col destination only on the f16 path (see `support::check`).
        for d in if f16 { vec![F32, F16] } else { vec![F32] } {
            v.push((
                format!("im2col_{}", tname(d)),
                vec!["main"],
                conv::im2col_src(d),
            ));
        }
        for s0 in crate::backend::WEBGPU_WEIGHT_TYPES {
            v.push((
                format!("mul_mat_{}", tname(s0)),
                matmul::MUL_MAT_ENTRIES.to_vec(),
                matmul::mul_mat_src(s0),
            ));
            v.push((
                format!("get_rows_{}", tname(s0)),
                vec!["main"],
                matmul::get_rows_src(s0),
            ));
        }
        out.extend(v.into_iter().map(|(key, entries, src)| KernelVariant {
            key,
            entries,
            f16,
            source: src(f16),
        }));
    }
    out
}
