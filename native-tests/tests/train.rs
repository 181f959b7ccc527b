//! Training MNIST from random initialisation on the CPU (models/train.rs): one epoch on a
//! 6,000-image subset of the training set reaches >= 90 % on the 10,000 t10k images for fc and
//! cnn; the saved GGUF is read back by `Mnist` (what `ggweb mnist` runs) with the same
//! accuracy; resuming keeps the weights; gradient accumulation equals one large batch.

use std::path::PathBuf;

use ggweb::models::mnist::{embedded, idx, Mnist, MnistKind};
use ggweb::models::train::{Optimizer, TrainConfig, Trainer};

fn train_subset(n: usize) -> (Vec<f32>, Vec<u8>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/mnist");
    let images = std::fs::read(dir.join("train-images-idx3-ubyte.gz")).unwrap();
    let labels = std::fs::read(dir.join("train-labels-idx1-ubyte.gz")).unwrap();
    let (count, mut images) = idx::parse_images(&images).unwrap();
    let mut labels = idx::parse_labels(&labels).unwrap();
    assert_eq!((count, labels.len()), (60_000, 60_000));
    images.truncate(n * 784);
    labels.truncate(n);
    (images, labels)
}

fn test_set() -> (Vec<f32>, Vec<u8>) {
    let (_, images) = idx::parse_images(embedded::T10K_IMAGES_GZ).unwrap();
    (images, idx::parse_labels(embedded::T10K_LABELS_GZ).unwrap())
}

fn config(batch_logical: usize, batch_physical: usize) -> TrainConfig {
    TrainConfig {
        epochs: 1,
        batch_logical,
        batch_physical,
        optimizer: Optimizer::adamw(2e-3),
        val_split: 0.05,
        seed: 7,
        n_threads: 2,
    }
}

fn one_epoch(kind: MnistKind) {
    let (images, labels) = train_subset(6000);
    let mut t = Trainer::new(kind, config(32, 32)).unwrap();
    let mut steps = 0;
    let epochs = t
        .fit(
            &images,
            &labels,
            |s| {
                assert!(s.loss.is_finite() && (0.0..=1.0).contains(&s.accuracy));
                steps += 1;
                true
            },
            |_| true,
        )
        .unwrap();
    // 5,700 training images in steps of 32.
    assert_eq!(steps, 5700 / 32);
    assert_eq!(epochs.len(), 1);
    let e = epochs[0];
    assert_eq!(e.validation.images, 300);
    assert!(e.validation.accuracy >= 0.85, "{e:?}");
    let (ti, tl) = test_set();
    let test = t.evaluate(&ti, &tl).unwrap();
    println!(
        "{}: train loss {:.4}, validation {:.2} %, test {:.2} % (loss {:.4}), {:.2} s, graph {} B",
        kind.name(),
        e.train.loss,
        e.validation.accuracy * 100.0,
        test.accuracy * 100.0,
        test.loss,
        e.seconds,
        t.graph_bytes()
    );
    assert!(
        test.accuracy >= 0.90,
        "{}: test accuracy {test:?}",
        kind.name()
    );

    // Save → the evaluation path of `ggweb mnist` (a memory-mapped file) → same accuracy.
    let bytes = t.to_gguf().unwrap();
    let path = std::env::temp_dir().join(format!("ggweb-train-{}.gguf", kind.name()));
    std::fs::write(&path, &bytes).unwrap();
    let mut m = Mnist::open(&path, 2).unwrap();
    assert_eq!(m.kind(), kind);
    let correct = m.evaluate(&ti, &tl, |_, _| {}).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(correct, (test.accuracy * 10_000.0).round() as usize);

    // Resume: the same weights come back, and training continues from them.
    let mut r = Trainer::from_gguf(&bytes, config(32, 32)).unwrap();
    assert_eq!(r.kind(), kind);
    assert_eq!(r.to_gguf().unwrap(), bytes);
    r.fit(&images[..1024 * 784], &labels[..1024], |_| true, |_| true)
        .unwrap();
    assert_ne!(r.to_gguf().unwrap(), bytes);
}

#[test]
fn fc_one_epoch_on_6000_images() {
    one_epoch(MnistKind::Fc);
}

#[test]
fn cnn_one_epoch_on_6000_images() {
    one_epoch(MnistKind::Cnn);
}

/// Weights of a GGUF written by `Trainer::to_gguf`, as f32 per tensor.
fn weights(bytes: &[u8]) -> Vec<Vec<f32>> {
    let g = ggweb::gguf::Gguf::parse(bytes).unwrap();
    g.tensors
        .iter()
        .map(|t| {
            let d = g.tensor_data(bytes, t).unwrap();
            ggweb::tensor_io::decode_f32(t.dtype, d).unwrap()
        })
        .collect()
}

#[test]
fn accumulated_physical_batches_equal_one_logical_batch() {
    for kind in [MnistKind::Fc, MnistKind::Cnn] {
        for opt in [
            Optimizer::adamw(1e-3),
            Optimizer::Sgd { lr: 0.05, wd: 1e-3 },
        ] {
            let (images, labels) = train_subset(640);
            let run = |bp: usize| {
                let cfg = TrainConfig {
                    optimizer: opt,
                    val_split: 0.0,
                    ..config(64, bp)
                };
                let mut t = Trainer::new(kind, cfg).unwrap();
                t.fit(&images, &labels, |_| true, |_| true).unwrap();
                assert_eq!(t.steps(), 10);
                weights(&t.to_gguf().unwrap())
            };
            let (one, four) = (run(64), run(16));
            let mut worst = 0f32;
            for (a, b) in one.iter().zip(&four) {
                for (x, y) in a.iter().zip(b) {
                    worst = worst.max((x - y).abs() / (1e-3 + x.abs()));
                }
            }
            // AdamW divides by sqrt(v): where a gradient is ~0 the sums' rounding shows.
            assert!(
                worst < 2e-2,
                "{kind:?} {opt:?}: worst relative difference {worst}"
            );
        }
    }
}

