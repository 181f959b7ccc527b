//! A mul_mat benchmark for the browser: JavaScript times `run()` with `performance.now()` (the
//! wasm build has no clock of its own). The same product on the CPU backend or on WebGPU.

use wasm_bindgen::prelude::*;

use crate::JsError;

use super::js_err;
use ggweb::alloc::alloc_ctx_tensors;
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::backend::{Backend, BufferType};
use ggweb::{Context, DType, Error, Graph, Result};

enum Engine {
    Cpu(CpuBackend),
    #[cfg(feature = "webgpu")]
    WebGpu(ggweb::backend::webgpu::WebGpuBackend),
}

/// `y = mul_mat(W, x)` with W [k, m] of a weight type and x [k, n] f32, set up once.
#[wasm_bindgen]
pub struct MulMatBench {
    ctx: Context,
    graph: Graph,
    flops: f64,
    weight: ggweb::TensorId,
    x: ggweb::TensorId,
    y: ggweb::TensorId,
    engine: Engine,
    _buf: Option<std::sync::Arc<dyn ggweb::backend::Buffer>>,
}

fn build(backend: &str, dtype: &str, m: usize, n: usize, k: usize) -> Result<MulMatBench> {
    let dtype = DType::from_name(&dtype.to_ascii_lowercase())
        .ok_or_else(|| Error::InvalidArgument(format!("unknown tensor type '{dtype}'")))?;
    if m == 0 || n == 0 || k == 0 || m * k > (1 << 28) || n * k > (1 << 28) {
        return Err(Error::InvalidArgument(format!(
            "mul_mat bench sizes m={m} n={n} k={k} out of range"
        )));
    }
    let (buft, engine): (std::sync::Arc<dyn BufferType>, Engine) = match backend {
        "cpu" => (
            cpu_buffer_type(),
            Engine::Cpu(CpuBackend::new(crate::cpu_threads())),
        ),
        #[cfg(feature = "webgpu")]
        "webgpu" => {
            let dev = ggweb::backend::webgpu::default_device().ok_or_else(|| {
                Error::Backend("no WebGPU device: await webgpuInit() first".into())
            })?;
            (
                ggweb::backend::Device::buffer_type(&*dev),
                Engine::WebGpu(dev.backend()),
            )
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown backend '{other}' for the benchmark"
            )))
        }
    };
    let mut ctx = Context::new();
    let w = ctx.new_tensor_2d(dtype, k, m)?;
    let x = ctx.new_tensor_2d(DType::F32, k, n)?;
    let y = ctx.mul_mat(w, x)?;
    let buf = alloc_ctx_tensors(&mut ctx, &buft)?;
    // Random weights through the type's quantizer (valid blocks for every type).
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    };
    ctx.set_f32(w, &rnd(k * m))?;
    ctx.set_f32(x, &rnd(k * n))?;
    let graph = Graph::build(&ctx, &[y]);
    Ok(MulMatBench {
        ctx,
        graph,
        flops: 2.0 * m as f64 * n as f64 * k as f64,
        weight: w,
        x,
        y,
        engine,
        _buf: buf,
    })
}

#[wasm_bindgen]
impl MulMatBench {
    /// `backend`: "cpu" (one thread) or "webgpu"; `dtype`: a weight type name ("f32", "q4_0", …).
    #[wasm_bindgen(constructor)]
    pub fn new(backend: &str, dtype: &str, m: u32, n: u32, k: u32) -> Result<MulMatBench, JsError> {
        build(backend, dtype, m as usize, n as usize, k as usize).map_err(js_err)
    }

    /// FLOPs of one product (2·m·n·k).
    #[wasm_bindgen(getter)]
    pub fn flops(&self) -> f64 {
        self.flops
    }

