//! Elementwise, reduction, normalisation, softmax, rope, copy and indexing kernels.
//!
//! Every kernel splits the destination's rows across threads (`thread_range`), reads its sources
//! through their byte strides (so permuted / transposed / viewed sources work) and broadcasts
//! src1 by index modulo. The common case (f32, rows contiguous) takes a direct pointer path;
//! everything else goes through per-row f32 buffers (`load_row` / `store_row`), which also
//! handles f16 / bf16 and, for the conversion ops, the quantized types.

use half::{bf16, f16};

use crate::backend::cpu::arch::{self, exp_approx, UnaryRow};
use crate::backend::cpu::repack::{self, Repacked};
use crate::backend::cpu::{thread_range, ComputeParams, NodeRef, TensorRef};
use crate::tensor::{Alibi, Op, RopeMode, RopeParams, UnaryOp};
use crate::DType;

/// f32, f16 and bf16: element-addressable float types.
fn is_float(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::F16 | DType::BF16)
}

/// Types rows of which can be converted to and from f32 (floats, and the quantized types with
/// block codecs).
pub(crate) fn convertible(dt: DType) -> bool {
    is_float(dt) || (dt.is_quantized() && has_codec(dt))
}

/// Whether the CPU traits table can dequantize and quantize rows of `dt`.
fn has_codec(dt: DType) -> bool {
    crate::backend::cpu::type_traits(dt).is_some()
}

pub fn supported(node: &NodeRef) -> bool {
    let d = node.dst.dtype;
    let s0 = match node.src[0] {
        Some(s) => s.dtype,
        None => return false,
    };
    let s1 = node.src[1].map(|s| s.dtype);
    match node.op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            is_float(s0) && s1.is_some_and(is_float) && d == s0
        }
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Log | Op::Unary(_) => is_float(s0) && d == s0,
        Op::Sum | Op::SumRows => is_float(s0) && d == s0,
        Op::Mean => is_float(s0) && d == DType::F32,
        Op::Repeat => !s0.is_quantized() && d == s0,
        Op::Concat { .. } => !s0.is_quantized() && s1 == Some(s0) && d == s0,
        Op::Norm { .. } | Op::RmsNorm { .. } => s0 == DType::F32 && d == DType::F32,
        Op::SoftMax { .. } => {
            s0 == DType::F32
                && d == DType::F32
                && matches!(s1, None | Some(DType::F32) | Some(DType::F16))
        }
        Op::Rope(p) | Op::RopeBack(p) => {
            matches!(s0, DType::F32 | DType::F16)
                && d == s0
                && s1 == Some(DType::I32)
                && !matches!(node.src[2], Some(f) if f.dtype != DType::F32)
                && p.n_dims & 1 == 0
                && p.n_dims <= node.dst.ne[0]
        }
        Op::GetRows => {
            s1 == Some(DType::I32)
                && ((s0 == DType::I32 && d == DType::I32) || (convertible(s0) && d == DType::F32))
        }
        Op::Dup | Op::Cont | Op::Cpy => {
            let s = node.src0();
            if s.nelements() != node.dst.nelements() {
                return false;
            }
            let same_bytes = s.ne == node.dst.ne || (s.is_contiguous() && node.dst.is_contiguous());
            (s0 == d && (!s0.is_quantized() || same_bytes)) || (convertible(s0) && convertible(d))
        }
        _ => false,
    }
}

pub fn work_size(_node: &NodeRef, _nth: usize) -> usize {
    0
}

