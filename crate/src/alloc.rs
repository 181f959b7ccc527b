//! Memory planning: a bump allocator for weights (ggml_tallocr / alloc_ctx_tensors) and the
//! graph allocator that reuses memory by liveness (ggml_gallocr).

use std::sync::{Arc, Weak};

use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::graph::Graph;
use crate::tensor::{Op, Tensor, TensorData};
use crate::{Context, Error, Result, TensorId};

/// Round `x` up to a multiple of `align` (a power of two).
pub fn align_up(x: usize, align: usize) -> usize {
    (x + align - 1) & !(align - 1)
}

/// Allocate one buffer of `buft` for every tensor in `ids` that has no data and is not a view,
/// each at an aligned offset. Returns `None` when there was nothing to allocate.
pub fn alloc_tensors(
    ctx: &mut Context,
    ids: &[TensorId],
    buft: &Arc<dyn BufferType>,
) -> Result<Option<Arc<dyn Buffer>>> {
    alloc_tensors_with(ctx, ids, buft, |b, size| b.alloc_buffer(size))
}

/// [`alloc_tensors`] for weights: the buffer from [`BufferType::alloc_weights_buffer`] (the
/// CPU's on transparent huge pages).
pub fn alloc_weights(
    ctx: &mut Context,
    ids: &[TensorId],
    buft: &Arc<dyn BufferType>,
) -> Result<Option<Arc<dyn Buffer>>> {
    alloc_tensors_with(ctx, ids, buft, |b, size| b.alloc_weights_buffer(size))
}

/// [`alloc_tensors`] with the buffer made by `make(buft, size)`.
fn alloc_tensors_with(
    ctx: &mut Context,
    ids: &[TensorId],
    buft: &Arc<dyn BufferType>,
    make: impl FnOnce(Arc<dyn BufferType>, usize) -> Result<Arc<dyn Buffer>>,
) -> Result<Option<Arc<dyn Buffer>>> {
    let align = buft.alignment();
    let mut size = 0usize;
    let mut todo = Vec::new();
    for &id in ids {
        let t = ctx.tensor(id);
        if t.data.is_some() || t.view_src.is_some() {
            continue;
        }
        let offset = align_up(size, align);
        size = offset + buft.alloc_size(ctx, id);
        todo.push((id, offset));
    }
    if todo.is_empty() {
        return Ok(None);
    }
    let buffer = make(buft.clone(), size)?;
    buffer.set_usage(BufferUsage::Any);
    for (id, offset) in todo {
        ctx.set_data(
            id,
            TensorData {
                buffer: buffer.clone(),
                offset,
            },
        );
    }
    Ok(Some(buffer))
}

/// Allocate every tensor of the context that has no data (ggml_backend_alloc_ctx_tensors).
pub fn alloc_ctx_tensors(
    ctx: &mut Context,
    buft: &Arc<dyn BufferType>,
) -> Result<Option<Arc<dyn Buffer>>> {
    let ids: Vec<TensorId> = ctx.ids().collect();
    alloc_tensors(ctx, &ids, buft)
}

// ---------------------------------------------------------------------------------------------
// Graph allocator (ggml_gallocr): plan offsets by liveness over one topological walk, then place
// tensors in one buffer per buffer type.

/// A free range of a planned buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    offset: usize,
    size: usize,
}

/// Offset planner over one buffer (ggml_dyn_tallocr): a free list sorted by offset plus an
/// unbounded tail starting at `tail`. Touches no memory.
#[derive(Debug, Clone)]
struct DynAlloc {
    alignment: usize,
    /// Sorted by offset, never adjacent to each other nor to the tail, never empty.
    free: Vec<Block>,
    /// Everything from here on is free.
    tail: usize,
    /// High-water mark: the buffer size this plan needs.
    max_size: usize,
}

impl DynAlloc {
    fn new(alignment: usize) -> Self {
        DynAlloc {
            alignment: alignment.max(1).next_power_of_two(),
            free: Vec::new(),
            tail: 0,
            max_size: 0,
        }
    }

    fn aligned(&self, size: usize) -> Result<usize> {
        size.checked_add(self.alignment - 1)
            .map(|s| s & !(self.alignment - 1))
            .ok_or_else(|| Error::OutOfMemory(format!("tensor of {size} bytes")))
    }

    /// Plan `size` bytes; returns the offset. Best fit among the free blocks, else the tail.
    fn alloc(&mut self, size: usize) -> Result<usize> {
        let size = self.aligned(size)?;
        if size == 0 {
            return Ok(0);
        }
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.size >= size)
            .min_by_key(|(_, b)| b.size)
            .map(|(i, _)| i);
        if let Some(i) = best {
            let b = &mut self.free[i];
            let offset = b.offset;
            b.offset += size;
            b.size -= size;
            if b.size == 0 {
                self.free.remove(i);
            }
            return Ok(offset);
        }
        let offset = self.tail;
        self.tail = offset
            .checked_add(size)
            .ok_or_else(|| Error::OutOfMemory(format!("graph needs more than {offset} bytes")))?;
        self.max_size = self.max_size.max(self.tail);
        Ok(offset)
    }

    /// Return `size` bytes at `offset` (as planned by `alloc`), merging with its neighbours.
    fn free(&mut self, offset: usize, size: usize) {
        let Ok(size) = self.aligned(size) else { return };
        if size == 0 {
            return;
        }
        let end = offset + size;
        if end == self.tail {
            self.tail = offset;
            if let Some(last) = self.free.last().copied() {
                if last.offset + last.size == self.tail {
                    self.tail = last.offset;
                    self.free.pop();
                }
            }
            return;
        }
        let pos = self.free.partition_point(|b| b.offset < offset);
        let prev = pos.checked_sub(1).filter(|&p| {
            let b = self.free[p];
            b.offset + b.size == offset
        });
        let next = Some(pos).filter(|&n| n < self.free.len() && self.free[n].offset == end);
        match (prev, next) {
            (Some(p), Some(n)) => {
                self.free[p].size += size + self.free[n].size;
                self.free.remove(n);
            }
            (Some(p), None) => self.free[p].size += size,
            (None, Some(n)) => {
                self.free[n].offset = offset;
                self.free[n].size += size;
            }
            (None, None) => self.free.insert(pos, Block { offset, size }),
        }
    }
}

