//! mul_mat (src1 converted once to the vec_dot type, chunked across threads), im2col, pool_2d,
//! argmax and cross-entropy loss.
//!
//! mul_mat follows ggml's CPU path: every thread converts its share of src1 into the work buffer
//! in the weight type's `vec_dot_type` and all meet at a barrier (a small src1, a token's
//! activations: each thread converts all of it into its own copy, no barrier), then the output (weight rows × src1 columns) is cut into chunks (16×16, 64 along the long side
//! for GEMV) that threads take dynamically (a GEMV's leading 3/4 of them split contiguously
//! first, one share per thread, so that each thread streams its weights in one piece). Inside a chunk, f32/f16/bf16 weights (and, with AVX2,
//! NEON or SIMD128, q4_0/q4_1/q5_0/q5_1/q8_0/q4_K/q5_K/q6_K) go through register-tiled kernels that compute an R×C
//! block of dot products at once (each weight block is loaded and decoded once for C columns,
//! each column load serves R rows); other types call their `vec_dot` per element. On x86 a
//! one-column tile runs the integer-dot GEMV instead (`arch/x86/gemv.rs`) and prompts with at
//! least 8 columns the integer-dot GEMM (`arch/x86/gemm.rs`).

use std::sync::atomic::Ordering;

use half::{bf16, f16};

use crate::backend::cpu::arch::{self, run_rows, tile, GemmArgs, Panel, Tiled};
use crate::backend::cpu::repack::{self, Repacked};
use crate::backend::cpu::traits::{FromF32, VecDot};
use crate::backend::cpu::{thread_range, ComputeParams, NodeRef, TensorRef};
use crate::tensor::{Op, PoolOp};
use crate::DType;

// ---------------------------------------------------------------------------------------------
// Per-type mul_mat kernels
// ---------------------------------------------------------------------------------------------

/// How a weight type is multiplied.
#[derive(Clone, Copy)]
struct MatKernel {
    /// The type src1 is converted to.
    vec_dot_type: DType,
    /// f32 → vec_dot_type.
    from_f32: FromF32,
    vec_dot: VecDot,
    /// Register-tiled fast path (f32, f16, bf16; quantized types with AVX2).
    tiled: Option<Tiled>,
}

fn f32_from_f32(src: &[f32], dst: &mut [u8]) {
    dst[..src.len() * 4].copy_from_slice(bytemuck::cast_slice(src));
}

fn f16_from_f32(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f16::from_f32(*x).to_bits().to_le_bytes());
    }
}

fn bf16_from_f32(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&bf16::from_f32(*x).to_bits().to_le_bytes());
    }
}

fn vec_dot_f32(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut out = [[0f32; 1]; 1];
    // SAFETY: both slices hold at least n f32 values (checked by the callers' shapes).
    unsafe { tile::<1, 1>(Tiled::F32, n, [a.as_ptr()], [b.as_ptr()], &mut out) };
    out[0][0]
}

fn vec_dot_f16(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut out = [[0f32; 1]; 1];
    // SAFETY: both slices hold at least n f16 values.
    unsafe { tile::<1, 1>(Tiled::F16, n, [a.as_ptr()], [b.as_ptr()], &mut out) };
    out[0][0]
}

fn vec_dot_bf16(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut out = [[0f32; 1]; 1];
    // SAFETY: both slices hold at least n bf16 values.
    unsafe { tile::<1, 1>(Tiled::Bf16, n, [a.as_ptr()], [b.as_ptr()], &mut out) };
    out[0][0]
}

fn kernel_for(dtype: DType) -> Option<MatKernel> {
    // f32/f16/bf16 weights use the register-tiled kernels (and their own conversion of src1);
    // every other computable type goes through the CPU traits table (SIMD where available).
    let own = |vec_dot_type, from_f32, vec_dot, t| MatKernel {
        vec_dot_type,
        from_f32,
        vec_dot,
        tiled: Some(t),
    };
    match dtype {
        DType::F32 => Some(own(DType::F32, f32_from_f32, vec_dot_f32, Tiled::F32)),
        DType::F16 => Some(own(DType::F16, f16_from_f32, vec_dot_f16, Tiled::F16)),
        DType::BF16 => Some(own(DType::BF16, bf16_from_f32, vec_dot_bf16, Tiled::Bf16)),
        _ => {
            let tt = crate::backend::cpu::type_traits(dtype)?;
            let vt = crate::backend::cpu::type_traits(tt.vec_dot_type)?;
            Some(MatKernel {
                vec_dot_type: tt.vec_dot_type,
                from_f32: vt.from_f32,
                vec_dot: tt.vec_dot,
                tiled: quant_tiled(dtype),
            })
        }
    }
}

/// Register-tiled kernels for quantized weights where this CPU has them.
fn quant_tiled(dtype: DType) -> Option<Tiled> {
    if !arch::has_quant_tiles() {
        return None;
    }
    Tiled::quantized(dtype)
}

/// Name of the mul_mat SIMD path in use.
pub fn simd_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if arch::x86::available() {
            use arch::x86::gemm::{best, Isa};
            return match best() {
                Some(Isa::Avx512Vnni) => "avx2+fma+f16c, prompt GEMM avx512vnni+vl",
                Some(Isa::AvxVnni) => "avx2+fma+f16c, prompt GEMM avxvnni",
                _ => "avx2+fma+f16c",
            };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if arch::has_quant_tiles() {
        use arch::aarch64::tiles::{best, Isa};
        return match best() {
            Isa::I8mm => "neon+dotprod+i8mm (float and quantized tiles)",
            Isa::Dotprod => "neon+dotprod (float and quantized tiles)",
            Isa::Neon => "neon (float and quantized tiles)",
        };
    }
    if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
        return "wasm32 simd128 (float and quantized tiles)";
    }
    "portable"
}

// ---------------------------------------------------------------------------------------------
// mul_mat
// ---------------------------------------------------------------------------------------------

/// How a mul_mat node runs: its kernel and whether src1 goes through the work buffer.
struct MulMatPlan {
    kernel: MatKernel,
    /// src1 must be converted (different type, or rows not contiguous).
    convert: bool,
    /// Bytes of one converted src1 row.
    row_bytes: usize,
}

