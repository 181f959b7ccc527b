//! Shared helpers for the op tests: seeded random leaves (with non-contiguous layouts), alloc +
//! set + compute + get, dense logical values for views, and tolerance checks.
#![allow(dead_code)]

use std::collections::HashMap;

use ggweb::backend::cpu::reference::basic::{compute as reference, Dense};
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::{alloc, Context, DType, Graph, Result, TensorId};
pub use ggweb_testing::nmse;
use ggweb_testing::Rng;

/// How a leaf input is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Dense.
    Contig,
    /// A transpose of a dense [ne1, ne0, ne2, ne3] tensor (nb0 != type size).
    Transposed,
    /// A permutation of a dense [ne1, ne2, ne0, ne3] tensor.
    Permuted,
    /// Rows of a wider dense tensor, at an offset (nb0 = type size, rows strided).
    Padded,
}

pub const LAYOUTS: [Layout; 4] = [
    Layout::Contig,
    Layout::Transposed,
    Layout::Permuted,
    Layout::Padded,
];

/// Values a leaf is filled with.
#[derive(Debug, Clone)]
pub enum Fill {
    /// Uniform in [lo, hi).
    Uniform(f32, f32),
    /// Exactly these (logical order of the dense base).
    Values(Vec<f32>),
    /// i32 uniform in [lo, hi).
    Int(i32, i32),
}

pub struct Harness {
    pub ctx: Context,
    pub rng: Rng,
    fills: Vec<(TensorId, Fill)>,
    /// Stored values (as read back, i.e. rounded / quantized) of every dense leaf.
    stored: HashMap<TensorId, Vec<f32>>,
}

impl Harness {
    pub fn new(seed: u64) -> Self {
        Harness {
            ctx: Context::new(),
            rng: Rng::new(seed),
            fills: Vec::new(),
            stored: HashMap::new(),
        }
    }

    pub fn rng_f32(&mut self, lo: f32, hi: f32) -> f32 {
        self.rng.f(lo, hi)
    }

    /// Uniform in [lo, hi).
    fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + self.rng.idx(hi.abs_diff(lo) as usize) as i32
    }

    /// A dense leaf filled by `fill` at `finish`.
    pub fn leaf_fill(&mut self, dtype: DType, ne: &[usize], fill: Fill) -> TensorId {
        let id = self.ctx.new_tensor(dtype, ne).expect("leaf shape");
        self.fills.push((id, fill));
        id
    }

    /// A leaf of logical shape `ne` with `layout`, uniform values in [-1, 1).
    pub fn input(&mut self, dtype: DType, ne: [usize; 4], layout: Layout) -> TensorId {
        self.input_fill(dtype, ne, layout, Fill::Uniform(-1.0, 1.0))
    }

    pub fn input_fill(
        &mut self,
        dtype: DType,
        ne: [usize; 4],
        layout: Layout,
        fill: Fill,
    ) -> TensorId {
        match layout {
            Layout::Contig => self.leaf_fill(dtype, &ne, fill),
            Layout::Transposed => {
                let b = self.leaf_fill(dtype, &[ne[1], ne[0], ne[2], ne[3]], fill);
                self.ctx.transpose(b).expect("transpose")
            }
            Layout::Permuted => {
                // permute: axis i of the base becomes axis axes[i].
                let b = self.leaf_fill(dtype, &[ne[1], ne[2], ne[0], ne[3]], fill);
                self.ctx.permute(b, [1, 2, 0, 3]).expect("permute")
            }
            Layout::Padded => {
                let pad = dtype.block_size();
                let b = self.leaf_fill(dtype, &[ne[0] + 2 * pad, ne[1], ne[2], ne[3]], fill);
                let nb = self.ctx.tensor(b).nb;
                self.ctx
                    .view(b, &ne, &nb[1..], dtype.type_size())
                    .expect("padded view")
            }
        }
    }

    /// Allocate everything and write the leaves.
    pub fn finish(&mut self) {
        alloc::alloc_ctx_tensors(&mut self.ctx, &cpu_buffer_type()).expect("alloc");
        let fills = std::mem::take(&mut self.fills);
        for (id, fill) in fills {
            let n = self.ctx.tensor(id).nelements();
            let dtype = self.ctx.tensor(id).dtype;
            if dtype == DType::I32 {
                let v: Vec<i32> = match fill {
                    Fill::Int(lo, hi) => (0..n).map(|_| self.int(lo, hi)).collect(),
                    Fill::Values(v) => v.iter().map(|&x| x as i32).collect(),
                    Fill::Uniform(lo, hi) => {
                        (0..n).map(|_| self.int(lo as i32, hi as i32)).collect()
                    }
                };
                self.ctx.set_i32(id, &v).expect("set i32");
            } else {
                let v: Vec<f32> = match fill {
                    Fill::Uniform(lo, hi) => (0..n).map(|_| self.rng.f(lo, hi)).collect(),
                    Fill::Values(v) => v,
                    Fill::Int(lo, hi) => (0..n).map(|_| self.int(lo, hi) as f32).collect(),
                };
                self.ctx.set_f32(id, &v).expect("set f32");
            }
            let back = self.ctx.get_f32(id).expect("get");
            self.stored.insert(id, back);
        }
    }

    /// Logical values of `id` (a leaf or a view of one).
    pub fn dense(&self, id: TensorId) -> Dense {
        let t = self.ctx.tensor(id);
        if let Some(v) = self.stored.get(&id) {
            return Dense::new(t.ne, v.clone());
        }
        let base = t.view_src.expect("a leaf or a view of a leaf");
        let vals = &self.stored[&base];
        let (ts, bs) = (t.dtype.type_size(), t.dtype.block_size());
        let mut out = Vec::with_capacity(t.nelements());
        for i3 in 0..t.ne[3] {
            for i2 in 0..t.ne[2] {
                for i1 in 0..t.ne[1] {
                    for i0 in 0..t.ne[0] {
                        let byte = t.view_offs
                            + i0 / bs * t.nb[0]
                            + i1 * t.nb[1]
                            + i2 * t.nb[2]
                            + i3 * t.nb[3];
                        out.push(vals[byte / ts * bs + i0 % bs]);
                    }
                }
            }
        }
        Dense::new(t.ne, out)
    }

    /// Compute the graph of `out` with `nth` threads.
    pub fn compute(&self, out: TensorId, nth: usize) -> Result<()> {
        let g = Graph::build(&self.ctx, &[out]);
        CpuBackend::with_threads_forced(nth).compute(&self.ctx, &g)
    }

    /// The reference result of node `out` from the logical values of its sources.
    pub fn reference(&self, out: TensorId) -> Dense {
        let t = self.ctx.tensor(out);
        let srcs: Vec<Option<Dense>> = t.src.iter().map(|s| s.map(|s| self.dense(s))).collect();
        let refs: Vec<Option<&Dense>> = srcs.iter().map(|s| s.as_ref()).collect();
        reference(&t.op, &refs, t.ne).expect("reference")
    }
}

