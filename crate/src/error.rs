//! One error type for the whole crate. Crossing into JS it becomes an `Error` with the same message.

/// Everything that can go wrong with bad input, unsupported requests or resource limits.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown tensor type id {0}")]
    UnknownType(u32),
    #[error("unsupported type {dtype} for {what}")]
    UnsupportedType { dtype: crate::DType, what: String },
    #[error("unsupported operation: {0}")]
    UnsupportedOp(String),
    #[error("shape error: {0}")]
    Shape(String),
    #[error("size overflow: {0}")]
    Overflow(String),
    #[error("invalid GGUF: {0}")]
    Gguf(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error("backend error: {0}")]
    Backend(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("model error: {0}")]
    Model(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