fn plan_mul_mat(node: &NodeRef) -> Option<MulMatPlan> {
    let (a, b) = (node.src[0]?, node.src[1]?);
    let kernel = kernel_for(a.dtype)?;
    let vdt = kernel.vec_dot_type;
    let convert = b.dtype != vdt || b.nb[0] != b.dtype.type_size();
    let row_bytes = vdt.row_size(b.ne[0]).ok()?;
    Some(MulMatPlan {
        kernel,
        convert,
        row_bytes,
    })
}

fn mul_mat_supported(node: &NodeRef) -> bool {
    let (Some(a), Some(b)) = (node.src[0], node.src[1]) else {
        return false;
    };
    let d = &node.dst;
    plan_mul_mat(node).is_some()
        && matches!(b.dtype, DType::F32 | DType::F16)
        && d.dtype == DType::F32
        && a.nb[0] == a.dtype.type_size()
        && d.nb[0] == 4
        && a.ne[0] == b.ne[0]
        && a.ne[2] > 0
        && a.ne[3] > 0
        && b.ne[2] % a.ne[2] == 0
        && b.ne[3] % a.ne[3] == 0
        && d.ne == [a.ne[1], b.ne[1], b.ne[2], b.ne[3]]
        && (a.repacked == Repacked::No
            || (repack::spec(a.dtype).is_some()
                && a.ne[2] * a.ne[3] == 1
                && a.ne[0] / 32 <= repack::MAX_BLOCKS))
}

/// Rows of a repacked src0 unpacked per step into a thread's scratch (4 groups).
const REPACK_ROWS: usize = 16;

/// Whether this product reads its repacked src0 through the scratch copy: all but the GEMVs
/// that read the groups directly (`repack::pays_for`).
fn repack_scratch(node: &NodeRef) -> bool {
    let a = node.src0();
    a.repacked == Repacked::Yes && !(repack::pays_for(a.dtype) && node.src1().nrows() == 1)
}

/// Bytes of one thread's scratch for a repacked src0.
fn repack_scratch_bytes(a: &TensorRef) -> usize {
    (REPACK_ROWS * a.nb[1]).next_multiple_of(64)
}

/// Read `len` elements of src1 row (i1, i2, i3) starting at element `start` as f32.
///
/// # Safety
/// The row indices and element range must be inside `b`.
unsafe fn load_row_f32(
    b: &TensorRef,
    i1: usize,
    i2: usize,
    i3: usize,
    start: usize,
    out: &mut [f32],
) {
    // SAFETY: indices inside b (caller).
    unsafe {
        let base = b.at(0, i1, i2, i3);
        for (j, o) in out.iter_mut().enumerate() {
            let p = base.add((start + j) * b.nb[0]);
            *o = match b.dtype {
                DType::F32 => (p as *const f32).read_unaligned(),
                _ => f16::from_bits((p as *const u16).read_unaligned()).to_f32(),
            };
        }
    }
}

/// Convert src1 into `wdata` (rows of `row_bytes` in vec_dot_type, one per src1 row in order).
fn convert_src1(p: &ComputeParams, b: &TensorRef, plan: &MulMatPlan) {
    let k = b.ne[0];
    let i8 = i8_gemm(plan, b.nrows());
    let meta_off = i8_meta_offset(plan, b.nrows());
    let mpc = meta_per_col(b);
    let vdt = plan.kernel.vec_dot_type;
    let bs = vdt.block_size();
    let nblocks = k / bs;
    let nrows = b.nrows();
    let mut tmp: Vec<f32> = Vec::new();
    let mut convert = |row: usize, blk: std::ops::Range<usize>| {
        if blk.is_empty() {
            return;
        }
        let i1 = row % b.ne[1];
        let i2 = (row / b.ne[1]) % b.ne[2];
        let i3 = row / (b.ne[1] * b.ne[2]);
        let (e0, e1) = (blk.start * bs, blk.end * bs);
        let (o0, o1) = (blk.start * vdt.type_size(), blk.end * vdt.type_size());
        // SAFETY: the work buffer holds nrows * row_bytes bytes (work_size); rows and block
        // ranges of different threads are disjoint.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(p.wdata.add(row * plan.row_bytes + o0), o1 - o0)
        };
        if b.dtype == DType::F32 && b.nb[0] == 4 {
            // SAFETY: row inside b, elements e0..e1 contiguous.
            let src = unsafe {
                std::slice::from_raw_parts(b.at(0, i1, i2, i3).add(e0 * 4) as *const f32, e1 - e0)
            };
            (plan.kernel.from_f32)(src, dst);
        } else {
            tmp.resize(e1 - e0, 0.0);
            // SAFETY: row and element range inside b.
            unsafe { load_row_f32(b, i1, i2, i3, e0, &mut tmp) };
            (plan.kernel.from_f32)(&tmp, dst);
        }
        if let Some(t) = i8 {
            // SAFETY: the work buffer holds nrows · mpc entries from meta_off (work_size);
            // blocks of different threads are disjoint, and 8-aligned from an aligned buffer.
            let meta = unsafe {
                std::slice::from_raw_parts_mut(
                    (p.wdata.add(meta_off) as *mut [u32; 2]).add(row * mpc + blk.start),
                    blk.len(),
                )
            };
            arch::gemm_i8_meta(t, dst, meta);
        }
    };
    if nrows >= p.nth {
        for row in thread_range(nrows, p.ith, p.nth) {
            convert(row, 0..nblocks);
        }
    } else {
        let blk = thread_range(nblocks, p.ith, p.nth);
        for row in 0..nrows {
            convert(row, blk.clone());
        }
    }
}

/// src1 elements up to which every thread converts all of src1 into its own part of the work
/// buffer instead of a share of it followed by a barrier: a GEMV's activation row (a token's) is
/// converted in less time than a barrier between Web Workers takes.
const PRIVATE_CONVERT_MAX: usize = 4096;

/// Bytes of each thread's copy: PRIVATE_CONVERT_MAX elements in the widest vec_dot_type (f32),
/// the same for every node, so that nodes with no barrier between them (CpuBackend::compute)
/// never touch another thread's copy.
const PRIVATE_STRIDE: usize = PRIVATE_CONVERT_MAX * 4;

