//! Subcommands of the `ggweb` binary.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Parser, Subcommand};
use ggweb::gguf::{Array, GgufFile, Value};
use ggweb::models::chat::ChatMessage;
use ggweb::models::generate::{Step, StopReason};
use ggweb::models::llm::Llm;
use ggweb::models::mnist::{self, Mnist};
use ggweb::models::runner::BackendChoice;
use ggweb::models::sampler::SamplerOptions;
use ggweb::models::train::{Optimizer, TrainConfig, Trainer};
use ggweb::{DType, Error, Result};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "ggweb",
    version,
    about = "GGUF tools and models on the ggweb tensor library"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show a GGUF file's version, metadata and tensors.
    Info {
        file: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Evaluate an MNIST model on the 10,000 t10k test images.
    Mnist {
        /// `fc`, `cnn` (embedded defaults) or a GGUF file.
        #[arg(long, default_value = "fc")]
        model: String,
        /// Directory with t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz] (default: embedded).
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long)]
        threads: Option<usize>,
        /// cpu, webgpu, cuda or auto (CUDA when a device exists, else WebGPU when an adapter exists).
        #[arg(long, default_value = "cpu")]
        backend: String,
        #[arg(long)]
        json: bool,
    },
    /// Train a model from random initialisation (or resume one) and save it as GGUF.
    Train {
        /// What to train: `mnist`.
        what: String,
        /// `fc` or `cnn`.
        #[arg(long, default_value = "fc")]
        model: String,
        /// Directory with train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] (and
        /// t10k-* for the final test; default for those: embedded).
        #[arg(long)]
        data: PathBuf,
        #[arg(long, default_value_t = 30)]
        epochs: usize,
        /// Images per optimizer step (logical batch).
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Images per graph evaluation (default: the largest divisor of --batch up to 500).
        #[arg(long)]
        physical_batch: Option<usize>,
        /// AdamW learning rate.
        #[arg(long, default_value_t = 1e-3)]
        lr: f32,
        /// Train with SGD (this learning rate) instead of AdamW.
        #[arg(long)]
        sgd: bool,
        /// Fraction of the training images held out for validation.
        #[arg(long, default_value_t = 0.05)]
        val_split: f64,
        /// Use only the first N training images.
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long)]
        threads: Option<usize>,
        /// cpu, webgpu, cuda or auto (a GPU when one exists); nodes a GPU backend lacks run on the CPU.
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// Continue from this GGUF model (weights only; the optimizer starts fresh).
        #[arg(long)]
        resume: Option<PathBuf>,
        /// Where to save the trained model (GGUF, ggml's MNIST layout).
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Print the token ids of TEXT as a JSON array.
    Tokenize {
        #[arg(short = 'm', long)]
        model: PathBuf,
        /// Do not add BOS/EOS even when the model's metadata asks for them.
        #[arg(long)]
        no_bos: bool,
        /// Treat special-token text (e.g. `<|im_start|>`) as plain text.
        #[arg(long)]
        no_parse_special: bool,
        text: String,
    },
    /// Sentence embeddings of each TEXT with a BERT GGUF (pooled and L2-normalised).
    Embed {
        #[arg(short = 'm', long)]
        model: PathBuf,
        #[arg(long)]
        threads: Option<usize>,
        /// cpu, webgpu, cuda or auto (CUDA when a device exists, else WebGPU when an adapter exists).
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// mean, cls or last (default: the file's bert.pooling_type).
        #[arg(long)]
        pooling: Option<String>,
        /// `{"embeddings": [[…]…], "n_embd": N}` instead of one line of numbers per text.
        #[arg(long)]
        json: bool,
        #[arg(required = true)]
        texts: Vec<String>,
    },
    /// Generate text after a prompt.
    Generate {
        #[arg(short = 'm', long)]
        model: PathBuf,
        #[arg(short = 'p', long)]
        prompt: String,
        #[arg(short = 'n', long, default_value_t = 64)]
        n_predict: usize,
        /// 0 = greedy.
        #[arg(long, default_value_t = 0.0)]
        temp: f32,
        #[arg(long, default_value_t = 40)]
        top_k: usize,
        #[arg(long, default_value_t = 0.95)]
        top_p: f32,
        #[arg(long, default_value_t = 0.05)]
        min_p: f32,
        #[arg(long, default_value_t = 1.0)]
        repeat_penalty: f32,
        #[arg(long, default_value_t = 0x5eed)]
        seed: u64,
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 2048)]
        ctx_size: usize,
        /// cpu, webgpu, cuda or auto (CUDA, else WebGPU, when there); the choice is printed.
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// Wrap the prompt in the model's chat template as a user message.
        #[arg(long)]
        chat: bool,
        /// Attention as one fused op: auto (on x86-64 CPUs with AVX2), on or off.
        #[arg(long, default_value = "auto")]
        flash_attn: String,
        /// Keep the file's shared mapping: no weights repacked for this CPU's GEMV (as
        /// llama.cpp's --no-repack), none read into memory on huge pages.
        #[arg(long)]
        no_repack: bool,
        #[arg(long)]
        json: bool,
    },
    /// Evaluate a prompt and write the last position's logits (little-endian f32).
    Eval {
        #[arg(short = 'm', long)]
        model: PathBuf,
        #[arg(short = 'p', long)]
        prompt: String,
        #[arg(long)]
        logits_out: PathBuf,
        #[arg(long)]
        threads: Option<usize>,
        /// cpu, webgpu, cuda or auto (CUDA, else WebGPU, when there); the choice is printed.
        #[arg(long, default_value = "cpu")]
        backend: String,
    },
    /// Chat with a model in the terminal (empty line or Ctrl-D to quit; /reset starts over).
    Chat {
        #[arg(short = 'm', long)]
        model: PathBuf,
        #[arg(long, default_value_t = 0.7)]
        temp: f32,
        #[arg(long, default_value_t = 512)]
        n_predict: usize,
        #[arg(long)]
        system: Option<String>,
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 4096)]
        ctx_size: usize,
        /// cpu, webgpu, cuda or auto (CUDA, else WebGPU, when there); the choice is printed.
        #[arg(long, default_value = "cpu")]
        backend: String,
    },
    /// mul_mat throughput (GFLOP/s) per weight type.
    Bench {
        #[arg(long)]
        json: bool,
        /// The weight shapes of the project's LLMs (SmolLM2, gemma3, Qwen2.5) instead of
        /// m = k = size, weights streamed from DRAM (see --stream-mib), with GB/s of weights
        /// and the machine's read bandwidth (CPU only; --n defaults to 1,120).
        #[arg(long)]
        llm: bool,
        /// The fused attention of the project's LLMs (every layer's f16 KV cache, as a forward
        /// reads it) at --contexts cached positions, with µs per forward and GB/s of KV read
        /// (CPU only; --n defaults to 1: a generated token).
        #[arg(long)]
        attention: bool,
        /// With --attention: cached positions (comma-separated); default 256,1024,4096.
        #[arg(long)]
        contexts: Option<String>,
        /// With --llm or --attention: only these models (comma-separated: smollm2, gemma3, qwen2.5).
        #[arg(long)]
        models: Option<String>,
        /// With --llm: rotate over copies of each weight holding at least this many MiB
        /// (over the last-level cache, so weights come from DRAM; 0: one copy).
        #[arg(long, default_value_t = 128)]
        stream_mib: usize,
        /// With --llm: keep the weights plain (by default they are repacked for the CPU GEMV
        /// where a model's load would repack them).
        #[arg(long)]
        no_repack: bool,
        /// With --llm: run every shape (of --models / --types) as each of these weight types
        /// instead of its own, where k is a multiple of the type's block (q4_0, q5_1 and q5_K
        /// are in none of the files).
        #[arg(long)]
        as_types: Option<String>,
        /// cpu, webgpu or cuda.
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// Weight types (comma-separated); default f32,f16,q4_0,q8_0,q4_K (with --llm: only the
        /// shapes of these types; default all).
        #[arg(long)]
        types: Option<String>,
        /// Thread counts (comma-separated); default 1,2.
        #[arg(long)]
        threads: Option<String>,
        /// Batch sizes n (comma-separated); default 1,512.
        #[arg(long)]
        n: Option<String>,
        /// m = k (default 4096).
        #[arg(long, default_value_t = 4096)]
        size: usize,
        /// Minimum seconds per measurement.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
    },
}