pub fn forward(p: &ComputeParams, node: &NodeRef) {
    match node.op {
        Op::Add => binary(p, node, |a, b| a + b),
        Op::Sub => binary(p, node, |a, b| a - b),
        Op::Mul => binary(p, node, |a, b| a * b),
        Op::Div => binary(p, node, |a, b| a / b),
        Op::Scale { s, b } => {
            if b == 0.0 {
                map(p, node, |x| x * s)
            } else {
                map(p, node, |x| x * s + b)
            }
        }
        Op::Sqr => map(p, node, |x| x * x),
        Op::Sqrt => map(p, node, f32::sqrt),
        Op::Log => map(p, node, f32::ln),
        Op::Unary(u) => match u {
            UnaryOp::Abs => map(p, node, f32::abs),
            UnaryOp::Neg => map(p, node, |x| -x),
            UnaryOp::Relu => map(p, node, |x| if x > 0.0 { x } else { 0.0 }),
            UnaryOp::Gelu => map_k(p, node, gelu, Some(UnaryRow::Gelu)),
            UnaryOp::GeluErf => map(p, node, gelu_erf),
            UnaryOp::Silu => map_k(p, node, silu, Some(UnaryRow::Silu)),
            UnaryOp::Tanh => map(p, node, f32::tanh),
            UnaryOp::Sigmoid => map_k(p, node, sigmoid, Some(UnaryRow::Sigmoid)),
            UnaryOp::Exp => map(p, node, f32::exp),
        },
        Op::Sum => sum(p, node),
        Op::SumRows => row_reduce(p, node, false),
        Op::Mean => row_reduce(p, node, true),
        Op::Repeat => repeat(p, node),
        Op::Concat { dim } => concat(p, node, dim),
        Op::Norm { eps } => norm(p, node, eps, false),
        Op::RmsNorm { eps } => norm(p, node, eps, true),
        Op::SoftMax { scale, max_bias } => soft_max(p, node, scale, max_bias),
        Op::Rope(params) => rope(p, node, &params, 1.0),
        Op::RopeBack(params) => rope(p, node, &params, -1.0),
        Op::GetRows => get_rows(p, node),
        Op::Dup | Op::Cont | Op::Cpy => copy(p, node),
        _ => unreachable!("checked by supported"),
    }
}

// ---------------------------------------------------------------------------------------------
// Element and row access.

/// Read one float element.
///
/// # Safety
/// `ptr` points at a readable element of type `dt` (f32, f16 or bf16).
#[inline(always)]
unsafe fn ld(dt: DType, ptr: *const u8) -> f32 {
    // SAFETY: the caller guarantees a readable element; unaligned reads are used throughout.
    unsafe {
        match dt {
            DType::F32 => (ptr as *const f32).read_unaligned(),
            DType::F16 => f16::from_bits((ptr as *const u16).read_unaligned()).to_f32(),
            DType::BF16 => bf16::from_bits((ptr as *const u16).read_unaligned()).to_f32(),
            _ => unreachable!("float element of {dt}"),
        }
    }
}

/// Write one float element.
///
/// # Safety
/// `ptr` points at a writable element of type `dt` (f32, f16 or bf16).
#[inline(always)]
unsafe fn st(dt: DType, ptr: *mut u8, v: f32) {
    // SAFETY: the caller guarantees a writable element.
    unsafe {
        match dt {
            DType::F32 => (ptr as *mut f32).write_unaligned(v),
            DType::F16 => (ptr as *mut u16).write_unaligned(f16::from_f32(v).to_bits()),
            DType::BF16 => (ptr as *mut u16).write_unaligned(bf16::from_f32(v).to_bits()),
            _ => unreachable!("float element of {dt}"),
        }
    }
}

/// (i1, i2, i3) of row `ir` of a tensor with shape `ne`.
#[inline(always)]
fn row_index(ir: usize, ne: &[usize; 4]) -> (usize, usize, usize) {
    let i1 = ir % ne[1];
    let i2 = (ir / ne[1]) % ne[2];
    let i3 = ir / (ne[1] * ne[2]);
    (i1, i2, i3)
}

/// Row `(i1, i2, i3)` of `t` as f32 into `out` (`out.len() == t.ne[0]`).
///
/// # Safety
/// The row indices are inside `t`, whose type is `convertible`.
pub(super) unsafe fn load_row(t: &TensorRef, i1: usize, i2: usize, i3: usize, out: &mut [f32]) {
    let n = out.len();
    // SAFETY: indices inside the tensor (caller); the row spans n elements at stride nb[0].
    unsafe {
        let base = t.at(0, i1, i2, i3);
        match t.dtype {
            DType::F32 if t.nb[0] == 4 => {
                std::ptr::copy_nonoverlapping(base, out.as_mut_ptr() as *mut u8, n * 4)
            }
            // A contiguous f16 row (an attention mask's) through the vector conversion (the
            // same bits as `ld`): element by element it was a call each.
            DType::F16 if t.nb[0] == 2 => {
                let bytes = std::slice::from_raw_parts(base, n * 2);
                crate::backend::cpu::dequantize_row(DType::F16, bytes, out)
                    .expect("f16 is computable");
            }
            dt if is_float(dt) => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = ld(dt, base.add(i * t.nb[0]));
                }
            }
            dt => {
                // Quantized rows are always contiguous (the block axis cannot be permuted).
                let bytes = std::slice::from_raw_parts(base, n / dt.block_size() * dt.type_size());
                crate::backend::cpu::dequantize_row(dt, bytes, out)
                    .expect("codec availability checked by supported");
            }
        }
    }
}