/// Private copies hold converted rows only, so a product on the integer-dot GEMM (which also
/// needs its column facts) converts a shared copy.
fn private_convert(plan: &MulMatPlan, b: &TensorRef, nth: usize) -> bool {
    nth > 1 && b.nelements() <= PRIVATE_CONVERT_MAX && i8_gemm(plan, b.nrows()).is_none()
}

fn mul_mat_work_size(node: &NodeRef, nth: usize) -> usize {
    let plain = mul_mat_plain_work_size(node, nth);
    if repack_scratch(node) {
        plain.next_multiple_of(64) + nth * repack_scratch_bytes(node.src0())
    } else {
        plain
    }
}

fn mul_mat_plain_work_size(node: &NodeRef, nth: usize) -> usize {
    let nr1 = node.src1().nrows();
    match plan_mul_mat(node) {
        Some(plan) if plan.convert => {
            if private_convert(&plan, node.src1(), nth) {
                return PRIVATE_STRIDE * nth + 64;
            }
            let meta = match i8_gemm(&plan, nr1) {
                Some(_) => i8_meta_offset(&plan, nr1) + nr1 * meta_per_col(node.src1()) * 8,
                None => plan.row_bytes * nr1,
            };
            meta + 64
        }
        _ => 0,
    }
}

/// What a product's shared conversion of src1 (all threads, then a barrier) leaves in the work
/// buffer, and where each thread's scratch lies: two products with equal keys, one after the
/// other, read the same converted bytes at the same places, so the second can take the first's
/// (a layer's Q, K and V products of one normed activation, its gate and up: `CpuBackend::plan`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ConvertKey {
    src: usize,
    ne: [usize; 4],
    nb: [usize; 4],
    dtype: DType,
    vec_dot: DType,
    /// The integer-dot GEMM's weight type: its column facts follow the rows.
    i8: Option<Tiled>,
    /// Each thread's scratch bytes (they follow the converted part, whose size the fields
    /// above decide).
    scratch: usize,
}

/// `node`'s [`ConvertKey`] when it converts src1 into the shared work buffer on `nth` threads.
pub fn shared_convert_key(node: &NodeRef, nth: usize) -> Option<ConvertKey> {
    if node.op != Op::MulMat {
        return None;
    }
    let plan = plan_mul_mat(node)?;
    let b = node.src1();
    if !plan.convert || private_convert(&plan, b, nth) {
        return None;
    }
    Some(ConvertKey {
        src: b.ptr as usize,
        ne: b.ne,
        nb: b.nb,
        dtype: b.dtype,
        vec_dot: plan.kernel.vec_dot_type,
        i8: i8_gemm(&plan, b.nrows()),
        scratch: if repack_scratch(node) {
            repack_scratch_bytes(node.src0())
        } else {
            0
        },
    })
}

/// How mul_mat uses the work buffer (see [`super::WorkUse`]).
pub fn work_use(node: &NodeRef, nth: usize) -> super::WorkUse {
    if node.op == Op::MulMat && repack_scratch(node) {
        // Each thread's scratch sits at an offset that depends on the node.
        return super::WorkUse::Shared;
    }
    match plan_mul_mat(node) {
        Some(plan) if plan.convert => {
            if private_convert(&plan, node.src1(), nth) {
                super::WorkUse::PerThread
            } else {
                super::WorkUse::Shared
            }
        }
        _ => super::WorkUse::None,
    }
}

/// The integer-dot GEMM's weight type when this product uses it (prompts: src1 converted, at
/// least [`I8_GEMM_MIN_COLS`] columns, a type this machine has it for).
fn i8_gemm(plan: &MulMatPlan, nr1: usize) -> Option<Tiled> {
    plan.kernel
        .tiled
        .filter(|&t| plan.convert && nr1 >= I8_GEMM_MIN_COLS && arch::has_gemm_i8(t))
}

/// Where the GEMM's column facts start in the work buffer (after the converted rows).
fn i8_meta_offset(plan: &MulMatPlan, nr1: usize) -> usize {
    (plan.row_bytes * nr1).next_multiple_of(8)
}

/// Column-fact entries per converted src1 row (one per 32-element block).
fn meta_per_col(b: &TensorRef) -> usize {
    b.ne[0] / 32
}

/// Tile shape of the register-blocked kernels for GEMM (rows × columns) and GEMV.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
const GEMM_R: usize = 4;
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
const GEMM_C: usize = 3;
// V8 keeps 15 XMM registers: 4×3 accumulators + operands would spill.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
const GEMM_R: usize = 4;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
const GEMM_C: usize = 2;
/// f32 GEMM tile of the relaxed-SIMD build: its fused multiply-add needs no temporary register,
/// so a larger tile fits V8's 15 XMM registers (measured, see docs/PERFORMANCE.md).
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
const F32_GEMM_R: usize = 5;
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
const F32_GEMM_C: usize = 2;
#[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
const F32_GEMM_R: usize = GEMM_R;
#[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
const F32_GEMM_C: usize = GEMM_C;
const GEMV_R: usize = 4;
/// Fewest src1 columns for the integer-dot GEMM ([`arch::gemm_i8`]); narrower products keep the
/// register tiles, which need no decoded panel.
const I8_GEMM_MIN_COLS: usize = 8;
/// Most columns per chunk of the integer-dot GEMM (128 q8_0 columns of k = 896: 122 KB).
const I8_GEMM_COLS: usize = 128;
/// Converted column bytes per chunk: the chunk's columns are re-read for every 8-row group, so
/// they should stay in L2 (q8_K columns of k = 4864: 5.5 KB each, 128 of them would not).
const I8_GEMM_COL_BYTES: usize = 256 << 10;
/// GEMV rows per tile of the k-quants: their super-block work per row is large enough that
/// several rows at once only add register pressure (measured 10-30 % slower at 4 rows).
const KGEMV_R: usize = 1;
/// A GEMV's chunks taken dynamically: the last 1/GEMV_DYNAMIC_DIV (the rest are split
/// contiguously among the threads, see [`mul_mat`]).
const GEMV_DYNAMIC_DIV: usize = 4;
/// k-block (elements) of the float GEMM: 16 rows + 3 columns of 512 f32 fit in L1.
const KC: usize = 512;

