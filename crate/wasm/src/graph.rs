//! The engine behind the JS `Graph` class: a [`Context`] of tensor descriptors, host buffers for
//! tensors set from JS and for GGUF weights, and the CPU backend.
//!
//! Tensors are `u32` ids. Leaf tensors created from JS get their own buffer at once (so `set`
//! works before any compute); op results are placed when first computed. Ops are built through
//! one entry point, [`GraphCore::op`], that takes the op's name, its source ids and numeric
//! parameters: the typed surface lives in TypeScript (`www/src/graph.ts`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use js_sys::{Float32Array, Int32Array, Object};
use wasm_bindgen::prelude::*;

use crate::JsError;

use super::gguf::GgufStream;
use super::js::set;
use super::js_err;
use ggweb::backend::cpu::{cpu_buffer_type, tensor_ptr, CpuBackend, CpuBuffer, HostBytes};
use ggweb::backend::{Buffer, BufferUsage};
use ggweb::tensor::{PoolOp, TensorData};
use ggweb::{Context, DType, Error, Graph, Result, TensorId};

#[wasm_bindgen]
pub struct GraphCore {
    // Shared with the futures of `computeAsync` / `read*Async`: a call in flight holds the borrow,
    // and any other call meanwhile is rejected as busy rather than trapping.
    inner: Rc<RefCell<GraphInner>>,
}

struct GraphInner {
    ctx: Context,
    backend: CpuBackend,
    /// Number of nodes computed by the last `compute`.
    last_nodes: usize,
    /// d(loss)/d(param) of the last `backward`, by parameter.
    grads: HashMap<TensorId, TensorId>,
    /// WebGPU first, the CPU for the rest (None: the CPU alone).
    #[cfg(feature = "webgpu")]
    gpu: Option<GpuState>,
}

/// A graph on WebGPU: each compute plans a clone of the context (the scheduler rewrites the
/// sources of nodes that cross backends to its copies, which must not leak into the user's
/// graph: a recompute with new inputs would read stale copies) on a fresh scheduler (its compute
/// buffers hold the results; earlier results stay valid in their own buffers).
#[cfg(feature = "webgpu")]
struct GpuState {
    dev: Arc<ggweb::backend::webgpu::WebGpuDevice>,
    report: String,
    /// Nodes whose data this graph's computes placed (recomputing them replaces it).
    owned: Vec<bool>,
    last_placements: Option<ggweb::models::runner::Placements>,
}

impl Default for GraphCore {
    fn default() -> Self {
        Self::new()
    }
}

fn busy() -> JsError {
    JsError::coded(
        "this Graph is busy with another call (await it first)",
        "busy",
    )
}

fn dtype_of(name: &str) -> Result<DType> {
    DType::from_name(&name.to_ascii_lowercase())
        .ok_or_else(|| Error::InvalidArgument(format!("unknown tensor type '{name}'")))
}

fn usize_param(p: &[f64], i: usize, what: &str) -> Result<usize> {
    let x = *p
        .get(i)
        .ok_or_else(|| Error::InvalidArgument(format!("missing parameter {what}")))?;
    if x < 0.0 || x.fract() != 0.0 || x > u32::MAX as f64 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be a non-negative integer, got {x}"
        )));
    }
    Ok(x as usize)
}

fn f32_param(p: &[f64], i: usize, default: f32) -> f32 {
    p.get(i).map(|&x| x as f32).unwrap_or(default)
}

impl GraphInner {
    fn id(&self, id: u32) -> Result<TensorId> {
        let t = TensorId(id);
        self.ctx.get(t)?;
        Ok(t)
    }

    fn src(&self, srcs: &[u32], i: usize, op: &str) -> Result<TensorId> {
        let id = *srcs.get(i).ok_or_else(|| {
            Error::InvalidArgument(format!("{op} needs {} source tensor(s)", i + 1))
        })?;
        self.id(id)
    }

