//! GGUF reader and writer.
