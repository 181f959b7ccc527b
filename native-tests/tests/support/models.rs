//! The cached model files the LLM tests use (`scripts/fetch-models.sh`).
use std::path::PathBuf;

/// `$env` if set, else `file` in `~/.cache/ggweb/models`; panics naming the fetch script when absent.
pub fn model(env: &str, file: &str) -> PathBuf {
    if let Ok(p) = std::env::var(env) {
        return p.into();
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let p = PathBuf::from(home).join(".cache/ggweb/models").join(file);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh (or set {env})",
        p.display()
    );
    p
}
