//! BERT sentence embeddings (llama.cpp's `bert` architecture): a non-causal encoder over
//! WordPiece tokens with `[CLS]`/`[SEP]`, absolute position and token-type embeddings, post-norm
//! layers (LayerNorm after each residual) and a GELU feed-forward. The last hidden states are
//! pooled as `bert.pooling_type` says (mean, CLS, last token) and L2-normalised, as
//! llama.cpp's `llama-embedding` does by default.
//!
//! Each text is one graph of its own tokens (no padding, so no attention mask is needed).

use std::sync::Arc;

use crate::backend::cpu::HostBytes;
use crate::context::Mark;
use crate::gguf::Gguf;
use crate::models::runner::{BackendChoice, Runner};
use crate::models::tokenizer::Tokenizer;
use crate::models::weights::Weights;
use crate::{Context, DType, Error, Graph, Result, TensorId};

/// How token states become one vector (`bert.pooling_type`, llama.cpp's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// No pooling: one vector per token ([`Embedder::token_embeddings`]).
    None,
    Mean,
    /// The first token's state (`[CLS]`).
    Cls,
    Last,
}

impl Pooling {
    fn from_id(v: usize) -> Result<Pooling> {
        Ok(match v {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            other => {
                return Err(Error::Model(format!(
                    "unsupported bert.pooling_type {other} (0 none, 1 mean, 2 cls, 3 last)"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

impl std::str::FromStr for Pooling {
    type Err = Error;
    fn from_str(s: &str) -> Result<Pooling> {
        Ok(match s {
            "none" => Pooling::None,
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown pooling '{other}' (none, mean, cls or last)"
                )))
            }
        })
    }
}

/// Hyper-parameters read from the `bert.*` keys.
#[derive(Clone, Debug)]
pub struct BertParams {
    pub n_embd: usize,
    pub n_head: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
    /// Longest input (position table size).
    pub n_ctx_train: usize,
    pub eps: f32,
    pub pooling: Pooling,
}

impl BertParams {
    pub fn from_gguf(g: &Gguf) -> Result<BertParams> {
        match g.architecture() {
            Some("bert") => {}
            other => {
                return Err(Error::Model(format!(
                    "not a BERT embedding model: architecture {:?} (supported: bert)",
                    other.unwrap_or("")
                )))
            }
        }
        let req = |k: &str| -> Result<usize> {
            g.get(&format!("bert.{k}"))
                .and_then(|v| v.as_usize())
                .ok_or_else(|| Error::Model(format!("missing or invalid metadata bert.{k}")))
        };
        let n_embd = req("embedding_length")?;
        let n_head = req("attention.head_count")?;
        if n_head == 0 || n_embd % n_head != 0 {
            return Err(Error::Model(format!(
                "n_embd {n_embd} not divisible by n_head {n_head}"
            )));
        }
        if g.get("bert.attention.causal")
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
        {
            return Err(Error::Model(
                "causal BERT attention is not supported (bert.attention.causal)".into(),
            ));
        }
        let pooling = match g.get("bert.pooling_type").and_then(|v| v.as_usize()) {
            Some(v) => Pooling::from_id(v)?,
            None => Pooling::Mean,
        };
        Ok(BertParams {
            n_embd,
            n_head,
            n_layer: req("block_count")?,
            n_ff: req("feed_forward_length")?,
            n_vocab: 0,
            n_ctx_train: req("context_length")?,
            eps: g
                .get("bert.attention.layer_norm_epsilon")
                .and_then(|v| v.as_f32())
                .unwrap_or(1e-12),
            pooling,
        })
    }
}

/// A weight and its bias.
#[derive(Clone, Copy)]
struct Affine {
    w: TensorId,
    b: TensorId,
}

struct Layer {
    q: Affine,
    k: Affine,
    v: Affine,
    o: Affine,
    attn_norm: Affine,
    up: Affine,
    down: Affine,
    out_norm: Affine,
}

/// A loaded BERT embedding model with its tokenizer.
pub struct Embedder {
    pub hp: BertParams,
    pub tokenizer: Tokenizer,
    ctx: Context,
    runner: Runner,
    tok_embd: TensorId,
    pos_embd: TensorId,
    type_embd: TensorId,
    embd_norm: Affine,
    layers: Vec<Layer>,
    mark: Mark,
    _weights: Weights,
    /// The file bytes the weights are read from (one per part of a split model).
    _bytes: Vec<Arc<dyn HostBytes>>,
}

struct Built {
    tokens: TensorId,
    pos: TensorId,
    types: TensorId,
    out: TensorId,
}

impl Embedder {
    /// Open a GGUF file (memory-mapped), on the CPU.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &std::path::Path) -> Result<Embedder> {
        let n_threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::open_with(path, BackendChoice::Cpu, n_threads)
    }

    /// Open a GGUF file (memory-mapped) on the chosen backends; the first part of a split model
    /// (`*-00001-of-0000N.gguf`) opens the others too.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_with(
        path: &std::path::Path,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<Embedder> {
        let files = crate::models::split::open_parts(path)?;
        let parts: Vec<(&Gguf, Arc<dyn HostBytes>)> = files
            .iter()
            .map(|f| (f.header(), f.clone() as Arc<dyn HostBytes>))
            .collect();
        Self::from_parts(&parts, backend, n_threads)
    }

    /// Load from a GGUF file's bytes, on the CPU.
    pub fn from_bytes(bytes: Arc<dyn HostBytes>, n_threads: usize) -> Result<Embedder> {
        let gguf = Gguf::parse(bytes.bytes())?;
        Self::from_gguf(bytes, &gguf, BackendChoice::Cpu, n_threads)
    }

    /// Load from a GGUF file's bytes and its parsed header.
    pub fn from_gguf(
        bytes: Arc<dyn HostBytes>,
        gguf: &Gguf,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<Embedder> {
        Self::from_parts(&[(gguf, bytes)], backend, n_threads)
    }

    /// Load from the files of a model (one, or the parts of a split GGUF in order, each with
    /// its parsed header; the first holds the metadata). The parts' `split.*` keys are checked.
    pub fn from_parts(
        parts: &[(&Gguf, Arc<dyn HostBytes>)],
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<Embedder> {
        let headers: Vec<&Gguf> = parts.iter().map(|p| p.0).collect();
        crate::models::split::check_parts(&headers)?;
        let gguf = *headers
            .first()
            .ok_or_else(|| Error::InvalidArgument("no model files".into()))?;
        let mut hp = BertParams::from_gguf(gguf)?;
        let tokenizer = Tokenizer::from_gguf(gguf)?;
        let runner = Runner::new(backend, n_threads)?;
        let mut ctx = Context::new();
        let w = Weights::load_parts(&mut ctx, parts, Some(runner.weights_buffer_type()))?;
        let aff = |name: &str| -> Result<Affine> {
            Ok(Affine {
                w: w.get(&format!("{name}.weight"))?,
                b: w.get(&format!("{name}.bias"))?,
            })
        };
        let tok_embd = w.get("token_embd.weight")?;
        let pos_embd = w.get("position_embd.weight")?;
        let type_embd = w.get("token_types.weight")?;
        let embd_norm = aff("token_embd_norm")?;
        let (n_embd, n_ff) = (hp.n_embd, hp.n_ff);
        let shape = |ctx: &Context, id: TensorId, ne0: usize, ne1: usize| -> Result<()> {
            let t = ctx.tensor(id);
            if t.ne[0] != ne0 || (ne1 > 0 && t.ne[1] != ne1) || t.ne[2] * t.ne[3] != 1 {
                return Err(Error::Model(format!(
                    "tensor '{}' has shape {:?}, expected [{ne0}, {ne1}]",
                    t.name,
                    &t.ne[..2]
                )));
            }
            Ok(())
        };
        shape(&ctx, tok_embd, n_embd, 0)?;
        hp.n_vocab = ctx.tensor(tok_embd).ne[1];
        shape(&ctx, pos_embd, n_embd, 0)?;
        hp.n_ctx_train = hp.n_ctx_train.min(ctx.tensor(pos_embd).ne[1]);
        shape(&ctx, type_embd, n_embd, 0)?;
        // Not sized by `block_count`: a file claiming 2^40 layers fails at its first missing tensor.
        let mut layers = Vec::new();
        for il in 0..hp.n_layer {
            let a = |s: &str| aff(&format!("blk.{il}.{s}"));
            let l = Layer {
                q: a("attn_q")?,
                k: a("attn_k")?,
                v: a("attn_v")?,
                o: a("attn_output")?,
                attn_norm: a("attn_output_norm")?,
                up: a("ffn_up")?,
                down: a("ffn_down")?,
                out_norm: a("layer_output_norm")?,
            };
            for m in [l.q, l.k, l.v, l.o] {
                shape(&ctx, m.w, n_embd, n_embd)?;
                shape(&ctx, m.b, n_embd, 1)?;
            }
            shape(&ctx, l.up.w, n_embd, n_ff)?;
            shape(&ctx, l.up.b, n_ff, 1)?;
            shape(&ctx, l.down.w, n_ff, n_embd)?;
            for m in [l.down, l.attn_norm, l.out_norm, embd_norm] {
                shape(&ctx, m.b, n_embd, 1)?;
            }
            layers.push(l);
        }
        if tokenizer.n_tokens() < hp.n_vocab {
            return Err(Error::Model(format!(
                "tokenizer has {} tokens, the model {}",
                tokenizer.n_tokens(),
                hp.n_vocab
            )));
        }
        let mark = ctx.mark();
        Ok(Embedder {
            hp,
            tokenizer,
            ctx,
            runner,
            tok_embd,
            pos_embd,
            type_embd,
            embd_norm,
            layers,
            mark,
            _weights: w,
            _bytes: parts.iter().map(|p| p.1.clone()).collect(),
        })
    }

    /// Which backends run, and why.
    pub fn backend_report(&self) -> &str {
        &self.runner.report
    }

    /// Pool differently from the file's `bert.pooling_type` (llama-embedding's `--pooling`).
    pub fn set_pooling(&mut self, p: Pooling) {
        self.hp.pooling = p;
    }

    /// Embedding size.
    pub fn n_embd(&self) -> usize {
        self.hp.n_embd
    }

    /// Token ids of `text` with `[CLS]` … `[SEP]`, as the model sees it.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.tokenizer.tokenize(text, true, false)
    }

    /// One pooled, L2-normalised vector per text.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if self.hp.pooling == Pooling::None {
            return Err(Error::InvalidArgument(
                "this model has no pooling (bert.pooling_type = none): use token_embeddings".into(),
            ));
        }
        texts
            .iter()
            .map(|t| {
                let ids = self.tokenize(t);
                let states = self.hidden_states(&ids)?;
                Ok(self.pool(&states))
            })
            .collect()
    }

    /// One L2-normalised vector per token of `text` (llama.cpp's `--pooling none`).
    pub fn token_embeddings(&mut self, text: &str) -> Result<Vec<Vec<f32>>> {
        let ids = self.tokenize(text);
        let states = self.hidden_states(&ids)?;
        Ok(states
            .chunks(self.hp.n_embd)
            .map(|r| normalized(r.to_vec()))
            .collect())
    }

    /// Pooled and normalised, from the last hidden states (`n_tokens × n_embd`).
    fn pool(&self, states: &[f32]) -> Vec<f32> {
        let n = self.hp.n_embd;
        let rows = states.len() / n;
        let v = match self.hp.pooling {
            Pooling::Cls | Pooling::None => states[..n].to_vec(),
            Pooling::Last => states[(rows - 1) * n..].to_vec(),
            Pooling::Mean => {
                let mut acc = vec![0f64; n];
                for r in states.chunks(n) {
                    for (a, &x) in acc.iter_mut().zip(r) {
                        *a += x as f64;
                    }
                }
                acc.iter().map(|&a| (a / rows as f64) as f32).collect()
            }
        };
        normalized(v)
    }

    fn check(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::InvalidArgument("embedding of zero tokens".into()));
        }
        if ids.len() > self.hp.n_ctx_train {
            return Err(Error::InvalidArgument(format!(
                "{} tokens, more than the model's {} positions",
                ids.len(),
                self.hp.n_ctx_train
            )));
        }
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= self.hp.n_vocab) {
            return Err(Error::InvalidArgument(format!(
                "token id {bad} >= vocab size {}",
                self.hp.n_vocab
            )));
        }
        Ok(())
    }

    /// The encoder's output for `ids`: `ids.len() × n_embd` values, token by token.
    pub fn hidden_states(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        self.check(ids)?;
        let r = self.prepare(ids).and_then(|out| {
            self.runner.compute(&self.ctx)?;
            self.ctx.get_f32(out)
        });
        self.ctx.reset_to(self.mark);
        r
    }

    /// [`Embedder::embed`] for the browser: the copies out of device memory are async.
    pub async fn embed_async(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if self.hp.pooling == Pooling::None {
            return Err(Error::InvalidArgument(
                "this model has no pooling (bert.pooling_type = none)".into(),
            ));
        }
        let mut out = Vec::with_capacity(texts.len());
        for t in texts {
            let ids = self.tokenize(t);
            self.check(&ids)?;
            let r = match self.prepare(&ids) {
                Ok(o) => match self.runner.compute_async(&self.ctx).await {
                    Ok(()) => self.ctx.get_f32_async(o).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            self.ctx.reset_to(self.mark);
            out.push(self.pool(&r?));
        }
        Ok(out)
    }

    fn prepare(&mut self, ids: &[u32]) -> Result<TensorId> {
        let g = self.build(ids.len())?;
        let graph = Graph::build(&self.ctx, &[g.out]);
        self.runner.alloc(&mut self.ctx, &graph)?;
        let tok: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        self.ctx.set_i32(g.tokens, &tok)?;
        let pos: Vec<i32> = (0..ids.len() as i32).collect();
        self.ctx.set_i32(g.pos, &pos)?;
        // One segment: every token has type 0.
        self.ctx.set_i32(g.types, &vec![0; ids.len()])?;
        Ok(g.out)
    }

    fn build(&mut self, n: usize) -> Result<Built> {
        let hp = self.hp.clone();
        let ctx = &mut self.ctx;
        let input = |ctx: &mut Context, name: &str| -> Result<TensorId> {
            let t = ctx.new_tensor_1d(DType::I32, n)?;
            ctx.set_name(t, name)?;
            ctx.set_input(t);
            Ok(t)
        };
        let tokens = input(ctx, "inp_tokens")?;
        let pos = input(ctx, "inp_pos")?;
        let types = input(ctx, "inp_types")?;
        let affine = |ctx: &mut Context, a: Affine, x: TensorId| -> Result<TensorId> {
            let y = ctx.mul_mat(a.w, x)?;
            ctx.add(y, a.b)
        };
        let layer_norm = |ctx: &mut Context, a: Affine, x: TensorId| -> Result<TensorId> {
            let y = ctx.norm(x, hp.eps)?;
            let y = ctx.mul(y, a.w)?;
            ctx.add(y, a.b)
        };

        let x = ctx.get_rows(self.tok_embd, tokens)?;
        let t = ctx.get_rows(self.type_embd, types)?;
        let x = ctx.add(x, t)?;
        let p = ctx.get_rows(self.pos_embd, pos)?;
        let x = ctx.add(x, p)?;
        let mut x = layer_norm(ctx, self.embd_norm, x)?;

        let dh = hp.n_embd / hp.n_head;
        let scale = 1.0 / (dh as f32).sqrt();
        for l in &self.layers {
            let q = affine(ctx, l.q, x)?;
            let k = affine(ctx, l.k, x)?;
            let v = affine(ctx, l.v, x)?;
            let q = ctx.reshape(q, &[dh, hp.n_head, n])?;
            let q = ctx.permute(q, [0, 2, 1, 3])?; // [dh, n, head]
            let k = ctx.reshape(k, &[dh, hp.n_head, n])?;
            let k = ctx.permute(k, [0, 2, 1, 3])?;
            let kq = ctx.mul_mat(k, q)?; // [n_k, n_q, head]
            let kq = ctx.soft_max_ext(kq, None, scale, 0.0)?;
            let v = ctx.reshape(v, &[dh, hp.n_head, n])?;
            let vt = ctx.permute(v, [1, 2, 0, 3])?; // [n, dh, head]
            let vt = ctx.cont(vt)?;
            let kqv = ctx.mul_mat(vt, kq)?; // [dh, n_q, head]
            let kqv = ctx.permute(kqv, [0, 2, 1, 3])?; // [dh, head, n]
            let kqv = ctx.cont(kqv)?;
            let kqv = ctx.reshape(kqv, &[hp.n_embd, n])?;
            let o = affine(ctx, l.o, kqv)?;
            let o = ctx.add(o, x)?;
            let h = layer_norm(ctx, l.attn_norm, o)?;

            let up = affine(ctx, l.up, h)?;
            let act = ctx.gelu(up)?;
            let down = affine(ctx, l.down, act)?;
            let y = ctx.add(down, h)?;
            x = layer_norm(ctx, l.out_norm, y)?;
        }
        ctx.set_name(x, "embeddings")?;
        ctx.set_output(x);
        Ok(Built {
            tokens,
            pos,
            types,
            out: x,
        })
    }
}

/// `v / |v|` (a zero vector stays zero), as llama.cpp's default `--embd-normalize 2`.
fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x = (*x as f64 / norm) as f32;
        }
    }
    v
}

/// Cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        (ab / (aa.sqrt() * bb.sqrt())) as f32
    }
}