pub fn run() -> Result<()> {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are not errors.
            if !e.use_stderr() {
                print!("{e}");
                return Ok(());
            }
            return Err(Error::InvalidArgument(
                e.to_string()
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ")
                    .to_string(),
            ));
        }
    };
    match cli.cmd {
        Cmd::Info { file, json } => info(&file, json),
        Cmd::Mnist {
            model,
            data,
            threads,
            backend,
            json,
        } => mnist_cmd(&model, data.as_deref(), threads, &backend, json),
        Cmd::Train {
            what,
            model,
            data,
            epochs,
            batch,
            physical_batch,
            lr,
            sgd,
            val_split,
            limit,
            seed,
            threads,
            backend,
            resume,
            out,
            json,
        } => {
            if what != "mnist" {
                return Err(Error::InvalidArgument(format!(
                    "can train 'mnist', not '{what}'"
                )));
            }
            let physical = physical_batch.unwrap_or_else(|| {
                (1..=batch.min(500))
                    .rev()
                    .find(|d| batch % d == 0)
                    .unwrap_or(1)
            });
            let optimizer = if sgd {
                Optimizer::Sgd { lr, wd: 0.0 }
            } else {
                Optimizer::adamw(lr)
            };
            let cfg = TrainConfig {
                epochs,
                batch_logical: batch,
                batch_physical: physical,
                optimizer,
                val_split,
                seed,
                n_threads: cpu_threads(threads),
            };
            let run = TrainRun {
                model,
                data,
                limit,
                backend,
                resume,
                out,
                json,
            };
            train_mnist(&run, cfg)
        }
        Cmd::Bench {
            json,
            llm,
            attention,
            contexts,
            models,
            stream_mib,
            no_repack,
            as_types,
            backend,
            types,
            threads,
            n,
            size,
            seconds,
        } => {
            if attention {
                bench_attention(json, models, contexts, threads, n, seconds)
            } else if llm {
                let filter = LlmFilter {
                    models,
                    types,
                    as_types,
                    repack: !no_repack,
                };
                bench_llm(json, filter, threads, n, stream_mib, seconds)
            } else {
                bench(json, &backend, types, threads, n, size, seconds)
            }
        }
        Cmd::Tokenize {
            model,
            no_bos,
            no_parse_special,
            text,
        } => {
            let file = GgufFile::open(&model)?;
            let tok = ggweb::models::tokenizer::Tokenizer::from_gguf(file.header())?;
            let ids = tok.tokenize(&text, !no_bos, !no_parse_special);
            println!(
                "{}",
                serde_json::to_string(&ids).map_err(|e| Error::InvalidArgument(e.to_string()))?
            );
            Ok(())
        }
        Cmd::Embed {
            model,
            threads,
            backend,
            pooling,
            json,
            texts,
        } => embed(&model, threads, &backend, pooling.as_deref(), json, &texts),
        Cmd::Generate {
            model,
            prompt,
            n_predict,
            temp,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            threads,
            ctx_size,
            backend,
            chat,
            flash_attn,
            no_repack,
            json,
        } => {
            let flash_attn = match flash_attn.as_str() {
                "auto" => None,
                "on" => Some(true),
                "off" => Some(false),
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "--flash-attn {other}: auto, on or off"
                    )))
                }
            };
            let opts = SamplerOptions {
                temperature: temp,
                top_k,
                top_p,
                min_p,
                repeat_penalty,
                seed,
                ..Default::default()
            };
            let run = LlmRun {
                threads,
                ctx_size,
                backend: backend.parse()?,
                flash_attn,
                repack: !no_repack,
            };
            generate(&model, &prompt, n_predict, opts, run, chat, json)
        }
        Cmd::Eval {
            model,
            prompt,
            logits_out,
            threads,
            backend,
        } => {
            let run = LlmRun {
                threads,
                ctx_size: 4096,
                backend: backend.parse()?,
                flash_attn: None,
                repack: true,
            };
            let mut llm = run.open(&model)?;
            eprintln!("backend: {}", llm.model.backend_report());
            let ids = llm.tokenize(&prompt, true, true);
            let (logits, _) = llm.eval_prompt(&ids)?;
            let bytes: Vec<u8> = logits.iter().flat_map(|x| x.to_le_bytes()).collect();
            std::fs::write(&logits_out, bytes)?;
            eprintln!(
                "{} prompt tokens, {} logits written to {}",
                ids.len(),
                logits.len(),
                logits_out.display()
            );
            Ok(())
        }
        Cmd::Chat {
            model,
            temp,
            n_predict,
            system,
            threads,
            ctx_size,
            backend,
        } => {
            let run = LlmRun {
                threads,
                ctx_size,
                backend: backend.parse()?,
                flash_attn: None,
                repack: true,
            };
            chat(&model, temp, n_predict, system, run)
        }
    }
}

fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(a) => array_json(a),
    }
}

fn array_json(a: &Array) -> serde_json::Value {
    serde_json::Value::Array(
        (0..a.len())
            .map(|i| value_json(&a.get(i).unwrap_or(Value::Bool(false))))
            .collect(),
    )
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => {
            let n = a.len();
            let shown: Vec<String> = (0..n.min(8))
                .filter_map(|i| a.get(i))
                .map(|x| value_text(&x))
                .collect();
            format!(
                "[{}{}] ({n} items)",
                shown.join(", "),
                if n > 8 { ", …" } else { "" }
            )
        }
        other => value_json(other).to_string(),
    }
}

fn info(path: &Path, as_json: bool) -> Result<()> {
    let file = GgufFile::open(path)?;
    let g = file.header();
    if as_json {
        let metadata: serde_json::Map<String, serde_json::Value> = g
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect();
        let tensors: Vec<_> = g
            .tensors
            .iter()
            .map(|t| {
                json!({"name": t.name, "type": t.dtype.name(), "shape": &t.ne[..t.n_dims as usize],
                       "offset": t.offset, "bytes": t.size})
            })
            .collect();
        let out = json!({"version": g.version, "alignment": g.alignment, "metadata": metadata, "tensors": tensors});
        println!(
            "{}",
            serde_json::to_string_pretty(&out)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?
        );
        return Ok(());
    }
    let mut o = std::io::stdout().lock();
    let total: u64 = g.tensors.iter().map(|t| t.size).sum();
    writeln!(
        o,
        "{}: GGUF v{}, alignment {}, {} metadata keys, {} tensors, {:.2} MiB of tensor data",
        path.display(),
        g.version,
        g.alignment,
        g.metadata.len(),
        g.tensors.len(),
        total as f64 / 1048576.0
    )?;
    writeln!(o, "\nmetadata:")?;
    for (k, v) in &g.metadata {
        writeln!(o, "  {k:<40} {}", value_text(v))?;
    }
    writeln!(o, "\ntensors:")?;
    writeln!(
        o,
        "  {:<40} {:<6} {:<24} {:>12} {:>12}",
        "name", "type", "shape", "offset", "bytes"
    )?;
    for t in &g.tensors {
        let shape: Vec<String> = t.ne[..t.n_dims as usize]
            .iter()
            .map(|d| d.to_string())
            .collect();
        writeln!(
            o,
            "  {:<40} {:<6} {:<24} {:>12} {:>12}",
            t.name,
            t.dtype.name(),
            format!("[{}]", shape.join(", ")),
            t.offset,
            t.size
        )?;
    }
    Ok(())
}

