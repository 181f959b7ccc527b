//! Integration tests of the native build live in tests/.