    fn build_op(&mut self, name: &str, s: &[u32], p: &[f64]) -> Result<TensorId> {
        let a = || self.src(s, 0, name);
        let b = || self.src(s, 1, name);
        Ok(match name {
            "add" | "sub" | "mul" | "div" | "mul_mat" | "get_rows" | "repeat" => {
                let (a, b) = (a()?, b()?);
                match name {
                    "add" => self.ctx.add(a, b)?,
                    "sub" => self.ctx.sub(a, b)?,
                    "mul" => self.ctx.mul(a, b)?,
                    "div" => self.ctx.div(a, b)?,
                    "mul_mat" => self.ctx.mul_mat(a, b)?,
                    "get_rows" => self.ctx.get_rows(a, b)?,
                    _ => self.ctx.repeat(a, b)?,
                }
            }
            "concat" => {
                let (a, b) = (a()?, b()?);
                let dim = usize_param(p, 0, "dim")?;
                self.ctx.concat(a, b, dim)?
            }
            "scale" => {
                let a = a()?;
                self.ctx
                    .scale_bias(a, f32_param(p, 0, 1.0), f32_param(p, 1, 0.0))?
            }
            "relu" | "gelu" | "gelu_erf" | "silu" | "tanh" | "sigmoid" | "exp" | "neg" | "abs"
            | "sqr" | "sqrt" | "log" | "sum" | "sum_rows" | "mean" | "argmax" => {
                let a = a()?;
                let c = &mut self.ctx;
                match name {
                    "relu" => c.relu(a)?,
                    "gelu" => c.gelu(a)?,
                    "gelu_erf" => c.gelu_erf(a)?,
                    "silu" => c.silu(a)?,
                    "tanh" => c.tanh(a)?,
                    "sigmoid" => c.sigmoid(a)?,
                    "exp" => c.exp(a)?,
                    "neg" => c.neg(a)?,
                    "abs" => c.abs(a)?,
                    "sqr" => c.sqr(a)?,
                    "sqrt" => c.sqrt(a)?,
                    "log" => c.log(a)?,
                    "sum" => c.sum(a)?,
                    "sum_rows" => c.sum_rows(a)?,
                    "mean" => c.mean(a)?,
                    _ => c.argmax(a)?,
                }
            }
            "norm" => {
                let a = a()?;
                self.ctx.norm(a, f32_param(p, 0, 1e-5))?
            }
            "rms_norm" => {
                let a = a()?;
                self.ctx.rms_norm(a, f32_param(p, 0, 1e-6))?
            }
            "soft_max" => {
                let a = a()?;
                let mask = if s.len() > 1 { Some(b()?) } else { None };
                self.ctx
                    .soft_max_ext(a, mask, f32_param(p, 0, 1.0), f32_param(p, 1, 0.0))?
            }
            "cast" => {
                let a = a()?;
                let id = usize_param(p, 0, "type id")?;
                let dt = DType::from_id(id as u32)?;
                self.ctx.cast(a, dt)?
            }
            "conv_2d" => {
                // p = [s0, s1, p0, p1, d0, d1]
                let (k, x) = (a()?, b()?);
                let q = |i| usize_param(p, i, "conv_2d parameter");
                self.ctx
                    .conv_2d(k, x, q(0)?, q(1)?, q(2)?, q(3)?, q(4)?, q(5)?)?
            }
            "pool_2d" => {
                // p = [max(0)|avg(1), k0, k1, s0, s1, p0, p1]
                let a = a()?;
                let q = |i| usize_param(p, i, "pool_2d parameter");
                let op = if q(0)? == 0 { PoolOp::Max } else { PoolOp::Avg };
                self.ctx
                    .pool_2d(a, op, q(1)?, q(2)?, q(3)?, q(4)?, q(5)?, q(6)?)?
            }
            "reshape" => {
                let a = a()?;
                let ne: Vec<usize> = (0..p.len())
                    .map(|i| usize_param(p, i, "shape"))
                    .collect::<Result<_>>()?;
                self.ctx.reshape(a, &ne)?
            }
            "view" => {
                // p = [n_dims, ne.., nb[1..].., offset]
                let a = a()?;
                let nd = usize_param(p, 0, "n_dims")?;
                if !(1..=4).contains(&nd) || p.len() != 2 * nd + 1 {
                    return Err(Error::InvalidArgument(format!(
                        "view: expected {} parameters for {nd} dims, got {}",
                        2 * nd + 1,
                        p.len()
                    )));
                }
                let ne: Vec<usize> = (1..=nd)
                    .map(|i| usize_param(p, i, "shape"))
                    .collect::<Result<_>>()?;
                let nb: Vec<usize> = (nd + 1..2 * nd)
                    .map(|i| usize_param(p, i, "stride"))
                    .collect::<Result<_>>()?;
                let off = usize_param(p, 2 * nd, "offset")?;
                self.ctx.view(a, &ne, &nb, off)?
            }
            "permute" => {
                let a = a()?;
                let mut axes = [0usize; 4];
                for (i, ax) in axes.iter_mut().enumerate() {
                    *ax = usize_param(p, i, "axis")?;
                }
                self.ctx.permute(a, axes)?
            }
            "transpose" => {
                let a = a()?;
                self.ctx.transpose(a)?
            }
            "cont" => {
                let a = a()?;
                self.ctx.cont(a)?
            }
            "dup" => {
                let a = a()?;
                self.ctx.dup(a)?
            }
            "cpy" => {
                let (a, b) = (a()?, b()?);
                self.ctx.cpy(a, b)?
            }
            "cross_entropy_loss" => {
                let (a, b) = (a()?, b()?);
                self.ctx.cross_entropy_loss(a, b)?
            }
            // Sources: param, grad, state [n, 2], hp [7] (see Context::opt_step_adamw).
            "opt_step_adamw" => {
                let (pa, g) = (a()?, b()?);
                let (st, hp) = (self.src(s, 2, name)?, self.src(s, 3, name)?);
                self.ctx.opt_step_adamw(pa, g, st, hp)?
            }
            // Sources: param, grad, hp [2].
            "opt_step_sgd" => {
                let (pa, g) = (a()?, b()?);
                let hp = self.src(s, 2, name)?;
                self.ctx.opt_step_sgd(pa, g, hp)?
            }
            _ => {
                return Err(Error::UnsupportedOp(format!(
                    "'{name}' is not available in this build"
                )));
            }
        })
    }

