// Host build of shaders/cuda/quants.cuh (the kernels' block decoding), so that its layouts are
// checked against the Rust reference without a GPU (native-tests/tests/cuda.rs). Reads from stdin:
// i32 GGUF type id, i32 row length k, then the row's bytes; writes to stdout k f32 from deq<T>,
// then (quantized types) k f32 rebuilt from q32<T> as d[j / 16] * q[j] + m[j / 16], then per
// sub-block dot32<T> against fixed q8 activations and the same dot in floats over deq<T>.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define __device__
#define __forceinline__ inline
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;

// dp4a.s32.s32 of common.cuh: four signed byte products added to c.
static int dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(i8)((u32)a >> (8 * i)) * (int)(i8)((u32)b >> (8 * i));
    return c;
}

// IEEE binary16 to binary32 (the PTX cvt.f32.f16 of common.cuh).
static float h2f(u16 h) {
    const u32 s = (u32)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    u32 bits;
    if (e == 0) {
        if (m == 0) {
            bits = s;
        } else {
            float f = (float)m / 16777216.0f;  // m * 2^-24
            std::memcpy(&bits, &f, 4);
            bits |= s;
        }
    } else if (e == 31) {
        bits = s | 0x7F800000u | (m << 13);
    } else {
        bits = s | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

#include "quants.cuh"

template <int T> static void run(const u8* row, i64 k, std::vector<float>& a, std::vector<float>& b) {
    for (i64 i = 0; i < k; i++) a.push_back(deq<T>(row, i));
    if constexpr (T != T_F32 && T != T_F16) {
        for (i64 sb = 0; sb < k / 32; sb++) {
            int q[8];
            float d[2], m[2];
            q32<T>(row, sb, q, d, m);
            for (int j = 0; j < 32; j++) {
                const int v = (int)(i8)((u32)q[j / 4] >> (8 * (j % 4)));
                b.push_back(d[j / 16] * (float)v + m[j / 16]);
            }
        }
        // Activations as mul_mat.cu's quantize_q8 leaves them: d, int8 values, and the sums of
        // each half's dequantized values.
        for (i64 sb = 0; sb < k / 32; sb++) {
            Q8Y y;
            y.d = 0.0123f;
            y.pad = 0.0f;
            int h[2] = {0, 0};
            for (int j = 0; j < 32; j++) {
                const int v = (int)((sb * 37 + j * 101) % 255) - 127;
                ((i8*)y.q)[j] = (i8)v;
                h[j / 16] += v;
            }
            y.s0 = y.d * (float)h[0];
            y.s1 = y.d * (float)h[1];
            double ref = 0.0;
            for (int j = 0; j < 32; j++) ref += (double)deq<T>(row, sb * 32 + j) * y.d * ((i8*)y.q)[j];
            b.push_back(dot32<T>(row, sb, y));
            b.push_back((float)ref);
        }
    }
}

int main() {
    i32 type, k;
    if (std::fread(&type, 4, 1, stdin) != 1 || std::fread(&k, 4, 1, stdin) != 1) return 2;
    std::vector<u8> row;
    u8 buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) row.insert(row.end(), buf, buf + n);
    std::vector<float> a, b;
    switch (type) {
        case T_F32: run<T_F32>(row.data(), k, a, b); break;
        case T_F16: run<T_F16>(row.data(), k, a, b); break;
        case T_Q4_0: run<T_Q4_0>(row.data(), k, a, b); break;
        case T_Q4_1: run<T_Q4_1>(row.data(), k, a, b); break;
        case T_Q5_0: run<T_Q5_0>(row.data(), k, a, b); break;
        case T_Q5_1: run<T_Q5_1>(row.data(), k, a, b); break;
        case T_Q8_0: run<T_Q8_0>(row.data(), k, a, b); break;
        case T_Q4_K: run<T_Q4_K>(row.data(), k, a, b); break;
        case T_Q5_K: run<T_Q5_K>(row.data(), k, a, b); break;
        case T_Q6_K: run<T_Q6_K>(row.data(), k, a, b); break;
        default: return 3;
    }
    std::fwrite(a.data(), 4, a.size(), stdout);
    std::fwrite(b.data(), 4, b.size(), stdout);
    return 0;
}
