//! ggweb: a ggml-style tensor library in Rust, native and in the browser.
//!
//! Data flow: GGUF bytes → [`gguf`] (validated) → weights described in a [`Context`] and placed in
//! backend buffers → model code builds a [`Graph`] with op constructors → [`alloc`] plans memory →
//! a backend (or the scheduler) computes it → outputs are read back.
// The wasm threads build (nightly, -Z build-std) blocks at barriers with memory.atomic.wait32.
#![cfg_attr(
    all(target_arch = "wasm32", target_feature = "atomics"),
    feature(stdarch_wasm_atomic_wait)
)]

pub mod alloc;
pub mod backend;
mod backward;
pub mod bench;
pub mod context;
pub mod dtype;
pub mod error;
pub mod gguf;
pub mod graph;
pub mod hugepage;
pub mod models;
mod ops;
pub mod quant;
pub mod tensor;
pub mod tensor_io;

pub use context::Context;
pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::Graph;
pub use tensor::{Op, Tensor, TensorId};
