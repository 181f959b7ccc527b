//! GGUF files for JavaScript: the one streaming reader fed chunk by chunk (fetch body, Blob
//! slices, Node streams), which can also keep the whole file in wasm memory for weights.

use std::sync::Arc;

use js_sys::{Array as JsArray, Object};
use wasm_bindgen::prelude::*;

use crate::JsError;

use super::js::{array_of, i64_js, set, u64_js};
use super::js_err;
use ggweb::backend::cpu::buffer::AlignedBytes;
use ggweb::gguf::{value::type_name, Array, Gguf, HeaderParse, Value};

/// The streaming GGUF reader behind both JS entry points, [`GgufStream`] and
/// [`crate::ModelStream`]: `push` chunks in file order; the header is parsed as soon as its bytes
/// are in. With `keep_data` the file lands in ONE [`AlignedBytes`] allocation of its
/// final size (the known length, or else the header's: its data offset + the end of the last
/// tensor, rounded up to the alignment ggml pads tensor data to), which models then use in place
/// as weights: tensor data is copied once (JS chunk → wasm heap) and never assembled twice.
/// Without it, bytes after the header are dropped.
pub(crate) struct FileStream {
    keep_data: bool,
    /// The bytes while there is no final allocation: until the header is complete, when the
    /// length is unknown or the data is not kept.
    head: Vec<u8>,
    data: Option<AlignedBytes>,
    file_len: Option<u64>,
    needed: u64,
    header: Option<Gguf>,
    received: u64,
}

/// The size of a file with header `g` as far as its tensors go.
fn data_end(g: &Gguf) -> u64 {
    g.data_offset.saturating_add(g.data_size())
}

/// [`data_end`] with the padding ggml writes after the last tensor.
fn padded_len(g: &Gguf) -> u64 {
    let align = g.alignment.max(1) as u64;
    data_end(g).div_ceil(align).saturating_mul(align)
}

/// The final allocation for a file of `n` bytes.
fn alloc_file(n: u64) -> ggweb::Result<AlignedBytes> {
    let oom =
        || ggweb::Error::OutOfMemory(format!("cannot hold a file of {n} bytes in wasm memory"));
    AlignedBytes::with_capacity(usize::try_from(n).map_err(|_| oom())?).map_err(|_| oom())
}

impl FileStream {
    /// `file_len`: the total size when known (Content-Length, Blob.size).
    pub(crate) fn new(keep_data: bool, file_len: Option<u64>) -> ggweb::Result<FileStream> {
        let data = match file_len {
            Some(n) if keep_data => Some(alloc_file(n)?),
            _ => None,
        };
        Ok(FileStream {
            keep_data,
            head: Vec::new(),
            data,
            file_len,
            needed: 24,
            header: None,
            received: 0,
        })
    }

