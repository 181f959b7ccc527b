//! Scalar reference implementations: plain loops, single-threaded, on f32 data in logical
//! (contiguous) order. Tests compare the real kernels against these.

pub mod matmul;
