//! SIMD128 kernels of the fused attention over an f16 KV cache. wasm has no f16 conversion
//! instruction (about ten vector operations per four values), so each K row is converted once
//! for all the query heads that share it (grouped-query attention), not once per head as the
//! mul_mat path's f16 tile (and a per-head dot) would, and each V row once for all heads.
//!
//! Sums are mul + add in every build (no relaxed FMA): the relaxed and SIMD128 builds give the
//! same bits, as their other f32 kernels on the LLM path do (see `tiles.rs` `madd`).

use core::arch::wasm32::*;

use half::f16;

use super::gemv::{f16_consts, f16x8_finite, f16x8_to_f32, F16Consts};
use super::{u32x4_bytes, v128s, V128s};
use crate::backend::cpu::arch::portable::{axpy_heads_f16_tail, dot4_f16_tail};
use crate::backend::cpu::arch::{put4, rows4, MAX_BLOCK_LANES};

/// Longest head (dk) whose four K rows are converted into the stack buffer; longer heads
/// convert per head (the same results).
const MAX_DK: usize = 512;

/// Eight f16 at `p` as two f32x4 (exact: seven operations per four, not the ten of
/// `quants.rs`'s conversion, which also quiets NaNs as `half` does).
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline(always)]
unsafe fn load8(p: *const f16, k: &F16Consts) -> [v128; 2] {
    // SAFETY: caller; v128 loads have no alignment needs.
    f16x8_to_f32(unsafe { v128_load(p as *const v128) }, k)
}

/// Eight f16 at `p` as two f32x4, exact for finite values only ([`f16x8_finite`]).
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline(always)]
unsafe fn load8_finite(p: *const f16, k: &F16Consts) -> [v128; 2] {
    // SAFETY: caller.
    f16x8_finite(unsafe { v128_load(p as *const v128) }, k)
}

/// The specials check: |h| as u16 lanes (`ABS`), their running maximum, and the smallest
/// inf / NaN bits (`INF`). A row (or four) whose maximum stays below INF holds finite values
/// only and takes the short conversion; one inf or NaN sends it through the exact one. Two
/// operations per eight values against four saved per four.
static SPECIALS: V128s<2> = V128s([u32x4_bytes(0x7fff_7fff), u32x4_bytes(0x7c00_7c00)]);

/// The running maximum of |f16| over eight more values `h`.
#[inline(always)]
fn max_abs(m: v128, h: v128, abs: v128) -> v128 {
    u16x8_max(m, v128_and(h, abs))
}

/// Whether the first `n8` values (a multiple of eight) of any row of `rows` are inf or NaN.
///
/// # Safety
/// Each row must hold `n8` readable f16 values.
#[inline(always)]
unsafe fn any_special<const R: usize>(rows: [*const f16; R], n8: usize) -> bool {
    let [abs, inf] = v128s(&SPECIALS);
    let mut m = i16x8_splat(0);
    for row in rows {
        let mut i = 0;
        // SAFETY: i + 8 <= n8 (caller).
        while i < n8 {
            m = max_abs(m, unsafe { v128_load(row.add(i) as *const v128) }, abs);
            i += 8;
        }
    }
    v128_any_true(u16x8_ge(m, inf))
}

/// The first `n8` values (a multiple of eight) of four f16 rows as f32 into `buf`, interleaved:
/// vector c of row r at 4c + r, so that the loops over them read one pointer at constant
/// offsets (V8 computed each row's address apart). The short conversion first, checking for
/// inf and NaN as it goes; the exact one again only where there are some.
///
/// # Safety
/// Each row holds `n8` readable values; `buf` has room for `n8` vectors.
#[inline(always)]
unsafe fn convert4(rows: [*const f16; 4], n8: usize, buf: *mut v128, fk: &F16Consts) {
    let [abs, inf] = v128s(&SPECIALS);
    let mut m = i16x8_splat(0);
    // SAFETY: i + 8 <= n8 inside every row; vectors c = i/4 and i/4 + 1 of row r go to 4c + r
    // = i + r and i + 4 + r < n8.
    unsafe {
        for (r, row) in rows.iter().enumerate() {
            let mut i = 0;
            while i < n8 {
                let h = v128_load(row.add(i) as *const v128);
                m = max_abs(m, h, abs);
                let [lo, hi] = f16x8_finite(h, fk);
                buf.add(i + r).write(lo);
                buf.add(i + 4 + r).write(hi);
                i += 8;
            }
        }
        if v128_any_true(u16x8_ge(m, inf)) {
            for (r, row) in rows.iter().enumerate() {
                let mut i = 0;
                while i < n8 {
                    let [lo, hi] = load8(row.add(i), fk);
                    buf.add(i + r).write(lo);
                    buf.add(i + 4 + r).write(hi);
                    i += 8;
                }
            }
        }
    }
}