    /// Repack the weight for the CPU GEMV as an LLM's load does (`backend::cpu::repack`), so
    /// that n = 1 runs the kernel generation runs; false where this build or type keeps it plain.
    pub fn repack(&mut self) -> Result<bool, JsError> {
        if !matches!(self.engine, Engine::Cpu(_)) {
            return Ok(false);
        }
        let dtype = self.ctx.get(self.weight).map_err(js_err)?.dtype;
        if !ggweb::backend::cpu::repack::pays_for(dtype) {
            return Ok(false);
        }
        ggweb::backend::cpu::repack::repack_tensor(&mut self.ctx, self.weight).map_err(js_err)
    }

    /// After `run()`: the CPU product's sampled rows against the scalar reference
    /// (`ggweb::bench::check_mul_mat`), an error where they differ, so that a timing of a wrong
    /// kernel is not reported. False (nothing checked) on WebGPU, whose output is on the GPU.
    pub fn verify(&self) -> Result<bool, JsError> {
        if !matches!(self.engine, Engine::Cpu(_)) {
            return Ok(false);
        }
        ggweb::bench::check_mul_mat(&self.ctx, self.weight, self.x, self.y).map_err(js_err)?;
        Ok(true)
    }

    /// Compute once and wait until it finished (a Promise: WebGPU completion is async).
    pub fn run(&mut self) -> js_sys::Promise {
        let r = match &mut self.engine {
            Engine::Cpu(be) => be.graph_compute(&self.ctx, &self.graph),
            #[cfg(feature = "webgpu")]
            Engine::WebGpu(be) => be.graph_compute(&self.ctx, &self.graph),
        };
        if let Err(e) = r {
            return js_sys::Promise::reject(&js_err(e).into());
        }
        #[cfg(feature = "webgpu")]
        if let Engine::WebGpu(be) = &self.engine {
            let dev = be.webgpu_device().clone();
            return wasm_bindgen_futures::future_to_promise(async move {
                dev.backend()
                    .synchronize_async()
                    .await
                    .map(|_| JsValue::UNDEFINED)
                    .map_err(|e| js_err(e).into())
            });
        }
        js_sys::Promise::resolve(&JsValue::UNDEFINED)
    }
}

/// The fused attention of one of the project's LLMs (`ggweb::bench::LLM_ATTN`: "smollm2",
/// "gemma3", "qwen2.5") over every layer's f16 KV cache, `n_tokens` queries at the end of
/// `n_kv` positions, on the CPU backend; JavaScript times `run()`.
#[wasm_bindgen]
pub struct AttentionBench {
    bench: ggweb::bench::AttnBench,
    backend: CpuBackend,
}

#[wasm_bindgen]
impl AttentionBench {
    #[wasm_bindgen(constructor)]
    pub fn new(model: &str, n_kv: u32, n_tokens: u32) -> Result<AttentionBench, JsError> {
        let shape = ggweb::bench::LLM_ATTN
            .iter()
            .find(|s| s.model == model)
            .ok_or_else(|| {
                js_err(Error::InvalidArgument(format!(
                    "unknown attention shape '{model}' (smollm2, gemma3, qwen2.5)"
                )))
            })?;
        let bench = ggweb::bench::AttnBench::new(shape, n_kv as usize, n_tokens as usize)
            .map_err(js_err)?;
        Ok(AttentionBench {
            bench,
            backend: CpuBackend::new(crate::cpu_threads()),
        })
    }

    /// KV cache bytes one `run()` reads.
    #[wasm_bindgen(getter, js_name = kvBytes)]
    pub fn kv_bytes(&self) -> f64 {
        self.bench.kv_bytes()
    }

    /// One forward's attention over every layer.
    pub fn run(&mut self) -> Result<(), JsError> {
        self.bench.compute(&mut self.backend).map_err(js_err)
    }

    /// Every layer's output of the last `run()` (to compare two builds).
    pub fn output(&self) -> Result<Vec<f32>, JsError> {
        self.bench.output().map_err(js_err)
    }
}
