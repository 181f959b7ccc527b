//! The CUDA backend (feature `cuda`: `cargo test --release -p ggweb-native-tests --features cuda
//! --test cuda`).
//!
//! Runs on any machine:
//! - every kernel file of `shaders/cuda` compiles with NVRTC for sm_80 and sm_90 into a CUBIN that
//!   holds every entry point the planner can launch (NVRTC needs no GPU; skipped, saying why,
//!   only when libnvrtc is not found: `scripts/setup-cuda.sh` installs it);
//! - without a driver or device the CUDA registry lists nothing and `--backend cuda` is an error
//!   that says why (never a panic).
//!
//! Runs only with a CUDA device (else each prints why it is skipped): the shared op case table
//! against the CPU reference (NMSE 1e-7 for f32 ops, 5e-4 for f16/quantized mul_mat, as WebGPU),
//! MNIST fc/cnn accuracy equal to the CPU's, SmolLM2 / gemma3 / Qwen2 logits against the CPU
//! within the WebGPU bounds, buffers (device and pinned host) round trips.
#![cfg(feature = "cuda")]

#[path = "support/models.rs"]
mod models;
use models::model;

use std::path::PathBuf;
use std::sync::Arc;

use ggweb::backend::cuda::{self, kernels, nvrtc, CudaDevice};
use ggweb::backend::{BufferType, Device, Registry};
use ggweb::gguf::GgufFile;
use ggweb::models::llama::LlamaModel;
use ggweb::models::mnist::{self, Mnist};
use ggweb::models::runner::{BackendChoice, Runner};
use ggweb::models::sampler::argmax;
use ggweb::{Context, Graph, Result};
use ggweb_testing::{cases, compare, nmse, run_cpu, Build, Data, Group, F32_TOL, GROUPS};

/// The device under test, or None after printing why there is none.
fn device(test: &str) -> Option<Arc<CudaDevice>> {
    match cuda::probe() {
        Ok(d) => {
            eprintln!("CUDA device: {}", d.description());
            Some(d)
        }
        Err(why) => {
            eprintln!("{test}: skipped, no CUDA device ({why})");
            None
        }
    }
}

#[test]
fn nvrtc_compiles_every_kernel_for_sm80_and_sm90() {
    if let Err(why) = nvrtc::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let (major, minor) = nvrtc::version().expect("nvrtcVersion");
    eprintln!("NVRTC {major}.{minor}");
    let entries = kernels::planned_entries();
    for arch in [80, 90] {
        let mut found = vec![false; entries.len()];
        for file in &kernels::FILES {
            let t = std::time::Instant::now();
            let cubin =
                nvrtc::compile(file.name, &file.source(), arch).unwrap_or_else(|e| panic!("{e}"));
            eprintln!(
                "{}.cu for sm_{arch}: {} bytes of CUBIN in {:.1} s",
                file.name,
                cubin.len(),
                t.elapsed().as_secs_f64()
            );
            assert!(
                cubin.starts_with(b"\x7fELF"),
                "{}: not an ELF CUBIN",
                file.name
            );
            for (i, e) in entries.iter().enumerate() {
                // The symbol table names each kernel: "\0<name>\0".
                let sym = [b"\0", e.as_bytes(), b"\0"].concat();
                if cubin.windows(sym.len()).any(|w| w == sym.as_slice()) {
                    assert_eq!(
                        kernels::file_of(e).name,
                        file.name,
                        "{e} is looked up in the wrong file"
                    );
                    found[i] = true;
                }
            }
        }
        let missing: Vec<_> = entries.iter().zip(&found).filter(|(_, f)| !**f).collect();
        assert!(
            missing.is_empty(),
            "sm_{arch}: kernels the planner launches but no file defines: {missing:?}"
        );
    }
}

