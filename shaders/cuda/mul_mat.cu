// mul_mat: dst[i, j] = sum_k src0[k, i] * src1[k, j], broadcast over dims 2 and 3 (src0's batch
// index is src1's divided by the ratios r2 = i[0], r3 = i[1]), and get_rows. src0 (the weight) is
// read through `deq` / `q32` (quants.cuh); src1 and dst are f32. Indexing as shaders/mul_mat.wgsl.
//   mat_vec_<type>   n == 1, f32/f16 weights: one warp per output row, lanes stride over k.
//   mat_vec_<type>   n == 1, quantized weights: one warp per row, each lane a 32-element
//                    sub-block at a time with dp4a against src1 quantized by quantize_q8 into
//                    Q8Y blocks (slot 3 points at them).
//   mat_mat_<type>   n > 1: 64 x 64 output tiles, 256 threads each computing 4 x 4, k in steps of
//                    16, the weight dequantized into shared memory.
//   get_rows_<type>  dst[:, i10, i11, i12] = src0[:, src1[i10, i11, i12], i11, i12] as f32; an
//                    index outside src0's rows gives NaN, as the CPU backend.

__device__ __forceinline__ const u8* a_row(const Params& p, i64 i, i64 i12, i64 i13) {
    return p.ptr[1] + i * p.t[1].nb[1] + (i12 / p.i[0]) * p.t[1].nb[2] + (i13 / p.i[1]) * p.t[1].nb[3];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Rows per block of the mat_vec kernels (one warp each); blockDim.x == 32 * MV_ROWS.
#define MV_ROWS 4

template <int T> __device__ void mat_vec(const Params& p) {
    const i64 M = p.t[1].ne[1], K = p.t[1].ne[0], ne12 = p.t[2].ne[2];
    const i64 i = (i64)blockIdx.x * MV_ROWS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const i64 bidx = blockIdx.y;
    const i64 i12 = bidx % ne12, i13 = bidx / ne12;
    if (i >= M) return;
    const u8* a = a_row(p, i, i12, i13);
    float acc = 0.0f;
    if constexpr (T == T_F32 || T == T_F16) {
        const u8* b = p.ptr[2] + i12 * p.t[2].nb[2] + i13 * p.t[2].nb[3];
        const i64 nb10 = p.t[2].nb[0];
        for (i64 k = lane; k < K; k += 32) acc += deq<T>(a, k) * *(const float*)(b + k * nb10);
    } else {
        const i64 nsb = K / 32;
        const Q8Y* y = (const Q8Y*)p.ptr[3] + bidx * p.t[2].ne[1] * nsb;
        for (i64 sb = lane; sb < nsb; sb += 32) acc += dot32<T>(a, sb, y[sb]);
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        *(float*)(p.ptr[0] + i * p.t[0].nb[0] + i12 * p.t[0].nb[2] + i13 * p.t[0].nb[3]) = acc;
    }
}

// src1 [K, N, ne12, ne13] (f32, any strides) to Q8Y blocks, contiguous: block sb of column
// (i11, i12, i13) at ((i13 * ne12 + i12) * N + i11) * (K / 32) + sb. One warp per block, a lane
// per element; p.n = number of blocks.
extern "C" __global__ void quantize_q8(Params p) {
    const i64 w = ((i64)blockIdx.y * gridDim.x + blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (w >= p.n) return;
    const i64 nsb = p.t[2].ne[0] / 32, N = p.t[2].ne[1], ne12 = p.t[2].ne[2];
    const i64 sb = w % nsb, col = w / nsb;
    const i64 i11 = col % N, i12 = (col / N) % ne12, i13 = col / (N * ne12);
    const float x = *(const float*)(p.ptr[2] + (sb * 32 + lane) * p.t[2].nb[0] + i11 * p.t[2].nb[1] +
                                    i12 * p.t[2].nb[2] + i13 * p.t[2].nb[3]);
    float amax = fabsf(x);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const int q = d == 0.0f ? 0 : __float2int_rn(x / d);
    // Sums of each half-warp's quantized values (16 lanes: offsets 8, 4, 2, 1).
    int s = q;
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    Q8Y* y = (Q8Y*)p.ptr[3] + w;
    ((i8*)y->q)[lane] = (i8)q;
    if (lane == 0) {
        y->d = d;
        y->s0 = d * (float)s;
        y->pad = 0.0f;
    }
    if (lane == 16) y->s1 = d * (float)s;
}

#define TILE 64
template <int T> __device__ void mat_mat(const Params& p) {
    __shared__ float As[16 * TILE];
    __shared__ float Bs[16 * TILE];
    const i64 M = p.t[1].ne[1], K = p.t[1].ne[0], N = p.t[2].ne[1], ne12 = p.t[2].ne[2];
    const i64 i12 = blockIdx.z % ne12, i13 = blockIdx.z / ne12;
    const i64 i0 = (i64)blockIdx.x * TILE, j0 = (i64)blockIdx.y * TILE;
    const int lid = threadIdx.x, tx = lid % 16, ty = lid / 16;
    const u8* bb = p.ptr[2] + i12 * p.t[2].nb[2] + i13 * p.t[2].nb[3];
    const i64 nb10 = p.t[2].nb[0], nb11 = p.t[2].nb[1];
    float acc[16];
    for (int q = 0; q < 16; q++) acc[q] = 0.0f;
    for (i64 k0 = 0; k0 < K; k0 += 16) {
        for (int t = 0; t < 4; t++) {
            const int e = lid + t * 256, r = e / 16, kk = e % 16;
            const i64 gk = k0 + kk;
            float va = 0.0f, vb = 0.0f;
            if (i0 + r < M && gk < K) va = deq<T>(a_row(p, i0 + r, i12, i13), gk);
            if (j0 + r < N && gk < K) vb = *(const float*)(bb + (j0 + r) * nb11 + gk * nb10);
            As[kk * TILE + r] = va;
            Bs[kk * TILE + r] = vb;
        }
        __syncthreads();
        for (int kk = 0; kk < 16; kk++) {
            float a[4], b[4];
            for (int r = 0; r < 4; r++) {
                a[r] = As[kk * TILE + ty * 4 + r];
                b[r] = Bs[kk * TILE + tx * 4 + r];
            }
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 4; c++) acc[r * 4 + c] += a[r] * b[c];
        }
        __syncthreads();
    }
    for (int r = 0; r < 4; r++) {
        const i64 gi = i0 + ty * 4 + r;
        for (int c = 0; c < 4; c++) {
            const i64 gj = j0 + tx * 4 + c;
            if (gi < M && gj < N) {
                *(float*)(p.ptr[0] + gi * p.t[0].nb[0] + gj * p.t[0].nb[1] + i12 * p.t[0].nb[2] +
                          i13 * p.t[0].nb[3]) = acc[r * 4 + c];
            }
        }
    }
}

template <int T> __device__ void get_rows(const Params& p) {
    const i64 i = gid();
    if (i >= p.n) return;
    i64 c[4];
    coords(p, 0, i, c);
    const int r = *(const i32*)(p.ptr[2] + at(p, 2, c[1], c[2], c[3], 0));
    float* out = (float*)(p.ptr[0] + at(p, 0, c[0], c[1], c[2], c[3]));
    if (r < 0 || r >= p.t[1].ne[1]) {
        *out = __int_as_float(0x7FC00000);
        return;
    }
    const u8* row = p.ptr[1] + r * p.t[1].nb[1] + c[2] * p.t[1].nb[2] + c[3] * p.t[1].nb[3];
    *out = deq<T>(row, c[0]);
}

#define WEIGHT_KERNELS(T, NAME)                                                      \
    extern "C" __global__ void mat_vec_##NAME(Params p) { mat_vec<T>(p); }           \
    extern "C" __global__ void mat_mat_##NAME(Params p) { mat_mat<T>(p); }           \
    extern "C" __global__ void get_rows_##NAME(Params p) { get_rows<T>(p); }

WEIGHT_KERNELS(T_F32, f32)
WEIGHT_KERNELS(T_F16, f16)
WEIGHT_KERNELS(T_Q4_0, q4_0)
WEIGHT_KERNELS(T_Q4_1, q4_1)
WEIGHT_KERNELS(T_Q5_0, q5_0)
WEIGHT_KERNELS(T_Q5_1, q5_1)
WEIGHT_KERNELS(T_Q8_0, q8_0)
WEIGHT_KERNELS(T_Q4_K, q4_K)
WEIGHT_KERNELS(T_Q5_K, q5_K)
WEIGHT_KERNELS(T_Q6_K, q6_K)
