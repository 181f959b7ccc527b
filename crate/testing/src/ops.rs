//! The WebGPU op cases, written once and driven by both harnesses: native-tests/tests/webgpu.rs
//! (lavapipe, blocking on the async calls) and wasm-tests/tests/webgpu.rs (headless Chromium's
//! SwiftShader, awaiting them). Each case builds a graph on seeded random data of odd sizes; the
//! harness runs it on the CPU backend and on each WebGPU device and compares with ggml's
//! normalized MSE: 1e-7 for f32 ops, 5e-4 for f16/quantized mul_mat (the CPU rounds src1 to f16
//! or q8 there).

use ggweb::tensor::{PoolOp, RopeMode, RopeParams, UnaryOp};
use ggweb::{Context, DType, Result, TensorId};

use crate::Rng;

/// NMSE tolerance of f32 ops.
pub const F32_TOL: f64 = 1e-7;

/// `max_storage_buffer_binding_size` the [`Group::Split`] cases are run under (the harness opens
/// devices with it): tensors of a few hundred KiB then need several bindings.
pub const SMALL_BINDING: u64 = 64 << 10;

/// The weight types with WebGPU mul_mat / get_rows kernels.
pub const WEIGHT_TYPES: [DType; 10] = ggweb::backend::WEBGPU_WEIGHT_TYPES;

/// NMSE tolerance of mul_mat with weights of type `t`.
pub fn mm_tol(t: DType) -> f64 {
    match t {
        DType::F32 => F32_TOL,
        // The CPU rounds src1 to f16 for f16 weights, to q8 for quantized ones.
        _ => 5e-4,
    }
}

/// Data for one input tensor.
pub enum Data {
    F(Vec<f32>),
    I(Vec<i32>),
}

/// A built test graph: its inputs with data and the tensor to compare.
pub struct Case {
    pub inputs: Vec<(TensorId, Data)>,
    pub out: TensorId,
}

/// Builds a case's graph in a fresh context.
pub type Build = Box<dyn Fn(&mut Context) -> Result<Case>>;

/// One entry of the table.
pub struct OpCase {
    pub name: String,
    pub tol: f64,
    pub build: Build,
}

/// The table's groups (one test per group in each harness).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// add/sub/mul/div with broadcasting, a permuted src0.
    Binary,
    /// Every unary op, scale (+bias), sqr/sqrt/log, repeat.
    Unary,
    /// cpy/cont/cast f32<->f16 of transposed views and into views, concat on every dim.
    CpyConcat,
    /// norm/rms_norm, soft_max with f32/f16 mask, scale and ALiBi, row reductions, argmax.
    NormSoftmax,
    /// rope normal/neox, freq factors, YaRN.
    Rope,
    /// get_rows of every weight type.
    GetRows,
    /// mul_mat of every weight type, n = 1 and n > 1, batched with broadcast.
    MulMat,
    /// im2col 1-D/2-D, conv_2d, pool_2d max/avg.
    ConvPool,
    /// Tensors over [`SMALL_BINDING`]: weights split by rows, dst/src1 split by columns
    /// (tokens), both at once; run on devices opened with that binding limit.
    Split,
    /// Training: cross_entropy_loss, the `*_back` ops of the backward pass, the AdamW / SGD
    /// steps.
    Train,
}

/// Every group, in order.
pub const GROUPS: [Group; 10] = [
    Group::Binary,
    Group::Unary,
    Group::CpyConcat,
    Group::NormSoftmax,
    Group::Rope,
    Group::GetRows,
    Group::MulMat,
    Group::ConvPool,
    Group::Split,
    Group::Train,
];

/// Random values in [-1, 1) for each of `ids`.
pub fn random_inputs(ctx: &Context, ids: &[TensorId], rng: &mut Rng) -> Vec<(TensorId, Data)> {
    ids.iter()
        .map(|&id| (id, Data::F(rng.vec(ctx.tensor(id).nelements(), -1.0, 1.0))))
        .collect()
}

fn push(
    v: &mut Vec<OpCase>,
    name: String,
    tol: f64,
    build: impl Fn(&mut Context) -> Result<Case> + 'static,
) {
    v.push(OpCase {
        name,
        tol,
        build: Box::new(build),
    });
}

/// The cases of `group`.
pub fn cases(group: Group) -> Vec<OpCase> {
    let mut v = Vec::new();
    match group {
        Group::Binary => binary(&mut v),
        Group::Unary => unary(&mut v),
        Group::CpyConcat => cpy_concat(&mut v),
        Group::NormSoftmax => norm_softmax(&mut v),
        Group::Rope => rope(&mut v),
        Group::GetRows => get_rows(&mut v),
        Group::MulMat => mul_mat(&mut v),
        Group::ConvPool => conv_pool(&mut v),
        Group::Split => split(&mut v),
        Group::Train => train(&mut v),
    }
    v
}

