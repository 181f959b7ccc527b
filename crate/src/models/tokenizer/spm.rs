//! SentencePiece-style tokenization (`tokenizer.ggml.model = llama`): start from single UTF-8
//! characters and repeatedly merge the adjacent pair whose concatenation is the highest-scoring
//! vocabulary token; leftovers fall back to `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::Tokenizer;

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    len: usize,
    prev: i32,
    next: i32,
}

/// Tokenizes `text` (spaces already escaped to ▁) and appends ids to `out`.
pub(crate) fn tokenize(tok: &Tokenizer, text: &str, out: &mut Vec<u32>) {
    let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
    let mut iter = text.char_indices().peekable();
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
    if syms.is_empty() {
        return;
    }
    let mut heap = BinaryHeap::new();
    let try_add = |heap: &mut BinaryHeap<Bigram>, syms: &[Sym], l: i32, r: i32| {
        if l < 0 || r < 0 {
            return;
        }
        let (a, b) = (syms[l as usize], syms[r as usize]);
        let piece = &text[a.start..a.start + a.len + b.len];
        if let Some(id) = tok.token_id(piece) {
            heap.push(Bigram {
                score: tok.tokens[id as usize].score,
                left: l as usize,
                right: r as usize,
                size: piece.len(),
            });
        }
    };
    for i in 1..syms.len() {
        try_add(&mut heap, &syms, i as i32 - 1, i as i32);
    }
    while let Some(bg) = heap.pop() {
        let (a, b) = (syms[bg.left], syms[bg.right]);
        if a.len == 0 || b.len == 0 || a.len + b.len != bg.size {
            continue;
        }
        syms[bg.left].len += b.len;
        syms[bg.right].len = 0;
        syms[bg.left].next = b.next;
        if b.next >= 0 {
            syms[b.next as usize].prev = bg.left as i32;
        }
        let (p, n) = (syms[bg.left].prev, syms[bg.left].next);
        try_add(&mut heap, &syms, p, bg.left as i32);
        try_add(&mut heap, &syms, bg.left as i32, n);
    }
    let mut i = 0i32;
    while i != -1 {
        let s = syms[i as usize];
        let piece = &text[s.start..s.start + s.len];
        match tok.token_id(piece) {
            Some(id) => out.push(id),
            None => {
                // Every merged symbol is a vocabulary token, so only unmerged characters get here.
                for &b in piece.as_bytes() {
                    if let Some(id) = tok.byte_to_token(b) {
                        out.push(id);
                    }
                }
            }
        }
        i = s.next;
    }
}
