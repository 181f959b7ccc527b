//! wasm32 n = 1 mul_mat (GEMV) of the k-quants (q4_K, q5_K, q6_K against a q8_K column): four
//! weight rows per pass, f32 lane r = row r, as `gemv.rs` does for the 32-element quants.
//!
//! The register tiles (`tiles.rs`) widen every weight quant to i16, multiply it by its
//! sub-block scale in i16 and then dot it with the column's i16 quants (read back from the
//! stack), and keep f32x4 accumulators whose lanes are partial sums. Here each 16 weight quants
//! are dotted with the column's i8 quants straight into i16 pair sums (`i16x8.relaxed_dot` in the
//! relaxed build, `extmul` in the SIMD128 one), a sub-block's pair sums are multiplied by its
//! scale and widened by one `i32x4.dot_i16x8_s`, and a super-block's exact integer sums of four
//! rows meet in one transpose, so the f32 steps run once per super-block for four rows.
//!
//! Every lane's arithmetic depends on its own row only (a remainder row runs in a pass with its
//! pointer repeated), and both builds sum the same exact integers (the pair sums differ, their
//! totals do not) and then run the scalar reference's f32 operations in its order
//! (`quant/k_quants.rs` `vec_dot`: per super-block (d·dy)·isum − (dmin·dy)·summ, or (d·dy)·isum
//! for q6_K, added to the row's sum), so the results are bit for bit the scalar build's
//! whichever build, pass, chunk or thread computes them.

use core::arch::wasm32::*;

use super::gemv::{f16_consts, reduce4, scale_pairs4, scales4, PF_PASSES};
use super::tiles::load16;
use super::{v128s, V128s};
use crate::backend::cpu::arch::Panel;

/// Bytes of a q8_K block: f32 d, 256 i8 quants, 16 i16 bsums (sums of 16 quants).
const YS: usize = 292;
const YQ: usize = 4;
const YBS: usize = 260;

/// Σ u·y of 16 byte pairs as i16x8 lanes (which pairs share a lane differs between the builds;
/// the lanes' total does not): u the unsigned weight quants (0..63, the i7 operand of the relaxed
/// dot, exact on every engine), y the column's i8 quants. |lane| ≤ 2·63·128 < 2^15.
#[inline(always)]
fn dot16(u: v128, y: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        i16x8_relaxed_dot_i8x16_i7x16(y, u)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        i16x8_add(i16x8_extmul_low_i8x16(u, y), i16x8_extmul_high_i8x16(u, y))
    }
}

/// i16 lane J of `v` in every lane.
#[inline(always)]
fn bcast<const J: usize>(v: v128) -> v128 {
    i16x8_shuffle::<J, J, J, J, J, J, J, J>(v, v)
}

/// Σ_lanes d16 · scale J of `sc` (i16 lanes), widened: i32x4 partial sums (exact: |d16| < 2^15,
/// |scale| ≤ 128).
#[inline(always)]
fn scaled<const J: usize>(d16: v128, sc: v128) -> v128 {
    i32x4_dot_i16x8(d16, bcast::<J>(sc))
}

/// The constants of the decoders ([`super::v128s`]).
static CONSTS: V128s<7> = V128s([
    [0x0F; 16],
    // get_scale_min_k4 on 12 scale bytes q (lanes 0..8: scales, 8..16: mins), see `k4_scales`.
    [63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xF0, 0xF0, 0xF0, 0xF0],
    [
        0, 0, 0, 0, 0xC0, 0xC0, 0xC0, 0xC0, 0, 0, 0, 0, 0xC0, 0xC0, 0xC0, 0xC0,
    ],
    [0x10; 16],
    // q5_K: the bit of qh for sub-blocks 2g, 2g+1 is 1 << 2g, 2 << 2g (splatted per use).
    [0x01; 16],
    // q6_K: the two high bits of a quant.
    [0x30; 16],
]);

#[derive(Clone, Copy)]
struct K {
    m0f: v128,
    lo6: v128,
    hi4: v128,
    top2: v128,
    x10: v128,
    one: v128,
    x30: v128,
}