fn binary(v: &mut Vec<OpCase>) {
    for (opi, name) in ["add", "sub", "mul", "div"].iter().enumerate() {
        for bshape in [[13, 7, 3, 2], [13, 1, 3, 1], [1, 7, 1, 2]] {
            push(v, format!("{name} {bshape:?}"), F32_TOL, move |ctx| {
                let a = ctx.new_tensor(DType::F32, &[13, 7, 3, 2])?;
                let b = ctx.new_tensor(DType::F32, &bshape)?;
                let mut rng = Rng::new(1 + opi as u64);
                let mut inputs = random_inputs(ctx, &[a], &mut rng);
                // Keep divisors away from 0.
                inputs.push((b, Data::F(rng.vec(ctx.tensor(b).nelements(), 0.5, 2.0))));
                let out = match opi {
                    0 => ctx.add(a, b)?,
                    1 => ctx.sub(a, b)?,
                    2 => ctx.mul(a, b)?,
                    _ => ctx.div(a, b)?,
                };
                Ok(Case { inputs, out })
            });
        }
    }
    // A permuted (non-contiguous) src0.
    push(v, "add permuted".into(), F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[7, 13, 3])?;
        let b = ctx.new_tensor(DType::F32, &[13, 7, 3])?;
        let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(9));
        let ap = ctx.permute(a, [1, 0, 2, 3])?;
        let out = ctx.add(ap, b)?;
        Ok(Case { inputs, out })
    });
}

fn unary(v: &mut Vec<OpCase>) {
    for op in UnaryOp::ALL {
        push(v, format!("unary {op:?}"), F32_TOL, move |ctx| {
            let a = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
            let inputs = vec![(a, Data::F(Rng::new(3).vec(37 * 15, -4.0, 4.0)))];
            let out = ctx.unary(a, op)?;
            Ok(Case { inputs, out })
        });
    }
    push(v, "scale_bias".into(), F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
        let inputs = random_inputs(ctx, &[a], &mut Rng::new(4));
        let out = ctx.scale_bias(a, 0.37, -1.5)?;
        Ok(Case { inputs, out })
    });
    push(v, "scale".into(), F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
        let inputs = random_inputs(ctx, &[a], &mut Rng::new(4));
        let out = ctx.scale(a, -2.25)?;
        Ok(Case { inputs, out })
    });
    for k in 0..3 {
        push(v, format!("sqr/sqrt/log {k}"), F32_TOL, move |ctx| {
            let a = ctx.new_tensor(DType::F32, &[29, 3, 2])?;
            let inputs = vec![(a, Data::F(Rng::new(5).vec(29 * 6, 0.1, 3.0)))];
            let out = match k {
                0 => ctx.sqr(a)?,
                1 => ctx.sqrt(a)?,
                _ => ctx.log(a)?,
            };
            Ok(Case { inputs, out })
        });
    }
    push(v, "repeat".into(), F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[5, 1, 3])?;
        let b = ctx.new_tensor(DType::F32, &[10, 4, 3, 2])?;
        let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(6));
        let out = ctx.repeat(a, b)?;
        Ok(Case { inputs, out })
    });
}

fn cpy_concat(v: &mut Vec<OpCase>) {
    for (from, to) in [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
    ] {
        push(
            v,
            format!("cast {from}->{to} of a transposed view"),
            F32_TOL,
            move |ctx| {
                let a = ctx.new_tensor(from, &[11, 7, 3])?;
                let inputs = random_inputs(ctx, &[a], &mut Rng::new(7));
                let t = ctx.transpose(a)?;
                let c = ctx.cast(t, to)?;
                // Compare in f32 (both sides rounded to `to` the same way).
                let out = ctx.cast(c, DType::F32)?;
                Ok(Case { inputs, out })
            },
        );
        push(
            v,
            format!("cpy {from}->{to} into a view"),
            F32_TOL,
            move |ctx| {
                let a = ctx.new_tensor(from, &[9, 5])?;
                let b = ctx.new_tensor(to, &[9, 8])?;
                let mut inputs = random_inputs(ctx, &[a], &mut Rng::new(8));
                inputs.push((b, Data::F(vec![0.0; 72])));
                let nb1 = ctx.tensor(b).nb[1];
                let bv = ctx.view(b, &[9, 5], &[nb1], nb1 * 2)?;
                let c = ctx.cpy(a, bv)?;
                let out = ctx.cast(c, DType::F32)?;
                Ok(Case { inputs, out })
            },
        );
    }
    // A head-major KV cache's store (`models::llama`): rows of the destination contiguous, the
    // heads n_ctx rows apart, two tokens at position 4 (on WebGPU's f32 path, f16 written two
    // halves a word from strided rows).
    for from in [DType::F32, DType::F16] {
        push(
            v,
            format!("cpy {from}->f16 into head-major cache rows"),
            F32_TOL,
            move |ctx| {
                let a = ctx.new_tensor(from, &[8, 3, 2])?;
                let cache = ctx.new_tensor(DType::F16, &[8, 10, 3])?;
                let mut rng = Rng::new(13);
                let mut inputs = random_inputs(ctx, &[a], &mut rng);
                inputs.push((cache, Data::F(rng.vec(240, -1.0, 1.0))));
                let nb = ctx.tensor(cache).nb;
                let dst = ctx.view(cache, &[8, 3, 2], &[nb[2], nb[1]], 4 * nb[1])?;
                let c = ctx.cpy(a, dst)?;
                let out = ctx.cast(c, DType::F32)?;
                Ok(Case { inputs, out })
            },
        );
    }
    push(v, "cont of a permuted f32".into(), F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[7, 5, 3, 2])?;
        let inputs = random_inputs(ctx, &[a], &mut Rng::new(8));
        let p = ctx.permute(a, [2, 0, 3, 1])?;
        let out = ctx.cont(p)?;
        Ok(Case { inputs, out })
    });
    for dim in 0..4 {
        push(v, format!("concat dim {dim}"), F32_TOL, move |ctx| {
            let mut sa = [5, 3, 2, 2];
            sa[dim] = 4;
            let a = ctx.new_tensor(DType::F32, &sa)?;
            let b = ctx.new_tensor(DType::F32, &[5, 3, 2, 2])?;
            let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(10));
            let out = ctx.concat(a, b, dim)?;
            Ok(Case { inputs, out })
        });
    }
}

