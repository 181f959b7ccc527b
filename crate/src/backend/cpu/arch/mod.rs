//! The CPU kernels of each instruction set, one folder per ISA (`x86/`: AVX2 + FMA + F16C,
//! detected at run time; `aarch64/`: NEON; `wasm32/`: SIMD128, and relaxed SIMD where the build
//! enables it), and the run-time dispatch to them:
//!
//! - every ISA folder installs its vec dots and row conversions into the CPU traits table
//!   ([`install`], called once by `backend::cpu::type_traits`);
//! - the f32/f16 vector kernels dispatch here ([`dot_f32`], [`axpy_f32`], …);
//! - the mul_mat register tiles ([`Tiled`]: R weight rows × C src1 columns at once) dispatch
//!   here ([`tile`], [`run_rows`]); the portable driver in `ops::matmul` picks the tile shapes.
//!
//! `portable.rs` holds what targets without an ISA folder run, and the scalar references.

/// Wrap a block-typed kernel `$k(n, &[X], &[Y]) -> f32` as a byte-slice `vec_dot`.
#[allow(unused_macros)]
macro_rules! erase_dot {
    ($name:ident, $x:ty, $y:ty, $k:path) => {
        fn $name(n: usize, x: &[u8], y: &[u8]) -> f32 {
            let xs = $crate::quant::cast_blocks::<$x>(x);
            let ys = $crate::quant::cast_blocks::<$y>(y);
            $k(n, &xs, &ys)
        }
    };
}

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
mod portable;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod wasm32;
#[cfg(target_arch = "x86_64")]
pub mod x86;

use half::f16;

pub use crate::quant::{dot_f16_ref, dot_f32_ref};
pub use portable::{axpy_f16_ref, axpy_f32_ref, exp_approx};
pub(crate) use portable::{GELU_COEF_A, GELU_SQRT_2_OVER_PI};

use super::traits::Table;

/// Tell this thread's GEMV kernels which weight bytes it reads after the current node (`len`
/// bytes at `p`; null: none known), so that the end of a panel prefetches them instead of
/// nothing (x86; a hint: a wrong one costs only useless prefetches).
pub fn set_next_read(
    #[allow(unused_variables)] p: *const u8,
    #[allow(unused_variables)] len: usize,
) {
    #[cfg(target_arch = "x86_64")]
    x86::set_next_read(p, len);
}

/// Whether the relaxed-SIMD wasm build sums its 8-bit dots split (i16 dots, one widening) rather
/// than with `i32x4.relaxed_dot_i8x16_i7x16_add_s`, as the engine's probe chose (the dot-add
/// costs five instructions on x86 without VNNI, one with it); `None` in other builds. Both give
/// the same results.
pub fn split_dots() -> Option<bool> {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    return Some(wasm32::split_dots());
    #[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    None
}

/// Tests: make the relaxed-SIMD wasm build's kernels take the split (`Some(true)`) or the
/// dot-add path (`Some(false)`) whatever the probe says; `None` gives the choice back to it.
/// Nothing in other builds.
#[doc(hidden)]
pub fn force_split_dots(#[allow(unused_variables)] split: Option<bool>) {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    wasm32::force_split_dots(split);
}

/// Whether the SIMD wasm builds' GEMVs over repacked weights touch the start of each page
/// 8 KiB ahead of their stream (wasm has no prefetch): `Some` once chosen by
/// [`set_page_touch`], `None` while not chosen (they touch) and in other builds. A load that
/// must complete before what follows it retires: it starts a page's stream early where the
/// hardware prefetchers stop at pages (Intel), and only stalls where they do not (AMD Zen 3:
/// 1.25–1.30× faster from DRAM without it).
pub fn page_touch() -> Option<bool> {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm32::page_touch();
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    None
}

/// Choose whether the SIMD wasm builds' GEMVs touch pages ahead ([`page_touch`]; `None`: not
/// chosen, they touch). Process-wide (every thread of the threads build); speed only, the
/// results are the same bits. Nothing in other builds.
pub fn set_page_touch(#[allow(unused_variables)] on: Option<bool>) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    wasm32::set_page_touch(on);
}

/// Replace the scalar entries of `t` with this machine's kernels.
pub(crate) fn install(#[allow(unused_variables)] t: &mut Table) {
    #[cfg(target_arch = "x86_64")]
    x86::install(t);
    #[cfg(target_arch = "aarch64")]
    aarch64::install(t);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    wasm32::install(t);
}

// ---------------------------------------------------------------------------------------------
// f32 / f16 vector kernels
// ---------------------------------------------------------------------------------------------

