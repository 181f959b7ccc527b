//! Prompt GEMM (n ≥ 8 columns) for the 32-element weight types (q4_0, q4_1, q5_0, q5_1, q8_0)
//! on q8_0 / q8_1 columns, with integer dot products of 4 bytes per i32 lane.
//!
//! Each group of 8 weight rows is decoded once per chunk into a small panel of unsigned bytes
//! with the rows interleaved 4 bytes at a time (group g of a block: rows 0..8 × bytes 4g..4g+4,
//! one 32-byte vector), beside the rows' f32 scales (and mins). The micro-kernel then needs no
//! horizontal sums: each i32 lane is one (row, column) pair, one `vpdpbusd` (weights × a
//! broadcast 4 bytes of the column) covers 8 rows × 4 elements, and the 8 lanes of a column's
//! accumulator are its 8 rows' results, stored as one vector. The decoding is amortized over
//! all the chunk's columns (the old tiles decoded each weight block once per 1–2 × 8 columns).
//!
//! Quants are stored unsigned, q + bias (q5_0: 16, q4_0: 8, q8_0: 128), and the bias is taken
//! back in integers (bias · Σ column quants per block), so each block's integer dot is the
//! scalar reference's; the blocks are accumulated in order with one FMA each. q4_1 / q5_1 add
//! the min term m · s of the q8_1 column. The k-quants (q4_K, q5_K, q6_K on q8_K columns)
//! scale their sub-block dots by the integer sub-block scales and sum a super-block in
//! integers, then repeat the reference's f32 operations in its order: bit-identical to it.
//!
//! Three integer-dot paths, detected at run time: AVX-512 VNNI + VL (32 vector registers:
//! 8 columns per micro-tile), AVX-VNNI (16 registers: 4 columns), and plain AVX2
//! (`vpmaddubsw` + `vpmaddwd`; only where a byte pair cannot saturate i16: quants ≤ 31, so
//! not q8_0).

use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

use super::tiles::{bits_32, nibbles_32};
use crate::backend::cpu::arch::{GemmArgs, Tiled};

/// Weight rows per panel (one i32 lane each).
const ROWS: usize = 8;
/// Panel bytes per block: 8 groups × 32 bytes of quants, 8 f32 d, 8 f32 m.
const PB: usize = 256 + 64;
/// Panel bytes per 256-element super-block: 8 sub-blocks of 32 × 256 bytes of quants, 16
/// vectors of i32 per-row scales (q6_K: one per 16 elements; q4_K/q5_K: the 8 scales, then
/// the 8 mins), the rows' f32 d, then (q4_K/q5_K) dmin.
const PBK: usize = 2048 + 512 + 64;
/// q8_K column block: f32 d, 256 i8 quants, 16 i16 sums of 16 quants.
const Q8K_SIZE: usize = 292;

/// An integer-dot instruction set for [`gemm`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Isa {
    /// AVX-512 VNNI with AVX-512 VL (256-bit `vpdpbusd`, 32 registers).
    Avx512Vnni,
    /// AVX-VNNI (VEX `vpdpbusd`).
    AvxVnni,
    /// AVX2 `vpmaddubsw` + `vpmaddwd`.
    Avx2,
}

impl Isa {
    /// Every path, fastest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512Vnni, Isa::AvxVnni, Isa::Avx2];

