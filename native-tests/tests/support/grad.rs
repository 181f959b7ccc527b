//! The gradient-check cases (test-backend-ops' grad mode), run on the CPU by grad.rs and on
//! WebGPU by webgpu_train.rs (natively, `block_on`) and wasm-tests/tests/webgpu.rs (Chromium;
//! reads are awaited): for every op with a backward, the gradients
//! `Graph::build_backward` computes against central finite differences of the same graph's
//! loss, on random odd shapes. The loss is `sum(op(params...) * r)` with a random constant `r`,
//! so every output element is weighted differently.
//!
//! Finite differences: 4-point central stencil
//! `(-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)) / 12h`, the loss values read as f32 and the
//! stencil computed in f64. Tolerance per element: `|analytic - numeric| <= ATOL + RTOL *
//! |numeric|` with ATOL = 5e-4, RTOL = 5e-3 (the f32 rounding of a loss of magnitude ~10 over
//! h = 1e-2 is ~1e-4; non-smooth ops get inputs at least 4h from their kinks). The largest error
//! of each case is printed (`--nocapture`).

use std::sync::Arc;

use ggweb::alloc::GraphAllocator;
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::backend::webgpu::WebGpuDevice;
use ggweb::backend::{Backend, Device};
use ggweb::tensor::{PoolOp, RopeMode, RopeParams, UnaryOp};
use ggweb::{Context, DType, Graph, Result, TensorId};
use ggweb_testing::Rng;

pub const ATOL: f64 = 5e-4;
pub const RTOL: f64 = 5e-3;

/// Where the graphs run.
#[derive(Clone)]
pub enum Exec {
    /// The CPU backend on 3 threads.
    #[allow(dead_code)]
    Cpu,
    /// A WebGPU device; every node of the graph (forward and backward) must run on it.
    #[allow(dead_code)]
    WebGpu(Arc<WebGpuDevice>),
}

struct Case {
    exec: Exec,
    ctx: Context,
    rng: Rng,
    params: Vec<TensorId>,
    values: Vec<(TensorId, Vec<f32>)>,
    ints: Vec<(TensorId, Vec<i32>)>,
    h: f32,
}

impl Case {
    fn new(seed: u64, exec: &Exec) -> Case {
        Case {
            exec: exec.clone(),
            ctx: Context::new(),
            rng: Rng::new(seed),
            params: Vec::new(),
            values: Vec::new(),
            ints: Vec::new(),
            h: 1e-2,
        }
    }

    fn leaf(&mut self, ne: &[usize], vals: Vec<f32>, param: bool) -> TensorId {
        let id = self.ctx.new_tensor(DType::F32, ne).unwrap();
        if param {
            self.ctx.set_param(id);
            self.params.push(id);
        } else {
            self.ctx.set_input(id);
        }
        self.values.push((id, vals));
        id
    }

    /// A parameter with values uniform in [lo, hi).
    fn param(&mut self, ne: &[usize], lo: f32, hi: f32) -> TensorId {
        let n = ne.iter().product();
        let v = self.rng.vec(n, lo, hi);
        self.leaf(ne, v, true)
    }

    /// A parameter with values in ±[0.1, 1): away from 0, the kink of relu / abs.
    fn param_off0(&mut self, ne: &[usize]) -> TensorId {
        let n: usize = ne.iter().product();
        let v = (0..n)
            .map(|_| {
                let m = self.rng.f(0.1, 1.0);
                if self.rng.f(0.0, 1.0) < 0.5 {
                    -m
                } else {
                    m
                }
            })
            .collect();
        self.leaf(ne, v, true)
    }

    /// A parameter whose values are distinct by at least 0.05 (max pooling picks one clearly).
    fn param_distinct(&mut self, ne: &[usize]) -> TensorId {
        let n: usize = ne.iter().product();
        let mut v: Vec<f32> = (0..n).map(|i| i as f32 * 0.05 - 1.0).collect();
        for i in (1..n).rev() {
            v.swap(i, self.rng.idx(i + 1));
        }
        self.leaf(ne, v, true)
    }

