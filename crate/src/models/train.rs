//! Training ggml's MNIST models (ggml's examples/mnist `mnist-train` with ggml-opt) on the CPU
//! or on WebGPU (through the scheduler, so an op WebGPU lacks runs on the CPU).
//!
//! One static graph per run: forward (physical batch) → cross-entropy loss → the backward pass
//! (`Graph::build_backward`) → one optimizer node per parameter (`OPT_STEP_ADAMW` or
//! `OPT_STEP_SGD`), planned once by the graph allocator in one buffer and re-run per step with
//! new images, labels and hyper-parameters (the bias corrections change per step; they are an
//! input tensor, as in ggml). Parameters, optimizer state and gradient accumulators live in
//! buffers of their own. A logical batch of k physical batches accumulates gradients: the
//! graph then adds each gradient into its accumulator, and a second graph of optimizer nodes
//! (persistent tensors only) runs after every k-th physical batch. With WebGPU the parameters,
//! state and accumulators live in device memory and only images, labels, the loss and the logits
//! cross to the host per physical batch.

use std::sync::Arc;

use crate::alloc;
use crate::backend::Buffer;
use crate::gguf::{Gguf, GgufWriter};
use crate::models::mnist::{self, forward, MnistKind, Params, IMAGE_PIXELS, N_CLASSES};
use crate::models::runner::{BackendChoice, Placements, Runner};
use crate::{Context, DType, Error, Graph, Result, TensorId};

/// The optimizer and its hyper-parameters (ggml-opt's defaults for AdamW).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    AdamW {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        wd: f32,
    },
    Sgd {
        lr: f32,
        wd: f32,
    },
}

impl Optimizer {
    pub fn adamw(lr: f32) -> Optimizer {
        Optimizer::AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            wd: 0.0,
        }
    }

    fn check(&self) -> Result<()> {
        let ok = match *self {
            Optimizer::AdamW {
                lr,
                beta1,
                beta2,
                eps,
                wd,
            } => {
                lr.is_finite()
                    && lr > 0.0
                    && (0.0..1.0).contains(&beta1)
                    && (0.0..1.0).contains(&beta2)
                    && eps.is_finite()
                    && eps >= 0.0
                    && wd.is_finite()
                    && wd >= 0.0
            }
            Optimizer::Sgd { lr, wd } => lr.is_finite() && lr > 0.0 && wd.is_finite() && wd >= 0.0,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "bad optimizer settings {self:?}"
            )))
        }
    }
}

/// How to train.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainConfig {
    pub epochs: usize,
    /// Images per optimizer step.
    pub batch_logical: usize,
    /// Images per graph evaluation; divides `batch_logical`.
    pub batch_physical: usize,
    pub optimizer: Optimizer,
    /// Fraction of the training images held out for validation (the last ones, as ggml).
    pub val_split: f64,
    /// Seeds the initialisation and the shuffling.
    pub seed: u64,
    pub n_threads: usize,
}

impl Default for TrainConfig {
    /// ggml's mnist-train: 30 epochs, logical batch 1000 in physical batches of 500, AdamW
    /// lr 1e-3, 5 % validation.
    fn default() -> Self {
        TrainConfig {
            epochs: 30,
            batch_logical: 1000,
            batch_physical: 500,
            optimizer: Optimizer::adamw(1e-3),
            val_split: 0.05,
            seed: 42,
            n_threads: 1,
        }
    }
}

/// Loss and accuracy over some images.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Score {
    pub loss: f64,
    pub accuracy: f64,
    pub images: usize,
}

/// One optimizer step's figures (over its logical batch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    pub epoch: usize,
    pub step: usize,
    pub steps_per_epoch: usize,
    pub loss: f64,
    pub accuracy: f64,
}

/// One epoch's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochStats {
    pub epoch: usize,
    pub train: Score,
    pub validation: Score,
    /// Wall time of the epoch; NaN on wasm32, where the core has no clock (the caller times).
    pub seconds: f64,
}

#[cfg(not(target_arch = "wasm32"))]
struct Clock(std::time::Instant);

