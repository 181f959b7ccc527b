//! GGUF reader/writer: real files, round trips, a malformed corpus and a byte-flip fuzz loop.

use std::path::PathBuf;

use ggweb::gguf::{Array, Gguf, GgufFile, GgufWriter, HeaderParse, Value};
use ggweb::{DType, Error};

fn fixtures() -> PathBuf {
    // The workspace root is one level above this crate; ../shared sits next to it.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures")
}

fn read_fixture(rel: &str) -> Vec<u8> {
    let p = fixtures().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("fixture {} is missing: {e}", p.display()))
}

fn gguf_err(r: ggweb::Result<Gguf>) -> String {
    match r {
        Err(Error::Gguf(m)) => m,
        Err(e) => panic!("expected Error::Gguf, got {e:?}"),
        Ok(g) => panic!("expected an error, parsed {g:?}"),
    }
}

#[track_caller]
fn expect_err(bytes: &[u8], needle: &str) {
    let m = gguf_err(Gguf::parse(bytes));
    assert!(
        m.contains(needle),
        "error {m:?} does not mention {needle:?}"
    );
}

// ---------------------------------------------------------------- real files

#[test]
fn mnist_fc_model() {
    let path = fixtures().join("models/mnist-fc-f32.gguf");
    let f = GgufFile::open(&path).expect("open mnist-fc");
    let g = f.header();
    assert_eq!(g.version, 3);
    assert_eq!(g.architecture(), Some("mnist-fc"));
    let want: [(&str, &[u64]); 4] = [
        ("fc1.weight", &[784, 500]),
        ("fc1.bias", &[500]),
        ("fc2.weight", &[500, 10]),
        ("fc2.bias", &[10]),
    ];
    assert_eq!(g.tensors.len(), want.len());
    for (name, shape) in want {
        let t = g.tensor(name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(t.dtype, DType::F32);
        assert_eq!(t.shape(), shape, "{name}");
        assert_eq!(t.size, shape.iter().product::<u64>() * 4);
        let data = f.tensor_data(name).unwrap();
        assert_eq!(data.len() as u64, t.size);
        assert!(data
            .chunks_exact(4)
            .all(|c| f32::from_le_bytes(c.try_into().unwrap()).is_finite()));
    }
    assert_eq!(
        rewrite(g, f.bytes()),
        f.bytes(),
        "writer reproduces ggml's bytes"
    );
}

#[test]
fn mnist_cnn_model() {
    let bytes = read_fixture("models/mnist-cnn-f32.gguf");
    let f = GgufFile::from_bytes(bytes.clone()).expect("parse mnist-cnn");
    let g = f.header();
    assert_eq!(g.architecture(), Some("mnist-cnn"));
    let want: [(&str, [u64; 4]); 6] = [
        ("conv1.kernel", [3, 3, 1, 8]),
        ("conv1.bias", [1, 1, 8, 1]),
        ("conv2.kernel", [3, 3, 8, 16]),
        ("conv2.bias", [1, 1, 16, 1]),
        ("dense.weight", [784, 10, 1, 1]),
        ("dense.bias", [10, 1, 1, 1]),
    ];
    assert_eq!(g.tensors.len(), want.len());
    for (name, ne) in want {
        let t = g.tensor(name).unwrap();
        assert_eq!(t.ne, ne, "{name}");
        assert_eq!(t.dtype, DType::F32);
        assert_eq!(
            f.tensor_data(name).unwrap().len() as u64,
            ne.iter().product::<u64>() * 4
        );
    }
    // This file stores all 4 dims of conv1.bias; ggml (and our writer) would drop the trailing 1.
    assert_eq!(g.tensor("conv1.bias").unwrap().n_dims, 4);
    let out = rewrite(g, &bytes);
    let g2 = Gguf::parse(&out).unwrap();
    assert_eq!(g2.tensor("conv1.bias").unwrap().n_dims, 3);
    assert!(g2.data_offset <= g.data_offset, "two ne entries fewer");
    for (a, b) in g.tensors.iter().zip(&g2.tensors) {
        assert_eq!(
            (&a.name, a.ne, a.offset, a.size),
            (&b.name, b.ne, b.offset, b.size)
        );
        assert_eq!(
            g.tensor_data(&bytes, a).unwrap(),
            g2.tensor_data(&out, b).unwrap()
        );
    }
}

#[test]
fn vocab_files() {
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(fixtures().join("vocab"))
        .expect("fixtures/vocab is missing")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    entries.sort();
    for path in entries {
        let bytes = std::fs::read(&path).unwrap();
        let g = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(g.tensors.is_empty());
        let tokens = g
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .and_then(Array::as_strings)
            .unwrap_or_else(|| panic!("{}: no token strings", path.display()));
        assert!(tokens.len() > 1000, "{}", path.display());
        assert!(g
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .is_some());
        for key in ["tokenizer.ggml.scores", "tokenizer.ggml.token_type"] {
            if let Some(v) = g.get(key) {
                assert_eq!(v.as_array().unwrap().len(), tokens.len(), "{key}");
            }
        }
        // Re-serialised metadata matches byte for byte (these files stop before the padding).
        let out = rewrite(&g, &bytes);
        assert_eq!(&out[..bytes.len()], &bytes[..], "{}", path.display());
        assert!(out[bytes.len()..].iter().all(|&b| b == 0));
        // Streaming: feed the file in the amounts the parser asks for.
        assert_eq!(stream_parse(&bytes), g);
        n += 1;
    }
    assert_eq!(n, 9, "expected the 9 vocab files");
}

/// Writes `g` (with tensor data from `file`) again with our writer.
fn rewrite(g: &Gguf, file: &[u8]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.set(k.as_str(), v.clone());
    }
    for t in &g.tensors {
        let data = g.tensor_data(file, t).unwrap();
        w.add_tensor(&t.name, t.dtype, t.shape(), data).unwrap();
    }
    w.to_bytes().unwrap()
}

