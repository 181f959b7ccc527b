//! Tokenizers built from GGUF tokenizer metadata, following llama.cpp's `llama-vocab.cpp`:
//! SentencePiece-style (`llama`), byte-level BPE (`gpt2`) and WordPiece (`bert`).
//!
//! [`TokenizerSpec`] is the plain description (what the `tokenizer.ggml.*` keys hold);
//! [`Tokenizer::from_spec`] validates it and builds lookup tables once. Tokenizing is then
//! `tokenize(text, add_special, parse_special)`, detokenizing `token_to_piece` / `detokenize` / `decode`.

mod bpe;
mod fxhash;
mod gguf;
mod pretok;
mod regex;
mod spm;
mod strtab;
pub mod unicode;
mod wpm;

use std::collections::BTreeSet;

pub use pretok::PRE_NAMES;
use strtab::{ByteArena, StrTable};

use crate::{Error, Result};

/// Token attribute bits (llama.cpp's `llama_token_attr`).
pub mod attr {
    pub const UNDEFINED: u32 = 0;
    pub const UNKNOWN: u32 = 1 << 0;
    pub const UNUSED: u32 = 1 << 1;
    pub const NORMAL: u32 = 1 << 2;
    pub const CONTROL: u32 = 1 << 3;
    pub const USER_DEFINED: u32 = 1 << 4;
    pub const BYTE: u32 = 1 << 5;
    pub const NORMALIZED: u32 = 1 << 6;
    pub const LSTRIP: u32 = 1 << 7;
    pub const RSTRIP: u32 = 1 << 8;
    pub const SINGLE_WORD: u32 = 1 << 9;
}

/// GGUF `tokenizer.ggml.token_type` values.
pub mod token_type {
    pub const UNDEFINED: i32 = 0;
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// Everything a tokenizer is built from; mirrors the `tokenizer.ggml.*` GGUF keys.
/// `None` means "key absent": llama.cpp's per-model defaults apply.
#[derive(Clone, Debug, Default)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece), `gpt2` (byte-level BPE) or `bert` (WordPiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: BPE pre-tokenizer name.
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    pub token_types: Option<Vec<i32>>,
    pub merges: Option<Vec<String>>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub eot_id: Option<u32>,
    pub eom_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub sep_id: Option<u32>,
    pub pad_id: Option<u32>,
    pub mask_id: Option<u32>,
    pub fim_pre_id: Option<u32>,
    pub fim_suf_id: Option<u32>,
    pub fim_mid_id: Option<u32>,
    pub fim_pad_id: Option<u32>,
    pub fim_rep_id: Option<u32>,
    pub fim_sep_id: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_sep: Option<bool>,
    pub add_space_prefix: Option<bool>,
    pub remove_extra_whitespaces: Option<bool>,
    /// `tokenizer.ggml.normalizer.lowercase` (WordPiece; default true).
    pub lowercase: Option<bool>,
    /// `tokenizer.ggml.normalizer.strip_accents` (WordPiece; defaults to `lowercase`).
    pub strip_accents: Option<bool>,
    /// `general.name`: a few per-model token attribute fixes key off it (as in llama.cpp).
    pub model_name: Option<String>,
    /// `general.architecture`.
    pub architecture: Option<String>,
}

/// The tokenization algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabType {
    /// SentencePiece-style score merges with byte fallback (`llama`).
    Spm,
    /// Byte-level BPE (`gpt2`).
    Bpe,
    /// WordPiece (`bert`).
    Wpm,
}

#[derive(Clone, Debug)]
pub(crate) struct TokenData {
    pub score: f32,
    pub attr: u32,
}

/// Special token ids (None when the model has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// A ready tokenizer. Cheap to share (`&self` everywhere, no interior mutability).
pub struct Tokenizer {
    vocab_type: VocabType,
    pub(crate) tokens: Vec<TokenData>,
    /// Every token's text (id order) and the lookup text → first id holding it.
    texts: StrTable,
    pub(crate) special: SpecialTokens,
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    pub(crate) lowercase: bool,
    pub(crate) strip_accents: bool,
    /// The distinct byte lengths of the tokens, longest first: WordPiece's longest-match search
    /// tries only these (a vocab with one 1 MB token no longer makes every lookup that long).
    pub(crate) token_lens: Vec<usize>,
    /// Control / user-defined / unknown tokens, longest text first.
    special_cache: Vec<u32>,
    eog: BTreeSet<u32>,
    /// Detokenized piece of every token with `special = true`.
    pieces: ByteArena,
    bpe: Option<bpe::Bpe>,
}

