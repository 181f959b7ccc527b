//! The CUDA backend (feature `cuda`, native only): cudarc's driver API with libcuda loaded at run
//! time, kernels in `shaders/cuda/*.cu` compiled by NVRTC for each device's compute capability
//! (`nvrtc.rs`, cached per device in `kernels.rs`). Registry → [`CudaDevice`] (a context and one
//! stream) → [`CudaBackend`] (launches on that stream) → buffer types (device memory, pinned host
//! memory) → buffers (`buffer.rs`). What runs is decided by `support.rs`, how by `plan.rs`.
//!
//! Without a driver, a device or libnvrtc the registry lists no device and [`probe`] says why;
//! nothing here panics on a machine without CUDA (cudarc would, so the libraries are checked
//! before their first use and the probe runs under `catch_unwind`).

mod buffer;
pub mod kernels;
pub mod nvrtc;
mod plan;
mod support;

use std::any::Any;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{sys, CudaContext, CudaStream, LaunchConfig, PushKernelArg};

use buffer::driver_err;
pub use buffer::{CudaBuffer, CudaBufferType, CudaHostBuffer, CudaHostBufferType};
pub use support::WEIGHT_TYPES;

use crate::backend::{Backend, Buffer, BufferType, Device, DeviceKind, Registry};
use crate::graph::Graph;
use crate::{Context, Error, Result, TensorId};

/// What a device's buffers, backends and buffer types share.
pub(crate) struct Shared {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub name: String,
    /// (major, minor) compute capability.
    pub cc: (i32, i32),
    pub total_mem: usize,
    pub modules: kernels::ModuleCache,
}

impl Shared {
    /// Make the device's context current on this thread (driver calls act on the current one).
    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_err("bind context", e))
    }
    /// Wait for everything enqueued on the stream.
    pub fn sync(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| driver_err("stream synchronize", e))
    }
}

/// One CUDA device: its context, stream, buffer types and compiled kernels.
pub struct CudaDevice {
    pub(crate) shared: Arc<Shared>,
    buft: Arc<CudaBufferType>,
    host_buft: Arc<CudaHostBufferType>,
    name: String,
}

impl CudaDevice {
    /// Open device `ordinal` (its primary context and a new stream).
    pub fn new(ordinal: usize) -> Result<Arc<CudaDevice>> {
        check_libraries()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_err("context", e))?;
        // One stream per device, shared by its buffers and backends, so transfers and kernels
        // are ordered without events.
        // SAFETY: nothing of this context was created on another stream yet.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| driver_err("stream", e))?;
        let cc = ctx
            .compute_capability()
            .map_err(|e| driver_err("compute capability", e))?;
        if cc.0 < 6 || (cc.0 == 6 && cc.1 < 1) {
            return Err(Error::Backend(format!(
                "CUDA device {ordinal} has compute capability {}.{}; the kernels need 6.1 (dp4a)",
                cc.0, cc.1
            )));
        }
        let dev_name = ctx
            .name()
            .unwrap_or_else(|_| format!("CUDA device {ordinal}"));
        let total_mem = ctx.total_mem().map_err(|e| driver_err("total memory", e))?;
        let arch = (cc.0 * 10 + cc.1) as u32;
        let name = format!("CUDA{ordinal}");
        let shared = Arc::new(Shared {
            ctx,
            stream,
            name: dev_name,
            cc,
            total_mem,
            modules: kernels::ModuleCache::new(arch),
        });
        Ok(Arc::new(CudaDevice {
            buft: Arc::new(CudaBufferType {
                shared: shared.clone(),
                name: name.clone(),
            }),
            host_buft: Arc::new(CudaHostBufferType {
                shared: shared.clone(),
                name: format!("{name}_Host"),
            }),
            shared,
            name,
        }))
    }

    /// The GPU's name (e.g. "NVIDIA H200").
    pub fn gpu_name(&self) -> &str {
        &self.shared.name
    }

    /// (major, minor) compute capability; kernels are compiled for `sm_<major><minor>`.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.shared.cc
    }

    /// Device memory, concretely typed.
    pub fn cuda_buffer_type(&self) -> Arc<CudaBufferType> {
        self.buft.clone()
    }

    /// Pinned host memory of this device (the CPU reads it; copies to the device are direct).
    pub fn host_buffer_type(&self) -> Arc<CudaHostBufferType> {
        self.host_buft.clone()
    }

    /// A backend (stream) on this device, concretely typed.
    pub fn backend(self: &Arc<Self>) -> CudaBackend {
        CudaBackend {
            dev: self.clone(),
            scratch: None,
        }
    }

    /// Why node `t` cannot run on this device (`None` when it can).
    pub fn explain_op(&self, ctx: &Context, t: TensorId) -> Option<String> {
        support::check(ctx, t).err()
    }

    /// Compile (or fetch from the cache) kernel `entry` for this device.
    pub fn warm_up(&self, entry: &str) -> Result<()> {
        self.shared
            .modules
            .function(&self.shared.ctx, entry)
            .map(|_| ())
    }
}

