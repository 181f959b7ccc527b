//! Graph encoding: one command encoder and one compute pass per graph, one dispatch per node, the
//! parameters of all dispatches in one uniform buffer (256 bytes each).
//!
//! WebGPU forbids overlapping writable storage bindings within one dispatch (Dawn, i.e. Chromium,
//! validates it; every binding here is `read_write`). In-place ops (dst = src0's memory, from the
//! allocator) and ops that bind one tensor twice (soft_max without a mask, rope without freq
//! factors, `add(x, x)`) would overlap, so such a source is first copied into a scratch buffer
//! and bound from there: the pass is split around the copy.

use super::pipeline;
use super::plan::{self, Bind, Dispatch};
use super::Shared;
use crate::graph::Graph;
use crate::{Context, Error, Result};

/// Bytes of parameters per dispatch (also a valid uniform offset alignment everywhere).
const PARAM_SLOT: usize = 256;

/// Per-backend state kept between graphs: the parameter buffer and the scratch buffer for copies
/// of aliased sources.
#[derive(Default)]
pub(crate) struct State {
    params: Option<wgpu::Buffer>,
    scratch: Option<wgpu::Buffer>,
}

fn overlap(a: &Bind<'_>, b: &Bind<'_>) -> bool {
    a.buf == b.buf && a.offset < b.offset + b.size && b.offset < a.offset + a.size
}

/// Source bindings (slot >= 1; slot 0 is the destination) that overlap the destination or an
/// earlier source: they are read from a copy.
fn aliased(binds: &[Bind<'_>]) -> Vec<usize> {
    (1..binds.len())
        .filter(|&j| (0..j).any(|k| overlap(&binds[j], &binds[k])))
        .collect()
}

pub(crate) fn graph_compute(
    shared: &Shared,
    state: &mut State,
    ctx: &Context,
    graph: &Graph,
) -> Result<()> {
    // Plan everything first: an unsupported node fails before anything runs.
    let mut plans: Vec<Dispatch<'_>> = Vec::with_capacity(graph.nodes.len());
    for &id in &graph.nodes {
        plans.extend(plan::plan(shared, ctx, id)?);
    }
    if plans.is_empty() {
        return Ok(());
    }
    let slot = PARAM_SLOT.max(shared.limits.min_uniform_buffer_offset_alignment as usize);
    let need = (plans.len() * slot) as u64;
    let params = match &state.params {
        Some(b) if b.size() >= need => b.clone(),
        _ => {
            let b = shared.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("ggweb params"),
                size: need.next_power_of_two().max(4096),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            state.params = Some(b.clone());
            b
        }
    };
    let mut bytes = vec![0u8; plans.len() * slot];
    for (i, d) in plans.iter().enumerate() {
        bytes[i * slot..i * slot + 256].copy_from_slice(bytemuck::cast_slice(&d.params));
    }
    shared.queue.write_buffer(&params, 0, &bytes);

    // Copies of aliased sources: per dispatch, regions of the scratch buffer from offset 0 (a
    // copy and its dispatch run before the next copy, in command order, so regions are reused).
    let align = (shared.limits.min_storage_buffer_offset_alignment as u64).max(256);
    let copies: Vec<Vec<(usize, u64)>> = plans
        .iter()
        .map(|d| {
            let mut at = 0u64;
            aliased(&d.binds)
                .into_iter()
                .map(|j| {
                    let off = at;
                    at += d.binds[j].size.div_ceil(align) * align;
                    (j, off)
                })
                .collect()
        })
        .collect();
    let scratch_need = plans
        .iter()
        .zip(&copies)
        .map(|(d, c)| {
            c.iter()
                .map(|&(j, off)| off + d.binds[j].size)
                .max()
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    let scratch = if scratch_need == 0 {
        None
    } else {
        match &state.scratch {
            Some(b) if b.size() >= scratch_need => Some(b.clone()),
            _ => {
                if scratch_need > shared.limits.max_buffer_size {
                    return Err(Error::OutOfMemory(format!(
                        "WebGPU scratch buffer of {scratch_need} bytes for aliased bindings"
                    )));
                }
                let b = shared.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("ggweb scratch"),
                    size: scratch_need.div_ceil(align) * align,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                state.scratch = Some(b.clone());
                Some(b)
            }
        }
    };

    let mut pipelines = Vec::with_capacity(plans.len());
    let mut groups = Vec::with_capacity(plans.len());
    for (i, d) in plans.iter().enumerate() {
        let p = pipeline::pipeline(shared, d)?;
        let layout = pipeline::layout(shared, p.n_storage);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &params,
                offset: (i * slot) as u64,
                size: wgpu::BufferSize::new(256),
            }),
        }];
        for (b, bind) in d.binds.iter().enumerate() {
            let (buffer, offset) = match (copies[i].iter().find(|c| c.0 == b), &scratch) {
                (Some(&(_, off)), Some(sc)) => (sc, off),
                _ => (bind.buf, bind.offset),
            };
            entries.push(wgpu::BindGroupEntry {
                binding: b as u32 + 1,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset,
                    size: wgpu::BufferSize::new(bind.size),
                }),
            });
        }
        let bg = shared.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout.0,
            entries: &entries,
        });
        pipelines.push(p);
        groups.push(bg);
    }
    let mut enc = shared
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("ggweb graph"),
        });
    let mut i = 0;
    while i < plans.len() {
        // Copies for dispatch i, then one pass up to the next dispatch that needs copies.
        if let Some(sc) = &scratch {
            for &(j, off) in &copies[i] {
                let b = &plans[i].binds[j];
                enc.copy_buffer_to_buffer(b.buf, b.offset, sc, off, b.size);
            }
        }
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("ggweb graph"),
            timestamp_writes: None,
        });
        loop {
            let d = &plans[i];
            pass.set_pipeline(&pipelines[i].pipeline);
            pass.set_bind_group(0, &groups[i], &[]);
            pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            i += 1;
            if i >= plans.len() || !copies[i].is_empty() {
                break;
            }
        }
    }
    shared.queue.submit([enc.finish()]);
    shared.take_error()
}

