//! Micro-benchmarks of the CPU kernels (the `ggweb bench` CLI calls these).

use crate::backend::cpu::{cpu_buffer_type, CpuBackend};
use crate::{alloc, Context, DType, Error, Graph, Result};

/// One benchmark measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    pub op: String,
    pub dtype: DType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub threads: usize,
    /// 2·m·n·k / seconds_per_iter / 1e9.
    pub gflops: f64,
    pub seconds_per_iter: f64,
}

impl std::fmt::Display for BenchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {:>5} m={} n={} k={} threads={}: {:.3} ms/iter, {:.1} GFLOP/s",
            self.op,
            self.dtype.name(),
            self.m,
            self.n,
            self.k,
            self.threads,
            self.seconds_per_iter * 1e3,
            self.gflops
        )
    }
}

/// Deterministic values in [-1, 1) (xorshift; the benchmark needs no statistical quality).
fn fill_random(out: &mut [f32], seed: u64) {
    let mut s = seed | 1;
    for v in out {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
    }
}

/// Time `mul_mat(W, x)` with W [k, m] of `dtype` (random, quantized with `quant::quantize_row`)
/// and x [k, n] f32 on the CPU backend with `threads` threads: one warm-up compute, then
/// repeated computes until `min_seconds` have passed (at least 3); `seconds_per_iter` is the
/// median iteration. FLOPs = 2·m·n·k.
pub fn bench_mul_mat(
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    min_seconds: f64,
) -> Result<BenchResult> {
    if cfg!(target_arch = "wasm32") {
        return Err(Error::UnsupportedOp(
            "bench_mul_mat needs a native clock".into(),
        ));
    }
    let mut ctx = Context::new();
    let w = ctx.new_tensor_2d(dtype, k, m)?;
    let x = ctx.new_tensor_2d(DType::F32, k, n)?;
    let y = ctx.mul_mat(w, x)?;
    alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type())?;

    // Weights, a row at a time.
    let row_bytes = dtype.row_size(k)?;
    let mut row = vec![0f32; k];
    let mut bytes = vec![0u8; row_bytes * m];
    for (i, dst) in bytes.chunks_exact_mut(row_bytes).enumerate() {
        fill_random(&mut row, 0x9E37_79B9 + i as u64);
        crate::quant::quantize_row(dtype, &row, dst)?;
    }
    ctx.set_bytes(w, &bytes)?;
    let mut xv = vec![0f32; k * n];
    fill_random(&mut xv, 12345);
    ctx.set_f32(x, &xv)?;

    let graph = Graph::build(&ctx, &[y]);
    let mut backend = CpuBackend::new(threads);
    backend.compute(&ctx, &graph)?; // warm-up
                                    // Per-iteration times; the median is reported because the machines this runs on are shared
                                    // and a few iterations can be slowed down by other processes.
    let mut times = Vec::new();
    let mut total = 0.0;
    while times.len() < 3 || total < min_seconds {
        let t = now();
        backend.compute(&ctx, &graph)?;
        let el = elapsed(t);
        total += el;
        times.push(el);
    }
    times.sort_by(f64::total_cmp);
    let spi = times[times.len() / 2];
    Ok(BenchResult {
        op: "mul_mat".into(),
        dtype,
        m,
        n,
        k,
        threads: backend.n_threads(),
        gflops: 2.0 * m as f64 * n as f64 * k as f64 / spi / 1e9,
        seconds_per_iter: spi,
    })
}

#[cfg(not(target_arch = "wasm32"))]
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

#[cfg(not(target_arch = "wasm32"))]
fn elapsed(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

// Unreachable in wasm (bench_mul_mat returns early); a stand-in clock keeps one timing loop.
#[cfg(target_arch = "wasm32")]
fn now() -> f64 {
    0.0
}

#[cfg(target_arch = "wasm32")]
fn elapsed(_: f64) -> f64 {
    f64::INFINITY
}
