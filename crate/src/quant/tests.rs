use super::*;

#[test]
fn nearest_int_is_round_half_even() {
    for (x, want) in [
        (0.5f32, 0),
        (1.5, 2),
        (2.5, 2),
        (-0.5, 0),
        (-1.5, -2),
        (3.49, 3),
        (-7.6, -8),
    ] {
        assert_eq!(nearest_int(x), want, "{x}");
        assert_eq!(nearest_int(x), x.round_ties_even() as i32);
    }
}

#[test]
fn block_sizes_match_dtype() {
    fn check<B: GgmlBlock>() {
        assert_eq!(
            std::mem::size_of::<B>(),
            B::DTYPE.type_size(),
            "{}",
            B::DTYPE
        );
        assert_eq!(B::BLCK, B::DTYPE.block_size(), "{}", B::DTYPE);
    }
    check::<f32>();
    check::<half::f16>();
    check::<half::bf16>();
    check::<BlockQ4_0>();
    check::<BlockQ4_1>();
    check::<BlockQ5_0>();
    check::<BlockQ5_1>();
    check::<BlockQ8_0>();
    check::<BlockQ8_1>();
    check::<BlockQ2K>();
    check::<BlockQ3K>();
    check::<BlockQ4K>();
    check::<BlockQ5K>();
    check::<BlockQ6K>();
    check::<BlockQ8K>();
}

#[test]
fn row_functions_check_lengths_and_types() {
    let src = vec![0.5f32; 64];
    let mut dst = vec![0u8; 36];
    quantize_row(DType::Q4_0, &src, &mut dst).unwrap();
    assert!(quantize_row(DType::Q4_0, &src, &mut dst[..35]).is_err());
    assert!(quantize_row(DType::Q4_0, &src[..63], &mut dst).is_err());
    let mut back = vec![0f32; 64];
    dequantize_row(DType::Q4_0, &dst, &mut back).unwrap();
    assert!(dequantize_row(DType::Q4_0, &dst[..18], &mut back).is_err());
    assert!(matches!(
        dequantize_row(DType::IQ2_XXS, &[0u8; 66], &mut [0f32; 256]),
        Err(Error::UnsupportedType { .. })
    ));
    assert!(matches!(
        quantize_row(DType::I32, &[0f32; 4], &mut [0u8; 16]),
        Err(Error::UnsupportedType { .. })
    ));
}
