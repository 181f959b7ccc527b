//! The WebGPU backend, written once against `wgpu`: Vulkan/Metal/DX12 natively, `navigator.gpu`
//! in the browser. Kernels are WGSL (`shaders/*.wgsl` at the repository root), composed per
//! (kernel, type, variant) and compiled once per device.
//!
//! Device creation is async (the browser's API is); natively [`WebGpuDevice::new_blocking`] wraps
//! it. Graph compute encodes one command encoder with one compute pass per graph: one dispatch per
//! node, parameters in one uniform buffer (a 256-byte slot per dispatch), tensors bound at their
//! offsets with their sizes. Reads go through a staging buffer and `map_async`
//! ([`WebGpuBuffer::read_async`]; natively `Buffer::get` blocks on `device.poll`).
//!
//! Capabilities are discovered: `shader-f16` is used when the adapter has it (set
//! `GGWEB_WEBGPU_F32=1` or [`WebGpuOptions::force_f32`] to use the f32 path that always exists).
//! A tensor larger than `max_storage_buffer_binding_size` is split over several bindings and
//! dispatches where the op allows it (mul_mat/get_rows by rows of a 2-D src0, 2-D mul_mat by
//! columns of dst and src1; said by `Device::op_note`); otherwise `supports_op` is false for its
//! node, with the reason in [`WebGpuDevice::explain_op`], so the scheduler keeps it on the CPU.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::backend::{Backend, BackendFuture, BufferType, Device, DeviceKind, Registry};
use crate::graph::Graph;
use crate::{Context, Error, Result, TensorId};

mod buffer;
mod compute;
mod pipeline;
mod plan;
mod shader;
mod split;
mod support;
pub mod util;

pub use buffer::{WebGpuBuffer, WebGpuBufferType};
#[cfg(not(target_arch = "wasm32"))]
pub use compute::bench_mul_mat_on;
pub use compute::bench_mul_mat_webgpu;
/// For the shader checks of native-tests (`metal_msl.rs`).
#[doc(hidden)]
pub use plan::{kernel_variants, KernelVariant};
#[cfg(not(target_arch = "wasm32"))]
pub use util::block_on;

/// Options for opening a device.
#[derive(Debug, Clone, Default)]
pub struct WebGpuOptions {
    /// Never use `shader-f16` even when the adapter has it (tests the f32 path).
    pub force_f32: bool,
    /// Pick the first adapter whose name contains this (case-insensitive); default: the
    /// high-performance adapter wgpu recommends.
    pub adapter_name: Option<String>,
    /// mul_mat with n = 1: `Some(true)` one invocation per output row, `Some(false)` one
    /// workgroup per row with a reduction in workgroup memory; `None` picks per-row on CPU
    /// adapters (lavapipe, SwiftShader) and the reduction elsewhere. Env: `GGWEB_WEBGPU_MATVEC`
    /// = `rows` | `reduce`.
    pub matvec_rows: Option<bool>,
    /// Request a smaller `max_storage_buffer_binding_size` than the adapter's (bytes): exercises
    /// the splitting of large weights over several bindings on small tensors. Env:
    /// `GGWEB_WEBGPU_MAX_BINDING`.
    pub max_storage_binding: Option<u64>,
}

impl WebGpuOptions {
    /// Defaults plus the environment: `GGWEB_WEBGPU_F32=1` forces the f32 path,
    /// `GGWEB_WEBGPU_ADAPTER=<substring>` picks an adapter by name.
    pub fn from_env() -> Self {
        #[allow(unused_mut)]
        let mut o = WebGpuOptions::default();
        #[cfg(not(target_arch = "wasm32"))]
        {
            if let Ok(v) = std::env::var("GGWEB_WEBGPU_F32") {
                o.force_f32 = !(v.is_empty() || v == "0");
            }
            match std::env::var("GGWEB_WEBGPU_MATVEC").ok().as_deref() {
                Some("rows") => o.matvec_rows = Some(true),
                Some("reduce") => o.matvec_rows = Some(false),
                _ => {}
            }
            if let Some(v) = std::env::var("GGWEB_WEBGPU_MAX_BINDING")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
            {
                o.max_storage_binding = Some(v);
            }
            if let Ok(v) = std::env::var("GGWEB_WEBGPU_ADAPTER") {
                if !v.is_empty() {
                    o.adapter_name = Some(v);
                }
            }
        }
        o
    }
}