/// Where the plan puts one tensor of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Data from outside (weights, or set by the user): left alone.
    External,
    /// Shares its `view_src`'s memory.
    View,
    /// In buffer `buffer` at `offset`, `size` bytes reserved (the most this slot can hold).
    /// `inplace` is the source slot whose memory it took over.
    Own {
        buffer: usize,
        offset: usize,
        size: usize,
        inplace: Option<u8>,
    },
}

/// A stored plan: what it was made for (the signature) and where everything goes.
#[derive(Debug, Clone)]
struct Plan {
    signature: Vec<u32>,
    leafs: Vec<Placement>,
    nodes: Vec<Placement>,
}

/// Per-tensor bookkeeping during planning (ggml's hash_node).
#[derive(Debug, Clone, Copy, Default)]
struct NodeState {
    n_children: u32,
    n_views: u32,
    /// Planned memory: (buffer, offset, reserved size).
    addr: Option<(usize, usize, usize)>,
    /// The allocator owns the memory at `addr` and still has to free it.
    own: bool,
    /// Took over a source's memory in place: that source's slot.
    inplace: Option<u8>,
}

/// How a tensor's memory is provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ownable,
    View,
    External,
}

fn is_pinned(t: &Tensor) -> bool {
    t.is_input() || t.is_output() || t.is_param()
}

/// The graph allocator (ggml_gallocr): one buffer per buffer type, sized for the largest graph
/// planned so far, with tensors placed so that memory is reused once its last consumer has run.
pub struct GraphAllocator {
    bufts: Vec<Arc<dyn BufferType>>,
    buffers: Vec<Option<Arc<dyn Buffer>>>,
    /// Every buffer this allocator ever made: tensor data in them is ours to re-place.
    made: Vec<Weak<dyn Buffer>>,
    plan: Option<Plan>,
    n_plans: usize,
    n_replays: usize,
    last_was_replay: bool,
}

impl GraphAllocator {
    /// An allocator with one buffer of `buft`.
    pub fn new(buft: Arc<dyn BufferType>) -> Self {
        Self::new_n(vec![buft])
    }

    /// An allocator with one buffer per buffer type (the scheduler's); tensors are assigned to
    /// buffers by index with the `node_buffer` function of `reserve_n` / `alloc_graph_n`.
    pub fn new_n(bufts: Vec<Arc<dyn BufferType>>) -> Self {
        let n = bufts.len();
        GraphAllocator {
            bufts,
            buffers: vec![None; n],
            made: Vec::new(),
            plan: None,
            n_plans: 0,
            n_replays: 0,
            last_was_replay: false,
        }
    }

    pub fn n_buffers(&self) -> usize {
        self.bufts.len()
    }

    /// Size of buffer `i` (0 when it has not been allocated).
    pub fn buffer_size(&self, i: usize) -> usize {
        self.buffers
            .get(i)
            .and_then(|b| b.as_ref())
            .map_or(0, |b| b.size())
    }

    /// Sum of the buffer sizes.
    pub fn peak(&self) -> usize {
        (0..self.buffers.len()).map(|i| self.buffer_size(i)).sum()
    }

    pub fn buffers(&self) -> &[Option<Arc<dyn Buffer>>] {
        &self.buffers
    }

    /// True when the last `alloc_graph*` re-used the stored plan without planning.
    pub fn last_was_replay(&self) -> bool {
        self.last_was_replay
    }

    /// Number of plans made (reserves, explicit or automatic).
    pub fn n_plans(&self) -> usize {
        self.n_plans
    }

    /// Number of `alloc_graph*` calls that replayed the stored plan.
    pub fn n_replays(&self) -> usize {
        self.n_replays
    }

    /// Plan `graph` with everything in buffer 0 and grow the buffer if needed.
    pub fn reserve(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        self.reserve_n(ctx, graph, &|_| 0)
    }

    /// Plan `graph` with tensor `t` in buffer `node_buffer(t)` and grow buffers that are too small
    /// (buffers only grow). Sets no tensor data.
    pub fn reserve_n(
        &mut self,
        ctx: &Context,
        graph: &Graph,
        node_buffer: &dyn Fn(TensorId) -> usize,
    ) -> Result<()> {
        self.made.retain(|w| w.strong_count() > 0);
        let (plan, sizes, used) = self.make_plan(ctx, graph, node_buffer)?;
        for (i, (&size, &used)) in sizes.iter().zip(&used).enumerate() {
            if !used {
                continue;
            }
            let cur = self.buffers[i].as_ref().map(|b| b.size());
            if cur.is_some_and(|c| c >= size) {
                continue;
            }
            let buft = &self.bufts[i];
            if size > buft.max_size() {
                return Err(Error::OutOfMemory(format!(
                    "graph needs {size} bytes of {}, more than its largest buffer ({} bytes)",
                    buft.name(),
                    buft.max_size()
                )));
            }
            // Drop the old buffer first so its memory can be reused.
            self.buffers[i] = None;
            let buf = buft.clone().alloc_buffer(size)?;
            buf.set_usage(BufferUsage::Compute);
            self.made.push(Arc::downgrade(&buf));
            self.buffers[i] = Some(buf);
        }
        self.plan = Some(plan);
        self.n_plans += 1;
        Ok(())
    }

    /// Place every tensor of `graph` that needs memory, all in buffer 0 (see `alloc_graph_n`).
    pub fn alloc_graph(&mut self, ctx: &mut Context, graph: &Graph) -> Result<()> {
        self.alloc_graph_n(ctx, graph, &|_| 0)
    }

