//! Weights repacked at load for the CPU's token-generation GEMV (ggml's CPU "repack" buffer
//! type, `q4_0x4` and kin): every four rows of a 2-D quantized weight become one group whose
//! blocks are interleaved, so the GEMV reads one sequential stream instead of four and loads
//! the four rows' f16 scales with one vector load instead of four lane inserts and a
//! deinterleave.
//!
//! Group g holds rows 4g..4g+4 in the bytes those four rows had (the same size: repacking is in
//! place). Its block b, at `b · 4 · xs` (xs: the type's block bytes), is
//!
//! ```text
//! q4_0, q8_0:  [d of rows 0..4: 4 × f16] [row 0's quants] … [row 3's quants]
//! q4_1:        [d × 4] [m × 4] [row 0's quants] … [row 3's]
//! q5_0 (q5_1): [d × 4] ([m × 4]) [fifth bits of all four rows: 16 bytes] [row 0's nibbles] … [row 3's]
//! k-quants:    [row 0's super-block] … [row 3's super-block]   (whole, scales as they are)
//! ```
//!
//! (The relaxed-SIMD wasm builds chunk the k-quants too, below.)
//!
//! In the fifth bits' 16 bytes, bit p of byte j is row p / 2's element j + 16·(p % 2), so the
//! GEMV takes a row half's bits with one shift and one mask.
//!
//! The relaxed-SIMD wasm builds interleave the rows' bodies finer ([`Spec::chunked`]): the
//! four rows' quants in 4-byte chunks, chunk c of row r at `head + 16·c + 4·r`, so that one
//! 16-byte load holds the same four quant bytes of each row and one
//! `i32x4.relaxed_dot_i8x16_i7x16_add` against the column's four bytes splatted sums each row
//! in its own lane (no transpose; one `vpdpbusd` where the engine has AVX-VNNI, one `sdot` on
//! ARM). q5_0 / q5_1 there keep each element's five bits nearer together: byte j of a row's 16
//! (in its chunk j / 4, at 4·r + j % 4) holds element j whole in bits 0..5 and bits 0..3 of
//! element 16 + j in bits 5..8, and the group's 16 shared bytes hold bits 3 and 4 of element
//! 16 + 4c + j of row r at bits 2c and 2c + 1 of byte 4·r + j (c = 0..4), so a chunk decodes with
//! one mask (elements j) and a shift, two masks and an or (elements 16 + j). A k-quant group
//! block there is `[d × 4] ([dmin × 4])` and then the rest of each row's super-block (q4_K,
//! q5_K: scales, (qh,) qs; q6_K: ql, qh, scales; in the block's order) in the same 4-byte
//! chunks, so that its scales too come four rows to a vector, one row per i32 lane. The last
//! `ne1 % 4` rows stay as they were. Only weights whose d (and m) are all finite are repacked, so the
//! kernels may convert them without the inf/NaN fix-up.
//!
//! A repacked tensor carries [`crate::tensor::Flags::REPACKED`]. Its bytes read or written
//! through [`crate::Context::get_bytes`] / `set_bytes` are the GGUF layout (converted on the
//! way), mul_mat (as src0) and get_rows (as src0) read it directly, and any other op that
//! would read it is an `UnsupportedOp` error, never a silent misread.

use super::CpuBuffer;
use crate::tensor::Flags;
use crate::{Context, DType, Error, Result, TensorId};

/// The repacked layout of one weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Bytes of one block.
    pub xs: usize,
    /// f16 scale fields of a block gathered per group: 1 (d) or 2 (d, m); 0 for the k-quants
    /// outside the chunked layout, whose blocks are interleaved whole.
    pub fields: usize,
    /// Elements per block (32, or 256 for the k-quants).
    pub qk: usize,
    /// q5_0, q5_1: the four rows' 4-byte fifth bits are gathered into 16 bytes, bit p of byte
    /// j the bit of row p / 2, element j + 16·(p % 2) (one shift and one mask per row and half
    /// in the GEMV, instead of a byte shuffle, a mask, a compare and a mask).
    pub hbits: bool,
    /// The rows' quants interleaved in 4-byte chunks (and the fifth bits in that order), for
    /// the relaxed-SIMD wasm GEMV; else each row's quants whole, one row after another.
    pub chunked: bool,
    /// Where the f16 fields are in a plain block: 0, or 208 for q6_K (its d is last). A
    /// chunked k-quant's body is its block without them, in order.
    pub fat: usize,
}