/// Parses `bytes` as if it arrived in pieces: start with 16 bytes, then fetch what is asked for
/// or, once past 4 KiB, at least double (re-parsing from the start each time, as a client
/// without a resumable parser would).
fn stream_parse(bytes: &[u8]) -> Gguf {
    let mut have = 16.min(bytes.len());
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 1_000_000);
        match Gguf::parse_header(&bytes[..have]).unwrap() {
            HeaderParse::Complete(g) => {
                g.check_file_len(bytes.len() as u64).unwrap();
                return g;
            }
            HeaderParse::NeedMore(n) => {
                assert!(n as usize > have, "NeedMore({n}) with {have} bytes present");
                assert!(n as usize <= bytes.len(), "NeedMore({n}) beyond the file");
                have = if have < 4096 {
                    n as usize
                } else {
                    (n as usize).max(have * 2).min(bytes.len())
                };
            }
        }
    }
}

// ---------------------------------------------------------------- round trip

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::from("test-arch")),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1.5e-3)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::from("héllo ✓")),
        ("t.empty_string", Value::from("")),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(-2.5e300)),
        ("a.u8", Value::from(vec![1u8, 2, 3])),
        ("a.i8", Value::from(vec![-1i8, 2])),
        ("a.u16", Value::from(vec![1u16, 65535])),
        ("a.i16", Value::from(vec![-1i16])),
        ("a.u32", Value::from(vec![7u32; 5])),
        ("a.i32", Value::from(vec![-7i32, 0, 7])),
        ("a.f32", Value::from(vec![0.5f32, -0.25])),
        ("a.bool", Value::from(vec![true, false, true])),
        ("a.string", Value::from(vec!["a", "", "ccc"])),
        ("a.u64", Value::from(vec![u64::MAX, 0])),
        ("a.i64", Value::from(vec![i64::MIN, 1])),
        ("a.f64", Value::from(vec![1e-300f64])),
        ("a.empty", Value::from(Vec::<u32>::new())),
        (
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::from(vec![1i32, 2]),
                Array::String(vec!["x".into(), "yz".into()]),
                Array::Array(vec![Array::from(vec![0.5f64]), Array::Array(vec![])]),
                Array::Bool(vec![]),
            ])),
        ),
    ]
}

fn tensor_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    (0..n).map(|_| rng.next() as u8).collect()
}

