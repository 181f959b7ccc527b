//! Write a GGUF as a split model in llama.cpp's `gguf-split` layout (for the split tests):
//! `n` parts `dir/PREFIX-0000i-of-0000n.gguf`, each with a run of the tensors and `split.no`
//! (u16), `split.count` (u16), `split.tensors.count` (i32, `tensor_count`: pass the real count
//! or a wrong one); the first part also holds all the metadata.

use std::path::{Path, PathBuf};

use ggweb::gguf::{GgufFile, GgufWriter, Value};

/// The path of part `i` (0-based) of `n`.
pub fn part(dir: &Path, prefix: &str, i: usize, n: usize) -> PathBuf {
    dir.join(format!("{prefix}-{:05}-of-{n:05}.gguf", i + 1))
}

/// Write the parts; returns their paths in order.
pub fn write_split(
    file: &GgufFile,
    dir: &Path,
    prefix: &str,
    n: usize,
    tensor_count: i32,
) -> Vec<PathBuf> {
    let g = file.header();
    let per = g.tensors.len().div_ceil(n);
    let mut paths = Vec::new();
    for (i, chunk) in g.tensors.chunks(per).enumerate() {
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
            let bytes = file.tensor_bytes(t).expect("tensor bytes");
            w.add_tensor(&t.name, t.dtype, &t.ne[..t.n_dims as usize], bytes)
                .expect("tensor");
        }
        let p = part(dir, prefix, i, n);
        std::fs::write(&p, w.to_bytes().expect("write")).expect("write");
        paths.push(p);
    }
    paths
}
