//! Language models for JavaScript: a thin wrapper over [`ggweb::models::llm::Llm`].
//!
//! Loading: JS streams the GGUF into a [`ModelStream`] (the streaming reader of `gguf.rs`, data
//! kept in one aligned allocation of the file's final size); the model then uses those bytes in
//! place as its weights ([`HostBytes`]), so the weights exist once in the wasm heap.
//!
//! Generation: `begin(ids, options)` then `step()` until it reports `done`, each call one step of
//! [`ggweb::models::generate::Generation`] (the prompt first, then one token each). JS calls
//! `step` in a loop that yields to the event loop, so a page or worker stays responsive and can
//! stop at any time.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use js_sys::{Float32Array, Object, Reflect, Uint32Array};
use wasm_bindgen::prelude::*;

use crate::JsError;

use super::gguf::FileStream;
use super::js::set;
use super::js_err;
use ggweb::backend::cpu::HostBytes;
use ggweb::gguf::{Gguf, Value};
use ggweb::models::chat::ChatMessage;
use ggweb::models::generate::{Generation, Step};
use ggweb::models::llm::Llm;
use ggweb::models::runner::BackendChoice;
use ggweb::models::sampler::SamplerOptions;

/// A GGUF model file streamed from JavaScript into one wasm allocation of its final size.
#[wasm_bindgen]
pub struct ModelStream {
    file: FileStream,
}

#[wasm_bindgen]
impl ModelStream {
    /// `file_len`: the total size when known (Content-Length, Blob.size), else undefined.
    #[wasm_bindgen(constructor)]
    pub fn new(file_len: Option<f64>) -> Result<ModelStream, JsError> {
        let file_len = match file_len {
            Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= 4_294_967_295.0 => Some(n as u64),
            Some(n) => {
                return Err(JsError::new(&format!(
                    "a model file of {n} bytes does not fit in wasm32 memory (4 GiB)"
                )))
            }
            None => None,
        };
        Ok(ModelStream {
            file: FileStream::new(true, file_len).map_err(js_err)?,
        })
    }

    /// Append the next bytes of the file; returns true once the header is parsed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<bool, JsError> {
        self.file.push(chunk).map_err(js_err)
    }

    /// Bytes pushed so far.
    #[wasm_bindgen(getter)]
    pub fn received(&self) -> f64 {
        self.file.received() as f64
    }

    /// The total size once known (Content-Length or the header), else undefined.
    #[wasm_bindgen(getter)]
    pub fn total(&self) -> Option<f64> {
        self.file.total().map(|n| n as f64)
    }
}

impl ModelStream {
    /// The parsed header and the file's bytes (for the other model types' `load`).
    pub(crate) fn take_file(
        &mut self,
    ) -> ggweb::Result<(
        ggweb::gguf::Gguf,
        Arc<ggweb::backend::cpu::buffer::AlignedBytes>,
    )> {
        self.file.take_file()
    }
}

/// The model and its session state (shared with the futures of the async calls).
struct Inner {
    llm: Llm,
    header: Gguf,
    file_bytes: usize,
    gen: Option<Generation>,
}

/// A language model (llama, gemma3) with its tokenizer, KV cache and a step-wise generator, on
/// the CPU or (after `webgpuInit`) on WebGPU with the CPU for what WebGPU does not run.
#[wasm_bindgen]
pub struct LlmCore {
    // An async call in flight (`stepAsync`, `logitsAsync`) holds the borrow: any other call
    // meanwhile is rejected as busy rather than trapping.
    inner: Rc<RefCell<Inner>>,
}

fn busy() -> JsError {
    JsError::coded(
        "this LLM is busy with another call (await it first)",
        "busy",
    )
}

