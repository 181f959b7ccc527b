//! wasm32 SIMD128 kernels (built with `-C target-feature=+simd128`; the scalar wasm build uses
//! the references). Same contract as `arch/x86/quants.rs` / `arch/aarch64/quants.rs`: public
//! functions are safe, check slice lengths (panicking on a mismatch, an internal contract), and
//! their SIMD bodies only load and store inside the slices or fixed-size block arrays they are
//! given. Integer sums are exact; only the f32 accumulation order differs from the scalar
//! references.
//!
//! Products of 8-bit quants use `i16x8.extmul` + `i32x4.extadd_pairwise` (exact: |a·b| ≤ 2^14).

use core::arch::wasm32::*;

use half::f16;

use super::{u32x4_bytes, v128s, V128s};

use crate::quant::{
    BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0,
    BlockQ8_1, GgmlBlock,
};

fn check(what: &str, a: usize, b: usize) {
    assert!(a == b, "{what}: lengths differ ({a} vs {b})");
}

#[inline(always)]
fn hsum_f32(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v)
        + f32x4_extract_lane::<1>(v)
        + f32x4_extract_lane::<2>(v)
        + f32x4_extract_lane::<3>(v)
}

#[inline(always)]
fn hsum_i32(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        .wrapping_add(i32x4_extract_lane::<1>(v))
        .wrapping_add(i32x4_extract_lane::<2>(v))
        .wrapping_add(i32x4_extract_lane::<3>(v))
}

/// Σ a·b of 16 signed bytes as 4 i32 lanes.
#[inline(always)]
fn dot_i8x16(a: v128, b: v128) -> v128 {
    let lo = i16x8_extmul_low_i8x16(a, b);
    let hi = i16x8_extmul_high_i8x16(a, b);
    i32x4_add(
        i32x4_extadd_pairwise_i16x8(lo),
        i32x4_extadd_pairwise_i16x8(hi),
    )
}

/// 16 bytes at `p`.
///
/// # Safety
/// `p..p+16` must be readable.
#[inline(always)]
unsafe fn load16(p: *const u8) -> v128 {
    // SAFETY: the caller guarantees 16 readable bytes; v128_load has no alignment requirement.
    unsafe { v128_load(p as *const v128) }
}

// ---------------------------------------------------------------------------------------------
// f32 / f16

/// Σ x·y.
pub fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    check("dot_f32", x.len(), y.len());
    let n = x.len();
    let mut i = 0;
    let mut acc = [f32x4_splat(0.0); 4];
    // SAFETY: every load reads 4 floats starting at an index ≤ n - 4 of x and y.
    unsafe {
        let (px, py) = (x.as_ptr(), y.as_ptr());
        while i + 16 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = i + 4 * k;
                let p = f32x4_mul(
                    v128_load(px.add(o) as *const v128),
                    v128_load(py.add(o) as *const v128),
                );
                *a = f32x4_add(*a, p);
            }
            i += 16;
        }
        while i + 4 <= n {
            let p = f32x4_mul(
                v128_load(px.add(i) as *const v128),
                v128_load(py.add(i) as *const v128),
            );
            acc[0] = f32x4_add(acc[0], p);
            i += 4;
        }
    }
    let mut sum = hsum_f32(f32x4_add(
        f32x4_add(acc[0], acc[1]),
        f32x4_add(acc[2], acc[3]),
    ));
    for j in i..n {
        sum += x[j] * y[j];
    }
    sum
}

/// y += a·x.
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    check("axpy_f32", x.len(), y.len());
    let n = x.len();
    let mut i = 0;
    let va = f32x4_splat(a);
    // SAFETY: loads and stores touch 4 floats at an index ≤ n - 4 of x and y.
    unsafe {
        let (px, py) = (x.as_ptr(), y.as_mut_ptr());
        while i + 4 <= n {
            let v = f32x4_add(
                v128_load(py.add(i) as *const v128),
                f32x4_mul(va, v128_load(px.add(i) as *const v128)),
            );
            v128_store(py.add(i) as *mut v128, v);
            i += 4;
        }
    }
    for j in i..n {
        y[j] += a * x[j];
    }
}

/// `vec_dot`-shaped f32 dot (`n` elements).
pub fn vec_dot_f32(n: usize, x: &[f32], y: &[f32]) -> f32 {
    check("vec_dot_f32", x.len(), n);
    dot_f32(x, y)
}

