//! mul_mat, im2col, conv_2d, pool_2d, argmax and cross-entropy loss on the CPU backend against the
//! scalar references in `ggweb::backend::cpu::reference::matmul`, on seeded random data.
//!
//! Tolerances (the reference is computed in f64 on the values the tensors actually hold, with the
//! f32 src1, so the error measured includes the conversion of src1 to the vec_dot type):
//! - f32 weights: max |err| <= 1e-4 * max |ref|
//! - f16 weights (src1 rounded to f16): max |err| <= 1e-3 * max |ref|
//! - bf16 weights (src1 rounded to bf16, 8-bit mantissa): max |err| <= 1e-2 * max |ref|
//! - quantized weights (src1 quantized to q8_0 / q8_1 / q8_K): NMSE < 5e-4 (as ggml's
//!   test-backend-ops), reference on the dequantized weights and the f32 src1.

mod support;

use ggweb::backend::cpu::reference::matmul as reference;
use ggweb::tensor::PoolOp;
use ggweb::{Context, DType, Error};
use support::matmul::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// src1 dense.
    Contiguous,
    /// src1 a permuted view (dims 1 and 2 swapped): rows contiguous, higher strides not.
    Permuted,
    /// src1 a transposed view: elements of a row are ne1 apart.
    Transposed,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    wt: DType,
    bt: DType,
    k: usize,
    m: usize,
    n: usize,
    /// [ne02, ne03, ne12, ne13]
    batch: [usize; 4],
    layout: Layout,
    threads: usize,
}

/// Run one mul_mat and return (got, want).
fn run_case(c: Case, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let [ne02, ne03, ne12, ne13] = c.batch;
    let ane = [c.k, c.m, ne02, ne03];
    let bne = [c.k, c.n, ne12, ne13];
    let mut ctx = Context::new();
    let a = ctx.new_tensor(c.wt, &ane).unwrap();
    let (s, sne) = match c.layout {
        Layout::Contiguous => {
            let s = ctx.new_tensor(c.bt, &bne).unwrap();
            (s, bne)
        }
        Layout::Permuted => {
            let sne = [c.k, ne12, c.n, ne13];
            (ctx.new_tensor(c.bt, &sne).unwrap(), sne)
        }
        Layout::Transposed => {
            let sne = [c.n, c.k, ne12, ne13];
            (ctx.new_tensor(c.bt, &sne).unwrap(), sne)
        }
    };
    let b = match c.layout {
        Layout::Contiguous => s,
        Layout::Permuted => ctx.permute(s, [0, 2, 1, 3]).unwrap(),
        Layout::Transposed => ctx.transpose(s).unwrap(),
    };
    assert_eq!(ctx.tensor(b).ne, bne);
    let out = ctx.mul_mat(a, b).unwrap();
    assert_eq!(ctx.tensor(out).ne, [c.m, c.n, ne12, ne13]);
    alloc_all(&mut ctx);
    let av = set_values(&ctx, a, &rng.vec(ane.iter().product(), -1.0, 1.0)).unwrap();
    let sv = set_values(&ctx, s, &rng.vec(sne.iter().product(), -1.0, 1.0)).unwrap();
    let mut bv = vec![0f32; bne.iter().product()];
    for i3 in 0..ne13 {
        for i2 in 0..ne12 {
            for j in 0..c.n {
                for kk in 0..c.k {
                    let src = match c.layout {
                        Layout::Contiguous => idx(sne, kk, j, i2, i3),
                        Layout::Permuted => idx(sne, kk, i2, j, i3),
                        Layout::Transposed => idx(sne, j, kk, i2, i3),
                    };
                    bv[idx(bne, kk, j, i2, i3)] = sv[src];
                }
            }
        }
    }
    compute(&ctx, &[out], c.threads).unwrap();
    let got = ctx.get_f32(out).unwrap();
    let want = reference::mul_mat(&av, ane, &bv, bne);
    (got, want)
}

fn check(c: Case, seed: u64) {
    let (got, want) = run_case(c, seed);
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{c:?}: non-finite output"
    );
    match c.wt {
        DType::F32 | DType::F16 | DType::BF16 => {
            let tol = match c.wt {
                DType::F32 => 1e-4,
                DType::F16 => 1e-3,
                _ => 1e-2,
            };
            let e = max_rel_err(&got, &want);
            assert!(e <= tol, "{c:?}: max rel err {e:e} > {tol:e}");
        }
        _ => {
            let e = nmse(&got, &want);
            assert!(e < 5e-4, "{c:?}: NMSE {e:e} >= 5e-4");
        }
    }
}

/// Shapes covering GEMV, GEMM, odd sizes, batch broadcast and each src1 layout.
fn shape_cases(wt: DType, bt: DType) -> Vec<Case> {
    let bs = wt.block_size();
    // k: a multiple of the block size; for plain types also an odd length (SIMD tails).
    let ks: Vec<usize> = if bs == 1 {
        vec![37, 64]
    } else {
        vec![bs, 3 * bs]
    };
    let mut v = Vec::new();
    let mut t = 0;
    for &k in &ks {
        for (m, n) in [(7, 1), (13, 13), (1, 5), (16, 9)] {
            for batch in [[1, 1, 1, 1], [1, 2, 3, 4], [3, 1, 3, 2]] {
                for layout in [Layout::Contiguous, Layout::Permuted] {
                    t += 1;
                    v.push(Case {
                        wt,
                        bt,
                        k,
                        m,
                        n,
                        batch,
                        layout,
                        threads: 1 + t % 3,
                    });
                }
            }
        }
        v.push(Case {
            wt,
            bt,
            k,
            m: 9,
            n: 6,
            batch: [1, 1, 2, 1],
            layout: Layout::Transposed,
            threads: 2,
        });
    }
    v
}

fn check_type(wt: DType) {
    for bt in [DType::F32, DType::F16] {
        for (i, c) in shape_cases(wt, bt).into_iter().enumerate() {
            check(c, 1000 + i as u64);
        }
    }
}

#[test]
fn mul_mat_f32() {
    check_type(DType::F32);
}

#[test]
fn mul_mat_f16() {
    check_type(DType::F16);
}

#[test]
fn mul_mat_bf16() {
    check_type(DType::BF16);
}

/// Every computable quantized weight type (src1 quantized to the type's vec_dot type).
#[test]
fn mul_mat_quantized_all_types() {
    let types: Vec<DType> = DType::ALL
        .iter()
        .copied()
        .filter(|t| t.is_computable() && t.is_quantized())
        .collect();
    assert!(types.len() >= 12, "{types:?}");
    for wt in types {
        check_type(wt);
    }
}

