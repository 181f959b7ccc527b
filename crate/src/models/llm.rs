//! A language model session: tokenizer + model + KV cache, with prompt caching (a new prompt that
//! extends the cached tokens only evaluates the new part). Generation: [`crate::models::generate`].

use std::sync::Arc;

use crate::backend::cpu::HostBytes;
use crate::gguf::Gguf;
use crate::models::chat::{ChatFormat, ChatMessage};
use crate::models::llama::LlamaModel;
use crate::models::runner::BackendChoice;
use crate::models::tokenizer::Tokenizer;
use crate::{Error, Result};

pub struct Llm {
    pub model: LlamaModel,
    pub tokenizer: Tokenizer,
    pub chat: ChatFormat,
    pub architecture: String,
    /// Tokens whose keys and values are in the cache, in order.
    cached: Vec<u32>,
}

impl Llm {
    /// Load from a GGUF file's bytes, on the CPU.
    pub fn from_bytes(bytes: Arc<dyn HostBytes>, n_ctx: usize, n_threads: usize) -> Result<Llm> {
        let gguf = Gguf::parse(bytes.bytes())?;
        Self::from_gguf(bytes, &gguf, n_ctx, BackendChoice::Cpu, n_threads)
    }

    /// Load from a GGUF file's bytes and its header, parsed once by the caller.
    pub fn from_gguf(
        bytes: Arc<dyn HostBytes>,
        gguf: &Gguf,
        n_ctx: usize,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<Llm> {
        let tokenizer = Tokenizer::from_gguf(gguf)?;
        let chat = ChatFormat::from_gguf(gguf);
        let architecture = gguf.architecture().unwrap_or("").to_string();
        let model = LlamaModel::from_gguf(bytes, gguf, n_ctx, backend, n_threads)?;
        Self::assemble(model, tokenizer, chat, architecture)
    }

    /// Load from the parts of a split GGUF held in memory (headers and bytes, in order; one
    /// part is an ordinary file) on the chosen backends.
    pub fn from_parts(
        parts: &[(&Gguf, Arc<dyn HostBytes>)],
        n_ctx: usize,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<Llm> {
        let gguf = parts
            .first()
            .map(|p| p.0)
            .ok_or_else(|| Error::InvalidArgument("no model files".into()))?;
        let runner = crate::models::runner::Runner::new(backend, n_threads)?;
        let model = LlamaModel::with_runner_parts(parts, n_ctx, runner)?;
        Self::with_model(model, gguf)
    }

    /// Wrap a model loaded from `gguf` (the header of its first file) with its tokenizer and
    /// chat format.
    pub fn with_model(model: LlamaModel, gguf: &Gguf) -> Result<Llm> {
        let tokenizer = Tokenizer::from_gguf(gguf)?;
        let chat = ChatFormat::from_gguf(gguf);
        let architecture = gguf.architecture().unwrap_or("").to_string();
        Self::assemble(model, tokenizer, chat, architecture)
    }

    fn assemble(
        model: LlamaModel,
        tokenizer: Tokenizer,
        chat: ChatFormat,
        architecture: String,
    ) -> Result<Llm> {
        if tokenizer.n_tokens() < model.hp.n_vocab {
            return Err(Error::Model(format!(
                "tokenizer has {} tokens, the model {}",
                tokenizer.n_tokens(),
                model.hp.n_vocab
            )));
        }
        Ok(Llm {
            model,
            tokenizer,
            chat,
            architecture,
            cached: Vec::new(),
        })
    }

    /// Load a GGUF file on the CPU with its weights repacked where this CPU's GEMV reads them
    /// so, from a private copy-on-write mapping, the multiplied weights on huge pages where
    /// Linux has THP (see [`LlamaModel::open_repacked`]); as [`Llm::open`] where neither
    /// applies (a split model, a CPU without such a GEMV and without THP).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_repacked(path: &std::path::Path, n_ctx: usize, n_threads: usize) -> Result<Llm> {
        match LlamaModel::open_for_repack(path)? {
            Some(f) => Self::from_gguf(f.clone(), f.header(), n_ctx, BackendChoice::Cpu, n_threads),
            None => Self::open(path, n_ctx, n_threads),
        }
    }

    /// Open a GGUF file (memory-mapped), on the CPU.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &std::path::Path, n_ctx: usize, n_threads: usize) -> Result<Llm> {
        Self::open_with(path, n_ctx, BackendChoice::Cpu, n_threads)
    }

