//! x86-64 kernels: AVX2 + FMA + F16C, detected once at run time.
//!
//! Every public function here is safe: it checks the slice lengths (panicking on a mismatch, an
//! internal contract), then calls the AVX2 kernel if [`available`] says the CPU has the features,
//! and the scalar reference otherwise. The kernels themselves live in the private `avx2` module as
//! `unsafe fn`s whose only precondition is that the CPU supports AVX2, FMA and F16C; all their
//! memory accesses are unaligned loads/stores inside the slices (or fixed-size arrays) they get.
//!
//! Quantized dots compute the same integer sums as the scalar reference and differ only in the
//! order of the f32 accumulation (8 lanes). The q8 quantizers are bit-exact with the reference.

use half::{bf16, f16};
use std::sync::OnceLock;

use super::super::portable::{axpy_f16_ref, axpy_f32_ref};
use crate::quant::{dot_f16_ref, dot_f32_ref};
use crate::quant::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlBlock,
};

/// Whether this CPU has AVX2, FMA and F16C (detected once, cached).
pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

fn check(what: &str, a: usize, b: usize) {
    assert!(a == b, "{what}: lengths differ ({a} vs {b})");
}

/// Σ x·y (AVX2 when available).
pub fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    check("dot_f32", x.len(), y.len());
    if available() {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { avx2::dot_f32(x, y) }
    } else {
        dot_f32_ref(x, y)
    }
}

/// y += a·x (AVX2 when available).
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    check("axpy_f32", x.len(), y.len());
    if available() {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { avx2::axpy_f32(a, x, y) }
    } else {
        axpy_f32_ref(a, x, y)
    }
}

/// Σ x·y over f16 (F16C conversion, f32 FMA accumulation).
pub fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    check("dot_f16", x.len(), y.len());
    if available() {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { avx2::dot_f16(x, y) }
    } else {
        dot_f16_ref(x, y)
    }
}

/// y += a·x, f16 `x` into f32 `y`.
pub fn axpy_f16(a: f32, x: &[f16], y: &mut [f32]) {
    check("axpy_f16", x.len(), y.len());
    if available() {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { avx2::axpy_f16(a, x, y) }
    } else {
        axpy_f16_ref(a, x, y)
    }
}

/// f16 → f32 conversion of a row (F16C; exact).
pub fn f16_to_f32_row(x: &[f16], y: &mut [f32]) {
    check("f16_to_f32_row", x.len(), y.len());
    if available() {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { avx2::f16_to_f32_row(x, y) }
    } else {
        for (o, v) in y.iter_mut().zip(x) {
            *o = v.to_f32();
        }
    }
}

/// f32 → f16 conversion of a row (F16C, round to nearest even: the same bits as
/// `f16::from_f32` for every non-NaN input).
pub fn f32_to_f16_row(x: &[f32], y: &mut [f16]) {
    check("f32_to_f16_row", x.len(), y.len());
    if available() {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { avx2::f32_to_f16_row(x, y) }
    } else {
        for (o, v) in y.iter_mut().zip(x) {
            *o = f16::from_f32(*v);
        }
    }
}

/// Σ x·y over bf16 (exact widening to f32, f32 FMA accumulation).
pub fn dot_bf16(x: &[bf16], y: &[bf16]) -> f32 {
    check("dot_bf16", x.len(), y.len());
    if available() {
        // SAFETY: the CPU supports avx2/fma/f16c (checked above); lengths are equal.
        unsafe { avx2::dot_bf16(x, y) }
    } else {
        let mut sum = 0f64;
        for (a, b) in x.iter().zip(y) {
            sum += (a.to_f32() * b.to_f32()) as f64;
        }
        sum as f32
    }
}

/// `vec_dot`-shaped bf16 dot (`n` elements).
pub fn vec_dot_bf16(n: usize, x: &[bf16], y: &[bf16]) -> f32 {
    check("vec_dot_bf16", x.len(), n);
    dot_bf16(x, y)
}

/// `vec_dot`-shaped f32 dot (`n` elements).
pub fn vec_dot_f32(n: usize, x: &[f32], y: &[f32]) -> f32 {
    check("vec_dot_f32", x.len(), n);
    dot_f32(x, y)
}

/// `vec_dot`-shaped f16 dot (`n` elements).
pub fn vec_dot_f16(n: usize, x: &[f16], y: &[f16]) -> f32 {
    check("vec_dot_f16", x.len(), n);
    dot_f16(x, y)
}

