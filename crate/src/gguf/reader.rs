//! The validating GGUF reader. See the module docs of [`crate::gguf`] for what it checks.

use std::collections::HashSet;

use super::value::{fixed_size, type_id, type_name, Array, Value};
use super::{
    pad_u64, tensor_nbytes, Gguf, HeaderParse, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC,
    KEY_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_ELEMENTS, MAX_DIMS, MAX_NAME, MAX_STRING_LENGTH,
};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// Why parsing stopped.
enum Stop {
    /// The prefix ended; at least this many bytes (from the file start) are needed.
    Need(u64),
    /// The file is invalid.
    Bad(String),
}

type R<T> = std::result::Result<T, Stop>;

fn bad<T>(msg: String) -> R<T> {
    Err(Stop::Bad(msg))
}

/// Smallest encoding of one KV pair: key length (8) + a 1-byte key + type (4) + a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// Smallest encoding of one tensor info: name length (8) + n_dims (4) + type (4) + offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;
/// Smallest encoding of a string (its length field).
const MIN_STRING_BYTES: u64 = 8;
/// Smallest encoding of an array inside an array: type (4) + count (8).
const MIN_ARRAY_BYTES: u64 = 4 + 8;

struct Reader<'a> {
    /// The bytes available (a prefix of the file, or all of it).
    buf: &'a [u8],
    pos: usize,
    /// The file's total length, when known.
    total: Option<u64>,
}

impl<'a> Reader<'a> {
    fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Checks that `n` more bytes can exist at the current position: an error if the file is
    /// known to be too short, `Need` if only the prefix is.
    fn require(&self, n: u64, what: &str) -> R<()> {
        let Some(end) = self.pos().checked_add(n) else {
            return bad(format!("{what} at offset {}: size {n} overflows", self.pos));
        };
        if let Some(total) = self.total {
            if end > total {
                return bad(format!(
                    "{what} at offset {}: needs {n} bytes but only {} remain in the file",
                    self.pos,
                    total.saturating_sub(self.pos())
                ));
            }
        }
        if end > self.buf.len() as u64 {
            return Err(Stop::Need(end));
        }
        Ok(())
    }

    /// How many elements of at least `min_size` bytes each can still be in the buffer: a bound
    /// for preallocation that never exceeds what the bytes present could hold.
    fn capacity_for(&self, count: u64, min_size: u64) -> usize {
        let left = (self.buf.len() - self.pos) as u64 / min_size.max(1);
        usize::try_from(count.min(left)).unwrap_or(0)
    }

