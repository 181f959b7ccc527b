//! The 32-element formats: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1 (`ggml-common.h`).
//!
//! Nibble layout of the 4/5-bit types: `qs[j]` holds element `j` in its low nibble and element
//! `j + 16` in its high nibble; the fifth bit of element `j` is bit `j` of the little-endian `qh`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::{check_len, fp16, GgmlBlock, QK};
use crate::dtype::DType;

/// `x = d·(q − 8)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// `x = d·q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// `x = d·(q − 16)`, q 5-bit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// `x = d·q + m`, q 5-bit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// `x = d·q`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// `x = d·q`, with `s = d·Σq` (ggml's current layout; activations of q4_1/q5_1 dots).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

fn check_blocks(what: &str, blocks: usize, elems: usize) {
    check_len(what, elems, blocks * QK);
}

/// ggml's `(int8_t)(v)` for the values these quantizers produce, then `MIN(max, ·)`.
#[inline(always)]
fn trunc_min(v: f32, max: i8) -> u8 {
    (v as i8).min(max) as u8
}

/// Value with the largest magnitude (first one on ties), as ggml's q4_0/q5_0 search it.
#[inline(always)]
fn signed_absmax(xs: &[f32]) -> f32 {
    let mut amax = 0f32;
    let mut max = 0f32;
    for &v in xs {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline(always)]
fn min_max(xs: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in xs {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

impl GgmlBlock for BlockQ4_0 {
    const DTYPE: DType = DType::Q4_0;
    const BLCK: usize = QK;
    type VecDot = BlockQ8_0;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q4_0 to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK)) {
            let d = fp16(x.d);
            for j in 0..QK / 2 {
                y[j] = ((x.qs[j] & 0x0F) as i32 - 8) as f32 * d;
                y[j + QK / 2] = ((x.qs[j] >> 4) as i32 - 8) as f32 * d;
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q4_0 from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK).zip(ys.iter_mut()) {
            let d = signed_absmax(x) / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            y.d = f16::from_f32(d);
            for j in 0..QK / 2 {
                let x0 = trunc_min(x[j] * id + 8.5, 15);
                let x1 = trunc_min(x[j + QK / 2] * id + 8.5, 15);
                y.qs[j] = x0 | (x1 << 4);
            }
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8_0]) -> f32 {
        check_blocks("q4_0 vec_dot", xs.len(), n);
        check_len("q4_0 vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let mut sumi = 0i32;
            for j in 0..QK / 2 {
                let v0 = (x.qs[j] & 0x0F) as i32 - 8;
                let v1 = (x.qs[j] >> 4) as i32 - 8;
                sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + QK / 2] as i32;
            }
            sumf += sumi as f32 * fp16(x.d) * fp16(y.d);
        }
        sumf
    }
}

impl GgmlBlock for BlockQ4_1 {
    const DTYPE: DType = DType::Q4_1;
    const BLCK: usize = QK;
    type VecDot = BlockQ8_1;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q4_1 to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK)) {
            let d = fp16(x.d);
            let m = fp16(x.m);
            for j in 0..QK / 2 {
                y[j] = (x.qs[j] & 0x0F) as f32 * d + m;
                y[j + QK / 2] = (x.qs[j] >> 4) as f32 * d + m;
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q4_1 from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK).zip(ys.iter_mut()) {
            let (min, max) = min_max(x);
            let d = (max - min) / 15.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            y.d = f16::from_f32(d);
            y.m = f16::from_f32(min);
            for j in 0..QK / 2 {
                let x0 = trunc_min((x[j] - min) * id + 0.5, 15);
                let x1 = trunc_min((x[j + QK / 2] - min) * id + 0.5, 15);
                y.qs[j] = x0 | (x1 << 4);
            }
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8_1]) -> f32 {
        check_blocks("q4_1 vec_dot", xs.len(), n);
        check_len("q4_1 vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let mut sumi = 0i32;
            for j in 0..QK / 2 {
                let v0 = (x.qs[j] & 0x0F) as i32;
                let v1 = (x.qs[j] >> 4) as i32;
                sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + QK / 2] as i32;
            }
            sumf += (fp16(x.d) * fp16(y.d)) * sumi as f32 + fp16(x.m) * fp16(y.s);
        }
        sumf
    }
}

/// The 5-bit value of element `j` (0..32) of a q5 block, unsigned (0..32).
#[inline(always)]
fn q5_value(qs: &[u8; 16], qh: u32, j: usize) -> i32 {
    let (nib, bit) = if j < 16 {
        (qs[j] & 0x0F, (qh >> j) & 1)
    } else {
        (qs[j - 16] >> 4, (qh >> j) & 1)
    };
    (nib as u32 | (bit << 4)) as i32
}

