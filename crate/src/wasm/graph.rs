//! The engine behind the JS `Graph` class: a [`Context`] of tensor descriptors, host buffers for
//! tensors set from JS and for GGUF weights, and the CPU backend.
//!
//! Tensors are `u32` ids. Leaf tensors created from JS get their own buffer at once (so `set`
//! works before any compute); op results are placed when first computed. Ops are built through
//! one entry point, [`GraphCore::op`], that takes the op's name, its source ids and numeric
//! parameters: the typed surface lives in TypeScript (`www/src/graph.ts`).

use std::collections::HashMap;
use std::sync::Arc;

use js_sys::{Float32Array, Int32Array, Object};
use wasm_bindgen::prelude::*;

use super::gguf::GgufStream;
use super::js::set;
use super::js_err;
use crate::backend::cpu::{cpu_buffer_type, tensor_ptr, CpuBackend, CpuBuffer, HostBytes};
use crate::backend::{Buffer, BufferUsage};
use crate::tensor::{PoolOp, TensorData};
use crate::{Context, DType, Error, Graph, Result, TensorId};

#[wasm_bindgen]
pub struct GraphCore {
    ctx: Context,
    backend: CpuBackend,
    /// Number of nodes computed by the last `compute`.
    last_nodes: usize,
}

impl Default for GraphCore {
    fn default() -> Self {
        Self::new()
    }
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

impl GraphCore {
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
            _ => {
                return Err(Error::UnsupportedOp(format!(
                    "'{name}' is not available in this build"
                )));
            }
        })
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
        for &l in &graph.leafs {
            let t = self.ctx.tensor(l);
            if t.data.is_none() && t.view_src.is_none() {
                return Err(Error::InvalidArgument(format!(
                    "tensor {} ('{}') has no data",
                    l.0, t.name
                )));
            }
        }
        let todo: Vec<TensorId> = graph
            .nodes
            .iter()
            .copied()
            .filter(|&n| {
                let t = self.ctx.tensor(n);
                t.data.is_none() && t.view_src.is_none()
            })
            .collect();
        crate::alloc::alloc_tensors(&mut self.ctx, &todo, &cpu_buffer_type())?;
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

#[wasm_bindgen]
impl GraphCore {
    #[wasm_bindgen(constructor)]
    pub fn new() -> GraphCore {
        GraphCore {
            ctx: Context::new(),
            backend: CpuBackend::new(1),
            last_nodes: 0,
        }
    }

    /// A new leaf tensor with its own zeroed buffer.
    pub fn tensor(&mut self, dtype: &str, shape: &[u32]) -> Result<u32, JsError> {
        let dt = dtype_of(dtype).map_err(js_err)?;
        let ne: Vec<usize> = shape.iter().map(|&n| n as usize).collect();
        let id = self.ctx.new_tensor(dt, &ne).map_err(js_err)?;
        self.alloc_leaf(id).map_err(js_err)?;
        Ok(id.0)
    }

    /// Build op `name` from sources `srcs` and numeric parameters `params`.
    pub fn op(&mut self, name: &str, srcs: &[u32], params: &[f64]) -> Result<u32, JsError> {
        self.build_op(name, srcs, params)
            .map(|t| t.0)
            .map_err(js_err)
    }

    #[wasm_bindgen(js_name = setF32)]
    pub fn set_f32(&mut self, id: u32, values: &[f32]) -> Result<(), JsError> {
        let id = self.id(id).map_err(js_err)?;
        self.ctx.set_f32(id, values).map_err(js_err)
    }

    #[wasm_bindgen(js_name = setI32)]
    pub fn set_i32(&mut self, id: u32, values: &[i32]) -> Result<(), JsError> {
        let id = self.id(id).map_err(js_err)?;
        self.ctx.set_i32(id, values).map_err(js_err)
    }

    #[wasm_bindgen(js_name = setBytes)]
    pub fn set_bytes(&mut self, id: u32, bytes: &[u8]) -> Result<(), JsError> {
        let id = self.id(id).map_err(js_err)?;
        self.ctx.set_bytes(id, bytes).map_err(js_err)
    }

    #[wasm_bindgen(js_name = readF32)]
    pub fn read_f32_js(&self, id: u32) -> Result<Float32Array, JsError> {
        let id = self.id(id).map_err(js_err)?;
        let v = self.read_f32(id).map_err(js_err)?;
        Ok(Float32Array::from(v.as_slice()))
    }

    #[wasm_bindgen(js_name = readI32)]
    pub fn read_i32(&self, id: u32) -> Result<Int32Array, JsError> {
        let id = self.id(id).map_err(js_err)?;
        let v = self.ctx.get_i32(id).map_err(js_err)?;
        Ok(Int32Array::from(v.as_slice()))
    }

    /// Compute everything the given tensors depend on.
    pub fn compute(&mut self, outputs: &[u32]) -> Result<(), JsError> {
        self.do_compute(outputs).map_err(js_err)
    }

    /// Nodes computed by the last `compute`.
    #[wasm_bindgen(getter, js_name = lastNodeCount)]
    pub fn last_node_count(&self) -> u32 {
        self.last_nodes as u32
    }

    /// `{type, shape, strides, name, op, contiguous}` of a tensor.
    pub fn info(&self, id: u32) -> Result<JsValue, JsError> {
        let t = self.ctx.get(TensorId(id)).map_err(js_err)?;
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
        let id = self.id(id).map_err(js_err)?;
        self.ctx.set_name(id, name).map(|_| ()).map_err(js_err)
    }

    /// Add every tensor of a GGUF loaded with its data; returns `{name: id}`.
    pub fn weights(&mut self, file: &mut GgufStream) -> Result<JsValue, JsError> {
        let map = self.load_weights(file).map_err(js_err)?;
        let o = Object::new();
        for (k, v) in map {
            set(&o, &k, v.0);
        }
        Ok(o.into())
    }
}

impl GraphCore {
    fn load_weights(&mut self, file: &mut GgufStream) -> Result<HashMap<String, TensorId>> {
        let (g, bytes) = file.take_file()?;
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