/// Enough output chunks that threads take several each from the shared counter.
#[test]
fn mul_mat_many_chunks_all_thread_counts() {
    for wt in [DType::F32, DType::F16] {
        for threads in [1, 2, 3] {
            for (m, n) in [(200, 1), (1, 150), (70, 45)] {
                let c = Case {
                    wt,
                    bt: DType::F32,
                    k: 96,
                    m,
                    n,
                    batch: [1, 1, 1, 1],
                    layout: Layout::Contiguous,
                    threads,
                };
                check(c, 7 + m as u64 * 31 + n as u64);
            }
        }
    }
}

/// A GEMV split among threads (ops/matmul `mul_mat`; 1002 rows: natively one panel a thread in
/// groups of four, the last thread's ending in two rows; in wasm 16 chunks of 64 rows, shares
/// then the rest taken one at a time): right against the reference and the same bits on 1, 2
/// and 3 threads (a row's result never depends on the tile or share it falls in).
#[test]
fn gemv_contiguous_shares_same_bits_on_all_thread_counts() {
    for wt in [
        DType::F32,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q8_0,
        DType::Q4_K,
    ] {
        let mut first: Option<Vec<u32>> = None;
        for threads in [1, 2, 3] {
            let c = Case {
                wt,
                bt: DType::F32,
                k: 256,
                m: 1002,
                n: 1,
                batch: [1, 1, 1, 1],
                layout: Layout::Contiguous,
                threads,
            };
            check(c, 5);
            let bits: Vec<u32> = run_case(c, 5).0.iter().map(|v| v.to_bits()).collect();
            match &first {
                None => first = Some(bits),
                Some(b) => assert!(*b == bits, "{wt}: {threads} threads differ from 1"),
            }
        }
    }
}

/// k longer than the float GEMM's k-block (512), odd, so partial sums accumulate across blocks
/// and the last block has a SIMD tail; quantized types with many blocks.
#[test]
fn mul_mat_long_k() {
    for (wt, k) in [
        (DType::F32, 1031),
        (DType::F16, 1031),
        (DType::BF16, 1031),
        (DType::Q4_0, 1056),
        (DType::Q8_0, 1056),
        (DType::Q4_K, 1280),
        (DType::Q4_1, 1056),
        (DType::Q5_0, 1056),
        (DType::Q5_1, 1056),
        (DType::Q5_K, 1280),
        (DType::Q6_K, 1280),
    ] {
        for (m, n, threads) in [(19, 11, 2), (21, 1, 3), (5, 16, 1)] {
            let c = Case {
                wt,
                bt: DType::F32,
                k,
                m,
                n,
                batch: [1, 1, 1, 1],
                layout: Layout::Contiguous,
                threads,
            };
            check(c, 99 + m as u64);
        }
    }
}

/// One quantized mul_mat against the scalar `vec_dot` of the same bytes: the weight row as
/// stored, the src1 column quantized with the scalar reference `from_f32` of the type's vec_dot
/// type (the SIMD quantizers are bit-exact with it). Weights [k, m, ne02, 1], src1 [k, n, ne12, 1].
fn tiled_vs_scalar(wt: DType, k: usize, m: usize, n: usize, b2: [usize; 2], threads: usize) -> f64 {
    let [ne02, ne12] = b2;
    let seed = (k * 131 + m * 31 + n * 7 + ne12) as u64;
    let mut rng = Rng::new(seed);
    let mut ctx = Context::new();
    let a = ctx.new_tensor(wt, &[k, m, ne02, 1]).unwrap();
    let b = ctx.new_tensor(DType::F32, &[k, n, ne12, 1]).unwrap();
    let out = ctx.mul_mat(a, b).unwrap();
    alloc_all(&mut ctx);
    set_values(&ctx, a, &rng.vec(k * m * ne02, -1.0, 1.0)).unwrap();
    let bv = rng.vec(k * n * ne12, -1.0, 1.0);
    ctx.set_f32(b, &bv).unwrap();
    compute(&ctx, &[out], threads).unwrap();
    let got = ctx.get_f32(out).unwrap();

    let tt = ggweb::quant::type_traits_scalar(wt).unwrap();
    let vt = ggweb::quant::type_traits_scalar(tt.vec_dot_type).unwrap();
    let wbytes = ctx.get_bytes(a).unwrap();
    let wrow = wt.row_size(k).unwrap();
    let mut col = vec![0u8; tt.vec_dot_type.row_size(k).unwrap()];
    let mut want = vec![0f32; m * n * ne12];
    for i2 in 0..ne12 {
        let w2 = i2 / (ne12 / ne02);
        for j in 0..n {
            let x = &bv[(i2 * n + j) * k..(i2 * n + j + 1) * k];
            (vt.from_f32)(x, &mut col);
            for i in 0..m {
                let r = &wbytes[(w2 * m + i) * wrow..(w2 * m + i + 1) * wrow];
                want[(i2 * n + j) * m + i] = (tt.vec_dot)(k, r, &col);
            }
        }
    }
    assert!(got.iter().all(|v| v.is_finite()), "{wt} k={k} m={m} n={n}");
    max_rel_err(&got, &want)
}

/// Every quantized type's mul_mat (register tiles for q4_0/q4_1/q5_0/q5_1/q8_0/q4_K/q5_K/q6_K
/// with AVX2, vec_dot elsewhere) against the scalar vec_dot on the same quantized operands, for
/// GEMV and every GEMM tile width and remainder (n = 1, 2, 3, 5, 17), odd row counts (tile
/// remainders), one and several blocks per row (up to 18, or k = 576 for 32-blocks), broadcast
/// batches and 1-3 threads.
/// Tolerance: max |err| <= 2e-5 * max |ref| for every type — the block sums are exact integers,
/// only the order of the f32 accumulation over blocks (and lanes) differs.
#[test]
fn mul_mat_quantized_matches_scalar_vec_dot() {
    let types: Vec<DType> = DType::ALL
        .iter()
        .copied()
        .filter(|t| t.is_computable() && t.is_quantized())
        .collect();
    let mut case = 0;
    for wt in types {
        let bs = wt.block_size();
        // 18 blocks of 32: SmolLM2's k = 576 (the GEMV panels prefetch tiles ahead, past the
        // chunk's end).
        for nb in [1, 5, 18] {
            for m in [1, 6, 37] {
                for n in [1, 2, 3, 5, 17] {
                    case += 1;
                    let threads = 1 + case % 3;
                    let e = tiled_vs_scalar(wt, nb * bs, m, n, [1, 1], threads);
                    assert!(
                        e <= 2e-5,
                        "{wt} k={} m={m} n={n} threads={threads}: max rel err {e:e}",
                        nb * bs
                    );
                }
            }
        }
        // Broadcast weights (2 matrices for 4 src1 batches), many chunks.
        for (m, n, threads) in [(45, 1, 2), (45, 19, 3), (70, 33, 2)] {
            let e = tiled_vs_scalar(wt, 3 * bs, m, n, [2, 4], threads);
            assert!(e <= 2e-5, "{wt} batched m={m} n={n}: max rel err {e:e}");
        }
    }
}

