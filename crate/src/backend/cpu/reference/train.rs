//! Scalar references for the backward-pass ops and the optimizer steps, written from their
//! definitions in f64: the gradients as Jacobian-transpose products or scatters over the
//! forward op's index map (the CPU kernels gather instead), the optimizers as ggml's formulas.
//! Arrays are [`Dense`] (logical order, i0 fastest).

use super::basic::{unary, Dense};
use crate::tensor::{PoolOp, UnaryOp};

fn idx(ne: [usize; 4], i: [usize; 4]) -> usize {
    i[0] + ne[0] * (i[1] + ne[1] * (i[2] + ne[2] * i[3]))
}

fn each(ne: [usize; 4], mut f: impl FnMut([usize; 4])) {
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..ne[0] {
                    f([i0, i1, i2, i3]);
                }
            }
        }
    }
}

fn to_dense(ne: [usize; 4], v: Vec<f64>) -> Dense {
    Dense::new(ne, v.into_iter().map(|x| x as f32).collect())
}

/// Every element of `a` added into the element of shape `ne` it is a tile of.
pub fn repeat_back(a: &Dense, ne: [usize; 4]) -> Dense {
    let mut out = vec![0f64; ne.iter().product()];
    each(a.ne, |i| {
        let j = [i[0] % ne[0], i[1] % ne[1], i[2] % ne[2], i[3] % ne[3]];
        out[idx(ne, j)] += a.get(i) as f64;
    });
    to_dense(ne, out)
}

/// `g * f'(x)` with the derivative taken by a central difference of the f64 function
/// (h = 1e-6, error ~1e-10; away from the kinks of abs and relu).
pub fn unary_back(u: UnaryOp, g: &Dense, x: &Dense) -> Dense {
    let h = 1e-6;
    let v = g
        .data
        .iter()
        .zip(&x.data)
        .map(|(&g, &x)| {
            let x = x as f64;
            g as f64 * (unary(u, x + h) - unary(u, x - h)) / (2.0 * h)
        })
        .collect();
    to_dense(x.ne, v)
}

/// The gradient of norm / rms_norm over rows as the Jacobian-transpose product
/// `dx_j = sum_i g_i dy_i/dx_j`: norm `dy_i/dx_j = (δij - 1/n)/σ - y_i y_j/(nσ)`, rms_norm
/// `dy_i/dx_j = δij r - x_i x_j r³/n`.
pub fn norm_back(g: &Dense, x: &Dense, eps: f32, rms: bool) -> Dense {
    let ne = x.ne;
    let n = ne[0];
    let mut out = vec![0f64; ne.iter().product()];
    for row in 0..ne[1] * ne[2] * ne[3] {
        let xs: Vec<f64> = (0..n).map(|i| x.data[row * n + i] as f64).collect();
        let gs: Vec<f64> = (0..n).map(|i| g.data[row * n + i] as f64).collect();
        let mean = if rms {
            0.0
        } else {
            xs.iter().sum::<f64>() / n as f64
        };
        let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let r = 1.0 / (var + eps as f64).sqrt();
        let ys: Vec<f64> = xs.iter().map(|v| (v - mean) * r).collect();
        for j in 0..n {
            let mut s = 0.0;
            for i in 0..n {
                let d = if i == j { 1.0 } else { 0.0 };
                let jac = if rms {
                    d * r - xs[i] * xs[j] * r * r * r / n as f64
                } else {
                    (d - 1.0 / n as f64) * r - ys[i] * ys[j] * r / n as f64
                };
                s += gs[i] * jac;
            }
            out[row * n + j] = s;
        }
    }
    to_dense(ne, out)
}

/// `g` added into zeros of the contiguous f32 shape `ne` at the view's elements (byte strides
/// `nb`, byte `offset`).
pub fn view_back(g: &Dense, ne: [usize; 4], nb: [usize; 4], offset: usize) -> Dense {
    let mut out = vec![0f64; ne.iter().product()];
    each(g.ne, |i| {
        let byte = offset + i[0] * nb[0] + i[1] * nb[1] + i[2] * nb[2] + i[3] * nb[3];
        out[byte / 4] += g.get(i) as f64;
    });
    to_dense(ne, out)
}

/// Row j of `g` (in slice i2, i3) added into row `rows[j, i2, i3]` of zeros of shape `ne`.
pub fn get_rows_back(g: &Dense, rows: &[i32], ne: [usize; 4]) -> Dense {
    let mut out = vec![0f64; ne.iter().product()];
    each(g.ne, |i| {
        let r = rows[i[1] + g.ne[1] * (i[2] + g.ne[2] * i[3])] as usize;
        out[idx(ne, [i[0], r, i[2], i[3]])] += g.get(i) as f64;
    });
    to_dense(ne, out)
}