    fn constant(&mut self, ne: &[usize], lo: f32, hi: f32) -> TensorId {
        let n = ne.iter().product();
        let v = self.rng.vec(n, lo, hi);
        self.leaf(ne, v, false)
    }

    fn ints(&mut self, ne: &[usize], vals: Vec<i32>) -> TensorId {
        let id = self.ctx.new_tensor(DType::I32, ne).unwrap();
        self.ctx.set_input(id);
        self.ints.push((id, vals));
        id
    }

    /// Check the gradients of `sum(out * r)` for every parameter; returns the largest error
    /// `|a - n| / (ATOL + RTOL |n|)` (passing when <= 1).
    async fn check(mut self, label: &str, out: TensorId) -> f64 {
        let ne = self.ctx.tensor(out).ne;
        let n: usize = ne.iter().product();
        let rv = self.rng.vec(n, 0.5, 1.5);
        let r = self.leaf(&ne, rv, false);
        let ctx = &mut self.ctx;
        let m = ctx.mul(out, r).unwrap();
        let loss = ctx.sum(m).unwrap();
        ctx.set_output(loss);
        let mut graph = Graph::build(ctx, &[loss]);
        graph.build_backward(ctx, loss).unwrap();
        let (buft, mut be): (_, Box<dyn Backend>) = match &self.exec {
            Exec::Cpu => (
                cpu_buffer_type(),
                Box::new(CpuBackend::with_threads_forced(3)),
            ),
            Exec::WebGpu(dev) => {
                for &n in &graph.nodes {
                    assert!(
                        ctx.tensor(n).op.is_view() || dev.supports_op(ctx, n),
                        "{label}: {} '{}' would leave WebGPU: {:?}",
                        ctx.tensor(n).op.name(),
                        ctx.tensor(n).name,
                        dev.explain_op(ctx, n)
                    );
                }
                (dev.buffer_type(), dev.init_backend().unwrap())
            }
        };
        let mut alloc = GraphAllocator::new(buft);
        alloc.alloc_graph(ctx, &graph).unwrap();
        ggweb::alloc::check_graph_allocation(ctx, &graph).unwrap();
        for (id, v) in &self.values {
            ctx.set_f32(*id, v).unwrap();
        }
        for (id, v) in &self.ints {
            ctx.set_i32(*id, v).unwrap();
        }
        ctx.set_f32(graph.loss_grad().unwrap(), &[1.0]).unwrap();
        let mut compute = |ctx: &Context| {
            be.graph_compute(ctx, &graph).unwrap();
            be.synchronize().unwrap();
        };
        compute(ctx);
        // Every gradient first: the finite differences below recompute the graph.
        let mut analytic: Vec<Vec<f32>> = Vec::new();
        for &p in &self.params {
            match graph.grad(p) {
                Some(g) => analytic.push(ctx.get_f32_async(g).await.unwrap()),
                None => panic!("{label}: no gradient for a parameter"),
            }
        }
        let mut worst = 0f64;
        let h = self.h;
        for (&p, analytic) in self.params.iter().zip(&analytic) {
            let base: Vec<f32> = self
                .values
                .iter()
                .find(|(id, _)| *id == p)
                .unwrap()
                .1
                .clone();
            for j in 0..base.len() {
                // The loss at base[j] + 2h, + h, - h, - 2h.
                let mut f = [0f64; 4];
                for (fk, d) in f.iter_mut().zip([2.0 * h, h, -h, -2.0 * h]) {
                    let mut v = base.clone();
                    v[j] += d;
                    ctx.set_f32(p, &v).unwrap();
                    compute(ctx);
                    *fk = ctx.get_f32_async(loss).await.unwrap()[0] as f64;
                }
                let [f2, f1, b1, b2] = f;
                let numeric = (-f2 + 8.0 * f1 - 8.0 * b1 + b2) / (12.0 * h as f64);
                let a = analytic[j] as f64;
                let err = (a - numeric).abs() / (ATOL + RTOL * numeric.abs());
                assert!(
                    err <= 1.0,
                    "{label}: d/dp[{j}] analytic {a} vs numeric {numeric}"
                );
                worst = worst.max(err);
            }
            ctx.set_f32(p, &base).unwrap();
        }
        println!("{label}: worst error {worst:.3} of tolerance");
        worst
    }
}

