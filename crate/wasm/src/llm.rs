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
use ggweb::backend::cpu::buffer::AlignedBytes;
use ggweb::backend::cpu::HostBytes;
use ggweb::gguf::{Gguf, Value};
use ggweb::models::chat::ChatMessage;
use ggweb::models::generate::{Generation, Step};
use ggweb::models::llama::LlamaModel;
use ggweb::models::llm::Llm;
use ggweb::models::runner::{BackendChoice, Runner};
use ggweb::models::sampler::SamplerOptions;
use ggweb::models::split;
use ggweb::models::weights::WeightsStream;

/// A GGUF model streamed from JavaScript, in one or more files (the parts of a split model, in
/// order, each begun with `nextPart`). On the CPU path each file lands in one wasm allocation
/// of its final size (the model uses those bytes in place); created for the WebGPU backend, the
/// weights are written to GPU buffers as their bytes arrive and only the headers stay in the
/// wasm heap (plus any weight too large for one GPU buffer).
#[wasm_bindgen]
pub struct ModelStream {
    file: FileStream,
    /// Finished parts: their headers and, on the CPU path, their bytes.
    parts: Vec<(Gguf, Option<Arc<AlignedBytes>>)>,
    /// The header of the current part once parsed and checked.
    header_seen: bool,
    /// Streaming to the device: the runner the model will run on, the weights being filled.
    device: Option<(Runner, WeightsStream)>,
    /// Bytes of the finished parts.
    done_bytes: u64,
}

fn file_len_arg(file_len: Option<f64>) -> Result<Option<u64>, JsError> {
    match file_len {
        Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 => {
            Ok(Some(n as u64))
        }
        Some(n) => Err(JsError::new(&format!(
            "invalid argument: a file length of {n} bytes"
        ))),
        None => Ok(None),
    }
}

impl ModelStream {
    /// The stream of one file: kept in the heap (within what earlier parts left of the
    /// budget) unless its weights go to the device.
    fn part_stream(&self, file_len: Option<u64>) -> ggweb::Result<FileStream> {
        if self.device.is_some() {
            return FileStream::new(false, file_len);
        }
        let held: u64 = self
            .parts
            .iter()
            .filter_map(|p| p.1.as_ref())
            .map(|b| b.len() as u64)
            .sum();
        FileStream::with_budget(
            true,
            file_len,
            ggweb::gguf::stream::DEFAULT_BUDGET.saturating_sub(held),
        )
    }

    /// A part's header has just been parsed: check it is the next part, and on the device
    /// path place its tensors and take the data bytes that came with the header.
    fn begin_part(&mut self) -> ggweb::Result<()> {
        let g = self
            .file
            .header()
            .ok_or_else(|| ggweb::Error::Gguf("no header".into()))?;
        let i = self.parts.len();
        let first = self.parts.first().map_or(g, |p| &p.0);
        split::check_part(first, g, i)?;
        if let Some((_, w)) = self.device.as_mut() {
            if i == 0 {
                // An unsupported architecture is named before the weights are downloaded.
                ggweb::models::llama::HParams::from_gguf(g)?;
            }
            w.begin_part(g)?;
            let (at, early) = self.file.take_early_data();
            w.push(at, &early)?;
        }
        self.header_seen = true;
        Ok(())
    }

    /// Close the current part: the whole file arrived (and, on the device path, every tensor).
    fn end_part(&mut self) -> ggweb::Result<()> {
        let received = self.file.received();
        let part = match self.device.as_ref() {
            Some((_, w)) => {
                w.end_part()?;
                (self.file.take_header()?, None)
            }
            None => {
                let (g, bytes) = self.file.take_file()?;
                (g, Some(bytes))
            }
        };
        self.parts.push(part);
        self.done_bytes += received;
        self.header_seen = false;
        Ok(())
    }

    /// Every file streamed to the heap, with its header (the current one closed): for the
    /// model types that load a split GGUF from the CPU path (the embedder).
    pub(crate) fn take_parts(&mut self) -> ggweb::Result<Vec<(Gguf, Arc<AlignedBytes>)>> {
        if self.device.is_some() {
            return Err(ggweb::Error::InvalidArgument(
                "this model type loads from files streamed to the heap".into(),
            ));
        }
        self.end_part()?;
        self.done_bytes = 0;
        std::mem::take(&mut self.parts)
            .into_iter()
            .map(|(g, b)| {
                b.map(|b| (g, b))
                    .ok_or_else(|| ggweb::Error::InvalidArgument("file bytes were not kept".into()))
            })
            .collect()
    }
}

#[wasm_bindgen]
impl ModelStream {
    /// `file_len`: the size of the (first) file when known (Content-Length, Blob.size), else
    /// undefined. `backend`: "webgpu" streams the weights to GPU buffers as they arrive (WebGPU
    /// must be initialised); "cpu" or undefined keeps the file in the heap.
    #[wasm_bindgen(constructor)]
    pub fn new(file_len: Option<f64>, backend: Option<String>) -> Result<ModelStream, JsError> {
        let file_len = file_len_arg(file_len)?;
        let choice: BackendChoice = backend
            .as_deref()
            .unwrap_or("cpu")
            .parse()
            .map_err(js_err)?;
        let device = match choice {
            BackendChoice::Cpu => None,
            c => {
                let runner = Runner::new(c, crate::cpu_threads()).map_err(js_err)?;
                let buft = runner.weights_buffer_type().clone();
                runner.gpu.then(|| (runner, WeightsStream::new(buft)))
            }
        };
        let mut s = ModelStream {
            file: FileStream::new(false, None).map_err(js_err)?,
            parts: Vec::new(),
            header_seen: false,
            device,
            done_bytes: 0,
        };
        // On the CPU path a file over the heap budget is an out-of-memory error here.
        s.file = s.part_stream(file_len).map_err(js_err)?;
        Ok(s)
    }

