//! Scalar reference implementations of the CPU ops: plain index loops in f64 over dense,
//! dequantized f32 arrays, single-threaded and obviously correct. Tests compare the real
//! kernels (threaded, strided, SIMD) against these. `train` covers the backward and optimizer ops.

pub mod basic;
pub mod matmul;
pub mod train;
