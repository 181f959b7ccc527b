//! The CPU backend: host buffers, an SPMD thread pool, and kernels (scalar reference beside the
//! SIMD paths for x86_64 AVX2/FMA, aarch64 NEON and wasm32 SIMD128).

use std::any::Any;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};

use crate::backend::{Backend, BufferType, Device, DeviceKind, Registry};
use crate::graph::Graph;
use crate::tensor::{Op, TensorId, MAX_SRC};
use crate::{Context, DType, Error, Result};

pub mod arch;
pub mod buffer;
pub mod ops;
pub mod reference;
pub mod repack;
pub mod threadpool;
pub mod traits;

pub use buffer::{cpu_buffer_type, CpuBuffer, CpuBufferType, HostBytes, CPU_ALIGNMENT};
use threadpool::{Barrier, ThreadPool};
pub use traits::{dequantize_row, quantize_row, type_traits, TypeTraits};

/// A resolved tensor: its address and layout. Kernels see only these.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub ne: [usize; 4],
    pub nb: [usize; 4],
    /// Its bytes are in the repacked layout ([`repack`]); `View`: it views such a tensor, which
    /// no kernel reads.
    pub repacked: repack::Repacked,
}

// SAFETY: a TensorRef is an address plus layout; the executor guarantees that threads write
// disjoint parts of a destination and only read sources that are complete (barrier per node).
unsafe impl Send for TensorRef {}
// SAFETY: as above.
unsafe impl Sync for TensorRef {}

impl TensorRef {
    /// 0 when any dim is 0 (checked first: the other dims' product may not fit).
    pub fn nelements(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
        self.ne.iter().product()
    }
    /// Rows holding at least one element: 0 for an empty tensor, whatever its other dims (a
    /// [0, 2^40] tensor has nothing to visit, and its dims' product may not fit).
    pub fn nrows(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
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
    pub fn src2(&self) -> &TensorRef {
        self.src[2]
            .as_ref()
            .expect("op has src2 (checked at build time)")
    }
}

/// Per-thread parameters of a kernel call (ggml_compute_params).
#[derive(Clone, Copy)]
pub struct ComputeParams<'a> {
    pub ith: usize,
    pub nth: usize,
    /// Work buffer shared by all threads, `wsize` bytes, 64-byte aligned.
    pub wdata: *mut u8,
    pub wsize: usize,
    pub barrier: &'a Barrier,
    /// Chunk counter for dynamic work distribution: the node's own, `nth` at its start.
    pub chunk: &'a AtomicUsize,
    /// The first bad value a kernel met in its data (e.g. a get_rows id out of range). The
    /// graph still runs to its end, so every thread meets every barrier; then compute returns it.
    pub fault: &'a OnceLock<String>,
    /// Thread `ith` of `nth` runs the whole node by itself, with thread `ith`'s part of the
    /// work buffer (a small GEMV, see `Run::Owner`; only mul_mat's GEMV is given this).
    pub alone: bool,
    /// mul_mat: src1 is already in the work buffer as this product converts it, left by the
    /// previous product (`ops::matmul::ConvertKey`): no conversion, no barrier after it.
    pub src1_ready: bool,
}

impl ComputeParams<'_> {
    /// Record a data error (the first one wins); `compute` returns it as `InvalidArgument`.
    pub fn fault(&self, msg: impl FnOnce() -> String) {
        if self.fault.get().is_none() {
            let _ = self.fault.set(msg());
        }
    }
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
        repacked: repack::is_repacked(ctx, id),
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
            repacked: repack::is_repacked(ctx, i),
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

/// One node of a graph run: its kernel call, which threads run it, and whether all threads
/// meet at a barrier after it (only before a node that depends on one since the last barrier;
/// never after the last node).
struct Step {
    node: NodeRef,
    run: Run,
    sync: bool,
    /// mul_mat: the previous product's converted src1 is this one's (see [`ComputeParams`]).
    src1_ready: bool,
}

