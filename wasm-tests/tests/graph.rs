//! The CPU backend inside wasm: a small graph vs plain Rust.
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::{Context, DType, Graph};
use ggweb_testing::Rng;
use wasm_bindgen_test::*;

#[wasm_bindgen_test]
fn mul_mat_add_relu() {
    let (k, m, n) = (67, 13, 5);
    let mut rng = Rng::new(42);
    let (av, bv, cv) = (
        rng.vec(k * m, -1.0, 1.0),
        rng.vec(k * n, -1.0, 1.0),
        rng.vec(m, -1.0, 1.0),
    );
    let mut ctx = Context::new();
    let a = ctx.new_tensor_2d(DType::F32, k, m).unwrap();
    let b = ctx.new_tensor_2d(DType::F32, k, n).unwrap();
    let c = ctx.new_tensor_1d(DType::F32, m).unwrap();
    let mm = ctx.mul_mat(a, b).unwrap();
    let s = ctx.add(mm, c).unwrap();
    let out = ctx.relu(s).unwrap();
    ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    ctx.set_f32(a, &av).unwrap();
    ctx.set_f32(b, &bv).unwrap();
    ctx.set_f32(c, &cv).unwrap();
    let g = Graph::build(&ctx, &[out]);
    CpuBackend::new(1).compute(&ctx, &g).unwrap();
    let got = ctx.get_f32(out).unwrap();
    for j in 0..n {
        for i in 0..m {
            let dot: f32 = (0..k).map(|t| av[i * k + t] * bv[j * k + t]).sum();
            let want = (dot + cv[i]).max(0.0);
            let d = (got[j * m + i] - want).abs();
            assert!(
                d <= 1e-4 * want.abs().max(1.0),
                "[{i},{j}] {} vs {want}",
                got[j * m + i]
            );
        }
    }
}

#[wasm_bindgen_test]
fn shape_errors_are_results() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor_2d(DType::F32, 4, 3).unwrap();
    let b = ctx.new_tensor_2d(DType::F32, 3, 4).unwrap();
    assert!(ctx.add(a, b).is_err());
    assert!(ctx.mul_mat(a, b).is_err());
}
