//! ggml's MNIST example models (`mnist-fc`, `mnist-cnn`) in ggml's GGUF layout, and the idx data
//! format of the MNIST set.

use std::sync::Arc;

use crate::backend::cpu::HostBytes;
use crate::context::Mark;
use crate::gguf::Gguf;
use crate::models::runner::{BackendChoice, Placements, Runner};
use crate::models::weights::Weights;
use crate::tensor::PoolOp;
use crate::{Context, DType, Error, Graph, Result, TensorId};

/// Pixels per image.
pub const IMAGE_PIXELS: usize = 28 * 28;
/// Classes.
pub const N_CLASSES: usize = 10;
/// Images per graph evaluation (ggml's mnist-eval uses physical batches of this order).
pub const MAX_BATCH: usize = 500;

/// The embedded default models and the t10k test set (native builds only: the browser fetches them).
#[cfg(not(target_arch = "wasm32"))]
pub mod embedded {
    pub static FC: &[u8] = include_bytes!("../../assets/mnist-fc-f32.gguf");
    pub static CNN: &[u8] = include_bytes!("../../assets/mnist-cnn-f32.gguf");
    pub static T10K_IMAGES_GZ: &[u8] = include_bytes!("../../assets/t10k-images-idx3-ubyte.gz");
    pub static T10K_LABELS_GZ: &[u8] = include_bytes!("../../assets/t10k-labels-idx1-ubyte.gz");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MnistKind {
    Fc,
    Cnn,
}

impl MnistKind {
    pub fn name(self) -> &'static str {
        match self {
            MnistKind::Fc => "mnist-fc",
            MnistKind::Cnn => "mnist-cnn",
        }
    }
}

/// The parameter tensors of one model (shared with the trainer, `models/train.rs`).
pub(crate) enum Params {
    Fc {
        fc1_w: TensorId,
        fc1_b: TensorId,
        fc2_w: TensorId,
        fc2_b: TensorId,
    },
    Cnn {
        k1: TensorId,
        b1: TensorId,
        k2: TensorId,
        b2: TensorId,
        dense_w: TensorId,
        dense_b: TensorId,
    },
}

/// A loaded MNIST model with its CPU backend and graph allocator.
pub struct Mnist {
    ctx: Context,
    kind: MnistKind,
    params: Params,
    mark: Mark,
    runner: Runner,
    /// Weights kept in host memory although a device runs the model, with why.
    on_host: Vec<String>,
    /// The runner's report plus the weights kept on the CPU.
    report: String,
    /// Placements of the last async batch (the browser reports them).
    last_placements: Option<Placements>,
    /// The planned graph of the last batch: (images, input, logits). A batch of the same size
    /// reuses it (only the input is written), so an evaluation builds and plans once.
    planned: Option<(usize, TensorId, TensorId)>,
    // Keeps the file bytes alive: the weights point into them.
    _bytes: Arc<dyn HostBytes>,
}

impl Params {
    fn from_weights(kind: MnistKind, ctx: &Context, w: &Weights) -> Result<Params> {
        Ok(match kind {
            MnistKind::Fc => Params::Fc {
                fc1_w: expect_shape(ctx, w.get("fc1.weight")?, [784, 500, 1, 1])?,
                fc1_b: expect_shape(ctx, w.get("fc1.bias")?, [500, 1, 1, 1])?,
                fc2_w: expect_shape(ctx, w.get("fc2.weight")?, [500, 10, 1, 1])?,
                fc2_b: expect_shape(ctx, w.get("fc2.bias")?, [10, 1, 1, 1])?,
            },
            MnistKind::Cnn => Params::Cnn {
                k1: expect_shape(ctx, w.get("conv1.kernel")?, [3, 3, 1, 8])?,
                b1: expect_shape(ctx, w.get("conv1.bias")?, [1, 1, 8, 1])?,
                k2: expect_shape(ctx, w.get("conv2.kernel")?, [3, 3, 8, 16])?,
                b2: expect_shape(ctx, w.get("conv2.bias")?, [1, 1, 16, 1])?,
                dense_w: expect_shape(ctx, w.get("dense.weight")?, [784, 10, 1, 1])?,
                dense_b: expect_shape(ctx, w.get("dense.bias")?, [10, 1, 1, 1])?,
            },
        })
    }
}

fn expect_shape(ctx: &Context, id: TensorId, ne: [usize; 4]) -> Result<TensorId> {
    let t = ctx.tensor(id);
    if t.ne != ne || t.dtype != DType::F32 {
        return Err(Error::Model(format!(
            "tensor '{}' is {} {:?}, expected f32 {:?}",
            t.name, t.dtype, t.ne, ne
        )));
    }
    Ok(id)
}

