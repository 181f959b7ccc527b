// Host build of the CUDA kernels that use one thread per element and no block-level cooperation
// (elementwise.cu, rope.cu, conv.cu, get_rows of mul_mat.cu), run sequentially over the grid the
// planner chose, so that the planner's parameter blocks and the kernels' indexing are checked
// against the CPU backend without a GPU (native-tests/tests/cuda.rs). Kernels that need warps,
// shared memory or barriers (norms, soft_max, rows, mat_vec, mat_mat, quantize_q8) are compiled
// here but not run: ggweb_host_launch refuses them.
#include <cmath>
#include <cstdint>
#include <cstring>

#define GGWEB_HOST 1
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
struct HostDim {
    unsigned x, y, z;
};
static HostDim blockIdx, threadIdx, gridDim, blockDim;
// Only to compile the cooperative kernels, which are never run here.
#define __syncthreads() ((void)0)
static float __shfl_xor_sync(unsigned, float v, int) { return v; }
static int __shfl_xor_sync(unsigned, int v, int) { return v; }
static int __float2int_rn(float x) { return (int)std::nearbyint(x); }
static float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}

// IEEE binary16 <-> binary32, round to nearest even (the PTX cvt of common.cuh).
static float h2f(unsigned short h) {
    const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    uint32_t bits;
    if (e == 0) {
        float f = (float)m / 16777216.0f;
        std::memcpy(&bits, &f, 4);
        bits |= s;
    } else if (e == 31) {
        bits = s | 0x7F800000u | (m << 13);
    } else {
        bits = s | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
static unsigned short f2h(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7FFFFFFF;
    if (a >= 0x7F800000) return (unsigned short)(sign | (a > 0x7F800000 ? 0x7E00 : 0x7C00));
    if (a < 0x38800000) {  // below 2^-14: a subnormal half (or zero), unit 2^-24
        float v;
        std::memcpy(&v, &a, 4);
        return (unsigned short)(sign | (uint32_t)std::nearbyint(v * 16777216.0f));
    }
    uint32_t h = (((a >> 23) - 112) << 10) | ((a & 0x7FFFFF) >> 13);
    const uint32_t rem = a & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;  // may carry into infinity: correct
    return (unsigned short)(sign | h);
}
static int dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(signed char)((uint32_t)a >> (8 * i)) * (int)(signed char)((uint32_t)b >> (8 * i));
    return c;
}

#include "common.cuh"
#include "quants.cuh"
#include "elementwise.cu"
#include "rope.cu"
#include "conv.cu"
#include "mul_mat.cu"

typedef void (*Kernel)(Params);
struct Entry {
    const char* name;
    Kernel f;
};
static const Entry ENTRIES[] = {
    {"binary", binary}, {"unary", unary}, {"cpy_f32_f32", cpy_f32_f32}, {"cpy_f32_f16", cpy_f32_f16},
    {"cpy_f16_f32", cpy_f16_f32}, {"cpy_f16_f16", cpy_f16_f16}, {"concat", concat}, {"rope", rope},
    {"im2col_f32", im2col_f32}, {"im2col_f16", im2col_f16}, {"pool_2d", pool_2d},
    {"get_rows_f32", get_rows_f32}, {"get_rows_f16", get_rows_f16}, {"get_rows_q4_0", get_rows_q4_0},
    {"get_rows_q4_1", get_rows_q4_1}, {"get_rows_q5_0", get_rows_q5_0}, {"get_rows_q5_1", get_rows_q5_1},
    {"get_rows_q8_0", get_rows_q8_0}, {"get_rows_q4_K", get_rows_q4_K}, {"get_rows_q5_K", get_rows_q5_K},
    {"get_rows_q6_K", get_rows_q6_K},
};

// Run kernel `name` over grid (gx, gy, gz) of blocks of bx threads, one thread after another.
// Returns 0, or 1 when the kernel is not one that can run here.
extern "C" int ggweb_host_launch(const char* name, const Params* p, unsigned gx, unsigned gy, unsigned gz, unsigned bx) {
    Kernel f = nullptr;
    for (const Entry& e : ENTRIES) {
        if (std::strcmp(e.name, name) == 0) f = e.f;
    }
    if (!f) return 1;
    gridDim = {gx, gy, gz};
    blockDim = {bx, 1, 1};
    for (unsigned z = 0; z < gz; z++)
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++)
                for (unsigned t = 0; t < bx; t++) {
                    blockIdx = {x, y, z};
                    threadIdx = {t, 0, 0};
                    f(*p);
                }
    return 0;
}
