//! The WebGPU backend in the browser (headless Chromium's SwiftShader adapter: no `shader-f16`,
//! so the f32 path) against the CPU backend: the same cases as native-tests/tests/webgpu.rs, on
//! seeded random data of odd sizes, with results read back through `map_async` (async: nothing
//! blocks the page). Errors are normalized MSE as ggml's test-backend-ops: 1e-7 for f32 ops, 5e-4
//! for quantized / f16 mul_mat. Every test needs an adapter: run with
//! `--enable-unsafe-webgpu` (wasm-tests/webdriver.json); without one they fail.
//!
//! Built only with `--features webgpu` (scripts/test-web.sh); browser only.
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend, HostBytes};
use ggweb::backend::webgpu::{read_f32_async, WebGpuDevice, WebGpuOptions};
use ggweb::backend::{Backend, BufferUsage, Device};
use ggweb::models::mnist::{idx, Mnist};
use ggweb::models::runner::BackendChoice;
use ggweb::tensor::{PoolOp, RopeMode, RopeParams, UnaryOp};
use ggweb::{Context, DType, Graph, Result, TensorId};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// The devices under test: the default one (must exist) and, for the other n = 1 mul_mat kernel,
/// one with `matvec_rows` flipped; both forced onto the f32 path (SwiftShader has no f16 anyway).
async fn devices() -> Vec<(String, Arc<WebGpuDevice>)> {
    let d = ggweb::backend::webgpu::init_default_device()
        .await
        .expect("a WebGPU adapter (Chromium with --enable-unsafe-webgpu)");
    let mut v = vec![];
    let rows = d.matvec_rows();
    if d.uses_f16() {
        // A GPU browser: also test the f32 path.
        let opts = WebGpuOptions {
            force_f32: true,
            matvec_rows: Some(rows),
            ..Default::default()
        };
        v.push((
            "f32 path".into(),
            WebGpuDevice::new(&opts).await.expect("f32 device"),
        ));
    }
    v.push((format!("default (f16 {})", d.uses_f16()), d));
    let opts = WebGpuOptions {
        force_f32: true,
        matvec_rows: Some(!rows),
        ..Default::default()
    };
    v.push((
        format!("f32 path, matvec_rows {}", !rows),
        WebGpuDevice::new(&opts).await.expect("second device"),
    ));
    v
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

struct Case {
    inputs: Vec<(TensorId, Data)>,
    out: TensorId,
}

fn random_inputs(ctx: &Context, ids: &[TensorId], rng: &mut Rng) -> Vec<(TensorId, Data)> {
    ids.iter()
        .map(|&id| (id, Data::F(rng.vec(ctx.tensor(id).nelements(), -1.0, 1.0))))
        .collect()
}

type Build<'a> = &'a dyn Fn(&mut Context) -> Result<Case>;

async fn run_on(build: Build<'_>, dev: Option<&Arc<WebGpuDevice>>) -> Result<Vec<f32>> {
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
            read_f32_async(&ctx, case.out).await
        }
        None => {
            CpuBackend::new(1).graph_compute(&ctx, &graph)?;
            ctx.get_f32(case.out)
        }
    }
}

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

/// Run `build` on the CPU and on every device; assert NMSE < `tol`, the same NaN pattern, and
/// that the device claims support for every node.
async fn check(
    devs: &[(String, Arc<WebGpuDevice>)],
    name: &str,
    tol: f64,
    build: impl Fn(&mut Context) -> Result<Case>,
) {
    let reference = run_on(&build, None)
        .await
        .unwrap_or_else(|e| panic!("{name}: CPU: {e}"));
    for (path, dev) in devs {
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
        let out = run_on(&build, Some(dev))
            .await
            .unwrap_or_else(|e| panic!("{name} [{path}]: {e}"));
        assert_eq!(out.len(), reference.len(), "{name} [{path}]");
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

#[wasm_bindgen_test]
async fn adapter_is_reported() {
    let d = ggweb::backend::webgpu::init_default_device()
        .await
        .expect("adapter");
    let a = d.adapter();
    assert!(!a.name.is_empty());
    assert!(a.max_storage_buffer_binding_size >= 128 << 20);
    // f16 kernels exactly when the adapter has shader-f16.
    assert_eq!(d.uses_f16(), a.shader_f16);
    assert_eq!(a.shader_f16, a.features.iter().any(|f| f == "SHADER_F16"));
    let list = ggweb::backend::webgpu::enumerate_adapters().await;
    assert!(!list.is_empty());
}

#[wasm_bindgen_test]
async fn binary_ops_broadcast_and_strided() {
    let devs = devices().await;
    for (opi, name) in ["add", "sub", "mul", "div"].iter().enumerate() {
        for bshape in [[13, 7, 3, 2], [13, 1, 3, 1], [1, 7, 1, 2]] {
            check(&devs, &format!("{name} {bshape:?}"), F32_TOL, |ctx| {
                let a = ctx.new_tensor(DType::F32, &[13, 7, 3, 2])?;
                let b = ctx.new_tensor(DType::F32, &bshape)?;
                let mut rng = Rng::new(1 + opi as u64);
                let mut inputs = random_inputs(ctx, &[a], &mut rng);
                inputs.push((b, Data::F(rng.vec(ctx.tensor(b).nelements(), 0.5, 2.0))));
                let out = match opi {
                    0 => ctx.add(a, b)?,
                    1 => ctx.sub(a, b)?,
                    2 => ctx.mul(a, b)?,
                    _ => ctx.div(a, b)?,
                };
                Ok(Case { inputs, out })
            })
            .await;
        }
    }
    check(&devs, "add permuted", F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[7, 13, 3])?;
        let b = ctx.new_tensor(DType::F32, &[13, 7, 3])?;
        let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(9));
        let ap = ctx.permute(a, [1, 0, 2, 3])?;
        let out = ctx.add(ap, b)?;
        Ok(Case { inputs, out })
    })
    .await;
}

