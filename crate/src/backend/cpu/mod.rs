//! The CPU backend: host buffers, an SPMD thread pool, and kernels (scalar reference beside the
//! SIMD paths for x86_64 AVX2/FMA, aarch64 NEON and wasm32 SIMD128).

use std::any::Any;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crate::backend::{Backend, BufferType, Device, DeviceKind, Registry};
use crate::graph::Graph;
use crate::tensor::{Op, TensorId, MAX_SRC};
use crate::{Context, DType, Error, Result};

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod buffer;
pub mod ops;
pub mod reference;
pub mod threadpool;
pub mod vec;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod wasm32;
#[cfg(target_arch = "x86_64")]
pub mod x86;

pub use buffer::{cpu_buffer_type, CpuBuffer, CpuBufferType, HostBytes, CPU_ALIGNMENT};
use threadpool::Barrier;

/// A resolved tensor: its address and layout. Kernels see only these.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub ne: [usize; 4],
    pub nb: [usize; 4],
}

// SAFETY: a TensorRef is an address plus layout; the executor guarantees that threads write
// disjoint parts of a destination and only read sources that are complete (barrier per node).
unsafe impl Send for TensorRef {}
// SAFETY: as above.
unsafe impl Sync for TensorRef {}

impl TensorRef {
    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }
    pub fn is_contiguous(&self) -> bool {
        let t = crate::tensor::Tensor {
            nb: self.nb,
            ..crate::tensor::Tensor::contiguous(self.dtype, self.ne)
        };
        t.is_contiguous()
    }
    /// Address of element block (i0 in elements, must be a block start) at i1, i2, i3.
    ///
    /// # Safety
    /// The indices must be inside the tensor.
    pub unsafe fn at(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // SAFETY: the caller keeps the indices in range, so the offset stays inside the tensor.
        unsafe {
            self.ptr.add(
                i0 / self.dtype.block_size() * self.nb[0]
                    + i1 * self.nb[1]
                    + i2 * self.nb[2]
                    + i3 * self.nb[3],
            )
        }
    }
}

/// One node, resolved: the op, the destination and the sources.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef {
    pub op: Op,
    pub dst: TensorRef,
    pub src: [Option<TensorRef>; MAX_SRC],
}

impl NodeRef {
    pub fn src0(&self) -> &TensorRef {
        self.src[0]
            .as_ref()
            .expect("op has src0 (checked at build time)")
    }
    pub fn src1(&self) -> &TensorRef {
        self.src[1]
            .as_ref()
            .expect("op has src1 (checked at build time)")
    }
}

/// Per-thread parameters of a kernel call (ggml_compute_params).
pub struct ComputeParams<'a> {
    pub ith: usize,
    pub nth: usize,
    /// Work buffer shared by all threads, `wsize` bytes, 64-byte aligned.
    pub wdata: *mut u8,
    pub wsize: usize,
    pub barrier: &'a Barrier,
    /// Chunk counter for dynamic work distribution; set to `nth` before each node.
    pub chunk: &'a AtomicUsize,
}

/// Split `n` items evenly across threads: the range of thread `ith`.
pub fn thread_range(n: usize, ith: usize, nth: usize) -> std::ops::Range<usize> {
    let per = n.div_ceil(nth);
    let start = (per * ith).min(n);
    let end = (start + per).min(n);
    start..end
}

/// Address of a tensor's data: its own buffer, or its view source's plus the view offset.
pub fn tensor_ptr(ctx: &Context, id: TensorId) -> Result<*mut u8> {
    let t = ctx.tensor(id);
    let (buf, offset) = ctx
        .data_location(id)
        .ok_or_else(|| Error::Backend(format!("tensor '{}' ({}) has no data", t.name, id.0)))?;
    let base = buf
        .host_ptr()
        .ok_or_else(|| Error::Backend(format!("tensor '{}' is not in host memory", t.name)))?;
    if offset + t.nbytes() > buf.size() {
        return Err(Error::Backend(format!(
            "tensor '{}' ({} bytes at {offset}) lies outside its buffer of {} bytes",
            t.name,
            t.nbytes(),
            buf.size()
        )));
    }
    // SAFETY: offset + size checked against the buffer size above.
    Ok(unsafe { base.add(offset) })
}

