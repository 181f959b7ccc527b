// Elementwise kernels, one thread per destination element (p.n of them), indexing as
// shaders/{binary,unary,cpy,concat}.wgsl.
//   binary   add/sub/mul/div (i[0]: 0..3) with src1 broadcast to src0's shape (f32).
//   unary    the unary functions, scale (x * f[0] + f[1]), sqr/sqrt/log and repeat (src0 is
//            indexed modulo its shape, so a smaller src0 is tiled); i[0] is the function code
//            (`UnaryFn` in backend/cuda/plan.rs). f32.
//   cpy_<a>_<b>  the i-th element of src0 (row-major) to the i-th of dst, f32/f16 to f32/f16.
//   concat   along dimension i[0] of two tensors of one 4-byte type.

extern "C" __global__ void binary(Params p) {
    const i64 i = gid();
    if (i >= p.n) return;
    i64 c[4];
    coords(p, 0, i, c);
    const Tensor& b = p.t[2];
    const float x = ld_f32(p, 1, at(p, 1, c[0], c[1], c[2], c[3]));
    const float y = ld_f32(p, 2, at(p, 2, c[0] % b.ne[0], c[1] % b.ne[1], c[2] % b.ne[2], c[3] % b.ne[3]));
    float r;
    switch (p.i[0]) {
        case 0: r = x + y; break;
        case 1: r = x - y; break;
        case 2: r = x * y; break;
        default: r = x / y; break;
    }
    *f32_at(p, 0, at(p, 0, c[0], c[1], c[2], c[3])) = r;
}

// Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), as unary.wgsl.
__device__ __forceinline__ float erf_approx(float x) {
    const float t = 1.0f / (1.0f + 0.3275911f * fabsf(x));
    const float y = 1.0f - (((((1.061405429f * t - 1.453152027f) * t) + 1.421413741f) * t - 0.284496736f) * t +
                            0.254829592f) * t * expf(-x * x);
    return x >= 0.0f ? y : -y;
}

extern "C" __global__ void unary(Params p) {
    const i64 i = gid();
    if (i >= p.n) return;
    i64 c[4];
    coords(p, 0, i, c);
    const Tensor& s = p.t[1];
    const float x = ld_f32(p, 1, at(p, 1, c[0] % s.ne[0], c[1] % s.ne[1], c[2] % s.ne[2], c[3] % s.ne[3]));
    float r;
    switch (p.i[0]) {
        case 0: r = fabsf(x); break;
        case 1: r = -x; break;
        case 2: r = fmaxf(x, 0.0f); break;
        case 3: r = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * x * (1.0f + 0.044715f * x * x))); break;
        case 4: r = 0.5f * x * (1.0f + erf_approx(x * 0.7071067811865476f)); break;
        case 5: r = x / (1.0f + expf(-x)); break;
        case 6: r = tanhf(x); break;
        case 7: r = 1.0f / (1.0f + expf(-x)); break;
        case 8: r = expf(x); break;
        case 9: r = x * p.f[0] + p.f[1]; break;
        case 10: r = x * x; break;
        case 11: r = sqrtf(x); break;
        case 12: r = logf(x); break;
        default: r = x; break;
    }
    *f32_at(p, 0, at(p, 0, c[0], c[1], c[2], c[3])) = r;
}

template <bool SRC_F16, bool DST_F16> __device__ void cpy(const Params& p) {
    const i64 i = gid();
    if (i >= p.n) return;
    i64 c[4];
    coords(p, 1, i, c);
    const i64 so = at(p, 1, c[0], c[1], c[2], c[3]);
    const float v = SRC_F16 ? ld_f16(p, 1, so) : ld_f32(p, 1, so);
    coords(p, 0, i, c);
    u8* d = p.ptr[0] + at(p, 0, c[0], c[1], c[2], c[3]);
    if (DST_F16) {
        *(u16*)d = f2h(v);
    } else {
        *(float*)d = v;
    }
}
extern "C" __global__ void cpy_f32_f32(Params p) { cpy<false, false>(p); }
extern "C" __global__ void cpy_f32_f16(Params p) { cpy<false, true>(p); }
extern "C" __global__ void cpy_f16_f32(Params p) { cpy<true, false>(p); }
extern "C" __global__ void cpy_f16_f16(Params p) { cpy<true, true>(p); }

extern "C" __global__ void concat(Params p) {
    const i64 i = gid();
    if (i >= p.n) return;
    i64 c[4];
    coords(p, 0, i, c);
    const int dim = p.i[0];
    const i64 n0 = p.t[1].ne[dim];
    u32 v;
    if (c[dim] < n0) {
        v = *(const u32*)(p.ptr[1] + at(p, 1, c[0], c[1], c[2], c[3]));
    } else {
        i64 d[4] = {c[0], c[1], c[2], c[3]};
        d[dim] -= n0;
        v = *(const u32*)(p.ptr[2] + at(p, 2, d[0], d[1], d[2], d[3]));
    }
    *(u32*)(p.ptr[0] + at(p, 0, c[0], c[1], c[2], c[3])) = v;
}