const F16_CHUNK: usize = 64;

fn to_f32_chunk(src: &[f16], dst: &mut [f32; F16_CHUNK]) -> usize {
    let m = src.len().min(F16_CHUNK);
    f16_to_f32_row(&src[..m], &mut dst[..m]);
    m
}

/// Four f16 values in the low 16 bits of each u32 lane → f32x4, without branches (wasm has no
/// F16C): the magnitude shifted into f32 position and scaled by 2^112 is exact for normals and
/// subnormals; exponent 31 becomes inf, or NaN with the quiet bit set (as `half` converts).
#[inline(always)]
pub(crate) fn f16x4_to_f32x4(h: v128) -> v128 {
    let m = v128_and(h, u32x4_splat(0x7fff));
    let bits = i32x4_shl(m, 13);
    let v = f32x4_mul(bits, f32x4_splat(f32::from_bits(0x7780_0000)));
    let inf = v128_and(i32x4_ge(m, i32x4_splat(0x7c00)), u32x4_splat(0x7f80_0000));
    let quiet = v128_and(i32x4_gt(m, i32x4_splat(0x7c00)), u32x4_splat(0x0040_0000));
    let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    v128_or(v128_or(v128_or(v, inf), quiet), sign)
}

/// f16 → f32 of a row, eight at a time (bit-exact with `half`).
pub fn f16_to_f32_row(x: &[f16], y: &mut [f32]) {
    check("f16_to_f32_row", x.len(), y.len());
    let n8 = x.len() / 8 * 8;
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= len of both slices; v128 loads and stores have no alignment needs.
        unsafe {
            let h = v128_load(x.as_ptr().add(i) as *const v128);
            let out = y.as_mut_ptr().add(i) as *mut v128;
            v128_store(out, f16x4_to_f32x4(u32x4_extend_low_u16x8(h)));
            v128_store(out.add(1), f16x4_to_f32x4(u32x4_extend_high_u16x8(h)));
        }
    }
    for (o, v) in y[n8..].iter_mut().zip(&x[n8..]) {
        *o = v.to_f32();
    }
}

/// The constants of [`f32x4_to_f16x4`] ([`super::v128s`]).
static F32_F16: V128s<9> = V128s([
    u32x4_bytes(0x8000_0000),
    // 2^16: from here up (and inf, NaN) the special result; below 2^-14 the subnormal one.
    u32x4_bytes(0x4780_0000),
    u32x4_bytes(0x3880_0000),
    u32x4_bytes(0x7f80_0000),
    // 0.5: adding it puts a subnormal's f16 bits at the bottom of the f32's, rounded to even.
    u32x4_bytes(0x3f00_0000),
    // Rebias of the exponent (−112 << 23) plus the rounding bias 0xfff.
    u32x4_bytes(0xc800_0fff),
    u32x4_bytes(1),
    u32x4_bytes(0x03ff),
    u32x4_bytes(0x7c00),
]);

/// f32x4 → f16 bits in the low half of each u32 lane, bit-exact with `half`'s `f16::from_f32`
/// (wasm has no F16C): round to nearest even, subnormals, ±0, overflow to ±inf, NaN quieted
/// (0x0200) with its top ten payload bits kept. Branch-free: the three results (normal,
/// subnormal, special) computed and selected.
#[inline(always)]
fn f32x4_to_f16x4(x: v128, k: &[v128; 9]) -> v128 {
    let [sign_bit, big, small, inf, half, rebias, one, m10, exp16] = *k;
    let sign = v128_and(x, sign_bit);
    // |x| as a non-negative i32: signed comparisons order it as the floats.
    let a = v128_xor(x, sign);
    let odd = v128_and(u32x4_shr(a, 13), one);
    let normal = u32x4_shr(i32x4_add(i32x4_add(a, rebias), odd), 13);
    let sub = i32x4_sub(f32x4_add(a, half), half);
    let nan = i32x4_gt(a, inf);
    let special = v128_or(
        exp16,
        v128_and(
            nan,
            v128_or(i32x4_shl(one, 9), v128_and(u32x4_shr(a, 13), m10)),
        ),
    );
    let o = v128_bitselect(
        special,
        v128_bitselect(sub, normal, i32x4_lt(a, small)),
        i32x4_ge(a, big),
    );
    v128_or(o, u32x4_shr(sign, 16))
}