impl Spec {
    /// Blocks in a row of `ne0` elements.
    pub fn blocks(self, ne0: usize) -> usize {
        ne0 / self.qk
    }
    /// Bytes of one row's part of a group block: its block without its scales (and without
    /// its fifth bits for q5_*).
    pub fn body(self) -> usize {
        self.xs - 2 * self.fields - if self.hbits { 4 } else { 0 }
    }
    /// Bytes of the group block's shared part: the four rows' scales (and fifth bits).
    pub fn head(self) -> usize {
        8 * self.fields + if self.hbits { 16 } else { 0 }
    }
}

/// Most blocks per row (k ≤ 16384) of a repacked weight: the wasm GEMV keeps a copy of the
/// column's blocks on the stack.
pub const MAX_BLOCKS: usize = 512;

/// Whether this build's 32-element types use the chunked layout ([`Spec::chunked`]): the
/// wasm GEMV built with relaxed SIMD reads it.
const CHUNKED: bool = cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd"));

/// The layout of `dtype` when it can be repacked.
pub fn spec(dtype: DType) -> Option<Spec> {
    let (xs, fields, qk) = match dtype {
        DType::Q4_0 => (18, 1, 32),
        DType::Q4_1 => (20, 2, 32),
        DType::Q5_0 => (22, 1, 32),
        DType::Q5_1 => (24, 2, 32),
        DType::Q8_0 => (34, 1, 32),
        // The k-quants' scales are not gathered (their GEMV reads them per row).
        DType::Q4_K => (144, 0, 256),
        DType::Q5_K => (176, 0, 256),
        DType::Q6_K => (210, 0, 256),
        _ => return None,
    };
    let hbits = matches!(dtype, DType::Q5_0 | DType::Q5_1);
    Some(if qk == 256 && CHUNKED {
        kq_chunked(dtype, xs)
    } else {
        Spec {
            xs,
            fields,
            qk,
            hbits,
            chunked: CHUNKED,
            fat: 0,
        }
    })
}

/// The chunked layout of k-quant `dtype` (block bytes `xs`): d (and dmin) gathered, the rest
/// of the super-block (scales and quants, in the block's order) in 4-byte chunks.
fn kq_chunked(dtype: DType, xs: usize) -> Spec {
    let q6 = dtype == DType::Q6_K;
    Spec {
        xs,
        fields: if q6 { 1 } else { 2 },
        qk: 256,
        hbits: false,
        chunked: true,
        fat: if q6 { 208 } else { 0 },
    }
}

/// Whether repacking weights of `dtype` pays here: this CPU's GEMV reads them directly
/// ([`arch::gemv_reads_repacked`](super::arch::gemv_reads_repacked): the wasm SIMD builds, x86
/// AVX-512 VNNI / AVX2 for q4_0 q4_1 q5_0 q5_1, VNNI for q8_0). Elsewhere mul_mat reads a repacked tensor
/// through a plain copy per group, correct but slower, so loaders leave it plain.
pub fn pays_for(dtype: DType) -> bool {
    spec(dtype).is_some() && super::arch::gemv_reads_repacked(dtype)
}

/// Four plain rows of `nb` blocks (`src`, row after row) → one group (`dst`, as long).
/// Monomorphized per type, so that every copy has a constant size (a model's load repacks
/// all of its matrices).
pub fn pack_group(s: Spec, nb: usize, src: &[u8], dst: &mut [u8]) {
    match (s.xs, s.fields, s.hbits, s.chunked) {
        (18, 1, false, false) => pack_n(spec_n::<18, 1, false, false>(), nb, src, dst),
        (20, 2, false, false) => pack_n(spec_n::<20, 2, false, false>(), nb, src, dst),
        (22, 1, true, false) => pack_n(spec_n::<22, 1, true, false>(), nb, src, dst),
        (24, 2, true, false) => pack_n(spec_n::<24, 2, true, false>(), nb, src, dst),
        (34, 1, false, false) => pack_n(spec_n::<34, 1, false, false>(), nb, src, dst),
        (18, 1, false, true) => pack_n(spec_n::<18, 1, false, true>(), nb, src, dst),
        (20, 2, false, true) => pack_n(spec_n::<20, 2, false, true>(), nb, src, dst),
        (22, 1, true, true) => pack_n(spec_n::<22, 1, true, true>(), nb, src, dst),
        (24, 2, true, true) => pack_n(spec_n::<24, 2, true, true>(), nb, src, dst),
        (34, 1, false, true) => pack_n(spec_n::<34, 1, false, true>(), nb, src, dst),
        (144, 0, false, false) => pack_n(spec_n::<144, 0, false, false>(), nb, src, dst),
        (176, 0, false, false) => pack_n(spec_n::<176, 0, false, false>(), nb, src, dst),
        (210, 0, false, false) => pack_n(spec_n::<210, 0, false, false>(), nb, src, dst),
        (144, 2, false, true) => pack_n(spec_n::<144, 2, false, true>(), nb, src, dst),
        (176, 2, false, true) => pack_n(spec_n::<176, 2, false, true>(), nb, src, dst),
        (210, 1, false, true) => pack_n(spec_n::<210, 1, false, true>(), nb, src, dst),
        _ => pack_n(s, nb, src, dst),
    }
}