fn resolve(ctx: &Context, id: TensorId) -> Result<TensorRef> {
    let t = ctx.tensor(id);
    Ok(TensorRef {
        ptr: tensor_ptr(ctx, id)?,
        dtype: t.dtype,
        ne: t.ne,
        nb: t.nb,
    })
}

/// A node's layout with null addresses, to ask `supports` before data is allocated.
pub fn resolve_node_shape(ctx: &Context, id: TensorId) -> Option<NodeRef> {
    let r = |i: TensorId| {
        let t = ctx.tensor(i);
        TensorRef {
            ptr: std::ptr::null_mut(),
            dtype: t.dtype,
            ne: t.ne,
            nb: t.nb,
        }
    };
    let t = ctx.tensor(id);
    let mut src = [None; MAX_SRC];
    for (slot, s) in src.iter_mut().zip(t.src.iter()) {
        *slot = s.map(r);
    }
    Some(NodeRef {
        op: t.op,
        dst: r(id),
        src,
    })
}

/// Resolve a node for the kernels.
pub fn resolve_node(ctx: &Context, id: TensorId) -> Result<NodeRef> {
    let t = ctx.tensor(id);
    let mut src = [None; MAX_SRC];
    for (slot, s) in src.iter_mut().zip(t.src.iter()) {
        if let Some(s) = s {
            *slot = Some(resolve(ctx, *s)?);
        }
    }
    Ok(NodeRef {
        op: t.op,
        dst: resolve(ctx, id)?,
        src,
    })
}

/// The CPU backend (one stream). `n_threads` threads compute each graph.
pub struct CpuBackend {
    pub n_threads: usize,
    work: Vec<u64>,
}

impl CpuBackend {
    pub fn new(n_threads: usize) -> Self {
        CpuBackend {
            n_threads: n_threads.max(1),
            work: Vec::new(),
        }
    }

    pub fn set_n_threads(&mut self, n: usize) {
        self.n_threads = n.max(1);
    }

    /// Compute `graph` with `n_threads`: check every node first, size the work buffer once
    /// (ggml's cplan), then run all nodes on all threads with a barrier after each.
    pub fn compute(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        let nth = self.n_threads;
        let mut wsize = 0usize;
        for &id in &graph.nodes {
            let t = ctx.tensor(id);
            if t.op.is_view() || t.op == Op::None {
                continue;
            }
            let node = resolve_node(ctx, id)?;
            ops::check_supported(&node).map_err(|e| match e {
                Error::UnsupportedOp(m) => Error::UnsupportedOp(format!("{m} (node '{}')", t.name)),
                other => other,
            })?;
            wsize = wsize.max(ops::work_size(&node, nth));
            nodes.push(node);
        }
        let words = wsize.div_ceil(8) + 8;
        if self.work.len() < words {
            self.work.resize(words, 0);
        }
        // Align the work buffer to 64 bytes.
        let base = self.work.as_mut_ptr() as *mut u8;
        let pad = base.align_offset(64);
        // SAFETY: `pad` < 64 and the buffer has 64 spare bytes.
        let wdata = unsafe { base.add(pad) };
        let barrier = Barrier::new(nth);
        let chunk = AtomicUsize::new(0);
        let wdata_addr = wdata as usize;
        threadpool::run_spmd(nth, |ith, nth| {
            let params = ComputeParams {
                ith,
                nth,
                wdata: wdata_addr as *mut u8,
                wsize,
                barrier: &barrier,
                chunk: &chunk,
            };
            for node in &nodes {
                ops::forward(&params, node);
                barrier.wait();
            }
        });
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "CPU"
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(CpuDevice)
    }
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        self.compute(ctx, graph)
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The CPU device.
pub struct CpuDevice;

impl Device for CpuDevice {
    fn name(&self) -> &str {
        "CPU"
    }
    fn description(&self) -> String {
        format!(
            "CPU ({} threads, {})",
            threadpool::default_n_threads(),
            ops::simd_name()
        )
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }
    fn memory(&self) -> (usize, usize) {
        (0, 0)
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        cpu_buffer_type()
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::new(threadpool::default_n_threads())))
    }
    fn supports_op(&self, ctx: &Context, t: TensorId) -> bool {
        ops::supports(ctx, t)
    }
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.is_host()
    }
}

/// The CPU registry: one device.
pub struct CpuRegistry;

impl Registry for CpuRegistry {
    fn name(&self) -> &str {
        "CPU"
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![Arc::new(CpuDevice)]
    }
}
