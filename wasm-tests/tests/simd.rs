//! The wasm kernels (SIMD128 in the simd build, scalar otherwise) against the scalar references,
//! through the same dispatch the CPU backend uses (`backend::cpu::type_traits`, `backend::cpu::arch`).
//! Quantized dots: the integer sums are exact, so SIMD and scalar agree to f32 rounding of the
//! per-block scale products (relative 1e-5 of Σ|terms|).
use ggweb::backend::cpu::{arch, type_traits};
use ggweb::quant::type_traits_scalar;
use ggweb::DType;
use ggweb_testing::Rng;
use half::f16;
use wasm_bindgen_test::*;

#[wasm_bindgen_test]
fn build_reports_kernels() {
    let name = ggweb::backend::cpu::ops::simd_name();
    assert_eq!(
        name.starts_with("wasm32 simd128"),
        cfg!(target_feature = "simd128"),
        "{name}"
    );
    assert_eq!(
        name.ends_with("+ relaxed-simd"),
        cfg!(target_feature = "relaxed-simd"),
        "{name}"
    );
}

#[wasm_bindgen_test]
fn f32_and_f16_vectors() {
    let mut rng = Rng::new(7);
    for n in [0usize, 1, 3, 4, 15, 16, 17, 63, 64, 100, 1000, 4097] {
        let (x, y) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
        let scale: f32 = x.iter().zip(&y).map(|(a, b)| (a * b).abs()).sum::<f32>() + 1e-6;
        let d = arch::dot_f32(&x, &y) - arch::dot_f32_ref(&x, &y);
        assert!(d.abs() <= 1e-5 * scale, "dot_f32 n={n}: {d}");
        let (xh, yh): (Vec<f16>, Vec<f16>) = (
            x.iter().map(|&v| f16::from_f32(v)).collect(),
            y.iter().map(|&v| f16::from_f32(v)).collect(),
        );
        let d = arch::dot_f16(&xh, &yh) - arch::dot_f16_ref(&xh, &yh);
        assert!(d.abs() <= 1e-5 * scale, "dot_f16 n={n}: {d}");
        let mut y1 = y.clone();
        let mut y2 = y.clone();
        arch::axpy_f32(0.37, &x, &mut y1);
        arch::axpy_f32_ref(0.37, &x, &mut y2);
        assert_eq!(y1, y2, "axpy_f32 n={n}");
        let mut y1 = y.clone();
        let mut y2 = y.clone();
        arch::axpy_f16(-1.5, &xh, &mut y1);
        arch::axpy_f16_ref(-1.5, &xh, &mut y2);
        assert_eq!(y1, y2, "axpy_f16 n={n}");
    }
}

#[wasm_bindgen_test]
fn quantized_dots_vs_scalar() {
    let mut rng = Rng::new(99);
    let types = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    for dt in types {
        let fast = type_traits(dt).expect("computable");
        let slow = type_traits_scalar(dt).expect("computable");
        let vdt = fast.vec_dot_type;
        let yt = type_traits_scalar(vdt).unwrap();
        for blocks in [1usize, 3, 8] {
            let n = blocks * dt.block_size().max(vdt.block_size());
            let (x, y) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
            let mut xq = vec![0u8; dt.row_size(n).unwrap()];
            let mut yq = vec![0u8; vdt.row_size(n).unwrap()];
            (slow.from_f32)(&x, &mut xq);
            (yt.from_f32)(&y, &mut yq);
            let a = (fast.vec_dot)(n, &xq, &yq);
            let b = (slow.vec_dot)(n, &xq, &yq);
            let scale: f32 = x.iter().zip(&y).map(|(p, q)| (p * q).abs()).sum::<f32>();
            assert!(
                (a - b).abs() <= 1e-5 * scale.max(1.0),
                "{dt} n={n}: simd {a} vs scalar {b}"
            );
        }
    }
}

