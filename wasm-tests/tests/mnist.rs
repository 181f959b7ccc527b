//! MNIST golden logits inside wasm: both models on t10k images 0..15 against
//! native-tests/data/mnist_logits_first16.json (tolerance 1e-4).
use std::sync::Arc;

use ggweb::backend::cpu::HostBytes;
use ggweb::models::mnist::{idx, Mnist};
use ggweb_testing::numbers_after;
use wasm_bindgen_test::*;

static FC: &[u8] = include_bytes!("../../crate/assets/mnist-fc-f32.gguf");
static CNN: &[u8] = include_bytes!("../../crate/assets/mnist-cnn-f32.gguf");
static IMAGES_GZ: &[u8] = include_bytes!("../../crate/assets/t10k-images-idx3-ubyte.gz");
static GOLDEN: &str = include_str!("../../native-tests/data/mnist_logits_first16.json");

fn check(name: &str, file: &'static [u8]) {
    let raw = idx::maybe_gunzip(IMAGES_GZ).expect("gunzip");
    let (n, images) = idx::parse_images(&raw).expect("idx images");
    assert_eq!(n, 10_000);
    let bytes: Arc<dyn HostBytes> = Arc::new(file.to_vec());
    let mut model = Mnist::from_bytes(bytes, 1).expect("model loads");
    let logits = model.logits(&images[..16 * 784]).expect("logits");
    let section = &GOLDEN[GOLDEN.find(name).expect("model in golden file")..];
    let want = numbers_after(section, "\"logits\"", 160);
    assert_eq!(want.len(), 160);
    let max_err = logits
        .iter()
        .zip(&want)
        .map(|(a, b)| (*a as f64 - b).abs())
        .fold(0f64, f64::max);
    assert!(max_err <= 1e-4, "{name}: max abs error {max_err}");
}

#[wasm_bindgen_test]
fn mnist_fc_golden_logits() {
    check("mnist-fc-f32.gguf", FC);
}

#[wasm_bindgen_test]
fn mnist_cnn_golden_logits() {
    check("mnist-cnn-f32.gguf", CNN);
}

#[wasm_bindgen_test]
fn bad_model_is_an_error() {
    let bytes: Arc<dyn HostBytes> = Arc::new(b"GGUF\x03\0\0\0".to_vec());
    assert!(Mnist::from_bytes(bytes, 1).is_err());
}