    /// Open a GGUF file (memory-mapped; its header is parsed once) on the chosen backends.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_with(
        path: &std::path::Path,
        n_ctx: usize,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<Llm> {
        let files = crate::models::split::open_parts(path)?;
        let gguf = files[0].header();
        let tokenizer = Tokenizer::from_gguf(gguf)?;
        let chat = ChatFormat::from_gguf(gguf);
        let architecture = gguf.architecture().unwrap_or("").to_string();
        let model = LlamaModel::from_files(&files, n_ctx, backend, n_threads)?;
        Self::assemble(model, tokenizer, chat, architecture)
    }

    /// Token ids of `text`; `add_special` adds BOS/EOS as the model's metadata says.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.tokenizer.tokenize(text, add_special, parse_special)
    }

    pub fn detokenize(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids)
    }

    /// The prompt text of `messages` in the model's chat format, to tokenize with
    /// `add_special`: a leading BOS the template writes (`{{ bos_token }}`) is left out when the
    /// tokenizer adds one itself, as llama.cpp does, so the prompt starts with one BOS.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> String {
        self.chat
            .render_for(messages, add_generation_prompt, &self.tokenizer)
    }

    /// Forget the conversation.
    pub fn reset(&mut self) {
        self.cached.clear();
        self.model.reset();
    }

    /// Evaluate `prompt_ids` after the longest prefix already in the cache; returns the last
    /// position's logits and the number of tokens evaluated.
    pub fn eval_prompt(&mut self, prompt_ids: &[u32]) -> Result<(Vec<f32>, usize)> {
        let common = self.reuse_prefix(prompt_ids)?;
        let rest = &prompt_ids[common..];
        let logits = self.model.eval(rest, false)?;
        self.cached.extend_from_slice(rest);
        Ok((logits, rest.len()))
    }

    /// [`Llm::eval_prompt`] for the browser on WebGPU (async readback).
    #[cfg(feature = "webgpu")]
    pub async fn eval_prompt_async(&mut self, prompt_ids: &[u32]) -> Result<(Vec<f32>, usize)> {
        let common = self.reuse_prefix(prompt_ids)?;
        let rest = &prompt_ids[common..];
        let logits = self.model.eval_async(rest, false).await?;
        self.cached.extend_from_slice(rest);
        Ok((logits, rest.len()))
    }

    /// Keep the longest cached prefix of `prompt_ids` (leaving at least one token to evaluate,
    /// which produces the logits); returns its length.
    fn reuse_prefix(&mut self, prompt_ids: &[u32]) -> Result<usize> {
        if prompt_ids.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        let mut common = self
            .cached
            .iter()
            .zip(prompt_ids)
            .take_while(|(a, b)| a == b)
            .count();
        if common == prompt_ids.len() {
            common -= 1;
        }
        self.model.truncate(common);
        self.cached.truncate(common);
        Ok(common)
    }

    /// Evaluate one generated token; returns its logits.
    pub fn eval_token(&mut self, token: u32) -> Result<Vec<f32>> {
        let logits = self.model.eval(&[token], false)?;
        self.cached.push(token);
        Ok(logits)
    }

    /// [`Llm::eval_token`] for the browser on WebGPU (async readback).
    #[cfg(feature = "webgpu")]
    pub async fn eval_token_async(&mut self, token: u32) -> Result<Vec<f32>> {
        let logits = self.model.eval_async(&[token], false).await?;
        self.cached.push(token);
        Ok(logits)
    }
}
