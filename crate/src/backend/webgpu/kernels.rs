//! Which nodes the WebGPU backend can compute (exactly), and how: the WGSL source of each
//! (kernel, type, variant), its bindings, parameters and workgroup counts.
//!
//! Conventions shared with `shaders/common.wgsl`: binding 0 is a 256-byte uniform of 64 words;
//! bindings 1.. are the tensors (dst, src0, src1, src2) as `array<u32>` (or `array<f16>` on the
//! f16 path), bound at their offsets rounded down to the storage alignment. Words 9t..9t+8
//! describe tensor slot t (0 = dst): element offset inside the binding, ne[4], nb[4] in
//! elements of the binding (4 bytes for f32/i32, 2 for f16, 1 for quantized blocks); the
//! kernel's own scalars start at word 36.

use std::sync::Arc;

use super::buffer::WebGpuBuffer;
use super::Shared;
use crate::tensor::{Op, PoolOp, RopeMode, Tensor, UnaryOp};
use crate::{Context, DType, Error, Result, TensorId};

const COMMON: &str = include_str!("../../../../shaders/common.wgsl");
const QUANTS: &str = include_str!("../../../../shaders/quants.wgsl");
const BINARY: &str = include_str!("../../../../shaders/binary.wgsl");
const UNARY: &str = include_str!("../../../../shaders/unary.wgsl");
const CPY: &str = include_str!("../../../../shaders/cpy.wgsl");
const MUL_MAT: &str = include_str!("../../../../shaders/mul_mat.wgsl");
const GET_ROWS: &str = include_str!("../../../../shaders/get_rows.wgsl");
const SOFT_MAX: &str = include_str!("../../../../shaders/soft_max.wgsl");
const NORM: &str = include_str!("../../../../shaders/norm.wgsl");
const ROPE: &str = include_str!("../../../../shaders/rope.wgsl");
const CONCAT: &str = include_str!("../../../../shaders/concat.wgsl");
const IM2COL: &str = include_str!("../../../../shaders/im2col.wgsl");
const POOL_2D: &str = include_str!("../../../../shaders/pool_2d.wgsl");
const ROWS: &str = include_str!("../../../../shaders/rows.wgsl");

/// Weight types of mul_mat and get_rows.
pub(crate) const MATMUL_TYPES: [DType; 10] = crate::backend::WEBGPU_WEIGHT_TYPES;

/// Workgroup size of the elementwise kernels (see the WGSL files).
const WG: u32 = 256;
/// Output tile of the tiled mul_mat.
const TILE: usize = 64;

/// A compiled pipeline and the number of tensor bindings it takes.
pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub n_storage: usize,
}

/// Elements of a binding: bytes per unit of offsets and strides.
fn unit(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::I32 => 4,
        DType::F16 => 2,
        _ => 1,
    }
}

fn tname(dtype: DType) -> String {
    format!("{dtype}").to_lowercase()
}