fn read_data_file(dir: &Path, stem: &str) -> Result<Vec<u8>> {
    for name in [
        format!("{stem}.gz"),
        stem.to_string(),
        stem.replacen("-idx", ".idx", 1),
    ] {
        let p = dir.join(&name);
        if p.exists() {
            return Ok(std::fs::read(p)?);
        }
    }
    Err(Error::InvalidArgument(format!(
        "{} has no {stem}[.gz]",
        dir.display()
    )))
}

fn progress(done: usize, total: usize, what: &str) {
    if std::io::stderr().is_terminal() {
        let w = 30;
        let filled = done * w / total.max(1);
        eprint!(
            "\r{what} [{}{}] {done}/{total}",
            "#".repeat(filled),
            ".".repeat(w - filled)
        );
        if done == total {
            eprintln!();
        }
    }
}

fn mnist_cmd(
    model: &str,
    data: Option<&Path>,
    threads: Option<usize>,
    backend: &str,
    as_json: bool,
) -> Result<()> {
    let n_threads = cpu_threads(threads);
    let backend: BackendChoice = backend.parse()?;
    let bytes: std::sync::Arc<dyn ggweb::backend::cpu::HostBytes> = match model {
        "fc" => std::sync::Arc::new(mnist::embedded::FC),
        "cnn" => std::sync::Arc::new(mnist::embedded::CNN),
        path => std::sync::Arc::new(GgufFile::open(Path::new(path))?),
    };
    let mut m = Mnist::with_backend(bytes, backend, n_threads)?;
    if !as_json {
        eprintln!("backend: {}", m.backend_report());
    }
    let (images_raw, labels_raw) = match data {
        Some(dir) => (
            read_data_file(dir, "t10k-images-idx3-ubyte")?,
            read_data_file(dir, "t10k-labels-idx1-ubyte")?,
        ),
        None => (
            mnist::embedded::T10K_IMAGES_GZ.to_vec(),
            mnist::embedded::T10K_LABELS_GZ.to_vec(),
        ),
    };
    let (n, images) = mnist::idx::parse_images(&images_raw)?;
    let labels = mnist::idx::parse_labels(&labels_raw)?;
    if labels.len() != n {
        return Err(Error::InvalidArgument(format!(
            "{n} images but {} labels",
            labels.len()
        )));
    }
    let t0 = Instant::now();
    let correct = m.evaluate(&images, &labels, |d, t| progress(d, t, "evaluating"))?;
    let secs = t0.elapsed().as_secs_f64();
    let accuracy = correct as f64 / n as f64;
    let ips = n as f64 / secs;
    if as_json {
        println!(
            "{}",
            json!({"model": m.kind().name(), "images": n, "accuracy": accuracy, "images_per_s": ips, "threads": n_threads, "backend": m.backend_report()})
        );
    } else {
        println!(
            "{}: {n} images, accuracy {:.2} %, {:.0} images/s ({n_threads} threads, {:.3} s)",
            m.kind().name(),
            accuracy * 100.0,
            ips,
            secs
        );
    }
    Ok(())
}

/// `ggweb train mnist`'s options besides the training configuration.
struct TrainRun {
    model: String,
    data: PathBuf,
    limit: Option<usize>,
    backend: String,
    resume: Option<PathBuf>,
    out: PathBuf,
    json: bool,
}

