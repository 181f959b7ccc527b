//! The WebGPU backend against the CPU backend (test-backend-ops style): every op on seeded random
//! data of odd sizes, on the f16 path (when the adapter has `shader-f16`) and the f32 path.
//! Errors are normalized MSE as ggml's test-backend-ops: 1e-7 for f32 ops, 5e-4 for quantized
//! mul_mat. Without any adapter the tests print "no adapter" and pass (scripts/setup-gpu.sh
//! installs lavapipe so CI always has one).

use std::sync::{Arc, OnceLock};

use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::backend::webgpu::{WebGpuDevice, WebGpuOptions};
use ggweb::backend::{Backend, Device};
use ggweb::tensor::{PoolOp, RopeMode, RopeParams, UnaryOp};
use ggweb::{Context, DType, Graph, Result, TensorId};

/// The devices under test: the default (f16 path when available) and one forced onto f32.
fn devices() -> &'static [(String, Arc<WebGpuDevice>)] {
    static DEVS: OnceLock<Vec<(String, Arc<WebGpuDevice>)>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let mut v = Vec::new();
        // GGWEB_WEBGPU_ADAPTER picks the adapter, GGWEB_WEBGPU_F32=1 forces the f32 path.
        match WebGpuDevice::new_blocking(&WebGpuOptions::from_env()) {
            Ok(d) => {
                eprintln!("WebGPU adapter: {}", d.adapter());
                if d.uses_f16() {
                    let rows = d.matvec_rows();
                    v.push(("f16 path".to_string(), d));
                    // The f32 path also takes the other n = 1 mul_mat kernel than the default
                    // chosen for this adapter, so both are tested.
                    let opts = WebGpuOptions {
                        force_f32: true,
                        matvec_rows: Some(!rows),
                        ..WebGpuOptions::from_env()
                    };
                    if let Ok(d32) = WebGpuDevice::new_blocking(&opts) {
                        v.push(("f32 path".to_string(), d32));
                    }
                } else {
                    v.push(("f32 path".to_string(), d));
                }
            }
            Err(e) => eprintln!("no adapter: skipping WebGPU tests ({e})"),
        }
        v
    })
}

/// A tiny deterministic generator (xorshift), so CPU and GPU graphs get identical data.
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [lo, hi).
    fn f(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f(lo, hi)).collect()
    }
    fn idx(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

enum Data {
    F(Vec<f32>),
    I(Vec<i32>),
}

/// A test graph: its inputs with data and the tensor to compare.
struct Case {
    inputs: Vec<(TensorId, Data)>,
    out: TensorId,
}

/// Fill every leaf of `ctx` without explicit data with random values in [-1, 1).
fn random_inputs(ctx: &Context, ids: &[TensorId], rng: &mut Rng) -> Vec<(TensorId, Data)> {
    ids.iter()
        .map(|&id| (id, Data::F(rng.vec(ctx.tensor(id).nelements(), -1.0, 1.0))))
        .collect()
}

fn run_on(
    build: &dyn Fn(&mut Context) -> Result<Case>,
    dev: Option<&Arc<WebGpuDevice>>,
) -> Result<Vec<f32>> {
    let mut ctx = Context::new();
    let case = build(&mut ctx)?;
    let graph = Graph::build(&ctx, &[case.out]);
    let buft = match dev {
        Some(d) => d.buffer_type(),
        None => cpu_buffer_type(),
    };
    let _buf = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &buft)?;
    for (id, data) in &case.inputs {
        match data {
            Data::F(v) => ctx.set_f32(*id, v)?,
            Data::I(v) => ctx.set_i32(*id, v)?,
        }
    }
    match dev {
        Some(d) => {
            let mut be = d.init_backend()?;
            be.graph_compute(&ctx, &graph)?;
            be.synchronize()?;
        }
        None => CpuBackend::new(2).graph_compute(&ctx, &graph)?,
    }
    ctx.get_f32(case.out)
}