/// f32 → f16 of a row, eight at a time (bit-exact with `half`): the KV cache's new rows.
pub fn f32_to_f16_row(x: &[f32], y: &mut [f16]) {
    check("f32_to_f16_row", x.len(), y.len());
    let k = v128s(&F32_F16);
    let n8 = x.len() / 8 * 8;
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= len of both slices; v128 loads and stores have no alignment needs.
        unsafe {
            let lo = f32x4_to_f16x4(v128_load(x.as_ptr().add(i) as *const v128), &k);
            let hi = f32x4_to_f16x4(v128_load(x.as_ptr().add(i + 4) as *const v128), &k);
            // Lanes hold 0..=0xffff: the unsigned saturating narrow keeps them.
            v128_store(
                y.as_mut_ptr().add(i) as *mut v128,
                u16x8_narrow_i32x4(lo, hi),
            );
        }
    }
    for (o, v) in y[n8..].iter_mut().zip(&x[n8..]) {
        *o = f16::from_f32(*v);
    }
}

/// [`q8_block`]'s constants ([`super::v128s`]: V8 rebuilt each splat at every use).
static Q8_CONSTS: V128s<3> = V128s([
    u32x4_bytes(0x3f00_0000),
    u32x4_bytes(0x3f80_0000),
    u32x4_bytes(0x8000_0000),
]);

/// f16 bits of `a` and `b` (as `f16::from_f32`, one vector conversion for both: `half`'s
/// software conversion in wasm is a few dozen instructions and branches each).
#[inline(always)]
fn f16_pair(a: f32, b: f32, k: &[v128; 9]) -> (f16, f16) {
    let h = f32x4_to_f16x4(f32x4(a, b, 0.0, 0.0), k);
    (
        f16::from_bits(u32x4_extract_lane::<0>(h) as u16),
        f16::from_bits(u32x4_extract_lane::<1>(h) as u16),
    )
}

/// q8_0/q8_1 core: 32 floats → 32 i8 and (d, Σq), bit-exact with the scalar reference (amax
/// ignoring NaN, q = round half away from zero of x·(1/d), saturating).
#[inline(always)]
fn q8_block(x: &[f32], qs: &mut [i8; 32], [half, one, sign]: [v128; 3]) -> (f32, i32) {
    assert!(x.len() >= 32, "q8_block: 32 values");
    // SAFETY: 32 readable floats (checked above).
    let v: [v128; 8] =
        core::array::from_fn(|k| unsafe { v128_load(x.as_ptr().add(4 * k) as *const v128) });
    // pmax(m, |v|) keeps m when |v| is NaN, as the scalar fold's f32::max does; so no lane of
    // m is NaN and the lanes' pmax is their f32::max (a scalar chain of `max` was a NaN test
    // and a branch each in V8).
    let mut m = f32x4_splat(0.0);
    for vk in v {
        m = f32x4_pmax(m, f32x4_abs(vk));
    }
    let m = f32x4_pmax(m, i32x4_shuffle::<2, 3, 0, 1>(m, m));
    let amax = f32x4_extract_lane::<0>(f32x4_pmax(m, i32x4_shuffle::<1, 0, 3, 2>(m, m)));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let vid = f32x4_splat(id);
    let q: [v128; 8] = v.map(|vk| {
        let p = f32x4_mul(vk, vid);
        let t = f32x4_trunc(p);
        let away = f32x4_ge(f32x4_abs(f32x4_sub(p, t)), half);
        let step = v128_or(v128_and(p, sign), one);
        i32x4_trunc_sat_f32x4(f32x4_add(t, v128_and(away, step)))
    });
    let mut sum = i32x4_splat(0);
    for qk in q {
        sum = i32x4_add(sum, qk);
    }
    let lo = i8x16_narrow_i16x8(
        i16x8_narrow_i32x4(q[0], q[1]),
        i16x8_narrow_i32x4(q[2], q[3]),
    );
    let hi = i8x16_narrow_i16x8(
        i16x8_narrow_i32x4(q[4], q[5]),
        i16x8_narrow_i32x4(q[6], q[7]),
    );
    // SAFETY: qs holds 32 bytes.
    unsafe {
        v128_store(qs.as_mut_ptr() as *mut v128, lo);
        v128_store(qs.as_mut_ptr().add(16) as *mut v128, hi);
    }
    (d, hsum_i32(sum))
}

