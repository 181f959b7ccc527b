//! Elementwise, reduction, normalisation, softmax, rope, copy and indexing kernels.

use crate::backend::cpu::{ComputeParams, NodeRef};
use crate::tensor::Op;
use crate::DType;

pub fn supported(node: &NodeRef) -> bool {
    match node.op {
        Op::Add => node.dst.dtype == DType::F32 && node.src0().dtype == DType::F32,
        _ => false,
    }
}

pub fn work_size(_node: &NodeRef, _nth: usize) -> usize {
    0
}

pub fn forward(p: &ComputeParams, node: &NodeRef) {
    match node.op {
        Op::Add => binary_f32(p, node, |a, b| a + b),
        _ => unreachable!("checked by supported"),
    }
}

fn binary_f32(p: &ComputeParams, node: &NodeRef, f: impl Fn(f32, f32) -> f32) {
    let (d, a, b) = (&node.dst, node.src0(), node.src1());
    let nr = d.nrows();
    for ir in crate::backend::cpu::thread_range(nr, p.ith, p.nth) {
        let i1 = ir % d.ne[1];
        let i2 = (ir / d.ne[1]) % d.ne[2];
        let i3 = ir / (d.ne[1] * d.ne[2]);
        for i0 in 0..d.ne[0] {
            // SAFETY: indices are inside the shapes; src1 broadcast by modulo.
            unsafe {
                let x = *(a.at(i0, i1, i2, i3) as *const f32);
                let y =
                    *(b.at(i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]) as *const f32);
                *(d.at(i0, i1, i2, i3) as *mut f32) = f(x, y);
            }
        }
    }
}
