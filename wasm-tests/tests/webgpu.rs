//! The WebGPU backend in the browser (headless Chromium's SwiftShader adapter: no `shader-f16`,
//! so the f32 path) against the CPU backend: the op cases of the shared table `ggweb-testing`
//! (the same as native-tests/tests/webgpu.rs runs), on seeded random data of odd sizes, with
//! results read back through `map_async` (async: nothing blocks the page). Errors are normalized MSE as ggml's test-backend-ops: 1e-7 for f32 ops, 5e-4
//! for quantized / f16 mul_mat. Every test needs an adapter: run with
//! `--enable-unsafe-webgpu` (wasm-tests/webdriver.json); without one they fail.
//!
//! Built only with `--features webgpu` (scripts/test-web.sh); browser only.
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend, HostBytes};
use ggweb::backend::webgpu::{WebGpuDevice, WebGpuOptions};
use ggweb::backend::{Backend, BufferUsage, Device};
use ggweb::models::mnist::{idx, Mnist};
use ggweb::models::runner::BackendChoice;
use ggweb::{Context, DType, Graph, Result, TensorId};
use ggweb_testing::{
    check_group, check_split_notes, check_supports_op, mm_tol, nmse, Group, Rng, F32_TOL,
    SMALL_BINDING,
};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

// The gradient checks of native-tests (finite differences against `Graph::build_backward`, every
// node on WebGPU); the cases that exercise the WebGPU training kernels run here (the others are
// WebGPU forward ops the table above covers), hence the unused ones.
#[allow(dead_code)]
#[path = "../../native-tests/tests/support/grad.rs"]
mod grad_cases;

/// The devices under test: the default one (must exist) and, for the other n = 1 mul_mat kernel,
/// one with `matvec_rows` flipped; both forced onto the f32 path (SwiftShader has no f16 anyway).
async fn devices() -> Vec<(String, Arc<WebGpuDevice>)> {
    let d = ggweb::backend::webgpu::init_default_device()
        .await
        .expect("a WebGPU adapter (Chromium with --enable-unsafe-webgpu)");
    let mut v = vec![];
    let rows = d.matvec_rows();
    if d.uses_f16() {
        // A GPU browser: also test the f32 path.
        let opts = WebGpuOptions {
            force_f32: true,
            matvec_rows: Some(rows),
            ..Default::default()
        };
        v.push((
            "f32 path".into(),
            WebGpuDevice::new(&opts).await.expect("f32 device"),
        ));
    }
    v.push((format!("default (f16 {})", d.uses_f16()), d));
    let opts = WebGpuOptions {
        force_f32: true,
        matvec_rows: Some(!rows),
        ..Default::default()
    };
    v.push((
        format!("f32 path, matvec_rows {}", !rows),
        WebGpuDevice::new(&opts).await.expect("second device"),
    ));
    v
}

/// Run one group of the shared case table (ggweb-testing) on the CPU and every device.
async fn run_group(group: Group) {
    let devs = if group == Group::Split {
        small_binding_devices().await
    } else {
        devices().await
    };
    if let Err(e) = check_group(&devs, group, 1).await {
        panic!("{group:?}:\n{e}");
    }
}

/// Devices that ask for a 64 KiB `max_storage_buffer_binding_size` (f32 path, both n = 1
/// kernels), so tensors of a few hundred KiB are split over several bindings.
async fn small_binding_devices() -> Vec<(String, Arc<WebGpuDevice>)> {
    let mut v = Vec::new();
    for rows in [false, true] {
        let opts = WebGpuOptions {
            force_f32: true,
            matvec_rows: Some(rows),
            max_storage_binding: Some(SMALL_BINDING),
            ..Default::default()
        };
        let d = WebGpuDevice::new(&opts)
            .await
            .expect("small-binding device");
        assert_eq!(d.adapter().max_storage_buffer_binding_size, SMALL_BINDING);
        v.push((format!("f32 path, matvec_rows {rows}, 64 KiB bindings"), d));
    }
    v
}

