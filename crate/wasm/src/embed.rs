//! Sentence embeddings for JavaScript: a thin wrapper over [`ggweb::models::bert::Embedder`],
//! loaded from a [`ModelStream`] like the LLM (the weights stay in the stream's allocation).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use js_sys::{Array, Float32Array, Uint32Array};
use wasm_bindgen::prelude::*;

use super::js_err;
use super::llm::ModelStream;
use crate::JsError;
use ggweb::backend::cpu::HostBytes;
use ggweb::models::bert::{BertParams, Embedder};
use ggweb::models::runner::BackendChoice;

/// A BERT embedding model (llama.cpp's `bert` GGUF layout) with its WordPiece tokenizer.
#[wasm_bindgen]
pub struct EmbedderCore {
    // An `embedAsync` in flight holds the borrow: other calls meanwhile are rejected as busy.
    inner: Rc<RefCell<Embedder>>,
}

fn busy() -> JsError {
    JsError::coded(
        "this embedding model is busy with another call (await it first)",
        "busy",
    )
}

fn vectors(out: Vec<Vec<f32>>) -> Array {
    let a = Array::new();
    for v in out {
        a.push(&Float32Array::from(v.as_slice()).into());
    }
    a
}

#[wasm_bindgen]
impl EmbedderCore {
    /// Build the model from completely streamed files (one, or the parts of a split model, each
    /// begun with `nextPart`; consumes the stream's bytes).
    /// `backend`: "cpu" (default), "webgpu" or "auto" (WebGPU needs `webgpuInit()` first and
    /// `embedAsync`).
    pub fn load(file: &mut ModelStream, backend: Option<String>) -> Result<EmbedderCore, JsError> {
        let choice: BackendChoice = backend
            .as_deref()
            .unwrap_or("cpu")
            .parse()
            .map_err(js_err)?;
        let parts = file.take_parts().map_err(js_err)?;
        let header = &parts
            .first()
            .ok_or_else(|| JsError::new("no model files"))?
            .0;
        // A file that is not a BERT model is named before anything else is read.
        BertParams::from_gguf(header).map_err(js_err)?;
        let held: Vec<(&ggweb::gguf::Gguf, Arc<dyn HostBytes>)> = parts
            .iter()
            .map(|(g, b)| (g, b.clone() as Arc<dyn HostBytes>))
            .collect();
        let e = Embedder::from_parts(&held, choice, 1).map_err(js_err)?;
        Ok(EmbedderCore {
            inner: Rc::new(RefCell::new(e)),
        })
    }

    fn b(&self) -> Result<std::cell::RefMut<'_, Embedder>, JsError> {
        self.inner.try_borrow_mut().map_err(|_| busy())
    }

    /// Embedding size.
    #[wasm_bindgen(getter, js_name = nEmbd)]
    pub fn n_embd(&self) -> Result<u32, JsError> {
        Ok(self.b()?.n_embd() as u32)
    }

    /// `mean`, `cls`, `last` or `none` (bert.pooling_type).
    #[wasm_bindgen(getter)]
    pub fn pooling(&self) -> Result<String, JsError> {
        Ok(self.b()?.hp.pooling.name().to_string())
    }

    /// The longest input in tokens (including [CLS] and [SEP]).
    #[wasm_bindgen(getter, js_name = maxTokens)]
    pub fn max_tokens(&self) -> Result<u32, JsError> {
        Ok(self.b()?.hp.n_ctx_train as u32)
    }

    #[wasm_bindgen(getter, js_name = backendReport)]
    pub fn backend_report(&self) -> Result<String, JsError> {
        Ok(self.b()?.backend_report().to_string())
    }

    /// Token ids of `text` with [CLS] … [SEP], as the model sees it.
    pub fn tokenize(&self, text: &str) -> Result<Uint32Array, JsError> {
        Ok(Uint32Array::from(self.b()?.tokenize(text).as_slice()))
    }

    /// One pooled, L2-normalised `Float32Array` per text. CPU models only (`embedAsync`
    /// works everywhere).
    pub fn embed(&self, texts: Vec<String>) -> Result<Array, JsError> {
        let mut e = self.b()?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(vectors(e.embed(&refs).map_err(js_err)?))
    }

    /// `embed` as a Promise (WebGPU results are read with `map_async`).
    #[wasm_bindgen(js_name = embedAsync)]
    // Holding the RefCell borrow across the await marks the model busy; every other entry point
    // uses try_borrow_mut and rejects instead of panicking.
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn embed_async(&self, texts: Vec<String>) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut e = inner.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let out = e
                .embed_async(&refs)
                .await
                .map_err(|err| JsValue::from(js_err(err)))?;
            Ok(vectors(out).into())
        })
    }
}
