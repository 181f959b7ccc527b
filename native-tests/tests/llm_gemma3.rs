//! gemma-3-270m (Q4_K_M) against llama.cpp's reference outputs in `data/gemma3/` (see its
//! README.md for how they were made). The GGUF is fetched and assembled by
//! `scripts/fetch-models.sh` into `~/.cache/ggweb/models` (or named by `GGWEB_GEMMA3`).
//!
//! The same checks as `llm.rs` does for SmolLM2: argmax equal at every prompt position (one
//! near-tie allowed), last position within max |diff| 1.2 and KL 0.01, teacher-forced greedy
//! continuation with a near-tie allowance, and tokenization equal to llama.cpp's.

#[path = "support/models.rs"]
mod models;

use std::path::PathBuf;

use ggweb::models::llama::LlamaModel;
use ggweb::models::llm::Llm;
use ggweb::models::sampler::argmax;
use serde_json::Value;

const N_VOCAB: usize = 262_144;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/gemma3")
}

fn gemma3() -> PathBuf {
    models::model("GGWEB_GEMMA3", "gemma-3-270m-q4_k_m.gguf")
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data().join(name)).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn read_f32(name: &str) -> Vec<f32> {
    let b = std::fs::read(data().join(name)).unwrap();
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
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

/// The largest logit gap a teacher-forced near-tie may have. llama.cpp's own flash attention
/// on vs off moves this model's logits by up to 1.70 (data/gemma3/README.md); at the one
/// near-tie of the chat answer (step 7) ggweb measures 0.43 with mul_mat + soft_max attention
/// and 0.54 with its fused attention (f32 accumulators; 0.41 when they are rounded to f16 as
/// llama.cpp's CPU kernel does).
const TEACHER_GAP: f32 = 0.6;

/// Teacher-forced greedy: feed llama.cpp's tokens; at every step our top-1 must be llama.cpp's
/// token or a near-tie with it (gap < TEACHER_GAP: llama.cpp's own configurations move logits that
/// much). Returns the number of near-ties.
fn teacher_forced(m: &mut LlamaModel, mut logits: Vec<f32>, want: &[u32]) -> usize {
    let mut near_ties = 0;
    for (step, &w) in want.iter().enumerate() {
        let top = argmax(&logits);
        if top != w {
            let gap = logits[top as usize] - logits[w as usize];
            assert!(
                gap < TEACHER_GAP,
                "step {step}: our top {top} beats llama.cpp's {w} by {gap}"
            );
            near_ties += 1;
        }
        if step + 1 < want.len() {
            logits = m.eval(&[w], false).unwrap();
        }
    }
    near_ties
}

#[test]
fn gemma3_prompt_logits_match_llama_cpp() {
    let top10 = json("logits_t1.top10.json");
    let prompt = ids(&top10["tokens"]);
    let mut m = LlamaModel::open(&gemma3(), 128, 2).unwrap();
    let ours = m.eval(&prompt, true).unwrap();
    assert_eq!(ours.len(), prompt.len() * N_VOCAB);
    // Argmax at every position equals llama.cpp's, except at a near-tie: llama.cpp's own top-2
    // margin there is < 0.5 and our logit of its token is within 0.5 of our top (llama.cpp's own
    // batch vs token-by-token evaluation moves these logits by up to 0.83; see the README).
    // Position 8 is such a place: llama.cpp's margin is 0.18, and llama.cpp itself changes its
    // argmax at positions 8 and 10 when flash attention is turned off.
    let mut near_ties = 0;
    for (p, pos) in top10["positions"].as_array().unwrap().iter().enumerate() {
        let top = pos["top10"].as_array().unwrap();
        let want = top[0][0].as_u64().unwrap() as u32;
        let row = &ours[p * N_VOCAB..(p + 1) * N_VOCAB];
        let top10_diff = top
            .iter()
            .map(|e| (row[e[0].as_u64().unwrap() as usize] - e[1].as_f64().unwrap() as f32).abs())
            .fold(0f32, f32::max);
        let got = argmax(row);
        println!(
            "position {p}: argmax ours {got} llama.cpp {want}, top-10 max |diff| {top10_diff:.4}"
        );
        if got != want {
            let ref_margin = top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap();
            let our_gap = row[got as usize] - row[want as usize];
            assert!(
                ref_margin < 0.5 && our_gap < 0.5,
                "argmax differs at position {p}: ours {got}, llama.cpp {want} \
                 (llama.cpp margin {ref_margin}, our gap {our_gap})"
            );
            near_ties += 1;
        }
    }
    assert!(near_ties <= 1, "{near_ties} positions differ");
    let reference = read_f32("logits_t1.last.f32");
    let a = &ours[(prompt.len() - 1) * N_VOCAB..];
    let max_abs = a
        .iter()
        .zip(&reference)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let kl = kl(&reference, a);
    println!("gemma3 last position: max |diff| {max_abs:.4}, KL {kl:.6}");
    // gemma3's bound is 1.2, not SmolLM2's 1.0: llama.cpp's own configurations move this model's
    // logits more (flash attention off vs on: up to 1.70 max abs over the prompt positions, with
    // KL 0.0049 at the last one; token-by-token vs batch: 0.83). We measure 1.02 and KL 0.0055.
    assert!(max_abs <= 1.2, "max abs diff {max_abs}");
    assert!(kl < 0.01, "KL {kl}");
}

#[test]
fn gemma3_greedy_matches_llama_cpp() {
    let gen = json("logits_t1.gen.json");
    let prompt = ids(&gen["prompt_tokens"]);
    let want = ids(&gen["generated_ids"]);
    let mut m = LlamaModel::open(&gemma3(), 128, 2).unwrap();
    let logits = m.eval(&prompt, false).unwrap();
    let near_ties = teacher_forced(&mut m, logits, &want);
    println!(
        "gemma3 greedy: {near_ties} near-ties in {} steps",
        want.len()
    );
    assert!(near_ties <= 3, "{near_ties} near-ties");
}

/// The chat prompt "What is the capital of France?" in Gemma's turn format. This GGUF is the base
/// (not instruction-tuned) model: llama.cpp itself repeats the question and then emits low-logit
/// junk, so a junk answer from ggweb is the model; what must hold is that we follow llama.cpp.
#[test]
fn gemma3_chat_answer_matches_llama_cpp() {
    let chat = json("chat_capital.gen.json");
    let prompt = ids(&chat["prompt_tokens"]);
    let want = ids(&chat["generated_ids"]);
    let mut llm = Llm::open(&gemma3(), 128, 2).unwrap();
    let text = chat["prompt_text"].as_str().unwrap();
    assert_eq!(llm.tokenize(text, true, true), prompt, "chat prompt tokens");
    let logits = llm.model.eval(&prompt, false).unwrap();
    let near_ties = teacher_forced(&mut llm.model, logits, &want);
    println!("gemma3 chat: {near_ties} near-ties in {} steps", want.len());
    assert!(near_ties <= 3, "{near_ties} near-ties");
}

#[test]
fn gemma3_tokenization_matches_llama_cpp() {
    let tok = json("tokenization.json");
    let llm = Llm::open(&gemma3(), 8, 1).unwrap();
    let mut n = 0;
    for p in tok["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        for (variant, add_special, parse_special) in [
            ("meta_bos__parse_special", true, true),
            ("no_bos__parse_special", false, true),
            ("meta_bos__no_parse_special", true, false),
            ("no_bos__no_parse_special", false, false),
        ] {
            let want = ids(&p[variant]);
            let got = llm.tokenize(text, add_special, parse_special);
            assert_eq!(got, want, "prompt {text:?}, {variant}");
            n += 1;
        }
    }
    assert_eq!(n, 24);
}