    /// Set `TensorData` for every tensor of `graph` that needs memory and for every view of such
    /// a tensor. Replays the stored plan when the graph has the same topology, flags, buffer
    /// assignment and its tensors fit; otherwise plans again (`reserve_n`) first.
    pub fn alloc_graph_n(
        &mut self,
        ctx: &mut Context,
        graph: &Graph,
        node_buffer: &dyn Fn(TensorId) -> usize,
    ) -> Result<()> {
        if self.needs_replan(ctx, graph, node_buffer)? {
            self.reserve_n(ctx, graph, node_buffer)?;
            self.last_was_replay = false;
        } else {
            self.n_replays += 1;
            self.last_was_replay = true;
        }
        self.apply(ctx, graph)
    }

    /// Whether `alloc_graph_n` with these arguments would have to plan again.
    pub fn needs_replan(
        &self,
        ctx: &Context,
        graph: &Graph,
        node_buffer: &dyn Fn(TensorId) -> usize,
    ) -> Result<bool> {
        let Some(plan) = &self.plan else {
            return Ok(true);
        };
        if plan.signature != self.signature(ctx, graph, node_buffer)? {
            return Ok(true);
        }
        let lists = [(&graph.leafs, &plan.leafs), (&graph.nodes, &plan.nodes)];
        for (ids, placements) in lists {
            for (&id, p) in ids.iter().zip(placements.iter()) {
                if let Placement::Own {
                    buffer,
                    offset,
                    size,
                    inplace,
                } = *p
                {
                    if self.bufts[buffer].alloc_size(ctx, id) > size {
                        return Ok(true);
                    }
                    if offset + size > self.buffer_size(buffer) {
                        return Ok(true);
                    }
                    if let Some(slot) = inplace {
                        let t = ctx.tensor(id);
                        let same =
                            t.src[slot as usize].is_some_and(|s| ctx.tensor(s).same_layout(t));
                        if !same {
                            return Ok(true);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    fn is_ours(&self, data: &TensorData) -> bool {
        let p = Arc::as_ptr(&data.buffer) as *const u8;
        self.made.iter().any(|w| w.as_ptr() as *const u8 == p)
    }

    fn kind(&self, t: &Tensor) -> Kind {
        if t.view_src.is_some() {
            Kind::View
        } else if t.data.as_ref().is_some_and(|d| !self.is_ours(d)) {
            Kind::External
        } else {
            Kind::Ownable
        }
    }

    fn buffer_of(&self, node_buffer: &dyn Fn(TensorId) -> usize, id: TensorId) -> Result<usize> {
        let b = node_buffer(id);
        if b >= self.bufts.len() {
            return Err(Error::InvalidArgument(format!(
                "tensor {} assigned to buffer {b} of an allocator with {}",
                id.0,
                self.bufts.len()
            )));
        }
        Ok(b)
    }

    /// Everything the plan depends on except sizes: per tensor its kind, flags, whether it is an
    /// op-less leaf, whether it may run in place, its buffer, and the graph positions of its
    /// sources and view source.
    fn signature(
        &self,
        ctx: &Context,
        graph: &Graph,
        node_buffer: &dyn Fn(TensorId) -> usize,
    ) -> Result<Vec<u32>> {
        const ABSENT: u32 = u32::MAX;
        const OUTSIDE: u32 = u32::MAX - 1;
        let mut pos = vec![OUTSIDE; ctx.len()];
        for (i, &id) in graph.leafs.iter().chain(&graph.nodes).enumerate() {
            pos[id.index()] = i as u32;
        }
        let mut sig = Vec::with_capacity(2 + 6 * (graph.leafs.len() + graph.nodes.len()));
        sig.push(graph.leafs.len() as u32);
        sig.push(graph.nodes.len() as u32);
        for &id in graph.leafs.iter().chain(&graph.nodes) {
            let t = ctx.tensor(id);
            let kind = self.kind(t) as u32;
            let bits = kind
                | ((t.flags.0 as u32) << 2)
                | ((t.op == Op::None) as u32) << 10
                | (t.op.can_inplace() as u32) << 11;
            sig.push(bits);
            sig.push(self.buffer_of(node_buffer, id)? as u32);
            for s in &t.src {
                sig.push(s.map_or(ABSENT, |s| pos[s.index()]));
            }
            sig.push(t.view_src.map_or(ABSENT, |s| pos[s.index()]));
        }
        Ok(sig)
    }

    /// The planning pass (ggml_gallocr_alloc_graph_impl). Returns the plan, the size each buffer
    /// needs and whether each buffer holds anything.
    fn make_plan(
        &self,
        ctx: &Context,
        graph: &Graph,
        node_buffer: &dyn Fn(TensorId) -> usize,
    ) -> Result<(Plan, Vec<usize>, Vec<bool>)> {
        let signature = self.signature(ctx, graph, node_buffer)?;
        let mut p = Planner {
            ga: self,
            ctx,
            node_buffer,
            st: vec![NodeState::default(); ctx.len()],
            allocs: self
                .bufts
                .iter()
                .map(|b| DynAlloc::new(b.alignment()))
                .collect(),
            used: vec![false; self.bufts.len()],
        };
        // Count consumers and views.
        for &n in &graph.nodes {
            let t = ctx.tensor(n);
            if let Some(v) = t.view_src {
                p.st[v.index()].n_views += 1;
            }
            for s in t.srcs() {
                p.st[s.index()].n_children += 1;
            }
        }
        // Inputs first, so nothing is placed on them; then the other tensors whose data comes
        // from outside the graph (op-less leafs and parameters), which must also be intact when
        // the first node runs.
        let all = || graph.leafs.iter().chain(&graph.nodes).copied();
        for id in all().filter(|&id| ctx.tensor(id).is_input()) {
            p.allocate(id)?;
        }
        for id in all().filter(|&id| ctx.tensor(id).op == Op::None) {
            p.allocate(id)?;
        }
        for &n in &graph.nodes {
            let t = ctx.tensor(n);
            p.allocate(n)?;
            for s in t.srcs() {
                let st = &mut p.st[s.index()];
                st.n_children = st.n_children.saturating_sub(1);
                if st.n_children == 0 && st.n_views == 0 {
                    p.release(s);
                }
            }
        }
        let place = |id: TensorId| -> Placement {
            let t = ctx.tensor(id);
            let st = &p.st[id.index()];
            match (self.kind(t), st.addr) {
                (Kind::Ownable, Some((buffer, offset, size))) => Placement::Own {
                    buffer,
                    offset,
                    size,
                    inplace: st.inplace,
                },
                (Kind::View, _) => Placement::View,
                _ => Placement::External,
            }
        };
        let plan = Plan {
            signature,
            leafs: graph.leafs.iter().map(|&id| place(id)).collect(),
            nodes: graph.nodes.iter().map(|&id| place(id)).collect(),
        };
        let sizes = p.allocs.iter().map(|a| a.max_size).collect();
        Ok((plan, sizes, p.used))
    }

    /// Set the data of every tensor of the graph from the stored plan.
    fn apply(&self, ctx: &mut Context, graph: &Graph) -> Result<()> {
        let plan = self
            .plan
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("graph allocator has no plan".into()))?;
        let lists = [(&graph.leafs, &plan.leafs), (&graph.nodes, &plan.nodes)];
        for (ids, placements) in lists {
            for (&id, p) in ids.iter().zip(placements.iter()) {
                if let Placement::Own { buffer, offset, .. } = *p {
                    let buf = self.buffers[buffer].clone().ok_or_else(|| {
                        Error::InvalidArgument(format!("buffer {buffer} was not reserved"))
                    })?;
                    ctx.set_data(
                        id,
                        TensorData {
                            buffer: buf,
                            offset,
                        },
                    );
                }
            }
        }
        // Views after every owner has its place; a view's source never is a view.
        for &id in graph.leafs.iter().chain(&graph.nodes) {
            let t = ctx.tensor(id);
            let Some(v) = t.view_src else { continue };
            if t.data.as_ref().is_some_and(|d| !self.is_ours(d)) {
                continue;
            }
            let offs = t.view_offs;
            let base = ctx.tensor(v);
            let data = base.data.clone().ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "view '{}' ({}) of tensor '{}' ({}), which has no data",
                    t.name, id.0, base.name, v.0
                ))
            })?;
            ctx.set_data(
                id,
                TensorData {
                    buffer: data.buffer,
                    offset: data.offset + offs,
                },
            );
        }
        Ok(())
    }
}

/// State of one planning pass.
struct Planner<'a> {
    ga: &'a GraphAllocator,
    ctx: &'a Context,
    node_buffer: &'a dyn Fn(TensorId) -> usize,
    st: Vec<NodeState>,
    allocs: Vec<DynAlloc>,
    used: Vec<bool>,
}

