//! MNIST (ggml's mnist-fc / mnist-cnn GGUFs) for JavaScript: a thin wrapper over
//! [`crate::models::mnist::Mnist`].

use std::sync::Arc;

use js_sys::Float32Array;
use wasm_bindgen::prelude::*;

use super::gguf::GgufStream;
use super::js_err;
use crate::backend::cpu::HostBytes;
use crate::models::mnist::{Mnist, MnistKind};

#[wasm_bindgen]
pub struct MnistCore {
    model: Mnist,
}

#[wasm_bindgen]
impl MnistCore {
    /// Load from a GGUF streamed with its data kept (`new GgufStream(true, …)`).
    pub fn load(file: &mut GgufStream) -> Result<MnistCore, JsError> {
        let (_, bytes) = file.take_file().map_err(js_err)?;
        let owner: Arc<dyn HostBytes> = bytes;
        let model = Mnist::from_bytes(owner, 1).map_err(js_err)?;
        Ok(MnistCore { model })
    }

    /// Load from the bytes of a GGUF file.
    #[wasm_bindgen(js_name = fromBytes)]
    pub fn from_bytes(bytes: &[u8]) -> Result<MnistCore, JsError> {
        let owner: Arc<dyn HostBytes> = Arc::new(bytes.to_vec());
        let model = Mnist::from_bytes(owner, 1).map_err(js_err)?;
        Ok(MnistCore { model })
    }

    /// `fc` or `cnn`.
    #[wasm_bindgen(getter)]
    pub fn kind(&self) -> String {
        match self.model.kind() {
            MnistKind::Fc => "fc",
            MnistKind::Cnn => "cnn",
        }
        .to_string()
    }

    /// Logits (n × 10) of n images (n × 784 pixels in [0, 1]).
    #[wasm_bindgen(js_name = predictBatch)]
    pub fn predict_batch(&mut self, images: &[f32]) -> Result<Float32Array, JsError> {
        let logits = self.model.logits(images).map_err(js_err)?;
        Ok(Float32Array::from(logits.as_slice()))
    }
}
