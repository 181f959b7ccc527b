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
fn table_covers_exactly_the_computable_types() {
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
    assert_eq!(type_traits(DType::Q4_0).unwrap().vec_dot_type, DType::Q8_0);
    assert_eq!(type_traits(DType::Q5_1).unwrap().vec_dot_type, DType::Q8_1);
    assert_eq!(type_traits(DType::Q6_K).unwrap().vec_dot_type, DType::Q8_K);
    assert_eq!(type_traits(DType::BF16).unwrap().vec_dot_type, DType::BF16);
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

#[test]
fn misaligned_bytes_are_handled() {
    let src: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
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
        let tt = type_traits(t).unwrap();
        let vd = tt.vec_dot_type;
        let mut y = vec![0u8; vd.row_size(512).unwrap() + 1];
        (type_traits(vd).unwrap().from_f32)(&src, &mut y[1..]);
        let d1 = (tt.vec_dot)(512, &buf[1..], &y[1..]);
        let y2 = y[1..].to_vec();
        let d2 = (tt.vec_dot)(512, &aligned, &y2);
        assert_eq!(d1, d2, "{t}");
    }
}