    #[cfg(feature = "webgpu")]
    fn on_gpu(&self) -> bool {
        self.gpu.is_some()
    }
    #[cfg(not(feature = "webgpu"))]
    fn on_gpu(&self) -> bool {
        false
    }

    /// Synchronous reads cannot map WebGPU memory: say which call to use instead.
    fn check_host(&self, id: TensorId) -> std::result::Result<(), JsError> {
        match self.ctx.data_location(id) {
            Some((buf, _)) if !buf.buffer_type().is_host() => Err(JsError::new(&format!(
                "tensor '{}' is in WebGPU memory: read it with readF32Async / readI32Async",
                self.ctx.tensor(id).name
            ))),
            _ => Ok(()),
        }
    }

    /// Compute `outputs` through the scheduler (WebGPU first, the CPU for the rest) on a clone
    /// of the context, then give the user's graph the results' data.
    #[cfg(feature = "webgpu")]
    async fn compute_gpu(&mut self, outputs: &[u32]) -> Result<()> {
        let ids: Vec<TensorId> = outputs.iter().map(|&i| self.id(i)).collect::<Result<_>>()?;
        let graph = Graph::build(&self.ctx, &ids);
        self.check_leafs(&graph)?;
        let gpu = self
            .gpu
            .as_mut()
            .ok_or_else(|| Error::Backend("not a WebGPU graph".into()))?;
        gpu.owned.resize(self.ctx.len(), false);
        let mut sctx = self.ctx.clone();
        for &n in &graph.nodes {
            let t = sctx.tensor_mut(n);
            if gpu.owned[n.index()] {
                // Computed before: computed again into this compute's buffers.
                t.data = None;
            }
            // Every node stays readable after the compute, as on the CPU (no memory reuse).
            if !t.op.is_view() {
                t.flags.insert(ggweb::tensor::Flags::OUTPUT);
            }
        }
        // A fresh scheduler: its buffers are new, so results of earlier computes that are not
        // part of this graph keep theirs.
        let mut runner = ggweb::models::runner::Runner::with_webgpu_device(
            gpu.dev.clone(),
            crate::cpu_threads(),
        )?;
        runner.alloc(&mut sctx, &graph)?;
        runner.compute_async(&sctx).await?;
        gpu.last_placements = Some(runner.placements(&sctx));
        for &n in &graph.nodes {
            let st = sctx.tensor(n);
            if st.view_src.is_none() && (gpu.owned[n.index()] || self.ctx.tensor(n).data.is_none())
            {
                self.ctx.tensor_mut(n).data = st.data.clone();
                gpu.owned[n.index()] = true;
            }
        }
        self.last_nodes = graph.nodes.len();
        Ok(())
    }