impl Mnist {
    /// Load a model from the bytes of its GGUF file.
    pub fn from_bytes(bytes: Arc<dyn HostBytes>, n_threads: usize) -> Result<Mnist> {
        Self::with_backend(bytes, BackendChoice::Cpu, n_threads)
    }

    /// Load on the chosen backends (`Runner::report` says what was picked).
    pub fn with_backend(
        bytes: Arc<dyn HostBytes>,
        backend: BackendChoice,
        n_threads: usize,
    ) -> Result<Mnist> {
        Self::with_runner(bytes, Runner::new(backend, n_threads)?)
    }

    /// Load onto `runner`'s backends (tests open devices with their own options).
    pub fn with_runner(bytes: Arc<dyn HostBytes>, runner: Runner) -> Result<Mnist> {
        let gguf = Gguf::parse(bytes.bytes())?;
        let arch = gguf.architecture().unwrap_or("");
        let kind = match arch {
            "mnist-fc" => MnistKind::Fc,
            "mnist-cnn" => MnistKind::Cnn,
            other => {
                return Err(Error::Model(format!(
                    "general.architecture is '{other}', expected 'mnist-fc' or 'mnist-cnn'"
                )))
            }
        };
        let mut ctx = Context::new();
        // Each weight where the ops reading it run on the largest batch (the device's buffer
        // when it supports them, else the file bytes in place for the CPU).
        let device = runner.gpu_device();
        let w = Weights::load_placed(&mut ctx, &gguf, bytes.clone(), device.as_ref(), |ctx, w| {
            let params = Params::from_weights(kind, ctx, w)?;
            Ok(vec![forward(ctx, &params, MAX_BATCH)?.1])
        })?;
        let params = Params::from_weights(kind, &ctx, &w)?;
        let on_host = w.on_host;
        let report = if on_host.is_empty() {
            runner.report.clone()
        } else {
            format!(
                "{}; weights kept on the CPU: {}",
                runner.report,
                on_host.join("; ")
            )
        };
        let mark = ctx.mark();
        Ok(Mnist {
            ctx,
            kind,
            params,
            on_host,
            report,
            mark,
            runner,
            last_placements: None,
            planned: None,
            _bytes: bytes,
        })
    }

