//! Loading at scale: weights streamed from a GGUF's bytes straight into their buffers
//! (`WeightsStream`, what the browser's WebGPU path uses so the file never sits in the wasm
//! heap) give the in-place model's logits bit for bit, on the CPU buffer type and on WebGPU when
//! an adapter exists, for a whole file and a split one; truncated and out-of-order input is an
//! error; a header claiming more than the memory budget is refused before any tensor data is
//! read; and a sparse GGUF larger than 4 GiB opens by mmap (header and tensors read).

#[path = "support/models.rs"]
mod models;

use std::path::PathBuf;
use std::sync::Arc;

use ggweb::backend::BufferType;
use ggweb::gguf::stream::FileStream;
use ggweb::gguf::{Gguf, GgufFile, GgufWriter, Value};
use ggweb::models::llama::LlamaModel;
use ggweb::models::runner::{BackendChoice, Runner};
use ggweb::models::weights::WeightsStream;
use ggweb::{DType, Error};

fn phi3() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/families/phi3-random.gguf")
}

fn smollm2() -> PathBuf {
    models::model("GGWEB_SMOLLM2", "SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Stream the files of one model (the parts of a split model, in order) through the header
/// reader into a `WeightsStream` over `buft`, in chunks of varying odd sizes, as the browser
/// does; returns the weights and the first header.
fn stream(
    files: &[&[u8]],
    buft: Arc<dyn BufferType>,
) -> ggweb::Result<(ggweb::Context, ggweb::models::weights::Weights, Gguf)> {
    let mut w = WeightsStream::new(buft);
    let mut first = None;
    for (i, bytes) in files.iter().enumerate() {
        let mut s = FileStream::new(false, Some(bytes.len() as u64))?;
        let (mut at, mut n, mut begun) = (0usize, 7usize, false);
        while at < bytes.len() {
            let end = (at + n).min(bytes.len());
            let parsed = s.push(&bytes[at..end])?;
            if parsed && !begun {
                let g = s
                    .header()
                    .cloned()
                    .ok_or_else(|| Error::Gguf("header".into()))?;
                ggweb::models::split::check_part(first.as_ref().unwrap_or(&g), &g, i)?;
                w.begin_part(&g)?;
                let (off, early) = s.take_early_data();
                w.push(off, &early)?;
                first.get_or_insert(g);
                begun = true;
            } else if parsed {
                w.push(at as u64, &bytes[at..end])?;
            }
            at = end;
            n = n * 5 % 300_007 + 3;
        }
        s.finish()?;
        w.end_part()?;
    }
    let (ctx, weights) = w.finish()?;
    Ok((
        ctx,
        weights,
        first.ok_or_else(|| Error::Gguf("no files".into()))?,
    ))
}

const PROMPT: [u32; 6] = [5, 17, 300, 42, 99, 7];

fn streamed_logits(files: &[&[u8]], runner: Runner) -> (Vec<f32>, LlamaModel) {
    let buft = runner.weights_buffer_type().clone();
    let (ctx, w, g) = stream(files, buft).unwrap();
    let mut m = LlamaModel::from_weights(ctx, w, &g, 16, runner).unwrap();
    (m.eval(&PROMPT, true).unwrap(), m)
}

#[test]
fn streamed_weights_give_the_in_place_logits_on_the_cpu() {
    for path in [phi3(), smollm2()] {
        let file = std::fs::read(&path).unwrap();
        let whole = LlamaModel::open(&path, 16, 2)
            .unwrap()
            .eval(&PROMPT, true)
            .unwrap();
        let runner = Runner::new(BackendChoice::Cpu, 2).unwrap();
        let (ours, m) = streamed_logits(&[&file], runner);
        assert!(ours == whole, "{}: streamed logits differ", path.display());
        // Copied into host buffers of their own: no file bytes are held.
        let mem = m.memory();
        assert_eq!(mem.weights_device, 0);
        let g = Gguf::parse(&file).unwrap();
        let tensors: u64 = g.tensors.iter().map(|t| t.size).sum();
        assert!(
            mem.weights_host >= tensors && mem.weights_host < tensors + (1 << 20),
            "{}: {mem:?} for {tensors} bytes of tensors",
            path.display()
        );
        let opened = LlamaModel::open(&path, 16, 2).unwrap().memory();
        assert_eq!(opened.weights_host, file.len() as u64, "in place: the file");
        assert_eq!(opened.kv_host, mem.kv_host);
    }
}

/// The phi3 fixture in `n` parts, `gguf-split`'s layout (as llm_families.rs writes them).
fn split_bytes(n: usize, tensor_count: i32) -> Vec<Vec<u8>> {
    let file = GgufFile::open(phi3()).unwrap();
    let g = file.header();
    let per = g.tensors.len().div_ceil(n);
    g.tensors
        .chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            let mut w = GgufWriter::new();
            if i == 0 {
                for (k, v) in &g.metadata {
                    w.set(k.clone(), v.clone());
                }
            }
            w.set("split.no", Value::U16(i as u16));
            w.set("split.count", Value::U16(n as u16));
            w.set("split.tensors.count", Value::I32(tensor_count));
            for t in chunk {
                w.add_tensor(
                    &t.name,
                    t.dtype,
                    &t.ne[..t.n_dims as usize],
                    file.tensor_bytes(t).unwrap(),
                )
                .unwrap();
            }
            w.to_bytes().unwrap()
        })
        .collect()
}