/// Every integer-dot GEMM path of the prompt mul_mat (x86: AVX-512 VNNI, AVX-VNNI, AVX2) that
/// this CPU has, forced one at a time, against the scalar vec_dot on the same bytes, for every
/// type it handles: odd row counts (8-row panel remainders), column counts below, at and over
/// each micro-tile width, 1–18 blocks (k-quants: 1–10 super-blocks). Paths the CPU lacks are
/// printed as skipped.
/// Each block's integer dot is exact (the bias is taken back in integers). k-quants:
/// bit-identical (the reference's f32 operations in its order); 32-element types: max |err|
/// <= 2e-6 * max |ref| (one FMA per block instead of a product and a sum).
#[cfg(target_arch = "x86_64")]
#[test]
fn integer_dot_gemm_paths_match_scalar_vec_dot() {
    use ggweb::backend::cpu::arch::x86::{gemm_with, Isa};
    let types = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
    ];
    let mut ran = 0;
    for isa in Isa::ALL {
        if !isa.supported() {
            println!(
                "integer-dot GEMM path {} skipped: not on this CPU",
                isa.name()
            );
            continue;
        }
        for wt in types {
            let tt = ggweb::quant::type_traits_scalar(wt).unwrap();
            let vt = ggweb::quant::type_traits_scalar(tt.vec_dot_type).unwrap();
            for (nb, m, n) in [
                (1, 1, 1),
                (3, 7, 9),
                (5, 9, 13),
                (18, 37, 17),
                (2, 16, 8),
                (7, 23, 30),
            ] {
                // 32-element types: nb blocks; k-quants: nb/2 + 1 super-blocks (1..=10).
                let k = if wt.block_size() == 256 {
                    (nb / 2 + 1) * 256
                } else {
                    nb * 32
                };
                let mut rng = Rng::new((k * 7 + m * 131 + n) as u64);
                let (wrow, crow) = (
                    wt.row_size(k).unwrap(),
                    tt.vec_dot_type.row_size(k).unwrap(),
                );
                let mut w = vec![0u8; wrow * m];
                for r in w.chunks_exact_mut(wrow) {
                    ggweb::quant::quantize_row(wt, &rng.vec(k, -1.0, 1.0), r).unwrap();
                }
                let mut cols = vec![0u8; crow * n];
                for c in cols.chunks_exact_mut(crow) {
                    (vt.from_f32)(&rng.vec(k, -1.0, 1.0), c);
                }
                let got = gemm_with(isa, wt, k, m, n, &w, &cols);
                if isa == Isa::Avx2 && wt == DType::Q8_0 {
                    // q8_0 + 128 would saturate vpmaddubsw: this path must refuse it.
                    assert!(got.is_none(), "avx2 took q8_0");
                    continue;
                }
                let got = got.unwrap_or_else(|| panic!("{} refused {wt}", isa.name()));
                let mut want = vec![0f32; m * n];
                for c in 0..n {
                    for r in 0..m {
                        let (x, y) = (
                            &w[r * wrow..(r + 1) * wrow],
                            &cols[c * crow..(c + 1) * crow],
                        );
                        want[c * m + r] = (tt.vec_dot)(k, x, y);
                    }
                }
                let e = max_rel_err(&got, &want);
                if wt.block_size() == 256 {
                    assert!(
                        got.iter()
                            .zip(&want)
                            .all(|(g, w)| g.to_bits() == w.to_bits()),
                        "{} {wt} k={k} m={m} n={n}: not bit-identical (max rel err {e:e})",
                        isa.name()
                    );
                } else {
                    assert!(
                        e <= 2e-6,
                        "{} {wt} k={k} m={m} n={n}: max rel err {e:e}",
                        isa.name()
                    );
                }
                ran += 1;
            }
        }
        println!("integer-dot GEMM path {} tested", isa.name());
    }
    // Every path needs AVX2; with it, at least the AVX2 path's 4 types (q8_0 is refused there)
    // × 6 shapes ran.
    if Isa::Avx2.supported() {
        assert!(ran >= 4 * 6, "only {ran} cases ran");
    }
}

/// Every aarch64 register-tile path (NEON, SDOT with `dotprod`, SMMLA with `i8mm`) that this CPU
/// has, forced one at a time, in every tile shape mul_mat uses, against the scalar vec_dot on the
/// same bytes: f32/f16/bf16 (odd k: the scalar tail) and every tiled quantized type; odd row and
/// column counts (tile remainders), 1–18 blocks (k-quants: 1–10 super-blocks). Paths the CPU
/// lacks are printed as skipped (under qemu: `-cpu max` has all, `cortex-a72` NEON only).
/// Quantized types: bit-identical (exact integer block sums, then the reference's f32 steps in
/// its order). Floats: max |err| <= 2e-5 * max |ref| (4 FMA lanes instead of the reference's
/// order). Within a path every tile shape must give the same bits (so mul_mat's results do not
/// depend on the thread count).
#[cfg(target_arch = "aarch64")]
#[test]
fn aarch64_tile_paths_match_scalar_vec_dot() {
    use ggweb::backend::cpu::arch::aarch64::tiles::{tiles_with, Isa};
    let types = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    let shapes = [(1, 1, 1), (3, 7, 9), (5, 9, 13), (18, 37, 17), (2, 16, 8)];
    let mut ran = 0;
    for isa in Isa::ALL {
        if !isa.supported() {
            println!("aarch64 tile path {} skipped: not on this CPU", isa.name());
            continue;
        }
        for wt in types {
            let tt = ggweb::quant::type_traits_scalar(wt).unwrap();
            let vt = ggweb::quant::type_traits_scalar(tt.vec_dot_type).unwrap();
            for (nb, m, n) in shapes {
                let k = match wt.block_size() {
                    256 => (nb / 2 + 1) * 256,
                    32 => nb * 32,
                    _ => nb * 32 + 3,
                };
                let mut rng = Rng::new((k * 7 + m * 131 + n) as u64);
                let (wrow, crow) = (
                    wt.row_size(k).unwrap(),
                    tt.vec_dot_type.row_size(k).unwrap(),
                );
                let mut w = vec![0u8; wrow * m];
                for r in w.chunks_exact_mut(wrow) {
                    ggweb::quant::quantize_row(wt, &rng.vec(k, -1.0, 1.0), r).unwrap();
                }
                let mut cols = vec![0u8; crow * n];
                for c in cols.chunks_exact_mut(crow) {
                    (vt.from_f32)(&rng.vec(k, -1.0, 1.0), c);
                }
                let mut want = vec![0f32; m * n];
                for c in 0..n {
                    for r in 0..m {
                        let (x, y) = (
                            &w[r * wrow..(r + 1) * wrow],
                            &cols[c * crow..(c + 1) * crow],
                        );
                        want[c * m + r] = (tt.vec_dot)(k, x, y);
                    }
                }
                let got = tiles_with(isa, wt, k, m, n, &w, &cols)
                    .unwrap_or_else(|| panic!("{} refused {wt}", isa.name()));
                for (shape, g) in &got {
                    let e = max_rel_err(g, &want);
                    assert!(
                        e <= 2e-5,
                        "{} {shape} {wt} k={k} m={m} n={n}: max rel err {e:e}",
                        isa.name()
                    );
                    if wt.is_quantized() {
                        assert!(
                            g.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{} {shape} {wt} k={k} m={m} n={n}: not bit-identical (max rel err {e:e})",
                            isa.name()
                        );
                    }
                    // mul_mat's chunks (the thread count) decide which tile a result comes from.
                    assert!(
                        g.iter()
                            .zip(&got[0].1)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{} {shape} {wt} k={k} m={m} n={n}: not bit-identical to {}",
                        isa.name(),
                        got[0].0
                    );
                    ran += 1;
                }
            }
        }
        println!("aarch64 tile path {} tested", isa.name());
    }
    // NEON is always there: 11 types × 5 shapes × 8 tile shapes at least.
    assert!(ran >= 11 * 5 * 8, "only {ran} cases ran");
}

