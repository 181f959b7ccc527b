//! A parsed GGUF file that owns its bytes (memory-mapped natively, or a `Vec<u8>`).

use super::{Gguf, TensorInfo};
use crate::error::{Error, Result};

enum Storage {
    #[cfg(not(target_arch = "wasm32"))]
    Mmap(memmap2::Mmap),
    #[cfg(not(target_arch = "wasm32"))]
    Private(PrivateMap),
    Vec(Vec<u8>),
}

/// A private (copy-on-write) mapping: pages written get the process's own copy; the file and
/// every page not written stay as they are. On Linux, ranges chosen at open (the weights a
/// model multiplies) are anonymous memory holding the file's bytes, on transparent huge pages.
#[cfg(not(target_arch = "wasm32"))]
struct PrivateMap {
    #[cfg(target_os = "linux")]
    map: linux::Map,
    #[cfg(not(target_os = "linux"))]
    map: memmap2::MmapMut,
    /// `map`'s start, taken once from `&mut`: the one pointer writes go through.
    ptr: *mut u8,
    rewritten: std::sync::atomic::AtomicBool,
}

// SAFETY: the map is owned by this value; `ptr` is written through only by the CPU backend
// while it repacks weights at load (`HostBytes::heap_ptr`'s contract: before any graph or
// other thread reads those bytes), so sharing it is as safe as sharing the map.
#[cfg(not(target_arch = "wasm32"))]
unsafe impl Send for PrivateMap {}
// SAFETY: as above.
#[cfg(not(target_arch = "wasm32"))]
unsafe impl Sync for PrivateMap {}