fn norm_softmax(v: &mut Vec<OpCase>) {
    for rms in [false, true] {
        push(v, format!("norm rms={rms}"), F32_TOL, move |ctx| {
            let a = ctx.new_tensor(DType::F32, &[301, 5, 3])?;
            let inputs = random_inputs(ctx, &[a], &mut Rng::new(11));
            let out = if rms {
                ctx.rms_norm(a, 1e-5)?
            } else {
                ctx.norm(a, 1e-5)?
            };
            Ok(Case { inputs, out })
        });
    }
    for (mask, max_bias) in [
        (None, 0.0),
        (Some(DType::F32), 0.0),
        (Some(DType::F16), 0.0),
        (Some(DType::F32), 8.0),
    ] {
        push(
            v,
            format!("soft_max mask {mask:?} max_bias {max_bias}"),
            F32_TOL,
            move |ctx| {
                let a = ctx.new_tensor(DType::F32, &[37, 9, 6])?;
                let mut rng = Rng::new(12);
                let mut inputs = random_inputs(ctx, &[a], &mut rng);
                let m = match mask {
                    Some(mt) => {
                        let m = ctx.new_tensor(mt, &[37, 11])?;
                        let mut v = rng.vec(37 * 11, -1.0, 1.0);
                        for (i, x) in v.iter_mut().enumerate() {
                            if i % 37 > 30 {
                                *x = f32::NEG_INFINITY;
                            }
                        }
                        inputs.push((m, Data::F(v)));
                        Some(m)
                    }
                    None => None,
                };
                let out = ctx.soft_max_ext(a, m, 0.7, max_bias)?;
                Ok(Case { inputs, out })
            },
        );
    }
    for k in 0..4 {
        push(v, format!("reduction {k}"), F32_TOL, move |ctx| {
            let a = ctx.new_tensor(DType::F32, &[301, 7])?;
            let inputs = random_inputs(ctx, &[a], &mut Rng::new(13));
            let out = match k {
                0 => ctx.sum_rows(a)?,
                1 => ctx.mean(a)?,
                2 => ctx.sum(a)?,
                _ => ctx.argmax(a)?,
            };
            Ok(Case { inputs, out })
        });
    }
}

fn rope(v: &mut Vec<OpCase>) {
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (n_dims, ff, ext) in [(64, false, 0.0), (48, true, 0.0), (64, false, 1.0)] {
            push(
                v,
                format!("rope {mode:?} n_dims {n_dims} ff {ff} ext {ext}"),
                F32_TOL,
                move |ctx| {
                    let a = ctx.new_tensor(DType::F32, &[64, 5, 7])?;
                    let pos = ctx.new_tensor(DType::I32, &[7])?;
                    let mut rng = Rng::new(14);
                    let mut inputs = random_inputs(ctx, &[a], &mut rng);
                    inputs.push((pos, Data::I((0..7).map(|_| rng.idx(3000) as i32).collect())));
                    let f = if ff {
                        let f = ctx.new_tensor(DType::F32, &[n_dims / 2])?;
                        inputs.push((f, Data::F(rng.vec(n_dims / 2, 1.0, 4.0))));
                        Some(f)
                    } else {
                        None
                    };
                    let mut p = RopeParams::new(n_dims, mode, 10000.0);
                    if ext != 0.0 {
                        p.ext_factor = ext;
                        p.freq_scale = 0.25;
                        p.n_ctx_orig = 4096;
                    }
                    let out = ctx.rope_ext(a, pos, f, p)?;
                    Ok(Case { inputs, out })
                },
            );
        }
    }
}