/// Write `vals` (`t.ne[0]` values) as row `(i1, i2, i3)` of `t`, converting.
///
/// # Safety
/// The row indices are inside `t`, whose type is `convertible`; no other thread writes the row.
unsafe fn store_row(t: &TensorRef, i1: usize, i2: usize, i3: usize, vals: &[f32]) {
    let n = vals.len();
    // SAFETY: as load_row, for writing.
    unsafe {
        let base = t.at(0, i1, i2, i3);
        match t.dtype {
            DType::F32 if t.nb[0] == 4 => {
                std::ptr::copy_nonoverlapping(vals.as_ptr() as *const u8, base, n * 4)
            }
            // A contiguous f16 row (the KV cache's new rows) through the row conversion (the
            // same bits as `st`; element by element it was a call each, a software conversion
            // in wasm).
            DType::F16 if t.nb[0] == 2 => {
                let bytes = std::slice::from_raw_parts_mut(base, n * 2);
                crate::backend::cpu::quantize_row(DType::F16, vals, bytes)
                    .expect("f16 is computable");
            }
            dt if is_float(dt) => {
                for (i, v) in vals.iter().enumerate() {
                    st(dt, base.add(i * t.nb[0]), *v);
                }
            }
            dt => {
                let bytes =
                    std::slice::from_raw_parts_mut(base, n / dt.block_size() * dt.type_size());
                crate::backend::cpu::quantize_row(dt, vals, bytes)
                    .expect("codec availability checked by supported");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Elementwise.

/// dst = f(src0, src1), src1 broadcast to dst by index modulo.
fn binary(p: &ComputeParams, node: &NodeRef, f: impl Fn(f32, f32) -> f32) {
    let (d, a, b) = (&node.dst, node.src0(), node.src1());
    let ne0 = d.ne[0];
    let fast = d.dtype == DType::F32
        && a.dtype == DType::F32
        && b.dtype == DType::F32
        && d.nb[0] == 4
        && a.nb[0] == 4
        && b.nb[0] == 4
        && b.ne[0] == ne0;
    let mut buf_a = if fast { Vec::new() } else { vec![0f32; ne0] };
    let mut buf_b = if fast {
        Vec::new()
    } else {
        vec![0f32; b.ne[0]]
    };
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        let (j1, j2, j3) = (i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
        // SAFETY: (i1, i2, i3) is a row of dst and of src0 (same shape); (j1, j2, j3) a row of
        // src1. Rows are ne0 elements at stride 4 in the fast path. Raw pointers, so dst may
        // alias src0 (in-place).
        unsafe {
            if fast {
                let pd = d.at(0, i1, i2, i3) as *mut f32;
                let pa = a.at(0, i1, i2, i3) as *const f32;
                let pb = b.at(0, j1, j2, j3) as *const f32;
                for i in 0..ne0 {
                    *pd.add(i) = f(*pa.add(i), *pb.add(i));
                }
            } else {
                load_row(a, i1, i2, i3, &mut buf_a);
                load_row(b, j1, j2, j3, &mut buf_b);
                let nb0 = buf_b.len();
                for (i, x) in buf_a.iter_mut().enumerate() {
                    *x = f(*x, buf_b[i % nb0]);
                }
                store_row(d, i1, i2, i3, &buf_a);
            }
        }
    }
}

/// dst[i] = f(src[i]) for n contiguous f32, through a small buffer: src may be dst (in place),
/// so a loop over the two pointers did not vectorize (scalar `mulss`: SiLU was ~10 % of a
/// SmolLM2 prompt); over the buffer it does. The same f32 operations per element in any case.
///
/// # Safety
/// src and dst address n f32 each, either the same or not overlapping.
#[inline(always)]
unsafe fn map_row(src: *const f32, dst: *mut f32, n: usize, f: &impl Fn(f32) -> f32) {
    const CHUNK: usize = 64;
    let mut buf = [0f32; CHUNK];
    let mut i = 0;
    while i < n {
        let m = CHUNK.min(n - i);
        // SAFETY: elements i..i + m of both rows (caller); buf holds CHUNK ≥ m.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i), buf.as_mut_ptr(), m) };
        for x in buf.iter_mut() {
            *x = f(*x);
        }
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst.add(i), m) };
        i += m;
    }
}

/// [`map_row`] compiled for AVX2 (8 lanes instead of SSE2's 4; no FMA contraction in Rust, so
/// the results are the same bits).
///
/// # Safety
/// As [`map_row`], on a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_row_avx2(src: *const f32, dst: *mut f32, n: usize, f: &impl Fn(f32) -> f32) {
    // SAFETY: forwarded.
    unsafe { map_row(src, dst, n, f) }
}

/// dst = f(src0) elementwise (same shape).
fn map(p: &ComputeParams, node: &NodeRef, f: impl Fn(f32) -> f32) {
    map_k(p, node, f, None)
}

/// [`map`], rows through the machine's kernel of `k` where it has one (the same bits as `f`).
fn map_k(p: &ComputeParams, node: &NodeRef, f: impl Fn(f32) -> f32, k: Option<UnaryRow>) {
    let (d, a) = (&node.dst, node.src0());
    let ne0 = d.ne[0];
    let fast = d.dtype == DType::F32 && a.dtype == DType::F32 && d.nb[0] == 4 && a.nb[0] == 4;
    let mut buf = if fast { Vec::new() } else { vec![0f32; ne0] };
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        // SAFETY: the row exists in src0 and dst (same shape); raw pointers allow in-place.
        unsafe {
            if fast {
                let pd = d.at(0, i1, i2, i3) as *mut f32;
                let pa = a.at(0, i1, i2, i3) as *const f32;
                if let Some(k) = k {
                    if arch::unary_row(k, pa, pd, ne0) {
                        continue;
                    }
                }
                #[cfg(target_arch = "x86_64")]
                if crate::backend::cpu::arch::x86::available() {
                    map_row_avx2(pa, pd, ne0, &f);
                    continue;
                }
                map_row(pa, pd, ne0, &f);
            } else {
                load_row(a, i1, i2, i3, &mut buf);
                for x in buf.iter_mut() {
                    *x = f(*x);
                }
                store_row(d, i1, i2, i3, &buf);
            }
        }
    }
}