/// Exact support check: `Ok` when the node can run here, otherwise why not.
pub(crate) fn check(
    shared: &Shared,
    ctx: &Context,
    id: TensorId,
) -> std::result::Result<(), String> {
    let t = ctx.tensor(id);
    if t.op.is_view() || t.op == Op::None {
        return Ok(());
    }
    let src = |i: usize| t.src[i].map(|s| ctx.tensor(s));
    let max = shared.max_binding();
    let align = shared.alignment();
    let split = split_of(shared, ctx, t);
    for (k, x) in std::iter::once(Some(t)).chain((0..4).map(src)).enumerate() {
        let Some(x) = x else { continue };
        // im2col reads only the shape of its kernel (src0): never bound.
        let bound = !(k == 1 && matches!(t.op, Op::Im2Col { .. }));
        let splits = match k {
            1 => split.rows.is_some(),
            0 | 2 => split.cols.is_some(),
            _ => false,
        };
        if bound && x.nbytes() + align > max && !splits {
            return Err(format!(
                "{}: tensor '{}' ({}) is {} bytes, more than one storage binding \
                 (max_storage_buffer_binding_size {} bytes) allows and it cannot be split \
                 by rows or columns{}; keep it on the CPU",
                t.op.name(),
                x.name,
                if k == 0 {
                    "dst".to_string()
                } else {
                    format!("src{}", k - 1)
                },
                x.nbytes(),
                max,
                split
                    .why_not
                    .as_deref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ));
        }
        let u = unit(x.dtype);
        if x.nb.iter().any(|&nb| nb % u != 0) {
            return Err(format!(
                "{}: strides {:?} of '{}' are not multiples of {u} bytes",
                t.op.name(),
                x.nb,
                x.name
            ));
        }
    }
    let ty = |x: Option<&Tensor>| x.map(|x| x.dtype);
    let (s0, s1, s2) = (ty(src(0)), ty(src(1)), ty(src(2)));
    let d = t.dtype;
    use DType::*;
    let f32s = |v: &[Option<DType>]| v.iter().all(|x| *x == Some(F32));
    let ok = match t.op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => f32s(&[s0, s1, Some(d)]),
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Log | Op::Unary(_) | Op::Repeat => {
            f32s(&[s0, Some(d)])
        }
        Op::Dup | Op::Cont | Op::Cpy => {
            let s = src(0).map(|x| x.nelements());
            matches!(s0, Some(F32) | Some(F16))
                && matches!(d, F32 | F16)
                && s == Some(t.nelements())
                && (d != F16 || shared.use_f16 || t.is_contiguous())
        }
        Op::Concat { dim } => dim < 4 && matches!(d, F32 | I32) && s0 == Some(d) && s1 == Some(d),
        Op::Norm { .. } | Op::RmsNorm { .. } => f32s(&[s0, Some(d)]),
        Op::MulMat => {
            s0.is_some_and(|x| MATMUL_TYPES.contains(&x))
                && src(0).is_some_and(|x| x.nb[0] == x.dtype.type_size())
                && s1 == Some(F32)
                && d == F32
        }
        Op::SoftMax { .. } => f32s(&[s0, Some(d)]) && matches!(s1, None | Some(F32) | Some(F16)),
        Op::Rope(p) => {
            f32s(&[s0, Some(d)])
                && s1 == Some(I32)
                && matches!(s2, None | Some(F32))
                && t.ne[0].is_multiple_of(2)
                && p.n_dims.is_multiple_of(2)
                && p.n_dims <= t.ne[0]
        }
        Op::GetRows => {
            s0.is_some_and(|x| MATMUL_TYPES.contains(&x))
                && src(0).is_some_and(|x| x.nb[0] == x.dtype.type_size())
                && s1 == Some(I32)
                && d == F32
        }
        Op::Im2Col { .. } => s1 == Some(F32) && (d == F32 || (d == F16 && shared.use_f16)),
        Op::Pool2d { .. } => f32s(&[s0, Some(d)]),
        Op::SumRows | Op::Mean | Op::Sum => f32s(&[s0, Some(d)]),
        Op::Argmax => s0 == Some(F32) && d == I32,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        let types: Vec<String> = t.srcs().map(|s| ctx.tensor(s).dtype.to_string()).collect();
        Err(format!(
            "{} for src types [{}] -> {} is not implemented on WebGPU{}",
            t.op.name(),
            types.join(", "),
            d,
            if shared.use_f16 { "" } else { " (f32 path)" }
        ))
    }
}

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
struct Split {
    /// Rows of src0 per dispatch (src0 over one binding).
    rows: Option<usize>,
    /// Columns of src1 and dst per dispatch (mul_mat whose dst or src1 is over one binding).
    cols: Option<usize>,
    /// Why dst/src1 cannot be split by columns, when one of them is over a binding.
    why_not: Option<String>,
}

/// The split of node `t`: rows of src0 ([`row_split`]) and, for a mul_mat whose output (e.g.
/// logits [vocab, n_tokens]) or src1 is over one binding, ranges of columns (tokens): each
/// dispatch binds the slice of dst and src1 of its columns. A slice's binding starts at the
/// storage offset alignment at or below it and the kernel gets the element offset inside the
/// binding, so any column start works as long as `align` + one slice fits.
fn split_of(shared: &Shared, ctx: &Context, t: &Tensor) -> Split {
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
fn span_bytes(dtype: DType, ne: [usize; 4], nb: [usize; 4]) -> usize {
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

/// Where a tensor's bytes are.
pub(crate) struct Loc<'a> {
    pub buf: &'a WebGpuBuffer,
    pub offset: usize,
}

pub(crate) fn locate<'a>(ctx: &'a Context, id: TensorId) -> Result<Loc<'a>> {
    let t = ctx.tensor(id);
    let (data, extra) = match (&t.data, t.view_src) {
        (Some(d), _) => (d, 0),
        (None, Some(v)) => match &ctx.tensor(v).data {
            Some(d) => (d, t.view_offs),
            None => return Err(Error::Backend(format!("tensor '{}' has no data", t.name))),
        },
        _ => return Err(Error::Backend(format!("tensor '{}' has no data", t.name))),
    };
    let buf = data
        .buffer
        .as_any()
        .downcast_ref::<WebGpuBuffer>()
        .ok_or_else(|| {
            Error::Backend(format!(
                "tensor '{}' is in a {} buffer, not a WebGPU buffer",
                t.name,
                data.buffer.name()
            ))
        })?;
    let offset = data.offset + extra;
    if offset + t.nbytes() > buf.size() {
        return Err(Error::Backend(format!(
            "tensor '{}' lies outside its buffer",
            t.name
        )));
    }
    Ok(Loc { buf, offset })
}

