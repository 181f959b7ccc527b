//! Token sampling as llama.cpp's default chain: repetition penalties → top-k → top-p → min-p →
//! temperature → draw. Temperature ≤ 0 is greedy (argmax).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Sampling options (llama.cpp's defaults).
#[derive(Debug, Clone)]
pub struct SamplerOptions {
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// 1.0 = off.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0x5eed,
        }
    }
}

impl SamplerOptions {
    /// Rejects options that would make the chain degenerate silently (NaN or out-of-range
    /// values, e.g. from JS): a typed error instead of garbage tokens.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: &str, v: f32| {
            Err(crate::Error::InvalidArgument(format!(
                "sampler option {what} = {v} is out of range"
            )))
        };
        if !self.temperature.is_finite() {
            return bad("temperature", self.temperature);
        }
        for (what, v) in [("top_p", self.top_p), ("min_p", self.min_p)] {
            if !(0.0..=1.0).contains(&v) {
                return bad(what, v);
            }
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat_penalty", self.repeat_penalty);
        }
        Ok(())
    }

    pub fn greedy() -> Self {
        SamplerOptions {
            temperature: 0.0,
            ..Default::default()
        }
    }
}

pub struct Sampler {
    pub opts: SamplerOptions,
    rng: SmallRng,
    history: Vec<u32>,
}

impl Sampler {
    pub fn new(opts: SamplerOptions) -> Self {
        let rng = SmallRng::seed_from_u64(opts.seed);
        Sampler {
            opts,
            rng,
            history: Vec::new(),
        }
    }

    /// Remember tokens (prompt and generated) for the repetition penalty.
    pub fn accept(&mut self, token: u32) {
        self.history.push(token);
    }

    pub fn reset(&mut self) {
        self.history.clear();
    }

    /// Pick the next token from `logits`.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let o = &self.opts;
        let mut logits = logits.to_vec();
        if o.repeat_penalty != 1.0 && o.repeat_last_n > 0 {
            let start = self.history.len().saturating_sub(o.repeat_last_n);
            let mut seen = std::collections::HashSet::new();
            for &t in &self.history[start..] {
                if seen.insert(t) {
                    if let Some(l) = logits.get_mut(t as usize) {
                        *l = if *l > 0.0 {
                            *l / o.repeat_penalty
                        } else {
                            *l * o.repeat_penalty
                        };
                    }
                }
            }
        }
        if o.temperature <= 0.0 {
            return argmax(&logits);
        }
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if o.top_k > 0 {
            cand.truncate(o.top_k.max(1));
        }
        let probs = |c: &[(u32, f32)]| -> Vec<f32> {
            let max = c[0].1;
            let e: Vec<f32> = c.iter().map(|x| (x.1 - max).exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(|x| x / s).collect()
        };
        if o.top_p < 1.0 {
            let p = probs(&cand);
            let mut acc = 0.0;
            let mut keep = cand.len();
            for (i, pi) in p.iter().enumerate() {
                acc += pi;
                if acc >= o.top_p {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if o.min_p > 0.0 {
            let p = probs(&cand);
            let thr = p[0] * o.min_p;
            let keep = p.iter().take_while(|&&x| x >= thr).count();
            cand.truncate(keep.max(1));
        }
        for c in cand.iter_mut() {
            c.1 /= o.temperature;
        }
        let p = probs(&cand);
        let r: f32 = self.rng.gen();
        let mut acc = 0.0;
        for (i, pi) in p.iter().enumerate() {
            acc += pi;
            if r < acc {
                return cand[i].0;
            }
        }
        cand[cand.len() - 1].0
    }
}

/// Index of the largest logit (first on ties, as llama.cpp's greedy sampler).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_errors() {
        for o in [
            SamplerOptions {
                temperature: f32::NAN,
                ..Default::default()
            },
            SamplerOptions {
                top_p: f32::NAN,
                ..Default::default()
            },
            SamplerOptions {
                top_p: 1.5,
                ..Default::default()
            },
            SamplerOptions {
                min_p: -0.1,
                ..Default::default()
            },
            SamplerOptions {
                repeat_penalty: 0.0,
                ..Default::default()
            },
            SamplerOptions {
                repeat_penalty: f32::INFINITY,
                ..Default::default()
            },
        ] {
            assert!(o.validate().is_err(), "{o:?}");
        }
        SamplerOptions::default().validate().unwrap();
        SamplerOptions::greedy().validate().unwrap();
        SamplerOptions {
            temperature: -1.0,
            ..Default::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn greedy_and_filters() {
        let logits = [0.1, 3.0, 2.9, -1.0, 0.0];
        let mut s = Sampler::new(SamplerOptions::greedy());
        assert_eq!(s.sample(&logits), 1);
        // top_k = 1 with temperature is greedy too.
        let mut s = Sampler::new(SamplerOptions {
            top_k: 1,
            ..Default::default()
        });
        assert_eq!(s.sample(&logits), 1);
        // Repetition penalty pushes token 1 below token 2.
        let mut s = Sampler::new(SamplerOptions {
            repeat_penalty: 1.5,
            ..SamplerOptions::greedy()
        });
        s.accept(1);
        assert_eq!(s.sample(&logits), 2);
        // min_p keeps only near-top candidates: samples are always 1 or 2.
        let mut s = Sampler::new(SamplerOptions {
            min_p: 0.5,
            top_k: 0,
            top_p: 1.0,
            temperature: 1.0,
            ..Default::default()
        });
        let mut seen = [0; 5];
        for _ in 0..200 {
            seen[s.sample(&logits) as usize] += 1;
        }
        assert!(
            seen[1] > 0 && seen[2] > 0 && seen[0] + seen[3] + seen[4] == 0,
            "{seen:?}"
        );
    }

    #[test]
    fn seed_is_deterministic() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = Sampler::new(SamplerOptions {
                seed,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                temperature: 1.5,
                ..Default::default()
            });
            (0..20).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }
}