/// SiLU, x·σ(x), with the vectorizable exp.
#[inline]
fn silu(x: f32) -> f32 {
    x / (1.0 + exp_approx(-x))
}

/// The logistic function, with the vectorizable exp.
#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp_approx(-x))
}

/// GELU, tanh approximation, in f32: 0.5·x·(1 + tanh u) = x / (1 + e^(−2u)), with the
/// vectorizable exp (no libm tanhf call per element).
#[inline]
fn gelu(x: f32) -> f32 {
    use crate::backend::cpu::arch::{GELU_COEF_A, GELU_SQRT_2_OVER_PI};
    let u = GELU_SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x);
    x / (1.0 + exp_approx(-2.0 * u))
}

/// GELU, erf form.
#[inline]
fn gelu_erf(x: f32) -> f32 {
    let xd = x as f64;
    (0.5 * xd * (1.0 + erf(xd * std::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// erf(x) with absolute error below 1.2e-7 (Numerical Recipes' Chebyshev fit of erfc).
pub(crate) fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc
    } else {
        erfc - 1.0
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions.

/// Sum of all elements (thread 0; f64 accumulation).
fn sum(p: &ComputeParams, node: &NodeRef) {
    if p.ith != 0 {
        return;
    }
    let (d, a) = (&node.dst, node.src0());
    // An empty source sums to 0 (its ne0 alone may be huge: no buffer sized by it).
    let mut buf = vec![0f32; if a.nelements() == 0 { 0 } else { a.ne[0] }];
    let mut acc = 0f64;
    for ir in 0..a.nrows() {
        let (i1, i2, i3) = row_index(ir, &a.ne);
        // SAFETY: a row of src0.
        unsafe { load_row(a, i1, i2, i3, &mut buf) };
        acc += buf.iter().map(|&x| x as f64).sum::<f64>();
    }
    // SAFETY: dst has one element.
    unsafe { st(d.dtype, d.at(0, 0, 0, 0), acc as f32) };
}

/// Sum (or mean) of each row into dst[0, i1, i2, i3].
fn row_reduce(p: &ComputeParams, node: &NodeRef, mean: bool) {
    let (d, a) = (&node.dst, node.src0());
    let mut buf = vec![0f32; a.ne[0]];
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        // SAFETY: dst rows correspond to src0 rows.
        unsafe { load_row(a, i1, i2, i3, &mut buf) };
        let mut s = buf.iter().map(|&x| x as f64).sum::<f64>();
        if mean {
            s /= a.ne[0] as f64;
        }
        // SAFETY: element 0 of a dst row.
        unsafe { st(d.dtype, d.at(0, i1, i2, i3), s as f32) };
    }
}

// ---------------------------------------------------------------------------------------------
// Tiling and joining (byte copies: any non-quantized type).

/// Copy one element of `ts` bytes.
///
/// # Safety
/// Both pointers address `ts` valid bytes.
#[inline(always)]
unsafe fn copy_elem(src: *const u8, dst: *mut u8, ts: usize) {
    // SAFETY: the caller guarantees both ranges; they do not overlap (different tensors).
    unsafe { std::ptr::copy_nonoverlapping(src, dst, ts) }
}

fn repeat(p: &ComputeParams, node: &NodeRef) {
    let (d, a) = (&node.dst, node.src0());
    let ts = d.dtype.type_size();
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        let (j1, j2, j3) = (i1 % a.ne[1], i2 % a.ne[2], i3 % a.ne[3]);
        for i0 in 0..d.ne[0] {
            // SAFETY: the indices are inside dst, and inside src0 by modulo.
            unsafe { copy_elem(a.at(i0 % a.ne[0], j1, j2, j3), d.at(i0, i1, i2, i3), ts) };
        }
    }
}

fn concat(p: &ComputeParams, node: &NodeRef, dim: usize) {
    let (d, a, b) = (&node.dst, node.src0(), node.src1());
    let ts = d.dtype.type_size();
    let split = a.ne[dim];
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        for i0 in 0..d.ne[0] {
            let mut o = [i0, i1, i2, i3];
            let s = if o[dim] < split {
                a
            } else {
                o[dim] -= split;
                b
            };
            // SAFETY: o is inside the chosen source (every other dim equal, checked at build).
            unsafe { copy_elem(s.at(o[0], o[1], o[2], o[3]), d.at(i0, i1, i2, i3), ts) };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Normalisation and softmax.

fn norm(p: &ComputeParams, node: &NodeRef, eps: f32, rms: bool) {
    let (d, a) = (&node.dst, node.src0());
    let n = a.ne[0];
    let mut buf = vec![0f32; n];
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        // SAFETY: same shape; a row of src0.
        unsafe { load_row(a, i1, i2, i3, &mut buf) };
        if rms {
            let ss: f64 = buf.iter().map(|&x| (x as f64) * (x as f64)).sum();
            let scale = 1.0 / ((ss / n as f64) as f32 + eps).sqrt();
            buf.iter_mut().for_each(|x| *x *= scale);
        } else {
            let mean = (buf.iter().map(|&x| x as f64).sum::<f64>() / n as f64) as f32;
            let mut ss = 0f64;
            for x in buf.iter_mut() {
                *x -= mean;
                ss += (*x as f64) * (*x as f64);
            }
            let scale = 1.0 / ((ss / n as f64) as f32 + eps).sqrt();
            buf.iter_mut().for_each(|x| *x *= scale);
        }
        // SAFETY: the matching dst row, written by this thread only.
        unsafe { store_row(d, i1, i2, i3, &buf) };
    }
}

fn soft_max(p: &ComputeParams, node: &NodeRef, scale: f32, max_bias: f32) {
    let (d, a) = (&node.dst, node.src0());
    let mask = node.src[1].as_ref();
    let n = a.ne[0];
    let mut buf = vec![0f32; n];
    let mut mbuf = vec![0f32; if mask.is_some() { n } else { 0 }];
    let alibi = Alibi::new(max_bias, a.ne[2]);
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        // SAFETY: same shape; a row of src0.
        unsafe { load_row(a, i1, i2, i3, &mut buf) };
        if let Some(m) = mask {
            let slope = alibi.slope(i2);
            // SAFETY: mask ne1 >= a ne1 and ne2/ne3 divide a's (checked at build time).
            unsafe { load_row(m, i1, i2 % m.ne[2], i3 % m.ne[3], &mut mbuf) };
            for (x, mv) in buf.iter_mut().zip(&mbuf) {
                *x = *x * scale + slope * mv;
            }
        } else if scale != 1.0 {
            buf.iter_mut().for_each(|x| *x *= scale);
        }
        let max = buf.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        // Exps first (a loop that vectorizes), then the f64 sum in order.
        for x in buf.iter_mut() {
            *x = exp_approx(*x - max);
        }
        let s: f64 = buf.iter().map(|&x| x as f64).sum();
        let inv = (1.0 / s) as f32;
        buf.iter_mut().for_each(|x| *x *= inv);
        // SAFETY: the matching dst row.
        unsafe { store_row(d, i1, i2, i3, &buf) };
    }
}

// ---------------------------------------------------------------------------------------------
// RoPE.

/// Fill `cache` with (cos, sin) pairs of every rotated pair for position `pos`.
fn rope_cache(p: &RopeParams, pos: f32, freq: Option<&TensorRef>, cache: &mut [f32]) {
    let theta_scale = p.theta_scale();
    let corr = p.yarn_corr_dims();
    let mut theta = pos;
    for i0 in (0..p.n_dims).step_by(2) {
        // SAFETY: freq factors hold >= n_dims/2 elements (checked at build time).
        let ff = freq.map_or(1.0, |f| unsafe { ld(DType::F32, f.at(i0 / 2, 0, 0, 0)) });
        let theta_extrap = theta / ff;
        let theta_interp = p.freq_scale * theta_extrap;
        let mut t = theta_interp;
        let mut mscale = p.attn_factor;
        if p.ext_factor != 0.0 {
            let y = ((i0 / 2) as f32 - corr[0]) / (corr[1] - corr[0]).max(0.001);
            let ramp = (1.0 - y.clamp(0.0, 1.0)) * p.ext_factor;
            t = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
        }
        cache[i0] = t.cos() * mscale;
        cache[i0 + 1] = t.sin() * mscale;
        theta *= theta_scale;
    }
}

/// `sin_sign` -1 rotates by the negated angles (the gradient of rope, ggml's rope_back).
fn rope(p: &ComputeParams, node: &NodeRef, params: &RopeParams, sin_sign: f32) {
    let (d, a, pos) = (&node.dst, node.src0(), node.src1());
    let freq = node.src[2].as_ref();
    let n = a.ne[0];
    let nd = params.n_dims;
    let mut buf = vec![0f32; n];
    let mut cache = vec![0f32; nd];
    let mut cached: Option<(usize, usize)> = None;
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        if cached != Some((i2, i3)) {
            // SAFETY: pos has ne[0] == a.ne[2] i32 elements (checked at build time).
            let pv = unsafe { (pos.at(i2, 0, 0, 0) as *const i32).read_unaligned() };
            rope_cache(params, pv as f32, freq, &mut cache);
            cached = Some((i2, i3));
        }
        // SAFETY: same shape; a row of src0.
        unsafe { load_row(a, i1, i2, i3, &mut buf) };
        let half = nd / 2;
        for k in 0..half {
            let (c, s) = (cache[2 * k], sin_sign * cache[2 * k + 1]);
            let (j0, j1) = match params.mode {
                RopeMode::Normal => (2 * k, 2 * k + 1),
                RopeMode::Neox => (k, k + half),
            };
            let (x0, x1) = (buf[j0], buf[j1]);
            buf[j0] = x0 * c - x1 * s;
            buf[j1] = x0 * s + x1 * c;
        }
        // SAFETY: the matching dst row.
        unsafe { store_row(d, i1, i2, i3, &buf) };
    }
}

// ---------------------------------------------------------------------------------------------
// Indexing and copies.

fn get_rows(p: &ComputeParams, node: &NodeRef) {
    let (d, a, rows) = (&node.dst, node.src0(), node.src1());
    let mut buf = vec![0f32; a.ne[0]];
    // A repacked src0 (e.g. an LLM's token embedding tied to its output): one row unpacked.
    let repacked = (a.repacked == Repacked::Yes)
        .then(|| repack::spec(a.dtype))
        .flatten();
    let mut plain = vec![0u8; if repacked.is_some() { a.nb[1] } else { 0 }];
    for ir in thread_range(d.nrows(), p.ith, p.nth) {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        // SAFETY: rows has shape [d.ne1, d.ne2, d.ne3] (checked at build time).
        let r = unsafe { (rows.at(i1, i2, i3, 0) as *const i32).read_unaligned() };
        let valid = r >= 0 && (r as usize) < a.ne[1];
        if !valid {
            p.fault(|| format!("GET_ROWS: row id {r} out of range [0, {})", a.ne[1]));
        }
        if a.dtype == DType::I32 {
            for i0 in 0..d.ne[0] {
                // SAFETY: a row of src0 (when valid) and of dst.
                unsafe {
                    let v = if valid {
                        (a.at(i0, r as usize, i2, i3) as *const i32).read_unaligned()
                    } else {
                        0
                    };
                    (d.at(i0, i1, i2, i3) as *mut i32).write_unaligned(v);
                }
            }
            continue;
        }
        if let (true, Some(s)) = (valid, repacked) {
            let r = r as usize;
            let nb = s.blocks(a.ne[0]);
            if r < repack::grouped_rows(a.ne[1]) {
                // SAFETY: the 2-D src0's group holding row r (4 rows of nb[1] bytes).
                let group =
                    unsafe { std::slice::from_raw_parts(a.at(0, r / 4 * 4, 0, 0), 4 * a.nb[1]) };
                repack::unpack_row(s, nb, group, r % 4, &mut plain);
            } else {
                // SAFETY: a plain trailing row.
                plain.copy_from_slice(unsafe {
                    std::slice::from_raw_parts(a.at(0, r, 0, 0), a.nb[1])
                });
            }
            crate::backend::cpu::dequantize_row(a.dtype, &plain, &mut buf)
                .expect("codec availability checked by supported");
        } else if valid {
            // SAFETY: row r of src0 at (i2, i3): a.ne2 == rows.ne1, a.ne3 == rows.ne2.
            unsafe { load_row(a, r as usize, i2, i3, &mut buf) };
        } else {
            buf.fill(f32::NAN);
        }
        // SAFETY: a dst row.
        unsafe { store_row(d, i1, i2, i3, &buf) };
    }
}

/// Walks a tensor's elements in logical (row-major, i0 fastest) order as f32, converting
/// (dequantizing a whole row at a time for block types).
struct FlatReader<'a> {
    t: &'a TensorRef,
    idx: [usize; 4],
    row: Vec<f32>,
    row_at: Option<(usize, usize, usize)>,
}