#[wasm_bindgen_test]
async fn adapter_is_reported() {
    let d = ggweb::backend::webgpu::init_default_device()
        .await
        .expect("adapter");
    let a = d.adapter();
    assert!(!a.name.is_empty());
    assert!(a.max_storage_buffer_binding_size >= 128 << 20);
    // f16 kernels exactly when the adapter has shader-f16.
    assert_eq!(d.uses_f16(), a.shader_f16);
    assert_eq!(a.shader_f16, a.features.iter().any(|f| f == "SHADER_F16"));
    let list = ggweb::backend::webgpu::enumerate_adapters().await;
    assert!(!list.is_empty());
}

#[wasm_bindgen_test]
async fn binary_ops_broadcast_and_strided() {
    run_group(Group::Binary).await;
}

#[wasm_bindgen_test]
async fn unary_scale_and_repeat() {
    run_group(Group::Unary).await;
}

#[wasm_bindgen_test]
async fn cpy_cont_types_and_concat() {
    run_group(Group::CpyConcat).await;
}

#[wasm_bindgen_test]
async fn norms_softmax_reductions() {
    run_group(Group::NormSoftmax).await;
}

#[wasm_bindgen_test]
async fn rope_normal_and_neox() {
    run_group(Group::Rope).await;
}

#[wasm_bindgen_test]
async fn get_rows_every_weight_type() {
    run_group(Group::GetRows).await;
}

#[wasm_bindgen_test]
async fn mul_mat_every_weight_type() {
    run_group(Group::MulMat).await;
}

#[wasm_bindgen_test]
async fn training_ops() {
    run_group(Group::Train).await;
}

/// The gradient checks on the default device (SwiftShader: the f32 path).
async fn grad_device() -> grad_cases::Exec {
    let d = ggweb::backend::webgpu::init_default_device()
        .await
        .expect("a WebGPU adapter (Chromium with --enable-unsafe-webgpu)");
    grad_cases::Exec::WebGpu(d)
}

#[wasm_bindgen_test]
async fn gradients_unary() {
    grad_cases::unary_functions(&grad_device().await).await;
}

#[wasm_bindgen_test]
async fn gradients_repeat_concat_and_views() {
    grad_cases::repeat_concat_and_views(&grad_device().await).await;
}

#[wasm_bindgen_test]
async fn gradients_softmax_norms_and_loss() {
    grad_cases::softmax_norms_and_loss(&grad_device().await).await;
}

#[wasm_bindgen_test]
async fn gradients_rope_and_get_rows() {
    grad_cases::rope_and_get_rows(&grad_device().await).await;
}

#[wasm_bindgen_test]
async fn gradients_conv_and_pool() {
    grad_cases::conv_and_pool(&grad_device().await).await;
}

#[wasm_bindgen_test]
async fn gradients_small_network() {
    grad_cases::a_small_network_end_to_end(&grad_device().await).await;
}

#[wasm_bindgen_test]
async fn im2col_conv_pool() {
    run_group(Group::ConvPool).await;
}

/// Weights split by rows, outputs/inputs by columns under 64 KiB bindings; the notes say so.
#[wasm_bindgen_test]
async fn large_tensors_split_over_bindings() {
    run_group(Group::Split).await;
    for (path, dev) in small_binding_devices().await {
        check_split_notes(&dev).unwrap_or_else(|e| panic!("[{path}] {e}"));
    }
}

#[wasm_bindgen_test]
async fn supports_op_is_exact() {
    for (path, dev) in devices().await {
        check_supports_op(&dev).unwrap_or_else(|e| panic!("[{path}] {e}"));
    }
}

