//! WordPiece (`tokenizer.ggml.model = bert`) as llama.cpp's llm_tokenizer_wpm: BERT-style
//! normalization (NFD base character, accent stripping, lowercasing), splitting on white space and
//! punctuation, then greedy longest-match against a vocabulary whose word-initial pieces carry a
//! `▁` prefix (GGUF's "phantom space" form of `##` continuation pieces).

use super::unicode::{flags, nfd_first, to_lower};
use super::Tokenizer;

fn is_chinese_char(cp: u32) -> bool {
    (0x4E00..=0x9FFF).contains(&cp)
        || (0x3400..=0x4DBF).contains(&cp)
        || (0x20000..=0x2A6DF).contains(&cp)
        || (0x2A700..=0x2B73F).contains(&cp)
        || (0x2B740..=0x2B81F).contains(&cp)
        || (0x2B920..=0x2CEAF).contains(&cp)
        || (0xF900..=0xFAFF).contains(&cp)
        || (0x2F800..=0x2FA1F).contains(&cp)
}

/// Normalizes and splits `text` into words.
pub(crate) fn preprocess(text: &str, lowercase: bool, strip_accents: bool) -> Vec<String> {
    let mut words: Vec<String> = vec![String::new()];
    for c0 in text.chars() {
        let c = if strip_accents { nfd_first(c0) } else { c0 };
        let f = flags(c);
        if f.whitespace {
            if words.last().is_some_and(|w| !w.is_empty()) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || f.control {
            continue;
        }
        if strip_accents && f.accent_mark {
            continue;
        }
        let lc = if lowercase { to_lower(c) } else { c };
        if f.punctuation || ((c as u32) < 0x7F && f.symbol) || is_chinese_char(c as u32) {
            if words.last().is_some_and(|w| !w.is_empty()) {
                words.push(String::new());
            }
            if let Some(w) = words.last_mut() {
                w.clear();
                w.push(lc);
            }
            words.push(String::new());
        } else if let Some(w) = words.last_mut() {
            w.push(lc);
        }
    }
    if words.last().is_some_and(|w| w.is_empty()) {
        words.pop();
    }
    words
}

pub(crate) fn tokenize(tok: &Tokenizer, text: &str, out: &mut Vec<u32>) {
    let words = preprocess(text, tok.lowercase, tok.strip_accents);
    let mut word1 = String::new();
    for word in &words {
        if word.is_empty() {
            continue;
        }
        word1.clear();
        word1.push('\u{2581}');
        word1.push_str(word);
        let n = word1.len();
        let before = out.len();
        let mut i = 0;
        while i < n {
            let mut matched = false;
            // Longest match first, over the lengths some token has (the same result as trying
            // every end, without hashing substrings no token can equal).
            for &len in tok
                .token_lens
                .iter()
                .filter(|&&len| len > 0 && len <= n - i)
            {
                if let Some(id) = word1.get(i..i + len).and_then(|p| tok.token_id(p)) {
                    out.push(id);
                    matched = true;
                    i += len;
                    break;
                }
            }
            if !matched {
                out.truncate(before);
                break;
            }
        }
        if out.len() == before {
            if let Some(unk) = tok.special.unk {
                out.push(unk);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::preprocess;

    #[test]
    fn bert_preprocess() {
        assert_eq!(
            preprocess("Héllo, WORLD!  a\u{4E2D}b", true, true),
            vec!["hello", ",", "world", "!", "a", "\u{4E2D}", "b"]
        );
    }
}
