//! Block formats: ggml's quantized types, bit-exact with `ggml-common.h` / `ggml-quants.c`.
//!
//! Every computable type has a `#[repr(C)]` block struct (size-asserted, `Pod`) implementing
//! [`GgmlBlock`]: dequantization (`to_f32`, same arithmetic as ggml's `dequantize_row_*`),
//! quantization (`from_f32`, ggml's *reference* `quantize_row_*_ref`, so the bytes match) and a
//! scalar reference dot product against the block's `vec_dot` type (q8_0, q8_1 or q8_K for the
//! activations, as ggml's CPU backend does).
//!
//! This is the format layer only: plain scalar code, no SIMD and no backend. [`type_traits_scalar`]
//! is the type-erased reference table (byte slices in) every SIMD kernel is tested against; the
//! CPU backend builds its fast table from it (`backend::cpu::type_traits`, ggml's
//! `type_traits_cpu`), replacing entries with the kernels of `backend::cpu::arch`.
//!
//! Byte slices may come straight from a file and be misaligned: they are cast with
//! `bytemuck::try_cast_slice` and copied when that fails, never read unaligned through a reference.

pub(crate) mod k_quants;
mod legacy;

pub use k_quants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};

use std::borrow::Cow;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::dtype::{DType, QK_K};
use crate::error::{Error, Result};

/// Elements per block of the legacy formats (q4_0 … q8_1).
pub const QK: usize = 32;

/// One ggml block type: its layout is the struct, its arithmetic these functions.
pub trait GgmlBlock: Sized + Copy + Pod {
    /// The GGUF type this block stores.
    const DTYPE: DType;
    /// Elements per block.
    const BLCK: usize;
    /// The type the other operand of [`GgmlBlock::vec_dot`] must be in (ggml's `vec_dot_type`).
    type VecDot: GgmlBlock;

    /// Dequantize `xs` into `ys`; `ys.len() == xs.len() * BLCK` (panics otherwise).
    fn to_f32(xs: &[Self], ys: &mut [f32]);
    /// Quantize `xs` into `ys` with ggml's reference rounding; `xs.len() == ys.len() * BLCK`.
    fn from_f32(xs: &[f32], ys: &mut [Self]);
    /// Scalar reference dot product of `n` elements (`n == xs.len() * BLCK`).
    fn vec_dot(n: usize, xs: &[Self], ys: &[Self::VecDot]) -> f32;
}

/// ggml's `nearest_int`: round to nearest, ties to even, via the 1.5·2²³ trick (|x| ≤ 2²²).
#[inline(always)]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

#[inline(always)]
pub(crate) fn fp16(x: f16) -> f32 {
    x.to_f32()
}

pub(crate) fn check_len(what: &str, got: usize, want: usize) {
    assert!(got == want, "{what}: length {got}, expected {want}");
}

// ---------------------------------------------------------------------------------------------
// Plain types as one-element "blocks".

/// Σ x·y, scalar, accumulated in f64 as ggml's scalar `ggml_vec_dot_f32` (`ggml_float`): the
/// truth every SIMD f32 dot is tested against. Panics when the lengths differ.
pub fn dot_f32_ref(x: &[f32], y: &[f32]) -> f32 {
    check_len("dot_f32_ref", y.len(), x.len());
    let mut sum = 0f64;
    for (a, b) in x.iter().zip(y) {
        sum += (a * b) as f64;
    }
    sum as f32
}

/// Σ x·y over f16 inputs (products in f32), accumulated in f64. Panics when the lengths differ.
pub fn dot_f16_ref(x: &[f16], y: &[f16]) -> f32 {
    check_len("dot_f16_ref", y.len(), x.len());
    let mut sum = 0f64;
    for (a, b) in x.iter().zip(y) {
        sum += (a.to_f32() * b.to_f32()) as f64;
    }
    sum as f32
}

impl GgmlBlock for f32 {
    const DTYPE: DType = DType::F32;
    const BLCK: usize = 1;
    type VecDot = f32;
    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        ys.copy_from_slice(xs);
    }
    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        ys.copy_from_slice(xs);
    }
    fn vec_dot(n: usize, xs: &[Self], ys: &[f32]) -> f32 {
        check_len("f32 vec_dot", xs.len(), n);
        dot_f32_ref(xs, ys)
    }
}

