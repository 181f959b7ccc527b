//! Every input in crate/fuzz/regressions/TARGET/ (what fuzzing once found: crashes, timeouts,
//! out-of-memory) through that fuzz target's own code, compiled here as a plain function
//! (build.rs), so each run of the native tests checks them without cargo-fuzz or a nightly
//! (`scripts/test.sh --full` also replays them under AddressSanitizer: scripts/fuzz.sh --smoke).
//! A target that no longer holds its invariant on an input panics, and this test fails naming it.

use std::path::Path;

/// libFuzzer's macro as a plain function `run` (the `init:` form runs its block first).
macro_rules! fuzz_target {
    (init: $init:block, |$d:ident: &[u8]| $body:block) => {
        pub fn run($d: &[u8]) {
            $init
            $body
        }
    };
    (|$d:ident: &[u8]| $body:block) => {
        pub fn run($d: &[u8]) $body
    };
}

macro_rules! targets {
    ($($t:ident),*) => {
        $(
            #[allow(dead_code, clippy::all)]
            mod $t {
                include!(concat!(env!("OUT_DIR"), "/fuzz_", stringify!($t), ".rs"));
            }
        )*
        /// (name, entry) of every target.
        const TARGETS: &[(&str, fn(&[u8]))] = &[$((stringify!($t), $t::run)),*];
    };
}

targets!(chat_template, gguf, graph, mnist_idx, model_meta, tokenizer);

#[test]
fn every_fuzz_target_is_replayed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crate/fuzz/fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "rs").then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    let mut have: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    have.sort();
    assert_eq!(names, have, "add the new fuzz target to targets! above");
}

#[test]
fn saved_fuzz_inputs_pass() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The tokenizer target finds the fixture vocabs from crate/fuzz unless told (only this test
    // of this binary reads the variable).
    if std::env::var_os("GGWEB_FUZZ_VOCAB_DIR").is_none() {
        std::env::set_var(
            "GGWEB_FUZZ_VOCAB_DIR",
            here.join("../../shared/fixtures/vocab"),
        );
    }
    let root = here.join("../crate/fuzz/regressions");
    let mut replayed = 0;
    for (name, run) in TARGETS {
        let dir = root.join(name);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(r.is_ok(), "fuzz target {name}: {} fails", f.display());
            replayed += 1;
        }
    }
    println!("{replayed} saved fuzz inputs replayed");
    // The directory holds 30-odd inputs (README of crate/fuzz/regressions): none read means a
    // wrong path, not a pass.
    assert!(
        replayed >= 20,
        "only {replayed} saved inputs found under {}",
        root.display()
    );
}