/// Four i32x4/f32x4 of partial sums → lane r = the (pairwise) sum of `p[r]`'s lanes.
#[inline(always)]
fn reduce4(p: [v128; 4]) -> v128 {
    let t0 = f32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(p[0], p[1]),
        i32x4_shuffle::<2, 6, 3, 7>(p[0], p[1]),
    );
    let t1 = f32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(p[2], p[3]),
        i32x4_shuffle::<2, 6, 3, 7>(p[2], p[3]),
    );
    f32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(t0, t1),
        i32x4_shuffle::<2, 3, 6, 7>(t0, t1),
    )
}

/// `out[h][r]` = dot of the f16 row `k[r]` with head h's query `q[h·dk .. (h + 1)·dk]`, for
/// `out.len()` heads (dk = `q.len() / out.len()`).
///
/// # Safety
/// Each `k[r]` points at dk readable f16 values.
pub unsafe fn dot4_heads_f16_f32(k: [*const f16; 4], q: &[f32], out: &mut [[f32; 4]]) {
    let g = out.len();
    if g == 0 {
        return;
    }
    let dk = q.len() / g;
    let n8 = dk / 8 * 8;
    let fk = f16_consts();
    if g == 1 || n8 > MAX_DK {
        // SAFETY: forwarded.
        let exact = unsafe { any_special(k, n8) };
        for (h, o) in out.iter_mut().enumerate() {
            let qh = &q[h * dk..(h + 1) * dk];
            // SAFETY: forwarded.
            *o = unsafe {
                if exact {
                    dot4_direct::<true>(k, qh)
                } else {
                    dot4_direct::<false>(k, qh)
                }
            };
        }
        return;
    }
    // The four rows' first n8 values as f32 ([`convert4`]). Written for 0..n8 vectors only.
    let mut buf = core::mem::MaybeUninit::<[v128; 4 * (MAX_DK / 4)]>::uninit();
    let kf = buf.as_mut_ptr() as *mut v128;
    // SAFETY: every row holds dk ≥ n8 values; the buffer MAX_DK ≥ n8 vectors.
    unsafe { convert4(k, n8, kf, &fk) };
    // SAFETY: the rows converted; each holds dk values (caller).
    unsafe { lane_dots(kf, k, q, n8, out) };
}

/// `out[h]` = the dots of four f16 rows `k` (their first n8 values converted into `kf` by
/// [`convert4`]) with lane h's query (`q`: lanes of dk = `q.len() / out.len()` values one
/// after another). Two lanes at a time: eight independent sums, where one lane's four each wait on
/// their last add (4 cycles) every step; each sum is added in the same order either way.
///
/// # Safety
/// `kf` holds the rows' n8 converted vectors; each `k[r]` points at dk readable f16 values;
/// n8 ≤ dk.
#[inline(always)]
unsafe fn lane_dots(
    kf: *const v128,
    k: [*const f16; 4],
    q: &[f32],
    n8: usize,
    out: &mut [[f32; 4]],
) {
    let g = out.len();
    let dk = q.len() / g;
    let w = n8 / 4;
    let mut h = 0;
    while h < g {
        let pair = h + 1 < g;
        let q0 = &q[h * dk..(h + 1) * dk];
        let q1 = if pair {
            &q[(h + 1) * dk..(h + 2) * dk]
        } else {
            q0
        };
        let mut a0 = [f32x4_splat(0.0); 4];
        let mut a1 = [f32x4_splat(0.0); 4];
        // SAFETY: c < w: inside the converted rows and (4c + 4 ≤ n8) inside q0 and q1.
        unsafe {
            if pair {
                for c in 0..w {
                    let v0 = v128_load(q0.as_ptr().add(4 * c) as *const v128);
                    let v1 = v128_load(q1.as_ptr().add(4 * c) as *const v128);
                    for r in 0..4 {
                        let x = kf.add(4 * c + r).read();
                        a0[r] = f32x4_add(a0[r], f32x4_mul(x, v0));
                        a1[r] = f32x4_add(a1[r], f32x4_mul(x, v1));
                    }
                }
            } else {
                for c in 0..w {
                    let v0 = v128_load(q0.as_ptr().add(4 * c) as *const v128);
                    for (r, a) in a0.iter_mut().enumerate() {
                        *a = f32x4_add(*a, f32x4_mul(kf.add(4 * c + r).read(), v0));
                    }
                }
            }
        }
        for (acc, qh, o) in
            [(a0, q0, h), (a1, q1, h + 1)]
                .into_iter()
                .take(if pair { 2 } else { 1 })
        {
            let mut s = [0f32; 4];
            // SAFETY: 16 bytes.
            unsafe { v128_store(s.as_mut_ptr() as *mut v128, reduce4(acc)) };
            // SAFETY: each row holds dk values (caller).
            unsafe { dot4_f16_tail(k, qh, n8, &mut s) };
            out[o] = s;
        }
        h += if pair { 2 } else { 1 };
    }
}

