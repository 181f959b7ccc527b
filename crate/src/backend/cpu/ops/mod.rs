//! CPU kernels: dispatch by op, with per-op support checks and work-buffer sizes.

use super::{ComputeParams, NodeRef};
use crate::tensor::Op;
use crate::{Context, Error, Result, TensorId};

pub mod attention;
pub mod basic;
pub mod matmul;
pub mod train;

/// Name of the SIMD path in use.
pub fn simd_name() -> &'static str {
    if cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")) {
        "wasm32 simd128 + relaxed-simd"
    } else if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
        "wasm32 simd128"
    } else {
        "scalar"
    }
}

/// Whether the CPU backend can compute node `t`.
pub fn supports(ctx: &Context, t: TensorId) -> bool {
    // Views and leafs run no kernel.
    let op = ctx.tensor(t).op;
    if op.is_view() || op == Op::None {
        return true;
    }
    match super::resolve_node_shape(ctx, t) {
        Some(node) => check_supported(&node).is_ok(),
        None => false,
    }
}

/// Ops whose kernels live in `matmul` (mul_mat, convolution helpers, pooling, losses).
fn is_matmul_family(op: &Op) -> bool {
    matches!(
        op,
        Op::MulMat | Op::Im2Col { .. } | Op::Pool2d { .. } | Op::CrossEntropyLoss | Op::Argmax
    )
}

/// Ops whose kernels live in `basic` (element-wise and row-wise: each output element is
/// computed by one thread, whatever the thread count).
pub fn is_basic(op: &Op) -> bool {
    // Fused attention shares its work buffer across threads and meets a barrier inside.
    !is_matmul_family(op) && !train::is_train_op(op) && !matches!(op, Op::FlashAttnExt { .. })
}

/// How a node uses the work buffer across threads (for placing barriers between nodes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WorkUse {
    None,
    /// Each thread only its own part, the same part for every node (a GEMV's src1 copy).
    PerThread,
    /// Written and read across threads.
    Shared,
    /// Read across threads, not written: a product taking the previous one's converted src1
    /// (`matmul::ConvertKey`), placed by `CpuBackend::plan` only.
    SharedRead,
    /// A kernel outside the element-wise and mul_mat ones: a barrier before and after it.
    Opaque,
}

/// How `node` on `nth` threads uses the work buffer.
pub fn work_use(node: &NodeRef, nth: usize) -> WorkUse {
    if is_basic(&node.op) {
        WorkUse::None
    } else if node.op == Op::MulMat {
        matmul::work_use(node, nth)
    } else {
        WorkUse::Opaque
    }
}

/// An error naming the op and types when the CPU backend cannot compute `node`.
pub fn check_supported(node: &NodeRef) -> Result<()> {
    // Repacked weights: read by mul_mat and get_rows as src0, by nothing else.
    for (i, s) in node.src.iter().enumerate() {
        let Some(s) = s else { continue };
        let reads = match s.repacked {
            super::repack::Repacked::No => true,
            super::repack::Repacked::Yes => i == 0 && matches!(node.op, Op::MulMat | Op::GetRows),
            super::repack::Repacked::View => false,
        };
        if !reads {
            return Err(Error::UnsupportedOp(format!(
                "{} of weights repacked for the CPU GEMV (src{i}): only mul_mat and get_rows \
                 read them",
                node.op.name()
            )));
        }
    }
    let ok = if is_matmul_family(&node.op) {
        matmul::supported(node)
    } else if matches!(node.op, Op::FlashAttnExt { .. }) {
        attention::supported(node)
    } else if train::is_train_op(&node.op) {
        train::supported(node)
    } else {
        basic::supported(node)
    };
    if ok {
        Ok(())
    } else {
        let types: Vec<String> = node
            .src
            .iter()
            .flatten()
            .map(|s| s.dtype.to_string())
            .collect();
        Err(Error::UnsupportedOp(format!(
            "{} on the CPU for src types [{}] -> {}",
            node.op.name(),
            types.join(", "),
            node.dst.dtype
        )))
    }
}

/// Bytes of work buffer the node needs with `nth` threads.
pub fn work_size(node: &NodeRef, nth: usize) -> usize {
    if is_matmul_family(&node.op) {
        matmul::work_size(node, nth)
    } else if matches!(node.op, Op::FlashAttnExt { .. }) {
        attention::work_size(node)
    } else {
        basic::work_size(node, nth)
    }
}

/// Run thread `p.ith`'s share of `node`.
pub fn forward(p: &ComputeParams, node: &NodeRef) {
    if is_matmul_family(&node.op) {
        matmul::forward(p, node)
    } else if matches!(node.op, Op::FlashAttnExt { .. }) {
        attention::forward(p, node)
    } else if train::is_train_op(&node.op) {
        train::forward(p, node)
    } else {
        basic::forward(p, node)
    }
}