macro_rules! quant_dot {
    ($(#[$doc:meta])* $name:ident, $x:ty, $y:ty) => {
        $(#[$doc])*
        pub fn $name(n: usize, x: &[$x], y: &[$y]) -> f32 {
            check(stringify!($name), x.len() * <$x as GgmlBlock>::BLCK, n);
            check(stringify!($name), x.len(), y.len());
            if available() {
                // SAFETY: the CPU supports avx2/fma/f16c (checked above); x and y have the same
                // number of blocks and the kernel only reads inside each block's arrays.
                unsafe { avx2::$name(x, y) }
            } else {
                <$x as GgmlBlock>::vec_dot(n, x, y)
            }
        }
    };
}

quant_dot!(
    /// q4_0 · q8_0.
    vec_dot_q4_0_q8_0, BlockQ4_0, BlockQ8_0
);
quant_dot!(
    /// q4_1 · q8_1.
    vec_dot_q4_1_q8_1, BlockQ4_1, BlockQ8_1
);
quant_dot!(
    /// q5_0 · q8_0.
    vec_dot_q5_0_q8_0, BlockQ5_0, BlockQ8_0
);
quant_dot!(
    /// q5_1 · q8_1.
    vec_dot_q5_1_q8_1, BlockQ5_1, BlockQ8_1
);
quant_dot!(
    /// q8_0 · q8_0.
    vec_dot_q8_0_q8_0, BlockQ8_0, BlockQ8_0
);
quant_dot!(
    /// q2_K · q8_K.
    vec_dot_q2_k_q8_k, BlockQ2K, BlockQ8K
);
quant_dot!(
    /// q3_K · q8_K.
    vec_dot_q3_k_q8_k, BlockQ3K, BlockQ8K
);
quant_dot!(
    /// q4_K · q8_K.
    vec_dot_q4_k_q8_k, BlockQ4K, BlockQ8K
);
quant_dot!(
    /// q5_K · q8_K.
    vec_dot_q5_k_q8_k, BlockQ5K, BlockQ8K
);
quant_dot!(
    /// q6_K · q8_K.
    vec_dot_q6_k_q8_k, BlockQ6K, BlockQ8K
);

macro_rules! quantizer {
    ($(#[$doc:meta])* $name:ident, $b:ty) => {
        $(#[$doc])*
        pub fn $name(x: &[f32], y: &mut [$b]) {
            check(stringify!($name), x.len(), y.len() * <$b as GgmlBlock>::BLCK);
            if available() {
                // SAFETY: the CPU supports avx2/fma/f16c (checked above); x holds exactly
                // y.len() blocks of input.
                unsafe { avx2::$name(x, y) }
            } else {
                <$b as GgmlBlock>::from_f32(x, y)
            }
        }
    };
}

/// Whether the q8_0 / q8_1 quantizers take their AVX-512 path (AVX-512 F, BW and VL besides
/// AVX2, FMA and F16C; detected once), unless `GGWEB_X86_ISA` caps the CPU paths below AVX-512.
pub fn avx512_quantizers() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        let capped = matches!(
            std::env::var("GGWEB_X86_ISA").ok().as_deref(),
            Some("avx2" | "avxvnni")
        );
        !capped
            && available()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
    })
}

macro_rules! quantizer512 {
    ($(#[$doc:meta])* $name:ident, $with:ident, $b:ty) => {
        $(#[$doc])*
        pub fn $name(x: &[f32], y: &mut [$b]) {
            if !$with(avx512_quantizers(), x, y) {
                <$b as GgmlBlock>::from_f32(x, y)
            }
        }

        /// The same with the AVX-512 path (`avx512`) or the AVX2 one; false (nothing written)
        /// when this CPU lacks it. For tests: every path bit for bit the reference.
        pub fn $with(avx512: bool, x: &[f32], y: &mut [$b]) -> bool {
            check(stringify!($name), x.len(), y.len() * <$b as GgmlBlock>::BLCK);
            if avx512 && avx512_quantizers() {
                // SAFETY: the CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C (checked above); x
                // holds exactly y.len() blocks of input.
                unsafe { avx512::$name(x, y) }
            } else if !avx512 && available() {
                // SAFETY: the CPU supports avx2/fma/f16c (checked above); x holds exactly
                // y.len() blocks of input.
                unsafe { avx2::$name(x, y) }
            } else {
                return false;
            }
            true
        }
    };
}

quantizer512!(
    /// f32 → q8_0, bit-exact with `quantize_row_q8_0_ref`.
    quantize_row_q8_0, quantize_row_q8_0_with, BlockQ8_0
);
quantizer512!(
    /// f32 → q8_1, bit-exact with `quantize_row_q8_1_ref`.
    quantize_row_q8_1, quantize_row_q8_1_with, BlockQ8_1
);
quantizer!(
    /// f32 → q8_K, bit-exact with `quantize_row_q8_K_ref`.
    quantize_row_q8_k, BlockQ8K
);

macro_rules! dequantizer {
    ($(#[$doc:meta])* $name:ident, $b:ty) => {
        $(#[$doc])*
        pub fn $name(x: &[$b], y: &mut [f32]) {
            check(stringify!($name), x.len() * <$b as GgmlBlock>::BLCK, y.len());
            if available() {
                // SAFETY: the CPU supports avx2/fma/f16c (checked above); y holds exactly
                // x.len() blocks of output.
                unsafe { avx2::$name(x, y) }
            } else {
                <$b as GgmlBlock>::to_f32(x, y)
            }
        }
    };
}

dequantizer!(
    /// q4_0 → f32, bit-exact with the scalar `dequantize_row_q4_0`.
    dequantize_row_q4_0, BlockQ4_0
);
dequantizer!(
    /// q8_0 → f32, bit-exact with the scalar `dequantize_row_q8_0`.
    dequantize_row_q8_0, BlockQ8_0
);
dequantizer!(
    /// q4_K → f32, bit-exact with the scalar `dequantize_row_q4_K` (multiply, then subtract).
    dequantize_row_q4_k, BlockQ4K
);

mod avx512 {
    //! The q8_0 / q8_1 quantizers four blocks at a time: each block's absolute maximum from a
    //! transposed reduction of the four, the scales' divisions and f16 conversions four at a
    //! time, the rounding (half away from zero, as `f32::round`) by adding 0.5 − 2⁻²⁵ with the
    //! value's sign and truncating — exact for every |x| ≤ 4096 (checked over all floats), and
    //! the values here are at most 127.5. Every function requires AVX-512 F/BW/VL, AVX2, FMA
    //! and F16C; callers check [`super::avx512_quantizers`].
    #![allow(clippy::missing_safety_doc)]

    use std::arch::x86_64::*;

    use crate::quant::{BlockQ8_0, BlockQ8_1};

    /// max (`MAX`) or i32 sum of each of four vectors, the result for vector b in every lane
    /// of 128-bit quarter b.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn fold4<const MAX: bool>(m: [__m512; 4]) -> __m512 {
        let op = |a: __m512, b: __m512| {
            if MAX {
                _mm512_max_ps(a, b)
            } else {
                _mm512_castsi512_ps(_mm512_add_epi32(
                    _mm512_castps_si512(a),
                    _mm512_castps_si512(b),
                ))
            }
        };
        // Quarters (0, 1) of a with (2, 3): a's halves side by side, then b's.
        let t01 = op(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(m[0], m[1]),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(m[0], m[1]),
        );
        let t23 = op(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(m[2], m[3]),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(m[2], m[3]),
        );
        // Quarter b: vector b's four partial lanes.
        let u = op(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(t01, t23),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(t01, t23),
        );
        let u = op(u, _mm512_permute_ps::<0b01_00_11_10>(u));
        op(u, _mm512_permute_ps::<0b10_11_00_01>(u))
    }

    /// Four blocks of 32 floats at `p`: (d, the quants as i32 per 16-element half, d per
    /// quarter).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn q8_four(p: *const f32) -> (__m512, [__m512i; 8]) {
        let v: [__m512; 8] = std::array::from_fn(|i| _mm512_loadu_ps(p.add(16 * i)));
        let amax = fold4::<true>(std::array::from_fn(|b| {
            _mm512_max_ps(_mm512_abs_ps(v[2 * b]), _mm512_abs_ps(v[2 * b + 1]))
        }));
        let d = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let nz = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(d, _mm512_setzero_ps());
        let id = _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0), d);
        let ids = [
            _mm512_shuffle_f32x4::<0b00_00_00_00>(id, id),
            _mm512_shuffle_f32x4::<0b01_01_01_01>(id, id),
            _mm512_shuffle_f32x4::<0b10_10_10_10>(id, id),
            _mm512_shuffle_f32x4::<0b11_11_11_11>(id, id),
        ];
        let sign = _mm512_set1_epi32(i32::MIN);
        let half = _mm512_set1_epi32(0x3EFF_FFFF); // 0.5 − 2⁻²⁵
        let q = std::array::from_fn(|i| {
            let x = _mm512_mul_ps(v[i], ids[i / 2]);
            let h = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(x), sign), half);
            _mm512_cvttps_epi32(_mm512_add_ps(x, _mm512_castsi512_ps(h)))
        });
        (d, q)
    }

    /// The f16 bits of lane 4·b of `v` for b = 0..4.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn f16_quarters(v: __m512) -> [u16; 4] {
        let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        let mut all = [0u16; 16];
        _mm256_storeu_si256(all.as_mut_ptr() as *mut __m256i, h);
        [all[0], all[4], all[8], all[12]]
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub unsafe fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
        let mut xs = x.chunks_exact(128);
        let mut ys = y.chunks_exact_mut(4);
        for (xb, yb) in (&mut xs).zip(&mut ys) {
            let (d, q) = q8_four(xb.as_ptr());
            let dh = f16_quarters(d);
            for (b, blk) in yb.iter_mut().enumerate() {
                blk.d = half::f16::from_bits(dh[b]);
                let p = blk.qs.as_mut_ptr() as *mut __m128i;
                _mm_storeu_si128(p, _mm512_cvtsepi32_epi8(q[2 * b]));
                _mm_storeu_si128(p.add(1), _mm512_cvtsepi32_epi8(q[2 * b + 1]));
            }
        }
        super::avx2::quantize_row_q8_0(xs.remainder(), ys.into_remainder());
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub unsafe fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
        let mut xs = x.chunks_exact(128);
        let mut ys = y.chunks_exact_mut(4);
        for (xb, yb) in (&mut xs).zip(&mut ys) {
            let (d, q) = q8_four(xb.as_ptr());
            let sums = fold4::<false>(std::array::from_fn(|b| {
                _mm512_castsi512_ps(_mm512_add_epi32(q[2 * b], q[2 * b + 1]))
            }));
            let s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_castps_si512(sums)), d);
            let (dh, sh) = (f16_quarters(d), f16_quarters(s));
            for (b, blk) in yb.iter_mut().enumerate() {
                blk.d = half::f16::from_bits(dh[b]);
                blk.s = half::f16::from_bits(sh[b]);
                let p = blk.qs.as_mut_ptr() as *mut __m128i;
                _mm_storeu_si128(p, _mm512_cvtsepi32_epi8(q[2 * b]));
                _mm_storeu_si128(p.add(1), _mm512_cvtsepi32_epi8(q[2 * b + 1]));
            }
        }
        super::avx2::quantize_row_q8_1(xs.remainder(), ys.into_remainder());
    }
}