/// The kernels' block decoding (`shaders/cuda/quants.cuh`: `deq<T>` per element, `q32<T>` per
/// 32-element sub-block and `dot32<T>`, the dp4a step of mat_vec, with a host dp4a) built for the host with the system's C++
/// compiler and compared with the Rust reference dequantization on random rows of every weight
/// type: so the block layouts are checked without a GPU. Skipped (saying why) without a compiler.
#[test]
fn kernel_block_decoding_matches_the_reference() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let Some(exe) = host_build("quants_host", false) else {
        return;
    };
    let k = 768; // a multiple of 256 (k-quants) and of 32
    let mut rng = ggweb_testing::Rng::new(7);
    for t in cuda::WEIGHT_TYPES {
        let x = rng.vec(k, -2.0, 2.0);
        let mut row = vec![0u8; t.row_size(k).unwrap()];
        ggweb::quant::quantize_row(t, &x, &mut row).unwrap();
        let mut reference = vec![0f32; k];
        ggweb::quant::dequantize_row(t, &row, &mut reference).unwrap();
        let mut child = Command::new(&exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the host build");
        let mut input = (t as i32).to_le_bytes().to_vec();
        input.extend((k as i32).to_le_bytes());
        input.extend(&row);
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{t}: exit {:?}", out.status);
        let vals: Vec<f32> = out
            .stdout
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let quantized = !matches!(t, ggweb::DType::F32 | ggweb::DType::F16);
        assert_eq!(
            vals.len(),
            if quantized { 2 * k + k / 16 } else { k },
            "{t}"
        );
        let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
        let mut parts = vec![("deq", &vals[..k])];
        if quantized {
            parts.push(("q32", &vals[k..2 * k]));
        }
        for (what, got) in parts {
            for (i, (a, b)) in got.iter().zip(&reference).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-6 * scale,
                    "{t} {what}: element {i}: {a} vs {b}"
                );
            }
        }
        if quantized {
            // dot32 (integer dots, scales and mins) against the float dot over deq<T>.
            for (sb, p) in vals[2 * k..].chunks_exact(2).enumerate() {
                let (got, want) = (p[0], p[1]);
                assert!(
                    (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{t} dot32: sub-block {sb}: {got} vs {want}"
                );
            }
        }
    }
    let _ = std::fs::remove_file(&exe);
}