    /// Whether this CPU can run the path.
    pub fn supported(self) -> bool {
        let base = super::available();
        match self {
            Isa::Avx512Vnni => {
                base && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            Isa::AvxVnni => base && is_x86_feature_detected!("avxvnni"),
            Isa::Avx2 => base,
        }
    }

    /// Whether the path multiplies weights of type `t` (a [`gemm`] of another type is refused).
    pub(crate) fn handles(self, t: Tiled) -> bool {
        match t {
            // Quants ≤ 63 (q6_K): vpmaddubsw pairs stay under i16's limit.
            Tiled::Q4_0 | Tiled::Q4_1 | Tiled::Q5_0 | Tiled::Q5_1 => true,
            Tiled::Q4K | Tiled::Q5K | Tiled::Q6K => true,
            // q8_0 + 128 is up to 255: a pair of its products saturates vpmaddubsw's i16.
            Tiled::Q8_0 => self != Isa::Avx2,
            _ => false,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512Vnni => "avx512vnni+vl",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx2 => "avx2",
        }
    }
}

/// The fastest path this CPU has (detected once); `None` without AVX2. `GGWEB_X86_ISA` caps it
/// (`avx2`, `avxvnni`; anything else: no cap), as oneDNN's `ONEDNN_MAX_CPU_ISA` does: it runs
/// what an AVX2-only CPU runs on a wider one, to compare or to work around a faulty path.
pub(crate) fn best() -> Option<Isa> {
    static BEST: OnceLock<Option<Isa>> = OnceLock::new();
    *BEST.get_or_init(|| {
        let cap = std::env::var("GGWEB_X86_ISA").ok();
        best_under(cap.as_deref(), Isa::supported)
    })
}

/// The first path in [`Isa::ALL`] at or below `cap` (a name as [`Isa::name`] or `avx512vnni`)
/// that `supported` accepts.
fn best_under(cap: Option<&str>, supported: impl Fn(Isa) -> bool) -> Option<Isa> {
    let skip = match cap {
        Some("avx2") => 2,
        Some("avxvnni") => 1,
        _ => 0,
    };
    Isa::ALL.into_iter().skip(skip).find(|&i| supported(i))
}

/// The weight-type facts the decoder and the kernel need.
#[derive(Clone, Copy)]
struct Kind {
    /// Weight block bytes.
    xs: usize,
    /// Column block bytes (34: q8_0, 36: q8_1).
    ys: usize,
    /// Subtracted from every stored quant (0 for the types with a min).
    bias: i32,
    /// x = d·q + m (q8_1 columns, min term m·s).
    min: bool,
    /// A 256-element k-quant (q8_K columns; [`micro_k`]), else a 32-element type ([`micro`]).
    kq: bool,
    /// Panel bytes per weight block.
    pb: usize,
}

fn kind(t: Tiled) -> Option<Kind> {
    let k = |xs, ys, bias, min| {
        Some(Kind {
            xs,
            ys,
            bias,
            min,
            kq: false,
            pb: PB,
        })
    };
    let kq = |xs| {
        Some(Kind {
            xs,
            ys: Q8K_SIZE,
            bias: 0,
            min: false,
            kq: true,
            pb: PBK,
        })
    };
    match t {
        Tiled::Q4_0 => k(18, 34, 8, false),
        Tiled::Q4_1 => k(20, 36, 0, true),
        Tiled::Q5_0 => k(22, 34, 16, false),
        Tiled::Q5_1 => k(24, 36, 0, true),
        Tiled::Q8_0 => k(34, 34, 128, false),
        Tiled::Q4K => kq(144),
        Tiled::Q5K => kq(176),
        Tiled::Q6K => kq(210),
        _ => None,
    }
}

thread_local! {
    /// Per thread: the decoded panel (32-byte aligned).
    static PANEL: RefCell<Vec<__m256i>> = const { RefCell::new(Vec::new()) };
}

/// Every row × column dot product of `g` for weights `t` with `isa`; false (nothing done) when
/// the path does not handle `t` or the CPU lacks it.
///
/// # Safety
/// Every row holds k elements of `t`, every column k elements of its vec_dot type, and every
/// result element is inside its tensor and written by this thread only.
pub(crate) unsafe fn gemm(isa: Isa, t: Tiled, g: &GemmArgs) -> bool {
    let Some(kd) = kind(t) else { return false };
    let bs = if kd.kq { 256 } else { 32 };
    if !isa.handles(t) || !isa.supported() || !g.k.is_multiple_of(bs) {
        return false;
    }
    let nb = g.k / bs;
    // The k-quants read d and the sums from their q8_K columns directly.
    let meta: &[[u32; 2]] = if kd.kq {
        &[]
    } else {
        // SAFETY: the caller's meta holds nb entries per column.
        unsafe { std::slice::from_raw_parts(g.meta, nb * g.ncols) }
    };
    PANEL.with(|panel| {
        let mut panel = panel.borrow_mut();
        panel.resize(nb * kd.pb / 32, unsafe_zero());
        let pp = panel.as_mut_ptr() as *mut u8;
        let mut i = 0;
        while i < g.nrows {
            let nr = (g.nrows - i).min(ROWS);
            // Missing rows of the last group decode row i again (results dropped).
            // SAFETY: rows i..i+nr are inside the weights (caller).
            let rows: [*const u8; ROWS] =
                std::array::from_fn(|r| unsafe { g.a0.add((i + r.min(nr - 1)) * g.lda) });
            // SAFETY: features checked above; the panel holds nb blocks.
            unsafe {
                match isa {
                    Isa::Avx512Vnni => decode_avx512(t, kd, nb, rows, pp),
                    _ => decode_avx2(t, kd, nb, rows, pp),
                }
                let out = g.out0.add(i);
                match isa {
                    Isa::Avx512Vnni => cols_avx512(t, kd, g, nb, pp, meta, out, nr),
                    Isa::AvxVnni => cols_avxvnni(t, kd, g, nb, pp, meta, out, nr),
                    Isa::Avx2 => cols_avx2(t, kd, g, nb, pp, meta, out, nr),
                }
            }
            i += ROWS;
        }
    });
    true
}

fn unsafe_zero() -> __m256i {
    // SAFETY: an all-zero __m256i is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Column facts of the kernel for blocks of one converted column (`y`: whole q8_0 or q8_1
/// blocks of weights `t`): per block the f32 scale d and, for q8_0 columns, bias · Σ quants
/// (i32), for q8_1 columns the f32 s. Computed once per matmul, beside the conversion.
pub(crate) fn column_meta(t: Tiled, y: &[u8], meta: &mut [[u32; 2]]) {
    let Some(kd) = kind(t).filter(|k| !k.kq) else {
        return;
    };
    for (yb, m) in y.chunks_exact(kd.ys).zip(meta.iter_mut()) {
        let h = |o: usize| half::f16::from_le_bytes([yb[o], yb[o + 1]]).to_f32();
        let second = if kd.min {
            h(2).to_bits()
        } else {
            let s: i32 = yb[2..34].iter().map(|&q| q as i8 as i32).sum();
            (kd.bias * s) as u32
        };
        *m = [h(0).to_bits(), second];
    }
}

/// The 4 bytes of a q5 `qh` → 32 bytes, 0x10 where element j's fifth bit is set.
#[inline(always)]
unsafe fn fifth_bits(qh: *const u8) -> __m256i {
    // SAFETY: 4 readable bytes; AVX2 enabled by the caller.
    unsafe { _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10)) }
}