impl Inner {
    /// A step of the generation in progress as a JS object; the generation ends with `done` or
    /// an error.
    fn report(&mut self, step: ggweb::Result<Step>) -> Result<JsValue, JsError> {
        let n_generated = self.gen.as_ref().map_or(0, |g| g.ids().len());
        let o = Object::new();
        match step {
            Err(e) => {
                self.gen = None;
                return Err(js_err(e));
            }
            Ok(Step::Prompt {
                n_prompt,
                n_evaluated,
            }) => {
                set(&o, "phase", "prompt");
                set(&o, "nPrompt", n_prompt as u32);
                set(&o, "nEvaluated", n_evaluated as u32);
            }
            Ok(Step::Token { id, text }) => {
                set(&o, "phase", "token");
                set(&o, "token", id);
                set(&o, "piece", text);
            }
            Ok(Step::Done { reason, text }) => {
                self.gen = None;
                set(&o, "phase", "done");
                set(&o, "reason", reason.name());
                set(&o, "piece", text);
                set(&o, "nGenerated", n_generated as u32);
            }
        }
        Ok(o.into())
    }

    fn no_generation() -> JsError {
        JsError::new("no generation in progress: call begin() first")
    }

    /// The synchronous calls cannot read WebGPU memory (the browser only maps it
    /// asynchronously).
    fn check_sync(&self, what: &str) -> Result<(), JsError> {
        if self.llm.model.uses_gpu() {
            return Err(JsError::new(&format!(
                "this model runs on WebGPU: use {what}Async (WebGPU results are read asynchronously)"
            )));
        }
        Ok(())
    }

    fn check_ids(&self, ids: &[u32]) -> Result<(), JsError> {
        let n = self.llm.model.hp.n_vocab as u32;
        match ids.iter().find(|&&t| t >= n) {
            Some(bad) => Err(JsError::new(&format!(
                "invalid argument: token id {bad} is out of range (n_vocab {n})"
            ))),
            None => Ok(()),
        }
    }
}

impl LlmCore {
    fn b(&self) -> Result<std::cell::Ref<'_, Inner>, JsError> {
        self.inner.try_borrow().map_err(|_| busy())
    }
    fn bm(&self) -> Result<std::cell::RefMut<'_, Inner>, JsError> {
        self.inner.try_borrow_mut().map_err(|_| busy())
    }
}

fn get_num(o: &JsValue, key: &str) -> Result<Option<f64>, JsError> {
    if o.is_undefined() || o.is_null() {
        return Ok(None);
    }
    let v = Reflect::get(o, &JsValue::from_str(key)).map_err(|_| JsError::new("bad options"))?;
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    match v.as_f64() {
        Some(x) if x.is_finite() => Ok(Some(x)),
        _ => Err(JsError::new(&format!(
            "invalid argument: option {key} must be a finite number"
        ))),
    }
}

fn sampler_options(o: &JsValue) -> Result<SamplerOptions, JsError> {
    let mut s = SamplerOptions::default();
    if let Some(t) = get_num(o, "temperature")? {
        s.temperature = t as f32;
    }
    if let Some(k) = get_num(o, "topK")? {
        s.top_k = k.max(0.0) as usize;
    }
    if let Some(p) = get_num(o, "topP")? {
        s.top_p = p as f32;
    }
    if let Some(p) = get_num(o, "minP")? {
        s.min_p = p as f32;
    }
    if let Some(p) = get_num(o, "repeatPenalty")? {
        s.repeat_penalty = p as f32;
    }
    if let Some(n) = get_num(o, "repeatLastN")? {
        s.repeat_last_n = n.max(0.0) as usize;
    }
    if let Some(seed) = get_num(o, "seed")? {
        s.seed = seed.abs() as u64;
    }
    Ok(s)
}

