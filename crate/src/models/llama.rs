//! Decoder-only transformer language models from GGUF: one builder for every family in
//! [`crate::models::arch::ARCHS`] (llama incl. Mistral/SmolLM/Llama-3 `rope_freqs`, gemma3, qwen2,
//! qwen3, phi3). The families differ by a row of that table (rope layout, activation, gemma's
//! extra norms) and by which optional tensors the file has (biases, per-head q/k norms, fused
//! `attn_qkv` and gate+up `ffn_up`, a separate `output`); hyper-parameters come from the metadata.
//!
//! The graph follows llama.cpp's builders (`llm_build_llama`, `llm_build_gemma3_iswa`, qwen2/3,
//! phi3) so results can be compared with it. The KV cache is f16, one K and one V tensor per
//! layer, rows per token.
//!
//! Graphs run through a [`Runner`] (the scheduler over cpu | webgpu | auto): weights live in the
//! chosen device's memory (a tensor the device cannot hold stays on the CPU), each layer's KV
//! cache lives where that layer's weights are, and the scheduler places every node.

use std::sync::Arc;

use crate::backend::cpu::HostBytes;
use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::context::Mark;
use crate::gguf::Gguf;
pub use crate::models::arch::Arch;
use crate::models::arch::{Act, ArchSpec};
use crate::models::runner::{BackendChoice, Runner};
use crate::models::weights::Weights;
use crate::tensor::{Op, RopeParams};
use crate::{Context, DType, Error, Graph, Result, TensorId};

/// Hyper-parameters read from the GGUF metadata.
#[derive(Debug, Clone)]
pub struct HParams {
    pub arch: Arch,
    /// The architecture's row of the table.
    pub spec: &'static ArchSpec,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_rot: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    pub rope_scale: f32,
    /// Rope base of the sliding-window (local) layers.
    pub rope_base_swa: f32,
    /// Window of local layers; 0 = none.
    pub n_swa: usize,
    /// Every `swa_pattern`-th layer is global.
    pub swa_pattern: usize,
}

impl HParams {
    pub fn from_gguf(g: &Gguf) -> Result<HParams> {
        let arch_name = g
            .architecture()
            .ok_or_else(|| Error::Model("no general.architecture".into()))?;
        let spec = ArchSpec::lookup(arch_name)?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let req = |k: &str| -> Result<usize> {
            g.get(&key(k))
                .and_then(|v| v.as_usize())
                .ok_or_else(|| Error::Model(format!("missing or invalid metadata {}", key(k))))
        };
        let opt_f = |k: &str, d: f32| g.get(&key(k)).and_then(|v| v.as_f32()).unwrap_or(d);
        let n_embd = req("embedding_length")?;
        let n_head = req("attention.head_count")?;
        if n_head == 0 || n_embd % n_head != 0 {
            return Err(Error::Model(format!(
                "n_embd {n_embd} not divisible by n_head {n_head}"
            )));
        }
        let n_head_kv = g
            .get(&key("attention.head_count_kv"))
            .and_then(|v| v.as_usize())
            .unwrap_or(n_head);
        if n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(Error::Model(format!(
                "n_head {n_head} not a multiple of n_head_kv {n_head_kv}"
            )));
        }
        let head_dim_k = g
            .get(&key("attention.key_length"))
            .and_then(|v| v.as_usize())
            .unwrap_or(n_embd / n_head);
        let head_dim_v = g
            .get(&key("attention.value_length"))
            .and_then(|v| v.as_usize())
            .unwrap_or(head_dim_k);
        let n_vocab = match g.get(&key("vocab_size")).and_then(|v| v.as_usize()) {
            Some(n) => n,
            None => g
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .map(|a| a.len())
                .ok_or_else(|| Error::Model("no vocab size".into()))?,
        };
        // Only families with a local/global pattern read the window: phi3 files name one that
        // llama.cpp ignores.
        let n_swa = if spec.swa_pattern > 0 {
            g.get(&key("attention.sliding_window"))
                .and_then(|v| v.as_usize())
                .unwrap_or(0)
        } else {
            0
        };
        // Linear scaling is the only kind the builder applies; YaRN or LongRoPE would run
        // silently wrong, so they are refused.
        if let Some(t) = g.get(&key("rope.scaling.type")).and_then(|v| v.as_str()) {
            if !matches!(t, "none" | "linear") {
                return Err(Error::Model(format!(
                    "rope scaling '{t}' is not supported (only linear)"
                )));
            }
        }
        let scale = g
            .get(&key("rope.scaling.factor"))
            .and_then(|v| v.as_f32())
            .filter(|&f| f > 0.0);
        let hp = HParams {
            arch: spec.arch,
            spec,
            n_vocab,
            n_ctx_train: req("context_length")?,
            n_embd,
            n_layer: req("block_count")?,
            n_ff: req("feed_forward_length")?,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            n_rot: g
                .get(&key("rope.dimension_count"))
                .and_then(|v| v.as_usize())
                .unwrap_or(head_dim_k),
            rms_eps: opt_f("attention.layer_norm_rms_epsilon", 1e-5),
            rope_base: opt_f("rope.freq_base", 10_000.0),
            rope_scale: scale.map_or(1.0, |f| 1.0 / f),
            rope_base_swa: spec.rope_base_swa,
            n_swa,
            swa_pattern: spec.swa_pattern,
        };
        hp.validate()?;
        Ok(hp)
    }

    /// Sizes the graph is built from stay far inside the address space (their products are
    /// taken unchecked later: head_dim × heads, rows × columns), and the floats are usable:
    /// metadata is outside data (found by fuzzing: head_dim_v × n_head_kv overflowed).
    fn validate(&self) -> Result<()> {
        const MAX_DIM: usize = 1 << 24;
        let dims = [
            ("embedding_length", self.n_embd),
            ("feed_forward_length", self.n_ff),
            ("vocab size", self.n_vocab),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim_k),
            ("attention.value_length", self.head_dim_v),
            ("rope.dimension_count", self.n_rot),
            (
                "attention.head_count × key_length",
                self.n_head.saturating_mul(self.head_dim_k),
            ),
            (
                "attention.head_count × value_length",
                self.n_head.saturating_mul(self.head_dim_v),
            ),
        ];
        for (what, n) in dims {
            if n > MAX_DIM {
                return Err(Error::Model(format!("{what} = {n} is beyond {MAX_DIM}")));
            }
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(Error::Model(format!("bad norm epsilon {}", self.rms_eps)));
        }
        for (what, x) in [
            ("rope.freq_base", self.rope_base),
            ("rope scale", self.rope_scale),
        ] {
            if !(x.is_finite() && x > 0.0) {
                return Err(Error::Model(format!("bad {what} {x}")));
            }
        }
        Ok(())
    }

    /// Is layer `il` a local (sliding-window) layer?
    pub fn is_swa(&self, il: usize) -> bool {
        self.n_swa > 0 && self.swa_pattern > 0 && il % self.swa_pattern < self.swa_pattern - 1
    }
}