/// A group → its four plain rows (`dst`, as long); the inverse of [`pack_group`]. (A prompt's
/// product unpacks each group once.)
pub fn unpack_group(s: Spec, nb: usize, group: &[u8], dst: &mut [u8]) {
    match (s.xs, s.fields, s.hbits, s.chunked) {
        (18, 1, false, false) => unpack_n(spec_n::<18, 1, false, false>(), nb, group, dst),
        (20, 2, false, false) => unpack_n(spec_n::<20, 2, false, false>(), nb, group, dst),
        (22, 1, true, false) => unpack_n(spec_n::<22, 1, true, false>(), nb, group, dst),
        (24, 2, true, false) => unpack_n(spec_n::<24, 2, true, false>(), nb, group, dst),
        (34, 1, false, false) => unpack_n(spec_n::<34, 1, false, false>(), nb, group, dst),
        (18, 1, false, true) => unpack_n(spec_n::<18, 1, false, true>(), nb, group, dst),
        (20, 2, false, true) => unpack_n(spec_n::<20, 2, false, true>(), nb, group, dst),
        (22, 1, true, true) => unpack_n(spec_n::<22, 1, true, true>(), nb, group, dst),
        (24, 2, true, true) => unpack_n(spec_n::<24, 2, true, true>(), nb, group, dst),
        (34, 1, false, true) => unpack_n(spec_n::<34, 1, false, true>(), nb, group, dst),
        (144, 0, false, false) => unpack_n(spec_n::<144, 0, false, false>(), nb, group, dst),
        (176, 0, false, false) => unpack_n(spec_n::<176, 0, false, false>(), nb, group, dst),
        (210, 0, false, false) => unpack_n(spec_n::<210, 0, false, false>(), nb, group, dst),
        (144, 2, false, true) => unpack_n(spec_n::<144, 2, false, true>(), nb, group, dst),
        (176, 2, false, true) => unpack_n(spec_n::<176, 2, false, true>(), nb, group, dst),
        (210, 1, false, true) => unpack_n(spec_n::<210, 1, false, true>(), nb, group, dst),
        _ => unpack_n(s, nb, group, dst),
    }
}

/// A spec whose sizes are constants where it is inlined.
#[inline(always)]
fn spec_n<const XS: usize, const F: usize, const HB: bool, const CH: bool>() -> Spec {
    Spec {
        xs: XS,
        fields: F,
        qk: 0,
        hbits: HB,
        chunked: CH,
        // q6_K's d is last; the other types' fields lead.
        fat: if XS == 210 && F > 0 { 208 } else { 0 },
    }
}

#[inline(always)]
fn pack_n(s: Spec, nb: usize, src: &[u8], dst: &mut [u8]) {
    let row = nb * s.xs;
    for (b, g) in dst[..4 * row].chunks_exact_mut(4 * s.xs).enumerate() {
        if s.hbits {
            g[8 * s.fields..8 * s.fields + 16].fill(0);
        }
        for r in 0..4 {
            let at = r * row + b * s.xs;
            row_into_group(s, &src[at..at + s.xs], r, g);
        }
    }
}

#[inline(always)]
fn unpack_n(s: Spec, nb: usize, group: &[u8], dst: &mut [u8]) {
    let row = nb * s.xs;
    for (b, g) in group[..4 * row].chunks_exact(4 * s.xs).enumerate() {
        for r in 0..4 {
            let at = r * row + b * s.xs;
            row_from_group(s, g, r, &mut dst[at..at + s.xs]);
        }
    }
}

/// The 16 bytes of a q5 group block's fifth bits as two u64 (bytes 0..8, 8..16).
#[inline(always)]
fn hbit_halves(hv: &[u8]) -> (u64, u64) {
    let w = |i: usize| {
        u64::from_le_bytes([
            hv[i],
            hv[i + 1],
            hv[i + 2],
            hv[i + 3],
            hv[i + 4],
            hv[i + 5],
            hv[i + 6],
            hv[i + 7],
        ])
    };
    (w(0), w(8))
}