#[inline(always)]
fn consts() -> K {
    let [m0f, lo6, hi4, top2, x10, one, x30] = v128s(&CONSTS);
    K {
        m0f,
        lo6,
        hi4,
        top2,
        x10,
        one,
        x30,
    }
}

/// Low and high nibbles of 16 bytes (0..15).
#[inline(always)]
fn nibbles(v: v128, k: &K) -> [v128; 2] {
    // A 16-bit shift: the bits it moves across bytes are masked off.
    [v128_and(v, k.m0f), v128_and(u16x8_shr(v, 4), k.m0f)]
}

/// The 6-bit scales (i16 lanes 0..8) and mins (i16 lanes 0..8) of a q4_K / q5_K super-block
/// from its 12 scale bytes q at `p` (ggml's get_scale_min_k4): scale j < 4 is q[j] & 63, j ≥ 4
/// (q[j+4] & 15) | (q[j−4] >> 6) << 4; min j < 4 is q[j+4] & 63, j ≥ 4
/// (q[j+4] >> 4) | (q[j] >> 6) << 4.
///
/// # Safety
/// 16 bytes at `p` must be readable (the 4 after the scales are not used).
#[inline(always)]
unsafe fn k4_scales(p: *const u8, k: &K) -> (v128, v128) {
    // SAFETY: caller.
    let q = unsafe { load16(p) };
    // Lanes 0..8 the scales' byte, 8..16 the mins'.
    let a = i8x16_shuffle::<0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11>(q, q);
    // The byte whose top two bits are bits 4, 5 of scale / min j ≥ 4.
    let b = i8x16_shuffle::<0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7>(q, q);
    // 16-bit shifts of masked bytes: nothing crosses a byte.
    let v = v128_or(
        v128_or(v128_and(a, k.lo6), u16x8_shr(v128_and(a, k.hi4), 4)),
        u16x8_shr(v128_and(b, k.top2), 2),
    );
    (u16x8_extend_low_u8x16(v), u16x8_extend_high_u8x16(v))
}

/// Σ_j m_j·(bsums[2j] + bsums[2j+1]) of one row as i32x4 partial sums (exact for any i16
/// bsums), `bs` the column's 16 bsums, `mn` the mins as i16.
#[inline(always)]
fn k4_summ(bs: [v128; 2], mn: v128) -> v128 {
    i32x4_add(
        i32x4_dot_i16x8(bs[0], i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(mn, mn)),
        i32x4_dot_i16x8(bs[1], i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(mn, mn)),
    )
}