/// f32 → q8_0 blocks (the activations of q4_0/q5_0/q8_0 dots).
pub fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
    check("quantize_row_q8_0", x.len(), y.len() * 32);
    let (k8, kh) = (v128s(&Q8_CONSTS), v128s(&F32_F16));
    for (xb, yb) in x.chunks_exact(32).zip(y.iter_mut()) {
        let (d, _) = q8_block(xb, &mut yb.qs, k8);
        yb.d = f16_pair(d, 0.0, &kh).0;
    }
}

/// f32 → q8_1 blocks (the activations of q4_1/q5_1 dots).
pub fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
    check("quantize_row_q8_1", x.len(), y.len() * 32);
    let (k8, kh) = (v128s(&Q8_CONSTS), v128s(&F32_F16));
    for (xb, yb) in x.chunks_exact(32).zip(y.iter_mut()) {
        let (d, sum) = q8_block(xb, &mut yb.qs, k8);
        (yb.d, yb.s) = f16_pair(d, sum as f32 * d, &kh);
    }
}

/// Σ x·y over f16 inputs (converted in chunks, multiplied and summed in f32x4).
pub fn dot_f16(x: &[f16], y: &[f16]) -> f32 {
    check("dot_f16", x.len(), y.len());
    let (mut bx, mut by) = ([0f32; F16_CHUNK], [0f32; F16_CHUNK]);
    let mut sum = 0f32;
    for (cx, cy) in x.chunks(F16_CHUNK).zip(y.chunks(F16_CHUNK)) {
        let m = to_f32_chunk(cx, &mut bx);
        to_f32_chunk(cy, &mut by);
        sum += dot_f32(&bx[..m], &by[..m]);
    }
    sum
}

/// `vec_dot`-shaped f16 dot.
pub fn vec_dot_f16(n: usize, x: &[f16], y: &[f16]) -> f32 {
    check("vec_dot_f16", x.len(), n);
    dot_f16(x, y)
}

/// y += a·x with f16 `x` and f32 `y`.
pub fn axpy_f16(a: f32, x: &[f16], y: &mut [f32]) {
    check("axpy_f16", x.len(), y.len());
    let mut bx = [0f32; F16_CHUNK];
    for (cx, cy) in x.chunks(F16_CHUNK).zip(y.chunks_mut(F16_CHUNK)) {
        let m = to_f32_chunk(cx, &mut bx);
        axpy_f32(a, &bx[..m], cy);
    }
}

// ---------------------------------------------------------------------------------------------
// legacy quants (32-element blocks)

