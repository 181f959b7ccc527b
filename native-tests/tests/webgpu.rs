//! The WebGPU backend against the CPU backend (test-backend-ops style): the op cases of the
//! shared table `ggweb-testing` (also run in Chromium by wasm-tests/tests/webgpu.rs) on the f16
//! path (when the adapter has `shader-f16`) and the f32 path, plus native-only checks (supports_op,
//! MNIST, the scheduler). Errors are normalized MSE as ggml's test-backend-ops: 1e-7 for f32 ops,
//! 5e-4 for quantized mul_mat. Without any adapter the tests print "no adapter" and pass
//! (scripts/setup-gpu.sh installs lavapipe so CI always has one).

use std::sync::{Arc, OnceLock};

use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
use ggweb::backend::webgpu::block_on;
use ggweb::backend::webgpu::{WebGpuDevice, WebGpuOptions};
use ggweb::backend::{Backend, Device};
use ggweb::tensor::PoolOp;
use ggweb::{Context, DType, Graph, Result, TensorId};
use ggweb_testing::{
    check_group, check_split_notes, check_supports_op, mm_tol, nmse, Group, Rng, F32_TOL,
    SMALL_BINDING,
};

/// The devices under test: the default (f16 path when available) and one forced onto f32.
fn devices() -> &'static [(String, Arc<WebGpuDevice>)] {
    static DEVS: OnceLock<Vec<(String, Arc<WebGpuDevice>)>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let mut v = Vec::new();
        // GGWEB_WEBGPU_ADAPTER picks the adapter, GGWEB_WEBGPU_F32=1 forces the f32 path.
        match WebGpuDevice::new_blocking(&WebGpuOptions::from_env()) {
            Ok(d) => {
                eprintln!("WebGPU adapter: {}", d.adapter());
                if d.uses_f16() {
                    let rows = d.matvec_rows();
                    v.push(("f16 path".to_string(), d));
                    // The f32 path also takes the other n = 1 mul_mat kernel than the default
                    // chosen for this adapter, so both are tested.
                    let opts = WebGpuOptions {
                        force_f32: true,
                        matvec_rows: Some(!rows),
                        ..WebGpuOptions::from_env()
                    };
                    if let Ok(d32) = WebGpuDevice::new_blocking(&opts) {
                        v.push(("f32 path".to_string(), d32));
                    }
                } else {
                    v.push(("f32 path".to_string(), d));
                }
            }
            Err(e) => eprintln!("no adapter: skipping WebGPU tests ({e})"),
        }
        v
    })
}

/// Devices that ask for a 64 KiB `max_storage_buffer_binding_size`, so tensors of a few hundred
/// KiB are split over several bindings (f16 and f32 paths, both n = 1 kernels).
fn small_binding_devices() -> &'static [(String, Arc<WebGpuDevice>)] {
    static DEVS: OnceLock<Vec<(String, Arc<WebGpuDevice>)>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let mut v = Vec::new();
        for (force_f32, rows) in [(false, None), (true, Some(false))] {
            let opts = WebGpuOptions {
                force_f32,
                matvec_rows: rows,
                max_storage_binding: Some(SMALL_BINDING),
                ..WebGpuOptions::from_env()
            };
            match WebGpuDevice::new_blocking(&opts) {
                Ok(d) => {
                    assert_eq!(
                        d.adapter().max_storage_buffer_binding_size,
                        SMALL_BINDING,
                        "the device did not take the smaller binding limit"
                    );
                    let path = if d.uses_f16() { "f16" } else { "f32" };
                    v.push((format!("{path} path, 64 KiB bindings"), d));
                }
                Err(e) => eprintln!("no adapter: skipping WebGPU tests ({e})"),
            }
        }
        v
    })
}

/// Run one group of the shared case table (ggweb-testing) on the CPU and every device.
fn run_group(group: Group) {
    let devs = if group == Group::Split {
        small_binding_devices()
    } else {
        devices()
    };
    if devs.is_empty() {
        eprintln!("no adapter: {group:?} skipped");
        return;
    }
    match block_on(check_group(devs, group, 2)) {
        Ok(n) => eprintln!("{group:?}: {n} comparisons passed"),
        Err(e) => panic!("{group:?}:\n{e}"),
    }
}