/// The gradient of im2col: each column element added back onto the input element it was
/// copied from (the forward's index map; padding reads get nothing). Shapes as
/// [`super::matmul::im2col`].
#[allow(clippy::too_many_arguments)]
pub fn im2col_back(
    g: &Dense,
    ine: [usize; 4],
    kne: [usize; 4],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    is_2d: bool,
) -> Dense {
    let mut out = vec![0f64; ine.iter().product()];
    let (kw, kh) = if is_2d { (kne[0], kne[1]) } else { (kne[0], 1) };
    let (ih, ic, n) = if is_2d {
        (ine[1], ine[2], ine[3])
    } else {
        (1, ine[1], ine[2])
    };
    let (ow, oh) = if is_2d {
        (g.ne[1], g.ne[2])
    } else {
        (g.ne[1], 1)
    };
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for c in 0..ic {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let x = (ox * s[0] + kx * d[0]) as i64 - p[0] as i64;
                            let y = if is_2d {
                                (oy * s[1] + ky * d[1]) as i64 - p[1] as i64
                            } else {
                                0
                            };
                            if x < 0 || y < 0 || x as usize >= ine[0] || y as usize >= ih {
                                continue;
                            }
                            let k = (c * kh + ky) * kw + kx;
                            let (gi, ii) = if is_2d {
                                ([k, ox, oy, b], [x as usize, y as usize, c, b])
                            } else {
                                ([k, ox, b, 0], [x as usize, c, b, 0])
                            };
                            out[idx(ine, ii)] += g.get(gi) as f64;
                        }
                    }
                }
            }
        }
    }
    to_dense(ine, out)
}

/// The gradient of pool_2d: avg spreads each output's gradient over its k0*k1 window (padded
/// cells drop their share), max gives it to the window's first strict maximum.
#[allow(clippy::too_many_arguments)]
pub fn pool_2d_back(
    g: &Dense,
    x: &Dense,
    op: PoolOp,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
) -> Dense {
    let mut out = vec![0f64; x.ne.iter().product()];
    each(g.ne, |o| {
        let gv = g.get(o) as f64;
        let mut best: Option<(f32, usize)> = None;
        for ky in 0..k[1] {
            for kx in 0..k[0] {
                let xx = (o[0] * s[0] + kx) as i64 - p[0] as i64;
                let yy = (o[1] * s[1] + ky) as i64 - p[1] as i64;
                if xx < 0 || yy < 0 || xx as usize >= x.ne[0] || yy as usize >= x.ne[1] {
                    continue;
                }
                let at = [xx as usize, yy as usize, o[2], o[3]];
                match op {
                    PoolOp::Avg => out[idx(x.ne, at)] += gv / (k[0] * k[1]) as f64,
                    PoolOp::Max => {
                        let v = x.get(at);
                        if best.is_none_or(|(b, _)| v > b) {
                            best = Some((v, idx(x.ne, at)));
                        }
                    }
                }
            }
        }
        if let Some((_, at)) = best {
            out[at] += gv;
        }
    });
    to_dense(x.ne, out)
}

/// ggml's AdamW step on flat arrays; `hp` = [alpha, beta1, beta2, eps, wd, beta1h, beta2h].
/// Returns the new (w, m, v).
pub fn adamw(w: &[f32], g: &[f32], m: &[f32], v: &[f32], hp: [f32; 7]) -> [Vec<f32>; 3] {
    let [alpha, b1, b2, eps, wd, b1h, b2h] = hp.map(|x| x as f64);
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..w.len() {
        let gi = g[i] as f64;
        let mi = m[i] as f64 * b1 + gi * (1.0 - b1);
        let vi = v[i] as f64 * b2 + gi * gi * (1.0 - b2);
        let wi = w[i] as f64 * (1.0 - alpha * wd) - alpha * (mi * b1h) / ((vi * b2h).sqrt() + eps);
        out[0].push(wi as f32);
        out[1].push(mi as f32);
        out[2].push(vi as f32);
    }
    out
}

/// SGD with weight decay: `w * (1 - alpha wd) - alpha g`.
pub fn sgd(w: &[f32], g: &[f32], alpha: f32, wd: f32) -> Vec<f32> {
    let (a, wd) = (alpha as f64, wd as f64);
    w.iter()
        .zip(g)
        .map(|(&w, &g)| (w as f64 * (1.0 - a * wd) - a * g as f64) as f32)
        .collect()
}

/// The gradient of rope: each rotated pair of `g` turned back by its angle (the transpose of
/// the rotation: `[c s; -s c]`), dims past n_dims passed through. `pos` per index i2,
/// `freq` the optional frequency factors.
pub fn rope_back(
    g: &Dense,
    pos: &[i32],
    freq: Option<&[f32]>,
    p: &crate::tensor::RopeParams,
) -> Dense {
    use crate::tensor::RopeMode;
    let mut out = g.clone();
    let half = p.n_dims / 2;
    each([1, g.ne[1], g.ne[2], g.ne[3]], |r| {
        for k in 0..half {
            let ff = freq.map_or(1.0, |f| f[k] as f64);
            let (c, s) = super::basic::rope_angle(p, pos[r[2]] as f64, k, ff);
            let (j0, j1) = match p.mode {
                RopeMode::Normal => (2 * k, 2 * k + 1),
                RopeMode::Neox => (k, k + half),
            };
            let (a, b) = (
                g.get([j0, r[1], r[2], r[3]]) as f64,
                g.get([j1, r[1], r[2], r[3]]) as f64,
            );
            out.set([j0, r[1], r[2], r[3]], (a * c + b * s) as f32);
            out.set([j1, r[1], r[2], r[3]], (-a * s + b * c) as f32);
        }
    });
    out
}