/// Σ x·y, the fastest kernel available.
pub fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        x86::dot_f32(x, y)
    }
    #[cfg(target_arch = "aarch64")]
    {
        aarch64::dot_f32(x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        wasm32::dot_f32(x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        dot_f32_ref(x, y)
    }
}

/// y += a·x, the fastest kernel available.
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        x86::axpy_f32(a, x, y)
    }
    #[cfg(target_arch = "aarch64")]
    {
        aarch64::axpy_f32(a, x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        wasm32::axpy_f32(a, x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        axpy_f32_ref(a, x, y)
    }
}

/// Σ x·y over f16 inputs, the fastest kernel available.
pub fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        x86::dot_f16(x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        wasm32::dot_f16(x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        dot_f16_ref(x, y)
    }
}

/// Whether the LLMs run the fused attention op by default here: where it has fast kernels and has
/// been measured to pay (x86-64 with AVX2/FMA/F16C, wasm32 SIMD128). Elsewhere mul_mat + soft_max
/// attention runs on the (SIMD) matmul tiles. aarch64 has NEON kernels for it (used when a model
/// asks for it, `--flash-attn on`) but keeps mul_mat + soft_max by default: no ARM hardware here to
/// time it, and under qemu it moved SmolLM2's last-position logits from 0.66 to 1.48 max abs off
/// llama.cpp's (KL 0.0013 → 0.007; llama.cpp rounds the softmax weights, or fused its V sums, to
/// f16, this op keeps them f32), past the LLM test's bound of 1.0.
pub fn fused_attention_pays() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::available()
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        true
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        false
    }
}

/// Dots of four f16 rows (each `q.len()` long) with the f32 vector `q`, where this machine has
/// a kernel for it (x86-64 AVX2, aarch64 NEON, wasm SIMD128); `None` elsewhere (the caller falls
/// back to one row at a time).
///
/// # Safety
/// Each `k[r]` points at `q.len()` readable f16 values.
#[allow(unused_variables)]
pub unsafe fn dot4_f16_f32(k: [*const f16; 4], q: &[f32]) -> Option<[f32; 4]> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as the caller guarantees.
        unsafe { x86::attention::dot4_f16_f32(k, q) }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: as the caller guarantees.
        Some(unsafe { aarch64::attention::dot4_f16_f32(k, q) })
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        let mut out = [[0f32; 4]];
        // SAFETY: as the caller guarantees.
        unsafe { wasm32::attention::dot4_heads_f16_f32(k, q, &mut out) };
        Some(out[0])
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        None
    }
}

/// `out[h]` = the dots of four f16 rows with each of `out.len()` query heads (`q`: the heads'
/// queries one after another, `q.len() / out.len()` values each, the rows' length), where this
/// machine has a kernel for it; false (nothing written) elsewhere. wasm converts each row once
/// for all heads; x86 (F16C) runs [`dot4_f16_f32`] per head.
///
/// # Safety
/// Each `k[r]` points at `q.len() / out.len()` readable f16 values.
#[allow(unused_variables)]
pub unsafe fn dot4_heads_f16_f32(k: [*const f16; 4], q: &[f32], out: &mut [[f32; 4]]) -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: as the caller guarantees.
        unsafe { wasm32::attention::dot4_heads_f16_f32(k, q, out) };
        true
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        let g = out.len();
        let dk = q.len().checked_div(g).unwrap_or(0);
        for (h, o) in out.iter_mut().enumerate() {
            // SAFETY: as the caller guarantees.
            match unsafe { dot4_f16_f32(k, &q[h * dk..(h + 1) * dk]) } {
                Some(d) => *o = d,
                None => return false,
            }
        }
        true
    }
}

/// The online softmax's step over one block of scores: the largest of `sc`. Eight running
/// maxima (the comparisons vectorize; one chain of `max` was latency-bound).
pub fn max_f32(sc: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: the CPU has AVX2/FMA/F16C (checked).
        return unsafe { x86::attention::max_f32(sc) };
    }
    max_f32_body(sc)
}

