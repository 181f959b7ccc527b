//! The graph builder driven by random op sequences and shapes (the surface the JS Graph API
//! exposes), sometimes with the backward pass: building is a `Result`, the allocator's placement check holds, and computing on the
//! CPU (1 or 2 threads) never panics or writes out of bounds — shape faults are errors.
#![no_main]
use ggweb::alloc::{check_graph_allocation, GraphAllocator};
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::tensor::{Op, PoolOp, RopeMode, RopeParams, UnaryOp};
use ggweb::{Context, DType, Graph, TensorId};
use libfuzzer_sys::fuzz_target;

/// Reads the input front to back; zeros when it runs out.
struct Bytes<'a>(&'a [u8]);
impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn small(&mut self) -> usize {
        // Mostly small sizes; sometimes 0 or very large, the values that broke things before.
        match self.u8() {
            250 => 0,
            251 => 1 << 16,
            252 => 1 << 31,
            253 => (1 << 32) - 64,
            254 => 1 << 40,
            255 => usize::MAX / 2,
            b => 1 + (b % 9) as usize,
        }
    }
    fn f32(&mut self) -> f32 {
        match self.u8() {
            250 => f32::NAN,
            251 => f32::INFINITY,
            252 => -1e30,
            b => (b as f32 - 100.0) / 16.0,
        }
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

const TYPES: &[DType] = &[
    DType::F32,
    DType::F32,
    DType::F16,
    DType::I32,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_K,
];
const UNARY: &[UnaryOp] = &UnaryOp::ALL;

/// Budget of bytes a case may allocate: beyond it the case only builds and plans.
/// `GGWEB_FUZZ_TRACE=1`: print each op built (to triage a crash input).
fn trace() -> bool {
    std::env::var_os("GGWEB_FUZZ_TRACE").is_some()
}

const MAX_BYTES: u64 = 64 << 20;
const MAX_ELEMENTS: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mut ctx = Context::new();
    let mut pool: Vec<TensorId> = Vec::new();
    for _ in 0..1 + b.u8() % 4 {
        let dtype = TYPES[b.u8() as usize % TYPES.len()];
        let ne: Vec<usize> = (0..1 + b.u8() % 4).map(|_| b.small()).collect();
        if let Ok(t) = ctx.new_tensor(dtype, &ne) {
            ctx.set_input(t);
            pool.push(t);
        }
    }
    if pool.is_empty() {
        return;
    }
    let mut steps = 0;
    while !b.done() && steps < 24 {
        steps += 1;
        let op = b.u8();
        let a = pool[b.u8() as usize % pool.len()];
        let c = pool[b.u8() as usize % pool.len()];
        let r = match op % 30 {
            0 => ctx.add(a, c),
            1 => ctx.sub(a, c),
            2 => ctx.mul(a, c),
            3 => ctx.div(a, c),
            4 => ctx.scale_bias(a, b.f32(), b.f32()),
            5 => ctx.sqr(a),
            6 => ctx.sqrt(a),
            7 => ctx.log(a),
            8 => ctx.sum(a),
            9 => ctx.sum_rows(a),
            10 => ctx.mean(a),
            11 => ctx.repeat(a, c),
            12 => ctx.concat(a, c, b.u8() as usize % 5),
            13 => ctx.unary(a, UNARY[b.u8() as usize % UNARY.len()]),
            14 => ctx.norm(a, b.f32()),
            15 => ctx.rms_norm(a, b.f32()),
            16 => {
                let sel = b.u8();
                if sel & 2 == 0 {
                    let mask = (sel & 1 == 1).then_some(c);
                    ctx.soft_max_ext(a, mask, b.f32(), b.f32().abs())
                } else {
                    // Fused attention: q = a, k = c, v and the mask from the pool.
                    let v = pool[b.u8() as usize % pool.len()];
                    let m = pool[b.u8() as usize % pool.len()];
                    let mask = (sel & 1 == 1).then_some(m);
                    ctx.flash_attn_ext(a, c, v, mask, b.f32(), b.f32().abs(), b.f32().abs())
                }
            }
            17 => {
                let mode = if b.u8() & 1 == 1 {
                    RopeMode::Neox
                } else {
                    RopeMode::Normal
                };
                let mut p = RopeParams::new(b.small(), mode, b.f32().abs() * 1000.0);
                p.n_ctx_orig = b.small();
                p.ext_factor = b.f32();
                ctx.rope_ext(a, c, None, p)
            }
            18 => ctx.get_rows(a, c),
            19 => ctx.mul_mat(a, c),
            20 => ctx.im2col(
                a,
                c,
                b.small(),
                b.small(),
                b.small(),
                b.small(),
                b.small(),
                b.small(),
                b.u8() & 1 == 1,
                DType::F32,
            ),
            21 => ctx.conv_2d(
                a,
                c,
                b.small(),
                b.small(),
                b.small(),
                b.small(),
                b.small(),
                b.small(),
            ),
            22 => {
                let op = if b.u8() & 1 == 1 {
                    PoolOp::Max
                } else {
                    PoolOp::Avg
                };
                ctx.pool_2d(
                    a,
                    op,
                    b.small(),
                    b.small(),
                    b.small(),
                    b.small(),
                    b.small(),
                    b.small(),
                )
            }
            23 => ctx.argmax(a),
            24 => ctx.cross_entropy_loss(a, c),
            25 => {
                let ne: Vec<usize> = (0..1 + b.u8() % 4).map(|_| b.small()).collect();
                ctx.reshape(a, &ne)
            }
            26 => {
                let n = 1 + b.u8() as usize % 4;
                let ne: Vec<usize> = (0..n).map(|_| b.small()).collect();
                let nb: Vec<usize> = (1..n).map(|_| b.small().wrapping_mul(4)).collect();
                ctx.view(a, &ne, &nb, b.small())
            }
            27 => {
                let k = b.u8() as usize;
                let axes = [k % 4, (k / 4) % 4, (k / 16) % 4, (k / 64) % 4];
                ctx.permute(a, axes)
            }
            28 => ctx.transpose(a).and_then(|t| ctx.cont(t)),
            _ => match b.u8() % 3 {
                0 => ctx.cpy(a, c),
                1 => ctx.cast(a, TYPES[b.u8() as usize % TYPES.len()]),
                _ => ctx.dup(a),
            },
        };
        if trace() {
            let desc = r.as_ref().map(|&r| {
                let t = ctx.tensor(r);
                format!("{:?} {:?} ne {:?} nb {:?} offs {}", t.op, t.dtype, t.ne, t.nb, t.view_offs)
            });
            eprintln!("op {} on {a:?}, {c:?} -> {desc:?}", op % 30);
        }
        if let Ok(r) = r {
            pool.push(r);
        }
    }
    let mut out = *pool.last().expect("not empty");
    // Sometimes train: the f32 leaves become parameters and the backward pass of sum(out) is
    // built (an op without a backward is an error, never a panic).
    let train = data.len() % 3 == 0;
    if train {
        for &t in &pool {
            let tt = ctx.tensor(t);
            if tt.is_input() && tt.dtype == DType::F32 {
                ctx.set_param(t);
            }
        }
        match ctx.sum(out) {
            Ok(l) => out = l,
            Err(_) => return,
        }
    }
    ctx.set_output(out);
    let mut g = Graph::build(&ctx, &[out]);
    if train && g.build_backward(&mut ctx, out).is_err() {
        return;
    }
    // Size check before allocating: the sum of every tensor's bytes bounds the plan, and the
    // element count bounds the time (quantizing inputs is slow under instrumentation).
    let sum = |f: &dyn Fn(&ggweb::tensor::Tensor) -> usize| {
        ctx.ids()
            .map(|id| f(ctx.tensor(id)) as u64)
            .try_fold(0u64, |s, n| s.checked_add(n))
    };
    if sum(&|t| t.nbytes()).is_none_or(|t| t > MAX_BYTES)
        || sum(&|t| t.nelements()).is_none_or(|n| n > MAX_ELEMENTS)
    {
        return;
    }
    // Work is output elements × window: a pool window of 2^32 elements is a legitimately long
    // computation, not a hang; keep the cases fast enough to fuzz.
    // Likewise fused attention over 2^16 queries × 2^16 keys (2^32 dot products: legitimate
    // work, minutes under instrumentation).
    let heavy = g.nodes.iter().any(|&n| {
        let t = ctx.tensor(n);
        let rows = |s: Option<TensorId>| s.map_or(0, |s| ctx.tensor(s).nrows());
        match t.op {
            Op::Pool2d { k0, k1, .. } => k0.saturating_mul(k1) > 1 << 12,
            Op::FlashAttnExt { .. } => rows(t.src[0]).saturating_mul(rows(t.src[1])) > 1 << 24,
            _ => false,
        }
    });
    if heavy {
        return;
    }
    let mut ga = GraphAllocator::new(cpu_buffer_type());
    if ga.alloc_graph(&mut ctx, &g).is_err() {
        return;
    }
    check_graph_allocation(&ctx, &g).expect("allocator placement");
    // Inputs: deterministic values (indices small so some get_rows are in range). Quantized
    // leaves get raw bytes (any f16 scale, NaN and inf included, as a hostile GGUF's weights
    // can have): quantizing f32 data was 60 % of this target's time.
    for &t in &pool {
        let tt = ctx.tensor(t);
        if !tt.is_input() {
            continue;
        }
        let n = tt.nelements();
        let _ = match tt.dtype {
            DType::I32 => ctx.set_i32(t, &(0..n).map(|i| (i % 5) as i32 - 1).collect::<Vec<_>>()),
            d if d.is_quantized() => ctx.set_bytes(
                t,
                &(0..tt.nbytes())
                    .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8)
                    .collect::<Vec<_>>(),
            ),
            _ => ctx.set_f32(
                t,
                &(0..n)
                    .map(|i| ((i * 13 % 17) as f32 - 8.0) / 4.0)
                    .collect::<Vec<_>>(),
            ),
        };
    }
    if let Some(lg) = g.loss_grad() {
        let _ = ctx.set_f32(lg, &[1.0]);
    }
    let nth = 1 + (data.len() & 1);
    let _ = CpuBackend::with_threads_forced(nth).compute(&ctx, &g);
});