fn get_rows(v: &mut Vec<OpCase>) {
    for t in WEIGHT_TYPES {
        push(v, format!("get_rows {t}"), F32_TOL, move |ctx| {
            let a = ctx.new_tensor(t, &[512, 9, 2])?;
            let r = ctx.new_tensor(DType::I32, &[5, 2])?;
            let mut rng = Rng::new(15);
            let mut inputs = random_inputs(ctx, &[a], &mut rng);
            inputs.push((r, Data::I((0..10).map(|_| rng.idx(9) as i32).collect())));
            let out = ctx.get_rows(a, r)?;
            Ok(Case { inputs, out })
        });
    }
}

fn mul_mat(v: &mut Vec<OpCase>) {
    for t in WEIGHT_TYPES {
        for n in [1usize, 13, 67] {
            push(
                v,
                format!("mul_mat {t} m=19 n={n} k=512"),
                mm_tol(t),
                move |ctx| {
                    let a = ctx.new_tensor(t, &[512, 19])?;
                    let b = ctx.new_tensor(DType::F32, &[512, n])?;
                    let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(16));
                    let out = ctx.mul_mat(a, b)?;
                    Ok(Case { inputs, out })
                },
            );
        }
    }
    // Batched with broadcast and a permuted src1 (attention-like).
    for n in [1usize, 7] {
        push(
            v,
            format!("mul_mat batched broadcast n={n}"),
            F32_TOL,
            move |ctx| {
                let a = ctx.new_tensor(DType::F32, &[33, 17, 2, 1])?;
                let b = ctx.new_tensor(DType::F32, &[33, 4, n, 3])?;
                let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(17));
                let bp = ctx.permute(b, [0, 2, 1, 3])?;
                let out = ctx.mul_mat(a, bp)?;
                Ok(Case { inputs, out })
            },
        );
    }
}

fn conv_pool(v: &mut Vec<OpCase>) {
    for is_2d in [true, false] {
        push(v, format!("im2col 2d={is_2d}"), F32_TOL, move |ctx| {
            let (k, x) = if is_2d {
                (
                    ctx.new_tensor(DType::F32, &[3, 3, 2, 4])?,
                    ctx.new_tensor(DType::F32, &[11, 9, 2, 2])?,
                )
            } else {
                (
                    ctx.new_tensor(DType::F32, &[3, 2, 4])?,
                    ctx.new_tensor(DType::F32, &[13, 2, 3])?,
                )
            };
            let inputs = random_inputs(ctx, &[k, x], &mut Rng::new(18));
            let out = ctx.im2col(k, x, 2, 1, 1, 1, 1, 2, is_2d, DType::F32)?;
            Ok(Case { inputs, out })
        });
    }
    push(v, "conv_2d".into(), F32_TOL, |ctx| {
        let k = ctx.new_tensor(DType::F32, &[3, 3, 2, 4])?;
        let x = ctx.new_tensor(DType::F32, &[11, 9, 2, 2])?;
        let inputs = random_inputs(ctx, &[k, x], &mut Rng::new(19));
        let out = ctx.conv_2d(k, x, 1, 1, 1, 1, 1, 1)?;
        Ok(Case { inputs, out })
    });
    for op in [PoolOp::Max, PoolOp::Avg] {
        push(v, format!("pool_2d {op:?}"), F32_TOL, move |ctx| {
            let a = ctx.new_tensor(DType::F32, &[11, 9, 3, 2])?;
            let inputs = random_inputs(ctx, &[a], &mut Rng::new(20));
            let out = ctx.pool_2d(a, op, 3, 2, 2, 2, 1, 1)?;
            Ok(Case { inputs, out })
        });
    }
}

