//! Micro-benchmarks of the CPU kernels (the `ggweb bench` CLI calls these).

use crate::backend::cpu::{cpu_buffer_type, CpuBackend};
use crate::{alloc, Context, DType, Error, Graph, Result, TensorId};

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
    /// Weight bytes read per mul_mat / seconds_per_iter / 1e9 (each weight read once).
    pub weight_gbps: f64,
    /// The fastest iteration's weight GB/s: on a shared machine the least disturbed by other
    /// processes (the median is the figure to quote, this one to compare kernels under load).
    pub best_weight_gbps: f64,
    /// Copies of the weight the measurement rotates over (1: the same weight every time, so
    /// it stays in cache when it fits).
    pub copies: usize,
    /// Whether the weights were repacked for the CPU GEMV (`backend::cpu::repack`), as a
    /// model's are at load where it pays.
    pub repacked: bool,
}

impl std::fmt::Display for BenchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {:>5} m={} n={} k={} threads={}: {:.3} ms/iter, {:.1} GFLOP/s, {:.2} GB/s weights ({} copies)",
            self.op,
            self.dtype.name(),
            self.m,
            self.n,
            self.k,
            self.threads,
            self.seconds_per_iter * 1e3,
            self.gflops,
            self.weight_gbps,
            self.copies
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
/// median iteration. FLOPs = 2·m·n·k. The weight is the same every iteration (cache-resident
/// when it fits); [`bench_mul_mat_streamed`] measures weights streamed from DRAM.
pub fn bench_mul_mat(
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    min_seconds: f64,
) -> Result<BenchResult> {
    bench_mul_mat_streamed(dtype, m, n, k, threads, min_seconds, 0, true)
}

/// As [`bench_mul_mat`], over enough copies of the weight that together they hold at least
/// `stream_bytes` (one graph of one mul_mat per copy, all with the same x): with
/// `stream_bytes` well over the last-level cache every weight comes from DRAM, as the layers
/// of an LLM do during generation. With one copy, the graph holds several mul_mats of it
/// where they are small (`SAME_WEIGHT_BYTES`). `seconds_per_iter` is per mul_mat (graph time /
/// mul_mat nodes).
#[allow(clippy::too_many_arguments)] // (the shape, the threads, and how the weights are held)
pub fn bench_mul_mat_streamed(
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    min_seconds: f64,
    stream_bytes: usize,
    repack: bool,
) -> Result<BenchResult> {
    if cfg!(target_arch = "wasm32") {
        return Err(Error::UnsupportedOp(
            "bench_mul_mat needs a native clock".into(),
        ));
    }
    let row_bytes = dtype.row_size(k)?;
    let weight_bytes = row_bytes * m;
    let copies = stream_bytes.div_ceil(weight_bytes.max(1)).max(1);
    // One weight (from cache): as many mul_mats of it in the graph as read SAME_WEIGHT_BYTES,
    // as a model's forward has many nodes per compute. One node per graph timed the threads'
    // wake-up per compute with it (at 2 threads a small GEMV measured 5-30x slower than at 1),
    // which a forward pays once, not per node. Outputs kept to SAME_WEIGHT_OUT bytes in all.
    let per_copy = if copies == 1 {
        SAME_WEIGHT_BYTES
            .div_ceil(weight_bytes.max(1))
            .min(SAME_WEIGHT_OUT / (m * n * 4).max(1))
            .clamp(1, 256)
    } else {
        1
    };
    let mut ctx = Context::new();
    let x = ctx.new_tensor_2d(DType::F32, k, n)?;
    let mut ws = Vec::with_capacity(copies);
    let mut ys = Vec::with_capacity(copies * per_copy);
    for _ in 0..copies {
        let w = ctx.new_tensor_2d(dtype, k, m)?;
        for _ in 0..per_copy {
            ys.push(ctx.mul_mat(w, x)?);
        }
        ws.push(w);
    }
    // The weights on huge pages where a model's are.
    alloc::alloc_weights(&mut ctx, &ws, &cpu_buffer_type())?;
    alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type())?;

    // Weights, a row at a time (quantized once; every copy holds the same bytes).
    let mut row = vec![0f32; k];
    let mut bytes = vec![0u8; weight_bytes];
    for (i, dst) in bytes.chunks_exact_mut(row_bytes).enumerate() {
        fill_random(&mut row, 0x9E37_79B9 + i as u64);
        crate::quant::quantize_row(dtype, &row, dst)?;
    }
    // Repacked where a model's load would repack them (when `repack`).
    let repacked = repack && crate::backend::cpu::repack::pays_for(dtype);
    for &w in &ws {
        ctx.set_bytes(w, &bytes)?;
        if repacked {
            crate::backend::cpu::repack::repack_tensor(&mut ctx, w)?;
        }
    }
    let mut xv = vec![0f32; k * n];
    fill_random(&mut xv, 12345);
    ctx.set_f32(x, &xv)?;
    let check = Reference::new(dtype, k, m, n, &bytes, &xv)?;
    drop(bytes);

    // The copies in reverse: each mul_mat's weight lies just before the previous one's, as in
    // a model, where the next weight read rarely follows the last in memory (a GGUF holds a
    // layer's attn_k after ffn_up, attn_q after attn_output), so prefetching past a weight's
    // end fetches nothing the next node reads.
    ys.reverse();
    let graph = Graph::build(&ctx, &ys);
    let mut backend = CpuBackend::new(threads);
    let mut times = time_graph(&mut backend, &ctx, &graph, min_seconds)?;
    // A kernel that is fast because it is wrong (rows skipped, read out of place) reports
    // nothing: the products are checked after the timing.
    check.verify(&ctx, &ys)?;
    times.sort_by(f64::total_cmp);
    let nodes = ys.len() as f64;
    let spi = times[times.len() / 2] / nodes;
    let best = times[0] / nodes;
    Ok(BenchResult {
        op: "mul_mat".into(),
        dtype,
        m,
        n,
        k,
        threads: backend.n_threads(),
        gflops: 2.0 * m as f64 * n as f64 * k as f64 / spi / 1e9,
        seconds_per_iter: spi,
        weight_gbps: weight_bytes as f64 / spi / 1e9,
        best_weight_gbps: weight_bytes as f64 / best / 1e9,
        copies,
        repacked,
    })
}