impl Planner<'_> {
    /// Give `id` memory if it needs some and has none yet (ggml_gallocr_allocate_node).
    fn allocate(&mut self, id: TensorId) -> Result<()> {
        let t = self.ctx.tensor(id);
        if self.st[id.index()].addr.is_some() || self.ga.kind(t) != Kind::Ownable {
            return Ok(());
        }
        let buffer = self.ga.buffer_of(self.node_buffer, id)?;
        let size = self.ga.bufts[buffer].alloc_size(self.ctx, id);
        self.used[buffer] = true;
        if t.op.can_inplace() {
            if let Some((owner, addr)) = self.inplace_candidate(id, buffer, size) {
                let a = &mut self.allocs[buffer];
                let need = a.aligned(size)?;
                let (b, off, have) = addr;
                // Give back what the node does not need of the block.
                if have > need {
                    a.free(off + need, have - need);
                }
                self.st[owner.index()].own = false;
                let st = &mut self.st[id.index()];
                st.addr = Some((b, off, need.min(have)));
                st.own = true;
                st.inplace = Some(0);
                return Ok(());
            }
        }
        let offset = self.allocs[buffer].alloc(size)?;
        let reserved = self.allocs[buffer].aligned(size)?;
        let st = &mut self.st[id.index()];
        st.addr = Some((buffer, offset, reserved));
        st.own = true;
        Ok(())
    }

    /// The memory of src0 when `node` may take it over: (owner of the memory, its address).
    fn inplace_candidate(
        &self,
        node: TensorId,
        buffer: usize,
        size: usize,
    ) -> Option<(TensorId, (usize, usize, usize))> {
        let ctx = self.ctx;
        let t = ctx.tensor(node);
        let parent = t.src[0]?;
        let pt = ctx.tensor(parent);
        if is_pinned(pt) || !pt.same_layout(t) {
            return None;
        }
        let ps = &self.st[parent.index()];
        if ps.n_children != 1 || ps.n_views != 0 {
            return None;
        }
        // The memory owner: the parent itself, or the tensor it is a view of.
        let owner = match pt.view_src {
            None => parent,
            Some(v) => {
                let vs = &self.st[v.index()];
                if pt.view_offs != 0 || vs.n_views != 1 || vs.n_children != 0 {
                    return None;
                }
                v
            }
        };
        let os = &self.st[owner.index()];
        let addr = os.addr?;
        let ok = os.own
            && !is_pinned(ctx.tensor(owner))
            && addr.0 == buffer
            && self.allocs[buffer].aligned(size).ok()? <= addr.2;
        ok.then_some((owner, addr))
    }

    /// `id` had its last consumer: free its memory, or, for a view, drop one view of its source
    /// and free that once nothing uses it (ggml_gallocr_free_node on parents).
    fn release(&mut self, id: TensorId) {
        let t = self.ctx.tensor(id);
        match t.view_src {
            Some(v) => {
                // A pinned view keeps its source alive for ever.
                if is_pinned(t) {
                    return;
                }
                let vs = &mut self.st[v.index()];
                vs.n_views = vs.n_views.saturating_sub(1);
                if vs.n_views == 0 && vs.n_children == 0 {
                    self.free(v);
                }
            }
            None => self.free(id),
        }
    }

    fn free(&mut self, id: TensorId) {
        let st = &mut self.st[id.index()];
        if !st.own || is_pinned(self.ctx.tensor(id)) {
            return;
        }
        st.own = false;
        if let Some((b, off, size)) = st.addr {
            self.allocs[b].free(off, size);
        }
    }
}

