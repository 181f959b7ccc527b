//! The GGUF writer, in ggml's layout (`gguf_write_to_file`): header, KV pairs, tensor infos
//! (n_dims with trailing 1s dropped, at least 1), zero padding to the alignment, then each
//! tensor's data padded to the alignment, at tightly packed offsets in insertion order.

use std::io::Write;

use super::value::{Array, Value};
use super::{
    pad_u64, tensor_nbytes, DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, KEY_ALIGNMENT, MAX_DIMS,
    MAX_NAME, MAX_STRING_LENGTH,
};
use crate::dtype::DType;
use crate::error::{Error, Result};

struct PendingTensor {
    name: String,
    dtype: DType,
    ne: [u64; 4],
    data: Vec<u8>,
}

/// Builds a GGUF file in memory and writes it out.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

/// ggml's `ggml_n_dims`: the number of dimensions up to the last one that is not 1 (at least 1).
pub fn n_dims(ne: &[u64; 4]) -> u32 {
    ne.iter().rposition(|&n| n != 1).map_or(1, |i| i as u32 + 1)
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Sets `key` to `value`. An existing key keeps its position; a new one is appended.
    /// Keys are validated (non-empty, `general.alignment` a u32 power of two) when writing.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut Self {
        let key = key.into();
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// The value set for `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `general.alignment`.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<&mut Self> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "GGUF alignment {alignment} is not a non-zero power of two"
            )));
        }
        Ok(self.set(KEY_ALIGNMENT, Value::U32(alignment)))
    }

    /// Builder form of [`GgufWriter::set_alignment`].
    pub fn with_alignment(mut self, alignment: u32) -> Result<Self> {
        self.set_alignment(alignment)?;
        Ok(self)
    }

    /// The alignment the file will use.
    pub fn alignment(&self) -> Result<usize> {
        match self.get(KEY_ALIGNMENT) {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => Ok(*a as usize),
            Some(v) => Err(Error::InvalidArgument(format!(
                "{KEY_ALIGNMENT} must be a u32 non-zero power of two, got {v:?}"
            ))),
        }
    }

    /// Adds a tensor of shape `ne` (ggml order, 0 to 4 dims) whose bytes are `data`.
    pub fn add_tensor(&mut self, name: &str, dtype: DType, ne: &[u64], data: &[u8]) -> Result<()> {
        self.add_tensor_owned(name, dtype, ne, data.to_vec())
    }

    /// Like [`GgufWriter::add_tensor`], taking ownership of the data.
    pub fn add_tensor_owned(
        &mut self,
        name: &str,
        dtype: DType,
        ne: &[u64],
        data: Vec<u8>,
    ) -> Result<()> {
        if name.len() >= MAX_NAME {
            return Err(Error::InvalidArgument(format!(
                "tensor name '{name}' has {} bytes; the limit is {}",
                name.len(),
                MAX_NAME - 1
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(Error::InvalidArgument(format!(
                "duplicate tensor name '{name}'"
            )));
        }
        if ne.len() > MAX_DIMS {
            return Err(Error::InvalidArgument(format!(
                "tensor '{name}' has {} dims; at most {MAX_DIMS} are allowed",
                ne.len()
            )));
        }
        let mut ne4 = [1u64; 4];
        ne4[..ne.len()].copy_from_slice(ne);
        let size = tensor_nbytes(name, dtype, &ne4).map_err(Error::InvalidArgument)?;
        if size != data.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "tensor '{name}' ({} {ne:?}) needs {size} bytes, got {}",
                dtype.name(),
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dtype,
            ne: ne4,
            data,
        });
        Ok(())
    }

    /// Number of tensors added.
    pub fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Writes the file. The header is built in memory; tensor data is written straight from
    /// the stored buffers.
    pub fn write_to(&self, mut w: impl Write) -> Result<()> {
        let align = self.alignment()? as u64;
        let header = self.header_bytes(align)?;
        w.write_all(&header)?;
        for t in &self.tensors {
            w.write_all(&t.data)?;
            let len = t.data.len() as u64;
            let pad =
                pad_u64(len, align).ok_or_else(|| Error::Overflow("GGUF padding".into()))? - len;
            write_zeros(&mut w, pad)?;
        }
        Ok(())
    }

    /// The file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Header, KV pairs, tensor infos and the padding before the data section.
    fn header_bytes(&self, align: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            if key.is_empty() {
                return Err(Error::InvalidArgument("empty GGUF metadata key".into()));
            }
            put_string(&mut out, key)?;
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut out, value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(&mut out, &t.name)?;
            let nd = n_dims(&t.ne);
            out.extend_from_slice(&nd.to_le_bytes());
            for n in &t.ne[..nd as usize] {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(&t.dtype.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = offset
                .checked_add(t.data.len() as u64)
                .and_then(|o| pad_u64(o, align))
                .ok_or_else(|| Error::Overflow("GGUF data section offsets".into()))?;
        }
        pad_to(&mut out, align)?;
        Ok(out)
    }
}

fn write_zeros(w: &mut impl Write, mut n: u64) -> Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64);
        w.write_all(&ZEROS[..k as usize])?;
        n -= k;
    }
    Ok(())
}

fn pad_to(out: &mut Vec<u8>, align: u64) -> Result<()> {
    let len = out.len() as u64;
    let target = pad_u64(len, align).ok_or_else(|| Error::Overflow("GGUF padding".into()))?;
    out.resize(
        usize::try_from(target).map_err(|_| Error::Overflow("GGUF padding".into()))?,
        0,
    );
    Ok(())
}

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<()> {
    if s.len() as u64 > MAX_STRING_LENGTH {
        return Err(Error::InvalidArgument(format!(
            "GGUF string of {} bytes exceeds the limit of {MAX_STRING_LENGTH}",
            s.len()
        )));
    }
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_value(out: &mut Vec<u8>, v: &Value) -> Result<()> {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_string(out, s)?,
        Value::Array(a) => {
            out.extend_from_slice(&a.value_type().to_le_bytes());
            put_array_body(out, a)?;
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
    Ok(())
}

/// An array's count and elements (its element type is written by the caller).
fn put_array_body(out: &mut Vec<u8>, a: &Array) -> Result<()> {
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! le {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => le!(v),
        Array::U16(v) => le!(v),
        Array::I16(v) => le!(v),
        Array::U32(v) => le!(v),
        Array::I32(v) => le!(v),
        Array::F32(v) => le!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => {
            for s in v {
                put_string(out, s)?;
            }
        }
        Array::Array(v) => {
            for inner in v {
                out.extend_from_slice(&inner.value_type().to_le_bytes());
                put_array_body(out, inner)?;
            }
        }
        Array::U64(v) => le!(v),
        Array::I64(v) => le!(v),
        Array::F64(v) => le!(v),
    }
    Ok(())
}