/// Which threads run a node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Run {
    /// All threads, each its share.
    All,
    /// Thread 0 alone, as a one-thread kernel call (a small element-wise node, see [`solo`]).
    Solo,
    /// Thread `t` alone, with its own part of the work buffer as in [`Run::All`] (a small
    /// GEMV, see [`alone_gemv`]): independent small GEMVs in a row (a layer's attn_k and
    /// attn_v) run side by side on different threads instead of each split in two.
    Owner(usize),
}

impl Run {
    /// The one thread that runs the node, if one does.
    fn owner(self) -> Option<usize> {
        match self {
            Run::All => None,
            Run::Solo => Some(0),
            Run::Owner(t) => Some(t),
        }
    }
}

/// The bytes a node reads and writes, for deciding where a barrier is needed. Addresses are
/// the resolved tensors' (views included), so memory the allocator reuses between nodes is seen
/// as the same memory.
struct Access {
    reads: [Option<Span>; MAX_SRC],
    write: Span,
    /// The one thread that runs it, if one does.
    owner: Option<usize>,
    work: ops::WorkUse,
}

/// A half-open byte range `[start, end)`.
#[derive(Clone, Copy)]
struct Span(usize, usize);

impl Span {
    /// The bytes `t` covers (an upper bound, whatever its strides); everything when its extent
    /// cannot be worked out.
    fn of(t: &TensorRef) -> Span {
        let all = Span(0, usize::MAX);
        if t.nelements() == 0 {
            return Span(0, 0);
        }
        let dim0 = if t.dtype.block_size() > 1 {
            match t.dtype.row_size(t.ne[0]) {
                Ok(b) => b,
                Err(_) => return all,
            }
        } else {
            (t.ne[0] - 1) * t.nb[0] + t.dtype.type_size()
        };
        let last = (1..4).try_fold(dim0, |acc, d| {
            (t.ne[d] - 1)
                .checked_mul(t.nb[d])
                .and_then(|b| b.checked_add(acc))
        });
        match last.and_then(|l| (t.ptr as usize).checked_add(l)) {
            Some(end) => Span(t.ptr as usize, end),
            None => all,
        }
    }

    fn overlaps(self, o: Span) -> bool {
        self.0 < o.1 && o.0 < self.1
    }
}

impl Access {
    fn of(node: &NodeRef, run: Run, nth: usize, src1_ready: bool) -> Access {
        let mut reads = [None; MAX_SRC];
        for (r, s) in reads.iter_mut().zip(&node.src) {
            *r = s.as_ref().map(Span::of);
        }
        Access {
            reads,
            write: Span::of(&node.dst),
            owner: run.owner(),
            work: if run == Run::Solo {
                ops::WorkUse::None
            } else if src1_ready {
                ops::WorkUse::SharedRead
            } else {
                ops::work_use(node, nth)
            },
        }
    }

    /// Whether `later` may only start once every thread has finished `self`.
    fn conflicts(&self, later: &Access) -> bool {
        use ops::WorkUse;
        if self.owner.is_some() && self.owner == later.owner {
            // Both on one thread: program order.
            return false;
        }
        let work = match (self.work, later.work) {
            (WorkUse::None, _) | (_, WorkUse::None) => false,
            // Each thread's own part of the work buffer, the same part in every node.
            (WorkUse::PerThread, WorkUse::PerThread) => false,
            // Reading what the product before converted, as it does (`plan` sets SharedRead
            // only right after that product; its own barrier ordered the conversion, and any
            // scratch is each thread's own at the same place in both).
            (WorkUse::Shared | WorkUse::SharedRead, WorkUse::SharedRead) => false,
            _ => true,
        };
        let reads_write = |a: &Access, w: Span| a.reads.iter().flatten().any(|r| r.overlaps(w));
        work || self.work == WorkUse::Opaque
            || later.work == WorkUse::Opaque
            || reads_write(later, self.write)
            || reads_write(self, later.write)
            || self.write.overlaps(later.write)
    }
}

