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
    /// The bytes' address when they are this process's own writable memory (the heap, or a
    /// private copy-on-write mapping of a file), which the CPU backend may rewrite in place at
    /// load (weight repacking, before any graph reads them); None for shared read-only mapped
    /// files and statics.
    fn heap_ptr(&self) -> Option<*mut u8> {
        None
    }
    /// Called before the bytes are rewritten in place (through [`HostBytes::heap_ptr`]): from
    /// then on they are no longer the file's, and [`HostBytes::rewritten`] says so.
    fn mark_rewritten(&self) {}
    /// Whether the bytes were rewritten in place by a model that repacked its weights (a second
    /// model must not read them as a GGUF file: `Weights` refuses them).
    fn rewritten(&self) -> bool {
        false
    }
}

impl HostBytes for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// One heap allocation aligned to [`CPU_ALIGNMENT`], freed on drop: the memory of owned
/// [`CpuBuffer`]s and of [`AlignedBytes`]. For weights (`huge`) from [`HUGE_FROM`] bytes on,
/// where Linux has transparent huge pages, an anonymous mapping on huge pages instead
/// (`crate::hugepage`): every token's GEMVs stream them. (Compute buffers and KV caches stay
/// on the allocator: on the session VMs a fresh huge page's first touch cost more than its
/// page walks saved there, docs/PERFORMANCE.md session 29.)
struct Aligned {
    ptr: *mut u8,
    layout: Layout,
    #[cfg(target_os = "linux")]
    region: Option<crate::hugepage::Region>,
}

/// Weights from this size on ask for huge pages; smaller ones are not worth a mapping.
#[cfg(target_os = "linux")]
const HUGE_FROM: usize = 2 * crate::hugepage::HUGE_PAGE;