pub async fn binary_with_broadcast(exec: &Exec) {
    for (k, op) in ["add", "sub", "mul", "div"].iter().enumerate() {
        for (j, bne) in [[5, 3, 2, 1], [5, 1, 2, 1], [1, 3, 1, 1], [1, 1, 1, 1]]
            .iter()
            .enumerate()
        {
            let mut c = Case::new(100 + 10 * k as u64 + j as u64, exec);
            let a = c.param(&[5, 3, 2, 1], -1.0, 1.0);
            let b = if *op == "div" {
                c.param(bne, 0.5, 2.0)
            } else {
                c.param(bne, -1.0, 1.0)
            };
            let out = match *op {
                "add" => c.ctx.add(a, b),
                "sub" => c.ctx.sub(a, b),
                "mul" => c.ctx.mul(a, b),
                _ => c.ctx.div(a, b),
            }
            .unwrap();
            c.check(&format!("{op} b{bne:?}"), out).await;
        }
    }
}

pub async fn elementwise_and_reductions(exec: &Exec) {
    type Build = fn(&mut Context, TensorId) -> Result<TensorId>;
    let cases: [(&str, f32, f32, Build); 8] = [
        ("scale", -1.0, 1.0, |c, a| c.scale_bias(a, -1.7, 0.3)),
        ("sqr", -1.0, 1.0, |c, a| c.sqr(a)),
        ("sqrt", 0.5, 2.0, |c, a| c.sqrt(a)),
        ("log", 0.5, 2.0, |c, a| c.log(a)),
        ("sum", -1.0, 1.0, |c, a| c.sum(a)),
        ("sum_rows", -1.0, 1.0, |c, a| c.sum_rows(a)),
        ("mean", -1.0, 1.0, |c, a| c.mean(a)),
        ("cont", -1.0, 1.0, |c, a| c.cont(a)),
    ];
    for (k, (name, lo, hi, f)) in cases.iter().enumerate() {
        let mut c = Case::new(200 + k as u64, exec);
        let a = c.param(&[7, 3, 2, 1], *lo, *hi);
        let out = f(&mut c.ctx, a).unwrap();
        c.check(name, out).await;
    }
}

pub async fn unary_functions(exec: &Exec) {
    use UnaryOp::*;
    for (k, u) in [Abs, Neg, Relu, Gelu, GeluErf, Silu, Tanh, Sigmoid, Exp]
        .into_iter()
        .enumerate()
    {
        let mut c = Case::new(300 + k as u64, exec);
        let a = c.param_off0(&[7, 3, 2, 1]);
        let out = c.ctx.unary(a, u).unwrap();
        c.check(&format!("unary {u:?}"), out).await;
    }
}

