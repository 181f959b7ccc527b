//! The multi-backend scheduler (ggml_backend_sched): assigns every node of a graph to a backend,
//! splits the graph into runs of consecutive nodes on the same backend, inserts copies of the
//! inputs that cross a split boundary, plans memory for all backends at once and computes the
//! splits in order.
//!
//! Placement, in order: a node whose weight lives in a backend's buffer runs there if that
//! backend supports the op; otherwise the highest-priority backend (GPU before CPU) that supports
//! it. Leafs without data go to the backend of their first consumer. `GGWEB_SCHED_DEBUG=1` (or
//! [`Scheduler::set_debug`]) prints the splits and the reason for each placement.

use std::sync::Arc;

use crate::alloc::GraphAllocator;
use crate::backend::{Backend, BufferType, BufferUsage, Device, DeviceKind};
use crate::graph::Graph;
use crate::tensor::{Flags, Op, TensorId};
use crate::{Context, Error, Result};

/// One run of consecutive nodes on one backend, with the copies it needs first.
#[derive(Debug, Clone)]
pub struct Split {
    pub backend: usize,
    pub nodes: Vec<TensorId>,
    /// (source on another backend, its copy on this one)
    pub inputs: Vec<(TensorId, TensorId)>,
}

/// Nodes per backend (name, count) of the last planned graph, and the nodes not on the first
/// backend with the scheduler's reason.
pub type PlacementSummary = (Vec<(String, usize)>, Vec<(TensorId, String)>);

/// Why a node went where it went.
#[derive(Debug, Clone)]
pub struct Placement {
    pub node: TensorId,
    pub backend: usize,
    pub reason: String,
}

pub struct Scheduler {
    backends: Vec<Box<dyn Backend>>,
    devices: Vec<Arc<dyn Device>>,
    bufts: Vec<Arc<dyn BufferType>>,
    galloc: GraphAllocator,
    debug: bool,
    /// The splits and placements of the last graph.
    pub splits: Vec<Split>,
    pub placements: Vec<Placement>,
    /// (backend, nodes, copies) per split of the last graph printed in debug mode: a graph
    /// split the same way is not printed again (an LLM plans one graph per token).
    printed: Vec<(usize, usize, usize)>,
}

impl Scheduler {
    /// `backends` in priority order (index 0 first); the last one should be the CPU, which
    /// supports every op.
    pub fn new(backends: Vec<Box<dyn Backend>>) -> Result<Scheduler> {
        if backends.is_empty() {
            return Err(Error::InvalidArgument(
                "scheduler needs at least one backend".into(),
            ));
        }
        let devices: Vec<_> = backends.iter().map(|b| b.device()).collect();
        let bufts: Vec<_> = devices.iter().map(|d| d.buffer_type()).collect();
        let debug = std::env::var("GGWEB_SCHED_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0");
        Ok(Scheduler {
            galloc: GraphAllocator::new_n(bufts.clone()),
            backends,
            devices,
            bufts,
            debug,
            splits: Vec::new(),
            placements: Vec::new(),
            printed: Vec::new(),
        })
    }

    pub fn set_debug(&mut self, on: bool) {
        self.debug = on;
    }

    pub fn n_backends(&self) -> usize {
        self.backends.len()
    }

    pub fn backend_mut(&mut self, i: usize) -> &mut dyn Backend {
        self.backends[i].as_mut()
    }

    pub fn device(&self, i: usize) -> &Arc<dyn Device> {
        &self.devices[i]
    }

    /// Bytes of compute buffer per backend after the last allocation.
    pub fn buffer_sizes(&self) -> Vec<usize> {
        (0..self.bufts.len())
            .map(|i| self.galloc.buffer_size(i))
            .collect()
    }

    /// Bytes of the compute buffers in host memory and in device memory.
    pub fn buffer_bytes_by_place(&self) -> (usize, usize) {
        let mut by = (0, 0);
        for (i, b) in self.bufts.iter().enumerate() {
            let n = self.galloc.buffer_size(i);
            if b.is_host() {
                by.0 += n;
            } else {
                by.1 += n;
            }
        }
        by
    }