/// The fast row conversions (f16 ↔ f32 of the KV cache, f32 → q8_0/q8_1 activations) are
/// bit-exact with the scalar references: every f16 value (subnormals, ±0, ±inf, NaNs), and
/// blocks with exact halves, zeros, huge values and NaN.
#[wasm_bindgen_test]
fn row_conversions_bit_exact() {
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    let (fast, slow) = (
        type_traits(DType::F16).unwrap(),
        type_traits_scalar(DType::F16).unwrap(),
    );
    let n = all.len() / 2;
    let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
    (fast.to_f32)(&all, &mut a);
    (slow.to_f32)(&all, &mut b);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "f16 {i:#06x}: {x} vs {y}");
    }
    // f32 → f16 (the KV cache's new rows): every sign, exponent and top-ten mantissa pattern,
    // the low 13 bits at each rounding case (0, 1, below half, half, above half, all ones);
    // a count not a multiple of 8 (the tail).
    let lows = [0u32, 1, 0x0fff, 0x1000, 0x1001, 0x1fff];
    let xs: Vec<f32> = (0..1u32 << 19)
        .flat_map(|hi| lows.map(|lo| f32::from_bits(hi << 13 | lo)))
        .chain([1.0 + 1.0 / 2048.0, -65519.0, 65520.0])
        .collect();
    let (fast, slow) = (
        type_traits(DType::F16).unwrap(),
        type_traits_scalar(DType::F16).unwrap(),
    );
    let (mut ha, mut hb) = (vec![0u8; 2 * xs.len()], vec![0u8; 2 * xs.len()]);
    (fast.from_f32)(&xs, &mut ha);
    (slow.from_f32)(&xs, &mut hb);
    if let Some(i) = (0..xs.len()).find(|&i| ha[2 * i..2 * i + 2] != hb[2 * i..2 * i + 2]) {
        panic!(
            "f32 {:#010x} → f16 {:02x?}, want {:02x?}",
            xs[i].to_bits(),
            &ha[2 * i..2 * i + 2],
            &hb[2 * i..2 * i + 2]
        );
    }
    let mut rng = Rng::new(5);
    let mut x = rng.vec(32 * 40, -3.0, 3.0);
    // Exact halves after scaling: a block whose amax is 127 makes x·(1/d) = x.
    for (j, v) in x[..32].iter_mut().enumerate() {
        *v = j as f32 - 15.5;
    }
    x[31] = 127.0;
    x[32..64].fill(0.0);
    x[64] = f32::NAN;
    x[100] = 1e30;
    x[130] = -1e-30;
    for dt in [DType::Q8_0, DType::Q8_1] {
        let (fast, slow) = (type_traits(dt).unwrap(), type_traits_scalar(dt).unwrap());
        for len in [32usize, 96, x.len()] {
            let mut qa = vec![0u8; dt.row_size(len).unwrap()];
            let mut qb = vec![0u8; dt.row_size(len).unwrap()];
            (fast.from_f32)(&x[..len], &mut qa);
            (slow.from_f32)(&x[..len], &mut qb);
            assert_eq!(qa, qb, "{dt} from_f32, {len} values");
        }
    }
}

/// An attention dot `have` of the f16 row `k` with `q` against the f64 sum: within 1e-6 of Σ|terms|,
/// or where that sum is inf or NaN (an inf or NaN in the row), the same inf or a NaN.
fn check_dot(k: &[f16], q: &[f32], have: f32, tag: &str) {
    let terms = k.iter().zip(q).map(|(k, q)| k.to_f64() * *q as f64);
    let want: f64 = terms.clone().sum();
    if !want.is_finite() {
        let same = have.to_bits() == (want as f32).to_bits() || (have.is_nan() && want.is_nan());
        assert!(same, "{tag}: {have} vs {want}");
        return;
    }
    let scale: f64 = terms.map(f64::abs).sum::<f64>() + 1e-6;
    let d = (have as f64 - want).abs();
    assert!(d <= 1e-6 * scale, "{tag}: {d}");
}