fn train_mnist(run: &TrainRun, cfg: TrainConfig) -> Result<()> {
    let kind = match run.model.as_str() {
        "fc" => mnist::MnistKind::Fc,
        "cnn" => mnist::MnistKind::Cnn,
        other => {
            return Err(Error::InvalidArgument(format!(
                "--model is fc or cnn, not '{other}'"
            )))
        }
    };
    let backend = run.backend.parse::<BackendChoice>()?;
    let (_, mut images) =
        mnist::idx::parse_images(&read_data_file(&run.data, "train-images-idx3-ubyte")?)?;
    let mut labels =
        mnist::idx::parse_labels(&read_data_file(&run.data, "train-labels-idx1-ubyte")?)?;
    if images.len() != labels.len() * mnist::IMAGE_PIXELS {
        return Err(Error::InvalidArgument(
            "training images and labels differ in count".into(),
        ));
    }
    if let Some(n) = run.limit {
        labels.truncate(n);
        images.truncate(labels.len() * mnist::IMAGE_PIXELS);
    }
    let mut trainer = match &run.resume {
        Some(path) => {
            let t = Trainer::from_gguf_with(&std::fs::read(path)?, cfg, backend)?;
            if t.kind() != kind {
                return Err(Error::InvalidArgument(format!(
                    "--resume {} holds {}, not {}",
                    path.display(),
                    t.kind().name(),
                    kind.name()
                )));
            }
            t
        }
        None => Trainer::with_backend(kind, cfg, backend)?,
    };
    if !run.json {
        eprintln!("backend: {}", trainer.backend_report());
        for why in trainer.placements().elsewhere {
            eprintln!("  on the CPU: {why}");
        }
        eprintln!(
            "{}: {} images ({} % validation), batch {} ({} per graph), {} epochs, {} threads; \
             training graph {} nodes, {:.1} MiB",
            kind.name(),
            labels.len(),
            cfg.val_split * 100.0,
            cfg.batch_logical,
            cfg.batch_physical,
            cfg.epochs,
            cfg.n_threads,
            trainer.graph_nodes(),
            trainer.graph_bytes() as f64 / (1 << 20) as f64
        );
    }
    let json = run.json;
    let t0 = Instant::now();
    let epochs = trainer.fit(
        &images,
        &labels,
        |s| {
            if !json {
                progress(
                    s.step + 1,
                    s.steps_per_epoch,
                    &format!("epoch {} loss {:.4}", s.epoch + 1, s.loss),
                );
            }
            true
        },
        |e| {
            if json {
                println!(
                    "{}",
                    json!({"epoch": e.epoch + 1, "train_loss": e.train.loss, "train_accuracy": e.train.accuracy,
                           "val_loss": e.validation.loss, "val_accuracy": e.validation.accuracy, "seconds": e.seconds})
                );
            } else {
                println!(
                    "epoch {:>3}: train loss {:.4} accuracy {:.2} %, validation loss {:.4} accuracy {:.2} %, {:.2} s",
                    e.epoch + 1,
                    e.train.loss,
                    e.train.accuracy * 100.0,
                    e.validation.loss,
                    e.validation.accuracy * 100.0,
                    e.seconds
                );
            }
            true
        },
    )?;
    let train_secs = t0.elapsed().as_secs_f64();
    let bytes = trainer.to_gguf()?;
    std::fs::write(&run.out, &bytes)?;
    let (test_images, test_labels) = match (
        read_data_file(&run.data, "t10k-images-idx3-ubyte"),
        read_data_file(&run.data, "t10k-labels-idx1-ubyte"),
    ) {
        (Ok(i), Ok(l)) => (i, l),
        _ => (
            mnist::embedded::T10K_IMAGES_GZ.to_vec(),
            mnist::embedded::T10K_LABELS_GZ.to_vec(),
        ),
    };
    let (_, test_images) = mnist::idx::parse_images(&test_images)?;
    let test_labels = mnist::idx::parse_labels(&test_labels)?;
    let test = trainer.evaluate(&test_images, &test_labels)?;
    let per_epoch = train_secs / epochs.len().max(1) as f64;
    if json {
        println!(
            "{}",
            json!({"model": kind.name(), "epochs": epochs.len(), "seconds": train_secs, "seconds_per_epoch": per_epoch,
                   "test_loss": test.loss, "test_accuracy": test.accuracy, "threads": cfg.n_threads,
                   "backend": trainer.backend_report(),
                   "graph_bytes": trainer.graph_bytes(), "out": run.out.display().to_string()})
        );
    } else {
        println!(
            "{}: {} epochs in {:.1} s ({:.2} s/epoch); test accuracy {:.2} % (loss {:.4}); saved {}",
            kind.name(),
            epochs.len(),
            train_secs,
            per_epoch,
            test.accuracy * 100.0,
            test.loss,
            run.out.display()
        );
    }
    Ok(())
}

fn parse_list<T: std::str::FromStr>(
    s: Option<String>,
    default: &str,
    what: &str,
) -> Result<Vec<T>> {
    s.as_deref()
        .unwrap_or(default)
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| Error::InvalidArgument(format!("bad {what} '{x}'")))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn bench(
    as_json: bool,
    backend: &str,
    types: Option<String>,
    threads: Option<String>,
    ns: Option<String>,
    size: usize,
    seconds: f64,
) -> Result<()> {
    let types = parse_types(Some(
        types.unwrap_or_else(|| "f32,f16,q4_0,q8_0,q4_K".to_string()),
    ))?
    .unwrap_or_default();
    let threads: Vec<usize> = parse_list(threads, "1,2", "thread count")?;
    let threads: Vec<usize> = threads.into_iter().map(|t| cpu_threads(Some(t))).collect();
    let ns: Vec<usize> = parse_list(ns, "1,512", "n")?;
    // The GPU does not use the CPU threads.
    let threads = if backend == "webgpu" || backend == "cuda" {
        vec![1]
    } else {
        threads
    };
    let mut rows = Vec::new();
    for &n in &ns {
        for &dt in &types {
            for &th in &threads {
                let mut gbs = None;
                let r = match backend {
                    "cpu" => ggweb::bench::bench_mul_mat(dt, size, n, size, th, seconds)?.gflops,
                    "webgpu" => webgpu_bench(dt, size, n, seconds)?,
                    "cuda" => {
                        let (gflops, weight_gbs) = cuda_bench(dt, size, n, seconds)?;
                        if !as_json {
                            println!(
                                "mul_mat {:<5} m={size} n={n:<4} k={size} cuda: {weight_gbs:8.1} GB/s of weights",
                                dt.name()
                            );
                        }
                        gbs = Some(weight_gbs);
                        gflops
                    }
                    other => {
                        return Err(Error::InvalidArgument(format!(
                            "bench backend '{other}' (cpu, webgpu or cuda)"
                        )))
                    }
                };
                if !as_json {
                    println!(
                        "mul_mat {:<5} m={size} n={n:<4} k={size} threads={th}: {:8.1} GFLOP/s",
                        dt.name(),
                        r
                    );
                }
                rows.push(json!({"op": "mul_mat", "type": dt.name(), "m": size, "n": n, "k": size, "threads": th, "backend": backend, "gflops": r, "weight_gb_per_s": gbs}));
            }
        }
    }
    if as_json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}