    /// Any tensor's values as f32 (`ints`: an i32 tensor's values), wherever it lives.
    #[cfg(feature = "webgpu")]
    async fn read_async(&self, id: u32, ints: bool) -> Result<Vec<f32>> {
        let id = self.id(id)?;
        let t = self.ctx.get(id)?;
        let dtype = t.dtype;
        if ints && dtype != DType::I32 {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' is {}, not i32",
                t.name, dtype
            )));
        }
        let bytes = self.ctx.read_bytes_async(id).await?;
        ggweb::tensor_io::decode_f32(dtype, &bytes)
    }

    fn check_leafs(&self, graph: &Graph) -> Result<()> {
        for &l in &graph.leafs {
            let t = self.ctx.tensor(l);
            if t.data.is_none() && t.view_src.is_none() {
                return Err(Error::InvalidArgument(format!(
                    "tensor {} ('{}') has no data",
                    l.0, t.name
                )));
            }
        }
        Ok(())
    }

    /// Mark a leaf f32 tensor (set from JS, with data of its own) as a trainable parameter.
    fn set_param(&mut self, id: TensorId) -> Result<()> {
        let t = self.ctx.get(id)?;
        if t.op != ggweb::tensor::Op::None || t.view_src.is_some() || t.dtype != DType::F32 {
            return Err(Error::InvalidArgument(format!(
                "tensor {} ('{}') is not an f32 leaf tensor: only those can be parameters",
                id.0, t.name
            )));
        }
        self.ctx.set_param(id);
        Ok(())
    }

    /// Build the gradients of the scalar `loss` with respect to every parameter it depends on
    /// (a failure adds nothing to the graph).
    fn backward(&mut self, loss: TensorId) -> Result<()> {
        let mark = self.ctx.mark();
        let r = (|| {
            let mut g = Graph::build(&self.ctx, &[loss]);
            g.build_backward(&mut self.ctx, loss)?;
            let seed = g
                .loss_grad()
                .ok_or_else(|| Error::Backend("internal: no loss gradient".into()))?;
            // d(loss)/d(loss) = 1: set once, it is an input of every gradient.
            self.alloc_leaf(seed)?;
            self.ctx.set_f32(seed, &[1.0])?;
            let grads: HashMap<TensorId, TensorId> = (0..self.ctx.len())
                .map(|i| TensorId(i as u32))
                .filter(|&t| self.ctx.tensor(t).is_param())
                .filter_map(|t| g.grad(t).map(|gr| (t, gr)))
                .collect();
            Ok(grads)
        })();
        match r {
            Ok(grads) => {
                self.grads = grads;
                Ok(())
            }
            Err(e) => {
                self.ctx.reset_to(mark);
                Err(e)
            }
        }
    }

    fn alloc_leaf(&mut self, id: TensorId) -> Result<()> {
        let buft = cpu_buffer_type();
        let size = buft.alloc_size(&self.ctx, id);
        let buffer = buft.alloc_buffer(size)?;
        self.ctx.set_data(id, TensorData { buffer, offset: 0 });
        Ok(())
    }

    fn do_compute(&mut self, outputs: &[u32]) -> Result<()> {
        let ids: Vec<TensorId> = outputs.iter().map(|&i| self.id(i)).collect::<Result<_>>()?;
        let graph = Graph::build(&self.ctx, &ids);
        self.check_leafs(&graph)?;
        let todo: Vec<TensorId> = graph
            .nodes
            .iter()
            .copied()
            .filter(|&n| {
                let t = self.ctx.tensor(n);
                t.data.is_none() && t.view_src.is_none()
            })
            .collect();
        ggweb::alloc::alloc_tensors(&mut self.ctx, &todo, &cpu_buffer_type())?;
        self.backend.compute(&self.ctx, &graph)?;
        self.last_nodes = graph.nodes.len();
        Ok(())
    }

    /// Read any f32 tensor (views included, by strides) or a contiguous tensor of another type.
    fn read_f32(&self, id: TensorId) -> Result<Vec<f32>> {
        let t = self.ctx.get(id)?;
        if t.is_contiguous() || t.dtype != DType::F32 {
            return self.ctx.get_f32(id);
        }
        let ptr = tensor_ptr(&self.ctx, id)?;
        let (ne, nb) = (t.ne, t.nb);
        let mut out = Vec::with_capacity(t.nelements());
        for i3 in 0..ne[3] {
            for i2 in 0..ne[2] {
                for i1 in 0..ne[1] {
                    for i0 in 0..ne[0] {
                        let off = i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
                        // SAFETY: tensor_ptr checked that the tensor's extent lies inside its
                        // buffer, and every index is inside the shape.
                        out.push(unsafe { (ptr.add(off) as *const f32).read_unaligned() });
                    }
                }
            }
        }
        Ok(out)
    }
}

