//! GGUF v2/v3: a validating reader and a writer.
//!
//! Layout (little-endian): magic `GGUF`, version u32, n_tensors u64, n_kv u64, the KV pairs
//! (key string, value type u32, value), the tensor infos (name string, n_dims u32, ne\[n_dims\] u64,
//! type u32, offset u64), zero padding to the alignment, then the data section; each tensor's data
//! starts at `data_offset + offset`. Strings are a u64 length and UTF-8 bytes (no terminator).
//!
//! The reader ([`Gguf::parse`], [`Gguf::parse_header`]) never panics on bad input and never makes
//! an allocation sized by a count it has not checked against the bytes that remain. Every
//! rejection is an [`Error::Gguf`](crate::Error::Gguf) whose message names the field and the byte
//! offset. What it validates follows ggml's `gguf.cpp`, with one deliberate relaxation: ggml
//! requires tensors to be packed tightly in declaration order; we accept any order and gaps, as
//! long as every tensor's offset is aligned, its data lies inside the file and no two tensors
//! overlap. We also accept arrays of arrays (ggml rejects them; gguf-py writes them), up to
//! [`MAX_ARRAY_DEPTH`] levels.

mod file;
mod reader;
pub mod stream;
pub mod value;
mod writer;

pub use file::GgufFile;
pub use value::{Array, Value};
pub use writer::{n_dims, GgufWriter};

use crate::dtype::DType;
use crate::error::{Error, Result};

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: usize = 32;
/// The version the writer produces.
pub const GGUF_VERSION: u32 = 3;
/// ggml's `GGML_MAX_NAME`: tensor names must be shorter than this (in bytes).
pub const MAX_NAME: usize = 64;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// ggml's `GGUF_MAX_STRING_LENGTH` (1 GiB).
pub const MAX_STRING_LENGTH: u64 = 1 << 30;
/// ggml's `GGUF_MAX_ARRAY_ELEMENTS` (2^30).
pub const MAX_ARRAY_ELEMENTS: u64 = 1 << 30;
/// Deepest nesting of arrays inside arrays that the reader accepts (1 = no nesting).
pub const MAX_ARRAY_DEPTH: usize = 8;
/// The metadata key that sets the alignment (must be a u32 power of two).
pub const KEY_ALIGNMENT: &str = "general.alignment";
pub const KEY_ARCHITECTURE: &str = "general.architecture";

/// One tensor's description from the tensor-info section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Elements per dimension, ggml order (ne\[0\] is the contiguous one); unused dims are 1.
    pub ne: [u64; 4],
    /// Dimensions as stored in the file (0..=4).
    pub n_dims: u32,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        // Checked at parse / construction time not to overflow.
        self.ne.iter().fold(1u64, |a, &n| a.saturating_mul(n))
    }

    /// The used dimensions, `&ne[..max(n_dims, 1)]`.
    pub fn shape(&self) -> &[u64] {
        let n = (self.n_dims as usize).clamp(1, MAX_DIMS);
        &self.ne[..n]
    }
}

/// Validates `ne` for `dtype` and returns the data size in bytes.
/// Checks what ggml checks: element count within i64, `ne[0]` a multiple of the block size,
/// byte size without overflow.
pub(crate) fn tensor_nbytes(
    name: &str,
    dtype: DType,
    ne: &[u64; 4],
) -> std::result::Result<u64, String> {
    let mut count: u64 = 1;
    for (i, &n) in ne.iter().enumerate() {
        if n > i64::MAX as u64 {
            return Err(format!("tensor '{name}': ne[{i}] = {n} is negative as i64"));
        }
        count = count
            .checked_mul(n)
            .filter(|&c| c <= i64::MAX as u64)
            .ok_or_else(|| format!("tensor '{name}': element count {ne:?} overflows i64"))?;
    }
    let bs = dtype.block_size() as u64;
    if ne[0].checked_rem(bs) != Some(0) {
        return Err(format!(
            "tensor '{name}': ne[0] = {} is not a multiple of {}'s block size {bs}",
            ne[0],
            dtype.name()
        ));
    }
    let row = (ne[0] / bs)
        .checked_mul(dtype.type_size() as u64)
        .ok_or_else(|| format!("tensor '{name}': row size overflows"))?;
    [ne[1], ne[2], ne[3]]
        .iter()
        .try_fold(row, |a, &n| a.checked_mul(n))
        .filter(|&s| s <= i64::MAX as u64)
        .ok_or_else(|| {
            format!(
                "tensor '{name}': byte size of {ne:?} x {} overflows",
                dtype.name()
            )
        })
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub(crate) fn pad_u64(x: u64, align: u64) -> Option<u64> {
    let rem = x % align;
    if rem == 0 {
        Some(x)
    } else {
        x.checked_add(align - rem)
    }
}

/// Header, metadata and tensor infos of a GGUF file (no tensor data).
#[derive(Debug, Clone, PartialEq)]
pub struct Gguf {
    pub version: u32,
    pub alignment: usize,
    /// Metadata in file order; keys are unique.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section (the header's end padded to `alignment`).
    pub data_offset: u64,
}

/// Result of parsing a prefix of a file that may not have arrived completely.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderParse {
    /// The whole header (metadata and tensor infos) was in the prefix.
    Complete(Gguf),
    /// The header continues past the prefix: at least this many bytes (counted from the
    /// start of the file) are needed before parsing can get further.
    NeedMore(u64),
}