/// Every integer-dot GEMV path of the token-generation mul_mat (x86: AVX-512 VNNI, AVX-VNNI,
/// AVX2; one src1 column) that this CPU has, forced one at a time, against the scalar vec_dot
/// on the same bytes, for every type it handles: row counts below, at and over the 4-row tile
/// with remainders, 1–37 blocks (k-quants: 1–19 super-blocks). Paths the CPU lacks are printed as skipped. Each block's
/// integer dot is exact (the bias is taken back in integers); max |err| <= 2e-6 * max |ref|
/// (one FMA per block instead of a product and a sum). The paired GEMV of the 4- and 5-bit types
/// must give the same bits on AVX2 as on AVX-512 where the CPU has both.
#[cfg(target_arch = "x86_64")]
#[test]
fn integer_dot_gemv_paths_match_scalar_vec_dot() {
    use ggweb::backend::cpu::arch::x86::{gemv_repacked_with, gemv_with, Isa};
    let types = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    let mut ran = 0;
    let mut paired_checked = 0;
    let mut repacked_checked = 0;
    for isa in Isa::ALL {
        if !isa.supported() {
            println!(
                "integer-dot GEMV path {} skipped: not on this CPU",
                isa.name()
            );
            continue;
        }
        for wt in types {
            let tt = ggweb::quant::type_traits_scalar(wt).unwrap();
            let vt = ggweb::quant::type_traits_scalar(tt.vec_dot_type).unwrap();
            // (520 blocks: past the paired GEMV's 512 column facts kept on the stack.)
            for (nb, m) in [
                (1, 1),
                (3, 7),
                (5, 4),
                (18, 37),
                (2, 9),
                (37, 13),
                (7, 3),
                (520, 5),
            ] {
                // 32-element types: nb blocks; k-quants: nb/2 + 1 super-blocks (1..=19).
                let k = if wt.block_size() == 256 {
                    (nb / 2 + 1) * 256
                } else {
                    nb * 32
                };
                let mut rng = Rng::new((k * 7 + m * 131) as u64);
                let (wrow, crow) = (
                    wt.row_size(k).unwrap(),
                    tt.vec_dot_type.row_size(k).unwrap(),
                );
                let mut w = vec![0u8; wrow * m];
                // (Each block's largest value quantizes to ±127 in q8_0: the +128 flip's edges; −128 below.)
                for r in w.chunks_exact_mut(wrow) {
                    ggweb::quant::quantize_row(wt, &rng.vec(k, -1.0, 1.0), r).unwrap();
                }
                if wt == DType::Q8_0 {
                    // −128, which the quantizer never writes but a GGUF may hold: |−128| is
                    // 128 as u8 in the AVX2 sign trick.
                    for b in w.chunks_exact_mut(34).step_by(3) {
                        b[2] = 0x80;
                        b[33] = 0x80;
                    }
                }
                let mut col = vec![0u8; crow];
                (vt.from_f32)(&rng.vec(k, -1.0, 1.0), &mut col);
                let got = gemv_with(isa, wt, k, m, &w, &col);
                let got = got.unwrap_or_else(|| panic!("{} GEMV refused {wt}", isa.name()));
                let want: Vec<f32> = w
                    .chunks_exact(wrow)
                    .map(|x| (tt.vec_dot)(k, x, &col))
                    .collect();
                let e = max_rel_err(&got, &want);
                assert!(
                    e <= 2e-6,
                    "{} GEMV {wt} k={k} m={m}: max rel err {e:e}",
                    isa.name()
                );
                // The 4- and 5-bit 32-element types run the paired GEMV on AVX-512 and AVX2
                // alike (the same exact lane integers, then the same float operations): bit
                // for bit the same results, so an AVX2-only CPU generates what this one does.
                // So do q4_K and q5_K (AVX-512's two groups per 512-bit vector: the same integer
                // lane sums, the same float steps).
                let paired = matches!(wt, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1);
                if isa == Isa::Avx2
                    && (paired || matches!(wt, DType::Q4_K | DType::Q5_K))
                    && Isa::Avx512Vnni.supported()
                {
                    let wide = gemv_with(Isa::Avx512Vnni, wt, k, m, &w, &col).unwrap();
                    assert!(
                        got.iter()
                            .zip(&wide)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "AVX2 GEMV {wt} k={k} m={m}: not bit-identical to AVX-512's"
                    );
                    paired_checked += 1;
                }
                // The GEMV over the same rows repacked at load (whole groups of four): the
                // plain rows' bits, on the paths that read them so (the paired types on
                // AVX-512 and AVX2, q8_0 on the VNNI paths).
                let reads_repacked = match wt {
                    DType::Q8_0 => matches!(isa, Isa::Avx512Vnni | Isa::AvxVnni),
                    _ => paired && matches!(isa, Isa::Avx512Vnni | Isa::Avx2),
                };
                if reads_repacked && m >= 4 {
                    let m4 = m / 4 * 4;
                    let r = gemv_repacked_with(isa, wt, k, m4, &w[..m4 * wrow], &col)
                        .unwrap_or_else(|| panic!("{} repacked GEMV refused {wt}", isa.name()));
                    assert!(
                        r.iter()
                            .zip(&got[..m4])
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{} repacked GEMV {wt} k={k} m={m4}: not bit-identical to the plain rows'",
                        isa.name()
                    );
                    repacked_checked += 1;
                }
                ran += 1;
            }
        }
        println!("integer-dot GEMV path {} tested", isa.name());
    }
    // Every path needs AVX2; with it, at least the AVX2 path's 8 types × 8 shapes ran, and
    // the repacked GEMV of the types each path reads repacked × the 6 shapes of 4+ rows.
    if Isa::Avx2.supported() {
        assert!(ran >= 8 * 8, "only {ran} cases ran");
        let types = |isa: Isa, n: usize| if isa.supported() { n } else { 0 };
        let want = types(Isa::Avx512Vnni, 5) + types(Isa::AvxVnni, 1) + types(Isa::Avx2, 4);
        assert_eq!(repacked_checked, want * 6, "repacked GEMV cases");
    }
    if Isa::Avx512Vnni.supported() {
        assert_eq!(
            paired_checked,
            6 * 8,
            "AVX2 against AVX-512 paired GEMV cases"
        );
    } else {
        println!("AVX2 against AVX-512 paired GEMV skipped: no AVX-512 VNNI on this CPU");
    }
}