impl GgmlBlock for BlockQ5_0 {
    const DTYPE: DType = DType::Q5_0;
    const BLCK: usize = QK;
    type VecDot = BlockQ8_0;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q5_0 to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK)) {
            let d = fp16(x.d);
            let qh = u32::from_le_bytes(x.qh);
            for (j, v) in y.iter_mut().enumerate() {
                *v = (q5_value(&x.qs, qh, j) - 16) as f32 * d;
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q5_0 from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK).zip(ys.iter_mut()) {
            let d = signed_absmax(x) / -16.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            y.d = f16::from_f32(d);
            let mut qh = 0u32;
            for j in 0..QK / 2 {
                let x0 = trunc_min(x[j] * id + 16.5, 31);
                let x1 = trunc_min(x[j + QK / 2] * id + 16.5, 31);
                y.qs[j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
                qh |= (((x0 & 0x10) >> 4) as u32) << j;
                qh |= (((x1 & 0x10) >> 4) as u32) << (j + QK / 2);
            }
            y.qh = qh.to_le_bytes();
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8_0]) -> f32 {
        check_blocks("q5_0 vec_dot", xs.len(), n);
        check_len("q5_0 vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let qh = u32::from_le_bytes(x.qh);
            let mut sumi = 0i32;
            for j in 0..QK {
                sumi += (q5_value(&x.qs, qh, j) - 16) * y.qs[j] as i32;
            }
            sumf += (fp16(x.d) * fp16(y.d)) * sumi as f32;
        }
        sumf
    }
}

impl GgmlBlock for BlockQ5_1 {
    const DTYPE: DType = DType::Q5_1;
    const BLCK: usize = QK;
    type VecDot = BlockQ8_1;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q5_1 to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK)) {
            let d = fp16(x.d);
            let m = fp16(x.m);
            let qh = u32::from_le_bytes(x.qh);
            for (j, v) in y.iter_mut().enumerate() {
                *v = q5_value(&x.qs, qh, j) as f32 * d + m;
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q5_1 from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK).zip(ys.iter_mut()) {
            let (min, max) = min_max(x);
            let d = (max - min) / 31.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            y.d = f16::from_f32(d);
            y.m = f16::from_f32(min);
            let mut qh = 0u32;
            for j in 0..QK / 2 {
                let x0 = ((x[j] - min) * id + 0.5) as u8;
                let x1 = ((x[j + QK / 2] - min) * id + 0.5) as u8;
                y.qs[j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
                qh |= (((x0 & 0x10) >> 4) as u32) << j;
                qh |= (((x1 & 0x10) >> 4) as u32) << (j + QK / 2);
            }
            y.qh = qh.to_le_bytes();
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8_1]) -> f32 {
        check_blocks("q5_1 vec_dot", xs.len(), n);
        check_len("q5_1 vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let qh = u32::from_le_bytes(x.qh);
            let mut sumi = 0i32;
            for j in 0..QK {
                sumi += q5_value(&x.qs, qh, j) * y.qs[j] as i32;
            }
            sumf += (fp16(x.d) * fp16(y.d)) * sumi as f32 + fp16(x.m) * fp16(y.s);
        }
        sumf
    }
}

/// `amax / 127`, its inverse (0 for an all-zero block): the q8_0/q8_1 scale.
#[inline(always)]
pub(crate) fn q8_scale(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

impl GgmlBlock for BlockQ8_0 {
    const DTYPE: DType = DType::Q8_0;
    const BLCK: usize = QK;
    type VecDot = BlockQ8_0;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q8_0 to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK)) {
            let d = fp16(x.d);
            for (v, q) in y.iter_mut().zip(x.qs) {
                *v = q as f32 * d;
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q8_0 from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK).zip(ys.iter_mut()) {
            let (d, id) = q8_scale(x);
            y.d = f16::from_f32(d);
            for (q, v) in y.qs.iter_mut().zip(x) {
                *q = (v * id).round() as i8;
            }
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8_0]) -> f32 {
        check_blocks("q8_0 vec_dot", xs.len(), n);
        check_len("q8_0 vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let sumi: i32 =
                x.qs.iter()
                    .zip(&y.qs)
                    .map(|(a, b)| *a as i32 * *b as i32)
                    .sum();
            sumf += sumi as f32 * (fp16(x.d) * fp16(y.d));
        }
        sumf
    }
}

impl GgmlBlock for BlockQ8_1 {
    const DTYPE: DType = DType::Q8_1;
    const BLCK: usize = QK;
    type VecDot = BlockQ8_1;

    fn to_f32(xs: &[Self], ys: &mut [f32]) {
        check_blocks("q8_1 to_f32", xs.len(), ys.len());
        for (x, y) in xs.iter().zip(ys.chunks_exact_mut(QK)) {
            let d = fp16(x.d);
            for (v, q) in y.iter_mut().zip(x.qs) {
                *v = q as f32 * d;
            }
        }
    }

    fn from_f32(xs: &[f32], ys: &mut [Self]) {
        check_blocks("q8_1 from_f32", ys.len(), xs.len());
        for (x, y) in xs.chunks_exact(QK).zip(ys.iter_mut()) {
            let (d, id) = q8_scale(x);
            y.d = f16::from_f32(d);
            let mut sum = 0i32;
            for (q, v) in y.qs.iter_mut().zip(x) {
                *q = (v * id).round() as i8;
                sum += *q as i32;
            }
            y.s = f16::from_f32(sum as f32 * d);
        }
    }

    fn vec_dot(n: usize, xs: &[Self], ys: &[BlockQ8_1]) -> f32 {
        check_blocks("q8_1 vec_dot", xs.len(), n);
        check_len("q8_1 vec_dot y", ys.len(), xs.len());
        let mut sumf = 0f32;
        for (x, y) in xs.iter().zip(ys) {
            let sumi: i32 =
                x.qs.iter()
                    .zip(&y.qs)
                    .map(|(a, b)| *a as i32 * *b as i32)
                    .sum();
            sumf += sumi as f32 * (fp16(x.d) * fp16(y.d));
        }
        sumf
    }
}
