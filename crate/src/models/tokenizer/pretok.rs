//! BPE pre-tokenization: the `tokenizer.ggml.pre` table (which expressions and flags each name
//! gets in llama.cpp's vocab loader) and the splitter that applies them in turn.
//!
//! llama.cpp recognises a few expressions by their exact text and runs a hand-written splitter
//! for them instead of `std::regex`; those splitters differ from a regex engine at chunk edges,
//! so the same expressions get the same hand-written treatment here ([`Custom`]). Everything else
//! goes through our own engine ([`super::regex`]).

use super::regex::Regex;
use super::unicode::{self, Flags};
use crate::{Error, Result};

const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3_ORIG: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const JAIS2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Escaped: several of these letters have canonically equivalent spellings that editors normalise.
const DEEPSEEK_LLM_LETTERS: &str = "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+";
const DEEPSEEK_LLM_PUNCT: &str = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";
const CJK: &str = "[一-龥ࠀ-一가-퟿]+";
const DEEPSEEK3_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const SPARK_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+";
const KANA_CJK: &str = "[一-龥぀-ゟ゠-ヿ]+";
const YOUTU_CJK: &str = "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+";
const YOUTU_MAIN: &str = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const FALCON_PUNCT: &str = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
const PORO: &str = " ?[^(\\s|.,!?…。，、।۔،)]+";
const TEKKEN: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const GPT4O: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const GRANITE_EMB: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const TINY_AYA_DIGITS: &str = "\\d{1,3}(?=(?:\\d{3})*\\b)";
const TINY_AYA_MAIN: &str = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const BAILING: &str = "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
const SEED_CODER: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const UFAKZEKA: &str = "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const AFMOE_CJK: &str = "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+";
const AFMOE_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const EXAONE_MOE: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
const MINICPM5: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const NEWLINES: &str = "[^\\n]+|[\\n]+";
const KIMI_K2: &str = "\\p{Han}+";
const AFMOE_DIGITS: &str = "\\p{AFMoE_digits}";

/// Pre-tokenizer settings for one `tokenizer.ggml.pre` value, as llama.cpp's loader sets them.
#[derive(Clone, Debug)]
pub(crate) struct PreConfig {
    pub regexes: Vec<&'static str>,
    pub ignore_merges: bool,
    pub clean_spaces: bool,
    /// `Some(true)` where llama.cpp forces add_bos for this pre-tokenizer (metadata may still override).
    pub add_bos: Option<bool>,
    /// add_bos stays true whatever the metadata says (Gemma 4).
    pub force_add_bos: bool,
    pub add_sep: bool,
    pub no_bos_token: bool,
    /// GPT-2 byte-level encoding of the pieces (false: raw UTF-8, `<0xXX>` byte fallback).
    pub byte_encode: bool,
    /// Spaces become U+2581 before splitting (SentencePiece-style BPE) and back when decoding.
    pub escape_whitespaces: bool,
    /// A word of newlines that is itself a token is not merged (Gemma 4).
    pub newline_words: bool,
    /// BPE merges may be absent (Kimi-K2).
    pub merges_optional: bool,
}

