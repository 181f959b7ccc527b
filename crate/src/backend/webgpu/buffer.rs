//! WebGPU buffers: one `wgpu::Buffer` (STORAGE | COPY_SRC | COPY_DST) per backend buffer.
//! Uploads go through `queue.write_buffer` in chunks; reads through a MAP_READ staging buffer and
//! `map_async` (async; natively `Buffer::get` blocks on `device.poll`).

use std::any::Any;
use std::sync::Arc;

use super::util::oneshot;
use super::Shared;
use crate::backend::{BackendFuture, Buffer, BufferType, BufferUsage, UsageCell};
use crate::{Context, Error, Result, TensorId};

/// Largest single `write_buffer` (bounds wgpu's staging memory during big uploads).
const UPLOAD_CHUNK: usize = 16 << 20;
/// Largest single staging read.
const READ_CHUNK: usize = 64 << 20;

/// The buffer type of a WebGPU device.
pub struct WebGpuBufferType {
    pub(crate) shared: Arc<Shared>,
    pub(crate) name: String,
}

impl BufferType for WebGpuBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    /// `min_storage_buffer_offset_alignment` (at least 16): tensors are bound at their offsets.
    fn alignment(&self) -> usize {
        self.shared.alignment()
    }
    fn max_size(&self) -> usize {
        usize::try_from(self.shared.limits.max_buffer_size).unwrap_or(usize::MAX)
    }
    /// nbytes rounded up to 4 (storage bindings are sized in words).
    fn alloc_size(&self, ctx: &Context, t: TensorId) -> usize {
        ctx.tensor(t).nbytes().div_ceil(4) * 4
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(WebGpuBuffer::new(self, size)?))
    }
    fn is_host(&self) -> bool {
        false
    }
}

/// A WebGPU buffer.
pub struct WebGpuBuffer {
    pub(crate) shared: Arc<Shared>,
    pub(crate) buf: wgpu::Buffer,
    size: usize,
    usage: UsageCell,
    buft: Arc<WebGpuBufferType>,
}

impl WebGpuBuffer {
    fn new(buft: Arc<WebGpuBufferType>, size: usize) -> Result<Self> {
        let shared = buft.shared.clone();
        // Room to bind the last tensor in whole words.
        let alloc = (size.max(4).div_ceil(4) * 4) as u64;
        if alloc > shared.limits.max_buffer_size {
            return Err(Error::OutOfMemory(format!(
                "WebGPU buffer of {size} bytes exceeds the adapter's max_buffer_size {}",
                shared.limits.max_buffer_size
            )));
        }
        let buf = shared.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ggweb tensors"),
            size: alloc,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        shared
            .take_error()
            .map_err(|e| Error::OutOfMemory(format!("WebGPU buffer of {size} bytes: {e}")))?;
        Ok(WebGpuBuffer {
            shared,
            buf,
            size,
            usage: UsageCell::default(),
            buft,
        })
    }