impl GraphCore {
    fn b(&self) -> Result<std::cell::Ref<'_, GraphInner>, JsError> {
        self.inner.try_borrow().map_err(|_| busy())
    }
    fn bm(&self) -> Result<std::cell::RefMut<'_, GraphInner>, JsError> {
        self.inner.try_borrow_mut().map_err(|_| busy())
    }

    /// A graph on the CPU.
    pub fn new() -> GraphCore {
        GraphCore {
            inner: Rc::new(RefCell::new(GraphInner {
                ctx: Context::new(),
                backend: CpuBackend::new(crate::cpu_threads()),
                last_nodes: 0,
                grads: HashMap::new(),
                #[cfg(feature = "webgpu")]
                gpu: None,
            })),
        }
    }
}

#[wasm_bindgen]
impl GraphCore {
    /// `backend`: "cpu" (default), "webgpu" (WebGPU first, the CPU for ops it lacks; needs
    /// `webgpuInit()` to have resolved, else an error) or "auto" (WebGPU when the device is open).
    /// On WebGPU, compute and read with `computeAsync` / `readF32Async` / `readI32Async`.
    #[wasm_bindgen(constructor)]
    pub fn create(backend: Option<String>) -> Result<GraphCore, JsError> {
        let choice: ggweb::models::runner::BackendChoice = backend
            .as_deref()
            .unwrap_or("cpu")
            .parse()
            .map_err(js_err)?;
        let core = GraphCore::new();
        if choice == ggweb::models::runner::BackendChoice::Cpu {
            return Ok(core);
        }
        #[cfg(feature = "webgpu")]
        if let Some(dev) = ggweb::backend::webgpu::default_device() {
            let runner = ggweb::models::runner::Runner::with_webgpu_device(
                dev.clone(),
                crate::cpu_threads(),
            )
            .map_err(js_err)?;
            core.bm()?.gpu = Some(GpuState {
                dev,
                report: runner.report,
                owned: Vec::new(),
                last_placements: None,
            });
            return Ok(core);
        }
        if choice == ggweb::models::runner::BackendChoice::WebGpu {
            return Err(js_err(Error::Backend(if cfg!(feature = "webgpu") {
                "no WebGPU device is open (await webgpuInit() first)".into()
            } else {
                "this build of the ggweb engine has no WebGPU backend".into()
            })));
        }
        Ok(core)
    }