/// `vals` rounded to `dtype` (quantized row by row), as f32.
pub fn round_to(dtype: DType, vals: &[f32], ne0: usize) -> Vec<f32> {
    if dtype == DType::F32 || dtype == DType::I32 {
        return vals.to_vec();
    }
    let mut out = vec![0f32; vals.len()];
    for (src, dst) in vals.chunks(ne0).zip(out.chunks_mut(ne0)) {
        let mut bytes = vec![0u8; dtype.row_size(ne0).expect("row size")];
        ggweb::quant::quantize_row(dtype, src, &mut bytes).expect("quantize");
        ggweb::quant::dequantize_row(dtype, &bytes, dst).expect("dequantize");
    }
    out
}

/// Tolerance: |got - want| <= abs + rel * |want| per element.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    pub abs: f32,
    pub rel: f32,
}

/// The tolerance for results stored as `dtype` (one rounding of the output, plus f32 noise).
pub fn tol_for(dtype: DType) -> Tol {
    match dtype {
        DType::F32 | DType::I32 => Tol {
            abs: 1e-5,
            rel: 1e-5,
        },
        DType::F16 => Tol {
            abs: 1e-3,
            rel: 1e-3,
        },
        DType::BF16 => Tol {
            abs: 8e-3,
            rel: 8e-3,
        },
        _ => Tol {
            abs: 1e-5,
            rel: 1e-5,
        },
    }
}

/// Panics with context when `got` and `want` differ beyond `tol` (NaN matches NaN).
pub fn assert_close(label: &str, got: &[f32], want: &[f32], tol: Tol) {
    assert_eq!(got.len(), want.len(), "{label}: lengths");
    let mut worst = (0usize, 0f32);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() {
            continue;
        }
        if g == w {
            continue;
        }
        let err = (g - w).abs();
        let bound = tol.abs + tol.rel * w.abs();
        if err.is_nan() || err > bound {
            panic!(
                "{label}: element {i}: got {g}, want {w} (err {err:e} > {bound:e}); nmse {:e}",
                nmse(got, want)
            );
        }
        if err > worst.1 {
            worst = (i, err);
        }
    }
}

/// Build with `build` on a fresh harness, compute with 1 and 3 threads, compare with the
/// reference (rounded to the output type) within `tol` (default: per output type).
pub fn check(label: &str, seed: u64, tol: Option<Tol>, build: impl Fn(&mut Harness) -> TensorId) {
    let mut h = Harness::new(seed);
    let out = build(&mut h);
    h.finish();
    let t = h.ctx.tensor(out);
    let (dtype, ne0) = (t.dtype, t.ne[0]);
    let want_raw = h.reference(out);
    let want = round_to(dtype, &want_raw.data, ne0);
    let tol = tol.unwrap_or_else(|| tol_for(dtype));
    let nbytes = h.ctx.tensor(out).nbytes();
    for nth in [1, 3] {
        // Poison the output so a thread that skips its share is caught.
        h.ctx.set_bytes(out, &vec![0xFF; nbytes]).expect("poison");
        h.compute(out, nth)
            .unwrap_or_else(|e| panic!("{label}: compute with {nth} threads: {e}"));
        let got = h.ctx.get_f32(out).expect("get output");
        assert_close(&format!("{label} [{nth} threads]"), &got, &want, tol);
    }
}
