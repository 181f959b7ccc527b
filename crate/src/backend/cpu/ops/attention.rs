//! Fused attention (FLASH_ATTN_EXT): one pass over the KV cache per query row with an online
//! softmax, reading f16 K/V rows in place.
//!
//! Work items are (token, kv head, seq) groups: the n_head / n_head_kv query heads that share a
//! kv head (up to MAX_HEADS of them) are done together, so each K row is read and each V row
//! converted once for all of them (grouped-query attention). When there are few groups (a
//! generated token has n_head_kv of them) the kv positions are split into chunks as well; each
//! chunk leaves its partial (max, sum, accumulator) in the work buffer and, after a barrier, the
//! partials of a row are merged (flash decoding). The split depends on the shapes alone, not on
//! the thread count: the results are the same bits on any number of threads.

use crate::backend::cpu::arch::{self, exp_approx};
use crate::backend::cpu::{
    dequantize_row, thread_range, type_traits, ComputeParams, NodeRef, TensorRef,
};
use crate::tensor::{Alibi, Op};
use crate::DType;

use super::basic::load_row;

/// Scores per block: the online-softmax state is rescaled once per block, not per position.
const BLOCK: usize = 32;
/// The fewest kv positions worth a chunk of their own.
const MIN_CHUNK: usize = 64;
/// Work items a node with few rows is split into at most (see [`Split::new`]): 16 are 8 a
/// thread on 2 threads, 4 on 4, and 16 / n_head_kv chunks for 1, 2, 4 or 8 kv heads (6 for
/// SmolLM2's 3: 18 items). More chunks cost more merging and more cold starts of the K / V
/// streams: 48 items measured 0.94× of 16 at 2 threads, SmolLM2 at a ~1000-token context.
const TARGET_ITEMS: usize = 16;

pub fn supported(node: &NodeRef) -> bool {
    let (Some(q), Some(k), Some(v)) = (node.src[0], node.src[1], node.src[2]) else {
        return false;
    };
    let row_contiguous = |t: &TensorRef| t.nb[0] == t.dtype.type_size();
    q.dtype == DType::F32
        && matches!(k.dtype, DType::F16 | DType::F32)
        && matches!(v.dtype, DType::F16 | DType::F32)
        && row_contiguous(&k)
        && row_contiguous(&v)
        && node.dst.dtype == DType::F32
        && node.dst.is_contiguous()
        && !matches!(node.src[3], Some(m) if !matches!(m.dtype, DType::F32 | DType::F16))
}

/// Query heads done together at most: bounds the per-thread buffers (heads × n_kv mask values,
/// heads × dv accumulators) whatever the shapes.
const MAX_HEADS: usize = 8;

/// (token, head) rows done together at most in a prompt ([`Split::tq`] tokens × the group's
/// heads): each K and V row is read (and, from f16, converted) once for all of them.
const MAX_LANES: usize = 32;
const _: () = assert!(MAX_LANES <= arch::MAX_BLOCK_LANES);

/// Mask values a thread holds at most for its lanes (4 MiB), so long contexts take fewer tokens
/// a group.
const MAX_MASK_VALUES: usize = 1 << 20;

/// The split of one node's work: `groups` (head block, kv head, token block, seq) groups ×
/// `chunks` kv ranges. A group's lanes are its `tq` tokens × `g` heads (lane = token · g + head);
/// each lane runs the same operations in the same order whichever group holds it, so the
/// results do not depend on `tq`.
struct Split {
    groups: usize,
    /// Query heads per group: the largest divisor of n_head / n_head_kv up to MAX_HEADS, so every
    /// group is full.
    g: usize,
    /// Tokens per group (the last group of a sequence may have fewer): 1 when generating.
    tq: usize,
    /// Token blocks per (kv head, seq).
    n_blocks: usize,
    /// Groups per kv head.
    n_sub: usize,
    n_head_kv: usize,
    n_tokens: usize,
    chunks: usize,
    chunk_len: usize,
}