/// Which LLM shapes `bench --llm` runs, and as which types (comma-separated lists).
struct LlmFilter {
    models: Option<String>,
    types: Option<String>,
    as_types: Option<String>,
    /// Repack the weights where a model's load would.
    repack: bool,
}

/// A comma-separated list of weight type names (`None` stays `None`).
fn parse_types(t: Option<String>) -> Result<Option<Vec<DType>>> {
    t.map(|t| {
        t.split(',')
            .map(|t| {
                DType::from_name(t.trim())
                    .ok_or_else(|| Error::InvalidArgument(format!("unknown type '{t}'")))
            })
            .collect::<Result<_>>()
    })
    .transpose()
}

/// `ggweb bench --attention`: each model's fused attention over all its layers' KV caches.
fn bench_attention(
    as_json: bool,
    models: Option<String>,
    contexts: Option<String>,
    threads: Option<String>,
    ns: Option<String>,
    seconds: f64,
) -> Result<()> {
    let models: Option<Vec<String>> =
        models.map(|m| m.split(',').map(|s| s.trim().to_string()).collect());
    let threads: Vec<usize> = parse_list(threads, "1,2", "thread count")?;
    let threads: Vec<usize> = threads.into_iter().map(|t| cpu_threads(Some(t))).collect();
    let ns: Vec<usize> = parse_list(ns, "1", "n")?;
    let contexts: Vec<usize> = parse_list(contexts, "256,1024,4096", "context")?;
    let mut rows = Vec::new();
    for s in &ggweb::bench::LLM_ATTN {
        if models
            .as_ref()
            .is_some_and(|m| !m.iter().any(|x| x == s.model))
        {
            continue;
        }
        for &n_kv in &contexts {
            for &n in &ns {
                for &th in &threads {
                    let r = ggweb::bench::bench_attention(s, n_kv, n, th, seconds)?;
                    if !as_json {
                        println!(
                            "{:<8} heads {:>2}/{} dk {:<3} layers {:<2} n_kv={n_kv:<5} n={n:<4} threads={th}: {:9.1} µs/forward {:6.2} GB/s KV (best {:9.1} µs)",
                            s.model,
                            s.n_head,
                            s.n_head_kv,
                            s.head_dim,
                            s.n_layer,
                            r.seconds * 1e6,
                            r.kv_gbps,
                            r.best_seconds * 1e6
                        );
                    }
                    rows.push(json!({
                        "op": "flash_attn_ext", "model": s.model, "n_kv": n_kv, "n": n,
                        "threads": th, "seconds": r.seconds, "best_seconds": r.best_seconds,
                        "kv_gbps": r.kv_gbps,
                    }));
                }
            }
        }
    }
    if as_json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}