#[cfg(not(target_arch = "wasm32"))]
impl Clock {
    fn start() -> Clock {
        Clock(std::time::Instant::now())
    }
    fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

#[cfg(target_arch = "wasm32")]
struct Clock;

#[cfg(target_arch = "wasm32")]
impl Clock {
    fn start() -> Clock {
        Clock
    }
    fn seconds(&self) -> f64 {
        f64::NAN
    }
}

/// Tiny deterministic generator (splitmix64) for initialisation and shuffling.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn symmetric(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// (GGUF name, shape, fan-in) of each parameter, in ggml's MNIST layout.
fn layout(kind: MnistKind) -> Vec<(&'static str, [usize; 4], usize)> {
    match kind {
        MnistKind::Fc => vec![
            ("fc1.weight", [784, 500, 1, 1], 784),
            ("fc1.bias", [500, 1, 1, 1], 784),
            ("fc2.weight", [500, 10, 1, 1], 500),
            ("fc2.bias", [10, 1, 1, 1], 500),
        ],
        MnistKind::Cnn => vec![
            ("conv1.kernel", [3, 3, 1, 8], 9),
            ("conv1.bias", [1, 1, 8, 1], 9),
            ("conv2.kernel", [3, 3, 8, 16], 72),
            ("conv2.bias", [1, 1, 16, 1], 72),
            ("dense.weight", [784, 10, 1, 1], 784),
            ("dense.bias", [10, 1, 1, 1], 784),
        ],
    }
}

/// An MNIST model being trained: its parameters, the planned training graph and the optimizer.
pub struct Trainer {
    ctx: Context,
    kind: MnistKind,
    cfg: TrainConfig,
    params: Vec<TensorId>,
    images: TensorId,
    labels: TensorId,
    logits: TensorId,
    loss: TensorId,
    loss_grad: TensorId,
    hp: TensorId,
    graph: Graph,
    /// With gradient accumulation: the runner of the planned optimizer nodes (over the
    /// accumulators).
    opt_graph: Option<Runner>,
    acc_buffer: Option<Arc<dyn Buffer>>,
    /// The backends, with the training graph planned on them.
    runner: Runner,
    /// Optimizer steps taken (AdamW's t).
    steps: u64,
    rng: SplitMix,
    // The parameters' and optimizer state's memory.
    _params_buffer: Arc<dyn Buffer>,
}

impl Trainer {
    /// A model of `kind` from random initialisation (uniform ±1/sqrt(fan-in) weights, zero
    /// biases, seeded by `cfg.seed`), trained on the CPU.
    pub fn new(kind: MnistKind, cfg: TrainConfig) -> Result<Trainer> {
        Self::with_backend(kind, cfg, BackendChoice::Cpu)
    }

    /// [`Trainer::new`] on the chosen backends ([`Trainer::backend_report`] says which).
    pub fn with_backend(
        kind: MnistKind,
        cfg: TrainConfig,
        backend: BackendChoice,
    ) -> Result<Trainer> {
        Self::with_runner(kind, cfg, Runner::new(backend, cfg.n_threads)?)
    }

    /// [`Trainer::new`] on `runner`'s backends (tests open devices with their own options).
    pub fn with_runner(kind: MnistKind, cfg: TrainConfig, runner: Runner) -> Result<Trainer> {
        let mut rng = SplitMix(cfg.seed ^ 0x006d_6e69_7374);
        let values = layout(kind)
            .into_iter()
            .map(|(name, ne, fan_in)| {
                let n: usize = ne.iter().product();
                let bound = 1.0 / (fan_in as f32).sqrt();
                let v = if name.ends_with("bias") {
                    vec![0.0; n]
                } else {
                    (0..n).map(|_| rng.symmetric() * bound).collect()
                };
                (name, v)
            })
            .collect();
        Self::with_values(kind, cfg, values, runner)
    }

    /// Continue training the model in a GGUF file of ggml's MNIST layout (the optimizer state
    /// starts fresh: the file holds only the weights), on the CPU.
    pub fn from_gguf(bytes: &[u8], cfg: TrainConfig) -> Result<Trainer> {
        Self::from_gguf_with(bytes, cfg, BackendChoice::Cpu)
    }