impl<'a> FlatReader<'a> {
    fn new(t: &'a TensorRef, flat: usize) -> Self {
        let ne = t.ne;
        let idx = [
            flat % ne[0],
            (flat / ne[0]) % ne[1],
            (flat / (ne[0] * ne[1])) % ne[2],
            flat / (ne[0] * ne[1] * ne[2]),
        ];
        FlatReader {
            t,
            idx,
            row: Vec::new(),
            row_at: None,
        }
    }

    /// The next element.
    ///
    /// # Safety
    /// Fewer than `nelements - start` elements have been read.
    unsafe fn next(&mut self) -> f32 {
        let [i0, i1, i2, i3] = self.idx;
        let t = self.t;
        let v = if is_float(t.dtype) {
            // SAFETY: idx is inside the tensor (caller).
            unsafe { ld(t.dtype, t.at(i0, i1, i2, i3)) }
        } else {
            if self.row_at != Some((i1, i2, i3)) {
                self.row.resize(t.ne[0], 0.0);
                // SAFETY: as above.
                unsafe { load_row(t, i1, i2, i3, &mut self.row) };
                self.row_at = Some((i1, i2, i3));
            }
            self.row[i0]
        };
        self.advance();
        v
    }

    /// Byte address of the next element, then advance (same-type byte copies).
    ///
    /// # Safety
    /// As `next`.
    unsafe fn next_ptr(&mut self) -> *const u8 {
        let [i0, i1, i2, i3] = self.idx;
        // SAFETY: idx is inside the tensor (caller).
        let ptr = unsafe { self.t.at(i0, i1, i2, i3) };
        self.advance();
        ptr
    }