/// `ggweb bench --llm`: the machine's read bandwidth, then every LLM weight shape streamed
/// from DRAM at each n and thread count, with the fraction of that bandwidth it reaches.
fn bench_llm(
    as_json: bool,
    filter: LlmFilter,
    threads: Option<String>,
    ns: Option<String>,
    stream_mib: usize,
    seconds: f64,
) -> Result<()> {
    let models: Option<Vec<String>> = filter
        .models
        .map(|m| m.split(',').map(|s| s.trim().to_string()).collect());
    let types = parse_types(filter.types)?;
    let as_types = parse_types(filter.as_types)?;
    let threads: Vec<usize> = parse_list(threads, "1,2", "thread count")?;
    let threads: Vec<usize> = threads.into_iter().map(|t| cpu_threads(Some(t))).collect();
    let ns: Vec<usize> = parse_list(ns, "1,120", "n")?;
    let stream = stream_mib << 20;
    let mut rows = Vec::new();
    let mut roof = Vec::new();
    for &th in &threads {
        // At least 256 MiB: far over any last-level cache.
        let gbps = ggweb::bench::read_bandwidth(stream.max(256 << 20), th, seconds)?;
        if !as_json {
            println!("read bandwidth threads={th}: {gbps:.2} GB/s");
        }
        rows.push(json!({"op": "read", "threads": th, "gbps": gbps}));
        roof.push(gbps);
    }
    let mut seen = std::collections::HashSet::new();
    for &n in &ns {
        for s in ggweb::bench::LLM_SHAPES {
            if models
                .as_ref()
                .is_some_and(|m| !m.iter().any(|x| x == s.model))
            {
                continue;
            }
            if types.as_ref().is_some_and(|t| !t.contains(&s.dtype)) {
                continue;
            }
            // A shape listed once per type of a Q4_K_M mix runs once as the other types.
            if as_types.is_some() && !seen.insert((s.model, s.k, s.m, n)) {
                continue;
            }
            let run_as: Vec<DType> = match &as_types {
                Some(t) => t
                    .iter()
                    .copied()
                    .filter(|t| s.k.is_multiple_of(t.block_size()))
                    .collect(),
                None => vec![s.dtype],
            };
            for (dtype, (&th, &rb)) in run_as
                .iter()
                .flat_map(|&d| threads.iter().zip(&roof).map(move |p| (d, p)))
            {
                let r = ggweb::bench::bench_mul_mat_streamed(
                    dtype,
                    s.m,
                    n,
                    s.k,
                    th,
                    seconds,
                    stream,
                    filter.repack,
                )?;
                if !as_json {
                    println!(
                        "{:<8} {:<19} {:<5} k={:<5} m={:<6} n={n:<4} threads={th}: {:8.1} GFLOP/s {:6.2} GB/s ({:3.0} % of read bw; best {:6.2} GB/s){}",
                        s.model,
                        s.tensor,
                        dtype.name(),
                        s.k,
                        s.m,
                        r.gflops,
                        r.weight_gbps,
                        100.0 * r.weight_gbps / rb,
                        r.best_weight_gbps,
                        if r.repacked { " repacked" } else { "" }
                    );
                }
                rows.push(json!({"op": "mul_mat", "model": s.model, "tensor": s.tensor,
                    "type": dtype.name(), "m": s.m, "n": n, "k": s.k, "threads": th,
                    "backend": "cpu", "gflops": r.gflops, "gbps": r.weight_gbps, "best_gbps": r.best_weight_gbps,
                    "copies": r.copies, "repacked": r.repacked, "us": r.seconds_per_iter * 1e6}));
            }
        }
    }
    if as_json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}

/// `--threads N` capped to the machine's parallelism (as the CPU backend does; with a note), or
/// that parallelism by default.
fn cpu_threads(threads: Option<usize>) -> usize {
    use ggweb::backend::cpu::threadpool::capped_n_threads;
    let n = threads.map_or_else(|| capped_n_threads(usize::MAX), capped_n_threads);
    if threads.is_some_and(|t| t > n) {
        eprintln!("note: --threads capped to this machine's parallelism, {n}");
    }
    n
}

/// How to load an LLM: threads, context size and backends.
struct LlmRun {
    threads: Option<usize>,
    ctx_size: usize,
    backend: BackendChoice,
    /// Fused attention on or off; `None`: the model's default.
    flash_attn: Option<bool>,
    /// On the CPU, map the file private (copy-on-write), the multiplied weights read into
    /// huge-page memory where Linux has THP, and repack the weights this CPU's GEMV reads so
    /// (`Llm::open_repacked`); else keep the shared mapping.
    repack: bool,
}

impl LlmRun {
    fn open(&self, model: &Path) -> Result<Llm> {
        let threads = cpu_threads(self.threads);
        let mut llm = if self.repack && self.backend == BackendChoice::Cpu {
            Llm::open_repacked(model, self.ctx_size, threads)?
        } else {
            Llm::open_with(model, self.ctx_size, self.backend, threads)?
        };
        if let Some(on) = self.flash_attn {
            llm.model.set_flash_attn(on)?;
        }
        Ok(llm)
    }
}

fn generate(
    model: &Path,
    prompt: &str,
    n_predict: usize,
    opts: SamplerOptions,
    run: LlmRun,
    chat: bool,
    as_json: bool,
) -> Result<()> {
    let mut llm = run.open(model)?;
    let backend = llm.model.backend_report().to_string();
    eprintln!("backend: {backend}");
    let text = if chat {
        llm.apply_chat_template(&[ChatMessage::new("user", prompt)], true)
    } else {
        prompt.to_string()
    };
    let ids = llm.tokenize(&text, true, true);
    let out = stream(&mut llm, &ids, n_predict, opts, !as_json)?;
    let prompt_tps = out.n_prompt_evaluated as f64 / out.prompt_s.max(1e-9);
    let gen_tps = out.ids.len() as f64 / out.gen_s.max(1e-9);
    if as_json {
        println!(
            "{}",
            json!({"prompt_ids": ids, "ids": out.ids, "text": out.text,
                   "prompt_tok_per_s": prompt_tps, "gen_tok_per_s": gen_tps,
                   "stopped_at_eog": out.reason == StopReason::EndOfGeneration, "backend": backend})
        );
    } else {
        println!();
        eprintln!(
            "prompt: {} tokens, {prompt_tps:.1} tok/s; generation: {} tokens, {gen_tps:.1} tok/s",
            ids.len(),
            out.ids.len()
        );
    }
    Ok(())
}