/// ggml's normalized mean squared error.
fn nmse(out: &[f32], reference: &[f32]) -> f64 {
    let mut num = 0f64;
    let mut den = 0f64;
    for (a, b) in out.iter().zip(reference) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Devices that ask for a 64 KiB `max_storage_buffer_binding_size`, so weights of a few hundred
/// KiB are split over several bindings (f16 and f32 paths, both n = 1 kernels).
fn small_binding_devices() -> &'static [(String, Arc<WebGpuDevice>)] {
    static DEVS: OnceLock<Vec<(String, Arc<WebGpuDevice>)>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let mut v = Vec::new();
        for (force_f32, rows) in [(false, None), (true, Some(false))] {
            let opts = WebGpuOptions {
                force_f32,
                matvec_rows: rows,
                max_storage_binding: Some(SMALL_BINDING),
                ..WebGpuOptions::from_env()
            };
            match WebGpuDevice::new_blocking(&opts) {
                Ok(d) => {
                    assert_eq!(
                        d.adapter().max_storage_buffer_binding_size,
                        SMALL_BINDING,
                        "the device did not take the smaller binding limit"
                    );
                    let path = if d.uses_f16() { "f16" } else { "f32" };
                    v.push((format!("{path} path, 64 KiB bindings"), d));
                }
                Err(e) => eprintln!("no adapter: skipping WebGPU tests ({e})"),
            }
        }
        v
    })
}

const SMALL_BINDING: u64 = 64 << 10;

/// Run `build` on the CPU and on every WebGPU device; assert NMSE < `tol` and that the device
/// claims support for every node.
fn check(name: &str, tol: f64, build: impl Fn(&mut Context) -> Result<Case>) {
    check_on(devices(), name, tol, build)
}

fn check_on(
    devs: &[(String, Arc<WebGpuDevice>)],
    name: &str,
    tol: f64,
    build: impl Fn(&mut Context) -> Result<Case>,
) {
    if devs.is_empty() {
        eprintln!("no adapter: {name} skipped");
        return;
    }
    let reference = run_on(&build, None).unwrap_or_else(|e| panic!("{name}: CPU: {e}"));
    for (path, dev) in devs {
        // supports_op must hold for every node of the graph.
        let mut ctx = Context::new();
        let case = build(&mut ctx).expect("build");
        let graph = Graph::build(&ctx, &[case.out]);
        for &n in &graph.nodes {
            assert!(
                dev.supports_op(&ctx, n),
                "{name} [{path}]: node {} not supported: {:?}",
                ctx.tensor(n).op.name(),
                dev.explain_op(&ctx, n)
            );
        }
        let out = run_on(&build, Some(dev)).unwrap_or_else(|e| panic!("{name} [{path}]: {e}"));
        assert_eq!(out.len(), reference.len());
        let nan_ok = out
            .iter()
            .zip(&reference)
            .all(|(a, b)| a.is_nan() == b.is_nan());
        assert!(nan_ok, "{name} [{path}]: NaN pattern differs");
        let (o, r): (Vec<f32>, Vec<f32>) = out
            .iter()
            .zip(&reference)
            .filter(|(a, _)| !a.is_nan())
            .map(|(a, b)| (*a, *b))
            .unzip();
        let e = nmse(&o, &r);
        assert!(
            e < tol,
            "{name} [{path}]: NMSE {e:.3e} >= {tol:.1e}; gpu[..4] {:?} cpu[..4] {:?}",
            &out[..out.len().min(4)],
            &reference[..reference.len().min(4)]
        );
    }
}

const F32_TOL: f64 = 1e-7;

#[test]
fn binary_ops_broadcast_and_strided() {
    for (opi, name) in ["add", "sub", "mul", "div"].iter().enumerate() {
        for bshape in [[13, 7, 3, 2], [13, 1, 3, 1], [1, 7, 1, 2]] {
            check(&format!("{name} {bshape:?}"), F32_TOL, |ctx| {
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
    check("add permuted", F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[7, 13, 3])?;
        let b = ctx.new_tensor(DType::F32, &[13, 7, 3])?;
        let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(9));
        let ap = ctx.permute(a, [1, 0, 2, 3])?;
        let out = ctx.add(ap, b)?;
        Ok(Case { inputs, out })
    });
}

#[test]
fn unary_scale_and_repeat() {
    let ops = [
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Silu,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Exp,
    ];
    for op in ops {
        check(&format!("unary {op:?}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
            let mut rng = Rng::new(3);
            let inputs = vec![(a, Data::F(rng.vec(37 * 15, -4.0, 4.0)))];
            let out = ctx.unary(a, op)?;
            Ok(Case { inputs, out })
        });
    }
    check("scale_bias", F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
        let inputs = random_inputs(ctx, &[a], &mut Rng::new(4));
        let out = ctx.scale_bias(a, 0.37, -1.5)?;
        Ok(Case { inputs, out })
    });
    for k in 0..3 {
        check(&format!("sqr/sqrt/log {k}"), F32_TOL, |ctx| {
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
    check("repeat", F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[5, 1, 3])?;
        let b = ctx.new_tensor(DType::F32, &[10, 4, 3, 2])?;
        let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(6));
        let out = ctx.repeat(a, b)?;
        Ok(Case { inputs, out })
    });
}