/// One weight block → its 32 quants + bias as unsigned bytes.
#[inline(always)]
unsafe fn decode_block(t: Tiled, xb: *const u8) -> __m256i {
    // SAFETY: xb addresses one block of t; AVX2 enabled by the caller.
    unsafe {
        match t {
            Tiled::Q4_0 => nibbles_32(xb.add(2)),
            Tiled::Q4_1 => nibbles_32(xb.add(4)),
            Tiled::Q5_0 => _mm256_or_si256(nibbles_32(xb.add(6)), fifth_bits(xb.add(2))),
            Tiled::Q5_1 => _mm256_or_si256(nibbles_32(xb.add(8)), fifth_bits(xb.add(4))),
            // q8_0: q + 128 is q with its sign bit flipped.
            _ => _mm256_xor_si256(
                _mm256_loadu_si256(xb.add(2) as *const __m256i),
                _mm256_set1_epi8(-128),
            ),
        }
    }
}

/// Decode 8 rows × nb blocks into the interleaved panel at `pp` (see the module docs).
#[inline(always)]
unsafe fn decode_rows(t: Tiled, kd: Kind, nb: usize, rows: [*const u8; ROWS], pp: *mut u8) {
    if kd.kq {
        // SAFETY: forwarded.
        unsafe { decode_rows_k(t, kd, nb, rows, pp) };
        return;
    }
    // SAFETY: rows hold nb blocks, the panel nb · PB bytes; AVX2/F16C enabled by the caller.
    unsafe {
        for blk in 0..nb {
            // Plain loops, no closures: a closure would not inherit the caller's target
            // features, and its intrinsics would be calls.
            let mut xb = [std::ptr::null::<u8>(); ROWS];
            let mut q = [_mm256_setzero_si256(); ROWS];
            for r in 0..ROWS {
                xb[r] = rows[r].add(blk * kd.xs);
                q[r] = decode_block(t, xb[r]);
            }
            store_transposed(q, pp.add(blk * PB));
            // d (and m) of the 8 rows as f32.
            let mut dm = [[0u16; ROWS]; 2];
            for r in 0..ROWS {
                dm[0][r] = (xb[r] as *const u16).read_unaligned();
                dm[1][r] = (xb[r].add(2) as *const u16).read_unaligned();
            }
            let f = pp.add(blk * PB + 256) as *mut f32;
            _mm256_store_ps(f, _mm256_cvtph_ps(_mm_loadu_si128(dm[0].as_ptr() as _)));
            if kd.min {
                _mm256_store_ps(
                    f.add(8),
                    _mm256_cvtph_ps(_mm_loadu_si128(dm[1].as_ptr() as _)),
                );
            }
        }
    }
}