#[test]
fn a_split_model_streams_part_after_part() {
    let whole = LlamaModel::open(&phi3(), 16, 2)
        .unwrap()
        .eval(&PROMPT, true)
        .unwrap();
    let n_tensors = Gguf::parse(&std::fs::read(phi3()).unwrap())
        .unwrap()
        .tensors
        .len() as i32;
    let parts = split_bytes(3, n_tensors);
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    let (ours, _) = streamed_logits(&refs, Runner::new(BackendChoice::Cpu, 2).unwrap());
    assert!(ours == whole, "split streamed logits differ");
    let cpu = ggweb::backend::cpu::cpu_buffer_type;
    // Out of order: part 3 second.
    let e = stream(&[refs[0], refs[2], refs[1]], cpu()).err().unwrap();
    assert!(e.to_string().contains("do not say part 2 of 3"), "{e}");
    // Part 2 first.
    let e = stream(&[refs[1]], cpu()).err().unwrap();
    assert!(e.to_string().contains("give part 1 first"), "{e}");
    // A part missing, and a wrong tensor count: the whole-model check.
    let headers: Vec<Gguf> = refs.iter().map(|p| Gguf::parse(p).unwrap()).collect();
    let h: Vec<&Gguf> = headers.iter().collect();
    ggweb::models::split::check_parts(&h).unwrap();
    let e = ggweb::models::split::check_parts(&h[..2]).unwrap_err();
    assert!(e.to_string().contains("split in 3 parts, 2 given"), "{e}");
    let bad = split_bytes(3, n_tensors + 1);
    let headers: Vec<Gguf> = bad.iter().map(|p| Gguf::parse(p).unwrap()).collect();
    let e = ggweb::models::split::check_parts(&headers.iter().collect::<Vec<_>>()).unwrap_err();
    assert!(e.to_string().contains("split.tensors.count"), "{e}");
}

