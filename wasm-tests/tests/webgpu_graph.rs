//! The JS graph API's engine (`GraphCore`) on WebGPU in the browser (headless Chromium's
//! SwiftShader adapter: the f32 path) against the same graphs on the CPU: ops on seeded random
//! data of odd sizes, a recompute of one graph with new inputs (the scheduler's copies must not
//! leak into the user's graph), and a graph with an op WebGPU lacks, which splits and says why.
//! Tolerance: normalized MSE (ggml's test-backend-ops measure) 1e-7 for f32 ops, 5e-4 where a
//! q8_0 operand is involved.
//!
//! Built only with `--features webgpu` (scripts/test-web.sh); browser only.
#![cfg(target_arch = "wasm32")]

use ggweb_testing::{nmse, Rng};
use ggweb_wasm::{GraphCore, JsError};
use js_sys::{Float32Array, Int32Array, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn ok<T>(r: Result<T, JsError>) -> T {
    r.map_err(JsValue::from).expect("GraphCore call")
}

async fn init() {
    ggweb::backend::webgpu::init_default_device()
        .await
        .expect("a WebGPU adapter (Chromium with --enable-unsafe-webgpu)");
}

async fn compute(g: &GraphCore, outs: &[u32]) {
    JsFuture::from(g.compute_async(outs.to_vec()))
        .await
        .expect("computeAsync");
}

async fn read(g: &GraphCore, id: u32) -> Vec<f32> {
    let v = JsFuture::from(g.read_f32_async(id))
        .await
        .expect("readF32Async");
    Float32Array::from(v).to_vec()
}

async fn read_i32(g: &GraphCore, id: u32) -> Vec<i32> {
    let v = JsFuture::from(g.read_i32_async(id))
        .await
        .expect("readI32Async");
    Int32Array::from(v).to_vec()
}

fn tensor(g: &mut GraphCore, shape: &[u32], data: &[f32]) -> u32 {
    let t = ok(g.tensor("f32", shape));
    ok(g.set_f32(t, data));
    t
}

/// `{nodes, elsewhere}` of the last compute.
fn placements(g: &GraphCore) -> (Vec<(String, u32)>, Vec<String>) {
    let p = ok(g.placements());
    assert!(p.is_object(), "placements after a WebGPU compute");
    let nodes = Reflect::get(&p, &"nodes".into()).unwrap();
    let counts = Object::entries(nodes.unchecked_ref())
        .iter()
        .map(|e| {
            let e = js_sys::Array::from(&e);
            (
                e.get(0).as_string().unwrap(),
                e.get(1).as_f64().unwrap() as u32,
            )
        })
        .collect();
    let elsewhere = js_sys::Array::from(&Reflect::get(&p, &"elsewhere".into()).unwrap())
        .iter()
        .map(|s| s.as_string().unwrap())
        .collect();
    (counts, elsewhere)
}

/// Builds one case on a graph: returns the outputs to compare (f32 reads; argmax as i32).
type Case = fn(&mut GraphCore, &mut Rng) -> Vec<u32>;

fn op(g: &mut GraphCore, name: &str, srcs: &[u32], p: &[f64]) -> u32 {
    ok(g.op(name, srcs, p))
}

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("add/mul/sub/div broadcast", |g, r| {
            let a = tensor(g, &[37, 5, 3], &r.vec(37 * 15, -2.0, 2.0));
            let b = tensor(g, &[37, 1, 3], &r.vec(37 * 3, 0.5, 2.0));
            let s = op(g, "add", &[a, b], &[]);
            let m = op(g, "mul", &[s, b], &[]);
            let d = op(g, "div", &[m, b], &[]);
            vec![op(g, "sub", &[d, a], &[]), m]
        }),
        ("unary + scale", |g, r| {
            let a = tensor(g, &[53, 7], &r.vec(53 * 7, -3.0, 3.0));
            let mut outs = vec![];
            for u in [
                "relu", "gelu", "silu", "tanh", "sigmoid", "neg", "abs", "sqr",
            ] {
                outs.push(op(g, u, &[a], &[]));
            }
            let e = op(g, "scale", &[a], &[0.5, -0.25]);
            outs.push(op(g, "exp", &[e], &[]));
            let p = op(g, "abs", &[a], &[]);
            let p = op(g, "scale", &[p], &[1.0, 0.1]);
            outs.push(op(g, "sqrt", &[p], &[]));
            outs.push(op(g, "log", &[p], &[]));
            outs
        }),
        ("norms, softmax with mask, reductions", |g, r| {
            let a = tensor(g, &[61, 9], &r.vec(61 * 9, -4.0, 4.0));
            let mask = tensor(g, &[61, 9], &r.vec(61 * 9, -1.0, 0.0));
            vec![
                op(g, "rms_norm", &[a], &[1e-6]),
                op(g, "norm", &[a], &[1e-5]),
                op(g, "soft_max", &[a, mask], &[0.7, 0.0]),
                op(g, "sum_rows", &[a], &[]),
                op(g, "mean", &[a], &[]),
                op(g, "sum", &[a], &[]),
            ]
        }),
        ("mul_mat, get_rows, layout", |g, r| {
            let w = tensor(g, &[67, 33], &r.vec(67 * 33, -1.0, 1.0));
            let x = tensor(g, &[67, 5], &r.vec(67 * 5, -1.0, 1.0));
            let y = op(g, "mul_mat", &[w, x], &[]);
            let rows = ok(g.tensor("i32", &[4]));
            ok(g.set_i32(rows, &[3, 0, 32, 7]));
            let gr = op(g, "get_rows", &[w, rows], &[]);
            let t = op(g, "transpose", &[y], &[]);
            let t = op(g, "cont", &[t], &[]);
            let p = op(g, "reshape", &[y], &[11.0, 3.0, 5.0]);
            let p = op(g, "permute", &[p], &[2.0, 0.0, 1.0, 3.0]);
            let p = op(g, "cont", &[p], &[]);
            let c = op(g, "concat", &[y, y], &[1.0]);
            vec![y, gr, t, p, c]
        }),
    ]
}