/// A file with every value type and tensors of several types, and the (name, dtype, ne, data) put in.
/// (name, dtype, ne, data) of a tensor put into a sample file.
type Put = (String, DType, Vec<u64>, Vec<u8>);

fn sample(alignment: Option<u32>) -> (Vec<u8>, Vec<Put>) {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.set_alignment(a).unwrap();
    }
    for (k, v) in every_value() {
        w.set(k, v);
    }
    let specs: Vec<(&str, DType, Vec<u64>)> = vec![
        ("f32.matrix", DType::F32, vec![3, 5]),
        ("f16.vec", DType::F16, vec![7]),
        ("q4_0.w", DType::Q4_0, vec![64, 3]),
        ("q8_0.w", DType::Q8_0, vec![32, 2, 2]),
        ("q4_k.w", DType::Q4_K, vec![256, 1, 1, 2]),
        ("i32.scalar", DType::I32, vec![]),
        ("empty", DType::F32, vec![0, 4]),
        ("bf16.t", DType::BF16, vec![1, 1, 3]),
    ];
    let mut tensors = Vec::new();
    for (i, (name, dtype, ne)) in specs.into_iter().enumerate() {
        let mut ne4 = [1u64; 4];
        ne4[..ne.len()].copy_from_slice(&ne);
        let n = dtype.row_size(ne4[0] as usize).unwrap() * (ne4[1] * ne4[2] * ne4[3]) as usize;
        let data = tensor_bytes(n, i as u64 + 11);
        w.add_tensor(name, dtype, &ne, &data).unwrap();
        tensors.push((name.to_string(), dtype, ne, data));
    }
    (w.to_bytes().unwrap(), tensors)
}

#[test]
fn round_trip_every_value_type_and_alignments() {
    for alignment in [None, Some(1), Some(8), Some(64), Some(4096)] {
        let (bytes, tensors) = sample(alignment);
        let g = Gguf::parse(&bytes).unwrap();
        let align = alignment.unwrap_or(32) as usize;
        assert_eq!(g.alignment, align);
        assert_eq!(g.version, 3);
        assert_eq!(g.data_offset % align as u64, 0);
        assert_eq!(bytes.len() as u64 % align as u64, 0);
        let mut want = every_value();
        if let Some(a) = alignment {
            want.insert(0, ("general.alignment", Value::U32(a)));
        }
        let got: Vec<(&str, &Value)> = g.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let want_ref: Vec<(&str, &Value)> = want.iter().map(|(k, v)| (*k, v)).collect();
        assert_eq!(got, want_ref);
        assert_eq!(g.architecture(), Some("test-arch"));
        assert_eq!(g.tensors.len(), tensors.len());
        let mut expect_offset = 0u64;
        for (t, (name, dtype, ne, data)) in g.tensors.iter().zip(&tensors) {
            assert_eq!(&t.name, name);
            assert_eq!(t.dtype, *dtype);
            let mut ne4 = [1u64; 4];
            ne4[..ne.len()].copy_from_slice(ne);
            assert_eq!(t.ne, ne4);
            assert_eq!(t.offset, expect_offset, "tight packing");
            assert_eq!(g.tensor_data(&bytes, t).unwrap(), &data[..]);
            expect_offset += (t.size).div_ceil(align as u64) * align as u64;
        }
        assert_eq!(g.tensor("i32.scalar").unwrap().n_dims, 1);
        assert_eq!(g.tensor("bf16.t").unwrap().n_dims, 3);
        assert_eq!(g.tensor("q4_k.w").unwrap().n_dims, 4);
        let f = GgufFile::from_bytes(bytes.clone()).unwrap();
        assert_eq!(f.tensor_data("q8_0.w").unwrap(), &tensors[3].3[..]);
        assert!(f.tensor_data("nope").is_err());
        // Writing what we read gives the same bytes.
        assert_eq!(rewrite(&g, &bytes), bytes);
        assert_eq!(stream_parse(&bytes), g);
    }
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = GgufWriter::new();
    assert!(
        w.add_tensor("a", DType::F32, &[4], &[0; 15]).is_err(),
        "size mismatch"
    );
    assert!(
        w.add_tensor("b", DType::Q4_0, &[16], &[0; 9]).is_err(),
        "ne0 not a block multiple"
    );
    assert!(
        w.add_tensor(&"x".repeat(64), DType::F32, &[1], &[0; 4])
            .is_err(),
        "long name"
    );
    assert!(
        w.add_tensor("c", DType::F32, &[1, 1, 1, 1, 1], &[0; 4])
            .is_err(),
        "5 dims"
    );
    w.add_tensor(&"x".repeat(63), DType::F32, &[1], &[0; 4])
        .unwrap();
    assert!(
        w.add_tensor(&"x".repeat(63), DType::F32, &[1], &[0; 4])
            .is_err(),
        "duplicate"
    );
    assert!(w.set_alignment(0).is_err());
    assert!(w.set_alignment(48).is_err());
    w.set("general.alignment", Value::U64(32));
    assert!(w.to_bytes().is_err(), "alignment not u32");
    w.set("general.alignment", Value::U32(16));
    w.set("", Value::U8(0));
    assert!(w.to_bytes().is_err(), "empty key");
}

