//! Host memory buffers: owned (aligned heap allocation) or borrowed read-only bytes (an mmap'd
//! GGUF file, so weights are used in place without a copy).

use std::alloc::Layout;
use std::any::Any;
use std::sync::Arc;

use crate::backend::{Buffer, BufferType, BufferUsage, UsageCell};
use crate::{Error, Result};

/// Alignment of CPU buffers and of tensor offsets in them (a cache line; covers AVX2 and NEON).
pub const CPU_ALIGNMENT: usize = 64;

/// Read-only bytes that outlive the buffer (an mmap, a Vec, a GGUF file).
pub trait HostBytes: Send + Sync {
    fn bytes(&self) -> &[u8];
}

impl HostBytes for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

enum Storage {
    Owned {
        ptr: *mut u8,
        layout: Layout,
    },
    Borrowed {
        owner: Arc<dyn HostBytes>,
        offset: usize,
    },
}

/// A CPU buffer.
pub struct CpuBuffer {
    storage: Storage,
    size: usize,
    usage: UsageCell,
    buft: Arc<dyn BufferType>,
}

// SAFETY: the owned pointer is a private heap allocation; concurrent writers write disjoint
// tensor regions by construction of the graph executor (ggml's model). Borrowed storage is read-only.
unsafe impl Send for CpuBuffer {}
// SAFETY: as above.
unsafe impl Sync for CpuBuffer {}

impl CpuBuffer {
    /// Allocate `size` zeroed bytes aligned to [`CPU_ALIGNMENT`]; an error (not an abort) when the
    /// allocation fails.
    pub fn alloc(size: usize, buft: Arc<dyn BufferType>) -> Result<Self> {
        let layout = Layout::from_size_align(size.max(1), CPU_ALIGNMENT)
            .map_err(|_| Error::OutOfMemory(format!("invalid buffer size {size}")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::OutOfMemory(format!(
                "could not allocate a CPU buffer of {size} bytes"
            )));
        }
        Ok(CpuBuffer {
            storage: Storage::Owned { ptr, layout },
            size,
            usage: UsageCell::default(),
            buft,
        })
    }

    /// Wrap `len` bytes of `owner` starting at `offset`, read-only (weights in place).
    pub fn from_host_bytes(owner: Arc<dyn HostBytes>, offset: usize, len: usize) -> Result<Self> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Error::Overflow("host buffer range".into()))?;
        if end > owner.bytes().len() {
            return Err(Error::InvalidArgument(format!(
                "host buffer range {offset}..{end} exceeds {} bytes",
                owner.bytes().len()
            )));
        }
        Ok(CpuBuffer {
            storage: Storage::Borrowed { owner, offset },
            size: len,
            usage: UsageCell::new(BufferUsage::Weights),
            buft: cpu_buffer_type(),
        })
    }

    pub fn is_read_only(&self) -> bool {
        matches!(self.storage, Storage::Borrowed { .. })
    }

    /// Base address of the buffer.
    pub fn base(&self) -> *mut u8 {
        match &self.storage {
            Storage::Owned { ptr, .. } => *ptr,
            Storage::Borrowed { owner, offset, .. } => owner.bytes()[*offset..].as_ptr() as *mut u8,
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "range {offset}+{len} outside a buffer of {} bytes",
                self.size
            ))),
        }
    }
}

impl Drop for CpuBuffer {
    fn drop(&mut self) {
        if let Storage::Owned { ptr, layout } = self.storage {
            // SAFETY: allocated in `alloc` with exactly this layout, freed once.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
    }
}

impl Buffer for CpuBuffer {
    fn name(&self) -> &str {
        "CPU"
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
    fn set(&self, offset: usize, data: &[u8]) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::Backend(
                "write into a read-only (mapped) buffer".into(),
            ));
        }
        self.check_range(offset, data.len())?;
        // SAFETY: range checked above; the allocation is live for &self.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base().add(offset), data.len())
        };
        Ok(())
    }
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        // SAFETY: range checked above.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }
    fn clear(&self, value: u8) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::Backend(
                "clear of a read-only (mapped) buffer".into(),
            ));
        }
        // SAFETY: the whole owned allocation.
        unsafe { std::ptr::write_bytes(self.base(), value, self.size) };
        Ok(())
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.base())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The CPU buffer type.
pub struct CpuBufferType;

impl BufferType for CpuBufferType {
    fn name(&self) -> &str {
        "CPU"
    }
    fn alignment(&self) -> usize {
        CPU_ALIGNMENT
    }
    fn max_size(&self) -> usize {
        isize::MAX as usize
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(CpuBuffer::alloc(size, self)?))
    }
    fn is_host(&self) -> bool {
        true
    }
}

/// The one CPU buffer type instance (so buffer types compare equal by identity).
pub fn cpu_buffer_type() -> Arc<dyn BufferType> {
    use std::sync::OnceLock;
    static BUFT: OnceLock<Arc<CpuBufferType>> = OnceLock::new();
    BUFT.get_or_init(|| Arc::new(CpuBufferType)).clone()
}

impl HostBytes for &'static [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}
