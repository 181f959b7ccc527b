//! Byte-level BPE (`tokenizer.ggml.model = gpt2`): regex pre-tokenization chosen by
//! `tokenizer.ggml.pre`, GPT-2 byte encoding, then rank-ordered merges with a priority queue.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use fancy_regex::Regex;

use super::fxhash::{self, FxHashMap};
use super::unicode;
use crate::{Error, Result};

// Pre-tokenizer expressions, as llama.cpp uses them (case-insensitive groups spelled out).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const PORO: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const BAILING: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const DEEPSEEK3: &str = r"[!\x22#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Pre-tokenizer settings derived from `tokenizer.ggml.pre`, as llama.cpp's vocab loader sets them.
#[derive(Clone, Debug)]
pub(crate) struct PreConfig {
    pub regexes: Vec<&'static str>,
    pub ignore_merges: bool,
    pub clean_spaces: bool,
    /// `Some(true)` where llama.cpp forces add_bos for this pre-tokenizer (metadata may still override).
    pub add_bos: Option<bool>,
    pub add_sep: bool,
    pub no_bos_token: bool,
    /// Whether the name was recognised (otherwise the default expressions are used).
    pub known: bool,
}

pub(crate) fn pre_config(pre: Option<&str>) -> PreConfig {
    let default_regexes = vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];
    let starcoder = vec![r"\p{N}", GPT2];
    let mut c = PreConfig {
        regexes: default_regexes.clone(),
        ignore_merges: false,
        clean_spaces: true,
        add_bos: None,
        add_sep: false,
        no_bos_token: false,
        known: true,
    };
    let name = pre.unwrap_or("");
    match name {
        "" | "default" => {}
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => {
            c.regexes = vec![LLAMA3];
            c.ignore_merges = true;
            c.add_bos = Some(true);
        }
        "dbrx" | "smaug-bpe" => c.regexes = vec![LLAMA3],
        "deepseek-llm" => {
            c.regexes = vec![
                "[\r\n]",
                r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
                r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
                r"\s+$",
                r"[一-龥ࠀ-一가-퟿]+",
                r"\p{N}+",
            ];
            c.clean_spaces = false;
        }
        "deepseek-coder" => {
            c.regexes = vec![
                "[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                r"[一-龥ࠀ-一가-퟿]+",
                r"\p{N}",
            ];
            c.clean_spaces = false;
        }
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => {
            c.regexes = vec![r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3];
            c.clean_spaces = false;
        }
        "falcon" => c.regexes = vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            c.regexes = starcoder
        }
        "command-r" | "smollm" => {
            c.regexes = starcoder;
            c.clean_spaces = false;
        }
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" | "mpt" | "olmo" | "jais" => {
            c.regexes = vec![GPT2]
        }
        "trillion" | "granite-docling" => {
            c.regexes = vec![GPT2];
            c.clean_spaces = false;
        }
        "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => {
            c.regexes = vec![GPT2];
            c.add_sep = true;
        }
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open"
        | "grok-2" => {
            c.regexes = vec![QWEN2];
            c.clean_spaces = false;
        }
        "stablelm2" | "megrez" => c.regexes = vec![QWEN2],
        "qwen35" => {
            c.regexes = vec![QWEN35];
            c.clean_spaces = false;
        }
        "poro-chat" => {
            c.regexes = vec![PORO];
            c.clean_spaces = false;
        }
        "bloom" | "gpt3-finnish" => c.regexes = vec![PORO],
        "chatglm-bpe" | "glm4" => {
            c.regexes = vec![LLAMA3];
            c.no_bos_token = true;
        }
        "tekken" => {
            c.regexes = vec![TEKKEN];
            c.clean_spaces = false;
            c.ignore_merges = true;
            c.add_bos = Some(true);
        }
        "gpt-4o" | "llama4" | "kanana2" | "minimax-m2" => {
            c.regexes = vec![GPT4O];
            c.clean_spaces = false;
        }
        "seed-coder" => {
            c.regexes = vec![SEED_CODER];
            c.clean_spaces = false;
        }
        "bailingmoe" | "bailingmoe2" | "llada-moe" => {
            c.regexes = vec![BAILING];
            c.clean_spaces = false;
        }
        _ => c.known = false,
    }
    c
}

/// A merge candidate: (rank, left, right, left_len, right_len).
type Candidate = (u32, usize, usize, usize, usize);

/// Compiled BPE state: pre-tokenizer expressions and merge ranks over interned pieces.
pub(crate) struct Bpe {
    regexes: Vec<Regex>,
    /// Every string that appears on either side of a merge, interned.
    pieces: FxHashMap<String, u32>,
    /// (left piece, right piece) → merge rank (lower merges first).
    ranks: FxHashMap<(u32, u32), u32>,
    pub ignore_merges: bool,
}