mod avx2 {
    //! Every function requires AVX2, FMA and F16C; callers check [`super::available`].
    #![allow(clippy::missing_safety_doc)]

    use half::{bf16, f16};
    use std::arch::x86_64::*;

    use crate::dtype::QK_K;
    use crate::quant::k_quants::{q3k_scales, q8k_bsums, scales_mins_k4};
    use crate::quant::{
        BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
        BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1,
    };

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum_f32_8(x: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum_i32_8(x: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_extracti128_si256(x, 1), _mm256_castsi256_si128(x));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
        _mm_cvtsi128_si32(s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hmax_f32_8(x: __m256) -> f32 {
        let s = _mm_max_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_max_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hmin_f32_8(x: __m256) -> f32 {
        let s = _mm_min_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        let s = _mm_min_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_min_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Exact f16 → f32 with F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn h2f(h: f16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.to_bits() as i32)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn loadu_i8x32(p: *const i8) -> __m256i {
        _mm256_loadu_si256(p as *const __m256i)
    }

    /// 16 bytes → 32 nibbles: low nibbles in bytes 0..16, high nibbles in 16..32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn bytes_from_nibbles_32(qs: &[u8; 16]) -> __m256i {
        let tmp = _mm_loadu_si128(qs.as_ptr() as *const __m128i);
        let bytes = _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
        _mm256_and_si256(_mm256_set1_epi8(0x0F), bytes)
    }

    /// 32 bits → 32 bytes, 0xFF where the bit is set.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn bytes_from_bits_32(x: u32) -> __m256i {
        let shuf = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
        let bit_mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
        _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit_mask), _mm256_set1_epi64x(-1))
    }