#[wasm_bindgen_test]
async fn unary_scale_and_repeat() {
    let devs = devices().await;
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
        check(&devs, &format!("unary {op:?}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
            let inputs = vec![(a, Data::F(Rng::new(3).vec(37 * 15, -4.0, 4.0)))];
            let out = ctx.unary(a, op)?;
            Ok(Case { inputs, out })
        })
        .await;
    }
    check(&devs, "scale_bias", F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[37, 5, 3])?;
        let inputs = random_inputs(ctx, &[a], &mut Rng::new(4));
        let out = ctx.scale_bias(a, 0.37, -1.5)?;
        Ok(Case { inputs, out })
    })
    .await;
    for k in 0..3 {
        check(&devs, &format!("sqr/sqrt/log {k}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(DType::F32, &[29, 3, 2])?;
            let inputs = vec![(a, Data::F(Rng::new(5).vec(29 * 6, 0.1, 3.0)))];
            let out = match k {
                0 => ctx.sqr(a)?,
                1 => ctx.sqrt(a)?,
                _ => ctx.log(a)?,
            };
            Ok(Case { inputs, out })
        })
        .await;
    }
    check(&devs, "repeat", F32_TOL, |ctx| {
        let a = ctx.new_tensor(DType::F32, &[5, 1, 3])?;
        let b = ctx.new_tensor(DType::F32, &[10, 4, 3, 2])?;
        let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(6));
        let out = ctx.repeat(a, b)?;
        Ok(Case { inputs, out })
    })
    .await;
}

#[wasm_bindgen_test]
async fn cpy_cont_types_and_concat() {
    let devs = devices().await;
    for (from, to) in [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
    ] {
        check(
            &devs,
            &format!("cast {from}->{to} of a transposed view"),
            F32_TOL,
            |ctx| {
                let a = ctx.new_tensor(from, &[11, 7, 3])?;
                let inputs = random_inputs(ctx, &[a], &mut Rng::new(7));
                let t = ctx.transpose(a)?;
                let c = ctx.cast(t, to)?;
                let out = ctx.cast(c, DType::F32)?;
                Ok(Case { inputs, out })
            },
        )
        .await;
        check(
            &devs,
            &format!("cpy {from}->{to} into a view"),
            F32_TOL,
            |ctx| {
                let a = ctx.new_tensor(from, &[9, 5])?;
                let b = ctx.new_tensor(to, &[9, 8])?;
                let mut inputs = random_inputs(ctx, &[a], &mut Rng::new(8));
                inputs.push((b, Data::F(vec![0.0; 72])));
                let bv = ctx.view(b, &[9, 5], &[ctx.tensor(b).nb[1]], ctx.tensor(b).nb[1] * 2)?;
                let c = ctx.cpy(a, bv)?;
                let out = ctx.cast(c, DType::F32)?;
                Ok(Case { inputs, out })
            },
        )
        .await;
    }
    for dim in 0..4 {
        check(&devs, &format!("concat dim {dim}"), F32_TOL, |ctx| {
            let mut sa = [5, 3, 2, 2];
            sa[dim] = 4;
            let a = ctx.new_tensor(DType::F32, &sa)?;
            let b = ctx.new_tensor(DType::F32, &[5, 3, 2, 2])?;
            let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(10));
            let out = ctx.concat(a, b, dim)?;
            Ok(Case { inputs, out })
        })
        .await;
    }
}

