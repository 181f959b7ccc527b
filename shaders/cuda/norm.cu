// Kernels with one block per row (p.n rows, 256 threads), indexing as shaders/{norm,soft_max,
// rows}.wgsl.
//   norm_rows i[0] = 0: (x - mean) / sqrt(var + eps); 1: rms_norm x / sqrt(mean(x^2) + eps);
//             f[0] = eps.
//   soft_max_<mask type>  soft_max(src0 * f[0] + slope * mask) per row; the mask (src1, f32 or
//             f16; i[0] = has mask) is indexed by row i01 and broadcast over dims 2 and 3. ALiBi
//             slope from max_bias (f[1]) as ggml: i[1] = n_head_log2, f[2] = m0, f[3] = m1.
//   rows      i[0]: 0 sum_rows, 1 mean, 2 argmax (i32, last maximum as ggml), 3 sum of all
//             elements (one block).

__device__ __forceinline__ void row_coords(const Params& p, i64 row, i64* c) {
    const i64 ne01 = p.t[1].ne[1], ne02 = p.t[1].ne[2];
    c[0] = 0;
    c[1] = row % ne01;
    c[2] = (row / ne01) % ne02;
    c[3] = row / (ne01 * ne02);
}

extern "C" __global__ void norm_rows(Params p) {
    const i64 row = bid();
    if (row >= p.n) return;
    i64 c[4];
    row_coords(p, row, c);
    const u8* x = p.ptr[1] + at(p, 1, 0, c[1], c[2], c[3]);
    u8* d = p.ptr[0] + at(p, 0, 0, c[1], c[2], c[3]);
    const i64 ne00 = p.t[1].ne[0], nx = p.t[1].nb[0], nd = p.t[0].nb[0];
    const float eps = p.f[0], n = (float)ne00;
    if (p.i[0] == 1) {
        float s = 0.0f;
        for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) {
            const float v = *(const float*)(x + i * nx);
            s += v * v;
        }
        const float scale = rsqrtf(block_sum(s) / n + eps);
        for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) *(float*)(d + i * nd) = *(const float*)(x + i * nx) * scale;
    } else {
        float s = 0.0f;
        for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) s += *(const float*)(x + i * nx);
        const float mean = block_sum(s) / n;
        float s2 = 0.0f;
        for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) {
            const float v = *(const float*)(x + i * nx) - mean;
            s2 += v * v;
        }
        const float scale = rsqrtf(block_sum(s2) / n + eps);
        for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) *(float*)(d + i * nd) = (*(const float*)(x + i * nx) - mean) * scale;
    }
}

template <bool MASK_F16> __device__ void soft_max(const Params& p) {
    const i64 row = bid();
    if (row >= p.n) return;
    i64 c[4];
    row_coords(p, row, c);
    const float scale = p.f[0], max_bias = p.f[1];
    const bool has_mask = p.i[0] != 0;
    float slope = 1.0f;
    if (max_bias > 0.0f) {
        const i64 nhl = p.i[1];
        slope = c[2] < nhl ? powf(p.f[2], (float)(c[2] + 1)) : powf(p.f[3], (float)(2 * (c[2] - nhl) + 1));
    }
    const u8* x = p.ptr[1] + at(p, 1, 0, c[1], c[2], c[3]);
    const u8* m = has_mask ? p.ptr[2] + at(p, 2, 0, c[1], c[2] % p.t[2].ne[2], c[3] % p.t[2].ne[3]) : nullptr;
    u8* d = p.ptr[0] + at(p, 0, 0, c[1], c[2], c[3]);
    const i64 ne00 = p.t[1].ne[0], nx = p.t[1].nb[0], nm = p.t[2].nb[0], nd = p.t[0].nb[0];
    float mx = -3.402823466e38f;
    for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) {
        float v = *(const float*)(x + i * nx) * scale;
        if (has_mask) v += slope * (MASK_F16 ? h2f(*(const u16*)(m + i * nm)) : *(const float*)(m + i * nm));
        *(float*)(d + i * nd) = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx);
    float sum = 0.0f;
    for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) {
        // Each thread reads back only what it wrote above.
        const float e = expf(*(float*)(d + i * nd) - mx);
        sum += e;
        *(float*)(d + i * nd) = e;
    }
    const float inv = 1.0f / block_sum(sum);
    for (i64 i = threadIdx.x; i < ne00; i += blockDim.x) *(float*)(d + i * nd) *= inv;
}
extern "C" __global__ void soft_max_f32(Params p) { soft_max<false>(p); }
extern "C" __global__ void soft_max_f16(Params p) { soft_max<true>(p); }

extern "C" __global__ void rows(Params p) {
    __shared__ float rv[256];
    __shared__ i64 ri[256];
    const i64 row = bid();
    if (row >= p.n) return;
    const int op = p.i[0], lid = threadIdx.x;
    const Tensor& s = p.t[1];
    i64 c[4];
    row_coords(p, row, c);
    const i64 n = op == 3 ? s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3] : s.ne[0];
    const u8* base = p.ptr[1] + at(p, 1, 0, c[1], c[2], c[3]);
    float acc = 0.0f, best = -3.402823466e38f;
    i64 besti = -1;
    for (i64 i = lid; i < n; i += 256) {
        float x;
        if (op == 3) {
            i64 e[4];
            coords(p, 1, i, e);
            x = ld_f32(p, 1, at(p, 1, e[0], e[1], e[2], e[3]));
        } else {
            x = *(const float*)(base + i * s.nb[0]);
        }
        acc += x;
        if (x >= best || besti < 0) {
            best = x;
            besti = i;
        }
    }
    rv[lid] = op == 2 ? best : acc;
    ri[lid] = besti;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if (lid < h) {
            const int o = lid + h;
            if (op == 2) {
                if (ri[o] >= 0 && (ri[lid] < 0 || rv[o] > rv[lid] || (rv[o] == rv[lid] && ri[o] > ri[lid]))) {
                    rv[lid] = rv[o];
                    ri[lid] = ri[o];
                }
            } else {
                rv[lid] += rv[o];
            }
        }
        __syncthreads();
    }
    if (lid == 0) {
        if (op == 2) {
            *(i32*)(p.ptr[0] + row * p.t[0].nb[0]) = (i32)ri[0];
        } else if (op == 3) {
            *(float*)p.ptr[0] = rv[0];
        } else {
            *(float*)(p.ptr[0] + at(p, 0, 0, c[1], c[2], c[3])) = op == 1 ? rv[0] / (float)s.ne[0] : rv[0];
        }
    }
}