/// Two mul_mats in one graph (the chunk counter is reset per node), the second consuming the
/// first's output.
#[test]
fn mul_mat_chained_in_one_graph() {
    let mut rng = Rng::new(42);
    let mut ctx = Context::new();
    let (k, m, n, p) = (40, 33, 17, 21);
    let w1 = ctx.new_tensor(DType::F32, &[k, m]).unwrap();
    let x = ctx.new_tensor(DType::F32, &[k, n]).unwrap();
    let w2 = ctx.new_tensor(DType::F16, &[m, p]).unwrap();
    let h = ctx.mul_mat(w1, x).unwrap(); // [m, n]
    let y = ctx.mul_mat(w2, h).unwrap(); // [p, n]
    alloc_all(&mut ctx);
    let w1v = set_values(&ctx, w1, &rng.vec(k * m, -1.0, 1.0)).unwrap();
    let xv = set_values(&ctx, x, &rng.vec(k * n, -1.0, 1.0)).unwrap();
    let w2v = set_values(&ctx, w2, &rng.vec(m * p, -1.0, 1.0)).unwrap();
    for threads in [1, 2, 3] {
        compute(&ctx, &[y], threads).unwrap();
        let hv = reference::mul_mat(&w1v, [k, m, 1, 1], &xv, [k, n, 1, 1]);
        let want = reference::mul_mat(&w2v, [m, p, 1, 1], &hv, [m, n, 1, 1]);
        let got = ctx.get_f32(y).unwrap();
        let e = max_rel_err(&got, &want);
        assert!(e <= 1e-3, "threads {threads}: err {e:e}");
    }
}

#[test]
fn mul_mat_shape_errors() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[8, 4, 2]).unwrap();
    let b_bad_k = ctx.new_tensor(DType::F32, &[9, 3]).unwrap();
    assert!(matches!(ctx.mul_mat(a, b_bad_k), Err(Error::Shape(_))));
    let b_bad_batch = ctx.new_tensor(DType::F32, &[8, 3, 3]).unwrap();
    assert!(matches!(ctx.mul_mat(a, b_bad_batch), Err(Error::Shape(_))));
    let b_i32 = ctx.new_tensor(DType::I32, &[8, 3, 2]).unwrap();
    assert!(ctx.mul_mat(a, b_i32).is_err());
    // src0 rows must be contiguous.
    let sq = ctx.new_tensor(DType::F32, &[8, 8]).unwrap();
    let at = ctx.transpose(sq).unwrap();
    let b = ctx.new_tensor(DType::F32, &[8, 3]).unwrap();
    assert!(matches!(ctx.mul_mat(at, b), Err(Error::Shape(_))));
    // Non-computable weights.
    let q = ctx.new_tensor(DType::IQ2_XXS, &[256, 2]).unwrap();
    let bq = ctx.new_tensor(DType::F32, &[256, 2]).unwrap();
    assert!(ctx.mul_mat(q, bq).is_err());
    // A good one still works.
    let b_ok = ctx.new_tensor(DType::F32, &[8, 3, 4]).unwrap();
    let c = ctx.mul_mat(a, b_ok).unwrap();
    assert_eq!(ctx.tensor(c).ne, [4, 3, 4, 1]);
    assert_eq!(ctx.tensor(c).dtype, DType::F32);
}

// ------------------------------------------------------------------------------------------------
// im2col / conv_2d
// ------------------------------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn check_im2col(
    ine: [usize; 4],
    kne: [usize; 4],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    is_2d: bool,
    in_t: DType,
    dst_t: DType,
    threads: usize,
) {
    let mut rng = Rng::new(5 + ine[0] as u64);
    let mut ctx = Context::new();
    let x = ctx.new_tensor(in_t, &ine).unwrap();
    let k = ctx.new_tensor(DType::F16, &kne).unwrap();
    let out = ctx
        .im2col(k, x, s[0], s[1], p[0], p[1], d[0], d[1], is_2d, dst_t)
        .unwrap();
    alloc_all(&mut ctx);
    let xv = set_values(&ctx, x, &rng.vec(ine.iter().product(), -1.0, 1.0)).unwrap();
    compute(&ctx, &[out], threads).unwrap();
    let (want, wne) = reference::im2col(&xv, ine, kne, s[0], s[1], p[0], p[1], d[0], d[1], is_2d);
    assert_eq!(ctx.tensor(out).ne, wne);
    let got = get_values(&ctx, out);
    let tol = if dst_t == DType::F16 { 1e-3 } else { 0.0 };
    let e = max_rel_err(&got, &want);
    assert!(e <= tol, "im2col {ine:?} {kne:?}: err {e:e}");
}

#[test]
fn im2col_2d_and_1d() {
    // 2D, with padding, stride and dilation.
    check_im2col(
        [9, 7, 3, 2],
        [3, 3, 3, 4],
        [1, 1],
        [1, 1],
        [1, 1],
        true,
        DType::F32,
        DType::F32,
        2,
    );
    check_im2col(
        [11, 8, 2, 1],
        [3, 2, 2, 5],
        [2, 3],
        [2, 1],
        [2, 1],
        true,
        DType::F32,
        DType::F16,
        3,
    );
    check_im2col(
        [6, 5, 1, 3],
        [2, 2, 1, 1],
        [2, 2],
        [0, 0],
        [1, 1],
        true,
        DType::F16,
        DType::F32,
        1,
    );
    // 1D: input [IW, IC, N], kernel [KW, IC, OC].
    check_im2col(
        [13, 3, 2, 1],
        [4, 3, 2, 1],
        [2, 1],
        [1, 0],
        [2, 1],
        false,
        DType::F32,
        DType::F32,
        2,
    );
}

