pub mod matmul;