/// The accesses of the nodes since the last barrier.
#[derive(Default)]
struct Pending(Vec<Access>);

impl Pending {
    /// Beyond this many nodes without a barrier, place one anyway (bounds the planning work).
    const MAX: usize = 16;

    fn conflicts(&self, a: &Access) -> bool {
        self.0.len() >= Self::MAX || self.0.iter().any(|p| p.conflicts(a))
    }
    fn clear(&mut self) {
        self.0.clear();
    }
    fn push(&mut self, a: Access) {
        self.0.push(a);
    }
}

/// Destination elements below which an element-wise node runs on thread 0 alone: splitting it
/// saves less than the barrier costs (a token of a small LLM is hundreds of such nodes between
/// its GEMVs; in wasm each barrier is a round trip between Web Workers).
const SOLO_MAX_ELEMENTS: usize = 8192;

/// Whether thread 0 runs `node` alone. Only the element-wise and row-wise kernels (ops/basic.rs:
/// every output element computed by one thread, no barrier inside, no work buffer), so the
/// result is the same bits as split across threads.
fn solo(node: &NodeRef) -> bool {
    ops::is_basic(&node.op) && node.dst.nelements() <= SOLO_MAX_ELEMENTS
}

/// Weight bytes up to which a GEMV runs on one thread ([`Run::Owner`]): split in two, a 64–192 KB
/// weight is ~1 µs a thread, of which each thread's fixed costs (its activation copy, the
/// chunk split, the cold start) are a large part.
const ALONE_GEMV_MAX_BYTES: usize = 192 << 10;

/// Whether `node` is a small quantized GEMV that one thread runs alone. In wasm too: Chromium,
/// SmolLM2 (its K and V products, 69 KB each, on one thread each) 2-thread generation 1.085×
/// over five rounds (medians 161.2 vs 148.5 tok/s), Qwen2.5 1.02×. The whole weight's bytes
/// decide, not what one thread reads first: in wasm a lone thread's first share is three
/// quarters of the rows (the rest a dynamic tail), which put SmolLM2's 207 KB Q and O products
/// on one thread while the other waited for it, twice a layer.
fn alone_gemv(node: &NodeRef, nth: usize) -> bool {
    let weight = Span::of(node.src0());
    ops::matmul::first_read(node, 0, 1).is_some()
        && weight.1 - weight.0 <= ALONE_GEMV_MAX_BYTES
        && ops::work_use(node, nth) == ops::WorkUse::PerThread
}

/// The CPU backend (one stream): a persistent pool of `n_threads` threads computes each graph.
/// The count is capped by the machine's parallelism unless forced
/// ([`CpuBackend::with_threads_forced`]); the workers start at the first graph that needs them,
/// so a failed start is an error of [`CpuBackend::compute`].
pub struct CpuBackend {
    n_threads: usize,
    forced: bool,
    work: Vec<u64>,
    pool: ThreadPool,
}

impl CpuBackend {
    /// `n_threads` capped to [`threadpool::default_n_threads`] (at least 1).
    pub fn new(n_threads: usize) -> Self {
        Self::with(threadpool::capped_n_threads(n_threads), false)
    }

    /// Exactly `n_threads` (at least 1), even beyond the machine's parallelism (tests of the
    /// work split, oversubscription experiments).
    pub fn with_threads_forced(n_threads: usize) -> Self {
        Self::with(n_threads.max(1), true)
    }