use crate::backend::Buffer as _;

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

struct Planner<'a> {
    ctx: &'a Context,
    shared: &'a Shared,
    binds: Vec<Bind<'a>>,
    params: [u32; 64],
}

impl<'a> Planner<'a> {
    /// Bind tensor `id` as slot `binds.len()` and describe it in the parameters.
    fn tensor(&mut self, id: TensorId) -> Result<()> {
        let ne = self.ctx.tensor(id).ne;
        self.tensor_part(id, 0, ne)
    }

    /// Bind the part of tensor `id` that starts `skip` bytes after it and has shape `ne` (same
    /// strides): a row range of a tensor too large for one binding.
    fn tensor_part(&mut self, id: TensorId, skip: usize, ne: [usize; 4]) -> Result<()> {
        let slot = self.binds.len();
        let t = self.ctx.tensor(id);
        let loc = locate(self.ctx, id)?;
        let nbytes = span_bytes(t.dtype, ne, t.nb);
        if skip + nbytes > t.nbytes() {
            return Err(Error::Backend(format!(
                "part of '{}' ({nbytes} bytes at {skip}) lies outside it",
                t.name
            )));
        }
        let start = loc.offset + skip;
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
            buf: &loc.buf.buf,
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

/// Storage declaration of binding `b` named `name` holding `elem`s.
fn decl(b: usize, name: &str, elem: &str) -> String {
    format!("@group(0) @binding({b}) var<storage, read_write> {name}: array<{elem}>;\n")
}

/// The element type a tensor of `dtype` is bound as.
fn elem(dtype: DType, f16: bool) -> &'static str {
    if dtype == DType::F16 && f16 {
        "f16"
    } else {
        "u32"
    }
}

/// WGSL of `fn <name>(i: u32) -> f32` reading element i of binding `var` of type `dtype`.
fn reader(name: &str, var: &str, dtype: DType, f16: bool) -> String {
    match dtype {
        DType::F16 if f16 => format!("fn {name}(i: u32) -> f32 {{ return f32({var}[i]); }}\n"),
        DType::F16 => format!(
            "fn {name}(i: u32) -> f32 {{ return unpack2x16float({var}[i >> 1u])[i & 1u]; }}\n"
        ),
        _ => format!("fn {name}(i: u32) -> f32 {{ return bitcast<f32>({var}[i]); }}\n"),
    }
}

/// WGSL of `fn write_dst(i: u32, v: f32)`.
fn writer(dtype: DType, f16: bool) -> String {
    match dtype {
        DType::F16 if f16 => "fn write_dst(i: u32, v: f32) { dst[i] = f16(v); }\n".into(),
        _ => "fn write_dst(i: u32, v: f32) { dst[i] = bitcast<u32>(v); }\n".into(),
    }
}

/// WGSL of `fn load_a(base: u32, k: u32) -> f32`: element k of the row starting at `base`
/// (units of src0's binding) of a weight of `dtype`.
fn load_a(dtype: DType, f16: bool) -> String {
    use DType::*;
    match dtype {
        F32 | F16 => format!(
            "{}fn load_a(base: u32, k: u32) -> f32 {{ return read_a(base + k); }}\n",
            reader("read_a", "src0", dtype, f16)
        ),
        q => format!(
            "{QUANTS}fn load_a(base: u32, k: u32) -> f32 {{ return deq_{}(base, k); }}\n",
            tname(q)
        ),
    }
}

fn header(f16: bool) -> String {
    let mut s = String::new();
    if f16 {
        s.push_str("enable f16;\n");
    }
    s.push_str(COMMON);
    s
}

/// WGSL of a kernel: the common header, a storage declaration per tensor binding (1.. in order,
/// (name, element type)), the type-dependent helpers `extra` (readers, writers, dequantizers)
/// and the body (`shaders/<kernel>.wgsl`).
fn shader(f16: bool, binds: &[(&str, &str)], extra: &str, body: &str) -> String {
    let mut s = header(f16);
    for (i, (name, elem)) in binds.iter().enumerate() {
        s.push_str(&decl(i + 1, name, elem));
    }
    s.push_str(extra);
    s.push_str(body);
    s
}

/// The source builder of a kernel whose tensors are all bound as `u32` words.
fn plain(names: &'static [&'static str], body: &'static str) -> Box<dyn Fn(bool) -> String> {
    Box::new(move |f16| {
        let binds: Vec<(&str, &str)> = names.iter().map(|n| (*n, "u32")).collect();
        shader(f16, &binds, "", body)
    })
}