/// The 32 high bits of a q5 block as bytes 0x10 / 0x00 (lanes 0..16 and 16..32).
#[inline(always)]
pub(crate) fn q5_high(qh: [u8; 4]) -> (v128, v128) {
    let q = u32x4_splat(u32::from_le_bytes(qh));
    let bits = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    let lo = u8x16_swizzle(q, u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    let hi = u8x16_swizzle(q, u8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    let x10 = u8x16_splat(0x10);
    (
        v128_and(i8x16_eq(v128_and(lo, bits), bits), x10),
        v128_and(i8x16_eq(v128_and(hi, bits), bits), x10),
    )
}

/// The constants of [`q6_quants`] ([`super::v128s`]).
#[derive(Clone, Copy)]
pub(crate) struct Q6Consts {
    m4: v128,
    x30: v128,
}

static Q6_CONSTS: V128s<2> = V128s([[0x0f; 16], [0x30; 16]]);

#[inline(always)]
pub(crate) fn q6_consts() -> Q6Consts {
    let [m4, x30] = v128s(&Q6_CONSTS);
    Q6Consts { m4, x30 }
}

/// The four 16-element groups of q6_K quants (0..63, before the offset of 32) that 16 bytes of
/// `ql` at j and j + 32 and 16 bytes of `qh` make: low/high nibbles OR'd with 2-bit pairs of `qh`
/// moved to bits 4, 5. 16-bit shifts, masked: what one moves across a byte edge never lands in
/// the bits the mask keeps.
#[inline(always)]
pub(crate) fn q6_quants(ql_a: v128, ql_b: v128, qh: v128, k: &Q6Consts) -> [v128; 4] {
    let (m4, x30) = (k.m4, k.x30);
    [
        v128_or(v128_and(ql_a, m4), v128_and(i16x8_shl(qh, 4), x30)),
        v128_or(v128_and(ql_b, m4), v128_and(i16x8_shl(qh, 2), x30)),
        v128_or(v128_and(u16x8_shr(ql_a, 4), m4), v128_and(qh, x30)),
        v128_or(
            v128_and(u16x8_shr(ql_b, 4), m4),
            v128_and(u16x8_shr(qh, 2), x30),
        ),
    ]
}

/// Low and high nibbles of 16 bytes as two i8x16 (0..15).
#[inline(always)]
pub(crate) fn nibbles(v: v128) -> (v128, v128) {
    (v128_and(v, u8x16_splat(0x0F)), u8x16_shr(v, 4))
}

/// q4_0 · q8_0.
pub fn vec_dot_q4_0_q8_0(n: usize, x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    check("vec_dot_q4_0_q8_0", x.len() * BlockQ4_0::BLCK, n);
    check("vec_dot_q4_0_q8_0", x.len(), y.len());
    let mut acc = f32x4_splat(0.0);
    let s8 = i8x16_splat(8);
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: loads read the 16-byte `qs` of x and the two 16-byte halves of y's 32-byte `qs`.
        let sumi = unsafe {
            let (lo, hi) = nibbles(load16(bx.qs.as_ptr()));
            let y0 = load16(by.qs.as_ptr() as *const u8);
            let y1 = load16(by.qs.as_ptr().add(16) as *const u8);
            i32x4_add(
                dot_i8x16(i8x16_sub(lo, s8), y0),
                dot_i8x16(i8x16_sub(hi, s8), y1),
            )
        };
        let d = bx.d.to_f32() * by.d.to_f32();
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(sumi), f32x4_splat(d)));
    }
    hsum_f32(acc)
}

/// q4_1 · q8_1.
pub fn vec_dot_q4_1_q8_1(n: usize, x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    check("vec_dot_q4_1_q8_1", x.len() * BlockQ4_1::BLCK, n);
    check("vec_dot_q4_1_q8_1", x.len(), y.len());
    let mut acc = f32x4_splat(0.0);
    let mut summs = 0f32;
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: as in q4_0.
        let sumi = unsafe {
            let (lo, hi) = nibbles(load16(bx.qs.as_ptr()));
            let y0 = load16(by.qs.as_ptr() as *const u8);
            let y1 = load16(by.qs.as_ptr().add(16) as *const u8);
            i32x4_add(dot_i8x16(lo, y0), dot_i8x16(hi, y1))
        };
        let d = bx.d.to_f32() * by.d.to_f32();
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(sumi), f32x4_splat(d)));
        summs += bx.m.to_f32() * by.s.to_f32();
    }
    hsum_f32(acc) + summs
}

/// q5_0 · q8_0.
pub fn vec_dot_q5_0_q8_0(n: usize, x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    check("vec_dot_q5_0_q8_0", x.len() * BlockQ5_0::BLCK, n);
    check("vec_dot_q5_0_q8_0", x.len(), y.len());
    let mut acc = f32x4_splat(0.0);
    let s16 = i8x16_splat(16);
    for (bx, by) in x.iter().zip(y) {
        let (h0, h1) = q5_high(bx.qh);
        // SAFETY: as in q4_0.
        let sumi = unsafe {
            let (lo, hi) = nibbles(load16(bx.qs.as_ptr()));
            let x0 = i8x16_sub(v128_or(lo, h0), s16);
            let x1 = i8x16_sub(v128_or(hi, h1), s16);
            let y0 = load16(by.qs.as_ptr() as *const u8);
            let y1 = load16(by.qs.as_ptr().add(16) as *const u8);
            i32x4_add(dot_i8x16(x0, y0), dot_i8x16(x1, y1))
        };
        let d = bx.d.to_f32() * by.d.to_f32();
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(sumi), f32x4_splat(d)));
    }
    hsum_f32(acc)
}

