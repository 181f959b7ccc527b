//! wasm-bindgen exports: the Rust side of the npm package `ggweb` (www/).
//!
//! The TypeScript wrapper in `www/src/` is the public API; these exports are its engine. Every
//! fallible export returns `Result<_, JsError>` (this crate's: message + `code`), so a Rust
//! [`ggweb::Error`] reaches JavaScript as a rejected Promise / thrown `Error` with the same
//! message and `error.code` (e.g. "bad-gguf", "shape", "out-of-memory", "busy"). A panic is a bug: the panic hook
//! installed at start-up prints it to the console before the trap.
//!
//! Compiled only for wasm32 (natively this crate is empty, so `cargo test --workspace` works).
#![cfg(target_arch = "wasm32")]

use wasm_bindgen::prelude::*;

mod bench;
mod embed;
mod gguf;
mod graph;
mod js;
mod llm;
mod mnist;
mod train;
#[cfg(feature = "webgpu")]
mod webgpu;

pub use bench::MulMatBench;
pub use embed::EmbedderCore;
pub use gguf::GgufStream;
pub use graph::GraphCore;
pub use llm::{LlmCore, ModelStream};
pub use mnist::MnistCore;
pub use train::TrainerCore;

#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

/// The crate version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// True when this module was built with SIMD128 kernels.
#[wasm_bindgen(js_name = simdEnabled)]
pub fn simd_enabled() -> bool {
    cfg!(target_feature = "simd128")
}

/// True when this module was built with the WebGPU backend (feature `webgpu`).
#[wasm_bindgen(js_name = webgpuCompiled)]
pub fn webgpu_compiled() -> bool {
    cfg!(feature = "webgpu")
}

/// True in the threads build (shared memory + atomics: the CPU backend runs on Web Workers).
#[wasm_bindgen(js_name = threadsEnabled)]
pub fn threads_enabled() -> bool {
    cfg!(target_feature = "atomics")
}

/// The threads the CPU backend of models and graphs created from now on uses: 1, or in the threads
/// build the Web Workers started so far + the calling thread (fewer after `setThreads`).
#[wasm_bindgen(js_name = cpuThreads)]
pub fn cpu_threads() -> usize {
    ggweb::backend::cpu::threadpool::default_n_threads()
}

/// Threads build: use `n` threads (1 ..= workers + 1; 0: all) in what is created from now on.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = setThreads)]
pub fn set_threads(n: usize) {
    ggweb::backend::cpu::threadpool::set_default_n_threads(n);
}

/// Threads build: whether the calling thread may block at a barrier (`Atomics.wait`): false on a
/// browser's main thread (it spins there), true in Node and in workers.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = setCallerMayWait)]
pub fn set_caller_may_wait(yes: bool) {
    ggweb::backend::cpu::threadpool::set_caller_may_wait(yes);
}

/// Threads build: Web Workers that entered [`threads_worker_main`] so far.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = threadsWorkers)]
pub fn threads_workers() -> usize {
    ggweb::backend::cpu::threadpool::workers()
}

/// Threads build: called by each engine worker (www/src/engine-worker.ts) once it instantiated
/// this module on the shared memory; runs CPU jobs for the engine and never returns.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = threadsWorkerMain)]
pub fn threads_worker_main() {
    ggweb::backend::cpu::threadpool::worker_main()
}

/// Whether the SIMD builds' GEMVs touch pages ahead of the weights they stream (wasm has no
/// prefetch; `ggweb::backend::cpu::arch::page_touch`): `undefined` while not chosen (they
/// touch). Speed only: the results are the same bits either way.
#[wasm_bindgen(js_name = cpuPageTouch)]
pub fn cpu_page_touch() -> Option<bool> {
    ggweb::backend::cpu::arch::page_touch()
}

/// Choose the GEMVs' page touches for the whole engine (every thread); `undefined`: not chosen.
#[wasm_bindgen(js_name = setCpuPageTouch)]
pub fn set_cpu_page_touch(on: Option<bool>) {
    ggweb::backend::cpu::arch::set_page_touch(on);
}

/// The CPU kernels in use ("wasm32 simd128 + relaxed-simd", "wasm32 simd128" or "scalar").
#[wasm_bindgen(js_name = cpuFeatures)]
pub fn cpu_features() -> String {
    ggweb::backend::cpu::ops::simd_name().to_string()
}

/// The error every export rejects with: a JS `Error` with the message and a `code` property
/// (`ggweb::Error::code` for crate errors; "busy", "aborted", "invalid-argument" for the
/// bindings' own). Shadows wasm-bindgen's `JsError`, which carries a message only.
pub struct JsError(JsValue);

impl JsError {
    /// An invalid-argument error with this message.
    pub fn new(msg: &str) -> JsError {
        JsError::coded(msg, "invalid-argument")
    }

    pub fn coded(msg: &str, code: &str) -> JsError {
        let e = js_sys::Error::new(msg);
        js::set(&e, "code", code);
        JsError(e.into())
    }
}

impl From<JsError> for JsValue {
    fn from(e: JsError) -> JsValue {
        e.0
    }
}

impl From<ggweb::Error> for JsError {
    fn from(e: ggweb::Error) -> JsError {
        JsError::coded(&e.to_string(), e.code())
    }
}

/// Convert a crate error into a JS error with the same message and its code.
pub(crate) fn js_err(e: ggweb::Error) -> JsError {
    e.into()
}