    /// [`Trainer::from_gguf`] on the chosen backends.
    pub fn from_gguf_with(
        bytes: &[u8],
        cfg: TrainConfig,
        backend: BackendChoice,
    ) -> Result<Trainer> {
        let gguf = Gguf::parse(bytes)?;
        let kind = match gguf.architecture().unwrap_or("") {
            "mnist-fc" => MnistKind::Fc,
            "mnist-cnn" => MnistKind::Cnn,
            other => {
                return Err(Error::Model(format!(
                    "general.architecture is '{other}', expected 'mnist-fc' or 'mnist-cnn'"
                )))
            }
        };
        let mut values = Vec::new();
        for (name, ne, _) in layout(kind) {
            let info = gguf
                .tensor(name)
                .ok_or_else(|| Error::Model(format!("tensor '{name}' is missing")))?;
            let want: Vec<u64> = ne.iter().map(|&n| n as u64).collect();
            if info.dtype != DType::F32 || info.ne[..] != want[..] {
                return Err(Error::Model(format!(
                    "tensor '{name}' is {} {:?}, expected f32 {ne:?}",
                    info.dtype, info.ne
                )));
            }
            let data = gguf.tensor_data(bytes, info)?;
            values.push((name, crate::tensor_io::decode_f32(DType::F32, data)?));
        }
        Self::with_values(kind, cfg, values, Runner::new(backend, cfg.n_threads)?)
    }

