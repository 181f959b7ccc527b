//! The fuzz targets (crate/fuzz/fuzz_targets/*.rs) as plain modules for tests/fuzz_regressions.rs,
//! which replays every saved fuzz input through them in every test run (cargo-fuzz, its nightly
//! and the ASan build are `scripts/test.sh --full` only). Only the two lines that tie a target
//! to libFuzzer are dropped (and `//!` becomes `//`); the test defines `fuzz_target!` as a plain function.
use std::path::Path;

fn main() {
    let dir = Path::new("../crate/fuzz/fuzz_targets");
    println!("cargo:rerun-if-changed={}", dir.display());
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("crate/fuzz/fuzz_targets")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    entries.sort();
    for p in entries {
        println!("cargo:rerun-if-changed={}", p.display());
        let src = std::fs::read_to_string(&p).expect("fuzz target source");
        let body: String = src
            .lines()
            .filter(|l| l.trim() != "#![no_main]" && l.trim() != "use libfuzzer_sys::fuzz_target;")
            // (Inner doc comments cannot open an included file.)
            .map(|l| match l.strip_prefix("//!") {
                Some(rest) => format!("//{rest}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        let name = p
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        std::fs::write(Path::new(&out).join(format!("fuzz_{name}")), body).expect("write");
    }
}