enum Fragment {
    Text(usize, usize),
    Token(u32),
}

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

impl Tokenizer {
    /// Builds a tokenizer, applying llama.cpp's defaults and per-model fixes.
    pub fn from_spec(mut spec: TokenizerSpec) -> Result<Tokenizer> {
        let tokens = std::mem::take(&mut spec.tokens);
        let merges = spec.merges.take();
        Tokenizer::build(spec, &tokens, merges.as_deref())
    }

    /// [`Tokenizer::from_spec`] with the two large arrays borrowed (from GGUF metadata, which
    /// then needs no copy of them); `spec.tokens` and `spec.merges` are ignored.
    pub(crate) fn build(
        spec: TokenizerSpec,
        spec_tokens: &[String],
        spec_merges: Option<&[String]>,
    ) -> Result<Tokenizer> {
        let n = spec_tokens.len();
        if n == 0 {
            return Err(Error::Model("tokenizer has no tokens".into()));
        }
        if n > u32::MAX as usize {
            return Err(Error::Model("too many tokens".into()));
        }
        let vocab_type = match spec.model.as_str() {
            "llama" => VocabType::Spm,
            "gpt2" | "gemma4" => VocabType::Bpe,
            "bert" => VocabType::Wpm,
            other => {
                return Err(Error::Model(format!(
                    "unsupported tokenizer model {other:?}"
                )))
            }
        };
        if let Some(s) = &spec.scores {
            if s.len() < n {
                return Err(Error::Model(format!("{} scores for {n} tokens", s.len())));
            }
        }
        if let Some(t) = &spec.token_types {
            if t.len() < n {
                return Err(Error::Model(format!(
                    "{} token types for {n} tokens",
                    t.len()
                )));
            }
        }

        // Per-model defaults.
        let mut special = SpecialTokens::default();
        let (mut add_space_prefix, mut add_bos, mut add_eos, mut add_sep, mut clean_spaces) =
            (false, false, false, false, false);
        let mut bpe_state = None;
        let mut force_add_bos = false;
        match vocab_type {
            VocabType::Spm => {
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                add_space_prefix = true;
                add_bos = true;
            }
            VocabType::Wpm => {
                special.bos = Some(101);
                special.unk = Some(100);
                special.sep = Some(102);
                special.pad = Some(0);
                special.mask = Some(103);
                clean_spaces = true;
                add_bos = true;
                add_sep = true;
            }
            VocabType::Bpe => {
                // A `gemma4` tokenizer is BPE with its own pre-tokenizer and no default ids.
                let gemma4 = spec.model == "gemma4";
                if !gemma4 {
                    special.bos = Some(11);
                    special.eos = Some(11);
                }
                let pre = if gemma4 {
                    Some("gemma4")
                } else {
                    spec.pre.as_deref()
                };
                let cfg = pretok::pre_config(pre)?;
                let merges = match spec_merges {
                    Some(m) => m,
                    None if cfg.merges_optional => &[],
                    None => {
                        return Err(Error::Model(
                            "BPE tokenizer without tokenizer.ggml.merges".into(),
                        ))
                    }
                };
                force_add_bos = cfg.force_add_bos;
                clean_spaces = cfg.clean_spaces;
                if let Some(b) = cfg.add_bos {
                    add_bos = b;
                }
                add_sep = cfg.add_sep;
                if cfg.no_bos_token {
                    special.bos = None;
                }
                bpe_state = Some(bpe::Bpe::new(&cfg, merges)?);
            }
        }
        if let Some(v) = spec.add_space_prefix {
            add_space_prefix = v;
        }
        let remove_extra_ws = spec.remove_extra_whitespaces.unwrap_or(false);
        let _ = remove_extra_ws; // only used by Unigram tokenizers in llama.cpp

        // Tokens.
        let mut tokens = Vec::with_capacity(n);
        let mut texts = StrTable::with_capacity(n);
        let mut token_lens = Vec::new();
        for (i, text) in spec_tokens.iter().enumerate() {
            let empty;
            let text = if text.is_empty() {
                empty = format!("[EMPTY_{i}]");
                &empty
            } else {
                text
            };
            let score = spec.scores.as_ref().map_or(0.0, |s| s[i]);
            let attr = match spec.token_types.as_ref().map(|t| t[i]) {
                None | Some(token_type::NORMAL) => attr::NORMAL,
                Some(token_type::UNKNOWN) => attr::UNKNOWN,
                Some(token_type::UNUSED) => attr::UNUSED,
                Some(token_type::CONTROL) => attr::CONTROL,
                Some(token_type::USER_DEFINED) => attr::USER_DEFINED,
                Some(token_type::BYTE) => attr::BYTE,
                Some(_) => attr::UNDEFINED,
            };
            token_lens.push(text.len());
            texts.push(text);
            tokens.push(TokenData { score, attr });
        }
        texts.shrink_to_fit();
        let text_of = |id: usize| texts.get(id as u32).unwrap_or("");

        // Special ids: defaults out of range are dropped; metadata ids in range override.
        {
            let slots: [(&mut Option<u32>, Option<u32>); 14] = [
                (&mut special.bos, spec.bos_id),
                (&mut special.eos, spec.eos_id),
                (&mut special.eot, spec.eot_id),
                (&mut special.eom, spec.eom_id),
                (&mut special.unk, spec.unk_id),
                (&mut special.sep, spec.sep_id),
                (&mut special.pad, spec.pad_id),
                (&mut special.mask, spec.mask_id),
                (&mut special.fim_pre, spec.fim_pre_id),
                (&mut special.fim_suf, spec.fim_suf_id),
                (&mut special.fim_mid, spec.fim_mid_id),
                (&mut special.fim_pad, spec.fim_pad_id),
                (&mut special.fim_rep, spec.fim_rep_id),
                (&mut special.fim_sep, spec.fim_sep_id),
            ];
            for (slot, given) in slots {
                if slot.is_some_and(|id| id as usize >= n) {
                    *slot = None;
                }
                if let Some(id) = given {
                    if (id as usize) < n {
                        *slot = Some(id);
                    }
                }
            }
        }
        if let Some(v) = spec.add_bos {
            add_bos = v;
        }
        // llama.cpp overrides a false add_bos for Gemma 4.
        add_bos |= force_add_bos;
        if let Some(v) = spec.add_eos {
            add_eos = v;
        }
        if let Some(v) = spec.add_sep {
            add_sep = v;
        }
        if add_bos && special.bos.is_none() {
            return Err(Error::Model(
                "tokenizer.ggml.add_bos_token is true but there is no BOS token".into(),
            ));
        }
        if add_eos && special.eos.is_none() {
            return Err(Error::Model(
                "tokenizer.ggml.add_eos_token is true but there is no EOS token".into(),
            ));
        }
        if add_sep && special.sep.is_none() {
            return Err(Error::Model(
                "tokenizer.ggml.add_sep_token is true but there is no SEP token".into(),
            ));
        }
        let lowercase = spec.lowercase.unwrap_or(true);
        let strip_accents = spec.strip_accents.unwrap_or(lowercase);

        // Auto-detect EOT / FIM / EOG tokens by text and mark them as control tokens.
        // The first text of the list that the vocabulary has (llama.cpp scans a hash map, so its
        // pick among several candidates is unspecified; list order is the intended priority).
        let find = |texts_: &[&str]| -> Option<u32> { texts_.iter().find_map(|t| texts.id(t)) };
        let mut force_control = Vec::new();
        for (slot, texts) in [
            (&mut special.eot, EOT_TEXTS),
            (&mut special.eom, &["<|eom_id|>"][..]),
            (&mut special.fim_pre, FIM_PRE_TEXTS),
            (&mut special.fim_suf, FIM_SUF_TEXTS),
            (&mut special.fim_mid, FIM_MID_TEXTS),
            (&mut special.fim_pad, FIM_PAD_TEXTS),
            (&mut special.fim_rep, FIM_REP_TEXTS),
            (&mut special.fim_sep, FIM_SEP_TEXTS),
        ] {
            if slot.is_none() {
                if let Some(id) = find(texts) {
                    *slot = Some(id);
                    force_control.push(id);
                }
            }
        }
        for id in force_control {
            tokens[id as usize].attr |= attr::CONTROL;
        }
        for (id, t) in tokens.iter_mut().enumerate() {
            if t.attr & attr::CONTROL != 0
                && t.attr & attr::UNUSED == 0
                && text_of(id).contains("unused")
            {
                t.attr |= attr::UNUSED;
            }
        }
        let mut eog = BTreeSet::new();
        for id in [special.fim_pad, special.fim_rep, special.fim_sep]
            .into_iter()
            .flatten()
        {
            eog.insert(id);
        }
        for (id, t) in tokens.iter_mut().enumerate() {
            if EOG_TEXTS.contains(&text_of(id)) {
                eog.insert(id as u32);
                t.attr |= attr::CONTROL;
            }
            if matches!(
                text_of(id),
                "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>"
            ) {
                t.attr = attr::USER_DEFINED;
            }
        }
        for id in [special.eos, special.eot, special.eom]
            .into_iter()
            .flatten()
        {
            eog.insert(id);
        }

        let mut special_cache: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                tokens[id as usize].attr & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        special_cache.sort_by(|&a, &b| {
            text_of(b as usize)
                .len()
                .cmp(&text_of(a as usize).len())
                .then(a.cmp(&b))
        });

        let mut tok = Tokenizer {
            vocab_type,
            tokens,
            texts,
            special,
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            clean_spaces,
            lowercase,
            strip_accents,
            token_lens: {
                token_lens.sort_unstable_by(|a, b| b.cmp(a));
                token_lens.dedup();
                token_lens
            },
            special_cache,
            eog,
            pieces: ByteArena::default(),
            bpe: bpe_state,
        };
        let mut pieces = ByteArena::with_capacity(n);
        for id in 0..n as u32 {
            pieces.push(&tok.compute_piece(id));
        }
        pieces.shrink_to_fit();
        tok.pieces = pieces;

        // Per-model attribute fixes (llama.cpp keys these off general.name / pre / architecture).
        let name = spec.model_name.as_deref().unwrap_or("").to_lowercase();
        let pre = spec.pre.as_deref().unwrap_or("");
        let arch = spec.architecture.as_deref().unwrap_or("");
        let set_attr = |tok: &mut Tokenizer, text: &str, bit: u32, on: bool| {
            if let Some(id) = tok.texts.id(text) {
                let a = &mut tok.tokens[id as usize].attr;
                *a = if on { *a | bit } else { *a & !bit };
            }
        };
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
            .iter()
            .any(|s| pre.contains(s))
            || ["nomic-bert-moe", "jina-bert-v3"]
                .iter()
                .any(|s| arch.contains(s))
        {
            set_attr(&mut tok, "<mask>", attr::LSTRIP, true);
        } else if name.contains("phi-3") || name.contains("phi3") {
            for i in 0..tok.special_cache.len() {
                let id = tok.special_cache[i] as usize;
                tok.tokens[id].attr |= attr::RSTRIP;
            }
            set_attr(&mut tok, "</s>", attr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set_attr(&mut tok, t, attr::RSTRIP, false);
            }
        } else if name.contains("modern-bert") {
            set_attr(&mut tok, "[MASK]", attr::LSTRIP, true);
        }
        Ok(tok)
    }

