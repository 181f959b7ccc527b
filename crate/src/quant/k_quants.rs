//! The k-quants: 256-element super-blocks q2_K … q6_K and the activation type q8_K.
//!
//! Quantization follows ggml's reference functions (`quantize_row_q*_K_ref` with
//! `make_qkx2_quants`, `make_q3_quants`, `make_qx_quants`), operation by operation in f32, so the
//! bytes match ggml's.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::{check_len, fp16, nearest_int, GgmlBlock};
use crate::dtype::{DType, QK_K};

const GROUP_MAX_EPS: f32 = 1e-15;

/// 2-bit: 16 groups of 16 with 4-bit scale and 4-bit min each.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ2K {
    /// Low nibble: scale, high nibble: min.
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

/// 3-bit: 2 low bits in `qs`, the high bit in `hmask`, 16 6-bit signed scales.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

/// 4-bit: 8 groups of 32 with 6-bit scale and min (`get_scale_min_k4`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// 5-bit: q4_K plus one high bit per element in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// 6-bit: low 4 bits in `ql`, high 2 bits in `qh`, 16 8-bit signed scales.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// 8-bit activations of the k-quant dots: f32 scale, `bsums` = sums of each 16 quants.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

fn check_blocks(what: &str, blocks: usize, elems: usize) {
    check_len(what, elems, blocks * QK_K);
}

// ---------------------------------------------------------------------------------------------
// ggml's scale searches.