// ---------------------------------------------------------------- malformed files

/// A hand-assembled file, so that each field can be set to anything.
struct Raw {
    version: u32,
    n_tensors: Option<u64>,
    n_kv: Option<u64>,
    kvs: Vec<Vec<u8>>,
    infos: Vec<Vec<u8>>,
    align: usize,
    data_len: usize,
}

fn gstr(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

impl Raw {
    fn new() -> Raw {
        Raw {
            version: 3,
            n_tensors: None,
            n_kv: None,
            kvs: vec![],
            infos: vec![],
            align: 32,
            data_len: 0,
        }
    }
    fn kv(mut self, key: &str, ty: u32, val: &[u8]) -> Raw {
        let mut v = gstr(key.as_bytes());
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(val);
        self.kvs.push(v);
        self
    }
    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let mut v = gstr(name.as_bytes());
        v.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(&offset.to_le_bytes());
        self.infos.push(v);
        self
    }
    fn data(mut self, n: usize) -> Raw {
        self.data_len = n;
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(
            &self
                .n_tensors
                .unwrap_or(self.infos.len() as u64)
                .to_le_bytes(),
        );
        b.extend_from_slice(&self.n_kv.unwrap_or(self.kvs.len() as u64).to_le_bytes());
        for x in self.kvs.iter().chain(&self.infos) {
            b.extend_from_slice(x);
        }
        b.resize(b.len().div_ceil(self.align) * self.align, 0);
        b.resize(b.len() + self.data_len, 0);
        b
    }
}

const T_U32: u32 = 4;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;

fn u32le(x: u32) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

fn array_hdr(elem: u32, n: u64) -> Vec<u8> {
    let mut v = u32le(elem);
    v.extend_from_slice(&n.to_le_bytes());
    v
}

#[test]
fn raw_builder_makes_valid_files() {
    let b = Raw::new()
        .kv("general.architecture", T_STRING, &gstr(b"x"))
        .tensor("a", &[8], 0, 0)
        .tensor("b", &[32, 2], 8, 32)
        .data(32 + 68)
        .bytes();
    let g = Gguf::parse(&b).unwrap();
    assert_eq!(g.tensors[1].size, 68);
}

#[test]
fn header_corruptions() {
    let good = sample(None).0;
    let mut b = good.clone();
    b[..4].copy_from_slice(b"GGUX");
    expect_err(&b, "\"GGUX\"");
    for (v, needle) in [
        (0u32, "version 0"),
        (1, "no longer supported"),
        (4, "version 4"),
        (0x0300_0000, "endianness"),
    ] {
        let mut b = good.clone();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        expect_err(&b, needle);
    }
    for (at, field) in [(8usize, "n_tensors"), (16, "n_kv")] {
        for n in [u64::MAX, 1 << 40, 1 << 62, 1_000_000] {
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(&n.to_le_bytes());
            let m = gguf_err(Gguf::parse(&b));
            assert!(m.contains(field), "{m}");
            // Streaming without a known length: an error or a request for more, never a panic
            // or a huge allocation.
            let _ = Gguf::parse_header(&b);
            assert!(Gguf::parse_header_with_len(&b, b.len() as u64).is_err());
        }
    }
    // The first key's length.
    for n in [u64::MAX, 1 << 31, (1 << 30) + 1] {
        let mut b = good.clone();
        b[24..32].copy_from_slice(&n.to_le_bytes());
        expect_err(&b, "string length");
    }
    let mut b = good.clone();
    b[24..32].copy_from_slice(&(good.len() as u64).to_le_bytes());
    expect_err(&b, "remain");
    // The first value's type (key "general.architecture" is 20 bytes).
    let ty_at = 24 + 8 + 20;
    assert_eq!(&good[32..ty_at], b"general.architecture");
    for ty in [13u32, 100, u32::MAX] {
        let mut b = good.clone();
        b[ty_at..ty_at + 4].copy_from_slice(&ty.to_le_bytes());
        expect_err(&b, "unknown value type");
    }
}

