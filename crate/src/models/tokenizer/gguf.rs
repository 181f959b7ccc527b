//! Reading a [`TokenizerSpec`] from GGUF metadata (`tokenizer.ggml.*`).

use super::{Tokenizer, TokenizerSpec};
use crate::gguf::{Array, Gguf, Value};
use crate::{Error, Result};

fn bad(key: &str, want: &str) -> Error {
    Error::Model(format!("GGUF key {key} is not {want}"))
}

fn opt_str(g: &Gguf, key: &str) -> Result<Option<String>> {
    g.get(key)
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad(key, "a string"))
        })
        .transpose()
}

fn opt_u32(g: &Gguf, key: &str) -> Result<Option<u32>> {
    g.get(key)
        .map(|v| v.as_u32().ok_or_else(|| bad(key, "a u32")))
        .transpose()
}

fn opt_bool(g: &Gguf, key: &str) -> Result<Option<bool>> {
    g.get(key)
        .map(|v| v.as_bool().ok_or_else(|| bad(key, "a bool")))
        .transpose()
}

fn opt_array<'a>(g: &'a Gguf, key: &str) -> Result<Option<&'a Array>> {
    g.get(key)
        .map(|v| v.as_array().ok_or_else(|| bad(key, "an array")))
        .transpose()
}

fn opt_strings<'a>(g: &'a Gguf, key: &str) -> Result<Option<&'a [String]>> {
    opt_array(g, key)?
        .map(|a| {
            a.as_strings()
                .ok_or_else(|| bad(key, "an array of strings"))
        })
        .transpose()
}

/// A spec and the token / merge arrays it leaves in the GGUF metadata.
type Borrowed<'a> = (TokenizerSpec, &'a [String], Option<&'a [String]>);

impl TokenizerSpec {
    /// Collects the tokenizer description from GGUF metadata. Keys that are absent stay `None`
    /// (llama.cpp's defaults then apply); keys of the wrong type are errors.
    pub fn from_gguf(g: &Gguf) -> Result<TokenizerSpec> {
        let (mut spec, tokens, merges) = TokenizerSpec::from_gguf_borrowed(g)?;
        spec.tokens = tokens.to_vec();
        spec.merges = merges.map(<[String]>::to_vec);
        Ok(spec)
    }

    /// The spec without its token and merge arrays, and those arrays borrowed from `g`.
    fn from_gguf_borrowed(g: &Gguf) -> Result<Borrowed<'_>> {
        let model = opt_str(g, "tokenizer.ggml.model")?
            .ok_or_else(|| Error::Model("GGUF has no tokenizer.ggml.model".into()))?;
        let tokens = opt_strings(g, "tokenizer.ggml.tokens")?
            .ok_or_else(|| Error::Model("GGUF has no tokenizer.ggml.tokens".into()))?;
        let scores = match opt_array(g, "tokenizer.ggml.scores")? {
            None => None,
            Some(Array::F32(v)) => Some(v.clone()),
            Some(Array::I32(v)) => Some(v.iter().map(|&x| x as f32).collect()),
            Some(_) => return Err(bad("tokenizer.ggml.scores", "an f32 or i32 array")),
        };
        let token_types = match opt_array(g, "tokenizer.ggml.token_type")? {
            None => None,
            Some(Array::I32(v)) => Some(v.clone()),
            Some(Array::U32(v)) => Some(v.iter().map(|&x| i32::try_from(x).unwrap_or(0)).collect()),
            Some(_) => return Err(bad("tokenizer.ggml.token_type", "an i32 array")),
        };
        // Deprecated FIM key names are read first so the current ones win.
        let fim = |new: &str, old: &str| -> Result<Option<u32>> {
            Ok(opt_u32(g, new)?.or(opt_u32(g, old)?))
        };
        let merges = opt_strings(g, "tokenizer.ggml.merges")?;
        let spec = TokenizerSpec {
            model,
            pre: opt_str(g, "tokenizer.ggml.pre")?,
            tokens: Vec::new(),
            scores,
            token_types,
            merges: None,
            bos_id: opt_u32(g, "tokenizer.ggml.bos_token_id")?,
            eos_id: opt_u32(g, "tokenizer.ggml.eos_token_id")?,
            eot_id: opt_u32(g, "tokenizer.ggml.eot_token_id")?,
            eom_id: opt_u32(g, "tokenizer.ggml.eom_token_id")?,
            unk_id: opt_u32(g, "tokenizer.ggml.unknown_token_id")?,
            sep_id: opt_u32(g, "tokenizer.ggml.seperator_token_id")?,
            pad_id: opt_u32(g, "tokenizer.ggml.padding_token_id")?,
            mask_id: opt_u32(g, "tokenizer.ggml.mask_token_id")?,
            fim_pre_id: fim(
                "tokenizer.ggml.fim_pre_token_id",
                "tokenizer.ggml.prefix_token_id",
            )?,
            fim_suf_id: fim(
                "tokenizer.ggml.fim_suf_token_id",
                "tokenizer.ggml.suffix_token_id",
            )?,
            fim_mid_id: fim(
                "tokenizer.ggml.fim_mid_token_id",
                "tokenizer.ggml.middle_token_id",
            )?,
            fim_pad_id: opt_u32(g, "tokenizer.ggml.fim_pad_token_id")?,
            fim_rep_id: opt_u32(g, "tokenizer.ggml.fim_rep_token_id")?,
            fim_sep_id: opt_u32(g, "tokenizer.ggml.fim_sep_token_id")?,
            add_bos: opt_bool(g, "tokenizer.ggml.add_bos_token")?,
            add_eos: opt_bool(g, "tokenizer.ggml.add_eos_token")?,
            add_sep: opt_bool(g, "tokenizer.ggml.add_sep_token")?,
            add_space_prefix: opt_bool(g, "tokenizer.ggml.add_space_prefix")?,
            remove_extra_whitespaces: opt_bool(g, "tokenizer.ggml.remove_extra_whitespaces")?,
            lowercase: opt_bool(g, "tokenizer.ggml.normalizer.lowercase")?,
            strip_accents: opt_bool(g, "tokenizer.ggml.normalizer.strip_accents")?,
            model_name: g
                .get("general.name")
                .and_then(Value::as_str)
                .map(str::to_owned),
            architecture: g
                .get("general.architecture")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        Ok((spec, tokens, merges))
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer> {
        let (spec, tokens, merges) = TokenizerSpec::from_gguf_borrowed(g)?;
        Tokenizer::build(spec, tokens, merges)
    }
}