/// GFLOP/s of `dst = mul_mat(W, x)` on the default WebGPU device with W `dtype` [k, m] and
/// x f32 [k, n], repeated for at least `min_seconds` (native; blocking).
#[cfg(not(target_arch = "wasm32"))]
pub fn bench_mul_mat_webgpu(
    dtype: crate::DType,
    m: usize,
    n: usize,
    k: usize,
    min_seconds: f64,
) -> Result<f64> {
    let dev = super::default_device().ok_or_else(|| Error::Backend("no WebGPU adapter".into()))?;
    bench_mul_mat_on(&dev, dtype, m, n, k, min_seconds)
}

/// As [`bench_mul_mat_webgpu`] on a given device.
#[cfg(not(target_arch = "wasm32"))]
pub fn bench_mul_mat_on(
    dev: &std::sync::Arc<super::WebGpuDevice>,
    dtype: crate::DType,
    m: usize,
    n: usize,
    k: usize,
    min_seconds: f64,
) -> Result<f64> {
    use crate::backend::Device;
    let mut ctx = Context::new();
    let w = ctx.new_tensor_2d(dtype, k, m)?;
    let x = ctx.new_tensor_2d(crate::DType::F32, k, n)?;
    let y = ctx.new_op(crate::Op::MulMat, crate::DType::F32, [m, n, 1, 1], &[w, x])?;
    let buft = dev.buffer_type();
    let buf = crate::alloc::alloc_ctx_tensors(&mut ctx, &buft)?
        .ok_or_else(|| Error::Backend("nothing allocated".into()))?;
    // Weights: random-looking bytes are not valid blocks for every type (NaN scales); fill with a
    // constant byte pattern that decodes to small finite values in every format.
    buf.clear(0x11)?;
    let xs: Vec<f32> = (0..k * n).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
    ctx.set_f32(x, &xs)?;
    let graph = Graph::build(&ctx, &[y]);
    let mut be = dev.init_backend()?;
    be.graph_compute(&ctx, &graph)?;
    be.synchronize()?;
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let start = std::time::Instant::now();
    let mut iters = 0usize;
    loop {
        be.graph_compute(&ctx, &graph)?;
        be.synchronize()?;
        iters += 1;
        let el = start.elapsed().as_secs_f64();
        if el >= min_seconds {
            return Ok(flops * iters as f64 / el / 1e9);
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub fn bench_mul_mat_webgpu(
    _dtype: crate::DType,
    _m: usize,
    _n: usize,
    _k: usize,
    _min_seconds: f64,
) -> Result<f64> {
    Err(Error::Backend(
        "the blocking WebGPU benchmark is native only".into(),
    ))
}