#[test]
fn metadata_corruptions() {
    let s = gstr(b"v");
    expect_err(&Raw::new().kv("", T_STRING, &s).bytes(), "empty key");
    expect_err(
        &Raw::new()
            .kv("k", T_STRING, &s)
            .kv("k", T_U32, &u32le(1))
            .bytes(),
        "duplicate key 'k'",
    );
    // Arrays: count above the limit, more elements than bytes, strings' 8-byte lower bound.
    expect_err(
        &Raw::new()
            .kv("a", T_ARRAY, &array_hdr(T_U32, (1 << 30) + 1))
            .bytes(),
        "exceeds the limit",
    );
    expect_err(
        &Raw::new()
            .kv("a", T_ARRAY, &array_hdr(T_U32, u64::MAX))
            .bytes(),
        "exceeds the limit",
    );
    expect_err(
        &Raw::new()
            .kv("a", T_ARRAY, &array_hdr(T_U64, 1 << 29))
            .bytes(),
        "remain",
    );
    expect_err(
        &Raw::new()
            .kv("a", T_ARRAY, &array_hdr(T_STRING, 1 << 20))
            .bytes(),
        "remain",
    );
    expect_err(
        &Raw::new().kv("a", T_ARRAY, &array_hdr(13, 1)).bytes(),
        "unknown array element type 13",
    );
    // Nesting: 8 levels are fine, 9 are not.
    let nest = |levels: usize| {
        let mut v = Vec::new();
        for _ in 1..levels {
            v.extend(array_hdr(T_ARRAY, 1));
        }
        v.extend(array_hdr(T_U32, 1));
        v.extend(u32le(5));
        Raw::new().kv("n", T_ARRAY, &v).bytes()
    };
    assert!(Gguf::parse(&nest(8)).is_ok());
    expect_err(&nest(9), "nested deeper");
    // Invalid UTF-8 in a string value.
    expect_err(
        &Raw::new().kv("k", T_STRING, &gstr(&[0xff, 0xfe])).bytes(),
        "UTF-8",
    );
    // Alignment.
    for a in [0u32, 3, 48] {
        expect_err(
            &Raw::new().kv("general.alignment", T_U32, &u32le(a)).bytes(),
            "power of two",
        );
    }
    expect_err(
        &Raw::new()
            .kv("general.alignment", T_U64, &32u64.to_le_bytes())
            .bytes(),
        "expected u32",
    );
    expect_err(
        &Raw::new().kv("general.alignment", T_STRING, &s).bytes(),
        "expected u32",
    );
    // A valid non-default alignment is honoured.
    let b = Raw {
        align: 64,
        ..Raw::new()
    }
    .kv("general.alignment", T_U32, &u32le(64))
    .tensor("t", &[4], 0, 0)
    .data(16)
    .bytes();
    assert_eq!(Gguf::parse(&b).unwrap().data_offset % 64, 0);
}