/// A validated GGUF file together with its bytes.
pub struct GgufFile {
    storage: Storage,
    header: Gguf,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("len", &self.bytes().len())
            .field("header", &self.header)
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`.
    ///
    /// The map is read-only; as with any mmap, the file must not be truncated or modified by
    /// another process while this value lives.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let file = open_file(path)?;
        // SAFETY: the map is read-only and private to this value; the caveat that another
        // process must not modify the file while it is mapped is documented above.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        let header = parse_at(path, &map)?;
        Ok(GgufFile {
            storage: Storage::Mmap(map),
            header,
        })
    }

    /// [`GgufFile::open`] with a private, copy-on-write mapping, whose bytes the CPU backend
    /// may rewrite in place (weight repacking, `HostBytes::heap_ptr`) without writing the
    /// file: only the pages rewritten become this process's memory, the rest stay the file's
    /// (a token embedding read a row at a time is paged in a row at a time, as when mapped).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_private(path: impl AsRef<std::path::Path>) -> Result<GgufFile> {
        Self::open_private_with(path, |_| Vec::new())
    }

    /// [`GgufFile::open_private`], the data of every tensor `resident` selects (given the
    /// header once: a flag per tensor in header order, missing ones false) read into
    /// memory at open, on transparent huge pages where Linux has them (`crate::hugepage`):
    /// the weights a model multiplies, which every token streams, walk 512× fewer pages.
    /// Tensors it leaves out (a token embedding only looked up) stay mapped: rows never read
    /// are never paged in. Elsewhere, or without THP, the same as [`GgufFile::open_private`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_private_with(
        path: impl AsRef<std::path::Path>,
        resident: impl FnOnce(&Gguf) -> Vec<bool>,
    ) -> Result<GgufFile> {
        let path = path.as_ref();
        let file = open_file(path)?;
        #[cfg(target_os = "linux")]
        let (mut map, header) = {
            let map = linux::Map::new(&file)?;
            let header = parse_at(path, map.bytes())?;
            if crate::hugepage::available() {
                let ranges = resident_ranges(&header, map.bytes().len(), &resident(&header));
                map.read_resident(&file, &ranges)
                    .map_err(|e| io_at(path, e))?;
            }
            (map, header)
        };
        #[cfg(not(target_os = "linux"))]
        let (mut map, header) = {
            let _ = resident;
            // SAFETY: private to this value, copy-on-write (writes never reach the file); the
            // caveat of [`GgufFile::open`] about other processes holds.
            let map = unsafe { memmap2::MmapOptions::new().map_copy(&file) }?;
            let header = parse_at(path, &map)?;
            (map, header)
        };
        let ptr = map.as_mut_ptr();
        Ok(GgufFile {
            storage: Storage::Private(PrivateMap {
                map,
                ptr,
                rewritten: std::sync::atomic::AtomicBool::new(false),
            }),
            header,
        })
    }

    /// The start of the bytes when they are writable in place (a private mapping).
    pub(crate) fn writable_ptr(&self) -> Option<*mut u8> {
        match &self.storage {
            #[cfg(not(target_arch = "wasm32"))]
            Storage::Private(p) => Some(p.ptr),
            _ => None,
        }
    }

    /// Marks a private mapping's bytes as rewritten (see `HostBytes::mark_rewritten`).
    pub(crate) fn mark_rewritten(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        if let Storage::Private(p) = &self.storage {
            p.rewritten
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether a private mapping's bytes were rewritten in place.
    pub(crate) fn rewritten(&self) -> bool {
        match &self.storage {
            #[cfg(not(target_arch = "wasm32"))]
            Storage::Private(p) => p.rewritten.load(std::sync::atomic::Ordering::Relaxed),
            _ => false,
        }
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        let header = Gguf::parse(&bytes)?;
        Ok(GgufFile {
            storage: Storage::Vec(bytes),
            header,
        })
    }

    /// Header, metadata and tensor infos.
    pub fn header(&self) -> &Gguf {
        &self.header
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            #[cfg(not(target_arch = "wasm32"))]
            Storage::Mmap(m) => m,
            #[cfg(target_os = "linux")]
            Storage::Private(p) => p.map.bytes(),
            #[cfg(all(not(target_os = "linux"), not(target_arch = "wasm32")))]
            Storage::Private(p) => &p.map,
            Storage::Vec(v) => v,
        }
    }

    /// The info of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.header.tensor(name)
    }

    /// The bytes of tensor `name`.
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let t = self
            .header
            .tensor(name)
            .ok_or_else(|| Error::Gguf(format!("no tensor named '{name}'")))?;
        self.header.tensor_data(self.bytes(), t)
    }

    /// The bytes of the tensor described by `t` (an info from this file's header).
    pub fn tensor_bytes(&self, t: &TensorInfo) -> Result<&[u8]> {
        self.header.tensor_data(self.bytes(), t)
    }
}

/// `path` opened for reading; an error names it.
#[cfg(not(target_arch = "wasm32"))]
fn open_file(path: &std::path::Path) -> Result<std::fs::File> {
    std::fs::File::open(path).map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    })
}

/// The header of the file at `path` (`bytes`); an error names the file.
#[cfg(not(target_arch = "wasm32"))]
fn parse_at(path: &std::path::Path, bytes: &[u8]) -> Result<Gguf> {
    Gguf::parse(bytes).map_err(|e| Error::Gguf(format!("{}: {}", path.display(), msg(e))))
}

/// An I/O error that names the file.
#[cfg(target_os = "linux")]
fn io_at(path: &std::path::Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

/// The byte ranges of the tensors flagged in `resident` (header order), in file order, each inside `len`; ranges
/// less than a huge page apart merged (what lies between is read too), so there are at most
/// `len / 2 MiB + 1` of them whatever the header claims (each is a mapping of its own, and a
/// process has a limited number).
#[cfg(target_os = "linux")]
fn resident_ranges(g: &Gguf, len: usize, resident: &[bool]) -> Vec<std::ops::Range<usize>> {
    let mut r: Vec<std::ops::Range<usize>> = g
        .tensors
        .iter()
        .zip(resident)
        .filter(|(t, &on)| on && t.size > 0)
        .map(|(t, _)| t)
        .filter_map(|t| {
            let s = usize::try_from(g.data_offset.checked_add(t.offset)?).ok()?;
            let e = s.checked_add(usize::try_from(t.size).ok()?)?;
            (e <= len).then_some(s..e)
        })
        .collect();
    r.sort_by_key(|x| x.start);
    let mut out: Vec<std::ops::Range<usize>> = Vec::with_capacity(r.len());
    for x in r {
        match out.last_mut() {
            Some(last) if x.start < last.end.saturating_add(crate::hugepage::HUGE_PAGE) => {
                last.end = last.end.max(x.end)
            }
            _ => out.push(x),
        }
    }
    out
}

#[cfg(target_os = "linux")]
mod linux {
    //! The private mapping, with chosen ranges replaced by anonymous memory on huge pages.

    use crate::hugepage::HUGE_PAGE;
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;

    /// A private (copy-on-write) mapping of a whole file at a huge-page-aligned address (so
    /// that a file offset's place in a huge page is the same as its address's), unmapped on
    /// drop.
    pub(super) struct Map {
        base: *mut u8,
        /// The file's length (the bytes).
        len: usize,
        /// The mapping's length (`len` in whole pages).
        map_len: usize,
    }

    // SAFETY: the mapping is owned by this value and lives until drop; writes go through
    // `PrivateMap::ptr` under its contract.
    unsafe impl Send for Map {}
    // SAFETY: as above.
    unsafe impl Sync for Map {}

    fn page() -> usize {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p)
            .ok()
            .filter(|&p| p.is_power_of_two())
            .unwrap_or(4096)
    }

    fn last_error() -> std::io::Error {
        std::io::Error::last_os_error()
    }

    impl Map {
        pub(super) fn new(file: &std::fs::File) -> std::io::Result<Map> {
            let len = usize::try_from(file.metadata()?.len())
                .map_err(|_| std::io::Error::other("file larger than the address space"))?;
            // (mmap refuses a length of 0: an empty mapping is one page, read as no bytes.)
            let map_len = len.max(1).next_multiple_of(page());
            let reserve = map_len
                .checked_add(HUGE_PAGE)
                .ok_or_else(|| std::io::Error::other("file larger than the address space"))?;
            // SAFETY: a fresh inaccessible reservation; nothing else refers to it.
            let r = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    reserve,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if r == libc::MAP_FAILED {
                return Err(last_error());
            }
            let r = r as usize;
            let base = r.next_multiple_of(HUGE_PAGE);
            // SAFETY: [base, base + map_len) lies inside the reservation just made, which
            // this function owns; MAP_FIXED replaces only that.
            let m = unsafe {
                libc::mmap(
                    base as *mut libc::c_void,
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                let e = last_error();
                // SAFETY: the reservation made above, unmapped once.
                unsafe { libc::munmap(r as *mut libc::c_void, reserve) };
                return Err(e);
            }
            // The reservation's head and tail around the mapping.
            // SAFETY: both ranges are parts of the reservation outside [base, base + map_len),
            // owned here and referred to by nothing.
            unsafe {
                if base > r {
                    libc::munmap(r as *mut libc::c_void, base - r);
                }
                let end = base + map_len;
                if r + reserve > end {
                    libc::munmap(end as *mut libc::c_void, r + reserve - end);
                }
            }
            Ok(Map {
                base: base as *mut u8,
                len,
                map_len,
            })
        }

        pub(super) fn bytes(&self) -> &[u8] {
            // SAFETY: the mapping covers `len` readable bytes for the life of `self`.
            unsafe { std::slice::from_raw_parts(self.base, self.len) }
        }

        pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
            self.base
        }

        /// Replace `ranges` (of the file's bytes, widened to whole pages) by anonymous memory
        /// on huge pages, and read the file's bytes there: the same bytes, the process's own
        /// from now on. Called before anything borrows the bytes; on an error the caller drops
        /// the map (nothing refers into it yet).
        pub(super) fn read_resident(
            &self,
            file: &std::fs::File,
            ranges: &[std::ops::Range<usize>],
        ) -> std::io::Result<()> {
            let p = page();
            for r in ranges {
                let start = r.start / p * p;
                let end = r.end.min(self.len).next_multiple_of(p).min(self.map_len);
                if end <= start {
                    continue;
                }
                let at = self.base.wrapping_add(start);
                // SAFETY: [at, at + end - start) lies inside this value's mapping, which nothing
                // else refers to yet; MAP_FIXED replaces exactly those pages.
                let m = unsafe {
                    libc::mmap(
                        at as *mut libc::c_void,
                        end - start,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    )
                };
                if m == libc::MAP_FAILED {
                    return Err(last_error());
                }
                crate::hugepage::advise(at, end - start);
                let n = end.min(self.len) - start;
                // SAFETY: the n bytes at `at` are this mapping's, fresh anonymous memory that
                // nothing else borrows.
                let dst = unsafe { std::slice::from_raw_parts_mut(at, n) };
                file.read_exact_at(dst, start as u64)?;
            }
            Ok(())
        }
    }

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new` (with its replaced ranges), unmapped once.
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn msg(e: Error) -> String {
    match e {
        Error::Gguf(m) => m,
        other => other.to_string(),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;
    use crate::DType;

    /// Whether the mapping holding `addr` is backed by a file (its /proc/self/maps line names
    /// a path) rather than anonymous memory.
    fn file_backed(addr: *const u8) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let range = f.next().unwrap();
            let (s, e) = range.split_once('-').unwrap();
            let (s, e) = (
                usize::from_str_radix(s, 16).unwrap(),
                usize::from_str_radix(e, 16).unwrap(),
            );
            if (s..e).contains(&(addr as usize)) {
                return f.nth(4).is_some_and(|p| p.starts_with('/'));
            }
        }
        panic!("{addr:?} is not mapped");
    }