#[wasm_bindgen_test]
async fn norms_softmax_reductions() {
    let devs = devices().await;
    for rms in [false, true] {
        check(&devs, &format!("norm rms={rms}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(DType::F32, &[301, 5, 3])?;
            let inputs = random_inputs(ctx, &[a], &mut Rng::new(11));
            let out = if rms {
                ctx.rms_norm(a, 1e-5)?
            } else {
                ctx.norm(a, 1e-5)?
            };
            Ok(Case { inputs, out })
        })
        .await;
    }
    for (mask, max_bias) in [
        (None, 0.0),
        (Some(DType::F32), 0.0),
        (Some(DType::F16), 0.0),
        (Some(DType::F32), 8.0),
    ] {
        check(
            &devs,
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
        )
        .await;
    }
    for k in 0..4 {
        check(&devs, &format!("reduction {k}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(DType::F32, &[301, 7])?;
            let inputs = random_inputs(ctx, &[a], &mut Rng::new(13));
            let out = match k {
                0 => ctx.sum_rows(a)?,
                1 => ctx.mean(a)?,
                2 => ctx.sum(a)?,
                _ => ctx.argmax(a)?,
            };
            Ok(Case { inputs, out })
        })
        .await;
    }
}

#[wasm_bindgen_test]
async fn rope_normal_and_neox() {
    let devs = devices().await;
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (n_dims, ff, ext) in [(64, false, 0.0), (48, true, 0.0), (64, false, 1.0)] {
            check(
                &devs,
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
            )
            .await;
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

#[wasm_bindgen_test]
async fn get_rows_every_weight_type() {
    let devs = devices().await;
    for t in WEIGHT_TYPES {
        check(&devs, &format!("get_rows {t}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(t, &[512, 9, 2])?;
            let r = ctx.new_tensor(DType::I32, &[5, 2])?;
            let mut rng = Rng::new(15);
            let mut inputs = random_inputs(ctx, &[a], &mut rng);
            inputs.push((r, Data::I((0..10).map(|_| rng.idx(9) as i32).collect())));
            let out = ctx.get_rows(a, r)?;
            Ok(Case { inputs, out })
        })
        .await;
    }
}

#[wasm_bindgen_test]
async fn mul_mat_every_weight_type() {
    let devs = devices().await;
    for t in WEIGHT_TYPES {
        for n in [1usize, 13, 67] {
            check(
                &devs,
                &format!("mul_mat {t} m=19 n={n} k=512"),
                mm_tol(t),
                |ctx| {
                    let a = ctx.new_tensor(t, &[512, 19])?;
                    let b = ctx.new_tensor(DType::F32, &[512, n])?;
                    let inputs = random_inputs(ctx, &[a, b], &mut Rng::new(16));
                    let out = ctx.mul_mat(a, b)?;
                    Ok(Case { inputs, out })
                },
            )
            .await;
        }
    }
    for n in [1usize, 7] {
        check(
            &devs,
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
        )
        .await;
    }
}

#[wasm_bindgen_test]
async fn im2col_conv_pool() {
    let devs = devices().await;
    for is_2d in [true, false] {
        check(&devs, &format!("im2col 2d={is_2d}"), F32_TOL, |ctx| {
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
        })
        .await;
    }
    check(&devs, "conv_2d", F32_TOL, |ctx| {
        let k = ctx.new_tensor(DType::F32, &[3, 3, 2, 4])?;
        let x = ctx.new_tensor(DType::F32, &[11, 9, 2, 2])?;
        let inputs = random_inputs(ctx, &[k, x], &mut Rng::new(19));
        let out = ctx.conv_2d(k, x, 1, 1, 1, 1, 1, 1)?;
        Ok(Case { inputs, out })
    })
    .await;
    for op in [PoolOp::Max, PoolOp::Avg] {
        check(&devs, &format!("pool_2d {op:?}"), F32_TOL, |ctx| {
            let a = ctx.new_tensor(DType::F32, &[11, 9, 3, 2])?;
            let inputs = random_inputs(ctx, &[a], &mut Rng::new(20));
            let out = ctx.pool_2d(a, op, 3, 2, 2, 2, 1, 1)?;
            Ok(Case { inputs, out })
        })
        .await;
    }
}

#[wasm_bindgen_test]
async fn supports_op_is_exact() {
    for (path, dev) in devices().await {
        let mut ctx = Context::new();
        let a = ctx.new_tensor(DType::Q2_K, &[256, 4]).unwrap();
        let b = ctx.new_tensor(DType::F32, &[256, 2]).unwrap();
        let mm = ctx.mul_mat(a, b).unwrap();
        assert!(!dev.supports_op(&ctx, mm), "[{path}] q2_K mul_mat");
        assert!(dev.explain_op(&ctx, mm).unwrap().contains("MUL_MAT"));
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
        let ok = ctx.new_tensor(DType::Q4_K, &[256, 3]).unwrap();
        let y2 = ctx.mul_mat(ok, b).unwrap();
        assert!(dev.supports_op(&ctx, y2), "[{path}] q4_K mul_mat");
    }
}

/// A graph with an op WebGPU lacks (f16 add) splits across WebGPU and the CPU; the copies out of
/// WebGPU memory are async (`compute_planned_async`), and the result matches the CPU alone.
#[wasm_bindgen_test]
async fn scheduler_splits_webgpu_and_cpu_async() {
    use ggweb::backend::sched::Scheduler;
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
    let mut ctx = Context::new();
    let (w, x, out) = build(&mut ctx).unwrap();
    let graph = Graph::build(&ctx, &[out]);
    let _b = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    ctx.set_f32(w, &wv).unwrap();
    ctx.set_f32(x, &xv).unwrap();
    CpuBackend::new(1).graph_compute(&ctx, &graph).unwrap();
    let reference = ctx.get_f32(out).unwrap();
    for (path, dev) in devices().await {
        let mut ctx = Context::new();
        let (w, x, out) = build(&mut ctx).unwrap();
        let wb = ggweb::alloc::alloc_tensors(&mut ctx, &[w], &dev.buffer_type())
            .unwrap()
            .unwrap();
        wb.set_usage(BufferUsage::Weights);
        ctx.set_f32(w, &wv).unwrap();
        let graph = Graph::build(&ctx, &[out]);
        let mut sched = Scheduler::new(vec![
            dev.init_backend().unwrap(),
            Box::new(CpuBackend::new(1)),
        ])
        .unwrap();
        sched.plan(&mut ctx, &graph).unwrap();
        ctx.set_f32(x, &xv).unwrap();
        // The blocking path must refuse (a typed error, not a trap) where a read crosses out of
        // WebGPU memory; the async one works.
        assert!(
            sched.compute_planned(&ctx).is_err(),
            "[{path}] blocking read"
        );
        sched.compute_planned_async(&ctx).await.unwrap();
        let got = read_f32_async(&ctx, out).await.unwrap();
        let used: std::collections::BTreeSet<usize> =
            sched.splits.iter().map(|s| s.backend).collect();
        assert!(
            used.contains(&0) && used.contains(&1),
            "[{path}] expected a split, got {used:?}"
        );
        let e = nmse(&got, &reference);
        assert!(e < mm_tol(DType::Q4_0), "[{path}] split graph NMSE {e:.3e}");
    }
}

static FC: &[u8] = include_bytes!("../../crate/assets/mnist-fc-f32.gguf");
static CNN: &[u8] = include_bytes!("../../crate/assets/mnist-cnn-f32.gguf");
static IMAGES_GZ: &[u8] = include_bytes!("../../crate/assets/t10k-images-idx3-ubyte.gz");

/// MNIST through `Mnist::with_backend(WebGpu)` and `logits_async` on 1,000 t10k images: the same
/// predictions as the CPU and logits within f32 NMSE (the full-set accuracy runs in the e2e).
#[wasm_bindgen_test]
async fn mnist_on_webgpu_matches_cpu() {
    ggweb::backend::webgpu::init_default_device()
        .await
        .expect("adapter");
    let raw = idx::maybe_gunzip(IMAGES_GZ).expect("gunzip");
    let (_, images) = idx::parse_images(&raw).expect("idx images");
    let images = &images[..1000 * 784];
    for (name, file) in [("fc", FC), ("cnn", CNN)] {
        let bytes: Arc<dyn HostBytes> = Arc::new(file.to_vec());
        let mut cpu = Mnist::from_bytes(bytes.clone(), 1).expect("cpu model");
        let reference = cpu.logits(images).expect("cpu logits");
        let mut gpu = Mnist::with_backend(bytes, BackendChoice::WebGpu, 1).expect("gpu model");
        assert!(gpu.backend_report().starts_with("WebGPU"), "{name}");
        // The blocking API refuses WebGPU reads in the browser with an error.
        assert!(
            gpu.logits(&images[..784]).is_err(),
            "{name}: blocking logits"
        );
        let got = gpu.logits_async(images).await.expect("webgpu logits");
        let e = nmse(&got, &reference);
        assert!(e < F32_TOL, "mnist-{name}: NMSE {e:.3e}");
        let am = |v: &[f32]| {
            v.chunks(10)
                .map(ggweb::models::mnist::argmax)
                .collect::<Vec<_>>()
        };
        assert_eq!(am(&got), am(&reference), "mnist-{name}: predictions");
        let p = gpu.last_placements().expect("placements");
        assert!(
            p.nodes[0].1 > 0,
            "{name}: nothing ran on WebGPU: {:?}",
            p.nodes
        );
        assert!(p.elsewhere.is_empty(), "{name}: {:?}", p.elsewhere);
    }
}