/// What an adapter is and can do (for `--backend` reports and the JS API).
#[derive(Debug, Clone)]
pub struct AdapterReport {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// The adapter's optional features, as wgpu names them (e.g. "SHADER_F16").
    pub features: Vec<String>,
    pub shader_f16: bool,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub min_storage_buffer_offset_alignment: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_compute_invocations_per_workgroup: u32,
}

impl std::fmt::Display for AdapterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {}, driver {} {}; shader-f16 {}; max buffer {} MiB, max storage binding {} MiB, \
             storage offset alignment {})",
            self.name,
            self.backend,
            self.device_type,
            self.driver,
            self.driver_info,
            if self.shader_f16 { "yes" } else { "no" },
            self.max_buffer_size >> 20,
            self.max_storage_buffer_binding_size >> 20,
            self.min_storage_buffer_offset_alignment
        )
    }
}

fn report(
    info: &wgpu::AdapterInfo,
    features: wgpu::Features,
    limits: &wgpu::Limits,
) -> AdapterReport {
    AdapterReport {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: info.driver.clone(),
        driver_info: info.driver_info.clone(),
        features: features.iter_names().map(|(n, _)| n.to_string()).collect(),
        shader_f16: features.contains(wgpu::Features::SHADER_F16),
        max_buffer_size: limits.max_buffer_size,
        max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
        min_storage_buffer_offset_alignment: limits.min_storage_buffer_offset_alignment,
        max_compute_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
        max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
    }
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    #[cfg(not(target_arch = "wasm32"))]
    {
        // Compute needs storage buffers in compute shaders: Vulkan, Metal, DX12 (not GL).
        if std::env::var("WGPU_BACKEND").is_err() {
            desc.backends = wgpu::Backends::PRIMARY;
        }
    }
    #[cfg(target_arch = "wasm32")]
    {
        desc.backends = wgpu::Backends::BROWSER_WEBGPU;
    }
    wgpu::Instance::new(desc)
}

/// Every adapter wgpu finds (natively; in the browser only the one `requestAdapter` gives).
pub async fn enumerate_adapters() -> Vec<AdapterReport> {
    let inst = instance();
    #[cfg(not(target_arch = "wasm32"))]
    {
        inst.enumerate_adapters(wgpu::Backends::PRIMARY)
            .await
            .iter()
            .map(|a| report(&a.get_info(), a.features(), &a.limits()))
            .collect()
    }
    #[cfg(target_arch = "wasm32")]
    {
        match inst
            .request_adapter(&wgpu::RequestAdapterOptions::default())
            .await
        {
            Ok(a) => vec![report(&a.get_info(), a.features(), &a.limits())],
            Err(_) => Vec::new(),
        }
    }
}

/// State shared by the device, its buffer type, buffers and backends.
pub(crate) struct Shared {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) report: AdapterReport,
    pub(crate) limits: wgpu::Limits,
    /// `shader-f16` is enabled on the device and used by the kernels.
    pub(crate) use_f16: bool,
    /// n = 1 mul_mat with one invocation per row (no workgroup reduction): faster on CPU
    /// emulations (lavapipe, SwiftShader), where barriers are costly.
    pub(crate) matvec_rows: bool,
    pub(crate) pipelines: Mutex<HashMap<String, Arc<pipeline::Pipeline>>>,
    pub(crate) layouts: Mutex<HashMap<usize, Arc<(wgpu::BindGroupLayout, wgpu::PipelineLayout)>>>,
    /// The first uncaptured wgpu error since the last check (validation errors are reported as
    /// `Error::Backend` by the next operation instead of panicking).
    pub(crate) error: Arc<Mutex<Option<String>>>,
}

impl Shared {
    pub(crate) fn take_error(&self) -> Result<()> {
        let e = self.error.lock().map(|mut g| g.take()).unwrap_or(None);
        match e {
            Some(msg) => Err(Error::Backend(format!("WebGPU: {msg}"))),
            None => Ok(()),
        }
    }

    /// Alignment of tensor offsets (the storage-binding offset alignment, at least 16).
    pub(crate) fn alignment(&self) -> usize {
        (self.limits.min_storage_buffer_offset_alignment as usize).max(16)
    }

    pub(crate) fn max_binding(&self) -> usize {
        self.limits.max_storage_buffer_binding_size as usize
    }
}

/// A WebGPU device (one adapter, one wgpu device and queue).
pub struct WebGpuDevice {
    pub(crate) shared: Arc<Shared>,
    buft: Arc<WebGpuBufferType>,
    name: String,
}