/// The settings for `pre` (absent: llama.cpp's default); an unknown name is an error, as there.
pub(crate) fn pre_config(pre: Option<&str>) -> Result<PreConfig> {
    let mut c = PreConfig {
        regexes: vec![FALCON_PUNCT_DEFAULT, GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
        ignore_merges: false,
        clean_spaces: true,
        add_bos: None,
        force_add_bos: false,
        add_sep: false,
        no_bos_token: false,
        byte_encode: true,
        escape_whitespaces: false,
        newline_words: false,
        merges_optional: false,
    };
    let starcoder = vec!["\\p{N}", GPT2];
    let deepseek3 = vec!["\\p{N}{1,3}", KANA_CJK, DEEPSEEK3_MAIN];
    let name = pre.unwrap_or("");
    // Names whose only change from the defaults is clean_spaces = false are folded in below.
    let mut keep_clean = false;
    match name {
        "" | "default" => keep_clean = true,
        "minicpm5" => {
            c.regexes = vec!["\\p{N}{1,3}", MINICPM5];
            c.ignore_merges = true;
            keep_clean = true;
        }
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => {
            c.regexes = vec![LLAMA3];
            c.ignore_merges = true;
            c.add_bos = Some(true);
            keep_clean = true;
        }
        "deepseek-llm" => {
            c.regexes = vec![
                "[\r\n]",
                DEEPSEEK_LLM_LETTERS,
                DEEPSEEK_LLM_PUNCT,
                "\\s+$",
                CJK,
                "\\p{N}+",
            ]
        }
        "deepseek-coder" => c.regexes = vec!["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK, "\\p{N}"],
        "deepseek-v3" | "hunyuan-dense" | "hy_v4" | "joyai-llm" => c.regexes = deepseek3,
        "spark2_5" => c.regexes = vec!["\\p{N}{1,3}", KANA_CJK, SPARK_MAIN, "\\p{N}"],
        "youtu" => {
            c.regexes = vec![YOUTU_CJK, YOUTU_MAIN];
            c.ignore_merges = true;
        }
        "falcon" => {
            c.regexes = vec![FALCON_PUNCT, GPT2, "[0-9][0-9][0-9]"];
            keep_clean = true;
        }
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            c.regexes = starcoder;
            keep_clean = true;
        }
        "command-r" | "smollm" => c.regexes = starcoder,
        "mpt" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
        | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "olmo" | "jais" | "exaone4" => {
            c.regexes = vec![GPT2];
            keep_clean = true;
        }
        "trillion" | "granite-docling" => c.regexes = vec![GPT2],
        "jais-2" => {
            c.regexes = vec![JAIS2];
            keep_clean = true;
        }
        "gemma4" | "granite-embed-multi-311m" | "sarvam-moe" => {
            c.regexes = vec![NEWLINES];
            c.byte_encode = false;
            c.escape_whitespaces = true;
            // llama.cpp gives only Gemma 4 its newline-word fix and forced BOS.
            if name != "sarvam-moe" {
                c.newline_words = true;
                c.force_add_bos = true;
                keep_clean = true;
            }
        }
        "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => {
            c.regexes = vec![GPT2];
            c.add_sep = true;
            keep_clean = true;
        }
        "whitespace" => {
            c.regexes = vec!["\\S+"];
            c.byte_encode = false;
            keep_clean = true;
        }
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => {
            c.regexes = vec![QWEN2]
        }
        "grok-2" => c.regexes = vec![QWEN2],
        "qwen35" => c.regexes = vec![QWEN35],
        "stablelm2" | "megrez" => {
            c.regexes = vec![QWEN2];
            keep_clean = true;
        }
        "dbrx" | "smaug-bpe" => {
            c.regexes = vec![LLAMA3];
            keep_clean = true;
        }
        "poro-chat" => c.regexes = vec![PORO],
        "bloom" | "gpt3-finnish" => {
            c.regexes = vec![PORO];
            keep_clean = true;
        }
        "glm4" | "chatglm-bpe" => {
            c.regexes = vec![LLAMA3];
            c.no_bos_token = true;
            keep_clean = true;
        }
        "viking" => c.regexes = vec![PORO, "\\p{N}"],
        "tekken" => {
            c.regexes = vec![TEKKEN];
            c.ignore_merges = true;
            c.add_bos = Some(true);
        }
        "exaone-moe" => {
            c.regexes = vec![EXAONE_MOE];
            keep_clean = true;
        }
        "chameleon" => {
            c.regexes = vec![
                "<sentinel:[0-9]+>",
                "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                "([\\t\\n]|    |  )",
                "\\p{N}",
                "[\\p{P}!-/:-@\\[-`{-~]",
                GPT2,
            ];
            c.add_bos = Some(true);
        }
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => c.regexes = vec![GPT4O],
        "granite-embed-multi-97m" => {
            c.regexes = vec![GRANITE_EMB];
            c.ignore_merges = true;
        }
        "tiny_aya" | "cohere2moe" => c.regexes = vec![TINY_AYA_DIGITS, TINY_AYA_MAIN],
        "superbpe" => c.regexes = vec!["\\p{N}+", "(?=(\\d{3})+(?!\\d))"],
        "bailingmoe" | "bailingmoe2" | "llada-moe" => c.regexes = vec![BAILING],
        "seed-coder" => c.regexes = vec![SEED_CODER],
        "kimi-k2" => {
            c.regexes = vec![KIMI_K2];
            c.merges_optional = true;
        }
        "ufakzeka" => c.regexes = vec![UFAKZEKA],
        "afmoe" => c.regexes = vec![AFMOE_DIGITS, AFMOE_CJK, AFMOE_MAIN],
        "laguna" => c.regexes = vec![NEWLINES, QWEN2],
        other => {
            return Err(Error::Model(format!(
                "unknown pre-tokenizer type {other:?} (tokenizer.ggml.pre)"
            )))
        }
    }
    if !keep_clean {
        c.clean_spaces = false;
    }
    Ok(c)
}