impl Gguf {
    /// Parses a complete file held in `bytes`: header, metadata and tensor infos, and checks that
    /// every tensor's data lies inside `bytes`. Tensor data is not copied.
    pub fn parse(bytes: &[u8]) -> Result<Gguf> {
        match reader::parse(bytes, Some(bytes.len() as u64))? {
            HeaderParse::Complete(g) => Ok(g),
            // Cannot happen: with the total length known, a short read is an error.
            HeaderParse::NeedMore(n) => Err(Error::Gguf(format!(
                "file of {} bytes is truncated: {n} bytes needed",
                bytes.len()
            ))),
        }
    }

    /// Parses the header from `prefix`, the first bytes of a file whose total length is unknown
    /// (streaming). Returns [`HeaderParse::NeedMore`] when the prefix ends inside the header.
    /// Counts that would be rejected against a known file length are instead reported as bytes
    /// needed; call [`Gguf::check_file_len`] once the length is known.
    pub fn parse_header(prefix: &[u8]) -> Result<HeaderParse> {
        reader::parse(prefix, None)
    }

    /// Like [`Gguf::parse_header`] for a file of `file_len` bytes (e.g. from Content-Length):
    /// every count is checked against the length, and tensor data must lie within it.
    pub fn parse_header_with_len(prefix: &[u8], file_len: u64) -> Result<HeaderParse> {
        reader::parse(prefix, Some(file_len))
    }

    /// Checks that the data section and every tensor's data lie inside a file of `file_len` bytes.
    pub fn check_file_len(&self, file_len: u64) -> Result<()> {
        reader::check_data_layout(self, Some(file_len)).map_err(Error::Gguf)
    }

    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// `general.architecture`, when present and a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get(KEY_ARCHITECTURE).and_then(Value::as_str)
    }

    /// The bytes of tensor `t` inside `file` (the whole file, starting at byte 0).
    pub fn tensor_data<'a>(&self, file: &'a [u8], t: &TensorInfo) -> Result<&'a [u8]> {
        let range = self
            .data_offset
            .checked_add(t.offset)
            .and_then(|start| Some((start, start.checked_add(t.size)?)))
            .and_then(|(s, e)| Some((usize::try_from(s).ok()?, usize::try_from(e).ok()?)));
        match range {
            Some((s, e)) if e <= file.len() => Ok(&file[s..e]),
            _ => Err(Error::Gguf(format!(
                "tensor '{}': data at {}+{} ({} bytes) is outside the file of {} bytes",
                t.name,
                self.data_offset,
                t.offset,
                t.size,
                file.len()
            ))),
        }
    }

    /// Total bytes of the data section up to the end of the last tensor.
    pub fn data_size(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.offset.saturating_add(t.size))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_dims_drops_trailing_ones() {
        assert_eq!(writer::n_dims(&[1, 1, 1, 1]), 1);
        assert_eq!(writer::n_dims(&[5, 1, 1, 1]), 1);
        assert_eq!(writer::n_dims(&[1, 1, 8, 1]), 3);
        assert_eq!(writer::n_dims(&[2, 3, 4, 5]), 4);
    }

    #[test]
    fn tensor_sizes() {
        assert_eq!(tensor_nbytes("t", DType::Q4_0, &[64, 3, 1, 1]), Ok(108));
        assert_eq!(tensor_nbytes("t", DType::F32, &[0, 7, 1, 1]), Ok(0));
        assert!(tensor_nbytes("t", DType::Q4_K, &[128, 1, 1, 1]).is_err());
        assert!(tensor_nbytes("t", DType::F32, &[1 << 40, 1 << 30, 1, 1]).is_err());
        assert!(
            tensor_nbytes("t", DType::F64, &[1 << 61, 1, 1, 1]).is_err(),
            "bytes overflow i64"
        );
    }

    #[test]
    fn streaming_prefixes() {
        let mut w = GgufWriter::new();
        w.set("general.architecture", "x");
        w.add_tensor("t", DType::F32, &[2], &[0; 8]).unwrap();
        let bytes = w.to_bytes().unwrap();
        assert_eq!(Gguf::parse_header(&[]).unwrap(), HeaderParse::NeedMore(4));
        assert_eq!(
            Gguf::parse_header(b"GGUF").unwrap(),
            HeaderParse::NeedMore(8)
        );
        assert!(Gguf::parse_header(b"GGML").is_err());
        // The key's length is known after 32 bytes: 20 bytes of key follow.
        assert_eq!(
            Gguf::parse_header(&bytes[..32]).unwrap(),
            HeaderParse::NeedMore(52)
        );
        let g = Gguf::parse(&bytes).unwrap();
        let HeaderParse::Complete(h) =
            Gguf::parse_header(&bytes[..g.data_offset as usize]).unwrap()
        else {
            panic!("header incomplete")
        };
        assert_eq!(h, g);
        // The data is not there yet.
        assert!(h.check_file_len(g.data_offset).is_err());
        assert!(h.check_file_len(bytes.len() as u64).is_ok());
        assert!(Gguf::parse(&bytes[..g.data_offset as usize + 7]).is_err());
        assert!(
            Gguf::parse(&bytes[..g.data_offset as usize + 8]).is_ok(),
            "final padding is optional"
        );
        assert!(Gguf::parse_header_with_len(&bytes, 40).is_err());
    }

    #[test]
    fn writer_set_replaces_in_place() {
        let mut w = GgufWriter::new();
        w.set("a", 1u32).set("b", 2u32).set("a", "x");
        let g = Gguf::parse(&w.to_bytes().unwrap()).unwrap();
        assert_eq!(g.metadata[0], ("a".to_string(), Value::from("x")));
        assert_eq!(g.get("b").and_then(Value::as_u32), Some(2));
        assert_eq!(g.data_offset, g.data_offset.div_ceil(32) * 32);
    }
}