    fn advance(&mut self) {
        let ne = self.t.ne;
        let idx = &mut self.idx;
        idx[0] += 1;
        for k in 0..3 {
            if idx[k] == ne[k] {
                idx[k] = 0;
                idx[k + 1] += 1;
            }
        }
    }
}

/// f16 `s` whose dim 1 is contiguous (a transposed view: attention's V cache, cast to f32
/// every token) into f32 rows of `d` (same shape): blocks of up to [`TRANSPOSE_ROWS`] dst rows,
/// read as runs of that many contiguous f16 values (one vector conversion each), instead of
/// one strided element at a time per row (18 % of a SmolLM2 token at 120 positions).
fn copy_transposed_f16(s: &TensorRef, d: &TensorRef, range: std::ops::Range<usize>) {
    let ne0 = d.ne[0];
    let mut tmp = vec![0f32; TRANSPOSE_ROWS * ne0];
    let mut run = [0f32; TRANSPOSE_ROWS];
    let mut ir = range.start;
    while ir < range.end {
        let (i1, i2, i3) = row_index(ir, &d.ne);
        let nb = TRANSPOSE_ROWS.min(range.end - ir).min(d.ne[1] - i1);
        for i0 in 0..ne0 {
            // SAFETY: elements (i0, i1..i1 + nb, i2, i3) are inside s and contiguous (nb[1]
            // is one f16).
            let src = unsafe { std::slice::from_raw_parts(s.at(i0, i1, i2, i3), 2 * nb) };
            crate::backend::cpu::dequantize_row(DType::F16, src, &mut run[..nb])
                .expect("f16 always converts");
            for (b, v) in run[..nb].iter().enumerate() {
                tmp[b * ne0 + i0] = *v;
            }
        }
        for b in 0..nb {
            // SAFETY: row i1 + b of dst (i1 + b < ne1), one of this thread's rows.
            unsafe { store_row(d, i1 + b, i2, i3, &tmp[b * ne0..(b + 1) * ne0]) };
        }
        ir += nb;
    }
}

