//! Scalar references for mul_mat, im2col, conv_2d, pool_2d, argmax and cross-entropy loss.
//!
//! All inputs are dense f32 arrays in ggml element order (index = i0 + ne0*(i1 + ne1*(i2 +
//! ne2*i3))) with their shapes; quantized weights are passed already dequantized. Sums are in f64.

use crate::tensor::PoolOp;

fn idx(ne: [usize; 4], i0: usize, i1: usize, i2: usize, i3: usize) -> usize {
    i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3))
}

/// `dst[i, j, i2, i3] = sum_k a[k, i, i2 / (ne12/ne02), i3 / (ne13/ne03)] * b[k, j, i2, i3]`;
/// dst is [ane[1], bne[1], bne[2], bne[3]].
pub fn mul_mat(a: &[f32], ane: [usize; 4], b: &[f32], bne: [usize; 4]) -> Vec<f32> {
    assert_eq!(ane[0], bne[0]);
    let k = ane[0];
    let (r2, r3) = (bne[2] / ane[2], bne[3] / ane[3]);
    let dne = [ane[1], bne[1], bne[2], bne[3]];
    let mut out = vec![0f32; dne.iter().product()];
    for i3 in 0..dne[3] {
        for i2 in 0..dne[2] {
            for j in 0..dne[1] {
                for i in 0..dne[0] {
                    let mut s = 0f64;
                    for kk in 0..k {
                        s += a[idx(ane, kk, i, i2 / r2, i3 / r3)] as f64
                            * b[idx(bne, kk, j, i2, i3)] as f64;
                    }
                    out[idx(dne, i, j, i2, i3)] = s as f32;
                }
            }
        }
    }
    out
}

/// ggml_calc_conv_output_size.
pub fn conv_out(ins: usize, ks: usize, s: usize, p: usize, d: usize) -> usize {
    (ins as i64 + 2 * p as i64 - d as i64 * (ks as i64 - 1) - 1) as usize / s + 1
}

/// im2col by definition: for 2D, input [IW, IH, IC, N] and kernel shape [KW, KH, IC, OC] give
/// [IC*KH*KW, OW, OH, N] with element (ic*KH*KW + kh*KW + kw, ow, oh, n) =
/// input[ow*s0 + kw*d0 - p0, oh*s1 + kh*d1 - p1, ic, n] (0 outside). 1D: input [IW, IC, N],
/// kernel [KW, IC, OC] → [IC*KW, OW, N].
#[allow(clippy::too_many_arguments)]
pub fn im2col(
    input: &[f32],
    ine: [usize; 4],
    kne: [usize; 4],
    s0: usize,
    s1: usize,
    p0: usize,
    p1: usize,
    d0: usize,
    d1: usize,
    is_2d: bool,
) -> (Vec<f32>, [usize; 4]) {
    // View the 1D case as 2D with IH = KH = 1.
    let (iw, ih, ic, n) = if is_2d {
        (ine[0], ine[1], ine[2], ine[3])
    } else {
        (ine[0], 1, ine[1], ine[2])
    };
    let (kw, kh) = if is_2d { (kne[0], kne[1]) } else { (kne[0], 1) };
    let ow = conv_out(iw, kw, s0, p0, d0);
    let oh = if is_2d {
        conv_out(ih, kh, s1, p1, d1)
    } else {
        1
    };
    let (s1, p1, d1) = if is_2d { (s1, p1, d1) } else { (1, 0, 1) };
    let dne = if is_2d {
        [ic * kh * kw, ow, oh, n]
    } else {
        [ic * kw, ow, n, 1]
    };
    let mut out = vec![0f32; dne.iter().product()];
    let kk = ic * kh * kw;
    for b in 0..n {
        for y in 0..oh {
            for x in 0..ow {
                for c in 0..ic {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let sx = (x * s0 + kx * d0) as i64 - p0 as i64;
                            let sy = (y * s1 + ky * d1) as i64 - p1 as i64;
                            let v = if sx < 0 || sy < 0 || sx >= iw as i64 || sy >= ih as i64 {
                                0.0
                            } else {
                                input[sx as usize + iw * (sy as usize + ih * (c + ic * b))]
                            };
                            let o = c * kh * kw + ky * kw + kx + kk * (x + ow * (y + oh * b));
                            out[o] = v;
                        }
                    }
                }
            }
        }
    }
    (out, dne)
}