impl Device for CudaDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> String {
        format!(
            "{} (compute capability {}.{}, {} MiB)",
            self.shared.name,
            self.shared.cc.0,
            self.shared.cc.1,
            self.shared.total_mem >> 20
        )
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }
    fn memory(&self) -> (usize, usize) {
        if self.shared.bind().is_err() {
            return (0, self.shared.total_mem);
        }
        self.shared
            .ctx
            .mem_get_info()
            .unwrap_or((0, self.shared.total_mem))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CudaBackend {
            dev: Arc::new(CudaDevice {
                shared: self.shared.clone(),
                buft: self.buft.clone(),
                host_buft: self.host_buft.clone(),
                name: self.name.clone(),
            }),
            scratch: None,
        }))
    }
    fn supports_op(&self, ctx: &Context, t: TensorId) -> bool {
        support::check(ctx, t).is_ok()
    }
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.id() == BufferType::id(&*self.buft)
    }
    fn unsupported_reason(&self, ctx: &Context, t: TensorId) -> Option<String> {
        support::check(ctx, t).err()
    }
}

/// A CUDA stream: launches the kernels of a graph whose tensors live in this device's memory.
pub struct CudaBackend {
    dev: Arc<CudaDevice>,
    /// Device memory for src1 quantized to q8 blocks (quantized mat_vec), grown as needed.
    scratch: Option<Arc<dyn Buffer>>,
}

impl CudaBackend {
    pub fn cuda_device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }

    fn scratch_ptr(&mut self, bytes: usize) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        if self.scratch.as_ref().is_none_or(|s| s.size() < bytes) {
            // The old scratch may still be read by queued kernels; its Drop waits for them.
            self.scratch = None;
            self.scratch = Some(
                self.dev
                    .buft
                    .clone()
                    .alloc_buffer(bytes.next_power_of_two())?,
            );
        }
        let s = self.scratch.as_ref().expect("allocated above");
        let buf = s
            .as_any()
            .downcast_ref::<CudaBuffer>()
            .expect("a CUDA buffer");
        Ok(buf.ptr)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.dev.name
    }
    fn device(&self) -> Arc<dyn Device> {
        self.dev.clone()
    }
    /// Enqueue every node's launches on the stream (returns before the GPU finishes; reads of
    /// device memory wait for it, being on the same stream).
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        let need = graph
            .nodes
            .iter()
            .map(|&n| plan::scratch_bytes(ctx, n))
            .max()
            .unwrap_or(0);
        let scratch = self.scratch_ptr(need)?;
        let shared = self.dev.shared.clone();
        shared.bind()?;
        for &node in &graph.nodes {
            for l in plan::plan(ctx, node, scratch)? {
                let f = shared.modules.function(&shared.ctx, &l.entry)?;
                let cfg = LaunchConfig {
                    grid_dim: l.grid,
                    block_dim: (l.block, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = shared.stream.launch_builder(&f);
                b.arg(&l.params);
                // SAFETY: the parameter block matches the kernels' `Params`; every address in it
                // points into a live CUDA buffer of this device at a range the plan checked.
                unsafe { b.launch(cfg) }.map_err(|e| {
                    driver_err(
                        &format!("launch {} for '{}'", l.entry, ctx.tensor(node).name),
                        e,
                    )
                })?;
            }
        }
        Ok(())
    }
    fn synchronize(&mut self) -> Result<()> {
        self.dev.shared.bind()?;
        self.dev.shared.sync()
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Whether the CUDA backend computes node `t` of `ctx` (what `supports_op` of any CUDA device
/// answers: the check depends on the graph only), or why not. Usable without a device.
pub fn check_op(ctx: &Context, t: TensorId) -> std::result::Result<(), String> {
    support::check(ctx, t)
}

/// One planned kernel launch: entry point, parameter block, grid, threads per block.
pub type PlannedLaunch = (String, kernels::KParams, (u32, u32, u32), u32);

/// The launches of node `t` with every tensor at the address `locate` gives (the host check of
/// the kernels, `native-tests/tests/cuda.rs`, runs them over host memory); `scratch`: the q8
/// scratch of a quantized mat_vec.
#[doc(hidden)]
pub fn plan_node(
    ctx: &Context,
    t: TensorId,
    scratch: u64,
    locate: &dyn Fn(&Context, TensorId) -> Result<u64>,
) -> Result<Vec<PlannedLaunch>> {
    Ok(plan::plan_at(ctx, t, scratch, locate)?
        .into_iter()
        .map(|l| (l.entry, l.params, l.grid, l.block))
        .collect())
}

/// libcuda and libnvrtc are loadable (libcuda checked before cudarc's first call, which would
/// panic without it).
fn check_libraries() -> Result<()> {
    // SAFETY: only tries to open libcuda by its names.
    let cuda = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !cuda {
        return Err(Error::Backend(
            "no CUDA driver (libcuda.so not found by the dynamic loader)".into(),
        ));
    }
    nvrtc::available().map_err(Error::Backend)
}

/// The devices of this machine, or why there are none (computed once).
fn probe_all() -> &'static std::result::Result<Vec<Arc<CudaDevice>>, String> {
    static DEVICES: OnceLock<std::result::Result<Vec<Arc<CudaDevice>>, String>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let r = std::panic::catch_unwind(|| -> Result<Vec<Arc<CudaDevice>>> {
            check_libraries()?;
            cudarc::driver::result::init().map_err(|e| driver_err("cuInit", e))?;
            let n = CudaContext::device_count().map_err(|e| driver_err("device count", e))?;
            if n <= 0 {
                return Err(Error::Backend("the CUDA driver reports no device".into()));
            }
            let ordinal = std::env::var("GGWEB_CUDA_DEVICE")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            Ok(vec![CudaDevice::new(ordinal)?])
        });
        match r {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(Error::Backend(m))) => Err(m),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(
                "the CUDA driver library panicked while loading (an incompatible libcuda?)".into(),
            ),
        }
    })
}