#[inline(always)]
pub(crate) fn max_f32_body(sc: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let mut chunks = sc.chunks_exact(8);
    for c in &mut chunks {
        for (m, x) in m.iter_mut().zip(c) {
            *m = m.max(*x);
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    m.iter().fold(tail, |a, &x| a.max(x))
}

/// The online softmax's step over one block of scores: `sc[i] = exp(sc[i] − max)`
/// ([`exp_approx`]), returning their sum (eight running sums, then those in order).
pub fn exp_sum_f32(sc: &mut [f32], max: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: the CPU has AVX2/FMA/F16C (checked).
        return unsafe { x86::attention::exp_sum_f32(sc, max) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm32::unary::exp_sum_f32(sc, max);
    #[allow(unreachable_code)]
    exp_sum_f32_body(sc, max)
}

/// An element-wise function with a row kernel ([`unary_row`]).
#[derive(Clone, Copy)]
pub enum UnaryRow {
    /// x / (1 + e^−x) ([`exp_approx`]).
    Silu,
    /// 1 / (1 + e^−x).
    Sigmoid,
    /// x / (1 + e^(−2u)), u = √(2/π)·x·(1 + 0.044715·x²) (GELU, tanh form).
    Gelu,
}

/// `dst[i] = f(src[i])` for i < n with this machine's row kernel, the same bits as the scalar
/// function (wasm SIMD128; elsewhere the compiler's vectorization of the scalar loop does as
/// well): false (nothing written) where there is none.
///
/// # Safety
/// `src..src + n` readable and `dst..dst + n` writable f32 (they may be the same row).
#[allow(unused_variables)]
pub unsafe fn unary_row(f: UnaryRow, src: *const f32, dst: *mut f32, n: usize) -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: as the caller guarantees.
        unsafe { wasm32::unary::unary_row(f, src, dst, n) };
        true
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    false
}

#[inline(always)]
pub(crate) fn exp_sum_f32_body(sc: &mut [f32], max: f32) -> f32 {
    for x in sc.iter_mut() {
        *x = exp_approx(*x - max);
    }
    let mut s = [0f32; 8];
    let mut chunks = sc.chunks_exact(8);
    for c in &mut chunks {
        for (s, x) in s.iter_mut().zip(c) {
            *s += *x;
        }
    }
    let tail: f32 = chunks.remainder().iter().sum();
    s.iter().sum::<f32>() + tail
}

/// A block of attention scores: `out[l · ostride + r]` = the dot of f16 K row r (`n` rows,
/// `kstride` bytes apart from `k0`) with query l (`q`: `nl` queries of dk = `q.len() / nl`
/// values one after another), for every r < n and l < nl. The same bits as
/// [`dot4_heads_f16_f32`] over the rows four at a time: one call a block instead of one per four
/// rows (a generated token's attention over a long context is mostly such calls). false
/// (nothing written) where this machine has no kernel.
///
/// # Safety
/// `k0 + r · kstride` points at dk readable f16 values for every r < n;
/// `out.len() ≥ (nl − 1) · ostride + n` and `ostride ≥ n` when nl > 0.
#[allow(unused_variables)]
pub unsafe fn dots_f16_block(
    k0: *const u8,
    kstride: usize,
    n: usize,
    q: &[f32],
    nl: usize,
    out: &mut [f32],
    ostride: usize,
) -> bool {
    if nl == 0 || n == 0 {
        return true;
    }
    assert!(
        nl <= MAX_BLOCK_LANES && ostride >= n && out.len() >= (nl - 1) * ostride + n,
        "dots_f16_block: lengths"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as the caller guarantees (lengths checked above).
    if unsafe { x86::attention::dots_f16_block(k0, kstride, n, q, nl, out, ostride) } {
        return true;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    // SAFETY: as the caller guarantees (lengths checked above).
    if unsafe { wasm32::attention::dots_f16_block(k0, kstride, n, q, nl, out, ostride) } {
        return true;
    }
    let mut dots = [[0f32; 4]; MAX_BLOCK_LANES];
    let mut j = 0;
    while j < n {
        let cnt = (n - j).min(4);
        // SAFETY: rows j..j + cnt < n (caller).
        let rows = unsafe { rows4(k0, kstride, j, cnt) };
        // SAFETY: each row holds dk values (caller).
        if !unsafe { dot4_heads_f16_f32(rows, q, &mut dots[..nl]) } {
            return false;
        }
        for (l, d) in dots[..nl].iter().enumerate() {
            put4(out, l * ostride + j, d, cnt);
        }
        j += cnt;
    }
    true
}

/// The four f16 rows j .. j + 4 of rows `stride` bytes apart from `base` where `cnt` (1..=4) of
/// them exist: past the last the last again, so that the four-row kernels read only rows that
/// exist (their results for those are not stored).
///
/// # Safety
/// Rows j .. j + cnt exist (the pointers are only formed, not read, here).
#[inline(always)]
pub(crate) unsafe fn rows4(
    base: *const u8,
    stride: usize,
    j: usize,
    cnt: usize,
) -> [*const f16; 4] {
    // SAFETY: offsets of rows j .. j + cnt, inside the caller's rows.
    [0, 1, 2, 3].map(|r| unsafe { base.add((j + r.min(cnt - 1)) * stride) } as *const f16)
}

/// `out[at..at + cnt] = d[..cnt]` (cnt ≤ 4): four scores of a lane, a fixed 16-byte move when
/// cnt is 4 rather than the `memcpy` (wasm: `memory.copy`) call a copy of `cnt` values became,
/// once a lane per four K rows (4–6 % of the native attention's time at a 150-token context).
#[inline(always)]
pub(crate) fn put4(out: &mut [f32], at: usize, d: &[f32; 4], cnt: usize) {
    if cnt == 4 {
        out[at..at + 4].copy_from_slice(d);
    } else {
        for (o, x) in out[at..at + cnt].iter_mut().zip(d) {
            *o = *x;
        }
    }
}

/// Lanes (query rows) [`dots_f16_block`] and [`v_block_f16`] take at most.
pub const MAX_BLOCK_LANES: usize = 32;

/// The V update of a block of attention: for each f16 V row j < n (`vstride` bytes apart from
/// `v0`), in order, and each lane l < nl whose weight w = `ws[l · wstride + j]` is not 0,
/// `accs[l · dv ..][..dv] += w · row j` (dv = `accs.len() / nl`). The same bits as
/// [`axpy_heads_f16`] row by row; x86 keeps a lane's accumulators in registers over
/// the block instead of loading and storing them for every row.
///
/// # Safety
/// `v0 + j · vstride` points at dv readable f16 values for every j < n; `ws.len() ≥ (nl − 1) ·
/// wstride + n` and `wstride ≥ n` when nl > 0.
pub unsafe fn v_block_f16(
    ws: &[f32],
    wstride: usize,
    nl: usize,
    v0: *const u8,
    vstride: usize,
    n: usize,
    accs: &mut [f32],
) {
    if nl == 0 || n == 0 {
        return;
    }
    assert!(
        nl <= MAX_BLOCK_LANES
            && wstride >= n
            && ws.len() >= (nl - 1) * wstride + n
            && accs.len().is_multiple_of(nl),
        "v_block_f16: lengths"
    );
    let dv = accs.len() / nl;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as the caller guarantees (lengths checked above).
    if unsafe { x86::attention::v_block_f16(ws, wstride, nl, v0, vstride, n, accs) } {
        return;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    // SAFETY: as the caller guarantees (lengths checked above).
    if unsafe { wasm32::attention::v_block_f16(ws, wstride, nl, v0, vstride, n, accs) } {
        return;
    }
    // Elsewhere row by row.
    {
        let mut w = [0f32; MAX_BLOCK_LANES];
        for j in 0..n {
            for (l, x) in w[..nl].iter_mut().enumerate() {
                *x = ws[l * wstride + j];
            }
            if w[..nl].iter().all(|&x| x == 0.0) {
                continue;
            }
            // SAFETY: row j holds dv f16 values (caller); f16 rows are 2-byte aligned.
            let row = unsafe { std::slice::from_raw_parts(v0.add(j * vstride) as *const f16, dv) };
            axpy_heads_f16(&w[..nl], row, accs);
        }
    }
}

/// `accs[h] += ws[h] · v` for every head h (`accs`: `ws.len()` rows of `v.len()` values), the
/// f16 row converted once for all heads where a kernel exists (x86-64 AVX2, aarch64 NEON, wasm
/// SIMD128).
pub fn axpy_heads_f16(ws: &[f32], v: &[f16], accs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if x86::attention::axpy_heads_f16(ws, v, accs) {
        return;
    }
    #[cfg(target_arch = "aarch64")]
    aarch64::attention::axpy_heads_f16(ws, v, accs);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    wasm32::attention::axpy_heads_f16(ws, v, accs);
    #[cfg(not(any(
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    for (w, acc) in ws.iter().zip(accs.chunks_exact_mut(v.len().max(1))) {
        if *w != 0.0 {
            axpy_f16(*w, v, acc);
        }
    }
}

/// y += a·x with f16 `x` and f32 `y`, the fastest kernel available.
pub fn axpy_f16(a: f32, x: &[f16], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        x86::axpy_f16(a, x, y)
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        wasm32::axpy_f16(a, x, y)
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        axpy_f16_ref(a, x, y)
    }
}

// ---------------------------------------------------------------------------------------------
// mul_mat register tiles: out[r][c] = dot(a[r], b[c]) over n elements
// ---------------------------------------------------------------------------------------------

/// Which register tile a weight type runs ([`tile`], [`run_rows`]).
#[derive(Clone, Copy, PartialEq, Eq)]
// Every variant has an AVX2, a NEON and a SIMD128 tile; other targets use the portable float tile
// only.
#[cfg_attr(
    not(all(target_arch = "wasm32", target_feature = "simd128")),
    allow(dead_code)
)]
pub(crate) enum Tiled {
    F32,
    F16,
    Bf16,
    /// q4_0 weights × q8_0 columns (AVX2 and SIMD128).
    Q4_0,
    /// q8_0 weights × q8_0 columns (AVX2 and SIMD128).
    Q8_0,
    /// q4_K weights × q8_K columns (AVX2 and SIMD128).
    Q4K,
    /// q4_1 weights × q8_1 columns (AVX2 and SIMD128).
    Q4_1,
    /// q5_0 weights × q8_0 columns (AVX2 and SIMD128).
    Q5_0,
    /// q5_1 weights × q8_1 columns (AVX2 and SIMD128).
    Q5_1,
    /// q5_K weights × q8_K columns (AVX2 and SIMD128).
    Q5K,
    /// q6_K weights × q8_K columns (AVX2 and SIMD128).
    Q6K,
}

impl Tiled {
    /// The quantized tile kernel of weights of type `dtype`, if any.
    pub(crate) fn quantized(dtype: crate::DType) -> Option<Tiled> {
        use crate::DType as D;
        Some(match dtype {
            D::Q4_0 => Tiled::Q4_0,
            D::Q4_1 => Tiled::Q4_1,
            D::Q5_0 => Tiled::Q5_0,
            D::Q5_1 => Tiled::Q5_1,
            D::Q8_0 => Tiled::Q8_0,
            D::Q4_K => Tiled::Q4K,
            D::Q5_K => Tiled::Q5K,
            D::Q6_K => Tiled::Q6K,
            _ => return None,
        })
    }

    /// Quantized tiles use their own GEMM tile shape.
    pub(crate) fn is_quant(self) -> bool {
        !matches!(self, Tiled::F32 | Tiled::F16 | Tiled::Bf16)
    }

    /// Columns of the quantized GEMM tile. Measured per type (CPU time, n = 128, k = 2048):
    /// q4_0 1×6, q5_0 1×8, and 2×8 for the types with a min term (q4_1, q5_1) and the
    /// k-quants, 10-25 % faster than the 2×4 tile used before; wider tiles spill registers.
    /// q8_0 keeps 2×4: 1×8 was 10 % faster at k = 2048 but 25 % slower at k = 4096 (8 columns
    /// of 4.3 KB leave L1).
    pub(crate) fn gemm_cols(self) -> usize {
        // wasm: q4_0 4×2, so that each column block's decoding is shared by 4 rows (1×6 decoded
        // it per row: 4×2 measured +10 % in the SIMD128 build, +45 % in the relaxed one, at
        // n = 16, k = 4096). q8_0 measured the same at 4×2; q4_1 and q5_0 slower: they keep theirs.
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if matches!(self, Tiled::Q4_0) {
            return 2;
        }
        // aarch64: 4 columns for every type (4×4 tiles without a min term, 2×4 with one and for
        // the k-quants, `ops/matmul`): 32 vector registers hold 16 accumulators and the operands,
        // and SMMLA works on column pairs. (Chosen by register count; not measured on hardware.)
        if cfg!(target_arch = "aarch64") {
            return 4;
        }
        match self {
            Tiled::Q8_0 => 4,
            Tiled::Q4_0 => 6,
            _ => 8,
        }
    }

    /// 32-element types with a min term (x = d·q + m; q8_1 columns).
    pub(crate) fn has_min(self) -> bool {
        matches!(self, Tiled::Q4_1 | Tiled::Q5_1)
    }

    /// 256-element super-block types (q8_K columns).
    pub(crate) fn is_k_quant(self) -> bool {
        matches!(self, Tiled::Q4K | Tiled::Q5K | Tiled::Q6K)
    }
}

/// Whether this machine has the quantized register tiles (AVX2 natively, NEON on aarch64,
/// SIMD128 in wasm: every ISA tiles the same types).
pub(crate) fn has_quant_tiles() -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86::available();
    #[cfg(any(
        all(target_arch = "wasm32", target_feature = "simd128"),
        target_arch = "aarch64"
    ))]
    return true;
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    false
}