impl Aligned {
    /// `size` bytes (at least one is allocated); an error, not an abort, when the allocator
    /// fails. `zeroed` memory may be read at once; otherwise only what was written. `huge`:
    /// weights, on huge pages where they can be.
    fn new(size: usize, zeroed: bool, huge: bool) -> Result<Aligned> {
        let layout = Layout::from_size_align(size.max(1), CPU_ALIGNMENT)
            .map_err(|_| Error::OutOfMemory(format!("invalid buffer size {size}")))?;
        #[cfg(target_os = "linux")]
        if huge && size >= HUGE_FROM && crate::hugepage::available() {
            // (Zeroed either way: fresh anonymous memory.)
            return match crate::hugepage::Region::new(size) {
                Some(r) => Ok(Aligned {
                    ptr: r.ptr(),
                    layout,
                    region: Some(r),
                }),
                None => Err(Error::OutOfMemory(format!(
                    "could not allocate a CPU buffer of {size} bytes"
                ))),
            };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = huge;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe {
            if zeroed {
                std::alloc::alloc_zeroed(layout)
            } else {
                std::alloc::alloc(layout)
            }
        };
        if ptr.is_null() {
            return Err(Error::OutOfMemory(format!(
                "could not allocate a CPU buffer of {size} bytes"
            )));
        }
        Ok(Aligned {
            ptr,
            layout,
            #[cfg(target_os = "linux")]
            region: None,
        })
    }

    /// Grow to `size` bytes, keeping the contents and the alignment (in place when the
    /// allocator can); on failure the old block stays valid and an error is returned.
    fn grow(&mut self, size: usize) -> Result<()> {
        if size <= self.layout.size() {
            return Ok(());
        }
        let oom = || Error::OutOfMemory(format!("could not grow a CPU buffer to {size} bytes"));
        let layout = Layout::from_size_align(size, CPU_ALIGNMENT).map_err(|_| oom())?;
        #[cfg(target_os = "linux")]
        if self.region.is_some() {
            // A new block, the contents copied, the old one freed by the assignment.
            let new = Aligned::new(size, false, true)?;
            // SAFETY: both blocks hold at least the old size; distinct allocations.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr, new.ptr, self.layout.size()) };
            *self = new;
            return Ok(());
        }
        // SAFETY: `ptr` was allocated by the global allocator with `self.layout`; `size` is
        // non-zero and valid for this alignment (checked by `from_size_align`).
        let ptr = unsafe { std::alloc::realloc(self.ptr, self.layout, size) };
        if ptr.is_null() {
            return Err(oom());
        }
        self.ptr = ptr;
        self.layout = layout;
        Ok(())
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if self.region.is_some() {
            // (The region unmaps itself.)
            return;
        }
        // SAFETY: allocated in `new` with exactly this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Bytes appended front to back into one [`CPU_ALIGNMENT`]-aligned allocation of a fixed
/// capacity (a model file streamed into memory), then read in place as [`HostBytes`] (weights
/// without a copy).
pub struct AlignedBytes {
    mem: Aligned,
    cap: usize,
    len: usize,
    /// [`HostBytes::rewritten`].
    rewritten: std::sync::atomic::AtomicBool,
}

// SAFETY: a private heap allocation, written only through `&mut self`.
unsafe impl Send for AlignedBytes {}
// SAFETY: as above; `&self` only reads the written prefix.
unsafe impl Sync for AlignedBytes {}

impl AlignedBytes {
    pub fn with_capacity(cap: usize) -> Result<AlignedBytes> {
        Ok(AlignedBytes {
            mem: Aligned::new(cap, false, true)?,
            cap,
            len: 0,
            rewritten: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Grow the capacity to `cap` bytes (no-op when it is already that large). The written
    /// bytes are kept; they may move, which is sound because nothing can borrow them across
    /// this `&mut self` call.
    pub fn reserve_total(&mut self, cap: usize) -> Result<()> {
        if cap > self.cap {
            self.mem.grow(cap)?;
            self.cap = cap;
        }
        Ok(())
    }

    /// Append `chunk`; an error when it does not fit in the capacity.
    pub fn extend_from_slice(&mut self, chunk: &[u8]) -> Result<()> {
        let end = self.len + chunk.len();
        if end > self.cap {
            return Err(Error::InvalidArgument(format!(
                "{end} bytes do not fit in a buffer of {}",
                self.cap
            )));
        }
        // SAFETY: `len..end` lies inside the allocation, which `chunk` (borrowed while we hold
        // `&mut self`) cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), self.mem.ptr.add(self.len), chunk.len())
        };
        self.len = end;
        Ok(())
    }
}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by `extend_from_slice`.
        unsafe { std::slice::from_raw_parts(self.mem.ptr, self.len) }
    }
}

impl HostBytes for AlignedBytes {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn heap_ptr(&self) -> Option<*mut u8> {
        Some(self.mem.ptr)
    }
    fn mark_rewritten(&self) {
        self.rewritten
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    fn rewritten(&self) -> bool {
        self.rewritten.load(std::sync::atomic::Ordering::Relaxed)
    }
}

enum Storage {
    Owned(Aligned),
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
        Self::alloc_as(size, buft, false)
    }

    /// [`CpuBuffer::alloc`] for weights that GEMVs will stream: on transparent huge pages
    /// where Linux has them (`crate::hugepage`), as a model's weights read into memory are.
    pub fn alloc_weights(size: usize, buft: Arc<dyn BufferType>) -> Result<Self> {
        Self::alloc_as(size, buft, true)
    }

    fn alloc_as(size: usize, buft: Arc<dyn BufferType>, huge: bool) -> Result<Self> {
        Ok(CpuBuffer {
            storage: Storage::Owned(Aligned::new(size, true, huge)?),
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

    /// Whether the bytes are owned or borrowed heap memory ([`CpuBuffer::write_in_place`]).
    pub fn heap_bytes(&self) -> bool {
        match &self.storage {
            Storage::Owned(_) => true,
            Storage::Borrowed { owner, .. } => owner.heap_ptr().is_some(),
        }
    }

    /// Base address of the buffer.
    pub fn base(&self) -> *mut u8 {
        match &self.storage {
            Storage::Owned(mem) => mem.ptr,
            Storage::Borrowed { owner, offset, .. } => match owner.heap_ptr() {
                // SAFETY: offset ≤ the owner's length (checked in from_host_bytes).
                Some(p) => unsafe { p.add(*offset) },
                None => owner.bytes()[*offset..].as_ptr() as *mut u8,
            },
        }
    }

    /// Write `data` at `offset` even into borrowed heap bytes (weights read in place from a
    /// file's bytes in memory): the weight repacking at load, before any graph reads them. An
    /// error for mapped or static bytes.
    pub fn write_in_place(&self, offset: usize, data: &[u8]) -> Result<()> {
        if let Storage::Borrowed { owner, .. } = &self.storage {
            if owner.heap_ptr().is_none() {
                return Err(Error::Backend(
                    "write into a read-only (mapped) buffer".into(),
                ));
            }
            owner.mark_rewritten();
        }
        self.copy_in(offset, data)
    }

    /// `data` at `offset`, range-checked (the callers checked that the memory is writable).
    fn copy_in(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len())?;
        // SAFETY: range checked above; owned memory, or the owner's heap allocation (not
        // borrowed elsewhere while weights are loaded), live for &self.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base().add(offset), data.len())
        };
        Ok(())
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

impl Buffer for CpuBuffer {
    fn name(&self) -> &str {
        "CPU"
    }
    fn is_read_only(&self) -> bool {
        CpuBuffer::is_read_only(self)
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
        self.copy_in(offset, data)
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
    fn alloc_weights_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(CpuBuffer::alloc_weights(size, self)?))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights buffers (huge pages where Linux has them) are zeroed and hold what is written,
    /// start at a huge-page boundary when THP is on, and a growing `AlignedBytes` keeps its
    /// bytes when its mapping is replaced by a larger one.
    #[test]
    fn weights_memory_holds_its_bytes() {
        let n = 5 * crate::hugepage::HUGE_PAGE + 3;
        let b = cpu_buffer_type().alloc_weights_buffer(n).unwrap();
        let mut out = vec![1u8; n];
        b.get(0, &mut out).unwrap();
        assert!(out.iter().all(|&x| x == 0), "not zeroed");
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
        b.set(0, &data).unwrap();
        b.get(0, &mut out).unwrap();
        assert!(out == data);
        let cpu = b.as_any().downcast_ref::<CpuBuffer>().unwrap();
        if cfg!(target_os = "linux") && crate::hugepage::available() {
            assert_eq!(cpu.base() as usize % crate::hugepage::HUGE_PAGE, 0);
        }

        let mut bytes = AlignedBytes::with_capacity(n).unwrap();
        bytes.extend_from_slice(&data).unwrap();
        bytes.reserve_total(2 * n).unwrap();
        bytes.extend_from_slice(&data).unwrap();
        assert!(
            bytes[..n] == data[..] && bytes[n..] == data[..],
            "grown bytes changed"
        );
    }
}
