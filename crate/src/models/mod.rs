//! Model-level code built on the tensor library.

pub mod tokenizer;
