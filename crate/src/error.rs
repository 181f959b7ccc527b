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
    #[error("model error: unsupported architecture '{arch}' (supported: {supported})")]
    UnsupportedArch { arch: String, supported: String },
}

impl Error {
    /// A stable short code for the kind of error, for callers that branch on it (the JS API puts
    /// it on the thrown `Error` as `code`; `www/src/env.ts` lists the same strings).
    pub fn code(&self) -> &'static str {
        match self {
            Error::UnknownType(_) | Error::UnsupportedType { .. } | Error::UnsupportedOp(_) => {
                "unsupported"
            }
            Error::Shape(_) => "shape",
            Error::Overflow(_) => "too-large",
            Error::Gguf(_) => "bad-gguf",
            Error::Io(_) => "io",
            Error::OutOfMemory(_) => "out-of-memory",
            Error::Backend(_) => "backend",
            Error::InvalidArgument(_) => "invalid-argument",
            Error::Model(_) => "bad-model",
            Error::UnsupportedArch { .. } => "bad-model",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
