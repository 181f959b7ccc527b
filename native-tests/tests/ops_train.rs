//! The CPU kernels of the backward and optimizer ops against their scalar references: the
//! cases of `support/train_ops.rs` (tolerances there) on 1 and 3 threads, and the constructors'
//! shape checks.

#[path = "support/train_ops.rs"]
mod train_ops;

use ggweb::tensor::UnaryOp;
use ggweb::{Context, DType};
use train_ops::Exec;

#[test]
fn repeat_back() {
    train_ops::repeat_back(&Exec::Cpu);
}

#[test]
fn unary_back() {
    train_ops::unary_back(&Exec::Cpu);
}

#[test]
fn norm_back() {
    train_ops::norm_back(&Exec::Cpu);
}

#[test]
fn view_back_and_get_rows_back() {
    train_ops::view_back_and_get_rows_back(&Exec::Cpu);
}

#[test]
fn im2col_back() {
    train_ops::im2col_back(&Exec::Cpu);
}

#[test]
fn pool_2d_back() {
    train_ops::pool_2d_back(&Exec::Cpu);
}

#[test]
fn rope_back() {
    train_ops::rope_back(&Exec::Cpu);
}

#[test]
fn optimizer_steps() {
    train_ops::optimizer_steps(&Exec::Cpu);
}

#[test]
fn constructors_reject_bad_shapes() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[6, 4]).unwrap();
    assert!(ctx.repeat_back_to(a, [4, 4, 1, 1]).is_err());
    let b = ctx.new_tensor(DType::F32, &[5, 4]).unwrap();
    assert!(ctx.unary_back(a, b, UnaryOp::Relu).is_err());
    assert!(ctx.view_back(a, [6, 3, 1, 1], [4, 24, 96, 96], 0).is_err());
    let hp = ctx.new_tensor_1d(DType::F32, 3).unwrap();
    assert!(ctx.opt_step_sgd(a, a, hp).is_err());
    let st = ctx.new_tensor(DType::F32, &[24, 1]).unwrap();
    let hp7 = ctx.new_tensor_1d(DType::F32, 7).unwrap();
    assert!(ctx.opt_step_adamw(a, a, st, hp7).is_err());
    let v = ctx.view(a, &[3, 4], &[24], 0).unwrap();
    let hp2 = ctx.new_tensor_1d(DType::F32, 2).unwrap();
    assert!(ctx.opt_step_sgd(v, v, hp2).is_err());
}