impl Split {
    fn new(node: &NodeRef) -> Split {
        let (q, k) = (node.src0(), node.src1());
        let n_kv = k.ne[1];
        let per_kv = q.ne[2] / k.ne[2].max(1);
        let g = (1..=MAX_HEADS.min(per_kv.max(1)))
            .rev()
            .find(|d| per_kv % d == 0)
            .unwrap_or(1);
        let n_sub = per_kv / g;
        let n_tokens = q.ne[1];
        let tq = (MAX_LANES / g)
            .min(MAX_MASK_VALUES / (g * n_kv).max(1))
            .clamp(1, n_tokens.max(1));
        let n_blocks = n_tokens.div_ceil(tq);
        let groups = n_blocks * k.ne[2] * q.ne[3] * n_sub;
        // Few rows (a generated token has n_head_kv of them): the kv positions are split into
        // chunks as well, up to TARGET_ITEMS items, but chunks of at least MIN_CHUNK positions:
        // below that the merge costs more than it spreads. Counted over single tokens whatever
        // `tq` is, and whatever the thread count, so that the chunks, and the bits, are the
        // same on every thread count (as llama.cpp's).
        let rows = n_tokens * k.ne[2] * q.ne[3] * n_sub;
        let want = TARGET_ITEMS
            .div_ceil(rows.max(1))
            .min(n_kv.div_ceil(MIN_CHUNK))
            .max(1);
        // Whole blocks a chunk (but the last): its blocks are the unsplit grid's.
        let chunk_len = n_kv.div_ceil(want).next_multiple_of(BLOCK).max(1);
        Split {
            groups,
            g,
            tq,
            n_blocks,
            n_sub,
            n_head_kv: k.ne[2],
            n_tokens: q.ne[1],
            chunks: n_kv.div_ceil(chunk_len).max(1),
            chunk_len,
        }
    }

    /// Group `group`'s first query head, kv head, first token, seq and lane count.
    fn locate(&self, group: usize) -> (usize, usize, usize, usize, usize) {
        let sub = group % self.n_sub;
        let rest = group / self.n_sub;
        let hk = rest % self.n_head_kv;
        let t0 = (rest / self.n_head_kv) % self.n_blocks * self.tq;
        let i3 = rest / (self.n_head_kv * self.n_blocks);
        let lanes = self.tq.min(self.n_tokens - t0) * self.g;
        ((hk * self.n_sub + sub) * self.g, hk, t0, i3, lanes)
    }

    /// Lanes a group holds at most.
    fn max_lanes(&self) -> usize {
        self.tq * self.g
    }

    /// f32 values of one partial: per lane its max, its sum and dv accumulators.
    fn partial_len(&self, dv: usize) -> usize {
        self.max_lanes() * (dv + 2)
    }
}

pub fn work_size(node: &NodeRef) -> usize {
    let s = Split::new(node);
    if s.chunks == 1 {
        return 0;
    }
    s.groups * s.chunks * s.partial_len(node.src2().ne[0]) * 4
}

/// The online-softmax state of one query head (its accumulators are a row of `accs`).
#[derive(Clone, Copy)]
struct HeadState {
    max: f32,
    sum: f32,
}

