//! GGUF headers for JavaScript: a streaming parser fed chunk by chunk (fetch body, Blob slices,
//! Node streams) that can also keep the whole file in wasm memory for weights, so tensor data
//! is copied once (JS chunk → wasm heap) and never assembled twice.

use std::sync::Arc;

use js_sys::{Array as JsArray, Object};
use wasm_bindgen::prelude::*;

use super::js::{array_of, i64_js, set, u64_js};
use super::js_err;
use ggweb::gguf::{value::type_name, Array, Gguf, HeaderParse, Value};

/// Incremental GGUF reader. `push` chunks in file order; `done` turns true once the header
/// (metadata and tensor infos) is complete. With `keep_data` every byte is kept for use as
/// weights (`Graph.weights`, `Mnist`); otherwise bytes after the header are dropped.
#[wasm_bindgen]
pub struct GgufStream {
    buf: Vec<u8>,
    keep_data: bool,
    file_len: Option<u64>,
    needed: u64,
    header: Option<Gguf>,
    received: u64,
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
        let mut buf = Vec::new();
        if keep_data {
            if let Some(n) = file_len {
                let n = usize::try_from(n).map_err(|_| {
                    JsError::new(&format!("a file of {n} bytes does not fit in wasm memory"))
                })?;
                buf.try_reserve_exact(n).map_err(|_| {
                    JsError::new(&format!(
                        "out of memory: cannot hold a file of {n} bytes in wasm memory"
                    ))
                })?;
            }
        }
        Ok(GgufStream {
            buf,
            keep_data,
            file_len,
            needed: 24,
            header: None,
            received: 0,
        })
    }

    /// Append the next bytes of the file. Returns `done`.
    pub fn push(&mut self, chunk: &[u8]) -> Result<bool, JsError> {
        self.received += chunk.len() as u64;
        if let Some(n) = self.file_len {
            if self.received > n {
                return Err(JsError::new(&format!(
                    "received {} bytes but the file has {n}",
                    self.received
                )));
            }
        }
        if self.header.is_some() && !self.keep_data {
            return Ok(true);
        }
        if self.buf.try_reserve(chunk.len()).is_err() {
            return Err(JsError::new(&format!(
                "out of memory: cannot hold {} bytes in wasm memory",
                self.received
            )));
        }
        self.buf.extend_from_slice(chunk);
        if self.header.is_none() && self.buf.len() as u64 >= self.needed {
            let parsed = match self.file_len {
                Some(n) => Gguf::parse_header_with_len(&self.buf, n),
                None => Gguf::parse_header(&self.buf),
            }
            .map_err(js_err)?;
            match parsed {
                HeaderParse::Complete(g) => {
                    self.header = Some(g);
                    if !self.keep_data {
                        self.buf = Vec::new();
                    }
                }
                HeaderParse::NeedMore(n) => self.needed = n.max(self.buf.len() as u64 + 1),
            }
        }
        Ok(self.header.is_some())
    }

    /// True once the header is parsed.
    #[wasm_bindgen(getter)]
    pub fn done(&self) -> bool {
        self.header.is_some()
    }

    /// Bytes of the file needed before the header can be parsed further (a hint for readers
    /// that fetch ranges).
    #[wasm_bindgen(getter)]
    pub fn needed(&self) -> f64 {
        self.needed as f64
    }

    /// Bytes pushed so far.
    #[wasm_bindgen(getter)]
    pub fn received(&self) -> f64 {
        self.received as f64
    }

    /// Call at the end of the stream: checks the header is complete and, with `keep_data`, that
    /// every tensor lies inside the bytes received. Returns the header as a plain JS object.
    pub fn finish(&mut self) -> Result<JsValue, JsError> {
        let g = self.header.as_ref().ok_or_else(|| {
            JsError::new(&format!(
                "invalid GGUF: file of {} bytes is truncated: the header needs at least {} bytes",
                self.received, self.needed
            ))
        })?;
        if self.keep_data {
            g.check_file_len(self.buf.len() as u64).map_err(js_err)?;
        } else if let Some(n) = self.file_len {
            g.check_file_len(n).map_err(js_err)?;
        }
        Ok(header_to_js(g, self.file_len.or(Some(self.received))))
    }

    /// The header as a plain JS object (same as `finish`, without the end-of-file checks).
    pub fn header(&self) -> Result<JsValue, JsError> {
        let g = self
            .header
            .as_ref()
            .ok_or_else(|| JsError::new("invalid GGUF: the header is not complete yet"))?;
        Ok(header_to_js(g, self.file_len))
    }
}

impl GgufStream {
    /// The parsed header and the whole file (only with `keep_data`, after `finish`).
    pub(crate) fn take_file(&mut self) -> ggweb::Result<(Gguf, Arc<Vec<u8>>)> {
        if !self.keep_data {
            return Err(ggweb::Error::InvalidArgument(
                "this GGUF was loaded with headerOnly: its tensor data was not kept".into(),
            ));
        }
        let g = self.header.clone().ok_or_else(|| {
            ggweb::Error::Gguf("the header is not complete (truncated file)".into())
        })?;
        g.check_file_len(self.buf.len() as u64)?;
        Ok((g, Arc::new(std::mem::take(&mut self.buf))))
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