/// The block scores (`arch::dots_f16_block`, the same bits as [`dot4_heads_f16_f32`] four rows
/// at a time) in one call: the generic loop's call per four rows, each loading the constants,
/// converting and reducing apart, cost 12–16 % of the attention (`gemv-ab.mjs --attn`). False
/// (nothing written) for one lane (the per-head path converts as it goes) and heads past
/// [`MAX_DK`].
///
/// # Safety
/// As `arch::dots_f16_block` (lengths checked there).
pub unsafe fn dots_f16_block(
    k0: *const u8,
    kstride: usize,
    n: usize,
    q: &[f32],
    nl: usize,
    out: &mut [f32],
    ostride: usize,
) -> bool {
    let dk = q.len() / nl;
    let n8 = dk / 8 * 8;
    if !(2..=MAX_BLOCK_LANES).contains(&nl) || !(8..=MAX_DK).contains(&n8) {
        return false;
    }
    let fk = f16_consts();
    let mut buf = core::mem::MaybeUninit::<[v128; 4 * (MAX_DK / 4)]>::uninit();
    let kf = buf.as_mut_ptr() as *mut v128;
    let mut dots = [[0f32; 4]; MAX_BLOCK_LANES];
    let mut j = 0;
    while j < n {
        let cnt = (n - j).min(4);
        // SAFETY: rows j..j + cnt < n (caller).
        let rows = unsafe { rows4(k0, kstride, j, cnt) };
        // SAFETY: each row holds dk ≥ n8 values; the buffer MAX_DK ≥ n8 vectors.
        unsafe { convert4(rows, n8, kf, &fk) };
        // SAFETY: the rows converted; each holds dk values.
        unsafe { lane_dots(kf, rows, q, n8, &mut dots[..nl]) };
        for (l, d) in dots[..nl].iter().enumerate() {
            put4(out, l * ostride + j, d, cnt);
        }
        j += cnt;
    }
    true
}

/// [`dot4_heads_f16_f32`] for one head, converting as it goes (the same operations in the same
/// order, so the same bits); `EXACT`: the conversion exact for inf and NaN, else for finite
/// values only.
///
/// # Safety
/// Each `k[r]` points at `q.len()` readable f16 values.
#[inline(always)]
unsafe fn dot4_direct<const EXACT: bool>(k: [*const f16; 4], q: &[f32]) -> [f32; 4] {
    let n8 = q.len() / 8 * 8;
    let fk = f16_consts();
    let mut acc = [f32x4_splat(0.0); 4];
    let mut i = 0;
    // SAFETY: i + 8 <= n8, inside q and every row.
    unsafe {
        while i < n8 {
            let q0 = v128_load(q.as_ptr().add(i) as *const v128);
            let q1 = v128_load(q.as_ptr().add(i + 4) as *const v128);
            for (a, row) in acc.iter_mut().zip(k) {
                let [lo, hi] = if EXACT {
                    load8(row.add(i), &fk)
                } else {
                    load8_finite(row.add(i), &fk)
                };
                *a = f32x4_add(*a, f32x4_mul(lo, q0));
                *a = f32x4_add(*a, f32x4_mul(hi, q1));
            }
            i += 8;
        }
    }
    let mut s = [0f32; 4];
    // SAFETY: 16 bytes.
    unsafe { v128_store(s.as_mut_ptr() as *mut v128, reduce4(acc)) };
    // SAFETY: as the caller guarantees.
    unsafe { dot4_f16_tail(k, q, n8, &mut s) };
    s
}

/// `accs[h] += ws[h] · v` for every head h (`accs`: `ws.len()` rows of `v.len()` values), each
/// eight values of the f16 row converted once for all heads; a head whose weight is 0 is skipped.
/// (The attention's V update runs [`v_block_f16`]; this row-by-row update serves rows past its
/// buffer.)
pub fn axpy_heads_f16(ws: &[f32], v: &[f16], accs: &mut [f32]) {
    let n = v.len();
    assert_eq!(accs.len(), ws.len() * n, "axpy_heads_f16: lengths");
    let n8 = n / 8 * 8;
    let fk = f16_consts();
    let mut i = 0;
    // SAFETY: i + 8 <= n8 ≤ n inside v and inside each head's n accumulators (accs = heads × n).
    unsafe {
        while i < n8 {
            let [lo, hi] = load8(v.as_ptr().add(i), &fk);
            for (h, &w) in ws.iter().enumerate() {
                if w == 0.0 {
                    continue;
                }
                let vw = f32x4_splat(w);
                let a = accs.as_mut_ptr().add(h * n + i) as *mut v128;
                a.write_unaligned(f32x4_add(a.read_unaligned(), f32x4_mul(vw, lo)));
                let a1 = a.add(1);
                a1.write_unaligned(f32x4_add(a1.read_unaligned(), f32x4_mul(vw, hi)));
            }
            i += 8;
        }
    }
    axpy_heads_f16_tail(ws, v, accs, n8);
}