    /// True when the graph computes on WebGPU (with the CPU for what WebGPU lacks).
    #[wasm_bindgen(getter, js_name = usesGpu)]
    pub fn uses_gpu(&self) -> Result<bool, JsError> {
        Ok(self.b()?.on_gpu())
    }

    /// Which backends compute this graph, and why (one line).
    #[wasm_bindgen(getter, js_name = backendReport)]
    pub fn backend_report(&self) -> Result<String, JsError> {
        let inner = self.b()?;
        #[cfg(feature = "webgpu")]
        if let Some(g) = &inner.gpu {
            return Ok(g.report.clone());
        }
        let _ = &inner;
        Ok("CPU (1 thread)".into())
    }

    /// A new leaf tensor with its own zeroed buffer (host memory: it is copied to the GPU by
    /// the computes that need it there).
    pub fn tensor(&mut self, dtype: &str, shape: &[u32]) -> Result<u32, JsError> {
        let mut inner = self.bm()?;
        let dt = dtype_of(dtype).map_err(js_err)?;
        let ne: Vec<usize> = shape.iter().map(|&n| n as usize).collect();
        let id = inner.ctx.new_tensor(dt, &ne).map_err(js_err)?;
        inner.alloc_leaf(id).map_err(js_err)?;
        Ok(id.0)
    }

    /// Build op `name` from sources `srcs` and numeric parameters `params`.
    pub fn op(&mut self, name: &str, srcs: &[u32], params: &[f64]) -> Result<u32, JsError> {
        self.bm()?
            .build_op(name, srcs, params)
            .map(|t| t.0)
            .map_err(js_err)
    }

    #[wasm_bindgen(js_name = setF32)]
    pub fn set_f32(&mut self, id: u32, values: &[f32]) -> Result<(), JsError> {
        let inner = self.bm()?;
        let id = inner.id(id).map_err(js_err)?;
        inner.ctx.set_f32(id, values).map_err(js_err)
    }

    #[wasm_bindgen(js_name = setI32)]
    pub fn set_i32(&mut self, id: u32, values: &[i32]) -> Result<(), JsError> {
        let inner = self.bm()?;
        let id = inner.id(id).map_err(js_err)?;
        inner.ctx.set_i32(id, values).map_err(js_err)
    }

    #[wasm_bindgen(js_name = setBytes)]
    pub fn set_bytes(&mut self, id: u32, bytes: &[u8]) -> Result<(), JsError> {
        let inner = self.bm()?;
        let id = inner.id(id).map_err(js_err)?;
        inner.ctx.set_bytes(id, bytes).map_err(js_err)
    }

    /// The values as f32 (CPU graphs, or host tensors of a WebGPU graph; else `readF32Async`).
    #[wasm_bindgen(js_name = readF32)]
    pub fn read_f32_js(&self, id: u32) -> Result<Float32Array, JsError> {
        let inner = self.b()?;
        let id = inner.id(id).map_err(js_err)?;
        inner.check_host(id)?;
        let v = inner.read_f32(id).map_err(js_err)?;
        Ok(Float32Array::from(v.as_slice()))
    }

    #[wasm_bindgen(js_name = readI32)]
    pub fn read_i32(&self, id: u32) -> Result<Int32Array, JsError> {
        let inner = self.b()?;
        let id = inner.id(id).map_err(js_err)?;
        inner.check_host(id)?;
        let v = inner.ctx.get_i32(id).map_err(js_err)?;
        Ok(Int32Array::from(v.as_slice()))
    }

    /// Compute everything the given tensors depend on (CPU graphs; `computeAsync` on WebGPU).
    pub fn compute(&mut self, outputs: &[u32]) -> Result<(), JsError> {
        let mut inner = self.bm()?;
        if inner.on_gpu() {
            return Err(JsError::new(
                "this graph runs on WebGPU: use computeAsync (WebGPU results are read asynchronously)",
            ));
        }
        inner.do_compute(outputs).map_err(js_err)
    }

