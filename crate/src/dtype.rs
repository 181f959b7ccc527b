//! Tensor element types: GGUF/ggml type ids, block sizes and type sizes.
//!
//! The ids and sizes are ggml's (`ggml.h` / `type_traits`), so GGUF files round-trip with llama.cpp.
//! Types that exist in GGUF but that no kernel computes yet (the i-quants, ternary and fp4 types)
//! parse and keep their bytes; an op that meets one returns [`crate::Error::UnsupportedType`].

use crate::error::{Error, Result};

/// One element type. The discriminant is the GGUF tensor type id.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum DType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    Q1_0 = 41,
}

/// Elements per super-block for the k-quants.
pub const QK_K: usize = 256;

impl DType {
    /// Every type, in id order.
    pub const ALL: [DType; 34] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::IQ2_XXS,
        DType::IQ2_XS,
        DType::IQ3_XXS,
        DType::IQ1_S,
        DType::IQ4_NL,
        DType::IQ3_S,
        DType::IQ2_S,
        DType::IQ4_XS,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F64,
        DType::IQ1_M,
        DType::BF16,
        DType::TQ1_0,
        DType::TQ2_0,
        DType::MXFP4,
        DType::NVFP4,
        DType::Q1_0,
    ];

    /// The type with GGUF id `id`, or an error for unknown and removed ids (4, 5, 31–33, 36–38).
    pub fn from_id(id: u32) -> Result<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|t| *t as u32 == id)
            .ok_or(Error::UnknownType(id))
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// Elements per block (1 for plain types).
    pub const fn block_size(self) -> usize {
        use DType::*;
        match self {
            F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
            NVFP4 => 64,
            Q1_0 => 128,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ2_XXS | IQ2_XS | IQ3_XXS | IQ1_S
            | IQ3_S | IQ2_S | IQ4_XS | IQ1_M | TQ1_0 | TQ2_0 => QK_K,
        }
    }

    /// Bytes per block.
    pub const fn type_size(self) -> usize {
        use DType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            F64 | I64 => 8,
            I8 => 1,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            // ggml's block_q8_1 is {half d; half s; int8 qs[32]}; gguf-py still lists 40 (an old layout).
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ3_XXS => 98,
            IQ1_S => 50,
            IQ4_NL => 18,
            IQ3_S => 110,
            IQ2_S => 82,
            IQ4_XS => 136,
            IQ1_M => 56,
            TQ1_0 => 54,
            TQ2_0 => 66,
            MXFP4 => 17,
            NVFP4 => 36,
            Q1_0 => 18,
        }
    }

    /// ggml's type name (`ggml_type_name`), e.g. `q4_K`.
    pub const fn name(self) -> &'static str {
        use DType::*;
        match self {
            F32 => "f32",
            F16 => "f16",
            Q4_0 => "q4_0",
            Q4_1 => "q4_1",
            Q5_0 => "q5_0",
            Q5_1 => "q5_1",
            Q8_0 => "q8_0",
            Q8_1 => "q8_1",
            Q2_K => "q2_K",
            Q3_K => "q3_K",
            Q4_K => "q4_K",
            Q5_K => "q5_K",
            Q6_K => "q6_K",
            Q8_K => "q8_K",
            IQ2_XXS => "iq2_xxs",
            IQ2_XS => "iq2_xs",
            IQ3_XXS => "iq3_xxs",
            IQ1_S => "iq1_s",
            IQ4_NL => "iq4_nl",
            IQ3_S => "iq3_s",
            IQ2_S => "iq2_s",
            IQ4_XS => "iq4_xs",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            F64 => "f64",
            IQ1_M => "iq1_m",
            BF16 => "bf16",
            TQ1_0 => "tq1_0",
            TQ2_0 => "tq2_0",
            MXFP4 => "mxfp4",
            NVFP4 => "nvfp4",
            Q1_0 => "q1_0",
        }
    }

    /// The type named `name` (ggml's spelling, case-insensitive).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for the types this crate can dequantize, quantize and use in ops.
    pub const fn is_computable(self) -> bool {
        use DType::*;
        matches!(
            self,
            F32 | F16
                | BF16
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q8_1
                | Q2_K
                | Q3_K
                | Q4_K
                | Q5_K
                | Q6_K
                | Q8_K
        )
    }

    /// Bytes of a row of `ne` elements; an error when `ne` is not a multiple of the block size
    /// or the size overflows.
    pub fn row_size(self, ne: usize) -> Result<usize> {
        let bs = self.block_size();
        if !ne.is_multiple_of(bs) {
            return Err(Error::Shape(format!(
                "row of {ne} elements is not a multiple of {}'s block size {bs}",
                self.name()
            )));
        }
        (ne / bs)
            .checked_mul(self.type_size())
            .ok_or_else(|| Error::Overflow(format!("row size of {ne} x {}", self.name())))
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_removed_ids_fail() {
        for t in DType::ALL {
            assert_eq!(DType::from_id(t.id()).unwrap(), t);
            assert_eq!(DType::from_name(t.name()), Some(t));
        }
        for id in [4u32, 5, 31, 32, 33, 36, 37, 38, 42, 1000] {
            assert!(DType::from_id(id).is_err(), "id {id}");
        }
    }

    #[test]
    fn row_size_checks_blocks() {
        assert_eq!(DType::Q4_0.row_size(64).unwrap(), 36);
        assert_eq!(DType::Q4_K.row_size(512).unwrap(), 288);
        assert!(DType::Q4_K.row_size(100).is_err());
        assert_eq!(DType::F32.row_size(7).unwrap(), 28);
    }
}