fn train(v: &mut Vec<OpCase>) {
    push(v, "cross_entropy_loss".into(), F32_TOL, |ctx| {
        let x = ctx.new_tensor(DType::F32, &[10, 37, 3])?;
        let y = ctx.new_tensor(DType::F32, &[10, 37, 3])?;
        let mut rng = Rng::new(40);
        let mut inputs = random_inputs(ctx, &[x], &mut rng);
        inputs.push((y, Data::F(rng.vec(10 * 37 * 3, 0.0, 1.0))));
        let out = ctx.cross_entropy_loss(x, y)?;
        Ok(Case { inputs, out })
    });
    for (a, to) in [
        ([13, 50, 6, 2], [13, 1, 3, 1]),
        ([9, 7, 5, 3], [1, 7, 1, 3]),
    ] {
        push(
            v,
            format!("repeat_back {a:?} -> {to:?}"),
            F32_TOL,
            move |ctx| {
                let x = ctx.new_tensor(DType::F32, &a)?;
                let inputs = random_inputs(ctx, &[x], &mut Rng::new(41));
                let out = ctx.repeat_back_to(x, to)?;
                Ok(Case { inputs, out })
            },
        );
    }
    for op in UnaryOp::ALL {
        push(v, format!("unary_back {op:?}"), F32_TOL, move |ctx| {
            let g = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
            let x = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
            let mut rng = Rng::new(42);
            let mut inputs = random_inputs(ctx, &[g], &mut rng);
            inputs.push((x, Data::F(rng.vec(37 * 15, -4.0, 4.0))));
            let out = ctx.unary_back(g, x, op)?;
            Ok(Case { inputs, out })
        });
    }
    for rms in [false, true] {
        push(v, format!("norm_back rms={rms}"), F32_TOL, move |ctx| {
            let g = ctx.new_tensor(DType::F32, &[301, 5, 3])?;
            let x = ctx.new_tensor(DType::F32, &[301, 5, 3])?;
            let inputs = random_inputs(ctx, &[g, x], &mut Rng::new(43));
            let out = ctx.norm_back(g, x, 1e-5, rms)?;
            Ok(Case { inputs, out })
        });
    }
    push(
        v,
        "view_back strided, and stride 0".into(),
        F32_TOL,
        |ctx| {
            let g = ctx.new_tensor(DType::F32, &[3, 4])?;
            let h = ctx.new_tensor(DType::F32, &[1, 4])?;
            let inputs = random_inputs(ctx, &[g, h], &mut Rng::new(44));
            let a = ctx.view_back(g, [7, 13, 1, 1], [8, 84, 0, 0], 4)?;
            let b = ctx.view_back(h, [7, 13, 1, 1], [0, 0, 0, 0], 8)?;
            let out = ctx.add(a, b)?;
            Ok(Case { inputs, out })
        },
    );
    push(v, "get_rows_back".into(), F32_TOL, |ctx| {
        let g = ctx.new_tensor(DType::F32, &[5, 6, 2])?;
        let r = ctx.new_tensor(DType::I32, &[6, 2])?;
        let like = ctx.new_tensor(DType::F32, &[5, 7, 2])?;
        let mut inputs = random_inputs(ctx, &[g], &mut Rng::new(45));
        inputs.push((r, Data::I(vec![3, 0, 3, 6, 1, 3, 1, 1, 5, 2, 0, 0])));
        let out = ctx.get_rows_back(g, r, like)?;
        Ok(Case { inputs, out })
    });
    for is_2d in [true, false] {
        push(v, format!("im2col_back 2d={is_2d}"), F32_TOL, move |ctx| {
            let (k, x) = if is_2d {
                (
                    ctx.new_tensor(DType::F32, &[3, 3, 2, 4])?,
                    ctx.new_tensor(DType::F32, &[11, 9, 2, 2])?,
                )
            } else {
                (
                    ctx.new_tensor(DType::F32, &[3, 2, 4])?,
                    ctx.new_tensor(DType::F32, &[13, 2, 3])?,
                )
            };
            let cols = ctx.im2col(k, x, 2, 1, 1, 1, 1, 2, is_2d, DType::F32)?;
            let (cne, op, xne) = (ctx.tensor(cols).ne, ctx.tensor(cols).op, ctx.tensor(x).ne);
            let g = ctx.new_tensor(DType::F32, &cne)?;
            let inputs = random_inputs(ctx, &[g], &mut Rng::new(46));
            let out = ctx.im2col_back(g, k, xne, op)?;
            Ok(Case { inputs, out })
        });
    }
    for op in [PoolOp::Max, PoolOp::Avg] {
        push(v, format!("pool_2d_back {op:?}"), F32_TOL, move |ctx| {
            let x = ctx.new_tensor(DType::F32, &[11, 9, 3, 2])?;
            let pooled = ctx.pool_2d(x, op, 3, 2, 2, 2, 1, 1)?;
            let g = ctx.new_tensor(DType::F32, &ctx.tensor(pooled).ne.clone())?;
            let inputs = random_inputs(ctx, &[x, g], &mut Rng::new(47));
            let out = ctx.pool_2d_back(g, x, op, 3, 2, 2, 2, 1, 1)?;
            Ok(Case { inputs, out })
        });
    }
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        push(
            v,
            format!("rope_back {mode:?} (YaRN)"),
            F32_TOL,
            move |ctx| {
                let g = ctx.new_tensor(DType::F32, &[10, 3, 4])?;
                let pos = ctx.new_tensor(DType::I32, &[4])?;
                let ff = ctx.new_tensor(DType::F32, &[4])?;
                let mut rng = Rng::new(48);
                let mut inputs = random_inputs(ctx, &[g], &mut rng);
                inputs.push((pos, Data::I(vec![0, 5, 17, 1000])));
                inputs.push((ff, Data::F(rng.vec(4, 0.5, 2.0))));
                let mut p = RopeParams::new(8, mode, 10000.0);
                p.freq_scale = 0.5;
                p.ext_factor = 1.0;
                p.n_ctx_orig = 64;
                let out = ctx.rope_back(g, pos, Some(ff), p)?;
                Ok(Case { inputs, out })
            },
        );
    }
    for adamw in [true, false] {
        let name = if adamw {
            "opt_step_adamw"
        } else {
            "opt_step_sgd"
        };
        push(v, name.into(), F32_TOL, move |ctx| {
            let n = 1001;
            let w = ctx.new_tensor(DType::F32, &[n])?;
            let g = ctx.new_tensor(DType::F32, &[n])?;
            let mut rng = Rng::new(49);
            let mut inputs = random_inputs(ctx, &[w, g], &mut rng);
            let out = if adamw {
                let state = ctx.new_tensor(DType::F32, &[n, 2])?;
                let hp = ctx.new_tensor(DType::F32, &[7])?;
                inputs.push((state, Data::F(rng.vec(2 * n, 0.0, 0.5))));
                let (b1h, b2h) = (1.0 / (1.0 - 0.9f32.powi(3)), 1.0 / (1.0 - 0.999f32.powi(3)));
                inputs.push((hp, Data::F(vec![1e-2, 0.9, 0.999, 1e-8, 0.1, b1h, b2h])));
                ctx.opt_step_adamw(w, g, state, hp)?
            } else {
                let hp = ctx.new_tensor(DType::F32, &[2])?;
                inputs.push((hp, Data::F(vec![0.05, 0.01])));
                ctx.opt_step_sgd(w, g, hp)?
            };
            Ok(Case { inputs, out })
        });
    }
}