    /// The backend whose device can read the buffer that holds `t`'s data, if `t` has data.
    fn data_backend(&self, ctx: &Context, t: TensorId) -> Option<usize> {
        let buft = self.data_buft(ctx, t)?;
        (0..self.devices.len())
            .find(|&i| self.bufts[i].id() == buft.id())
            .or_else(|| {
                (0..self.devices.len()).find(|&i| self.devices[i].supports_buft(buft.as_ref()))
            })
    }

    fn is_weight(ctx: &Context, t: TensorId) -> bool {
        ctx.data_location(t)
            .is_some_and(|(buf, _)| buf.usage() == BufferUsage::Weights)
    }

    /// Assign each node, split the graph, insert copies (rewriting sources in `ctx`), allocate.
    /// Returns the graph to compute (with the copies as leafs).
    pub fn plan(&mut self, ctx: &mut Context, graph: &Graph) -> Result<Graph> {
        if self.backends.len() == 1 {
            // One backend: nothing to place or copy. The graph is allocated and computed as it
            // is, exactly as with the allocator and the backend used directly.
            self.placements.clear();
            // The CPU backend checks every node itself when it computes; others are asked here.
            if self.devices[0].kind() != DeviceKind::Cpu {
                for &node in &graph.nodes {
                    if !ctx.tensor(node).op.is_view() {
                        self.first_supporting(ctx, node)?;
                    }
                }
            }
            self.galloc.alloc_graph(ctx, graph)?;
            self.splits = vec![Split {
                backend: 0,
                nodes: graph.nodes.clone(),
                inputs: Vec::new(),
            }];
            if self.debug {
                let splits = std::mem::take(&mut self.splits);
                self.print(ctx, &splits);
                self.splits = splits;
            }
            return Ok(graph.clone());
        }
        let n = ctx.len();
        let mut assign: Vec<Option<usize>> = vec![None; n];
        self.placements.clear();
        // Tensors with data stay where their data is.
        for id in ctx.ids() {
            if let Some(b) = self.data_backend(ctx, id) {
                assign[id.index()] = Some(b);
            }
        }
        for &node in &graph.nodes {
            let t = ctx.tensor(node);
            let (backend, reason) = if t.op.is_view() || t.op == Op::Cpy {
                // Views run nowhere; they follow their source (or the destination for cpy).
                let src = if t.op == Op::Cpy { t.src[1] } else { t.src[0] };
                let b = src
                    .and_then(|s| assign[s.index()])
                    .or_else(|| t.view_src.and_then(|v| assign[v.index()]));
                match (t.op, b) {
                    (Op::Cpy, Some(b)) if self.devices[b].supports_op(ctx, node) => {
                        (b, "cpy into its destination's backend".to_string())
                    }
                    (Op::Cpy, _) => {
                        let (c, why) = self.first_supporting(ctx, node)?;
                        // The copy writes its destination in place: the backend that runs it
                        // must be able to address that memory.
                        if let Some(d) = t.src[1].and_then(|d| self.data_buft(ctx, d)) {
                            if !self.devices[c].supports_buft(d.as_ref()) {
                                return Err(Error::UnsupportedOp(format!(
                                    "cpy '{}': {} cannot write its destination in a {} buffer ({why})",
                                    t.name,
                                    self.devices[c].name(),
                                    d.name()
                                )));
                            }
                        }
                        (c, why)
                    }
                    (_, Some(b)) => (b, "view of a tensor there".to_string()),
                    // A view of an unplaced leaf (an input allocated later): it lives where
                    // unplaced tensors are allocated, the last (CPU) backend.
                    (_, None) => (
                        self.backends.len() - 1,
                        "view of an unplaced tensor".to_string(),
                    ),
                }
            } else if let Some((b, w)) = t
                .srcs()
                .filter(|&s| Self::is_weight(ctx, s))
                .find_map(|s| assign[s.index()].map(|b| (b, s)))
                .filter(|&(b, _)| self.devices[b].supports_op(ctx, node))
            {
                (b, format!("'{}' lives there", ctx.tensor(w).name))
            } else {
                self.first_supporting(ctx, node)?
            };
            let reason = match self.devices[backend].op_note(ctx, node) {
                Some(note) => format!("{reason}; {note}"),
                None => reason,
            };
            assign[node.index()] = Some(backend);
            self.placements.push(Placement {
                node,
                backend,
                reason,
            });
        }
        // Leafs without data: the backend of their first consumer.
        for &node in &graph.nodes {
            let b = assign[node.index()];
            for s in ctx.tensor(node).srcs().collect::<Vec<_>>() {
                if assign[s.index()].is_none() {
                    assign[s.index()] = b;
                }
            }
        }
        // Splits and copies.
        let mut splits: Vec<Split> = Vec::new();
        let mut outputs: Vec<TensorId> = Vec::new();
        for &node in &graph.nodes {
            let b = assign[node.index()].unwrap_or(self.backends.len() - 1);
            if ctx.tensor(node).op.is_view() {
                if let Some(last) = splits.last_mut() {
                    last.nodes.push(node);
                }
                continue;
            }
            if splits.last().is_none_or(|s| s.backend != b) {
                splits.push(Split {
                    backend: b,
                    nodes: Vec::new(),
                    inputs: Vec::new(),
                });
            }
            let srcs: Vec<(usize, TensorId)> = ctx
                .tensor(node)
                .src
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.map(|s| (i, s)))
                .collect();
            for (slot, s) in srcs {
                let sb = assign[s.index()].unwrap_or(b);
                if sb == b {
                    continue;
                }
                let readable = match self.data_buft(ctx, s) {
                    Some(buft) => self.devices[b].supports_buft(buft.as_ref()),
                    None => self.bufts[sb].is_host() && self.bufts[b].is_host(),
                };
                if readable && ctx.tensor(s).data.is_some() {
                    continue;
                }
                let split = splits.last_mut().expect("a split exists");
                let copy = match split.inputs.iter().find(|(o, _)| *o == s) {
                    Some(&(_, c)) => c,
                    None => {
                        let st = ctx.tensor(s);
                        let (dtype, ne, name) = (st.dtype, st.ne, st.name.clone());
                        let c = ctx.new_tensor(dtype, &ne)?;
                        let cname: String = format!("{}#{}", self.backends[b].name(), name)
                            .chars()
                            .take(63)
                            .collect();
                        ctx.set_name(c, &cname)?;
                        ctx.tensor_mut(c).flags.insert(Flags::INPUT);
                        assign.resize(ctx.len(), None);
                        assign[c.index()] = Some(b);
                        split.inputs.push((s, c));
                        // The source must stay alive until the copy is made (tensors with
                        // their own data, such as weights, are not the allocator's).
                        if ctx.tensor(s).data.is_none() {
                            ctx.tensor_mut(s).flags.insert(Flags::OUTPUT);
                        }
                        outputs.push(s);
                        c
                    }
                };
                ctx.tensor_mut(node).src[slot] = Some(copy);
            }
            splits.last_mut().expect("a split exists").nodes.push(node);
        }
        // The graph to allocate: every original node (with rewritten sources) plus the copies.
        let mut g = Graph::new();
        for s in &splits {
            for &(orig, _) in &s.inputs {
                g.build_forward_expand(ctx, orig);
            }
            for &node in &s.nodes {
                g.build_forward_expand(ctx, node);
            }
        }
        for o in outputs {
            g.build_forward_expand(ctx, o);
        }
        assign.resize(ctx.len(), None);
        let last = self.backends.len() - 1;
        let buffer_of = |t: TensorId| assign.get(t.index()).copied().flatten().unwrap_or(last);
        self.galloc.alloc_graph_n(ctx, &g, &buffer_of)?;
        if self.debug {
            self.print(ctx, &splits);
        }
        self.splits = splits;
        Ok(g)
    }

    /// The buffer type holding `t`'s data (its own or its view source's), if any.
    fn data_buft(&self, ctx: &Context, t: TensorId) -> Option<Arc<dyn BufferType>> {
        ctx.data_location(t).map(|(buf, _)| buf.buffer_type())
    }

    fn first_supporting(&self, ctx: &Context, node: TensorId) -> Result<(usize, String)> {
        let mut refused = Vec::new();
        for (i, d) in self.devices.iter().enumerate() {
            if d.supports_op(ctx, node) {
                let reason = if refused.is_empty() {
                    "highest-priority backend supporting the op".to_string()
                } else {
                    format!("not supported by {}", refused.join("; "))
                };
                return Ok((i, reason));
            }
            refused.push(match d.unsupported_reason(ctx, node) {
                Some(why) => format!("{}: {why}", d.name()),
                None => d.name().to_string(),
            });
        }
        let t = ctx.tensor(node);
        Err(Error::UnsupportedOp(format!(
            "no backend supports {} on '{}' ({})",
            t.op.name(),
            t.name,
            t.dtype
        )))
    }

    fn print(&mut self, ctx: &Context, splits: &[Split]) {
        let shape: Vec<(usize, usize, usize)> = splits
            .iter()
            .map(|s| (s.backend, s.nodes.len(), s.inputs.len()))
            .collect();
        if shape == self.printed {
            return;
        }
        self.printed = shape;
        eprintln!(
            "ggweb sched: {} splits over {} backends",
            splits.len(),
            self.backends.len()
        );
        for (i, s) in splits.iter().enumerate() {
            let inputs: Vec<String> = s
                .inputs
                .iter()
                .map(|(o, _)| ctx.tensor(*o).name.clone())
                .collect();
            eprintln!(
                "  split {i}: {} ({} nodes), inputs copied: [{}]",
                self.backends[s.backend].name(),
                s.nodes.len(),
                inputs.join(", ")
            );
        }
        for p in &self.placements {
            let t = ctx.tensor(p.node);
            eprintln!(
                "    {:<24} {:<10} -> {:<8} ({})",
                t.name,
                t.op.name(),
                self.backends[p.backend].name(),
                p.reason
            );
        }
    }

    /// Plan and compute `graph`. The sources of nodes that cross backends are rewritten in `ctx`
    /// to their copies: build a fresh graph for each compute (as with ggml_backend_sched_reset),
    /// or plan a clone of the context when the graph must outlive the compute (the JS graph API,
    /// `wasm/graph.rs`, does: a recompute would otherwise read the first compute's copies).
    pub fn compute(&mut self, ctx: &mut Context, graph: &Graph) -> Result<()> {
        self.plan(ctx, graph)?;
        self.compute_planned(ctx)
    }

    /// Compute the splits of the last [`Scheduler::plan`] (set the inputs in between, as with
    /// ggml_backend_sched_alloc_graph followed by graph_compute).
    pub fn compute_planned(&mut self, ctx: &Context) -> Result<()> {
        for i in 0..self.splits.len() {
            for &(orig, copy) in &self.splits[i].inputs {
                ctx.set_bytes(copy, &ctx.read_bytes(orig)?)?;
            }
            self.compute_split(ctx, i)?;
        }
        Ok(())
    }

    /// [`Scheduler::compute_planned`] with the copies between backends made through the buffers'
    /// async transfers: the browser cannot block on a read of device memory.
    pub async fn compute_planned_async(&mut self, ctx: &Context) -> Result<()> {
        for i in 0..self.splits.len() {
            for &(orig, copy) in &self.splits[i].inputs {
                let bytes = ctx.read_bytes_async(orig).await?;
                ctx.set_bytes_async(copy, &bytes).await?;
            }
            self.compute_split(ctx, i)?;
        }
        Ok(())
    }

    fn compute_split(&mut self, ctx: &Context, i: usize) -> Result<()> {
        let s = &self.splits[i];
        let mut g = Graph::new();
        g.nodes.extend_from_slice(&s.nodes);
        self.backends[s.backend].graph_compute(ctx, &g)
    }

    /// Per backend (in priority order): its name and the number of nodes of the last planned
    /// graph placed on it; plus the nodes not on the first backend with the scheduler's reason.
    pub fn placement_summary(&self, ctx: &Context) -> PlacementSummary {
        let mut counts: Vec<(String, usize)> = self
            .backends
            .iter()
            .map(|b| (b.name().to_string(), 0))
            .collect();
        let mut elsewhere = Vec::new();
        for p in &self.placements {
            let t = ctx.tensor(p.node);
            if t.op.is_view() {
                continue;
            }
            counts[p.backend].1 += 1;
            if p.backend != 0 {
                elsewhere.push((p.node, p.reason.clone()));
            }
        }
        (counts, elsewhere)
    }
}
