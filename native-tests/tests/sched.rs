//! The scheduler: a graph split across two backends with inputs copied at split boundaries.
//! The second backend is a CPU backend restricted to a few ops, with a buffer type of its own that
//! it alone can read — what a GPU looks like to the scheduler.

use std::any::Any;
use std::sync::Arc;

use ggweb::alloc::GraphAllocator;
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend, CpuBuffer};
use ggweb::backend::sched::Scheduler;
use ggweb::backend::{Backend, Buffer, BufferType, Device, DeviceKind};
use ggweb::tensor::UnaryOp;
use ggweb::{Context, DType, Graph, Op, Result, TensorId};

struct OwnBuft;
impl BufferType for OwnBuft {
    fn name(&self) -> &str {
        "RESTRICTED"
    }
    fn alignment(&self) -> usize {
        128
    }
    fn max_size(&self) -> usize {
        usize::MAX / 2
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(CpuBuffer::alloc(size, self)?))
    }
    fn is_host(&self) -> bool {
        // Pretend it is device memory: only its own device may read it.
        false
    }
}

fn own_buft() -> Arc<dyn BufferType> {
    static B: std::sync::OnceLock<Arc<OwnBuft>> = std::sync::OnceLock::new();
    B.get_or_init(|| Arc::new(OwnBuft)).clone()
}

struct Restricted;
impl Device for Restricted {
    fn name(&self) -> &str {
        "RESTRICTED"
    }
    fn description(&self) -> String {
        "CPU limited to add/mul/relu".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Gpu
    }
    fn memory(&self) -> (usize, usize) {
        (0, 0)
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        own_buft()
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(RestrictedBackend(CpuBackend::new(2))))
    }
    fn supports_op(&self, ctx: &Context, t: TensorId) -> bool {
        let n = ctx.tensor(t);
        n.dtype == DType::F32
            && matches!(
                n.op,
                Op::Add | Op::Mul | Op::Unary(UnaryOp::Relu) | Op::Reshape | Op::View
            )
    }
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.id() == own_buft().id()
    }
}

struct RestrictedBackend(CpuBackend);
impl Backend for RestrictedBackend {
    fn name(&self) -> &str {
        "RESTRICTED"
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(Restricted)
    }
    fn graph_compute(&mut self, ctx: &Context, graph: &Graph) -> Result<()> {
        for &n in &graph.nodes {
            assert!(
                Restricted.supports_op(ctx, n),
                "scheduler sent {:?} to the restricted backend",
                ctx.tensor(n).op
            );
            for s in ctx.tensor(n).srcs() {
                let st = ctx.tensor(s);
                let data = st
                    .data
                    .as_ref()
                    .or_else(|| st.view_src.and_then(|v| ctx.tensor(v).data.as_ref()));
                let buft = data.expect("source has data").buffer.buffer_type();
                assert!(
                    Restricted.supports_buft(buft.as_ref()),
                    "source '{}' is not in restricted memory",
                    st.name
                );
            }
        }
        self.0.compute(ctx, graph)
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// x → mul_mat(w, x) [CPU] → relu, *scale, + bias [restricted] → soft_max [CPU]
fn build(ctx: &mut Context) -> (TensorId, TensorId, TensorId, TensorId, TensorId) {
    let w = ctx.new_tensor_2d(DType::F32, 37, 19).unwrap();
    ctx.set_name(w, "w").unwrap();
    let x = ctx.new_tensor_2d(DType::F32, 37, 5).unwrap();
    ctx.set_name(x, "x").unwrap();
    ctx.set_input(x);
    let bias = ctx.new_tensor_1d(DType::F32, 19).unwrap();
    ctx.set_name(bias, "bias").unwrap();
    ctx.set_input(bias);
    let h = ctx.mul_mat(w, x).unwrap();
    ctx.set_name(h, "h").unwrap();
    let h = ctx.relu(h).unwrap();
    let h = ctx.mul(h, h).unwrap();
    let h = ctx.add(h, bias).unwrap();
    ctx.set_name(h, "h2").unwrap();
    let y = ctx.soft_max(h).unwrap();
    ctx.set_name(y, "y").unwrap();
    ctx.set_output(y);
    (w, x, bias, h, y)
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 500.0
                - 1.0
        })
        .collect()
}

#[test]
fn split_graph_matches_single_backend() {
    // Reference: everything on the CPU.
    let mut ctx = Context::new();
    let (w, x, bias, _, y) = build(&mut ctx);
    ggweb::alloc::alloc_tensors(&mut ctx, &[w], &cpu_buffer_type()).unwrap();
    let g = Graph::build(&ctx, &[y]);
    GraphAllocator::new(cpu_buffer_type())
        .alloc_graph(&mut ctx, &g)
        .unwrap();
    ctx.set_f32(w, &data(37 * 19, 1)).unwrap();
    ctx.set_f32(x, &data(37 * 5, 2)).unwrap();
    ctx.set_f32(bias, &data(19, 3)).unwrap();
    CpuBackend::new(2).compute(&ctx, &g).unwrap();
    let want = ctx.get_f32(y).unwrap();

    // Split: the weight lives in CPU memory, the restricted backend has priority.
    let mut ctx = Context::new();
    let (w, x, bias, h2, y) = build(&mut ctx);
    ggweb::alloc::alloc_tensors(&mut ctx, &[w], &cpu_buffer_type()).unwrap();
    ctx.set_f32(w, &data(37 * 19, 1)).unwrap();
    let g = Graph::build(&ctx, &[y]);
    let mut sched = Scheduler::new(vec![
        Restricted.init_backend().unwrap(),
        Box::new(CpuBackend::new(2)),
    ])
    .unwrap();
    sched.set_debug(true);
    sched.plan(&mut ctx, &g).unwrap();
    ctx.set_f32(x, &data(37 * 5, 2)).unwrap();
    ctx.set_f32(bias, &data(19, 3)).unwrap();
    sched.compute_planned(&ctx).unwrap();
    let got = ctx.get_f32(y).unwrap();
    let backends: Vec<usize> = sched.splits.iter().map(|s| s.backend).collect();
    assert_eq!(
        backends,
        vec![1, 0, 1],
        "CPU (mul_mat), restricted (relu, mul, add), CPU (soft_max)"
    );
    // The restricted split copies the mul_mat result in; the last split reads h2 back.
    assert!(sched.splits[1]
        .inputs
        .iter()
        .any(|(o, _)| ctx.tensor(*o).name == "h"));
    assert!(sched.splits[2].inputs.iter().any(|(o, _)| *o == h2));
    let reason = sched
        .placements
        .iter()
        .find(|p| ctx.tensor(p.node).op == Op::MulMat)
        .unwrap();
    assert!(reason.reason.contains("RESTRICTED"), "{}", reason.reason);
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
    }
    assert!(sched.buffer_sizes()[0] > 0 && sched.buffer_sizes()[1] > 0);
}

#[test]
fn no_backend_for_an_op_is_an_error() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor_1d(DType::F32, 8).unwrap();
    let b = ctx.soft_max(a).unwrap();
    let g = Graph::build(&ctx, &[b]);
    let mut sched = Scheduler::new(vec![Restricted.init_backend().unwrap()]).unwrap();
    let e = sched.compute(&mut ctx, &g).unwrap_err();
    assert!(
        e.to_string().contains("no backend supports SOFT_MAX"),
        "{e}"
    );
}