#[wasm_bindgen]
impl LlmCore {
    /// Build the model from a completely streamed file (consumes the stream's bytes).
    /// `backend`: "cpu" (default), "webgpu" or "auto" (WebGPU needs `webgpuInit()` to have
    /// resolved; on WebGPU the weights are uploaded to GPU buffers and generation runs through
    /// `stepAsync` / `logitsAsync`).
    pub fn load(
        file: &mut ModelStream,
        n_ctx: u32,
        backend: Option<String>,
    ) -> Result<LlmCore, JsError> {
        let choice: BackendChoice = backend
            .as_deref()
            .unwrap_or("cpu")
            .parse()
            .map_err(js_err)?;
        let (header, bytes) = file.file.take_file().map_err(js_err)?;
        let file_bytes = bytes.len();
        // An unsupported architecture is named before anything else is read.
        ggweb::models::llama::HParams::from_gguf(&header).map_err(js_err)?;
        let owner: Arc<dyn HostBytes> = bytes;
        let llm = Llm::from_gguf(
            owner,
            &header,
            n_ctx.max(1) as usize,
            choice,
            crate::cpu_threads(),
        )
        .map_err(js_err)?;
        Ok(LlmCore {
            inner: Rc::new(RefCell::new(Inner {
                llm,
                header,
                file_bytes,
                gen: None,
            })),
        })
    }

    /// `general.architecture` (llama, gemma3, …).
    #[wasm_bindgen(getter)]
    pub fn architecture(&self) -> Result<String, JsError> {
        Ok(self.b()?.llm.architecture.clone())
    }

    /// Context size in tokens.
    #[wasm_bindgen(getter, js_name = nCtx)]
    pub fn n_ctx(&self) -> Result<u32, JsError> {
        Ok(self.b()?.llm.model.n_ctx as u32)
    }

    /// Tokens currently in the KV cache.
    #[wasm_bindgen(getter, js_name = nPast)]
    pub fn n_past(&self) -> Result<u32, JsError> {
        Ok(self.b()?.llm.model.n_past() as u32)
    }

    #[wasm_bindgen(getter, js_name = nVocab)]
    pub fn n_vocab(&self) -> Result<u32, JsError> {
        Ok(self.b()?.llm.model.hp.n_vocab as u32)
    }

    /// Which backends run the model and why, and where its weights are (one line).
    #[wasm_bindgen(getter, js_name = backendReport)]
    pub fn backend_report(&self) -> Result<String, JsError> {
        Ok(self.b()?.llm.model.backend_report().to_string())
    }

    /// True when the model runs on WebGPU (then use `stepAsync` / `logitsAsync`).
    #[wasm_bindgen(getter, js_name = usesGpu)]
    pub fn uses_gpu(&self) -> Result<bool, JsError> {
        Ok(self.b()?.llm.model.uses_gpu())
    }

    /// Model facts: `{architecture, name, nCtx, nCtxTrain, nVocab, nLayer, nEmbd, nHead,
    /// nHeadKv, nParams, fileBytes, chatTemplate, bos, eos, chatFormat}`.
    pub fn info(&self) -> Result<JsValue, JsError> {
        let inner = self.b()?;
        let hp = &inner.llm.model.hp;
        let o = Object::new();
        set(&o, "architecture", inner.llm.architecture.as_str());
        let s = |k: &str| {
            inner
                .header
                .get(k)
                .and_then(Value::as_str)
                .map(JsValue::from_str)
                .unwrap_or(JsValue::NULL)
        };
        set(&o, "name", s("general.name"));
        set(&o, "chatTemplate", s("tokenizer.chat_template"));
        set(&o, "nCtx", inner.llm.model.n_ctx as u32);
        set(&o, "nCtxTrain", hp.n_ctx_train as u32);
        set(&o, "nVocab", hp.n_vocab as u32);
        set(&o, "nLayer", hp.n_layer as u32);
        set(&o, "nEmbd", hp.n_embd as u32);
        set(&o, "nHead", hp.n_head as u32);
        set(&o, "nHeadKv", hp.n_head_kv as u32);
        let n_params: u64 = inner
            .header
            .tensors
            .iter()
            .map(|t| t.ne.iter().product::<u64>())
            .sum();
        set(&o, "nParams", n_params as f64);
        set(&o, "fileBytes", inner.file_bytes as f64);
        let tok = &inner.llm.tokenizer;
        set(
            &o,
            "bos",
            tok.bos().map(JsValue::from).unwrap_or(JsValue::NULL),
        );
        set(
            &o,
            "eos",
            tok.eos().map(JsValue::from).unwrap_or(JsValue::NULL),
        );
        set(&o, "chatFormat", inner.llm.chat.name());
        // Why the model's template is not used, when the format is a fallback.
        set(
            &o,
            "chatFormatNote",
            inner
                .llm
                .chat
                .note()
                .map(JsValue::from)
                .unwrap_or(JsValue::NULL),
        );
        Ok(o.into())
    }

