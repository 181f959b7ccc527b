//! Unicode helpers shared by the tokenizers: GPT-2's byte ↔ unicode mapping and general-category
//! lookups (letters, numbers, punctuation, symbols, marks, control, white space).

use std::sync::OnceLock;

/// GPT-2's `bytes_to_unicode`: printable Latin-1 bytes map to themselves, the others to U+0100 onwards.
/// Byte → char, and (char, byte) sorted by char.
type ByteTables = ([char; 256], Vec<(char, u8)>);

fn byte_tables() -> &'static ByteTables {
    static TABLES: OnceLock<ByteTables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut fwd = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..256u32 {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            let cp = if printable {
                b
            } else {
                let c = next;
                next += 1;
                c
            };
            fwd[b as usize] = char::from_u32(cp).unwrap_or('\u{FFFD}');
        }
        let mut rev: Vec<(char, u8)> = fwd.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        rev.sort_unstable();
        (fwd, rev)
    })
}

/// The character GPT-2's byte-level encoding uses for `b`.
pub fn byte_to_char(b: u8) -> char {
    byte_tables().0[b as usize]
}

/// The byte a GPT-2 byte-level character stands for.
pub fn char_to_byte(c: char) -> Option<u8> {
    let rev = &byte_tables().1;
    rev.binary_search_by(|(k, _)| k.cmp(&c))
        .ok()
        .map(|i| rev[i].1)
}

/// Appends the GPT-2 byte-level encoding of `text` to `out`.
pub fn byte_encode_into(text: &str, out: &mut String) {
    let fwd = &byte_tables().0;
    for &b in text.as_bytes() {
        out.push(fwd[b as usize]);
    }
}

/// Sorted, disjoint code point ranges of one Unicode class.
struct Ranges(Vec<(u32, u32)>);

impl Ranges {
    fn from_class(pattern: &str) -> Ranges {
        let mut out = Vec::new();
        if let Ok(hir) = regex_syntax::Parser::new().parse(pattern) {
            if let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(cls)) =
                hir.kind()
            {
                out = cls
                    .ranges()
                    .iter()
                    .map(|r| (r.start() as u32, r.end() as u32))
                    .collect();
            }
        }
        Ranges(out)
    }

    fn contains(&self, c: char) -> bool {
        let cp = c as u32;
        let r = &self.0;
        let i = r.partition_point(|&(_, hi)| hi < cp);
        i < r.len() && r[i].0 <= cp
    }
}

struct Classes {
    letter: Ranges,
    number: Ranges,
    punct: Ranges,
    symbol: Ranges,
    mark: Ranges,
    control: Ranges,
}

fn classes() -> &'static Classes {
    static C: OnceLock<Classes> = OnceLock::new();
    C.get_or_init(|| Classes {
        letter: Ranges::from_class(r"\p{L}"),
        number: Ranges::from_class(r"\p{N}"),
        punct: Ranges::from_class(r"\p{P}"),
        symbol: Ranges::from_class(r"\p{S}"),
        mark: Ranges::from_class(r"\p{M}"),
        // llama.cpp's "control" flag: Cc, Cf, Co and Cs (Cn is "undefined").
        control: Ranges::from_class(r"[\p{Cc}\p{Cf}\p{Co}]"),
    })
}

/// Character properties in the shape of llama.cpp's `unicode_cpt_flags`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flags {
    pub whitespace: bool,
    pub letter: bool,
    pub number: bool,
    pub punctuation: bool,
    pub symbol: bool,
    pub accent_mark: bool,
    pub control: bool,
}

pub fn flags(c: char) -> Flags {
    let cl = classes();
    Flags {
        whitespace: c.is_whitespace(),
        letter: cl.letter.contains(c),
        number: cl.number.contains(c),
        punctuation: cl.punct.contains(c),
        symbol: cl.symbol.contains(c),
        accent_mark: cl.mark.contains(c),
        control: cl.control.contains(c),
    }
}

/// Han (CJK ideograph) blocks, as Kimi-K2's pre-tokenizer in llama.cpp counts them.
pub fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2EBEF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// First code point of the canonical decomposition (llama.cpp's simplified NFD).
pub fn nfd_first(c: char) -> char {
    let mut first = None;
    unicode_normalization::char::decompose_canonical(c, |d| {
        if first.is_none() {
            first = Some(d);
        }
    });
    first.unwrap_or(c)
}

/// Simple one-to-one lowercase mapping; characters whose lowercase is longer stay as they are.
pub fn to_lower(c: char) -> char {
    let mut it = c.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_mapping_round_trips() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('€'), None);
    }

    #[test]
    fn categories() {
        assert!(flags('a').letter && flags('中').letter);
        assert!(flags('7').number && flags('Ⅻ').number);
        assert!(flags('!').punctuation && flags('$').symbol);
        assert!(flags('\u{301}').accent_mark);
        assert!(flags('\u{3000}').whitespace && flags('\t').whitespace);
        assert!(flags('\u{200B}').control);
        assert_eq!(nfd_first('é'), 'e');
        assert_eq!(to_lower('Ä'), 'ä');
    }
}