    pub fn vocab_type(&self) -> VocabType {
        self.vocab_type
    }

    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    pub fn bos(&self) -> Option<u32> {
        self.special.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.special.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.special.eot
    }

    /// Whether BOS is prepended when `add_special` is true.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether EOS is appended when `add_special` is true.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether the model wants a SEP token after the text (BERT-style).
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }

    /// Whether generation should stop at `id` (EOS, EOT, EOM and the other end-of-generation tokens).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// Raw vocabulary text of a token.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id)
    }

    /// Attribute bits (see [`attr`]) of a token.
    pub fn token_attr(&self, id: u32) -> u32 {
        self.tokens
            .get(id as usize)
            .map_or(attr::UNDEFINED, |t| t.attr)
    }

    /// Id of the token whose vocabulary text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.texts.id(text)
    }

    pub(crate) fn byte_to_token(&self, b: u8) -> Option<u32> {
        match self.vocab_type {
            VocabType::Spm => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                let name = [
                    b'<',
                    b'0',
                    b'x',
                    HEX[(b >> 4) as usize],
                    HEX[(b & 15) as usize],
                    b'>',
                ];
                let name = std::str::from_utf8(&name).ok()?;
                self.token_id(name).or_else(|| {
                    if b < 0x80 {
                        self.token_id(&(b as char).to_string())
                    } else {
                        None
                    }
                })
            }
            _ => self.token_id(&unicode::byte_to_char(b).to_string()),
        }
    }

    /// Splits `text` around special tokens (control/unknown ones only when `parse_special`;
    /// user-defined ones always), like llama.cpp's `tokenizer_st_partition`.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = vec![Fragment::Text(0, text.len())];
        let bytes = text.as_bytes();
        for &id in &self.special_cache {
            let t = &self.tokens[id as usize];
            if !parse_special && t.attr & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            let needle = self.texts.get(id).unwrap_or("");
            if !frags
                .iter()
                .any(|f| matches!(f, Fragment::Text(s, e) if text[*s..*e].contains(needle)))
            {
                continue;
            }
            let mut out = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(mut start, end) = f else {
                    out.push(f);
                    continue;
                };
                while let Some(pos) = text[start..end].find(needle) {
                    let m = start + pos;
                    let mut left_end = m;
                    if t.attr & attr::LSTRIP != 0 {
                        while left_end > start && is_c_space(bytes[left_end - 1]) {
                            left_end -= 1;
                        }
                    }
                    if left_end > start {
                        out.push(Fragment::Text(start, left_end));
                    }
                    out.push(Fragment::Token(id));
                    start = m + needle.len();
                    if t.attr & attr::RSTRIP != 0 {
                        while start < end && is_c_space(bytes[start]) {
                            start += 1;
                        }
                    }
                }
                if start < end {
                    out.push(Fragment::Text(start, end));
                }
            }
            frags = out;
        }
        frags
    }

    /// Tokenizes `text`. `add_special` adds BOS/EOS/SEP as the model's flags say; `parse_special`
    /// turns the text of control tokens (e.g. `<|im_start|>`) into those tokens.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        let frags = if text.is_empty() {
            Vec::new()
        } else {
            self.partition(text, parse_special)
        };
        match self.vocab_type {
            VocabType::Spm => {
                let mut prev_special = true;
                if add_special && self.add_bos {
                    out.extend(self.special.bos);
                }
                let mut buf = String::new();
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push('\u{2581}');
                            }
                            for c in text[s..e].chars() {
                                buf.push(if c == ' ' { '\u{2581}' } else { c });
                            }
                            spm::tokenize(self, &buf, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
                if add_special && self.add_eos {
                    out.extend(self.special.eos);
                }
            }
            VocabType::Bpe => {
                if add_special && self.add_bos {
                    out.extend(self.special.bos);
                }
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => self.bpe_tokenize(&text[s..e], &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special && self.add_eos {
                    out.extend(self.special.eos);
                }
            }
            VocabType::Wpm => {
                if add_special {
                    out.extend(self.special.bos);
                }
                for f in &frags {
                    match *f {
                        Fragment::Text(s, e) => wpm::tokenize(self, &text[s..e], &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special {
                    out.extend(self.special.sep);
                }
            }
        }
        out
    }

    fn bpe_tokenize(&self, text: &str, out: &mut Vec<u32>) {
        let Some(bpe) = &self.bpe else { return };
        let escaped;
        let text = if bpe.escape_whitespaces {
            escaped = text.replace(' ', "\u{2581}");
            escaped.as_str()
        } else {
            text
        };
        let mut word = String::new();
        let mut spans = Vec::new();
        for chunk in bpe.pre_tokenize(text) {
            bpe::encode_word(chunk, bpe.byte_encode, &mut word);
            let whole = bpe.ignore_merges
                || (bpe.newline_words && !word.is_empty() && word.bytes().all(|b| b == b'\n'));
            if whole {
                if let Some(id) = self.token_id(&word) {
                    out.push(id);
                    continue;
                }
            }
            spans.clear();
            bpe.merge_word(&word, &mut spans);
            for &(s, e) in &spans {
                let piece = &word[s..e];
                match self.token_id(piece) {
                    Some(id) => out.push(id),
                    None => {
                        // llama.cpp falls back to single-byte tokens of the piece: the byte
                        // itself (byte-level BPE; only ASCII can be a one-byte token) or `<0xXX>`.
                        for &b in piece.as_bytes() {
                            let id = if bpe.byte_encode {
                                if b < 0x80 {
                                    self.token_id(&(b as char).to_string())
                                } else {
                                    None
                                }
                            } else {
                                self.token_id(&format!("<0x{b:02X}>"))
                            };
                            out.extend(id);
                        }
                    }
                }
            }
        }
    }

    fn compute_piece(&self, id: u32) -> Vec<u8> {
        let (Some(t), Some(text)) = (self.tokens.get(id as usize), self.texts.get(id)) else {
            return Vec::new();
        };
        if t.attr & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            return text.as_bytes().to_vec();
        }
        if t.attr & attr::NORMAL != 0 {
            return match self.vocab_type {
                VocabType::Spm | VocabType::Wpm => text.replace('\u{2581}', " ").into_bytes(),
                VocabType::Bpe if self.bpe.as_ref().is_some_and(|b| b.escape_whitespaces) => {
                    text.replace('\u{2581}', " ").into_bytes()
                }
                VocabType::Bpe => {
                    let mut out = Vec::with_capacity(text.len());
                    for c in text.chars() {
                        match unicode::char_to_byte(c) {
                            Some(b) => out.push(b),
                            None => {
                                out.extend_from_slice(b"[UNK_BYTE_0x");
                                let mut tmp = [0u8; 4];
                                for b in c.encode_utf8(&mut tmp).bytes() {
                                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                                }
                                out.extend_from_slice(text.as_bytes());
                                out.push(b']');
                            }
                        }
                    }
                    out
                }
            };
        }
        if t.attr & attr::BYTE != 0 && self.vocab_type != VocabType::Wpm {
            if let Some(b) = text.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                return vec![b];
            }
        }
        Vec::new()
    }

    /// The bytes a token stands for. With `special == false`, control and unknown tokens give
    /// nothing. Byte tokens and partial byte-level pieces may be incomplete UTF-8.
    pub fn token_to_piece(&self, id: u32, special: bool) -> &[u8] {
        let Some(t) = self.tokens.get(id as usize) else {
            return &[];
        };
        if !special && t.attr & (attr::UNKNOWN | attr::CONTROL) != 0 {
            return &[];
        }
        self.pieces.get(id as usize)
    }

    /// llama.cpp's `detokenize`: concatenated pieces, the SentencePiece leading space removed,
    /// optional removal of the BOS/EOS the tokenizer would add, and the model's space clean-up.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos {
            if let (Some(&first), Some(bos)) = (ids.first(), self.special.bos) {
                if first == bos {
                    remove_space = false;
                    ids = &ids[1..];
                }
            }
        }
        if remove_special && self.add_eos {
            if let (Some(&last), Some(eos)) = (ids.last(), self.special.eos) {
                if last == eos {
                    ids = &ids[..ids.len() - 1];
                }
            }
        }
        let mut text = Vec::new();
        for &id in ids {
            let mut piece = self.token_to_piece(id, unparse_special);
            if remove_space && piece.first() == Some(&b' ') {
                piece = &piece[1..];
            }
            remove_space = false;
            text.extend_from_slice(piece);
        }
        if self.clean_spaces {
            text = clean_up_spaces(&text);
        }
        text
    }

    /// Text of `ids`: control and unknown tokens give nothing, nothing else is removed; invalid
    /// UTF-8 is replaced with U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.detokenize(ids, false, false)).into_owned()
    }
}