    fn take(&mut self, n: u64, what: &str) -> R<&'a [u8]> {
        self.require(n, what)?;
        // `require` checked pos + n <= buf.len(), so n fits in usize.
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> R<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> R<u32> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> R<u64> {
        self.array::<8>(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &str) -> R<String> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > MAX_STRING_LENGTH {
            return bad(format!(
                "{what} at offset {at}: string length {len} exceeds the limit of {MAX_STRING_LENGTH}"
            ));
        }
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => bad(format!(
                "{what} at offset {at}: string is not valid UTF-8 ({e})"
            )),
        }
    }

    /// Reads `n` fixed-size elements of `size` bytes and converts each with `f`.
    fn fixed_vec<T>(
        &mut self,
        n: u64,
        size: usize,
        what: &str,
        f: impl Fn(&[u8]) -> T,
    ) -> R<Vec<T>> {
        let Some(nbytes) = n.checked_mul(size as u64) else {
            return bad(format!(
                "{what} at offset {}: {n} elements overflow",
                self.pos
            ));
        };
        let bytes = self.take(nbytes, what)?;
        Ok(bytes.chunks_exact(size).map(f).collect())
    }

    fn value(&mut self, ty: u32, what: &str, depth: usize) -> R<Value> {
        Ok(match ty {
            type_id::U8 => Value::U8(self.array::<1>(what)?[0]),
            type_id::I8 => Value::I8(i8::from_le_bytes(self.array::<1>(what)?)),
            type_id::U16 => Value::U16(u16::from_le_bytes(self.array::<2>(what)?)),
            type_id::I16 => Value::I16(i16::from_le_bytes(self.array::<2>(what)?)),
            type_id::U32 => Value::U32(self.u32(what)?),
            type_id::I32 => Value::I32(i32::from_le_bytes(self.array::<4>(what)?)),
            type_id::F32 => Value::F32(f32::from_le_bytes(self.array::<4>(what)?)),
            // Any non-zero byte is true, as in C.
            type_id::BOOL => Value::Bool(self.array::<1>(what)?[0] != 0),
            type_id::STRING => Value::String(self.string(what)?),
            type_id::ARRAY => {
                let at = self.pos;
                let elem = self.u32(what)?;
                Value::Array(self.array_body(elem, at, what, depth + 1)?)
            }
            type_id::U64 => Value::U64(self.u64(what)?),
            type_id::I64 => Value::I64(i64::from_le_bytes(self.array::<8>(what)?)),
            type_id::F64 => Value::F64(f64::from_le_bytes(self.array::<8>(what)?)),
            _ => {
                return bad(format!(
                    "{what} at offset {}: unknown value type {ty}",
                    self.pos.saturating_sub(4)
                ))
            }
        })
    }

    /// Reads an array's count and elements (its element type `elem` was read at offset `at`).
    fn array_body(&mut self, elem: u32, at: usize, what: &str, depth: usize) -> R<Array> {
        if depth > MAX_ARRAY_DEPTH {
            return bad(format!(
                "{what} at offset {at}: arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
            ));
        }
        if elem > type_id::F64 {
            return bad(format!(
                "{what} at offset {at}: unknown array element type {elem}"
            ));
        }
        let n = self.u64(what)?;
        if n > MAX_ARRAY_ELEMENTS {
            return bad(format!(
                "{what} at offset {at}: array of {n} elements exceeds the limit of {MAX_ARRAY_ELEMENTS}"
            ));
        }
        let what_n = format!("{what} (array of {n} {})", type_name(elem));
        let what = what_n.as_str();
        let le2 = |b: &[u8]| [b[0], b[1]];
        let le4 = |b: &[u8]| [b[0], b[1], b[2], b[3]];
        let le8 = |b: &[u8]| [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        if let Some(size) = fixed_size(elem) {
            return Ok(match elem {
                type_id::U8 => Array::U8(self.fixed_vec(n, size, what, |b| b[0])?),
                type_id::I8 => Array::I8(self.fixed_vec(n, size, what, |b| b[0] as i8)?),
                type_id::BOOL => Array::Bool(self.fixed_vec(n, size, what, |b| b[0] != 0)?),
                type_id::U16 => {
                    Array::U16(self.fixed_vec(n, size, what, |b| u16::from_le_bytes(le2(b)))?)
                }
                type_id::I16 => {
                    Array::I16(self.fixed_vec(n, size, what, |b| i16::from_le_bytes(le2(b)))?)
                }
                type_id::U32 => {
                    Array::U32(self.fixed_vec(n, size, what, |b| u32::from_le_bytes(le4(b)))?)
                }
                type_id::I32 => {
                    Array::I32(self.fixed_vec(n, size, what, |b| i32::from_le_bytes(le4(b)))?)
                }
                type_id::F32 => {
                    Array::F32(self.fixed_vec(n, size, what, |b| f32::from_le_bytes(le4(b)))?)
                }
                type_id::U64 => {
                    Array::U64(self.fixed_vec(n, size, what, |b| u64::from_le_bytes(le8(b)))?)
                }
                type_id::I64 => {
                    Array::I64(self.fixed_vec(n, size, what, |b| i64::from_le_bytes(le8(b)))?)
                }
                _ => Array::F64(self.fixed_vec(n, size, what, |b| f64::from_le_bytes(le8(b)))?),
            });
        }
        if elem == type_id::STRING {
            // Lower bound: every string has at least its 8-byte length.
            self.require(n.saturating_mul(MIN_STRING_BYTES), what)?;
            let mut v = Vec::with_capacity(self.capacity_for(n, MIN_STRING_BYTES));
            for _ in 0..n {
                v.push(self.string(what)?);
            }
            Ok(Array::String(v))
        } else {
            self.require(n.saturating_mul(MIN_ARRAY_BYTES), what)?;
            let mut v = Vec::with_capacity(self.capacity_for(n, MIN_ARRAY_BYTES));
            for _ in 0..n {
                let at = self.pos;
                let inner = self.u32(what)?;
                v.push(self.array_body(inner, at, what, depth + 1)?);
            }
            Ok(Array::Array(v))
        }
    }
}

