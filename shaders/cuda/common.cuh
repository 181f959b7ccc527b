// Shared by every CUDA kernel (prepended to each .cu file by crate/src/backend/cuda/kernels.rs;
// NVRTC compiles it without any CUDA header). Every kernel takes one `Params` by value: the device
// pointers of dst, src0, src1, src2 (already at the tensor's offset), their shapes and strides in
// bytes, an element or row count, and the kernel's own integer and float scalars. The layout is
// `KParams` in kernels.rs (#[repr(C)]).
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;

struct Tensor {
    i64 ne[4];
    i64 nb[4];
};

struct Params {
    u8* ptr[4];
    Tensor t[4];
    i64 n;
    i32 i[16];
    float f[16];
};
// The host's `KParams` (kernels.rs) asserts the same sizes (and its field offsets: 0, 32, 288,
// 296, 360, which this order of naturally aligned fields gives).
static_assert(sizeof(Tensor) == 64, "Tensor layout");
static_assert(sizeof(Params) == 424, "Params layout");

// The host build of the per-element kernels (native-tests/tests/cuda_host/kernels_host.cpp)
// defines GGWEB_HOST and its own h2f, f2h and dp4a.
#ifndef GGWEB_HOST
// f16 <-> f32 through PTX (no cuda_fp16.h needed).
__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}
// Signed 4-way int8 dot product with accumulate (sm_61+).
__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#endif

// Global thread index of a 1-D launch over a 2-D grid (large launches use grid.y too).
__device__ __forceinline__ i64 gid() {
    return ((i64)blockIdx.y * gridDim.x + blockIdx.x) * (i64)blockDim.x + threadIdx.x;
}
// Block index of a 2-D grid of blocks, linearised.
__device__ __forceinline__ i64 bid() { return (i64)blockIdx.y * gridDim.x + blockIdx.x; }

// Byte offset of coordinates c in tensor slot s.
__device__ __forceinline__ i64 at(const Params& p, int s, i64 c0, i64 c1, i64 c2, i64 c3) {
    const Tensor& t = p.t[s];
    return c0 * t.nb[0] + c1 * t.nb[1] + c2 * t.nb[2] + c3 * t.nb[3];
}
// Coordinates of the i-th element (row-major over ne) of tensor slot s.
__device__ __forceinline__ void coords(const Params& p, int s, i64 i, i64* c) {
    const Tensor& t = p.t[s];
    c[0] = i % t.ne[0];
    i /= t.ne[0];
    c[1] = i % t.ne[1];
    i /= t.ne[1];
    c[2] = i % t.ne[2];
    c[3] = i / t.ne[2];
}
__device__ __forceinline__ float* f32_at(const Params& p, int s, i64 off) {
    return (float*)(p.ptr[s] + off);
}
__device__ __forceinline__ float ld_f32(const Params& p, int s, i64 off) { return *(const float*)(p.ptr[s] + off); }
__device__ __forceinline__ float ld_f16(const Params& p, int s, i64 off) { return h2f(*(const u16*)(p.ptr[s] + off)); }

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
__device__ float block_sum(float v) {
    __shared__ float red[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) red[w] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = l < nw ? red[l] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ float block_max(float v) {
    __shared__ float red[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) red[w] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = l < nw ? red[l] : -3.402823466e38f;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
