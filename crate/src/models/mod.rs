//! Models built on the core: MNIST, and the weights loader they share.
pub mod arch;
pub mod bert;
pub mod chat;
pub mod generate;
pub mod llama;
pub mod llm;
pub mod mnist;
pub mod runner;
pub mod sampler;
pub mod split;
pub mod tokenizer;
pub mod train;
pub mod weights;