/// 8 rows of 32 bytes → 8 vectors at `o` (32-aligned): vector g = 4-byte group g of rows 0..8
/// (an 8×8 transpose of 4-byte units).
#[inline(always)]
unsafe fn store_transposed(q: [__m256i; ROWS], o: *mut u8) {
    // SAFETY: o addresses 256 aligned bytes; AVX2 enabled by the caller.
    unsafe {
        // 8×8 transpose of 4-byte groups: out[g] = rows 0..8 of group g.
        let t0 = _mm256_unpacklo_epi32(q[0], q[1]);
        let t1 = _mm256_unpackhi_epi32(q[0], q[1]);
        let t2 = _mm256_unpacklo_epi32(q[2], q[3]);
        let t3 = _mm256_unpackhi_epi32(q[2], q[3]);
        let t4 = _mm256_unpacklo_epi32(q[4], q[5]);
        let t5 = _mm256_unpackhi_epi32(q[4], q[5]);
        let t6 = _mm256_unpacklo_epi32(q[6], q[7]);
        let t7 = _mm256_unpackhi_epi32(q[6], q[7]);
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        let o = o as *mut __m256i;
        _mm256_store_si256(o, _mm256_permute2x128_si256(u0, u4, 0x20));
        _mm256_store_si256(o.add(1), _mm256_permute2x128_si256(u1, u5, 0x20));
        _mm256_store_si256(o.add(2), _mm256_permute2x128_si256(u2, u6, 0x20));
        _mm256_store_si256(o.add(3), _mm256_permute2x128_si256(u3, u7, 0x20));
        _mm256_store_si256(o.add(4), _mm256_permute2x128_si256(u0, u4, 0x31));
        _mm256_store_si256(o.add(5), _mm256_permute2x128_si256(u1, u5, 0x31));
        _mm256_store_si256(o.add(6), _mm256_permute2x128_si256(u2, u6, 0x31));
        _mm256_store_si256(o.add(7), _mm256_permute2x128_si256(u3, u7, 0x31));
    }
}

/// The low (or `high`) nibbles of 32 bytes.
#[inline(always)]
unsafe fn nibbles_of(qs: *const u8, high: bool) -> __m256i {
    // SAFETY: 32 readable bytes; AVX2 enabled by the caller.
    unsafe {
        let v = _mm256_loadu_si256(qs as *const __m256i);
        let v = if high { _mm256_srli_epi16(v, 4) } else { v };
        _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
    }
}

