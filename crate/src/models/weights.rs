//! Placing a GGUF file's tensors in a [`Context`], backed by the file's bytes in place (mmap or
//! an owned buffer): ggml's "weights context" without copying the weights.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::cpu::{CpuBuffer, HostBytes};
use crate::backend::{Buffer, BufferUsage};
use crate::gguf::Gguf;
use crate::tensor::TensorData;
use crate::{Context, Error, Result, TensorId};

/// The tensors of a GGUF file, described in a context and backed by the file's bytes.
pub struct Weights {
    pub by_name: HashMap<String, TensorId>,
    pub buffer: Arc<dyn Buffer>,
}

impl Weights {
    /// Describe every tensor of `gguf` in `ctx` with data inside `bytes` (the whole file).
    /// The bytes are used in place when the data section is 32-byte aligned in memory, else copied
    /// once into an aligned buffer (kernels read f32/f16 with aligned loads).
    pub fn load(ctx: &mut Context, gguf: &Gguf, bytes: Arc<dyn HostBytes>) -> Result<Weights> {
        Self::load_into(ctx, gguf, bytes, None)
    }

    /// As [`Weights::load`], but into a buffer of `buft` when that is device memory (the tensors
    /// are uploaded once); host buffer types use the bytes in place.
    pub fn load_into(
        ctx: &mut Context,
        gguf: &Gguf,
        bytes: Arc<dyn HostBytes>,
        buft: Option<&Arc<dyn crate::backend::BufferType>>,
    ) -> Result<Weights> {
        let file = bytes.bytes();
        let start = usize::try_from(gguf.data_offset)
            .map_err(|_| Error::Gguf("data offset does not fit in memory".into()))?;
        if start > file.len() {
            return Err(Error::Gguf(format!(
                "data section starts at {start}, past the end of the file ({} bytes)",
                file.len()
            )));
        }
        let len = file.len() - start;
        let aligned = (file.as_ptr() as usize + start).is_multiple_of(32);
        let buffer: Arc<dyn Buffer> = if aligned {
            Arc::new(CpuBuffer::from_host_bytes(bytes.clone(), start, len)?)
        } else {
            let b = crate::backend::cpu::cpu_buffer_type().alloc_buffer(len)?;
            b.set(0, &file[start..])?;
            b.set_usage(BufferUsage::Weights);
            b
        };
        let mut by_name = HashMap::with_capacity(gguf.tensors.len());
        for info in &gguf.tensors {
            let ne: Vec<usize> = info
                .ne
                .iter()
                .map(|&n| {
                    usize::try_from(n)
                        .map_err(|_| Error::Gguf(format!("tensor '{}' is too large", info.name)))
                })
                .collect::<Result<_>>()?;
            let id = ctx.new_tensor(info.dtype, &ne)?;
            ctx.set_name(id, &info.name)?;
            let offset = usize::try_from(info.offset)
                .map_err(|_| Error::Gguf(format!("tensor '{}' offset too large", info.name)))?;
            let nbytes = ctx.tensor(id).nbytes();
            if offset.checked_add(nbytes).is_none_or(|end| end > len) {
                return Err(Error::Gguf(format!(
                    "tensor '{}' ({nbytes} bytes at {offset}) lies outside the data section ({len} bytes)",
                    info.name
                )));
            }
            ctx.set_data(
                id,
                TensorData {
                    buffer: buffer.clone(),
                    offset,
                },
            );
            by_name.insert(info.name.clone(), id);
        }
        Ok(Weights { by_name, buffer })
    }

    /// The tensor called `name`, or a model error naming it.
    pub fn get(&self, name: &str) -> Result<TensorId> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| Error::Model(format!("missing tensor '{name}'")))
    }
}

impl HostBytes for crate::gguf::GgufFile {
    fn bytes(&self) -> &[u8] {
        crate::gguf::GgufFile::bytes(self)
    }
}