/// Every case on WebGPU equals the CPU, and nothing fell back to the CPU.
#[wasm_bindgen_test]
async fn graph_ops_on_webgpu_match_cpu() {
    init().await;
    for (name, build) in cases() {
        let mut cpu = ok(GraphCore::create(Some("cpu".into())));
        let mut gpu = ok(GraphCore::create(Some("webgpu".into())));
        assert!(ok(gpu.uses_gpu()) && !ok(cpu.uses_gpu()));
        let oc = build(&mut cpu, &mut Rng::new(7));
        let og = build(&mut gpu, &mut Rng::new(7));
        ok(cpu.compute(&oc));
        // The blocking entry points refuse on WebGPU (a typed error, not a trap).
        assert!(gpu.compute(&og).is_err(), "[{name}] sync compute on WebGPU");
        compute(&gpu, &og).await;
        for (&c, &g) in oc.iter().zip(&og) {
            let want = ok(cpu.read_f32_js(c)).to_vec();
            let got = read(&gpu, g).await;
            let e = nmse(&got, &want);
            assert!(e < 1e-7, "[{name}] output {g}: NMSE {e:.3e}");
        }
        let (nodes, elsewhere) = placements(&gpu);
        assert!(
            elsewhere.is_empty(),
            "[{name}] ran on the CPU: {elsewhere:?}"
        );
        assert!(nodes.iter().any(|(b, n)| b != "CPU" && *n > 0), "{nodes:?}");
    }
    // argmax (i32 result).
    let mut r = Rng::new(3);
    let data = r.vec(29 * 6, -5.0, 5.0);
    let mut gpu = ok(GraphCore::create(Some("webgpu".into())));
    let a = tensor(&mut gpu, &[29, 6], &data);
    let am = op(&mut gpu, "argmax", &[a], &[]);
    compute(&gpu, &[am]).await;
    let got = read_i32(&gpu, am).await;
    let want: Vec<i32> = data
        .chunks(29)
        .map(|row| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            best as i32
        })
        .collect();
    assert_eq!(got, want, "argmax");
}