/// Sub-block `s` (elements 32s..32s+32) of a k-quant super-block at `xb` as unsigned bytes
/// (q4_K: 0..=15, q5_K: 0..=31, q6_K: 0..=63, i.e. q + 32).
#[inline(always)]
unsafe fn decode_sub_k(t: Tiled, xb: *const u8, s: usize) -> __m256i {
    // SAFETY: xb addresses one super-block of t; AVX2 enabled by the caller.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let high = s % 2 == 1;
        match t {
            // f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles (64 elements per 32 bytes:
            // low nibbles first).
            Tiled::Q4K => nibbles_of(xb.add(16 + 32 * (s / 2)), high),
            // As q4_K with 32 bytes qh before the nibbles: bit s of qh[l] is element 32s+l's
            // fifth bit.
            Tiled::Q5K => {
                let qh = _mm256_loadu_si256(xb.add(16) as *const __m256i);
                let bit = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(s as i32)),
                    _mm256_set1_epi8(1),
                );
                _mm256_or_si256(
                    nibbles_of(xb.add(48 + 32 * (s / 2)), high),
                    _mm256_slli_epi16(bit, 4),
                )
            }
            // 128 bytes ql, 64 bytes qh: in half h = s/4, part w = s%4 takes the low (w < 2) or
            // high nibbles of ql[64h + 32(w%2)..] and bits 2w, 2w+1 of qh[32h..].
            _ => {
                let (h, w) = (s / 4, s % 4);
                let ql = _mm256_loadu_si256(xb.add(64 * h + 32 * (w % 2)) as *const __m256i);
                let qh = _mm256_loadu_si256(xb.add(128 + 32 * h) as *const __m256i);
                let lo = if w < 2 {
                    _mm256_and_si256(ql, m4)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4)
                };
                // ((qh >> 2w) & 3) << 4 = (qh shifted by 4 − 2w) & 0x30.
                let hb = match w {
                    0 => _mm256_slli_epi16(qh, 4),
                    1 => _mm256_slli_epi16(qh, 2),
                    2 => qh,
                    _ => _mm256_srli_epi16(qh, 2),
                };
                _mm256_or_si256(lo, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)))
            }
        }
    }
}