#[test]
fn im2col_shape_errors() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[5, 5, 3, 1]).unwrap();
    let k_bad_c = ctx.new_tensor(DType::F32, &[3, 3, 2, 4]).unwrap();
    assert!(ctx
        .im2col(k_bad_c, x, 1, 1, 0, 0, 1, 1, true, DType::F32)
        .is_err());
    let k_big = ctx.new_tensor(DType::F32, &[7, 3, 3, 4]).unwrap();
    assert!(matches!(
        ctx.im2col(k_big, x, 1, 1, 0, 0, 1, 1, true, DType::F32),
        Err(Error::Shape(_))
    ));
    let k = ctx.new_tensor(DType::F32, &[3, 3, 3, 4]).unwrap();
    assert!(ctx
        .im2col(k, x, 0, 1, 0, 0, 1, 1, true, DType::F32)
        .is_err());
    assert!(ctx
        .im2col(k, x, 1, 1, 0, 0, 1, 1, true, DType::Q8_0)
        .is_err());
    assert!(ctx.conv_2d(k_bad_c, x, 1, 1, 0, 0, 1, 1).is_err());
}

/// conv_2d builds im2col → mul_mat → permute → cont. The graph up to the permuted view runs here
/// and its values (read through the view's strides) are checked against a direct convolution;
/// the full graph is checked too when the backend computes CONT.
#[test]
fn conv_2d_matches_direct_convolution() {
    for (kt, ine, kne, s, p, d) in [
        (
            DType::F32,
            [10, 8, 3, 2],
            [3, 3, 3, 4],
            [1, 1],
            [1, 1],
            [1, 1],
        ),
        (
            DType::F16,
            [9, 9, 2, 1],
            [3, 2, 2, 3],
            [2, 1],
            [0, 2],
            [1, 2],
        ),
    ] {
        let mut rng = Rng::new(77);
        let mut ctx = Context::new();
        let x = ctx.new_tensor(DType::F32, &ine).unwrap();
        let k = ctx.new_tensor(kt, &kne).unwrap();
        let y = ctx
            .conv_2d(k, x, s[0], s[1], p[0], p[1], d[0], d[1])
            .unwrap();
        let perm = ctx.tensor(y).src[0].unwrap();
        let mm = ctx.tensor(perm).src[0].unwrap(); // the reshape of the mul_mat result
        alloc_all(&mut ctx);
        let xv = set_values(&ctx, x, &rng.vec(ine.iter().product(), -1.0, 1.0)).unwrap();
        let kv = set_values(&ctx, k, &rng.vec(kne.iter().product(), -1.0, 1.0)).unwrap();
        let (want, wne) =
            reference::conv_2d(&kv, kne, &xv, ine, s[0], s[1], p[0], p[1], d[0], d[1]);
        assert_eq!(ctx.tensor(y).ne, wne);
        let tol = if kt == DType::F16 { 2e-3 } else { 1e-4 };
        compute(&ctx, &[mm], 2).unwrap();
        // mm is [OW, OH, N, OC]; the result is its (0, 1, 3, 2) permutation.
        let mv = ctx.get_f32(mm).unwrap();
        let mne = ctx.tensor(mm).ne;
        let mut got = vec![0f32; want.len()];
        for n in 0..wne[3] {
            for o in 0..wne[2] {
                for yy in 0..wne[1] {
                    for xx in 0..wne[0] {
                        got[idx(wne, xx, yy, o, n)] = mv[idx(mne, xx, yy, n, o)];
                    }
                }
            }
        }
        let e = max_rel_err(&got, &want);
        assert!(e <= tol, "conv_2d {ine:?} {kne:?}: err {e:e}");
        match compute(&ctx, &[y], 2) {
            Ok(()) => {
                let e = max_rel_err(&ctx.get_f32(y).unwrap(), &want);
                assert!(e <= tol, "conv_2d (cont) {ine:?} {kne:?}: err {e:e}");
            }
            // CONT lives in the elementwise kernels (another branch); until they land the full
            // graph reports it as unsupported rather than computing anything wrong.
            Err(Error::UnsupportedOp(m)) => assert!(m.contains("CONT"), "{m}"),
            Err(e) => panic!("{e}"),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// pool_2d, argmax, cross-entropy
// ------------------------------------------------------------------------------------------------

#[test]
fn pool_2d_max_avg_with_padding() {
    let cases = [
        ([8, 6, 3, 2], [2, 2], [2, 2], [0, 0]),
        ([7, 5, 2, 1], [3, 3], [2, 2], [1, 1]),
        ([9, 4, 1, 3], [3, 2], [1, 2], [2, 1]), // padding as large as the kernel: empty windows
        ([5, 5, 1, 1], [5, 5], [1, 1], [0, 0]),
    ];
    for (ci, (ne, k, s, p)) in cases.into_iter().enumerate() {
        for op in [PoolOp::Max, PoolOp::Avg] {
            for in_t in [DType::F32, DType::F16] {
                let mut rng = Rng::new(ci as u64);
                let mut ctx = Context::new();
                let a = ctx.new_tensor(in_t, &ne).unwrap();
                let out = ctx
                    .pool_2d(a, op, k[0], k[1], s[0], s[1], p[0], p[1])
                    .unwrap();
                alloc_all(&mut ctx);
                let av = set_values(&ctx, a, &rng.vec(ne.iter().product(), -1.0, 1.0)).unwrap();
                compute(&ctx, &[out], 1 + ci % 3).unwrap();
                let (want, wne) =
                    reference::pool_2d(&av, ne, op, k[0], k[1], s[0], s[1], p[0], p[1]);
                assert_eq!(ctx.tensor(out).ne, wne);
                let got = ctx.get_f32(out).unwrap();
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                        "{op:?} {ne:?}: {g} vs {w}"
                    );
                }
            }
        }
    }
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[3, 3]).unwrap();
    assert!(matches!(
        ctx.pool_2d(a, PoolOp::Max, 4, 2, 1, 1, 0, 0),
        Err(Error::Shape(_))
    ));
    assert!(ctx.pool_2d(a, PoolOp::Max, 2, 2, 0, 1, 0, 0).is_err());
    let q = ctx.new_tensor(DType::Q8_0, &[32, 3]).unwrap();
    assert!(ctx.pool_2d(q, PoolOp::Avg, 2, 2, 1, 1, 0, 0).is_err());
}

