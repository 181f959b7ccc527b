//! CUDA buffers: device memory (`cuMemAlloc`) and pinned host memory (`cuMemHostAlloc`, readable
//! by the CPU backend, copied to and from the device at full bus speed). Transfers to and from
//! device memory are enqueued on the device's stream, so they are ordered with the kernels, and
//! waited for before returning (the caller's slice must outlive the copy).

use std::any::Any;
use std::sync::Arc;

use cudarc::driver::result;

use super::Shared;
use crate::backend::{Buffer, BufferType, BufferUsage, UsageCell};
use crate::{Error, Result};

/// Tensor offsets inside CUDA buffers: enough for any vector load of the kernels.
const ALIGNMENT: usize = 256;

pub(crate) fn driver_err(what: &str, e: result::DriverError) -> Error {
    Error::Backend(format!("CUDA {what}: {e}"))
}

/// Device memory of one CUDA device.
pub struct CudaBufferType {
    pub(crate) shared: Arc<Shared>,
    pub(crate) name: String,
}

impl BufferType for CudaBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        ALIGNMENT
    }
    fn max_size(&self) -> usize {
        self.shared.total_mem
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        let shared = self.shared.clone();
        shared.bind()?;
        // SAFETY: a plain allocation in the bound context; freed once in Drop.
        let ptr = unsafe { result::malloc_sync(size.max(1)) }.map_err(|e| {
            Error::OutOfMemory(format!(
                "CUDA buffer of {size} bytes on {}: {e}",
                shared.name
            ))
        })?;
        Ok(Arc::new(CudaBuffer {
            shared,
            ptr,
            size,
            usage: UsageCell::default(),
            buft: self,
        }))
    }
    fn is_host(&self) -> bool {
        false
    }
}

/// A block of device memory.
pub struct CudaBuffer {
    pub(crate) shared: Arc<Shared>,
    /// Device address of the first byte.
    pub(crate) ptr: u64,
    size: usize,
    usage: UsageCell,
    buft: Arc<CudaBufferType>,
}

impl CudaBuffer {
    fn check(&self, offset: usize, len: usize) -> Result<()> {
        check_range("CUDA", offset, len, self.size)
    }
}

impl Buffer for CudaBuffer {
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
        self.usage.set(usage)
    }
    fn set(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        self.shared.bind()?;
        // SAFETY: the range was checked against the allocation; the stream is synchronized
        // before `data` can go away.
        unsafe {
            result::memcpy_htod_async(
                self.ptr + offset as u64,
                data,
                self.shared.stream.cu_stream(),
            )
        }
        .map_err(|e| driver_err("copy to device", e))?;
        self.shared.sync()
    }
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.shared.bind()?;
        // SAFETY: as in `set`; kernels enqueued before on the stream finish first.
        unsafe {
            result::memcpy_dtoh_async(
                out,
                self.ptr + offset as u64,
                self.shared.stream.cu_stream(),
            )
        }
        .map_err(|e| driver_err("copy from device", e))?;
        self.shared.sync()
    }
    fn clear(&self, value: u8) -> Result<()> {
        self.shared.bind()?;
        // SAFETY: the whole allocation.
        unsafe {
            result::memset_d8_async(self.ptr, value, self.size, self.shared.stream.cu_stream())
        }
        .map_err(|e| driver_err("memset", e))?;
        self.shared.sync()
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        // Work still queued may use the memory: wait, then free. Errors cannot be returned here.
        if self.shared.bind().is_ok() && self.shared.sync().is_ok() {
            // SAFETY: allocated by malloc_sync in alloc_buffer, freed only here.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Pinned (page-locked) host memory: the CPU reads and writes it directly; transfers between it
/// and the device need no staging copy.
pub struct CudaHostBufferType {
    pub(crate) shared: Arc<Shared>,
    pub(crate) name: String,
}

impl BufferType for CudaHostBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        ALIGNMENT
    }
    fn max_size(&self) -> usize {
        usize::MAX
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        self.shared.bind()?;
        // SAFETY: a plain pinned allocation (flags 0), freed once in Drop.
        let ptr = unsafe { result::malloc_host(size.max(1), 0) }
            .map_err(|e| Error::OutOfMemory(format!("pinned host buffer of {size} bytes: {e}")))?;
        Ok(Arc::new(CudaHostBuffer {
            ptr: ptr.cast(),
            size,
            usage: UsageCell::default(),
            buft: self,
        }))
    }
    fn is_host(&self) -> bool {
        true
    }
}

/// A block of pinned host memory.
pub struct CudaHostBuffer {
    ptr: *mut u8,
    size: usize,
    usage: UsageCell,
    buft: Arc<CudaHostBufferType>,
}

// SAFETY: the memory is owned by this buffer; concurrent access is ordered by the graph, as for
// the CPU backend's own buffers.
unsafe impl Send for CudaHostBuffer {}
// SAFETY: as above.
unsafe impl Sync for CudaHostBuffer {}

impl CudaHostBuffer {
    fn range(&self, offset: usize, len: usize) -> Result<()> {
        check_range("pinned", offset, len, self.size)
    }
}

impl Buffer for CudaHostBuffer {
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
        self.usage.set(usage)
    }
    fn set(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.range(offset, data.len())?;
        // SAFETY: the range lies inside the allocation (checked above).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.range(offset, out.len())?;
        // SAFETY: as in `set`.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn clear(&self, value: u8) -> Result<()> {
        // SAFETY: the whole allocation.
        unsafe { std::ptr::write_bytes(self.ptr, value, self.size) };
        Ok(())
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.ptr)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for CudaHostBuffer {
    fn drop(&mut self) {
        if self.buft.shared.bind().is_ok() {
            // SAFETY: allocated by malloc_host, freed only here.
            let _ = unsafe { result::free_host(self.ptr.cast()) };
        }
    }
}

/// `len` bytes at `offset` lie inside a buffer of `size` bytes (`what`: the kind, for the error).
fn check_range(what: &str, offset: usize, len: usize, size: usize) -> Result<()> {
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(Error::Backend(format!(
            "{len} bytes at {offset} outside a {what} buffer of {size} bytes"
        )));
    }
    Ok(())
}
