//! mul_mat inside wasm (the SIMD128 register tiles in the simd build, the portable tiles and
//! `vec_dot`s in the scalar build) against the scalar `vec_dot` reference, per weight type, on
//! odd shapes: m = 13 rows (tile remainders; 33 for f32: row chunks), n = 1, 2, 3, 5, 17 columns (GEMV, 2-column tiles,
//! GEMM tiles and their remainders), k with a k-block remainder for the float GEMM (515 > 512).
//!
//! Both sides see the same quantized bytes (weights quantized once, columns converted with the
//! backend's own `from_f32`), so integer sums are exact and only the f32 accumulation order and
//! the per-block scale products differ: tolerance 2e-5 of Σ|w·y| (dequantized terms) per output.
//! The SIMD builds' q4_0/q5_0/q8_0 tiles and the k-quant tiles are bit for bit the scalar
//! `vec_dot` (checked); the ±1 data (every quant at its extreme: nibbles 0/15, column quants
//! ±127) is the integer sums' worst case.
use ggweb::backend::cpu::{cpu_buffer_type, type_traits, CpuBackend};
use ggweb::quant::type_traits_scalar;
use ggweb::{Context, DType, Graph};
use ggweb_testing::Rng;
use wasm_bindgen_test::*;

/// The quantized weight types with CPU kernels of their own (tiles and GEMVs).
const QUANTS: [DType; 8] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

fn check_type(dt: DType, k: usize) {
    check_data(dt, k, false, 13)
}

/// As `check_type`, with every weight and column value ±1 when `extreme`, for `m` weight rows.
fn check_data(dt: DType, k: usize, extreme: bool, m: usize) {
    let mut rng = Rng::new(0x5eed ^ k as u64);
    let mut draw = |n: usize| -> Vec<f32> {
        let v = rng.vec(n, -1.0, 1.0);
        if extreme {
            v.into_iter()
                .map(|x| if x < 0.0 { -1.0 } else { 1.0 })
                .collect()
        } else {
            v
        }
    };
    let slow = type_traits_scalar(dt).expect("computable type");
    let vdt = slow.vec_dot_type;
    let wrow = dt.row_size(k).unwrap();
    let yrow = vdt.row_size(k).unwrap();
    // Weights: quantized row by row with the scalar quantizer, and their dequantized values.
    let mut wq = vec![0u8; wrow * m];
    let mut wf = vec![0f32; k * m];
    for i in 0..m {
        let row = draw(k);
        (slow.from_f32)(&row, &mut wq[i * wrow..(i + 1) * wrow]);
        (slow.to_f32)(&wq[i * wrow..(i + 1) * wrow], &mut wf[i * k..(i + 1) * k]);
    }
    for n in [1usize, 2, 3, 5, 17] {
        let y = draw(k * n);
        let got = mul_mat(dt, k, m, &wq, &y, n);
        let conv = type_traits(vdt).expect("vec_dot type").from_f32;
        let mut yq = vec![0u8; yrow];
        let mut worst = 0f32;
        for j in 0..n {
            let yc = &y[j * k..(j + 1) * k];
            conv(yc, &mut yq);
            for i in 0..m {
                let want = (slow.vec_dot)(k, &wq[i * wrow..(i + 1) * wrow], &yq);
                let scale: f32 = wf[i * k..(i + 1) * k]
                    .iter()
                    .zip(yc)
                    .map(|(p, q)| (p * q).abs())
                    .sum();
                // The k-quant tiles sum each super-block whole and add the scalar's f32 terms in
                // its order: bit for bit the scalar `vec_dot` in the SIMD builds.
                // The SIMD builds' q4_0/q5_0/q8_0 tiles sum each block whole per column (exact)
                // and run the scalar's f32 steps on the lanes, as their GEMVs do: bit for bit
                // too. (q4_1/q5_1 keep the min terms' sum apart, as llama.cpp does.)
                let exact_32 = cfg!(target_feature = "simd128")
                    && matches!(dt, DType::Q4_0 | DType::Q5_0 | DType::Q8_0);
                if (dt.block_size() == 256 && cfg!(target_feature = "simd128")) || exact_32 {
                    assert_eq!(
                        got[j * m + i].to_bits(),
                        want.to_bits(),
                        "{dt} k={k} n={n} [{i},{j}]: {} vs scalar {want}",
                        got[j * m + i]
                    );
                }
                let err = (got[j * m + i] - want).abs() / scale.max(1e-3);
                assert!(
                    err <= 2e-5,
                    "{dt} k={k} n={n} [{i},{j}]: {} vs scalar {want} (rel {err:e})",
                    got[j * m + i]
                );
                worst = worst.max(err);
            }
        }
        assert!(worst.is_finite());
    }
}