/// Workgroups for `n` items at `per` items per group, as a 2-D grid within the per-dimension
/// limit (kernels linearise with `wg_index`).
fn grid(n: usize, per: usize, max_dim: u32) -> [u32; 3] {
    let groups = n.div_ceil(per).max(1);
    let max = max_dim as usize;
    if groups <= max {
        [groups as u32, 1, 1]
    } else {
        [max as u32, groups.div_ceil(max) as u32, 1]
    }
}

/// (pipeline key, entry point, workgroups, WGSL source for the f16 flag).
type KernelChoice<'a> = (
    String,
    &'static str,
    [u32; 3],
    Box<dyn Fn(bool) -> String + 'a>,
);

/// Plan the dispatches of node `id`: none for views, leaves and empty tensors; one per row
/// range of src0 when src0 is larger than a storage binding (see [`row_split`]); else one.
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
        return Ok(plan_part(shared, ctx, id, None)?.into_iter().collect());
    }
    let ranges = |n: usize, per: Option<usize>| -> Vec<(usize, usize)> {
        let per = per.unwrap_or(n).max(1);
        (0..n).step_by(per).map(|a| (a, (a + per).min(n))).collect()
    };
    let rows = ranges(t.src[0].map_or(0, |s| ctx.tensor(s).ne[1]), split.rows);
    let cols = ranges(t.ne[1], split.cols);
    let mut out = Vec::with_capacity(rows.len() * cols.len());
    for &c in &cols {
        for &r in &rows {
            out.extend(plan_part(shared, ctx, id, Some(Part { rows: r, cols: c }))?);
        }
    }
    Ok(out)
}

/// The rows [r0, r1) of src0 and the columns [c0, c1) of src1/dst one dispatch computes.
#[derive(Clone, Copy)]
struct Part {
    rows: (usize, usize),
    cols: (usize, usize),
}