    /// The whole GGUF header (metadata and tensor infos) as a plain object.
    pub fn header(&self) -> Result<JsValue, JsError> {
        let inner = self.b()?;
        Ok(super::gguf::header_to_js(
            &inner.header,
            Some(inner.file_bytes as u64),
        ))
    }

    /// Bytes held: `{weights, kvCache, compute}` (weights are the file bytes, used in place on
    /// the CPU; on WebGPU they are also uploaded to GPU buffers).
    pub fn memory(&self) -> Result<JsValue, JsError> {
        let inner = self.b()?;
        let m = &inner.llm.model;
        let hp = &m.hp;
        // f16 keys and values.
        let kv = 2 * hp.n_layer * m.n_ctx * hp.n_head_kv * (hp.head_dim_k + hp.head_dim_v);
        let o = Object::new();
        set(&o, "weights", inner.file_bytes as f64);
        set(&o, "kvCache", kv as f64);
        set(&o, "compute", m.compute_buffer_size() as f64);
        Ok(o.into())
    }

    pub fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Uint32Array, JsError> {
        Ok(Uint32Array::from(
            self.b()?
                .llm
                .tokenize(text, add_special, parse_special)
                .as_slice(),
        ))
    }

    pub fn detokenize(&self, ids: &[u32]) -> Result<String, JsError> {
        let inner = self.b()?;
        inner.check_ids(ids)?;
        Ok(inner.llm.detokenize(ids))
    }

    /// The text of one token (its piece, special tokens rendered).
    #[wasm_bindgen(js_name = tokenPiece)]
    pub fn token_piece(&self, id: u32) -> Result<String, JsError> {
        let inner = self.b()?;
        inner.check_ids(&[id])?;
        Ok(String::from_utf8_lossy(inner.llm.tokenizer.token_to_piece(id, true)).into_owned())
    }

    #[wasm_bindgen(js_name = isEog)]
    pub fn is_eog(&self, id: u32) -> Result<bool, JsError> {
        Ok(self.b()?.llm.tokenizer.is_eog(id))
    }

    /// Render `messages` (`[{role, content}]`) with the model's chat template.
    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(
        &self,
        messages: JsValue,
        add_generation_prompt: bool,
    ) -> Result<String, JsError> {
        // `Array::try_from(JsValue)` cannot fail (it would accept anything), so check first.
        if !js_sys::Array::is_array(&messages) {
            return Err(JsError::new("invalid argument: messages must be an array"));
        }
        let arr = js_sys::Array::from(&messages);
        let mut msgs = Vec::with_capacity(arr.length() as usize);
        for (i, m) in arr.iter().enumerate() {
            let field = |k: &str| -> Result<String, JsError> {
                Reflect::get(&m, &JsValue::from_str(k))
                    .ok()
                    .and_then(|v| v.as_string())
                    .ok_or_else(|| {
                        JsError::new(&format!(
                            "invalid argument: messages[{i}].{k} must be a string"
                        ))
                    })
            };
            msgs.push(ChatMessage::new(&field("role")?, &field("content")?));
        }
        Ok(self
            .b()?
            .llm
            .apply_chat_template(&msgs, add_generation_prompt))
    }

    /// Forget the conversation (KV cache).
    pub fn reset(&mut self) -> Result<(), JsError> {
        let mut inner = self.bm()?;
        inner.gen = None;
        inner.llm.reset();
        Ok(())
    }

    /// Logits of the last position after `ids` (reusing the cached prefix), n_vocab floats.
    /// CPU models only (use `logitsAsync` on WebGPU).
    pub fn logits(&mut self, ids: &[u32]) -> Result<Float32Array, JsError> {
        let mut inner = self.bm()?;
        inner.check_sync("logits")?;
        inner.check_ids(ids)?;
        inner.gen = None;
        let (logits, _) = inner.llm.eval_prompt(ids).map_err(js_err)?;
        Ok(Float32Array::from(logits.as_slice()))
    }