pub(super) fn parse(bytes: &[u8], total: Option<u64>) -> Result<HeaderParse> {
    // Bytes past a known file length are not part of the file.
    let buf = match total {
        Some(t) if (bytes.len() as u64) > t => &bytes[..t as usize],
        _ => bytes,
    };
    let mut r = Reader { buf, pos: 0, total };
    match parse_inner(&mut r) {
        Ok(g) => Ok(HeaderParse::Complete(g)),
        Err(Stop::Need(n)) => Ok(HeaderParse::NeedMore(n)),
        Err(Stop::Bad(msg)) => Err(Error::Gguf(msg)),
    }
}

fn parse_inner(r: &mut Reader<'_>) -> R<Gguf> {
    let magic = r.array::<4>("magic")?;
    if magic != GGUF_MAGIC {
        return bad(format!(
            "bad magic {:?} (bytes {magic:02x?}), expected \"GGUF\"",
            String::from_utf8_lossy(&magic)
        ));
    }
    let version = r.u32("version")?;
    if version != 0 && version & 0xFFFF == 0 {
        return bad(format!(
            "version {version:#010x} at offset 4: the file has the wrong endianness"
        ));
    }
    match version {
        0 => return bad("version 0 at offset 4 is invalid".into()),
        1 => return bad("version 1 at offset 4: GGUFv1 is no longer supported".into()),
        2 | 3 => {}
        v => {
            return bad(format!(
                "version {v} at offset 4 is not supported (2 and 3 are)"
            ))
        }
    }
    let n_tensors = r.u64("n_tensors")?;
    let n_kv = r.u64("n_kv")?;
    for (name, n) in [("n_tensors", n_tensors), ("n_kv", n_kv)] {
        if n > i64::MAX as u64 {
            return bad(format!("{name} = {n} is negative as i64"));
        }
    }
    // Each KV and tensor info has a minimum encoded size; the counts must fit in what remains.
    let min_bytes = n_kv
        .checked_mul(MIN_KV_BYTES)
        .and_then(|a| Some((a, n_tensors.checked_mul(MIN_TENSOR_INFO_BYTES)?)))
        .and_then(|(a, b)| a.checked_add(b));
    let Some(min_bytes) = min_bytes else {
        return bad(format!(
            "n_tensors = {n_tensors} / n_kv = {n_kv} are impossibly large"
        ));
    };
    if let Some(total) = r.total {
        if min_bytes > total.saturating_sub(r.pos()) {
            return bad(format!(
                "n_tensors = {n_tensors} and n_kv = {n_kv} need at least {min_bytes} bytes, \
                 but only {} remain after the header",
                total.saturating_sub(r.pos())
            ));
        }
    }

    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(r.capacity_for(n_kv, MIN_KV_BYTES));
    let mut keys: HashSet<String> = HashSet::with_capacity(metadata.capacity());
    for i in 0..n_kv {
        let at = r.pos;
        let key = r.string(&format!("key of KV {i}"))?;
        if key.is_empty() {
            return bad(format!("KV {i} at offset {at}: empty key"));
        }
        if keys.contains(&key) {
            return bad(format!("KV {i} at offset {at}: duplicate key '{key}'"));
        }
        let what = format!("value of '{key}'");
        let ty = r.u32(&what)?;
        let value = r.value(ty, &what, 0)?;
        keys.insert(key.clone());
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == KEY_ALIGNMENT) {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if *a != 0 && a.is_power_of_two() => *a as usize,
        Some((_, Value::U32(a))) => {
            return bad(format!(
                "{KEY_ALIGNMENT} = {a} is not a non-zero power of two"
            ))
        }
        Some((_, v)) => {
            return bad(format!(
                "{KEY_ALIGNMENT} has type {}, expected u32",
                v.type_name()
            ))
        }
    };

    let mut tensors: Vec<TensorInfo> =
        Vec::with_capacity(r.capacity_for(n_tensors, MIN_TENSOR_INFO_BYTES));
    let mut names: HashSet<String> = HashSet::with_capacity(tensors.capacity());
    for i in 0..n_tensors {
        let at = r.pos;
        let name = r.string(&format!("name of tensor {i}"))?;
        if name.len() >= MAX_NAME {
            return bad(format!(
                "tensor {i} at offset {at}: name of {} bytes is too long (the limit is {})",
                name.len(),
                MAX_NAME - 1
            ));
        }
        if names.contains(&name) {
            return bad(format!(
                "tensor {i} at offset {at}: duplicate tensor name '{name}'"
            ));
        }
        let what = format!("tensor '{name}'");
        let dims_at = r.pos;
        let n_dims = r.u32(&format!("n_dims of {what}"))?;
        if n_dims as usize > MAX_DIMS {
            return bad(format!(
                "{what}: n_dims = {n_dims} at offset {dims_at} exceeds {MAX_DIMS}"
            ));
        }
        let mut ne = [1u64; 4];
        for (j, d) in ne.iter_mut().enumerate().take(n_dims as usize) {
            *d = r.u64(&format!("ne[{j}] of {what}"))?;
        }
        let type_at = r.pos;
        let type_id = r.u32(&format!("type of {what}"))?;
        let dtype = match DType::from_id(type_id) {
            Ok(t) => t,
            Err(_) => {
                return bad(format!(
                    "{what}: unknown or removed tensor type {type_id} at offset {type_at}"
                ))
            }
        };
        let size = tensor_nbytes(&name, dtype, &ne).map_err(Stop::Bad)?;
        let offset = r.u64(&format!("offset of {what}"))?;
        names.insert(name.clone());
        tensors.push(TensorInfo {
            name,
            dtype,
            ne,
            n_dims,
            offset,
            size,
        });
    }

    let Some(data_offset) = pad_u64(r.pos(), alignment as u64) else {
        return bad("data section offset overflows".into());
    };
    let g = Gguf {
        version,
        alignment,
        metadata,
        tensors,
        data_offset,
    };
    check_data_layout(&g, r.total).map_err(Stop::Bad)?;
    Ok(g)
}

