//! Tokenizers of llama.cpp's vocab fixtures (SentencePiece, byte-level BPE with their
//! pre-tokenizers, WordPiece): any text tokenizes without a panic into ids inside the vocab, and
//! detokenizes; byte-level BPE vocabs without special-token parsing give the text back exactly.
#![no_main]
use std::sync::OnceLock;

use ggweb::gguf::Gguf;
use ggweb::models::tokenizer::{Tokenizer, VocabType};
use libfuzzer_sys::fuzz_target;

/// (name, tokenizer, round trip exact) for each fixture vocab.
fn vocabs() -> &'static [(String, Tokenizer, bool)] {
    static V: OnceLock<Vec<(String, Tokenizer, bool)>> = OnceLock::new();
    V.get_or_init(|| {
        let dir = std::env::var("GGWEB_FUZZ_VOCAB_DIR").unwrap_or_else(|_| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/fixtures/vocab"
            )
            .into()
        });
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("vocab dir {dir}: {e} (set GGWEB_FUZZ_VOCAB_DIR)"))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        names.sort();
        for p in names {
            let bytes = std::fs::read(&p).expect("read vocab");
            let g = Gguf::parse(&bytes).expect("fixture parses");
            let tok = Tokenizer::from_gguf(&g).expect("fixture tokenizer");
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            // Byte-level BPE keeps every byte; the ones whose detokenizer does not clean up spaces
            // (llama.cpp sets clean_spaces false for them; llama-bpe keeps it) reproduce the text exactly.
            let exact = tok.vocab_type() == VocabType::Bpe
                && ["qwen2", "deepseek-coder"].iter().any(|n| name.contains(n));
            out.push((name, tok, exact));
        }
        assert!(!out.is_empty(), "no vocab fixtures in {dir}");
        out
    })
}

// Loading the vocabs (seconds under ASan on a busy machine) happens before the first unit, so it
// does not count against libFuzzer's per-unit timeout.
fuzz_target!(init: { vocabs(); }, |data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let v = vocabs();
    let (name, tok, exact) = &v[sel as usize % v.len()];
    let text = String::from_utf8_lossy(rest);
    let add_special = sel & 0x40 != 0;
    let parse_special = sel & 0x80 != 0;
    let ids = tok.tokenize(&text, add_special, parse_special);
    for &id in &ids {
        assert!(
            (id as usize) < tok.n_tokens(),
            "{name}: id {id} out of range"
        );
    }
    let back = tok.detokenize(&ids, false, false);
    if *exact && !add_special && !parse_special {
        assert_eq!(
            String::from_utf8_lossy(&back),
            text,
            "{name}: text does not round-trip"
        );
    }
    let _ = tok.decode(&ids);
});
