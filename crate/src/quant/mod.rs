//! Block formats: ggml's quantized types, bit-exact with `ggml-common.h` / `ggml-quants.c`.
//!
//! Every computable type has a `#[repr(C)]` block struct (size-asserted, `Pod`) implementing
//! [`GgmlBlock`]: dequantization (`to_f32`, same arithmetic as ggml's `dequantize_row_*`),
//! quantization (`from_f32`, ggml's *reference* `quantize_row_*_ref`, so the bytes match) and a
//! scalar reference dot product against the block's `vec_dot` type (q8_0, q8_1 or q8_K for the
//! activations, as ggml's CPU backend does).
//!
//! [`type_traits`] is the type-erased table the CPU backend uses (ggml's `type_traits_cpu`):
//! byte slices in, with the fastest kernels detected at run time. [`type_traits_scalar`] is the
//! plain scalar reference every SIMD kernel is tested against.
//!
//! Byte slices may come straight from a file and be misaligned: they are cast with
//! `bytemuck::try_cast_slice` and copied when that fails, never read unaligned through a reference.

pub(crate) mod k_quants;
mod legacy;

pub use k_quants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};

use std::borrow::Cow;
use std::sync::OnceLock;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::backend::cpu::vec;
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
        vec::dot_f32_ref(xs, ys)
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
        vec::dot_f16_ref(xs, ys)
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

const N_TRAITS: usize = 15;

static SCALAR: [TypeTraits; N_TRAITS] = [
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

/// Replace `dtype`'s vec_dot in a traits table (the per-ISA `install` functions use it).
#[allow(dead_code)]
fn set_vec_dot(t: &mut [TypeTraits; N_TRAITS], dtype: DType, f: fn(usize, &[u8], &[u8]) -> f32) {
    if let Some(i) = index(dtype) {
        t[i].vec_dot = f;
    }
}

fn index(dtype: DType) -> Option<usize> {
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
    index(dtype).map(|i| &SCALAR[i])
}

/// The fastest traits of `dtype` on this machine (SIMD detected once at run time).
pub fn type_traits(dtype: DType) -> Option<&'static TypeTraits> {
    static FAST: OnceLock<[TypeTraits; N_TRAITS]> = OnceLock::new();
    let table = FAST.get_or_init(|| {
        #[allow(unused_mut)]
        let mut t = SCALAR;
        #[cfg(target_arch = "x86_64")]
        simd_x86::install(&mut t);
        #[cfg(target_arch = "aarch64")]
        simd_aarch64::install(&mut t);
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        simd_wasm32::install(&mut t);
        t
    });
    index(dtype).map(|i| &table[i])
}

/// Dequantize one row (or several: any whole number of blocks) of `dtype` bytes into `dst`.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let tt = checked_traits(dtype, "dequantize_row")?;
    let want = dtype.row_size(dst.len())?;
    if src.len() != want {
        return Err(Error::Shape(format!(
            "dequantize_row {dtype}: {} source bytes for {} elements, expected {want}",
            src.len(),
            dst.len()
        )));
    }
    (tt.to_f32)(src, dst);
    Ok(())
}

/// Quantize `src` into `dtype` bytes with ggml's reference algorithm.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    let tt = checked_traits(dtype, "quantize_row")?;
    let want = dtype.row_size(src.len())?;
    if dst.len() != want {
        return Err(Error::Shape(format!(
            "quantize_row {dtype}: {} destination bytes for {} elements, expected {want}",
            dst.len(),
            src.len()
        )));
    }
    (tt.from_f32)(src, dst);
    Ok(())
}

fn checked_traits(dtype: DType, what: &str) -> Result<&'static TypeTraits> {
    type_traits(dtype).ok_or_else(|| Error::UnsupportedType {
        dtype,
        what: what.to_string(),
    })
}

// ---------------------------------------------------------------------------------------------
// SIMD entries of the fast table.

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

#[cfg(target_arch = "x86_64")]
mod simd_x86 {
    use super::*;
    use crate::backend::cpu::x86;

