//! The `ggweb` command-line tool.
fn main() {}
