//! Test support shared by native-tests and wasm-tests (its own workspace): a seeded generator,
//! ggml's NMSE and the comparison built on it, a reader for the golden JSON files, and the WebGPU
//! op case table with its runners ([`cases`], [`check_group`], [`check_supports_op`], ...).

mod ops;
pub use ops::*;

/// A tiny deterministic generator (xorshift), so CPU and GPU graphs get identical data.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [lo, hi).
    pub fn f(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f(lo, hi)).collect()
    }
    /// Uniform in [0, n).
    pub fn idx(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// A layer's attention GEMVs as SmolLM2 has them (q4_1, one f32 column of 576): the 576×192 K
/// and V products (69 KB of weights each) and the 576×576 Q product (207 KB), allocated on the
/// CPU; the graph's nodes are K, V, Q in that order. For the tests of the executor's plan.
pub fn smollm2_qkv_gemvs() -> (ggweb::Context, ggweb::Graph) {
    use ggweb::{Context, DType, Graph};
    let mut ctx = Context::new();
    let x = ctx.new_tensor_1d(DType::F32, 576).expect("x");
    let w = |ctx: &mut Context, rows| ctx.new_tensor_2d(DType::Q4_1, 576, rows).expect("weight");
    let (wk, wv, wq) = (w(&mut ctx, 192), w(&mut ctx, 192), w(&mut ctx, 576));
    let k = ctx.mul_mat(wk, x).expect("k");
    let v = ctx.mul_mat(wv, x).expect("v");
    let q = ctx.mul_mat(wq, x).expect("q");
    ggweb::alloc::alloc_ctx_tensors(&mut ctx, &ggweb::backend::cpu::cpu_buffer_type())
        .expect("alloc");
    let g = Graph::build(&ctx, &[k, v, q]);
    (ctx, g)
}

/// ggml's normalized mean squared error (the squared error itself against an all-zero reference).
pub fn nmse(out: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(out.len(), reference.len(), "nmse: lengths differ");
    let mut num = 0f64;
    let mut den = 0f64;
    for (a, b) in out.iter().zip(reference) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Compare `out` with `reference`: same length, same NaN pattern, NMSE of the rest < `tol`.
pub fn compare(out: &[f32], reference: &[f32], tol: f64) -> std::result::Result<f64, String> {
    if out.len() != reference.len() {
        return Err(format!(
            "{} values, expected {}",
            out.len(),
            reference.len()
        ));
    }
    if !out
        .iter()
        .zip(reference)
        .all(|(a, b)| a.is_nan() == b.is_nan())
    {
        return Err("NaN pattern differs".into());
    }
    let (o, r): (Vec<f32>, Vec<f32>) = out
        .iter()
        .zip(reference)
        .filter(|(a, _)| !a.is_nan())
        .map(|(a, b)| (*a, *b))
        .unzip();
    let e = nmse(&o, &r);
    if e < tol {
        Ok(e)
    } else {
        Err(format!(
            "NMSE {e:.3e} >= {tol:.1e}; got[..4] {:?} expected[..4] {:?}",
            &out[..out.len().min(4)],
            &reference[..reference.len().min(4)]
        ))
    }
}

/// All floating-point numbers in `s` after the first occurrence of `key`, up to `n` of them
/// (a minimal reader for the golden JSON files, without a JSON crate in wasm).
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