/// Every row of `pn` in passes of four: `sums(rows, yb)` gives the four rows' exact (isum, summ)
/// of one super-block as i32x4 (lane r = row r); `min` for the types with dmin (at byte 2),
/// `dat` where d is.
///
/// # Safety
/// As [`super::gemv::gemv`] (`b` a q8_K column of nb blocks, rows of nb blocks of `xs` bytes);
/// `sums` reads one block of each row and of the column.
#[inline(always)]
unsafe fn run<const R4: bool>(
    nb: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
    (xs, dat, min): (usize, usize, bool),
    sums: impl Fn([*const u8; 4], *const u8) -> (v128, v128),
) {
    let n = pn.nrows;
    let fk = f16_consts();
    // The last row's last byte + 1: what the touches stay below.
    let end = (n.max(1) - 1) * pn.lda + nb * xs;
    let mut i = 0;
    while i < n {
        let rows: [*const u8; 4] = if R4 {
            // Repacked (`repack.rs`, whole super-blocks interleaved): row r's block blk at
            // group + blk·4·xs + r·xs; the panel is whole groups.
            // SAFETY: group i/4 is inside the panel.
            core::array::from_fn(|r| unsafe { pn.a0.add(i * pn.lda + r * xs) })
        } else {
            // SAFETY: row min(i + r, n − 1) is inside the panel.
            core::array::from_fn(|r| unsafe { pn.a0.add((i + r).min(n - 1) * pn.lda) })
        };
        let bstride = if R4 { 4 * xs } else { xs };
        let mut acc = f32x4_splat(0.0);
        // The bytes of the pass PF_PASSES ahead, 4·xs of them per super-block, one per 64
        // (gemv.rs PF_PASSES); saturating as there.
        let ahead = (i + 4 * PF_PASSES).saturating_mul(pn.lda);
        for blk in 0..nb {
            let t = ahead.saturating_add(blk * 4 * xs);
            let mut o = 0;
            // Repacked groups are one sequential stream the hardware prefetcher follows: no
            // touches (as gemv.rs).
            while !R4 && o < 4 * xs {
                if t.saturating_add(o) < end {
                    // SAFETY: inside the panel's rows (before the last row's end).
                    unsafe { core::ptr::read_volatile(pn.a0.add(t + o)) };
                }
                o += 64;
            }
            // SAFETY: blk < nb: one block of every row and of the column.
            unsafe {
                let xb = rows.map(|p| p.add(blk * bstride));
                let yb = b.add(blk * YS);
                let (isum, summ) = sums(xb, yb);
                // The scalar reference's operations in its order (quant/k_quants.rs).
                let dy = f32x4_splat((yb as *const f32).read_unaligned());
                let (d, dmin) = if min {
                    scale_pairs4(xb, dat, &fk)
                } else {
                    (scales4(xb, dat, &fk), f32x4_splat(0.0))
                };
                let mut t = f32x4_mul(f32x4_mul(d, dy), f32x4_convert_i32x4(isum));
                if min {
                    let m = f32x4_mul(f32x4_mul(dmin, dy), f32x4_convert_i32x4(summ));
                    t = f32x4_sub(t, m);
                }
                acc = f32x4_add(acc, t);
            }
        }
        let mut o = [0f32; 4];
        // SAFETY: 16 bytes.
        unsafe { v128_store(o.as_mut_ptr() as *mut v128, acc) };
        for (r, v) in o.iter().enumerate().take((n - i).min(4)) {
            // SAFETY: row i + r < n of the panel's single column.
            unsafe {
                let p = pn.out0.add((i + r) * 4) as *mut f32;
                if accumulate {
                    *p += *v
                } else {
                    *p = *v
                }
            }
        }
        i += 4;
    }
}

/// The column's 16 bsums of the q8_K block at `yb`.
///
/// # Safety
/// `yb` addresses a q8_K block.
#[inline(always)]
unsafe fn bsums(yb: *const u8) -> [v128; 2] {
    // SAFETY: caller; bytes 260..292.
    unsafe { [load16(yb.add(YBS)), load16(yb.add(YBS + 16))] }
}

/// Sub-blocks 2G, 2G+1 (elements 64G..64G+64) of a q4_K / q5_K row: Σ sc·(u·y) for quants `u`
/// (elements 64G + 0..16, 16..32, 32..48, 48..64) against the column quants at `yq`.
///
/// # Safety
/// `yq` addresses the column's 256 quants.
#[inline(always)]
unsafe fn k4_pair<const J0: usize, const J1: usize>(u: [v128; 4], yq: *const u8, sc: v128) -> v128 {
    let e = 32 * J0;
    // SAFETY: caller; elements e..e+64 < 256.
    let y = unsafe {
        [
            load16(yq.add(e)),
            load16(yq.add(e + 16)),
            load16(yq.add(e + 32)),
            load16(yq.add(e + 48)),
        ]
    };
    // |lane| ≤ 2·2·31·128 < 2^15.
    let lo = i16x8_add(dot16(u[0], y[0]), dot16(u[1], y[1]));
    let hi = i16x8_add(dot16(u[2], y[2]), dot16(u[3], y[3]));
    i32x4_add(scaled::<J0>(lo, sc), scaled::<J1>(hi, sc))
}