/// Bit p of each of the 8 bytes of `x` → bits 0..8 (byte j → bit j): the masked bits sit 8
/// apart, and the multiplier's terms put bit 8j at 56 + j with no two terms colliding.
#[inline(always)]
fn gather8(x: u64, p: usize) -> u32 {
    (((x >> p) & 0x0101_0101_0101_0101).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
}

/// Byte b → bit k of b at bit 8k (the inverse of [`gather8`] at p = 0).
const SPREAD: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut k = 0;
        while k < 8 {
            if (b >> k) & 1 == 1 {
                t[b] |= 1 << (8 * k);
            }
            k += 1;
        }
        b += 1;
    }
    t
};

/// A plain q5 block's 4 bytes of fifth bits `qh` and 16 of nibbles `qs` → row r's part of a
/// chunked q5 group block: `hv` the shared 16 bytes (or-ed), `body` the 64 bytes of chunks
/// ([`Spec::chunked`]; byte j: element j's five bits, then bits 0..3 of element 16 + j; bits 3
/// and 4 of element 16 + 4c + jj at bits 2c, 2c + 1 of `hv[4r + jj]`). Eight bytes at a time.
#[inline(always)]
fn q5_chunked_into(qh: &[u8], qs: &[u8], r: usize, hv: &mut [u8], body: &mut [u8]) {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]) as usize;
    let mut out = 0u32;
    for half in 0..2 {
        let q = u64::from_le_bytes(qs[8 * half..8 * half + 8].try_into().unwrap_or([0; 8]));
        let fifth = SPREAD[(h >> (8 * half)) & 0xFF];
        let b = (q & 0x0F0F_0F0F_0F0F_0F0F) | fifth << 4 | (q & 0x7070_7070_7070_7070) << 1;
        // Bit 3 of element 16 + j (bit 7 of qs[j]) and its bit 4 (h bit 16 + j) as 2-bit values
        // v_j in bytes j, then byte jj of the row's shared word gets v_{4c+jj} << 2c.
        let v = (q >> 7) & 0x0101_0101_0101_0101 | SPREAD[(h >> (16 + 8 * half)) & 0xFF] << 1;
        out |= (v as u32) << (4 * half) | ((v >> 32) as u32) << (4 * half + 2);
        for (k, byte) in b.to_le_bytes().iter().enumerate() {
            let jj = 8 * half + k;
            body[16 * (jj / 4) + 4 * r + jj % 4] = *byte;
        }
    }
    for (jj, o) in out.to_le_bytes().iter().enumerate() {
        hv[4 * r + jj] |= o;
    }
}

/// Row r's plain q5 fifth bits and nibbles (`x`: 4 + 16 bytes) from a chunked q5 group block
/// (the inverse of [`q5_chunked_into`]).
#[inline(always)]
fn q5_chunked_of(hv: &[u8], body: &[u8], r: usize, x: &mut [u8]) {
    let o = u32::from_le_bytes([hv[4 * r], hv[4 * r + 1], hv[4 * r + 2], hv[4 * r + 3]]);
    let mut h = 0u32;
    for half in 0..2 {
        let mut bb = [0u8; 8];
        for (k, byte) in bb.iter_mut().enumerate() {
            let jj = 8 * half + k;
            *byte = body[16 * (jj / 4) + 4 * r + jj % 4];
        }
        let b = u64::from_le_bytes(bb);
        // v_j for j = 8·half + 0..8: chunks c = 2·half and 2·half + 1.
        let w = |c: u32| ((o >> (2 * c)) & 0x0303_0303) as u64;
        let v = w(2 * half as u32) | w(2 * half as u32 + 1) << 32;
        let q = (b & 0x0F0F_0F0F_0F0F_0F0F)
            | (b & 0xE0E0_E0E0_E0E0_E0E0) >> 1
            | (v & 0x0101_0101_0101_0101) << 7;
        x[4 + 8 * half..12 + 8 * half].copy_from_slice(&q.to_le_bytes());
        h |= gather8(b, 4) << (8 * half) | gather8(v, 1) << (16 + 8 * half);
    }
    x[..4].copy_from_slice(&h.to_le_bytes());
}

/// Row `r` (0..4) of a group of `nb` blocks → its plain row (`dst`, `nb · xs` bytes).
pub fn unpack_row(s: Spec, nb: usize, group: &[u8], r: usize, dst: &mut [u8]) {
    for b in 0..nb {
        let g = &group[b * 4 * s.xs..(b + 1) * 4 * s.xs];
        row_from_group(s, g, r, &mut dst[b * s.xs..(b + 1) * s.xs]);
    }
}