pub async fn repeat_concat_and_views(exec: &Exec) {
    let mut c = Case::new(400, exec);
    let a = c.param(&[5, 1, 2, 1], -1.0, 1.0);
    // The target of a repeat gives only its shape: it is no source of the node.
    let like = c.ctx.new_tensor(DType::F32, &[10, 3, 4, 1]).unwrap();
    let out = c.ctx.repeat(a, like).unwrap();
    c.check("repeat", out).await;
    for dim in 0..4 {
        let mut c = Case::new(410 + dim as u64, exec);
        let mut ne = [3, 2, 2, 2];
        let a = c.param(&ne, -1.0, 1.0);
        ne[dim] = 1 + dim;
        let b = c.param(&ne, -1.0, 1.0);
        let out = c.ctx.concat(a, b, dim).unwrap();
        c.check(&format!("concat dim {dim}"), out).await;
    }
    let mut c = Case::new(420, exec);
    let a = c.param(&[5, 3, 2, 1], -1.0, 1.0);
    let r = c.ctx.reshape(a, &[3, 10]).unwrap();
    let out = c.ctx.transpose(r).unwrap();
    c.check("reshape + transpose", out).await;
    let mut c = Case::new(421, exec);
    let a = c.param(&[5, 3, 2, 3], -1.0, 1.0);
    let out = c.ctx.permute(a, [2, 0, 3, 1]).unwrap();
    c.check("permute", out).await;
    // A strided view (every other row, from the second) of a parameter used twice: the view's
    // gradient flows to its source and sums with the direct use.
    let mut c = Case::new(422, exec);
    let a = c.param(&[5, 6], -1.0, 1.0);
    let nb1 = c.ctx.tensor(a).nb[1];
    let v = c.ctx.view(a, &[4, 3], &[2 * nb1], nb1 + 4).unwrap();
    let v = c.ctx.cont(v).unwrap();
    let s = c.ctx.sum_rows(a).unwrap();
    let s = c.ctx.view(s, &[1, 3], &[8], 0).unwrap();
    let out = c.ctx.add(v, s).unwrap();
    c.check("view + accumulation", out).await;
    let mut c = Case::new(423, exec);
    let a = c.param(&[5, 3, 2, 1], -1.0, 1.0);
    let dst = c.constant(&[15, 2], 0.0, 1.0);
    let out = c.ctx.cpy(a, dst).unwrap();
    c.check("cpy", out).await;
}

pub async fn mul_mat_with_broadcast(exec: &Exec) {
    for (k, (ane, bne)) in [
        ([7, 5, 1, 1], [7, 3, 1, 1]),
        ([9, 4, 3, 1], [9, 5, 3, 2]),
        ([7, 5, 2, 1], [7, 3, 4, 3]),
    ]
    .iter()
    .enumerate()
    {
        let mut c = Case::new(500 + k as u64, exec);
        let a = c.param(ane, -1.0, 1.0);
        let b = c.param(bne, -1.0, 1.0);
        let out = c.ctx.mul_mat(a, b).unwrap();
        c.check(&format!("mul_mat {ane:?} x {bne:?}"), out).await;
    }
}

pub async fn softmax_norms_and_loss(exec: &Exec) {
    let mut c = Case::new(600, exec);
    let a = c.param(&[7, 3, 2, 1], -2.0, 2.0);
    let out = c.ctx.soft_max(a).unwrap();
    c.check("soft_max", out).await;
    let mut c = Case::new(601, exec);
    let a = c.param(&[7, 3, 2, 1], -2.0, 2.0);
    let mask = c.constant(&[7, 4], -1.0, 0.0);
    let out = c.ctx.soft_max_ext(a, Some(mask), 0.7, 0.0).unwrap();
    c.check("soft_max_ext scale + mask", out).await;
    let mut c = Case::new(602, exec);
    let a = c.param(&[7, 3, 2, 1], -1.0, 1.0);
    let out = c.ctx.norm(a, 1e-5).unwrap();
    c.check("norm", out).await;
    let mut c = Case::new(603, exec);
    let a = c.param(&[7, 3, 2, 1], -1.0, 1.0);
    let out = c.ctx.rms_norm(a, 1e-5).unwrap();
    c.check("rms_norm", out).await;
    let mut c = Case::new(604, exec);
    let a = c.param(&[7, 5, 1, 1], -2.0, 2.0);
    let lv: Vec<f32> = (0..35)
        .map(|i| if i % 7 == (i / 7) % 7 { 1.0 } else { 0.0 })
        .collect();
    let labels = c.leaf(&[7, 5], lv, false);
    let out = c.ctx.cross_entropy_loss(a, labels).unwrap();
    c.check("cross_entropy_loss", out).await;
}

