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
/// Repacked rows (the SIMD128 build) go one group a pass: two far apart, as `gemv.rs` `run2`,
/// measured against one (`gemv-ab.mjs`, Node 24, AMD Zen 3) from DRAM q4_K 0.98–1.00×, q5_K
/// 0.99–1.00×, q6_K 0.95–0.97× (from cache 0.99–1.03×): at 5–7 GB/s they are bound by their
/// decode. That speed rests on LLVM keeping `xb.map(row)` below a loop, the column's widening
/// hoisted out of it for the four rows; unrolled, as unrelated changes to the crate made it at
/// times, they ran 0.87–0.95× (and the rows written out with the widening shared 0.81–1.00×, a
/// loop with a count hidden from LLVM 0.77–0.87×, for reasons not found).
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
        // SAFETY: rows i..i + min(n − i, 4) are the panel's.
        unsafe { store_rows(pn, i, (n - i).min(4), acc, accumulate) };
        i += 4;
    }
}

/// Lanes 0..count of `acc` into the panel's rows i.. of its single column (added when
/// `accumulate`).
///
/// # Safety
/// Rows i..i + count must be in the panel.
#[inline(always)]
pub(super) unsafe fn store_rows(pn: &Panel, i: usize, count: usize, acc: v128, accumulate: bool) {
    let mut o = [0f32; 4];
    // SAFETY: 16 bytes.
    unsafe { v128_store(o.as_mut_ptr() as *mut v128, acc) };
    for (r, v) in o.iter().enumerate().take(count) {
        // SAFETY: caller; row i + r of the panel's single column.
        unsafe {
            let p = pn.out0.add((i + r) * 4) as *mut f32;
            if accumulate {
                *p += *v
            } else {
                *p = *v
            }
        }
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

/// The relaxed build's GEMV of k-quants repacked in the chunked layout (`repack.rs`,
/// `Spec::chunked`: the four rows' d (and dmin) together, then their super-blocks' other bytes
/// in 4-byte chunks, chunk c of row r at 16c + 4r). One 16-byte load holds the same four quant
/// bytes of each row, and one `i32x4.relaxed_dot_i8x16_i7x16_add` against the column's four
/// matching quants splatted sums each row in its own lane (one `vpdpbusd` in V8 on x86 with
/// AVX-VNNI): no transposes, and the scales too come one row per i32 lane, so a sub-block's
/// scale multiplies its four rows' sums at once. Per super-block of four rows about a third of
/// the instructions of the row-per-tile path above.
///
/// The integer sums are the same exact ones (the reference's isum, summ), then the f32
/// operations of [`run`] in its order: the same bits.
#[cfg(target_feature = "relaxed-simd")]
pub(super) mod chunked {
    use super::super::dot2_add;
    use super::super::gemv::{f16x4_unbiased, touch_page_ahead};
    use super::super::u32x4_bytes;
    use super::*;

    /// `$body` once per value, `$v` bound to it: straight-line code whose shifts and offsets
    /// are constants (LLVM left these loops rolled, their shift amounts and scale picks then
    /// computed per iteration).
    macro_rules! unroll {
        ($v:ident in [$($n:expr),*] $body:block) => {
            $({
                let $v: usize = $n;
                $body
            })*
        };
    }

    /// Most super-blocks of a repacked row (k ≤ 16384, `repack::MAX_BLOCKS`): the column's
    /// facts live on the stack.
    pub(in super::super) const MAX_SB: usize = crate::backend::cpu::repack::MAX_BLOCKS / 8;

    /// A column super-block's facts: dy in every lane, and `w`: for q4_K / q5_K the mins'
    /// partners (i16 pairs per i32 lane: [b0, b2], [b1, b3], [b4, b6], [b5, b7], b_j the sum of
    /// sub-block j's 32 quants), for q6_K 32·Σ of each 16 quants as 16 i32.
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct KCol {
        dy: v128,
        w: [v128; 4],
    }

    static CONSTS: V128s<9> = V128s([
        [0x0F; 16],
        [0x10; 16],
        [0x30; 16],
        u32x4_bytes(0x3F),
        u32x4_bytes(0xFF),
        u32x4_bytes(0x0F0F_0F0F),
        u32x4_bytes(0x3030_3030),
        u32x4_bytes(0x003F_003F),
        // i16 ones, the split dots' widening ([`dot2_add`]).
        u32x4_bytes(0x0001_0001),
    ]);

    #[derive(Clone, Copy)]
    struct C {
        m0f: v128,
        x10: v128,
        x30: v128,
        b3f: v128,
        bff: v128,
        n0f: v128,
        n30: v128,
        p3f: v128,
        ones: v128,
    }

    #[inline(always)]
    fn consts() -> C {
        let [m0f, x10, x30, b3f, bff, n0f, n30, p3f, ones] = v128s(&CONSTS);
        C {
            m0f,
            x10,
            x30,
            b3f,
            bff,
            n0f,
            n30,
            p3f,
            ones,
        }
    }

    /// `v` shifted left by `s` bits (right by −s) in 16-bit lanes.
    #[inline(always)]
    fn shift16(v: v128, s: i32) -> v128 {
        match s.cmp(&0) {
            core::cmp::Ordering::Greater => i16x8_shl(v, s as u32),
            core::cmp::Ordering::Less => u16x8_shr(v, (-s) as u32),
            core::cmp::Ordering::Equal => v,
        }
    }

    /// The column's facts for every super-block: `q6` the q6_K ones.
    ///
    /// # Safety
    /// `b` addresses nb ≤ MAX_SB q8_K blocks; `c` has room for nb.
    #[inline(always)]
    unsafe fn column(c: *mut KCol, nb: usize, b: *const u8, q6: bool) {
        let ones = i16x8_splat(1);
        for blk in 0..nb {
            // SAFETY: blk < nb, inside the column and `c`.
            unsafe {
                let yb = b.add(blk * YS);
                let [s0, s1] = bsums(yb);
                let w = if q6 {
                    // 32·bsum_g, g = 0..16, as i32.
                    [
                        i32x4_shl(i32x4_extend_low_i16x8(s0), 5),
                        i32x4_shl(i32x4_extend_high_i16x8(s0), 5),
                        i32x4_shl(i32x4_extend_low_i16x8(s1), 5),
                        i32x4_shl(i32x4_extend_high_i16x8(s1), 5),
                    ]
                } else {
                    // b_j = bsums[2j] + bsums[2j + 1] (|b_j| ≤ 4096), as i16 lanes b0..b8.
                    let bj =
                        i16x8_narrow_i32x4(i32x4_dot_i16x8(s0, ones), i32x4_dot_i16x8(s1, ones));
                    let p = i16x8_shuffle::<0, 2, 1, 3, 4, 6, 5, 7>(bj, bj);
                    [
                        i32x4_shuffle::<0, 0, 0, 0>(p, p),
                        i32x4_shuffle::<1, 1, 1, 1>(p, p),
                        i32x4_shuffle::<2, 2, 2, 2>(p, p),
                        i32x4_shuffle::<3, 3, 3, 3>(p, p),
                    ]
                };
                c.add(blk).write(KCol {
                    dy: f32x4_splat((yb as *const f32).read_unaligned()),
                    w,
                });
            }
        }
    }

    /// Every group of `pn` (whole groups of four rows) against column `b`: `sums([ga, gb], w,
    /// yq)` gives the four rows' exact (isum, summ) of group blocks `ga` and `gb` (summ: 0
    /// without dmin) with the column super-block's facts at `w` and its quants at `yq`. Without
    /// `P`, and for an odd count's middle group, `gb` is `ga` and its result unused.
    ///
    /// # Safety
    /// As [`super::super::gemv::gemv_repacked`]; nb ≤ MAX_SB; `sums` reads one block of each
    /// group and one column block.
    #[inline(always)]
    unsafe fn run<const P: bool>(
        nb: usize,
        pn: &Panel,
        b: *const u8,
        accumulate: bool,
        (xs, min): (usize, bool),
        sums: impl Fn([*const u8; 2], *const u8, *const u8) -> [(v128, v128); 2],
    ) {
        let mut col = core::mem::MaybeUninit::<[KCol; MAX_SB]>::uninit();
        let cp = col.as_mut_ptr() as *mut KCol;
        // SAFETY: caller; nb ≤ MAX_SB.
        unsafe { column(cp, nb, b, !min) };
        let fk = f16_consts();
        let rebias = f32x4_splat(f32::from_bits(0x7780_0000));
        let lim = pn.a0 as usize + pn.nrows * pn.lda;
        // `P`: two groups a pass, far apart, group i with group i + h (as the 32-element types'
        // `gemv::run2`: two streams pages apart keep more weights in flight from DRAM; q4_K
        // 4864 × 896 from DRAM 1.10× in Node 24 on an AMD Zen 3, where q6_K, with more live
        // values, measured 0.90–0.92×: one group a pass). An odd count's middle group runs
        // alone.
        let groups = pn.nrows / 4;
        let h = if P { groups.div_ceil(2) } else { groups };
        for g0 in 0..h {
            let (g1, both) = if P && g0 + h < groups {
                (g0 + h, true)
            } else {
                (g0, false)
            };
            // SAFETY: groups g0, g1 are inside the panel.
            let bases = unsafe { [pn.a0.add(4 * g0 * pn.lda), pn.a0.add(4 * g1 * pn.lda)] };
            let mut acc = [f32x4_splat(0.0); 2];
            let head = if min { 16 } else { 8 };
            for blk in 0..nb {
                // SAFETY: blk < nb: the column copy's entry (set above).
                let cb = unsafe { cp.add(blk) };
                // SAFETY: blk < nb: one block of each group (the same one twice when alone)
                // and one column block (set above).
                let (gs, sum) = unsafe {
                    // (Written out, not `map`: see `gemv.rs` each4.)
                    let gs = [bases[0].add(blk * 4 * xs), bases[1].add(blk * 4 * xs)];
                    // The panel's groups run to a0 + nrows · lda. Per block: a pass is long
                    // (k / 256 blocks of 576–840 bytes), its touches spread over it measured
                    // 1.08× a burst at its start (q4_K 4864 × 896 from DRAM, Node 26).
                    touch_page_ahead(gs[0], 4 * xs, lim);
                    if P && both {
                        touch_page_ahead(gs[1], 4 * xs, lim);
                    }
                    let w = (&raw const (*cb).w) as *const u8;
                    let sum = sums([gs[0].add(head), gs[1].add(head)], w, b.add(blk * YS + YQ));
                    (gs, sum)
                };
                for (j, (g, (isum, summ))) in
                    gs.into_iter()
                        .zip(sum)
                        .enumerate()
                        .take(if P { 2 } else { 1 })
                {
                    // SAFETY: g is a group block (its d, and dmin, read here).
                    unsafe {
                        // d (and dmin) of the four rows: finite (`repack.rs`), so the bits
                        // moved into place times 2^112 are their values exactly.
                        let h = if min {
                            load16(g)
                        } else {
                            v128_load64_zero(g as *const u64)
                        };
                        let conv = |s: v128| f32x4_mul(f16x4_unbiased(s, &fk), rebias);
                        let dy = (*cb).dy;
                        let d = conv(i32x4_extend_low_i16x8(h));
                        // The scalar reference's operations in its order (quant/k_quants.rs).
                        let mut t = f32x4_mul(f32x4_mul(d, dy), f32x4_convert_i32x4(isum));
                        if min {
                            let dmin = conv(i32x4_extend_high_i16x8(h));
                            t = f32x4_sub(
                                t,
                                f32x4_mul(f32x4_mul(dmin, dy), f32x4_convert_i32x4(summ)),
                            );
                        }
                        acc[j] = f32x4_add(acc[j], t);
                    }
                }
            }
            // SAFETY: the groups' rows (whole groups) are the panel's.
            unsafe {
                store_rows(pn, 4 * g0, 4, acc[0], accumulate);
                if both {
                    store_rows(pn, 4 * g1, 4, acc[1], accumulate);
                }
            }
        }
    }

    /// The q4_K / q5_K scales and the mins' sum of one group block whose first three chunks
    /// are the 12 scale bytes q (A = q[0..4], B = q[4..8], C = q[8..12], lane r = row r):
    /// `sc(j)` of sub-block j as i32 lanes, and Σ_j m_j·b_j (`w`: the column's pairs).
    /// ggml's get_scale_min_k4: scale j < 4 is q[j] & 63, j ≥ 4 (q[j+4] & 15) | (q[j−4] >> 6) << 4;
    /// min j < 4 is q[j+4] & 63, j ≥ 4 (q[j+4] >> 4) | (q[j] >> 6) << 4.
    ///
    /// # Safety
    /// 48 bytes at `x`, 64 at `w`.
    #[inline(always)]
    unsafe fn k4_scales(x: *const u8, w: *const u8, k: &C) -> ([v128; 2], v128) {
        // SAFETY: caller.
        let (a, bq, cq, w) = unsafe {
            (
                load16(x),
                load16(x.add(16)),
                load16(x.add(32)),
                [
                    load16(w),
                    load16(w.add(16)),
                    load16(w.add(32)),
                    load16(w.add(48)),
                ],
            )
        };
        // Scales 4..8 as bytes (each masked: no shifted bit crosses into a kept one).
        let hi = v128_or(v128_and(cq, k.n0f), v128_and(u32x4_shr(a, 2), k.n30));
        // Mins in i16 lanes: [m0, m2], [m1, m3], [m4, m6], [m5, m7] of each row.
        let m02 = v128_and(bq, k.p3f);
        let m13 = v128_and(u32x4_shr(bq, 8), k.p3f);
        let top = |s: u32| v128_and(u32x4_shr(bq, s), i32x4_splat(0x0030_0030));
        let low = |s: u32| v128_and(u32x4_shr(cq, s), i32x4_splat(0x000F_000F));
        let m46 = v128_or(low(4), top(2));
        let m57 = v128_or(low(12), top(10));
        let summ = i32x4_add(
            i32x4_add(i32x4_dot_i16x8(m02, w[0]), i32x4_dot_i16x8(m13, w[1])),
            i32x4_add(i32x4_dot_i16x8(m46, w[2]), i32x4_dot_i16x8(m57, w[3])),
        );
        ([a, hi], summ)
    }

    /// Scale j (0..8) from [`k4_scales`]' `sc`: byte j % 4 of `sc[j / 4]`'s lanes (`sc[0]`
    /// unmasked: its top two bits are another scale's).
    #[inline(always)]
    fn k4_scale(sc: &[v128; 2], j: u32, k: &C) -> v128 {
        let v = sc[(j / 4) as usize];
        let s = 8 * (j % 4);
        match (j / 4, j % 4) {
            (0, _) => v128_and(u32x4_shr(v, s), k.b3f),
            (_, 3) => u32x4_shr(v, 24),
            _ => v128_and(u32x4_shr(v, s), k.bff),
        }
    }

    /// Σ_j sc_j·Σ u·y over the eight sub-blocks of a q4_K / q5_K super-block, for two groups
    /// at once (`sc[q]`: group q's scales), each column splat serving both. `quants(q, g, j)`:
    /// group q's operands of chunk 8g + j (low nibbles: elements 64g + 4j + 0..4 of each row,
    /// sub-block 2g; high nibbles the same + 32, sub-block 2g + 1). The loop over g stays
    /// rolled: unrolled, LLVM hoisted loads across it and V8 spilled (q4_K 30 % slower).
    ///
    /// For engines whose dot-add is split ([`super::super::split_dots`]; else [`k4_isum`]): a
    /// sub-block's i16 dots are summed in i16 — all eight chunks for q4_K (|lane| ≤ 8·2·15·128 =
    /// 30720), four at a time for q5_K (4·2·31·128 = 31744) — and meet the scale in one
    /// `i32x4.dot_i16x8_s` against it in both i16 halves of each lane, instead of a widening
    /// against ones per two chunks and an i32 multiply per sub-block: the same exact integers.
    ///
    /// # Safety
    /// 256 quants at `yq`.
    #[inline(always)]
    // (q indexes the accumulators, the scales and `quants`' group alike.)
    #[allow(clippy::needless_range_loop)]
    unsafe fn k4_isum2<const Q5: bool>(
        sc: [&[v128; 2]; 2],
        yq: *const u8,
        k: &C,
        quants: impl Fn(usize, usize, usize) -> (v128, v128),
    ) -> [v128; 2] {
        let mut isum = [i32x4_splat(0); 2];
        for g in 0..4 {
            // SAFETY: caller; elements 64g + 4j (+ 32) + 0..4.
            let ycol = |j: usize| unsafe {
                (
                    v128_load32_splat(yq.add(64 * g + 4 * j) as *const u32),
                    v128_load32_splat(yq.add(64 * g + 32 + 4 * j) as *const u32),
                )
            };
            let scale = |q: usize, j: u32| k4_scale(sc[q], 2 * g as u32 + j, k);
            // The scale in both i16 halves of each row's lane.
            let s16 = |q: usize, j: u32| {
                let s = scale(q, j);
                v128_or(s, i32x4_shl(s, 16))
            };
            let ss = [[s16(0, 0), s16(0, 1)], [s16(1, 0), s16(1, 1)]];
            // [group][low, high nibbles]
            let mut t = [[i16x8_splat(0); 2]; 2];
            let mut w = [[i32x4_splat(0); 2]; 2];
            unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] {
                let (ylo, yhi) = ycol(j);
                for q in 0..2 {
                    let (lo, hi) = quants(q, g, j);
                    t[q][0] = i16x8_add(t[q][0], i16x8_relaxed_dot_i8x16_i7x16(ylo, lo));
                    t[q][1] = i16x8_add(t[q][1], i16x8_relaxed_dot_i8x16_i7x16(yhi, hi));
                }
                if Q5 && j == 3 {
                    for q in 0..2 {
                        for h in 0..2 {
                            w[q][h] = i32x4_dot_i16x8(t[q][h], ss[q][h]);
                            t[q][h] = i16x8_splat(0);
                        }
                    }
                }
            });
            for q in 0..2 {
                let lo = i32x4_add(w[q][0], i32x4_dot_i16x8(t[q][0], ss[q][0]));
                let hi = i32x4_add(w[q][1], i32x4_dot_i16x8(t[q][1], ss[q][1]));
                isum[q] = i32x4_add(isum[q], i32x4_add(lo, hi));
            }
        }
        isum
    }

    /// Σ_j sc_j·Σ u·y over the eight sub-blocks of a q4_K / q5_K super-block with dot-adds (the
    /// engines whose dot-add is one instruction; else [`k4_isum2`]), `quants(g, j)`
    /// the operands of chunk 8g + j (low nibbles: elements 64g + 4j + 0..4 of each row,
    /// sub-block 2g; high nibbles the same + 32, sub-block 2g + 1). The loop over g stays
    /// rolled: unrolled, LLVM hoisted loads across it and V8 spilled (q4_K 30 % slower).
    ///
    /// # Safety
    /// 256 quants at `yq`.
    #[inline(always)]
    unsafe fn k4_isum(
        sc: &[v128; 2],
        yq: *const u8,
        k: &C,
        quants: impl Fn(usize, usize) -> (v128, v128),
    ) -> v128 {
        let mut isum = i32x4_splat(0);
        for g in 0..4 {
            // Chunk j's operands: (column lo, quants lo, column hi, quants hi).
            let chunk = |j: usize| {
                let (lo, hi) = quants(g, j);
                // SAFETY: caller; elements 64g + 4j (+ 32) + 0..4.
                let (ylo, yhi) = unsafe {
                    (
                        v128_load32_splat(yq.add(64 * g + 4 * j) as *const u32),
                        v128_load32_splat(yq.add(64 * g + 32 + 4 * j) as *const u32),
                    )
                };
                (ylo, lo, yhi, hi)
            };
            // Two chains per sub-block (`gemv.rs` chunked_sums), two dots a step.
            let mut a = [i32x4_splat(0); 4];
            unroll!(p in [0, 1, 2, 3] {
                let (ylo0, lo0, yhi0, hi0) = chunk(2 * p);
                let (ylo1, lo1, yhi1, hi1) = chunk(2 * p + 1);
                a[p % 2] = dot2_add::<false>(ylo0, lo0, ylo1, lo1, a[p % 2], k.ones);
                a[2 + p % 2] = dot2_add::<false>(yhi0, hi0, yhi1, hi1, a[2 + p % 2], k.ones);
            });
            // |Σ| < 2^16 per sub-block, · sc ≤ 63: exact in i32.
            let s0 = i32x4_mul(i32x4_add(a[0], a[1]), k4_scale(sc, 2 * g as u32, k));
            let s1 = i32x4_mul(i32x4_add(a[2], a[3]), k4_scale(sc, 2 * g as u32 + 1, k));
            isum = i32x4_add(isum, i32x4_add(s0, s1));
        }
        isum
    }

    /// Both groups' Σ_j sc_j·Σ u·y: [`k4_isum2`] where the dot-add is split (`S`), else
    /// [`k4_isum`] per group.
    ///
    /// # Safety
    /// 256 quants at `yq`.
    #[inline(always)]
    unsafe fn k4_sums<const S: bool, const Q5: bool>(
        sc: [&[v128; 2]; 2],
        yq: *const u8,
        k: &C,
        quants: impl Fn(usize, usize, usize) -> (v128, v128),
    ) -> [v128; 2] {
        // SAFETY: caller.
        unsafe {
            if S {
                k4_isum2::<Q5>(sc, yq, k, quants)
            } else {
                [
                    k4_isum(sc[0], yq, k, |g, j| quants(0, g, j)),
                    k4_isum(sc[1], yq, k, |g, j| quants(1, g, j)),
                ]
            }
        }
    }

    /// q4_K groups: body = 3 chunks of scales, 32 of nibbles.
    ///
    /// # Safety
    /// As [`super::super::gemv::gemv_repacked`], nb ≤ MAX_SB.
    #[inline(never)]
    pub(in super::super) unsafe fn gemv_q4_k<const S: bool>(
        nb: usize,
        pn: &Panel,
        b: *const u8,
        accumulate: bool,
    ) {
        let k = consts();
        // SAFETY: forwarded; each closure call reads one group block and one column block.
        unsafe {
            run::<true>(nb, pn, b, accumulate, (144, true), |x, w, yq| {
                let ((sa, ma), (sb, mb)) = (k4_scales(x[0], w, &k), k4_scales(x[1], w, &k));
                let qs = [x[0].add(48), x[1].add(48)];
                let quants = |q: usize, g: usize, j: usize| {
                    let v = load16(qs[q].add(16 * (8 * g + j)));
                    (v128_and(v, k.m0f), v128_and(u16x8_shr(v, 4), k.m0f))
                };
                let [ia, ib] = k4_sums::<S, false>([&sa, &sb], yq, &k, quants);
                [(ia, ma), (ib, mb)]
            })
        }
    }

    /// q5_K groups: body = 3 chunks of scales, 8 of qh (bit 2g of byte l: element l of
    /// sub-block 2g, bit 2g + 1: of 2g + 1), 32 of nibbles.
    ///
    /// # Safety
    /// As [`gemv_q4_k`].
    #[inline(never)]
    pub(in super::super) unsafe fn gemv_q5_k<const S: bool>(
        nb: usize,
        pn: &Panel,
        b: *const u8,
        accumulate: bool,
    ) {
        let k = consts();
        // SAFETY: forwarded; each closure call reads one group block and one column block.
        unsafe {
            run::<true>(nb, pn, b, accumulate, (176, true), |x, w, yq| {
                let ((sa, ma), (sb, mb)) = (k4_scales(x[0], w, &k), k4_scales(x[1], w, &k));
                let quants = |q: usize, g: usize, j: usize| {
                    let (qh, qs) = (x[q].add(48), x[q].add(176));
                    let v = load16(qs.add(16 * (8 * g + j)));
                    // Bits 2g, 2g + 1 of qh to bit 4: one shift by the loop's 2g (16-bit
                    // lanes, always right: no branch), then constant ones; the masks drop
                    // what crosses a byte.
                    let h = u16x8_shr(load16(qh.add(16 * j)), 2 * g as u32);
                    (
                        v128_or(v128_and(v, k.m0f), v128_and(i16x8_shl(h, 4), k.x10)),
                        v128_or(
                            v128_and(u16x8_shr(v, 4), k.m0f),
                            v128_and(i16x8_shl(h, 3), k.x10),
                        ),
                    )
                };
                let [ia, ib] = k4_sums::<S, true>([&sa, &sb], yq, &k, quants);
                [(ia, ma), (ib, mb)]
            })
        }
    }

    /// q6_K groups: body = 32 chunks of ql, 16 of qh, 4 of i8 scales. Σ sc·(q − 32)·y per 16
    /// elements as Σ sc·(Σ q·y − 32·bsum) (the column's bsums, exact), q the unsigned operand.
    ///
    /// # Safety
    /// As [`gemv_q4_k`].
    #[inline(never)]
    pub(in super::super) unsafe fn gemv_q6_k<const S: bool>(
        nb: usize,
        pn: &Panel,
        b: *const u8,
        accumulate: bool,
    ) {
        let k = consts();
        // SAFETY: forwarded; each closure call reads one group block and one column block.
        unsafe {
            run::<false>(nb, pn, b, accumulate, (210, false), |[x, _], w, yq| {
                let (ql, qh, scp) = (x, x.add(512), x.add(768));
                let mut isum = i32x4_splat(0);
                // Chunks cc = 4q + t of half h: elements 128h + 4cc + 0..4 (low nibbles; qh
                // bits 0, 1 for cc < 8, else 2, 3) and + 64 (high nibbles; qh bits 4, 5 or 6,
                // 7), qh byte 32h + 4(cc % 8); groups 8h + q and 8h + 4 + q. Two rolled loops
                // (q < 2, q ≥ 2: their qh shifts constant) over (h, q) (see `k4_isum`).
                let mut quarter = |h: usize, q: usize, (slo, shi): (i32, i32)| {
                    let chunk = |t: usize| {
                        let cc = 4 * q + t;
                        let v = load16(ql.add(16 * (16 * h + cc)));
                        let hq = load16(qh.add(16 * (8 * h + cc % 8)));
                        let lo = v128_or(v128_and(v, k.m0f), v128_and(shift16(hq, slo), k.x30));
                        let hi = v128_or(
                            v128_and(u16x8_shr(v, 4), k.m0f),
                            v128_and(shift16(hq, shi), k.x30),
                        );
                        let e = 128 * h + 4 * cc;
                        let ylo = v128_load32_splat(yq.add(e) as *const u32);
                        let yhi = v128_load32_splat(yq.add(e + 64) as *const u32);
                        (ylo, lo, yhi, hi)
                    };
                    // Split, a pair's i16 sums stay ≤ 4·63·128 = 32256.
                    let mut a = [i32x4_splat(0); 4];
                    unroll!(p in [0, 1] {
                        let (ylo0, lo0, yhi0, hi0) = chunk(2 * p);
                        let (ylo1, lo1, yhi1, hi1) = chunk(2 * p + 1);
                        a[p] = dot2_add::<S>(ylo0, lo0, ylo1, lo1, a[p], k.ones);
                        a[2 + p] = dot2_add::<S>(yhi0, hi0, yhi1, hi1, a[2 + p], k.ones);
                    });
                    // Scales of groups 8h..8h + 8: row r's bytes in lane r; group g's is byte
                    // g % 4 of vector g / 4, sign-extended.
                    let sc = |g: usize| {
                        let v = load16(scp.add(32 * h + 16 * (g / 4)));
                        i32x4_shr(i32x4_shl(v, 24 - 8 * (g % 4) as u32), 24)
                    };
                    // Groups 8h + q and 8h + 4 + q: (Σ q·y − 32·bsum)·sc, exact in i32.
                    let off = |g: usize| v128_load32_splat(w.add(4 * (8 * h + g)) as *const u32);
                    let slo = i32x4_sub(i32x4_add(a[0], a[1]), off(q));
                    let shi = i32x4_sub(i32x4_add(a[2], a[3]), off(4 + q));
                    isum = i32x4_add(
                        isum,
                        i32x4_add(i32x4_mul(slo, sc(q)), i32x4_mul(shi, sc(4 + q))),
                    );
                };
                for i in 0..4 {
                    quarter(i / 2, i % 2, (4, 0));
                }
                for i in 0..4 {
                    quarter(i / 2, 2 + i % 2, (2, -2));
                }
                let r = (isum, i32x4_splat(0));
                [r, r]
            })
        }
    }
}
