//! Metadata → model hyper-parameters → weights → a few evaluated tokens. The input is a list of
//! edits applied to a tiny valid llama model (hyper-parameters, tokenizer ids, architecture,
//! tensor shapes and types, removed tensors): loading gives a model or a typed error, never a
//! panic, an abort or an allocation sized by a claim; a model that loads evaluates (or errors).
#![no_main]
use std::sync::Arc;

use ggweb::gguf::{GgufWriter, Value};
use ggweb::models::llm::Llm;
use ggweb::DType;
use libfuzzer_sys::fuzz_target;

const N_EMBD: u64 = 8;
const N_FF: u64 = 16;
const N_LAYER: u64 = 2;

/// The tiny model's vocabulary: SentencePiece with byte fallback.
fn vocab() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for w in ["▁a", "▁b", "ab", "▁ab"] {
        tokens.push(w.into());
        types.push(1);
    }
    let scores = (0..tokens.len()).map(|i| -(i as f32)).collect();
    (tokens, scores, types)
}

/// Metadata keys the edits may set, by index.
const KEYS: &[&str] = &[
    "general.architecture",
    "llama.context_length",
    "llama.embedding_length",
    "llama.block_count",
    "llama.feed_forward_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "llama.attention.value_length",
    "llama.rope.dimension_count",
    "llama.rope.freq_base",
    "llama.rope.scaling.factor",
    "llama.rope.scaling.type",
    "llama.attention.layer_norm_rms_epsilon",
    "llama.vocab_size",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
    "gemma3.attention.sliding_window",
    "llama.expert_count",
];

const ARCHS: &[&str] = &[
    "llama", "gemma3", "qwen2", "qwen3", "phi3", "bert", "mistral", "",
];
const TYPES: &[DType] = &[
    DType::F32,
    DType::F16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_K,
    DType::Q6_K,
];

struct Tensor {
    name: String,
    dtype: DType,
    ne: Vec<u64>,
}

fn base_tensors() -> Vec<Tensor> {
    let (n_vocab, kv) = (vocab().0.len() as u64, N_EMBD / 2);
    let t = |name: &str, ne: &[u64]| Tensor {
        name: name.into(),
        dtype: DType::F32,
        ne: ne.to_vec(),
    };
    let mut v = vec![
        t("token_embd.weight", &[N_EMBD, n_vocab]),
        t("output_norm.weight", &[N_EMBD]),
    ];
    for i in 0..N_LAYER {
        let b = |s: &str| format!("blk.{i}.{s}.weight");
        v.push(t(&b("attn_norm"), &[N_EMBD]));
        v.push(t(&b("attn_q"), &[N_EMBD, N_EMBD]));
        v.push(t(&b("attn_k"), &[N_EMBD, kv]));
        v.push(t(&b("attn_v"), &[N_EMBD, kv]));
        v.push(t(&b("attn_output"), &[N_EMBD, N_EMBD]));
        v.push(t(&b("ffn_norm"), &[N_EMBD]));
        v.push(t(&b("ffn_gate"), &[N_EMBD, N_FF]));
        v.push(t(&b("ffn_up"), &[N_EMBD, N_FF]));
        v.push(t(&b("ffn_down"), &[N_FF, N_EMBD]));
    }
    v
}

/// Bytes for a tensor: small deterministic values, quantized to its type.
fn tensor_bytes(t: &Tensor) -> Option<Vec<u8>> {
    let ne0 = *t.ne.first().unwrap_or(&1) as usize;
    let rows = t.ne.iter().skip(1).try_fold(1u64, |p, &n| p.checked_mul(n))?;
    let row = t.dtype.row_size(ne0).ok()?;
    let total = row.checked_mul(usize::try_from(rows).ok()?)?;
    if total > 1 << 20 || ne0 > 1 << 16 {
        return None;
    }
    let vals: Vec<f32> = (0..ne0)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) / 20.0)
        .collect();
    let mut out = vec![0u8; total];
    let mut r = vec![0u8; row];
    ggweb::quant::quantize_row(t.dtype, &vals, &mut r).ok()?;
    for chunk in out.chunks_mut(row.max(1)) {
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    Some(out)
}

