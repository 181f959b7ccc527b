//! ggml's backend layering as Rust traits: registry → device → backend (stream) → buffer type →
//! buffer. A backend computes graphs; a buffer type allocates buffers a device can use; a buffer
//! holds tensor data at offsets the allocator chooses.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::graph::Graph;
use crate::{Context, Result, TensorId};

pub mod cpu;
pub mod sched;

/// Weight types of the WebGPU mul_mat and get_rows kernels (dequantized in the shader). Here, not in
/// `webgpu/`, so that the shared test cases (the `ggweb-testing` crate, also built without wgpu) name the same list.
pub const WEBGPU_WEIGHT_TYPES: [crate::DType; 10] = [
    crate::DType::F32,
    crate::DType::F16,
    crate::DType::Q4_0,
    crate::DType::Q4_1,
    crate::DType::Q5_0,
    crate::DType::Q5_1,
    crate::DType::Q8_0,
    crate::DType::Q4_K,
    crate::DType::Q5_K,
    crate::DType::Q6_K,
];
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
pub mod cuda;
#[cfg(feature = "webgpu")]
pub mod webgpu;

/// What a buffer is used for; the scheduler keeps ops next to their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BufferUsage {
    #[default]
    Any = 0,
    Weights = 1,
    Compute = 2,
}

/// A buffer's [`BufferUsage`], settable through a shared reference (buffers are shared as
/// `Arc<dyn Buffer>`).
#[derive(Debug, Default)]
pub struct UsageCell(std::sync::atomic::AtomicU8);