    /// Append the next bytes of the file; returns true once the header is parsed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> ggweb::Result<bool> {
        self.received += chunk.len() as u64;
        if let Some(n) = self.file_len {
            if self.received > n {
                return Err(ggweb::Error::Gguf(format!(
                    "received {} bytes but the file has {n}",
                    self.received
                )));
            }
        }
        if self.header.is_some() && !self.keep_data {
            return Ok(true);
        }
        match &mut self.data {
            Some(d) => d.extend_from_slice(chunk).map_err(|_| {
                ggweb::Error::Gguf(format!(
                    "the file is longer than expected: {} bytes received, {} expected",
                    self.received,
                    d.capacity()
                ))
            })?,
            None => {
                self.head.try_reserve(chunk.len()).map_err(|_| {
                    ggweb::Error::OutOfMemory(format!(
                        "cannot hold {} bytes in wasm memory",
                        self.received
                    ))
                })?;
                self.head.extend_from_slice(chunk);
            }
        }
        if self.header.is_some() {
            return Ok(true);
        }
        let have: &[u8] = match &self.data {
            Some(d) => d,
            None => &self.head,
        };
        if (have.len() as u64) < self.needed {
            return Ok(false);
        }
        let parsed = match self.file_len {
            Some(n) => Gguf::parse_header_with_len(have, n),
            None => Gguf::parse_header(have),
        }?;
        match parsed {
            HeaderParse::Complete(g) => {
                if self.keep_data && self.data.is_none() {
                    // Length unknown: the header says how big the file is.
                    let mut d = alloc_file(padded_len(&g).max(self.head.len() as u64))?;
                    d.extend_from_slice(&self.head)?;
                    self.data = Some(d);
                }
                self.head = Vec::new();
                self.header = Some(g);
            }
            HeaderParse::NeedMore(n) => self.needed = n.max(have.len() as u64 + 1),
        }
        Ok(self.header.is_some())
    }

    pub(crate) fn received(&self) -> u64 {
        self.received
    }

    pub(crate) fn header(&self) -> Option<&Gguf> {
        self.header.as_ref()
    }

    /// The total size once known (from the stream's creator, else from the header).
    pub(crate) fn total(&self) -> Option<u64> {
        self.file_len.or_else(|| self.header.as_ref().map(data_end))
    }

    /// At the end of the stream: the header must be complete and every tensor inside the bytes
    /// received (only the header's own claims without `keep_data` and a known length).
    pub(crate) fn finish(&self) -> ggweb::Result<&Gguf> {
        let g = self.finish_header()?;
        match (&self.data, self.file_len) {
            (Some(d), _) => g.check_file_len(d.len() as u64)?,
            (None, Some(n)) if !self.keep_data => g.check_file_len(n)?,
            _ => {}
        }
        Ok(g)
    }

    fn finish_header(&self) -> ggweb::Result<&Gguf> {
        self.header.as_ref().ok_or_else(|| {
            ggweb::Error::Gguf(format!(
                "file of {} bytes is truncated: the header needs at least {} bytes",
                self.received, self.needed
            ))
        })
    }

    /// The parsed header and the whole file, for a model to use in place (once).
    pub(crate) fn take_file(&mut self) -> ggweb::Result<(Gguf, Arc<AlignedBytes>)> {
        if !self.keep_data {
            return Err(ggweb::Error::InvalidArgument(
                "this GGUF was loaded with headerOnly: its tensor data was not kept".into(),
            ));
        }
        let g = self.finish_header()?.clone();
        let d = self.data.take().ok_or_else(|| {
            ggweb::Error::InvalidArgument("the data of this GGUF stream was used".into())
        })?;
        if let Some(n) = self.file_len {
            if d.len() as u64 != n {
                return Err(ggweb::Error::Gguf(format!(
                    "file truncated: received {} of {n} bytes",
                    d.len()
                )));
            }
        }
        g.check_file_len(d.len() as u64)?;
        Ok((g, Arc::new(d)))
    }
}

/// Incremental GGUF reader. `push` chunks in file order; `done` turns true once the header
/// (metadata and tensor infos) is complete. With `keep_data` every byte is kept for use as
/// weights (`Graph.weights`, `Mnist`); otherwise bytes after the header are dropped.
#[wasm_bindgen]
pub struct GgufStream {
    file: FileStream,
}

#[wasm_bindgen]
impl GgufStream {
    /// `file_len`: total size when known (Content-Length, Blob.size), else undefined.
    #[wasm_bindgen(constructor)]
    pub fn new(keep_data: bool, file_len: Option<f64>) -> Result<GgufStream, JsError> {
        let file_len = match file_len {
            Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= 9.007_199_254_740_991e15 => {
                Some(n as u64)
            }
            Some(n) => return Err(JsError::new(&format!("invalid file length {n}"))),
            None => None,
        };
        Ok(GgufStream {
            file: FileStream::new(keep_data, file_len).map_err(js_err)?,
        })
    }

    /// Append the next bytes of the file. Returns `done`.
    pub fn push(&mut self, chunk: &[u8]) -> Result<bool, JsError> {
        self.file.push(chunk).map_err(js_err)
    }

    /// True once the header is parsed.
    #[wasm_bindgen(getter)]
    pub fn done(&self) -> bool {
        self.file.header.is_some()
    }

    /// Bytes of the file needed before the header can be parsed further (a hint for readers
    /// that fetch ranges).
    #[wasm_bindgen(getter)]
    pub fn needed(&self) -> f64 {
        self.file.needed as f64
    }

    /// Bytes pushed so far.
    #[wasm_bindgen(getter)]
    pub fn received(&self) -> f64 {
        self.file.received as f64
    }

    /// Call at the end of the stream: checks the header is complete and, with `keep_data`, that
    /// every tensor lies inside the bytes received. Returns the header as a plain JS object.
    pub fn finish(&mut self) -> Result<JsValue, JsError> {
        let g = self.file.finish().map_err(js_err)?;
        Ok(header_to_js(
            g,
            self.file.file_len.or(Some(self.file.received)),
        ))
    }

    /// The header as a plain JS object (same as `finish`, without the end-of-file checks).
    pub fn header(&self) -> Result<JsValue, JsError> {
        let g = self
            .file
            .header()
            .ok_or_else(|| JsError::new("invalid GGUF: the header is not complete yet"))?;
        Ok(header_to_js(g, self.file.file_len))
    }
}

