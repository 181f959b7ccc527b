// RoPE (ggml_rope_ext with YaRN), one thread per pair of dst (p.n pairs), as shaders/rope.wgsl.
// Normal mode (i[1] = 0) rotates (2i, 2i+1), NeoX (i[1] = 1) rotates (i, i + n_dims/2);
// dimensions past n_dims (i[0]) are copied. src1: i32 positions (one per ne2); src2: optional
// frequency factors (i[2] = has them). f: theta_scale, freq_scale, ext_factor, attn_factor,
// corr_dims[2].

__device__ __forceinline__ float yarn_ramp(float low, float high, i64 i0) {
    const float y = ((float)(i0 / 2) - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

extern "C" __global__ void rope(Params p) {
    const i64 i = gid();
    if (i >= p.n) return;
    const i64 half = p.t[0].ne[0] / 2, ne1 = p.t[0].ne[1], ne2 = p.t[0].ne[2];
    const i64 ic = i % half, r = i / half;
    const i64 i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    const i64 n_dims = p.i[0];
    const i64 i0 = 2 * ic;
    if (i0 >= n_dims) {
        for (i64 k = i0; k < i0 + 2; k++) {
            *f32_at(p, 0, at(p, 0, k, i1, i2, i3)) = ld_f32(p, 1, at(p, 1, k, i1, i2, i3));
        }
        return;
    }
    const float pos = (float)*(const i32*)(p.ptr[2] + i2 * p.t[2].nb[0]);
    // theta = pos * theta_scale^ic by repeated products, as the CPU reference.
    float theta = pos;
    for (i64 k = 0; k < ic; k++) theta *= p.f[0];
    const float ff = p.i[2] != 0 ? *(const float*)(p.ptr[3] + ic * p.t[3].nb[0]) : 1.0f;
    const float theta_extrap = theta / ff;
    const float freq_scale = p.f[1], ext_factor = p.f[2];
    float mscale = p.f[3];
    const float theta_interp = freq_scale * theta_extrap;
    float th = theta_interp;
    if (ext_factor != 0.0f) {
        const float ramp_mix = yarn_ramp(p.f[4], p.f[5], i0) * ext_factor;
        th = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    const float cos_t = cosf(th) * mscale, sin_t = sinf(th) * mscale;
    i64 a = i0, b = i0 + 1;
    if (p.i[1] != 0) {
        a = ic;
        b = ic + n_dims / 2;
    }
    const float x0 = ld_f32(p, 1, at(p, 1, a, i1, i2, i3));
    const float x1 = ld_f32(p, 1, at(p, 1, b, i1, i2, i3));
    *f32_at(p, 0, at(p, 0, a, i1, i2, i3)) = x0 * cos_t - x1 * sin_t;
    *f32_at(p, 0, at(p, 0, b, i1, i2, i3)) = x0 * sin_t + x1 * cos_t;
}
