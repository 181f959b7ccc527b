//! Models built on the core: MNIST, and the weights loader they share.
pub mod llama;
pub mod mnist;
pub mod sampler;
pub mod weights;