/// q5_1 · q8_1.
pub fn vec_dot_q5_1_q8_1(n: usize, x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    check("vec_dot_q5_1_q8_1", x.len() * BlockQ5_1::BLCK, n);
    check("vec_dot_q5_1_q8_1", x.len(), y.len());
    let mut acc = f32x4_splat(0.0);
    let mut summs = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (h0, h1) = q5_high(bx.qh);
        // SAFETY: as in q4_0.
        let sumi = unsafe {
            let (lo, hi) = nibbles(load16(bx.qs.as_ptr()));
            let y0 = load16(by.qs.as_ptr() as *const u8);
            let y1 = load16(by.qs.as_ptr().add(16) as *const u8);
            i32x4_add(
                dot_i8x16(v128_or(lo, h0), y0),
                dot_i8x16(v128_or(hi, h1), y1),
            )
        };
        let d = bx.d.to_f32() * by.d.to_f32();
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(sumi), f32x4_splat(d)));
        summs += bx.m.to_f32() * by.s.to_f32();
    }
    hsum_f32(acc) + summs
}

/// q8_0 · q8_0.
pub fn vec_dot_q8_0_q8_0(n: usize, x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    check("vec_dot_q8_0_q8_0", x.len() * BlockQ8_0::BLCK, n);
    check("vec_dot_q8_0_q8_0", x.len(), y.len());
    let mut acc = f32x4_splat(0.0);
    for (bx, by) in x.iter().zip(y) {
        // SAFETY: loads read the two 16-byte halves of each 32-byte `qs`.
        let sumi = unsafe {
            let x0 = load16(bx.qs.as_ptr() as *const u8);
            let x1 = load16(bx.qs.as_ptr().add(16) as *const u8);
            let y0 = load16(by.qs.as_ptr() as *const u8);
            let y1 = load16(by.qs.as_ptr().add(16) as *const u8);
            i32x4_add(dot_i8x16(x0, y0), dot_i8x16(x1, y1))
        };
        let d = bx.d.to_f32() * by.d.to_f32();
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(sumi), f32x4_splat(d)));
    }
    hsum_f32(acc)
}

// ---------------------------------------------------------------------------------------------
// k-quants (256-element super-blocks, activations in q8_K)

/// 6-bit scales and mins of q4_K / q5_K (ggml's get_scale_min_k4).
#[inline(always)]
fn scales_mins_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        if j < 4 {
            sc[j] = q[j] & 63;
            m[j] = q[j + 4] & 63;
        } else {
            sc[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
            m[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
    }
    (sc, m)
}

/// Σ bsums[j] · mins[j / 2] (the min correction of q4_K / q5_K).
#[inline(always)]
fn k4_summ(y: &BlockQ8K, m: &[u8; 8]) -> i32 {
    (0..16).map(|j| y.bsums[j] as i32 * m[j / 2] as i32).sum()
}

/// q4_K · q8_K.
pub fn vec_dot_q4_k_q8_k(n: usize, x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    check("vec_dot_q4_k_q8_k", x.len() * BlockQ4K::BLCK, n);
    check("vec_dot_q4_k_q8_k", x.len(), y.len());
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (sc, m) = scales_mins_k4(&bx.scales);
        let summ = k4_summ(by, &m);
        let mut isum = i32x4_splat(0);
        for j in 0..4 {
            // SAFETY: loads read 16-byte pieces of x's 128-byte `qs` (32j..32j+32) and y's
            // 256-byte `qs` (64j..64j+64).
            unsafe {
                let q = bx.qs.as_ptr().add(32 * j);
                let q8 = by.qs.as_ptr().add(64 * j) as *const u8;
                let (l0, h0) = nibbles(load16(q));
                let (l1, h1) = nibbles(load16(q.add(16)));
                let s1 = i32x4_add(dot_i8x16(l0, load16(q8)), dot_i8x16(l1, load16(q8.add(16))));
                let s2 = i32x4_add(
                    dot_i8x16(h0, load16(q8.add(32))),
                    dot_i8x16(h1, load16(q8.add(48))),
                );
                isum = i32x4_add(isum, i32x4_mul(s1, i32x4_splat(sc[2 * j] as i32)));
                isum = i32x4_add(isum, i32x4_mul(s2, i32x4_splat(sc[2 * j + 1] as i32)));
            }
        }
        let d = bx.d.to_f32() * by.d;
        sumf += d * hsum_i32(isum) as f32 - bx.dmin.to_f32() * by.d * summ as f32;
    }
    sumf
}

