//! mul_mat (src1 converted once to the vec_dot type, chunked across threads), im2col, pool_2d,
//! argmax and cross-entropy loss.

use crate::backend::cpu::{ComputeParams, NodeRef};

pub fn supported(_node: &NodeRef) -> bool {
    false
}

pub fn work_size(_node: &NodeRef, _nth: usize) -> usize {
    0
}

pub fn forward(_p: &ComputeParams, _node: &NodeRef) {
    unreachable!("checked by supported")
}