/// The attention of one model's layers: its heads, kv heads, head size and layer count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnShape {
    pub model: &'static str,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_layer: usize,
}

/// The attention shapes of the project's LLMs (SmolLM2-135M, gemma-3-270m, Qwen2.5-0.5B).
pub const LLM_ATTN: [AttnShape; 3] = [
    AttnShape {
        model: "smollm2",
        n_head: 9,
        n_head_kv: 3,
        head_dim: 64,
        n_layer: 30,
    },
    AttnShape {
        model: "gemma3",
        n_head: 4,
        n_head_kv: 1,
        head_dim: 256,
        n_layer: 18,
    },
    AttnShape {
        model: "qwen2.5",
        n_head: 14,
        n_head_kv: 2,
        head_dim: 64,
        n_layer: 24,
    },
];

/// The most cached positions [`bench_attention`] takes.
pub const MAX_BENCH_KV: usize = 1 << 20;
/// The most queries [`bench_attention`] takes.
pub const MAX_BENCH_QUERIES: usize = 4096;

/// One attention measurement: a forward's fused attention over every layer's f16 KV cache.
#[derive(Debug, Clone, PartialEq)]
pub struct AttnResult {
    /// Seconds for all layers (median).
    pub seconds: f64,
    /// The fastest iteration's seconds.
    pub best_seconds: f64,
    /// KV cache bytes read per forward / seconds / 1e9.
    pub kv_gbps: f64,
}

/// `FLASH_ATTN_EXT` as an LLM's forward runs it: `n_tokens` queries (the last positions of a
/// causal mask) against `n_kv` cached positions, one node per layer, each layer its own K and
/// V caches laid out as `models::llama` lays them out (head-major: each kv head's positions one
/// after another), so the caches of all layers together exceed the core's L2 as a model's do. Built
/// once; timed natively by [`bench_attention`] and from JavaScript by the wasm module's
/// `AttentionBench` (wasm has no clock of its own).
pub struct AttnBench {
    ctx: Context,
    graph: Graph,
    outs: Vec<TensorId>,
    kv_bytes: f64,
}