/// R×C dot products of length `n` between weight rows `a` and columns `b` of type `t`.
///
/// # Safety
/// Every pointer must address at least `n` elements of `t`.
#[inline]
pub(crate) unsafe fn tile<const R: usize, const C: usize>(
    t: Tiled,
    n: usize,
    a: [*const u8; R],
    b: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if x86::available() {
            // SAFETY: the CPU has AVX2/FMA/F16C (checked); pointer validity from the caller.
            unsafe {
                match t {
                    Tiled::F32 => x86::tiles::tile_f32::<R, C>(n, a, b, out),
                    Tiled::F16 => x86::tiles::tile_f16::<R, C>(n, a, b, out),
                    Tiled::Bf16 => x86::tiles::tile_bf16::<R, C>(n, a, b, out),
                    Tiled::Q4_0 => x86::tiles::tile_q4_0::<R, C>(n, a, b, out),
                    Tiled::Q8_0 => x86::tiles::tile_q8_0::<R, C>(n, a, b, out),
                    Tiled::Q4K => x86::tiles::tile_q4_k::<R, C>(n, a, b, out),
                    Tiled::Q4_1 => x86::tiles::tile_q4_1::<R, C>(n, a, b, out),
                    Tiled::Q5_0 => x86::tiles::tile_q5_0::<R, C>(n, a, b, out),
                    Tiled::Q5_1 => x86::tiles::tile_q5_1::<R, C>(n, a, b, out),
                    Tiled::Q5K => x86::tiles::tile_q5_k::<R, C>(n, a, b, out),
                    Tiled::Q6K => x86::tiles::tile_q6_k::<R, C>(n, a, b, out),
                }
            }
            return;
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is a build-time feature here; pointer validity from the caller.
        unsafe { wasm32::tiles::tile::<R, C>(t, n, a, b, out) };
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: `best` is an ISA this CPU has (detected); pointer validity from the caller.
        unsafe { aarch64::tiles::tile::<R, C>(aarch64::tiles::best(), t, n, a, b, out) };
    }
    #[cfg(not(any(
        all(target_arch = "wasm32", target_feature = "simd128"),
        target_arch = "aarch64"
    )))]
    {
        // SAFETY: forwarded from the caller.
        unsafe { portable::tile_portable::<R, C>(t, n, a, b, out) };
    }
}