    /// `logits` as a Promise: works on every backend (WebGPU results are read with
    /// `map_async`).
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(js_name = logitsAsync)]
    // Holding the RefCell borrow across the await marks the model busy; every other entry point
    // uses try_borrow and rejects instead of panicking.
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn logits_async(&self, ids: Vec<u32>) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            inner.check_ids(&ids)?;
            inner.gen = None;
            let (logits, _) = inner
                .llm
                .eval_prompt_async(&ids)
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            Ok(Float32Array::from(logits.as_slice()).into())
        })
    }

    /// Where the nodes of the last evaluated graph ran: `{ nodes: {backend: count},
    /// elsewhere: ["OP 'name': why"] }`, or `undefined` on the CPU / before the first eval.
    #[cfg(feature = "webgpu")]
    pub fn placements(&self) -> Result<JsValue, JsError> {
        Ok(match self.b()?.llm.model.last_placements() {
            Some(p) => super::webgpu::placements_js(p),
            None => JsValue::UNDEFINED,
        })
    }

    /// The WebGPU device in use (see `webgpuDevice`), or `undefined` on the CPU.
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> Result<JsValue, JsError> {
        Ok(match self.b()?.llm.model.webgpu_device() {
            Some(d) => super::webgpu::device_js(d).into(),
            None => JsValue::UNDEFINED,
        })
    }

    /// Start generating after `prompt_ids` (the prompt is evaluated by the first `step`).
    /// Options: `{temperature, topK, topP, minP, repeatPenalty, repeatLastN, seed}`.
    pub fn begin(
        &mut self,
        prompt_ids: &[u32],
        max_tokens: u32,
        options: JsValue,
    ) -> Result<(), JsError> {
        let mut inner = self.bm()?;
        inner.check_ids(prompt_ids)?;
        let n_ctx = inner.llm.model.n_ctx;
        if prompt_ids.len() >= n_ctx {
            return Err(JsError::new(&format!(
                "context full: the prompt has {} tokens, the context {n_ctx}",
                prompt_ids.len()
            )));
        }
        let gen = inner
            .llm
            .begin(prompt_ids, max_tokens as usize, sampler_options(&options)?)
            .map_err(js_err)?;
        inner.gen = Some(gen);
        Ok(())
    }

    /// One step: `{phase: "prompt", nPrompt, nEvaluated}` after evaluating the prompt, then
    /// `{phase: "token", token, piece}` per token, and finally `{phase: "done", reason, piece}`
    /// (`reason`: "eog", "length" or "context"; `piece` holds any text still pending).
    /// CPU models only (use `stepAsync` on WebGPU).
    pub fn step(&mut self) -> Result<JsValue, JsError> {
        let mut inner = self.bm()?;
        inner.check_sync("step")?;
        let inner = &mut *inner;
        let gen = inner.gen.as_mut().ok_or_else(Inner::no_generation)?;
        let step = gen.step(&mut inner.llm);
        inner.report(step)
    }

    /// `step` as a Promise: works on every backend (WebGPU results are read with `map_async`).
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(js_name = stepAsync)]
    // See `logits_async`: the borrow held across the await is the busy flag.
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn step_async(&self) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut inner = inner.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            let inner = &mut *inner;
            let gen = inner.gen.as_mut().ok_or_else(Inner::no_generation)?;
            let step = gen.step_async(&mut inner.llm).await;
            inner.report(step).map_err(JsValue::from)
        })
    }

    /// Stop the generation in progress (the KV cache keeps what was evaluated).
    pub fn stop(&mut self) -> Result<(), JsError> {
        self.bm()?.gen = None;
        Ok(())
    }

    /// True while a generation is in progress.
    #[wasm_bindgen(getter)]
    pub fn generating(&self) -> Result<bool, JsError> {
        Ok(self.b()?.gen.is_some())
    }
}