/// Build a host library from `tests/cuda_host/<name>.cpp` (or an executable), or None when there
/// is no C++ compiler or the sources are not here (a test binary run elsewhere), saying why.
fn host_build(name: &str, shared: bool) -> Option<PathBuf> {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = here.join(format!("tests/cuda_host/{name}.cpp"));
    if !src.is_file() {
        eprintln!(
            "skipped: {} not here (a test binary run elsewhere)",
            src.display()
        );
        return None;
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = std::env::temp_dir().join(format!(
        "ggweb-{name}-{}{}",
        std::process::id(),
        if shared { ".so" } else { "" }
    ));
    let mut cmd = std::process::Command::new(&cxx);
    cmd.args(["-std=c++17", "-O1", "-Wall", "-Werror", "-I"])
        .arg(here.join("../shaders/cuda"));
    if shared {
        cmd.args(["-fPIC", "-shared"]);
    }
    match cmd.arg(&src).arg("-o").arg(&out).output() {
        Err(e) => {
            eprintln!("skipped: no C++ compiler '{cxx}' ({e})");
            None
        }
        Ok(o) => {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            Some(out)
        }
    }
}

/// The planner and every kernel end to end without a GPU: `shaders/cuda` built for the host
/// (`tests/cuda_host/kernels_host.cpp`: blocks one after another, a block's threads as OS threads
/// with real barriers, warp shuffles through memory) and run over the launches `plan.rs` makes for
/// each node, on host memory, against the CPU backend on the shared case table (WebGPU's
/// tolerances), but for `Group::Split` (WebGPU's binding splits: the same kernels on larger
/// tensors, left to the device run for time). This checks the CUDA C and the parameter blocks, not
/// a GPU.
/// The case table's groups CUDA runs: all but the training ops (loss, backward, optimizer steps),
/// which have no CUDA kernels yet (`supports_op` refuses them; the scheduler keeps them on the CPU).
fn cuda_groups() -> impl Iterator<Item = Group> {
    GROUPS.into_iter().filter(|g| *g != Group::Train)
}

#[test]
fn kernels_on_the_host_match_cpu() {
    let Some(lib_path) = host_build("kernels_host", true) else {
        return;
    };
    // SAFETY: our own library, built just above; its one function has this signature.
    let lib = unsafe { libloading::Library::new(&lib_path) }.expect("load the host kernels");
    type Launch = unsafe extern "C" fn(
        *const std::ffi::c_char,
        *const kernels::KParams,
        u32,
        u32,
        u32,
        u32,
    ) -> i32;
    // SAFETY: as above.
    let launch: libloading::Symbol<Launch> =
        unsafe { lib.get(b"ggweb_host_launch\0") }.expect("ggweb_host_launch");
    let host_ptr = |ctx: &Context, id: ggweb::TensorId| -> Result<u64> {
        let (buf, off) = ctx
            .data_location(id)
            .ok_or_else(|| ggweb::Error::Backend("no data".into()))?;
        Ok(buf.host_ptr().expect("host memory") as u64 + off as u64)
    };
    let mut ran = std::collections::BTreeMap::new();
    let mut failures = Vec::new();
    let groups: Vec<_> = cuda_groups().filter(|g| *g != Group::Split).collect();
    for &group in &groups {
        for case in cases(group) {
            let reference = run_cpu(&case.build, 2).expect("cpu");
            let mut ctx = Context::new();
            let c = (case.build)(&mut ctx).expect("case");
            let graph = Graph::build(&ctx, &[c.out]);
            let _buf =
                ggweb::alloc::alloc_ctx_tensors(&mut ctx, &ggweb::backend::cpu::cpu_buffer_type())
                    .expect("alloc");
            for (id, data) in &c.inputs {
                match data {
                    Data::F(v) => ctx.set_f32(*id, v).unwrap(),
                    Data::I(v) => ctx.set_i32(*id, v).unwrap(),
                }
            }
            for &node in &graph.nodes {
                // q8 scratch of a quantized mat_vec: 48 bytes per 32 activations.
                let scratch = match ctx.tensor(node).src[1] {
                    Some(b) if ctx.tensor(node).op == ggweb::tensor::Op::MulMat => {
                        vec![0u8; ctx.tensor(b).nelements() / 32 * 48 + 48]
                    }
                    _ => Vec::new(),
                };
                for (entry, params, grid, block) in
                    cuda::plan_node(&ctx, node, scratch.as_ptr() as u64, &host_ptr).expect("plan")
                {
                    let name = std::ffi::CString::new(entry.clone()).unwrap();
                    // SAFETY: every address in `params` is host memory of `ctx`'s buffers (or the
                    // scratch) at a range the planner checked.
                    let r =
                        unsafe { launch(name.as_ptr(), &params, grid.0, grid.1, grid.2, block) };
                    assert_eq!(r, 0, "{entry}: not in the host build");
                }
            }
            let out = ctx.get_f32(c.out).unwrap();
            match compare(&out, &reference, case.tol) {
                Ok(_) => *ran.entry(format!("{group:?}")).or_insert(0) += 1,
                Err(e) => failures.push(format!("{group:?} {}: {e}", case.name)),
            }
        }
    }
    eprintln!("cases run on the host build: {ran:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for g in groups {
        assert!(
            ran.contains_key(&format!("{g:?}")),
            "no {g:?} case ran: {ran:?}"
        );
    }
    let _ = std::fs::remove_file(&lib_path);
}

#[test]
fn a_compile_error_is_an_error_with_the_log() {
    if nvrtc::available().is_err() {
        eprintln!("skipped: no libnvrtc");
        return;
    }
    let e = nvrtc::compile(
        "bad",
        "extern \"C\" __global__ void k() { undeclared(); }",
        80,
    )
    .expect_err("must not compile");
    assert!(e.to_string().contains("undeclared"), "{e}");
}

#[test]
fn no_device_is_an_error_not_a_panic() {
    let listed = cuda::CudaRegistry.devices();
    match cuda::probe() {
        Ok(_) => {
            assert_eq!(listed.len(), 1);
            let r = Runner::new(BackendChoice::Cuda, 1).expect("a CUDA runner");
            assert!(r.gpu && r.report.starts_with("CUDA"), "{}", r.report);
        }
        Err(why) => {
            assert!(listed.is_empty());
            let e = Runner::new(BackendChoice::Cuda, 1)
                .err()
                .expect("no CUDA runner");
            eprintln!("--backend cuda here: {e}");
            assert!(e.to_string().contains(&why), "{e}");
            // auto falls back without CUDA.
            assert!(!Runner::new(BackendChoice::Auto, 1)
                .expect("auto")
                .report
                .starts_with("CUDA"));
        }
    }
}

/// `supports_op` (device-independent, so checked here without a GPU): every node of every case of
/// the shared table is accepted, and what has no CUDA kernel is refused with the reason.
#[test]
fn supports_op_accepts_the_case_table_and_refuses_the_rest() {
    let mut n = 0;
    for group in cuda_groups() {
        for case in cases(group) {
            let mut ctx = Context::new();
            let c = (case.build)(&mut ctx).expect("case builds");
            let graph = Graph::build(&ctx, &[c.out]);
            for &node in &graph.nodes {
                if let Err(why) = cuda::check_op(&ctx, node) {
                    panic!("{group:?} {}: {why}", case.name);
                }
                n += 1;
            }
        }
    }
    eprintln!("{n} nodes of the case table accepted");
    let mut ctx = Context::new();
    let a = ctx.new_tensor(ggweb::DType::Q2_K, &[256, 4]).unwrap();
    let b = ctx.new_tensor(ggweb::DType::F32, &[256, 2]).unwrap();
    let mm = ctx.mul_mat(a, b).unwrap();
    let why = cuda::check_op(&ctx, mm).expect_err("q2_K mul_mat has no CUDA kernel");
    assert!(why.contains("MUL_MAT") && why.contains("q2_K"), "{why}");
    let h = ctx.new_tensor(ggweb::DType::F16, &[8]).unwrap();
    let hh = ctx.add(h, h).unwrap();
    assert!(cuda::check_op(&ctx, hh).is_err(), "f16 add accepted");
    let x = ctx.new_tensor(ggweb::DType::F32, &[8]).unwrap();
    let like = ctx.new_tensor(ggweb::DType::F32, &[4]).unwrap();
    let rb = ctx.repeat_back(x, like).unwrap();
    assert!(cuda::check_op(&ctx, rb).is_err(), "a training op accepted");
    let ok = ctx.new_tensor(ggweb::DType::Q6_K, &[256, 3]).unwrap();
    let y = ctx.mul_mat(ok, b).unwrap();
    assert_eq!(cuda::check_op(&ctx, y), Ok(()));
}

/// A case on the CUDA device.
fn run_cuda(build: &Build, dev: &Arc<CudaDevice>) -> Result<Vec<f32>> {
    let mut ctx = Context::new();
    let case = build(&mut ctx)?;
    let graph = Graph::build(&ctx, &[case.out]);
    for &n in &graph.nodes {
        if !dev.supports_op(&ctx, n) {
            return Err(ggweb::Error::UnsupportedOp(format!(
                "{}: {:?}",
                ctx.tensor(n).op.name(),
                dev.explain_op(&ctx, n)
            )));
        }
    }
    let _buf = ggweb::alloc::alloc_ctx_tensors(&mut ctx, &dev.buffer_type())?;
    for (id, data) in &case.inputs {
        match data {
            Data::F(v) => ctx.set_f32(*id, v)?,
            Data::I(v) => ctx.set_i32(*id, v)?,
        }
    }
    let mut be = dev.init_backend()?;
    be.graph_compute(&ctx, &graph)?;
    be.synchronize()?;
    ctx.get_f32(case.out)
}

#[test]
fn op_cases_match_cpu() {
    let Some(dev) = device("op_cases_match_cpu") else {
        return;
    };
    let mut failures = Vec::new();
    let mut n = 0;
    for group in cuda_groups() {
        for case in cases(group) {
            let reference = match run_cpu(&case.build, 2) {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{}: CPU: {e}", case.name));
                    continue;
                }
            };
            match run_cuda(&case.build, &dev)
                .and_then(|out| compare(&out, &reference, case.tol).map_err(ggweb::Error::Backend))
            {
                Ok(_) => n += 1,
                Err(e) => failures.push(format!("{group:?} {}: {e}", case.name)),
            }
        }
    }
    eprintln!("{n} op cases match the CPU");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn buffers_round_trip() {
    let Some(dev) = device("buffers_round_trip") else {
        return;
    };
    let data: Vec<u8> = (0..4097u32).map(|i| (i * 7) as u8).collect();
    for buft in [
        dev.cuda_buffer_type() as Arc<dyn BufferType>,
        dev.host_buffer_type() as Arc<dyn BufferType>,
    ] {
        let buf = buft.clone().alloc_buffer(8192).expect("alloc");
        buf.clear(0xAB).expect("clear");
        buf.set(100, &data).expect("set");
        let mut out = vec![0u8; 8192];
        buf.get(0, &mut out).expect("get");
        assert!(out[..100].iter().all(|&b| b == 0xAB), "{}", buft.name());
        assert_eq!(&out[100..100 + data.len()], &data[..], "{}", buft.name());
        assert!(buf.set(8000, &data).is_err(), "out of range write accepted");
        assert_eq!(buft.is_host(), buf.host_ptr().is_some());
    }
}

#[test]
fn mnist_fc_and_cnn_match_cpu() {
    let Some(_) = device("mnist_fc_and_cnn_match_cpu") else {
        return;
    };
    let (n, images) = mnist::idx::parse_images(mnist::embedded::T10K_IMAGES_GZ).expect("images");
    let labels = mnist::idx::parse_labels(mnist::embedded::T10K_LABELS_GZ).expect("labels");
    assert_eq!(labels.len(), n);
    let models: [(&str, Arc<dyn ggweb::backend::cpu::HostBytes>); 2] = [
        ("fc", Arc::new(mnist::embedded::FC)),
        ("cnn", Arc::new(mnist::embedded::CNN)),
    ];
    for (name, bytes) in models {
        let mut cpu = Mnist::with_backend(bytes.clone(), BackendChoice::Cpu, 2).expect("cpu");
        let mut gpu = Mnist::with_backend(bytes, BackendChoice::Cuda, 2).expect("cuda");
        eprintln!("MNIST {name}: {}", gpu.backend_report());
        let (c_cpu, c_gpu) = (
            cpu.evaluate(&images, &labels, |_, _| {}).expect("cpu eval"),
            gpu.evaluate(&images, &labels, |_, _| {})
                .expect("cuda eval"),
        );
        eprintln!("MNIST {name}: CUDA {c_gpu} / {n}, CPU {c_cpu} / {n}");
        assert_eq!(c_gpu, c_cpu, "accuracy differs from the CPU");
        let few = &images[..100 * mnist::IMAGE_PIXELS];
        let e = nmse(
            &gpu.logits(few).expect("logits"),
            &cpu.logits(few).expect("logits"),
        );
        assert!(e < F32_TOL, "MNIST {name} logits NMSE {e:.3e}");
    }
}

fn log_softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let s: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
    x.iter().map(|&v| v as f64 - m - s.ln()).collect()
}

