//! Compact string storage for vocabularies of up to hundreds of thousands of entries.
//!
//! A `String` per token costs its 24-byte header and a heap block (32 bytes or more with the
//! allocator's overhead) for a text of 7 bytes on average, and a `HashMap<String, u32>` for
//! lookups keeps a second copy: gemma3's 262,144 tokens took ~60 MB that way, more than
//! llama.cpp's whole tokenizer. Here every text lives in one buffer and the lookup table holds
//! only ids (4 bytes per slot).

use std::hash::Hasher;

use super::fxhash::FxHasher;

/// Texts appended one after another; entry `i` is `buf[ends[i - 1]..ends[i]]`.
#[derive(Default)]
pub(crate) struct StrArena {
    buf: String,
    ends: Vec<usize>,
}

impl StrArena {
    pub fn with_capacity(n: usize) -> StrArena {
        StrArena {
            buf: String::new(),
            ends: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, s: &str) {
        self.buf.push_str(s);
        self.ends.push(self.buf.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        // Each entry was pushed whole, so its bounds are char boundaries.
        self.buf.get(start..end)
    }

    /// Frees the growth slack once everything is pushed.
    pub fn shrink_to_fit(&mut self) {
        self.buf.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

/// Byte strings appended one after another (token pieces, which may be partial UTF-8).
#[derive(Default)]
pub(crate) struct ByteArena {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl ByteArena {
    pub fn with_capacity(n: usize) -> ByteArena {
        ByteArena {
            buf: Vec::new(),
            ends: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        self.ends.push(self.buf.len());
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let Some(&end) = self.ends.get(i) else {
            return &[];
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..end]
    }

    pub fn shrink_to_fit(&mut self) {
        self.buf.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

const EMPTY: u32 = u32::MAX;

/// A [`StrArena`] with a lookup from text to the first entry holding it (open addressing,
/// linear probing, at most half full).
#[derive(Default)]
pub(crate) struct StrTable {
    texts: StrArena,
    slots: Vec<u32>,
    n_keys: usize,
}

/// The start slot of `s` in a table of `len` (a power of two) slots: the top bits of the Fx
/// hash, since its low bits depend only on the text's first bytes (a multiply carries upward),
/// which would pile tokens that share a prefix into one probe run.
fn start(s: &str, len: usize) -> usize {
    let mut h = FxHasher::default();
    h.write(s.as_bytes());
    (h.finish() >> (64 - len.trailing_zeros())) as usize
}

impl StrTable {
    pub fn with_capacity(n: usize) -> StrTable {
        StrTable {
            texts: StrArena::with_capacity(n),
            slots: vec![EMPTY; (2 * n).next_power_of_two().max(16)],
            n_keys: 0,
        }
    }

    pub fn get(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize)
    }

    /// The slot holding `s`'s id, or the empty slot where it would go.
    fn slot(&self, s: &str) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = start(s, self.slots.len());
        loop {
            let id = self.slots[i];
            if id == EMPTY || self.texts.get(id as usize) == Some(s) {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// The first entry whose text is `s`.
    pub fn id(&self, s: &str) -> Option<u32> {
        match self.slots[self.slot(s)] {
            EMPTY => None,
            id => Some(id),
        }
    }

    /// Appends `s` as a new entry (a text seen before keeps its first id for lookups) and
    /// returns the new entry's id. Ids are u32: callers bound the count (vocabularies are
    /// checked to hold fewer than 2^32 tokens).
    pub fn push(&mut self, s: &str) -> u32 {
        let id = self.texts.len() as u32;
        self.texts.push(s);
        let at = self.slot(s);
        if self.slots[at] == EMPTY {
            self.slots[at] = id;
            self.n_keys += 1;
            if 2 * self.n_keys > self.slots.len() {
                self.grow();
            }
        }
        id
    }

    /// The id of `s`, pushed first if it is new.
    pub fn intern(&mut self, s: &str) -> u32 {
        match self.id(s) {
            Some(id) => id,
            None => self.push(s),
        }
    }

    fn grow(&mut self) {
        let len = 2 * self.slots.len();
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; len]);
        let mask = self.slots.len() - 1;
        for id in old.into_iter().filter(|&id| id != EMPTY) {
            let Some(s) = self.texts.get(id as usize) else {
                continue;
            };
            let mut i = start(s, self.slots.len());
            while self.slots[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = id;
        }
    }

    pub fn shrink_to_fit(&mut self) {
        self.texts.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_first_ids_and_grows() {
        let mut t = StrTable::with_capacity(2);
        let words: Vec<String> = (0..1000).map(|i| format!("w{}", i % 700)).collect();
        for (i, w) in words.iter().enumerate() {
            assert_eq!(t.push(w), i as u32);
        }
        assert_eq!(t.get(999), Some("w299"));
        for i in 0..1000u32 {
            assert_eq!(t.get(i), Some(words[i as usize].as_str()));
            // Duplicates (700..1000 repeat 0..300) look up to their first id.
            assert_eq!(t.id(&words[i as usize]), Some(i % 700));
        }
        assert_eq!(t.id("w700"), None);
        assert_eq!(t.id(""), None);
        assert_eq!(t.intern("w5"), 5);
        assert_eq!(t.intern("new"), 1000);
        assert_eq!(t.get(1001), None);
        t.push("");
        assert_eq!(t.id(""), Some(1001));
    }

    #[test]
    fn arenas_slice_their_entries() {
        let mut a = StrArena::with_capacity(0);
        for s in ["", "▁a", "", "é"] {
            a.push(s);
        }
        assert_eq!(
            (0..5).map(|i| a.get(i)).collect::<Vec<_>>(),
            [Some(""), Some("▁a"), Some(""), Some("é"), None]
        );
        let mut b = ByteArena::with_capacity(0);
        b.push(&[0xE2]);
        b.push(&[]);
        b.push(b"xy");
        assert_eq!(b.get(0), [0xE2]);
        assert_eq!(b.get(1), b"");
        assert_eq!(b.get(2), b"xy");
        assert_eq!(b.get(3), b"");
    }
}