/// Row r's plain block `x` from group block `g`.
#[inline(always)]
fn row_from_group(s: Spec, g: &[u8], r: usize, x: &mut [u8]) {
    for f in 0..s.fields {
        let at = s.fat + 2 * f;
        x[at..at + 2].copy_from_slice(&g[8 * f + 2 * r..8 * f + 2 * r + 2]);
    }
    let mut at = 2 * s.fields;
    if s.fat > 0 {
        // q6_K: the body is the block before its d.
        let from = s.head() + 4 * r;
        for (c, q) in x[..s.fat].chunks_exact_mut(4).enumerate() {
            q.copy_from_slice(&g[from + 16 * c..from + 16 * c + 4]);
        }
        return;
    }
    if s.chunked {
        if s.hbits {
            q5_chunked_of(
                &g[8 * s.fields..s.head()],
                &g[s.head()..],
                r,
                &mut x[at..s.xs],
            );
            return;
        }
        let from = s.head() + 4 * r;
        for (c, q) in x[at..s.xs].chunks_exact_mut(4).enumerate() {
            q.copy_from_slice(&g[from + 16 * c..from + 16 * c + 4]);
        }
        return;
    }
    if s.hbits {
        let (lo, hi) = hbit_halves(&g[8 * s.fields..8 * s.fields + 16]);
        let p = 2 * r;
        let h = gather8(lo, p)
            | gather8(hi, p) << 8
            | gather8(lo, p + 1) << 16
            | gather8(hi, p + 1) << 24;
        x[at..at + 4].copy_from_slice(&h.to_le_bytes());
        at += 4;
    }
    let from = s.head() + r * s.body();
    x[at..s.xs].copy_from_slice(&g[from..from + s.body()]);
}

/// Row r's plain block `x` into group block `g` (the fifth bits are or-ed into `g`'s shared
/// 16 bytes, zeroed by the caller).
#[inline(always)]
fn row_into_group(s: Spec, x: &[u8], r: usize, g: &mut [u8]) {
    for f in 0..s.fields {
        let at = s.fat + 2 * f;
        g[8 * f + 2 * r..8 * f + 2 * r + 2].copy_from_slice(&x[at..at + 2]);
    }
    let mut at = 2 * s.fields;
    if s.fat > 0 {
        let to = s.head() + 4 * r;
        for (c, q) in x[..s.fat].chunks_exact(4).enumerate() {
            g[to + 16 * c..to + 16 * c + 4].copy_from_slice(q);
        }
        return;
    }
    if s.chunked {
        if s.hbits {
            let (hv, body) = g[8 * s.fields..].split_at_mut(16);
            q5_chunked_into(&x[at..at + 4], &x[at + 4..s.xs], r, hv, body);
            return;
        }
        let to = s.head() + 4 * r;
        for (c, q) in x[at..s.xs].chunks_exact(4).enumerate() {
            g[to + 16 * c..to + 16 * c + 4].copy_from_slice(q);
        }
        return;
    }
    if s.hbits {
        let h = u32::from_le_bytes([x[at], x[at + 1], x[at + 2], x[at + 3]]) as usize;
        let hv = &mut g[8 * s.fields..8 * s.fields + 16];
        let (lo, hi) = hbit_halves(hv);
        let p = 2 * r;
        let lo = lo | SPREAD[h & 0xff] << p | SPREAD[(h >> 16) & 0xff] << (p + 1);
        let hi = hi | SPREAD[(h >> 8) & 0xff] << p | SPREAD[h >> 24] << (p + 1);
        hv[..8].copy_from_slice(&lo.to_le_bytes());
        hv[8..].copy_from_slice(&hi.to_le_bytes());
        at += 4;
    }
    let to = s.head() + r * s.body();
    g[to..to + s.body()].copy_from_slice(&x[at..s.xs]);
}

/// Whether every f16 scale of these plain blocks is finite (exponent field below 31).
pub fn scales_finite(s: Spec, blocks: &[u8]) -> bool {
    blocks.chunks_exact(s.xs).all(|x| {
        (0..s.fields).all(|f| {
            let at = s.fat + 2 * f;
            u16::from_le_bytes([x[at], x[at + 1]]) & 0x7c00 != 0x7c00
        })
    })
}

/// Rows of a matrix of `nrows` rows that are in groups (the rest stay plain).
pub fn grouped_rows(nrows: usize) -> usize {
    nrows / 4 * 4
}

/// The bytes of a whole repacked matrix (`nrows` rows of `nb` blocks) → the plain layout, in
/// place.
pub fn unpack_matrix(s: Spec, nb: usize, nrows: usize, bytes: &mut [u8]) {
    let span = 4 * nb * s.xs;
    let mut tmp = vec![0u8; span];
    for g in bytes[..grouped_rows(nrows) * nb * s.xs].chunks_exact_mut(span) {
        unpack_group(s, nb, g, &mut tmp);
        g.copy_from_slice(&tmp);
    }
}