/// The dispatch of node `id`, over a part of src0's rows (mul_mat and get_rows) and of the
/// columns (mul_mat) only when given (checked by the caller).
fn plan_part<'a>(
    shared: &'a Shared,
    ctx: &'a Context,
    id: TensorId,
    part: Option<Part>,
) -> Result<Option<Dispatch<'a>>> {
    let t = ctx.tensor(id);
    let f16 = shared.use_f16;
    let maxd = shared.limits.max_compute_workgroups_per_dimension;
    let mut p = Planner {
        ctx,
        shared,
        binds: Vec::new(),
        params: [0; 64],
    };
    let src = |i: usize| t.src[i].expect("checked by `check`");
    let n = t.nelements();
    let d = t.dtype;
    let (key, entry, groups, make_src): KernelChoice<'_> = match t.op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            p.tensor(id)?;
            p.tensor(src(0))?;
            p.tensor(src(1))?;
            p.u(0, n as u32);
            p.u(
                1,
                match t.op {
                    Op::Add => 0,
                    Op::Sub => 1,
                    Op::Mul => 2,
                    _ => 3,
                },
            );
            (
                "binary".into(),
                "main",
                grid(n, WG as usize, maxd),
                plain(&["dst", "src0", "src1"], BINARY),
            )
        }
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Log | Op::Unary(_) | Op::Repeat => {
            p.tensor(id)?;
            p.tensor(src(0))?;
            p.u(0, n as u32);
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
            p.u(1, code);
            p.f(2, s);
            p.f(3, b);
            (
                "unary".into(),
                "main",
                grid(n, WG as usize, maxd),
                plain(&["dst", "src0"], UNARY),
            )
        }
        Op::Dup | Op::Cont | Op::Cpy => {
            let s0 = ctx.tensor(src(0)).dtype;
            p.tensor(id)?;
            p.tensor(src(0))?;
            p.u(0, n as u32);
            let pairs = d == DType::F16 && !f16;
            if pairs && !p.params[0].is_multiple_of(2) {
                return Err(Error::Backend(format!(
                    "f16 destination '{}' is not 4-byte aligned (f32 path)",
                    t.name
                )));
            }
            let key = format!(
                "cpy_{}_{}{}",
                tname(s0),
                tname(d),
                if pairs { "_pairs" } else { "" }
            );
            (
                key,
                if pairs { "main_pairs" } else { "main" },
                grid(if pairs { n.div_ceil(2) } else { n }, WG as usize, maxd),
                Box::new(move |f16| {
                    let (single, pairs_src) = CPY.split_once("// @@PAIRS@@\n").unwrap_or((CPY, ""));
                    shader(
                        f16,
                        &[("dst", elem(d, f16)), ("src0", elem(s0, f16))],
                        &[reader("read_src", "src0", s0, f16), writer(d, f16)].concat(),
                        if pairs { pairs_src } else { single },
                    )
                }),
            )
        }
        Op::Concat { dim } => {
            p.tensor(id)?;
            p.tensor(src(0))?;
            p.tensor(src(1))?;
            p.u(0, n as u32);
            p.u(1, dim as u32);
            (
                "concat".into(),
                "main",
                grid(n, WG as usize, maxd),
                plain(&["dst", "src0", "src1"], CONCAT),
            )
        }
        Op::Norm { eps } | Op::RmsNorm { eps } => {
            p.tensor(id)?;
            p.tensor(src(0))?;
            let rows = t.nrows();
            p.u(0, rows as u32);
            p.u(1, matches!(t.op, Op::RmsNorm { .. }) as u32);
            p.f(2, eps);
            (
                "norm".into(),
                "main",
                grid(rows, 1, maxd),
                plain(&["dst", "src0"], NORM),
            )
        }
        Op::MulMat => {
            let a = ctx.tensor(src(0));
            let b = ctx.tensor(src(1));
            let s0 = a.dtype;
            let (m, nn) = match part {
                // Rows r0..r1 of src0 give elements r0..r1 of the dst columns c0..c1, which
                // come from src1's columns c0..c1 (2-D only when c0..c1 is not all of them).
                Some(Part {
                    rows: (r0, r1),
                    cols: (c0, c1),
                }) => {
                    p.tensor_part(
                        id,
                        r0 * t.nb[0] + c0 * t.nb[1],
                        [r1 - r0, c1 - c0, t.ne[2], t.ne[3]],
                    )?;
                    p.tensor_part(src(0), r0 * a.nb[1], [a.ne[0], r1 - r0, 1, 1])?;
                    p.tensor_part(src(1), c0 * b.nb[1], [b.ne[0], c1 - c0, b.ne[2], b.ne[3]])?;
                    (r1 - r0, c1 - c0)
                }
                None => {
                    p.tensor(id)?;
                    p.tensor(src(0))?;
                    p.tensor(src(1))?;
                    (a.ne[1], b.ne[1])
                }
            };
            let batch = b.ne[2] * b.ne[3];
            p.u(0, (b.ne[2] / a.ne[2].max(1)) as u32);
            p.u(1, (b.ne[3] / a.ne[3].max(1)) as u32);
            let vec = nn == 1;
            let rows = vec && shared.matvec_rows;
            let groups = if rows {
                grid(m * batch, 64, maxd)
            } else if vec {
                grid(m * batch, 1, maxd)
            } else {
                [
                    m.div_ceil(TILE) as u32,
                    nn.div_ceil(TILE) as u32,
                    batch as u32,
                ]
            };
            if !vec && (groups[0] > maxd || groups[1] > maxd || groups[2] > maxd) {
                return Err(Error::Backend(format!(
                    "mul_mat '{}' needs more workgroups than the adapter allows",
                    t.name
                )));
            }
            (
                format!("mul_mat_{}", tname(s0)),
                if rows {
                    "mat_vec_rows"
                } else if vec {
                    "mat_vec"
                } else {
                    "mat_mat"
                },
                groups,
                Box::new(move |f16| {
                    shader(
                        f16,
                        &[("dst", "u32"), ("src0", elem(s0, f16)), ("src1", "u32")],
                        &load_a(s0, f16),
                        MUL_MAT,
                    )
                }),
            )
        }
        Op::GetRows => {
            let a = ctx.tensor(src(0));
            let s0 = a.dtype;
            p.tensor(id)?;
            let (r0, r1) = part.map_or((0, a.ne[1]), |p| p.rows);
            p.tensor_part(src(0), r0 * a.nb[1], [a.ne[0], r1 - r0, a.ne[2], a.ne[3]])?;
            p.tensor(src(1))?;
            p.u(0, n as u32);
            // Rows outside [r0, r1) are another dispatch's; indices outside all rows give NaN
            // (written by the dispatch of the first range).
            p.u(1, r0 as u32);
            p.u(2, a.ne[1] as u32);
            (
                format!("get_rows_{}", tname(s0)),
                "main",
                grid(n, WG as usize, maxd),
                Box::new(move |f16| {
                    shader(
                        f16,
                        &[("dst", "u32"), ("src0", elem(s0, f16)), ("src1", "u32")],
                        &load_a(s0, f16),
                        GET_ROWS,
                    )
                }),
            )
        }
        Op::SoftMax { scale, max_bias } => {
            p.tensor(id)?;
            p.tensor(src(0))?;
            let mask = t.src[1];
            let mt = mask.map(|m| ctx.tensor(m).dtype).unwrap_or(DType::F32);
            match mask {
                Some(m) => p.tensor(m)?,
                None => p.tensor(src(0))?,
            }
            let rows = t.nrows();
            p.u(0, rows as u32);
            p.f(1, scale);
            p.u(2, mask.is_some() as u32);
            p.f(3, max_bias);
            let n_head = t.ne[2] as u32;
            let n_head_log2 = if n_head == 0 {
                1
            } else {
                1u32 << (31 - n_head.leading_zeros())
            };
            p.u(4, n_head_log2);
            p.f(5, 2f32.powf(-max_bias / n_head_log2 as f32));
            p.f(6, 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32));
            (
                format!("soft_max_{}", tname(mt)),
                "main",
                grid(rows, 1, maxd),
                Box::new(move |f16| {
                    shader(
                        f16,
                        &[("dst", "u32"), ("src0", "u32"), ("src1", elem(mt, f16))],
                        &reader("read_mask", "src1", mt, f16),
                        SOFT_MAX,
                    )
                }),
            )
        }
        Op::Rope(rp) => {
            p.tensor(id)?;
            p.tensor(src(0))?;
            p.tensor(src(1))?;
            match t.src[2] {
                Some(ff) => p.tensor(ff)?,
                None => p.tensor(src(0))?,
            }
            let pairs = n / 2;
            p.u(0, pairs as u32);
            p.u(1, rp.n_dims as u32);
            p.u(2, (rp.mode == RopeMode::Neox) as u32);
            p.f(3, rp.freq_base.powf(-2.0 / rp.n_dims as f32));
            p.f(4, rp.freq_scale);
            p.f(5, rp.ext_factor);
            p.f(6, rp.attn_factor);
            let corr = rope_yarn_corr_dims(
                rp.n_dims,
                rp.n_ctx_orig,
                rp.freq_base,
                rp.beta_fast,
                rp.beta_slow,
            );
            p.f(7, corr[0]);
            p.f(8, corr[1]);
            p.u(9, t.src[2].is_some() as u32);
            (
                "rope".into(),
                "main",
                grid(pairs, WG as usize, maxd),
                plain(&["dst", "src0", "src1", "src2"], ROPE),
            )
        }
        Op::Im2Col {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        } => {
            let k = ctx.tensor(src(0));
            let x = ctx.tensor(src(1));
            p.tensor(id)?;
            p.tensor(src(1))?;
            // Fold the 1-D case into the 2-D one: KH = IH = OH = 1.
            let (kw, kh) = (k.ne[0], if is_2d { k.ne[1] } else { 1 });
            let (iw, ih, ic, nb_) = if is_2d {
                (x.ne[0], x.ne[1], x.ne[2], x.ne[3])
            } else {
                (x.ne[0], 1, x.ne[1], x.ne[2])
            };
            let (ow, oh) = (t.ne[1], if is_2d { t.ne[2] } else { 1 });
            // Strides of src1 (slot 1) as (w, h, c, n) and of dst as (col, ow, oh, n).
            let xs = p.params[9 + 5..9 + 9].to_vec();
            let ds = p.params[5..9].to_vec();
            if !is_2d {
                p.params[9 + 5..9 + 9].copy_from_slice(&[xs[0], 0, xs[1], xs[2]]);
                p.params[5..9].copy_from_slice(&[ds[0], ds[1], 0, ds[2]]);
            }
            let vals = [kw, kh, ic, iw, ih, ow, oh, nb_, s0, s1, p0, p1, d0, d1];
            p.u(0, n as u32);
            for (i, v) in vals.iter().enumerate() {
                p.u(1 + i, *v as u32);
            }
            (
                format!("im2col_{}", tname(d)),
                "main",
                grid(n, WG as usize, maxd),
                Box::new(move |f16| {
                    shader(
                        f16,
                        &[("dst", elem(d, f16)), ("src1", "u32")],
                        &writer(d, f16),
                        IM2COL,
                    )
                }),
            )
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
            p.tensor(id)?;
            p.tensor(src(0))?;
            p.u(0, n as u32);
            let vals = [(op == PoolOp::Max) as usize, k0, k1, s0, s1, p0, p1];
            for (i, v) in vals.iter().enumerate() {
                p.u(1 + i, *v as u32);
            }
            (
                "pool_2d".into(),
                "main",
                grid(n, WG as usize, maxd),
                plain(&["dst", "src0"], POOL_2D),
            )
        }
        Op::SumRows | Op::Mean | Op::Argmax | Op::Sum => {
            p.tensor(id)?;
            p.tensor(src(0))?;
            let s = ctx.tensor(src(0));
            let rows = if t.op == Op::Sum { 1 } else { s.nrows() };
            p.u(0, rows as u32);
            p.u(
                1,
                match t.op {
                    Op::SumRows => 0,
                    Op::Mean => 1,
                    Op::Argmax => 2,
                    _ => 3,
                },
            );
            (
                "rows".into(),
                "main",
                grid(rows, 1, maxd),
                plain(&["dst", "src0"], ROWS),
            )
        }
        other => {
            return Err(Error::UnsupportedOp(format!(
                "{} on WebGPU (node '{}')",
                other.name(),
                t.name
            )))
        }
    };
    Ok(Some(Dispatch {
        key: format!("{key}:{entry}"),
        entry,
        make_src,
        binds: p.binds,
        params: p.params,
        groups,
    }))
}