/// KL(reference || ours) in nats.
fn kl(reference: &[f32], ours: &[f32]) -> f64 {
    let (p, q) = (log_softmax(reference), log_softmax(ours));
    p.iter().zip(&q).map(|(lp, lq)| lp.exp() * (lp - lq)).sum()
}

/// Logits of every prompt position on CUDA against the CPU (argmax equal but for `max_ties`
/// near-ties under 0.25, max abs and last-position KL bounded), then one generated token (n = 1,
/// KV cache). The bounds are the WebGPU parity test's.
fn llm_parity(
    dev: Arc<CudaDevice>,
    path: PathBuf,
    prompt: &[u32],
    (max_abs_bound, kl_bound, max_ties): (f32, f64, usize),
) {
    let file = Arc::new(GgufFile::open(&path).expect("model"));
    let n_ctx = (prompt.len() + 8).max(64);
    let mut cpu = LlamaModel::from_gguf(file.clone(), file.header(), n_ctx, BackendChoice::Cpu, 2)
        .expect("cpu");
    let reference = cpu.eval(prompt, true).expect("cpu eval");
    let n_vocab = cpu.hp.n_vocab;
    let runner = Runner::with_cuda_device(dev, 2).expect("runner");
    let mut gpu =
        LlamaModel::with_runner(file.clone(), file.header(), n_ctx, runner).expect("cuda");
    assert!(gpu.uses_gpu());
    eprintln!("{}: {}", path.display(), gpu.backend_report());
    if let Some(p) = gpu.last_placements() {
        eprintln!("placements: {:?}; elsewhere: {:?}", p.nodes, p.elsewhere);
    }
    let ours = gpu.eval(prompt, true).expect("cuda eval");
    assert_eq!(ours.len(), reference.len());
    let mut max_abs = 0f32;
    let mut ties = Vec::new();
    for p in 0..prompt.len() {
        let (a, b) = (
            &ours[p * n_vocab..(p + 1) * n_vocab],
            &reference[p * n_vocab..(p + 1) * n_vocab],
        );
        assert!(
            a.iter().all(|x| x.is_finite()),
            "position {p}: non-finite logits"
        );
        for (x, y) in a.iter().zip(b) {
            max_abs = max_abs.max((x - y).abs());
        }
        let (ga, gb) = (argmax(a) as usize, argmax(b) as usize);
        if ga != gb {
            ties.push((p, (b[gb] - b[ga]).max(a[ga] - a[gb])));
        }
    }
    let last = prompt.len() - 1;
    let k = kl(&reference[last * n_vocab..], &ours[last * n_vocab..]);
    eprintln!("max |cuda - cpu| = {max_abs:.4}, KL(last) = {k:.2e}, argmax differs at {ties:?}");
    assert!(
        ties.len() <= max_ties && ties.iter().all(|&(_, gap)| gap < 0.25),
        "argmax differs at {ties:?}"
    );
    assert!(
        max_abs < max_abs_bound,
        "max abs {max_abs} >= {max_abs_bound}"
    );
    assert!(k < kl_bound, "KL {k:.3e} >= {kl_bound:.1e}");
    let next = argmax(&ours[last * n_vocab..]) as u32;
    let a = gpu.eval(&[next], false).expect("cuda next");
    let b = cpu.eval(&[next], false).expect("cpu next");
    let k1 = kl(&b, &a);
    eprintln!("next token (n = 1, KV cache): KL = {k1:.2e}");
    assert!(k1 < kl_bound, "next token: KL {k1:.3e} >= {kl_bound:.1e}");
}