    /// However many tensors a header lists, the resident ranges stay few: those closer than a
    /// huge page merge; a gap of one or more stays.
    #[test]
    fn resident_ranges_merge_what_is_close() {
        let mut w = GgufWriter::new();
        // Resident tensors 4 KiB apart (a looked-up one between each two).
        for i in 0..2000 {
            w.add_tensor(&format!("t{i}.weight"), DType::I8, &[64], &[1; 64])
                .unwrap();
            w.add_tensor(&format!("pad{i}"), DType::I8, &[4096], &[0; 4096])
                .unwrap();
        }
        let big = vec![2u8; 3 << 20];
        w.add_tensor("gap.weight", DType::I8, &[big.len() as u64], &big)
            .unwrap();
        w.add_tensor("last.weight", DType::I8, &[64], &[3; 64])
            .unwrap();
        let bytes = w.to_bytes().unwrap();
        let g = Gguf::parse(&bytes).unwrap();
        let flags = |keep: &dyn Fn(&TensorInfo) -> bool| -> Vec<bool> {
            g.tensors.iter().map(keep).collect()
        };
        let pad = |t: &TensorInfo| t.name.starts_with("pad");
        let all = resident_ranges(&g, bytes.len(), &flags(&|t| !pad(t)));
        assert_eq!(all.len(), 1, "{all:?}");
        let start = g.data_offset as usize;
        assert_eq!(all[0], start..start + g.data_size() as usize);
        let split = resident_ranges(
            &g,
            bytes.len(),
            &flags(&|t| !pad(t) && t.name != "gap.weight"),
        );
        assert_eq!(split.len(), 2, "{split:?}");
        let t = g.tensor("last.weight").unwrap();
        let last = start + t.offset as usize;
        assert_eq!(split[1], last..last + 64);
    }