/// A finished generation and the seconds of its two phases.
struct Streamed {
    ids: Vec<u32>,
    text: String,
    reason: StopReason,
    /// Prompt tokens evaluated (the rest came from the KV cache).
    n_prompt_evaluated: usize,
    prompt_s: f64,
    gen_s: f64,
}

/// Run one generation to its end, printing each token's text as it comes when `print`.
fn stream(
    llm: &mut Llm,
    prompt_ids: &[u32],
    n_predict: usize,
    opts: SamplerOptions,
    print: bool,
) -> Result<Streamed> {
    let mut gen = llm.begin(prompt_ids, n_predict, opts)?;
    let t0 = Instant::now();
    let mut t_prompt = t0;
    let mut n_prompt_evaluated = 0;
    let mut text = String::new();
    let reason = loop {
        match gen.step(llm)? {
            Step::Prompt { n_evaluated, .. } => {
                n_prompt_evaluated = n_evaluated;
                t_prompt = Instant::now();
            }
            Step::Token { text: piece, .. } => {
                if print {
                    print!("{piece}");
                    let _ = std::io::stdout().flush();
                }
                text.push_str(&piece);
            }
            Step::Done { reason, text: rest } => {
                text.push_str(&rest);
                break reason;
            }
        }
    };
    Ok(Streamed {
        ids: gen.ids().to_vec(),
        text,
        reason,
        n_prompt_evaluated,
        prompt_s: (t_prompt - t0).as_secs_f64(),
        gen_s: t_prompt.elapsed().as_secs_f64(),
    })
}

fn chat(
    model: &Path,
    temp: f32,
    n_predict: usize,
    system: Option<String>,
    run: LlmRun,
) -> Result<()> {
    let mut llm = run.open(model)?;
    eprintln!("backend: {}", llm.model.backend_report());
    let mut messages: Vec<ChatMessage> = system
        .iter()
        .map(|s| ChatMessage::new("system", s))
        .collect();
    let stdin = std::io::stdin();
    eprintln!(
        "chatting with {} ({}); empty line to quit, /reset to start over",
        model.display(),
        llm.architecture
    );
    eprintln!(
        "chat format: {}{}",
        llm.chat.name(),
        llm.chat
            .note()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.read_line(&mut line)? == 0 || line.trim().is_empty() {
            return Ok(());
        }
        if line.trim() == "/reset" {
            messages.retain(|m| m.role == "system");
            llm.reset();
            continue;
        }
        messages.push(ChatMessage::new("user", line.trim_end()));
        let prompt = llm.apply_chat_template(&messages, true);
        let ids = llm.tokenize(&prompt, true, true);
        let opts = SamplerOptions {
            temperature: temp,
            seed: messages.len() as u64,
            ..Default::default()
        };
        let out = stream(&mut llm, &ids, n_predict, opts, true)?;
        println!();
        eprintln!(
            "[{} tokens, {:.1} tok/s]",
            out.ids.len(),
            out.ids.len() as f64 / (out.prompt_s + out.gen_s)
        );
        messages.push(ChatMessage::new("assistant", &out.text));
    }
}

#[cfg(feature = "webgpu")]
fn webgpu_bench(dt: DType, size: usize, n: usize, seconds: f64) -> Result<f64> {
    ggweb::backend::webgpu::bench_mul_mat_webgpu(dt, size, n, size, seconds)
}

#[cfg(feature = "cuda")]
fn cuda_bench(dt: DType, size: usize, n: usize, seconds: f64) -> Result<(f64, f64)> {
    ggweb::backend::cuda::bench_mul_mat_cuda(dt, size, n, size, seconds)
}

#[cfg(not(feature = "cuda"))]
fn cuda_bench(_: DType, _: usize, _: usize, _: f64) -> Result<(f64, f64)> {
    Err(Error::Backend("built without the cuda feature".into()))
}

#[cfg(not(feature = "webgpu"))]
fn webgpu_bench(_: DType, _: usize, _: usize, _: f64) -> Result<f64> {
    Err(Error::Backend("built without the webgpu feature".into()))
}

fn embed(
    model: &Path,
    threads: Option<usize>,
    backend: &str,
    pooling: Option<&str>,
    json: bool,
    texts: &[String],
) -> Result<()> {
    let n_threads =
        threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut e = ggweb::models::bert::Embedder::open_with(model, backend.parse()?, n_threads)?;
    if let Some(p) = pooling {
        e.set_pooling(p.parse()?);
    }
    eprintln!(
        "backend: {}; pooling {}",
        e.backend_report(),
        e.hp.pooling.name()
    );
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let out = e.embed(&refs)?;
    if json {
        println!("{}", json!({"embeddings": out, "n_embd": e.n_embd()}));
    } else {
        for v in &out {
            let line: Vec<String> = v.iter().map(|x| format!("{x:.6}")).collect();
            println!("{}", line.join(" "));
        }
    }
    Ok(())
}