impl AttnBench {
    pub fn new(s: &AttnShape, n_kv: usize, n_tokens: usize) -> Result<AttnBench> {
        // (A benchmark of contexts up to a million positions and a prompt's worth of queries;
        // the mask alone is n_kv · n_tokens values.)
        if n_tokens == 0 || n_tokens > n_kv || n_kv > MAX_BENCH_KV || n_tokens > MAX_BENCH_QUERIES {
            return Err(Error::InvalidArgument(format!(
                "bench_attention: {n_tokens} queries over {n_kv} positions (1 ≤ queries ≤ \
                 positions, positions ≤ {MAX_BENCH_KV}, queries ≤ {MAX_BENCH_QUERIES})"
            )));
        }
        let (dk, hk) = (s.head_dim, s.n_head_kv);
        let mut ctx = Context::new();
        let mask = ctx.new_tensor_2d(DType::F32, n_kv, n_tokens)?;
        let mut outs = Vec::with_capacity(s.n_layer);
        let mut caches = Vec::with_capacity(2 * s.n_layer);
        let mut qs = Vec::with_capacity(s.n_layer);
        for _ in 0..s.n_layer {
            let q = ctx.new_tensor_3d(DType::F32, dk, s.n_head, n_tokens)?;
            // Head-major, as `models::llama`'s cache (filled to the end).
            let kc = ctx.new_tensor_3d(DType::F16, dk, n_kv, hk)?;
            let vc = ctx.new_tensor_3d(DType::F16, dk, n_kv, hk)?;
            let qp = ctx.permute(q, [0, 2, 1, 3])?;
            let scale = 1.0 / (dk as f32).sqrt();
            outs.push(ctx.flash_attn_ext(qp, kc, vc, Some(mask), scale, 0.0, 0.0)?);
            caches.extend([kc, vc]);
            qs.push(q);
        }
        alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type())?;
        let mut m = vec![f32::NEG_INFINITY; n_kv * n_tokens];
        for (i, r) in m.chunks_mut(n_kv).enumerate() {
            r[..n_kv - n_tokens + i + 1].fill(0.0);
        }
        ctx.set_f32(mask, &m)?;
        let mut vals = vec![0f32; n_kv * dk * hk];
        for (i, &c) in caches.iter().enumerate() {
            fill_random(&mut vals, 0xA77E + i as u64);
            let h: Vec<u8> = vals
                .iter()
                .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                .collect();
            ctx.set_bytes(c, &h)?;
        }
        let mut qv = vec![0f32; dk * s.n_head * n_tokens];
        for (i, &q) in qs.iter().enumerate() {
            fill_random(&mut qv, 0x9E3 + i as u64);
            ctx.set_f32(q, &qv)?;
        }
        let graph = Graph::build(&ctx, &outs);
        Ok(AttnBench {
            ctx,
            graph,
            outs,
            kv_bytes: (2 * n_kv * 2 * dk * hk * s.n_layer) as f64,
        })
    }

    /// One forward's attention over every layer.
    pub fn compute(&self, backend: &mut CpuBackend) -> Result<()> {
        backend.compute(&self.ctx, &self.graph)
    }

    /// KV cache bytes a forward reads.
    pub fn kv_bytes(&self) -> f64 {
        self.kv_bytes
    }

    /// The last computed output of every layer, one after another (to compare two builds).
    pub fn output(&self) -> Result<Vec<f32>> {
        let mut all = Vec::new();
        for &o in &self.outs {
            all.extend(self.ctx.get_f32(o)?);
        }
        Ok(all)
    }
}

/// [`AttnBench`] timed: median and best seconds of a forward's attention over every layer.
pub fn bench_attention(
    s: &AttnShape,
    n_kv: usize,
    n_tokens: usize,
    threads: usize,
    min_seconds: f64,
) -> Result<AttnResult> {
    if cfg!(target_arch = "wasm32") {
        return Err(Error::UnsupportedOp(
            "bench_attention needs a native clock".into(),
        ));
    }
    let b = AttnBench::new(s, n_kv, n_tokens)?;
    let mut backend = CpuBackend::new(threads);
    let mut times = time_graph(&mut backend, &b.ctx, &b.graph, min_seconds)?;
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    Ok(AttnResult {
        seconds,
        best_seconds: times[0],
        kv_gbps: b.kv_bytes / seconds / 1e9,
    })
}

