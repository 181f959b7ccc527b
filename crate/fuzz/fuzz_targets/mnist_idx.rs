//! The MNIST idx loader, raw and gzip-wrapped: errors, never a panic, and no allocation beyond
//! what the decompressed data holds.
#![no_main]
use ggweb::models::mnist::idx;
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let check = |b: &[u8]| {
        if let Ok((n, px)) = idx::parse_images(b) {
            assert_eq!(px.len(), n * 784);
            assert!(px.iter().all(|p| (0.0..=1.0).contains(p)));
        }
        if let Ok(labels) = idx::parse_labels(b) {
            assert!(labels.len() <= b.len());
        }
    };
    check(data);
    // The same bytes as the body of a gzip stream, so the parser behind the decompressor is
    // reached with the fuzzer's structure intact.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
    if gz.write_all(data).is_ok() {
        if let Ok(z) = gz.finish() {
            check(&z);
        }
    }
});
