//! Transparent huge pages (Linux) for the memory that GEMVs stream: a model's weights.
//!
//! Why: a GEMV reading its weights from DRAM walks a new 4 KiB page every ~0.3 µs per stream,
//! and with two streams per thread and a prefetch 8 KiB ahead the page walks show: on an Intel
//! Xeon (Emerald Rapids) `ggweb bench --llm --stream-mib 512` read 1.16× faster from
//! THP-backed weights (docs/PERFORMANCE.md, session 29). Linux's default THP mode on most
//! distributions is `madvise`, so the memory has to ask for it (`MADV_HUGEPAGE`), as it does
//! here. Elsewhere (no THP, macOS, Windows, wasm) everything here is a no-op.

/// The PMD huge page size on x86-64 and (4 KiB-page) aarch64 Linux.
pub const HUGE_PAGE: usize = 2 << 20;

/// Whether the kernel may back advised memory with transparent huge pages (THP `enabled` is
/// `always` or `madvise`). Read once.
pub fn available() -> bool {
    #[cfg(target_os = "linux")]
    {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| {
            std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .map(|s| s.contains("[always]") || s.contains("[madvise]"))
                .unwrap_or(false)
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// The whole huge pages inside `[ptr, ptr + len)`: (start, length), length 0 when none.
fn inner(ptr: *mut u8, len: usize) -> (usize, usize) {
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
    (start, end.saturating_sub(start))
}

/// Ask for huge pages over the whole huge pages inside `[ptr, ptr + len)` (a hint: the kernel
/// may not have them, and nothing changes for the memory's contents). Call it before the
/// memory is first touched, so that the first fault already gets a huge page.
///
/// `ptr..ptr + len` must be memory this process mapped (anonymous or a private mapping).
pub fn advise(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let (start, n) = inner(ptr, len);
        if n == 0 || !available() {
            return;
        }
        // SAFETY: madvise only changes how the kernel backs pages of this process's own
        // mapping (the caller's range, shrunk to whole huge pages); MADV_HUGEPAGE never
        // changes their contents. A failure (EINVAL without THP) only leaves the hint unset.
        unsafe {
            libc::madvise(start as *mut libc::c_void, n, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len, inner);
}

/// Anonymous memory starting at a huge-page boundary and advised for huge pages ([`advise`]):
/// zeroed, unmapped on drop. The global allocator cannot serve here: an aligned
/// `alloc_zeroed` writes its zeros before any `madvise` could ask, and those first writes
/// fault the memory in as 4 KiB pages.
#[cfg(target_os = "linux")]
pub struct Region {
    base: *mut u8,
    total: usize,
    ptr: *mut u8,
}

// SAFETY: the mapping is owned by this value, like a heap allocation.
#[cfg(target_os = "linux")]
unsafe impl Send for Region {}
// SAFETY: as above; `&self` gives out only the address.
#[cfg(target_os = "linux")]
unsafe impl Sync for Region {}

#[cfg(target_os = "linux")]
impl Region {
    /// `len` zeroed bytes at a huge-page boundary; None when the kernel refuses the mapping
    /// (out of address space or over a strict overcommit limit). The pages fault in (a huge
    /// page at a time) when first written.
    pub fn new(len: usize) -> Option<Region> {
        let total = len
            .max(1)
            .checked_next_multiple_of(HUGE_PAGE)?
            .checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let base = base as *mut u8;
        let ptr = base.wrapping_add((base as usize).next_multiple_of(HUGE_PAGE) - base as usize);
        advise(ptr, total - HUGE_PAGE);
        Some(Region { base, total, ptr })
    }

    /// The first byte (a huge-page boundary).
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

#[cfg(target_os = "linux")]
impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.total) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_range_is_whole_huge_pages() {
        let h = HUGE_PAGE;
        assert_eq!(inner(h as *mut u8, 3 * h), (h, 3 * h));
        assert_eq!(inner((h + 64) as *mut u8, 3 * h), (2 * h, 2 * h));
        assert_eq!(inner((h + 64) as *mut u8, h), (2 * h, 0));
        assert_eq!(inner(64 as *mut u8, 100), (h, 0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn region_is_zeroed_aligned_and_writable() {
        let n = 3 * HUGE_PAGE + 5;
        let r = Region::new(n).expect("a small mapping");
        assert_eq!(r.ptr() as usize % HUGE_PAGE, 0);
        // SAFETY: the region holds n bytes.
        let s = unsafe { std::slice::from_raw_parts_mut(r.ptr(), n) };
        assert!(s.iter().all(|&b| b == 0));
        s[n - 1] = 7;
        assert_eq!(s[n - 1], 7);
    }
}