/// dst = W·Y of `m` weight rows `wq` (type `dt`, k elements each) and `n` f32 columns `y`.
fn mul_mat(dt: DType, k: usize, m: usize, wq: &[u8], y: &[f32], n: usize) -> Vec<f32> {
    mul_mat_as(dt, k, m, wq, y, n, false)
}

/// [`mul_mat`], with W repacked for the CPU GEMV first (`backend::cpu::repack`) when `repack`.
fn mul_mat_as(
    dt: DType,
    k: usize,
    m: usize,
    wq: &[u8],
    y: &[f32],
    n: usize,
    repack: bool,
) -> Vec<f32> {
    let mut ctx = Context::new();
    let a = ctx.new_tensor_2d(dt, k, m).unwrap();
    let b = ctx.new_tensor_2d(DType::F32, k, n).unwrap();
    ctx.set_input(a);
    ctx.set_input(b);
    let c = ctx.mul_mat(a, b).unwrap();
    ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    ctx.set_bytes(a, wq).unwrap();
    if repack {
        assert!(ggweb::backend::cpu::repack::repack_tensor(&mut ctx, a).unwrap());
        assert_eq!(ctx.get_bytes(a).unwrap(), wq);
    }
    ctx.set_f32(b, y).unwrap();
    let g = Graph::build(&ctx, &[c]);
    CpuBackend::new(1).compute(&ctx, &g).unwrap();
    ctx.get_f32(c).unwrap()
}

/// The GEMVs (wasm32 `gemv.rs` for the 32-element quants, `kgemv.rs` for the k-quants: four
/// rows per pass, f32 lane = row) on 67 rows (16 passes and a 3-row remainder), random and ±1
/// data, 1 and 9 blocks (1 and 3 super-blocks), against the scalar reference; in the SIMD
/// builds each row's n = 1 result is bit for bit the scalar `vec_dot`'s (the same exact integer
/// sums and f32 operations) and the one the row gives alone (a 1-row matrix, a remainder pass),
/// so no result depends on the pass, chunk or thread computing it.
#[wasm_bindgen_test]
fn mul_mat_quant_gemv_rows() {
    for dt in QUANTS {
        for blocks in [1usize, if dt.block_size() == 256 { 3 } else { 9 }] {
            let k = blocks * dt.block_size();
            check_data(dt, k, false, 67);
            check_data(dt, k, true, 67);
            let slow = type_traits_scalar(dt).unwrap();
            let wrow = dt.row_size(k).unwrap();
            let mut rng = Rng::new(0x9e37 ^ k as u64);
            let mut wq = vec![0u8; wrow * 67];
            for row in wq.chunks_exact_mut(wrow) {
                (slow.from_f32)(&rng.vec(k, -1.0, 1.0), row);
            }
            let y = rng.vec(k, -1.0, 1.0);
            let all = mul_mat(dt, k, 67, &wq, &y, 1);
            if cfg!(target_feature = "simd128") {
                let vdt = slow.vec_dot_type;
                let mut yq = vec![0u8; vdt.row_size(k).unwrap()];
                (type_traits(vdt).unwrap().from_f32)(&y, &mut yq);
                for (i, got) in all.iter().enumerate() {
                    let want = (slow.vec_dot)(k, &wq[i * wrow..(i + 1) * wrow], &yq);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{dt} k={k} row {i}: {got} vs scalar {want}"
                    );
                }
            }
            for i in [0usize, 1, 3, 4, 37, 64, 66] {
                let alone = mul_mat(dt, k, 1, &wq[i * wrow..(i + 1) * wrow], &y, 1);
                assert_eq!(
                    all[i].to_bits(),
                    alone[0].to_bits(),
                    "{dt} k={k} row {i}: {} in the matrix, {} alone",
                    all[i],
                    alone[0]
                );
            }
        }
    }
}