/// gemma3 (q5_0, q8_0, q4_K and q6_K matrices) loaded as the CLI loads it (`open_repacked`):
/// every 2-D layer matrix of a type `repack::pays_for` is repacked, the others stay plain, and
/// the logits of a prompt (the prompt path, which unpacks the groups) and of tokens after it
/// (the GEMVs, over the groups and over the plain k-quant rows) are bit for bit the mapped
/// plain model's, on 1 and 2 threads.
#[test]
fn gemma3_repacked_weights_give_the_same_logits() {
    use ggweb::backend::cpu::repack::pays_for;
    let file = ggweb::gguf::GgufFile::open(gemma3()).unwrap();
    let layer = |want: fn(ggweb::DType) -> bool| {
        file.header()
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("blk.") && t.n_dims == 2 && want(t.dtype))
            .count()
    };
    assert!(
        layer(|d| d == ggweb::DType::Q4_K) > 0,
        "gemma3 Q4_K_M has q4_K layer matrices"
    );
    let prompt: Vec<u32> = vec![2, 818, 5279, 529, 7001, 563];
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    for threads in [1, 2] {
        let mut plain = LlamaModel::open(&gemma3(), 64, threads).unwrap();
        let mut packed = LlamaModel::open_repacked(&gemma3(), 64, threads).unwrap();
        // The layer matrices of every type this CPU's GEMV reads repacked (the embedding,
        // tied to the output, is counted by the model, not here).
        let layers = layer(pays_for);
        assert!(packed.repacked_weights() >= layers, "{threads} threads");
        assert!(packed.repacked_weights() <= layers + 1, "{threads} threads");
        assert_eq!(
            bits(packed.eval(&prompt, true).unwrap()),
            bits(plain.eval(&prompt, true).unwrap()),
            "prompt, {threads} threads"
        );
        for t in [506, 5279, 529] {
            assert_eq!(
                bits(packed.eval(&[t], false).unwrap()),
                bits(plain.eval(&[t], false).unwrap()),
                "token {t}, {threads} threads"
            );
        }
    }
}