    /// `open_private_with`: the chosen tensors' bytes are the file's, held in anonymous memory
    /// (where THP is on); the others stay mapped from the file; writes through the private
    /// pointer never reach the file.
    #[test]
    fn open_private_with_reads_chosen_tensors_into_memory() {
        let mb = 1 << 20;
        let fill = |n: usize, k: u8| -> Vec<u8> {
            (0..n)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(k))
                .collect()
        };
        let mut w = GgufWriter::new();
        let (a, b, c) = (fill(5 * mb, 1), fill(3 * mb, 2), fill(5 * mb + 8, 3));
        w.add_tensor("a.weight", DType::I8, &[a.len() as u64], &a)
            .unwrap();
        w.add_tensor("token_embd.weight", DType::I8, &[b.len() as u64], &b)
            .unwrap();
        w.add_tensor("c.weight", DType::I8, &[c.len() as u64], &c)
            .unwrap();
        let bytes = w.to_bytes().unwrap();
        let path = std::env::temp_dir().join(format!("ggweb-resident-{}.gguf", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let f = GgufFile::open_private_with(&path, |g| {
            g.tensors
                .iter()
                .map(|t| t.name != "token_embd.weight")
                .collect()
        })
        .unwrap();
        assert!(f.bytes() == &bytes[..], "the bytes are the file's");
        for (name, want) in [
            ("a.weight", &a),
            ("token_embd.weight", &b),
            ("c.weight", &c),
        ] {
            assert!(f.tensor_data(name).unwrap() == &want[..], "{name}");
        }
        let at = |name: &str| f.tensor_data(name).unwrap().as_ptr();
        if crate::hugepage::available() {
            assert!(!file_backed(at("a.weight")), "a: not read into memory");
            assert!(!file_backed(at("c.weight")), "c: not read into memory");
        }
        assert!(
            file_backed(at("token_embd.weight").wrapping_add(mb)),
            "the embedding was read"
        );
        // Written through the private pointer (as repacking does): the bytes change, the file
        // does not.
        let off = at("c.weight") as usize - f.bytes().as_ptr() as usize;
        let p = f.writable_ptr().unwrap();
        // SAFETY: `off` is inside the mapping; nothing else reads these bytes now.
        unsafe { *p.add(off) ^= 0xFF };
        assert_eq!(f.tensor_data("c.weight").unwrap()[0], c[0] ^ 0xFF);
        drop(f);
        assert!(
            std::fs::read(&path).unwrap() == bytes,
            "the file was written"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