#[test]
fn tensor_info_corruptions() {
    let r = || Raw::new();
    expect_err(
        &r().tensor("t", &[4], 4, 0).data(16).bytes(),
        "unknown or removed tensor type 4",
    );
    expect_err(
        &r().tensor("t", &[4], 1000, 0).data(16).bytes(),
        "tensor type 1000",
    );
    expect_err(
        &r().tensor("t", &[1, 1, 1, 1, 1], 0, 0).data(4).bytes(),
        "n_dims = 5",
    );
    expect_err(
        &r().tensor("t", &[1 << 32, 1 << 32], 0, 0).data(4).bytes(),
        "overflows",
    );
    expect_err(
        &r().tensor("t", &[1 << 62, 2], 0, 0).data(4).bytes(),
        "overflows",
    );
    expect_err(
        &r().tensor("t", &[u64::MAX], 0, 0).data(4).bytes(),
        "negative",
    );
    expect_err(
        &r().tensor("t", &[16], 2, 0).data(32).bytes(),
        "block size 32",
    );
    expect_err(
        &r().tensor(&"n".repeat(64), &[1], 0, 0).data(4).bytes(),
        "too long",
    );
    assert!(Gguf::parse(&r().tensor(&"n".repeat(63), &[1], 0, 0).data(4).bytes()).is_ok());
    expect_err(
        &r().tensor("t", &[1], 0, 0)
            .tensor("t", &[1], 0, 32)
            .data(36)
            .bytes(),
        "duplicate tensor name 't'",
    );
    expect_err(
        &r().tensor("t", &[4], 0, 4).data(64).bytes(),
        "not a multiple of the alignment",
    );
    expect_err(
        &r().tensor("a", &[16], 0, 0)
            .tensor("b", &[16], 0, 32)
            .data(96)
            .bytes(),
        "overlap",
    );
    expect_err(
        &r().tensor("t", &[4], 0, 64).data(32).bytes(),
        "beyond the end",
    );
    expect_err(
        &r().tensor("t", &[4], 0, u64::MAX - 31).data(32).bytes(),
        "overflows",
    );
    expect_err(
        &r().tensor("t", &[8], 0, 0).data(31).bytes(),
        "beyond the end",
    );
    // Not ggml's tight packing, but valid for us: reversed order with a gap.
    let b = r()
        .tensor("a", &[8], 0, 96)
        .tensor("b", &[8], 0, 0)
        .data(128)
        .bytes();
    let g = Gguf::parse(&b).unwrap();
    assert_eq!(g.tensors[0].offset, 96);
    // Zero-element and zero-dim tensors are fine.
    assert!(Gguf::parse(
        &r().tensor("z", &[0, 5], 0, 0)
            .tensor("s", &[], 0, 0)
            .data(4)
            .bytes()
    )
    .is_ok());
    // A tensor whose data section would start past the end of the file.
    let mut b = r().tensor("t", &[0], 0, 0).bytes();
    b.truncate(b.len() - 4);
    expect_err(&b, "past the end of the file");
}

#[test]
fn truncation_at_every_byte() {
    let (bytes, _) = sample(None);
    let g = Gguf::parse(&bytes).unwrap();
    let data_end = g.data_offset + g.data_size();
    // Where the header proper ends (before the padding to the data section).
    let mut header_end = None;
    for i in 0..bytes.len() {
        let prefix = &bytes[..i];
        let r = Gguf::parse(prefix);
        if (i as u64) < data_end {
            gguf_err(r);
        } else {
            assert_eq!(r.unwrap(), g, "truncated in the final padding at {i}");
        }
        match Gguf::parse_header(prefix).unwrap() {
            HeaderParse::NeedMore(n) => {
                assert!(header_end.is_none(), "NeedMore after Complete at {i}");
                assert!(n as usize > i && n <= g.data_offset, "NeedMore({n}) at {i}");
            }
            HeaderParse::Complete(h) => {
                header_end.get_or_insert(i);
                assert_eq!(h, g);
            }
        }
        // With the file's length known, a prefix is complete or needs more, never an error.
        match Gguf::parse_header_with_len(prefix, bytes.len() as u64).unwrap() {
            HeaderParse::NeedMore(n) => assert!(n as usize > i),
            HeaderParse::Complete(h) => assert_eq!(h, g),
        }
    }
    let header_end = header_end.unwrap() as u64;
    assert!(header_end <= g.data_offset && g.data_offset - header_end < 32);
}