fn mul_mat(p: &ComputeParams, node: &NodeRef) {
    let (a, b) = (node.src0(), node.src1());
    let Some(plan) = plan_mul_mat(node) else {
        unreachable!("checked by supported")
    };
    let scratch = repack_scratch(node).then(|| {
        // SAFETY: the work buffer holds the plain part, then nth scratches (mul_mat_work_size).
        unsafe {
            p.wdata.add(
                mul_mat_plain_work_size(node, p.nth).next_multiple_of(64)
                    + p.ith * repack_scratch_bytes(a),
            )
        }
    });
    // The chunk counter is this node's own, already `nth` (see CpuBackend::compute).
    let own;
    let p = if plan.convert && private_convert(&plan, b, p.nth) {
        debug_assert!(plan.row_bytes * b.nrows() <= PRIVATE_STRIDE);
        own = ComputeParams {
            // SAFETY: the work buffer holds `nth` copies of PRIVATE_STRIDE (mul_mat_work_size),
            // which fits src1 (at most PRIVATE_CONVERT_MAX elements of at most 4 bytes).
            wdata: unsafe { p.wdata.add(p.ith * PRIVATE_STRIDE) },
            ..*p
        };
        convert_src1(
            &ComputeParams {
                ith: 0,
                nth: 1,
                ..own
            },
            b,
            &plan,
        );
        &own
    } else {
        // (`src1_ready`: the previous product's conversion, the same bytes: see ConvertKey.)
        if plan.convert && !p.src1_ready {
            convert_src1(p, b, &plan);
            p.barrier.wait();
        }
        p
    };

    let nr0 = a.ne[1];
    let nr1 = b.nrows();
    if nr0 == 0 || nr1 == 0 {
        return;
    }
    // Prompts: the integer-dot GEMM decodes each 8-row group of a chunk once for all its
    // columns, so chunks span many columns (16 rows × up to 128 columns).
    let i8gemm = i8_gemm(&plan, nr1);
    let chunk = |p: &ComputeParams, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
        if a.repacked == Repacked::Yes {
            repacked_chunk(node, &plan, p, i8gemm, rows, cols, scratch);
        } else {
            mul_mat_chunk(node, &plan, p, i8gemm, rows, cols, RowsAt::Src0);
        }
    };
    // Alone (`ComputeParams::alone`): every chunk, as one thread would (its own part of the work
    // buffer is thread ith's, as above).
    let (ith, nth) = if p.alone { (0, 1) } else { (p.ith, p.nth) };
    let sp = split(node, &plan, nth);
    let (nchunk0, nchunk1, dr0, dr1) = (sp.nchunk0, sp.nchunk1, sp.dr0, sp.dr1);
    let (first, total) = if sp.fixed > 0 {
        let rows = sp.share_rows(nr0, ith, nth);
        if !rows.is_empty() {
            chunk(p, rows, 0..1);
        }
        (sp.fixed, nchunk0)
    } else {
        (0, nchunk0 * nchunk1)
    };
    let mut current = first + ith;
    while current < total {
        let c0 = current % nchunk0;
        let c1 = current / nchunk0;
        let rows = (c0 * dr0).min(nr0)..((c0 + 1) * dr0).min(nr0);
        let cols = (c1 * dr1).min(nr1)..((c1 + 1) * dr1).min(nr1);
        if !rows.is_empty() {
            chunk(p, rows, cols);
        }
        current = if p.alone {
            current + 1
        } else {
            first + p.chunk.fetch_add(1, Ordering::Relaxed)
        };
    }
}

/// How [`mul_mat`] cuts its output among `nth` threads: chunks of `dr0` rows × `dr1` columns,
/// the leading `fixed` chunks (a GEMV's) run as one contiguous share per thread first.
struct Split {
    nchunk0: usize,
    nchunk1: usize,
    dr0: usize,
    dr1: usize,
    fixed: usize,
}

impl Split {
    /// Thread `ith`'s share of the `fixed` chunks' rows, split evenly in groups of four (whole
    /// repacked groups) rather than by chunks: one panel a thread, 576 rows are 288 + 288, not
    /// 256 + 320; with a dynamic tail (wasm), the first 448 of them 224 + 224, not 256 + 192 —
    /// with the tail's two chunks one each, thread 0 ran 320 rows and thread 1 256, and thread
    /// 1 waited for a chunk after every 576-row GEMV.
    fn share_rows(&self, nr0: usize, ith: usize, nth: usize) -> std::ops::Range<usize> {
        let rows = (self.fixed * self.dr0).min(nr0);
        let g = thread_range(rows.div_ceil(4), ith, nth);
        (g.start * 4).min(rows)..(g.end * 4).min(rows)
    }
}