/// Under [`SMALL_BINDING`] (64 KiB): ~150 KB weights (k = 512, m odd) split by rows into three
/// ranges, the last one short; outputs and inputs over 64 KiB split by columns (tokens) into
/// ranges of odd width; both at once.
fn split(v: &mut Vec<OpCase>) {
    let types = [
        DType::F32,
        DType::F16,
        DType::Q8_0,
        DType::Q4_1,
        DType::Q4_K,
        DType::Q6_K,
    ];
    for t in types {
        let m = (150_000 / t.row_size(512).unwrap_or(512)) | 1;
        // n = 1 and 5: rows only; 41: src1 is 84 KB (columns too).
        for n in [1usize, 5, 41] {
            push(
                v,
                format!("split mul_mat {t} m={m} n={n} k=512"),
                mm_tol(t),
                move |ctx| {
                    let a = ctx.new_tensor(t, &[512, m])?;
                    let b = ctx.new_tensor(DType::F32, &[512, n])?;
                    let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(40 + n as u64));
                    let out = ctx.mul_mat(a, b)?;
                    Ok(Case { inputs, out })
                },
            );
        }
        push(v, format!("split get_rows {t}"), F32_TOL, move |ctx| {
            let a = ctx.new_tensor(t, &[512, m])?;
            let r = ctx.new_tensor(DType::I32, &[23])?;
            let mut rng = Rng::new(44);
            let mut inputs = random_inputs(ctx, &[a], &mut rng);
            // The first and last rows and random ones, in every range.
            let mut idx: Vec<i32> = (0..21).map(|_| rng.idx(m) as i32).collect();
            idx.extend([0, m as i32 - 1]);
            inputs.push((r, Data::I(idx)));
            let out = ctx.get_rows(a, r)?;
            Ok(Case { inputs, out })
        });
    }
    // A logits-like output over one binding: [301 x n] f32 is 80 KB or more, split by columns
    // (src1 too for n = 200; the f32/f16 weights by rows as well, the quantized ones fit).
    for t in [
        DType::F32,
        DType::F16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_K,
        DType::Q5_K,
    ] {
        let k = if t.block_size() == 256 { 256 } else { 96 };
        for n in [67usize, 200] {
            push(
                v,
                format!("split dst mul_mat {t} m=301 n={n} k={k}"),
                mm_tol(t),
                move |ctx| {
                    let a = ctx.new_tensor(t, &[k, 301])?;
                    let b = ctx.new_tensor(DType::F32, &[k, n])?;
                    let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(50 + n as u64));
                    let out = ctx.mul_mat(a, b)?;
                    Ok(Case { inputs, out })
                },
            );
        }
    }
}

