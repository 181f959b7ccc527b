//! SIMD128 kernels of the fused attention over an f16 KV cache. wasm has no f16 conversion
//! instruction (about ten vector operations per four values), so each K row is converted once
//! for all the query heads that share it (grouped-query attention), not once per head as the
//! mul_mat path's f16 tile (and a per-head dot) would, and each V row once for all heads.
//!
//! Sums are mul + add in every build (no relaxed FMA): the relaxed and SIMD128 builds give the
//! same bits, as their other f32 kernels on the LLM path do (see `tiles.rs` `madd`).

use core::arch::wasm32::*;

use half::f16;

use super::gemv::{f16_consts, f16x8_to_f32, F16Consts};
use crate::backend::cpu::arch::portable::{axpy_heads_f16_tail, dot4_f16_tail};

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
        for (h, o) in out.iter_mut().enumerate() {
            // SAFETY: forwarded.
            *o = unsafe { dot4_direct(k, &q[h * dk..(h + 1) * dk]) };
        }
        return;
    }
    // The four rows' first n8 values as f32 (n8 / 4 vectors a row, row r from vector r·n8/4).
    // Written for 0..n8 vectors only.
    let mut buf = core::mem::MaybeUninit::<[v128; 4 * (MAX_DK / 4)]>::uninit();
    let kf = buf.as_mut_ptr() as *mut v128;
    let w = n8 / 4;
    // SAFETY: i + 8 <= n8 <= dk inside every row; stores at r·w + i/4 (+1) < 4·w ≤ the buffer.
    unsafe {
        for (r, row) in k.iter().enumerate() {
            let mut i = 0;
            while i < n8 {
                let [lo, hi] = load8(row.add(i), &fk);
                kf.add(r * w + i / 4).write(lo);
                kf.add(r * w + i / 4 + 1).write(hi);
                i += 8;
            }
        }
    }
    for (h, o) in out.iter_mut().enumerate() {
        let qh = &q[h * dk..(h + 1) * dk];
        let mut acc = [f32x4_splat(0.0); 4];
        // SAFETY: c < w: inside the converted rows and (4c + 4 ≤ n8) inside qh.
        unsafe {
            for c in 0..w {
                let vq = v128_load(qh.as_ptr().add(4 * c) as *const v128);
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = f32x4_add(*a, f32x4_mul(kf.add(r * w + c).read(), vq));
                }
            }
        }
        let mut s = [0f32; 4];
        // SAFETY: 16 bytes.
        unsafe { v128_store(s.as_mut_ptr() as *mut v128, reduce4(acc)) };
        // SAFETY: each row holds dk values (caller).
        unsafe { dot4_f16_tail(k, qh, n8, &mut s) };
        *o = s;
    }
}

/// [`dot4_heads_f16_f32`] for one head, converting as it goes (the same operations in the same
/// order, so the same bits).
///
/// # Safety
/// Each `k[r]` points at `q.len()` readable f16 values.
#[inline(always)]
unsafe fn dot4_direct(k: [*const f16; 4], q: &[f32]) -> [f32; 4] {
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
                let [lo, hi] = load8(row.add(i), &fk);
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
