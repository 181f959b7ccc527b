//! Training ggml's MNIST models from JavaScript: a thin wrapper over
//! [`ggweb::models::train::Trainer`] that holds the data and the run's progress
//! ([`FitState`]), so that JS advances training a few steps per call (a Worker stays responsive
//! to stop messages between calls). On the CPU (`runSteps`, `evaluate`, `toGguf`, synchronous)
//! or on WebGPU (`runStepsAsync`, `evaluateAsync`, `toGgufAsync`: device memory is read
//! asynchronously; they work on the CPU too).
//!
//! A failed call leaves the trainer as it was (the data and the run's state are replaced only
//! once the new ones are valid), so it stays usable. While an async call is in flight the
//! trainer is busy: every other call fails with code `busy` instead of trapping.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Object, Uint8Array};
use wasm_bindgen::prelude::*;

use crate::JsError;

use super::js::set;
use super::js_err;
use ggweb::models::mnist::{idx, MnistKind, IMAGE_PIXELS};
use ggweb::models::runner::BackendChoice;
use ggweb::models::train::{
    EpochStats, FitState, Optimizer, Score, StepStats, TrainConfig, Trainer,
};

struct Inner {
    trainer: Trainer,
    images: Vec<f32>,
    labels: Vec<u8>,
    /// The run on the data set last (None: no data, or the run was reset).
    state: Option<FitState>,
}

#[wasm_bindgen]
pub struct TrainerCore {
    // Shared with the futures of the async calls, which hold the borrow while in flight.
    inner: Rc<RefCell<Inner>>,
}

fn busy() -> JsError {
    JsError::coded(
        "this Trainer is busy with another call (await it first)",
        "busy",
    )
}