pub fn forward(p: &ComputeParams, node: &NodeRef) {
    let Op::FlashAttnExt {
        scale,
        max_bias,
        softcap,
    } = node.op
    else {
        unreachable!("dispatched on FLASH_ATTN_EXT")
    };
    let (q, k, v, d) = (node.src0(), node.src1(), node.src2(), &node.dst);
    let mask = node.src[3].as_ref();
    let (dk, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    let split = Split::new(node);
    let g = split.g;
    // Buffers for the most lanes a group holds; a group uses its first `nl`.
    let ml = split.max_lanes();
    let alibi = Alibi::new(max_bias, q.ne[2]);
    let kt = type_traits(k.dtype).expect("k type checked by supported");
    let qt = type_traits(kt.vec_dot_type).expect("a vec_dot type has traits");
    let q_bytes = kt.vec_dot_type.row_size(dk).expect("dk fits a row");
    let k_bytes = dk * k.dtype.type_size();
    // f16 K against an f32 q, four rows at a time, where the machine has that kernel; else
    // one vec_dot per row with q in K's vec_dot type (as mul_mat does). `dot4_heads_f16_f32`
    // has a kernel exactly where `dot4_f16_f32` has.
    // SAFETY: zero-length rows: nothing is read.
    let dot4 = k.dtype == DType::F16
        && unsafe { arch::dot4_f16_f32([std::ptr::null(); 4], &[]) }.is_some();

    let mut qf = vec![0f32; ml * dk];
    let mut qv = vec![0u8; if dot4 { 0 } else { ml * q_bytes }];
    // q's f16 copy for rounding it (dot4).
    let mut qh = vec![0u8; if dot4 { dk * 2 } else { 0 }];
    let f16t = type_traits(DType::F16).expect("f16 is computable");
    let mut masks = vec![0f32; if mask.is_some() { ml * n_kv } else { 0 }];
    // The mask row each lane reads (`masks[slot · n_kv..]`): lanes of one token whose heads
    // read the same mask row (a broadcast over heads, no ALiBi) share the first one's, so a
    // generated token's group loads and scans its row once, not once a head.
    let mut mslot = vec![0usize; ml];
    let mut scores = vec![0f32; ml * BLOCK];
    let mut vrow = vec![0f32; dv];
    let mut accs = vec![0f32; ml * dv];
    let mut heads = vec![
        HeadState {
            max: f32::NEG_INFINITY,
            sum: 0.0
        };
        ml
    ];

    let items = split.groups * split.chunks;
    // The group whose queries qf / qv hold.
    let mut loaded = None;
    // Items in turn, not one contiguous range a thread: under a causal mask a token's work grows
    // with its position, so contiguous ranges left thread 0 the short early tokens and the last
    // thread the long late ones (SmolLM2's prompt, 2 threads in Chromium: one thread did 2.3×
    // the other's attention). An item's result does not depend on the thread computing it.
    for item in (p.ith..items).step_by(p.nth.max(1)) {
        let (group, chunk) = (item / split.chunks, item % split.chunks);
        let (h0, hk, t0, i3, nl) = split.locate(group);
        let k3 = i3 % k.ne[3];
        let j_lo = chunk * split.chunk_len;
        let j_hi = (j_lo + split.chunk_len).min(n_kv);
        // This group's lanes (lane gi: token t0 + gi / g, head h0 + gi % g), and their state.
        let (qf, accs, heads) = (&mut qf[..nl * dk], &mut accs[..nl * dv], &mut heads[..nl]);
        // A thread's items of one group follow each other (its chunks): q is loaded once.
        let fresh = loaded != Some(group);
        loaded = Some(group);

        for gi in 0..nl {
            let (t, h) = (t0 + gi / g, h0 + gi % g);
            if fresh {
                let qrow = &mut qf[gi * dk..(gi + 1) * dk];
                // SAFETY: t < q.ne1, h < q.ne2, i3 < q.ne3.
                unsafe { load_row(q, t, h, i3, qrow) };
                if dot4 {
                    // q rounded to f16 as the one-row path (and mul_mat's f16 path, and
                    // llama.cpp) rounds it: the same scores whichever kernel this machine has.
                    // (The rows' conversions: the same bits as `half`'s, a vector at a time.)
                    (f16t.from_f32)(qrow, &mut qh);
                    dequantize_row(DType::F16, &qh, qrow).expect("f16 is computable");
                } else {
                    (qt.from_f32)(qrow, &mut qv[gi * q_bytes..(gi + 1) * q_bytes]);
                }
            }
            if let Some(m) = mask {
                let slope = alibi.slope(h);
                // An earlier lane of this token with the same mask row and no ALiBi scaling.
                mslot[gi] = gi;
                if slope == 1.0 {
                    if let Some(gj) = (gi - gi % g..gi).find(|&gj| {
                        (h0 + gj % g) % m.ne[2] == h % m.ne[2] && alibi.slope(h0 + gj % g) == 1.0
                    }) {
                        mslot[gi] = mslot[gj];
                        continue;
                    }
                }
                // Only the chunk's positions: nothing else of the row is read (a chunk a thread
                // would otherwise load whole rows n_kv / chunk_len times over).
                let row = &mut masks[gi * n_kv + j_lo..gi * n_kv + j_hi];
                // SAFETY: mask ne0 == n_kv, ne1 >= n_tokens, ne2 | n_head, ne3 | q.ne3 (checked at
                // build time); j_lo..j_hi < n_kv, and a float mask's elements are not blocked.
                unsafe {
                    let part = TensorRef {
                        ptr: m.ptr.add(j_lo * m.nb[0]),
                        ..*m
                    };
                    load_row(&part, t, h % m.ne[2], i3 % m.ne[3], row)
                };
                if slope != 1.0 {
                    row.iter_mut().for_each(|x| *x *= slope);
                }
            }
        }
        accs.fill(0.0);
        heads.fill(HeadState {
            max: f32::NEG_INFINITY,
            sum: 0.0,
        });

        // The positions some lane attends lie in span; the blocks outside it are skipped (a
        // prompt's causal future, a sliding window's past). Blocks stay on the grid from j_lo,
        // so a lane's blocks do not depend on the other lanes of its group.
        let (mut s_lo, mut s_hi) = (j_hi, j_lo);
        if mask.is_some() {
            for gi in (0..nl).filter(|&gi| mslot[gi] == gi) {
                let (lo, hi) = attended_span(&masks[gi * n_kv + j_lo..gi * n_kv + j_hi]);
                if lo < hi {
                    s_lo = s_lo.min(j_lo + lo);
                    s_hi = s_hi.max(j_lo + hi);
                }
            }
        } else {
            (s_lo, s_hi) = (j_lo, j_hi);
        }
        let first = j_lo + (s_lo.saturating_sub(j_lo)) / BLOCK * BLOCK;
        for b0 in (first..s_hi).step_by(BLOCK) {
            let b1 = (b0 + BLOCK).min(j_hi);
            // The block's rows r0..r1 past the rows at either end that every lane masks (a
            // causal mask's future, a sliding window's past): those are neither scored nor read.
            let attended = |j: usize| {
                mask.is_none()
                    || (0..nl)
                        .filter(|&gi| mslot[gi] == gi)
                        .any(|gi| masks[gi * n_kv + j] != f32::NEG_INFINITY)
            };
            let mut r0 = b0;
            while r0 < b1 && !attended(r0) {
                r0 += 1;
            }
            let mut r1 = b1;
            while r1 > r0 && !attended(r1 - 1) {
                r1 -= 1;
            }
            if r0 == r1 {
                continue;
            }
            // SAFETY: rows r0.. < n_kv of kv head hk < n_head_kv, k3 < k.ne3.
            let (k0, v0) = unsafe { (k.at(0, r0, hk, k3), v.at(0, r0, hk, k3)) };
            // Scores of rows r0..r1 for every lane, at scores[gi · BLOCK + j − b0].
            if dot4 {
                // SAFETY: rows r0..r1 hold dk f16 values each, k.nb1 bytes apart (rows are
                // contiguous, supported); qf holds nl queries of dk; nl ≤ MAX_LANES.
                let done = unsafe {
                    arch::dots_f16_block(
                        k0,
                        k.nb[1],
                        r1 - r0,
                        qf,
                        nl,
                        &mut scores[r0 - b0..],
                        BLOCK,
                    )
                };
                debug_assert!(done, "dot4 checked above");
            } else {
                for gi in 0..nl {
                    let qrow = &qv[gi * q_bytes..(gi + 1) * q_bytes];
                    for j in r0..r1 {
                        if mask.is_some() && masks[mslot[gi] * n_kv + j] == f32::NEG_INFINITY {
                            continue;
                        }
                        // SAFETY: row j < n_kv as above; k_bytes bytes per row.
                        let kb = unsafe {
                            std::slice::from_raw_parts(k0.add((j - r0) * k.nb[1]), k_bytes)
                        };
                        scores[gi * BLOCK + j - b0] = (kt.vec_dot)(dk, kb, qrow);
                    }
                }
            }
            // Scale (and cap) the scores and add the mask: rows outside r0..r1 and masked
            // positions become -inf (their dots may be anything: rows never written).
            for gi in 0..nl {
                let sc = &mut scores[gi * BLOCK..gi * BLOCK + (b1 - b0)];
                sc[..r0 - b0].fill(f32::NEG_INFINITY);
                sc[r1 - b0..].fill(f32::NEG_INFINITY);
                let mid = &mut sc[r0 - b0..r1 - b0];
                if softcap > 0.0 {
                    for x in mid.iter_mut() {
                        *x = softcap * (*x * scale / softcap).tanh();
                    }
                } else {
                    for x in mid.iter_mut() {
                        *x *= scale;
                    }
                }
                if mask.is_some() {
                    let mrow = &masks[mslot[gi] * n_kv + r0..mslot[gi] * n_kv + r1];
                    for (x, &mv) in mid.iter_mut().zip(mrow) {
                        *x = if mv == f32::NEG_INFINITY {
                            f32::NEG_INFINITY
                        } else {
                            *x + mv
                        };
                    }
                }
            }
            // Rescale each head's state to the block's new max, then turn scores into weights.
            let mut any = false;
            for (gi, hs) in heads.iter_mut().enumerate() {
                let sc = &mut scores[gi * BLOCK..gi * BLOCK + (b1 - b0)];
                let bmax = arch::max_f32(sc);
                if bmax == f32::NEG_INFINITY {
                    sc.fill(0.0);
                    continue;
                }
                any = true;
                if bmax > hs.max {
                    let c = exp_approx(hs.max - bmax);
                    accs[gi * dv..(gi + 1) * dv]
                        .iter_mut()
                        .for_each(|a| *a *= c);
                    hs.sum *= c;
                    hs.max = bmax;
                }
                hs.sum += arch::exp_sum_f32(sc, hs.max);
            }
            if !any {
                continue;
            }
            if v.dtype == DType::F16 {
                // SAFETY: rows r0..r1 hold dv f16 values each, v.nb1 bytes apart (contiguous
                // rows, supported); the weights of lane gi at scores[gi · BLOCK + r0 − b0..].
                unsafe {
                    arch::v_block_f16(&scores[r0 - b0..], BLOCK, nl, v0, v.nb[1], r1 - r0, accs)
                };
            } else {
                for j in r0..r1 {
                    // SAFETY: row j < n_kv as above: dv contiguous f32 values, aligned (typed
                    // views are).
                    let x = unsafe {
                        std::slice::from_raw_parts(v0.add((j - r0) * v.nb[1]) as *const f32, dv)
                    };
                    for (gi, acc) in accs.chunks_exact_mut(dv).enumerate() {
                        let w = scores[gi * BLOCK + j - b0];
                        if w != 0.0 {
                            arch::axpy_f32(w, x, acc);
                        }
                    }
                }
            }
        }

        if split.chunks == 1 {
            for (gi, hs) in heads.iter().enumerate() {
                let (t, h) = (t0 + gi / g, h0 + gi % g);
                // SAFETY: dst is contiguous f32 [dv, n_head, n_tokens, ne3]; this row belongs to
                // this item alone.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(d.at(0, h, t, i3) as *mut f32, dv) };
                finish(out, &accs[gi * dv..(gi + 1) * dv], hs.sum);
            }
        } else {
            // SAFETY: the work buffer holds groups × chunks partials (work_size); this item's
            // slot is written by this thread alone.
            let slot = unsafe { partial(p, &split, dv, item) };
            for (gi, hs) in heads.iter().enumerate() {
                let o = gi * (dv + 2);
                slot[o] = hs.max;
                slot[o + 1] = hs.sum;
                slot[o + 2..o + 2 + dv].copy_from_slice(&accs[gi * dv..(gi + 1) * dv]);
            }
        }
    }
    if split.chunks == 1 {
        return;
    }

    // Merge the chunks of each (group, lane) row.
    p.barrier.wait();
    for row in thread_range(split.groups * ml, p.ith, p.nth) {
        let (group, gi) = (row / ml, row % ml);
        let (h0, _, t0, i3, nl) = split.locate(group);
        if gi >= nl {
            continue;
        }
        let (t, h) = (t0 + gi / g, h0 + gi % g);
        let o = gi * (dv + 2);
        let mut max = f32::NEG_INFINITY;
        for c in 0..split.chunks {
            // SAFETY: written before the barrier by the thread of item (group, c).
            let s = unsafe { partial(p, &split, dv, group * split.chunks + c) };
            max = max.max(s[o]);
        }
        vrow.fill(0.0);
        let mut sum = 0f32;
        if max != f32::NEG_INFINITY {
            for c in 0..split.chunks {
                // SAFETY: as above.
                let s = unsafe { partial(p, &split, dv, group * split.chunks + c) };
                if s[o] == f32::NEG_INFINITY {
                    continue;
                }
                let w = exp_approx(s[o] - max);
                sum += s[o + 1] * w;
                arch::axpy_f32(w, &s[o + 2..o + 2 + dv], &mut vrow);
            }
        }
        // SAFETY: as in the unsplit case; rows are split between threads.
        let out = unsafe { std::slice::from_raw_parts_mut(d.at(0, h, t, i3) as *mut f32, dv) };
        finish(out, &vrow, sum);
    }
}

/// The positions lo..hi of a mask row outside which every value is -inf (lo == hi: all are).
fn attended_span(row: &[f32]) -> (usize, usize) {
    const C: usize = 16;
    // No early exit inside a chunk: the comparisons vectorize.
    let masked = |c: &[f32]| c.iter().fold(true, |a, &x| a & (x == f32::NEG_INFINITY));
    let mut lo = 0;
    while lo + C <= row.len() && masked(&row[lo..lo + C]) {
        lo += C;
    }
    while lo < row.len() && row[lo] == f32::NEG_INFINITY {
        lo += 1;
    }
    let mut hi = row.len();
    while hi >= lo + C && masked(&row[hi - C..hi]) {
        hi -= C;
    }
    while hi > lo && row[hi - 1] == f32::NEG_INFINITY {
        hi -= 1;
    }
    (lo, hi)
}

/// The partial of work item `item` in the work buffer.
///
/// # Safety
/// The work buffer is `work_size` bytes for this split; no other thread writes the slot while
/// it is borrowed.
#[allow(clippy::mut_from_ref)]
unsafe fn partial<'a>(
    p: &'a ComputeParams,
    split: &Split,
    dv: usize,
    item: usize,
) -> &'a mut [f32] {
    let len = split.partial_len(dv);
    // SAFETY: item < groups × chunks, so the slot lies inside the 64-byte aligned work buffer.
    unsafe { std::slice::from_raw_parts_mut((p.wdata as *mut f32).add(item * len), len) }
}

/// `out = acc / sum`, or zeros for a row every position of which was masked.
fn finish(out: &mut [f32], acc: &[f32], sum: f32) {
    if sum > 0.0 {
        let inv = 1.0 / sum;
        for (o, a) in out.iter_mut().zip(acc) {
            *o = a * inv;
        }
    } else {
        out.fill(0.0);
    }
}
