use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::{alloc, Context, DType, Graph};

#[test]
fn add_broadcast_end_to_end() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor_2d(DType::F32, 3, 2).unwrap();
    let b = ctx.new_tensor_1d(DType::F32, 3).unwrap();
    let c = ctx.add(a, b).unwrap();
    alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    ctx.set_f32(a, &[1., 2., 3., 4., 5., 6.]).unwrap();
    ctx.set_f32(b, &[10., 20., 30.]).unwrap();
    let g = Graph::build(&ctx, &[c]);
    CpuBackend::new(2).compute(&ctx, &g).unwrap();
    assert_eq!(ctx.get_f32(c).unwrap(), vec![11., 22., 33., 14., 25., 36.]);
}