/// The default list's first expression (llama.cpp's default pre-tokenizer).
const FALCON_PUNCT_DEFAULT: &str = "[\\p{P}\\$\\+<=>\\^~\\|]+";

/// Every `tokenizer.ggml.pre` value llama.cpp knows (for tests and error messages).
pub const PRE_NAMES: &[&str] = &[
    "default",
    "minicpm5",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "deepseek-llm",
    "deepseek-coder",
    "deepseek-v3",
    "spark2_5",
    "youtu",
    "falcon",
    "mpt",
    "starcoder",
    "gpt-2",
    "phi-2",
    "jina-es",
    "jina-de",
    "gigachat",
    "jina-v2-es",
    "jina-v2-de",
    "a.x-4.0",
    "mellum",
    "modern-bert",
    "jais-2",
    "gemma4",
    "granite-embed-multi-311m",
    "sarvam-moe",
    "jina-v1-en",
    "jina-v2-code",
    "roberta-bpe",
    "whitespace",
    "refact",
    "command-r",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "qwen35",
    "stablelm2",
    "olmo",
    "dbrx",
    "smaug-bpe",
    "poro-chat",
    "glm4",
    "chatglm-bpe",
    "viking",
    "jais",
    "tekken",
    "smollm",
    "codeshell",
    "bloom",
    "gpt3-finnish",
    "exaone",
    "exaone4",
    "exaone-moe",
    "chameleon",
    "minerva-7b",
    "megrez",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
    "granite-embed-multi-97m",
    "tiny_aya",
    "cohere2moe",
    "superbpe",
    "trillion",
    "granite-docling",
    "bailingmoe",
    "bailingmoe2",
    "llada-moe",
    "seed-coder",
    "hunyuan",
    "hunyuan-dense",
    "hy_v4",
    "joyai-llm",
    "kimi-k2",
    "ufakzeka",
    "grok-2",
    "afmoe",
    "laguna",
    "minimax-m2",
    "solar-open",
    "mellum2",
];

/// The hand-written splitters llama.cpp uses for these exact expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Custom {
    Gpt2,
    Llama3,
    Qwen2,
    Qwen35,
    KimiK2,
    DigitGroups,
    Newlines,
}

#[derive(Clone, Debug)]
enum Splitter {
    Custom(Custom),
    Regex(Regex),
}

fn splitter(src: &str) -> Result<Splitter> {
    Ok(Splitter::Custom(match src {
        GPT2 => Custom::Gpt2,
        LLAMA3 | LLAMA3_ORIG => Custom::Llama3,
        QWEN2 => Custom::Qwen2,
        QWEN35 => Custom::Qwen35,
        KIMI_K2 => Custom::KimiK2,
        AFMOE_DIGITS | TINY_AYA_DIGITS => Custom::DigitGroups,
        NEWLINES => Custom::Newlines,
        _ => return Regex::new(src).map(Splitter::Regex),
    }))
}

/// A compiled list of splitters.
#[derive(Clone, Debug)]
pub(crate) struct PreTokenizer {
    splitters: Vec<Splitter>,
}

/// One chunk's code points and their properties; positions outside `[a, b)` read as "none".
struct Chunk<'a> {
    cp: &'a [char],
    fl: &'a [Flags],
    a: usize,
    b: usize,
}