fn split(node: &NodeRef, plan: &MulMatPlan, nth: usize) -> Split {
    let (a, b) = (node.src0(), node.src1());
    let (nr0, nr1) = (a.ne[1], b.nrows());
    let i8gemm = i8_gemm(plan, nr1);
    let cs = if nr0 == 1 || nr1 == 1 { 64 } else { 16 };
    // f32 GEMM: whole row tiles per chunk (15 rows for a 3- or 5-row tile, not 16 = 5×3 + 1).
    let cs0 = if cs == 16 && matches!(plan.kernel.tiled, Some(Tiled::F32)) {
        cs / F32_GEMM_R * F32_GEMM_R
    } else {
        cs
    };
    let (mut nchunk0, mut nchunk1) = if i8gemm.is_some() {
        let cols = (I8_GEMM_COL_BYTES / plan.row_bytes).clamp(16, I8_GEMM_COLS);
        (nr0.div_ceil(16), nr1.div_ceil(cols))
    } else {
        (nr0.div_ceil(cs0), nr1.div_ceil(cs))
    };
    if a.repacked == Repacked::Yes && nr1 > 1 && i8gemm.is_none() {
        // Every column in one chunk: each group is unpacked once per product (see
        // repacked_chunk), not once per column chunk.
        (nchunk0, nchunk1) = (nr0.div_ceil(REPACK_ROWS), 1);
    }
    if nchunk0 * nchunk1 < 4 * nth {
        // Too few chunks to balance: one piece per thread along the longer side.
        if nr0 > nr1 {
            (nchunk0, nchunk1) = (nth, 1);
        } else {
            (nchunk0, nchunk1) = (1, nth);
        }
    }
    let mut dr0 = nr0.div_ceil(nchunk0);
    if a.repacked == Repacked::Yes {
        // Whole groups of four rows per chunk.
        dr0 = dr0.next_multiple_of(4);
    }
    let mut dr1 = nr1.div_ceil(nchunk1);
    if let Some(t) = plan
        .kernel
        .tiled
        .filter(|t| t.is_quant() && nr1 > 1 && i8gemm.is_none())
    {
        // Whole quantized GEMM tiles per chunk (e.g. 131 columns: chunks of 16, not 15 =
        // 8 + 4 + 2 + 1, which ran half the work in narrow tiles); later chunks may be empty.
        dr1 = dr1.next_multiple_of(t.gemm_cols());
    }
    // GEMV over many chunks, natively: each thread runs one panel, an even share of the rows,
    // so its weight stream has one start and the x86 GEMV's prefetch meets no chunk edges but
    // the weight's own (see x86/gemv.rs quad_groups), and the next GEMV's first rows, which the
    // last prefetches fetch, are this thread's own. Chunks taken in turn cut every stream into
    // 64-row pieces whose first rows the prefetch has not fetched; a dynamic tail after
    // contiguous shares (three quarters of the chunks, then the rest taken in turn, as before)
    // measured 0.87–0.96× one panel each at 2 threads on an Emerald Rapids VM (`ggweb
    // generate`, PERFORMANCE.md session 31), even with its noisy neighbours. wasm keeps the
    // dynamic tail (unmeasured there).
    let one_panel = !cfg!(target_arch = "wasm32");
    let fixed = if nr1 != 1 || nchunk1 != 1 {
        0
    } else if one_panel {
        nchunk0
    } else if nchunk0 >= 4 * nth {
        nchunk0 - nchunk0 / GEMV_DYNAMIC_DIV
    } else {
        0
    };
    Split {
        nchunk0,
        nchunk1,
        dr0,
        dr1,
        fixed,
    }
}

/// The weight bytes thread `ith` of `nth` reads first in `node`, when it is a quantized GEMV
/// (one src1 column): its first panel's rows. A prefetch hint for the node before it
/// (`arch::set_next_read`).
pub fn first_read(node: &NodeRef, ith: usize, nth: usize) -> Option<(*const u8, usize)> {
    if node.op != Op::MulMat || node.src1().nrows() != 1 {
        return None;
    }
    let plan = plan_mul_mat(node)?;
    if !plan.kernel.tiled.is_some_and(|t| t.is_quant()) {
        return None;
    }
    let a = node.src0();
    let nr0 = a.ne[1];
    let sp = split(node, &plan, nth);
    let rows = if sp.fixed > 0 {
        sp.share_rows(nr0, ith, nth)
    } else {
        (ith * sp.dr0).min(nr0)..((ith + 1) * sp.dr0).min(nr0)
    };
    (!rows.is_empty()).then(|| {
        (
            a.ptr.wrapping_add(rows.start * a.nb[1]) as *const u8,
            rows.len() * a.nb[1],
        )
    })
}

/// Where [`mul_mat_chunk`] reads the chunk's weight rows.
#[derive(Clone, Copy)]
enum RowsAt {
    /// In src0, in the GGUF layout.
    Src0,
    /// Plain copies: row `rows.start + i` at `+ i · nb1` (a repacked src0 in a thread's scratch).
    Copy(*const u8),
    /// src0's repacked groups, read directly by the GEMV that reads them (`repack::pays_for`).
    Groups,
}

/// Rows `rows` × columns `cols` of a product whose src0 is repacked (`rows.start` a multiple
/// of four): its groups read directly by the GEMV where it reads them, else unpacked
/// [`REPACK_ROWS`] at a time into the thread's `scratch`; the trailing `ne1 % 4` rows are plain.
fn repacked_chunk(
    node: &NodeRef,
    plan: &MulMatPlan,
    p: &ComputeParams,
    i8gemm: Option<Tiled>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    scratch: Option<*mut u8>,
) {
    let a = node.src0();
    let Some(s) = repack::spec(a.dtype) else {
        unreachable!("checked by supported")
    };
    let nb = s.blocks(a.ne[0]);
    let full = repack::grouped_rows(a.ne[1]);
    let g_end = rows.end.min(full);
    let tail = g_end.max(rows.start)..rows.end;
    if rows.start < g_end {
        match scratch {
            None => mul_mat_chunk(
                node,
                plan,
                p,
                i8gemm,
                rows.start..g_end,
                cols.clone(),
                RowsAt::Groups,
            ),
            Some(scr) => {
                let span = 4 * a.nb[1];
                let mut r = rows.start;
                while r < g_end {
                    let e = (r + REPACK_ROWS).min(g_end);
                    for g in (r..e).step_by(4) {
                        // SAFETY: group g/4 lies in src0 (g + 4 ≤ full rows); the scratch holds
                        // REPACK_ROWS rows of this thread's.
                        unsafe {
                            let src = std::slice::from_raw_parts(a.at(0, g, 0, 0), span);
                            let dst =
                                std::slice::from_raw_parts_mut(scr.add((g - r) * a.nb[1]), span);
                            repack::unpack_group(s, nb, src, dst);
                        }
                    }
                    mul_mat_chunk(node, plan, p, i8gemm, r..e, cols.clone(), RowsAt::Copy(scr));
                    r = e;
                }
            }
        }
    }
    if !tail.is_empty() {
        mul_mat_chunk(node, plan, p, i8gemm, tail, cols, RowsAt::Src0);
    }
}