impl Bpe {
    pub fn new(cfg: &PreConfig, merges: &[String]) -> Result<Bpe> {
        let regexes = cfg
            .regexes
            .iter()
            .map(|r| {
                Regex::new(r)
                    .map_err(|e| Error::Model(format!("bad pre-tokenizer regex {r:?}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut pieces: FxHashMap<String, u32> = fxhash::map_with_capacity(merges.len());
        let mut ranks = fxhash::map_with_capacity(merges.len());
        let intern = |s: &str, pieces: &mut FxHashMap<String, u32>| -> u32 {
            if let Some(&id) = pieces.get(s) {
                return id;
            }
            let id = pieces.len() as u32;
            pieces.insert(s.to_owned(), id);
            id
        };
        for (rank, m) in merges.iter().enumerate() {
            // llama.cpp splits at the first space found from byte 1 on.
            let Some(pos) = m
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&b| b == b' ')
                .map(|p| p + 1)
            else {
                continue;
            };
            let (a, b) = (&m[..pos], &m[pos + 1..]);
            let ia = intern(a, &mut pieces);
            let ib = intern(b, &mut pieces);
            ranks.entry((ia, ib)).or_insert(rank as u32);
        }
        Ok(Bpe {
            regexes,
            pieces,
            ranks,
            ignore_merges: cfg.ignore_merges,
        })
    }

    /// Splits `text` with each expression in turn; unmatched stretches stay pieces of their own.
    pub fn pre_tokenize<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut chunks: Vec<&str> = vec![text];
        for re in &self.regexes {
            let mut next = Vec::with_capacity(chunks.len() * 2);
            for chunk in chunks {
                let mut last = 0;
                for m in re.find_iter(chunk) {
                    let Ok(m) = m else {
                        // Backtrack limit hit: keep the rest of the chunk whole.
                        break;
                    };
                    if m.start() == m.end() {
                        continue;
                    }
                    if m.start() > last {
                        next.push(&chunk[last..m.start()]);
                    }
                    next.push(m.as_str());
                    last = m.end();
                }
                if last < chunk.len() {
                    next.push(&chunk[last..]);
                }
            }
            chunks = next;
        }
        chunks
    }

    fn rank(&self, left: &str, right: &str) -> Option<u32> {
        let l = *self.pieces.get(left)?;
        let r = *self.pieces.get(right)?;
        self.ranks.get(&(l, r)).copied()
    }

    /// Merges one byte-encoded word; pushes the resulting symbol spans (byte ranges into `word`).
    pub fn merge_word(&self, word: &str, out: &mut Vec<(usize, usize)>) {
        #[derive(Clone, Copy)]
        struct Sym {
            start: usize,
            len: usize,
            prev: i32,
            next: i32,
        }
        let mut syms: Vec<Sym> = Vec::with_capacity(word.len());
        let mut iter = word.char_indices().peekable();
        while let Some((start, c)) = iter.next() {
            let idx = syms.len() as i32;
            let next = if iter.peek().is_some() { idx + 1 } else { -1 };
            syms.push(Sym {
                start,
                len: c.len_utf8(),
                prev: idx - 1,
                next,
            });
        }
        if syms.len() <= 1 {
            out.extend(syms.iter().map(|s| (s.start, s.start + s.len)));
            return;
        }
        // (rank, left, right, left_len, right_len), smallest rank then leftmost first.
        let mut heap: BinaryHeap<Reverse<Candidate>> = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], l: i32, r: i32| {
            if l < 0 || r < 0 {
                return;
            }
            let (a, b) = (syms[l as usize], syms[r as usize]);
            let left = &word[a.start..a.start + a.len];
            let right = &word[b.start..b.start + b.len];
            if let Some(rank) = self.rank(left, right) {
                heap.push(Reverse((rank, l as usize, r as usize, a.len, b.len)));
            }
        };
        for i in 1..syms.len() {
            push(&mut heap, &syms, i as i32 - 1, i as i32);
        }
        while let Some(Reverse((_, l, r, llen, rlen))) = heap.pop() {
            let (a, b) = (syms[l], syms[r]);
            if a.len == 0 || b.len == 0 || a.len != llen || b.len != rlen {
                continue;
            }
            syms[l].len += b.len;
            syms[r].len = 0;
            syms[l].next = b.next;
            if b.next >= 0 {
                syms[b.next as usize].prev = l as i32;
            }
            let (p, n) = (syms[l].prev, syms[l].next);
            push(&mut heap, &syms, p, l as i32);
            push(&mut heap, &syms, l as i32, n);
        }
        out.extend(
            syms.iter()
                .filter(|s| s.len > 0)
                .map(|s| (s.start, s.start + s.len)),
        );
    }
}

/// Byte-level encodes `word` into `buf` (cleared first).
pub(crate) fn encode_word(word: &str, buf: &mut String) {
    buf.clear();
    unicode::byte_encode_into(word, buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_pre_tokenizer() {
        let bpe = Bpe::new(&pre_config(Some("gpt-2")), &[]).unwrap();
        assert_eq!(
            bpe.pre_tokenize("Hello world's  end\n"),
            vec!["Hello", " world", "'s", " ", " end", "\n"]
        );
    }

    #[test]
    fn llama3_digits() {
        let bpe = Bpe::new(&pre_config(Some("llama-bpe")), &[]).unwrap();
        assert_eq!(bpe.pre_tokenize("12345 ab"), vec!["123", "45", " ab"]);
    }

    #[test]
    fn merges_follow_rank() {
        let merges = vec!["a b".to_string(), "ab c".to_string(), "b c".to_string()];
        let bpe = Bpe::new(&pre_config(Some("gpt-2")), &merges).unwrap();
        let mut out = Vec::new();
        bpe.merge_word("abc", &mut out);
        assert_eq!(out, vec![(0, 3)]);
        out.clear();
        bpe.merge_word("bcab", &mut out);
        assert_eq!(out, vec![(0, 2), (2, 4)]);
    }
}
