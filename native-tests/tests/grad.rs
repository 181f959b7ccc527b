//! Gradient checks on the CPU: the cases of `support/grad.rs` (finite differences in f64 of the
//! graph's f32 loss against `Graph::build_backward`'s gradients; tolerances there), plus the
//! errors of graphs without a backward.

#[path = "support/grad.rs"]
mod grad_cases;

use ggweb::backend::webgpu::block_on;
use ggweb::{Context, DType, Error, Graph};
use grad_cases::Exec;

#[test]
fn binary_with_broadcast() {
    block_on(grad_cases::binary_with_broadcast(&Exec::Cpu));
}

#[test]
fn elementwise_and_reductions() {
    block_on(grad_cases::elementwise_and_reductions(&Exec::Cpu));
}

#[test]
fn unary_functions() {
    block_on(grad_cases::unary_functions(&Exec::Cpu));
}

#[test]
fn repeat_concat_and_views() {
    block_on(grad_cases::repeat_concat_and_views(&Exec::Cpu));
}

#[test]
fn mul_mat_with_broadcast() {
    block_on(grad_cases::mul_mat_with_broadcast(&Exec::Cpu));
}

#[test]
fn softmax_norms_and_loss() {
    block_on(grad_cases::softmax_norms_and_loss(&Exec::Cpu));
}

#[test]
fn rope_and_get_rows() {
    block_on(grad_cases::rope_and_get_rows(&Exec::Cpu));
}

#[test]
fn conv_and_pool() {
    block_on(grad_cases::conv_and_pool(&Exec::Cpu));
}

#[test]
fn a_small_network_end_to_end() {
    block_on(grad_cases::a_small_network_end_to_end(&Exec::Cpu));
}

#[test]
fn an_op_without_backward_is_an_error_naming_it() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor_2d(DType::F32, 4, 3).unwrap();
    ctx.set_param(a);
    let like = ctx.new_tensor_1d(DType::F32, 4).unwrap();
    let r = ctx.repeat_back(a, like).unwrap();
    let loss = ctx.sum(r).unwrap();
    let mut g = Graph::build(&ctx, &[loss]);
    match g.build_backward(&mut ctx, loss) {
        Err(Error::UnsupportedOp(m)) => assert!(m.contains("REPEAT_BACK"), "{m}"),
        other => panic!("expected UnsupportedOp, got {other:?}"),
    }
    // A loss that depends on no parameter, and a loss that is not a scalar.
    let mut ctx = Context::new();
    let a = ctx.new_tensor_2d(DType::F32, 4, 3).unwrap();
    let loss = ctx.sum(a).unwrap();
    let mut g = Graph::build(&ctx, &[loss]);
    assert!(matches!(
        g.build_backward(&mut ctx, loss),
        Err(Error::InvalidArgument(_))
    ));
    ctx.set_param(a);
    let rows = ctx.sum_rows(a).unwrap();
    let mut g = Graph::build(&ctx, &[rows]);
    assert!(matches!(
        g.build_backward(&mut ctx, rows),
        Err(Error::InvalidArgument(_))
    ));
}
