//! References for the elementwise, reduction, normalisation, softmax, rope, copy and indexing
//! ops. Inputs are [`Dense`] arrays: logical values in row-major order (i0 fastest) with their
//! shape; i32 inputs (positions, row indices) are passed as exact f32 values.

use crate::tensor::{Op, RopeMode, RopeParams, UnaryOp};
use crate::{Error, Result};

/// A dense 4-d array of values in logical order.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    pub ne: [usize; 4],
    pub data: Vec<f32>,
}

impl Dense {
    pub fn new(ne: [usize; 4], data: Vec<f32>) -> Dense {
        assert_eq!(
            ne.iter().product::<usize>(),
            data.len(),
            "Dense shape/data mismatch"
        );
        Dense { ne, data }
    }

    pub fn zeros(ne: [usize; 4]) -> Dense {
        Dense {
            ne,
            data: vec![0.0; ne.iter().product()],
        }
    }

    fn offset(&self, i: [usize; 4]) -> usize {
        ((i[3] * self.ne[2] + i[2]) * self.ne[1] + i[1]) * self.ne[0] + i[0]
    }

    pub fn get(&self, i: [usize; 4]) -> f32 {
        self.data[self.offset(i)]
    }

    pub fn set(&mut self, i: [usize; 4], v: f32) {
        let o = self.offset(i);
        self.data[o] = v;
    }
}

/// Every index of shape `ne` in logical order.
fn indices(ne: [usize; 4]) -> Vec<[usize; 4]> {
    let mut out = Vec::new();
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..ne[0] {
                    out.push([i0, i1, i2, i3]);
                }
            }
        }
    }
    out
}

fn src<'a>(srcs: &[Option<&'a Dense>], i: usize, op: &Op) -> Result<&'a Dense> {
    srcs.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| Error::InvalidArgument(format!("reference {}: missing src{i}", op.name())))
}

/// erf by its Maclaurin series (f64), ±1 beyond |x| = 5.
pub fn erf(x: f64) -> f64 {
    if x.abs() >= 5.0 {
        return x.signum();
    }
    let mut term = x; // (-1)^n x^(2n+1) / n!
    let mut s = 0.0;
    for n in 0..200 {
        s += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    s * 2.0 / std::f64::consts::PI.sqrt()
}

/// The unary function `u` at `x` in f64.
pub fn unary(u: UnaryOp, x: f64) -> f64 {
    match u {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Gelu => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::GeluErf => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Exp => x.exp(),
    }
}

/// ALiBi slope of head `h` of `n_head`, written from the definition in f64.
pub fn alibi_slope(max_bias: f64, n_head: usize, h: usize) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    // Largest power of two <= n_head.
    let mut n_log2 = 1usize;
    while n_log2 * 2 <= n_head {
        n_log2 *= 2;
    }
    if h < n_log2 {
        let m0 = 2f64.powf(-max_bias / n_log2 as f64);
        m0.powf((h + 1) as f64)
    } else {
        let m1 = 2f64.powf(-(max_bias / 2.0) / n_log2 as f64);
        m1.powf((2 * (h - n_log2) + 1) as f64)
    }
}