/// llama.cpp's `clean_up_tokenization_spaces` passes.
fn clean_up_spaces(t: &[u8]) -> Vec<u8> {
    // " ?", " !", " .", " ,"
    let mut a: Vec<u8> = Vec::with_capacity(t.len());
    for (i, &x) in t.iter().enumerate() {
        if i > 0 && t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            a.pop();
        }
        a.push(x);
    }
    // " ' " → "'" (llama.cpp overwrites the dropped space with NUL in place; mimic that)
    let mut b: Vec<u8> = Vec::with_capacity(a.len());
    let mut i = 0;
    while i < a.len() {
        let x = a[i];
        if i > 0 && x == b'\'' && i + 1 < a.len() && a[i - 1] == b' ' && a[i + 1] == b' ' {
            b.pop();
            b.push(x);
            a[i + 1] = 0;
            i += 2;
            continue;
        }
        b.push(x);
        i += 1;
    }
    // " 's", " 'm", " 're", " 've" → no space
    let mut c: Vec<u8> = Vec::with_capacity(b.len());
    for i in 0..b.len() {
        let x = b[i];
        if i > 0 && b[i - 1] == b' ' && x == b'\'' && i + 1 < b.len() {
            let x1 = b[i + 1];
            let x2 = b.get(i + 2).copied();
            if x1 == b's'
                || x1 == b'm'
                || (x1 == b'r' && x2 == Some(b'e'))
                || (x1 == b'v' && x2 == Some(b'e'))
            {
                c.pop();
            }
        }
        c.push(x);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spm_spec() -> TokenizerSpec {
        let mut tokens: Vec<String> = [
            "<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab", "<ctl>",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut types = vec![2, 3, 3, 1, 1, 1, 1, 1, 1, 3];
        let mut scores = vec![0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -3.0, -0.5, 0.0];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(token_type::BYTE);
            scores.push(0.0);
        }
        TokenizerSpec {
            model: "llama".into(),
            tokens,
            scores: Some(scores),
            token_types: Some(types),
            ..Default::default()
        }
    }

    #[test]
    fn spm_merges_by_score_with_byte_fallback() {
        let tok = Tokenizer::from_spec(spm_spec()).unwrap();
        // "▁ab" has the best score; "é" is not in the vocab and falls back to its two UTF-8 bytes.
        let byte = |b: u8| 10 + b as u32;
        assert_eq!(
            tok.tokenize("ab é", true, false),
            vec![1, 8, 3, byte(0xC3), byte(0xA9)]
        );
        assert_eq!(tok.decode(&tok.tokenize("ab é", false, false)), "ab é");
        // Control tokens are parsed only on request; text after a special token gets the space
        // prefix again (as in llama.cpp).
        assert_eq!(tok.tokenize("<ctl>ab", false, true), vec![9, 8]);
        assert_ne!(tok.tokenize("<ctl>ab", false, false)[0], 9);
        assert_eq!(tok.token_to_piece(9, false), b"");
        assert_eq!(tok.token_to_piece(9, true), b"<ctl>");
    }

    #[test]
    fn bpe_from_spec() {
        let mut tokens: Vec<String> = (0..=255u8)
            .map(|b| unicode::byte_to_char(b).to_string())
            .collect();
        tokens.extend(["Ġa", "Ġab", "<|end|>"].map(String::from));
        let spec = TokenizerSpec {
            model: "gpt2".into(),
            pre: Some("gpt-2".into()),
            token_types: Some(
                (0..tokens.len())
                    .map(|i| if i == 258 { 3 } else { 1 })
                    .collect(),
            ),
            tokens,
            merges: Some(vec!["Ġ a".into(), "Ġa b".into()]),
            ..Default::default()
        };
        let tok = Tokenizer::from_spec(spec).unwrap();
        assert_eq!(tok.tokenize(" ab a", false, false), vec![257, 256]);
        assert_eq!(
            tok.tokenize("x<|end|>", false, true),
            vec![b'x' as u32, 258]
        );
        assert!(tok.is_eog(258));
        assert_eq!(tok.decode(&[257, 256, 258]), " ab a");
    }

    #[test]
    fn bad_specs_are_errors() {
        assert!(Tokenizer::from_spec(TokenizerSpec::default()).is_err());
        let mut s = spm_spec();
        s.model = "nope".into();
        assert!(Tokenizer::from_spec(s).is_err());
        let mut s = spm_spec();
        s.scores = Some(vec![0.0]);
        assert!(Tokenizer::from_spec(s).is_err());
        let mut s = spm_spec();
        s.model = "gpt2".into();
        assert!(Tokenizer::from_spec(s).is_err(), "BPE needs merges");
        // An unknown pre-tokenizer is refused (as llama.cpp does), not replaced by the default.
        let mut s = spm_spec();
        s.model = "gpt2".into();
        s.merges = Some(Vec::new());
        s.pre = Some("no-such-pre".into());
        let err = Tokenizer::from_spec(s).err().expect("unknown pre");
        assert!(err.to_string().contains("no-such-pre"), "{err}");
    }

    #[test]
    fn clean_spaces() {
        assert_eq!(
            clean_up_spaces(b"a , b . it 's ' x"),
            b"a, b. it's'x".to_vec()
        );
    }
}