#[test]
fn smollm2_cuda_matches_cpu() {
    let Some(dev) = device("smollm2_cuda_matches_cpu") else {
        return;
    };
    let prompt = [6403, 1980, 253, 655, 28, 665, 436, 253, 1838, 8085, 617];
    llm_parity(
        dev,
        model("GGWEB_SMOLLM2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        &prompt,
        (1.5, 0.01, 0),
    );
}

#[test]
fn gemma3_cuda_matches_cpu() {
    let Some(dev) = device("gemma3_cuda_matches_cpu") else {
        return;
    };
    // Position 8 is a near-tie (see webgpu_llm.rs).
    let prompt = [
        2, 14946, 3324, 496, 990, 236764, 993, 691, 496, 2268, 16775, 1015,
    ];
    llm_parity(
        dev,
        model("GGWEB_GEMMA3", "gemma-3-270m-q4_k_m.gguf"),
        &prompt,
        (1.5, 0.01, 1),
    );
}

#[test]
fn qwen2_cuda_matches_cpu() {
    let Some(dev) = device("qwen2_cuda_matches_cpu") else {
        return;
    };
    let prompt = [9707, 11, 1879, 374, 264, 1273, 315, 279, 3974, 13];
    llm_parity(
        dev,
        model("GGWEB_QWEN2", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        &prompt,
        (1.5, 0.01, 1),
    );
}

#[test]
fn families_random_cuda_matches_cpu() {
    let Some(dev) = device("families_random_cuda_matches_cpu") else {
        return;
    };
    // The random-weight qwen3 / phi3 / llama3 fixtures (in the repo, so they travel to a device;
    // a test binary built elsewhere finds them from the repository root it is run in).
    let mut data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/families");
    if !data.is_dir() {
        data = PathBuf::from("native-tests/data/families");
    }
    let prompt = [5, 17, 300, 42, 99, 7, 250, 128, 3, 64, 200, 11];
    for f in [
        "qwen3-random.gguf",
        "phi3-random.gguf",
        "llama3-random.gguf",
    ] {
        llm_parity(dev.clone(), data.join(f), &prompt, (1.0, 0.01, 0));
    }
}

/// A llama GGUF with SmolLM2-135M's shapes (576 wide, 30 blocks, 9/3 heads, n_ff 1536, vocab
/// 49152, tied embedding) and random weights of `wtype` (`ffn_down` of `down_type`), built in
/// memory: the real model files are too large to carry to a device machine.
fn random_smollm2_shape(wtype: ggweb::DType, down_type: ggweb::DType) -> Vec<u8> {
    use ggweb::gguf::GgufWriter;
    use ggweb::DType;
    let (n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab) =
        (576usize, 30usize, 9u32, 3u32, 1536usize, 49152usize);
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set("llama.embedding_length", n_embd as u32);
    w.set("llama.block_count", n_layer as u32);
    w.set("llama.attention.head_count", n_head);
    w.set("llama.attention.head_count_kv", n_head_kv);
    w.set("llama.feed_forward_length", n_ff as u32);
    w.set("llama.context_length", 2048u32);
    w.set("llama.vocab_size", n_vocab as u32);
    w.set("llama.rope.freq_base", 100000f32);
    w.set("llama.attention.layer_norm_rms_epsilon", 1e-5f32);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut tensor =
        |w: &mut GgufWriter, name: &str, t: DType, ne0: usize, ne1: usize, scale: f32| {
            let mut row = vec![0f32; ne0];
            let rs = t.row_size(ne0).expect("row size");
            let mut data = vec![0u8; rs * ne1];
            for dst in data.chunks_exact_mut(rs) {
                for v in row.iter_mut() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    *v = (((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale;
                }
                ggweb::quant::quantize_row(t, &row, dst).expect("quantize");
            }
            w.add_tensor_owned(name, t, &[ne0 as u64, ne1 as u64], data)
                .expect("tensor");
        };
    let kv = n_embd / n_head as usize * n_head_kv as usize;
    let s = 1.0 / (n_embd as f32).sqrt();
    tensor(
        &mut w,
        "token_embd.weight",
        DType::Q8_0,
        n_embd,
        n_vocab,
        1.0,
    );
    tensor(&mut w, "output_norm.weight", DType::F32, n_embd, 1, 1.0);
    for l in 0..n_layer {
        let b = |n: &str| format!("blk.{l}.{n}.weight");
        tensor(&mut w, &b("attn_norm"), DType::F32, n_embd, 1, 1.0);
        tensor(&mut w, &b("ffn_norm"), DType::F32, n_embd, 1, 1.0);
        tensor(&mut w, &b("attn_q"), wtype, n_embd, n_embd, s);
        tensor(&mut w, &b("attn_k"), wtype, n_embd, kv, s);
        tensor(&mut w, &b("attn_v"), wtype, n_embd, kv, s);
        tensor(&mut w, &b("attn_output"), wtype, n_embd, n_embd, s);
        tensor(&mut w, &b("ffn_gate"), wtype, n_embd, n_ff, s);
        tensor(&mut w, &b("ffn_up"), wtype, n_embd, n_ff, s);
        tensor(
            &mut w,
            &b("ffn_down"),
            down_type,
            n_ff,
            n_embd,
            1.0 / (n_ff as f32).sqrt(),
        );
    }
    w.to_bytes().expect("gguf")
}

/// Decode speed on CUDA (and on the CPU, for scale) of the SmolLM2-shaped random model: a
/// 128-token prompt, then 64 single-token steps. A benchmark (not timed as a test), run by
/// scripts/device-check.sh; it also checks the prompt's last logits against the CPU's.
#[test]
#[ignore = "benchmark: scripts/device-check.sh"]
fn bench_decode_random_smollm2_shape() {
    let Some(dev) = device("bench_decode_random_smollm2_shape") else {
        return;
    };
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    for (wt, dt) in [
        (ggweb::DType::Q4_1, ggweb::DType::Q4_1),
        (ggweb::DType::Q4_K, ggweb::DType::Q6_K),
    ] {
        let bytes: Arc<dyn ggweb::backend::cpu::HostBytes> = Arc::new(random_smollm2_shape(wt, dt));
        let g = ggweb::gguf::Gguf::parse(bytes.bytes()).expect("parse");
        let prompt: Vec<u32> = (0..128u32).map(|i| (i * 389 + 7) % 49152).collect();
        let mut results = Vec::new();
        for backend in [BackendChoice::Cuda, BackendChoice::Cpu] {
            let runner = match backend {
                BackendChoice::Cuda => Runner::with_cuda_device(dev.clone(), threads),
                _ => Runner::new(BackendChoice::Cpu, threads),
            }
            .expect("runner");
            let mut m = LlamaModel::with_runner(bytes.clone(), &g, 256, runner).expect("model");
            let t0 = std::time::Instant::now();
            let logits = m.eval(&prompt, false).expect("prompt");
            let prompt_s = t0.elapsed().as_secs_f64();
            let mut next = argmax(&logits) as u32;
            let t1 = std::time::Instant::now();
            for _ in 0..64 {
                next = argmax(&m.eval(&[next], false).expect("step")) as u32;
            }
            let gen_s = t1.elapsed().as_secs_f64();
            eprintln!(
                "random SmolLM2 shape, {wt}/{dt} weights, {:?}: prompt 128 tokens {:.1} tok/s, decode 64 tokens {:.1} tok/s ({})",
                backend,
                128.0 / prompt_s,
                64.0 / gen_s,
                m.backend_report()
            );
            results.push(logits);
        }
        let k = kl(&results[1], &results[0]);
        eprintln!("prompt's last position: KL(cpu || cuda) = {k:.2e}");
        assert!(k < 0.01, "CUDA and CPU disagree: KL {k:.3e}");
    }
}

/// The benchmark's random model is a valid llama file (checked on the CPU, so a device run does
/// not fail on the fixture).
#[test]
fn random_smollm2_shape_runs_on_cpu() {
    let bytes: Arc<dyn ggweb::backend::cpu::HostBytes> =
        Arc::new(random_smollm2_shape(ggweb::DType::Q4_1, ggweb::DType::Q8_0));
    let g = ggweb::gguf::Gguf::parse(bytes.bytes()).expect("parse");
    let mut m = LlamaModel::from_gguf(bytes.clone(), &g, 64, BackendChoice::Cpu, 2).expect("model");
    let logits = m.eval(&[1, 2, 3], false).expect("eval");
    assert_eq!(logits.len(), 49152);
    assert!(logits.iter().all(|x| x.is_finite()));
}