fn mul_mat_chunk(
    node: &NodeRef,
    plan: &MulMatPlan,
    p: &ComputeParams,
    i8gemm: Option<Tiled>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    at: RowsAt,
) {
    let (a, b, d) = (node.src0(), node.src1(), &node.dst);
    let k = a.ne[0];
    let r2 = b.ne[2] / a.ne[2];
    let r3 = b.ne[3] / a.ne[3];
    let wrow = a.dtype.row_size(k).unwrap_or(0);
    let brow = plan.row_bytes;
    let gemv = cols.len() == 1;
    let mut j = cols.start;
    while j < cols.end {
        let i11 = j % b.ne[1];
        let i12 = (j / b.ne[1]) % b.ne[2];
        let i13 = j / (b.ne[1] * b.ne[2]);
        // Columns j..j+nc share a batch, hence one weight matrix.
        let nc = (cols.end - j).min(b.ne[1] - i11);
        let (i02, i03) = (i12 / r2, i13 / r3);
        let col_ptr = |jj: usize| -> *const u8 {
            if plan.convert {
                // SAFETY: jj < nrows of src1, the work buffer holds them all.
                unsafe { p.wdata.add(jj * brow) as *const u8 }
            } else {
                // SAFETY: (i11 + jj - j, i12, i13) inside b.
                unsafe { b.at(0, i11 + (jj - j), i12, i13) as *const u8 }
            }
        };
        let row_ptr = |i: usize| -> *const u8 {
            match at {
                // SAFETY: the copy holds the chunk's rows.
                RowsAt::Copy(base) => unsafe { base.add((i - rows.start) * a.nb[1]) },
                // SAFETY: row index inside a (for groups: the first row of a group).
                _ => unsafe { a.at(0, i, i02, i03) as *const u8 },
            }
        };
        // SAFETY: dst element inside d.
        let out_ptr = |i: usize, jj: usize| -> *mut f32 {
            unsafe { d.at(i, i11 + (jj - j), i12, i13) as *mut f32 }
        };
        if let Some(t) = i8gemm {
            // SAFETY: the column facts of src1 row j follow the converted rows (convert_src1).
            let meta = unsafe {
                (p.wdata.add(i8_meta_offset(plan, b.nrows())) as *const [u32; 2])
                    .add(j * meta_per_col(b))
            };
            let g = GemmArgs {
                k,
                meta,
                a0: row_ptr(rows.start),
                lda: a.nb[1],
                nrows: rows.len(),
                b0: col_ptr(j),
                ldb: brow,
                ncols: nc,
                out0: out_ptr(rows.start, j),
                ldo: d.nb[1] / 4,
            };
            // SAFETY: the chunk's rows and columns are inside a and the converted src1 (its
            // columns are brow apart in the work buffer); the results are this chunk's.
            if unsafe { arch::gemm_i8(t, &g) } {
                j += nc;
                continue;
            }
        }
        match plan.kernel.tiled {
            Some(t) => {
                // Float GEMM: split k so the chunk's rows and the current columns stay in L1
                // across column groups; partial sums accumulate in dst.
                let (kc, es) = match t {
                    Tiled::F32 if !gemv => (KC, 4),
                    Tiled::F16 | Tiled::Bf16 if !gemv => (KC, 2),
                    _ => (k, 0),
                };
                let mut kb = 0;
                while kb < k {
                    let kn = kc.min(k - kb);
                    let acc = kb > 0;
                    let off = kb * es;
                    // SAFETY: kb < k, so the offset stays inside the row.
                    let cp = |jj: usize| unsafe { col_ptr(jj).add(off) };
                    let panel = |jj: usize| Panel {
                        // SAFETY: as above.
                        a0: unsafe { row_ptr(rows.start).add(off) },
                        lda: a.nb[1],
                        nrows: rows.len(),
                        out0: out_ptr(rows.start, jj) as *mut u8,
                        ldo: d.nb[1],
                    };
                    let mut jj = j;
                    while jj < j + nc {
                        let left = j + nc - jj;
                        let pn = panel(jj);
                        macro_rules! quant_tile {
                            ($r:expr, $c:expr) => {{
                                let bc: [*const u8; $c] = std::array::from_fn(|c| cp(jj + c));
                                run_rows::<$r, $c>(t, kn, &pn, bc, acc);
                                jj += $c;
                            }};
                        }
                        let qc = t.gemm_cols();
                        if !gemv && t.is_quant() && left >= qc {
                            match qc {
                                #[cfg(target_arch = "aarch64")]
                                4 if !t.has_min() && !t.is_k_quant() => quant_tile!(4, 4),
                                2 => quant_tile!(4, 2),
                                4 => quant_tile!(2, 4),
                                6 => quant_tile!(1, 6),
                                // The wasm 4/5-bit tiles keep two accumulators a row (lanes =
                                // columns), so four rows fit V8's registers: 4×8 measured
                                // 1.16–1.28× (SmolLM2) and 1.12–1.18× (Qwen2.5) the 2×8 prompt
                                // in Chromium (relaxed build).
                                #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
                                8 if !t.is_k_quant() && (t.has_min() || wasm_simd_q5_0(t)) => {
                                    quant_tile!(4, 8)
                                }
                                8 if t.has_min() || t.is_k_quant() || wasm_simd_q5_0(t) => {
                                    quant_tile!(2, 8)
                                }
                                _ => quant_tile!(1, 8),
                            }
                        } else if !gemv && t.is_quant() && left >= 4 {
                            quant_tile!(1, 4);
                        } else if !gemv && t.is_quant() && left >= 2 {
                            quant_tile!(1, 2);
                        } else if !gemv
                            && matches!(t, Tiled::F32)
                            && left >= F32_GEMM_C
                            && (left != 4 || F32_GEMM_C != 3)
                        {
                            // (A 3-column tile leaves 4 = 2 + 2 to the two-column tiles below.)
                            let bc: [*const u8; F32_GEMM_C] = std::array::from_fn(|c| cp(jj + c));
                            run_rows::<F32_GEMM_R, F32_GEMM_C>(t, kn, &pn, bc, acc);
                            jj += F32_GEMM_C;
                        } else if !gemv && !t.is_quant() && left >= GEMM_C && left != 4 {
                            let bc: [*const u8; GEMM_C] = std::array::from_fn(|c| cp(jj + c));
                            run_rows::<GEMM_R, GEMM_C>(t, kn, &pn, bc, acc);
                            jj += GEMM_C;
                        } else if !gemv && !t.is_quant() && left >= 2 {
                            // 4 = 2 + 2 and 2 use two-column tiles rather than a lone column.
                            run_rows::<GEMM_R, 2>(t, kn, &pn, [cp(jj), cp(jj + 1)], acc);
                            jj += 2;
                        } else {
                            // Repacked groups: the GEMV that reads them (x86, wasm SIMD).
                            // SAFETY: the panel's rows are whole groups inside src0, the column
                            // inside its tensor; the results are this chunk's.
                            if gemv
                                && matches!(at, RowsAt::Groups)
                                && unsafe { arch::gemv_repacked(t, kn, &pn, cp(jj), acc) }
                            {
                                jj += 1;
                                continue;
                            }
                            // wasm: the 32-element quants' own GEMV (f32 lane = row).
                            // SAFETY: the panel's rows and the column are inside their
                            // tensors; the results are this chunk's.
                            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
                            if gemv
                                && !matches!(at, RowsAt::Groups)
                                && unsafe { arch::wasm32::gemv(t, kn, &pn, cp(jj), acc) }
                            {
                                jj += 1;
                                continue;
                            }
                            if matches!(at, RowsAt::Groups) {
                                // (supported() admits only what the repacked GEMV reads.)
                                p.fault(|| {
                                    format!("mul_mat: no GEMV for repacked {} weights", a.dtype)
                                });
                                jj += 1;
                                continue;
                            }
                            if t.is_k_quant() {
                                run_rows::<KGEMV_R, 1>(t, kn, &pn, [cp(jj)], acc);
                            } else {
                                run_rows::<GEMV_R, 1>(t, kn, &pn, [cp(jj)], acc);
                            }
                            jj += 1;
                        }
                    }
                    kb += kn;
                }
            }
            None => {
                for jj in j..j + nc {
                    let bp = col_ptr(jj);
                    // SAFETY: one converted row of brow bytes.
                    let bs = unsafe { std::slice::from_raw_parts(bp, brow) };
                    for i in rows.clone() {
                        // SAFETY: one weight row of wrow bytes.
                        let asl = unsafe { std::slice::from_raw_parts(row_ptr(i), wrow) };
                        let v = (plan.kernel.vec_dot)(k, asl, bs);
                        // SAFETY: output element inside dst; written by this thread only.
                        unsafe { *out_ptr(i, jj) = v };
                    }
                }
            }
        }
        j += nc;
    }
}

