// im2col and pool_2d, one thread per destination element (p.n), as shaders/{im2col,pool_2d}.wgsl.
//   im2col_<dst type>  dst[(ic*KH + kh)*KW + kw, ow, oh, n] = src1[ow*s0 + kw*d0 - p0,
//       oh*s1 + kh*d1 - p1, ic, n] (0 outside). The 1-D case arrives folded into this one
//       (KH = IH = OH = 1, strides rearranged by the host). Slot 2 is src1 with strides
//       (w, h, c, n), slot 0 dst with (col, ow, oh, n). i: KW, KH, IC, IW, IH, OW, OH, N, s0, s1,
//       p0, p1, d0, d1.
//   pool_2d  max (i[0] = 1) or avg (divides by k0*k1 including padding, as ggml); i[1..7]: k0,
//       k1, s0, s1, p0, p1.

template <bool DST_F16> __device__ void im2col(const Params& p) {
    const i64 i = gid();
    if (i >= p.n) return;
    const i64 KW = p.i[0], KH = p.i[1], IW = p.i[3], IH = p.i[4], OW = p.i[5], OH = p.i[6];
    const i64 CHW = (i64)p.i[2] * KH * KW;
    i64 r = i;
    const i64 col = r % CHW;
    r /= CHW;
    const i64 ow = r % OW;
    r /= OW;
    const i64 oh = r % OH;
    const i64 n = r / OH;
    const i64 kw = col % KW, kh = (col / KW) % KH, ic = col / (KW * KH);
    const i64 iw = ow * p.i[8] + kw * p.i[12] - p.i[10];
    const i64 ih = oh * p.i[9] + kh * p.i[13] - p.i[11];
    float v = 0.0f;
    if (iw >= 0 && iw < IW && ih >= 0 && ih < IH) v = ld_f32(p, 2, at(p, 2, iw, ih, ic, n));
    u8* d = p.ptr[0] + at(p, 0, col, ow, oh, n);
    if (DST_F16) {
        *(u16*)d = f2h(v);
    } else {
        *(float*)d = v;
    }
}
extern "C" __global__ void im2col_f32(Params p) { im2col<false>(p); }
extern "C" __global__ void im2col_f16(Params p) { im2col<true>(p); }

extern "C" __global__ void pool_2d(Params p) {
    const i64 i = gid();
    if (i >= p.n) return;
    i64 c[4];
    coords(p, 0, i, c);
    const bool is_max = p.i[0] != 0;
    const int k0 = p.i[1], k1 = p.i[2];
    const i64 IW = p.t[1].ne[0], IH = p.t[1].ne[1];
    const i64 ix = c[0] * p.i[3] - p.i[5], iy = c[1] * p.i[4] - p.i[6];
    float out = is_max ? -3.402823466e38f : 0.0f;
    for (int ky = 0; ky < k1; ky++) {
        const i64 y = iy + ky;
        if (y < 0 || y >= IH) continue;
        for (int kx = 0; kx < k0; kx++) {
            const i64 x = ix + kx;
            if (x < 0 || x >= IW) continue;
            const float v = ld_f32(p, 1, at(p, 1, x, y, c[2], c[3]));
            out = is_max ? fmaxf(out, v) : out + v;
        }
    }
    if (!is_max) out /= (float)(k0 * k1);
    *f32_at(p, 0, at(p, 0, c[0], c[1], c[2], c[3])) = out;
}