#[test]
fn truncated_or_out_of_order_bytes_are_errors() {
    let file = std::fs::read(phi3()).unwrap();
    let cpu = ggweb::backend::cpu::cpu_buffer_type;
    // The last tensor's bytes cut short: a truncated-file error naming the tensor (the header
    // reader does not know the length here).
    let g = Gguf::parse(&file).unwrap();
    let last = g.tensors.iter().max_by_key(|t| t.offset).unwrap();
    let end = (g.data_offset + last.offset + last.size) as usize;
    let mut w = WeightsStream::new(cpu());
    w.begin_part(&g).unwrap();
    w.push(0, &file[..end - 3]).unwrap();
    let e = w.end_part().unwrap_err();
    assert!(
        e.to_string().contains("truncated") && e.to_string().contains(&last.name),
        "{e}"
    );
    assert_eq!(w.pending(), 3);
    w.push((end - 3) as u64, &file[end - 3..]).unwrap();
    w.end_part().unwrap();
    // A gap: bytes after the ones the next tensor waits for.
    let mut w = WeightsStream::new(cpu());
    w.begin_part(&g).unwrap();
    let start = g.data_offset as usize;
    w.push(0, &file[..start + 10]).unwrap();
    let e = w.push(start as u64 + 20, &file[start + 20..]).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn the_header_decides_out_of_memory_before_the_tensor_data() {
    // A header whose tensor claims 5 GB, then its data: with a 4 GB budget and no length, the
    // push that completes the header fails; no byte of tensor data is taken.
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.add_tensor_owned("big", DType::F32, &[1 << 10], vec![0; 4096])
        .unwrap();
    let mut file = w.to_bytes().unwrap();
    let pos = file
        .windows(8)
        .position(|x| x == (1u64 << 10).to_le_bytes())
        .unwrap();
    file[pos..pos + 8].copy_from_slice(&1_250_000_000u64.to_le_bytes());
    let g = Gguf::parse_header(&file).unwrap();
    let ggweb::gguf::HeaderParse::Complete(g) = g else {
        panic!("header incomplete")
    };
    let header = &file[..g.data_offset as usize];
    let mut s = FileStream::with_budget(true, None, 4 << 30).unwrap();
    let e = s.push(header).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory(_)), "{e}");
    assert!(s.allocated() <= header.len().max(64 << 10));
    // The length known up front: refused before any byte.
    let e = FileStream::with_budget(true, Some(5_000_000_000), 4 << 30)
        .err()
        .unwrap();
    assert!(matches!(e, Error::OutOfMemory(_)), "{e}");
    // Streamed to a device instead, the header reader keeps nothing: fine.
    let mut s = FileStream::with_budget(false, Some(5_000_004_096), 4 << 30).unwrap();
    assert!(s.push(header).unwrap());
}

/// A GGUF v3 header by hand (the writer holds tensor data in memory): `tensors` are (name,
/// ne0, offset) f32 vectors.
fn header(tensors: &[(&str, u64, u64)]) -> Vec<u8> {
    let mut h = Vec::new();
    let s = |h: &mut Vec<u8>, x: &str| {
        h.extend_from_slice(&(x.len() as u64).to_le_bytes());
        h.extend_from_slice(x.as_bytes());
    };
    h.extend_from_slice(b"GGUF");
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    h.extend_from_slice(&1u64.to_le_bytes());
    s(&mut h, "general.architecture");
    h.extend_from_slice(&8u32.to_le_bytes()); // string
    s(&mut h, "sparse");
    for &(name, ne0, offset) in tensors {
        s(&mut h, name);
        h.extend_from_slice(&1u32.to_le_bytes());
        h.extend_from_slice(&ne0.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes()); // f32
        h.extend_from_slice(&offset.to_le_bytes());
    }
    h.resize(h.len().div_ceil(32) * 32, 0);
    h
}

#[test]
fn a_sparse_gguf_over_4_gib_opens_by_mmap() {
    use std::io::{Seek, SeekFrom, Write};
    // 4.5 GiB apparent size, a few KiB on disk: a small tensor, a 4.5 GiB one never written
    // (a hole), and a small one past the 4 GiB mark.
    let huge: u64 = 1_207_959_552; // f32 elements: 4.5 GiB
    let tail_off = huge * 4;
    let h = header(&[
        ("head", 256, 0),
        ("huge", huge, 1024),
        ("tail", 256, 1024 + tail_off),
    ]);
    let path = std::env::temp_dir().join(format!("ggweb-sparse-{}.gguf", std::process::id()));
    let _remove = RemoveOnDrop(path.clone());
    let head: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    let tail: Vec<u8> = (0..1024u32).map(|i| (i % 241) as u8).collect();
    {
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&h).unwrap();
        f.write_all(&head).unwrap();
        f.seek(SeekFrom::Start(h.len() as u64 + 1024 + tail_off))
            .unwrap();
        f.write_all(&tail).unwrap();
        f.set_len(h.len() as u64 + 2048 + tail_off).unwrap();
    }
    {
        let f = GgufFile::open(&path).unwrap();
        assert!(f.bytes().len() as u64 > 4 << 30);
        let g = f.header();
        assert_eq!(g.tensors.len(), 3);
        assert_eq!(g.tensor("huge").unwrap().size, huge * 4);
        let t = g.tensor("tail").unwrap();
        assert!(g.data_offset + t.offset > 4 << 30);
        assert_eq!(
            f.tensor_bytes(g.tensor("head").unwrap()).unwrap(),
            &head[..]
        );
        assert_eq!(f.tensor_bytes(t).unwrap(), &tail[..]);
        // A page inside the hole reads as zeros.
        let hole = f.tensor_bytes(g.tensor("huge").unwrap()).unwrap();
        assert!(hole[3 << 30..(3 << 30) + 4096].iter().all(|&b| b == 0));
    }
}