/// The K dots' two conversions (SIMD128): rows of finite values take the short one (no inf / NaN
/// fix), rows with an inf or NaN the exact one. Subnormal f16, ±0, ±65504, and inf / NaN placed
/// in one row at a time, on each side of the eight-value vectors and in the scalar tail: the
/// dots against f64 sums (inf and NaN where those give them), and the row-by-row V update with
/// those rows (and a weight of 40000) bit for bit against the scalar axpy (NaN as NaN). Fails if
/// the short conversion is taken for a row with an inf or NaN (it reads them as ±2^16·1.m). The
/// block V update's conversions: `attention_v_block_vs_rows`.
#[wasm_bindgen_test]
fn attention_f16_kernels_specials_and_subnormals() {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let mut rng = Rng::new(99);
    let odd = [
        f16::from_bits(0x0001),
        f16::from_bits(0x83ff),
        f16::from_bits(0x0200),
        f16::from_f32(-0.0),
        f16::MAX,
        f16::MIN,
        f16::MIN_POSITIVE,
    ];
    let specials = [f16::INFINITY, f16::NEG_INFINITY, f16::NAN, f16::from_bits(0x7e01)];
    for dk in [8usize, 13, 64, 67] {
        for g in [1usize, 3] {
            for case in 0..=specials.len() * 3 {
                let mut rows: Vec<Vec<f16>> = (0..4)
                    .map(|_| rng.vec(dk, -1.0, 1.0).into_iter().map(f16::from_f32).collect())
                    .collect();
                for (i, v) in odd.iter().enumerate() {
                    rows[i % 4][(5 * i + 1) % dk] = *v;
                }
                // case 0: finite only; else one special in row case % 4, at the first, a
                // middle or the last position.
                if case > 0 {
                    let at = [0, dk / 2, dk - 1][(case - 1) % 3];
                    rows[case % 4][at] = specials[(case - 1) / 3];
                }
                let q = rng.vec(g * dk, -1.0, 1.0);
                let ptrs = [0, 1, 2, 3].map(|r| rows[r].as_ptr());
                let mut out = vec![[0f32; 4]; g];
                // SAFETY: every row holds dk values, q holds g queries of dk.
                let have = unsafe { arch::dot4_heads_f16_f32(ptrs, &q, &mut out) };
                assert_eq!(have, cfg!(target_feature = "simd128"), "dk {dk}");
                if !have {
                    return;
                }
                for h in 0..g {
                    let qh = &q[h * dk..(h + 1) * dk];
                    for r in 0..4 {
                        let tag = format!("dk {dk} heads {g} case {case} head {h} row {r}");
                        check_dot(&rows[r], qh, out[h][r], &tag);
                    }
                }
                for big in [false, true] {
                    let v = &rows[case % 4];
                    let mut ws = rng.vec(g, -1.0, 1.0);
                    if big {
                        ws[g - 1] = 40000.0;
                    }
                    let accs = rng.vec(g * dk, -1.0, 1.0);
                    let mut got = accs.clone();
                    arch::axpy_heads_f16(&ws, v, &mut got);
                    let mut want = accs.clone();
                    for (h, w) in ws.iter().enumerate() {
                        arch::axpy_f16_ref(*w, v, &mut want[h * dk..(h + 1) * dk]);
                    }
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            same(*a, *b),
                            "axpy_heads_f16 dk {dk} heads {g} case {case} big {big} at {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}

/// The block V update (`arch::v_block_f16`; SIMD128: four rows converted at a time, each lane's
/// four weights at once) bit for bit against the scalar axpy row by row in order, skipping a
/// lane's zero weights: odd head sizes (a scalar tail; 600 past the stack buffer), block
/// lengths not a multiple of four, 1–9 lanes, zero weights scattered (some groups of four
/// whole, some not), a NaN row under zero weights only, an inf row and subnormals under
/// nonzero ones (inf and NaN results, the exact conversion for that group).
#[wasm_bindgen_test]
fn attention_v_block_vs_rows() {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let mut rng = Rng::new(5);
    for (dv, n) in [(64usize, 32usize), (7, 5), (24, 9), (67, 13), (128, 6), (600, 5), (8, 1)] {
        for nl in 1..=9 {
            let pad = 3;
            let rs = dv + pad;
            let mut v: Vec<f16> =
                rng.vec(n * rs, -2.0, 2.0).into_iter().map(f16::from_f32).collect();
            v[(2 % n) * rs + dv / 3] = f16::from_bits(0x8001);
            let wstride = n + 2;
            let mut ws = rng.vec(nl * wstride, -1.0, 1.0);
            for (i, w) in ws.iter_mut().enumerate() {
                if (i * 7) % 11 == 0 {
                    *w = 0.0;
                }
            }
            if n > 1 {
                // Row 1: a NaN where every lane's weight is 0.
                v[rs + dv / 2] = f16::NAN;
                for l in 0..nl {
                    ws[l * wstride + 1] = 0.0;
                }
            }
            if n > 4 {
                // Row 4: an inf where the weights are not 0.
                v[4 * rs + dv - 1] = f16::INFINITY;
                for l in 0..nl {
                    ws[l * wstride + 4] = 0.5;
                }
            }
            let init = rng.vec(nl * dv, -1.0, 1.0);
            let mut got = init.clone();
            // SAFETY: n rows of dv (+ pad) f16; weights and accumulators sized as required.
            unsafe {
                arch::v_block_f16(&ws, wstride, nl, v.as_ptr() as *const u8, 2 * rs, n, &mut got)
            };
            let mut want = init.clone();
            for j in 0..n {
                for l in 0..nl {
                    let w = ws[l * wstride + j];
                    if w != 0.0 {
                        arch::axpy_f16_ref(w, &v[j * rs..j * rs + dv], &mut want[l * dv..(l + 1) * dv]);
                    }
                }
            }
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(same(*a, *b), "dv {dv} n {n} lanes {nl} at {i}: block {a} vs rows {b}");
            }
        }
    }
}

/// The block scores (`arch::dots_f16_block`) bit for bit against `dot4_heads_f16_f32` group by
/// group: strided and back-to-back rows, block lengths not a multiple of four, 1–9 lanes, an
/// inf in one group (the exact conversion there, the short one elsewhere) and subnormals.
#[wasm_bindgen_test]
fn attention_dots_block_vs_groups() {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let mut rng = Rng::new(11);
    for (dk, n) in [(64usize, 32usize), (7, 5), (24, 9), (67, 13), (128, 6), (600, 5), (8, 1)] {
        for pad in [0usize, 3] {
            for nl in 1..=9 {
                let rs = dk + pad;
                let mut k: Vec<f16> =
                    rng.vec(n * rs, -2.0, 2.0).into_iter().map(f16::from_f32).collect();
                k[(2 % n) * rs + dk / 3] = f16::from_bits(0x8001);
                if n > 4 {
                    k[4 * rs + dk - 1] = f16::INFINITY;
                }
                let q = rng.vec(nl * dk, -1.0, 1.0);
                let ostride = n + 2;
                let mut got = vec![f32::NAN; (nl - 1) * ostride + n];
                // SAFETY: n rows of dk (+ pad) f16; out sized as required.
                let have = unsafe {
                    arch::dots_f16_block(k.as_ptr() as *const u8, 2 * rs, n, &q, nl, &mut got, ostride)
                };
                assert_eq!(have, cfg!(target_feature = "simd128"), "dk {dk}");
                if !have {
                    return;
                }
                for j in (0..n).step_by(4) {
                    let cnt = (n - j).min(4);
                    let ptrs = [0, 1, 2, 3].map(|r| k[(j + r.min(cnt - 1)) * rs..].as_ptr());
                    let mut want = vec![[0f32; 4]; nl];
                    // SAFETY: every row holds dk values, q holds nl queries of dk.
                    unsafe { arch::dot4_heads_f16_f32(ptrs, &q, &mut want) };
                    for (l, w) in want.iter().enumerate() {
                        for r in 0..cnt {
                            let a = got[l * ostride + j + r];
                            assert!(
                                same(a, w[r]),
                                "dk {dk} pad {pad} n {n} lanes {nl} lane {l} row {}: block {a} vs group {}",
                                j + r,
                                w[r]
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The fused attention's f16 kernels (SIMD128: K rows converted once for all heads) against
/// f64 sums, on odd head sizes and head counts, and the V update bit for bit against the
/// scalar axpy (the same mul then add per element).
#[wasm_bindgen_test]
fn attention_f16_kernels_vs_scalar() {
    let mut rng = Rng::new(2024);
    for dk in [1usize, 7, 8, 9, 20, 64, 67, 128, 520] {
        for g in [1usize, 2, 3, 8] {
            let rows: Vec<Vec<f16>> = (0..4)
                .map(|_| rng.vec(dk, -1.0, 1.0).into_iter().map(f16::from_f32).collect())
                .collect();
            let q = rng.vec(g * dk, -1.0, 1.0);
            let ptrs = [0, 1, 2, 3].map(|r| rows[r].as_ptr());
            let mut out = vec![[0f32; 4]; g];
            // SAFETY: every row holds dk values, q holds g queries of dk.
            let have = unsafe { arch::dot4_heads_f16_f32(ptrs, &q, &mut out) };
            assert_eq!(have, cfg!(target_feature = "simd128"), "dk {dk}");
            if !have {
                return;
            }
            for h in 0..g {
                let qh = &q[h * dk..(h + 1) * dk];
                // SAFETY: as above.
                let one = unsafe { arch::dot4_f16_f32(ptrs, qh) }.expect("simd128 has it");
                assert_eq!(one, out[h], "dk {dk} heads {g}: one head vs all heads, head {h}");
                for r in 0..4 {
                    check_dot(&rows[r], qh, out[h][r], &format!("dk {dk} heads {g} head {h} row {r}"));
                }
            }
            let v: Vec<f16> = rng.vec(dk, -2.0, 2.0).into_iter().map(f16::from_f32).collect();
            let mut ws = rng.vec(g, -1.0, 1.0);
            ws[0] = 0.0;
            let accs = rng.vec(g * dk, -1.0, 1.0);
            let mut got = accs.clone();
            arch::axpy_heads_f16(&ws, &v, &mut got);
            let mut want = accs.clone();
            for (h, w) in ws.iter().enumerate() {
                if *w != 0.0 {
                    arch::axpy_f16_ref(*w, &v, &mut want[h * dk..(h + 1) * dk]);
                }
            }
            assert_eq!(got, want, "axpy_heads_f16 dk {dk} heads {g}");
        }
    }
}

/// The element-wise row kernels (`arch::unary_row`: SiLU, sigmoid, GELU) and the softmax's
/// `arch::exp_sum_f32` bit for bit against the scalar formulas on `exp_approx`: random values,
/// the clamp edges, ±0, subnormals, ±inf, NaN; every length 0..=19 (the tails) and a long row;
/// in place too.
#[wasm_bindgen_test]
fn unary_rows_bit_exact() {
    let mut rng = Rng::new(11);
    let mut x = rng.vec(1003, -12.0, 12.0);
    let specials = [
        -87.3f32, -87.31, -88.0, -100.0, 87.9, 88.0, 88.5, 200.0, 0.0, -0.0, 1e-40, -1e-40,
        f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-7, -30.0, 30.0,
    ];
    x[..specials.len()].copy_from_slice(&specials);
    let silu = |v: f32| v / (1.0 + arch::exp_approx(-v));
    let sigmoid = |v: f32| 1.0 / (1.0 + arch::exp_approx(-v));
    let gelu = |v: f32| {
        let u = 0.797_884_6f32 * v * (1.0 + 0.044_715f32 * v * v);
        v / (1.0 + arch::exp_approx(-2.0 * u))
    };
    let cases: [(arch::UnaryRow, &dyn Fn(f32) -> f32); 3] = [
        (arch::UnaryRow::Silu, &silu),
        (arch::UnaryRow::Sigmoid, &sigmoid),
        (arch::UnaryRow::Gelu, &gelu),
    ];
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    for (k, f) in cases {
        for n in (0..=19).chain([x.len()]) {
            let src = &x[..n];
            let mut out = vec![7f32; n + 1];
            // SAFETY: n readable values, n + 1 writable.
            let had = unsafe { arch::unary_row(k, src.as_ptr(), out.as_mut_ptr(), n) };
            assert_eq!(had, cfg!(target_feature = "simd128"));
            if !had {
                continue;
            }
            for (i, (&o, &v)) in out.iter().zip(src).enumerate() {
                assert!(same(o, f(v)), "n {n} at {i}: f({v}) = {o}, want {}", f(v));
            }
            assert_eq!(out[n], 7.0, "n {n}: wrote past the row");
            let mut inplace = src.to_vec();
            // SAFETY: the same n values read and written.
            unsafe { arch::unary_row(k, inplace.as_ptr(), inplace.as_mut_ptr(), n) };
            assert!(inplace.iter().zip(&out).all(|(a, b)| same(*a, *b)), "n {n} in place");
        }
    }
    for n in (0..=19).chain([150, x.len()]) {
        let max = x[..n].iter().copied().filter(|v| v.is_finite()).fold(-1.0f32, f32::max);
        let mut have = x[..n].to_vec();
        let want: Vec<f32> = x[..n].iter().map(|&v| arch::exp_approx(v - max)).collect();
        let s_have = arch::exp_sum_f32(&mut have, max);
        let mut s = [0f32; 8];
        let mut chunks = want.chunks_exact(8);
        for c in &mut chunks {
            for (s, v) in s.iter_mut().zip(c) {
                *s += *v;
            }
        }
        let tail: f32 = chunks.remainder().iter().sum();
        let s_want = s.iter().sum::<f32>() + tail;
        assert!(same(s_have, s_want), "exp_sum n {n}: {s_have} vs {s_want}");
        assert!(have.iter().zip(&want).all(|(a, b)| same(*a, *b)), "exp_sum n {n} values");
    }
}