fn choice(backend: Option<String>) -> Result<BackendChoice, JsError> {
    backend.as_deref().unwrap_or("cpu").parse().map_err(js_err)
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
    /// A model of `kind` ("fc" or "cnn") from random initialisation (seeded), trained on
    /// `backend`: "cpu" (default), "webgpu" or "auto" (WebGPU needs `webgpuInit()` to have
    /// resolved).
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
        backend: Option<String>,
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
        Ok(Self::wrap(
            Trainer::with_backend(kind, cfg, choice(backend)?).map_err(js_err)?,
        ))
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
        backend: Option<String>,
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
        Ok(Self::wrap(
            Trainer::from_gguf_with(bytes, cfg, choice(backend)?).map_err(js_err)?,
        ))
    }

    /// `fc` or `cnn`.
    #[wasm_bindgen(getter)]
    pub fn kind(&self) -> Result<String, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        Ok(match g.trainer.kind() {
            MnistKind::Fc => "fc",
            MnistKind::Cnn => "cnn",
        }
        .into())
    }

    /// Optimizer steps taken so far (over every run).
    #[wasm_bindgen(getter)]
    pub fn steps(&self) -> Result<f64, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        Ok(g.trainer.steps() as f64)
    }

    /// Bytes of the planned training graph (forward + backward + optimizer).
    #[wasm_bindgen(getter, js_name = graphBytes)]
    pub fn graph_bytes(&self) -> Result<f64, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        Ok(g.trainer.graph_bytes() as f64)
    }

    /// Which backends train, and why (one line).
    #[wasm_bindgen(getter, js_name = backendReport)]
    pub fn backend_report(&self) -> Result<String, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        Ok(g.trainer.backend_report().to_string())
    }

    /// Where the nodes of the training graph (and, with gradient accumulation, of the optimizer
    /// graph) run: `{ nodes: {backend: count}, elsewhere: ["OP 'name': why"] }`.
    pub fn placements(&self) -> Result<JsValue, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        let mut p = g.trainer.placements();
        if let Some(o) = g.trainer.opt_placements() {
            for (name, n) in o.nodes {
                match p.nodes.iter_mut().find(|(m, _)| *m == name) {
                    Some(e) => e.1 += n,
                    None => p.nodes.push((name, n)),
                }
            }
            p.elsewhere.extend(o.elsewhere);
        }
        let nodes = Object::new();
        for (name, n) in &p.nodes {
            set(&nodes, name, *n as u32);
        }
        let o = Object::new();
        set(&o, "nodes", nodes);
        set(
            &o,
            "elsewhere",
            super::js::array_of(p.elsewhere.iter(), |s| JsValue::from_str(s)),
        );
        Ok(o.into())
    }

    /// Optimizer steps per epoch on the data set (0 without data).
    #[wasm_bindgen(getter, js_name = stepsPerEpoch)]
    pub fn steps_per_epoch(&self) -> Result<u32, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        Ok(g.state.as_ref().map_or(0, |s| s.steps_per_epoch() as u32))
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
    /// validation}, done }` (`done`: every epoch is finished). CPU only (see `runStepsAsync`).
    #[wasm_bindgen(js_name = runSteps)]
    pub fn run_steps(&mut self, n: u32) -> Result<JsValue, JsError> {
        let mut g = self.inner.try_borrow_mut().map_err(|_| busy())?;
        let Inner {
            trainer,
            images,
            labels,
            state,
        } = &mut *g;
        let st = state.as_mut().ok_or_else(no_data)?;
        let steps = trainer
            .run_steps(st, images, labels, n as usize)
            .map_err(js_err)?;
        let epoch = if st.epoch_complete() && !st.finished() {
            Some(trainer.end_epoch(st, images, labels).map_err(js_err)?)
        } else {
            None
        };
        Ok(steps_result(&steps, epoch.as_ref(), st.finished()))
    }

    /// `runSteps` as a Promise, on every backend (WebGPU results are read back with
    /// `map_async`); the trainer is busy until it settles.
    #[wasm_bindgen(js_name = runStepsAsync)]
    // Holding the RefCell borrow across the awaits is the point: it marks the trainer busy, and
    // every other entry point uses try_borrow and returns an error instead of panicking.
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn run_steps_async(&self, n: u32) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut g = inner.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            let Inner {
                trainer,
                images,
                labels,
                state,
            } = &mut *g;
            let st = state.as_mut().ok_or_else(|| JsValue::from(no_data()))?;
            let steps = trainer
                .run_steps_async(st, images, labels, n as usize)
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            let epoch = if st.epoch_complete() && !st.finished() {
                Some(
                    trainer
                        .end_epoch_async(st, images, labels)
                        .await
                        .map_err(|e| JsValue::from(js_err(e)))?,
                )
            } else {
                None
            };
            Ok(steps_result(&steps, epoch.as_ref(), st.finished()))
        })
    }

    /// Loss and accuracy of the current weights: `{loss, accuracy, images}`. CPU only (see
    /// `evaluateAsync`).
    pub fn evaluate(&self, images: &[f32], labels: &[u8]) -> Result<JsValue, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        let s = g.trainer.evaluate(images, labels).map_err(js_err)?;
        Ok(score_js(&s).into())
    }

    /// `evaluate` as a Promise, on every backend (the weights are read back asynchronously;
    /// the forward pass runs on the CPU).
    #[wasm_bindgen(js_name = evaluateAsync)]
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn evaluate_async(&self, images: Vec<f32>, labels: Vec<u8>) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let g = inner.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            let s = g
                .trainer
                .evaluate_async(&images, &labels)
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            Ok(score_js(&s).into())
        })
    }

    /// The current weights as a GGUF in ggml's MNIST layout (`Mnist.load` reads it). CPU only
    /// (see `toGgufAsync`).
    #[wasm_bindgen(js_name = toGguf)]
    pub fn to_gguf(&self) -> Result<Uint8Array, JsError> {
        let g = self.inner.try_borrow().map_err(|_| busy())?;
        let bytes = g.trainer.to_gguf().map_err(js_err)?;
        Ok(Uint8Array::from(bytes.as_slice()))
    }

    /// `toGguf` as a Promise, on every backend.
    #[wasm_bindgen(js_name = toGgufAsync)]
    #[allow(clippy::await_holding_refcell_ref)]
    pub fn to_gguf_async(&self) -> js_sys::Promise {
        let inner = self.inner.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let g = inner.try_borrow_mut().map_err(|_| JsValue::from(busy()))?;
            let bytes = g
                .trainer
                .to_gguf_async()
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            Ok(Uint8Array::from(bytes.as_slice()).into())
        })
    }
}

fn steps_result(steps: &[StepStats], epoch: Option<&EpochStats>, done: bool) -> JsValue {
    let o = Object::new();
    set(&o, "steps", steps.iter().map(step_js).collect::<Array>());
    if let Some(e) = epoch {
        set(&o, "epoch", epoch_js(e));
    }
    set(&o, "done", done);
    o.into()
}

impl TrainerCore {
    fn wrap(trainer: Trainer) -> TrainerCore {
        TrainerCore {
            inner: Rc::new(RefCell::new(Inner {
                trainer,
                images: Vec::new(),
                labels: Vec::new(),
                state: None,
            })),
        }
    }

    fn replace_data(&mut self, images: Vec<f32>, labels: Vec<u8>) -> Result<(), JsError> {
        let mut g = self.inner.try_borrow_mut().map_err(|_| busy())?;
        let st = g.trainer.start_fit(&images, &labels).map_err(js_err)?;
        g.images = images;
        g.labels = labels;
        g.state = Some(st);
        Ok(())
    }
}