// ---------------------------------------------------------------- fuzz

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn byte_flip_fuzz_never_panics() {
    let (good, _) = sample(None);
    let header_len = Gguf::parse(&good).unwrap().data_offset as usize;
    let cnn = read_fixture("models/mnist-cnn-f32.gguf");
    let cnn_header = Gguf::parse(&cnn).unwrap().data_offset as usize;
    let iterations = 10_000;
    let (mut ok, mut err) = (0, 0);
    for iter in 0..iterations {
        let seed = 0x9E37_79B9_7F4A_7C15u64 ^ iter;
        let mut rng = Rng(seed);
        let (base, hlen) = if iter % 4 == 3 {
            (&cnn, cnn_header)
        } else {
            (&good, header_len)
        };
        let mut b = base.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(hlen);
            b[at] = match rng.below(4) {
                0 => rng.next() as u8,
                1 => b[at] ^ (1 << rng.below(8)),
                2 => 0xff,
                _ => 0,
            };
        }
        if rng.below(8) == 0 {
            b.truncate(rng.below(b.len() + 1));
        }
        let result = std::panic::catch_unwind(|| {
            let parsed = Gguf::parse(&b).map(|g| {
                for t in &g.tensors {
                    g.tensor_data(&b, t)
                        .expect("a parsed tensor's data is in bounds");
                }
            });
            let _ = Gguf::parse_header(&b);
            parsed.is_ok()
        });
        match result {
            Ok(true) => ok += 1,
            Ok(false) => err += 1,
            Err(_) => panic!("panic in fuzz iteration {iter} (seed {seed:#x})"),
        }
    }
    println!("fuzz: {ok} parsed, {err} rejected");
    assert_eq!(ok + err, iterations);
}

// ---------------------------------------------------------------- gguf-py

fn fnv(b: &[u8]) -> String {
    let h = b.iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01B3)
    });
    format!("{h:016x}")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn scalar_repr(v: &Value) -> String {
    match v {
        Value::F32(x) => hex(&x.to_le_bytes()),
        Value::F64(x) => hex(&x.to_le_bytes()),
        Value::Bool(x) => x.to_string(),
        Value::String(s) => hex(s.as_bytes()),
        other => other
            .as_i64()
            .map_or_else(|| other.as_u64().unwrap().to_string(), |i| i.to_string()),
    }
}

/// The description scripts/check-gguf-writer.py prints, from our reader.
fn describe(g: &Gguf, file: &[u8]) -> String {
    let mut out = format!("alignment {}\n", g.alignment);
    for (k, v) in &g.metadata {
        let repr = match v {
            Value::Array(a) if a.is_empty() => "empty-array".to_string(),
            Value::Array(Array::Array(_)) => "nested-array".to_string(),
            Value::Array(a) => {
                let items: Vec<String> = (0..a.len())
                    .map(|i| scalar_repr(&a.get(i).unwrap()))
                    .collect();
                let ty = a.get(0).unwrap().type_name();
                format!("[{ty}:{}]", items.join(","))
            }
            v => format!("{}:{}", v.type_name(), scalar_repr(v)),
        };
        out += &format!("kv {k} {repr}\n");
    }
    for t in &g.tensors {
        let shape: Vec<String> = t.ne[..t.n_dims as usize]
            .iter()
            .map(u64::to_string)
            .collect();
        let data = g.tensor_data(file, t).unwrap();
        out += &format!(
            "t {} {} [{}] {} {} {}\n",
            t.name,
            t.dtype.id(),
            shape.join(","),
            g.data_offset + t.offset,
            t.size,
            fnv(data)
        );
    }
    out
}

/// gguf-py reads what we write. Skipped (with a note) when python3 with the `gguf` package is
/// not installed: it is a development tool, not a dependency of the project.
#[test]
fn gguf_py_reads_our_files() {
    let have_py = std::process::Command::new("python3")
        .args(["-c", "import gguf"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_py {
        println!(
            "NOTE: python3 with the gguf package is not installed; skipping the gguf-py check"
        );
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/check-gguf-writer.py");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for alignment in [None, Some(64)] {
        let (bytes, _) = sample(alignment);
        let path = dir.join(format!("ggweb-sample-{}.gguf", alignment.unwrap_or(32)));
        std::fs::write(&path, &bytes).unwrap();
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gguf-py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = String::from_utf8(out.stdout).unwrap();
        let ours = describe(&Gguf::parse(&bytes).unwrap(), &bytes);
        assert_eq!(theirs, ours);
    }
}