impl Chunk<'_> {
    fn c(&self, i: usize) -> Option<char> {
        (self.a <= i && i < self.b).then(|| self.cp[i])
    }
    fn f(&self, i: usize) -> Option<Flags> {
        (self.a <= i && i < self.b).then(|| self.fl[i])
    }
    fn is(&self, i: usize, p: impl Fn(&Flags) -> bool) -> bool {
        self.f(i).is_some_and(|f| p(&f))
    }
    fn letter(&self, i: usize) -> bool {
        self.is(i, |f| f.letter)
    }
    fn number(&self, i: usize) -> bool {
        self.is(i, |f| f.number)
    }
    fn space(&self, i: usize) -> bool {
        self.is(i, |f| f.whitespace)
    }
    fn newline(&self, i: usize) -> bool {
        matches!(self.c(i), Some('\r' | '\n'))
    }

    /// Length of an English contraction (`'s`, `'ll` …) at `i`, optionally case-insensitive.
    fn contraction(&self, i: usize, fold: bool) -> usize {
        if self.c(i) != Some('\'') || i + 1 >= self.b {
            return 0;
        }
        let low = |c: Option<char>| c.map(|c| if fold { c.to_ascii_lowercase() } else { c });
        if matches!(low(self.c(i + 1)), Some('s' | 't' | 'm' | 'd')) {
            return 2;
        }
        if i + 2 < self.b {
            let pair = (low(self.c(i + 1)), low(self.c(i + 2)));
            if matches!(
                pair,
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            ) {
                return 3;
            }
        }
        0
    }

    /// Trailing white space at `i`: the `\s*[\r\n]+`, `\s+(?!\S)` and `\s+` alternatives
    /// (`with_newlines` selects whether the first is part of the expression).
    fn spaces_end(&self, i: usize, with_newlines: bool) -> usize {
        let mut n = 0;
        let mut last_nl = None;
        while self.space(i + n) {
            if self.newline(i + n) {
                last_nl = Some(i + n + 1);
            }
            n += 1;
        }
        if with_newlines {
            if let Some(e) = last_nl {
                return e;
            }
        }
        if n > 1 && i + n < self.b {
            i + n - 1
        } else if n > 0 {
            i + n
        } else {
            i + 1
        }
    }

    /// The end of a run from `i` of characters that are in the chunk and satisfy `p`.
    fn run(&self, mut i: usize, p: impl Fn(&Flags) -> bool) -> usize {
        while self.is(i, &p) {
            i += 1;
        }
        i
    }

    fn split(&self, kind: Custom, ends: &mut Vec<usize>) {
        let other = |f: &Flags| !(f.whitespace || f.letter || f.number);
        let other_m = |f: &Flags| !(f.whitespace || f.letter || f.number || f.accent_mark);
        let mut i = self.a;
        while i < self.b {
            let c = self.cp[i];
            let f = self.fl[i];
            let end = match kind {
                Custom::Newlines => {
                    let nl = c == '\n';
                    let mut e = i;
                    while e < self.b && (self.cp[e] == '\n') == nl {
                        e += 1;
                    }
                    e
                }
                Custom::DigitGroups => {
                    // Digit runs split into groups of three from the right; whatever precedes a
                    // run joins its first group (as llama.cpp's splitter emits them).
                    if !f.number {
                        i += 1;
                        continue;
                    }
                    let e = self.run(i, |f| f.number);
                    let mut g = i + (e - i) % 3;
                    if g > i {
                        ends.push(g);
                    }
                    while g < e {
                        g += 3;
                        ends.push(g);
                    }
                    i = e;
                    continue;
                }
                Custom::Gpt2 => {
                    let k = self.contraction(i, false);
                    let lead = usize::from(c == ' ');
                    if k > 0 {
                        i + k
                    } else if self.letter(i + lead) {
                        self.run(i + lead, |f| f.letter)
                    } else if self.number(i + lead) {
                        self.run(i + lead, |f| f.number)
                    } else if self.is(i + lead, other) {
                        self.run(i + lead, other)
                    } else {
                        self.spaces_end(i, false)
                    }
                }
                Custom::Llama3 | Custom::Qwen2 | Custom::Qwen35 => {
                    let marks = kind == Custom::Qwen35;
                    let wordy = |f: &Flags| f.letter || (marks && f.accent_mark);
                    let k = self.contraction(i, true);
                    let lead_ok = !(c == '\r' || c == '\n' || f.number);
                    if k > 0 {
                        i + k
                    } else if lead_ok && (wordy(&f) || self.is(i + 1, wordy)) {
                        self.run(i + 1, wordy)
                    } else if f.number {
                        if kind == Custom::Llama3 {
                            (i + 3).min(self.run(i, |f| f.number))
                        } else {
                            i + 1
                        }
                    } else {
                        let lead = usize::from(c == ' ');
                        let punct = |f: &Flags| if marks { other_m(f) } else { other(f) };
                        // The next character may be past the chunk: llama.cpp then still takes
                        // this branch (a lone trailing space).
                        if self.f(i + lead).is_none_or(|f| punct(&f)) {
                            let mut e = self.run(i + lead, punct);
                            while self.newline(e) {
                                e += 1;
                            }
                            e
                        } else {
                            self.spaces_end(i, true)
                        }
                    }
                }
                Custom::KimiK2 => self.kimi(i),
            };
            ends.push(end);
            i = end;
        }
    }

    fn kimi(&self, i: usize) -> usize {
        let han = |j: usize| self.c(j).is_some_and(unicode::is_han);
        let c = self.cp[i];
        let f = self.fl[i];
        if han(i) {
            let mut e = i;
            while han(e) {
                e += 1;
            }
            return e;
        }
        let latin = |j: usize| self.letter(j) && !han(j);
        let lead = !(c == '\r' || c == '\n' || f.letter || f.number);
        if latin(i) || (lead && latin(i + 1)) {
            let mut e = i + usize::from(lead);
            while latin(e) {
                e += 1;
            }
            return e + self.contraction(e, true);
        }
        if f.number {
            return (i + 3).min(self.run(i, |f| f.number));
        }
        let lead = usize::from(c == ' ');
        let other = |f: &Flags| !(f.whitespace || f.letter || f.number);
        if self.is(i + lead, other) {
            let mut e = self.run(i + lead, other);
            while self.newline(e) {
                e += 1;
            }
            return e;
        }
        self.spaces_end(i, true)
    }
}