    erase_dot!(dot_f32, f32, f32, x86::vec_dot_f32);
    erase_dot!(dot_f16, f16, f16, x86::vec_dot_f16);
    erase_dot!(dot_bf16, bf16, bf16, x86::vec_dot_bf16);
    erase_dot!(dot_q4_0, BlockQ4_0, BlockQ8_0, x86::vec_dot_q4_0_q8_0);
    erase_dot!(dot_q4_1, BlockQ4_1, BlockQ8_1, x86::vec_dot_q4_1_q8_1);
    erase_dot!(dot_q5_0, BlockQ5_0, BlockQ8_0, x86::vec_dot_q5_0_q8_0);
    erase_dot!(dot_q5_1, BlockQ5_1, BlockQ8_1, x86::vec_dot_q5_1_q8_1);
    erase_dot!(dot_q8_0, BlockQ8_0, BlockQ8_0, x86::vec_dot_q8_0_q8_0);
    erase_dot!(dot_q2_k, BlockQ2K, BlockQ8K, x86::vec_dot_q2_k_q8_k);
    erase_dot!(dot_q3_k, BlockQ3K, BlockQ8K, x86::vec_dot_q3_k_q8_k);
    erase_dot!(dot_q4_k, BlockQ4K, BlockQ8K, x86::vec_dot_q4_k_q8_k);
    erase_dot!(dot_q5_k, BlockQ5K, BlockQ8K, x86::vec_dot_q5_k_q8_k);
    erase_dot!(dot_q6_k, BlockQ6K, BlockQ8K, x86::vec_dot_q6_k_q8_k);

    fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
        x86::f16_to_f32_row(&cast_blocks::<f16>(src), dst);
    }
    fn f32_to_f16(src: &[f32], dst: &mut [u8]) {
        with_blocks_mut::<f16, ()>(dst, |ys| x86::f32_to_f16_row(src, ys));
    }
    fn deq_q4_0(src: &[u8], dst: &mut [f32]) {
        x86::dequantize_row_q4_0(&cast_blocks::<BlockQ4_0>(src), dst);
    }
    fn deq_q8_0(src: &[u8], dst: &mut [f32]) {
        x86::dequantize_row_q8_0(&cast_blocks::<BlockQ8_0>(src), dst);
    }
    fn deq_q4_k(src: &[u8], dst: &mut [f32]) {
        x86::dequantize_row_q4_k(&cast_blocks::<BlockQ4K>(src), dst);
    }
    fn quant_q8_0(src: &[f32], dst: &mut [u8]) {
        with_blocks_mut::<BlockQ8_0, ()>(dst, |ys| x86::quantize_row_q8_0(src, ys));
    }
    fn quant_q8_1(src: &[f32], dst: &mut [u8]) {
        with_blocks_mut::<BlockQ8_1, ()>(dst, |ys| x86::quantize_row_q8_1(src, ys));
    }
    fn quant_q8_k(src: &[f32], dst: &mut [u8]) {
        with_blocks_mut::<BlockQ8K, ()>(dst, |ys| x86::quantize_row_q8_k(src, ys));
    }

    pub(super) fn install(t: &mut [TypeTraits; N_TRAITS]) {
        if !x86::available() {
            return;
        }
        let set = set_vec_dot;
        set(t, DType::F32, dot_f32);
        set(t, DType::F16, dot_f16);
        set(t, DType::BF16, dot_bf16);
        set(t, DType::Q4_0, dot_q4_0);
        set(t, DType::Q4_1, dot_q4_1);
        set(t, DType::Q5_0, dot_q5_0);
        set(t, DType::Q5_1, dot_q5_1);
        set(t, DType::Q8_0, dot_q8_0);
        set(t, DType::Q2_K, dot_q2_k);
        set(t, DType::Q3_K, dot_q3_k);
        set(t, DType::Q4_K, dot_q4_k);
        set(t, DType::Q5_K, dot_q5_k);
        set(t, DType::Q6_K, dot_q6_k);
        let deq = |t: &mut [TypeTraits; N_TRAITS], d: DType, f: fn(&[u8], &mut [f32])| {
            if let Some(i) = index(d) {
                t[i].to_f32 = f;
            }
        };
        deq(t, DType::F16, f16_to_f32);
        deq(t, DType::Q4_0, deq_q4_0);
        deq(t, DType::Q8_0, deq_q8_0);
        deq(t, DType::Q4_K, deq_q4_k);
        let q = |t: &mut [TypeTraits; N_TRAITS], d: DType, f: fn(&[f32], &mut [u8])| {
            if let Some(i) = index(d) {
                t[i].from_f32 = f;
            }
        };
        q(t, DType::F16, f32_to_f16);
        q(t, DType::Q8_0, quant_q8_0);
        q(t, DType::Q8_1, quant_q8_1);
        q(t, DType::Q8_K, quant_q8_k);
    }
}

