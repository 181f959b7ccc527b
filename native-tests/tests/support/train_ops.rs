//! The backward and optimizer kernels against their scalar references
//! (`ggweb::backend::cpu::reference::train`) on seeded random data and odd shapes: run on the CPU
//! (1 and 3 threads) by ops_train.rs and on WebGPU (f16 and f32 paths) by webgpu_train.rs.
//! Tolerance: max |kernel - reference| <= 1e-5 * (1 + max |reference|) (f32 kernels, f64
//! references; unary derivatives 1e-4, the reference differentiates numerically).

use std::sync::Arc;

use ggweb::alloc::GraphAllocator;
use ggweb::backend::cpu::reference::basic::Dense;
use ggweb::backend::cpu::reference::train as reference;
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::backend::webgpu::WebGpuDevice;
use ggweb::backend::{Backend, Device};
use ggweb::tensor::{Op, PoolOp, RopeMode, RopeParams, UnaryOp};
use ggweb::{Context, DType, Graph, TensorId};
use ggweb_testing::Rng;

/// Where the kernels run.
#[derive(Clone)]
pub enum Exec {
    /// The CPU backend, on 1 and on 3 threads.
    #[allow(dead_code)]
    Cpu,
    /// A WebGPU device; every node must run there.
    #[allow(dead_code)]
    WebGpu(Arc<WebGpuDevice>),
}

struct H {
    exec: Exec,
    ctx: Context,
    rng: Rng,
    f: Vec<(TensorId, Vec<f32>)>,
    i: Vec<(TensorId, Vec<i32>)>,
}

impl H {
    fn new(seed: u64, exec: &Exec) -> H {
        H {
            exec: exec.clone(),
            ctx: Context::new(),
            rng: Rng::new(seed),
            f: Vec::new(),
            i: Vec::new(),
        }
    }
    fn input(&mut self, ne: [usize; 4], lo: f32, hi: f32) -> (TensorId, Dense) {
        let id = self.ctx.new_tensor(DType::F32, &ne).unwrap();
        self.ctx.set_input(id);
        let v = self.rng.vec(ne.iter().product(), lo, hi);
        self.f.push((id, v.clone()));
        (id, Dense::new(ne, v))
    }
    fn ints(&mut self, ne: &[usize], v: Vec<i32>) -> TensorId {
        let id = self.ctx.new_tensor(DType::I32, ne).unwrap();
        self.ctx.set_input(id);
        self.i.push((id, v));
        id
    }
    /// Compute `outs` on the exec's backend (the CPU with 1 and with 3 threads, or the WebGPU
    /// device); returns each run's values.
    fn run(&mut self, outs: &[TensorId]) -> Vec<Vec<Vec<f32>>> {
        for &o in outs {
            self.ctx.set_output(o);
        }
        let g = Graph::build(&self.ctx, outs);
        let (buft, mut backends): (_, Vec<Box<dyn Backend>>) = match &self.exec {
            Exec::Cpu => (
                cpu_buffer_type(),
                vec![
                    Box::new(CpuBackend::with_threads_forced(1)),
                    Box::new(CpuBackend::with_threads_forced(3)),
                ],
            ),
            Exec::WebGpu(dev) => {
                for &n in &g.nodes {
                    let t = self.ctx.tensor(n);
                    assert!(
                        t.op.is_view() || dev.supports_op(&self.ctx, n),
                        "{} '{}' would leave WebGPU: {:?}",
                        t.op.name(),
                        t.name,
                        dev.explain_op(&self.ctx, n)
                    );
                }
                (dev.buffer_type(), vec![dev.init_backend().unwrap()])
            }
        };
        let mut alloc = GraphAllocator::new(buft);
        alloc.alloc_graph(&mut self.ctx, &g).unwrap();
        let mut runs = Vec::new();
        for be in backends.iter_mut() {
            for (id, v) in &self.f {
                self.ctx.set_f32(*id, v).unwrap();
            }
            for (id, v) in &self.i {
                self.ctx.set_i32(*id, v).unwrap();
            }
            be.graph_compute(&self.ctx, &g).unwrap();
            be.synchronize().unwrap();
            runs.push(outs.iter().map(|&o| self.ctx.get_f32(o).unwrap()).collect());
        }
        runs
    }
}