    /// `compute` as a Promise, on every backend: on WebGPU the scheduler places each node
    /// (WebGPU first, the CPU for ops it lacks) and copies between them; see `placements`.
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(js_name = computeAsync)]
    // Holding the RefCell borrow across the await is the busy flag (see the struct).
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn compute_async(&self, outputs: Vec<u32>) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            let r = if inner.on_gpu() {
                inner.compute_gpu(&outputs).await
            } else {
                inner.do_compute(&outputs)
            };
            r.map(|_| JsValue::UNDEFINED)
                .map_err(|e| JsValue::from(js_err(e)))
        })
    }

    /// The values as f32 (dequantized; views read through their strides), as a Promise: works
    /// wherever the tensor lives (WebGPU memory is read with `map_async`).
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(js_name = readF32Async)]
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn read_f32_async(&self, id: u32) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let inner = inner.try_borrow().map_err(|_| JsValue::from(busy()))?;
            let v = inner
                .read_async(id, false)
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            Ok(Float32Array::from(v.as_slice()).into())
        })
    }

    /// The values of an i32 tensor, as a Promise (see `readF32Async`).
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(js_name = readI32Async)]
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn read_i32_async(&self, id: u32) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let inner = inner.try_borrow().map_err(|_| JsValue::from(busy()))?;
            let v = inner
                .read_async(id, true)
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            let ints: Vec<i32> = v.iter().map(|&x| x as i32).collect();
            Ok(Int32Array::from(ints.as_slice()).into())
        })
    }

    /// Where the nodes of the last `computeAsync` on WebGPU ran: `{ nodes: {backend: count},
    /// elsewhere: ["OP 'name': why"] }`, or `undefined` (CPU graphs, before the first compute).
    #[cfg(feature = "webgpu")]
    pub fn placements(&self) -> Result<JsValue, JsError> {
        let inner = self.b()?;
        Ok(
            match inner.gpu.as_ref().and_then(|g| g.last_placements.as_ref()) {
                Some(p) => super::webgpu::placements_js(p),
                None => JsValue::UNDEFINED,
            },
        )
    }

    /// The WebGPU device in use (see `webgpuDevice`), or `undefined` on the CPU.
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> Result<JsValue, JsError> {
        Ok(match &self.b()?.gpu {
            Some(g) => super::webgpu::device_js(&g.dev).into(),
            None => JsValue::UNDEFINED,
        })
    }

    /// Nodes computed by the last `compute`.
    #[wasm_bindgen(getter, js_name = lastNodeCount)]
    pub fn last_node_count(&self) -> Result<u32, JsError> {
        Ok(self.b()?.last_nodes as u32)
    }

    /// `{type, shape, strides, name, op, contiguous}` of a tensor.
    pub fn info(&self, id: u32) -> Result<JsValue, JsError> {
        let inner = self.b()?;
        let t = inner.ctx.get(TensorId(id)).map_err(js_err)?;
        let o = Object::new();
        set(&o, "type", JsValue::from_str(t.dtype.name()));
        let nd = t.n_dims().max(1);
        let shape = js_sys::Array::new();
        let strides = js_sys::Array::new();
        for i in 0..nd {
            shape.push(&(t.ne[i] as f64).into());
            strides.push(&(t.nb[i] as f64).into());
        }
        set(&o, "shape", shape);
        set(&o, "strides", strides);
        set(&o, "name", JsValue::from_str(&t.name));
        set(&o, "op", JsValue::from_str(t.op.name()));
        set(&o, "contiguous", t.is_contiguous());
        Ok(o.into())
    }

    #[wasm_bindgen(js_name = setName)]
    pub fn set_name(&mut self, id: u32, name: &str) -> Result<(), JsError> {
        let mut inner = self.bm()?;
        let id = inner.id(id).map_err(js_err)?;
        inner.ctx.set_name(id, name).map(|_| ()).map_err(js_err)
    }

    /// Mark a leaf f32 tensor as a trainable parameter (see `backward`).
    #[wasm_bindgen(js_name = setParam)]
    pub fn set_param(&mut self, id: u32) -> Result<(), JsError> {
        let mut inner = self.bm()?;
        let id = inner.id(id).map_err(js_err)?;
        inner.set_param(id).map_err(js_err)
    }

    /// Build the backward pass of `loss` (a one-element f32 tensor): afterwards `grad(p)` is
    /// d(loss)/d(p) for every parameter p the loss depends on (computed by `compute`, like any
    /// tensor). An op on the way without a backward is an error naming it.
    pub fn backward(&mut self, loss: u32) -> Result<(), JsError> {
        let mut inner = self.bm()?;
        let loss = inner.id(loss).map_err(js_err)?;
        inner.backward(loss).map_err(js_err)
    }

    /// The gradient tensor of parameter `id` from the last `backward`, if the loss depends on it.
    pub fn grad(&self, id: u32) -> Result<Option<u32>, JsError> {
        let inner = self.b()?;
        let id = inner.id(id).map_err(js_err)?;
        Ok(inner.grads.get(&id).map(|g| g.0))
    }

    /// Add every tensor of a GGUF loaded with its data; returns `{name: id}`. On WebGPU the
    /// weights are uploaded to GPU buffers (tensors larger than one buffer stay in host memory).
    pub fn weights(&mut self, file: &mut GgufStream) -> Result<JsValue, JsError> {
        let map = self.bm()?.load_weights(file).map_err(js_err)?;
        let o = Object::new();
        for (k, v) in map {
            set(&o, &k, v.0);
        }
        Ok(o.into())
    }
}