/// Weight rows, their (converted) columns and where the results go, for [`gemm_i8`]:
/// out[c·ldo + r] (f32) = row r · column c.
#[derive(Clone, Copy)]
// Read by the x86 GEMM only; other targets build it and get false from gemm_i8.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct GemmArgs {
    /// Elements per row (a multiple of 32).
    pub(crate) k: usize,
    pub(crate) a0: *const u8,
    /// Bytes between weight rows.
    pub(crate) lda: usize,
    pub(crate) nrows: usize,
    /// First column (a row of k elements of the weight type's vec_dot type).
    pub(crate) b0: *const u8,
    /// Bytes between columns.
    pub(crate) ldb: usize,
    pub(crate) ncols: usize,
    /// k/32 [`gemm_i8_meta`] entries per column, column after column.
    pub(crate) meta: *const [u32; 2],
    /// f32 result of row 0, column 0.
    pub(crate) out0: *mut f32,
    /// f32 elements between result columns.
    pub(crate) ldo: usize,
}

/// Whether this machine has an integer-dot GEMM for weights `t` ([`gemm_i8`]: x86 with AVX2,
/// AVX-VNNI or AVX-512 VNNI; q4_0, q4_1, q5_0, q5_1, and q8_0 with VNNI).
#[allow(unused_variables)]
pub(crate) fn has_gemm_i8(t: Tiled) -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86::gemm::best().is_some_and(|isa| isa.handles(t));
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The per-block column facts [`gemm_i8`] reads (`GemmArgs::meta`) of converted column blocks
/// `y` (whole blocks) into `meta` (one entry per block).
#[allow(unused_variables)]
pub(crate) fn gemm_i8_meta(t: Tiled, y: &[u8], meta: &mut [[u32; 2]]) {
    #[cfg(target_arch = "x86_64")]
    x86::gemm::column_meta(t, y, meta);
}