    /// Σ of pairs of signed·signed byte products, as 8 f32 (exact integers).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn mul_sum_i8_pairs_float(x: __m256i, y: __m256i) -> __m256 {
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        mul_sum_us8_pairs_float(ax, sy)
    }

    /// Σ of pairs of unsigned·signed byte products, as 8 f32 (exact integers).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn mul_sum_us8_pairs_float(ax: __m256i, sy: __m256i) -> __m256 {
        let dot = _mm256_maddubs_epi16(ax, sy);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = i + 8 * k;
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(o)), _mm256_loadu_ps(yp.add(o)), *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(
                _mm256_loadu_ps(xp.add(i)),
                _mm256_loadu_ps(yp.add(i)),
                acc[0],
            );
            i += 8;
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut sum = hsum_f32_8(s);
        for j in i..n {
            sum += x[j] * y[j];
        }
        sum
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let va = _mm256_set1_ps(a);
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            let v = _mm256_fmadd_ps(va, _mm256_loadu_ps(xp.add(i)), _mm256_loadu_ps(yp.add(i)));
            _mm256_storeu_ps(yp.add(i), v);
            i += 8;
        }
        for j in i..n {
            y[j] += a * x[j];
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr() as *const __m128i, y.as_ptr() as *const __m128i);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = (i + 8 * k) / 8;
                let vx = _mm256_cvtph_ps(_mm_loadu_si128(xp.add(o)));
                let vy = _mm256_cvtph_ps(_mm_loadu_si128(yp.add(o)));
                *a = _mm256_fmadd_ps(vx, vy, *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            let vx = _mm256_cvtph_ps(_mm_loadu_si128(xp.add(i / 8)));
            let vy = _mm256_cvtph_ps(_mm_loadu_si128(yp.add(i / 8)));
            acc[0] = _mm256_fmadd_ps(vx, vy, acc[0]);
            i += 8;
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut sum = hsum_f32_8(s);
        for j in i..n {
            sum += h2f(x[j]) * h2f(y[j]);
        }
        sum
    }

    /// 8 bf16 at `p` widened to f32 (a bf16 is the top half of an f32).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_bf16x8(p: *const bf16) -> __m256 {
        let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32(w, 16))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_bf16(x: &[bf16], y: &[bf16]) -> f32 {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = i + 8 * k;
                *a = _mm256_fmadd_ps(load_bf16x8(xp.add(o)), load_bf16x8(yp.add(o)), *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(load_bf16x8(xp.add(i)), load_bf16x8(yp.add(i)), acc[0]);
            i += 8;
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut sum = hsum_f32_8(s);
        for j in i..n {
            sum += x[j].to_f32() * y[j].to_f32();
        }
        sum
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy_f16(a: f32, x: &[f16], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let va = _mm256_set1_ps(a);
        let (xp, yp) = (x.as_ptr() as *const __m128i, y.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            let vx = _mm256_cvtph_ps(_mm_loadu_si128(xp.add(i / 8)));
            let v = _mm256_fmadd_ps(va, vx, _mm256_loadu_ps(yp.add(i)));
            _mm256_storeu_ps(yp.add(i), v);
            i += 8;
        }
        for j in i..n {
            y[j] += a * h2f(x[j]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn f16_to_f32_row(x: &[f16], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr() as *const __m128i, y.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(yp.add(i), _mm256_cvtph_ps(_mm_loadu_si128(xp.add(i / 8))));
            i += 8;
        }
        for j in i..n {
            y[j] = h2f(x[j]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn f32_to_f16_row(x: &[f32], y: &mut [f16]) {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr() as *mut __m128i);
        let mut i = 0;
        while i + 8 <= n {
            let h = _mm256_cvtps_ph(_mm256_loadu_ps(xp.add(i)), _MM_FROUND_TO_NEAREST_INT);
            _mm_storeu_si128(yp.add(i / 8), h);
            i += 8;
        }
        for j in i..n {
            y[j] = f16::from_f32(x[j]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let off = _mm256_set1_epi8(8);
        for (bx, by) in x.iter().zip(y) {
            let d = _mm256_set1_ps(h2f(bx.d) * h2f(by.d));
            let qx = _mm256_sub_epi8(bytes_from_nibbles_32(&bx.qs), off);
            let qy = loadu_i8x32(by.qs.as_ptr());
            acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
        }
        hsum_f32_8(acc)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        for (bx, by) in x.iter().zip(y) {
            summs += h2f(bx.m) * h2f(by.s);
            let d = _mm256_set1_ps(h2f(bx.d) * h2f(by.d));
            let qx = bytes_from_nibbles_32(&bx.qs);
            let qy = loadu_i8x32(by.qs.as_ptr());
            acc = _mm256_fmadd_ps(d, mul_sum_us8_pairs_float(qx, qy), acc);
        }
        hsum_f32_8(acc) + summs
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let f0 = _mm256_set1_epi8(0xF0u8 as i8);
        for (bx, by) in x.iter().zip(y) {
            let d = _mm256_set1_ps(h2f(bx.d) * h2f(by.d));
            let hi = bytes_from_bits_32(u32::from_le_bytes(bx.qh));
            // A clear fifth bit means q − 16 < 0: set the byte's high nibble to make it negative.
            let qx = _mm256_or_si256(bytes_from_nibbles_32(&bx.qs), _mm256_andnot_si256(hi, f0));
            let qy = loadu_i8x32(by.qs.as_ptr());
            acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
        }
        hsum_f32_8(acc)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        let b10 = _mm256_set1_epi8(0x10);
        for (bx, by) in x.iter().zip(y) {
            summs += h2f(bx.m) * h2f(by.s);
            let d = _mm256_set1_ps(h2f(bx.d) * h2f(by.d));
            let hi = _mm256_and_si256(bytes_from_bits_32(u32::from_le_bytes(bx.qh)), b10);
            let qx = _mm256_or_si256(bytes_from_nibbles_32(&bx.qs), hi);
            let qy = loadu_i8x32(by.qs.as_ptr());
            acc = _mm256_fmadd_ps(d, mul_sum_us8_pairs_float(qx, qy), acc);
        }
        hsum_f32_8(acc) + summs
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (bx, by) in x.iter().zip(y) {
            let d = _mm256_set1_ps(h2f(bx.d) * h2f(by.d));
            let qx = loadu_i8x32(bx.qs.as_ptr());
            let qy = loadu_i8x32(by.qs.as_ptr());
            acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
        }
        hsum_f32_8(acc)
    }

    /// Σ bsums[j]·mins[j/2] (the min term of q4_K/q5_K).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn mins_dot(bsums: &[i16; 16], mins: &[u8; 8]) -> i32 {
        let b = _mm256_loadu_si256(bsums.as_ptr() as *const __m256i);
        let mut m16 = [0i16; 16];
        for (j, m) in m16.iter_mut().enumerate() {
            *m = mins[j / 2] as i16;
        }
        let m = _mm256_loadu_si256(m16.as_ptr() as *const __m256i);
        hsum_i32_8(_mm256_madd_epi16(b, m))
    }

    /// Scale vector for a maddubs result of 32 elements: `lo` for elements 0..16, `hi` for 16..32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales_16_16(lo: i16, hi: i16) -> __m256i {
        _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q2_k_q8_k(x: &[BlockQ2K], y: &[BlockQ8K]) -> f32 {
        let m3 = _mm256_set1_epi8(3);
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = 0f32;
        for (bx, by) in x.iter().zip(y) {
            let d = by.d * h2f(bx.d);
            let dmin = by.d * h2f(bx.dmin);
            let mut mins = [0i16; 16];
            for (m, s) in mins.iter_mut().zip(&bx.scales) {
                *m = (s >> 4) as i16;
            }
            let b = _mm256_loadu_si256(by.bsums.as_ptr() as *const __m256i);
            let m = _mm256_loadu_si256(mins.as_ptr() as *const __m256i);
            acc_m += dmin * hsum_i32_8(_mm256_madd_epi16(b, m)) as f32;
            let mut sumi = _mm256_setzero_si256();
            let mut is = 0;
            for half in 0..2 {
                // Bits 0–1 of every byte are the next 2-bit quants (16-bit shifts only bring the
                // neighbouring byte's bits in above them).
                let mut q2 = _mm256_loadu_si256(bx.qs.as_ptr().add(32 * half) as *const __m256i);
                for shift in 0..4 {
                    let q = _mm256_and_si256(q2, m3);
                    q2 = _mm256_srli_epi16(q2, 2);
                    let q8 = loadu_i8x32(by.qs.as_ptr().add(128 * half + 32 * shift));
                    let sc = scales_16_16(
                        (bx.scales[is] & 0xF) as i16,
                        (bx.scales[is + 1] & 0xF) as i16,
                    );
                    is += 2;
                    let p = _mm256_madd_epi16(sc, _mm256_maddubs_epi16(q, q8));
                    sumi = _mm256_add_epi32(sumi, p);
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_f32_8(acc) - acc_m
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q3_k_q8_k(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
        let m3 = _mm256_set1_epi8(3);
        let m1 = _mm256_set1_epi8(1);
        let four = _mm256_set1_epi8(4);
        let mut acc = _mm256_setzero_ps();
        for (bx, by) in x.iter().zip(y) {
            let d = by.d * h2f(bx.d);
            let sc = q3k_scales(&bx.scales);
            let mut hb = _mm256_loadu_si256(bx.hmask.as_ptr() as *const __m256i);
            let mut sumi = _mm256_setzero_si256();
            let mut g = 0;
            for half in 0..2 {
                let mut q2 = _mm256_loadu_si256(bx.qs.as_ptr().add(32 * half) as *const __m256i);
                for shift in 0..4 {
                    // q + 4·hbit is the unsigned quant; subtract 4·q8 afterwards.
                    let h = _mm256_slli_epi16(_mm256_and_si256(hb, m1), 2);
                    hb = _mm256_srli_epi16(hb, 1);
                    let q = _mm256_or_si256(_mm256_and_si256(q2, m3), h);
                    q2 = _mm256_srli_epi16(q2, 2);
                    let q8 = loadu_i8x32(by.qs.as_ptr().add(128 * half + 32 * shift));
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(q, q8),
                        _mm256_maddubs_epi16(four, q8),
                    );
                    let s = scales_16_16(sc[g] as i16, sc[g + 1] as i16);
                    g += 2;
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s, p));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_f32_8(acc)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
        let m4 = _mm256_set1_epi8(0x0F);
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = 0f32;
        for (bx, by) in x.iter().zip(y) {
            let d = by.d * h2f(bx.d);
            let dmin = by.d * h2f(bx.dmin);
            let (sc, mins) = scales_mins_k4(&bx.scales);
            acc_m += dmin * mins_dot(&by.bsums, &mins) as f32;
            let mut sumi = _mm256_setzero_si256();
            for j in 0..QK_K / 64 {
                let q4 = _mm256_loadu_si256(bx.qs.as_ptr().add(32 * j) as *const __m256i);
                let q4l = _mm256_and_si256(q4, m4);
                let q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                let q8l = loadu_i8x32(by.qs.as_ptr().add(64 * j));
                let q8h = loadu_i8x32(by.qs.as_ptr().add(64 * j + 32));
                let pl = _mm256_madd_epi16(
                    _mm256_set1_epi16(sc[2 * j] as i16),
                    _mm256_maddubs_epi16(q4l, q8l),
                );
                let ph = _mm256_madd_epi16(
                    _mm256_set1_epi16(sc[2 * j + 1] as i16),
                    _mm256_maddubs_epi16(q4h, q8h),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_f32_8(acc) - acc_m
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
        let m4 = _mm256_set1_epi8(0x0F);
        let m1 = _mm256_set1_epi8(1);
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = 0f32;
        for (bx, by) in x.iter().zip(y) {
            let d = by.d * h2f(bx.d);
            let dmin = by.d * h2f(bx.dmin);
            let (sc, mins) = scales_mins_k4(&bx.scales);
            acc_m += dmin * mins_dot(&by.bsums, &mins) as f32;
            // Bit 0 of every byte of `hb` is the next high bit (shifting 16-bit lanes is fine:
            // bits coming in from the neighbouring byte land above bit 0).
            let mut hb = _mm256_loadu_si256(bx.qh.as_ptr() as *const __m256i);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..QK_K / 64 {
                let q5 = _mm256_loadu_si256(bx.qs.as_ptr().add(32 * j) as *const __m256i);
                let hl = _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4);
                hb = _mm256_srli_epi16(hb, 1);
                let hh = _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4);
                hb = _mm256_srli_epi16(hb, 1);
                let q5l = _mm256_or_si256(_mm256_and_si256(q5, m4), hl);
                let q5h = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q5, 4), m4), hh);
                let q8l = loadu_i8x32(by.qs.as_ptr().add(64 * j));
                let q8h = loadu_i8x32(by.qs.as_ptr().add(64 * j + 32));
                let pl = _mm256_madd_epi16(
                    _mm256_set1_epi16(sc[2 * j] as i16),
                    _mm256_maddubs_epi16(q5l, q8l),
                );
                let ph = _mm256_madd_epi16(
                    _mm256_set1_epi16(sc[2 * j + 1] as i16),
                    _mm256_maddubs_epi16(q5h, q8h),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_f32_8(acc) - acc_m
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn vec_dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(0x03);
        let m32s = _mm256_set1_epi8(32);
        let mut acc = _mm256_setzero_ps();
        for (bx, by) in x.iter().zip(y) {
            let d = by.d * h2f(bx.d);
            let mut sumi = _mm256_setzero_si256();
            for half in 0..2 {
                let ql = bx.ql.as_ptr().add(64 * half);
                let q4b1 = _mm256_loadu_si256(ql as *const __m256i);
                let q4b2 = _mm256_loadu_si256(ql.add(32) as *const __m256i);
                let qh = _mm256_loadu_si256(bx.qh.as_ptr().add(32 * half) as *const __m256i);
                let h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4);
                let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4);
                let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4);
                let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4);
                let q = [
                    _mm256_or_si256(_mm256_and_si256(q4b1, m4), h0),
                    _mm256_or_si256(_mm256_and_si256(q4b2, m4), h1),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4b1, 4), m4), h2),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4b2, 4), m4), h3),
                ];
                let sc = &bx.scales[8 * half..8 * half + 8];
                for (k, qk) in q.iter().enumerate() {
                    let q8 = loadu_i8x32(by.qs.as_ptr().add(128 * half + 32 * k));
                    // (q − 32)·q8 = q·q8 − 32·q8, both unsigned·signed.
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(*qk, q8),
                        _mm256_maddubs_epi16(m32s, q8),
                    );
                    let scv = scales_16_16(sc[2 * k] as i16, sc[2 * k + 1] as i16);
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scv, p));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_f32_8(acc)
    }

    /// 32 signed bytes → 32 f32 times `d`, stored at `y` (32 floats).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn store_scaled_i8x32(q: __m256i, d: __m256, m: __m256, y: *mut f32) {
        let lo = _mm256_castsi256_si128(q);
        let hi = _mm256_extracti128_si256(q, 1);
        let parts = [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)];
        for (k, p) in parts.iter().enumerate() {
            let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(*p));
            _mm256_storeu_ps(y.add(8 * k), _mm256_sub_ps(_mm256_mul_ps(v, d), m));
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dequantize_row_q4_0(x: &[BlockQ4_0], y: &mut [f32]) {
        let off = _mm256_set1_epi8(8);
        let zero = _mm256_setzero_ps();
        for (b, out) in x.iter().zip(y.chunks_exact_mut(32)) {
            let q = _mm256_sub_epi8(bytes_from_nibbles_32(&b.qs), off);
            store_scaled_i8x32(q, _mm256_set1_ps(h2f(b.d)), zero, out.as_mut_ptr());
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dequantize_row_q8_0(x: &[BlockQ8_0], y: &mut [f32]) {
        let zero = _mm256_setzero_ps();
        for (b, out) in x.iter().zip(y.chunks_exact_mut(32)) {
            let q = loadu_i8x32(b.qs.as_ptr());
            store_scaled_i8x32(q, _mm256_set1_ps(h2f(b.d)), zero, out.as_mut_ptr());
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dequantize_row_q4_k(x: &[BlockQ4K], y: &mut [f32]) {
        let m4 = _mm256_set1_epi8(0x0F);
        for (b, out) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
            let d = h2f(b.d);
            let min = h2f(b.dmin);
            let (sc, m) = scales_mins_k4(&b.scales);
            for j in 0..QK_K / 64 {
                let q = _mm256_loadu_si256(b.qs.as_ptr().add(32 * j) as *const __m256i);
                let o = out.as_mut_ptr().add(64 * j);
                let (d1, m1) = (d * sc[2 * j] as f32, min * m[2 * j] as f32);
                let (d2, m2) = (d * sc[2 * j + 1] as f32, min * m[2 * j + 1] as f32);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                store_scaled_i8x32(lo, _mm256_set1_ps(d1), _mm256_set1_ps(m1), o);
                store_scaled_i8x32(hi, _mm256_set1_ps(d2), _mm256_set1_ps(m2), o.add(32));
            }
        }
    }

    /// C's `roundf` (half away from zero), exactly.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn roundf_ps(v: __m256) -> __m256 {
        let t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        let sign = _mm256_set1_ps(-0.0);
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
        let big = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5), _CMP_GE_OQ);
        let one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0));
        _mm256_add_ps(t, _mm256_and_ps(big, one))
    }

    /// Pack 4×8 i32 (each in −128..=127) into 32 i8 in order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pack_i32x32(i: [__m256i; 4]) -> __m256i {
        let a = _mm256_packs_epi32(i[0], i[1]);
        let b = _mm256_packs_epi32(i[2], i[3]);
        let c = _mm256_packs_epi16(a, b);
        _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    /// q8_0/q8_1 core: quantize 32 floats, return (d, Σq).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_block(x: &[f32], qs: &mut [i8; 32]) -> (f32, i32) {
        let p = x.as_ptr();
        let v = [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ];
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_andnot_ps(sign, v[0]);
        for vk in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vk));
        }
        let amax = hmax_f32_8(m);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let vid = _mm256_set1_ps(id);
        let mut i = [_mm256_setzero_si256(); 4];
        for k in 0..4 {
            i[k] = _mm256_cvttps_epi32(roundf_ps(_mm256_mul_ps(v[k], vid)));
        }
        let sum = hsum_i32_8(_mm256_add_epi32(
            _mm256_add_epi32(i[0], i[1]),
            _mm256_add_epi32(i[2], i[3]),
        ));
        _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, pack_i32x32(i));
        (d, sum)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
        for (xb, yb) in x.chunks_exact(32).zip(y.iter_mut()) {
            let (d, _) = q8_block(xb, &mut yb.qs);
            yb.d = f16::from_f32(d);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
        for (xb, yb) in x.chunks_exact(32).zip(y.iter_mut()) {
            let (d, sum) = q8_block(xb, &mut yb.qs);
            yb.d = f16::from_f32(d);
            yb.s = f16::from_f32(sum as f32 * d);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
        for (xb, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
            let p = xb.as_ptr();
            let mut vmax = _mm256_loadu_ps(p);
            let mut vmin = vmax;
            for k in 1..QK_K / 8 {
                let v = _mm256_loadu_ps(p.add(8 * k));
                vmax = _mm256_max_ps(vmax, v);
                vmin = _mm256_min_ps(vmin, v);
            }
            let (hi, lo) = (hmax_f32_8(vmax), hmin_f32_8(vmin));
            let amax = hi.abs().max(lo.abs());
            if amax == 0.0 {
                yb.d = 0.0;
                yb.qs = [0; QK_K];
                yb.bsums = [0; QK_K / 16];
                continue;
            }
            // ggml keeps the first value of largest magnitude (its sign matters).
            let max = if hi.abs() != lo.abs() {
                if hi.abs() == amax {
                    hi
                } else {
                    lo
                }
            } else {
                xb.iter().copied().find(|v| v.abs() == amax).unwrap_or(hi)
            };
            let iscale = -127.0 / max;
            let vs = _mm256_set1_ps(iscale);
            let v127 = _mm256_set1_epi32(127);
            for g in 0..QK_K / 32 {
                let mut i = [_mm256_setzero_si256(); 4];
                for (k, ik) in i.iter_mut().enumerate() {
                    let v = _mm256_mul_ps(vs, _mm256_loadu_ps(p.add(32 * g + 8 * k)));
                    let r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    *ik = _mm256_min_epi32(_mm256_cvtps_epi32(r), v127);
                }
                _mm256_storeu_si256(
                    yb.qs.as_mut_ptr().add(32 * g) as *mut __m256i,
                    pack_i32x32(i),
                );
            }
            q8k_bsums(yb);
            yb.d = 1.0 / iscale;
        }
    }
}