#[test]
fn binary_ops_broadcast_and_strided() {
    run_group(Group::Binary);
}

#[test]
fn unary_scale_and_repeat() {
    run_group(Group::Unary);
}

#[test]
fn cpy_cont_types_and_concat() {
    run_group(Group::CpyConcat);
}

#[test]
fn norms_softmax_reductions() {
    run_group(Group::NormSoftmax);
}

#[test]
fn rope_normal_and_neox() {
    run_group(Group::Rope);
}

#[test]
fn get_rows_every_weight_type() {
    run_group(Group::GetRows);
}

#[test]
fn mul_mat_every_weight_type() {
    run_group(Group::MulMat);
}

#[test]
fn training_ops() {
    run_group(Group::Train);
}

#[test]
fn im2col_conv_pool() {
    run_group(Group::ConvPool);
}

/// Weights over the binding limit (64 KiB here) split by rows, outputs/inputs split by columns
/// (tokens), over several bindings and dispatches; and the notes that say so.
#[test]
fn large_tensors_split_over_bindings() {
    run_group(Group::Split);
    for (path, dev) in small_binding_devices() {
        check_split_notes(dev).unwrap_or_else(|e| panic!("[{path}] {e}"));
    }
}

#[test]
fn supports_op_is_exact() {
    let devs = devices();
    if devs.is_empty() {
        eprintln!("no adapter");
        return;
    }
    for (path, dev) in devs {
        check_supports_op(dev).unwrap_or_else(|e| panic!("[{path}] {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// MNIST: the two ggml example models from crate/assets on WebGPU vs the CPU.

fn assets() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crate/assets")
}

/// The t10k images (pixel / 255) and labels.
fn t10k() -> Option<(Vec<f32>, Vec<u8>)> {
    use ggweb::models::mnist::idx;
    let img = std::fs::read(assets().join("t10k-images-idx3-ubyte.gz")).ok()?;
    let lab = std::fs::read(assets().join("t10k-labels-idx1-ubyte.gz")).ok()?;
    let (_, images) = idx::parse_images(&idx::maybe_gunzip(&img).ok()?).ok()?;
    let labels = idx::parse_labels(&idx::maybe_gunzip(&lab).ok()?).ok()?;
    Some((images, labels))
}

/// (images, logits, weights with their bytes).
type MnistGraph = (TensorId, TensorId, Vec<(TensorId, Vec<u8>)>);

/// Build the fc or cnn graph of ggml's mnist example for `n` images; returns (images, logits).
fn mnist_graph(
    ctx: &mut Context,
    file: &ggweb::gguf::GgufFile,
    cnn: bool,
    n: usize,
) -> Result<MnistGraph> {
    let mut weights = Vec::new();
    let mut w = |ctx: &mut Context, name: &str| -> Result<TensorId> {
        let info = file.tensor(name).expect("tensor in the model");
        let ne: Vec<usize> = info.ne.iter().map(|&x| x as usize).collect();
        let id = ctx.new_tensor(DType::F32, &ne)?;
        weights.push((id, file.tensor_data(name)?.to_vec()));
        Ok(id)
    };
    let images = ctx.new_tensor(DType::F32, &[784, n])?;
    let logits = if !cnn {
        let (w1, b1, w2, b2) = (
            w(ctx, "fc1.weight")?,
            w(ctx, "fc1.bias")?,
            w(ctx, "fc2.weight")?,
            w(ctx, "fc2.bias")?,
        );
        let h = ctx.mul_mat(w1, images)?;
        let h = ctx.add(h, b1)?;
        let h = ctx.relu(h)?;
        let o = ctx.mul_mat(w2, h)?;
        ctx.add(o, b2)?
    } else {
        let (k1, b1, k2, b2, wd, bd) = (
            w(ctx, "conv1.kernel")?,
            w(ctx, "conv1.bias")?,
            w(ctx, "conv2.kernel")?,
            w(ctx, "conv2.bias")?,
            w(ctx, "dense.weight")?,
            w(ctx, "dense.bias")?,
        );
        let x = ctx.reshape(images, &[28, 28, 1, n])?;
        let c1 = ctx.conv_2d(k1, x, 1, 1, 1, 1, 1, 1)?;
        let c1 = ctx.add(c1, b1)?;
        let c1 = ctx.relu(c1)?;
        let p1 = ctx.pool_2d(c1, PoolOp::Max, 2, 2, 2, 2, 0, 0)?;
        let c2 = ctx.conv_2d(k2, p1, 1, 1, 1, 1, 1, 1)?;
        let c2 = ctx.add(c2, b2)?;
        let c2 = ctx.relu(c2)?;
        let p2 = ctx.pool_2d(c2, PoolOp::Max, 2, 2, 2, 2, 0, 0)?;
        let d = ctx.permute(p2, [1, 2, 0, 3])?;
        let d = ctx.cont(d)?;
        let d = ctx.reshape(d, &[7 * 7 * 16, n])?;
        let o = ctx.mul_mat(wd, d)?;
        ctx.add(o, bd)?
    };
    Ok((images, logits, weights))
}

fn mnist_accuracy(
    cnn: bool,
    dev: Option<&Arc<WebGpuDevice>>,
    images: &[f32],
    labels: &[u8],
) -> (f64, Vec<f32>) {
    let name = if cnn {
        "mnist-cnn-f32.gguf"
    } else {
        "mnist-fc-f32.gguf"
    };
    let file = ggweb::gguf::GgufFile::open(assets().join(name)).expect("model");
    let batch = 1000;
    let mut ctx = Context::new();
    let (img, logits, weights) = mnist_graph(&mut ctx, &file, cnn, batch).expect("graph");
    let graph = Graph::build(&ctx, &[logits]);
    let buft = match dev {
        Some(d) => d.buffer_type(),
        None => cpu_buffer_type(),
    };
    let _buf = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &buft).expect("alloc");
    for (id, bytes) in &weights {
        ctx.set_bytes(*id, bytes).expect("weights");
    }
    let mut be: Box<dyn Backend> = match dev {
        Some(d) => d.init_backend().expect("backend"),
        None => Box::new(CpuBackend::new(2)),
    };
    let mut correct = 0usize;
    let mut all = Vec::new();
    let n = labels.len();
    for start in (0..n).step_by(batch) {
        ctx.set_f32(img, &images[start * 784..(start + batch) * 784])
            .expect("images");
        be.graph_compute(&ctx, &graph).expect("compute");
        let out = ctx.get_f32(logits).expect("logits");
        for (i, row) in out.chunks(10).enumerate() {
            let pred = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (j, &v)| if v > b.1 { (j, v) } else { b },
                )
                .0;
            correct += (pred == labels[start + i] as usize) as usize;
        }
        all.extend(out);
    }
    (100.0 * correct as f64 / n as f64, all)
}

/// The first 1,000 t10k images (one batch) through both models on every path: the same predictions as the
/// CPU (so the same accuracy) and logits within F32_TOL. The whole set with ggml's accuracies:
/// `long_mnist_fc_and_cnn_match_cpu_on_t10k`.
#[test]
fn mnist_fc_and_cnn_match_cpu() {
    mnist_matches_cpu(1000, None);
}

#[test]
#[ignore = "long: all 10,000 t10k images on lavapipe, minutes; scripts/test.sh --full"]
fn long_mnist_fc_and_cnn_match_cpu_on_t10k() {
    mnist_matches_cpu(10_000, Some([98.05, 98.12]));
}

/// `n` t10k images through fc and cnn on every device against the CPU; `expect`: the models'
/// accuracies (%) on them.
fn mnist_matches_cpu(n: usize, expect: Option<[f64; 2]>) {
    let devs = devices();
    if devs.is_empty() {
        eprintln!("no adapter");
        return;
    }
    let Some((images, labels)) = t10k() else {
        panic!("the t10k set in crate/assets could not be read");
    };
    let (images, labels) = (&images[..n * 784], &labels[..n]);
    for (m, cnn) in [false, true].into_iter().enumerate() {
        let (acc_cpu, ref_logits) = mnist_accuracy(cnn, None, images, labels);
        for (path, dev) in devs {
            let (acc, logits) = mnist_accuracy(cnn, Some(dev), images, labels);
            eprintln!(
                "MNIST {} [{path}], {n} images: WebGPU {acc:.2} %, CPU {acc_cpu:.2} %",
                if cnn { "cnn" } else { "fc" }
            );
            assert_eq!(acc, acc_cpu, "accuracy differs from the CPU");
            if let Some(e) = expect {
                assert!((acc - e[m]).abs() < 1e-9, "accuracy {acc} != {}", e[m]);
            }
            let e = nmse(&logits, &ref_logits);
            assert!(e < F32_TOL, "logits NMSE {e:.3e}");
        }
    }
}

/// Weights go where the ops reading them run (`Weights::load_placed`): under 64 KiB bindings a
/// 2-D weight over a binding (mul_mat splits it by rows) and a bias go to the device, a 3-D one
/// read by a batched mul_mat (no split) stays in the file bytes for the CPU, as does a tensor
/// nothing reads; the graph then runs with that mul_mat on the CPU and matches the CPU alone.
#[test]
fn weights_placed_where_their_ops_run() {
    use ggweb::backend::webgpu::WebGpuBuffer;
    use ggweb::gguf::{Gguf, GgufWriter};
    use ggweb::models::runner::Runner;
    use ggweb::models::weights::Weights;
    let Some((path, dev)) = small_binding_devices().first() else {
        eprintln!("no adapter");
        return;
    };
    let mut rng = Rng::new(70);
    let mut gw = GgufWriter::new();
    let mut add = |name: &str, ne: &[u64]| {
        let n: u64 = ne.iter().product();
        let v = rng.vec(n as usize, -1.0, 1.0);
        gw.add_tensor(name, DType::F32, ne, bytemuck::cast_slice(&v))
            .unwrap();
    };
    add("w2", &[512, 97]); // 199 KB
    add("b", &[97]);
    add("w3", &[32, 301, 2]); // 77 KB, 3-D
    add("unused", &[8]);
    let mut file = Vec::new();
    gw.write_to(&mut file).unwrap();
    let bytes: Arc<dyn ggweb::backend::cpu::HostBytes> = Arc::new(file);
    let gguf = Gguf::parse(bytes.bytes()).unwrap();
    let graph_of =
        |ctx: &mut Context, w: &Weights| -> Result<(TensorId, TensorId, [TensorId; 2])> {
            let x = ctx.new_tensor(DType::F32, &[512, 3])?;
            let x3 = ctx.new_tensor(DType::F32, &[32, 5, 2])?;
            let y = ctx.mul_mat(w.get("w2")?, x)?;
            let y = ctx.add(y, w.get("b")?)?;
            let z = ctx.mul_mat(w.get("w3")?, x3)?;
            Ok((x, x3, [y, z]))
        };
    type Run = (Vec<f32>, Vec<String>, Vec<String>, Vec<String>);
    let run = |runner: Option<Runner>| -> Run {
        let mut ctx = Context::new();
        let device = runner
            .as_ref()
            .and_then(|r| r.webgpu.clone())
            .map(|d| d as Arc<dyn Device>);
        let w = Weights::load_placed(&mut ctx, &gguf, bytes.clone(), device.as_ref(), |ctx, w| {
            Ok(graph_of(ctx, w)?.2.to_vec())
        })
        .unwrap();
        let on_device: Vec<String> = ["w2", "b", "w3", "unused"]
            .iter()
            .filter(|n| {
                let t = ctx.tensor(w.get(n).unwrap());
                t.data
                    .as_ref()
                    .is_some_and(|d| d.buffer.as_any().is::<WebGpuBuffer>())
            })
            .map(|n| n.to_string())
            .collect();
        let (x, x3, outs) = graph_of(&mut ctx, &w).unwrap();
        let graph = Graph::build(&ctx, &outs);
        let mut rng = Rng::new(71);
        let (xv, x3v) = (rng.vec(512 * 3, -1.0, 1.0), rng.vec(32 * 10, -1.0, 1.0));
        let mut runner = runner
            .unwrap_or_else(|| Runner::new(ggweb::models::runner::BackendChoice::Cpu, 2).unwrap());
        runner.alloc(&mut ctx, &graph).unwrap();
        ctx.set_f32(x, &xv).unwrap();
        ctx.set_f32(x3, &x3v).unwrap();
        runner.compute(&ctx).unwrap();
        let mut out = ctx.get_f32(outs[0]).unwrap();
        out.extend(ctx.get_f32(outs[1]).unwrap());
        let elsewhere = runner.placements(&ctx).elsewhere;
        (out, on_device, w.on_host, elsewhere)
    };
    let (reference, _, _, _) = run(None);
    let (out, on_device, on_host, elsewhere) =
        run(Some(Runner::with_webgpu_device(dev.clone(), 2).unwrap()));
    assert_eq!(on_device, ["w2", "b"], "[{path}] on the device");
    assert_eq!(on_host.len(), 2, "[{path}] {on_host:?}");
    assert!(
        on_host[0].starts_with("w3") && on_host[0].contains("max_storage_buffer_binding_size"),
        "[{path}] {on_host:?}"
    );
    assert!(
        on_host[1].starts_with("unused") && on_host[1].contains("not read"),
        "[{path}] {on_host:?}"
    );
    // Only the batched mul_mat ran on the CPU.
    assert_eq!(elsewhere.len(), 1, "[{path}] {elsewhere:?}");
    assert!(
        elsewhere[0].starts_with("MUL_MAT"),
        "[{path}] {elsewhere:?}"
    );
    let e = nmse(&out, &reference);
    assert!(e < F32_TOL, "[{path}] NMSE {e:.3e}");
}

/// MNIST (`Mnist::with_runner`) under 64 KiB bindings: its weights over a binding (fc1 1.5 MB,
/// dense 31 KB) are placed on the device, since every op reading them runs there (split by
/// rows/columns); those read by ops that stay on the CPU stay in host memory; the logits match
/// the CPU.
#[test]
fn mnist_weights_placed_under_small_bindings() {
    use ggweb::models::mnist::Mnist;
    use ggweb::models::runner::Runner;
    let Some((images, _)) = t10k() else {
        panic!("the t10k set in crate/assets could not be read");
    };
    let images = &images[..200 * 784];
    for (path, dev) in small_binding_devices() {
        for file in ["mnist-fc-f32.gguf", "mnist-cnn-f32.gguf"] {
            let bytes: Arc<dyn ggweb::backend::cpu::HostBytes> =
                Arc::new(std::fs::read(assets().join(file)).unwrap());
            let mut cpu = Mnist::from_bytes(bytes.clone(), 2).unwrap();
            let reference = cpu.logits(images).unwrap();
            let runner = Runner::with_webgpu_device(dev.clone(), 2).unwrap();
            let mut gpu = Mnist::with_runner(bytes, runner).unwrap();
            eprintln!("[{path}] {file}: on the host: {:?}", gpu.weights_on_host());
            // The user sees it in the backend report.
            assert_eq!(
                gpu.backend_report().contains("weights kept on the CPU"),
                !gpu.weights_on_host().is_empty()
            );
            // What stays is read by an op whose activations are over a binding (a bias ADD of
            // [500, 500], a conv's mul_mat whose one output column is 1.5 MB): the CPU runs it.
            // The dense weights, whose mul_mats split, are on the device.
            for w in gpu.weights_on_host() {
                assert!(
                    w.contains("max_storage_buffer_binding_size"),
                    "[{path}] {w}"
                );
                assert!(!w.contains(".weight"), "[{path}] {w}");
            }
            let got = gpu.logits(images).unwrap();
            let e = nmse(&got, &reference);
            assert!(e < F32_TOL, "[{path}] {file}: NMSE {e:.3e}");
        }
    }
}

/// mul_mat GFLOP/s on the default adapter (lavapipe here: a CPU emulation). Run with
/// `cargo test -p ggweb-native-tests --test webgpu bench -- --ignored --nocapture`;
/// `GGWEB_BENCH_SIZES="m,n,k;..."` overrides the shapes.
#[test]
#[ignore]
fn bench_mul_mat_webgpu_table() {
    if devices().is_empty() {
        eprintln!("no adapter");
        return;
    }
    let sizes: Vec<(usize, usize, usize)> = std::env::var("GGWEB_BENCH_SIZES")
        .ok()
        .map(|s| {
            s.split(';')
                .filter_map(|t| {
                    let v: Vec<usize> =
                        t.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                    (v.len() == 3).then(|| (v[0], v[1], v[2]))
                })
                .collect()
        })
        .unwrap_or_else(|| vec![(4096, 1, 4096), (4096, 512, 4096)]);
    if std::env::var("GGWEB_BENCH_CPU").is_ok_and(|v| v == "1") {
        // The CPU backend under the same conditions (a debug-profile test binary: kernels at
        // opt-level 1; `ggweb bench` has the release figures).
        for &(m, n, k) in &sizes {
            for t in [
                DType::F32,
                DType::F16,
                DType::Q4_0,
                DType::Q8_0,
                DType::Q4_K,
            ] {
                let r = ggweb::bench::bench_mul_mat(t, m, n, k, 2, 1.0).expect("cpu bench");
                println!(
                    "cpu [2 threads] mul_mat {t:>5} m={m} n={n} k={k}: {:8.2} GFLOP/s",
                    r.gflops
                );
            }
        }
    }
    for (path, dev) in devices() {
        for &(m, n, k) in &sizes {
            for t in [
                DType::F32,
                DType::F16,
                DType::Q4_0,
                DType::Q8_0,
                DType::Q4_K,
            ] {
                let g =
                    ggweb::backend::webgpu::bench_mul_mat_on(dev, t, m, n, k, 1.0).expect("bench");
                println!(
                    "webgpu [{}; {path}] mul_mat {t:>5} m={m} n={n} k={k}: {g:8.2} GFLOP/s",
                    dev.adapter().name
                );
            }
        }
    }
}

/// A graph with an op WebGPU does not have (f16 add) runs split across WebGPU and the CPU by the
/// scheduler, weights staying in their WebGPU buffer, and matches the CPU alone.
#[test]
fn scheduler_splits_webgpu_and_cpu() {
    use ggweb::backend::sched::Scheduler;
    let devs = devices();
    if devs.is_empty() {
        eprintln!("no adapter");
        return;
    }
    let build = |ctx: &mut Context| -> Result<(TensorId, TensorId, TensorId)> {
        let w = ctx.new_tensor(DType::Q4_0, &[64, 33])?;
        let x = ctx.new_tensor(DType::F32, &[64, 5])?;
        ctx.set_input(x);
        let y = ctx.mul_mat(w, x)?;
        let h = ctx.cast(y, DType::F16)?;
        let h = ctx.add(h, h)?; // CPU only
        let f = ctx.cast(h, DType::F32)?;
        let out = ctx.soft_max_ext(f, None, 0.3, 0.0)?;
        ctx.set_output(out);
        Ok((w, x, out))
    };
    let mut rng = Rng::new(21);
    let wv = rng.vec(64 * 33, -1.0, 1.0);
    let xv = rng.vec(64 * 5, -1.0, 1.0);
    // CPU alone.
    let mut ctx = Context::new();
    let (w, x, out) = build(&mut ctx).unwrap();
    let graph = Graph::build(&ctx, &[out]);
    let _b = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    ctx.set_f32(w, &wv).unwrap();
    ctx.set_f32(x, &xv).unwrap();
    CpuBackend::new(2).graph_compute(&ctx, &graph).unwrap();
    let reference = ctx.get_f32(out).unwrap();
    for (path, dev) in devs {
        let mut ctx = Context::new();
        let (w, x, out) = build(&mut ctx).unwrap();
        // The weight lives in a WebGPU buffer.
        let wb = ggweb::alloc::alloc_tensors(&mut ctx, &[w], &dev.buffer_type())
            .unwrap()
            .unwrap();
        wb.set_usage(ggweb::backend::BufferUsage::Weights);
        ctx.set_f32(w, &wv).unwrap();
        let graph = Graph::build(&ctx, &[out]);
        let mut sched = Scheduler::new(vec![
            dev.init_backend().unwrap(),
            Box::new(CpuBackend::new(2)),
        ])
        .unwrap();
        sched.plan(&mut ctx, &graph).unwrap();
        ctx.set_f32(x, &xv).unwrap();
        sched.compute_planned(&ctx).unwrap();
        let got = ctx.get_f32(out).unwrap();
        let used: std::collections::BTreeSet<usize> =
            sched.splits.iter().map(|s| s.backend).collect();
        assert!(
            used.contains(&0) && used.contains(&1),
            "[{path}] expected a split, got {used:?}"
        );
        let e = nmse(&got, &reference);
        // q4_0 mul_mat: the CPU rounds activations to q8_0, WebGPU keeps them f32.
        assert!(e < mm_tol(DType::Q4_0), "[{path}] split graph NMSE {e:.3e}");
    }
}
