//! Training ggml's MNIST models from JavaScript: a thin wrapper over
//! [`ggweb::models::train::Trainer`] that holds the data and the run's progress
//! ([`FitState`]), so that JS advances training a few steps per call (a Worker stays responsive
//! to stop messages between calls). CPU only for now (no WebGPU backward kernels).
//!
//! Every call is synchronous; a failed call leaves the trainer as it was (the data and the
//! run's state are replaced only once the new ones are valid), so it stays usable.

use js_sys::{Array, Object, Uint8Array};
use wasm_bindgen::prelude::*;

use crate::JsError;

use super::js::set;
use super::js_err;
use ggweb::models::mnist::{idx, MnistKind, IMAGE_PIXELS};
use ggweb::models::train::{
    EpochStats, FitState, Optimizer, Score, StepStats, TrainConfig, Trainer,
};

#[wasm_bindgen]
pub struct TrainerCore {
    trainer: Trainer,
    images: Vec<f32>,
    labels: Vec<u8>,
    /// The run on the data set last (None: no data, or the run was reset).
    state: Option<FitState>,
}

fn count(x: f64, what: &str) -> Result<usize, JsError> {
    if !(x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= u32::MAX as f64) {
        return Err(JsError::new(&format!(
            "{what} must be a non-negative integer, got {x}"
        )));
    }
    Ok(x as usize)
}

/// The config from the numbers the TypeScript side passes (it fills in the defaults).
#[allow(clippy::too_many_arguments)]
fn config(
    epochs: f64,
    batch_logical: f64,
    batch_physical: f64,
    optimizer: &str,
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    wd: f64,
    val_split: f64,
    seed: f64,
) -> Result<TrainConfig, JsError> {
    let optimizer = match optimizer {
        "adamw" => Optimizer::AdamW {
            lr: lr as f32,
            beta1: beta1 as f32,
            beta2: beta2 as f32,
            eps: eps as f32,
            wd: wd as f32,
        },
        "sgd" => Optimizer::Sgd {
            lr: lr as f32,
            wd: wd as f32,
        },
        other => {
            return Err(JsError::new(&format!(
                "optimizer must be 'adamw' or 'sgd', got '{other}'"
            )))
        }
    };
    if !val_split.is_finite() {
        return Err(JsError::new(&format!(
            "validation split {val_split} is not a number"
        )));
    }
    Ok(TrainConfig {
        epochs: count(epochs, "epochs")?,
        batch_logical: count(batch_logical, "batchSize")?,
        batch_physical: count(batch_physical, "physicalBatchSize")?,
        optimizer,
        val_split,
        seed: count(seed, "seed")? as u64,
        n_threads: crate::cpu_threads(),
    })
}

fn score_js(s: &Score) -> Object {
    let o = Object::new();
    set(&o, "loss", s.loss);
    set(&o, "accuracy", s.accuracy);
    set(&o, "images", s.images as u32);
    o
}

fn step_js(s: &StepStats) -> JsValue {
    let o = Object::new();
    set(&o, "epoch", s.epoch as u32);
    set(&o, "step", s.step as u32);
    set(&o, "stepsPerEpoch", s.steps_per_epoch as u32);
    set(&o, "loss", s.loss);
    set(&o, "accuracy", s.accuracy);
    o.into()
}

fn epoch_js(e: &EpochStats) -> JsValue {
    let o = Object::new();
    set(&o, "epoch", e.epoch as u32);
    set(&o, "train", score_js(&e.train));
    set(&o, "validation", score_js(&e.validation));
    o.into()
}

fn no_data() -> JsError {
    JsError::new("no training data: call setData first")
}

