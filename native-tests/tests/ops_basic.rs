//! test-backend-ops style tests of the basic CPU kernels against the scalar references:
//! every op × every accepted type, random seeded data, odd shapes, broadcast shapes,
//! non-contiguous inputs, 1 and 3 threads.

#[path = "support/basic.rs"]
mod support_basic;

use ggweb::tensor::{RopeMode, RopeParams, UnaryOp};
use ggweb::{DType, Error};
use support_basic::{check, Fill, Harness, Layout, Tol, LAYOUTS};

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const SHAPE: [usize; 4] = [7, 5, 3, 2];

#[test]
fn binary_ops() {
    let b_shapes: [[usize; 4]; 5] = [
        SHAPE,
        [7, 1, 3, 1],
        [1, 5, 1, 2],
        [7, 1, 1, 1],
        [1, 1, 1, 1],
    ];
    let mut seed = 0;
    for op in ["add", "sub", "mul", "div"] {
        for ta in FLOATS {
            for tb in FLOATS {
                for (k, bs) in b_shapes.iter().enumerate() {
                    for la in LAYOUTS {
                        // b non-contiguous only where its shape allows a clean variety.
                        let lb = LAYOUTS[k % 4];
                        seed += 1;
                        let label = format!("{op} {ta}x{tb} b{bs:?} {la:?}/{lb:?}");
                        check(&label, seed, None, |h| {
                            let a = h.input(ta, SHAPE, la);
                            let b = if op == "div" {
                                h.input_fill(tb, *bs, lb, Fill::Uniform(0.5, 2.0))
                            } else {
                                h.input(tb, *bs, lb)
                            };
                            match op {
                                "add" => h.ctx.add(a, b),
                                "sub" => h.ctx.sub(a, b),
                                "mul" => h.ctx.mul(a, b),
                                _ => h.ctx.div(a, b),
                            }
                            .unwrap()
                        });
                    }
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Un {
    U(UnaryOp),
    Scale,
    ScaleBias,
    Sqr,
    Sqrt,
    Log,
}

#[test]
fn unary_ops() {
    let mut ops: Vec<Un> = UnaryOp::ALL.into_iter().map(Un::U).collect();
    ops.extend([Un::Scale, Un::ScaleBias, Un::Sqr, Un::Sqrt, Un::Log]);
    let mut seed = 1000;
    for op in ops {
        for t in FLOATS {
            for l in LAYOUTS {
                seed += 1;
                let fill = match op {
                    Un::Sqrt | Un::Log => Fill::Uniform(0.05, 4.0),
                    _ => Fill::Uniform(-4.0, 4.0),
                };
                check(&format!("{op:?} {t} {l:?}"), seed, None, |h| {
                    let a = h.input_fill(t, SHAPE, l, fill.clone());
                    let c = &mut h.ctx;
                    match op {
                        Un::U(u) => c.unary(a, u),
                        Un::Scale => c.scale(a, 0.37),
                        Un::ScaleBias => c.scale_bias(a, -1.5, 0.25),
                        Un::Sqr => c.sqr(a),
                        Un::Sqrt => c.sqrt(a),
                        Un::Log => c.log(a),
                    }
                    .unwrap()
                });
            }
        }
    }
}

/// Contiguous f32 rows longer than the elementwise kernel's 64-element chunk (`basic.rs::map_row`),
/// two full chunks and a 3-element tail, so a chunk boundary or tail error shows (the output is
/// poisoned before each compute).
#[test]
fn unary_ops_long_rows() {
    let mut seed = 5000;
    for u in UnaryOp::ALL {
        seed += 1;
        check(&format!("{u:?} [131, 3]"), seed, None, |h| {
            let a = h.input_fill(
                DType::F32,
                [131, 3, 1, 1],
                Layout::Contig,
                Fill::Uniform(-4.0, 4.0),
            );
            h.ctx.unary(a, u).unwrap()
        });
    }
}

#[test]
fn named_unary_constructors() {
    let mut h = Harness::new(1);
    let a = h.input(DType::F32, SHAPE, Layout::Contig);
    let c = &mut h.ctx;
    let ids = [
        c.abs(a).unwrap(),
        c.neg(a).unwrap(),
        c.relu(a).unwrap(),
        c.gelu(a).unwrap(),
        c.gelu_erf(a).unwrap(),
        c.silu(a).unwrap(),
        c.tanh(a).unwrap(),
        c.sigmoid(a).unwrap(),
        c.exp(a).unwrap(),
    ];
    for id in ids {
        assert_eq!(c.tensor(id).ne, SHAPE);
    }
}

#[test]
fn reductions() {
    let mut seed = 2000;
    for t in FLOATS {
        for l in LAYOUTS {
            for which in ["sum", "sum_rows", "mean"] {
                seed += 1;
                // Sums of up to 210 values in [-1, 1): the output rounding dominates.
                let tol = match (which, t) {
                    ("mean", _) | (_, DType::F32) => Tol {
                        abs: 2e-5,
                        rel: 1e-5,
                    },
                    (_, DType::F16) => Tol {
                        abs: 2e-2,
                        rel: 1e-3,
                    },
                    _ => Tol {
                        abs: 0.1,
                        rel: 8e-3,
                    },
                };
                check(&format!("{which} {t} {l:?}"), seed, Some(tol), |h| {
                    let a = h.input(t, SHAPE, l);
                    match which {
                        "sum" => h.ctx.sum(a),
                        "sum_rows" => h.ctx.sum_rows(a),
                        _ => h.ctx.mean(a),
                    }
                    .unwrap()
                });
            }
        }
    }
}

#[test]
fn repeat_and_concat() {
    let mut seed = 3000;
    for t in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        for (l, small) in [
            (Layout::Contig, [7, 1, 3, 1]),
            (Layout::Transposed, [1, 5, 1, 2]),
            (Layout::Permuted, [7, 5, 1, 1]),
            (Layout::Padded, [7, 1, 1, 2]),
        ] {
            if t == DType::I32 && l != Layout::Contig {
                continue;
            }
            seed += 1;
            let fill = if t == DType::I32 {
                Fill::Int(-1000, 1000)
            } else {
                Fill::Uniform(-1.0, 1.0)
            };
            check(&format!("repeat {t} {small:?} {l:?}"), seed, None, |h| {
                let a = h.input_fill(t, small, l, fill.clone());
                let b = h.ctx.new_tensor(t, &SHAPE).unwrap();
                h.ctx.repeat(a, b).unwrap()
            });
            for dim in 0..4 {
                seed += 1;
                check(&format!("concat {t} dim {dim} {l:?}"), seed, None, |h| {
                    let mut nb = SHAPE;
                    nb[dim] = 2;
                    let a = h.input_fill(t, SHAPE, l, fill.clone());
                    let b = h.input_fill(t, nb, Layout::Contig, fill.clone());
                    h.ctx.concat(a, b, dim).unwrap()
                });
            }
        }
    }
}

#[test]
fn norms() {
    let mut seed = 4000;
    for l in LAYOUTS {
        for shape in [SHAPE, [64, 3, 1, 1], [1, 4, 1, 1]] {
            for rms in [false, true] {
                seed += 1;
                check(
                    &format!("norm rms={rms} {shape:?} {l:?}"),
                    seed,
                    None,
                    |h| {
                        let a = h.input_fill(DType::F32, shape, l, Fill::Uniform(-3.0, 2.0));
                        if rms {
                            h.ctx.rms_norm(a, 1e-6).unwrap()
                        } else {
                            h.ctx.norm(a, 1e-5).unwrap()
                        }
                    },
                );
            }
        }
    }
}

#[test]
fn soft_max() {
    let mut seed = 5000;
    // [n_kv, n_tokens, n_head, n_seq]
    let shape = [9, 4, 5, 2];
    for l in LAYOUTS {
        seed += 1;
        check(&format!("soft_max {l:?}"), seed, None, |h| {
            let a = h.input_fill(DType::F32, shape, l, Fill::Uniform(-5.0, 5.0));
            h.ctx.soft_max(a).unwrap()
        });
        for mt in [DType::F32, DType::F16] {
            for mshape in [[9, 4, 1, 1], [9, 6, 1, 1], [9, 4, 5, 1], [9, 5, 5, 2]] {
                for max_bias in [0.0, 8.0] {
                    seed += 1;
                    let label = format!("soft_max_ext {l:?} mask {mt} {mshape:?} bias {max_bias}");
                    check(&label, seed, None, |h| {
                        let a = h.input_fill(DType::F32, shape, l, Fill::Uniform(-5.0, 5.0));
                        // A causal-looking mask with some -inf entries (never a whole row).
                        let n: usize = mshape.iter().product();
                        let vals: Vec<f32> = (0..n)
                            .map(|i| {
                                let (k, q) = (i % 9, (i / 9) % mshape[1]);
                                if k > q + 4 {
                                    f32::NEG_INFINITY
                                } else {
                                    h.rng_f32(-1.0, 1.0)
                                }
                            })
                            .collect();
                        let m = h.leaf_fill(mt, &mshape, Fill::Values(vals));
                        h.ctx.soft_max_ext(a, Some(m), 0.3, max_bias).unwrap()
                    });
                }
            }
        }
    }
}

#[test]
fn rope() {
    let mut seed = 6000;
    // [head_dim, n_head, n_tokens, 1]
    let shape = [16, 3, 5, 1];
    for t in [DType::F32, DType::F16] {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            for n_dims in [16, 10] {
                for freq in [false, true] {
                    for yarn in [false, true] {
                        for l in [Layout::Contig, Layout::Padded, Layout::Permuted] {
                            seed += 1;
                            let mut p = RopeParams::new(n_dims, mode, 10000.0);
                            if yarn {
                                p.n_ctx_orig = 4096;
                                p.freq_scale = 0.25;
                                p.ext_factor = 1.0;
                                p.attn_factor = 0.9;
                            }
                            let label = format!(
                                "rope {t} {mode:?} n_dims {n_dims} freq {freq} yarn {yarn} {l:?}"
                            );
                            // Angles up to ~64 rad built by repeated f32 multiplication (as
                            // ggml): ~1e-5 absolute error against the f64 reference.
                            let tol = if t == DType::F32 {
                                Tol {
                                    abs: 1e-4,
                                    rel: 1e-4,
                                }
                            } else {
                                Tol {
                                    abs: 2e-3,
                                    rel: 2e-3,
                                }
                            };
                            check(&label, seed, Some(tol), |h| {
                                let a = h.input(t, shape, l);
                                let pos = h.leaf_fill(DType::I32, &[shape[2]], Fill::Int(0, 64));
                                let ff = freq.then(|| {
                                    h.leaf_fill(DType::F32, &[n_dims / 2], Fill::Uniform(1.0, 4.0))
                                });
                                h.ctx.rope_ext(a, pos, ff, p).unwrap()
                            });
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn get_rows() {
    let mut seed = 7000;
    let types = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    for t in types {
        let ne0 = if t.block_size() > 32 { 256 } else { 64 };
        for (ane, rne) in [
            ([ne0, 10, 1, 1], [4, 1, 1]),
            ([ne0, 7, 3, 1], [5, 3, 1]),
            ([ne0, 6, 2, 2], [3, 2, 2]),
        ] {
            seed += 1;
            let fill = if t == DType::I32 {
                Fill::Int(-99, 99)
            } else {
                Fill::Uniform(-1.0, 1.0)
            };
            check(&format!("get_rows {t} {ane:?} {rne:?}"), seed, None, |h| {
                let a = h.leaf_fill(t, &ane, fill.clone());
                let r = h.leaf_fill(DType::I32, &rne, Fill::Int(0, ane[1] as i32));
                h.ctx.get_rows(a, r).unwrap()
            });
        }
    }
}

#[test]
fn get_rows_out_of_range_is_an_error_not_panic() {
    let mut h = Harness::new(3);
    let a = h.leaf_fill(DType::F32, &[4, 3], Fill::Uniform(-1.0, 1.0));
    let r = h.leaf_fill(DType::I32, &[3], Fill::Values(vec![2.0, 3.0, -1.0]));
    let g = h.ctx.get_rows(a, r).unwrap();
    h.finish();
    // Ids are data, known only at compute: the graph runs to its end on every thread (no hang
    // at a barrier), then compute returns a typed error naming the id, and works again after.
    let e = h.compute(g, 2).unwrap_err();
    assert!(
        // Either bad id may be reported: the first thread to reach its row wins.
        matches!(&e, Error::InvalidArgument(m) if m.contains("row id 3") || m.contains("row id -1")),
        "{e}"
    );
    let out = h.ctx.get_f32(g).unwrap();
    assert!(out[..4].iter().all(|x| x.is_finite()));
    h.ctx.set_i32(r, &[2, 0, 1]).unwrap();
    h.compute(g, 2).unwrap();
}

/// Cont / cast / dup from every layout and type to every type.
#[test]
fn cont_and_cast() {
    let mut seed = 8000;
    let srcs = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_K,
    ];
    let dsts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_1,
        DType::Q6_K,
    ];
    for ts in srcs {
        for td in dsts {
            let ne0 = if ts.block_size() > 32 || td.block_size() > 32 {
                256
            } else {
                64
            };
            let layouts: &[Layout] = if ts.is_quantized() {
                &[Layout::Contig, Layout::Padded]
            } else if td.is_quantized() {
                &[Layout::Contig, Layout::Padded, Layout::Permuted]
            } else {
                &LAYOUTS
            };
            for &l in layouts {
                if td.is_quantized() && l == Layout::Transposed {
                    continue;
                }
                seed += 1;
                let shape = [ne0, 3, 2, 1];
                // Quantizing: the reference is quantized row by row with the same codec, so
                // results match to f32 noise.
                check(&format!("cast {ts} -> {td} {l:?}"), seed, None, |h| {
                    let a = h.input(ts, shape, l);
                    if ts == td {
                        h.ctx.cont(a).unwrap()
                    } else {
                        h.ctx.cast(a, td).unwrap()
                    }
                });
            }
        }
    }
    // f16 with a contiguous dim 1 (attention's transposed V cache) into f32: the blocked
    // path of 32 dst rows per block, here with full and partial blocks, rows split across
    // threads mid-block, and odd sizes (1 and 3 threads; exact: f16 -> f32 is lossless).
    for shape in [[37, 71, 3, 1], [5, 33, 2, 2], [130, 32, 1, 1]] {
        seed += 1;
        check(
            &format!("cast f16 -> f32 transposed {shape:?}"),
            seed,
            None,
            |h| {
                let a = h.input(DType::F16, shape, Layout::Transposed);
                h.ctx.cast(a, DType::F32).unwrap()
            },
        );
    }
    for t in [DType::F32, DType::F16, DType::I32] {
        for l in LAYOUTS {
            seed += 1;
            let fill = if t == DType::I32 {
                Fill::Int(-5, 5)
            } else {
                Fill::Uniform(-1.0, 1.0)
            };
            check(&format!("dup {t} {l:?}"), seed, None, |h| {
                let a = h.input_fill(t, SHAPE, l, fill.clone());
                h.ctx.dup(a).unwrap()
            });
        }
    }
}

/// cpy into a view of a larger tensor (KV-cache style), contiguous and transposed destinations,
/// and between different shapes with equal element counts.
#[test]
fn cpy_into_views() {
    let mut seed = 9000;
    for td in [DType::F32, DType::F16, DType::BF16, DType::Q8_0] {
        for ts in [DType::F32, DType::F16] {
            for (case, sl) in [
                ("k rows", Layout::Contig),
                ("k rows", Layout::Transposed),
                ("v transposed", Layout::Contig),
                ("v transposed", Layout::Permuted),
                ("reshape", Layout::Contig),
                ("reshape", Layout::Transposed),
            ] {
                if td.is_quantized() && case == "v transposed" {
                    continue;
                }
                seed += 1;
                let (d_ne0, n_ctx, n_new) = (32usize, 11usize, 4usize);
                let mut h = Harness::new(seed);
                let cache = h.leaf_fill(td, &[d_ne0, n_ctx], Fill::Uniform(-1.0, 1.0));
                let tsz = td.type_size();
                let row = td.row_size(d_ne0).unwrap();
                let (src_ne, view) = match case {
                    "k rows" => {
                        let v = h.ctx.view(cache, &[d_ne0, n_new], &[row], 5 * row).unwrap();
                        ([d_ne0, n_new, 1, 1], v)
                    }
                    "v transposed" => {
                        // Columns 3..3+n_new of rows 0..8, transposed: [8, n_new] with
                        // nb0 = row size (a V-cache style strided destination).
                        let v0 = h.ctx.view(cache, &[n_new, 8], &[row], 3 * tsz).unwrap();
                        let v = h.ctx.transpose(v0).unwrap();
                        ([8, n_new, 1, 1], v)
                    }
                    _ => {
                        let v = h.ctx.view(cache, &[d_ne0, 2], &[row], 7 * row).unwrap();
                        ([16, 4, 1, 1], v)
                    }
                };
                let a = h.input(ts, src_ne, sl);
                let out = h.ctx.cpy(a, view).unwrap();
                h.finish();
                let a_vals = h.dense(a).data;
                let before = h.ctx.get_f32(cache).unwrap();
                let before_bytes = h.ctx.get_bytes(cache).unwrap();
                // Expected: the cache with the view's elements replaced, in logical order.
                let vt = h.ctx.tensor(view).clone();
                let mut want = before.clone();
                let mut positions = Vec::new();
                for i1 in 0..vt.ne[1] {
                    for i0 in 0..vt.ne[0] {
                        let byte = vt.view_offs + i0 / td.block_size() * vt.nb[0] + i1 * vt.nb[1];
                        positions.push(byte / tsz * td.block_size() + i0 % td.block_size());
                    }
                }
                let rounded = if td.is_quantized() {
                    support_basic::round_to(td, &a_vals, vt.ne[0])
                } else {
                    support_basic::round_to(td, &a_vals, 1)
                };
                for (k, &p) in positions.iter().enumerate() {
                    want[p] = rounded[k];
                }
                for nth in [1, 3] {
                    h.ctx.set_bytes(cache, &before_bytes).unwrap();
                    h.compute(out, nth).unwrap();
                    let got = h.ctx.get_f32(cache).unwrap();
                    let tol = support_basic::tol_for(td);
                    support_basic::assert_close(
                        &format!("cpy {ts} -> {td} {case} {sl:?} [{nth}]"),
                        &got,
                        &want,
                        tol,
                    );
                }
            }
        }
    }
}

#[test]
fn build_time_shape_errors() {
    let mut h = Harness::new(0);
    let c = &mut h.ctx;
    let a = c.new_tensor(DType::F32, &[7, 5, 3]).unwrap();
    let b = c.new_tensor(DType::F32, &[6, 5, 3]).unwrap();
    let i = c.new_tensor(DType::I32, &[7, 5, 3]).unwrap();
    assert!(matches!(c.add(a, b), Err(Error::Shape(_))));
    assert!(matches!(c.mul(a, b), Err(Error::Shape(_))));
    assert!(matches!(c.add(i, a), Err(Error::UnsupportedType { .. })));
    assert!(matches!(c.repeat(b, a), Err(Error::Shape(_))));
    assert!(matches!(c.concat(a, b, 1), Err(Error::Shape(_))));
    assert!(c.concat(a, b, 0).is_ok());
    assert!(matches!(c.concat(a, b, 4), Err(Error::Shape(_))));
    assert!(matches!(
        c.concat(a, i, 0),
        Err(Error::UnsupportedType { .. })
    ));
    // soft_max masks
    let m_bad0 = c.new_tensor(DType::F32, &[6, 5]).unwrap();
    let m_short = c.new_tensor(DType::F32, &[7, 4]).unwrap();
    let m_i32 = c.new_tensor(DType::I32, &[7, 5]).unwrap();
    let m_ok = c.new_tensor(DType::F16, &[7, 8]).unwrap();
    assert!(matches!(
        c.soft_max_ext(a, Some(m_bad0), 1.0, 0.0),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        c.soft_max_ext(a, Some(m_short), 1.0, 0.0),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        c.soft_max_ext(a, Some(m_i32), 1.0, 0.0),
        Err(Error::UnsupportedType { .. })
    ));
    assert!(c.soft_max_ext(a, Some(m_ok), 1.0, 0.0).is_ok());
    assert!(c.soft_max_ext(a, None, 1.0, 8.0).is_err());
    // rope
    let x = c.new_tensor(DType::F32, &[16, 4, 6]).unwrap();
    let pos = c.new_tensor(DType::I32, &[6]).unwrap();
    let pos_bad = c.new_tensor(DType::I32, &[5]).unwrap();
    let pos_f = c.new_tensor(DType::F32, &[6]).unwrap();
    let p = RopeParams::new(16, RopeMode::Neox, 10000.0);
    assert!(c.rope_ext(x, pos, None, p).is_ok());
    assert!(matches!(
        c.rope_ext(x, pos_bad, None, p),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        c.rope_ext(x, pos_f, None, p),
        Err(Error::UnsupportedType { .. })
    ));
    for n_dims in [0, 7, 18] {
        let p = RopeParams::new(n_dims, RopeMode::Normal, 10000.0);
        assert!(matches!(c.rope_ext(x, pos, None, p), Err(Error::Shape(_))));
    }
    let ff_short = c.new_tensor(DType::F32, &[7]).unwrap();
    assert!(matches!(
        c.rope_ext(x, pos, Some(ff_short), p),
        Err(Error::Shape(_))
    ));
    // get_rows
    let w = c.new_tensor(DType::Q4_0, &[64, 10]).unwrap();
    let r = c.new_tensor(DType::I32, &[3]).unwrap();
    let r_f = c.new_tensor(DType::F32, &[3]).unwrap();
    let r_bad = c.new_tensor(DType::I32, &[3, 2]).unwrap();
    let g = c.get_rows(w, r).unwrap();
    assert_eq!(c.tensor(g).ne, [64, 3, 1, 1]);
    assert!(matches!(
        c.get_rows(w, r_f),
        Err(Error::UnsupportedType { .. })
    ));
    assert!(matches!(c.get_rows(w, r_bad), Err(Error::Shape(_))));
    // shapes of reductions
    let s = c.sum(a).unwrap();
    assert_eq!(c.tensor(s).ne, [1, 1, 1, 1]);
    let s = c.sum_rows(a).unwrap();
    assert_eq!(c.tensor(s).ne, [1, 5, 3, 1]);
    let s = c.mean(a).unwrap();
    assert_eq!(c.tensor(s).ne, [1, 5, 3, 1]);
}

#[test]
fn unsupported_type_combinations_fail_at_compute() {
    type Build = Box<dyn Fn(&mut Harness) -> ggweb::TensorId>;
    let cases: Vec<(&str, Build)> = vec![
        (
            "norm f16",
            Box::new(|h| {
                let a = h.input(DType::F16, [8, 3, 1, 1], Layout::Contig);
                h.ctx.norm(a, 1e-5).unwrap()
            }),
        ),
        (
            "add q8_0",
            Box::new(|h| {
                let a = h.input(DType::Q8_0, [32, 3, 1, 1], Layout::Contig);
                let b = h.input(DType::F32, [32, 3, 1, 1], Layout::Contig);
                h.ctx.add(a, b).unwrap()
            }),
        ),
        (
            "gelu q4_0",
            Box::new(|h| {
                let a = h.input(DType::Q4_0, [32, 3, 1, 1], Layout::Contig);
                h.ctx.gelu(a).unwrap()
            }),
        ),
        (
            "soft_max f16",
            Box::new(|h| {
                let a = h.input(DType::F16, [8, 3, 1, 1], Layout::Contig);
                h.ctx.soft_max(a).unwrap()
            }),
        ),
        (
            "cast i32 -> f32",
            Box::new(|h| {
                let a = h.leaf_fill(DType::I32, &[8, 3], Fill::Int(0, 9));
                h.ctx.cast(a, DType::F32).unwrap()
            }),
        ),
    ];
    for (label, build) in cases {
        let mut h = Harness::new(5);
        let out = build(&mut h);
        h.finish();
        match h.compute(out, 2) {
            Err(Error::UnsupportedOp(msg)) => assert!(!msg.is_empty(), "{label}"),
            other => panic!("{label}: expected UnsupportedOp, got {other:?}"),
        }
    }
}

/// In-place execution (the graph allocator may give an elementwise result its src0's memory):
/// the kernels must read each row before writing it.
#[test]
fn in_place_results() {
    let mut seed = 10_000;
    for t in [DType::F32, DType::F16] {
        for which in [
            "add", "mul", "scale", "silu", "rms_norm", "soft_max", "rope",
        ] {
            if t != DType::F32 && matches!(which, "rms_norm" | "soft_max") {
                continue;
            }
            seed += 1;
            let mut h = Harness::new(seed);
            let shape = [16, 5, 3, 1];
            let a = h.input(t, shape, Layout::Contig);
            let b = h.input(DType::F32, [16, 1, 3, 1], Layout::Contig);
            let pos = h.leaf_fill(DType::I32, &[3], Fill::Int(0, 50));
            let c = &mut h.ctx;
            let out = match which {
                "add" => c.add(a, b),
                "mul" => c.mul(a, b),
                "scale" => c.scale_bias(a, 2.0, -1.0),
                "silu" => c.silu(a),
                "rms_norm" => c.rms_norm(a, 1e-6),
                "soft_max" => c.soft_max_ext(a, None, 0.5, 0.0),
                _ => c.rope_ext(a, pos, None, RopeParams::new(16, RopeMode::Neox, 10000.0)),
            }
            .unwrap();
            h.finish();
            let want = h.reference(out);
            let want = support_basic::round_to(t, &want.data, shape[0]);
            let data = h.ctx.tensor(a).data.clone().unwrap();
            h.ctx.set_data(out, data);
            h.compute(out, 3).unwrap();
            let got = h.ctx.get_f32(out).unwrap();
            let tol = if which == "rope" && t == DType::F32 {
                Tol {
                    abs: 1e-4,
                    rel: 1e-4,
                }
            } else {
                support_basic::tol_for(t)
            };
            support_basic::assert_close(&format!("in-place {which} {t}"), &got, &want, tol);
        }
    }
}

/// A quantized tensor copied into another shape of the same type keeps its bytes.
#[test]
fn quantized_reshaping_copy_keeps_bytes() {
    for t in [DType::Q8_0, DType::Q4_K] {
        let ne0 = t.block_size() * 2;
        let mut h = Harness::new(11);
        let a = h.leaf_fill(t, &[ne0, 3], Fill::Uniform(-1.0, 1.0));
        let b = h.ctx.new_tensor(t, &[ne0 / 2, 6]).unwrap();
        let out = h.ctx.cpy(a, b).unwrap();
        h.finish();
        h.compute(out, 3).unwrap();
        assert_eq!(
            h.ctx.get_bytes(a).unwrap(),
            h.ctx.get_bytes(b).unwrap(),
            "{t}"
        );
    }
}

#[test]
fn flash_attn_ext() {
    use support_basic::Layout;
    let mut seed = 9000;
    // (dk, dv, n_kv, n_tokens, n_head, n_head_kv): a generated token over a long cache (split
    // into kv chunks on 3 threads), a short prompt, one kv head per query head, odd sizes.
    let shapes = [
        (20, 12, 150, 1, 6, 2),
        (20, 12, 37, 3, 6, 3),
        (9, 7, 70, 2, 2, 2),
        (16, 16, 5, 4, 4, 1),
        // More query heads per kv head than are done together (16 → 2 blocks of 8; 9 → 3 × 3).
        (8, 8, 70, 2, 16, 1),
        (8, 8, 33, 1, 9, 1),
        // A prompt in token blocks (8 heads a group: 4 tokens a block, the last one partial), and
        // a two-token block whose kv range is split into chunks on 3 threads.
        (8, 8, 70, 13, 16, 1),
        (20, 12, 150, 2, 6, 2),
    ];
    for (dk, dv, n_kv, n_tok, n_head, n_head_kv) in shapes {
        for kv_type in [DType::F16, DType::F32] {
            for (ql, kl) in [
                (Layout::Contig, Layout::Contig),
                (Layout::Permuted, Layout::Padded),
            ] {
                for (max_bias, softcap) in [(0.0, 0.0), (8.0, 0.0), (0.0, 4.0)] {
                    seed += 1;
                    let label = format!(
                        "flash_attn_ext dk {dk} dv {dv} kv {n_kv} tokens {n_tok} heads {n_head}/{n_head_kv} \
                         {kv_type} {ql:?}/{kl:?} bias {max_bias} softcap {softcap}"
                    );
                    // q values exact in f16, so the kernel's f16 copy of q (the K dot's type) is
                    // exact and the tolerance only covers f32 sums and exp_approx.
                    let tol = Tol {
                        abs: 2e-5,
                        rel: 2e-4,
                    };
                    check(&label, seed, Some(tol), |h| {
                        let nq = dk * n_tok * n_head;
                        let qv: Vec<f32> = (0..nq)
                            .map(|_| half::f16::from_f32(h.rng_f32(-1.0, 1.0)).to_f32())
                            .collect();
                        let q =
                            h.input_fill(DType::F32, [dk, n_tok, n_head, 1], ql, Fill::Values(qv));
                        let k = h.input_fill(
                            kv_type,
                            [dk, n_kv, n_head_kv, 1],
                            kl,
                            Fill::Uniform(-1.0, 1.0),
                        );
                        let v = h.input_fill(
                            kv_type,
                            [dv, n_kv, n_head_kv, 1],
                            kl,
                            Fill::Uniform(-2.0, 2.0),
                        );
                        // A causal-looking mask padded to more rows than tokens, with the last
                        // token's row fully masked when there are several (its output is zeros).
                        let rows = n_tok + 1;
                        let vals: Vec<f32> = (0..n_kv * rows)
                            .map(|i| {
                                let (j, t) = (i % n_kv, i / n_kv);
                                let masked = j > n_kv - n_tok + t || (n_tok > 1 && t == n_tok - 1);
                                if masked {
                                    f32::NEG_INFINITY
                                } else {
                                    h.rng_f32(-1.0, 0.0)
                                }
                            })
                            .collect();
                        let m = h.leaf_fill(DType::F32, &[n_kv, rows], Fill::Values(vals));
                        let scale = 1.0 / (dk as f32).sqrt() * 3.0;
                        h.ctx
                            .flash_attn_ext(q, k, v, Some(m), scale, max_bias, softcap)
                            .unwrap()
                    });
                }
            }
        }
        // Without a mask, f16 mask.
        seed += 1;
        check(
            &format!("flash_attn_ext no mask dk {dk} kv {n_kv}"),
            seed,
            Some(Tol {
                abs: 2e-5,
                rel: 2e-4,
            }),
            |h| {
                let q = h.input_fill(
                    DType::F32,
                    [dk, n_tok, n_head, 1],
                    Layout::Contig,
                    Fill::Uniform(-1.0, 1.0),
                );
                let k = h.input(DType::F32, [dk, n_kv, n_head_kv, 1], Layout::Contig);
                let v = h.input(DType::F32, [dv, n_kv, n_head_kv, 1], Layout::Contig);
                h.ctx.flash_attn_ext(q, k, v, None, 0.5, 0.0, 0.0).unwrap()
            },
        );
        seed += 1;
        check(
            &format!("flash_attn_ext f16 mask dk {dk} kv {n_kv}"),
            seed,
            Some(Tol {
                abs: 2e-5,
                rel: 2e-4,
            }),
            |h| {
                let q = h.input_fill(
                    DType::F32,
                    [dk, n_tok, n_head, 1],
                    Layout::Contig,
                    Fill::Uniform(-1.0, 1.0),
                );
                let k = h.input(DType::F32, [dk, n_kv, n_head_kv, 1], Layout::Contig);
                let v = h.input(DType::F32, [dv, n_kv, n_head_kv, 1], Layout::Contig);
                let m = h.leaf_fill(DType::F16, &[n_kv, n_tok], Fill::Uniform(-3.0, 0.0));
                h.ctx
                    .flash_attn_ext(q, k, v, Some(m), 0.5, 0.0, 0.0)
                    .unwrap()
            },
        );
    }
}

/// The fused attention's results do not depend on the thread count: a generated token's kv
/// positions are split into chunks by the shapes alone, so 1 … 7 threads give the same bits
/// (as llama.cpp's CPU attention; before, 1 thread ran one chunk and 2 threads two, and a
/// SmolLM2 generation's logits moved by up to 0.8 between 1 and 2 threads).
#[test]
fn flash_attn_ext_same_bits_on_all_thread_counts() {
    use support_basic::Layout;
    // (dk, dv, n_kv, n_tokens, n_head, n_head_kv): SmolLM2's, Qwen2.5's and gemma3's generated
    // token over caches of 130–1000 positions (an odd last chunk), and a 3-token step.
    let shapes = [
        (64, 64, 300, 1, 9, 3),
        (64, 64, 1000, 1, 14, 2),
        (256, 256, 517, 1, 4, 1),
        (64, 64, 130, 3, 9, 3),
    ];
    for (i, (dk, dv, n_kv, n_tok, n_head, n_head_kv)) in shapes.into_iter().enumerate() {
        let mut h = Harness::new(9500 + i as u64);
        let q = h.input_fill(
            DType::F32,
            [dk, n_tok, n_head, 1],
            Layout::Contig,
            Fill::Uniform(-1.0, 1.0),
        );
        let k = h.input_fill(
            DType::F16,
            [dk, n_kv, n_head_kv, 1],
            Layout::Contig,
            Fill::Uniform(-1.0, 1.0),
        );
        let v = h.input_fill(
            DType::F16,
            [dv, n_kv, n_head_kv, 1],
            Layout::Contig,
            Fill::Uniform(-2.0, 2.0),
        );
        // Causal: token t sees the positions up to n_kv − n_tok + t.
        let vals: Vec<f32> = (0..n_kv * n_tok)
            .map(|i| {
                let (j, t) = (i % n_kv, i / n_kv);
                if j > n_kv - n_tok + t {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let m = h.leaf_fill(DType::F16, &[n_kv, n_tok], Fill::Values(vals));
        let scale = 1.0 / (dk as f32).sqrt();
        let out = h
            .ctx
            .flash_attn_ext(q, k, v, Some(m), scale, 0.0, 0.0)
            .unwrap();
        h.finish();
        let label =
            format!("flash_attn_ext dk {dk} kv {n_kv} tokens {n_tok} heads {n_head}/{n_head_kv}");
        let want = h.reference(out);
        let nbytes = h.ctx.tensor(out).nbytes();
        let mut first: Option<Vec<u8>> = None;
        for nth in [1, 2, 3, 4, 7] {
            h.ctx.set_bytes(out, &vec![0xFF; nbytes]).expect("poison");
            h.compute(out, nth)
                .unwrap_or_else(|e| panic!("{label}: {nth} threads: {e}"));
            let got = h.ctx.get_bytes(out).expect("get output");
            match &first {
                None => {
                    let f = h.ctx.get_f32(out).expect("get output");
                    support_basic::assert_close(
                        &label,
                        &f,
                        &want.data,
                        Tol {
                            abs: 2e-3,
                            rel: 2e-3,
                        },
                    );
                    first = Some(got);
                }
                Some(f) => assert!(
                    *f == got,
                    "{label}: {nth} threads differ from 1 thread's bits"
                ),
            }
        }
    }
}

#[test]
fn flash_attn_ext_shape_errors() {
    let mut c = ggweb::Context::new();
    let q = c.new_tensor(DType::F32, &[8, 2, 6]).unwrap();
    let k = c.new_tensor(DType::F16, &[8, 10, 4]).unwrap(); // 6 heads over 4 kv heads
    let v = c.new_tensor(DType::F16, &[8, 10, 4]).unwrap();
    assert!(matches!(
        c.flash_attn_ext(q, k, v, None, 1.0, 0.0, 0.0),
        Err(Error::Shape(_))
    ));
    let k = c.new_tensor(DType::F16, &[8, 10, 3]).unwrap();
    let v_short = c.new_tensor(DType::F16, &[8, 9, 3]).unwrap();
    assert!(matches!(
        c.flash_attn_ext(q, k, v_short, None, 1.0, 0.0, 0.0),
        Err(Error::Shape(_))
    ));
    let v = c.new_tensor(DType::F16, &[8, 10, 3]).unwrap();
    let m_short = c.new_tensor(DType::F32, &[10, 1]).unwrap();
    assert!(matches!(
        c.flash_attn_ext(q, k, v, Some(m_short), 1.0, 0.0, 0.0),
        Err(Error::Shape(_))
    ));
    let m_i32 = c.new_tensor(DType::I32, &[10, 2]).unwrap();
    assert!(c
        .flash_attn_ext(q, k, v, Some(m_i32), 1.0, 0.0, 0.0)
        .is_err());
    let q16 = c.new_tensor(DType::F16, &[8, 2, 6]).unwrap();
    assert!(c.flash_attn_ext(q16, k, v, None, 1.0, 0.0, 0.0).is_err());
    assert!(c.flash_attn_ext(q, k, v, None, f32::NAN, 0.0, 0.0).is_err());
    assert!(c.flash_attn_ext(q, k, v, None, 1.0, 1.0, 0.0).is_err()); // ALiBi without a mask
    let m = c.new_tensor(DType::F32, &[10, 2]).unwrap();
    let out = c.flash_attn_ext(q, k, v, Some(m), 1.0, 0.0, 0.0).unwrap();
    assert_eq!(c.tensor(out).ne, [8, 6, 2, 1]);
}