    /// Load a model file (memory-mapped).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &std::path::Path, n_threads: usize) -> Result<Mnist> {
        let file = crate::gguf::GgufFile::open(path)?;
        Self::from_bytes(Arc::new(file), n_threads)
    }

    /// The embedded default model.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn embedded(kind: MnistKind, n_threads: usize) -> Result<Mnist> {
        let bytes: &'static [u8] = match kind {
            MnistKind::Fc => embedded::FC,
            MnistKind::Cnn => embedded::CNN,
        };
        Self::from_bytes(Arc::new(bytes), n_threads)
    }

    pub fn kind(&self) -> MnistKind {
        self.kind
    }

    pub fn set_n_threads(&mut self, n: usize) {
        // Work buffers are sized per thread count when planning.
        self.forget_plan();
        self.runner.set_n_threads(n);
    }

    /// Which backends run this model, and why; with the weights kept on the CPU, if any.
    pub fn backend_report(&self) -> &str {
        &self.report
    }

    pub fn runner_mut(&mut self) -> &mut Runner {
        // The caller may change backends: plan again on the next batch.
        self.forget_plan();
        &mut self.runner
    }

    fn forget_plan(&mut self) {
        if self.planned.take().is_some() {
            self.ctx.reset_to(self.mark);
        }
    }

    /// Build the forward graph for `n` images; returns (input [784, n], logits [10, n]).
    fn build(&mut self, n: usize) -> Result<(TensorId, TensorId)> {
        forward(&mut self.ctx, &self.params, n)
    }

    /// Weights kept in host memory (their ops run on the CPU) although a device runs the model,
    /// with why; empty on the CPU alone.
    pub fn weights_on_host(&self) -> &[String] {
        &self.on_host
    }

    /// Logits for `images` (n × 784 pixels in [0, 1]), n × 10 values.
    pub fn logits(&mut self, images: &[f32]) -> Result<Vec<f32>> {
        if !images.len().is_multiple_of(IMAGE_PIXELS) {
            return Err(Error::Shape(format!(
                "{} pixels is not a whole number of 28x28 images",
                images.len()
            )));
        }
        let n = images.len() / IMAGE_PIXELS;
        let mut out = Vec::with_capacity(n * N_CLASSES);
        for chunk in images.chunks(MAX_BATCH * IMAGE_PIXELS) {
            let r = self.logits_batch(chunk);
            if r.is_err() {
                self.forget_plan();
            }
            out.extend(r?);
        }
        Ok(out)
    }

    fn logits_batch(&mut self, images: &[f32]) -> Result<Vec<f32>> {
        let n = images.len() / IMAGE_PIXELS;
        let (input, logits) = match self.planned {
            Some((pn, input, logits)) if pn == n => (input, logits),
            _ => {
                self.forget_plan();
                let (input, logits) = self.build(n)?;
                let graph = Graph::build(&self.ctx, &[logits]);
                self.runner.alloc(&mut self.ctx, &graph)?;
                self.planned = Some((n, input, logits));
                (input, logits)
            }
        };
        self.ctx.set_f32(input, images)?;
        self.runner.compute(&self.ctx)?;
        self.ctx.get_f32(logits)
    }

    /// [`Mnist::logits`] for the browser, where reading WebGPU memory is async.
    #[cfg(feature = "webgpu")]
    pub async fn logits_async(&mut self, images: &[f32]) -> Result<Vec<f32>> {
        if !images.len().is_multiple_of(IMAGE_PIXELS) {
            return Err(Error::Shape(format!(
                "{} pixels is not a whole number of 28x28 images",
                images.len()
            )));
        }
        let mut out = Vec::with_capacity(images.len() / IMAGE_PIXELS * N_CLASSES);
        for chunk in images.chunks(MAX_BATCH * IMAGE_PIXELS) {
            let r = self.logits_batch_async(chunk).await;
            self.ctx.reset_to(self.mark);
            out.extend(r?);
        }
        Ok(out)
    }

    #[cfg(feature = "webgpu")]
    async fn logits_batch_async(&mut self, images: &[f32]) -> Result<Vec<f32>> {
        let n = images.len() / IMAGE_PIXELS;
        let (input, logits) = self.build(n)?;
        let graph = Graph::build(&self.ctx, &[logits]);
        self.runner.alloc(&mut self.ctx, &graph)?;
        self.ctx.set_f32(input, images)?;
        self.runner.compute_async(&self.ctx).await?;
        let out = self.ctx.get_f32_async(logits).await?;
        self.last_placements = Some(self.runner.placements(&self.ctx));
        Ok(out)
    }

    /// Where the nodes of the last batch ran (see [`Runner::placements`]); `None` before the
    /// first async batch.
    pub fn last_placements(&self) -> Option<&Placements> {
        self.last_placements.as_ref()
    }

    /// Predicted class per image.
    pub fn predict(&mut self, images: &[f32]) -> Result<Vec<u8>> {
        let logits = self.logits(images)?;
        Ok(logits.chunks(N_CLASSES).map(argmax).collect())
    }

    /// Number of correct predictions on `images` with `labels`, calling `progress(done, total)`
    /// after each batch.
    pub fn evaluate(
        &mut self,
        images: &[f32],
        labels: &[u8],
        mut progress: impl FnMut(usize, usize),
    ) -> Result<usize> {
        if images.len() != labels.len() * IMAGE_PIXELS {
            return Err(Error::Shape(format!(
                "{} labels for {} pixels",
                labels.len(),
                images.len()
            )));
        }
        let mut correct = 0;
        let mut done = 0;
        for (imgs, labs) in images
            .chunks(MAX_BATCH * IMAGE_PIXELS)
            .zip(labels.chunks(MAX_BATCH))
        {
            let pred = self.predict(imgs)?;
            correct += pred.iter().zip(labs).filter(|(p, l)| p == l).count();
            done += labs.len();
            progress(done, labels.len());
        }
        Ok(correct)
    }
}

