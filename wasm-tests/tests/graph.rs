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

/// Fused attention over an f16 KV cache (the LLMs' path, SIMD128 kernels in the simd builds)
/// against plain f64 softmax attention: grouped heads (3 query heads per kv head), odd head
/// sizes, a causal mask with a fully masked row, a generated token over a cache long enough to
/// split into kv chunks on 2 threads.
#[wasm_bindgen_test]
fn flash_attn_ext_f16_vs_reference() {
    // (dk, dv, n_kv, n_tokens, n_head, n_head_kv)
    for (dk, dv, n_kv, n_tok, n_head, n_head_kv) in [
        (64, 64, 200, 1, 9, 3),
        (20, 12, 37, 3, 6, 2),
        (9, 7, 70, 2, 2, 2),
        (67, 33, 5, 4, 8, 1),
    ] {
        for threads in [1usize, 2] {
            let mut rng = Rng::new((dk * 1000 + n_kv * 10 + threads) as u64);
            // q exact in f16: the kernel rounds q to f16 (as llama.cpp does for an f16 cache).
            let qv: Vec<f32> = rng
                .vec(dk * n_tok * n_head, -1.0, 1.0)
                .into_iter()
                .map(|x| half::f16::from_f32(x).to_f32())
                .collect();
            let kv = rng.vec(dk * n_kv * n_head_kv, -1.0, 1.0);
            let vv = rng.vec(dv * n_kv * n_head_kv, -2.0, 2.0);
            let mv: Vec<f32> = (0..n_kv * n_tok)
                .map(|i| {
                    let (j, t) = (i % n_kv, i / n_kv);
                    let masked = j > n_kv - n_tok + t || (n_tok > 1 && t == n_tok - 1);
                    if masked {
                        f32::NEG_INFINITY
                    } else {
                        -0.5 * (j % 3) as f32
                    }
                })
                .collect();
            let mut ctx = Context::new();
            let q = ctx.new_tensor_4d(DType::F32, [dk, n_tok, n_head, 1]).unwrap();
            let k = ctx.new_tensor_4d(DType::F16, [dk, n_kv, n_head_kv, 1]).unwrap();
            let v = ctx.new_tensor_4d(DType::F16, [dv, n_kv, n_head_kv, 1]).unwrap();
            let m = ctx.new_tensor_2d(DType::F32, n_kv, n_tok).unwrap();
            let scale = 1.0 / (dk as f32).sqrt();
            let out = ctx.flash_attn_ext(q, k, v, Some(m), scale, 0.0, 0.0).unwrap();
            ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
            ctx.set_f32(q, &qv).unwrap();
            ctx.set_f32(k, &kv).unwrap();
            ctx.set_f32(v, &vv).unwrap();
            ctx.set_f32(m, &mv).unwrap();
            let g = Graph::build(&ctx, &[out]);
            CpuBackend::new(threads).compute(&ctx, &g).unwrap();
            let got = ctx.get_f32(out).unwrap();
            // f16-rounded K and V, as stored.
            let r16 = |x: f32| half::f16::from_f32(x).to_f64();
            for t in 0..n_tok {
                for h in 0..n_head {
                    let hk = h / (n_head / n_head_kv);
                    let s: Vec<f64> = (0..n_kv)
                        .map(|j| {
                            let mk = mv[t * n_kv + j] as f64;
                            let dot: f64 = (0..dk)
                                .map(|i| {
                                    qv[(h * n_tok + t) * dk + i] as f64
                                        * r16(kv[(hk * n_kv + j) * dk + i])
                                })
                                .sum();
                            dot * scale as f64 + mk
                        })
                        .collect();
                    let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = s.iter().map(|&x| (x - mx).exp()).collect();
                    let sum: f64 = w.iter().sum();
                    for c in 0..dv {
                        let want = if mx == f64::NEG_INFINITY {
                            0.0
                        } else {
                            (0..n_kv)
                                .map(|j| w[j] * r16(vv[(hk * n_kv + j) * dv + c]))
                                .sum::<f64>()
                                / sum
                        };
                        // dst [dv, n_head, n_tokens]
                        let o = got[(t * n_head + h) * dv + c] as f64;
                        assert!(
                            (o - want).abs() <= 2e-5 + 2e-4 * want.abs(),
                            "dk {dk} kv {n_kv} tok {t} head {h} col {c} threads {threads}: {o} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// Who runs a layer's GEMVs at 2 threads (`CpuBackend::plan_report`), as natively
/// (native-tests ops_matmul.rs): SmolLM2's 576×192 q4_1 K and V products (69 KB) one thread each
/// where the build has a quantized GEMV kernel, its 576×576 Q product (207 KB) split. The whole
/// weight decides: a thread's first share (here three quarters of the rows, the rest a dynamic
/// tail) had put the Q and O products on one thread while the other waited, twice a layer.
#[wasm_bindgen_test]
fn gemv_plan_small_weights_owned_larger_split() {
    let (ctx, g) = ggweb_testing::smollm2_qkv_gemvs();
    let plan = CpuBackend::with_threads_forced(2)
        .plan_report(&ctx, &g)
        .unwrap();
    let owned = if ggweb::backend::cpu::ops::simd_name() == "scalar" {
        ["MUL_MAT all", "MUL_MAT all"]
    } else {
        ["MUL_MAT owner 1", "MUL_MAT owner 0"]
    };
    assert_eq!(plan, [owned[0], owned[1], "MUL_MAT all"]);
}

/// Each thread's first share of a GEMV in wasm (`matmul::first_read`: the rows before the
/// dynamic tail of 64-row chunks, here 7 of 9): even in groups of four rows, 224 + 224 of 576,
/// then the tail's two chunks one each. Shares cut by chunks, 256 + 192, left thread 0 a
/// chunk more after every 576-row product (SmolLM2's Q, O and down) while thread 1 waited.
#[wasm_bindgen_test]
fn gemv_shares_even_before_the_dynamic_tail() {
    use ggweb::backend::cpu::{ops::matmul::first_read, resolve_node};
    let mut ctx = Context::new();
    let x = ctx.new_tensor_1d(DType::F32, 576).unwrap();
    let w = ctx.new_tensor_2d(DType::Q4_1, 576, 576).unwrap();
    let y = ctx.mul_mat(w, x).unwrap();
    ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    let node = resolve_node(&ctx, y).unwrap();
    if ggweb::backend::cpu::ops::simd_name() == "scalar" {
        return;
    }
    let row = DType::Q4_1.row_size(576).unwrap();
    let share = |ith| first_read(&node, ith, 2).map(|(p, len)| (p as usize, len / row));
    let (a, b) = (share(0).unwrap(), share(1).unwrap());
    assert_eq!((a.1, b.1), (224, 224), "rows of each thread's first share");
    assert_eq!(b.0 - a.0, 224 * row, "thread 1's share follows thread 0's");
    // One thread: the whole fixed part (7 chunks), the tail after it.
    assert_eq!(first_read(&node, 0, 1).map(|(_, len)| len / row), Some(448));
}