/// The plain bytes of a whole matrix → the repacked layout, in place.
pub fn pack_matrix(s: Spec, nb: usize, nrows: usize, bytes: &mut [u8]) {
    let span = 4 * nb * s.xs;
    let mut tmp = vec![0u8; span];
    for g in bytes[..grouped_rows(nrows) * nb * s.xs].chunks_exact_mut(span) {
        pack_group(s, nb, g, &mut tmp);
        g.copy_from_slice(&tmp);
    }
}

/// The layout facts of tensor `id` when it is repacked: (spec, blocks per row, rows).
pub fn layout_of(ctx: &Context, id: TensorId) -> Option<(Spec, usize, usize)> {
    let t = ctx.get(id).ok()?;
    if !t.flags.contains(Flags::REPACKED) {
        return None;
    }
    let s = spec(t.dtype)?;
    Some((s, s.blocks(t.ne[0]), t.ne[1]))
}

/// How a tensor the kernels see relates to the repacked layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repacked {
    No,
    /// The tensor itself is repacked.
    Yes,
    /// A view of a repacked tensor (no kernel reads one).
    View,
}

/// Whether tensor `id` is repacked, or views a repacked tensor.
pub fn is_repacked(ctx: &Context, id: TensorId) -> Repacked {
    let flag = |i| {
        ctx.get(i)
            .is_ok_and(|t: &crate::tensor::Tensor| t.flags.contains(Flags::REPACKED))
    };
    if flag(id) {
        Repacked::Yes
    } else if ctx.get(id).ok().and_then(|t| t.view_src).is_some_and(flag) {
        Repacked::View
    } else {
        Repacked::No
    }
}

/// Repack weight `id` in place in its (host, writable) buffer. Ok(false), nothing changed,
/// when it cannot be: not a repackable type, not a plain 2-D matrix with its own data, fewer
/// than four rows, a scale that is inf or NaN, or already repacked. Memory: one group at a time.
pub fn repack_tensor(ctx: &mut Context, id: TensorId) -> Result<bool> {
    let t = ctx.get(id)?;
    let Some(s) = spec(t.dtype) else {
        return Ok(false);
    };
    if t.flags.contains(Flags::REPACKED)
        || t.view_src.is_some()
        || !t.is_contiguous()
        || t.ne[2] * t.ne[3] != 1
        || t.ne[1] < 4
        || !t.ne[0].is_multiple_of(s.qk)
        || t.ne[0] / 32 > MAX_BLOCKS
    {
        return Ok(false);
    }
    let Some(d) = t.data.as_ref() else {
        return Ok(false);
    };
    let (buf, off) = (d.buffer.clone(), d.offset);
    let Some(cpu) = buf.as_any().downcast_ref::<CpuBuffer>() else {
        return Ok(false);
    };
    if !cpu.heap_bytes() {
        return Ok(false);
    }
    let nb = s.blocks(t.ne[0]);
    let span = 4 * nb * s.xs;
    let groups = t.ne[1] / 4;
    let mut plain = vec![0u8; span];
    // Read pass first: a tensor with a non-finite scale is left as it is, untouched.
    for g in 0..groups {
        buf.get(off + g * span, &mut plain)?;
        if !scales_finite(s, &plain) {
            return Ok(false);
        }
    }
    let mut packed = vec![0u8; span];
    for g in 0..groups {
        buf.get(off + g * span, &mut plain)?;
        pack_group(s, nb, &plain, &mut packed);
        cpu.write_in_place(off + g * span, &packed)?;
    }
    ctx.tensor_mut(id).flags.insert(Flags::REPACKED);
    Ok(true)
}