#[wasm_bindgen]
impl TrainerCore {
    /// A model of `kind` ("fc" or "cnn") from random initialisation (seeded).
    #[wasm_bindgen(constructor)]
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        kind: &str,
        epochs: f64,
        batch_logical: f64,
        batch_physical: f64,
        optimizer: &str,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
        wd: f64,
        val_split: f64,
        seed: f64,
    ) -> Result<TrainerCore, JsError> {
        let kind = match kind {
            "fc" => MnistKind::Fc,
            "cnn" => MnistKind::Cnn,
            other => {
                return Err(JsError::new(&format!(
                    "model must be 'fc' or 'cnn', got '{other}'"
                )))
            }
        };
        let cfg = config(
            epochs,
            batch_logical,
            batch_physical,
            optimizer,
            lr,
            beta1,
            beta2,
            eps,
            wd,
            val_split,
            seed,
        )?;
        Ok(Self::wrap(Trainer::new(kind, cfg).map_err(js_err)?))
    }

    /// Continue training the model in a GGUF of ggml's MNIST layout (fresh optimizer state).
    #[wasm_bindgen(js_name = fromGguf)]
    #[allow(clippy::too_many_arguments)]
    pub fn from_gguf(
        bytes: &[u8],
        epochs: f64,
        batch_logical: f64,
        batch_physical: f64,
        optimizer: &str,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
        wd: f64,
        val_split: f64,
        seed: f64,
    ) -> Result<TrainerCore, JsError> {
        let cfg = config(
            epochs,
            batch_logical,
            batch_physical,
            optimizer,
            lr,
            beta1,
            beta2,
            eps,
            wd,
            val_split,
            seed,
        )?;
        Ok(Self::wrap(Trainer::from_gguf(bytes, cfg).map_err(js_err)?))
    }

    /// `fc` or `cnn`.
    #[wasm_bindgen(getter)]
    pub fn kind(&self) -> String {
        match self.trainer.kind() {
            MnistKind::Fc => "fc",
            MnistKind::Cnn => "cnn",
        }
        .into()
    }

    /// Optimizer steps taken so far (over every run).
    #[wasm_bindgen(getter)]
    pub fn steps(&self) -> f64 {
        self.trainer.steps() as f64
    }

    /// Bytes of the planned training graph (forward + backward + optimizer).
    #[wasm_bindgen(getter, js_name = graphBytes)]
    pub fn graph_bytes(&self) -> f64 {
        self.trainer.graph_bytes() as f64
    }

    /// Optimizer steps per epoch on the data set (0 without data).
    #[wasm_bindgen(getter, js_name = stepsPerEpoch)]
    pub fn steps_per_epoch(&self) -> u32 {
        self.state
            .as_ref()
            .map_or(0, |s| s.steps_per_epoch() as u32)
    }

    /// Train on `images` (n × 784 in [0, 1]) and `labels` (n digits), from epoch 0; the last
    /// `valSplit` of them validate.
    #[wasm_bindgen(js_name = setData)]
    pub fn set_data(&mut self, images: Vec<f32>, labels: Vec<u8>) -> Result<(), JsError> {
        self.replace_data(images, labels)
    }

    /// `setData` from idx files (MNIST's format, gzip or not), the first `limit` images only
    /// when given.
    #[wasm_bindgen(js_name = setDataIdx)]
    pub fn set_data_idx(
        &mut self,
        images_idx: &[u8],
        labels_idx: &[u8],
        limit: Option<u32>,
    ) -> Result<(), JsError> {
        let (_, mut images) = idx::parse_images(images_idx).map_err(js_err)?;
        let mut labels = idx::parse_labels(labels_idx).map_err(js_err)?;
        if images.len() != labels.len() * IMAGE_PIXELS {
            return Err(JsError::coded(
                &format!(
                    "{} images but {} labels",
                    images.len() / IMAGE_PIXELS,
                    labels.len()
                ),
                "shape",
            ));
        }
        if let Some(n) = limit {
            labels.truncate(n as usize);
            images.truncate(labels.len() * IMAGE_PIXELS);
        }
        self.replace_data(images, labels)
    }

    /// Up to `n` optimizer steps (fewer at an epoch's end, whose validation then runs):
    /// `{ steps: [{epoch, step, stepsPerEpoch, loss, accuracy}], epoch?: {epoch, train,
    /// validation}, done }` (`done`: every epoch is finished).
    #[wasm_bindgen(js_name = runSteps)]
    pub fn run_steps(&mut self, n: u32) -> Result<JsValue, JsError> {
        let st = self.state.as_mut().ok_or_else(no_data)?;
        let steps = self
            .trainer
            .run_steps(st, &self.images, &self.labels, n as usize)
            .map_err(js_err)?;
        let o = Object::new();
        set(&o, "steps", steps.iter().map(step_js).collect::<Array>());
        if st.epoch_complete() && !st.finished() {
            let e = self
                .trainer
                .end_epoch(st, &self.images, &self.labels)
                .map_err(js_err)?;
            set(&o, "epoch", epoch_js(&e));
        }
        set(&o, "done", st.finished());
        Ok(o.into())
    }

    /// Loss and accuracy of the current weights: `{loss, accuracy, images}`.
    pub fn evaluate(&self, images: &[f32], labels: &[u8]) -> Result<JsValue, JsError> {
        if Some(images.len()) != labels.len().checked_mul(IMAGE_PIXELS) {
            return Err(JsError::coded(
                &format!("{} labels for {} pixels", labels.len(), images.len()),
                "shape",
            ));
        }
        if let Some(&bad) = labels.iter().find(|&&l| l > 9) {
            return Err(JsError::new(&format!("label {bad} is not a digit")));
        }
        let s = self.trainer.evaluate(images, labels).map_err(js_err)?;
        Ok(score_js(&s).into())
    }

    /// The current weights as a GGUF in ggml's MNIST layout (`Mnist.load` reads it).
    #[wasm_bindgen(js_name = toGguf)]
    pub fn to_gguf(&self) -> Result<Uint8Array, JsError> {
        let bytes = self.trainer.to_gguf().map_err(js_err)?;
        Ok(Uint8Array::from(bytes.as_slice()))
    }
}

impl TrainerCore {
    fn wrap(trainer: Trainer) -> TrainerCore {
        TrainerCore {
            trainer,
            images: Vec::new(),
            labels: Vec::new(),
            state: None,
        }
    }

    fn replace_data(&mut self, images: Vec<f32>, labels: Vec<u8>) -> Result<(), JsError> {
        let st = self.trainer.start_fit(&images, &labels).map_err(js_err)?;
        self.images = images;
        self.labels = labels;
        self.state = Some(st);
        Ok(())
    }
}