#[test]
fn argmax_rows_and_ties() {
    let mut rng = Rng::new(3);
    let (nc, nr) = (37, 11);
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[nc, nr]).unwrap();
    let out = ctx.argmax(a).unwrap();
    assert_eq!(ctx.tensor(out).ne, [nr, 1, 1, 1]);
    assert_eq!(ctx.tensor(out).dtype, DType::I32);
    alloc_all(&mut ctx);
    let mut v = rng.vec(nc * nr, -1.0, 1.0);
    // Row 0: a tie between elements 3 and 20 (ggml picks the last).
    v[3] = 5.0;
    v[20] = 5.0;
    ctx.set_f32(a, &v).unwrap();
    for threads in [1, 2, 3] {
        compute(&ctx, &[out], threads).unwrap();
        let got = ctx.get_i32(out).unwrap();
        assert_eq!(got, reference::argmax(&v, [nc, nr, 1, 1]));
        assert_eq!(got[0], 20);
    }
    let c3 = ctx.new_tensor(DType::F32, &[4, 3, 2]).unwrap();
    assert!(matches!(ctx.argmax(c3), Err(Error::Shape(_))));
}

#[test]
fn cross_entropy_loss_matches_definition() {
    let mut rng = Rng::new(9);
    for (ne, threads) in [([10, 7, 1, 1], 1), ([33, 5, 3, 1], 2), ([4, 1, 1, 1], 3)] {
        let n: usize = ne.iter().product();
        let mut ctx = Context::new();
        let x = ctx.new_tensor(DType::F32, &ne).unwrap();
        let y = ctx.new_tensor(DType::F32, &ne).unwrap();
        let l = ctx.cross_entropy_loss(x, y).unwrap();
        assert_eq!(ctx.tensor(l).ne, [1, 1, 1, 1]);
        alloc_all(&mut ctx);
        let xv: Vec<f32> = rng.vec(n, -1.0, 1.0).iter().map(|v| v * 4.0).collect();
        // Labels: a probability distribution per row.
        let mut yv: Vec<f32> = rng
            .vec(n, -1.0, 1.0)
            .iter()
            .map(|v| v.abs() + 0.01)
            .collect();
        for row in yv.chunks_mut(ne[0]) {
            let s: f32 = row.iter().sum();
            row.iter_mut().for_each(|v| *v /= s);
        }
        ctx.set_f32(x, &xv).unwrap();
        ctx.set_f32(y, &yv).unwrap();
        compute(&ctx, &[l], threads).unwrap();
        let got = ctx.get_f32(l).unwrap()[0];
        let want = reference::cross_entropy_loss(&xv, &yv, ne);
        assert!(
            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{got} vs {want}"
        );
        assert!(got > 0.0);
    }
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[4, 3]).unwrap();
    let y = ctx.new_tensor(DType::F32, &[4, 2]).unwrap();
    assert!(matches!(ctx.cross_entropy_loss(x, y), Err(Error::Shape(_))));
}

/// The prefetch hint of a GEMV (`matmul::first_read`): the rows each thread runs first — all
/// of them on one thread, else each thread's one panel, an even share of the rows in groups of
/// four — and nothing for float weights or more than one column.
#[test]
fn gemv_first_read_is_each_threads_first_panel() {
    use ggweb::backend::cpu::{ops::matmul::first_read, resolve_node, tensor_ptr};
    let mut ctx = Context::new();
    let k = 64;
    let small = ctx.new_tensor(DType::Q4_0, &[k, 256]).unwrap();
    let large = ctx.new_tensor(DType::Q4_0, &[k, 4096]).unwrap();
    let odd = ctx.new_tensor(DType::Q4_0, &[k, 1030]).unwrap();
    let float = ctx.new_tensor(DType::F32, &[k, 256]).unwrap();
    let x = ctx.new_tensor(DType::F32, &[k, 1]).unwrap();
    let x2 = ctx.new_tensor(DType::F32, &[k, 2]).unwrap();
    let ys = [
        ctx.mul_mat(small, x).unwrap(),
        ctx.mul_mat(large, x).unwrap(),
        ctx.mul_mat(float, x).unwrap(),
        ctx.mul_mat(small, x2).unwrap(),
        ctx.mul_mat(odd, x).unwrap(),
    ];
    alloc_all(&mut ctx);
    let row = DType::Q4_0.row_size(k).unwrap();
    let at = |w, rows: std::ops::Range<usize>| {
        let p = tensor_ptr(&ctx, w).unwrap() as *const u8;
        Some((p.wrapping_add(rows.start * row), rows.len() * row))
    };
    let node = |y| resolve_node(&ctx, y).unwrap();
    let (s, l) = (node(ys[0]), node(ys[1]));
    assert_eq!(first_read(&s, 0, 1), at(small, 0..256));
    assert_eq!(first_read(&s, 0, 2), at(small, 0..128));
    assert_eq!(first_read(&s, 1, 2), at(small, 128..256));
    assert_eq!(first_read(&l, 0, 1), at(large, 0..4096));
    assert_eq!(first_read(&l, 0, 2), at(large, 0..2048));
    assert_eq!(first_read(&l, 1, 2), at(large, 2048..4096));
    // 258 groups of four (the last of two rows): 86 a thread.
    let o = node(ys[4]);
    assert_eq!(first_read(&o, 0, 3), at(odd, 0..344));
    assert_eq!(first_read(&o, 1, 3), at(odd, 344..688));
    assert_eq!(first_read(&o, 2, 3), at(odd, 688..1030));
    assert_eq!(first_read(&node(ys[2]), 0, 1), None);
    assert_eq!(first_read(&node(ys[3]), 0, 1), None);
}