fn close(label: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let scale = 1.0 + want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let worst = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        worst <= tol * scale,
        "{label}: max diff {worst} (scale {scale})"
    );
}

/// Run one output and compare both thread counts with `want`.
fn check(h: &mut H, label: &str, out: TensorId, want: &Dense, tol: f32) {
    assert_eq!(h.ctx.tensor(out).ne, want.ne, "{label}: shape");
    for (k, run) in h.run(&[out]).iter().enumerate() {
        close(&format!("{label} run {k}"), &run[0], &want.data, tol);
    }
}

pub fn repeat_back(exec: &Exec) {
    for (k, (ane, ne)) in [
        ([6, 3, 4, 2], [3, 1, 2, 1]),
        ([5, 7, 3, 1], [5, 7, 1, 1]),
        ([9, 1, 1, 3], [1, 1, 1, 1]),
        // More tiles than a WebGPU workgroup has lanes (a bias gradient over a batch).
        ([13, 50, 20, 1], [13, 1, 1, 1]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut h = H::new(k as u64, exec);
        let (a, ad) = h.input(ane, -1.0, 1.0);
        let out = h.ctx.repeat_back_to(a, ne).unwrap();
        check(
            &mut h,
            &format!("repeat_back {ane:?}->{ne:?}"),
            out,
            &reference::repeat_back(&ad, ne),
            1e-5,
        );
    }
}

pub fn unary_back(exec: &Exec) {
    use UnaryOp::*;
    for (k, u) in [Abs, Neg, Relu, Gelu, GeluErf, Silu, Tanh, Sigmoid, Exp]
        .into_iter()
        .enumerate()
    {
        let mut h = H::new(10 + k as u64, exec);
        let (g, gd) = h.input([7, 3, 2, 1], -1.0, 1.0);
        // Away from 0 (the kinks of abs and relu): [-2, -0.1) and [0.1, 2).
        let (x, mut xd) = h.input([7, 3, 2, 1], 0.1, 2.0);
        for (i, v) in xd.data.iter_mut().enumerate() {
            if i % 2 == 1 {
                *v = -*v;
            }
        }
        h.f.last_mut().unwrap().1 = xd.data.clone();
        let out = h.ctx.unary_back(g, x, u).unwrap();
        check(
            &mut h,
            &format!("unary_back {u:?}"),
            out,
            &reference::unary_back(u, &gd, &xd),
            1e-4,
        );
    }
}

pub fn norm_back(exec: &Exec) {
    for (k, rms) in [false, true].into_iter().enumerate() {
        let mut h = H::new(20 + k as u64, exec);
        let (g, gd) = h.input([11, 3, 2, 1], -1.0, 1.0);
        let (x, xd) = h.input([11, 3, 2, 1], -2.0, 2.0);
        let out = h.ctx.norm_back(g, x, 1e-5, rms).unwrap();
        let want = reference::norm_back(&gd, &xd, 1e-5, rms);
        check(&mut h, &format!("norm_back rms={rms}"), out, &want, 1e-5);
    }
}

pub fn view_back_and_get_rows_back(exec: &Exec) {
    let mut h = H::new(30, exec);
    let (g, gd) = h.input([3, 4, 1, 1], -1.0, 1.0);
    // Every other element of every third row of a [7, 13] source, from element 1; and a view
    // with stride 0 (one element picked 4 times) sums.
    let ne = [7, 13, 1, 1];
    let nb = [8, 3 * 28, 0, 0];
    let out = h.ctx.view_back(g, ne, nb, 4).unwrap();
    check(
        &mut h,
        "view_back",
        out,
        &reference::view_back(&gd, ne, nb, 4),
        1e-5,
    );
    let mut h = H::new(31, exec);
    let (g, gd) = h.input([1, 4, 1, 1], -1.0, 1.0);
    let out = h.ctx.view_back(g, [5, 1, 1, 1], [0, 0, 0, 0], 8).unwrap();
    check(
        &mut h,
        "view_back stride 0",
        out,
        &reference::view_back(&gd, [5, 1, 1, 1], [0; 4], 8),
        1e-5,
    );

    let mut h = H::new(32, exec);
    let (g, gd) = h.input([5, 6, 2, 1], -1.0, 1.0);
    let rows = vec![3, 0, 3, 6, 1, 3, 1, 1, 5, 2, 0, 0];
    let r = h.ints(&[6, 2], rows.clone());
    let like = h.ctx.new_tensor(DType::F32, &[5, 7, 2, 1]).unwrap();
    let out = h.ctx.get_rows_back(g, r, like).unwrap();
    check(
        &mut h,
        "get_rows_back",
        out,
        &reference::get_rows_back(&gd, &rows, [5, 7, 2, 1]),
        1e-5,
    );
}

pub fn im2col_back(exec: &Exec) {
    /// Input shape, kernel shape, [s0, s1, p0, p1, d0, d1], 2D.
    type Case = ([usize; 4], [usize; 4], [usize; 6], bool);
    let cases: [Case; 5] = [
        ([6, 5, 2, 2], [3, 3, 2, 4], [1, 1, 1, 1, 1, 1], true),
        ([9, 7, 3, 1], [2, 3, 3, 1], [2, 1, 0, 1, 1, 2], true),
        ([11, 2, 3, 1], [3, 2, 1, 1], [2, 0, 1, 0, 2, 0], false),
        ([28, 28, 1, 3], [3, 3, 1, 8], [1, 1, 1, 1, 1, 1], true),
        // Dilated, padding wider than the output span: the CPU kernel starts each input
        // element's kernel taps past those no output reaches (a fuzzer's 22 s case).
        ([40, 2, 1, 1], [30, 2, 1, 1], [1, 0, 50, 0, 3, 0], false),
    ];
    for (k, (ine, kne, [s0, s1, p0, p1, d0, d1], is_2d)) in cases.into_iter().enumerate() {
        let mut h = H::new(40 + k as u64, exec);
        let kernel = h.ctx.new_tensor(DType::F32, &kne).unwrap();
        let probe = h.ctx.new_tensor(DType::F32, &ine).unwrap();
        let cols = h
            .ctx
            .im2col(kernel, probe, s0, s1, p0, p1, d0, d1, is_2d, DType::F32)
            .unwrap();
        let (cne, op) = (h.ctx.tensor(cols).ne, h.ctx.tensor(cols).op);
        let (g, gd) = h.input(cne, -1.0, 1.0);
        let out = h.ctx.im2col_back(g, kernel, ine, op).unwrap();
        let want = reference::im2col_back(&gd, ine, kne, [s0, s1], [p0, p1], [d0, d1], is_2d);
        check(
            &mut h,
            &format!("im2col_back {ine:?} {kne:?}"),
            out,
            &want,
            1e-5,
        );
    }
}

pub fn pool_2d_back(exec: &Exec) {
    for (k, (op, kk, s, p)) in [
        (PoolOp::Max, 2, 2, 0),
        (PoolOp::Max, 3, 2, 1),
        (PoolOp::Max, 3, 1, 1),
        (PoolOp::Avg, 2, 2, 0),
        (PoolOp::Avg, 3, 2, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let mut h = H::new(50 + k as u64, exec);
        let (x, xd) = h.input([9, 7, 3, 2], -1.0, 1.0);
        let pooled = h.ctx.pool_2d(x, op, kk, kk, s, s, p, p).unwrap();
        let pne = h.ctx.tensor(pooled).ne;
        let (g, gd) = h.input(pne, -1.0, 1.0);
        let out = h.ctx.pool_2d_back(g, x, op, kk, kk, s, s, p, p).unwrap();
        let want = reference::pool_2d_back(&gd, &xd, op, [kk, kk], [s, s], [p, p]);
        check(
            &mut h,
            &format!("pool_2d_back {op:?} k{kk} s{s} p{p}"),
            out,
            &want,
            1e-5,
        );
    }
}

pub fn rope_back(exec: &Exec) {
    for (k, mode) in [RopeMode::Normal, RopeMode::Neox].into_iter().enumerate() {
        let mut h = H::new(70 + k as u64, exec);
        let (g, gd) = h.input([10, 3, 4, 1], -1.0, 1.0);
        let pos = vec![0, 5, 17, 1000];
        let p = h.ints(&[4], pos.clone());
        let (ff, ffd) = h.input([4, 1, 1, 1], 0.5, 2.0);
        let mut params = RopeParams::new(8, mode, 10000.0);
        params.freq_scale = 0.5;
        params.ext_factor = 1.0;
        params.n_ctx_orig = 64;
        let out = h.ctx.rope_back(g, p, Some(ff), params).unwrap();
        let want = reference::rope_back(&gd, &pos, Some(&ffd.data), &params);
        check(
            &mut h,
            &format!("rope_back {mode:?} (YaRN)"),
            out,
            &want,
            1e-5,
        );
    }
}

pub fn optimizer_steps(exec: &Exec) {
    let n = 1001;
    let mut h = H::new(60, exec);
    let (w, wd) = h.input([n, 1, 1, 1], -1.0, 1.0);
    h.ctx.set_param(w);
    let (g, gd) = h.input([n, 1, 1, 1], -1.0, 1.0);
    let (state, sd) = h.input([n, 2, 1, 1], 0.0, 0.5);
    let hpv = [
        1e-2f32,
        0.9,
        0.999,
        1e-8,
        0.1,
        1.0 / (1.0 - 0.9f32.powi(3)),
        1.0 / (1.0 - 0.999f32.powi(3)),
    ];
    let hp = h.ctx.new_tensor_1d(DType::F32, 7).unwrap();
    h.ctx.set_input(hp);
    h.f.push((hp, hpv.to_vec()));
    let step = h.ctx.opt_step_adamw(w, g, state, hp).unwrap();
    assert_eq!(h.ctx.tensor(step).op, Op::OptStepAdamW);
    let [ww, wm, wv] = reference::adamw(&wd.data, &gd.data, &sd.data[..n], &sd.data[n..], hpv);
    let runs = h.run(&[step, state]);
    for (k, run) in runs.iter().enumerate() {
        close(&format!("adamw w run {k}"), &run[0], &ww, 1e-5);
        close(&format!("adamw m run {k}"), &run[1][..n], &wm, 1e-5);
        close(&format!("adamw v run {k}"), &run[1][n..], &wv, 1e-5);
    }
    // The step updated the parameter's own memory.
    close("adamw in place", &h.ctx.get_f32(w).unwrap(), &ww, 1e-5);

    let mut h = H::new(61, exec);
    let (w, wd) = h.input([7, 3, 5, 1], -1.0, 1.0);
    h.ctx.set_param(w);
    let (g, gd) = h.input([7, 3, 5, 1], -1.0, 1.0);
    let hp = h.ctx.new_tensor_1d(DType::F32, 2).unwrap();
    h.ctx.set_input(hp);
    h.f.push((hp, vec![0.05, 0.01]));
    let step = h.ctx.opt_step_sgd(w, g, hp).unwrap();
    let want = reference::sgd(&wd.data, &gd.data, 0.05, 0.01);
    for (k, run) in h.run(&[step]).iter().enumerate() {
        close(&format!("sgd run {k}"), &run[0], &want, 1e-6);
    }
}
