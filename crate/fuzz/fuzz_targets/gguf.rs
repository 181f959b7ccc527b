//! The GGUF reader: whole files and streamed prefixes. Invariants: parsing never panics; a file
//! that parses has every tensor's data inside it; every prefix of it parses as "need more" (asking
//! for more than it has) or as the same header; and writing it back reads back equal.
#![no_main]
use ggweb::gguf::stream::FileStream;
use ggweb::gguf::{Gguf, GgufWriter, HeaderParse};
use libfuzzer_sys::fuzz_target;

/// Equal, with NaN metadata equal to itself (the parse is the same; `==` says otherwise).
fn same<T: PartialEq + std::fmt::Debug>(a: &T, b: &T) -> bool {
    a == b || format!("{a:?}") == format!("{b:?}")
}

fuzz_target!(|data: &[u8]| {
    let whole = Gguf::parse(data);
    // A cut point chosen by the input itself, plus a few fixed ones.
    let cut = data
        .last()
        .map_or(0, |&b| (b as usize * data.len()) / 255)
        .min(data.len());
    for k in [cut, data.len() / 2, data.len().saturating_sub(1), 24, 64] {
        let k = k.min(data.len());
        let streamed = Gguf::parse_header(&data[..k]);
        if let (Ok(g), Ok(p)) = (&whole, &streamed) {
            match p {
                HeaderParse::NeedMore(n) => assert!(*n > k as u64, "need {n} with {k} given"),
                HeaderParse::Complete(h) => {
                    assert!(same(h, g), "prefix {k} parsed to a different header");
                    h.check_file_len(data.len() as u64)
                        .expect("whole file checks");
                }
            }
        }
        if let Ok(HeaderParse::Complete(h)) =
            Gguf::parse_header_with_len(&data[..k], data.len() as u64)
        {
            if let Ok(g) = &whole {
                assert!(same(&h, g));
            }
        }
    }
    // The browser's streaming reader, in chunks sized by the input, with the length known
    // (Content-Length) or not: it accepts exactly the files `parse` accepts.
    for known in [true, false] {
        let mut s = FileStream::with_budget(true, known.then_some(data.len() as u64), 1 << 24)
            .expect("small claim");
        let step = 1 + data.first().map_or(0, |&b| b as usize * 37);
        let fed = data.chunks(step).try_for_each(|c| s.push(c).map(|_| ()));
        let streamed = fed.and_then(|_| s.take_file());
        match (&whole, streamed) {
            (Ok(g), Ok((h, bytes))) => {
                assert!(same(&h, g));
                assert_eq!(&bytes[..], data);
            }
            // Without a length, bytes past the header's last tensor (and padding) are rejected.
            (Ok(_), Err(e)) => assert!(!known, "streaming rejected a valid file: {e}"),
            (Err(_), Ok(_)) => panic!("streaming accepted a file parse rejects"),
            (Err(_), Err(_)) => {}
        }
    }
    let Ok(g) = whole else { return };
    for t in &g.tensors {
        g.tensor_data(data, t)
            .expect("a parsed file's tensors lie inside it");
    }
    // Round trip through the writer (when the tensors' types are ones it writes).
    let mut w = GgufWriter::new();
    if w.set_alignment(g.alignment as u32).is_err() {
        return;
    }
    for (k, v) in &g.metadata {
        if k != "general.alignment" {
            w.set(k.clone(), v.clone());
        }
    }
    for t in &g.tensors {
        let bytes = g.tensor_data(data, t).expect("checked above");
        if w.add_tensor(&t.name, t.dtype, t.shape(), bytes).is_err() {
            return;
        }
    }
    let Ok(out) = w.to_bytes() else { return };
    let back = Gguf::parse(&out).expect("the writer's output parses");
    assert_eq!(back.tensors.len(), g.tensors.len());
    for (a, b) in g.tensors.iter().zip(&back.tensors) {
        // The writer records ggml's n_dims (trailing 1s dropped), so compare padded shapes.
        let pad = |s: &[u64]| {
            let mut ne = [1u64; 4];
            ne[..s.len()].copy_from_slice(s);
            ne
        };
        assert_eq!(
            (&a.name, a.dtype, pad(a.shape())),
            (&b.name, b.dtype, pad(b.shape()))
        );
        assert_eq!(
            g.tensor_data(data, a).expect("in file"),
            back.tensor_data(&out, b).expect("in file")
        );
    }
    for (k, v) in &g.metadata {
        assert!(back.get(k).is_some_and(|b| same(b, v)), "key {k}");
    }
});