/// Small GEMVs run whole on one thread each (`Run::Owner`, natively): two independent ones side
/// by side, their sum, a GEMV of that sum and one of the first's result alone (dependencies
/// across the owning threads, which need barriers), plain and repacked weights — on 2 and 3
/// threads the same bits as on 1.
#[test]
fn small_gemvs_on_their_own_threads_equal_one_thread() {
    let mut rng = Rng::new(77);
    let mut ctx = Context::new();
    // (w1 the largest, so that its owner finishes last: a missing barrier reads its result
    // unwritten, cleared to NaN before every run.)
    let (k1, k) = (4096, 256);
    let w1 = ctx.new_tensor(DType::Q4_0, &[k1, 64]).unwrap(); // 147 KB
    let w2 = ctx.new_tensor(DType::Q5_0, &[k, 64]).unwrap();
    let w3 = ctx.new_tensor(DType::Q8_0, &[64, 64]).unwrap();
    let w4 = ctx.new_tensor(DType::Q4_1, &[64, 96]).unwrap();
    let x1 = ctx.new_tensor(DType::F32, &[k1, 1]).unwrap();
    let x = ctx.new_tensor(DType::F32, &[k, 1]).unwrap();
    let y1 = ctx.mul_mat(w1, x1).unwrap();
    let y2 = ctx.mul_mat(w2, x).unwrap();
    let z = ctx.add(y1, y2).unwrap();
    let y3 = ctx.mul_mat(w3, z).unwrap();
    let y4 = ctx.mul_mat(w4, y1).unwrap();
    alloc_all(&mut ctx);
    for (w, n) in [(w1, k1 * 64), (w2, k * 64), (w3, 64 * 64), (w4, 64 * 96)] {
        set_values(&ctx, w, &rng.vec(n, -1.0, 1.0)).unwrap();
    }
    set_values(&ctx, x1, &rng.vec(k1, -1.0, 1.0)).unwrap();
    set_values(&ctx, x, &rng.vec(k, -1.0, 1.0)).unwrap();
    let clear = |ctx: &Context| {
        for t in [y1, y2, z, y3, y4] {
            let n = ctx.tensor(t).nelements();
            ctx.set_f32(t, &vec![f32::NAN; n]).unwrap();
        }
    };
    for repacked in [false, true] {
        if repacked {
            for w in [w1, w2, w3, w4] {
                ggweb::backend::cpu::repack::repack_tensor(&mut ctx, w).unwrap();
            }
        }
        clear(&ctx);
        compute(&ctx, &[y3, y4], 1).unwrap();
        let want = [ctx.get_f32(y3).unwrap(), ctx.get_f32(y4).unwrap()];
        assert!(want.iter().flatten().all(|v| v.is_finite()));
        for threads in [2, 3] {
            for round in 0..20 {
                clear(&ctx);
                compute(&ctx, &[y3, y4], threads).unwrap();
                let got = [ctx.get_f32(y3).unwrap(), ctx.get_f32(y4).unwrap()];
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "repacked {repacked}, {threads} threads, round {round}: not one thread's bits"
                    );
                }
            }
        }
    }
}

/// Who runs a layer's GEMVs at 2 threads (`CpuBackend::plan_report`): SmolLM2's 576×192 q4_1 K
/// and V products (69 KB) one thread each, its 576×576 Q product (207 KB) split — the whole
/// weight decides, not a thread's first share (three quarters of the rows in wasm, whose copy
/// of this test in wasm-tests/tests/graph.rs failed on that).
#[test]
fn gemv_plan_small_weights_owned_larger_split() {
    use ggweb::backend::cpu::CpuBackend;
    let (ctx, g) = ggweb_testing::smollm2_qkv_gemvs();
    let plan = CpuBackend::with_threads_forced(2)
        .plan_report(&ctx, &g)
        .unwrap();
    assert_eq!(plan, ["MUL_MAT owner 1", "MUL_MAT owner 0", "MUL_MAT all"]);
}

/// A layer's products of one activation (prompt-sized: converted once for all threads, then a
/// barrier) take the first one's converted src1 where the next needs the same bytes
/// (`ops::matmul::ConvertKey`): K, V and Q of q4_1 weights (a bias add between), not the q8_0
/// product (another vec_dot type), and not the q4_1 product after it (the work buffer then
/// holds the q8_0 product's conversion). On 2 and 3 threads, rounds of them, the same bits as on
/// 1 thread and as each product computed alone.
#[test]
fn products_of_one_activation_share_its_conversion() {
    use ggweb::backend::cpu::CpuBackend;
    use ggweb::Graph;
    let mut rng = Rng::new(91);
    let mut ctx = Context::new();
    let (k, n) = (576, 13);
    let w = |ctx: &mut Context, t, rows| ctx.new_tensor(t, &[k, rows]).unwrap();
    let (wk, wv, wq) = (
        w(&mut ctx, DType::Q4_1, 192),
        w(&mut ctx, DType::Q4_1, 192),
        w(&mut ctx, DType::Q4_1, 576),
    );
    let (w8, wl) = (w(&mut ctx, DType::Q8_0, 64), w(&mut ctx, DType::Q4_1, 96));
    let x = ctx.new_tensor(DType::F32, &[k, n]).unwrap();
    let bias = ctx.new_tensor(DType::F32, &[192, n]).unwrap();
    let yk = ctx.mul_mat(wk, x).unwrap();
    let yk = ctx.add(yk, bias).unwrap();
    let yv = ctx.mul_mat(wv, x).unwrap();
    let yq = ctx.mul_mat(wq, x).unwrap();
    let y8 = ctx.mul_mat(w8, x).unwrap();
    let yl = ctx.mul_mat(wl, x).unwrap();
    let outs = [yk, yv, yq, y8, yl];
    alloc_all(&mut ctx);
    for (t, rows) in [(wk, 192), (wv, 192), (wq, 576), (w8, 64), (wl, 96)] {
        set_values(&ctx, t, &rng.vec(k * rows, -1.0, 1.0)).unwrap();
    }
    set_values(&ctx, x, &rng.vec(k * n, -1.0, 1.0)).unwrap();
    set_values(&ctx, bias, &rng.vec(192 * n, -1.0, 1.0)).unwrap();
    let g = Graph::build(&ctx, &outs);
    let plan = CpuBackend::with_threads_forced(2)
        .plan_report(&ctx, &g)
        .unwrap();
    assert_eq!(
        plan,
        [
            // (The add reads K's result; the q8_0 product converts over what Q reads.)
            "MUL_MAT all sync",
            "ADD solo",
            "MUL_MAT all reuse",
            "MUL_MAT all reuse sync",
            "MUL_MAT all sync",
            "MUL_MAT all",
        ],
        "{plan:?}"
    );
    let clear = |ctx: &Context| {
        for t in outs {
            let len = ctx.tensor(t).nelements();
            ctx.set_f32(t, &vec![f32::NAN; len]).unwrap();
        }
    };
    // Each product alone (its own graph, its own conversion), then all of them on 1 thread.
    let mut alone = Vec::new();
    for t in outs {
        clear(&ctx);
        compute(&ctx, &[t], 1).unwrap();
        alone.push(ctx.get_f32(t).unwrap());
    }
    clear(&ctx);
    compute(&ctx, &outs, 1).unwrap();
    let want: Vec<Vec<f32>> = outs.iter().map(|&t| ctx.get_f32(t).unwrap()).collect();
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    for (i, (a, w)) in alone.iter().zip(&want).enumerate() {
        assert!(w.iter().all(|v| v.is_finite()), "product {i}: not finite");
        assert!(
            same(a, w),
            "product {i}: one graph differs from the product alone"
        );
    }
    for threads in [2, 3] {
        for round in 0..10 {
            clear(&ctx);
            compute(&ctx, &outs, threads).unwrap();
            for (i, (&t, w)) in outs.iter().zip(&want).enumerate() {
                assert!(
                    same(&ctx.get_f32(t).unwrap(), w),
                    "{threads} threads, round {round}, product {i}: not one thread's bits"
                );
            }
        }
    }
}