    fn with_values(
        kind: MnistKind,
        cfg: TrainConfig,
        values: Vec<(&'static str, Vec<f32>)>,
        mut runner: Runner,
    ) -> Result<Trainer> {
        cfg.optimizer.check()?;
        let (bl, bp) = (cfg.batch_logical, cfg.batch_physical);
        if bp == 0 || bl == 0 || !bl.is_multiple_of(bp) {
            return Err(Error::InvalidArgument(format!(
                "the logical batch ({bl}) must be a positive multiple of the physical batch ({bp})"
            )));
        }
        if !(0.0..1.0).contains(&cfg.val_split) {
            return Err(Error::InvalidArgument(format!(
                "validation split {} is outside [0, 1)",
                cfg.val_split
            )));
        }
        let mut ctx = Context::new();
        // Parameters, state and accumulators where the training graph runs.
        let buft = runner.weights_buffer_type().clone();
        let mut params = Vec::new();
        for (name, ne, _) in layout(kind) {
            let id = ctx.new_tensor(DType::F32, &ne)?;
            ctx.set_name(id, name)?;
            ctx.set_param(id);
            params.push(id);
        }
        let p = &params;
        let model = match kind {
            MnistKind::Fc => Params::Fc {
                fc1_w: p[0],
                fc1_b: p[1],
                fc2_w: p[2],
                fc2_b: p[3],
            },
            MnistKind::Cnn => Params::Cnn {
                k1: p[0],
                b1: p[1],
                k2: p[2],
                b2: p[3],
                dense_w: p[4],
                dense_b: p[5],
            },
        };
        let adamw = matches!(cfg.optimizer, Optimizer::AdamW { .. });
        let hp = ctx.new_tensor_1d(DType::F32, if adamw { 7 } else { 2 })?;
        ctx.set_name(hp, "opt.hparams")?;
        ctx.set_input(hp);
        let mut states = Vec::new();
        if adamw {
            for &pid in &params {
                let n = ctx.tensor(pid).nelements();
                let s = ctx.new_tensor_2d(DType::F32, n, 2)?;
                states.push(s);
            }
        }
        let mut persistent = params.clone();
        persistent.extend(&states);
        persistent.push(hp);
        let params_buffer = alloc::alloc_tensors(&mut ctx, &persistent, &buft)?
            .ok_or_else(|| Error::Backend("no parameter memory".into()))?;
        params_buffer.clear(0)?;
        for (&pid, (_, v)) in params.iter().zip(&values) {
            ctx.set_f32(pid, v)?;
        }

        // Forward, loss, backward.
        let (images, logits) = forward(&mut ctx, &model, bp)?;
        let labels = ctx.new_tensor_2d(DType::F32, N_CLASSES, bp)?;
        ctx.set_name(labels, "labels")?;
        ctx.set_input(labels);
        let loss = ctx.cross_entropy_loss(logits, labels)?;
        ctx.set_name(loss, "loss")?;
        ctx.set_output(loss);
        let mut graph = Graph::build(&ctx, &[loss, logits]);
        graph.build_backward(&mut ctx, loss)?;
        let loss_grad = graph
            .loss_grad()
            .ok_or_else(|| Error::Backend("internal: no loss gradient".into()))?;
        let grads: Vec<TensorId> = params
            .iter()
            .map(|&p| {
                graph.grad(p).ok_or_else(|| {
                    Error::Model(format!("no gradient for '{}'", ctx.tensor(p).name))
                })
            })
            .collect::<Result<_>>()?;

        // The optimizer: in the graph, or after k accumulated physical batches.
        let accumulate = bl > bp;
        let (opt_graph, acc_buffer) = if accumulate {
            let mut accs = Vec::new();
            for &g in &grads {
                let ne = ctx.tensor(g).ne;
                accs.push(ctx.new_tensor(DType::F32, &ne)?);
            }
            let acc_buffer = alloc::alloc_tensors(&mut ctx, &accs, &buft)?
                .ok_or_else(|| Error::Backend("no accumulator memory".into()))?;
            acc_buffer.clear(0)?;
            for (&g, &a) in grads.iter().zip(&accs) {
                let sum = ctx.add(a, g)?;
                let c = ctx.cpy(sum, a)?;
                graph.build_forward_expand(&ctx, c);
            }
            let mut og = Graph::new();
            for (i, (&pid, &a)) in params.iter().zip(&accs).enumerate() {
                let node = opt_node(&mut ctx, pid, a, states.get(i).copied(), hp)?;
                og.build_forward_expand(&ctx, node);
            }
            // Its own runner: a runner computes the graph it planned last.
            let mut opt = runner.like()?;
            opt.alloc(&mut ctx, &og)?;
            (Some(opt), Some(acc_buffer))
        } else {
            for (i, (&pid, &g)) in params.iter().zip(&grads).enumerate() {
                let node = opt_node(&mut ctx, pid, g, states.get(i).copied(), hp)?;
                graph.build_forward_expand(&ctx, node);
            }
            (None, None)
        };
        runner.alloc(&mut ctx, &graph)?;
        Ok(Trainer {
            ctx,
            kind,
            cfg,
            params,
            images,
            labels,
            logits,
            loss,
            loss_grad,
            hp,
            graph,
            opt_graph,
            acc_buffer,
            runner,
            steps: 0,
            rng: SplitMix(cfg.seed),
            _params_buffer: params_buffer,
        })
    }

    pub fn kind(&self) -> MnistKind {
        self.kind
    }

    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    /// Bytes of the planned training graph's buffer (forward + backward + optimizer, with
    /// memory reused by liveness).
    pub fn graph_bytes(&self) -> usize {
        self.runner.buffer_sizes().iter().sum()
    }

    /// Which backends train, and why (e.g. "WebGPU: llvmpipe (Vulkan), f16 path; CPU ...").
    pub fn backend_report(&self) -> &str {
        &self.runner.report
    }

    /// Where the nodes of the training graph run (every node on WebGPU when it is chosen and
    /// runs every op of the graph).
    pub fn placements(&self) -> Placements {
        self.runner.placements(&self.ctx)
    }

    /// Where the nodes of the optimizer graph run, with gradient accumulation.
    pub fn opt_placements(&self) -> Option<Placements> {
        self.opt_graph.as_ref().map(|r| r.placements(&self.ctx))
    }

    /// Nodes of the training graph.
    pub fn graph_nodes(&self) -> usize {
        self.graph.n_nodes()
    }

    /// Optimizer steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Set the optimizer's inputs for step `t` (1-based): ggml's alpha, betas, eps, wd and
    /// the bias corrections 1/(1 - beta^t).
    fn set_hparams(&self, t: u64) -> Result<()> {
        let v = match self.cfg.optimizer {
            Optimizer::AdamW {
                lr,
                beta1,
                beta2,
                eps,
                wd,
            } => {
                let b1h = 1.0 / (1.0 - (beta1 as f64).powf(t as f64));
                let b2h = 1.0 / (1.0 - (beta2 as f64).powf(t as f64));
                vec![lr, beta1, beta2, eps, wd, b1h as f32, b2h as f32]
            }
            Optimizer::Sgd { lr, wd } => vec![lr, wd],
        };
        self.ctx.set_f32(self.hp, &v)
    }

    /// One physical batch through the training graph: returns (loss, correct predictions).
    fn physical_step(
        &mut self,
        images: &[f32],
        onehot: &[f32],
        labels: &[u8],
    ) -> Result<(f64, usize)> {
        self.ctx.set_f32(self.images, images)?;
        self.ctx.set_f32(self.labels, onehot)?;
        self.runner.compute(&self.ctx)?;
        let loss = self.ctx.get_f32(self.loss)?[0] as f64;
        let logits = self.ctx.get_f32(self.logits)?;
        let correct = logits
            .chunks(N_CLASSES)
            .zip(labels)
            .filter(|(l, &y)| mnist::argmax(l) == y)
            .count();
        Ok((loss, correct))
    }

    /// Train for `cfg.epochs` epochs on `images` (n × 784 in [0, 1]) with `labels`, holding out
    /// the last `val_split` of them for validation. Images that do not fill a logical batch
    /// are left out of each epoch (as ggml). Calls `on_step` after each optimizer step and
    /// `on_epoch` after each epoch; either may stop training by returning false. The same as
    /// [`Trainer::start_fit`], then [`Trainer::run_steps`] and [`Trainer::end_epoch`] per epoch.
    pub fn fit(
        &mut self,
        images: &[f32],
        labels: &[u8],
        mut on_step: impl FnMut(&StepStats) -> bool,
        mut on_epoch: impl FnMut(&EpochStats) -> bool,
    ) -> Result<Vec<EpochStats>> {
        let mut st = self.start_fit(images, labels)?;
        let mut out = Vec::new();
        while !st.finished() {
            while !st.epoch_complete() {
                for s in self.run_steps(&mut st, images, labels, 1)? {
                    if !on_step(&s) {
                        return Ok(out);
                    }
                }
            }
            let stats = self.end_epoch(&mut st, images, labels)?;
            out.push(stats);
            if !on_epoch(&stats) {
                break;
            }
        }
        Ok(out)
    }

    /// Check `images` (n × 784 in [0, 1]) and `labels` (digits) and start training on them:
    /// the returned state holds the progress through `cfg.epochs` epochs (the shuffled order,
    /// the running loss and accuracy), advanced by [`Trainer::run_steps`] and
    /// [`Trainer::end_epoch`], which must be given the same images and labels.
    pub fn start_fit(&self, images: &[f32], labels: &[u8]) -> Result<FitState> {
        check_data(images, labels)?;
        let n = labels.len();
        let n_val = (n as f64 * self.cfg.val_split) as usize;
        let n_train = n - n_val;
        let bl = self.cfg.batch_logical;
        let steps_per_epoch = n_train / bl;
        if steps_per_epoch == 0 {
            return Err(Error::InvalidArgument(format!(
                "{n_train} training images do not fill one batch of {bl}"
            )));
        }
        Ok(FitState {
            n,
            n_train,
            steps_per_epoch,
            epochs: self.cfg.epochs,
            epoch: 0,
            step: 0,
            order: (0..n_train).collect(),
            shuffled: false,
            loss_sum: 0.0,
            correct: 0,
            seen: 0,
            clock: None,
        })
    }

    /// Up to `n` optimizer steps of the current epoch (fewer at its end: then
    /// [`FitState::epoch_complete`] and [`Trainer::end_epoch`] is next); the figures of each.
    /// The first step of an epoch shuffles its order (seeded).
    pub fn run_steps(
        &mut self,
        st: &mut FitState,
        images: &[f32],
        labels: &[u8],
        n: usize,
    ) -> Result<Vec<StepStats>> {
        check_same_data(st, images, labels)?;
        let (bl, bp) = (self.cfg.batch_logical, self.cfg.batch_physical);
        let k = bl / bp;
        self.ctx.set_f32(self.loss_grad, &[1.0 / k as f32])?;
        let mut img_buf = vec![0f32; bp * IMAGE_PIXELS];
        let mut hot_buf = vec![0f32; bp * N_CLASSES];
        let mut lab_buf = vec![0u8; bp];
        let mut out = Vec::new();
        while out.len() < n && !st.finished() && !st.epoch_complete() {
            st.begin_epoch(&mut self.rng);
            let step = st.step;
            let (mut step_loss, mut step_correct) = (0f64, 0usize);
            self.set_hparams(self.steps + 1)?;
            for part in 0..k {
                let at = step * bl + part * bp;
                hot_buf.fill(0.0);
                for (j, &src) in st.order[at..at + bp].iter().enumerate() {
                    let y = labels[src];
                    if y as usize >= N_CLASSES {
                        return Err(Error::InvalidArgument(format!("label {y} is not a digit")));
                    }
                    img_buf[j * IMAGE_PIXELS..(j + 1) * IMAGE_PIXELS]
                        .copy_from_slice(&images[src * IMAGE_PIXELS..(src + 1) * IMAGE_PIXELS]);
                    lab_buf[j] = y;
                    hot_buf[j * N_CLASSES + y as usize] = 1.0;
                }
                let (l, c) = self.physical_step(&img_buf, &hot_buf, &lab_buf)?;
                step_loss += l;
                step_correct += c;
            }
            if let (Some(og), Some(acc)) = (&mut self.opt_graph, &self.acc_buffer) {
                og.compute(&self.ctx)?;
                acc.clear(0)?;
            }
            self.steps += 1;
            st.step += 1;
            st.loss_sum += step_loss;
            st.correct += step_correct;
            st.seen += bl;
            out.push(StepStats {
                epoch: st.epoch,
                step,
                steps_per_epoch: st.steps_per_epoch,
                loss: step_loss / k as f64,
                accuracy: step_correct as f64 / bl as f64,
            });
        }
        Ok(out)
    }

    /// Finish the epoch whose steps are done: its training figures and the validation score
    /// (over the held-out images), then move on to the next epoch.
    pub fn end_epoch(
        &mut self,
        st: &mut FitState,
        images: &[f32],
        labels: &[u8],
    ) -> Result<EpochStats> {
        check_epoch_end(st, images, labels)?;
        let validation = if st.n_train < st.n {
            self.evaluate(&images[st.n_train * IMAGE_PIXELS..], &labels[st.n_train..])?
        } else {
            Score::default()
        };
        Ok(self.close_epoch(st, validation))
    }

    /// The finished epoch's figures with its `validation` score; moves `st` to the next epoch.
    fn close_epoch(&self, st: &mut FitState, validation: Score) -> EpochStats {
        let k = self.cfg.batch_logical / self.cfg.batch_physical;
        let train = Score {
            loss: st.loss_sum / (st.steps_per_epoch * k) as f64,
            accuracy: st.correct as f64 / st.seen as f64,
            images: st.seen,
        };
        let stats = EpochStats {
            epoch: st.epoch,
            train,
            validation,
            seconds: st.clock.take().map_or(f64::NAN, |c| c.seconds()),
        };
        st.epoch += 1;
        st.step = 0;
        st.shuffled = false;
        st.loss_sum = 0.0;
        st.correct = 0;
        st.seen = 0;
        stats
    }

    /// One optimizer step on exactly one logical batch (`images`: batch_logical × 784,
    /// `labels` its digits, in the order given: the caller shuffles), for the browser: the
    /// reads of the loss and logits out of device memory are async. Returns the step's mean
    /// loss and accuracy. [`Trainer::fit`] is the blocking loop over epochs.
    pub async fn step_async(&mut self, images: &[f32], labels: &[u8]) -> Result<(f64, f64)> {
        let (bl, bp) = (self.cfg.batch_logical, self.cfg.batch_physical);
        if labels.len() != bl || images.len() != bl * IMAGE_PIXELS {
            return Err(Error::Shape(format!(
                "a step takes {bl} images and labels, got {} pixels and {} labels",
                images.len(),
                labels.len()
            )));
        }
        if let Some(&bad) = labels.iter().find(|&&l| l as usize >= N_CLASSES) {
            return Err(Error::InvalidArgument(format!(
                "label {bad} is not a digit"
            )));
        }
        let k = bl / bp;
        self.ctx.set_f32(self.loss_grad, &[1.0 / k as f32])?;
        self.set_hparams(self.steps + 1)?;
        let mut onehot = vec![0f32; bp * N_CLASSES];
        let (mut loss, mut correct) = (0f64, 0usize);
        for (imgs, labs) in images.chunks(bp * IMAGE_PIXELS).zip(labels.chunks(bp)) {
            onehot.fill(0.0);
            for (j, &y) in labs.iter().enumerate() {
                onehot[j * N_CLASSES + y as usize] = 1.0;
            }
            self.ctx.set_f32(self.images, imgs)?;
            self.ctx.set_f32(self.labels, &onehot)?;
            self.runner.compute_async(&self.ctx).await?;
            loss += self.ctx.get_f32_async(self.loss).await?[0] as f64;
            let logits = self.ctx.get_f32_async(self.logits).await?;
            correct += logits
                .chunks(N_CLASSES)
                .zip(labs)
                .filter(|(l, &y)| mnist::argmax(l) == y)
                .count();
        }
        if let (Some(og), Some(acc)) = (&mut self.opt_graph, &self.acc_buffer) {
            og.compute_async(&self.ctx).await?;
            acc.clear(0)?;
        }
        self.steps += 1;
        Ok((loss / k as f64, correct as f64 / bl as f64))
    }

    /// [`Trainer::to_gguf`] with the weights read asynchronously (from device memory in the
    /// browser).
    pub async fn to_gguf_async(&self) -> Result<Vec<u8>> {
        let mut w = GgufWriter::new();
        w.set("general.architecture", self.kind.name());
        for &p in &self.params {
            let t = self.ctx.tensor(p);
            let ne: Vec<u64> = t.ne[..t.n_dims()].iter().map(|&n| n as u64).collect();
            let bytes = self.ctx.get_bytes_async(p).await?;
            w.add_tensor_owned(&t.name.clone(), DType::F32, &ne, bytes)?;
        }
        w.to_bytes()
    }

    /// Loss and accuracy of the current weights on `images` / `labels` (through the saved
    /// model's forward pass, `Mnist`).
    pub fn evaluate(&self, images: &[f32], labels: &[u8]) -> Result<Score> {
        score(self.to_gguf()?, self.cfg.n_threads, images, labels)
    }

    /// The current weights as a GGUF file in ggml's MNIST layout (`ggweb mnist` and ggml's
    /// mnist-eval read it).
    pub fn to_gguf(&self) -> Result<Vec<u8>> {
        let mut w = GgufWriter::new();
        w.set("general.architecture", self.kind.name());
        for &p in &self.params {
            let t = self.ctx.tensor(p);
            let ne: Vec<u64> = t.ne[..t.n_dims()].iter().map(|&n| n as u64).collect();
            w.add_tensor_owned(&t.name.clone(), DType::F32, &ne, self.ctx.get_bytes(p)?)?;
        }
        w.to_bytes()
    }
}

/// Where a training run stands (see [`Trainer::start_fit`]).
pub struct FitState {
    n: usize,
    n_train: usize,
    steps_per_epoch: usize,
    epochs: usize,
    epoch: usize,
    step: usize,
    order: Vec<usize>,
    /// Whether this epoch's order is shuffled yet (at its first step).
    shuffled: bool,
    loss_sum: f64,
    correct: usize,
    seen: usize,
    clock: Option<Clock>,
}

impl FitState {
    /// At an epoch's first step: start its clock and shuffle its order (seeded by `rng`).
    fn begin_epoch(&mut self, rng: &mut SplitMix) {
        if self.shuffled {
            return;
        }
        self.clock = Some(Clock::start());
        for i in (1..self.n_train).rev() {
            self.order.swap(i, rng.below(i + 1));
        }
        self.shuffled = true;
    }

