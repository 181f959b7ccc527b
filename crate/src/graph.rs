//! Static compute graphs: nodes (computed) and leafs (data from outside) in topological order.

use crate::tensor::{Op, TensorId, MAX_SRC};
use crate::Context;

/// A graph over tensors of one [`Context`]. `nodes` is a topological order: every node comes
/// after all of its sources.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub nodes: Vec<TensorId>,
    pub leafs: Vec<TensorId>,
    /// Visited set indexed by tensor id (ggml's visited hash set).
    visited: Vec<bool>,
    /// After [`Graph::build_backward`]: the gradient of the loss with respect to each tensor,
    /// indexed by tensor id (ggml's `grads` beside `nodes`).
    pub(crate) grads: Vec<Option<TensorId>>,
    /// The input holding d(loss)/d(loss), set by the caller (1, or 1/k for k accumulated batches).
    pub(crate) loss_grad: Option<TensorId>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Build the graph that computes `outputs`.
    pub fn build(ctx: &Context, outputs: &[TensorId]) -> Self {
        let mut g = Graph::new();
        for &o in outputs {
            g.build_forward_expand(ctx, o);
        }
        g
    }

    pub fn n_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Add `t` and every tensor it depends on that is not yet in the graph (ggml_build_forward_expand).
    /// Post-order DFS over sources left to right, with an explicit stack so depth is unbounded.
    pub fn build_forward_expand(&mut self, ctx: &Context, t: TensorId) {
        if self.visited.len() < ctx.len() {
            self.visited.resize(ctx.len(), false);
        }
        if self.visited[t.index()] {
            return;
        }
        // Stack of (tensor, next source slot to visit). Views reach their data owner through src[0].
        let mut stack: Vec<(TensorId, usize)> = vec![(t, 0)];
        self.visited[t.index()] = true;
        while let Some(top) = stack.len().checked_sub(1) {
            let (id, slot) = stack[top];
            let tensor = ctx.tensor(id);
            if slot < MAX_SRC {
                stack[top].1 += 1;
                if let Some(c) = tensor.src[slot] {
                    if !self.visited[c.index()] {
                        self.visited[c.index()] = true;
                        stack.push((c, 0));
                    }
                }
                continue;
            }
            stack.pop();
            if tensor.op == Op::None && !tensor.is_param() {
                self.leafs.push(id);
            } else {
                self.nodes.push(id);
            }
        }
    }

    /// The gradient of the loss with respect to `t`, once [`Graph::build_backward`] made one
    /// (None where the loss does not depend on `t` through differentiable ops).
    pub fn grad(&self, t: TensorId) -> Option<TensorId> {
        self.grads.get(t.index()).copied().flatten()
    }

    /// The input to set to d(loss)/d(loss) before computing the backward pass.
    pub fn loss_grad(&self) -> Option<TensorId> {
        self.loss_grad
    }

    pub fn contains(&self, t: TensorId) -> bool {
        self.visited.get(t.index()).copied().unwrap_or(false)
    }

    /// Number of consumers of each tensor within this graph, indexed by tensor id.
    pub fn use_counts(&self, ctx: &Context) -> Vec<u32> {
        let mut counts = vec![0u32; ctx.len()];
        for &n in &self.nodes {
            for s in ctx.tensor(n).srcs() {
                counts[s.index()] += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn deep_chain_does_not_overflow_and_is_topological() {
        let mut ctx = Context::new();
        let a = ctx.new_tensor_1d(DType::F32, 4).unwrap();
        let mut x = a;
        for _ in 0..200_000 {
            x = ctx.cont(x).unwrap();
        }
        let g = Graph::build(&ctx, &[x]);
        assert_eq!(g.leafs, vec![a]);
        assert_eq!(g.nodes.len(), 200_000);
        let mut pos = vec![usize::MAX; ctx.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            pos[n.index()] = i;
        }
        for (i, n) in g.nodes.iter().enumerate() {
            for s in ctx.tensor(*n).srcs() {
                if ctx.tensor(s).op != Op::None {
                    assert!(pos[s.index()] < i);
                }
            }
        }
    }

    #[test]
    fn expand_twice_adds_only_new_nodes() {
        let mut ctx = Context::new();
        let a = ctx.new_tensor_1d(DType::F32, 4).unwrap();
        let b = ctx.cont(a).unwrap();
        let c = ctx.cont(b).unwrap();
        let d = ctx.cont(b).unwrap();
        let mut g = Graph::new();
        g.build_forward_expand(&ctx, c);
        g.build_forward_expand(&ctx, d);
        assert_eq!(g.nodes, vec![b, c, d]);
    }
}