/// The CPU reference of a case, on exactly `n_threads` threads.
pub fn run_cpu(build: &Build, n_threads: usize) -> Result<Vec<f32>> {
    use ggweb::backend::Backend;
    let mut ctx = Context::new();
    let case = build(&mut ctx)?;
    let graph = ggweb::Graph::build(&ctx, &[case.out]);
    let buft = ggweb::backend::cpu::cpu_buffer_type();
    let _buf = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &buft)?;
    set_inputs(&mut ctx, &case)?;
    ggweb::backend::cpu::CpuBackend::with_threads_forced(n_threads).graph_compute(&ctx, &graph)?;
    ctx.get_f32(case.out)
}

fn set_inputs(ctx: &mut Context, case: &Case) -> Result<()> {
    for (id, data) in &case.inputs {
        match data {
            Data::F(v) => ctx.set_f32(*id, v)?,
            Data::I(v) => ctx.set_i32(*id, v)?,
        }
    }
    Ok(())
}

#[cfg(feature = "webgpu")]
pub use gpu::*;

#[cfg(feature = "webgpu")]
mod gpu {
    use std::sync::Arc;

    use super::*;
    use crate::compare;
    use ggweb::backend::webgpu::WebGpuDevice;
    use ggweb::backend::Device;

    /// A case on a WebGPU device (async: reads go through `map_async`; natively block on it).
    pub async fn run_webgpu(build: &Build, dev: &Arc<WebGpuDevice>) -> Result<Vec<f32>> {
        let mut ctx = Context::new();
        let case = build(&mut ctx)?;
        let graph = ggweb::Graph::build(&ctx, &[case.out]);
        let _buf = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &dev.buffer_type())?;
        set_inputs(&mut ctx, &case)?;
        let mut be = dev.init_backend()?;
        be.graph_compute(&ctx, &graph)?;
        ctx.get_f32_async(case.out).await
    }

    /// Run every case of `group` on the CPU and on each of `devs` (name, device); every node
    /// must be supported. Returns the number of comparisons, or every failure.
    pub async fn check_group(
        devs: &[(String, Arc<WebGpuDevice>)],
        group: Group,
        cpu_threads: usize,
    ) -> std::result::Result<usize, String> {
        let mut failures = Vec::new();
        let mut n = 0;
        for case in cases(group) {
            let name = &case.name;
            let reference = match run_cpu(&case.build, cpu_threads) {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{name}: CPU: {e}"));
                    continue;
                }
            };
            for (path, dev) in devs {
                if let Err(e) = supported(dev, &case.build) {
                    failures.push(format!("{name} [{path}]: {e}"));
                    continue;
                }
                match run_webgpu(&case.build, dev).await {
                    Ok(out) => match compare(&out, &reference, case.tol) {
                        Ok(_) => n += 1,
                        Err(e) => failures.push(format!("{name} [{path}]: {e}")),
                    },
                    Err(e) => failures.push(format!("{name} [{path}]: {e}")),
                }
            }
        }
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(failures.join("\n"))
        }
    }

    /// Every node of the case's graph must be supported by `dev`.
    fn supported(dev: &WebGpuDevice, build: &Build) -> std::result::Result<(), String> {
        let mut ctx = Context::new();
        let case = build(&mut ctx).map_err(|e| e.to_string())?;
        let graph = ggweb::Graph::build(&ctx, &[case.out]);
        for &n in &graph.nodes {
            if !dev.supports_op(&ctx, n) {
                return Err(format!(
                    "node {} not supported: {:?}",
                    ctx.tensor(n).op.name(),
                    dev.explain_op(&ctx, n)
                ));
            }
        }
        Ok(())
    }

    /// `supports_op` is exact: types and ops without a WebGPU kernel are refused with the reason, a
    /// 2-D weight over a binding is accepted (split by rows, noted), a batched one is refused.
    pub fn check_supports_op(dev: &WebGpuDevice) -> std::result::Result<(), String> {
        let mut ctx = Context::new();
        let e = |e: ggweb::Error| e.to_string();
        let fail = |what: &str| Err(format!("supports_op: {what}"));
        // A type without a WebGPU kernel.
        let a = ctx.new_tensor(DType::Q2_K, &[256, 4]).map_err(e)?;
        let b = ctx.new_tensor(DType::F32, &[256, 2]).map_err(e)?;
        let mm = ctx.mul_mat(a, b).map_err(e)?;
        if dev.supports_op(&ctx, mm)
            || !dev
                .explain_op(&ctx, mm)
                .unwrap_or_default()
                .contains("MUL_MAT")
        {
            return fail("q2_K mul_mat accepted or unexplained");
        }
        // f16 elementwise (the CPU has it, WebGPU does not).
        let h = ctx.new_tensor(DType::F16, &[8]).map_err(e)?;
        let hh = ctx.add(h, h).map_err(e)?;
        if dev.supports_op(&ctx, hh) {
            return fail("f16 add accepted");
        }
        // A 2-D weight larger than one storage binding is split by rows (and says so); a
        // batched (3-D) one cannot be, so it stays on the CPU, with the reason.
        let max = dev.adapter().max_storage_buffer_binding_size as usize;
        let rows = max / (4096 * 4) + 1;
        let big = ctx.new_tensor(DType::F32, &[4096, rows]).map_err(e)?;
        let x = ctx.new_tensor(DType::F32, &[4096, 1]).map_err(e)?;
        let y = ctx.mul_mat(big, x).map_err(e)?;
        let note = dev.op_note(&ctx, y).unwrap_or_default();
        if !dev.supports_op(&ctx, y) || !note.contains("split into 2 bindings") {
            return fail(&format!("oversized 2-D weight: note '{note}'"));
        }
        let big3 = ctx
            .new_tensor(DType::F32, &[4096, rows / 2 + 1, 2])
            .map_err(e)?;
        let x3 = ctx.new_tensor(DType::F32, &[4096, 1, 2]).map_err(e)?;
        let y3 = ctx.mul_mat(big3, x3).map_err(e)?;
        let why = dev.explain_op(&ctx, y3).unwrap_or_default();
        if dev.supports_op(&ctx, y3)
            || !why.contains("max_storage_buffer_binding_size")
            || dev.op_note(&ctx, y3).is_some()
        {
            return fail(&format!("oversized 3-D weight: '{why}'"));
        }
        // And a supported one.
        let ok = ctx.new_tensor(DType::Q4_K, &[256, 3]).map_err(e)?;
        let y2 = ctx.mul_mat(ok, b).map_err(e)?;
        if !dev.supports_op(&ctx, y2) {
            return fail("q4_K mul_mat refused");
        }
        Ok(())
    }

    /// On a device with [`SMALL_BINDING`] bindings, the splits are really taken and say so
    /// (`op_note`), and what cannot be split stays on the CPU with the reason.
    pub fn check_split_notes(dev: &WebGpuDevice) -> std::result::Result<(), String> {
        let mut ctx = Context::new();
        let e = |e: ggweb::Error| e.to_string();
        let note = |ctx: &Context, y| dev.op_note(ctx, y).unwrap_or_default();
        // Weight rows.
        let a = ctx.new_tensor(DType::F32, &[512, 97]).map_err(e)?;
        let b = ctx.new_tensor(DType::F32, &[512, 1]).map_err(e)?;
        let y = ctx.mul_mat(a, b).map_err(e)?;
        if !note(&ctx, y).contains("rows") {
            return Err(format!("row split: '{}'", note(&ctx, y)));
        }
        // Output columns: [301 x 67] f32 (80 KB) in 2 ranges, from a 38 KB weight.
        let a = ctx.new_tensor(DType::F32, &[32, 301]).map_err(e)?;
        let b = ctx.new_tensor(DType::F32, &[32, 67]).map_err(e)?;
        let y = ctx.mul_mat(a, b).map_err(e)?;
        let n = note(&ctx, y);
        if !(n.contains("columns") && n.contains("split into 2") && !n.contains("rows")) {
            return Err(format!("column split: '{n}'"));
        }
        // Both.
        let a = ctx.new_tensor(DType::F32, &[512, 73]).map_err(e)?;
        let b = ctx.new_tensor(DType::F32, &[512, 41]).map_err(e)?;
        let y = ctx.mul_mat(a, b).map_err(e)?;
        let n = note(&ctx, y);
        if !(n.contains("columns") && n.contains("rows")) {
            return Err(format!("row and column split: '{n}'"));
        }
        // A batched output over a binding cannot be split by columns: the CPU, with the reason.
        let a = ctx.new_tensor(DType::F32, &[16, 301, 2]).map_err(e)?;
        let b = ctx.new_tensor(DType::F32, &[16, 67, 2]).map_err(e)?;
        let y = ctx.mul_mat(a, b).map_err(e)?;
        if dev.supports_op(&ctx, y) {
            return Err("a batched 160 KB output claimed to fit".into());
        }
        let why = dev.explain_op(&ctx, y).unwrap_or_default();
        if !(why.contains("max_storage_buffer_binding_size") && why.contains("batched")) {
            return Err(format!("batched reason: '{why}'"));
        }
        // Nor a transposed src1 whose one column spans 75 KB.
        let a = ctx.new_tensor(DType::F32, &[64, 37]).map_err(e)?;
        let b = ctx.new_tensor(DType::F32, &[301, 64]).map_err(e)?;
        let bt = ctx.transpose(b).map_err(e)?;
        let y = ctx.mul_mat(a, bt).map_err(e)?;
        let why = dev.explain_op(&ctx, y).unwrap_or_default();
        if dev.supports_op(&ctx, y) || !why.contains("one column") {
            return Err(format!("transposed src1: '{why}'"));
        }
        Ok(())
    }
}