impl GraphInner {
    fn load_weights(&mut self, file: &mut GgufStream) -> Result<HashMap<String, TensorId>> {
        let (g, bytes) = file.take_file()?;
        #[cfg(feature = "webgpu")]
        if let Some(gpu) = &self.gpu {
            let buft: Arc<dyn ggweb::backend::BufferType> = gpu.dev.webgpu_buffer_type();
            let mark = self.ctx.mark();
            let owner: Arc<dyn HostBytes> = bytes.clone();
            return match ggweb::models::weights::Weights::load_into(
                &mut self.ctx,
                &g,
                owner,
                Some(&buft),
            ) {
                Ok(w) => Ok(w.by_name),
                Err(e) => {
                    self.ctx.reset_to(mark);
                    Err(e)
                }
            };
        }
        let start = usize::try_from(g.data_offset)
            .map_err(|_| Error::Gguf("data offset too large".into()))?;
        let len = bytes.len().saturating_sub(start);
        let aligned = (bytes.as_ptr() as usize + start).is_multiple_of(32);
        let buffer: Arc<dyn Buffer> = if aligned {
            let owner: Arc<dyn HostBytes> = bytes.clone();
            Arc::new(CpuBuffer::from_host_bytes(owner, start, len)?)
        } else {
            let b = cpu_buffer_type().alloc_buffer(len)?;
            b.set(0, &bytes[start..])?;
            b
        };
        buffer.set_usage(BufferUsage::Weights);
        let mark = self.ctx.mark();
        let mut out = HashMap::new();
        let r: Result<()> = (|| {
            for info in &g.tensors {
                let ne: Vec<usize> = info.shape().iter().map(|&n| n as usize).collect();
                let id = self.ctx.new_tensor(info.dtype, &ne)?;
                self.ctx.set_name(id, &info.name)?;
                self.ctx.set_data(
                    id,
                    TensorData {
                        buffer: buffer.clone(),
                        offset: info.offset as usize,
                    },
                );
                out.insert(info.name.clone(), id);
            }
            Ok(())
        })();
        if let Err(e) = r {
            self.ctx.reset_to(mark);
            return Err(e);
        }
        Ok(out)
    }
}