impl GgmlBlock for f16 {
    const DTYPE: DType = DType::F16;
    const BLCK: usize = 1;
    type VecDot = f16;
    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_len("f16 to_f32", ys.len(), xs.len());
        for (y, x) in ys.iter_mut().zip(xs) {
            *y = x.to_f32();
        }
    }
    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_len("f16 from_f32", ys.len(), xs.len());
        for (y, x) in ys.iter_mut().zip(xs) {
            *y = f16::from_f32(*x);
        }
    }
    fn vec_dot(n: usize, xs: &[Self], ys: &[f16]) -> f32 {
        check_len("f16 vec_dot", xs.len(), n);
        dot_f16_ref(xs, ys)
    }
}

impl GgmlBlock for bf16 {
    const DTYPE: DType = DType::BF16;
    const BLCK: usize = 1;
    type VecDot = bf16;
    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_len("bf16 to_f32", ys.len(), xs.len());
        for (y, x) in ys.iter_mut().zip(xs) {
            *y = x.to_f32();
        }
    }
    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        // half's conversion is ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, NaN quieted.
        check_len("bf16 from_f32", ys.len(), xs.len());
        for (y, x) in ys.iter_mut().zip(xs) {
            *y = bf16::from_f32(*x);
        }
    }
    fn vec_dot(n: usize, xs: &[Self], ys: &[bf16]) -> f32 {
        check_len("bf16 vec_dot", xs.len(), n);
        check_len("bf16 vec_dot", ys.len(), n);
        let mut sum = 0f64;
        for (x, y) in xs.iter().zip(ys) {
            sum += (x.to_f32() * y.to_f32()) as f64;
        }
        sum as f32
    }
}

// ---------------------------------------------------------------------------------------------
// Type erasure over byte slices.

/// View `bytes` as blocks: borrowed when aligned, copied otherwise. Panics when the length is not
/// a whole number of blocks (internal contract).
pub(crate) fn cast_blocks<B: Pod>(bytes: &[u8]) -> Cow<'_, [B]> {
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len() / size * size == bytes.len(),
        "{} bytes is not a whole number of {size}-byte blocks",
        bytes.len()
    );
    match bytemuck::try_cast_slice::<u8, B>(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => {
            let mut v: Vec<B> = vec![B::zeroed(); bytes.len() / size];
            bytemuck::cast_slice_mut::<B, u8>(&mut v).copy_from_slice(bytes);
            Cow::Owned(v)
        }
    }
}

/// Run `f` on `bytes` viewed as mutable blocks, through a copy when misaligned.
pub(crate) fn with_blocks_mut<B: Pod, R>(bytes: &mut [u8], f: impl FnOnce(&mut [B]) -> R) -> R {
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len() / size * size == bytes.len(),
        "{} bytes is not a whole number of {size}-byte blocks",
        bytes.len()
    );
    match bytemuck::try_cast_slice_mut::<u8, B>(bytes) {
        Ok(s) => f(s),
        Err(_) => {
            let mut tmp: Vec<B> = vec![B::zeroed(); bytes.len() / size];
            let r = f(&mut tmp);
            bytes.copy_from_slice(bytemuck::cast_slice(&tmp));
            r
        }
    }
}

fn erased_to_f32<B: GgmlBlock>(src: &[u8], dst: &mut [f32]) {
    let xs = cast_blocks::<B>(src);
    B::to_f32(&xs, dst);
}

fn erased_from_f32<B: GgmlBlock>(src: &[f32], dst: &mut [u8]) {
    with_blocks_mut::<B, ()>(dst, |ys| B::from_f32(src, ys));
}

fn erased_vec_dot<B: GgmlBlock>(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let xs = cast_blocks::<B>(x);
    let ys = cast_blocks::<B::VecDot>(y);
    B::vec_dot(n, &xs, &ys)
}

/// ggml's per-type CPU traits, over raw bytes.
#[derive(Clone, Copy)]
pub struct TypeTraits {
    pub dtype: DType,
    /// The type the second operand of `vec_dot` must be in.
    pub vec_dot_type: DType,
    /// Dequantize whole blocks; `dst.len()` is the element count.
    pub to_f32: fn(&[u8], &mut [f32]),
    /// Quantize a row (`src.len() % block_size == 0`).
    pub from_f32: fn(&[f32], &mut [u8]),
    /// Dot product of `n` elements: x row in `dtype`, y row in `vec_dot_type`.
    pub vec_dot: fn(usize, &[u8], &[u8]) -> f32,
}