/// `make_qx_quants` (weights = `rmse_type`-derived, no importance matrix). `l` gets `q + nmax`.
fn make_qx_quants(n: usize, nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32) -> f32 {
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in &x[..n] {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = -(nmax as f32) / max;
    if rmse_type == 0 {
        for i in 0..n {
            let l = nearest_int(iscale * x[i]);
            l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
        }
        return 1.0 / iscale;
    }
    let (rmse_type, return_early) = if rmse_type < 0 {
        (-rmse_type, true)
    } else {
        (rmse_type, false)
    };
    let weight = |v: f32| -> f32 {
        match rmse_type {
            1 => v * v,
            2 => 1.0,
            3 => v.abs(),
            _ => v.abs().sqrt(),
        }
    };
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = weight(x[i]);
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in &x[..n] {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            let w = weight(v);
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants`. `l` gets `q + nmax`.
fn make_q3_quants(n: usize, nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in &x[..n] {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    if do_rmse {
        let mut sumlx = 0f32;
        let mut suml2 = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
            l_out[i] = l as i8;
            let w = x[i] * x[i];
            sumlx += w * x[i] * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        for _itry in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let li = l_out[i] as f32;
                let mut slx = sumlx - w * x[i] * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                    if new_l != l_out[i] as i32 {
                        slx += w * x[i] * new_l as f32;
                        sl2 += w * new_l as f32 * new_l as f32;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l_out[i] = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for l in &mut l_out[..n] {
            *l += nmax as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
    }
    1.0 / iscale
}

/// `make_qkx2_quants`: asymmetric scale + min search. Returns the scale; `the_min` gets −min.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    the_min: &mut f32,
    l_aux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> f32 {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        *the_min = -min;
        return 0.0;
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        *the_min = -min;
        return scale;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0f32;
        let mut sum_l2 = 0f32;
        let mut sum_xl = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            l_aux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let dd = sum_w * sum_l2 - sum_l * sum_l;
        if dd > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / dd;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / dd;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * l_aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&l_aux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    scale
}

/// ggml's `get_scale_min_k4`: 6-bit scale and min of group `j` (0..8).
#[inline(always)]
pub(crate) fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All 8 (scale, min) pairs of a q4_K/q5_K block.
#[inline(always)]
pub(crate) fn scales_mins_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        (sc[j], m[j]) = get_scale_min_k4(j, q);
    }
    (sc, m)
}

/// The 16 signed 6-bit scales of a q3_K block (already minus 32).
#[inline(always)]
pub(crate) fn q3k_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let lo = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (lo | (hi << 4)) as i8 - 32;
    }
    out
}

/// Pack scales/mins (each ≤ 63) into q4_K/q5_K's 12 bytes.
fn pack_scales_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

/// The shared q4_K/q5_K quantizer: group scales with `make_qkx2_quants`, 6-bit packing, then
/// the final quants in `l` (0..=nmax). Returns (d, dmin, scales).
fn quantize_k4_common(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    l: &mut [u8; QK_K],
) -> (f16, f16, [u8; 12]) {
    let mut mins = [0f32; QK_K / 32];
    let mut scales = [0f32; QK_K / 32];
    let mut weights = [0f32; 32];
    let mut l_aux = [0u8; 32];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        scales[j] = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            &mut mins[j],
            &mut l_aux,
            rmin,
            0.1,
            nstep,
            false,
        );
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..QK_K / 32 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let packed = pack_scales_k4(&ls, &lm);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, &packed);
        let dd = fp16(d) * sc as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = fp16(dmin) * m as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / dd).clamp(0, nmax);
            l[32 * j + ii] = q as u8;
        }
    }
    (d, dmin, packed)
}

// ---------------------------------------------------------------------------------------------

impl GgmlBlock for BlockQ2K {
    const DTYPE: DType = DType::Q2_K;
    const BLCK: usize = QK_K;
    type VecDot = BlockQ8K;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q2_K to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK_K)) {
            let d = fp16(x.d);
            let min = fp16(x.dmin);
            let mut out = y.iter_mut();
            let mut is = 0;
            for half in 0..2 {
                let q = &x.qs[32 * half..32 * half + 32];
                for shift in [0, 2, 4, 6] {
                    for part in 0..2 {
                        let sc = x.scales[is];
                        is += 1;
                        let dl = d * (sc & 0xF) as f32;
                        let ml = min * (sc >> 4) as f32;
                        for &qb in &q[16 * part..16 * part + 16] {
                            if let Some(o) = out.next() {
                                *o = dl * ((qb >> shift) & 3) as f32 - ml;
                            }
                        }
                    }
                }
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q2_K from_f32", ys.len(), xs.len());
        const Q4SCALE: f32 = 15.0;
        for (x, y) in xs.chunks_exact(QK_K).zip(ys.iter_mut()) {
            let mut l = [0u8; QK_K];
            let mut l_aux = [0u8; 16];
            let mut weights = [0f32; 16];
            let mut mins = [0f32; QK_K / 16];
            let mut scales = [0f32; QK_K / 16];
            let mut max_scale = 0f32;
            let mut max_min = 0f32;
            for j in 0..QK_K / 16 {
                let xs = &x[16 * j..16 * j + 16];
                for (w, v) in weights.iter_mut().zip(xs) {
                    *w = v.abs();
                }
                scales[j] = make_qkx2_quants(
                    3,
                    xs,
                    &weights,
                    &mut l[16 * j..16 * j + 16],
                    &mut mins[j],
                    &mut l_aux,
                    -0.5,
                    0.1,
                    15,
                    true,
                );
                if scales[j] > max_scale {
                    max_scale = scales[j];
                }
                if mins[j] > max_min {
                    max_min = mins[j];
                }
            }
            if max_scale > 0.0 {
                let iscale = Q4SCALE / max_scale;
                for (ys, s) in y.scales.iter_mut().zip(&scales) {
                    *ys = nearest_int(iscale * s) as u8;
                }
                y.d = f16::from_f32(max_scale / Q4SCALE);
            } else {
                y.scales = [0; QK_K / 16];
                y.d = f16::from_f32(0.0);
            }
            if max_min > 0.0 {
                let iscale = Q4SCALE / max_min;
                for (ys, m) in y.scales.iter_mut().zip(&mins) {
                    let l = nearest_int(iscale * m);
                    *ys |= (l << 4) as u8;
                }
                y.dmin = f16::from_f32(max_min / Q4SCALE);
            } else {
                y.dmin = f16::from_f32(0.0);
            }
            for j in 0..QK_K / 16 {
                let d = fp16(y.d) * (y.scales[j] & 0xF) as f32;
                if d == 0.0 {
                    continue;
                }
                let dm = fp16(y.dmin) * (y.scales[j] >> 4) as f32;
                for ii in 0..16 {
                    let q = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3);
                    l[16 * j + ii] = q as u8;
                }
            }
            pack_2bit(&l, &mut y.qs);
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8K]) -> f32 {
        check_blocks("q2_K vec_dot", xs.len(), n);
        check_len("q2_K vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let mut summs = 0i32;
            for j in 0..16 {
                summs += y.bsums[j] as i32 * (x.scales[j] >> 4) as i32;
            }
            let dall = y.d * fp16(x.d);
            let dmin = y.d * fp16(x.dmin);
            let mut isum = 0i32;
            let mut is = 0;
            let mut q8 = y.qs.chunks_exact(16);
            for half in 0..2 {
                let q2 = &x.qs[32 * half..32 * half + 32];
                for shift in [0, 2, 4, 6] {
                    for part in 0..2 {
                        let d = (x.scales[is] & 0xF) as i32;
                        is += 1;
                        let q8p = q8.next().unwrap_or(&[0; 16]);
                        let s: i32 = q2[16 * part..16 * part + 16]
                            .iter()
                            .zip(q8p)
                            .map(|(a, b)| ((a >> shift) & 3) as i32 * *b as i32)
                            .sum();
                        isum += d * s;
                    }
                }
            }
            sumf += dall * isum as f32 - dmin * summs as f32;
        }
        sumf
    }
}

/// Pack 2-bit quants: byte `l` of each 32-byte group holds elements l, l+32, l+64, l+96.
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
}

/// The signed 3-bit quants (−4..3) of a q3_K block, in element order.
#[inline(always)]
fn q3k_values(x: &BlockQ3K) -> [i8; QK_K] {
    let mut a = [0i8; QK_K];
    let mut m = 1u8;
    for half in 0..2 {
        let q = &x.qs[32 * half..32 * half + 32];
        for shift in [0, 2, 4, 6] {
            let base = 128 * half + 32 * (shift / 2);
            for l in 0..32 {
                let v = ((q[l] >> shift) & 3) as i8;
                a[base + l] = v - if x.hmask[l] & m != 0 { 0 } else { 4 };
            }
            m = m.wrapping_shl(1);
        }
    }
    a
}

impl GgmlBlock for BlockQ3K {
    const DTYPE: DType = DType::Q3_K;
    const BLCK: usize = QK_K;
    type VecDot = BlockQ8K;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q3_K to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK_K)) {
            let d_all = fp16(x.d);
            let scales = q3k_scales(&x.scales);
            let q = q3k_values(x);
            for (g, (yg, qg)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
                let dl = d_all * scales[g] as f32;
                for (o, v) in yg.iter_mut().zip(qg) {
                    *o = dl * *v as f32;
                }
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q3_K from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK_K).zip(ys.iter_mut()) {
            let mut l = [0i8; QK_K];
            let mut scales = [0f32; QK_K / 16];
            let mut max_scale = 0f32;
            let mut amax = 0f32;
            for j in 0..QK_K / 16 {
                scales[j] = make_q3_quants(16, 4, &x[16 * j..], &mut l[16 * j..], true);
                let scale = scales[j].abs();
                if scale > amax {
                    amax = scale;
                    max_scale = scales[j];
                }
            }
            y.scales = [0; 12];
            if max_scale != 0.0 {
                let iscale = -32.0 / max_scale;
                for (j, &s) in scales.iter().enumerate() {
                    let mut l8 = nearest_int(iscale * s) as i8;
                    l8 = l8.clamp(-32, 31) + 32;
                    if j < 8 {
                        y.scales[j] = (l8 & 0xF) as u8;
                    } else {
                        y.scales[j - 8] |= ((l8 & 0xF) << 4) as u8;
                    }
                    l8 >>= 4;
                    y.scales[j % 4 + 8] |= (l8 << (2 * (j / 4))) as u8;
                }
                y.d = f16::from_f32(1.0 / iscale);
            } else {
                y.d = f16::from_f32(0.0);
            }
            let sc = q3k_scales(&y.scales);
            for j in 0..QK_K / 16 {
                let d = fp16(y.d) * sc[j] as f32;
                if d == 0.0 {
                    continue;
                }
                for ii in 0..16 {
                    let q = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
                    l[16 * j + ii] = (q + 4) as i8;
                }
            }
            y.hmask = [0; QK_K / 8];
            let mut m = 0;
            let mut hm = 1u8;
            for lj in l.iter_mut() {
                if *lj > 3 {
                    y.hmask[m] |= hm;
                    *lj -= 4;
                }
                m += 1;
                if m == QK_K / 8 {
                    m = 0;
                    hm = hm.wrapping_shl(1);
                }
            }
            let lu: [u8; QK_K] = bytemuck::cast(l);
            pack_2bit(&lu, &mut y.qs);
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8K]) -> f32 {
        check_blocks("q3_K vec_dot", xs.len(), n);
        check_len("q3_K vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let a = q3k_values(x);
            let scales = q3k_scales(&x.scales);
            let mut isum = 0i32;
            for g in 0..16 {
                let s: i32 = a[16 * g..16 * g + 16]
                    .iter()
                    .zip(&y.qs[16 * g..16 * g + 16])
                    .map(|(p, q)| *p as i32 * *q as i32)
                    .sum();
                isum += scales[g] as i32 * s;
            }
            sumf += fp16(x.d) * y.d * isum as f32;
        }
        sumf
    }
}

impl GgmlBlock for BlockQ4K {
    const DTYPE: DType = DType::Q4_K;
    const BLCK: usize = QK_K;
    type VecDot = BlockQ8K;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q4_K to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK_K)) {
            let d = fp16(x.d);
            let min = fp16(x.dmin);
            let (sc, m) = scales_mins_k4(&x.scales);
            for (j, y64) in y.chunks_exact_mut(64).enumerate() {
                let q = &x.qs[32 * j..32 * j + 32];
                let (d1, m1) = (d * sc[2 * j] as f32, min * m[2 * j] as f32);
                let (d2, m2) = (d * sc[2 * j + 1] as f32, min * m[2 * j + 1] as f32);
                for l in 0..32 {
                    y64[l] = d1 * (q[l] & 0xF) as f32 - m1;
                    y64[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
                }
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q4_K from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK_K).zip(ys.iter_mut()) {
            let mut l = [0u8; QK_K];
            let (d, dmin, scales) = quantize_k4_common(x, 15, -1.0, 20, &mut l);
            y.d = d;
            y.dmin = dmin;
            y.scales = scales;
            for j in 0..QK_K / 64 {
                for k in 0..32 {
                    y.qs[32 * j + k] = l[64 * j + k] | (l[64 * j + k + 32] << 4);
                }
            }
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8K]) -> f32 {
        check_blocks("q4_K vec_dot", xs.len(), n);
        check_len("q4_K vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let (sc, m) = scales_mins_k4(&x.scales);
            let mut summ = 0i32;
            for j in 0..16 {
                summ += y.bsums[j] as i32 * m[j / 2] as i32;
            }
            let mut isum = 0i32;
            for j in 0..4 {
                let q = &x.qs[32 * j..32 * j + 32];
                let q8 = &y.qs[64 * j..64 * j + 64];
                let mut s1 = 0i32;
                let mut s2 = 0i32;
                for l in 0..32 {
                    s1 += (q[l] & 0xF) as i32 * q8[l] as i32;
                    s2 += (q[l] >> 4) as i32 * q8[l + 32] as i32;
                }
                isum += sc[2 * j] as i32 * s1 + sc[2 * j + 1] as i32 * s2;
            }
            sumf += fp16(x.d) * y.d * isum as f32 - fp16(x.dmin) * y.d * summ as f32;
        }
        sumf
    }
}

impl GgmlBlock for BlockQ5K {
    const DTYPE: DType = DType::Q5_K;
    const BLCK: usize = QK_K;
    type VecDot = BlockQ8K;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q5_K to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK_K)) {
            let d = fp16(x.d);
            let min = fp16(x.dmin);
            let (sc, m) = scales_mins_k4(&x.scales);
            for (j, y64) in y.chunks_exact_mut(64).enumerate() {
                let ql = &x.qs[32 * j..32 * j + 32];
                let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
                let (d1, m1) = (d * sc[2 * j] as f32, min * m[2 * j] as f32);
                let (d2, m2) = (d * sc[2 * j + 1] as f32, min * m[2 * j + 1] as f32);
                for l in 0..32 {
                    let h1 = if x.qh[l] & u1 != 0 { 16 } else { 0 };
                    let h2 = if x.qh[l] & u2 != 0 { 16 } else { 0 };
                    y64[l] = d1 * ((ql[l] & 0xF) + h1) as f32 - m1;
                    y64[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
                }
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q5_K from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK_K).zip(ys.iter_mut()) {
            let mut l = [0u8; QK_K];
            let (d, dmin, scales) = quantize_k4_common(x, 31, -0.5, 15, &mut l);
            y.d = d;
            y.dmin = dmin;
            y.scales = scales;
            y.qh = [0; QK_K / 8];
            let (mut m1, mut m2) = (1u8, 2u8);
            for j in 0..QK_K / 64 {
                for k in 0..32 {
                    let mut l1 = l[64 * j + k];
                    if l1 > 15 {
                        l1 -= 16;
                        y.qh[k] |= m1;
                    }
                    let mut l2 = l[64 * j + k + 32];
                    if l2 > 15 {
                        l2 -= 16;
                        y.qh[k] |= m2;
                    }
                    y.qs[32 * j + k] = l1 | (l2 << 4);
                }
                m1 = m1.wrapping_shl(2);
                m2 = m2.wrapping_shl(2);
            }
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8K]) -> f32 {
        check_blocks("q5_K vec_dot", xs.len(), n);
        check_len("q5_K vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let (sc, m) = scales_mins_k4(&x.scales);
            let mut summ = 0i32;
            for j in 0..16 {
                summ += y.bsums[j] as i32 * m[j / 2] as i32;
            }
            let mut isum = 0i32;
            for j in 0..4 {
                let q = &x.qs[32 * j..32 * j + 32];
                let q8 = &y.qs[64 * j..64 * j + 64];
                let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
                let mut s1 = 0i32;
                let mut s2 = 0i32;
                for l in 0..32 {
                    let h1 = if x.qh[l] & u1 != 0 { 16 } else { 0 };
                    let h2 = if x.qh[l] & u2 != 0 { 16 } else { 0 };
                    s1 += ((q[l] & 0xF) as i32 + h1) * q8[l] as i32;
                    s2 += ((q[l] >> 4) as i32 + h2) * q8[l + 32] as i32;
                }
                isum += sc[2 * j] as i32 * s1 + sc[2 * j + 1] as i32 * s2;
            }
            sumf += fp16(x.d) * y.d * isum as f32 - fp16(x.dmin) * y.d * summ as f32;
        }
        sumf
    }
}

/// The signed 6-bit quants (−32..31) of a q6_K block, in element order.
#[inline(always)]
fn q6k_values(x: &BlockQ6K) -> [i8; QK_K] {
    let mut a = [0i8; QK_K];
    for half in 0..2 {
        let ql = &x.ql[64 * half..64 * half + 64];
        let qh = &x.qh[32 * half..32 * half + 32];
        let o = &mut a[128 * half..128 * half + 128];
        for l in 0..32 {
            o[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
            o[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            o[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            o[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    a
}

impl GgmlBlock for BlockQ6K {
    const DTYPE: DType = DType::Q6_K;
    const BLCK: usize = QK_K;
    type VecDot = BlockQ8K;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q6_K to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK_K)) {
            let d = fp16(x.d);
            let q = q6k_values(x);
            for (g, (yg, qg)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
                let ds = d * x.scales[g] as f32;
                for (o, v) in yg.iter_mut().zip(qg) {
                    *o = ds * *v as f32;
                }
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q6_K from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK_K).zip(ys.iter_mut()) {
            let mut l = [0i8; QK_K];
            let mut scales = [0f32; QK_K / 16];
            let mut max_scale = 0f32;
            let mut max_abs_scale = 0f32;
            for ib in 0..QK_K / 16 {
                let scale = make_qx_quants(16, 32, &x[16 * ib..], &mut l[16 * ib..], 1);
                scales[ib] = scale;
                if scale.abs() > max_abs_scale {
                    max_abs_scale = scale.abs();
                    max_scale = scale;
                }
            }
            if max_abs_scale < GROUP_MAX_EPS {
                *y = BlockQ6K::zeroed();
                continue;
            }
            let iscale = -128.0 / max_scale;
            y.d = f16::from_f32(1.0 / iscale);
            for (ys, s) in y.scales.iter_mut().zip(&scales) {
                *ys = nearest_int(iscale * s).min(127) as i8;
            }
            for j in 0..QK_K / 16 {
                let d = fp16(y.d) * y.scales[j] as f32;
                if d == 0.0 {
                    continue;
                }
                for ii in 0..16 {
                    let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                    l[16 * j + ii] = (q + 32) as i8;
                }
            }
            let l: [u8; QK_K] = bytemuck::cast(l);
            for half in 0..2 {
                let j = 128 * half;
                let ql = &mut y.ql[64 * half..64 * half + 64];
                for k in 0..32 {
                    let q1 = l[j + k] & 0xF;
                    let q2 = l[j + k + 32] & 0xF;
                    let q3 = l[j + k + 64] & 0xF;
                    let q4 = l[j + k + 96] & 0xF;
                    ql[k] = q1 | (q3 << 4);
                    ql[k + 32] = q2 | (q4 << 4);
                }
                let qh = &mut y.qh[32 * half..32 * half + 32];
                for k in 0..32 {
                    qh[k] = (l[j + k] >> 4)
                        | ((l[j + k + 32] >> 4) << 2)
                        | ((l[j + k + 64] >> 4) << 4)
                        | ((l[j + k + 96] >> 4) << 6);
                }
            }
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8K]) -> f32 {
        check_blocks("q6_K vec_dot", xs.len(), n);
        check_len("q6_K vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let a = q6k_values(x);
            let mut isum = 0i32;
            for g in 0..16 {
                let s: i32 = a[16 * g..16 * g + 16]
                    .iter()
                    .zip(&y.qs[16 * g..16 * g + 16])
                    .map(|(p, q)| *p as i32 * *q as i32)
                    .sum();
                isum += x.scales[g] as i32 * s;
            }
            sumf += fp16(x.d) * y.d * isum as f32;
        }
        sumf
    }
}

impl GgmlBlock for BlockQ8K {
    const DTYPE: DType = DType::Q8_K;
    const BLCK: usize = QK_K;
    type VecDot = BlockQ8K;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q8_K to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK_K)) {
            for (o, q) in y.iter_mut().zip(x.qs) {
                *o = x.d * q as f32;
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q8_K from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK_K).zip(ys.iter_mut()) {
            let mut max = 0f32;
            let mut amax = 0f32;
            for &v in x {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            if amax == 0.0 {
                y.d = 0.0;
                y.qs = [0; QK_K];
                // ggml leaves bsums untouched here; zero them so the block is fully defined.
                y.bsums = [0; QK_K / 16];
                continue;
            }
            let iscale = -127.0 / max;
            for (q, &v) in y.qs.iter_mut().zip(x) {
                *q = nearest_int(iscale * v).min(127) as i8;
            }
            q8k_bsums(y);
            y.d = 1.0 / iscale;
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8K]) -> f32 {
        check_blocks("q8_K vec_dot", xs.len(), n);
        check_len("q8_K vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let sumi: i32 =
                x.qs.iter()
                    .zip(&y.qs)
                    .map(|(a, b)| *a as i32 * *b as i32)
                    .sum();
            sumf += x.d * y.d * sumi as f32;
        }
        sumf
    }
}

/// Fill `bsums` from `qs`.
#[inline(always)]
pub(crate) fn q8k_bsums(y: &mut BlockQ8K) {
    for j in 0..QK_K / 16 {
        let s: i32 = y.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
        y.bsums[j] = s as i16;
    }
}