    /// The epoch under way (0-based; = the epoch count when finished).
    pub fn epoch(&self) -> usize {
        self.epoch
    }
    /// Steps done in this epoch.
    pub fn step(&self) -> usize {
        self.step
    }
    pub fn steps_per_epoch(&self) -> usize {
        self.steps_per_epoch
    }
    /// Images used for training (the rest validate).
    pub fn train_images(&self) -> usize {
        self.n_train
    }
    /// All steps of this epoch are done ([`Trainer::end_epoch`] is next).
    pub fn epoch_complete(&self) -> bool {
        self.step == self.steps_per_epoch
    }
    /// Every epoch is done.
    pub fn finished(&self) -> bool {
        self.epoch >= self.epochs
    }
}

/// The async path for the browser, where WebGPU memory is read asynchronously: the same run
/// as [`Trainer::run_steps`] / [`Trainer::end_epoch`] / [`Trainer::evaluate`] (the same seeded
/// order, the same figures), each step through [`Trainer::step_async`].
impl Trainer {
    /// [`Trainer::run_steps`] with async reads.
    pub async fn run_steps_async(
        &mut self,
        st: &mut FitState,
        images: &[f32],
        labels: &[u8],
        n: usize,
    ) -> Result<Vec<StepStats>> {
        check_same_data(st, images, labels)?;
        let (bl, bp) = (self.cfg.batch_logical, self.cfg.batch_physical);
        let k = (bl / bp) as f64;
        let mut img_buf = vec![0f32; bl * IMAGE_PIXELS];
        let mut lab_buf = vec![0u8; bl];
        let mut out = Vec::new();
        while out.len() < n && !st.finished() && !st.epoch_complete() {
            st.begin_epoch(&mut self.rng);
            let step = st.step;
            for (j, &src) in st.order[step * bl..(step + 1) * bl].iter().enumerate() {
                img_buf[j * IMAGE_PIXELS..(j + 1) * IMAGE_PIXELS]
                    .copy_from_slice(&images[src * IMAGE_PIXELS..(src + 1) * IMAGE_PIXELS]);
                lab_buf[j] = labels[src];
            }
            let (loss, accuracy) = self.step_async(&img_buf, &lab_buf).await?;
            st.step += 1;
            // run_steps sums the k physical batches' losses and counts the right answers.
            st.loss_sum += loss * k;
            st.correct += (accuracy * bl as f64).round() as usize;
            st.seen += bl;
            out.push(StepStats {
                epoch: st.epoch,
                step,
                steps_per_epoch: st.steps_per_epoch,
                loss,
                accuracy,
            });
        }
        Ok(out)
    }