/// All rows × columns of `g` with the integer-dot GEMM; false (nothing done) where
/// [`has_gemm_i8`] is false.
///
/// # Safety
/// Rows hold k elements of `t`, columns k elements of its vec_dot type; the results are inside
/// dst and written by this thread only.
#[allow(unused_variables)]
pub(crate) unsafe fn gemm_i8(t: Tiled, g: &GemmArgs) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = x86::gemm::best() {
        // SAFETY: forwarded from the caller.
        return unsafe { x86::gemm::gemm(isa, t, g) };
    }
    false
}

/// A block of weight rows and where their results go.
#[derive(Clone, Copy)]
pub(crate) struct Panel {
    /// First weight row (already offset to the current k-block).
    pub(crate) a0: *const u8,
    /// Bytes between weight rows.
    pub(crate) lda: usize,
    pub(crate) nrows: usize,
    /// dst element of the first row and first column.
    pub(crate) out0: *mut u8,
    /// Bytes between dst columns (dst rows are contiguous f32).
    pub(crate) ldo: usize,
}

/// Whether this CPU's GEMV reads weights of `dtype` repacked at load (`backend::cpu::repack`)
/// directly: the wasm SIMD builds for every repacked type; x86-64 with AVX-512 VNNI or plain
/// AVX2 (the paired GEMV) for q4_0, q4_1, q5_0 and q5_1, and with AVX-512 VNNI or AVX-VNNI for
/// q8_0. Elsewhere a repacked product reads a plain copy (correct, slower).
pub fn gemv_reads_repacked(dtype: crate::DType) -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        super::repack::spec(dtype).is_some()
    }
    #[cfg(target_arch = "x86_64")]
    {
        match (x86::gemm::best(), Tiled::quantized(dtype)) {
            (Some(isa), Some(t)) => x86::gemv::handles_repacked(isa, t),
            _ => false,
        }
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        let _ = dtype;
        false
    }
}

/// The GEMV of a panel of repacked groups (see [`gemv_reads_repacked`]); false (nothing done)
/// where this machine has none for `t` and `k`.
///
/// # Safety
/// The panel's rows are whole groups of four in the repacked layout (`pn.a0` a group's start),
/// `y` one column of the vec_dot type of k elements; the results are inside dst and written by
/// this thread only.
#[allow(unused_variables)]
pub(crate) unsafe fn gemv_repacked(
    t: Tiled,
    k: usize,
    pn: &Panel,
    y: *const u8,
    accumulate: bool,
) -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: forwarded from the caller.
        unsafe { wasm32::gemv_repacked(t, k, pn, y, accumulate) }
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: forwarded from the caller.
        x86::gemm::best()
            .is_some_and(|isa| unsafe { x86::gemv::panel_repacked(isa, t, k, pn, y, accumulate) })
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        false
    }
}