/// Direct 2D convolution (cross-correlation, as ggml_conv_2d): kernel [KW, KH, IC, OC],
/// input [IW, IH, IC, N] → [OW, OH, OC, N].
#[allow(clippy::too_many_arguments)]
pub fn conv_2d(
    kernel: &[f32],
    kne: [usize; 4],
    input: &[f32],
    ine: [usize; 4],
    s0: usize,
    s1: usize,
    p0: usize,
    p1: usize,
    d0: usize,
    d1: usize,
) -> (Vec<f32>, [usize; 4]) {
    let (kw, kh, ic, oc) = (kne[0], kne[1], kne[2], kne[3]);
    let (iw, ih, n) = (ine[0], ine[1], ine[3]);
    assert_eq!(ine[2], ic);
    let ow = conv_out(iw, kw, s0, p0, d0);
    let oh = conv_out(ih, kh, s1, p1, d1);
    let dne = [ow, oh, oc, n];
    let mut out = vec![0f32; dne.iter().product()];
    for b in 0..n {
        for o in 0..oc {
            for y in 0..oh {
                for x in 0..ow {
                    let mut s = 0f64;
                    for c in 0..ic {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let sx = (x * s0 + kx * d0) as i64 - p0 as i64;
                                let sy = (y * s1 + ky * d1) as i64 - p1 as i64;
                                if sx < 0 || sy < 0 || sx >= iw as i64 || sy >= ih as i64 {
                                    continue;
                                }
                                s += kernel[idx(kne, kx, ky, c, o)] as f64
                                    * input[idx(ine, sx as usize, sy as usize, c, b)] as f64;
                            }
                        }
                    }
                    out[idx(dne, x, y, o, b)] = s as f32;
                }
            }
        }
    }
    (out, dne)
}

/// 2D pooling as ggml_pool_2d: windows at (ox*s0 - p0, oy*s1 - p1); max ignores cells outside the
/// input (-f32::MAX when the window holds none), avg sums the cells inside and divides by k0*k1.
#[allow(clippy::too_many_arguments)]
pub fn pool_2d(
    a: &[f32],
    ne: [usize; 4],
    op: PoolOp,
    k0: usize,
    k1: usize,
    s0: usize,
    s1: usize,
    p0: usize,
    p1: usize,
) -> (Vec<f32>, [usize; 4]) {
    let px = (ne[0] + 2 * p0 - k0) / s0 + 1;
    let py = (ne[1] + 2 * p1 - k1) / s1 + 1;
    let dne = [px, py, ne[2], ne[3]];
    let mut out = vec![0f32; dne.iter().product()];
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for oy in 0..py {
                for ox in 0..px {
                    let mut acc = match op {
                        PoolOp::Max => -f32::MAX as f64,
                        PoolOp::Avg => 0.0,
                    };
                    for ky in 0..k1 {
                        for kx in 0..k0 {
                            let x = (ox * s0 + kx) as i64 - p0 as i64;
                            let y = (oy * s1 + ky) as i64 - p1 as i64;
                            if x < 0 || y < 0 || x >= ne[0] as i64 || y >= ne[1] as i64 {
                                continue;
                            }
                            let v = a[idx(ne, x as usize, y as usize, i2, i3)] as f64;
                            match op {
                                PoolOp::Max => acc = acc.max(v),
                                PoolOp::Avg => acc += v,
                            }
                        }
                    }
                    if op == PoolOp::Avg {
                        acc /= (k0 * k1) as f64;
                    }
                    out[idx(dne, ox, oy, i2, i3)] = acc as f32;
                }
            }
        }
    }
    (out, dne)
}

/// Index of the maximum of each row; ties pick the last one (as ggml).
pub fn argmax(a: &[f32], ne: [usize; 4]) -> Vec<i32> {
    (0..ne[1])
        .map(|r| {
            let row = &a[r * ne[0]..(r + 1) * ne[0]];
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if v >= row[best] {
                    best = i;
                }
            }
            best as i32
        })
        .collect()
}

/// `-(1/nrows) * sum_rows sum_i labels[i] * log_softmax(logits)[i]`.
pub fn cross_entropy_loss(logits: &[f32], labels: &[f32], ne: [usize; 4]) -> f32 {
    let nc = ne[0];
    let nr = ne[1] * ne[2] * ne[3];
    let mut total = 0f64;
    for r in 0..nr {
        let x = &logits[r * nc..(r + 1) * nc];
        let y = &labels[r * nc..(r + 1) * nc];
        let max = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let lse = x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
        for i in 0..nc {
            total += y[i] as f64 * (x[i] as f64 - lse);
        }
    }
    (-total / nr as f64) as f32
}