/// The GEMVs convert the weights' f16 block scales themselves (four rows at once, no F16C in
/// wasm): with every class of f16 as a scale — ±0, subnormals, the largest finite, ±inf, quiet
/// and signaling NaNs — mixed with ordinary scales in one pass, each row's result is the scalar
/// `vec_dot`'s, bit for bit in the SIMD builds (NaN for NaN: wasm leaves NaN payloads open).
/// 67 rows (a short last pass) and 3 rows (one row per pass).
#[wasm_bindgen_test]
fn mul_mat_quant_gemv_special_scales() {
    const SPECIAL: [u16; 12] = [
        0x0000, 0x8000, 0x0001, 0x03ff, 0x8201, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
        0xfe01,
    ];
    // Byte offsets of the f16 scales in a block: d (and m / dmin).
    let at = |dt: DType| -> &'static [usize] {
        match dt {
            DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
            DType::Q6_K => &[208],
            _ => &[0],
        }
    };
    for dt in QUANTS {
        let blocks = if dt.block_size() == 256 { 2 } else { 9 };
        let k = blocks * dt.block_size();
        let slow = type_traits_scalar(dt).unwrap();
        let (wrow, bsz) = (dt.row_size(k).unwrap(), dt.type_size());
        for m in [67usize, 3] {
            let mut rng = Rng::new(0x51ca ^ k as u64);
            let mut wq = vec![0u8; wrow * m];
            for (r, row) in wq.chunks_exact_mut(wrow).enumerate() {
                (slow.from_f32)(&rng.vec(k, -1.0, 1.0), row);
                // Every other block of every other row gets special scales (the rest stay
                // ordinary), so passes mix both.
                for blk in (r % 2..blocks).step_by(2) {
                    for (j, &o) in at(dt).iter().enumerate() {
                        let h = SPECIAL[(r * 5 + blk * 3 + j * 7) % SPECIAL.len()];
                        row[blk * bsz + o..blk * bsz + o + 2].copy_from_slice(&h.to_le_bytes());
                    }
                }
            }
            let y = rng.vec(k, -1.0, 1.0);
            let got = mul_mat(dt, k, m, &wq, &y, 1);
            let vdt = slow.vec_dot_type;
            let mut yq = vec![0u8; vdt.row_size(k).unwrap()];
            (type_traits(vdt).unwrap().from_f32)(&y, &mut yq);
            for (i, g) in got.iter().enumerate() {
                let want = (slow.vec_dot)(k, &wq[i * wrow..(i + 1) * wrow], &yq);
                if want.is_nan() {
                    assert!(g.is_nan(), "{dt} m={m} row {i}: {g}, scalar NaN");
                } else if cfg!(target_feature = "simd128") {
                    assert_eq!(
                        g.to_bits(),
                        want.to_bits(),
                        "{dt} m={m} row {i}: {g} vs scalar {want}"
                    );
                } else {
                    assert!(
                        g == &want || (g - want).abs() <= 1e-5 * want.abs(),
                        "{dt} m={m} row {i}: {g} vs scalar {want}"
                    );
                }
            }
        }
    }
}