    /// The underlying wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buf
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "range {offset}+{len} outside a WebGPU buffer of {} bytes",
                self.size
            ))),
        }
    }

    /// Read `len` bytes at `offset` (async: in the browser the map resolves after the queue ran).
    pub async fn read_async(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        self.check_range(offset, len)?;
        let mut out = Vec::with_capacity(len);
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let n = (end - pos).min(READ_CHUNK);
            let a0 = pos & !3;
            let a1 = (pos + n).div_ceil(4) * 4;
            let staging = self.shared.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("ggweb readback"),
                size: (a1 - a0) as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = self
                .shared
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            enc.copy_buffer_to_buffer(&self.buf, a0 as u64, &staging, 0, (a1 - a0) as u64);
            self.shared.queue.submit([enc.finish()]);
            let (tx, rx) = oneshot();
            staging.map_async(wgpu::MapMode::Read, .., move |r| tx.send(r));
            #[cfg(not(target_arch = "wasm32"))]
            {
                self.shared
                    .device
                    .poll(wgpu::PollType::wait_indefinitely())
                    .map_err(|e| Error::Backend(format!("WebGPU poll: {e}")))?;
                if let Some(r) = rx.try_take() {
                    r.map_err(|e| Error::Backend(format!("WebGPU map: {e}")))?;
                } else {
                    rx.await
                        .map_err(|e| Error::Backend(format!("WebGPU map: {e}")))?;
                }
            }
            #[cfg(target_arch = "wasm32")]
            {
                rx.await
                    .map_err(|e| Error::Backend(format!("WebGPU map: {e}")))?;
            }
            self.shared.take_error()?;
            {
                let view = staging
                    .get_mapped_range(..)
                    .map_err(|e| Error::Backend(format!("WebGPU mapped range: {e}")))?;
                out.extend_from_slice(&view[pos - a0..pos - a0 + n]);
            }
            staging.unmap();
            pos += n;
        }
        Ok(out)
    }

    /// Write `data` when no bytes around it need preserving; false when the edge words must be
    /// merged with the current contents first. Word-aligned writes need nothing; a tail that runs
    /// into the buffer's word padding is zero-padded. In the browser every tail is: no blocking
    /// read there, and tensors get `alloc_size` (nbytes rounded up to 4) from the allocators, so
    /// those bytes are the tensor's own padding.
    fn write_unmerged(&self, offset: usize, data: &[u8]) -> Result<bool> {
        self.check_range(offset, data.len())?;
        let a1 = (offset + data.len()).div_ceil(4) * 4;
        if data.is_empty() {
            return Ok(true);
        }
        if offset & 3 != 0 {
            return Ok(false);
        }
        if a1 == offset + data.len() {
            self.write_aligned(offset, data);
        } else if a1 <= self.buf.size() as usize && (a1 > self.size || cfg!(target_arch = "wasm32"))
        {
            let mut v = data.to_vec();
            v.resize(a1 - offset, 0);
            self.write_aligned(offset, &v);
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    /// Write `data` with its unaligned edges merged with the current contents of the edge words.
    async fn write_merged(&self, offset: usize, data: &[u8]) -> Result<()> {
        let a0 = offset & !3;
        let a1 = (offset + data.len()).div_ceil(4) * 4;
        let mut v = vec![0u8; a1 - a0];
        let head = self.read_async(a0, 4.min(self.size - a0)).await?;
        v[..head.len()].copy_from_slice(&head);
        let tail_start = a1 - 4;
        if tail_start >= a0 && tail_start < self.size {
            let tail = self
                .read_async(tail_start, 4.min(self.size - tail_start))
                .await?;
            v[tail_start - a0..tail_start - a0 + tail.len()].copy_from_slice(&tail);
        }
        v[offset - a0..offset - a0 + data.len()].copy_from_slice(data);
        self.write_aligned(a0, &v);
        self.shared.take_error()
    }

    fn write_aligned(&self, offset: usize, data: &[u8]) {
        for (i, chunk) in data.chunks(UPLOAD_CHUNK).enumerate() {
            self.shared
                .queue
                .write_buffer(&self.buf, (offset + i * UPLOAD_CHUNK) as u64, chunk);
            if data.len() > UPLOAD_CHUNK {
                // Flush the staging memory of each chunk.
                self.shared.queue.submit([]);
            }
        }
    }
}

impl Buffer for WebGpuBuffer {
    fn name(&self) -> &str {
        &self.buft.name
    }
    fn size(&self) -> usize {
        self.size
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage);
    }
    /// Upload in chunks. `write_buffer` needs 4-byte aligned ranges: natively unaligned edges are
    /// merged with the bytes already there (a blocking read of the edge words); in the browser a
    /// word-aligned start is required (`set_async` merges there too) and the tail is zero-padded
    /// (see `write_unmerged`).
    fn set(&self, offset: usize, data: &[u8]) -> Result<()> {
        if self.write_unmerged(offset, data)? {
            return self.shared.take_error();
        }
        #[cfg(target_arch = "wasm32")]
        {
            Err(Error::Backend(format!(
                "WebGPU upload at an unaligned offset ({} bytes at {offset}) is not supported \
             in the browser by the blocking set: use set_async",
                data.len()
            )))
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            super::util::block_on(self.write_merged(offset, data))
        }
    }
    fn set_async<'a>(&'a self, offset: usize, data: &'a [u8]) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            if self.write_unmerged(offset, data)? {
                return self.shared.take_error();
            }
            self.write_merged(offset, data).await
        })
    }
    fn get_async(&self, offset: usize, len: usize) -> BackendFuture<'_, Vec<u8>> {
        Box::pin(self.read_async(offset, len))
    }
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let v = super::util::block_on(self.read_async(offset, out.len()))?;
            out.copy_from_slice(&v);
            Ok(())
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = (offset, out);
            Err(Error::Backend(
                "reading a WebGPU buffer is async in the browser: use Context::get_bytes_async"
                    .into(),
            ))
        }
    }
    fn clear(&self, value: u8) -> Result<()> {
        if value == 0 {
            let mut enc = self
                .shared
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            enc.clear_buffer(&self.buf, 0, None);
            self.shared.queue.submit([enc.finish()]);
        } else {
            let n = self.buf.size() as usize;
            let chunk = vec![value; n.min(UPLOAD_CHUNK)];
            let mut pos = 0;
            while pos < n {
                let len = (n - pos).min(UPLOAD_CHUNK);
                self.shared
                    .queue
                    .write_buffer(&self.buf, pos as u64, &chunk[..len]);
                pos += len;
            }
        }
        self.shared.take_error()
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