/// The q/k/v projections: three matrices, or one fused `attn_qkv` whose rows are q, then k,
/// then v (phi3); each with an optional bias.
enum Qkv {
    Split {
        wq: TensorId,
        wk: TensorId,
        wv: TensorId,
        bq: Option<TensorId>,
        bk: Option<TensorId>,
        bv: Option<TensorId>,
    },
    Fused {
        w: TensorId,
        b: Option<TensorId>,
    },
}

/// The gated FFN's input side: separate gate and up, or one `ffn_up` of 2 * n_ff rows, gate
/// first (phi3).
enum FfnIn {
    Split { gate: TensorId, up: TensorId },
    Fused { up: TensorId },
}

struct Layer {
    attn_norm: TensorId,
    qkv: Qkv,
    wo: TensorId,
    bo: Option<TensorId>,
    q_norm: Option<TensorId>,
    k_norm: Option<TensorId>,
    post_attn_norm: Option<TensorId>,
    ffn_norm: TensorId,
    ffn_in: FfnIn,
    ffn_down: TensorId,
    post_ffn_norm: Option<TensorId>,
    k_cache: TensorId,
    v_cache: TensorId,
}

impl Layer {
    /// The weight whose buffer the layer's KV cache shares.
    fn attn_weight(&self) -> TensorId {
        match self.qkv {
            Qkv::Split { wq, .. } => wq,
            Qkv::Fused { w, .. } => w,
        }
    }
}

/// Bytes a model holds, by where they are (host memory, which in the browser is the wasm heap,
/// or device memory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelMemory {
    pub weights_host: u64,
    pub weights_device: u64,
    pub kv_host: u64,
    pub kv_device: u64,
}

impl ModelMemory {
    /// `bytes`: the file bytes kept (every weight buffer inside them is counted once, as them).
    fn of(
        weights: &[Arc<dyn Buffer>],
        kv: &[Arc<dyn Buffer>],
        bytes: &[Arc<dyn HostBytes>],
    ) -> ModelMemory {
        let mut m = ModelMemory {
            weights_host: bytes.iter().map(|b| b.bytes().len() as u64).sum(),
            ..ModelMemory::default()
        };
        let in_file = |p: *mut u8| {
            bytes.iter().any(|b| {
                let r = b.bytes().as_ptr_range();
                (r.start as usize..r.end as usize).contains(&(p as usize))
            })
        };
        for b in weights {
            match b.host_ptr() {
                Some(p) if in_file(p) => {}
                Some(_) => m.weights_host += b.size() as u64,
                None => m.weights_device += b.size() as u64,
            }
        }
        for b in kv {
            match b.host_ptr() {
                Some(_) => m.kv_host += b.size() as u64,
                None => m.kv_device += b.size() as u64,
            }
        }
        m
    }
}

/// A loaded language model with its KV cache and the backends it runs on.
pub struct LlamaModel {
    pub hp: HParams,
    pub n_ctx: usize,
    ctx: Context,
    tok_embd: TensorId,
    output_norm: TensorId,
    output: TensorId,
    output_b: Option<TensorId>,
    /// Llama-3 rope frequency factors (`rope_freqs.weight`, n_rot/2 values).
    rope_freqs: Option<TensorId>,
    layers: Vec<Layer>,
    mark: Mark,
    runner: Runner,
    /// Which backends run the model and where its weights are (for the CLI and the JS API).
    report: String,
    /// Tokens in the KV cache.
    n_past: usize,
    /// Where the last graph ran (GPU runs only: the browser and the CLI report it).
    last_placements: Option<crate::models::runner::Placements>,
    /// Attention as one FLASH_ATTN_EXT op: the default on CPUs with its fast kernels (the GPU
    /// backends have no such op yet).
    flash_attn: bool,
    /// Weights repacked for the CPU GEMV at load ([`LlamaModel::repacked_weights`]).
    repacked: usize,
    memory: ModelMemory,
    /// The buffers holding the weights (file-backed or streamed).
    _weights: Vec<Arc<dyn Buffer>>,
    _kv: Vec<Arc<dyn Buffer>>,
    /// The file bytes the weights are read from (one per part of a split model).
    _bytes: Vec<Arc<dyn HostBytes>>,
}

impl LlamaModel {
    /// Load from a GGUF file's bytes with a context of `n_ctx` tokens, on the CPU.
    pub fn from_bytes(
        bytes: Arc<dyn HostBytes>,
        n_ctx: usize,
        n_threads: usize,
    ) -> Result<LlamaModel> {
        let gguf = Gguf::parse(bytes.bytes())?;
        Self::from_gguf(bytes, &gguf, n_ctx, BackendChoice::Cpu, n_threads)
    }