fn value(kind: u8, x: u64, s: &str) -> Value {
    match kind % 8 {
        0 => Value::U32(x as u32),
        1 => Value::U64(x),
        2 => Value::I32(x as i32),
        3 => Value::F32(f32::from_bits(x as u32)),
        4 => Value::F32((x % 100_000) as f32 / 8.0),
        5 => Value::Bool(x & 1 == 1),
        6 => Value::String(s.into()),
        _ => Value::U32((x % 64) as u32),
    }
}

fuzz_target!(|data: &[u8]| {
    let (tokens, scores, types) = vocab();
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), "llama".into()),
        ("llama.context_length".into(), Value::U32(32)),
        ("llama.embedding_length".into(), Value::U32(N_EMBD as u32)),
        ("llama.block_count".into(), Value::U32(N_LAYER as u32)),
        ("llama.feed_forward_length".into(), Value::U32(N_FF as u32)),
        ("llama.attention.head_count".into(), Value::U32(2)),
        ("llama.attention.head_count_kv".into(), Value::U32(1)),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-5),
        ),
        ("tokenizer.ggml.model".into(), "llama".into()),
        (
            "tokenizer.ggml.tokens".into(),
            tokens.iter().map(String::as_str).collect::<Vec<_>>().into(),
        ),
        ("tokenizer.ggml.scores".into(), scores.into()),
        ("tokenizer.ggml.token_type".into(), types.into()),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
    ];
    let mut tensors = base_tensors();
    // Edits: 10-byte records [op, a, x (8 bytes LE)].
    for rec in data.chunks_exact(10) {
        let (op, a) = (rec[0], rec[1] as usize);
        let x = u64::from_le_bytes(rec[2..10].try_into().expect("8 bytes"));
        match op % 6 {
            0 | 1 => {
                let key = KEYS[a % KEYS.len()];
                let v = if key == "general.architecture" {
                    Value::String(ARCHS[x as usize % ARCHS.len()].into())
                } else {
                    value(op / 6, x, ARCHS[x as usize % ARCHS.len()])
                };
                meta.retain(|(k, _)| k != key);
                meta.push((key.into(), v));
            }
            2 => {
                let key = KEYS[a % KEYS.len()];
                meta.retain(|(k, _)| k != key);
            }
            3 if !tensors.is_empty() => {
                // A new shape: each dim from 4 bits of x (0..15), sometimes huge.
                let i = a % tensors.len();
                let n = 1 + (x & 3) as usize;
                let ne: Vec<u64> = (0..n)
                    .map(|d| match (x >> (2 + 5 * d)) & 31 {
                        31 => 1 << 33,
                        30 => 1 << 20,
                        v => v,
                    })
                    .collect();
                tensors[i].ne = ne;
            }
            4 if !tensors.is_empty() => {
                let i = a % tensors.len();
                tensors[i].dtype = TYPES[x as usize % TYPES.len()];
            }
            5 if !tensors.is_empty() => {
                let i = a % tensors.len();
                tensors.remove(i);
            }
            _ => {}
        }
    }
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.set(k, v);
    }
    for t in &tensors {
        // Shapes the writer cannot hold (or too large to fill) are left out: that is a missing
        // tensor to the loader.
        if let Some(bytes) = tensor_bytes(t) {
            let _ = w.add_tensor(&t.name, t.dtype, &t.ne, &bytes);
        }
    }
    let Ok(file) = w.to_bytes() else { return };
    let Ok(mut llm) = Llm::from_bytes(Arc::new(file), 8, 1) else {
        return;
    };
    let ids = llm.tokenize("ab a", true, false);
    if ids.is_empty() {
        return;
    }
    if let Ok((logits, _)) = llm.eval_prompt(&ids) {
        let next = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32);
        let _ = llm.eval_token(next);
        let _ = llm.detokenize(&[next]);
    }
});