impl PreTokenizer {
    pub fn new(cfg: &PreConfig) -> Result<PreTokenizer> {
        let splitters = cfg
            .regexes
            .iter()
            .map(|r| splitter(r))
            .collect::<Result<Vec<_>>>()?;
        Ok(PreTokenizer { splitters })
    }

    /// Splits `text` with each splitter in turn; stretches between matches stay pieces too.
    pub fn split<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let cp: Vec<char> = text.chars().collect();
        let mut byte_at: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
        byte_at.push(text.len());
        let fl: Vec<Flags> = cp.iter().map(|&c| unicode::flags(c)).collect();
        // Piece boundaries in code points: bounds[k]..bounds[k+1] is a piece.
        let mut bounds = vec![0, cp.len()];
        for s in &self.splitters {
            let mut next = vec![0];
            let prepared = match s {
                Splitter::Regex(re) => Some(re.prepare(&cp)),
                Splitter::Custom(_) => None,
            };
            for w in bounds.windows(2) {
                let (a, b) = (w[0], w[1]);
                let mut cuts = Vec::new();
                match s {
                    Splitter::Custom(kind) => Chunk {
                        cp: &cp,
                        fl: &fl,
                        a,
                        b,
                    }
                    .split(*kind, &mut cuts),
                    Splitter::Regex(re) => {
                        let t = &prepared.as_deref().unwrap_or(&[])[a..b];
                        let mut rel = Vec::new();
                        // Past the step budget the rest of the chunk stays whole.
                        let _ = re.split_points(t, &mut rel);
                        cuts.extend(rel.into_iter().map(|x| a + x));
                    }
                }
                for x in cuts {
                    if x > *next.last().unwrap_or(&0) && x < b {
                        next.push(x);
                    }
                }
                if b > *next.last().unwrap_or(&0) {
                    next.push(b);
                }
            }
            bounds = next;
        }
        bounds
            .windows(2)
            .map(|w| &text[byte_at[w[0]]..byte_at[w[1]]])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::new(&pre_config(Some(pre)).unwrap()).unwrap();
        p.split(text).into_iter().map(String::from).collect()
    }

    #[test]
    fn every_name_compiles() {
        for name in PRE_NAMES {
            let cfg = pre_config(Some(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            PreTokenizer::new(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(pre_config(Some("no-such-pre")).is_err());
    }

    #[test]
    fn custom_splitters() {
        assert_eq!(
            split("gpt-2", "Hello world's  end\n"),
            ["Hello", " world", "'s", " ", " end", "\n"]
        );
        assert_eq!(split("llama-bpe", "12345 ab"), ["123", "45", " ab"]);
        assert_eq!(split("qwen2", "12 ab\n\n"), ["1", "2", " ab", "\n\n"]);
        assert_eq!(split("laguna", "a b\n\nc"), ["a", " b", "\n\n", "c"]);
        assert_eq!(
            split("kimi-k2", "中文ab's 1234"),
            ["中文", "ab's", " ", "123", "4"]
        );
        assert_eq!(split("afmoe", "x1234567"), ["x", "1", "234", "567"]);
    }

    #[test]
    fn regex_pre_tokenizers() {
        assert_eq!(
            split("deepseek-llm", "Hello 世界 123!\n"),
            ["Hello", " ", "世界", " ", "123", "!", "\n"]
        );
        assert_eq!(split("superbpe", "a1234567"), ["a", "1", "234", "567"]);
        assert_eq!(split("gpt-4o", "HelloWorld's"), ["Hello", "World's"]);
    }
}