/// Repacked weights (the wasm SIMD GEMV reads the groups directly, with the finite-only f16
/// conversion; other products read a plain copy): every row bit for bit the plain weights'
/// result, on 4, 12, 67 (a 3-row tail) and 301 rows, with ordinary scales and with every class
/// of finite f16 (±0, subnormals, the largest) as scales (and q8_0 quants of −128). The GEMVs
/// that take two groups a pass (i with i + h) meet 1 group, 3 (the middle one alone), 16, and
/// 11 with a 1-row tail (301 rows: chunks of 64 rows at n = 1).
#[wasm_bindgen_test]
fn mul_mat_repacked_matches_plain() {
    const FINITE: [u16; 7] = [0x0000, 0x8000, 0x0001, 0x03ff, 0x8201, 0x7bff, 0xfbff];
    for dt in QUANTS {
        let slow = type_traits_scalar(dt).unwrap();
        // The scales' byte offsets in a block (the k-quants' are read by their GEMV as they
        // are: whole super-blocks interleaved, exact conversion).
        let fields: &[usize] = match dt {
            DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
            DType::Q6_K => &[208],
            _ => &[0],
        };
        let shapes: &[(usize, usize)] = if dt.block_size() == 256 {
            &[(256, 4), (512, 12), (768, 67), (1024, 301)]
        } else {
            &[(32, 4), (64, 12), (288, 67), (576, 301)]
        };
        for &(k, m) in shapes {
            for special in [false, true] {
                let (wrow, bsz) = (dt.row_size(k).unwrap(), dt.type_size());
                let mut rng = Rng::new(0x4e9a ^ (k * m) as u64);
                let mut wq = vec![0u8; wrow * m];
                for (r, row) in wq.chunks_exact_mut(wrow).enumerate() {
                    (slow.from_f32)(&rng.vec(k, -1.0, 1.0), row);
                    if special && dt == DType::Q8_0 {
                        // −128, which no quantizer writes but a file may hold (the relaxed
                        // build's repacked q8_0 moves the column's sign onto the weights).
                        for q in (2 + r % 7..row.len()).step_by(5) {
                            if q % bsz >= 2 {
                                row[q] = 0x80;
                            }
                        }
                    }
                    if special {
                        for blk in (r % 2..k / dt.block_size()).step_by(2) {
                            for (j, &o) in fields.iter().enumerate() {
                                let h = FINITE[(r * 5 + blk * 3 + j * 7) % FINITE.len()];
                                row[blk * bsz + o..blk * bsz + o + 2]
                                    .copy_from_slice(&h.to_le_bytes());
                            }
                        }
                    }
                }
                for n in [1usize, 3] {
                    let y = rng.vec(k * n, -1.0, 1.0);
                    let want = mul_mat(dt, k, m, &wq, &y, n);
                    let got = mul_mat_as(dt, k, m, &wq, &y, n, true);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "{dt} k={k} m={m} n={n} special={special} out {i}: {g} vs plain {w}"
                        );
                    }
                }
            }
        }
    }
}

#[wasm_bindgen_test]
fn mul_mat_float_tiles_vs_scalar() {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for k in [7usize, 67, 515] {
            check_type(dt, k);
        }
    }
    // f32 GEMM row chunks are whole tiles (15 rows with the relaxed build's 5×2 tile): 33 rows
    // give two full chunks and a 3-row one (with n = 17, enough chunks that rows are split).
    check_data(DType::F32, 515, false, 33);
}

#[wasm_bindgen_test]
fn mul_mat_quant_tiles_vs_scalar() {
    for dt in QUANTS {
        let bs = dt
            .block_size()
            .max(type_traits_scalar(dt).unwrap().vec_dot_type.block_size());
        for blocks in [1usize, 3, 5] {
            check_type(dt, blocks * bs);
        }
    }
}

#[wasm_bindgen_test]
fn mul_mat_quant_tiles_extreme_values() {
    for dt in QUANTS {
        for blocks in [1usize, if dt.block_size() == 256 { 2 } else { 7 }] {
            check_data(dt, blocks * dt.block_size(), true, 13);
        }
    }
}

#[wasm_bindgen_test]
fn mul_mat_reports_tiles() {
    let name = ggweb::backend::cpu::ops::matmul::simd_name();
    assert_eq!(
        name.starts_with("wasm32 simd128"),
        cfg!(target_feature = "simd128"),
        "{name}"
    );
}