/// The forward graph for `n` images in `ctx`; returns (input [784, n], logits [10, n]).
pub(crate) fn forward(
    ctx: &mut Context,
    params: &Params,
    n: usize,
) -> Result<(TensorId, TensorId)> {
    let images = ctx.new_tensor_2d(DType::F32, IMAGE_PIXELS, n)?;
    ctx.set_name(images, "images")?;
    ctx.set_input(images);
    let logits = match *params {
        Params::Fc {
            fc1_w,
            fc1_b,
            fc2_w,
            fc2_b,
        } => {
            let h = ctx.mul_mat(fc1_w, images)?;
            let h = ctx.add(h, fc1_b)?;
            let h = ctx.relu(h)?;
            let o = ctx.mul_mat(fc2_w, h)?;
            ctx.add(o, fc2_b)?
        }
        Params::Cnn {
            k1,
            b1,
            k2,
            b2,
            dense_w,
            dense_b,
        } => {
            let x = ctx.reshape(images, &[28, 28, 1, n])?;
            let x = ctx.conv_2d(k1, x, 1, 1, 1, 1, 1, 1)?;
            let x = ctx.add(x, b1)?;
            let x = ctx.relu(x)?;
            let x = ctx.pool_2d(x, PoolOp::Max, 2, 2, 2, 2, 0, 0)?;
            let x = ctx.conv_2d(k2, x, 1, 1, 1, 1, 1, 1)?;
            let x = ctx.add(x, b2)?;
            let x = ctx.relu(x)?;
            let x = ctx.pool_2d(x, PoolOp::Max, 2, 2, 2, 2, 0, 0)?;
            // [7, 7, 16, n] -> [16, 7, 7, n]: flatten in (h, w, c) order as the model was trained.
            let x = ctx.permute(x, [1, 2, 0, 3])?;
            let x = ctx.cont(x)?;
            let x = ctx.reshape(x, &[7 * 7 * 16, n])?;
            let o = ctx.mul_mat(dense_w, x)?;
            ctx.add(o, dense_b)?
        }
    };
    ctx.set_name(logits, "logits")?;
    ctx.set_output(logits);
    Ok((images, logits))
}

/// Index of the largest value.
pub fn argmax(xs: &[f32]) -> u8 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u8
}

/// The MNIST idx file format (optionally gzip-compressed).
pub mod idx {
    use crate::{Error, Result};
    use std::io::Read;

    /// Largest decompressed idx file accepted: the MNIST training images are 47 MB.
    pub const MAX_IDX_BYTES: u64 = 64 << 20;
    /// Deflate's best compression ratio is about 1032:1, so a stream cannot honestly expand more.
    const MAX_DEFLATE_RATIO: u64 = 1032;

    /// The bytes, decompressed when they are gzip. The output is bounded by what the input can
    /// justify (deflate's ratio) and by [`MAX_IDX_BYTES`], so a gzip bomb is an error, not an
    /// allocation of whatever it expands to.
    pub fn maybe_gunzip(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>> {
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let limit = (bytes.len() as u64)
                .saturating_mul(MAX_DEFLATE_RATIO)
                .min(MAX_IDX_BYTES);
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(bytes)
                .take(limit + 1)
                .read_to_end(&mut out)
                .map_err(|e| Error::InvalidArgument(format!("bad gzip data: {e}")))?;
            if out.len() as u64 > limit {
                return Err(Error::InvalidArgument(format!(
                    "gzip data expands past {limit} bytes (an idx file is at most {MAX_IDX_BYTES})"
                )));
            }
            Ok(out.into())
        } else {
            Ok(bytes.into())
        }
    }

    fn be_u32(b: &[u8], at: usize) -> Result<usize> {
        b.get(at..at + 4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
            .ok_or_else(|| Error::InvalidArgument("truncated idx header".into()))
    }

    /// Images as f32 in [0, 1], row-major 28×28 each: (count, pixels).
    pub fn parse_images(bytes: &[u8]) -> Result<(usize, Vec<f32>)> {
        let b = maybe_gunzip(bytes)?;
        if be_u32(&b, 0)? != 0x0803 {
            return Err(Error::InvalidArgument(
                "not an idx3 image file (magic 0x00000803)".into(),
            ));
        }
        let (n, rows, cols) = (be_u32(&b, 4)?, be_u32(&b, 8)?, be_u32(&b, 12)?);
        if rows != 28 || cols != 28 {
            return Err(Error::InvalidArgument(format!(
                "images are {rows}x{cols}, expected 28x28"
            )));
        }
        let body = &b[16..];
        if n.checked_mul(784).is_none_or(|need| body.len() < need) {
            return Err(Error::InvalidArgument(format!(
                "idx file holds fewer than {n} images"
            )));
        }
        Ok((
            n,
            body[..n * 784].iter().map(|&p| p as f32 / 255.0).collect(),
        ))
    }

    /// Labels 0..9.
    pub fn parse_labels(bytes: &[u8]) -> Result<Vec<u8>> {
        let b = maybe_gunzip(bytes)?;
        if be_u32(&b, 0)? != 0x0801 {
            return Err(Error::InvalidArgument(
                "not an idx1 label file (magic 0x00000801)".into(),
            ));
        }
        let n = be_u32(&b, 4)?;
        let body = &b[8..];
        if body.len() < n {
            return Err(Error::InvalidArgument(format!(
                "idx file holds fewer than {n} labels"
            )));
        }
        Ok(body[..n].to_vec())
    }
}