    /// Load from a GGUF file's bytes and its parsed header, on the chosen backends.
    pub fn from_gguf(
        bytes: Arc<dyn HostBytes>,
        gguf: &Gguf,
        n_ctx: usize,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<LlamaModel> {
        Self::with_runner(bytes, gguf, n_ctx, Runner::new(backend, n_threads)?)
    }

    /// Load from a GGUF file's bytes and its parsed header onto `runner`'s backends.
    pub fn with_runner(
        bytes: Arc<dyn HostBytes>,
        gguf: &Gguf,
        n_ctx: usize,
        runner: Runner,
    ) -> Result<LlamaModel> {
        Self::with_runner_parts(&[(gguf, bytes)], n_ctx, runner)
    }

    /// Load from the parts of a split GGUF (headers and bytes, in order; the first holds the
    /// metadata) onto `runner`'s backends. One part is an ordinary file.
    pub fn with_runner_parts(
        parts: &[(&Gguf, Arc<dyn HostBytes>)],
        n_ctx: usize,
        runner: Runner,
    ) -> Result<LlamaModel> {
        let gguf = parts
            .first()
            .map(|p| p.0)
            .ok_or_else(|| Error::InvalidArgument("no model files".into()))?;
        let hp = HParams::from_gguf(gguf)?;
        let mut ctx = Context::new();
        let w = Weights::load_parts(&mut ctx, parts, Some(runner.weights_buffer_type()))?;
        let bytes = parts.iter().map(|p| p.1.clone()).collect();
        Self::assemble(ctx, w, hp, n_ctx, runner, bytes)
    }

    /// Build from weights already in their buffers (e.g. streamed there by a
    /// [`crate::models::weights::WeightsStream`] over `runner`'s weights buffer type; `ctx`
    /// describes them); `gguf` is the header of the (first) file.
    pub fn from_weights(
        ctx: Context,
        w: Weights,
        gguf: &Gguf,
        n_ctx: usize,
        runner: Runner,
    ) -> Result<LlamaModel> {
        let hp = HParams::from_gguf(gguf)?;
        Self::assemble(ctx, w, hp, n_ctx, runner, Vec::new())
    }

    /// The model over its weights (described in `ctx`); `bytes`: the file bytes they are read
    /// from in place, kept alive with the model.
    fn assemble(
        mut ctx: Context,
        w: Weights,
        hp: HParams,
        n_ctx: usize,
        runner: Runner,
        bytes: Vec<Arc<dyn HostBytes>>,
    ) -> Result<LlamaModel> {
        let n_ctx = n_ctx.clamp(1, hp.n_ctx_train.max(1));
        let spec = hp.spec;
        let opt = |name: &str| w.by_name.get(name).copied();
        // Required when the family says so, else used when present.
        let need = |name: &str, required: bool| -> Result<Option<TensorId>> {
            if required {
                w.get(name).map(Some)
            } else {
                Ok(opt(name))
            }
        };
        let tok_embd = w.get("token_embd.weight")?;
        let output_norm = w.get("output_norm.weight")?;
        let output = opt("output.weight").unwrap_or(tok_embd);
        let output_b = opt("output.bias");
        let rope_freqs = opt("rope_freqs.weight");
        if opt("rope_factors_long.weight").is_some()
            || opt("blk.0.rope_factors_long.weight").is_some()
        {
            return Err(Error::Model(
                "LongRoPE (rope_factors_long/short) is not supported".into(),
            ));
        }
        let n_embd_k = hp.head_dim_k * hp.n_head_kv;
        let n_embd_v = hp.head_dim_v * hp.n_head_kv;
        // Not sized by `block_count`: a file that claims 2^40 layers fails at its first missing
        // layer tensor instead of aborting on the allocation.
        let mut layers = Vec::new();
        let mut kv_ids = Vec::new();
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}.weight");
            let b = |s: &str| format!("blk.{il}.{s}.bias");
            // Head-major: each kv head's positions one after another (see `forward`).
            let k_cache = ctx.new_tensor_3d(DType::F16, hp.head_dim_k, n_ctx, hp.n_head_kv)?;
            let v_cache = ctx.new_tensor_3d(DType::F16, hp.head_dim_v, n_ctx, hp.n_head_kv)?;
            ctx.set_name(k_cache, &format!("cache_k_l{il}"))?;
            ctx.set_name(v_cache, &format!("cache_v_l{il}"))?;
            kv_ids.extend([k_cache, v_cache]);
            let qkv = match opt(&n("attn_qkv")) {
                Some(w) => Qkv::Fused {
                    w,
                    b: opt(&b("attn_qkv")),
                },
                None => Qkv::Split {
                    wq: w.get(&n("attn_q"))?,
                    wk: w.get(&n("attn_k"))?,
                    wv: w.get(&n("attn_v"))?,
                    bq: need(&b("attn_q"), spec.qkv_bias)?,
                    bk: need(&b("attn_k"), spec.qkv_bias)?,
                    bv: need(&b("attn_v"), spec.qkv_bias)?,
                },
            };
            let ffn_in = match opt(&n("ffn_gate")) {
                Some(gate) => FfnIn::Split {
                    gate,
                    up: w.get(&n("ffn_up"))?,
                },
                None => FfnIn::Fused {
                    up: w.get(&n("ffn_up"))?,
                },
            };
            let layer = Layer {
                attn_norm: w.get(&n("attn_norm"))?,
                qkv,
                wo: w.get(&n("attn_output"))?,
                bo: opt(&b("attn_output")),
                q_norm: need(&n("attn_q_norm"), spec.qk_norm)?,
                k_norm: need(&n("attn_k_norm"), spec.qk_norm)?,
                post_attn_norm: need(&n("post_attention_norm"), spec.post_norms)?,
                ffn_norm: w.get(&n("ffn_norm"))?,
                ffn_in,
                ffn_down: w.get(&n("ffn_down"))?,
                post_ffn_norm: need(&n("post_ffw_norm"), spec.post_norms)?,
                k_cache,
                v_cache,
            };
            // Shapes: checked once here so a malformed file fails at load, not in a kernel.
            let expect = |id: TensorId, ne0: usize, ne1: usize| -> Result<()> {
                let t = ctx.tensor(id);
                if t.ne[0] != ne0 || t.ne[1] != ne1 {
                    return Err(Error::Model(format!(
                        "tensor '{}' has shape {:?}, expected [{ne0}, {ne1}]",
                        t.name,
                        &t.ne[..2]
                    )));
                }
                Ok(())
            };
            let expect_len = |id: Option<TensorId>, n: usize| -> Result<()> {
                match id {
                    Some(id) => expect(id, n, 1),
                    None => Ok(()),
                }
            };
            let n_embd_q = hp.head_dim_k * hp.n_head;
            match layer.qkv {
                Qkv::Split {
                    wq,
                    wk,
                    wv,
                    bq,
                    bk,
                    bv,
                } => {
                    expect(wq, hp.n_embd, n_embd_q)?;
                    expect(wk, hp.n_embd, n_embd_k)?;
                    expect(wv, hp.n_embd, n_embd_v)?;
                    expect_len(bq, n_embd_q)?;
                    expect_len(bk, n_embd_k)?;
                    expect_len(bv, n_embd_v)?;
                }
                Qkv::Fused { w, b } => {
                    expect(w, hp.n_embd, n_embd_q + n_embd_k + n_embd_v)?;
                    expect_len(b, n_embd_q + n_embd_k + n_embd_v)?;
                }
            }
            expect(layer.wo, hp.head_dim_v * hp.n_head, hp.n_embd)?;
            expect_len(layer.bo, hp.n_embd)?;
            expect_len(layer.q_norm, hp.head_dim_k)?;
            expect_len(layer.k_norm, hp.head_dim_k)?;
            match layer.ffn_in {
                FfnIn::Split { gate, up } => {
                    expect(gate, hp.n_embd, hp.n_ff)?;
                    expect(up, hp.n_embd, hp.n_ff)?;
                }
                FfnIn::Fused { up } => expect(up, hp.n_embd, 2 * hp.n_ff)?,
            }
            expect(layer.ffn_down, hp.n_ff, hp.n_embd)?;
            layers.push(layer);
        }
        for (what, id, n) in [
            ("output.bias", output_b, hp.n_vocab),
            ("rope_freqs", rope_freqs, hp.n_rot / 2),
        ] {
            if let Some(id) = id {
                let t = ctx.tensor(id);
                if t.ne != [n, 1, 1, 1] || t.dtype != DType::F32 {
                    return Err(Error::Model(format!(
                        "{what} has shape {:?} ({}), expected [{n}] f32",
                        t.ne, t.dtype
                    )));
                }
            }
        }
        // The embedding too: a wrong one gave NaN logits, not an error.
        for (what, id) in [("token_embd", tok_embd), ("output", output)] {
            let t = ctx.tensor(id);
            if t.ne[0] != hp.n_embd || t.ne[1] != hp.n_vocab || t.ne[2] * t.ne[3] != 1 {
                return Err(Error::Model(format!(
                    "{what} has shape {:?}, expected [{}, {}]",
                    t.ne, hp.n_embd, hp.n_vocab
                )));
            }
        }
        // Each layer's cache goes where its attention weights are, one buffer per buffer type.
        // Marked as weights so the scheduler runs the ops that read it there too.
        let mut groups: Vec<(Arc<dyn BufferType>, Vec<TensorId>)> = Vec::new();
        for (l, pair) in layers.iter().zip(kv_ids.chunks(2)) {
            let buft = ctx
                .tensor(l.attn_weight())
                .data
                .as_ref()
                .map(|d| d.buffer.buffer_type())
                .ok_or_else(|| Error::Model("attention weight without data".into()))?;
            match groups.iter_mut().find(|(b, _)| b.id() == buft.id()) {
                Some((_, ids)) => ids.extend_from_slice(pair),
                None => groups.push((buft, pair.to_vec())),
            }
        }
        let mut kv = Vec::with_capacity(groups.len());
        for (buft, ids) in &groups {
            let b = crate::alloc::alloc_tensors(&mut ctx, ids, buft)?
                .ok_or_else(|| Error::Model("empty KV cache".into()))?;
            b.set_usage(BufferUsage::Weights);
            kv.push(b);
        }
        let mut report = runner.report.clone();
        if !w.on_host.is_empty() {
            report.push_str(&format!("; kept in CPU memory: {}", w.on_host.join(", ")));
        }
        let mark = ctx.mark();
        let runner_gpu = runner.gpu;
        let mut model = LlamaModel {
            hp,
            n_ctx,
            ctx,
            tok_embd,
            output_norm,
            output,
            output_b,
            rope_freqs,
            layers,
            mark,
            runner,
            report,
            n_past: 0,
            last_placements: None,
            flash_attn: !runner_gpu && crate::backend::cpu::arch::fused_attention_pays(),
            repacked: 0,
            memory: ModelMemory::of(&w.buffers, &kv, &bytes),
            _weights: w.buffers,
            _kv: kv,
            _bytes: bytes,
        };
        if !runner_gpu {
            model.repack_weights_where(crate::backend::cpu::repack::pays_for)?;
        }
        Ok(model)
    }

    /// How many weights are repacked for the CPU GEMV (`backend::cpu::repack`). At load, on the
    /// CPU and from writable memory (not a mapped file: see [`LlamaModel::open_repacked`]),
    /// every matrix the graphs read only through mul_mat or get_rows whose type this CPU's GEMV
    /// reads repacked (`repack::pays_for`: all of them in the wasm SIMD builds, q4_0 q4_1 q5_0
    /// q5_1 on x86 with AVX-512 VNNI or AVX2, q8_0 with AVX-512 VNNI or AVX-VNNI); 0 elsewhere.
    pub fn repacked_weights(&self) -> usize {
        self.repacked
    }

    /// Repack for the CPU GEMV (`backend::cpu::repack`) every weight that the model's graphs
    /// read as mul_mat's src0 and otherwise only as get_rows' (never through a view: phi3's
    /// fused QKV stays plain; a token embedding only looked up, never multiplied, stays plain
    /// too: a private mapping pages it in a row at a time), as found in the graphs of one and
    /// of two tokens, and that lives in writable host memory (not a shared mapping). Returns
    /// how many were. Loading does this by itself for the types where it pays; results are the
    /// same bits either way.
    pub fn repack_weights(&mut self) -> Result<usize> {
        self.repack_weights_where(|_| true)
    }

    /// [`LlamaModel::repack_weights`] of the weights whose type `keep` accepts.
    fn repack_weights_where(&mut self, keep: impl Fn(DType) -> bool) -> Result<usize> {
        // Every tensor described before the graphs: the weights and the KV cache (f16, which
        // is never repacked).
        let mut ok: std::collections::HashMap<TensorId, bool> =
            self.ctx.ids().map(|id| (id, true)).collect();
        let mut multiplied = std::collections::HashSet::new();
        for n in [1, 2.min(self.n_ctx)] {
            let first = self.ctx.ids().count();
            let built = self.build(n, false);
            for id in self.ctx.ids().skip(first) {
                let t = self.ctx.tensor(id);
                if let Some(v) = t.view_src.and_then(|v| ok.get_mut(&v)) {
                    *v = false;
                }
                for (slot, src) in t.src.iter().enumerate() {
                    let Some(v) = src.and_then(|s| ok.get_mut(&s)) else {
                        continue;
                    };
                    if slot != 0 || !matches!(t.op, Op::MulMat | Op::GetRows) {
                        *v = false;
                    } else if t.op == Op::MulMat {
                        multiplied.insert(*src);
                    }
                }
            }
            self.ctx.reset_to(self.mark);
            if built.is_err() {
                // (The first eval reports it.) Nothing repacked: plain weights always work.
                return Ok(0);
            }
        }
        let mut n = 0;
        for (&id, &fine) in &ok {
            if fine
                && multiplied.contains(&Some(id))
                && keep(self.ctx.tensor(id).dtype)
                && crate::backend::cpu::repack::repack_tensor(&mut self.ctx, id)?
            {
                n += 1;
            }
        }
        self.repacked += n;
        Ok(n)
    }

    /// Open a GGUF file (memory-mapped), on the CPU.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &std::path::Path, n_ctx: usize, n_threads: usize) -> Result<LlamaModel> {
        Self::open_with(path, n_ctx, BackendChoice::Cpu, n_threads)
    }

    /// Map a GGUF file private (copy-on-write) and load it on the CPU, its weights repacked in
    /// place where this CPU's GEMV reads them so ([`LlamaModel::repacked_weights`]; as
    /// llama.cpp's CPU "repack" buffers): one sequential stream per four rows instead of four.
    /// Where Linux has transparent huge pages, the weights the graphs multiply are read into
    /// memory at open, on huge pages (`GgufFile::open_private_with`: a token embedding only
    /// looked up stays mapped), which every token's GEMVs stream with 512× fewer page walks.
    /// Otherwise only the rewritten pages become this process's memory; the file is never
    /// written. A split model, or a CPU without such a GEMV and without THP, is opened as
    /// [`LlamaModel::open`] does: the same results either way.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_repacked(
        path: &std::path::Path,
        n_ctx: usize,
        n_threads: usize,
    ) -> Result<LlamaModel> {
        match Self::open_for_repack(path)? {
            Some(f) => Self::from_gguf(f.clone(), f.header(), n_ctx, BackendChoice::Cpu, n_threads),
            None => Self::open(path, n_ctx, n_threads),
        }
    }

    /// The GGUF file at `path` mapped private (copy-on-write: `GgufFile::open_private_with`,
    /// the multiplied weights read into memory on huge pages where Linux has them) when
    /// repacking its weights or huge pages could pay (this CPU's GEMV reads some type repacked,
    /// or THP is on) and it is not part of a split model; None otherwise.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn open_for_repack(
        path: &std::path::Path,
    ) -> Result<Option<Arc<crate::gguf::GgufFile>>> {
        let any = [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
        ]
        .into_iter()
        .any(crate::backend::cpu::repack::pays_for);
        if !any && !crate::hugepage::available() {
            return Ok(None);
        }
        let file = crate::gguf::GgufFile::open_private_with(path, |g| {
            // (A split model is opened another way: nothing read.)
            if !matches!(crate::models::split::split_of(g), Ok(None)) {
                return Vec::new();
            }
            let tied = g.tensor("output.weight").is_none();
            g.tensors
                .iter()
                .map(|t| multiplied(tied, &t.name))
                .collect()
        })?;
        if crate::models::split::split_of(file.header())?.is_some() {
            return Ok(None);
        }
        Ok(Some(Arc::new(file)))
    }

    /// Open a GGUF file (memory-mapped) on the chosen backends; the first part of a split
    /// model (`*-00001-of-0000N.gguf`) opens all its parts.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_with(
        path: &std::path::Path,
        n_ctx: usize,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<LlamaModel> {
        let files = crate::models::split::open_parts(path)?;
        Self::from_files(&files, n_ctx, backend, n_threads)
    }

    /// Load from opened files (one, or the parts of a split model) on the chosen backends.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_files(
        files: &[Arc<crate::gguf::GgufFile>],
        n_ctx: usize,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<LlamaModel> {
        let parts: Vec<(&Gguf, Arc<dyn HostBytes>)> = files
            .iter()
            .map(|f| (f.header(), f.clone() as Arc<dyn HostBytes>))
            .collect();
        Self::with_runner_parts(&parts, n_ctx, Runner::new(backend, n_threads)?)
    }

    /// Which backends run the model (the adapter, the f16/f32 path) and where weights are.
    pub fn backend_report(&self) -> &str {
        &self.report
    }

    /// True when a GPU backend is in use.
    pub fn uses_gpu(&self) -> bool {
        self.runner.gpu
    }

    /// Attention as one fused op (the default on x86-64 CPUs) or as mul_mat + soft_max + mul_mat
    /// (the only way on a GPU backend: asking for the fused op there is an `UnsupportedOp`).
    pub fn set_flash_attn(&mut self, on: bool) -> Result<()> {
        if on && self.runner.gpu {
            return Err(Error::UnsupportedOp(
                "FLASH_ATTN_EXT on a GPU backend (its kernels are not written yet)".into(),
            ));
        }
        self.flash_attn = on;
        Ok(())
    }

    /// Whether attention runs as one fused op.
    pub fn flash_attn(&self) -> bool {
        self.flash_attn
    }

    /// The WebGPU device in use, if any.
    #[cfg(feature = "webgpu")]
    pub fn webgpu_device(&self) -> Option<&Arc<crate::backend::webgpu::WebGpuDevice>> {
        self.runner.webgpu.as_ref()
    }

    /// Print the scheduler's splits and placement reasons (also `GGWEB_SCHED_DEBUG=1`).
    pub fn set_sched_debug(&mut self, on: bool) {
        self.runner.set_debug(on);
    }

    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Forget the KV cache (a new conversation).
    pub fn reset(&mut self) {
        self.n_past = 0;
    }

    /// Drop cached tokens after `n` (to rewind a conversation).
    pub fn truncate(&mut self, n: usize) {
        self.n_past = self.n_past.min(n);
    }

    pub fn set_n_threads(&mut self, n: usize) {
        self.runner.set_n_threads(n);
    }

    /// Where the weights and the KV cache are, in bytes.
    pub fn memory(&self) -> ModelMemory {
        self.memory
    }

    /// Bytes of the compute buffers planned so far in host memory and in device memory.
    pub fn compute_bytes_by_place(&self) -> (usize, usize) {
        self.runner.buffer_bytes_by_place()
    }

    /// Peak bytes of the compute buffers planned so far (all backends).
    pub fn compute_buffer_size(&self) -> usize {
        self.runner.buffer_sizes().iter().sum()
    }

    /// Run `tokens` after the cached ones; returns logits for every new position
    /// (`all_logits`) or only the last one, `n_vocab` values per position.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        self.check_tokens(tokens)?;
        let r = self.prepare(tokens, all_logits).and_then(|logits| {
            self.runner.compute(&self.ctx)?;
            self.ctx.get_f32(logits)
        });
        self.ctx.reset_to(self.mark);
        let out = r?;
        self.n_past += tokens.len();
        Ok(out)
    }

    /// [`LlamaModel::eval`] for the browser: the copies out of WebGPU memory and the logits are
    /// read with `map_async` (the page cannot block on the GPU).
    #[cfg(feature = "webgpu")]
    pub async fn eval_async(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        self.check_tokens(tokens)?;
        let r = match self.prepare(tokens, all_logits) {
            Ok(logits) => match self.runner.compute_async(&self.ctx).await {
                Ok(()) => self.ctx.get_f32_async(logits).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        self.ctx.reset_to(self.mark);
        let out = r?;
        self.n_past += tokens.len();
        Ok(out)
    }

    /// Where the nodes of the last evaluated graph ran (see [`Runner::placements`]). The graph's
    /// tensors are gone after `eval`, so this is kept from the last evaluation.
    pub fn last_placements(&self) -> Option<&crate::models::runner::Placements> {
        self.last_placements.as_ref()
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("eval of zero tokens".into()));
        }
        if self.n_past + tokens.len() > self.n_ctx {
            return Err(Error::InvalidArgument(format!(
                "context full: {} cached + {} new tokens > n_ctx {}",
                self.n_past,
                tokens.len(),
                self.n_ctx
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.hp.n_vocab) {
            return Err(Error::InvalidArgument(format!(
                "token id {bad} >= vocab size {}",
                self.hp.n_vocab
            )));
        }
        Ok(())
    }

    /// Build, place and allocate the graph of `tokens` and set its inputs; returns the logits
    /// tensor (compute, read, then reset the context to `mark`).
    fn prepare(&mut self, tokens: &[u32], all_logits: bool) -> Result<TensorId> {
        let n_tokens = tokens.len();
        let n_past = self.n_past;
        let n_kv = n_past + n_tokens;
        let g = self.build(n_tokens, all_logits)?;
        let mut outputs = g.order.clone();
        outputs.push(g.logits);
        let graph = Graph::build(&self.ctx, &outputs);
        self.runner.alloc(&mut self.ctx, &graph)?;
        if self.runner.gpu {
            self.last_placements = Some(self.runner.placements(&self.ctx));
        }
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        self.ctx.set_i32(g.tokens, &ids)?;
        let pos: Vec<i32> = (n_past..n_kv).map(|p| p as i32).collect();
        self.ctx.set_i32(g.pos, &pos)?;
        for (mask, swa) in [(Some(g.mask), false), (g.mask_swa, true)] {
            let Some(mask) = mask else { continue };
            let mut m = vec![f32::NEG_INFINITY; n_kv * n_tokens];
            for (i, row) in m.chunks_mut(n_kv).enumerate() {
                let pq = n_past + i;
                for (pk, v) in row.iter_mut().enumerate() {
                    let causal = pk <= pq;
                    let in_window = !swa || pq - pk.min(pq) < self.hp.n_swa;
                    if causal && in_window {
                        *v = 0.0;
                    }
                }
            }
            self.ctx.set_f32(mask, &m)?;
        }
        Ok(g.logits)
    }

    fn build(&mut self, n_tokens: usize, all_logits: bool) -> Result<Built> {
        let hp = self.hp.clone();
        let ctx = &mut self.ctx;
        let n_past = self.n_past;
        let n_kv = n_past + n_tokens;
        let spec = hp.spec;

        let tokens = ctx.new_tensor_1d(DType::I32, n_tokens)?;
        ctx.set_name(tokens, "inp_tokens")?;
        ctx.set_input(tokens);
        let pos = ctx.new_tensor_1d(DType::I32, n_tokens)?;
        ctx.set_name(pos, "inp_pos")?;
        ctx.set_input(pos);
        let mask = ctx.new_tensor_2d(DType::F32, n_kv, n_tokens)?;
        ctx.set_name(mask, "kq_mask")?;
        ctx.set_input(mask);
        let mask_swa = if hp.n_swa > 0 {
            let m = ctx.new_tensor_2d(DType::F32, n_kv, n_tokens)?;
            ctx.set_name(m, "kq_mask_swa")?;
            ctx.set_input(m);
            Some(m)
        } else {
            None
        };

        let mut order = Vec::with_capacity(5 * hp.n_layer);
        let mut x = ctx.get_rows(self.tok_embd, tokens)?;
        if spec.embd_scale {
            x = ctx.scale(x, (hp.n_embd as f32).sqrt())?;
        }
        let (dk, dv) = (hp.head_dim_k, hp.head_dim_v);
        let kq_scale = 1.0 / (dk as f32).sqrt();
        for (il, l) in self.layers.iter().enumerate() {
            let inp = x;
            let cur = ctx.rms_norm(x, hp.rms_eps)?;
            let cur = ctx.mul(cur, l.attn_norm)?;

            let n_embd_q = dk * hp.n_head;
            let (n_embd_k, n_embd_v) = (dk * hp.n_head_kv, dv * hp.n_head_kv);
            let with_bias = |ctx: &mut Context, y: TensorId, b: Option<TensorId>| match b {
                Some(b) => ctx.add(y, b),
                None => Ok(y),
            };
            let (q, k, v) = match l.qkv {
                Qkv::Split {
                    wq,
                    wk,
                    wv,
                    bq,
                    bk,
                    bv,
                } => {
                    let q = ctx.mul_mat(wq, cur)?;
                    let q = with_bias(ctx, q, bq)?;
                    let k = ctx.mul_mat(wk, cur)?;
                    let k = with_bias(ctx, k, bk)?;
                    let v = ctx.mul_mat(wv, cur)?;
                    let v = with_bias(ctx, v, bv)?;
                    (q, k, v)
                }
                Qkv::Fused { w, b } => {
                    let qkv = ctx.mul_mat(w, cur)?;
                    let qkv = with_bias(ctx, qkv, b)?;
                    // Row slices, made contiguous so every later op sees plain rows.
                    let row = ctx.tensor(qkv).nb[1];
                    let f = DType::F32.type_size();
                    let q = ctx.view(qkv, &[n_embd_q, n_tokens], &[row], 0)?;
                    let k = ctx.view(qkv, &[n_embd_k, n_tokens], &[row], n_embd_q * f)?;
                    let v = ctx.view(
                        qkv,
                        &[n_embd_v, n_tokens],
                        &[row],
                        (n_embd_q + n_embd_k) * f,
                    )?;
                    (ctx.cont(q)?, ctx.cont(k)?, ctx.cont(v)?)
                }
            };
            // The three products first in the graph, then the K/V stores (see `Built::order`).
            order.extend([k, v, q]);
            let mut q = ctx.reshape(q, &[dk, hp.n_head, n_tokens])?;
            let mut k = ctx.reshape(k, &[dk, hp.n_head_kv, n_tokens])?;
            if let Some(qn) = l.q_norm {
                q = ctx.rms_norm(q, hp.rms_eps)?;
                q = ctx.mul(q, qn)?;
            }
            if let Some(kn) = l.k_norm {
                k = ctx.rms_norm(k, hp.rms_eps)?;
                k = ctx.mul(k, kn)?;
            }
            let swa = hp.is_swa(il);
            let base = if swa { hp.rope_base_swa } else { hp.rope_base };
            let mut rp = RopeParams::new(hp.n_rot, spec.rope, base);
            rp.n_ctx_orig = hp.n_ctx_train;
            if !swa {
                rp.freq_scale = hp.rope_scale;
            }
            let q = ctx.rope_ext(q, pos, self.rope_freqs, rp)?;
            let k = ctx.rope_ext(k, pos, self.rope_freqs, rp)?;

            // Store the new K and V rows in the cache (f16), at positions n_past..n_kv. The cache
            // is head-major ([d, n_ctx, n_head_kv]), not a row of all heads per position as
            // llama.cpp's: a generated token's attention reads each kv head's positions as one
            // stream, which the hardware prefetchers follow; rows n_head_kv · d apart they did
            // not (`ggweb bench --attention`, SmolLM2 at 1024 positions: 3.2 GB/s of KV against
            // 6.1 for gemma3's single kv head).
            let n_cache = ctx.tensor(l.k_cache).ne[1];
            let nh = hp.n_head_kv;
            // This step's rows of a cache of head size d, and the cache's first n_kv positions.
            let store = |ctx: &mut Context, cache: TensorId, x: TensorId, d: usize| {
                let h = 2 * d;
                let dst = ctx.view(cache, &[d, nh, n_tokens], &[h * n_cache, h], n_past * h)?;
                let src = ctx.reshape(x, &[d, nh, n_tokens])?;
                ctx.cpy(src, dst)
            };
            let cached = |ctx: &mut Context, cache: TensorId, d: usize| {
                ctx.view(cache, &[d, n_kv, nh], &[2 * d, 2 * d * n_cache], 0)
            };
            let k_store = store(ctx, l.k_cache, k, dk)?;
            let v_store = store(ctx, l.v_cache, v, dv)?;

            // Attention over all cached positions. The stores are expanded into the graph before
            // the logits (as llama.cpp does), so they run before these reads of the cache.
            order.extend([k_store, v_store]);
            let kc = cached(ctx, l.k_cache, dk)?;
            let vc = cached(ctx, l.v_cache, dv)?;
            let qp = ctx.permute(q, [0, 2, 1, 3])?; // [dk, n_tokens, n_head]
            let m = if swa { mask_swa.unwrap_or(mask) } else { mask };
            // gemma3 scales q by 1/sqrt(head_dim) before attention: the same as scaling here.
            let kqv = if self.flash_attn {
                // One pass over the f16 cache: no scores tensor, no f32 copy of V.
                let o = ctx.flash_attn_ext(qp, kc, vc, Some(m), kq_scale, 0.0, 0.0)?;
                ctx.reshape(o, &[dv * hp.n_head, n_tokens])?
            } else {
                let kq = ctx.mul_mat(kc, qp)?; // [n_kv, n_tokens, n_head]
                let kq = ctx.soft_max_ext(kq, Some(m), kq_scale, 0.0)?;
                let vt = ctx.transpose(vc)?; // [n_kv, dv, n_head_kv]
                                             // f32 so the softmax weights are not rounded to f16 (as flash attention keeps them).
                let vt = ctx.cast(vt, DType::F32)?;
                let kqv = ctx.mul_mat(vt, kq)?; // [dv, n_tokens, n_head]
                let kqv = ctx.permute(kqv, [0, 2, 1, 3])?; // [dv, n_head, n_tokens]
                let kqv = ctx.cont(kqv)?;
                ctx.reshape(kqv, &[dv * hp.n_head, n_tokens])?
            };
            let cur = ctx.mul_mat(l.wo, kqv)?;
            let mut cur = with_bias(ctx, cur, l.bo)?;
            if let Some(pn) = l.post_attn_norm {
                cur = ctx.rms_norm(cur, hp.rms_eps)?;
                cur = ctx.mul(cur, pn)?;
            }
            let sa = ctx.add(cur, inp)?;

            let cur = ctx.rms_norm(sa, hp.rms_eps)?;
            let cur = ctx.mul(cur, l.ffn_norm)?;
            let (gate, up) = match l.ffn_in {
                FfnIn::Split { gate, up } => (ctx.mul_mat(gate, cur)?, ctx.mul_mat(up, cur)?),
                FfnIn::Fused { up } => {
                    let y = ctx.mul_mat(up, cur)?;
                    let row = ctx.tensor(y).nb[1];
                    let half = hp.n_ff * DType::F32.type_size();
                    let g = ctx.view(y, &[hp.n_ff, n_tokens], &[row], 0)?;
                    let u = ctx.view(y, &[hp.n_ff, n_tokens], &[row], half)?;
                    (ctx.cont(g)?, ctx.cont(u)?)
                }
            };
            let act = match spec.act {
                Act::Gelu => ctx.gelu(gate)?,
                Act::Silu => ctx.silu(gate)?,
            };
            // (up, act): the graph then holds up's product before gate's activation, so both
            // products run before one barrier (same bits: the product commutes).
            let h = ctx.mul(up, act)?;
            let mut cur = ctx.mul_mat(l.ffn_down, h)?;
            if let Some(pn) = l.post_ffn_norm {
                cur = ctx.rms_norm(cur, hp.rms_eps)?;
                cur = ctx.mul(cur, pn)?;
            }
            x = ctx.add(cur, sa)?;
        }
        if !all_logits && n_tokens > 1 {
            let row = ctx.tensor(x).nb[1];
            x = ctx.view(x, &[hp.n_embd, 1], &[row], (n_tokens - 1) * row)?;
        }
        let x = ctx.rms_norm(x, hp.rms_eps)?;
        let x = ctx.mul(x, self.output_norm)?;
        let logits = ctx.mul_mat(self.output, x)?;
        let logits = match self.output_b {
            Some(b) => ctx.add(logits, b)?,
            None => logits,
        };
        ctx.set_name(logits, "logits")?;
        ctx.set_output(logits);
        Ok(Built {
            tokens,
            pos,
            mask,
            mask_swa,
            logits,
            order,
        })
    }
}

struct Built {
    tokens: TensorId,
    pos: TensorId,
    mask: TensorId,
    mask_swa: Option<TensorId>,
    logits: TensorId,
    /// Expanded into the graph in this order before the logits: per layer its K, V and Q
    /// products, then its KV-cache stores (which must run before the cache's reads). The
    /// products side by side need one barrier between threads, not one each (the depth-first
    /// order put each product right before its own rope and store, which thread 0 runs alone).
    order: Vec<TensorId>,
}

/// Whether tensor `name` of a llama-family GGUF is a weight its graphs multiply (read whole
/// every token, so worth reading into memory at open: `GgufFile::open_private_with`) rather
/// than an embedding only looked up a row at a time: the token embedding unless `tied` (the
/// file has no output matrix of its own), position and token-type embeddings.
#[cfg(not(target_arch = "wasm32"))]
fn multiplied(tied: bool, name: &str) -> bool {
    let lookup = (name.starts_with("token_embd.") && !tied)
        || name.starts_with("position_embd.")
        || name.starts_with("token_types.");
    !lookup
}