/// All rows of the panel against the C columns `bc`, R rows at a time (then one at a time);
/// results are stored, or added when `accumulate`.
#[inline]
pub(crate) fn run_rows<const R: usize, const C: usize>(
    t: Tiled,
    k: usize,
    pn: &Panel,
    bc: [*const u8; C],
    accumulate: bool,
) {
    #[cfg(target_arch = "x86_64")]
    {
        // One column (token generation): the integer-dot GEMV where this CPU has one for t.
        if C == 1 {
            if let Some(isa) = x86::gemm::best() {
                // SAFETY: the panel and the column are inside their tensors (caller).
                if unsafe { x86::gemv::panel(isa, t, k, pn, bc[0], accumulate) } {
                    return;
                }
            }
        }
        if x86::available() {
            // SAFETY: AVX2/FMA/F16C present; the panel and columns are inside their tensors.
            unsafe {
                match t {
                    Tiled::F32 => x86::tiles::panel_f32::<R, C>(k, pn, bc, accumulate),
                    Tiled::F16 => x86::tiles::panel_f16::<R, C>(k, pn, bc, accumulate),
                    Tiled::Bf16 => x86::tiles::panel_bf16::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q4_0 => x86::tiles::panel_q4_0::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q8_0 => x86::tiles::panel_q8_0::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q4K => x86::tiles::panel_q4_k::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q4_1 => x86::tiles::panel_q4_1::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q5_0 => x86::tiles::panel_q5_0::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q5_1 => x86::tiles::panel_q5_1::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q5K => x86::tiles::panel_q5_k::<R, C>(k, pn, bc, accumulate),
                    Tiled::Q6K => x86::tiles::panel_q6_k::<R, C>(k, pn, bc, accumulate),
                }
            }
            return;
        }
    }
    // SAFETY: the panel and columns are inside their tensors (caller).
    unsafe {
        panel_generic::<R, C>(
            pn,
            accumulate,
            |ar: [*const u8; R], o: &mut [[f32; C]; R]| tile::<R, C>(t, k, ar, bc, o),
        );
        let mut i = pn.nrows / R * R;
        while i < pn.nrows {
            let mut o = [[0f32; C]; 1];
            tile::<1, C>(t, k, [pn.a0.add(i * pn.lda)], bc, &mut o);
            store_tile::<1, C>(pn, i, &o, accumulate);
            i += 1;
        }
    }
}

/// Write (or add) an R×C result tile for rows i.. of the panel.
///
/// # Safety
/// Rows i..i+R and the C columns are inside dst.
#[inline(always)]
pub(crate) unsafe fn store_tile<const R: usize, const C: usize>(
    pn: &Panel,
    i: usize,
    o: &[[f32; C]; R],
    accumulate: bool,
) {
    for (r, orow) in o.iter().enumerate() {
        for (c, v) in orow.iter().enumerate() {
            // SAFETY: caller.
            unsafe {
                let p = pn.out0.add(c * pn.ldo + (i + r) * 4) as *mut f32;
                if accumulate {
                    *p += *v
                } else {
                    *p = *v
                }
            }
        }
    }
}