impl WebGpuDevice {
    /// Open the adapter chosen by `opts` and create a device on it, with `shader-f16` when the
    /// adapter has it (unless `force_f32`) and the adapter's own limits (storage binding size,
    /// buffer size, workgroups) rather than WebGPU's defaults.
    pub async fn new(opts: &WebGpuOptions) -> Result<Arc<WebGpuDevice>> {
        let inst = instance();
        let adapter = match &opts.adapter_name {
            #[cfg(not(target_arch = "wasm32"))]
            Some(want) => {
                let want = want.to_lowercase();
                inst.enumerate_adapters(wgpu::Backends::PRIMARY)
                    .await
                    .into_iter()
                    .find(|a| a.get_info().name.to_lowercase().contains(&want))
                    .ok_or_else(|| {
                        Error::Backend(format!("no WebGPU adapter named like '{want}'"))
                    })?
            }
            _ => inst
                .request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    force_fallback_adapter: false,
                    compatible_surface: None,
                    // The real limits (128 MiB storage bindings on lavapipe), not buckets.
                    apply_limit_buckets: false,
                })
                .await
                .map_err(|e| Error::Backend(format!("no WebGPU adapter: {e}")))?,
        };
        let features = adapter.features();
        let use_f16 = features.contains(wgpu::Features::SHADER_F16) && !opts.force_f32;
        let mut required_features = wgpu::Features::empty();
        if use_f16 {
            required_features |= wgpu::Features::SHADER_F16;
        }
        let mut limits = adapter.limits();
        if let Some(cap) = opts.max_storage_binding {
            // Never below one 4 KiB page, and aligned as binding sizes must be.
            let cap = (cap.max(4096) / 4) * 4;
            limits.max_storage_buffer_binding_size =
                limits.max_storage_buffer_binding_size.min(cap);
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("ggweb"),
                required_features,
                required_limits: limits.clone(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| Error::Backend(format!("WebGPU request_device: {e}")))?;
        let error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let err2 = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut g) = err2.lock() {
                if g.is_none() {
                    *g = Some(e.to_string());
                }
            }
        }));
        let mut limits = device.limits();
        if let Some(cap) = opts.max_storage_binding {
            // A browser raises required limits below WebGPU's defaults to the defaults (128 MiB
            // here), so the cap is also applied to what the device reports.
            let cap = (cap.max(4096) / 4) * 4;
            limits.max_storage_buffer_binding_size =
                limits.max_storage_buffer_binding_size.min(cap);
        }
        #[allow(unused_mut)]
        let mut rep = report(&adapter.get_info(), features, &limits);
        #[cfg(target_arch = "wasm32")]
        if let Some((vendor, arch, desc)) = util::browser_adapter_info().await {
            if rep.name.is_empty() {
                let n = format!("{vendor} {arch}").trim().to_string();
                rep.name = if n.is_empty() { desc } else { n };
            }
            rep.driver = vendor;
            rep.driver_info = arch;
            // Chromium's SwiftShader is a CPU emulation, though not flagged as a fallback adapter.
            if rep.driver_info.contains("swiftshader") {
                rep.device_type = format!("{:?}", wgpu::DeviceType::Cpu);
            }
        }
        if rep.name.is_empty() {
            rep.name = "unnamed adapter".into();
        }
        let name = format!("WebGPU ({})", rep.name);
        let matvec_rows = opts
            .matvec_rows
            .unwrap_or(rep.device_type == format!("{:?}", wgpu::DeviceType::Cpu));
        let shared = Arc::new(Shared {
            device,
            queue,
            report: rep,
            limits,
            use_f16,
            matvec_rows,
            pipelines: Mutex::new(HashMap::new()),
            layouts: Mutex::new(HashMap::new()),
            error,
        });
        let buft = Arc::new(WebGpuBufferType {
            shared: shared.clone(),
            name: name.clone(),
        });
        Ok(Arc::new(WebGpuDevice { shared, buft, name }))
    }

    /// [`WebGpuDevice::new`], blocking (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking(opts: &WebGpuOptions) -> Result<Arc<WebGpuDevice>> {
        block_on(Self::new(opts))
    }

    /// What the adapter is and can do.
    pub fn adapter(&self) -> &AdapterReport {
        &self.shared.report
    }

    /// True when kernels use `shader-f16` (false on the f32 path).
    pub fn uses_f16(&self) -> bool {
        self.shared.use_f16
    }

    /// True when n = 1 mul_mat uses one invocation per row (see [`WebGpuOptions::matvec_rows`]).
    pub fn matvec_rows(&self) -> bool {
        self.shared.matvec_rows
    }

    /// The buffer type, concretely typed.
    pub fn webgpu_buffer_type(&self) -> Arc<WebGpuBufferType> {
        self.buft.clone()
    }

    /// A backend (stream) on this device, concretely typed.
    pub fn backend(self: &Arc<Self>) -> WebGpuBackend {
        WebGpuBackend::new(self.clone())
    }

    /// Why node `t` cannot run on this device (`None` when it can): the op, the types, or a
    /// tensor larger than one storage binding.
    pub fn explain_op(&self, ctx: &Context, t: TensorId) -> Option<String> {
        support::check(&self.shared, ctx, t).err()
    }
}

