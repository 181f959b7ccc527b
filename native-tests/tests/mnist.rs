//! MNIST end to end on the embedded models and test set: golden logits and test-set accuracy.

use ggweb::models::mnist::{embedded, idx, Mnist, MnistKind};

fn golden() -> serde_json::Value {
    let text = include_str!("../data/mnist_logits_first16.json");
    serde_json::from_str(text).expect("golden file is valid JSON")
}

fn test_set() -> (Vec<f32>, Vec<u8>) {
    let (n, images) = idx::parse_images(embedded::T10K_IMAGES_GZ).unwrap();
    let labels = idx::parse_labels(embedded::T10K_LABELS_GZ).unwrap();
    assert_eq!(n, 10_000);
    assert_eq!(labels.len(), 10_000);
    (images, labels)
}

fn check_golden(kind: MnistKind, key: &str) {
    let g = golden();
    let (images, _) = test_set();
    for threads in [1, 2] {
        let mut m = Mnist::embedded(kind, threads).unwrap();
        let logits = m.logits(&images[..16 * 784]).unwrap();
        let want = g[key]["logits"].as_array().unwrap();
        let mut max_diff = 0f32;
        for (i, row) in want.iter().enumerate() {
            for (j, v) in row.as_array().unwrap().iter().enumerate() {
                let d = (logits[i * 10 + j] - v.as_f64().unwrap() as f32).abs();
                max_diff = max_diff.max(d);
            }
        }
        assert!(
            max_diff <= 1e-4,
            "{key} threads={threads}: max |diff| {max_diff}"
        );
    }
}

#[test]
fn fc_golden_logits() {
    check_golden(MnistKind::Fc, "mnist-fc-f32.gguf");
}

#[test]
fn cnn_golden_logits() {
    check_golden(MnistKind::Cnn, "mnist-cnn-f32.gguf");
}

#[test]
fn fc_accuracy() {
    let (images, labels) = test_set();
    let mut m = Mnist::embedded(MnistKind::Fc, 2).unwrap();
    let correct = m.evaluate(&images, &labels, |_, _| {}).unwrap();
    assert_eq!(correct, 9805, "accuracy {:.2} %", correct as f64 / 100.0);
}

#[test]
fn cnn_accuracy() {
    let (images, labels) = test_set();
    let mut m = Mnist::embedded(MnistKind::Cnn, 2).unwrap();
    let correct = m.evaluate(&images, &labels, |_, _| {}).unwrap();
    assert_eq!(correct, 9812, "accuracy {:.2} %", correct as f64 / 100.0);
}

#[test]
fn bad_inputs_are_errors() {
    let mut m = Mnist::embedded(MnistKind::Fc, 1).unwrap();
    assert!(m.logits(&[0.0; 100]).is_err());
    assert!(Mnist::from_bytes(std::sync::Arc::new(&embedded::FC[..1000]), 1).is_err());
    // A valid GGUF of the wrong architecture.
    assert!(Mnist::from_bytes(std::sync::Arc::new(embedded::T10K_LABELS_GZ), 1).is_err());
}
