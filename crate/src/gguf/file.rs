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
/// every page not written stay as they are.
#[cfg(not(target_arch = "wasm32"))]
struct PrivateMap {
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
        let path = path.as_ref();
        let file = open_file(path)?;
        // SAFETY: private to this value, copy-on-write (writes never reach the file); the
        // caveat of [`GgufFile::open`] about other processes holds.
        let mut map = unsafe { memmap2::MmapOptions::new().map_copy(&file) }?;
        let header = parse_at(path, &map)?;
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
            #[cfg(not(target_arch = "wasm32"))]
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

#[cfg(not(target_arch = "wasm32"))]
fn msg(e: Error) -> String {
    match e {
        Error::Gguf(m) => m,
        other => other.to_string(),
    }
}