    /// [`Trainer::end_epoch`] with async reads.
    pub async fn end_epoch_async(
        &mut self,
        st: &mut FitState,
        images: &[f32],
        labels: &[u8],
    ) -> Result<EpochStats> {
        check_epoch_end(st, images, labels)?;
        let validation = if st.n_train < st.n {
            self.evaluate_async(&images[st.n_train * IMAGE_PIXELS..], &labels[st.n_train..])
                .await?
        } else {
            Score::default()
        };
        Ok(self.close_epoch(st, validation))
    }

    /// [`Trainer::evaluate`] with the weights read asynchronously (the forward pass runs on the
    /// CPU).
    pub async fn evaluate_async(&self, images: &[f32], labels: &[u8]) -> Result<Score> {
        score(
            self.to_gguf_async().await?,
            self.cfg.n_threads,
            images,
            labels,
        )
    }
}

/// Loss and accuracy of the MNIST model in `gguf` on `images` / `labels` (through `Mnist` on
/// the CPU).
fn score(gguf: Vec<u8>, n_threads: usize, images: &[f32], labels: &[u8]) -> Result<Score> {
    check_data(images, labels)?;
    let mut m = mnist::Mnist::from_bytes(Arc::new(gguf), n_threads)?;
    let logits = m.logits(images)?;
    let (mut loss, mut correct) = (0f64, 0usize);
    for (l, &y) in logits.chunks(N_CLASSES).zip(labels) {
        let max = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let lse = l.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
        loss += lse - l[y as usize] as f64;
        correct += (mnist::argmax(l) == y) as usize;
    }
    let n = labels.len().max(1) as f64;
    Ok(Score {
        loss: loss / n,
        accuracy: correct as f64 / n,
        images: labels.len(),
    })
}

/// `images` / `labels` are the ones `st`'s run started on (in size).
fn check_same_data(st: &FitState, images: &[f32], labels: &[u8]) -> Result<()> {
    if labels.len() != st.n || images.len() != st.n * IMAGE_PIXELS {
        return Err(Error::Shape(format!(
            "{} labels / {} pixels, but training started on {} images",
            labels.len(),
            images.len(),
            st.n
        )));
    }
    Ok(())
}

/// The epoch under way in `st` has run all its steps, on these images.
fn check_epoch_end(st: &FitState, images: &[f32], labels: &[u8]) -> Result<()> {
    if !st.epoch_complete() || st.finished() {
        return Err(Error::InvalidArgument(format!(
            "epoch {} is not complete ({} of {} steps)",
            st.epoch, st.step, st.steps_per_epoch
        )));
    }
    check_same_data(st, images, labels)
}

/// `images` hold 784 pixels per label, and every label is a digit.
fn check_data(images: &[f32], labels: &[u8]) -> Result<()> {
    if Some(images.len()) != labels.len().checked_mul(IMAGE_PIXELS) {
        return Err(Error::Shape(format!(
            "{} labels for {} pixels",
            labels.len(),
            images.len()
        )));
    }
    if let Some(&bad) = labels.iter().find(|&&l| l as usize >= N_CLASSES) {
        return Err(Error::InvalidArgument(format!(
            "label {bad} is not a digit"
        )));
    }
    Ok(())
}

/// The optimizer node updating `param` from `grad` (and `state` for AdamW).
fn opt_node(
    ctx: &mut Context,
    param: TensorId,
    grad: TensorId,
    state: Option<TensorId>,
    hp: TensorId,
) -> Result<TensorId> {
    match state {
        Some(s) => ctx.opt_step_adamw(param, grad, s, hp),
        None => ctx.opt_step_sgd(param, grad, hp),
    }
}