#[test]
fn cpy_cont_types_and_concat() {
    for (from, to) in [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
    ] {
        check(
            &format!("cast {from}->{to} of a transposed view"),
            F32_TOL,
            |ctx| {
                let a = ctx.new_tensor(from, &[11, 7, 3])?;
                let inputs = random_inputs(ctx, &[a], &mut Rng::new(7));
                let t = ctx.transpose(a)?;
                let c = ctx.cast(t, to)?;
                // Compare in f32 (both sides rounded to `to` the same way).
                let out = ctx.cast(c, DType::F32)?;
                Ok(Case { inputs, out })
            },
        );
        check(&format!("cpy {from}->{to} into a view"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(from, &[9, 5])?;
            let b = ctx.new_tensor(to, &[9, 8])?;
            let mut inputs = random_inputs(ctx, &[a], &mut Rng::new(8));
            inputs.push((b, Data::F(vec![0.0; 72])));
            let bv = ctx.view(b, &[9, 5], &[ctx.tensor(b).nb[1]], ctx.tensor(b).nb[1] * 2)?;
            let c = ctx.cpy(a, bv)?;
            let out = ctx.cast(c, DType::F32)?;
            Ok(Case { inputs, out })
        });
    }
    for dim in 0..4 {
        check(&format!("concat dim {dim}"), F32_TOL, |ctx| {
            let mut sa = [5, 3, 2, 2];
            let sb = [5, 3, 2, 2];
            sa[dim] = 4;
            let a = ctx.new_tensor(DType::F32, &sa)?;
            let b = ctx.new_tensor(DType::F32, &sb)?;
            let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(10));
            let out = ctx.concat(a, b, dim)?;
            Ok(Case { inputs, out })
        });
    }
}