/// q4_K rows (144 bytes: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles: byte l of group
/// g holds element l of sub-block 2g in its low nibble, of 2g+1 in its high one).
///
/// # Safety
/// As [`super::gemv::gemv`].
#[inline(never)]
pub(super) unsafe fn gemv_q4_k<const R4: bool>(
    nb: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
) {
    let k = consts();
    // SAFETY: forwarded; each closure call reads one block per row and of the column.
    unsafe {
        run::<R4>(nb, pn, b, accumulate, (144, 0, true), |xb, yb| {
            let yq = yb.add(YQ);
            let bs = bsums(yb);
            let row = |x: *const u8| {
                let (sc, mn) = k4_scales(x.add(4), &k);
                let q = |g: usize| {
                    let [l0, h0] = nibbles(load16(x.add(16 + 32 * g)), &k);
                    let [l1, h1] = nibbles(load16(x.add(32 + 32 * g)), &k);
                    [l0, l1, h0, h1]
                };
                let s = i32x4_add(
                    i32x4_add(k4_pair::<0, 1>(q(0), yq, sc), k4_pair::<2, 3>(q(1), yq, sc)),
                    i32x4_add(k4_pair::<4, 5>(q(2), yq, sc), k4_pair::<6, 7>(q(3), yq, sc)),
                );
                (s, k4_summ(bs, mn))
            };
            let [r0, r1, r2, r3] = xb.map(row);
            (
                reduce4([r0.0, r1.0, r2.0, r3.0]),
                reduce4([r0.1, r1.1, r2.1, r3.1]),
            )
        })
    }
}

/// q5_K rows (176 bytes: f16 d, f16 dmin, 12 scale bytes, 32 bytes of high bits qh — bit 2g of
/// byte l for element l of sub-block 2g, bit 2g+1 for 2g+1 — and the nibbles as q4_K's).
///
/// # Safety
/// As [`super::gemv::gemv`].
#[inline(never)]
pub(super) unsafe fn gemv_q5_k<const R4: bool>(
    nb: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
) {
    let k = consts();
    // SAFETY: forwarded; each closure call reads one block per row and of the column.
    unsafe {
        run::<R4>(nb, pn, b, accumulate, (176, 0, true), |xb, yb| {
            let yq = yb.add(YQ);
            let bs = bsums(yb);
            let row = |x: *const u8| {
                let (sc, mn) = k4_scales(x.add(4), &k);
                let (qh0, qh1) = (load16(x.add(16)), load16(x.add(32)));
                // 0x10 where bit `s` of the qh byte is set.
                let high = |h: v128, s: u32| {
                    let bit = u8x16_shl(k.one, s);
                    v128_and(i8x16_eq(v128_and(h, bit), bit), k.x10)
                };
                let q = |g: usize| {
                    let [l0, h0] = nibbles(load16(x.add(48 + 32 * g)), &k);
                    let [l1, h1] = nibbles(load16(x.add(64 + 32 * g)), &k);
                    let s = 2 * g as u32;
                    [
                        v128_or(l0, high(qh0, s)),
                        v128_or(l1, high(qh1, s)),
                        v128_or(h0, high(qh0, s + 1)),
                        v128_or(h1, high(qh1, s + 1)),
                    ]
                };
                let s = i32x4_add(
                    i32x4_add(k4_pair::<0, 1>(q(0), yq, sc), k4_pair::<2, 3>(q(1), yq, sc)),
                    i32x4_add(k4_pair::<4, 5>(q(2), yq, sc), k4_pair::<6, 7>(q(3), yq, sc)),
                );
                (s, k4_summ(bs, mn))
            };
            let [r0, r1, r2, r3] = xb.map(row);
            (
                reduce4([r0.0, r1.0, r2.0, r3.0]),
                reduce4([r0.1, r1.1, r2.1, r3.1]),
            )
        })
    }
}