/// An error for reading repacked weights where only the plain layout is understood.
pub fn unsupported(what: &str, name: &str) -> Error {
    Error::UnsupportedOp(format!(
        "{what} of '{name}', whose weights are repacked for the CPU GEMV"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(s: Spec, nb: usize, seed: u32) -> Vec<u8> {
        let mut x = seed;
        let mut v: Vec<u8> = (0..4 * nb * s.xs)
            .map(|_| {
                x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                (x >> 24) as u8
            })
            .collect();
        // Finite scales (exponent < 31).
        for b in v.chunks_exact_mut(s.xs) {
            for f in 0..s.fields {
                b[s.fat + 2 * f + 1] &= 0x3f;
            }
        }
        v
    }

    #[test]
    fn pack_unpack_round_trip_and_layout() {
        for dt in [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
        ] {
            for chunked in [false, true] {
                let s = Spec {
                    chunked,
                    ..spec(dt).unwrap()
                };
                assert_eq!(s.xs, dt.type_size());
                for nb in [1, 3, 7] {
                    let src = rows(s, nb, nb as u32);
                    let mut g = vec![0u8; src.len()];
                    pack_group(s, nb, &src, &mut g);
                    assert_ne!(g, src);
                    // Block 1 (or 0) of row 2: its d at 8·0 + 2·2 of the group block.
                    let b = nb / 2;
                    let gb = &g[b * 4 * s.xs..];
                    let row2 = &src[2 * nb * s.xs + b * s.xs..];
                    if s.fields >= 1 {
                        assert_eq!(gb[4..6], row2[0..2]);
                    }
                    if s.fields == 2 {
                        assert_eq!(gb[12..14], row2[2..4]);
                    }
                    let quants = &row2[s.xs - s.body()..s.xs];
                    if chunked && s.hbits {
                        // Encoded whole (`chunked_q5_follows_the_documented_layout`).
                    } else if chunked {
                        // Chunk c of row 2 at head + 16·c + 8.
                        for (c, q) in quants.chunks_exact(4).enumerate() {
                            let at = s.head() + 16 * c + 8;
                            assert_eq!(gb[at..at + 4], *q, "{dt:?} chunk {c}");
                        }
                    } else {
                        let at = s.head() + 2 * s.body();
                        assert_eq!(gb[at..at + s.body()], *quants);
                    }
                    let mut back = vec![0u8; src.len()];
                    unpack_group(s, nb, &g, &mut back);
                    assert_eq!(back, src);
                    for r in 0..4 {
                        let mut row = vec![0u8; nb * s.xs];
                        unpack_row(s, nb, &g, r, &mut row);
                        assert_eq!(row, src[r * nb * s.xs..(r + 1) * nb * s.xs]);
                    }
                }
            }
        }
    }

    /// The chunked k-quant layout (the relaxed wasm builds'), built here on every target: the
    /// round trip, and row r's body byte 4c + j at head + 16c + 4r + j.
    #[test]
    fn chunked_k_quants_round_trip_and_layout() {
        for dt in [DType::Q4_K, DType::Q5_K, DType::Q6_K] {
            let s = kq_chunked(dt, dt.type_size());
            let (fat, f) = (s.fat, s.fields);
            assert_eq!(s.head() + 4 * s.body(), 4 * s.xs);
            for nb in [1, 2] {
                let src = rows(s, nb, 7 + nb as u32);
                let mut g = vec![0u8; src.len()];
                pack_group(s, nb, &src, &mut g);
                for b in 0..nb {
                    let gb = &g[b * 4 * s.xs..(b + 1) * 4 * s.xs];
                    for r in 0..4 {
                        let x = &src[(r * nb + b) * s.xs..(r * nb + b + 1) * s.xs];
                        for k in 0..f {
                            assert_eq!(
                                gb[8 * k + 2 * r..8 * k + 2 * r + 2],
                                x[fat + 2 * k..fat + 2 * k + 2]
                            );
                        }
                        let body: Vec<u8> = if fat > 0 {
                            x[..fat].to_vec()
                        } else {
                            x[2 * f..].to_vec()
                        };
                        for (i, &v) in body.iter().enumerate() {
                            assert_eq!(
                                gb[s.head() + 16 * (i / 4) + 4 * r + i % 4],
                                v,
                                "{dt:?} row {r} byte {i}"
                            );
                        }
                    }
                }
                let mut back = vec![0u8; src.len()];
                unpack_group(s, nb, &g, &mut back);
                assert_eq!(back, src);
                for r in 0..4 {
                    let mut row = vec![0u8; nb * s.xs];
                    unpack_row(s, nb, &g, r, &mut row);
                    assert_eq!(row, src[r * nb * s.xs..(r + 1) * nb * s.xs]);
                }
                // A non-finite d (or dmin) is found where the type keeps it.
                let mut bad = src.clone();
                bad[s.xs * nb + fat + 2 * (f - 1) + 1] = 0x7c;
                assert!(scales_finite(s, &src) && !scales_finite(s, &bad));
            }
        }
    }

    #[test]
    fn chunked_q5_follows_the_documented_layout() {
        for dt in [DType::Q5_0, DType::Q5_1] {
            let s = Spec {
                chunked: true,
                ..spec(dt).unwrap()
            };
            let src = rows(s, 1, 5);
            let mut g = vec![0u8; src.len()];
            pack_group(s, 1, &src, &mut g);
            let (at, hv) = (2 * s.fields, 8 * s.fields);
            for r in 0..4 {
                let x = &src[r * s.xs..(r + 1) * s.xs];
                let h = u32::from_le_bytes([x[at], x[at + 1], x[at + 2], x[at + 3]]);
                let quant = |e: usize| {
                    let nib = if e < 16 {
                        x[at + 4 + e] & 0xF
                    } else {
                        x[at + 4 + e - 16] >> 4
                    };
                    nib | (((h >> e) & 1) as u8) << 4
                };
                // The GEMV's view of chunk c, byte 4·r + j: element 4c + j in bits 0..5, element
                // 16 + 4c + j's bits 0..3 in bits 5..8 and its bits 3, 4 at bits 2c, 2c + 1 of
                // shared byte 4·r + j.
                for c in 0..4 {
                    for j in 0..4 {
                        let b = g[s.head() + 16 * c + 4 * r + j];
                        let e = 4 * c + j;
                        assert_eq!(b & 0x1F, quant(e), "{dt:?} row {r} element {e}");
                        let hi = b >> 5 | ((g[hv + 4 * r + j] >> (2 * c)) & 3) << 3;
                        assert_eq!(hi, quant(16 + e), "{dt:?} row {r} element {}", 16 + e);
                    }
                }
            }
        }
    }

    #[test]
    fn fifth_bits_follow_the_documented_layout() {
        let s = spec(DType::Q5_1).unwrap();
        let src = rows(s, 1, 9);
        let mut g = vec![0u8; src.len()];
        pack_group(s, 1, &src, &mut g);
        for r in 0..4 {
            let qh = &src[r * s.xs + 4..r * s.xs + 8];
            let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
            for e in 0..32 {
                let (j, p) = (e % 16, 2 * r + e / 16);
                assert_eq!(
                    (g[16 + j] >> p) & 1,
                    ((h >> e) & 1) as u8,
                    "row {r} element {e}"
                );
            }
        }
        for x in [0u64, u64::MAX, 0x0123_4567_89ab_cdef] {
            for p in 0..8 {
                let want = (0..8).fold(0u32, |a, j| a | ((((x >> (8 * j + p)) & 1) as u32) << j));
                assert_eq!(gather8(x, p), want);
            }
        }
    }

    /// The wasm GEMV over repacked weights folds the f16 → f32 rebias (2^112) of the weights'
    /// scales into the column's (`arch/wasm32/gemv.rs::run`): dx·2^-112 times dy·2^112 must round
    /// as dx·dy, and (sumi·dx·2^-112)·(dy·2^112) as (sumi·dx)·dy, for every finite f16 dx.
    #[test]
    fn folded_rebias_gives_the_same_bits() {
        let rebias = f32::from_bits(0x7780_0000);
        let dys = [1.0f32, 0.0123, 65504.0, 6.1e-5, 5.96e-8, -3.7];
        let sumis: Vec<f32> = (-1100..=1100)
            .chain([-32768, -4097, 4097, 32767, 1 << 20])
            .map(|v| v as f32)
            .collect();
        for h in 0..=u16::MAX {
            if h & 0x7c00 == 0x7c00 {
                continue;
            }
            let dx = half::f16::from_bits(h).to_f32();
            let raw = f32::from_bits(((h as i16 as i32) << 13) as u32 & 0x8fff_e000);
            assert_eq!((raw * rebias).to_bits(), dx.to_bits(), "{h:#x}");
            for dy in dys {
                let dy = half::f16::from_f32(dy).to_f32();
                let (dy_f, want) = (dy * rebias, dx * dy);
                assert_eq!((raw * dy_f).to_bits(), want.to_bits(), "{h:#x} {dy}");
                if h % 7 == 0 || h & 0x7c00 == 0 {
                    for &s in &sumis {
                        let (got, want) = ((s * raw) * dy_f, (s * dx) * dy);
                        assert_eq!(got.to_bits(), want.to_bits(), "{h:#x} {dy} {s}");
                    }
                }
            }
        }
    }

    #[test]
    fn matrix_keeps_tail_rows() {
        let s = spec(DType::Q4_1).unwrap();
        let nb = 2;
        let mut m = [rows(s, nb, 1), rows(s, nb, 2)].concat();
        m.truncate(7 * nb * s.xs);
        let orig = m.clone();
        pack_matrix(s, nb, 7, &mut m);
        assert_eq!(m[4 * nb * s.xs..], orig[4 * nb * s.xs..]);
        assert_ne!(m[..4 * nb * s.xs], orig[..4 * nb * s.xs]);
        unpack_matrix(s, nb, 7, &mut m);
        assert_eq!(m, orig);
    }
}
