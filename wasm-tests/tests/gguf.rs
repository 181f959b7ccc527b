//! GGUF parsing inside wasm (Node and Chromium).
use ggweb::gguf::{Gguf, HeaderParse};
use ggweb::DType;
use wasm_bindgen_test::*;

static CNN: &[u8] = include_bytes!("../../crate/assets/mnist-cnn-f32.gguf");
static FC: &[u8] = include_bytes!("../../crate/assets/mnist-fc-f32.gguf");

#[wasm_bindgen_test]
fn parses_mnist_models() {
    let g = Gguf::parse(CNN).expect("valid GGUF");
    assert_eq!(g.architecture(), Some("mnist-cnn"));
    let k = g.tensor("conv1.kernel").expect("conv1.kernel");
    assert_eq!(k.shape(), &[3, 3, 1, 8]);
    assert_eq!(k.dtype, DType::F32);
    let g = Gguf::parse(FC).expect("valid GGUF");
    assert_eq!(g.tensor("fc1.weight").map(|t| t.size), Some(784 * 500 * 4));
    let data = g.tensor_data(FC, g.tensor("fc2.bias").unwrap()).unwrap();
    assert_eq!(data.len(), 40);
}

#[wasm_bindgen_test]
fn streaming_header_parse() {
    let mut n = 1;
    let g = loop {
        match Gguf::parse_header(&FC[..n]).expect("a prefix is never an error") {
            HeaderParse::Complete(g) => break g,
            HeaderParse::NeedMore(m) => {
                assert!(m as usize > n);
                n = m as usize;
            }
        }
    };
    assert!(n < 4096, "header complete after {n} bytes");
    assert_eq!(g, Gguf::parse(FC).unwrap());
}

#[wasm_bindgen_test]
fn rejects_malformed() {
    assert!(Gguf::parse(b"GGUF").is_err());
    let e = Gguf::parse(b"NOPE\x03\0\0\0").unwrap_err().to_string();
    assert!(e.contains("GGUF"), "{e}");
    let e = Gguf::parse(&FC[..FC.len() - 4000]).unwrap_err().to_string();
    assert!(!e.is_empty());
    let mut bad = CNN.to_vec();
    bad[4] = 99; // version
    assert!(Gguf::parse(&bad).is_err());
}