/// ggml_rope_yarn_corr_dims.
pub(crate) fn rope_yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let corr_dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * freq_base.ln())
    };
    let start = corr_dim(beta_fast).floor();
    let end = corr_dim(beta_slow).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

/// Get or build the pipeline for a dispatch.
pub(crate) fn pipeline(shared: &Shared, d: &Dispatch<'_>) -> Result<Arc<Pipeline>> {
    if let Some(p) = shared
        .pipelines
        .lock()
        .ok()
        .and_then(|m| m.get(&d.key).cloned())
    {
        return Ok(p);
    }
    let n_storage = d.binds.len();
    let layout = layout(shared, n_storage);
    let src = (d.make_src)(shared.use_f16);
    let module = shared
        .device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&d.key),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
    let pipeline = shared
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&d.key),
            layout: Some(&layout.1),
            module: &module,
            entry_point: Some(d.entry),
            compilation_options: Default::default(),
            cache: None,
        });
    shared
        .take_error()
        .map_err(|e| Error::Backend(format!("building WebGPU kernel {}: {e}", d.key)))?;
    let p = Arc::new(Pipeline {
        pipeline,
        n_storage,
    });
    if let Ok(mut m) = shared.pipelines.lock() {
        m.insert(d.key.clone(), p.clone());
    }
    Ok(p)
}

/// The bind group and pipeline layouts for `n` tensor bindings (cached).
pub(crate) fn layout(
    shared: &Shared,
    n: usize,
) -> Arc<(wgpu::BindGroupLayout, wgpu::PipelineLayout)> {
    if let Some(l) = shared.layouts.lock().ok().and_then(|m| m.get(&n).cloned()) {
        return l;
    }
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }];
    for b in 1..=n {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: b as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    let bgl = shared
        .device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &entries,
        });
    let pl = shared
        .device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
    let l = Arc::new((bgl, pl));
    if let Ok(mut m) = shared.layouts.lock() {
        m.insert(n, l.clone());
    }
    l
}
