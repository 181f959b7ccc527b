//! Memory planning: a bump allocator for weights (ggml_tallocr / alloc_ctx_tensors) and the
//! graph allocator that reuses memory by liveness (ggml_gallocr).

use std::sync::Arc;

use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::tensor::TensorData;
use crate::{Context, Result, TensorId};

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
    let buffer = buft.clone().alloc_buffer(size)?;
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
