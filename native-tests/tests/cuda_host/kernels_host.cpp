// Host build of every CUDA kernel of shaders/cuda, run over the grid the planner chose, so that
// the planner's parameter blocks and the kernels' indexing and arithmetic are checked against the
// CPU backend without a GPU (native-tests/tests/cuda.rs). Blocks run one after another; the
// threads of a block run as OS threads (the same ones for every block of a launch), so __syncthreads is a barrier of the block, a warp's
// shuffles exchange through memory between barriers of its 32 threads, and __shared__ variables
// are statics shared by the block's threads. This checks the CUDA C, not the GPU (no memory
// model, timing or compiler of the device is involved).
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#define GGWEB_HOST 1
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
struct HostDim {
    unsigned x, y, z;
};
static HostDim gridDim, blockDim;
static thread_local HostDim blockIdx, threadIdx;

// A reusable barrier of n threads.
class Barrier {
    std::mutex m;
    std::condition_variable cv;
    unsigned n = 0, waiting = 0, generation = 0;

  public:
    void reset(unsigned count) { n = count; waiting = 0; }
    void wait() {
        std::unique_lock<std::mutex> l(m);
        const unsigned g = generation;
        if (++waiting == n) {
            waiting = 0;
            generation++;
            cv.notify_all();
        } else {
            cv.wait(l, [&] { return g != generation; });
        }
    }
};
static Barrier block_barrier;
static Barrier warp_barrier[32];
static uint32_t exchange[32][32];

#define __syncthreads() block_barrier.wait()
template <typename T> static T shfl_xor(T v, int o) {
    const unsigned w = threadIdx.x >> 5, l = threadIdx.x & 31;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    exchange[w][l] = bits;
    warp_barrier[w].wait();
    bits = exchange[w][l ^ o];
    warp_barrier[w].wait();
    T r;
    std::memcpy(&r, &bits, 4);
    return r;
}
static float __shfl_xor_sync(unsigned, float v, int o) { return shfl_xor(v, o); }
static int __shfl_xor_sync(unsigned, int v, int o) { return shfl_xor(v, o); }
static int __float2int_rn(float x) { return (int)std::nearbyint(x); }
static float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
static float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

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
#include "norm.cu"
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
    {"get_rows_q6_K", get_rows_q6_K}, {"norm_rows", norm_rows}, {"soft_max_f32", soft_max_f32},
    {"soft_max_f16", soft_max_f16}, {"rows", rows}, {"quantize_q8", quantize_q8},
#define W(NAME) {"mat_vec_" #NAME, mat_vec_##NAME}, {"mat_mat_" #NAME, mat_mat_##NAME},
    W(f32) W(f16) W(q4_0) W(q4_1) W(q5_0) W(q5_1) W(q8_0) W(q4_K) W(q5_K) W(q6_K)
#undef W
};

// Run kernel `name` over grid (gx, gy, gz) of blocks of bx threads (a multiple of 32, at most
// 1024). Returns 0, or 1 for an unknown kernel or block size.
extern "C" int ggweb_host_launch(const char* name, const Params* p, unsigned gx, unsigned gy, unsigned gz, unsigned bx) {
    Kernel f = nullptr;
    for (const Entry& e : ENTRIES) {
        if (std::strcmp(e.name, name) == 0) f = e.f;
    }
    if (!f || bx == 0 || bx % 32 != 0 || bx > 1024) return 1;
    gridDim = {gx, gy, gz};
    blockDim = {bx, 1, 1};
    block_barrier.reset(bx);
    for (auto& w : warp_barrier) w.reset(32);
    // One OS thread per CUDA thread, for the whole grid: each runs its thread of every block in
    // turn, with a barrier after each block (the block's __shared__ statics are then reused).
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < bx; t++) {
        threads.emplace_back([=] {
            threadIdx = {t, 0, 0};
            for (unsigned z = 0; z < gz; z++)
                for (unsigned y = 0; y < gy; y++)
                    for (unsigned x = 0; x < gx; x++) {
                        blockIdx = {x, y, z};
                        f(*p);
                        block_barrier.wait();
                    }
        });
    }
    for (auto& th : threads) th.join();
    return 0;
}