/// (cos, sin) of rotated pair `k` (dims 2k, 2k+1 or k, k+n_dims/2) at position `pos`.
pub fn rope_angle(p: &RopeParams, pos: f64, k: usize, freq_factor: f64) -> (f64, f64) {
    let n_dims = p.n_dims as f64;
    let base = p.freq_base as f64;
    let theta_extrap = pos * base.powf(-2.0 * k as f64 / n_dims) / freq_factor;
    let theta_interp = p.freq_scale as f64 * theta_extrap;
    let mut theta = theta_interp;
    let mut mscale = p.attn_factor as f64;
    if p.ext_factor != 0.0 {
        let corr_dim = |n_rot: f64| {
            n_dims * (p.n_ctx_orig as f64 / (n_rot * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = corr_dim(p.beta_fast as f64).floor().max(0.0);
        let high = corr_dim(p.beta_slow as f64).ceil().min(n_dims - 1.0);
        let y = (k as f64 - low) / (high - low).max(0.001);
        let ramp = (1.0 - y.clamp(0.0, 1.0)) * p.ext_factor as f64;
        theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
        mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln();
    }
    (theta.cos() * mscale, theta.sin() * mscale)
}

/// The result of `op` on `srcs` (None for an absent optional source), with shape `dst_ne`,
/// in logical order. Copy ops return src0's values unconverted.
pub fn compute(op: &Op, srcs: &[Option<&Dense>], dst_ne: [usize; 4]) -> Result<Dense> {
    let mut out = Dense::zeros(dst_ne);
    let a = src(srcs, 0, op)?;
    match *op {
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let b = src(srcs, 1, op)?;
            for i in indices(dst_ne) {
                let x = a.get(i) as f64;
                let bi = [
                    i[0] % b.ne[0],
                    i[1] % b.ne[1],
                    i[2] % b.ne[2],
                    i[3] % b.ne[3],
                ];
                let y = b.get(bi) as f64;
                let r = match op {
                    Op::Add => x + y,
                    Op::Sub => x - y,
                    Op::Mul => x * y,
                    _ => x / y,
                };
                out.set(i, r as f32);
            }
        }
        Op::Scale { s, b } => {
            for i in indices(dst_ne) {
                out.set(i, (a.get(i) as f64 * s as f64 + b as f64) as f32);
            }
        }
        Op::Sqr | Op::Sqrt | Op::Log | Op::Unary(_) => {
            for i in indices(dst_ne) {
                let x = a.get(i) as f64;
                let r = match op {
                    Op::Sqr => x * x,
                    Op::Sqrt => x.sqrt(),
                    Op::Log => x.ln(),
                    Op::Unary(u) => unary(*u, x),
                    _ => unreachable!(),
                };
                out.set(i, r as f32);
            }
        }
        Op::Sum => {
            let s: f64 = a.data.iter().map(|&x| x as f64).sum();
            out.data[0] = s as f32;
        }
        Op::SumRows | Op::Mean => {
            for i in indices(dst_ne) {
                let mut s = 0f64;
                for k in 0..a.ne[0] {
                    s += a.get([k, i[1], i[2], i[3]]) as f64;
                }
                if matches!(op, Op::Mean) {
                    s /= a.ne[0] as f64;
                }
                out.set(i, s as f32);
            }
        }
        Op::Repeat => {
            for i in indices(dst_ne) {
                let j = [
                    i[0] % a.ne[0],
                    i[1] % a.ne[1],
                    i[2] % a.ne[2],
                    i[3] % a.ne[3],
                ];
                out.set(i, a.get(j));
            }
        }
        Op::Concat { dim } => {
            let b = src(srcs, 1, op)?;
            for i in indices(dst_ne) {
                let v = if i[dim] < a.ne[dim] {
                    a.get(i)
                } else {
                    let mut j = i;
                    j[dim] -= a.ne[dim];
                    b.get(j)
                };
                out.set(i, v);
            }
        }
        Op::Norm { eps } | Op::RmsNorm { eps } => {
            let n = a.ne[0];
            for r in indices([1, dst_ne[1], dst_ne[2], dst_ne[3]]) {
                let row: Vec<f64> = (0..n)
                    .map(|k| a.get([k, r[1], r[2], r[3]]) as f64)
                    .collect();
                let mean = if matches!(op, Op::Norm { .. }) {
                    row.iter().sum::<f64>() / n as f64
                } else {
                    0.0
                };
                let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
                let inv = 1.0 / (var + eps as f64).sqrt();
                for (k, x) in row.iter().enumerate() {
                    out.set([k, r[1], r[2], r[3]], ((x - mean) * inv) as f32);
                }
            }
        }
        Op::SoftMax { scale, max_bias } => {
            let mask = srcs.get(1).copied().flatten();
            let n = a.ne[0];
            for r in indices([1, dst_ne[1], dst_ne[2], dst_ne[3]]) {
                let slope = alibi_slope(max_bias as f64, a.ne[2], r[2]);
                let row: Vec<f64> = (0..n)
                    .map(|k| {
                        let x = a.get([k, r[1], r[2], r[3]]) as f64 * scale as f64;
                        match mask {
                            Some(m) => {
                                x + slope * m.get([k, r[1], r[2] % m.ne[2], r[3] % m.ne[3]]) as f64
                            }
                            None => x,
                        }
                    })
                    .collect();
                let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = row.iter().map(|x| (x - max).exp()).sum();
                for (k, x) in row.iter().enumerate() {
                    out.set([k, r[1], r[2], r[3]], ((x - max).exp() / total) as f32);
                }
            }
        }
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => {
            let (k, v) = (src(srcs, 1, op)?, src(srcs, 2, op)?);
            let mask = srcs.get(3).copied().flatten();
            let (dk, n_kv, n_head) = (a.ne[0], k.ne[1], a.ne[2]);
            let group = n_head / k.ne[2];
            for i3 in 0..dst_ne[3] {
                for t in 0..dst_ne[2] {
                    for h in 0..n_head {
                        let (hk, k3) = (h / group, i3 % k.ne[3]);
                        let slope = alibi_slope(max_bias as f64, n_head, h);
                        let s: Vec<f64> = (0..n_kv)
                            .map(|j| {
                                let dot: f64 = (0..dk)
                                    .map(|d| {
                                        a.get([d, t, h, i3]) as f64 * k.get([d, j, hk, k3]) as f64
                                    })
                                    .sum();
                                let mut x = dot * scale as f64;
                                if softcap > 0.0 {
                                    x = softcap as f64 * (x / softcap as f64).tanh();
                                }
                                match mask {
                                    Some(m) => {
                                        x + slope * m.get([j, t, h % m.ne[2], i3 % m.ne[3]]) as f64
                                    }
                                    None => x,
                                }
                            })
                            .collect();
                        let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        // A row with every position masked attends to nothing: zeros.
                        let w: Vec<f64> = if max == f64::NEG_INFINITY {
                            vec![0.0; n_kv]
                        } else {
                            s.iter().map(|x| (x - max).exp()).collect()
                        };
                        let total: f64 = w.iter().sum();
                        for d in 0..dst_ne[0] {
                            let acc: f64 =
                                (0..n_kv).map(|j| w[j] * v.get([d, j, hk, k3]) as f64).sum();
                            let r = if total > 0.0 { acc / total } else { 0.0 };
                            out.set([d, h, t, i3], r as f32);
                        }
                    }
                }
            }
        }
        Op::Rope(p) => {
            let pos = src(srcs, 1, op)?;
            let freq = srcs.get(2).copied().flatten();
            let half = p.n_dims / 2;
            out.data.clone_from(&a.data);
            for r in indices([1, dst_ne[1], dst_ne[2], dst_ne[3]]) {
                let position = pos.data[r[2]] as f64;
                for k in 0..half {
                    let ff = freq.map_or(1.0, |f| f.data[k] as f64);
                    let (c, s) = rope_angle(&p, position, k, ff);
                    let (j0, j1) = match p.mode {
                        RopeMode::Normal => (2 * k, 2 * k + 1),
                        RopeMode::Neox => (k, k + half),
                    };
                    let x0 = a.get([j0, r[1], r[2], r[3]]) as f64;
                    let x1 = a.get([j1, r[1], r[2], r[3]]) as f64;
                    out.set([j0, r[1], r[2], r[3]], (x0 * c - x1 * s) as f32);
                    out.set([j1, r[1], r[2], r[3]], (x0 * s + x1 * c) as f32);
                }
            }
        }
        Op::GetRows => {
            let rows = src(srcs, 1, op)?;
            for i in indices(dst_ne) {
                let r = rows.get([i[1], i[2], i[3], 0]);
                let v = if r >= 0.0 && (r as usize) < a.ne[1] {
                    a.get([i[0], r as usize, i[2], i[3]])
                } else {
                    f32::NAN
                };
                out.set(i, v);
            }
        }
        Op::Dup | Op::Cont | Op::Cpy => {
            if a.data.len() != out.data.len() {
                return Err(Error::Shape("reference copy: element counts differ".into()));
            }
            out.data.clone_from(&a.data);
        }
        _ => {
            return Err(Error::UnsupportedOp(format!(
                "no basic reference for {}",
                op.name()
            )))
        }
    }
    Ok(out)
}