impl Device for WebGpuDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> String {
        format!(
            "{}{}",
            self.shared.report,
            if self.shared.use_f16 {
                ""
            } else {
                " [f32 path]"
            }
        )
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }
    fn memory(&self) -> (usize, usize) {
        (0, 0)
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(WebGpuBackend {
            dev: Arc::new(WebGpuDevice {
                shared: self.shared.clone(),
                buft: self.buft.clone(),
                name: self.name.clone(),
            }),
            state: compute::State::default(),
        }))
    }
    fn supports_op(&self, ctx: &Context, t: TensorId) -> bool {
        support::check(&self.shared, ctx, t).is_ok()
    }
    fn unsupported_reason(&self, ctx: &Context, t: TensorId) -> Option<String> {
        support::check(&self.shared, ctx, t).err()
    }
    fn op_note(&self, ctx: &Context, t: TensorId) -> Option<String> {
        split::split_note(&self.shared, ctx, t)
    }
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.id() == BufferType::id(&*self.buft)
    }
}

/// A WebGPU stream: computes graphs whose tensors live in this device's buffers.
pub struct WebGpuBackend {
    pub(crate) dev: Arc<WebGpuDevice>,
    state: compute::State,
}

impl WebGpuBackend {
    pub fn new(dev: Arc<WebGpuDevice>) -> Self {
        WebGpuBackend {
            dev,
            state: compute::State::default(),
        }
    }

    pub fn webgpu_device(&self) -> &Arc<WebGpuDevice> {
        &self.dev
    }
}

impl Backend for WebGpuBackend {
    fn name(&self) -> &str {
        &self.dev.name
    }
    fn device(&self) -> Arc<dyn Device> {
        self.dev.clone()
    }
    /// Encode and submit the graph (returns before the GPU finishes; reads wait for it).
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        compute::graph_compute(&self.dev.shared, &mut self.state, ctx, graph)
    }
    fn synchronize(&mut self) -> Result<()> {
        util::wait_idle(&self.dev.shared)
    }
    /// Without blocking: usable in the browser.
    fn synchronize_async(&mut self) -> BackendFuture<'_, ()> {
        Box::pin(util::wait_idle_async(&self.dev.shared))
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

static DEVICES: OnceLock<Vec<Arc<WebGpuDevice>>> = OnceLock::new();

/// Open the default device once (async; required in the browser before [`WebGpuRegistry`]
/// lists it). Returns the device or why there is none.
pub async fn init_default_device() -> Result<Arc<WebGpuDevice>> {
    if let Some(d) = DEVICES.get().and_then(|v| v.first()) {
        return Ok(d.clone());
    }
    let d = WebGpuDevice::new(&WebGpuOptions::from_env()).await?;
    let _ = DEVICES.set(vec![d.clone()]);
    Ok(DEVICES.get().and_then(|v| v.first()).cloned().unwrap_or(d))
}

/// The default device if one exists (natively opened on first use, blocking; in the browser only
/// after [`init_default_device`] resolved).
pub fn default_device() -> Option<Arc<WebGpuDevice>> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        DEVICES
            .get_or_init(
                || match WebGpuDevice::new_blocking(&WebGpuOptions::from_env()) {
                    Ok(d) => vec![d],
                    Err(_) => Vec::new(),
                },
            )
            .first()
            .cloned()
    }
    #[cfg(target_arch = "wasm32")]
    {
        DEVICES.get().and_then(|v| v.first()).cloned()
    }
}

/// The WebGPU registry: the default adapter's device, if there is one.
pub struct WebGpuRegistry;

impl Registry for WebGpuRegistry {
    fn name(&self) -> &str {
        "WebGPU"
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        default_device()
            .map(|d| vec![d as Arc<dyn Device>])
            .unwrap_or_default()
    }
}
