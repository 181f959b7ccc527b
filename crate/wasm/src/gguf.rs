//! GGUF files for JavaScript: the one streaming reader fed chunk by chunk (fetch body, Blob
//! slices, Node streams), which can also keep the whole file in wasm memory for weights.

use std::sync::Arc;

use js_sys::{Array as JsArray, Object};
use wasm_bindgen::prelude::*;

use crate::JsError;

use super::js::{array_of, i64_js, set, u64_js};
use super::js_err;
use ggweb::backend::cpu::buffer::AlignedBytes;
pub(crate) use ggweb::gguf::stream::FileStream;
use ggweb::gguf::{value::type_name, Array, Gguf, Value};

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
        self.file.header().is_some()
    }

    /// Bytes of the file needed before the header can be parsed further (a hint for readers
    /// that fetch ranges).
    #[wasm_bindgen(getter)]
    pub fn needed(&self) -> f64 {
        self.file.needed() as f64
    }

    /// Bytes pushed so far.
    #[wasm_bindgen(getter)]
    pub fn received(&self) -> f64 {
        self.file.received() as f64
    }

    /// Call at the end of the stream: checks the header is complete and, with `keep_data`, that
    /// every tensor lies inside the bytes received. Returns the header as a plain JS object.
    pub fn finish(&mut self) -> Result<JsValue, JsError> {
        let g = self.file.finish().map_err(js_err)?;
        Ok(header_to_js(
            g,
            self.file.file_len().or(Some(self.file.received())),
        ))
    }

    /// The header as a plain JS object (same as `finish`, without the end-of-file checks).
    pub fn header(&self) -> Result<JsValue, JsError> {
        let g = self
            .file
            .header()
            .ok_or_else(|| JsError::new("invalid GGUF: the header is not complete yet"))?;
        Ok(header_to_js(g, self.file.file_len()))
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