/// [`decode_rows`] for the k-quants (panel layout: [`PBK`]).
#[inline(always)]
unsafe fn decode_rows_k(t: Tiled, kd: Kind, nb: usize, rows: [*const u8; ROWS], pp: *mut u8) {
    // SAFETY: rows hold nb super-blocks, the panel nb · PBK bytes; features from the caller.
    unsafe {
        for blk in 0..nb {
            let mut xb = [std::ptr::null::<u8>(); ROWS];
            for r in 0..ROWS {
                xb[r] = rows[r].add(blk * kd.xs);
            }
            let pb = pp.add(blk * PBK);
            for s in 0..8 {
                let mut q = [_mm256_setzero_si256(); ROWS];
                for r in 0..ROWS {
                    q[r] = decode_sub_k(t, xb[r], s);
                }
                store_transposed(q, pb.add(s * 256));
            }
            let sc = pb.add(2048) as *mut i32;
            let d = pb.add(2560) as *mut f32;
            for (r, &x) in xb.iter().enumerate() {
                let h = |o: usize| {
                    half::f16::from_bits((x.add(o) as *const u16).read_unaligned()).to_f32()
                };
                if t == Tiled::Q6K {
                    for g in 0..16 {
                        *sc.add(g * ROWS + r) = *(x.add(192 + g) as *const i8) as i32;
                    }
                    *d.add(r) = h(208);
                } else {
                    let (s, m) =
                        crate::quant::k_quants::scales_mins_k4(&*(x.add(4) as *const [u8; 12]));
                    for j in 0..8 {
                        *sc.add(j * ROWS + r) = s[j] as i32;
                        *sc.add((8 + j) * ROWS + r) = m[j] as i32;
                    }
                    *d.add(r) = h(0);
                    *d.add(ROWS + r) = h(2);
                }
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_avx2(t: Tiled, kd: Kind, nb: usize, rows: [*const u8; ROWS], pp: *mut u8) {
    // SAFETY: forwarded; features enabled by the attribute.
    unsafe { decode_rows(t, kd, nb, rows, pp) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw")]
unsafe fn decode_avx512(t: Tiled, kd: Kind, nb: usize, rows: [*const u8; ROWS], pp: *mut u8) {
    // SAFETY: forwarded; features enabled by the attribute.
    unsafe { decode_rows(t, kd, nb, rows, pp) }
}

/// 8 rows × C columns over all blocks: `dot(acc, weights u8, column i8)` adds the 4-byte dot
/// products per i32 lane. Stores rows 0..nr of each column.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<const C: usize>(
    kd: Kind,
    nb: usize,
    pp: *const u8,
    cols: [*const u8; C],
    meta: [*const [u32; 2]; C],
    out: [*mut f32; C],
    nr: usize,
    dot: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) {
    // SAFETY: the panel holds nb blocks, each column nb blocks and its meta nb entries, each
    // output nr f32 (caller); features enabled by the caller.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); C];
        for blk in 0..nb {
            let pb = pp.add(blk * PB);
            let mut ia = [_mm256_setzero_si256(); C];
            for g in 0..8 {
                let w = _mm256_load_si256(pb.add(g * 32) as *const __m256i);
                for c in 0..C {
                    let y = (cols[c].add(blk * kd.ys + kd.ys - 32 + 4 * g) as *const i32)
                        .read_unaligned();
                    ia[c] = dot(ia[c], w, _mm256_set1_epi32(y));
                }
            }
            // One FMA per block: a rounding fewer than the scalar reference's product then sum.
            // (Repeating the reference's operations exactly was tried: bit-identical to it, but
            // farther from llama.cpp, whose AVX2 dots also fuse, on gemma3's chat test.)
            let dx = _mm256_load_ps(pb.add(256) as *const f32);
            for c in 0..C {
                let [dy, second] = *meta[c].add(blk);
                let scale = _mm256_mul_ps(dx, _mm256_set1_ps(f32::from_bits(dy)));
                let v = if kd.min {
                    ia[c]
                } else {
                    _mm256_sub_epi32(ia[c], _mm256_set1_epi32(second as i32))
                };
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), scale, acc[c]);
                if kd.min {
                    let mx = _mm256_load_ps(pb.add(288) as *const f32);
                    acc[c] = _mm256_fmadd_ps(mx, _mm256_set1_ps(f32::from_bits(second)), acc[c]);
                }
            }
        }
        store_cols(acc, out, nr);
    }
}

/// [`micro`] for the k-quants on q8_K columns: per 32-element sub-block an i32 dot, scaled by
/// the rows' integer sub-block scales and summed in integers over the super-block (q6_K: per 16
/// elements, the bias 32 taken back with the column's sums; q4_K/q5_K: the mins' term from
/// the column's sums), then the reference's f32 operations in its order.
#[inline(always)]
unsafe fn micro_k<const C: usize>(
    t: Tiled,
    nb: usize,
    pp: *const u8,
    cols: [*const u8; C],
    out: [*mut f32; C],
    nr: usize,
    dot: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) {
    // SAFETY: the panel holds nb super-blocks, each column nb q8_K blocks, each output nr
    // f32 (caller); features enabled by the caller.
    unsafe {
        let q6 = t == Tiled::Q6K;
        let mut acc = [_mm256_setzero_ps(); C];
        for blk in 0..nb {
            let pb = pp.add(blk * PBK);
            let sc = pb.add(2048);
            let yb: [*const u8; C] = std::array::from_fn(|c| cols[c].add(blk * Q8K_SIZE));
            let bsum =
                |c: usize, j: usize| (yb[c].add(260 + 2 * j) as *const i16).read_unaligned() as i32;
            let mut isum = [_mm256_setzero_si256(); C];
            for s in 0..8 {
                // q6_K: two halves of 16 elements with their own scales.
                for (half, gs) in [(0usize, 0..4usize), (1, 4..8)] {
                    let mut ia = [_mm256_setzero_si256(); C];
                    for g in gs.clone() {
                        let w = _mm256_load_si256(pb.add(s * 256 + g * 32) as *const __m256i);
                        for c in 0..C {
                            let y = (yb[c].add(4 + 32 * s + 4 * g) as *const i32).read_unaligned();
                            ia[c] = dot(ia[c], w, _mm256_set1_epi32(y));
                        }
                    }
                    if q6 {
                        let sv = _mm256_load_si256(sc.add((2 * s + half) * 32) as *const __m256i);
                        for c in 0..C {
                            let v = _mm256_sub_epi32(
                                ia[c],
                                _mm256_set1_epi32(32 * bsum(c, 2 * s + half)),
                            );
                            isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(v, sv));
                        }
                    } else {
                        let sv = _mm256_load_si256(sc.add(s * 32) as *const __m256i);
                        for c in 0..C {
                            isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(ia[c], sv));
                        }
                    }
                }
            }
            let dx = _mm256_load_ps(pb.add(2560) as *const f32);
            for c in 0..C {
                let dy = _mm256_set1_ps((yb[c] as *const f32).read_unaligned());
                let mut p = _mm256_mul_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum[c]));
                if !q6 {
                    let mut summ = _mm256_setzero_si256();
                    for s in 0..8 {
                        let mv = _mm256_load_si256(sc.add((8 + s) * 32) as *const __m256i);
                        let b = _mm256_set1_epi32(bsum(c, 2 * s) + bsum(c, 2 * s + 1));
                        summ = _mm256_add_epi32(summ, _mm256_mullo_epi32(mv, b));
                    }
                    let dmin = _mm256_load_ps(pb.add(2592) as *const f32);
                    p = _mm256_sub_ps(
                        p,
                        _mm256_mul_ps(_mm256_mul_ps(dmin, dy), _mm256_cvtepi32_ps(summ)),
                    );
                }
                acc[c] = _mm256_add_ps(acc[c], p);
            }
        }
        store_cols(acc, out, nr);
    }
}