/// Longest V row (dv) [`v_block_f16`] converts into its stack buffer; longer rows go row by
/// row ([`axpy_heads_f16`]).
const MAX_DV: usize = 512;

/// The V update of a block (`arch::v_block_f16`, the same bits as [`axpy_heads_f16`] row by
/// row): four V rows at a time, each converted once into a stack buffer (the short conversion
/// where the four are finite), then for each lane its four weights splatted once and its
/// accumulators loaded and stored once per four rows, the rows added in order. A lane with a
/// zero weight among the four adds its other rows one by one (a zero weight skips its row, as
/// row by row: 0 · NaN would not). Row by row, V8 reloaded, rechecked and rebroadcast every
/// weight per eight values and loaded and stored the accumulators per row (SmolLM2 at a
/// ~950-token context: 16 % of generation in that loop). False where dv > [`MAX_DV`].
///
/// # Safety
/// `v0 + j · vstride` points at dv readable f16 values for every j < n, dv = `accs.len() /
/// nl`; `ws.len() ≥ (nl − 1) · wstride + n`, `wstride ≥ n` (checked by the caller).
pub unsafe fn v_block_f16(
    ws: &[f32],
    wstride: usize,
    nl: usize,
    v0: *const u8,
    vstride: usize,
    n: usize,
    accs: &mut [f32],
) -> bool {
    let dv = accs.len() / nl;
    if dv > MAX_DV {
        return false;
    }
    let d8 = dv / 8 * 8;
    let w4 = d8 / 4;
    let fk = f16_consts();
    // Four rows' first d8 values as f32 ([`convert4`]).
    let mut buf = core::mem::MaybeUninit::<[v128; 4 * (MAX_DV / 4)]>::uninit();
    let vf = buf.as_mut_ptr() as *mut v128;
    let accp = accs.as_mut_ptr();
    let mut j = 0;
    while j < n {
        let cnt = (n - j).min(4);
        // (Past the last row the last row again: converted, never added.)
        // SAFETY: rows j..j + cnt < n (caller).
        let rows = unsafe { rows4(v0, vstride, j, cnt) };
        // SAFETY: each row holds dv ≥ d8 values; the buffer MAX_DV ≥ d8 vectors.
        unsafe { convert4(rows, d8, vf, &fk) };
        for l in 0..nl {
            let wl = &ws[l * wstride + j..l * wstride + j + cnt];
            // SAFETY: lane l's dv accumulators (accs = nl × dv).
            let acc = unsafe { accp.add(l * dv) };
            if cnt == 4 && wl.iter().all(|&w| w != 0.0) {
                let s = [0, 1, 2, 3].map(|r| f32x4_splat(wl[r]));
                // SAFETY: c < w4: inside the buffer's four rows and the lane's accumulators.
                unsafe {
                    for c in 0..w4 {
                        let a = acc.add(4 * c) as *mut v128;
                        let mut x = a.read_unaligned();
                        let v = vf.add(4 * c);
                        x = f32x4_add(x, f32x4_mul(s[0], v.read()));
                        x = f32x4_add(x, f32x4_mul(s[1], v.add(1).read()));
                        x = f32x4_add(x, f32x4_mul(s[2], v.add(2).read()));
                        x = f32x4_add(x, f32x4_mul(s[3], v.add(3).read()));
                        a.write_unaligned(x);
                    }
                }
            } else {
                for (r, &w) in wl.iter().enumerate() {
                    if w == 0.0 {
                        continue;
                    }
                    let s = f32x4_splat(w);
                    // SAFETY: as above, row r < cnt.
                    unsafe {
                        for c in 0..w4 {
                            let a = acc.add(4 * c) as *mut v128;
                            let x = f32x4_mul(s, vf.add(4 * c + r).read());
                            a.write_unaligned(f32x4_add(a.read_unaligned(), x));
                        }
                    }
                }
            }
            // The last dv − d8 values, element by element in row order (`axpy_heads_f16_tail`).
            for (r, &w) in wl.iter().enumerate() {
                if w == 0.0 {
                    continue;
                }
                for i in d8..dv {
                    // SAFETY: value i < dv of row r < cnt; accumulator i of lane l.
                    unsafe { *acc.add(i) += w * (*rows[r].add(i)).to_f32() };
                }
            }
        }
        j += cnt;
    }
    true
}