/// Σ_G sc_G·Σ q·y over the four 16-element groups G = 8·H + 2k + C (k = 0..4) of one
/// `q6_quants` call (`v[k]`), `sc` the scales of groups 8H..8H+8 as i16.
///
/// # Safety
/// `yq` addresses the column's 256 quants.
#[inline(always)]
unsafe fn q6_groups<const G0: usize, const G1: usize, const G2: usize, const G3: usize>(
    v: [v128; 4],
    yq: *const u8,
    base: usize,
    sc: v128,
) -> v128 {
    // SAFETY: caller; group g's elements 16g..16g+16 (< 256).
    let y = |g: usize| unsafe { load16(yq.add(16 * (base + g))) };
    i32x4_add(
        i32x4_add(
            scaled::<G0>(dot16(v[0], y(G0)), sc),
            scaled::<G1>(dot16(v[1], y(G1)), sc),
        ),
        i32x4_add(
            scaled::<G2>(dot16(v[2], y(G2)), sc),
            scaled::<G3>(dot16(v[3], y(G3)), sc),
        ),
    )
}

/// q6_K rows (210 bytes: 128 bytes of low nibbles ql, 64 bytes of 2-bit pairs qh, 16 i8 scales,
/// f16 d; x = d·sc·(q − 32), q = 0..63). Σ sc·(q − 32)·y = Σ sc·q·y − 32·Σ_g sc_g·bsum_g with the
/// column's bsums (Σ of each 16 quants, exact: the column is always this backend's conversion),
/// so that q is the relaxed dot's unsigned operand.
///
/// # Safety
/// As [`super::gemv::gemv`].
#[inline(never)]
pub(super) unsafe fn gemv_q6_k<const R4: bool>(
    nb: usize,
    pn: &Panel,
    b: *const u8,
    accumulate: bool,
) {
    let k = consts();
    // SAFETY: forwarded; each closure call reads one block per row and of the column.
    unsafe {
        run::<R4>(nb, pn, b, accumulate, (210, 208, false), |xb, yb| {
            let yq = yb.add(YQ);
            let bs = bsums(yb);
            let row = |x: *const u8| {
                let scb = load16(x.add(192));
                let sc = [i16x8_extend_low_i8x16(scb), i16x8_extend_high_i8x16(scb)];
                // Elements 128·half + 32k + 16c + (0..16), k = 0..4: ql bytes 64·half + 16c
                // (k = 0, 2: low / high nibbles) and + 32 (k = 1, 3), qh bits 2k, 2k+1 of bytes
                // 32·half + 16c.
                let q = |half: usize, c: usize| {
                    let ql_a = load16(x.add(64 * half + 16 * c));
                    let ql_b = load16(x.add(64 * half + 32 + 16 * c));
                    let qh = load16(x.add(128 + 32 * half + 16 * c));
                    let [a_lo, a_hi] = nibbles(ql_a, &k);
                    let [b_lo, b_hi] = nibbles(ql_b, &k);
                    // Bits 2k, 2k+1 of qh moved to bits 4, 5: 16-bit shifts, then a mask that
                    // drops what crossed a byte.
                    let m = |v: v128| v128_and(v, k.x30);
                    [
                        v128_or(a_lo, m(u16x8_shl(qh, 4))),
                        v128_or(b_lo, m(u16x8_shl(qh, 2))),
                        v128_or(a_hi, m(qh)),
                        v128_or(b_hi, m(u16x8_shr(qh, 2))),
                    ]
                };
                let s = i32x4_add(
                    i32x4_add(
                        q6_groups::<0, 2, 4, 6>(q(0, 0), yq, 0, sc[0]),
                        q6_groups::<1, 3, 5, 7>(q(0, 1), yq, 0, sc[0]),
                    ),
                    i32x4_add(
                        q6_groups::<0, 2, 4, 6>(q(1, 0), yq, 8, sc[1]),
                        q6_groups::<1, 3, 5, 7>(q(1, 1), yq, 8, sc[1]),
                    ),
                );
                // 32·Σ_g sc_g·bsum_g (|Σ| < 2^23).
                let off = i32x4_add(i32x4_dot_i16x8(sc[0], bs[0]), i32x4_dot_i16x8(sc[1], bs[1]));
                (i32x4_sub(s, i32x4_shl(off, 5)), i32x4_splat(0))
            };
            let [r0, r1, r2, r3] = xb.map(row);
            (reduce4([r0.0, r1.0, r2.0, r3.0]), i32x4_splat(0))
        })
    }
}
