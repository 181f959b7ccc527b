//! Byte-level BPE (`tokenizer.ggml.model = gpt2`): regex pre-tokenization chosen by
//! `tokenizer.ggml.pre`, GPT-2 byte encoding, then rank-ordered merges with a priority queue.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::fxhash::{self, FxHashMap};
use super::pretok::{PreConfig, PreTokenizer};
use super::strtab::StrTable;
use super::unicode;
use crate::Result;

/// A merge candidate: (rank, left, right, left_len, right_len).
type Candidate = (u32, usize, usize, usize, usize);

/// Compiled BPE state: pre-tokenizer and merge ranks over interned pieces.
pub(crate) struct Bpe {
    pre: PreTokenizer,
    /// Every string that appears on either side of a merge, interned.
    pieces: StrTable,
    /// (left piece, right piece) → merge rank (lower merges first).
    ranks: FxHashMap<(u32, u32), u32>,
    pub ignore_merges: bool,
    pub byte_encode: bool,
    pub escape_whitespaces: bool,
    pub newline_words: bool,
}

impl Bpe {
    pub fn new(cfg: &PreConfig, merges: &[String]) -> Result<Bpe> {
        let pre = PreTokenizer::new(cfg)?;
        let mut pieces = StrTable::with_capacity(merges.len());
        let mut ranks = fxhash::map_with_capacity(merges.len());
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
            let ia = pieces.intern(a);
            let ib = pieces.intern(b);
            ranks.entry((ia, ib)).or_insert(rank as u32);
        }
        pieces.shrink_to_fit();
        Ok(Bpe {
            pre,
            pieces,
            ranks,
            ignore_merges: cfg.ignore_merges,
            byte_encode: cfg.byte_encode,
            escape_whitespaces: cfg.escape_whitespaces,
            newline_words: cfg.newline_words,
        })
    }

    /// Splits `text` into the words BPE merges within.
    pub fn pre_tokenize<'t>(&self, text: &'t str) -> Vec<&'t str> {
        self.pre.split(text)
    }

    fn rank(&self, left: &str, right: &str) -> Option<u32> {
        let l = self.pieces.id(left)?;
        let r = self.pieces.id(right)?;
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

/// Byte-level encodes `word` into `buf` (cleared first), or copies it when `byte_encode` is off.
pub(crate) fn encode_word(word: &str, byte_encode: bool, buf: &mut String) {
    buf.clear();
    if byte_encode {
        unicode::byte_encode_into(word, buf);
    } else {
        buf.push_str(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_rank() {
        let merges = vec!["a b".to_string(), "ab c".to_string(), "b c".to_string()];
        let bpe = Bpe::new(
            &super::super::pretok::pre_config(Some("gpt-2")).unwrap(),
            &merges,
        )
        .unwrap();
        let mut out = Vec::new();
        bpe.merge_word("abc", &mut out);
        assert_eq!(out, vec![(0, 3)]);
        out.clear();
        bpe.merge_word("bcab", &mut out);
        assert_eq!(out, vec![(0, 2), (2, 4)]);
    }
}