#[test]
fn norms_softmax_reductions() {
    for rms in [false, true] {
        check(&format!("norm rms={rms}"), F32_TOL, |ctx| {
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
        check(
            &format!("soft_max mask {mask:?} max_bias {max_bias}"),
            F32_TOL,
            |ctx| {
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
        check(&format!("reduction {k}"), F32_TOL, |ctx| {
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

#[test]
fn rope_normal_and_neox() {
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (n_dims, ff, ext) in [(64, false, 0.0), (48, true, 0.0), (64, false, 1.0)] {
            check(
                &format!("rope {mode:?} n_dims {n_dims} ff {ff} ext {ext}"),
                F32_TOL,
                |ctx| {
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

const WEIGHT_TYPES: [DType; 10] = [
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

fn mm_tol(t: DType) -> f64 {
    match t {
        DType::F32 => F32_TOL,
        // The CPU rounds src1 to f16 for f16 weights, to q8 for quantized ones.
        _ => 5e-4,
    }
}

#[test]
fn get_rows_every_weight_type() {
    for t in WEIGHT_TYPES {
        check(&format!("get_rows {t}"), F32_TOL, |ctx| {
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

#[test]
fn mul_mat_every_weight_type() {
    for t in WEIGHT_TYPES {
        for n in [1usize, 13, 67] {
            check(&format!("mul_mat {t} m=19 n={n} k=512"), mm_tol(t), |ctx| {
                let a = ctx.new_tensor(t, &[512, 19])?;
                let b = ctx.new_tensor(DType::F32, &[512, n])?;
                let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(16));
                let out = ctx.mul_mat(a, b)?;
                Ok(Case { inputs, out })
            });
        }
    }
    // Batched with broadcast and a permuted src1 (attention-like).
    for n in [1usize, 7] {
        check(
            &format!("mul_mat batched broadcast n={n}"),
            F32_TOL,
            |ctx| {
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

/// Weights over the binding limit (64 KiB here) are split by rows over several bindings and
/// dispatches: mul_mat (both n = 1 kernels and the tiled one) and get_rows, odd sizes, with
/// row ranges that end mid-way and a last range of a single row.
#[test]
fn large_weights_split_over_bindings() {
    let devs = small_binding_devices();
    for t in [
        DType::F32,
        DType::F16,
        DType::Q8_0,
        DType::Q4_1,
        DType::Q4_K,
        DType::Q6_K,
    ] {
        // ~150 KB of weights (k = 512, m odd): three ranges, the last one short. n stays small
        // enough that src1 fits one 64 KiB binding.
        let m = (150_000 / t.row_size(512).unwrap()) | 1;
        for n in [1usize, 5, 31] {
            check_on(
                devs,
                &format!("split mul_mat {t} m={m} n={n} k=512"),
                mm_tol(t),
                |ctx| {
                    let a = ctx.new_tensor(t, &[512, m])?;
                    let b = ctx.new_tensor(DType::F32, &[512, n])?;
                    let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(40 + n as u64));
                    let out = ctx.mul_mat(a, b)?;
                    Ok(Case { inputs, out })
                },
            );
        }
        check_on(devs, &format!("split get_rows {t}"), F32_TOL, |ctx| {
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
    // The splits really happen (the note the scheduler prints).
    for (path, dev) in devs {
        let mut ctx = Context::new();
        let a = ctx.new_tensor(DType::F32, &[512, 97]).unwrap();
        let b = ctx.new_tensor(DType::F32, &[512, 1]).unwrap();
        let y = ctx.mul_mat(a, b).unwrap();
        let note = dev.op_note(&ctx, y).unwrap_or_default();
        assert!(note.contains("bindings/dispatches"), "[{path}] {note}");
    }
}

#[test]
fn im2col_conv_pool() {
    for is_2d in [true, false] {
        check(&format!("im2col 2d={is_2d}"), F32_TOL, |ctx| {
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
    check("conv_2d", F32_TOL, |ctx| {
        let k = ctx.new_tensor(DType::F32, &[3, 3, 2, 4])?;
        let x = ctx.new_tensor(DType::F32, &[11, 9, 2, 2])?;
        let inputs = random_inputs(ctx, &[k, x], &mut Rng::new(19));
        let out = ctx.conv_2d(k, x, 1, 1, 1, 1, 1, 1)?;
        Ok(Case { inputs, out })
    });
    for op in [PoolOp::Max, PoolOp::Avg] {
        check(&format!("pool_2d {op:?}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(DType::F32, &[11, 9, 3, 2])?;
            let inputs = random_inputs(ctx, &[a], &mut Rng::new(20));
            let out = ctx.pool_2d(a, op, 3, 2, 2, 2, 1, 1)?;
            Ok(Case { inputs, out })
        });
    }
}

#[test]
fn supports_op_is_exact() {
    let devs = devices();
    if devs.is_empty() {
        eprintln!("no adapter");
        return;
    }
    for (path, dev) in devs {
        let mut ctx = Context::new();
        // A type without a WebGPU kernel.
        let a = ctx.new_tensor(DType::Q2_K, &[256, 4]).unwrap();
        let b = ctx.new_tensor(DType::F32, &[256, 2]).unwrap();
        let mm = ctx.mul_mat(a, b).unwrap();
        assert!(!dev.supports_op(&ctx, mm), "[{path}] q2_K mul_mat");
        assert!(dev.explain_op(&ctx, mm).unwrap().contains("MUL_MAT"));
        // f16 elementwise (the CPU has it, WebGPU does not).
        let h = ctx.new_tensor(DType::F16, &[8]).unwrap();
        let hh = ctx.add(h, h).unwrap();
        assert!(!dev.supports_op(&ctx, hh), "[{path}] f16 add");
        // A 2-D weight larger than one storage binding is split by rows (and says so); a
        // batched (3-D) one cannot be, so it stays on the CPU, with the reason.
        let max = dev.adapter().max_storage_buffer_binding_size as usize;
        let rows = max / (4096 * 4) + 1;
        let big = ctx.new_tensor(DType::F32, &[4096, rows]).unwrap();
        let x = ctx.new_tensor(DType::F32, &[4096, 1]).unwrap();
        let y = ctx.mul_mat(big, x).unwrap();
        assert!(dev.supports_op(&ctx, y), "[{path}] oversized 2-D weight");
        let note = dev.op_note(&ctx, y).unwrap();
        assert!(note.contains("split into 2 bindings"), "{note}");
        let big3 = ctx
            .new_tensor(DType::F32, &[4096, rows / 2 + 1, 2])
            .unwrap();
        let x3 = ctx.new_tensor(DType::F32, &[4096, 1, 2]).unwrap();
        let y3 = ctx.mul_mat(big3, x3).unwrap();
        assert!(!dev.supports_op(&ctx, y3), "[{path}] oversized 3-D weight");
        let why = dev.explain_op(&ctx, y3).unwrap();
        assert!(why.contains("max_storage_buffer_binding_size"), "{why}");
        assert!(dev.op_note(&ctx, y3).is_none());
        // And a supported one.
        let ok = ctx.new_tensor(DType::Q4_K, &[256, 3]).unwrap();
        let y2 = ctx.mul_mat(ok, b).unwrap();
        assert!(dev.supports_op(&ctx, y2), "[{path}] q4_K mul_mat");
    }
}

// ---------------------------------------------------------------------------------------------
// MNIST: the two ggml example models from crate/assets on WebGPU vs the CPU.

fn assets() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crate/assets")
}

/// The t10k images (pixel / 255) and labels.
fn t10k() -> Option<(Vec<f32>, Vec<u8>)> {
    use ggweb::models::mnist::idx;
    let img = std::fs::read(assets().join("t10k-images-idx3-ubyte.gz")).ok()?;
    let lab = std::fs::read(assets().join("t10k-labels-idx1-ubyte.gz")).ok()?;
    let (_, images) = idx::parse_images(&idx::maybe_gunzip(&img).ok()?).ok()?;
    let labels = idx::parse_labels(&idx::maybe_gunzip(&lab).ok()?).ok()?;
    Some((images, labels))
}

/// (images, logits, weights with their bytes).
type MnistGraph = (TensorId, TensorId, Vec<(TensorId, Vec<u8>)>);

/// Build the fc or cnn graph of ggml's mnist example for `n` images; returns (images, logits).
fn mnist_graph(
    ctx: &mut Context,
    file: &ggweb::gguf::GgufFile,
    cnn: bool,
    n: usize,
) -> Result<MnistGraph> {
    let mut weights = Vec::new();
    let mut w = |ctx: &mut Context, name: &str| -> Result<TensorId> {
        let info = file.tensor(name).expect("tensor in the model");
        let ne: Vec<usize> = info.ne.iter().map(|&x| x as usize).collect();
        let id = ctx.new_tensor(DType::F32, &ne)?;
        weights.push((id, file.tensor_data(name)?.to_vec()));
        Ok(id)
    };
    let images = ctx.new_tensor(DType::F32, &[784, n])?;
    let logits = if !cnn {
        let (w1, b1, w2, b2) = (
            w(ctx, "fc1.weight")?,
            w(ctx, "fc1.bias")?,
            w(ctx, "fc2.weight")?,
            w(ctx, "fc2.bias")?,
        );
        let h = ctx.mul_mat(w1, images)?;
        let h = ctx.add(h, b1)?;
        let h = ctx.relu(h)?;
        let o = ctx.mul_mat(w2, h)?;
        ctx.add(o, b2)?
    } else {
        let (k1, b1, k2, b2, wd, bd) = (
            w(ctx, "conv1.kernel")?,
            w(ctx, "conv1.bias")?,
            w(ctx, "conv2.kernel")?,
            w(ctx, "conv2.bias")?,
            w(ctx, "dense.weight")?,
            w(ctx, "dense.bias")?,
        );
        let x = ctx.reshape(images, &[28, 28, 1, n])?;
        let c1 = ctx.conv_2d(k1, x, 1, 1, 1, 1, 1, 1)?;
        let c1 = ctx.add(c1, b1)?;
        let c1 = ctx.relu(c1)?;
        let p1 = ctx.pool_2d(c1, PoolOp::Max, 2, 2, 2, 2, 0, 0)?;
        let c2 = ctx.conv_2d(k2, p1, 1, 1, 1, 1, 1, 1)?;
        let c2 = ctx.add(c2, b2)?;
        let c2 = ctx.relu(c2)?;
        let p2 = ctx.pool_2d(c2, PoolOp::Max, 2, 2, 2, 2, 0, 0)?;
        let d = ctx.permute(p2, [1, 2, 0, 3])?;
        let d = ctx.cont(d)?;
        let d = ctx.reshape(d, &[7 * 7 * 16, n])?;
        let o = ctx.mul_mat(wd, d)?;
        ctx.add(o, bd)?
    };
    Ok((images, logits, weights))
}

fn mnist_accuracy(
    cnn: bool,
    dev: Option<&Arc<WebGpuDevice>>,
    images: &[f32],
    labels: &[u8],
) -> (f64, Vec<f32>) {
    let name = if cnn {
        "mnist-cnn-f32.gguf"
    } else {
        "mnist-fc-f32.gguf"
    };
    let file = ggweb::gguf::GgufFile::open(assets().join(name)).expect("model");
    let batch = 1000;
    let mut ctx = Context::new();
    let (img, logits, weights) = mnist_graph(&mut ctx, &file, cnn, batch).expect("graph");
    let graph = Graph::build(&ctx, &[logits]);
    let buft = match dev {
        Some(d) => d.buffer_type(),
        None => cpu_buffer_type(),
    };
    let _buf = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &buft).expect("alloc");
    for (id, bytes) in &weights {
        ctx.set_bytes(*id, bytes).expect("weights");
    }
    let mut be: Box<dyn Backend> = match dev {
        Some(d) => d.init_backend().expect("backend"),
        None => Box::new(CpuBackend::new(2)),
    };
    let mut correct = 0usize;
    let mut all = Vec::new();
    let n = labels.len();
    for start in (0..n).step_by(batch) {
        ctx.set_f32(img, &images[start * 784..(start + batch) * 784])
            .expect("images");
        be.graph_compute(&ctx, &graph).expect("compute");
        let out = ctx.get_f32(logits).expect("logits");
        for (i, row) in out.chunks(10).enumerate() {
            let pred = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (j, &v)| if v > b.1 { (j, v) } else { b },
                )
                .0;
            correct += (pred == labels[start + i] as usize) as usize;
        }
        all.extend(out);
    }
    (100.0 * correct as f64 / n as f64, all)
}

#[test]
fn mnist_fc_and_cnn_match_cpu() {
    let devs = devices();
    if devs.is_empty() {
        eprintln!("no adapter");
        return;
    }
    let Some((images, labels)) = t10k() else {
        panic!("the t10k set in crate/assets could not be read");
    };
    for (cnn, expect) in [(false, 98.05), (true, 98.12)] {
        let (acc_cpu, ref_logits) = mnist_accuracy(cnn, None, &images, &labels);
        for (path, dev) in devs {
            let (acc, logits) = mnist_accuracy(cnn, Some(dev), &images, &labels);
            eprintln!(
                "MNIST {} [{path}]: WebGPU {acc:.2} %, CPU {acc_cpu:.2} %",
                if cnn { "cnn" } else { "fc" }
            );
            assert_eq!(acc, acc_cpu, "accuracy differs from the CPU");
            assert!((acc - expect).abs() < 1e-9, "accuracy {acc} != {expect}");
            let e = nmse(&logits, &ref_logits);
            assert!(e < F32_TOL, "logits NMSE {e:.3e}");
        }
    }
}

/// mul_mat GFLOP/s on the default adapter (lavapipe here: a CPU emulation). Run with
/// `cargo test -p ggweb-native-tests --test webgpu bench -- --ignored --nocapture`;
/// `GGWEB_BENCH_SIZES="m,n,k;..."` overrides the shapes.
#[test]
#[ignore]
fn bench_mul_mat_webgpu_table() {
    if devices().is_empty() {
        eprintln!("no adapter");
        return;
    }
    let sizes: Vec<(usize, usize, usize)> = std::env::var("GGWEB_BENCH_SIZES")
        .ok()
        .map(|s| {
            s.split(';')
                .filter_map(|t| {
                    let v: Vec<usize> =
                        t.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                    (v.len() == 3).then(|| (v[0], v[1], v[2]))
                })
                .collect()
        })
        .unwrap_or_else(|| vec![(4096, 1, 4096), (4096, 512, 4096)]);
    if std::env::var("GGWEB_BENCH_CPU").is_ok_and(|v| v == "1") {
        // The CPU backend under the same conditions (a debug-profile test binary: kernels at
        // opt-level 1; `ggweb bench` has the release figures).
        for &(m, n, k) in &sizes {
            for t in [
                DType::F32,
                DType::F16,
                DType::Q4_0,
                DType::Q8_0,
                DType::Q4_K,
            ] {
                let r = ggweb::bench::bench_mul_mat(t, m, n, k, 2, 1.0).expect("cpu bench");
                println!(
                    "cpu [2 threads] mul_mat {t:>5} m={m} n={n} k={k}: {:8.2} GFLOP/s",
                    r.gflops
                );
            }
        }
    }
    for (path, dev) in devices() {
        for &(m, n, k) in &sizes {
            for t in [
                DType::F32,
                DType::F16,
                DType::Q4_0,
                DType::Q8_0,
                DType::Q4_K,
            ] {
                let g =
                    ggweb::backend::webgpu::bench_mul_mat_on(dev, t, m, n, k, 1.0).expect("bench");
                println!(
                    "webgpu [{}; {path}] mul_mat {t:>5} m={m} n={n} k={k}: {g:8.2} GFLOP/s",
                    dev.adapter().name
                );
            }
        }
    }
}

/// A graph with an op WebGPU does not have (f16 add) runs split across WebGPU and the CPU by the
/// scheduler, weights staying in their WebGPU buffer, and matches the CPU alone.
#[test]
fn scheduler_splits_webgpu_and_cpu() {
    use ggweb::backend::sched::Scheduler;
    let devs = devices();
    if devs.is_empty() {
        eprintln!("no adapter");
        return;
    }
    let build = |ctx: &mut Context| -> Result<(TensorId, TensorId, TensorId)> {
        let w = ctx.new_tensor(DType::Q4_0, &[64, 33])?;
        let x = ctx.new_tensor(DType::F32, &[64, 5])?;
        ctx.set_input(x);
        let y = ctx.mul_mat(w, x)?;
        let h = ctx.cast(y, DType::F16)?;
        let h = ctx.add(h, h)?; // CPU only
        let f = ctx.cast(h, DType::F32)?;
        let out = ctx.soft_max_ext(f, None, 0.3, 0.0)?;
        ctx.set_output(out);
        Ok((w, x, out))
    };
    let mut rng = Rng::new(21);
    let wv = rng.vec(64 * 33, -1.0, 1.0);
    let xv = rng.vec(64 * 5, -1.0, 1.0);
    // CPU alone.
    let mut ctx = Context::new();
    let (w, x, out) = build(&mut ctx).unwrap();
    let graph = Graph::build(&ctx, &[out]);
    let _b = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    ctx.set_f32(w, &wv).unwrap();
    ctx.set_f32(x, &xv).unwrap();
    CpuBackend::new(2).graph_compute(&ctx, &graph).unwrap();
    let reference = ctx.get_f32(out).unwrap();
    for (path, dev) in devs {
        let mut ctx = Context::new();
        let (w, x, out) = build(&mut ctx).unwrap();
        // The weight lives in a WebGPU buffer.
        let wb = ggweb::alloc::alloc_tensors(&mut ctx, &[w], &dev.buffer_type())
            .unwrap()
            .unwrap();
        wb.set_usage(ggweb::backend::BufferUsage::Weights);
        ctx.set_f32(w, &wv).unwrap();
        let graph = Graph::build(&ctx, &[out]);
        let mut sched = Scheduler::new(vec![
            dev.init_backend().unwrap(),
            Box::new(CpuBackend::new(2)),
        ])
        .unwrap();
        sched.plan(&mut ctx, &graph).unwrap();
        ctx.set_f32(x, &xv).unwrap();
        sched.compute_planned(&ctx).unwrap();
        let got = ctx.get_f32(out).unwrap();
        let used: std::collections::BTreeSet<usize> =
            sched.splits.iter().map(|s| s.backend).collect();
        assert!(
            used.contains(&0) && used.contains(&1),
            "[{path}] expected a split, got {used:?}"
        );
        let e = nmse(&got, &reference);
        // q4_0 mul_mat: the CPU rounds activations to q8_0, WebGPU keeps them f32.
        assert!(e < mm_tol(DType::Q4_0), "[{path}] split graph NMSE {e:.3e}");
    }
}
