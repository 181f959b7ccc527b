//! The CPU backend's per-type table (ggml's `type_traits_cpu`): `vec_dot`, its `vec_dot_type`,
//! `from_f32` (activations into the vec_dot type) and `to_f32`, the fastest this machine has.
//!
//! It starts as a copy of the scalar reference table (`quant::type_traits_scalar`); every ISA
//! folder of [`super::arch`] then replaces the entries it has kernels for, once, at first use
//! (run-time feature detection on x86_64, build-time features on wasm32).

use std::sync::OnceLock;

use crate::dtype::DType;
use crate::error::Result;
use crate::quant::{traits_index, traits_or_unsupported, N_TRAITS, SCALAR};

pub use crate::quant::TypeTraits;

/// f32 values into a row of some type (whole blocks).
pub(crate) type FromF32 = fn(&[f32], &mut [u8]);
/// Dot product of `n` elements: a row of the weight type and a row of its vec_dot type.
pub(crate) type VecDot = fn(usize, &[u8], &[u8]) -> f32;

/// A traits table under construction (the arch `install` functions fill it).
pub(crate) struct Table([TypeTraits; N_TRAITS]);

impl Table {
    // Unused where no ISA folder is built (scalar wasm, other architectures).
    #[cfg_attr(
        not(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            all(target_arch = "wasm32", target_feature = "simd128")
        )),
        allow(dead_code)
    )]
    /// `dtype`'s entry; panics for a type that is not computable (the installers name only
    /// computable types: an internal contract).
    pub(crate) fn entry(&mut self, dtype: DType) -> &mut TypeTraits {
        let i = traits_index(dtype).expect("installers name computable types only");
        &mut self.0[i]
    }
}

/// The fastest traits of `dtype` on this machine; `None` for types that are not computable.
pub fn type_traits(dtype: DType) -> Option<&'static TypeTraits> {
    static FAST: OnceLock<Table> = OnceLock::new();
    let table = FAST.get_or_init(|| {
        let mut t = Table(SCALAR);
        super::arch::install(&mut t);
        t
    });
    traits_index(dtype).map(|i| &table.0[i])
}

/// Dequantize one row (or any whole number of blocks) of `dtype` bytes into `dst`, fast
/// (bit-exact with `quant::dequantize_row`).
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    traits_or_unsupported(type_traits(dtype), dtype, "dequantize_row")?.dequantize_row(src, dst)
}

/// Quantize `src` into `dtype` bytes, fast (bit-exact with `quant::quantize_row`).
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    traits_or_unsupported(type_traits(dtype), dtype, "quantize_row")?.quantize_row(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::type_traits_scalar;

    #[test]
    fn tables_cover_exactly_the_computable_types() {
        for t in DType::ALL {
            let s = type_traits_scalar(t);
            let f = type_traits(t);
            assert_eq!(s.is_some(), t.is_computable(), "{t}");
            assert_eq!(f.is_some(), t.is_computable(), "{t}");
            if let (Some(s), Some(f)) = (s, f) {
                assert_eq!(s.dtype, t);
                assert_eq!(f.dtype, t);
                assert_eq!(s.vec_dot_type, f.vec_dot_type);
            }
        }
        for lookup in [type_traits, type_traits_scalar] {
            assert_eq!(lookup(DType::Q4_0).unwrap().vec_dot_type, DType::Q8_0);
            assert_eq!(lookup(DType::Q5_1).unwrap().vec_dot_type, DType::Q8_1);
            assert_eq!(lookup(DType::Q6_K).unwrap().vec_dot_type, DType::Q8_K);
            assert_eq!(lookup(DType::BF16).unwrap().vec_dot_type, DType::BF16);
        }
    }

    /// Both tables (and both sets of row functions) on bytes at an odd offset.
    #[test]
    fn misaligned_bytes_are_handled() {
        type Row<S, D> = fn(DType, &[S], &mut [D]) -> Result<()>;
        type Lookup = fn(DType) -> Option<&'static TypeTraits>;
        type Set = (Row<f32, u8>, Row<u8, f32>, Lookup);
        let sets: [Set; 2] = [
            (quantize_row, dequantize_row, type_traits),
            (
                crate::quant::quantize_row,
                crate::quant::dequantize_row,
                type_traits_scalar,
            ),
        ];
        let src: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
        for (quantize_row, dequantize_row, lookup) in sets {
            for t in [
                DType::Q4_K,
                DType::Q8_K,
                DType::F32,
                DType::F16,
                DType::Q8_0,
            ] {
                let rs = t.row_size(512).unwrap();
                let mut aligned = vec![0u8; rs];
                quantize_row(t, &src, &mut aligned).unwrap();
                // Same bytes at an odd offset.
                let mut buf = vec![0u8; rs + 1];
                quantize_row(t, &src, &mut buf[1..]).unwrap();
                assert_eq!(&buf[1..], &aligned[..], "{t}");
                let mut a = vec![0f32; 512];
                let mut b = vec![0f32; 512];
                dequantize_row(t, &aligned, &mut a).unwrap();
                dequantize_row(t, &buf[1..], &mut b).unwrap();
                assert_eq!(a, b, "{t}");
                let tt = lookup(t).unwrap();
                let vd = tt.vec_dot_type;
                let mut y = vec![0u8; vd.row_size(512).unwrap() + 1];
                (lookup(vd).unwrap().from_f32)(&src, &mut y[1..]);
                let d1 = (tt.vec_dot)(512, &buf[1..], &y[1..]);
                let y2 = y[1..].to_vec();
                let d2 = (tt.vec_dot)(512, &aligned, &y2);
                assert_eq!(d1, d2, "{t}");
            }
        }
    }
}