/// Offsets aligned, tensors non-overlapping, and (when the file length is known) the data
/// section and every tensor inside the file. Unlike ggml we do not require tight packing in
/// declaration order: any order and gaps are accepted.
pub(super) fn check_data_layout(g: &Gguf, total: Option<u64>) -> std::result::Result<(), String> {
    let align = g.alignment as u64;
    if align == 0 || !align.is_power_of_two() {
        return Err(format!("alignment {align} is not a non-zero power of two"));
    }
    if g.data_offset.checked_rem(align) != Some(0) {
        return Err(format!(
            "data section offset {} is not aligned to {align}",
            g.data_offset
        ));
    }
    // A file without tensors may end before the padding (llama.cpp's vocab-only files do).
    if let (Some(total), false) = (total, g.tensors.is_empty()) {
        if g.data_offset > total {
            return Err(format!(
                "data section starts at {} past the end of the file ({total} bytes)",
                g.data_offset
            ));
        }
    }
    let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(g.tensors.len());
    for (i, t) in g.tensors.iter().enumerate() {
        if t.offset.checked_rem(align) != Some(0) {
            return Err(format!(
                "tensor '{}': offset {} is not a multiple of the alignment {align}",
                t.name, t.offset
            ));
        }
        let end = t
            .offset
            .checked_add(t.size)
            .filter(|e| g.data_offset.checked_add(*e).is_some())
            .ok_or_else(|| {
                format!(
                    "tensor '{}': offset {} + size {} overflows",
                    t.name, t.offset, t.size
                )
            })?;
        if let Some(total) = total {
            let avail = total.saturating_sub(g.data_offset);
            if end > avail {
                return Err(format!(
                    "tensor '{}': data [{}, {end}) of the data section at {} lies beyond the end \
                     of the file ({total} bytes)",
                    t.name, t.offset, g.data_offset
                ));
            }
        }
        // Empty tensors occupy no bytes and cannot overlap anything.
        if t.size > 0 {
            spans.push((t.offset, end, i));
        }
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b.0 < a.1 {
            return Err(format!(
                "tensors '{}' [{}, {}) and '{}' [{}, {}) overlap",
                g.tensors[a.2].name, a.0, a.1, g.tensors[b.2].name, b.0, b.1
            ));
        }
    }
    Ok(())
}