// ---------------------------------------------------------------------------------------------
// im2col, pool_2d, argmax, cross-entropy loss
// ---------------------------------------------------------------------------------------------

/// Read element (i0, i1, i2, i3) of an f32 or f16 tensor.
///
/// # Safety
/// Indices inside `t`.
#[inline]
unsafe fn read_f(t: &TensorRef, i0: usize, i1: usize, i2: usize, i3: usize) -> f32 {
    // SAFETY: caller keeps indices inside t.
    unsafe {
        let p = t.at(i0, i1, i2, i3);
        match t.dtype {
            DType::F32 => (p as *const f32).read_unaligned(),
            _ => f16::from_bits((p as *const u16).read_unaligned()).to_f32(),
        }
    }
}

/// Write element `p` of type `dtype` (f32 or f16).
///
/// # Safety
/// `p` addresses one element of `dtype`.
#[inline]
unsafe fn write_f(dtype: DType, p: *mut u8, v: f32) {
    // SAFETY: caller.
    unsafe {
        match dtype {
            DType::F32 => (p as *mut f32).write_unaligned(v),
            _ => (p as *mut u16).write_unaligned(f16::from_f32(v).to_bits()),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn im2col(
    p: &ComputeParams,
    node: &NodeRef,
    s: [usize; 2],
    pd: [usize; 2],
    dl: [usize; 2],
    is_2d: bool,
) {
    let (k, x, d) = (node.src0(), node.src1(), &node.dst);
    // 1D is 2D with one input row and one kernel row.
    let (iw, ih, ic) = if is_2d {
        (x.ne[0], x.ne[1], x.ne[2])
    } else {
        (x.ne[0], 1, x.ne[1])
    };
    let (kw, kh) = if is_2d {
        (k.ne[0], k.ne[1])
    } else {
        (k.ne[0], 1)
    };
    let (ow, oh, n) = if is_2d {
        (d.ne[1], d.ne[2], d.ne[3])
    } else {
        (d.ne[1], 1, d.ne[2])
    };
    // One output column (patch) per (ow, oh, n); split them across threads.
    for patch in thread_range(ow * oh * n, p.ith, p.nth) {
        let ox = patch % ow;
        let oy = (patch / ow) % oh;
        let b = patch / (ow * oh);
        let (d1, d2, d3) = if is_2d { (ox, oy, b) } else { (ox, b, 0) };
        for c in 0..ic {
            for ky in 0..kh {
                let sy = (oy * s[1] + ky * dl[1]) as isize - pd[1] as isize;
                for kx in 0..kw {
                    let sx = (ox * s[0] + kx * dl[0]) as isize - pd[0] as isize;
                    let v = if sx < 0 || sy < 0 || sx as usize >= iw || sy as usize >= ih {
                        0.0
                    } else if is_2d {
                        // SAFETY: (sx, sy, c, b) inside the input.
                        unsafe { read_f(x, sx as usize, sy as usize, c, b) }
                    } else {
                        // SAFETY: (sx, c, b) inside the input.
                        unsafe { read_f(x, sx as usize, c, b, 0) }
                    };
                    let i0 = c * kh * kw + ky * kw + kx;
                    // SAFETY: (i0, d1, d2, d3) inside dst, one patch per thread.
                    unsafe { write_f(d.dtype, d.at(i0, d1, d2, d3), v) };
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn pool_2d(
    p: &ComputeParams,
    node: &NodeRef,
    op: PoolOp,
    k: [usize; 2],
    s: [usize; 2],
    pd: [usize; 2],
) {
    let (x, d) = (node.src0(), &node.dst);
    let area = (k[0] * k[1]) as f32;
    // One output row per (oy, i2, i3).
    for row in thread_range(d.nrows(), p.ith, p.nth) {
        let oy = row % d.ne[1];
        let i2 = (row / d.ne[1]) % d.ne[2];
        let i3 = row / (d.ne[1] * d.ne[2]);
        let y0 = (oy * s[1]) as isize - pd[1] as isize;
        for ox in 0..d.ne[0] {
            let x0 = (ox * s[0]) as isize - pd[0] as isize;
            let mut acc = match op {
                PoolOp::Max => -f32::MAX,
                PoolOp::Avg => 0.0,
            };
            for ky in 0..k[1] as isize {
                let y = y0 + ky;
                if y < 0 || y as usize >= x.ne[1] {
                    continue;
                }
                for kx in 0..k[0] as isize {
                    let xx = x0 + kx;
                    if xx < 0 || xx as usize >= x.ne[0] {
                        continue;
                    }
                    // SAFETY: (xx, y, i2, i3) inside the input.
                    let v = unsafe { read_f(x, xx as usize, y as usize, i2, i3) };
                    match op {
                        PoolOp::Max => {
                            if v > acc {
                                acc = v
                            }
                        }
                        PoolOp::Avg => acc += v,
                    }
                }
            }
            if op == PoolOp::Avg {
                acc /= area;
            }
            // SAFETY: output element inside dst; rows split across threads.
            unsafe { *(d.at(ox, oy, i2, i3) as *mut f32) = acc };
        }
    }
}

fn argmax(p: &ComputeParams, node: &NodeRef) {
    let (x, d) = (node.src0(), &node.dst);
    for r in thread_range(x.ne[1], p.ith, p.nth) {
        let mut best = f32::NEG_INFINITY;
        let mut idx = 0usize;
        for i in 0..x.ne[0] {
            // SAFETY: (i, r) inside the f32 input.
            let v = unsafe { *(x.at(i, r, 0, 0) as *const f32) };
            // ggml: running max, the index of the last element equal to it.
            best = best.max(v);
            if v == best {
                idx = i;
            }
        }
        // SAFETY: element r of the i32 result.
        unsafe { *(d.at(r, 0, 0, 0) as *mut i32) = idx as i32 };
    }
}

/// Per-thread slots of f64 partial sums in the work buffer, one cache line apart.
const SLOT: usize = 64;

fn cross_entropy_loss(p: &ComputeParams, node: &NodeRef) {
    let (x, y, d) = (node.src0(), node.src1(), &node.dst);
    let nc = x.ne[0];
    let nr = x.nrows();
    let mut total = 0f64;
    for r in thread_range(nr, p.ith, p.nth) {
        let (i1, i2, i3) = (
            r % x.ne[1],
            (r / x.ne[1]) % x.ne[2],
            r / (x.ne[1] * x.ne[2]),
        );
        // SAFETY: row r of both f32 tensors holds nc elements at stride nb[0].
        let xv = |i: usize| unsafe { *(x.at(i, i1, i2, i3) as *const f32) } as f64;
        // SAFETY: as above.
        let yv = |i: usize| unsafe { *(y.at(i, i1, i2, i3) as *const f32) } as f64;
        let max = (0..nc).map(xv).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = (0..nc).map(|i| (xv(i) - max).exp()).sum();
        let lse = sum.ln() + max;
        total += (0..nc).map(|i| yv(i) * (xv(i) - lse)).sum::<f64>();
    }
    // SAFETY: the work buffer has nth slots (work_size); each thread writes its own.
    unsafe { *(p.wdata.add(p.ith * SLOT) as *mut f64) = total };
    p.barrier.wait();
    if p.ith == 0 {
        let mut s = 0f64;
        for t in 0..p.nth {
            // SAFETY: written by thread t before the barrier.
            s += unsafe { *(p.wdata.add(t * SLOT) as *const f64) };
        }
        // SAFETY: the one-element f32 result.
        unsafe { *(d.ptr as *mut f32) = (-s / nr as f64) as f32 };
    }
}

// ---------------------------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------------------------

fn is_f32_or_f16(t: &TensorRef) -> bool {
    matches!(t.dtype, DType::F32 | DType::F16)
}

pub fn supported(node: &NodeRef) -> bool {
    let d = &node.dst;
    match node.op {
        Op::MulMat => mul_mat_supported(node),
        Op::Im2Col { .. } => {
            node.src[0].is_some()
                && node.src[1].is_some_and(|x| is_f32_or_f16(&x))
                && is_f32_or_f16(d)
        }
        Op::Pool2d { .. } => {
            node.src[0].is_some_and(|x| is_f32_or_f16(&x)) && d.dtype == DType::F32
        }
        Op::Argmax => node.src[0].is_some_and(|x| x.dtype == DType::F32) && d.dtype == DType::I32,
        Op::CrossEntropyLoss => {
            matches!((node.src[0], node.src[1]), (Some(x), Some(y))
                if x.dtype == DType::F32 && y.dtype == DType::F32 && x.ne == y.ne)
                && d.dtype == DType::F32
        }
        _ => false,
    }
}

pub fn work_size(node: &NodeRef, nth: usize) -> usize {
    match node.op {
        Op::MulMat => mul_mat_work_size(node, nth),
        Op::CrossEntropyLoss => nth * SLOT,
        _ => 0,
    }
}

pub fn forward(p: &ComputeParams, node: &NodeRef) {
    match node.op {
        Op::MulMat => mul_mat(p, node),
        Op::Im2Col {
            s0,
            s1,
            p0,
            p1,
            d0,
            d1,
            is_2d,
        } => im2col(p, node, [s0, s1], [p0, p1], [d0, d1], is_2d),
        Op::Pool2d {
            op,
            k0,
            k1,
            s0,
            s1,
            p0,
            p1,
        } => pool_2d(p, node, op, [k0, k1], [s0, s1], [p0, p1]),
        Op::Argmax => argmax(p, node),
        Op::CrossEntropyLoss => cross_entropy_loss(p, node),
        _ => unreachable!("checked by supported"),
    }
}

/// wasm SIMD builds: q5_0 prompts in 2×8 tiles, each column block's preparation (the relaxed
/// build's permutation and offset sums, the SIMD128 build's sign extension) shared by two rows
/// (1×8 did it per row). Node 20, n = 120, k = 2048: relaxed 30.5 → 38.8 GFLOP/s, SIMD128
/// 33.5 → 38.4.
#[inline(always)]
fn wasm_simd_q5_0(t: Tiled) -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "simd128")) && matches!(t, Tiled::Q5_0)
}
