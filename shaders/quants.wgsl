// Dequantization of GGUF blocks read from `src0: array<u32>` at byte addresses (blocks are not
// word-aligned: q4_0 is 18 bytes, etc.). deq_<type>(base, k): element k of the row whose first
// block starts at byte `base`. Layouts and rounding follow ggml's dequantize_row_*.
fn rb(b: u32) -> u32 { return (src0[b >> 2u] >> ((b & 3u) * 8u)) & 0xFFu; }
// f16 at an even byte address.
fn rh(b: u32) -> f32 { return unpack2x16float(src0[b >> 2u])[(b >> 1u) & 1u]; }
fn ri8(b: u32) -> f32 { return f32(bitcast<i32>(rb(b) << 24u) >> 24u); }

fn deq_q4_0(base: u32, k: u32) -> f32 {
    let b = base + (k >> 5u) * 18u;
    let j = k & 31u;
    let q = rb(b + 2u + (j & 15u));
    let v = select(q & 15u, q >> 4u, j >= 16u);
    return (f32(v) - 8.0) * rh(b);
}

fn deq_q4_1(base: u32, k: u32) -> f32 {
    let b = base + (k >> 5u) * 20u;
    let j = k & 31u;
    let q = rb(b + 4u + (j & 15u));
    let v = select(q & 15u, q >> 4u, j >= 16u);
    return f32(v) * rh(b) + rh(b + 2u);
}

fn deq_q5_0(base: u32, k: u32) -> f32 {
    let b = base + (k >> 5u) * 22u;
    let j = k & 31u;
    let h = (rb(b + 2u + (j >> 3u)) >> (j & 7u)) & 1u;
    let q = rb(b + 6u + (j & 15u));
    let v = select(q & 15u, q >> 4u, j >= 16u) | (h << 4u);
    return (f32(v) - 16.0) * rh(b);
}

fn deq_q5_1(base: u32, k: u32) -> f32 {
    let b = base + (k >> 5u) * 24u;
    let j = k & 31u;
    let h = (rb(b + 4u + (j >> 3u)) >> (j & 7u)) & 1u;
    let q = rb(b + 8u + (j & 15u));
    let v = select(q & 15u, q >> 4u, j >= 16u) | (h << 4u);
    return f32(v) * rh(b) + rh(b + 2u);
}

fn deq_q8_0(base: u32, k: u32) -> f32 {
    let b = base + (k >> 5u) * 34u;
    return ri8(b + 2u + (k & 31u)) * rh(b);
}

// get_scale_min_k4 of ggml: 6-bit scale and min of sub-block s (0..7) from 12 bytes at `sc`.
fn scale_min_k4(sc: u32, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return vec2<f32>(f32(rb(sc + s) & 63u), f32(rb(sc + s + 4u) & 63u));
    }
    let d = (rb(sc + s + 4u) & 15u) | ((rb(sc + s - 4u) >> 6u) << 4u);
    let m = (rb(sc + s + 4u) >> 4u) | ((rb(sc + s) >> 6u) << 4u);
    return vec2<f32>(f32(d), f32(m));
}

// q4_K: d, dmin (f16), scales[12], qs[128]; 8 sub-blocks of 32.
fn deq_q4_k(base: u32, k: u32) -> f32 {
    let b = base + (k >> 8u) * 144u;
    let e = k & 255u;
    let s = e >> 5u;
    let l = e & 31u;
    let q = rb(b + 16u + 32u * (s >> 1u) + l);
    let v = select(q & 15u, q >> 4u, (s & 1u) == 1u);
    let sm = scale_min_k4(b + 4u, s);
    return rh(b) * sm.x * f32(v) - rh(b + 2u) * sm.y;
}

// q5_K: d, dmin, scales[12], qh[32], qs[128].
fn deq_q5_k(base: u32, k: u32) -> f32 {
    let b = base + (k >> 8u) * 176u;
    let e = k & 255u;
    let s = e >> 5u;
    let l = e & 31u;
    let q = rb(b + 48u + 32u * (s >> 1u) + l);
    let h = (rb(b + 16u + l) >> s) & 1u;
    let v = select(q & 15u, q >> 4u, (s & 1u) == 1u) + 16u * h;
    let sm = scale_min_k4(b + 4u, s);
    return rh(b) * sm.x * f32(v) - rh(b + 2u) * sm.y;
}

// q6_K: ql[128], qh[64], scales[16] (i8), d (f16).
fn deq_q6_k(base: u32, k: u32) -> f32 {
    let b = base + (k >> 8u) * 210u;
    let e = k & 255u;
    let n = e >> 7u;
    let w = e & 127u;
    let qt = w >> 5u;
    let l = w & 31u;
    let ql = rb(b + 64u * n + l + 32u * (qt & 1u));
    let lo = select(ql & 15u, ql >> 4u, qt >= 2u);
    let h = (rb(b + 128u + 32u * n + l) >> (2u * qt)) & 3u;
    let q = i32(lo | (h << 4u)) - 32;
    let sc = ri8(b + 192u + 8u * n + (l >> 4u) + 2u * qt);
    return rh(b + 208u) * sc * f32(q);
}