/// The full R-row tiles of a panel (the remainder rows are left to the caller).
///
/// # Safety
/// As [`store_tile`]; `tile` must be safe to call on the panel's rows.
#[inline(always)]
pub(crate) unsafe fn panel_generic<const R: usize, const C: usize>(
    pn: &Panel,
    accumulate: bool,
    mut tile: impl FnMut([*const u8; R], &mut [[f32; C]; R]),
) {
    let mut i = 0;
    while i + R <= pn.nrows {
        // SAFETY: rows i..i+R are inside the panel.
        let ar: [*const u8; R] = std::array::from_fn(|r| unsafe { pn.a0.add((i + r) * pn.lda) });
        let mut o = [[0f32; C]; R];
        tile(ar, &mut o);
        // SAFETY: caller.
        unsafe { store_tile::<R, C>(pn, i, &o, accumulate) };
        i += R;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, seed: usize) -> Vec<Vec<f16>> {
        (0..4)
            .map(|r| {
                (0..n)
                    .map(|i| f16::from_f32(((i * 7 + r * 3 + seed) % 11) as f32 / 5.0 - 1.0))
                    .collect()
            })
            .collect()
    }

    /// The fused attention's K dots on this machine's kernel (x86 AVX2, aarch64 NEON; skipped
    /// where there is none), one head and three heads at a time, against f64 sums.
    #[test]
    fn attention_dots_match_scalar_on_odd_lengths() {
        for n in [1usize, 7, 8, 9, 20, 64, 67] {
            let rows = rows(n, 0);
            let q: Vec<f32> = (0..3 * n)
                .map(|i| ((i * 5) % 13) as f32 / 6.0 - 1.0)
                .collect();
            let ptrs = [0, 1, 2, 3].map(|r| rows[r].as_ptr());
            let mut heads = [[0f32; 4]; 3];
            // SAFETY: every row holds n values; q holds three queries of n.
            let (Some(one), true) = (unsafe { dot4_f16_f32(ptrs, &q[..n]) }, unsafe {
                dot4_heads_f16_f32(ptrs, &q, &mut heads)
            }) else {
                eprintln!("dot4_f16_f32: no kernel on this machine, skipped");
                return;
            };
            assert_eq!(one, heads[0], "n {n}: one head vs three");
            for (h, got) in heads.iter().enumerate() {
                for r in 0..4 {
                    let want: f64 = rows[r]
                        .iter()
                        .zip(&q[h * n..(h + 1) * n])
                        .map(|(k, q)| k.to_f64() * *q as f64)
                        .sum();
                    assert!(
                        (got[r] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "n {n} head {h} row {r}: {} vs {want}",
                        got[r]
                    );
                }
            }
        }
    }

    /// The V update (every target: its kernel, or the per-head axpy) against f64, a zero weight
    /// leaving its head alone.
    #[test]
    fn axpy_heads_matches_scalar_on_odd_lengths() {
        for n in [1usize, 7, 8, 9, 20, 64, 67] {
            let v = &rows(n, 5)[0];
            let ws = [0.5f32, 0.0, -1.25];
            let init: Vec<f32> = (0..3 * n).map(|i| (i % 7) as f32 / 3.0 - 1.0).collect();
            let mut got = init.clone();
            axpy_heads_f16(&ws, v, &mut got);
            for (h, w) in ws.iter().enumerate() {
                for j in 0..n {
                    let want = init[h * n + j] as f64 + *w as f64 * v[j].to_f64();
                    let g = got[h * n + j] as f64;
                    assert!(
                        (g - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "n {n} head {h} [{j}]: {g} vs {want}"
                    );
                }
            }
        }
    }

    /// A block of K rows (`n` rows of `dk`, `pad` f16 between rows) and its bytes.
    fn block_rows(n: usize, dk: usize, pad: usize, seed: usize) -> Vec<f16> {
        (0..n * (dk + pad))
            .map(|i| f16::from_f32(((i * 13 + seed) % 29) as f32 / 7.0 - 2.0))
            .collect()
    }

    /// The block scores (lane counts of generation and prompt groups, odd and even, odd row
    /// counts, every head size the AVX-512 register kernel takes (16, 32, 48, 64) and others,
    /// padded rows) against f64 sums.
    #[test]
    fn dots_block_matches_scalar() {
        for (dk, n, nl) in [
            (64, 32, 3),
            (64, 5, 1),
            (7, 9, 2),
            (67, 31, 7),
            (256, 13, 4),
            (16, 3, 32),
            (32, 11, 5),
            (48, 6, 2),
            (80, 7, 3),
        ] {
            let pad = 3;
            let k = block_rows(n, dk, pad, dk + n);
            let q: Vec<f32> = (0..nl * dk)
                .map(|i| f16::from_f32(((i * 5) % 17) as f32 / 8.0 - 1.0).to_f32())
                .collect();
            let ostride = n + 2;
            let mut out = vec![f32::NAN; (nl - 1) * ostride + n];
            // SAFETY: n rows of dk (+ pad) f16; out sized as required.
            let ok = unsafe {
                dots_f16_block(
                    k.as_ptr() as *const u8,
                    2 * (dk + pad),
                    n,
                    &q,
                    nl,
                    &mut out,
                    ostride,
                )
            };
            if !ok {
                eprintln!("dots_f16_block: no kernel on this machine, skipped");
                return;
            }
            for l in 0..nl {
                for r in 0..n {
                    let want: f64 = k[r * (dk + pad)..r * (dk + pad) + dk]
                        .iter()
                        .zip(&q[l * dk..(l + 1) * dk])
                        .map(|(a, b)| a.to_f64() * *b as f64)
                        .sum();
                    let got = out[l * ostride + r] as f64;
                    assert!(
                        (got - want).abs() <= 2e-6 * (dk as f64).sqrt() * (1.0 + want.abs()),
                        "dk {dk} n {n} lane {l} row {r}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// The block V update bit for bit as [`axpy_heads_f16`] row by row (same operations in the
    /// same order per element), zero weights skipped (a NaN row under a zero weight stays out),
    /// every lane count 1..=9 and odd head sizes.
    #[test]
    fn v_block_matches_row_by_row() {
        for (dv, n) in [
            (64usize, 32usize),
            (7, 5),
            (24, 9),
            (67, 3),
            (256, 2),
            (8, 1),
        ] {
            for nl in 1..=9 {
                let pad = 1;
                let mut v = block_rows(n, dv, pad, dv * 3 + n);
                // Row 1 holds a NaN where every lane's weight is 0.
                if n > 1 {
                    v[(dv + pad) + dv / 2] = f16::NAN;
                }
                let wstride = n + 1;
                let ws: Vec<f32> = (0..nl * wstride)
                    .map(|i| {
                        let j = i % wstride;
                        if j == 1 || (i * 7) % 5 == 0 {
                            0.0
                        } else {
                            ((i * 11) % 9) as f32 / 4.0 - 1.0
                        }
                    })
                    .collect();
                let init: Vec<f32> = (0..nl * dv).map(|i| (i % 13) as f32 / 3.0 - 2.0).collect();
                let mut got = init.clone();
                // SAFETY: n rows of dv (+ pad) f16; weights and accumulators sized as required.
                unsafe {
                    v_block_f16(
                        &ws,
                        wstride,
                        nl,
                        v.as_ptr() as *const u8,
                        2 * (dv + pad),
                        n,
                        &mut got,
                    )
                };
                let mut want = init.clone();
                for j in 0..n {
                    let w: Vec<f32> = (0..nl).map(|l| ws[l * wstride + j]).collect();
                    if w.iter().all(|&x| x == 0.0) {
                        continue;
                    }
                    axpy_heads_f16(&w, &v[j * (dv + pad)..j * (dv + pad) + dv], &mut want);
                }
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "dv {dv} n {n} lanes {nl}: block {got:?} vs rows {want:?}"
                );
            }
        }
    }
}