impl UsageCell {
    pub fn new(usage: BufferUsage) -> UsageCell {
        UsageCell(std::sync::atomic::AtomicU8::new(usage as u8))
    }
    pub fn get(&self) -> BufferUsage {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            1 => BufferUsage::Weights,
            2 => BufferUsage::Compute,
            _ => BufferUsage::Any,
        }
    }
    pub fn set(&self, usage: BufferUsage) {
        self.0
            .store(usage as u8, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The future of an async buffer transfer or backend wait. Boxed so that [`Buffer`] and
/// [`Backend`] stay object-safe; not `Send` because wasm32's WebGPU futures are not.
pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + 'a>>;

/// A block of device memory.
pub trait Buffer: Send + Sync {
    /// Name of the buffer type, for debugging.
    fn name(&self) -> &str;
    fn size(&self) -> usize;
    fn buffer_type(&self) -> Arc<dyn BufferType>;
    fn usage(&self) -> BufferUsage;
    fn set_usage(&self, usage: BufferUsage);
    /// Copy `data` into the buffer at `offset`.
    fn set(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// Copy bytes at `offset` into `out`.
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Read `len` bytes at `offset` without blocking the thread (the only way to read device
    /// memory in the browser). By default the synchronous [`Buffer::get`].
    fn get_async(&self, offset: usize, len: usize) -> BackendFuture<'_, Vec<u8>> {
        let mut out = vec![0u8; len];
        let r = self.get(offset, &mut out).map(|()| out);
        Box::pin(std::future::ready(r))
    }
    /// Write `data` at `offset` without blocking the thread. By default the synchronous
    /// [`Buffer::set`].
    fn set_async<'a>(&'a self, offset: usize, data: &'a [u8]) -> BackendFuture<'a, ()> {
        Box::pin(std::future::ready(self.set(offset, data)))
    }
    /// Fill the whole buffer with `value`.
    fn clear(&self, value: u8) -> Result<()>;
    /// Host address of the first byte when the buffer is in host memory.
    fn host_ptr(&self) -> Option<*mut u8>;
    /// True when nothing may be written into it (e.g. file bytes mapped read-only): a graph
    /// node whose result lies in it is rejected before any kernel runs.
    fn is_read_only(&self) -> bool {
        false
    }
    fn as_any(&self) -> &dyn Any;
}

/// An allocator of buffers of one kind (ggml_backend_buffer_type).
pub trait BufferType: Send + Sync {
    fn name(&self) -> &str;
    /// Alignment of tensor offsets inside buffers of this type.
    fn alignment(&self) -> usize;
    /// Largest single buffer.
    fn max_size(&self) -> usize;
    /// Bytes a tensor needs in this buffer type (more than nbytes for padded layouts).
    fn alloc_size(&self, ctx: &Context, t: TensorId) -> usize {
        ctx.tensor(t).nbytes()
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>>;
    /// A buffer for weights, which every evaluation reads: where the backend has a better kind
    /// of memory for them (the CPU's transparent huge pages); [`BufferType::alloc_buffer`]
    /// otherwise.
    fn alloc_weights_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        self.alloc_buffer(size)
    }
    /// True when the CPU can read buffers of this type directly.
    fn is_host(&self) -> bool;
    /// Identity used to compare buffer types.
    fn id(&self) -> usize {
        self as *const Self as *const () as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Gpu,
    Accel,
}

/// A device (ggml_backend_device): knows what it can run and makes backends and buffer types.
pub trait Device: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> String;
    fn kind(&self) -> DeviceKind;
    /// (free, total) bytes of memory, when known.
    fn memory(&self) -> (usize, usize);
    fn buffer_type(&self) -> Arc<dyn BufferType>;
    fn init_backend(&self) -> Result<Box<dyn Backend>>;
    /// Whether a backend of this device can compute node `t` of `ctx`.
    fn supports_op(&self, ctx: &Context, t: TensorId) -> bool;
    /// Whether this device can read tensors in buffers of type `buft`.
    fn supports_buft(&self, buft: &dyn BufferType) -> bool;
    /// Why node `t` cannot run here (for the scheduler's debug output); `None` when it can or
    /// the device does not say.
    fn unsupported_reason(&self, _ctx: &Context, _t: TensorId) -> Option<String> {
        None
    }
    /// How node `t` runs here when that is worth telling (e.g. split over several bindings).
    fn op_note(&self, _ctx: &Context, _t: TensorId) -> Option<String> {
        None
    }
}

/// An execution stream on a device (ggml_backend).
pub trait Backend {
    fn name(&self) -> &str;
    fn device(&self) -> Arc<dyn Device>;
    /// Compute every node of `graph`; all tensors must have data.
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph) -> Result<()>;
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }
    /// Wait for the submitted work without blocking the thread. By default
    /// [`Backend::synchronize`].
    fn synchronize_async(&mut self) -> BackendFuture<'_, ()> {
        Box::pin(std::future::ready(self.synchronize()))
    }
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A registry of devices of one backend family (ggml_backend_reg).
pub trait Registry: Send + Sync {
    fn name(&self) -> &str;
    fn devices(&self) -> Vec<Arc<dyn Device>>;
}

/// All registries compiled in, CPU last (lowest priority).
pub fn registries() -> Vec<Arc<dyn Registry>> {
    #[cfg(feature = "webgpu")]
    let gpu: Option<Arc<dyn Registry>> = Some(Arc::new(webgpu::WebGpuRegistry));
    #[cfg(not(feature = "webgpu"))]
    let gpu: Option<Arc<dyn Registry>> = None;
    // CUDA before WebGPU: on an NVIDIA GPU both exist and CUDA is the native path.
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    let cuda: Option<Arc<dyn Registry>> = Some(Arc::new(cuda::CudaRegistry));
    #[cfg(not(all(feature = "cuda", not(target_arch = "wasm32"))))]
    let cuda: Option<Arc<dyn Registry>> = None;
    cuda.into_iter()
        .chain(gpu)
        .chain(std::iter::once(
            Arc::new(cpu::CpuRegistry) as Arc<dyn Registry>
        ))
        .collect()
}

/// Every device of every registry, in priority order.
pub fn devices() -> Vec<Arc<dyn Device>> {
    registries().iter().flat_map(|r| r.devices()).collect()
}
