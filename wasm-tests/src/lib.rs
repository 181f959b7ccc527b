//! Shared helpers of the wasm test suites (tests/*.rs).

/// A deterministic xorshift generator for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u32() as f32 / 4_294_967_296.0) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

/// All floating-point numbers in `s` after the first occurrence of `key`, up to `n` of them
/// (a minimal reader for the golden JSON files).
pub fn numbers_after(s: &str, key: &str, n: usize) -> Vec<f64> {
    let start = s.find(key).map(|i| i + key.len()).unwrap_or(s.len());
    let mut out = Vec::with_capacity(n);
    let mut cur = String::new();
    for c in s[start..].chars() {
        if c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E') {
            cur.push(c);
        } else if !cur.is_empty() {
            if let Ok(x) = cur.parse() {
                out.push(x);
                if out.len() == n {
                    break;
                }
            }
            cur.clear();
        }
    }
    out
}