/// q5_K · q8_K.
pub fn vec_dot_q5_k_q8_k(n: usize, x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    check("vec_dot_q5_k_q8_k", x.len() * BlockQ5K::BLCK, n);
    check("vec_dot_q5_k_q8_k", x.len(), y.len());
    let mut sumf = 0f32;
    let one = u8x16_splat(1);
    for (bx, by) in x.iter().zip(y) {
        let (sc, m) = scales_mins_k4(&bx.scales);
        let summ = k4_summ(by, &m);
        let mut isum = i32x4_splat(0);
        // SAFETY: loads read x's 32-byte `qh` in two halves, and pieces of `qs` as in q4_K.
        unsafe {
            let qh0 = load16(bx.qh.as_ptr());
            let qh1 = load16(bx.qh.as_ptr().add(16));
            for j in 0..4u32 {
                let ju = j as usize;
                let q = bx.qs.as_ptr().add(32 * ju);
                let q8 = by.qs.as_ptr().add(64 * ju) as *const u8;
                let (l0, h0) = nibbles(load16(q));
                let (l1, h1) = nibbles(load16(q.add(16)));
                // High bits: bit 2j for the low nibbles, bit 2j+1 for the high ones, × 16.
                let hb = |v: v128, s: u32| u8x16_shl(v128_and(u8x16_shr(v, s), one), 4);
                let x0 = v128_or(l0, hb(qh0, 2 * j));
                let x1 = v128_or(l1, hb(qh1, 2 * j));
                let x2 = v128_or(h0, hb(qh0, 2 * j + 1));
                let x3 = v128_or(h1, hb(qh1, 2 * j + 1));
                let s1 = i32x4_add(dot_i8x16(x0, load16(q8)), dot_i8x16(x1, load16(q8.add(16))));
                let s2 = i32x4_add(
                    dot_i8x16(x2, load16(q8.add(32))),
                    dot_i8x16(x3, load16(q8.add(48))),
                );
                isum = i32x4_add(isum, i32x4_mul(s1, i32x4_splat(sc[2 * ju] as i32)));
                isum = i32x4_add(isum, i32x4_mul(s2, i32x4_splat(sc[2 * ju + 1] as i32)));
            }
        }
        let d = bx.d.to_f32() * by.d;
        sumf += d * hsum_i32(isum) as f32 - bx.dmin.to_f32() * by.d * summ as f32;
    }
    sumf
}

/// q6_K · q8_K.
pub fn vec_dot_q6_k_q8_k(n: usize, x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    check("vec_dot_q6_k_q8_k", x.len() * BlockQ6K::BLCK, n);
    check("vec_dot_q6_k_q8_k", x.len(), y.len());
    let mut sumf = 0f32;
    let s32 = i8x16_splat(32);
    let q6k = q6_consts();
    for (bx, by) in x.iter().zip(y) {
        let mut isum = i32x4_splat(0);
        for half in 0..2 {
            for c in 0..2 {
                // SAFETY: loads read 16-byte pieces of `ql` (64·half + 16c + {0, 32}), `qh`
                // (32·half + 16c) and y's `qs` (128·half + 32k + 16c), all inside the arrays.
                unsafe {
                    let ql_a = load16(bx.ql.as_ptr().add(64 * half + 16 * c));
                    let ql_b = load16(bx.ql.as_ptr().add(64 * half + 32 + 16 * c));
                    let qh = load16(bx.qh.as_ptr().add(32 * half + 16 * c));
                    let vals = q6_quants(ql_a, ql_b, qh, &q6k);
                    for (k, v) in vals.iter().enumerate() {
                        let e = 128 * half + 32 * k + 16 * c;
                        let q8 = load16(by.qs.as_ptr().add(e) as *const u8);
                        let s = dot_i8x16(i8x16_sub(*v, s32), q8);
                        let g = e / 16;
                        isum = i32x4_add(isum, i32x4_mul(s, i32x4_splat(bx.scales[g] as i32)));
                    }
                }
            }
        }
        sumf += bx.d.to_f32() * by.d * hsum_i32(isum) as f32;
    }
    sumf
}