/// The relaxed build's two ways of summing 8-bit dots (`arch::split_dots`: dot-adds, or i16
/// dots widened once, chosen by probing how the engine lowers a dot-add) give the same bits:
/// every quantized type's GEMV (plain and repacked rows) and prompt tiles (n = 1, 3, 17) on
/// random and ±1 data, run under each path, bit for bit equal, and each path passes the
/// scalar-reference checks above. In other builds the switch does nothing and this runs once.
#[wasm_bindgen_test]
fn mul_mat_dot_paths_same_bits() {
    use ggweb::backend::cpu::arch::{force_split_dots, split_dots};
    let relaxed = cfg!(target_feature = "relaxed-simd");
    assert_eq!(split_dots().is_some(), relaxed);
    let paths: &[Option<bool>] = if relaxed {
        &[Some(false), Some(true)]
    } else {
        &[None]
    };
    let mut runs: Vec<Vec<Vec<f32>>> = Vec::new();
    for &p in paths {
        force_split_dots(p);
        if let Some(s) = p {
            assert_eq!(split_dots(), Some(s));
        }
        let mut out = Vec::new();
        for dt in QUANTS {
            let k = 3 * dt.block_size().max(32) * if dt.block_size() == 256 { 1 } else { 3 };
            check_data(dt, k, false, 13);
            check_data(dt, k, true, 67);
            let slow = type_traits_scalar(dt).unwrap();
            let wrow = dt.row_size(k).unwrap();
            for extreme in [false, true] {
                let mut rng = Rng::new(0x51d7 ^ k as u64);
                let mut wq = vec![0u8; wrow * 68];
                for row in wq.chunks_exact_mut(wrow) {
                    let v = rng.vec(k, -1.0, 1.0);
                    let v: Vec<f32> = if extreme {
                        v.iter().map(|x| x.signum()).collect()
                    } else {
                        v
                    };
                    (slow.from_f32)(&v, row);
                }
                for n in [1usize, 3, 17] {
                    let y = rng.vec(k * n, -1.0, 1.0);
                    out.push(mul_mat(dt, k, 68, &wq, &y, n));
                    out.push(mul_mat_as(dt, k, 68, &wq, &y, n, true));
                }
            }
        }
        runs.push(out);
    }
    force_split_dots(None);
    for run in &runs[1..] {
        for (a, b) in run.iter().zip(&runs[0]) {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "the dot paths differ: {a:?} vs {b:?}");
        }
    }
}

/// The repacked GEMVs' page touches (`arch::set_page_touch`: on, off, or not chosen — on) change
/// no result: every quantized type's n = 1 product over repacked weights spanning many pages
/// (301 rows, a 1-row tail) is the same bits in all three settings, and the setting reads back
/// (in the scalar build, which has no GEMV kernels, it stays unset).
#[wasm_bindgen_test]
fn mul_mat_page_touch_same_bits() {
    use ggweb::backend::cpu::arch::{page_touch, set_page_touch};
    let simd = cfg!(target_feature = "simd128");
    for dt in QUANTS {
        let k = if dt.block_size() == 256 { 1024 } else { 576 };
        let slow = type_traits_scalar(dt).unwrap();
        let wrow = dt.row_size(k).unwrap();
        let mut rng = Rng::new(0x7a6e ^ k as u64);
        let mut wq = vec![0u8; wrow * 301];
        for row in wq.chunks_exact_mut(wrow) {
            (slow.from_f32)(&rng.vec(k, -1.0, 1.0), row);
        }
        let y = rng.vec(k, -1.0, 1.0);
        let mut outs = Vec::new();
        for set in [Some(true), Some(false), None] {
            set_page_touch(set);
            assert_eq!(page_touch(), if simd { set } else { None });
            outs.push(mul_mat_as(dt, k, 301, &wq, &y, 1, true));
        }
        set_page_touch(None);
        for o in &outs[1..] {
            let same = o.iter().zip(&outs[0]).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{dt}: the page touches changed a result");
        }
    }
}
