//! Block formats: see the module docs once written.