/// The default CUDA device (`GGWEB_CUDA_DEVICE`, else 0), or why there is none.
pub fn probe() -> std::result::Result<Arc<CudaDevice>, String> {
    match probe_all() {
        Ok(v) => v
            .first()
            .cloned()
            .ok_or_else(|| "no CUDA device".to_string()),
        Err(e) => Err(e.clone()),
    }
}

/// The default device if there is one.
pub fn default_device() -> Option<Arc<CudaDevice>> {
    probe().ok()
}

/// The CUDA registry: the default device, if the driver, a device and NVRTC are there.
pub struct CudaRegistry;

impl Registry for CudaRegistry {
    fn name(&self) -> &str {
        "CUDA"
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        default_device()
            .map(|d| vec![d as Arc<dyn Device>])
            .unwrap_or_default()
    }
}

/// Time `mul_mat(W, x)` with W [k, m] of `dtype` and x [k, n] f32 on the default CUDA device:
/// one warm-up compute, then computes until `min_seconds` have passed (at least 3); returns
/// (GFLOP/s, weight GB/s) of the median iteration (FLOPs = 2·m·n·k; bytes = W's size).
pub fn bench_mul_mat_cuda(
    dtype: crate::DType,
    m: usize,
    n: usize,
    k: usize,
    min_seconds: f64,
) -> Result<(f64, f64)> {
    let dev = probe().map_err(Error::Backend)?;
    let mut ctx = Context::new();
    let w = ctx.new_tensor_2d(dtype, k, m)?;
    let x = ctx.new_tensor_2d(crate::DType::F32, k, n)?;
    let y = ctx.mul_mat(w, x)?;
    crate::alloc::alloc_ctx_tensors(&mut ctx, &(dev.cuda_buffer_type() as Arc<dyn BufferType>))?;
    let row_bytes = dtype.row_size(k)?;
    let mut bytes = vec![0u8; row_bytes * m];
    let mut row = vec![0f32; k];
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for dst in bytes.chunks_exact_mut(row_bytes) {
        for v in row.iter_mut() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            *v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        }
        crate::quant::quantize_row(dtype, &row, dst)?;
    }
    ctx.set_bytes(w, &bytes)?;
    let xv: Vec<f32> = (0..k * n).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
    ctx.set_f32(x, &xv)?;
    let graph = Graph::build(&ctx, &[y]);
    let mut be = dev.backend();
    be.graph_compute(&ctx, &graph)?;
    be.synchronize()?;
    let mut times = Vec::new();
    let t0 = std::time::Instant::now();
    while times.len() < 3 || t0.elapsed().as_secs_f64() < min_seconds {
        let t = std::time::Instant::now();
        be.graph_compute(&ctx, &graph)?;
        be.synchronize()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let sec = times[times.len() / 2].max(1e-9);
    Ok((
        2.0 * (m * n * k) as f64 / sec / 1e9,
        (row_bytes * m) as f64 / sec / 1e9,
    ))
}