#[test]
fn bad_training_settings_are_errors() {
    let bad = |cfg: TrainConfig| Trainer::new(MnistKind::Fc, cfg).is_err();
    assert!(bad(config(48, 32)));
    assert!(bad(config(0, 0)));
    assert!(bad(TrainConfig {
        val_split: 1.0,
        ..config(32, 32)
    }));
    assert!(bad(TrainConfig {
        optimizer: Optimizer::adamw(f32::NAN),
        ..config(32, 32)
    }));
    let mut t = Trainer::new(MnistKind::Fc, config(32, 32)).unwrap();
    let (images, mut labels) = train_subset(64);
    labels[3] = 10;
    assert!(t.fit(&images, &labels, |_| true, |_| true).is_err());
    assert!(t.fit(&images[..784], &labels, |_| true, |_| true).is_err());
    assert!(Trainer::from_gguf(b"not a gguf", config(32, 32)).is_err());
}

#[test]
fn steps_in_chunks_equal_fit() {
    let (images, labels) = train_subset(700);
    let cfg = TrainConfig {
        epochs: 2,
        ..config(32, 16)
    };
    let mut a = Trainer::new(MnistKind::Fc, cfg).unwrap();
    let fitted = a.fit(&images, &labels, |_| true, |_| true).unwrap();
    let mut b = Trainer::new(MnistKind::Fc, cfg).unwrap();
    let mut st = b.start_fit(&images, &labels).unwrap();
    assert_eq!(st.steps_per_epoch(), 665 / 32);
    let mut epochs = Vec::new();
    while !st.finished() {
        let s = b.run_steps(&mut st, &images, &labels, 7).unwrap();
        assert!(!s.is_empty() && s.len() <= 7);
        if st.epoch_complete() {
            // Ending an epoch twice, or before its steps are done, is an error.
            epochs.push(b.end_epoch(&mut st, &images, &labels).unwrap());
            assert!(b.end_epoch(&mut st, &images, &labels).is_err());
        }
    }
    assert!(b
        .run_steps(&mut st, &images, &labels, 1)
        .unwrap()
        .is_empty());
    assert_eq!(a.to_gguf().unwrap(), b.to_gguf().unwrap());
    assert_eq!(epochs.len(), 2);
    for (x, y) in fitted.iter().zip(&epochs) {
        assert_eq!((x.train, x.validation), (y.train, y.validation));
    }
    // Other data than training started on is a shape error.
    let mut st = b.start_fit(&images, &labels).unwrap();
    assert!(b
        .run_steps(&mut st, &images[..784], &labels[..1], 1)
        .is_err());
}

#[test]
fn async_steps_equal_blocking_steps() {
    // The browser's path (run_steps_async / end_epoch_async / evaluate_async over step_async)
    // trains the same run as run_steps / end_epoch: the same order, weights and figures.
    use ggweb::backend::webgpu::block_on;
    let (images, labels) = train_subset(700);
    let cfg = config(32, 16);
    let mut a = Trainer::new(MnistKind::Fc, cfg).unwrap();
    let mut sa = a.start_fit(&images, &labels).unwrap();
    let steps_a = a.run_steps(&mut sa, &images, &labels, 100).unwrap();
    let ea = a.end_epoch(&mut sa, &images, &labels).unwrap();
    let mut b = Trainer::new(MnistKind::Fc, cfg).unwrap();
    let mut sb = b.start_fit(&images, &labels).unwrap();
    let mut steps_b = Vec::new();
    while !sb.epoch_complete() {
        steps_b.extend(block_on(b.run_steps_async(&mut sb, &images, &labels, 5)).unwrap());
    }
    assert!(block_on(b.end_epoch_async(&mut sb, &images, &labels[..1])).is_err());
    let eb = block_on(b.end_epoch_async(&mut sb, &images, &labels)).unwrap();
    assert!(sb.finished());
    assert_eq!(steps_a.len(), 665 / 32);
    assert_eq!(steps_a.len(), steps_b.len());
    for (x, y) in steps_a.iter().zip(&steps_b) {
        assert_eq!((x.epoch, x.step, x.accuracy), (y.epoch, y.step, y.accuracy));
        assert!((x.loss - y.loss).abs() < 1e-12, "{} vs {}", x.loss, y.loss);
    }
    assert_eq!(a.to_gguf().unwrap(), b.to_gguf().unwrap());
    assert_eq!(ea.validation, eb.validation);
    assert_eq!(ea.train.accuracy, eb.train.accuracy);
    assert!((ea.train.loss - eb.train.loss).abs() < 1e-12);
    let (ti, tl) = test_set();
    let (ti, tl) = (&ti[..500 * 784], &tl[..500]);
    assert_eq!(
        a.evaluate(ti, tl).unwrap(),
        block_on(b.evaluate_async(ti, tl)).unwrap()
    );
    // A label that is not a digit is an error, not a panic.
    assert!(a.evaluate(&ti[..784], &[10]).is_err());
}