#[cfg(target_arch = "aarch64")]
mod simd_aarch64 {
    use super::*;
    use crate::backend::cpu::aarch64 as neon;

    erase_dot!(dot_f32, f32, f32, neon::vec_dot_f32);
    erase_dot!(dot_q4_0, BlockQ4_0, BlockQ8_0, neon::vec_dot_q4_0_q8_0);
    erase_dot!(dot_q4_1, BlockQ4_1, BlockQ8_1, neon::vec_dot_q4_1_q8_1);
    erase_dot!(dot_q5_0, BlockQ5_0, BlockQ8_0, neon::vec_dot_q5_0_q8_0);
    erase_dot!(dot_q5_1, BlockQ5_1, BlockQ8_1, neon::vec_dot_q5_1_q8_1);
    erase_dot!(dot_q8_0, BlockQ8_0, BlockQ8_0, neon::vec_dot_q8_0_q8_0);
    erase_dot!(dot_q4_k, BlockQ4K, BlockQ8K, neon::vec_dot_q4_k_q8_k);
    erase_dot!(dot_q5_k, BlockQ5K, BlockQ8K, neon::vec_dot_q5_k_q8_k);
    erase_dot!(dot_q6_k, BlockQ6K, BlockQ8K, neon::vec_dot_q6_k_q8_k);

    pub(super) fn install(t: &mut [TypeTraits; N_TRAITS]) {
        let set = set_vec_dot;
        set(t, DType::F32, dot_f32);
        set(t, DType::Q4_0, dot_q4_0);
        set(t, DType::Q4_1, dot_q4_1);
        set(t, DType::Q5_0, dot_q5_0);
        set(t, DType::Q5_1, dot_q5_1);
        set(t, DType::Q8_0, dot_q8_0);
        set(t, DType::Q4_K, dot_q4_k);
        set(t, DType::Q5_K, dot_q5_k);
        set(t, DType::Q6_K, dot_q6_k);
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd_wasm32 {
    use super::*;
    use crate::backend::cpu::wasm32 as w;

    erase_dot!(dot_f32, f32, f32, w::vec_dot_f32);
    erase_dot!(dot_f16, f16, f16, w::vec_dot_f16);
    erase_dot!(dot_q4_0, BlockQ4_0, BlockQ8_0, w::vec_dot_q4_0_q8_0);
    erase_dot!(dot_q4_1, BlockQ4_1, BlockQ8_1, w::vec_dot_q4_1_q8_1);
    erase_dot!(dot_q5_0, BlockQ5_0, BlockQ8_0, w::vec_dot_q5_0_q8_0);
    erase_dot!(dot_q5_1, BlockQ5_1, BlockQ8_1, w::vec_dot_q5_1_q8_1);
    erase_dot!(dot_q8_0, BlockQ8_0, BlockQ8_0, w::vec_dot_q8_0_q8_0);
    erase_dot!(dot_q4_k, BlockQ4K, BlockQ8K, w::vec_dot_q4_k_q8_k);
    erase_dot!(dot_q5_k, BlockQ5K, BlockQ8K, w::vec_dot_q5_k_q8_k);
    erase_dot!(dot_q6_k, BlockQ6K, BlockQ8K, w::vec_dot_q6_k_q8_k);

    pub(super) fn install(t: &mut [TypeTraits; N_TRAITS]) {
        let set = set_vec_dot;
        set(t, DType::F32, dot_f32);
        set(t, DType::F16, dot_f16);
        set(t, DType::Q4_0, dot_q4_0);
        set(t, DType::Q4_1, dot_q4_1);
        set(t, DType::Q5_0, dot_q5_0);
        set(t, DType::Q5_1, dot_q5_1);
        set(t, DType::Q8_0, dot_q8_0);
        set(t, DType::Q4_K, dot_q4_k);
        set(t, DType::Q5_K, dot_q5_k);
        set(t, DType::Q6_K, dot_q6_k);
    }
}

#[allow(dead_code)]
const _: () = assert!(QK_K == 256);

#[cfg(test)]
mod tests;
