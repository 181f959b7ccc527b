//! A parsed GGUF file that owns its bytes (memory-mapped natively, or a `Vec<u8>`).

use super::{Gguf, TensorInfo};
use crate::error::{Error, Result};

enum Storage {
    #[cfg(not(target_arch = "wasm32"))]
    Mmap(memmap2::Mmap),
    Vec(Vec<u8>),
}

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
        let file = std::fs::File::open(path).map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            ))
        })?;
        // SAFETY: the map is read-only and private to this value; the caveat that another
        // process must not modify the file while it is mapped is documented above.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        let header = Gguf::parse(&map)
            .map_err(|e| Error::Gguf(format!("{}: {}", path.display(), msg(e))))?;
        Ok(GgufFile {
            storage: Storage::Mmap(map),
            header,
        })
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

#[cfg(not(target_arch = "wasm32"))]
fn msg(e: Error) -> String {
    match e {
        Error::Gguf(m) => m,
        other => other.to_string(),
    }
}
