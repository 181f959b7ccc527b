//! MNIST (ggml's mnist-fc / mnist-cnn GGUFs) for JavaScript: a thin wrapper over
//! [`ggweb::models::mnist::Mnist`], on the CPU or (after `webgpuInit`) on WebGPU with the CPU for
//! what WebGPU does not run.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use js_sys::Float32Array;
use wasm_bindgen::prelude::*;

use crate::JsError;

use super::gguf::GgufStream;
use super::js_err;
use ggweb::backend::cpu::HostBytes;
use ggweb::models::mnist::{Mnist, MnistKind};
use ggweb::models::runner::BackendChoice;

#[wasm_bindgen]
pub struct MnistCore {
    // Shared with the futures of `predictBatchAsync` (a call in flight holds the borrow: a second
    // call meanwhile is rejected as busy rather than trapping).
    model: Rc<RefCell<Mnist>>,
}

fn choice(backend: Option<String>) -> Result<BackendChoice, JsError> {
    backend.as_deref().unwrap_or("cpu").parse().map_err(js_err)
}

fn busy() -> JsError {
    JsError::coded(
        "this Mnist model is busy with another call (await it first)",
        "busy",
    )
}

impl MnistCore {
    fn new(owner: Arc<dyn HostBytes>, backend: Option<String>) -> Result<MnistCore, JsError> {
        let model =
            Mnist::with_backend(owner, choice(backend)?, crate::cpu_threads()).map_err(js_err)?;
        Ok(MnistCore {
            model: Rc::new(RefCell::new(model)),
        })
    }
}

#[wasm_bindgen]
impl MnistCore {
    /// Load from a GGUF streamed with its data kept (`new GgufStream(true, …)`). `backend`:
    /// "cpu" (default), "webgpu" or "auto" (WebGPU needs `webgpuInit()` to have resolved).
    pub fn load(file: &mut GgufStream, backend: Option<String>) -> Result<MnistCore, JsError> {
        let (_, bytes) = file.take_file().map_err(js_err)?;
        Self::new(bytes, backend)
    }

    /// Load from the bytes of a GGUF file.
    #[wasm_bindgen(js_name = fromBytes)]
    pub fn from_bytes(bytes: &[u8], backend: Option<String>) -> Result<MnistCore, JsError> {
        Self::new(Arc::new(bytes.to_vec()), backend)
    }

    /// `fc` or `cnn`.
    #[wasm_bindgen(getter)]
    pub fn kind(&self) -> Result<String, JsError> {
        let m = self.model.try_borrow().map_err(|_| busy())?;
        Ok(match m.kind() {
            MnistKind::Fc => "fc",
            MnistKind::Cnn => "cnn",
        }
        .to_string())
    }

    /// Which backends run this model, and why (one line).
    #[wasm_bindgen(getter, js_name = backendReport)]
    pub fn backend_report(&self) -> Result<String, JsError> {
        let m = self.model.try_borrow().map_err(|_| busy())?;
        Ok(m.backend_report().to_string())
    }

    /// The WebGPU device in use (see `webgpuDevice`), or `undefined` on the CPU.
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> Result<JsValue, JsError> {
        let mut m = self.model.try_borrow_mut().map_err(|_| busy())?;
        Ok(match &m.runner_mut().webgpu {
            Some(d) => super::webgpu::device_js(d).into(),
            None => JsValue::UNDEFINED,
        })
    }

    /// Where the last batch ran: `{ nodes: {backend: count}, elsewhere: ["OP 'name': why"] }`, or
    /// `undefined` before the first `predictBatchAsync`.
    #[cfg(feature = "webgpu")]
    pub fn placements(&self) -> Result<JsValue, JsError> {
        let m = self.model.try_borrow().map_err(|_| busy())?;
        Ok(match m.last_placements() {
            Some(p) => {
                let nodes = js_sys::Object::new();
                for (name, n) in &p.nodes {
                    super::js::set(&nodes, name, *n as u32);
                }
                let o = js_sys::Object::new();
                super::js::set(&o, "nodes", nodes);
                super::js::set(
                    &o,
                    "elsewhere",
                    super::js::array_of(p.elsewhere.iter(), |s| JsValue::from_str(s)),
                );
                o.into()
            }
            None => JsValue::UNDEFINED,
        })
    }

    /// Logits (n × 10) of n images (n × 784 pixels in [0, 1]); CPU models only (WebGPU memory
    /// is read asynchronously: use `predictBatchAsync`).
    #[wasm_bindgen(js_name = predictBatch)]
    pub fn predict_batch(&mut self, images: &[f32]) -> Result<Float32Array, JsError> {
        let mut m = self.model.try_borrow_mut().map_err(|_| busy())?;
        let logits = m.logits(images).map_err(js_err)?;
        Ok(Float32Array::from(logits.as_slice()))
    }

    /// Logits (n × 10) of n images, as a Promise: works on every backend (WebGPU results are
    /// read back with `map_async`).
    #[cfg(feature = "webgpu")]
    #[wasm_bindgen(js_name = predictBatchAsync)]
    // Holding the RefCell borrow across the await is the point: it marks the model busy, and every
    // other entry point uses try_borrow and returns an error instead of panicking.
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn predict_batch_async(&self, images: Vec<f32>) -> js_sys::Promise {
        let model = self.model.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut m = model.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            let logits = m
                .logits_async(&images)
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            Ok(Float32Array::from(logits.as_slice()).into())
        })
    }
}