    fn with(n_threads: usize, forced: bool) -> Self {
        CpuBackend {
            n_threads,
            forced,
            work: Vec::new(),
            pool: ThreadPool::default(),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Capped as in [`CpuBackend::new`], unless this backend was made with a forced count.
    pub fn set_n_threads(&mut self, n: usize) {
        self.n_threads = if self.forced {
            n.max(1)
        } else {
            threadpool::capped_n_threads(n)
        };
    }

    /// Check every node and decide who runs it and where the barriers go (see
    /// [`CpuBackend::compute`]); also the work buffer's size.
    fn plan(&self, ctx: &Context, graph: &Graph) -> Result<(Vec<Step>, usize)> {
        let mut nodes: Vec<Step> = Vec::with_capacity(graph.nodes.len());
        // What the nodes since the last barrier read and write.
        let mut pending = Pending::default();
        let nth = self.n_threads;
        let mut wsize = 0usize;
        let mut next_owner = 0usize;
        // The last shared conversion of src1 and the bytes it read, while the work buffer and
        // those bytes still hold what it left.
        let mut converted: Option<(ops::matmul::ConvertKey, Span)> = None;
        for &id in &graph.nodes {
            let t = ctx.tensor(id);
            if t.op.is_view() || t.op == Op::None {
                continue;
            }
            // A cpy into a weight mapped from a file would write into read-only pages.
            if ctx.data_location(id).is_some_and(|(b, _)| b.is_read_only()) {
                return Err(Error::InvalidArgument(format!(
                    "node '{}' ({:?}) writes into a read-only buffer (weights mapped from a file)",
                    t.name, t.op
                )));
            }
            let node = resolve_node(ctx, id)?;
            ops::check_supported(&node).map_err(|e| match e {
                Error::UnsupportedOp(m) => Error::UnsupportedOp(format!("{m} (node '{}')", t.name)),
                other => other,
            })?;
            // An empty result has nothing to write (ggml skips these too); its sources may
            // still claim huge dims that a kernel would size row buffers by.
            if node.dst.nelements() == 0 {
                continue;
            }
            let run = if nth == 1 {
                Run::All
            } else if solo(&node) {
                Run::Solo
            } else if alone_gemv(&node, nth) {
                // Taken in turn from the last thread down (thread 0 runs the Solo nodes).
                next_owner = (next_owner + nth - 1) % nth;
                Run::Owner(next_owner)
            } else {
                Run::All
            };
            let solo = run == Run::Solo;
            wsize = wsize.max(ops::work_size(&node, if solo { 1 } else { nth }));
            let key = match run {
                Run::All => ops::matmul::shared_convert_key(&node, nth),
                _ => None,
            };
            let src1_ready = key.is_some() && converted.map(|(k, _)| k) == key;
            if !src1_ready {
                converted = match key {
                    Some(k) => Some((k, Span::of(node.src1()))),
                    // (Solo nodes are element-wise: no work buffer either.)
                    None if ops::work_use(&node, nth) == ops::WorkUse::None => converted,
                    None => None,
                };
            }
            if converted.is_some_and(|(_, s)| Span::of(&node.dst).overlaps(s)) {
                converted = None;
            }
            if nth > 1 {
                // (One thread needs no barriers: skip the planning.)
                let access = Access::of(&node, run, nth, src1_ready);
                if let Some(prev) = nodes.last_mut() {
                    prev.sync = pending.conflicts(&access);
                }
                if nodes.last().is_some_and(|p| p.sync) {
                    pending.clear();
                }
                pending.push(access);
            }
            nodes.push(Step {
                node,
                run,
                sync: false,
                src1_ready,
            });
        }
        Ok((nodes, wsize))
    }

    /// How [`CpuBackend::compute`] would run `graph`'s nodes, one line each: the op, who runs
    /// it (`all`, `solo` on thread 0, `owner <t>`), `reuse` where a product takes the previous
    /// one's converted src1 and `sync` where all threads meet after it.
    /// For tests of the plan (also in wasm, whose GEMV split differs).
    #[cfg(feature = "plan-report")]
    pub fn plan_report(&self, ctx: &Context, graph: &Graph) -> Result<Vec<String>> {
        let (nodes, _) = self.plan(ctx, graph)?;
        Ok(nodes
            .iter()
            .map(|st| {
                let run = match st.run {
                    Run::All => "all".to_string(),
                    Run::Solo => "solo".to_string(),
                    Run::Owner(t) => format!("owner {t}"),
                };
                let sync = if st.sync { " sync" } else { "" };
                let reuse = if st.src1_ready { " reuse" } else { "" };
                format!("{} {run}{reuse}{sync}", st.node.op.name())
            })
            .collect())
    }

    /// Compute `graph` with `n_threads`: check every node first, size the work buffer once
    /// (ggml's cplan), then run all nodes on all threads. Small element-wise nodes go to thread 0
    /// alone (see [`solo`]); all threads meet at a barrier before a node only when it touches
    /// memory that a node since the last barrier wrote, or writes what one read, on another
    /// thread (see [`Access`]). A kernel panic on any thread is returned as an error.
    pub fn compute(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        self.pool.resize(self.n_threads)?;
        let (nodes, wsize) = self.plan(ctx, graph)?;
        let nth = self.n_threads;
        // Per step and thread, the weight bytes the thread's next GEMV reads first (a prefetch
        // hint for the step's own GEMV kernels, see `arch::set_next_read`; (0, 0): none). Only
        // x86's kernels take it.
        let mut next_read = vec![(0usize, 0usize); nodes.len() * nth];
        // (Per thread: the next GEMV step it takes part in, and what it reads there.)
        let mut ahead: Vec<(usize, usize)> = vec![(0, 0); nth];
        for i in (0..nodes.len())
            .rev()
            .filter(|_| cfg!(target_arch = "x86_64"))
        {
            for (ith, next) in ahead.iter_mut().enumerate() {
                next_read[i * nth + ith] = *next;
                let read = match nodes[i].run {
                    Run::Owner(t) if t == ith => ops::matmul::first_read(&nodes[i].node, 0, 1),
                    Run::Owner(_) | Run::Solo => None,
                    Run::All => ops::matmul::first_read(&nodes[i].node, ith, nth),
                };
                if let Some((p, len)) = read {
                    *next = (p as usize, len);
                }
            }
        }
        // Each node's own chunk counter: no thread has to reset a shared one (behind a barrier).
        let chunks: Vec<AtomicUsize> = nodes.iter().map(|_| AtomicUsize::new(nth)).collect();
        let words = wsize.div_ceil(8) + 8;
        if self.work.len() < words {
            self.work.resize(words, 0);
        }
        // Align the work buffer to 64 bytes.
        let base = self.work.as_mut_ptr() as *mut u8;
        let pad = base.align_offset(64);
        // SAFETY: `pad` < 64 and the buffer has 64 spare bytes.
        let wdata_addr = unsafe { base.add(pad) } as usize;
        let fault = Arc::new(OnceLock::new());
        let job_fault = fault.clone();
        // `run` returns only after every thread has left the job, so `work` outlives its use;
        // that also orders the last node's writes before the caller's reads (no final barrier).
        self.pool.run(move |ith, nth, barrier| {
            let alone_barrier = Barrier::new(1);
            for (i, (step, chunk)) in nodes.iter().zip(&chunks).enumerate() {
                let (next, len) = next_read[i * nth + ith];
                arch::set_next_read(next as *const u8, len);
                let base = ComputeParams {
                    ith,
                    nth,
                    wdata: wdata_addr as *mut u8,
                    wsize,
                    barrier,
                    chunk,
                    fault: &job_fault,
                    alone: false,
                    src1_ready: step.src1_ready,
                };
                match step.run {
                    Run::All => ops::forward(&base, &step.node),
                    Run::Solo if ith == 0 => {
                        let p = ComputeParams {
                            ith: 0,
                            nth: 1,
                            barrier: &alone_barrier,
                            ..base
                        };
                        ops::forward(&p, &step.node)
                    }
                    Run::Owner(t) if t == ith => {
                        let p = ComputeParams {
                            barrier: &alone_barrier,
                            alone: true,
                            ..base
                        };
                        ops::forward(&p, &step.node)
                    }
                    _ => {}
                }
                if step.sync {
                    barrier.wait();
                }
            }
            arch::set_next_read(std::ptr::null(), 0);
        })?;
        match fault.get() {
            Some(msg) => Err(Error::InvalidArgument(msg.clone())),
            None => Ok(()),
        }
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