/// A graph with an op WebGPU lacks (f16 add) splits across WebGPU and the CPU; the copies out of
/// WebGPU memory are async (`compute_planned_async`), and the result matches the CPU alone.
#[wasm_bindgen_test]
async fn scheduler_splits_webgpu_and_cpu_async() {
    use ggweb::backend::sched::Scheduler;
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
    let mut ctx = Context::new();
    let (w, x, out) = build(&mut ctx).unwrap();
    let graph = Graph::build(&ctx, &[out]);
    let _b = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
    ctx.set_f32(w, &wv).unwrap();
    ctx.set_f32(x, &xv).unwrap();
    CpuBackend::new(1).graph_compute(&ctx, &graph).unwrap();
    let reference = ctx.get_f32(out).unwrap();
    for (path, dev) in devices().await {
        let mut ctx = Context::new();
        let (w, x, out) = build(&mut ctx).unwrap();
        let wb = ggweb::alloc::alloc_tensors(&mut ctx, &[w], &dev.buffer_type())
            .unwrap()
            .unwrap();
        wb.set_usage(BufferUsage::Weights);
        ctx.set_f32(w, &wv).unwrap();
        let graph = Graph::build(&ctx, &[out]);
        let mut sched = Scheduler::new(vec![
            dev.init_backend().unwrap(),
            Box::new(CpuBackend::new(1)),
        ])
        .unwrap();
        sched.plan(&mut ctx, &graph).unwrap();
        ctx.set_f32(x, &xv).unwrap();
        // The blocking path must refuse (a typed error, not a trap) where a read crosses out of
        // WebGPU memory; the async one works.
        assert!(
            sched.compute_planned(&ctx).is_err(),
            "[{path}] blocking read"
        );
        sched.compute_planned_async(&ctx).await.unwrap();
        let got = ctx.get_f32_async(out).await.unwrap();
        let used: std::collections::BTreeSet<usize> =
            sched.splits.iter().map(|s| s.backend).collect();
        assert!(
            used.contains(&0) && used.contains(&1),
            "[{path}] expected a split, got {used:?}"
        );
        let e = nmse(&got, &reference);
        assert!(e < mm_tol(DType::Q4_0), "[{path}] split graph NMSE {e:.3e}");
    }
}

static FC: &[u8] = include_bytes!("../../crate/assets/mnist-fc-f32.gguf");
static CNN: &[u8] = include_bytes!("../../crate/assets/mnist-cnn-f32.gguf");
static IMAGES_GZ: &[u8] = include_bytes!("../../crate/assets/t10k-images-idx3-ubyte.gz");

/// MNIST through `Mnist::with_backend(WebGpu)` and `logits_async` on 1,000 t10k images: the same
/// predictions as the CPU and logits within f32 NMSE (the full-set accuracy runs in the e2e).
#[wasm_bindgen_test]
async fn mnist_on_webgpu_matches_cpu() {
    ggweb::backend::webgpu::init_default_device()
        .await
        .expect("adapter");
    let raw = idx::maybe_gunzip(IMAGES_GZ).expect("gunzip");
    let (_, images) = idx::parse_images(&raw).expect("idx images");
    let images = &images[..1000 * 784];
    for (name, file) in [("fc", FC), ("cnn", CNN)] {
        let bytes: Arc<dyn HostBytes> = Arc::new(file.to_vec());
        let mut cpu = Mnist::from_bytes(bytes.clone(), 1).expect("cpu model");
        let reference = cpu.logits(images).expect("cpu logits");
        let mut gpu = Mnist::with_backend(bytes, BackendChoice::WebGpu, 1).expect("gpu model");
        assert!(gpu.backend_report().starts_with("WebGPU"), "{name}");
        // The blocking API refuses WebGPU reads in the browser with an error.
        assert!(
            gpu.logits(&images[..784]).is_err(),
            "{name}: blocking logits"
        );
        let got = gpu.logits_async(images).await.expect("webgpu logits");
        let e = nmse(&got, &reference);
        assert!(e < F32_TOL, "mnist-{name}: NMSE {e:.3e}");
        let am = |v: &[f32]| {
            v.chunks(10)
                .map(ggweb::models::mnist::argmax)
                .collect::<Vec<_>>()
        };
        assert_eq!(am(&got), am(&reference), "mnist-{name}: predictions");
        let p = gpu.last_placements().expect("placements");
        assert!(
            p.nodes[0].1 > 0,
            "{name}: nothing ran on WebGPU: {:?}",
            p.nodes
        );
        assert!(p.elsewhere.is_empty(), "{name}: {:?}", p.elsewhere);
    }
}