/// Per-iteration seconds of `graph` after one warm-up run: at least three iterations and
/// `min_seconds` in all. Callers report the median, as the machines this runs on are shared
/// and a few iterations can be slowed down by other processes.
fn time_graph(
    backend: &mut CpuBackend,
    ctx: &Context,
    graph: &Graph,
    min_seconds: f64,
) -> Result<Vec<f64>> {
    backend.compute(ctx, graph)?; // warm-up
    let mut times = Vec::new();
    let mut total = 0.0;
    while times.len() < 3 || total < min_seconds {
        let t = now();
        backend.compute(ctx, graph)?;
        let el = elapsed(t);
        total += el;
        times.push(el);
    }
    Ok(times)
}

/// Checks `y = mul_mat(w, x)` as computed in `ctx` (CPU memory) on sampled rows against the
/// scalar reference (see [`bench_mul_mat_streamed`]'s check): the wasm benchmark's guard.
pub fn check_mul_mat(
    ctx: &Context,
    w: crate::TensorId,
    x: crate::TensorId,
    y: crate::TensorId,
) -> Result<()> {
    let (wt, xt) = (ctx.get(w)?, ctx.get(x)?);
    let (k, m, n) = (wt.ne[0], wt.ne[1], xt.ne[1]);
    if wt.ne[2] * wt.ne[3] != 1 || xt.ne[2] * xt.ne[3] != 1 || xt.ne[0] != k {
        return Err(Error::InvalidArgument(
            "check_mul_mat: a 2-D weight and column block of the same k".into(),
        ));
    }
    let check = Reference::new(wt.dtype, k, m, n, &ctx.get_bytes(w)?, &ctx.get_f32(x)?)?;
    check.verify(ctx, &[y])
}

/// Sampled rows of a benchmark's product by the scalar reference (`quant::type_traits_scalar`:
/// the column quantized to the weight type's vec_dot type, then its scalar vec_dot), which
/// every timed product of the same weight bytes and column must match.
struct Reference {
    dtype: DType,
    m: usize,
    n: usize,
    rows: Vec<usize>,
    /// want[j · rows.len() + s]: row rows[s], column j.
    want: Vec<f32>,
    /// The largest |want|, the tolerance's scale.
    scale: f32,
}

impl Reference {
    /// Up to 64 rows, evenly spread from the first to the last.
    const ROWS: usize = 64;
    /// At most this many output bytes are read back in all (the products checked are spread
    /// over the timed ones, the first and the last among them).
    const READ_BYTES: usize = 256 << 20;

    fn new(dtype: DType, k: usize, m: usize, n: usize, w: &[u8], x: &[f32]) -> Result<Self> {
        let tt = crate::quant::type_traits_scalar(dtype).ok_or_else(|| {
            Error::UnsupportedOp(format!("bench: no scalar reference for {dtype}"))
        })?;
        let vt = crate::quant::type_traits_scalar(tt.vec_dot_type).ok_or_else(|| {
            Error::UnsupportedOp(format!(
                "bench: no scalar reference for {}",
                tt.vec_dot_type
            ))
        })?;
        let wrow = dtype.row_size(k)?;
        let count = m.min(Self::ROWS);
        let rows: Vec<usize> = (0..count)
            .map(|s| {
                if count > 1 {
                    s * (m - 1) / (count - 1)
                } else {
                    0
                }
            })
            .collect();
        let mut col = vec![0u8; tt.vec_dot_type.row_size(k)?];
        let mut want = Vec::with_capacity(n * rows.len());
        for xj in x.chunks_exact(k).take(n) {
            (vt.from_f32)(xj, &mut col);
            for &i in &rows {
                want.push((tt.vec_dot)(k, &w[i * wrow..(i + 1) * wrow], &col));
            }
        }
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        Ok(Reference {
            dtype,
            m,
            n,
            rows,
            want,
            scale,
        })
    }