impl GgufStream {
    /// The parsed header and the whole file (only with `keep_data`, after `finish`).
    pub(crate) fn take_file(&mut self) -> ggweb::Result<(Gguf, Arc<AlignedBytes>)> {
        self.file.take_file()
    }
}

/// Parse a whole GGUF file held in memory and return its header as a plain JS object.
#[wasm_bindgen(js_name = parseGgufHeader)]
pub fn parse_gguf_header(bytes: &[u8]) -> Result<JsValue, JsError> {
    let g = Gguf::parse(bytes).map_err(js_err)?;
    Ok(header_to_js(&g, Some(bytes.len() as u64)))
}

fn value_type_name(v: &Value) -> String {
    match v {
        Value::Array(a) => array_type_name(a),
        other => type_name(other.type_id()).to_string(),
    }
}

fn array_type_name(a: &Array) -> String {
    match a {
        Array::Array(inner) => format!(
            "array<{}>",
            inner
                .first()
                .map(array_type_name)
                .unwrap_or_else(|| "array".into())
        ),
        other => format!("array<{}>", type_name(other.value_type())),
    }
}

fn value_to_js(v: &Value) -> JsValue {
    match v {
        Value::U8(x) => (*x).into(),
        Value::I8(x) => (*x).into(),
        Value::U16(x) => (*x).into(),
        Value::I16(x) => (*x).into(),
        Value::U32(x) => (*x).into(),
        Value::I32(x) => (*x).into(),
        Value::F32(x) => (*x).into(),
        Value::Bool(x) => (*x).into(),
        Value::String(s) => JsValue::from_str(s),
        Value::Array(a) => array_to_js(a).into(),
        Value::U64(x) => u64_js(*x),
        Value::I64(x) => i64_js(*x),
        Value::F64(x) => (*x).into(),
    }
}

fn array_to_js(a: &Array) -> JsArray {
    match a {
        Array::U8(v) => array_of(v, |x| (*x).into()),
        Array::I8(v) => array_of(v, |x| (*x).into()),
        Array::U16(v) => array_of(v, |x| (*x).into()),
        Array::I16(v) => array_of(v, |x| (*x).into()),
        Array::U32(v) => array_of(v, |x| (*x).into()),
        Array::I32(v) => array_of(v, |x| (*x).into()),
        Array::F32(v) => array_of(v, |x| (*x).into()),
        Array::Bool(v) => array_of(v, |x| (*x).into()),
        Array::String(v) => array_of(v, |x| JsValue::from_str(x)),
        Array::Array(v) => array_of(v, |x| array_to_js(x).into()),
        Array::U64(v) => array_of(v, |x| u64_js(*x)),
        Array::I64(v) => array_of(v, |x| i64_js(*x)),
        Array::F64(v) => array_of(v, |x| (*x).into()),
    }
}

/// `{version, alignment, dataOffset, fileSize, architecture, metadata, metadataTypes, tensors}`.
pub(crate) fn header_to_js(g: &Gguf, file_len: Option<u64>) -> JsValue {
    let o = Object::new();
    set(&o, "version", g.version);
    set(&o, "alignment", g.alignment as f64);
    set(&o, "dataOffset", g.data_offset as f64);
    set(
        &o,
        "fileSize",
        file_len
            .map(|n| JsValue::from(n as f64))
            .unwrap_or(JsValue::UNDEFINED),
    );
    set(
        &o,
        "architecture",
        g.architecture()
            .map(JsValue::from_str)
            .unwrap_or(JsValue::NULL),
    );
    let meta = Object::new();
    let types = Object::new();
    for (k, v) in &g.metadata {
        set(&meta, k, value_to_js(v));
        set(&types, k, JsValue::from_str(&value_type_name(v)));
    }
    set(&o, "metadata", meta);
    set(&o, "metadataTypes", types);
    let tensors = array_of(&g.tensors, |t| {
        let ti = Object::new();
        set(&ti, "name", JsValue::from_str(&t.name));
        set(&ti, "type", JsValue::from_str(t.dtype.name()));
        set(&ti, "typeId", t.dtype.id());
        set(&ti, "shape", array_of(t.shape(), |n| (*n as f64).into()));
        set(&ti, "nElements", t.n_elements() as f64);
        set(&ti, "offset", (g.data_offset + t.offset) as f64);
        set(&ti, "relativeOffset", t.offset as f64);
        set(&ti, "byteSize", t.size as f64);
        ti.into()
    });
    set(&o, "tensors", tensors);
    o.into()
}
