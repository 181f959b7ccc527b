//! The graph allocator through the public API: real computation on the CPU backend with reused
//! memory, replay across steps, and the safety checker on graphs built from public ops.

use ggweb::alloc::{self, check_graph_allocation, GraphAllocator};
use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::{Context, DType, Graph, TensorId};

/// A small MLP-shaped graph of adds: x + w0 branches, merges, chains; returns (x, output).
fn build(ctx: &mut Context, n: usize, w: &[TensorId]) -> (TensorId, TensorId) {
    let x = ctx.new_tensor_2d(DType::F32, n, 3).unwrap();
    ctx.set_input(x);
    let mut h = ctx.add(x, w[0]).unwrap(); // broadcast a row
    for i in 0..12 {
        let a = ctx.add(h, w[i % 2]).unwrap();
        let b = ctx.add(a, a).unwrap();
        let t = ctx.transpose(b).unwrap();
        let tt = ctx.transpose(t).unwrap();
        h = ctx.add(tt, h).unwrap();
    }
    let out = ctx.add(h, x).unwrap();
    ctx.set_output(out);
    (x, out)
}

fn expected(x: &[f32], n: usize, w: &[Vec<f32>]) -> Vec<f32> {
    let row = |v: &[f32], i: usize| v[i % n];
    let mut h: Vec<f32> = (0..x.len()).map(|i| x[i] + row(&w[0], i)).collect();
    for k in 0..12 {
        h = (0..h.len())
            .map(|i| {
                let a = h[i] + row(&w[k % 2], i);
                (a + a) + h[i]
            })
            .collect();
    }
    h.iter().zip(x).map(|(h, x)| h + x).collect()
}

#[test]
fn computes_add_chains_with_reused_memory_and_replays() {
    let n = 37;
    let mut ctx = Context::new();
    let w: Vec<TensorId> = (0..2)
        .map(|_| ctx.new_tensor_1d(DType::F32, n).unwrap())
        .collect();
    alloc::alloc_tensors(&mut ctx, &w, &cpu_buffer_type()).unwrap();
    let wv: Vec<Vec<f32>> = (0..2)
        .map(|k| {
            (0..n)
                .map(|i| ((i * 7 + k * 3) % 11) as f32 * 0.25 - 1.0)
                .collect()
        })
        .collect();
    for (t, v) in w.iter().zip(&wv) {
        ctx.set_f32(*t, v).unwrap();
    }
    let mark = ctx.mark();
    let mut ga = GraphAllocator::new(cpu_buffer_type());
    let mut backend = CpuBackend::new(2);
    for step in 0..3 {
        ctx.reset_to(mark);
        let (x, out) = build(&mut ctx, n, &w);
        let g = Graph::build(&ctx, &[out]);
        ga.alloc_graph(&mut ctx, &g).unwrap();
        assert_eq!(ga.last_was_replay(), step > 0);
        check_graph_allocation(&ctx, &g).unwrap();
        let xv: Vec<f32> = (0..3 * n)
            .map(|i| ((i * 13 + step * 5) % 17) as f32 * 0.125 - 1.0)
            .collect();
        ctx.set_f32(x, &xv).unwrap();
        backend.compute(&ctx, &g).unwrap();
        let got = ctx.get_f32(out).unwrap();
        let want = expected(&xv, n, &wv);
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - e).abs() <= 1e-5 * e.abs().max(1.0),
                "step {step} [{i}]: {g} vs {e}"
            );
        }
        // Every intermediate is 3n f32; the input and output are pinned.
        let computed = g
            .nodes
            .iter()
            .filter(|&&t| !ctx.tensor(t).op.is_view())
            .count();
        let all = computed * 448;
        assert!(
            ga.peak() <= 4 * 512,
            "peak {} (all tensors {all})",
            ga.peak()
        );
        if step == 0 {
            println!(
                "{computed} computed nodes, sum of their sizes {all}, peak {}",
                ga.peak()
            );
        }
    }
}

#[test]
fn public_op_graphs_are_placed_safely() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for round in 0..300 {
        let mut ctx = Context::new();
        let mut pool = Vec::new();
        for _ in 0..1 + next(3) {
            let t = ctx
                .new_tensor_3d(DType::F32, 1 + next(9), 1 + next(4), 1 + next(2))
                .unwrap();
            if next(3) == 0 {
                ctx.set_input(t);
            }
            pool.push(t);
        }
        for _ in 0..next(30) {
            let a = pool[next(pool.len())];
            let b = pool[next(pool.len())];
            let r = match next(6) {
                0 | 1 => ctx.add(a, b).or_else(|_| ctx.add(a, a)),
                2 => ctx.cont(a),
                3 => ctx.transpose(a),
                4 => {
                    let ne = ctx.tensor(a).nelements();
                    ctx.reshape(a, &[ne])
                }
                _ => ctx.cpy(a, b),
            };
            if let Ok(r) = r {
                if next(10) == 0 {
                    ctx.set_output(r);
                }
                pool.push(r);
            }
        }
        let g = Graph::build(&ctx, &[*pool.last().unwrap()]);
        let mut ga = GraphAllocator::new(cpu_buffer_type());
        ga.alloc_graph(&mut ctx, &g).unwrap();
        if let Err(e) = check_graph_allocation(&ctx, &g) {
            panic!("round {round}: {e}");
        }
    }
}
