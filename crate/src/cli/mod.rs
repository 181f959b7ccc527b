//! Subcommands of the `ggweb` binary.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Parser, Subcommand};
use ggweb::gguf::{Array, GgufFile, Value};
use ggweb::models::mnist::{self, Mnist, MnistKind};
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
        #[arg(long)]
        json: bool,
    },
    /// mul_mat throughput (GFLOP/s) per weight type.
    Bench {
        #[arg(long)]
        json: bool,
        /// Weight types (comma-separated); default f32,f16,q4_0,q8_0,q4_K.
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
            json,
        } => mnist_cmd(&model, data.as_deref(), threads, json),
        Cmd::Bench {
            json,
            types,
            threads,
            n,
            size,
            seconds,
        } => bench(json, types, threads, n, size, seconds),
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
    as_json: bool,
) -> Result<()> {
    let n_threads = threads.unwrap_or_else(ggweb::backend::cpu::threadpool::default_n_threads);
    let mut m = match model {
        "fc" => Mnist::embedded(MnistKind::Fc, n_threads)?,
        "cnn" => Mnist::embedded(MnistKind::Cnn, n_threads)?,
        path => Mnist::open(Path::new(path), n_threads)?,
    };
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
            json!({"model": m.kind().name(), "images": n, "accuracy": accuracy, "images_per_s": ips, "threads": n_threads})
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

fn bench(
    as_json: bool,
    types: Option<String>,
    threads: Option<String>,
    ns: Option<String>,
    size: usize,
    seconds: f64,
) -> Result<()> {
    let types: Vec<DType> = types
        .as_deref()
        .unwrap_or("f32,f16,q4_0,q8_0,q4_K")
        .split(',')
        .map(|t| {
            DType::from_name(t.trim())
                .ok_or_else(|| Error::InvalidArgument(format!("unknown type '{t}'")))
        })
        .collect::<Result<_>>()?;
    let threads: Vec<usize> = parse_list(threads, "1,2", "thread count")?;
    let ns: Vec<usize> = parse_list(ns, "1,512", "n")?;
    let mut rows = Vec::new();
    for &n in &ns {
        for &dt in &types {
            for &th in &threads {
                let r = bench_stub(dt, size, n, size, th, seconds)?;
                if !as_json {
                    println!(
                        "mul_mat {:<5} m={size} n={n:<4} k={size} threads={th}: {:8.1} GFLOP/s",
                        dt.name(),
                        r.gflops
                    );
                }
                rows.push(json!({"op": "mul_mat", "type": dt.name(), "m": size, "n": n, "k": size, "threads": th, "gflops": r.gflops}));
            }
        }
    }
    if as_json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}
struct BenchStub {
    gflops: f64,
}
fn bench_stub(_: DType, _: usize, _: usize, _: usize, _: usize, _: f64) -> Result<BenchStub> {
    Err(Error::UnsupportedOp("bench".into()))
}
