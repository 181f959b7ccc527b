//! ggweb: a ggml-style tensor library in Rust, native and in the browser.
//!
//! Data flow: GGUF bytes → [`gguf`] (validated) → weights described in a [`Context`] and placed in
//! backend buffers → model code builds a [`Graph`] with op constructors → [`alloc`] plans memory →
//! a backend (or the scheduler) computes it → outputs are read back.

pub mod dtype;
pub mod error;
pub mod gguf;
pub mod quant;

pub use dtype::DType;
pub use error::{Error, Result};
pub mod backend;
pub mod context;
pub mod graph;
pub mod tensor;

pub use context::Context;
pub use graph::Graph;
pub use tensor::{Op, Tensor, TensorId};
pub mod alloc;
mod ops;
mod tensor_io;
#[cfg(target_arch = "wasm32")]
pub mod wasm;