/// Check that the memory placement of `graph` is safe to compute, whoever placed it: every tensor
/// has data that lies inside its buffer, views agree with their sources, and no two tensors
/// that are live at the same time share a byte — except a node computed in place over a source
/// (same layout and address, an op that may run in place) at that source's last use.
///
/// Lifetimes follow graph order: tensors without an op (leafs, parameters) and inputs live from
/// before the first node, a node from its own step; a tensor lives until the last node that
/// reads it or a view of it (or, for `Cpy`, writes into it); inputs, outputs and parameters, and
/// the sources of such views, live for ever. For tests and debugging; O(n log n) plus the number
/// of overlapping pairs.
pub fn check_graph_allocation(ctx: &Context, graph: &Graph) -> Result<()> {
    const FOREVER: i64 = i64::MAX;
    let fail = |m: String| Err(Error::InvalidArgument(m));
    let base = |id: TensorId| ctx.tensor(id).view_src.unwrap_or(id);
    let all: Vec<TensorId> = graph.leafs.iter().chain(&graph.nodes).copied().collect();
    let mut start = vec![-1i64; ctx.len()];
    let mut end = vec![-1i64; ctx.len()];
    for (i, &n) in graph.nodes.iter().enumerate() {
        let t = ctx.tensor(n);
        if t.op != Op::None && !t.is_input() {
            start[n.index()] = i as i64;
            end[n.index()] = end[n.index()].max(i as i64);
        }
    }
    for (i, &n) in graph.nodes.iter().enumerate() {
        let t = ctx.tensor(n);
        if t.op.is_view() || t.op == Op::None {
            continue;
        }
        for s in t.srcs() {
            let b = base(s).index();
            end[b] = end[b].max(i as i64);
        }
        if t.view_src.is_some() {
            let b = base(n).index();
            end[b] = end[b].max(i as i64);
        }
    }
    for &id in &all {
        if is_pinned(ctx.tensor(id)) {
            end[base(id).index()] = FOREVER;
        }
    }
    // (buffer identity, start, end, tensor) of every tensor that owns its bytes.
    let mut regions: Vec<(usize, usize, usize, TensorId)> = Vec::new();
    let mut place = vec![None; ctx.len()];
    for &id in &all {
        let t = ctx.tensor(id);
        let data = match (t.view_src, &t.data) {
            (None, Some(d)) => d.clone(),
            (None, None) => return fail(format!("tensor '{}' ({}) has no data", t.name, id.0)),
            (Some(v), d) => {
                let Some(bd) = &ctx.tensor(v).data else {
                    return fail(format!(
                        "source of view '{}' ({}) has no data",
                        t.name, id.0
                    ));
                };
                let want = bd.offset + t.view_offs;
                if let Some(d) = d {
                    if !Arc::ptr_eq(&d.buffer, &bd.buffer) || d.offset != want {
                        return fail(format!("view '{}' ({}) is not at its source", t.name, id.0));
                    }
                }
                TensorData {
                    buffer: bd.buffer.clone(),
                    offset: want,
                }
            }
        };
        let buf = Arc::as_ptr(&data.buffer) as *const u8 as usize;
        let stop = data.offset + t.nbytes();
        if stop > data.buffer.size() {
            return fail(format!(
                "tensor '{}' ({}) ends at {stop}, outside its buffer of {} bytes",
                t.name,
                id.0,
                data.buffer.size()
            ));
        }
        place[id.index()] = Some((buf, data.offset));
        if t.view_src.is_none() && t.nbytes() > 0 {
            regions.push((buf, data.offset, stop, id));
        }
    }
    // `y` was computed in place over `x`, which it used for the last time.
    let inplace = |x: TensorId, y: TensorId| {
        let (tx, ty) = (ctx.tensor(x), ctx.tensor(y));
        end[x.index()] == start[y.index()]
            && start[y.index()] >= 0
            && ty.op.can_inplace()
            && !is_pinned(tx)
            && ty.srcs().any(|s| {
                let ts = ctx.tensor(s);
                base(s) == x
                    && !is_pinned(ts)
                    && ts.same_layout(ty)
                    && place[s.index()] == place[y.index()]
            })
    };
    regions.sort_unstable();
    for (i, &(buf, lo, hi, a)) in regions.iter().enumerate() {
        for &(buf2, lo2, _, b) in &regions[i + 1..] {
            if buf2 != buf || lo2 >= hi {
                break;
            }
            let (ia, ib) = (a.index(), b.index());
            let disjoint = end[ia] < start[ib] || end[ib] < start[ia];
            if !disjoint && !inplace(a, b) && !inplace(b, a) {
                return fail(format!(
                    "tensors {} (live {}..={}) and {} (live {}..={}) overlap at byte {lo2} \
                     (first at {lo}..{hi})",
                    a.0, start[ia], end[ia], b.0, start[ib], end[ib]
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{cpu_buffer_type, CpuBuffer};
    use crate::tensor::UnaryOp;
    use crate::DType;

    /// splitmix64: a small seeded generator for the property tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn chance(&mut self, percent: usize) -> bool {
            self.below(100) < percent
        }
        fn pick<T: Copy>(&mut self, v: &[T]) -> T {
            v[self.below(v.len())]
        }
    }

    /// Host buffers with a coarser alignment and padded tensors, to test both.
    struct PaddedBuft {
        max: usize,
    }
    impl BufferType for PaddedBuft {
        fn name(&self) -> &str {
            "PADDED"
        }
        fn alignment(&self) -> usize {
            128
        }
        fn max_size(&self) -> usize {
            self.max
        }
        fn alloc_size(&self, ctx: &Context, t: TensorId) -> usize {
            ctx.tensor(t).nbytes() + 40
        }
        fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
            Ok(Arc::new(CpuBuffer::alloc(size, self)?))
        }
        fn is_host(&self) -> bool {
            true
        }
    }

    fn padded() -> Arc<dyn BufferType> {
        Arc::new(PaddedBuft { max: usize::MAX })
    }

    #[test]
    fn dyn_alloc_best_fit_merge_and_tail() {
        let mut a = DynAlloc::new(32);
        let x = a.alloc(10).unwrap();
        let y = a.alloc(100).unwrap();
        let z = a.alloc(32).unwrap();
        let w = a.alloc(64).unwrap();
        assert_eq!((x, y, z, w), (0, 32, 160, 192));
        assert_eq!(a.max_size, 256);
        a.free(y, 100); // [32, 160)
        a.free(x, 10); // merges with the next block: [0, 160)
        assert_eq!(
            a.free,
            vec![Block {
                offset: 0,
                size: 160
            }]
        );
        // Best fit: a 32-byte hole beats the 160-byte one.
        a.free(w, 64); // touches the tail
        assert_eq!(a.tail, 192);
        let z2 = a.alloc(20).unwrap();
        assert_eq!(z2, 0);
        a.free(z, 32); // [160,192) merges into the tail, and so does [32,160)
        assert_eq!(a.free, vec![]);
        assert_eq!(a.tail, 32);
        assert_eq!(a.alloc(500).unwrap(), 32);
        assert_eq!(a.max_size, 544);
        // Merge on both sides.
        let mut b = DynAlloc::new(1);
        let o: Vec<usize> = (0..4).map(|_| b.alloc(10).unwrap()).collect();
        b.free(o[0], 10);
        b.free(o[2], 10);
        assert_eq!(b.free.len(), 2);
        b.free(o[1], 10);
        assert_eq!(
            b.free,
            vec![Block {
                offset: 0,
                size: 30
            }]
        );
        let best = b.alloc(5).unwrap();
        assert_eq!(best, 0);
    }

    /// Build a random DAG on the pool of tensors; returns the graph outputs.
    fn random_graph(rng: &mut Rng, ctx: &mut Context) -> (Vec<TensorId>, Vec<TensorId>) {
        let mut pool = Vec::new();
        let mut weights = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let ne = [
                rng.pick(&[1, 2, 3, 4, 5, 8, 16, 33]),
                rng.pick(&[1, 2, 3, 7]),
                rng.pick(&[1, 2, 3]),
                rng.pick(&[1, 2]),
            ];
            let dtype = if rng.chance(15) {
                DType::F16
            } else {
                DType::F32
            };
            let t = ctx.new_tensor(dtype, &ne).unwrap();
            match rng.below(10) {
                0..=2 => ctx.set_input(t),
                3 | 4 => weights.push(t),
                5 => ctx.set_param(t),
                _ => {}
            }
            pool.push(t);
        }
        for _ in 0..1 + rng.below(40) {
            let a = rng.pick(&pool);
            let ta = ctx.tensor(a).clone();
            let r = match rng.below(11) {
                0 | 1 => ctx.new_op(Op::Unary(UnaryOp::Relu), ta.dtype, ta.ne, &[a]),
                2 | 3 => {
                    let bs: Vec<TensorId> = pool
                        .iter()
                        .copied()
                        .filter(|&b| ctx.can_repeat(b, a))
                        .collect();
                    let b = if bs.is_empty() { a } else { rng.pick(&bs) };
                    ctx.add(a, b)
                }
                4 => ctx.cont(a),
                5 => ctx.reshape(a, &[ta.nelements()]),
                6 => ctx.transpose(a),
                7 => {
                    let ne = [
                        ta.ne[0],
                        ta.ne[1].saturating_sub(1).max(1),
                        ta.ne[2],
                        ta.ne[3],
                    ];
                    ctx.view(a, &ne, &ta.nb[1..], ta.nb[1] * (ta.ne[1] > 1) as usize)
                }
                8 => {
                    let ne = [rng.pick(&[1, 4, 17, 64]), ta.ne[1], rng.pick(&[1, 3]), 1];
                    let srcs: Vec<TensorId> =
                        (0..1 + rng.below(3)).map(|_| rng.pick(&pool)).collect();
                    ctx.new_op(Op::MulMat, DType::F32, ne, &srcs)
                }
                9 => {
                    let bs: Vec<TensorId> = pool
                        .iter()
                        .copied()
                        .filter(|&b| b != a && ctx.tensor(b).nelements() == ta.nelements())
                        .collect();
                    let b = if bs.is_empty() {
                        ctx.cont(a).unwrap()
                    } else {
                        rng.pick(&bs)
                    };
                    ctx.cpy(a, b)
                }
                _ => ctx.new_op(Op::Scale { s: 2.0, b: 0.0 }, ta.dtype, ta.ne, &[a]),
            };
            let Ok(r) = r else { continue };
            if rng.chance(8) {
                ctx.set_output(r);
            }
            pool.push(r);
        }
        let mut outs = vec![*pool.last().unwrap()];
        for _ in 0..rng.below(3) {
            outs.push(rng.pick(&pool));
        }
        (outs, weights)
    }

    /// Invariants beyond `check_graph_allocation`: every tensor the allocator placed is aligned
    /// and its reserved size lies inside its buffer.
    fn check_own(ctx: &Context, graph: &Graph, ga: &GraphAllocator) -> (usize, usize) {
        let (mut sum, mut n_inplace) = (0, 0);
        for &id in graph.leafs.iter().chain(&graph.nodes) {
            let t = ctx.tensor(id);
            let Some(d) = &t.data else { continue };
            if t.view_src.is_some() {
                continue;
            }
            let Some(i) = ga
                .buffers()
                .iter()
                .position(|b| b.as_ref().is_some_and(|b| Arc::ptr_eq(b, &d.buffer)))
            else {
                continue;
            };
            let buft = &ga.bufts[i];
            let size = align_up(buft.alloc_size(ctx, id), buft.alignment());
            assert_eq!(d.offset % buft.alignment(), 0, "tensor {} misaligned", id.0);
            assert!(
                d.offset + size <= d.buffer.size(),
                "tensor {} outside",
                id.0
            );
            sum += size;
            if let Some(s) = t.src[0] {
                let s = ctx.tensor(s);
                let sd = s.view_src.map_or(s, |v| ctx.tensor(v));
                if let Some(sd) = &sd.data {
                    if Arc::ptr_eq(&sd.buffer, &d.buffer) && sd.offset == d.offset {
                        n_inplace += 1;
                        assert!(t.op.can_inplace());
                    }
                }
            }
        }
        (sum, n_inplace)
    }

    #[test]
    fn random_graphs_never_share_live_memory() {
        let mut rng = Rng(0x5EED);
        let (mut total_sum, mut total_peak, mut total_inplace) = (0, 0, 0);
        for round in 0..600 {
            let mut ctx = Context::new();
            let (outs, weights) = random_graph(&mut rng, &mut ctx);
            let graph = Graph::build(&ctx, &outs);
            alloc_tensors(&mut ctx, &weights, &cpu_buffer_type()).unwrap();
            let variant = round % 3;
            let mut ga = match variant {
                0 => GraphAllocator::new(cpu_buffer_type()),
                1 => GraphAllocator::new(padded()),
                _ => GraphAllocator::new_n(vec![cpu_buffer_type(), padded()]),
            };
            let split = |t: TensorId| (t.0 as usize * 7 / 3) % 2;
            let nb: &dyn Fn(TensorId) -> usize = if variant == 2 { &split } else { &|_| 0 };
            ga.alloc_graph_n(&mut ctx, &graph, nb).unwrap();
            assert!(!ga.last_was_replay());
            if let Err(e) = check_graph_allocation(&ctx, &graph) {
                panic!("round {round}: {e}\n{:#?}", ctx);
            }
            let (sum, n_inplace) = check_own(&ctx, &graph, &ga);
            assert!(
                ga.peak() <= sum.max(1),
                "round {round}: peak {} > sum {sum}",
                ga.peak()
            );
            total_sum += sum;
            total_peak += ga.peak();
            total_inplace += n_inplace;
            // The same graph again replays the plan, with the same result.
            ga.alloc_graph_n(&mut ctx, &graph, nb).unwrap();
            assert!(ga.last_was_replay(), "round {round}");
            check_graph_allocation(&ctx, &graph).unwrap();
            check_own(&ctx, &graph, &ga);
        }
        eprintln!("sum {total_sum} peak {total_peak} in place {total_inplace}");
        assert!(total_inplace > 100, "in place {total_inplace}");
        assert!(
            total_peak * 10 < total_sum * 9,
            "peak {total_peak} vs sum {total_sum}"
        );
    }

    /// x → f → f → … of `n` nodes of `len` f32 each.
    fn chain(ctx: &mut Context, len: usize, n: usize, op: Op) -> (TensorId, TensorId) {
        let x = ctx.new_tensor_1d(DType::F32, len).unwrap();
        ctx.set_input(x);
        let mut h = x;
        for _ in 0..n {
            h = ctx.new_op(op, DType::F32, [len, 1, 1, 1], &[h]).unwrap();
        }
        ctx.set_output(h);
        (x, h)
    }

    #[test]
    fn long_chain_uses_constant_memory() {
        let size = 1000 * 4;
        // Not in place: ping-pong between two slots next to the input.
        let mut ctx = Context::new();
        let (_, out) = chain(&mut ctx, 1000, 200, Op::Cont);
        let g = Graph::build(&ctx, &[out]);
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        ga.alloc_graph(&mut ctx, &g).unwrap();
        check_graph_allocation(&ctx, &g).unwrap();
        assert!(ga.peak() <= 3 * align_up(size, 64), "peak {}", ga.peak());
        // In place: the input (pinned) plus one slot.
        let mut ctx = Context::new();
        let (_, out) = chain(&mut ctx, 1000, 200, Op::Unary(UnaryOp::Silu));
        let g = Graph::build(&ctx, &[out]);
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        ga.alloc_graph(&mut ctx, &g).unwrap();
        check_graph_allocation(&ctx, &g).unwrap();
        assert_eq!(ga.peak(), 2 * align_up(size, 64));
    }

    #[test]
    fn replay_same_topology_replan_when_bigger() {
        let mut ctx = Context::new();
        let mark = ctx.mark();
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        let mut peaks = Vec::new();
        for (len, replay) in [
            (100, false),
            (100, true),
            (60, true),
            (300, false),
            (100, true),
        ] {
            ctx.reset_to(mark);
            let (x, out) = chain(&mut ctx, len, 5, Op::Cont);
            let y = ctx.add(out, x).unwrap();
            let g = Graph::build(&ctx, &[y]);
            ga.alloc_graph(&mut ctx, &g).unwrap();
            assert_eq!(ga.last_was_replay(), replay, "len {len}");
            check_graph_allocation(&ctx, &g).unwrap();
            peaks.push(ga.peak());
        }
        assert_eq!(ga.n_plans(), 2);
        assert_eq!(ga.n_replays(), 3);
        // Buffers only grow.
        assert_eq!(peaks[0], peaks[2]);
        assert!(peaks[3] > peaks[0]);
        assert_eq!(peaks[3], peaks[4]);
        // A different topology plans again.
        ctx.reset_to(mark);
        let (_, out) = chain(&mut ctx, 100, 6, Op::Cont);
        let g = Graph::build(&ctx, &[out]);
        ga.alloc_graph(&mut ctx, &g).unwrap();
        assert!(!ga.last_was_replay());
    }

    #[test]
    fn reserve_then_alloc_replays() {
        let mut ctx = Context::new();
        let (_, out) = chain(&mut ctx, 256, 10, Op::Cont);
        let g = Graph::build(&ctx, &[out]);
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        ga.reserve(&ctx, &g).unwrap();
        let peak = ga.peak();
        assert!(peak > 0);
        assert!(ctx.tensor(out).data.is_none());
        ga.alloc_graph(&mut ctx, &g).unwrap();
        assert!(ga.last_was_replay());
        assert_eq!(ga.peak(), peak);
        check_graph_allocation(&ctx, &g).unwrap();
    }

    #[test]
    fn weights_and_views_of_weights_are_left_alone() {
        let mut ctx = Context::new();
        let w = ctx.new_tensor_2d(DType::F32, 8, 4).unwrap();
        let wbuf = alloc_tensors(&mut ctx, &[w], &cpu_buffer_type())
            .unwrap()
            .unwrap();
        let wt = ctx.transpose(w).unwrap();
        let c = ctx.cont(wt).unwrap();
        let v = ctx.view(c, &[4, 2], &[16], 16).unwrap();
        let d = ctx.add(v, v).unwrap();
        let g = Graph::build(&ctx, &[d]);
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        ga.alloc_graph(&mut ctx, &g).unwrap();
        check_graph_allocation(&ctx, &g).unwrap();
        let wd = ctx.tensor(w).data.clone().unwrap();
        assert!(Arc::ptr_eq(&wd.buffer, &wbuf) && wd.offset == 0);
        let td = ctx.tensor(wt).data.clone().unwrap();
        assert!(Arc::ptr_eq(&td.buffer, &wbuf));
        let (cd, vd) = (ctx.tensor(c).data.clone(), ctx.tensor(v).data.clone());
        assert_eq!(cd.unwrap().offset + 16, vd.unwrap().offset);
    }

    #[test]
    fn errors_not_panics() {
        let mut ctx = Context::new();
        let (_, out) = chain(&mut ctx, 1000, 3, Op::Cont);
        let g = Graph::build(&ctx, &[out]);
        let mut ga = GraphAllocator::new(Arc::new(PaddedBuft { max: 1000 }));
        assert!(matches!(
            ga.alloc_graph(&mut ctx, &g),
            Err(Error::OutOfMemory(_))
        ));
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        assert!(matches!(
            ga.alloc_graph_n(&mut ctx, &g, &|_| 1),
            Err(Error::InvalidArgument(_))
        ));
        // A view whose source is outside the graph and has no data.
        let mut ctx = Context::new();
        let a = ctx.new_tensor_1d(DType::F32, 4).unwrap();
        let v = ctx.reshape(a, &[2, 2]).unwrap();
        let mut g = Graph::build(&ctx, &[v]);
        g.leafs.clear();
        assert!(GraphAllocator::new(cpu_buffer_type())
            .alloc_graph(&mut ctx, &g)
            .is_err());
    }

    #[test]
    fn flag_or_layout_changes_plan_again() {
        let mut ctx = Context::new();
        let mark = ctx.mark();
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        for (step, replay) in [(0, false), (1, true), (2, false), (3, false), (4, true)] {
            ctx.reset_to(mark);
            let x = ctx.new_tensor_2d(DType::F32, 4, 4).unwrap();
            ctx.set_input(x);
            let a = ctx.cont(x).unwrap();
            // From step 2 the unary op's source is a transposed view (same size, other layout),
            // so the in-place plan of steps 0-1 is no longer valid.
            let src = if step >= 2 {
                ctx.transpose(a).unwrap()
            } else {
                ctx.reshape(a, &[4, 4]).unwrap()
            };
            let b = ctx
                .new_op(Op::Unary(UnaryOp::Neg), DType::F32, [4, 4, 1, 1], &[src])
                .unwrap();
            if step >= 3 {
                ctx.set_output(a);
            }
            let g = Graph::build(&ctx, &[b]);
            ga.alloc_graph(&mut ctx, &g).unwrap();
            assert_eq!(ga.last_was_replay(), replay, "step {step}");
            check_graph_allocation(&ctx, &g).unwrap();
            let off = |t: TensorId| ctx.tensor(t).data.as_ref().map(|d| d.offset);
            assert_eq!(off(a) == off(b), step < 2, "step {step}");
        }
    }

    #[test]
    fn planning_is_linear_enough() {
        let mut ctx = Context::new();
        let x = ctx.new_tensor_1d(DType::F32, 16).unwrap();
        ctx.set_input(x);
        // 50k nodes, each reading two earlier ones: a wide live set and a busy free list.
        let mut pool = vec![x];
        let mut rng = Rng(7);
        for i in 0..50_000 {
            let a = pool[pool.len() - 1 - rng.below(pool.len().min(64))];
            let b = pool[pool.len() - 1 - rng.below(pool.len().min(64))];
            let ne = [16 * (1 + i % 5), 1, 1, 1];
            let r = ctx.new_op(Op::MulMat, DType::F32, ne, &[a, b]).unwrap();
            pool.push(r);
        }
        let g = Graph::build(&ctx, &[*pool.last().unwrap()]);
        let t0 = std::time::Instant::now();
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        ga.alloc_graph(&mut ctx, &g).unwrap();
        let plan = t0.elapsed();
        let t0 = std::time::Instant::now();
        ga.alloc_graph(&mut ctx, &g).unwrap();
        let replay = t0.elapsed();
        assert!(ga.last_was_replay());
        check_graph_allocation(&ctx, &g).unwrap();
        eprintln!(
            "50k nodes: plan {plan:?}, replay {replay:?}, peak {}",
            ga.peak()
        );
        assert!(plan.as_secs_f64() < 5.0);
    }
}