/// Removes the file when the test ends, also when it fails.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// On WebGPU (when an adapter exists): the streamed weights are in GPU buffers only, and the
/// logits equal those of the model uploaded from the file bytes (the same kernels).
#[test]
fn streamed_weights_on_webgpu_equal_the_uploaded_ones() {
    use ggweb::backend::webgpu::{WebGpuDevice, WebGpuOptions};
    let dev = match WebGpuDevice::new_blocking(&WebGpuOptions::from_env()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no WebGPU adapter: skipping ({e})");
            return;
        }
    };
    let path = phi3();
    let file = Arc::new(GgufFile::open(&path).unwrap());
    let runner = Runner::with_webgpu_device(dev.clone(), 2).unwrap();
    let mut old = LlamaModel::with_runner(file.clone(), file.header(), 16, runner).unwrap();
    let reference = old.eval(&PROMPT, true).unwrap();
    let runner = Runner::with_webgpu_device(dev, 2).unwrap();
    let (ours, m) = streamed_logits(&[file.bytes()], runner);
    assert!(
        ours == reference,
        "streamed WebGPU logits differ from the uploaded ones"
    );
    let mem = m.memory();
    assert_eq!(mem.weights_host, 0, "{mem:?}");
    assert!(mem.weights_device >= file.header().tensors.iter().map(|t| t.size).sum::<u64>());
    assert_eq!(mem.kv_host, 0, "{mem:?}");
    // The old path keeps the file in host memory as well.
    assert_eq!(old.memory().weights_host, file.bytes().len() as u64);
}

/// A device buffer type with small buffers (host memory underneath, so the test reads it back).
struct SmallDevice(Arc<dyn BufferType>);

impl BufferType for SmallDevice {
    fn name(&self) -> &str {
        "small-device"
    }
    fn alignment(&self) -> usize {
        256
    }
    fn max_size(&self) -> usize {
        64 << 10
    }
    fn alloc_buffer(
        self: Arc<Self>,
        size: usize,
    ) -> ggweb::Result<Arc<dyn ggweb::backend::Buffer>> {
        self.0.clone().alloc_buffer(size)
    }
    fn is_host(&self) -> bool {
        false
    }
}

#[test]
fn weights_larger_than_a_device_buffer_stay_on_the_host_and_every_byte_lands() {
    let file = std::fs::read(phi3()).unwrap();
    let g = Gguf::parse(&file).unwrap();
    let buft: Arc<dyn BufferType> = Arc::new(SmallDevice(ggweb::backend::cpu::cpu_buffer_type()));
    let (ctx, w, _) = stream(&[&file], buft.clone()).unwrap();
    let big: Vec<&str> = g
        .tensors
        .iter()
        .filter(|t| t.size > 64 << 10)
        .map(|t| t.name.as_str())
        .collect();
    assert!(!big.is_empty(), "the fixture has tensors over 64 KiB");
    assert_eq!(w.on_host.len(), big.len(), "{:?}", w.on_host);
    for (note, name) in w.on_host.iter().zip(&big) {
        assert!(
            note.starts_with(name) && note.contains("largest buffer"),
            "{note}"
        );
    }
    // The device buffers first (each within the device's largest buffer), the host one last.
    let (host, device) = w.buffers.split_last().unwrap();
    assert!(device.len() > 1 && device.iter().all(|b| b.size() <= 64 << 10));
    let big_bytes: u64 = g
        .tensors
        .iter()
        .filter(|t| t.size > 64 << 10)
        .map(|t| t.size)
        .sum();
    assert!(host.size() as u64 >= big_bytes);
    for t in &g.tensors {
        let id = w.get(&t.name).unwrap();
        let buffer = &ctx.tensor(id).data.as_ref().unwrap().buffer;
        assert_eq!(Arc::ptr_eq(buffer, host), t.size > 64 << 10, "{}", t.name);
        let start = (g.data_offset + t.offset) as usize;
        assert!(
            ctx.get_bytes(id).unwrap() == file[start..start + t.size as usize],
            "{}: bytes differ",
            t.name
        );
    }
}