impl std::fmt::Debug for TypeTraits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypeTraits")
            .field("dtype", &self.dtype)
            .field("vec_dot_type", &self.vec_dot_type)
            .finish_non_exhaustive()
    }
}

const fn traits_of<B: GgmlBlock>() -> TypeTraits {
    TypeTraits {
        dtype: B::DTYPE,
        vec_dot_type: <B::VecDot as GgmlBlock>::DTYPE,
        to_f32: erased_to_f32::<B>,
        from_f32: erased_from_f32::<B>,
        vec_dot: erased_vec_dot::<B>,
    }
}

/// Entries of a traits table: the computable types, in [`traits_index`] order.
pub(crate) const N_TRAITS: usize = 15;

/// The scalar reference table; the CPU backend starts its fast table from a copy.
pub(crate) static SCALAR: [TypeTraits; N_TRAITS] = [
    traits_of::<f32>(),
    traits_of::<f16>(),
    traits_of::<bf16>(),
    traits_of::<BlockQ4_0>(),
    traits_of::<BlockQ4_1>(),
    traits_of::<BlockQ5_0>(),
    traits_of::<BlockQ5_1>(),
    traits_of::<BlockQ8_0>(),
    traits_of::<BlockQ8_1>(),
    traits_of::<BlockQ2K>(),
    traits_of::<BlockQ3K>(),
    traits_of::<BlockQ4K>(),
    traits_of::<BlockQ5K>(),
    traits_of::<BlockQ6K>(),
    traits_of::<BlockQ8K>(),
];

/// Position of `dtype` in a traits table; `None` for types that are not computable.
pub(crate) fn traits_index(dtype: DType) -> Option<usize> {
    use DType::*;
    Some(match dtype {
        F32 => 0,
        F16 => 1,
        BF16 => 2,
        Q4_0 => 3,
        Q4_1 => 4,
        Q5_0 => 5,
        Q5_1 => 6,
        Q8_0 => 7,
        Q8_1 => 8,
        Q2_K => 9,
        Q3_K => 10,
        Q4_K => 11,
        Q5_K => 12,
        Q6_K => 13,
        Q8_K => 14,
        _ => return None,
    })
}

/// The plain scalar reference traits of `dtype`; `None` for types that are not computable.
pub fn type_traits_scalar(dtype: DType) -> Option<&'static TypeTraits> {
    traits_index(dtype).map(|i| &SCALAR[i])
}

impl TypeTraits {
    /// Dequantize whole blocks: `src` holds exactly the bytes of `dst.len()` elements.
    pub fn dequantize_row(&self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        let want = self.dtype.row_size(dst.len())?;
        if src.len() != want {
            return Err(Error::Shape(format!(
                "dequantize_row {}: {} source bytes for {} elements, expected {want}",
                self.dtype,
                src.len(),
                dst.len()
            )));
        }
        (self.to_f32)(src, dst);
        Ok(())
    }

    /// Quantize `src` into exactly the bytes of `src.len()` elements of this type.
    pub fn quantize_row(&self, src: &[f32], dst: &mut [u8]) -> Result<()> {
        let want = self.dtype.row_size(src.len())?;
        if dst.len() != want {
            return Err(Error::Shape(format!(
                "quantize_row {}: {} destination bytes for {} elements, expected {want}",
                self.dtype,
                dst.len(),
                src.len()
            )));
        }
        (self.from_f32)(src, dst);
        Ok(())
    }
}

/// `traits`, or the typed error for a `dtype` that has no row codec.
pub(crate) fn traits_or_unsupported(
    traits: Option<&'static TypeTraits>,
    dtype: DType,
    what: &str,
) -> Result<&'static TypeTraits> {
    traits.ok_or_else(|| Error::UnsupportedType {
        dtype,
        what: what.to_string(),
    })
}

/// Dequantize one row (or several: any whole number of blocks) of `dtype` bytes into `dst`, with
/// the scalar reference.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    traits_or_unsupported(type_traits_scalar(dtype), dtype, "dequantize_row")?
        .dequantize_row(src, dst)
}

/// Quantize `src` into `dtype` bytes with ggml's reference algorithm.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    traits_or_unsupported(type_traits_scalar(dtype), dtype, "quantize_row")?.quantize_row(src, dst)
}

#[allow(dead_code)]
const _: () = assert!(QK_K == 256);

#[cfg(test)]
mod tests;