    /// Append the next bytes of the current file; returns true once its header is parsed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<bool, JsError> {
        let at = self.file.received();
        let parsed = self.file.push(chunk).map_err(js_err)?;
        if parsed && !self.header_seen {
            self.begin_part().map_err(js_err)?;
        } else if let (true, Some((_, w))) = (parsed, self.device.as_mut()) {
            w.push(at, chunk).map_err(js_err)?;
        }
        Ok(parsed)
    }

    /// End the current file and begin the next part of a split model (`file_len` as in the
    /// constructor).
    #[wasm_bindgen(js_name = nextPart)]
    pub fn next_part(&mut self, file_len: Option<f64>) -> Result<(), JsError> {
        let file_len = file_len_arg(file_len)?;
        self.end_part().map_err(js_err)?;
        self.file = self.part_stream(file_len).map_err(js_err)?;
        Ok(())
    }

    /// How many files the model has (`split.count`; 1 when not split), once the first header
    /// is parsed.
    #[wasm_bindgen(getter, js_name = nParts)]
    pub fn n_parts(&self) -> Option<u32> {
        let first = self.parts.first().map(|p| &p.0).or(self.file.header())?;
        split::split_of(first)
            .ok()
            .map(|s| s.map_or(1, |(_, n)| n as u32))
    }

    /// Bytes pushed so far (all parts).
    #[wasm_bindgen(getter)]
    pub fn received(&self) -> f64 {
        (self.done_bytes + self.file.received()) as f64
    }

    /// The total size of the current file once known (Content-Length or the header), else
    /// undefined.
    #[wasm_bindgen(getter)]
    pub fn total(&self) -> Option<f64> {
        self.file.total().map(|n| n as f64)
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
        file.end_part().map_err(js_err)?;
        let parts = std::mem::take(&mut file.parts);
        let headers: Vec<&Gguf> = parts.iter().map(|p| &p.0).collect();
        split::check_parts(&headers).map_err(js_err)?;
        let file_bytes = file.done_bytes as usize;
        file.done_bytes = 0;
        // The first header moves into the model (not copied: a vocabulary is megabytes).
        let mut parts = parts.into_iter();
        let (header, first_bytes) = parts.next().ok_or_else(|| JsError::new("no model files"))?;
        let rest: Vec<_> = parts.collect();
        // An unsupported architecture is named before anything else is read.
        ggweb::models::llama::HParams::from_gguf(&header).map_err(js_err)?;
        let n_ctx = n_ctx.max(1) as usize;
        let llm = match file.device.take() {
            Some((runner, weights)) => {
                drop(rest);
                let (ctx, w) = weights.finish().map_err(js_err)?;
                LlamaModel::from_weights(ctx, w, &header, n_ctx, runner)
                    .and_then(|m| Llm::with_model(m, &header))
            }
            None => {
                let mut held: Vec<(&Gguf, Arc<dyn HostBytes>)> = Vec::with_capacity(rest.len() + 1);
                let kept = || JsError::new("file bytes were not kept");
                held.push((&header, first_bytes.ok_or_else(kept)?));
                for (g, bytes) in &rest {
                    held.push((g, bytes.clone().ok_or_else(kept)?));
                }
                Llm::from_parts(&held, n_ctx, choice, crate::cpu_threads())
            }
        }
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

    /// Weights repacked at load for the CPU GEMV (interleaved rows; 0 on WebGPU and in the
    /// scalar build).
    #[wasm_bindgen(getter, js_name = repackedWeights)]
    pub fn repacked_weights(&self) -> Result<u32, JsError> {
        Ok(self.b()?.llm.model.repacked_weights() as u32)
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

    /// Bytes held: `{weights, weightsHost, weightsGpu, kvCache, kvCacheGpu, compute, computeGpu}`.
    /// `weights` = `weightsHost` + `weightsGpu`; host bytes are in the wasm heap (on the CPU
    /// path the file bytes, used in place; on WebGPU only weights too large for a GPU buffer).
    /// `kvCache` includes `kvCacheGpu`, `compute` (the compute buffers of all backends)
    /// `computeGpu`.
    pub fn memory(&self) -> Result<JsValue, JsError> {
        let inner = self.b()?;
        let m = inner.llm.model.memory();
        let o = Object::new();
        set(&o, "weights", (m.weights_host + m.weights_device) as f64);
        set(&o, "weightsHost", m.weights_host as f64);
        set(&o, "weightsGpu", m.weights_device as f64);
        set(&o, "kvCache", (m.kv_host + m.kv_device) as f64);
        set(&o, "kvCacheGpu", m.kv_device as f64);
        let (compute_host, compute_device) = inner.llm.model.compute_bytes_by_place();
        set(&o, "compute", (compute_host + compute_device) as f64);
        set(&o, "computeGpu", compute_device as f64);
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