/// Rows 0..nr of each column's result vector.
#[inline(always)]
unsafe fn store_cols<const C: usize>(acc: [__m256; C], out: [*mut f32; C], nr: usize) {
    // SAFETY: each output holds nr f32 (caller); AVX enabled by the caller.
    unsafe {
        for c in 0..C {
            if nr == ROWS {
                _mm256_storeu_ps(out[c], acc[c]);
            } else {
                let mut v = [0f32; ROWS];
                _mm256_storeu_ps(v.as_mut_ptr(), acc[c]);
                std::ptr::copy_nonoverlapping(v.as_ptr(), out[c], nr);
            }
        }
    }
}

/// All columns of `g` against one decoded panel, C at a time (then the remainder), with the
/// integer dot `$dot` under `$feat`.
macro_rules! cols_fn {
    ($name:ident, $feat:literal, $c:literal, $dot:expr) => {
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            t: Tiled,
            kd: Kind,
            g: &GemmArgs,
            nb: usize,
            pp: *const u8,
            meta: &[[u32; 2]],
            out: *mut f32,
            nr: usize,
        ) {
            let dot = $dot;
            // SAFETY: columns j..j+C are inside g (loop bounds); meta has nb per column; the
            // outputs are inside dst (caller).
            unsafe {
                macro_rules! run {
                    ($n:literal, $j:expr) => {{
                        let j = $j;
                        let cols = std::array::from_fn(|c| g.b0.add((j + c) * g.ldb));
                        let outs = std::array::from_fn(|c| out.add((j + c) * g.ldo));
                        if kd.kq {
                            micro_k::<$n>(t, nb, pp, cols, outs, nr, dot)
                        } else {
                            micro::<$n>(
                                kd,
                                nb,
                                pp,
                                cols,
                                std::array::from_fn(|c| meta.as_ptr().wrapping_add((j + c) * nb)),
                                outs,
                                nr,
                                dot,
                            )
                        }
                    }};
                }
                let mut j = 0;
                while j + $c <= g.ncols {
                    run!($c, j);
                    j += $c;
                }
                // Remainder columns: halves down to one.
                let mut left = g.ncols - j;
                while left > 0 {
                    if left >= 4 && $c > 4 {
                        run!(4, j);
                        j += 4;
                    } else if left >= 2 {
                        run!(2, j);
                        j += 2;
                    } else {
                        run!(1, j);
                        j += 1;
                    }
                    left = g.ncols - j;
                }
            }
        }
    };
}