/// Rows per block of [`copy_transposed_f16`]: runs of 64 bytes of f16, one cache line.
const TRANSPOSE_ROWS: usize = 32;

/// Dup / Cont / Cpy: src0's elements in logical order into dst's, converting types.
fn copy(p: &ComputeParams, node: &NodeRef) {
    let (d, s) = (&node.dst, node.src0());
    if d.nelements() == 0 {
        return;
    }
    let same_type = d.dtype == s.dtype;
    let ne0 = d.ne[0];
    let range = thread_range(d.nrows(), p.ith, p.nth);
    if range.is_empty() {
        return;
    }
    if same_type && s.ne != d.ne && s.is_contiguous() && d.is_contiguous() {
        // Same bytes in the same order (ggml's dup of contiguous tensors): copy rows of bytes.
        let row_bytes = ne0 / d.dtype.block_size() * d.dtype.type_size();
        let start = range.start * row_bytes;
        let len = range.len() * row_bytes;
        // SAFETY: both tensors are contiguous with equal byte sizes (same type and element
        // count); this thread copies its own span of dst rows.
        unsafe { std::ptr::copy(s.ptr.add(start), d.ptr.add(start), len) };
        return;
    }
    if s.ne == d.ne
        && s.dtype == DType::F16
        && d.dtype == DType::F32
        && s.nb[1] == 2
        && d.nb[0] == 4
        && ne0 > 1
    {
        copy_transposed_f16(s, d, range);
        return;
    }
    if s.ne == d.ne {
        let ts = d.dtype.type_size();
        let row_bytes = ne0 / d.dtype.block_size() * ts;
        let mut buf = vec![0f32; if same_type { 0 } else { ne0 }];
        for ir in range {
            let (i1, i2, i3) = row_index(ir, &d.ne);
            // SAFETY: the same row of tensors with equal shapes; dst rows are this thread's.
            unsafe {
                if same_type {
                    let (ps, pd) = (s.at(0, i1, i2, i3), d.at(0, i1, i2, i3));
                    if d.dtype.is_quantized() || (s.nb[0] == ts && d.nb[0] == ts) {
                        std::ptr::copy(ps, pd, row_bytes);
                    } else {
                        for i0 in 0..ne0 {
                            copy_elem(ps.add(i0 * s.nb[0]), pd.add(i0 * d.nb[0]), ts);
                        }
                    }
                } else {
                    load_row(s, i1, i2, i3, &mut buf);
                    store_row(d, i1, i2, i3, &buf);
                }
            }
        }
        return;
    }
    // Different shapes: element k of dst (logical order) takes element k of src.
    let mut reader = FlatReader::new(s, range.start * ne0);
    if same_type && !d.dtype.is_quantized() {
        let ts = d.dtype.type_size();
        for ir in range {
            let (i1, i2, i3) = row_index(ir, &d.ne);
            for i0 in 0..ne0 {
                // SAFETY: nelements equal (supported), so the reader stays inside src.
                unsafe { copy_elem(reader.next_ptr(), d.at(i0, i1, i2, i3), ts) };
            }
        }
    } else {
        let mut buf = vec![0f32; ne0];
        for ir in range {
            let (i1, i2, i3) = row_index(ir, &d.ne);
            for v in buf.iter_mut() {
                // SAFETY: as above.
                *v = unsafe { reader.next() };
            }
            // SAFETY: a dst row of this thread.
            unsafe { store_row(d, i1, i2, i3, &buf) };
        }
    }
}