    /// Every checked product within the tolerance of the reference: 1e-3 of the largest
    /// |reference| for the quantized types (their block sums are exact integers; only the
    /// float accumulation order differs, ~1e-5 in the tests), 1e-2 for f32 / f16 / bf16 (whose
    /// kernels may keep the column in f32 where the reference rounds it).
    fn verify(&self, ctx: &Context, outs: &[crate::TensorId]) -> Result<()> {
        let tol = self.scale
            * if self.dtype.is_quantized() {
                1e-3
            } else {
                1e-2
            };
        let per = (self.m * self.n * 4).max(1);
        let count = outs.len().min((Self::READ_BYTES / per).clamp(2, 64));
        for c in 0..count {
            let at = if count > 1 {
                c * (outs.len() - 1) / (count - 1)
            } else {
                0
            };
            let got = ctx.get_f32(outs[at])?;
            for j in 0..self.n {
                for (s, &i) in self.rows.iter().enumerate() {
                    let (g, w) = (got[j * self.m + i], self.want[j * self.rows.len() + s]);
                    if !g.is_finite() || (g - w).abs() > tol {
                        return Err(Error::InvalidArgument(format!(
                            "bench: mul_mat {} m={} n={} result {at} row {i} column {j} is {g}, \
                             the scalar reference {w} (tolerance {tol:e})",
                            self.dtype, self.m, self.n
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Weight bytes the mul_mat nodes over one weight read per graph, at most 256 nodes (see
/// [`bench_mul_mat_streamed`]).
const SAME_WEIGHT_BYTES: usize = 16 << 20;
/// The most output bytes of those nodes together.
const SAME_WEIGHT_OUT: usize = 8 << 20;

/// One weight matrix of a model: its type, row length k and row count m (mul_mat's
/// weight [k, m]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlmShape {
    pub model: &'static str,
    pub tensor: &'static str,
    pub dtype: DType,
    pub k: usize,
    pub m: usize,
}

const fn shape(
    model: &'static str,
    tensor: &'static str,
    dtype: DType,
    k: usize,
    m: usize,
) -> LlmShape {
    LlmShape {
        model,
        tensor,
        dtype,
        k,
        m,
    }
}

/// The distinct weight matrices of the models the project runs (from their GGUF files:
/// SmolLM2-135M-Instruct Q4_1, gemma-3-270m Q4_K_M, Qwen2.5-0.5B Q4_K_M; where a Q4_K_M file
/// mixes two types for one tensor across layers, both are listed).
pub const LLM_SHAPES: &[LlmShape] = &[
    shape("smollm2", "attn_q/attn_output", DType::Q4_1, 576, 576),
    shape("smollm2", "attn_k/attn_v", DType::Q4_1, 576, 192),
    shape("smollm2", "ffn_gate/ffn_up", DType::Q4_1, 576, 1536),
    shape("smollm2", "ffn_down", DType::Q4_1, 1536, 576),
    shape("smollm2", "output (tied)", DType::Q8_0, 576, 49152),
    shape("gemma3", "attn_q", DType::Q5_0, 640, 1024),
    shape("gemma3", "attn_k/attn_v", DType::Q5_0, 640, 256),
    shape("gemma3", "attn_v", DType::Q8_0, 640, 256),
    shape("gemma3", "attn_output", DType::Q4_K, 1024, 640),
    shape("gemma3", "ffn_gate/ffn_up", DType::Q5_0, 640, 2048),
    shape("gemma3", "ffn_down", DType::Q4_K, 2048, 640),
    shape("gemma3", "ffn_down", DType::Q6_K, 2048, 640),
    shape("gemma3", "output (tied)", DType::Q8_0, 640, 262144),
    shape("qwen2.5", "attn_q/attn_output", DType::Q5_0, 896, 896),
    shape("qwen2.5", "attn_k/attn_v", DType::Q5_0, 896, 128),
    shape("qwen2.5", "attn_v", DType::Q8_0, 896, 128),
    shape("qwen2.5", "ffn_gate/ffn_up", DType::Q5_0, 896, 4864),
    shape("qwen2.5", "ffn_down", DType::Q4_K, 4864, 896),
    shape("qwen2.5", "ffn_down", DType::Q6_K, 4864, 896),
    shape("qwen2.5", "output", DType::Q8_0, 896, 151936),
];

/// STREAM-like read bandwidth in GB/s: `threads` threads each sum their share of a `bytes`
/// buffer (touched once before), repeated until `min_seconds` have passed (at least 3 passes of
/// each read kernel); the median pass of the fastest kernel. The roof a GEMV streaming its
/// weights from DRAM can reach, so the kernels are the widest loads this CPU has (detected at
/// run time), each over one and over four interleaved streams per thread: the GEMV kernels read
/// several rows at once, and a baseline-x86-64 loop of 64-bit sums reads less than they do.
pub fn read_bandwidth(bytes: usize, threads: usize, min_seconds: f64) -> Result<f64> {
    if cfg!(target_arch = "wasm32") {
        return Err(Error::UnsupportedOp(
            "read_bandwidth needs a native clock".into(),
        ));
    }
    let threads = threads.max(1);
    // Every share a whole number of READ_UNIT words (all kernels' steps divide it).
    let words = (bytes / 8)
        .next_multiple_of(READ_UNIT * threads)
        .max(READ_UNIT * threads);
    // Huge pages as under the weights (`alloc_weights_buffer`), advised before the first
    // write: the same page walks.
    let mut buf: Vec<u64> = Vec::with_capacity(words);
    crate::hugepage::advise(buf.as_mut_ptr() as *mut u8, words * 8);
    buf.extend(0..words as u64);
    let share = words / threads;
    let kernels = read_kernels();
    let pass = |kernel: ReadKernel| {
        std::thread::scope(|s| {
            let hs: Vec<_> = buf
                .chunks(share)
                .map(|part| s.spawn(move || kernel.sum(part)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        })
    };
    for &kn in &kernels {
        std::hint::black_box(pass(kn));
    }
    // The kernels take turns, so a disturbance by other processes hits them alike.
    let mut times = vec![Vec::new(); kernels.len()];
    let mut total = 0.0;
    while times[0].len() < 3 || total < min_seconds {
        for (&kn, ts) in kernels.iter().zip(&mut times) {
            let t = now();
            std::hint::black_box(pass(kn));
            let el = elapsed(t);
            total += el;
            ts.push(el);
        }
    }
    let best = times
        .iter_mut()
        .map(|ts| {
            ts.sort_by(f64::total_cmp);
            ts[ts.len() / 2]
        })
        .fold(f64::INFINITY, f64::min);
    Ok((words * 8) as f64 / best / 1e9)
}

/// Words of every thread's share of [`read_bandwidth`]'s buffer are a multiple of this: 4
/// streams × 4 loads of 8 words (512 bits).
const READ_UNIT: usize = 128;

/// One way of summing a buffer: a load width and a number of interleaved streams.
#[derive(Clone, Copy, Debug)]
enum ReadKernel {
    /// Plain Rust 64-bit sums (the compiler vectorises them for the baseline target).
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2 { streams4: bool },
    #[cfg(target_arch = "x86_64")]
    Avx512 { streams4: bool },
}

/// The read kernels this CPU has (the widest loads, one and four streams).
fn read_kernels() -> Vec<ReadKernel> {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return vec![
                ReadKernel::Avx512 { streams4: false },
                ReadKernel::Avx512 { streams4: true },
                ReadKernel::Avx2 { streams4: true },
            ];
        }
        if is_x86_feature_detected!("avx2") {
            return vec![
                ReadKernel::Avx2 { streams4: false },
                ReadKernel::Avx2 { streams4: true },
            ];
        }
    }
    vec![ReadKernel::Portable]
}

impl ReadKernel {
    /// The wrapping sum of `part`'s words (its length a multiple of [`READ_UNIT`]); what
    /// matters is that every word is loaded once.
    fn sum(self, part: &[u64]) -> u64 {
        debug_assert!(part.len().is_multiple_of(READ_UNIT));
        match self {
            ReadKernel::Portable => sum_portable(part),
            // SAFETY: read_kernels lists this kernel only when the CPU has AVX2.
            #[cfg(target_arch = "x86_64")]
            ReadKernel::Avx2 { streams4: false } => unsafe { x86_read::sum_avx2::<1>(part) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            ReadKernel::Avx2 { streams4: true } => unsafe { x86_read::sum_avx2::<4>(part) },
            // SAFETY: read_kernels lists this kernel only when the CPU has AVX-512 F.
            #[cfg(target_arch = "x86_64")]
            ReadKernel::Avx512 { streams4: false } => unsafe { x86_read::sum_avx512::<1>(part) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            ReadKernel::Avx512 { streams4: true } => unsafe { x86_read::sum_avx512::<4>(part) },
        }
    }
}

fn sum_portable(part: &[u64]) -> u64 {
    // Eight independent sums: the loop vectorises and is never bound by an add's latency, only
    // by the loads.
    let mut acc = [0u64; 8];
    for c in part.chunks_exact(8) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*v);
        }
    }
    acc.iter().fold(0u64, |a, b| a.wrapping_add(*b))
}

#[cfg(target_arch = "x86_64")]
mod x86_read {
    use std::arch::x86_64::*;

    /// Four accumulators, one vector load each per step; `S` (1 or 4) streams: one stream of
    /// four consecutive vectors per step, or the four quarters of `part` read side by side.
    macro_rules! sum_impl {
        ($name:ident, $feat:literal, $v:ty, $words:expr, $zero:ident, $load:ident, $add:ident,
         $store:ident) => {
            /// # Safety
            /// The CPU has the feature; `part.len()` is a multiple of 4 · 4 · (words per vector).
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn $name<const S: usize>(part: &[u64]) -> u64 {
                const W: usize = $words;
                let nv = part.len() / W;
                let p = part.as_ptr() as *const $v;
                // Vectors per stream; a step reads 4 / S consecutive ones of each stream.
                let q = nv / S;
                let u = 4 / S;
                let mut acc = [$zero(); 4];
                let mut i = 0;
                while i < q {
                    for s in 0..S {
                        for j in 0..u {
                            // SAFETY: s·q + i + j < nv (q a multiple of u, i < q), so the
                            // vector lies inside part (unaligned loads).
                            let v = unsafe { $load(p.add(s * q + i + j)) };
                            acc[s * u + j] = $add(acc[s * u + j], v);
                        }
                    }
                    i += u;
                }
                let mut out = [0u64; W];
                let s = $add($add(acc[0], acc[1]), $add(acc[2], acc[3]));
                // SAFETY: out holds one vector.
                unsafe { $store(out.as_mut_ptr() as *mut $v, s) };
                out.iter().fold(0u64, |a, b| a.wrapping_add(*b))
            }
        };
    }

    sum_impl!(
        sum_avx2,
        "avx2",
        __m256i,
        4,
        _mm256_setzero_si256,
        _mm256_loadu_si256,
        _mm256_add_epi64,
        _mm256_storeu_si256
    );
    sum_impl!(
        sum_avx512,
        "avx512f",
        __m512i,
        8,
        _mm512_setzero_si512,
        _mm512_loadu_si512,
        _mm512_add_epi64,
        _mm512_storeu_si512
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The check that guards every timed product: the scalar reference's own values pass, one
    /// value off by more than the tolerance, or not finite, fails.
    #[test]
    fn reference_check_rejects_a_wrong_product() -> Result<()> {
        let (k, m, n) = (64, 5, 3);
        let dtype = DType::Q4_0;
        let wrow = dtype.row_size(k)?;
        let mut w = vec![0u8; wrow * m];
        let mut row = vec![0f32; k];
        for (i, dst) in w.chunks_exact_mut(wrow).enumerate() {
            fill_random(&mut row, 7 + i as u64);
            crate::quant::quantize_row(dtype, &row, dst)?;
        }
        let mut x = vec![0f32; k * n];
        fill_random(&mut x, 99);
        let check = Reference::new(dtype, k, m, n, &w, &x)?;
        assert_eq!(check.rows, vec![0, 1, 2, 3, 4]);
        let mut ctx = Context::new();
        let out = ctx.new_tensor_2d(DType::F32, m, n)?;
        alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type())?;
        // want is column-major over the sampled rows, which here are all m rows: the product.
        let good = check.want.clone();
        ctx.set_f32(out, &good)?;
        check.verify(&ctx, &[out])?;
        let mut off = good.clone();
        off[m + 3] += 0.01 * check.scale;
        ctx.set_f32(out, &off)?;
        assert!(check.verify(&ctx, &[out]).is_err());
        let mut nan = good;
        nan[2] = f32::NAN;
        ctx.set_f32(out, &nan)?;
        assert!(check.verify(&ctx, &[out]).is_err());
        Ok(())
    }
}