cols_fn!(
    cols_avx512,
    "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni",
    8,
    |acc, w, y| _mm256_dpbusd_epi32(acc, w, y)
);
cols_fn!(cols_avxvnni, "avx2,fma,f16c,avxvnni", 4, |acc, w, y| {
    _mm256_dpbusd_avx_epi32(acc, w, y)
});
cols_fn!(cols_avx2, "avx2,fma,f16c", 4, |acc, w, y| {
    // Quants ≤ 31 here (Isa::handles): a pair of u8·i8 products fits i16.
    _mm256_add_epi32(
        acc,
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1)),
    )
});

/// `m` weight rows of `dtype` (k elements each, contiguous) times `n` columns of its vec_dot
/// type (q8_0 or q8_1, contiguous), with the integer-dot path `isa`: result[c·m + r]. `None`
/// when the path does not handle `dtype` or this CPU lacks it. For tests: every path against
/// the scalar reference on the same bytes.
pub fn gemm_with(
    isa: Isa,
    dtype: crate::DType,
    k: usize,
    m: usize,
    n: usize,
    weights: &[u8],
    cols: &[u8],
) -> Option<Vec<f32>> {
    let t = Tiled::quantized(dtype)?;
    let lda = dtype.row_size(k).ok()?;
    let ldb = crate::quant::type_traits_scalar(dtype)?
        .vec_dot_type
        .row_size(k)
        .ok()?;
    if weights.len() != lda * m || cols.len() != ldb * n {
        return None;
    }
    let mut out = vec![0f32; m * n];
    let mut meta = vec![[0u32; 2]; k / 32 * n];
    for (y, mt) in cols.chunks_exact(ldb).zip(meta.chunks_exact_mut(k / 32)) {
        column_meta(t, y, mt);
    }
    let g = GemmArgs {
        meta: meta.as_ptr(),
        k,
        a0: weights.as_ptr(),
        lda,
        nrows: m,
        b0: cols.as_ptr(),
        ldb,
        ncols: n,
        out0: out.as_mut_ptr(),
        ldo: m,
    };
    // SAFETY: the lengths were checked above; out holds m·n results.
    unsafe { gemm(isa, t, &g) }.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::{best_under, Isa};

    #[test]
    fn the_isa_cap_skips_the_wider_paths() {
        let all = |_| true;
        assert_eq!(best_under(None, all), Some(Isa::Avx512Vnni));
        assert_eq!(best_under(Some("bogus"), all), Some(Isa::Avx512Vnni));
        assert_eq!(best_under(Some("avxvnni"), all), Some(Isa::AvxVnni));
        assert_eq!(best_under(Some("avx2"), all), Some(Isa::Avx2));
        // A cap above what the CPU has changes nothing; none without AVX2.
        let no_vnni = |i| i == Isa::Avx2;
        assert_eq!(best_under(Some("avxvnni"), no_vnni), Some(Isa::Avx2));
        assert_eq!(best_under(None, |_| false), None);
    }
}