/// The same graph computed again after new inputs gives the new answer: the scheduler's
/// copies of the host inputs are made on a clone, not written into the user's graph (with the
/// in-place rewrite the second compute would read the first compute's copies). Results of an
/// earlier compute that the next one does not touch stay readable.
#[wasm_bindgen_test]
async fn recompute_with_new_inputs() {
    init().await;
    let mut r = Rng::new(11);
    let (k, m, n) = (45, 19, 3);
    let build = |g: &mut GraphCore| {
        let w = ok(g.tensor("f32", &[k, m]));
        let x = ok(g.tensor("f32", &[k, n]));
        let b = ok(g.tensor("f32", &[m, 1]));
        let y = op(g, "mul_mat", &[w, x], &[]);
        let y = op(g, "add", &[y, b], &[]);
        let y = op(g, "silu", &[y], &[]);
        (w, x, b, y)
    };
    let mut gpu = ok(GraphCore::create(Some("webgpu".into())));
    let (w, x, b, y) = build(&mut gpu);
    let z = op(&mut gpu, "sqr", &[x], &[]);
    let mut cpu = GraphCore::new();
    let (cw, cx, cb, cy) = build(&mut cpu);
    let wv = r.vec((k * m) as usize, -1.0, 1.0);
    ok(gpu.set_f32(w, &wv));
    ok(cpu.set_f32(cw, &wv));
    let mut first: Option<Vec<f32>> = None;
    for round in 0..3 {
        let xv = r.vec((k * n) as usize, -1.0, 1.0);
        let bv = r.vec(m as usize, -0.5, 0.5);
        ok(gpu.set_f32(x, &xv));
        ok(gpu.set_f32(b, &bv));
        ok(cpu.set_f32(cx, &xv));
        ok(cpu.set_f32(cb, &bv));
        compute(&gpu, &[y]).await;
        ok(cpu.compute(&[cy]));
        let got = read(&gpu, y).await;
        let want = ok(cpu.read_f32_js(cy)).to_vec();
        let e = nmse(&got, &want);
        assert!(e < 1e-7, "round {round}: NMSE {e:.3e}");
        if let Some(f) = &first {
            assert!(
                nmse(f, &got) > 1e-3,
                "round {round}: the result did not change"
            );
        }
        if round == 1 {
            // Another output: y's results must survive it.
            compute(&gpu, &[z]).await;
            let again = read(&gpu, y).await;
            assert_eq!(again, got, "y after computing z");
            let zv: Vec<f32> = xv.iter().map(|v| v * v).collect();
            assert!(nmse(&read(&gpu, z).await, &zv) < 1e-12, "z");
        }
        first = Some(got);
    }
}

/// An op WebGPU lacks (a cast to q8_0) runs on the CPU inside a WebGPU graph; the placements
/// name it with WebGPU's reason, and the result equals the CPU-only graph.
#[wasm_bindgen_test]
async fn unsupported_op_splits_with_reason() {
    init().await;
    let mut r = Rng::new(5);
    let (k, m, n) = (64u32, 21u32, 3u32);
    let wv = r.vec((k * m) as usize, -1.0, 1.0);
    let xv = r.vec((k * n) as usize, -1.0, 1.0);
    let build = |g: &mut GraphCore| {
        let w = tensor(g, &[k, m], &wv);
        let x = tensor(g, &[k, n], &xv);
        let wq = op(g, "cast", &[w], &[8.0]); // q8_0
        ok(g.set_name(wq, "w_q8"));
        let y = op(g, "mul_mat", &[wq, x], &[]);
        op(g, "relu", &[y], &[])
    };
    let mut cpu = GraphCore::new();
    let oc = build(&mut cpu);
    ok(cpu.compute(&[oc]));
    let want = ok(cpu.read_f32_js(oc)).to_vec();
    let mut gpu = ok(GraphCore::create(Some("webgpu".into())));
    let og = build(&mut gpu);
    compute(&gpu, &[og]).await;
    let got = read(&gpu, og).await;
    let e = nmse(&got, &want);
    assert!(e < 5e-4, "NMSE {e:.3e}");
    let (nodes, elsewhere) = placements(&gpu);
    assert!(
        nodes.iter().filter(|(_, n)| *n > 0).count() == 2,
        "expected nodes on WebGPU and the CPU: {nodes:?}"
    );
    assert!(
        elsewhere
            .iter()
            .any(|s| s.contains("w_q8") && s.contains("WebGPU")),
        "the cast's reason: {elsewhere:?}"
    );
}