pub async fn rope_and_get_rows(exec: &Exec) {
    for (k, mode) in [RopeMode::Normal, RopeMode::Neox].into_iter().enumerate() {
        let mut c = Case::new(700 + k as u64, exec);
        let a = c.param(&[8, 3, 4, 1], -1.0, 1.0);
        let pos = c.ints(&[4], vec![0, 3, 7, 11]);
        let out = c
            .ctx
            .rope_ext(a, pos, None, RopeParams::new(6, mode, 10000.0))
            .unwrap();
        c.check(&format!("rope {mode:?}"), out).await;
    }
    let mut c = Case::new(710, exec);
    let a = c.param(&[5, 7, 2, 1], -1.0, 1.0);
    // Row 3 is picked twice in the first slice: its gradient sums both.
    let rows = c.ints(&[4, 2], vec![3, 0, 3, 6, 1, 1, 5, 2]);
    let out = c.ctx.get_rows(a, rows).unwrap();
    c.check("get_rows", out).await;
}

pub async fn conv_and_pool(exec: &Exec) {
    let mut c = Case::new(800, exec);
    let k = c.param(&[3, 3, 2, 3], -1.0, 1.0);
    let x = c.param(&[6, 5, 2, 2], -1.0, 1.0);
    let out = c.ctx.conv_2d(k, x, 1, 1, 1, 1, 1, 1).unwrap();
    c.check("conv_2d (im2col + mul_mat)", out).await;
    let mut c = Case::new(801, exec);
    let k = c.constant(&[3, 2, 3], 0.0, 1.0);
    let x = c.param(&[9, 2, 2], -1.0, 1.0);
    let out = c
        .ctx
        .im2col(k, x, 2, 0, 1, 0, 2, 0, false, DType::F32)
        .unwrap();
    c.check("im2col 1d stride 2 dilation 2", out).await;
    let mut c = Case::new(802, exec);
    let k = c.constant(&[2, 3, 2, 1], 0.0, 1.0);
    let x = c.param(&[7, 6, 2, 1], -1.0, 1.0);
    let out = c
        .ctx
        .im2col(k, x, 2, 1, 0, 1, 1, 2, true, DType::F32)
        .unwrap();
    c.check("im2col 2d strided, dilated", out).await;
    for (j, (op, kk, s, p)) in [
        (PoolOp::Max, 2, 2, 0),
        (PoolOp::Max, 3, 2, 1),
        (PoolOp::Avg, 2, 2, 0),
        (PoolOp::Avg, 3, 2, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = Case::new(810 + j as u64, exec);
        c.h = 5e-3;
        let x = c.param_distinct(&[7, 5, 2, 1]);
        let out = c.ctx.pool_2d(x, op, kk, kk, s, s, p, p).unwrap();
        c.check(&format!("pool_2d {op:?} k{kk} s{s} p{p}"), out)
            .await;
    }
}

pub async fn a_small_network_end_to_end(exec: &Exec) {
    // fc layer, relu, fc layer, cross-entropy: the MNIST fc model at toy size, every
    // parameter checked at once.
    let mut c = Case::new(900, exec);
    let x = c.constant(&[9, 5], 0.0, 1.0);
    let w1 = c.param(&[9, 7], -0.5, 0.5);
    let b1 = c.param(&[7], -0.5, 0.5);
    let w2 = c.param(&[7, 4], -0.5, 0.5);
    let b2 = c.param(&[4], -0.5, 0.5);
    let lv: Vec<f32> = (0..20)
        .map(|i| if i % 4 == (i / 4) % 4 { 1.0 } else { 0.0 })
        .collect();
    let labels = c.leaf(&[4, 5], lv, false);
    let ctx = &mut c.ctx;
    let h = ctx.mul_mat(w1, x).unwrap();
    let h = ctx.add(h, b1).unwrap();
    let h = ctx.unary(h, UnaryOp::Tanh).unwrap();
    let o = ctx.mul_mat(w2, h).unwrap();
    let o = ctx.add(o, b2).unwrap();
    let out = ctx.cross_entropy_loss(o, labels).unwrap();
    c.check("fc-tanh-fc-cross_entropy", out).await;
}
