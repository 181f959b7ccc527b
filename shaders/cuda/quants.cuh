// GGUF block types, read from bytes (blocks are not aligned: q4_0 is 18 bytes, ...). Layouts
// and rounding follow ggml's dequantize_row_*, as shaders/quants.wgsl (tested on WebGPU).
// Type ids are GGUF's.
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14

__device__ __forceinline__ u32 rb(const u8* p, i64 o) { return p[o]; }
__device__ __forceinline__ float rh(const u8* p, i64 o) { return h2f((u16)(p[o] | (p[o + 1] << 8))); }
__device__ __forceinline__ int ri8(const u8* p, i64 o) { return (int)(i8)p[o]; }

// get_scale_min_k4 of ggml: 6-bit scale and min of sub-block s (0..7) from the 12 bytes at sc.
__device__ __forceinline__ void scale_min_k4(const u8* sc, int s, float* d, float* m) {
    if (s < 4) {
        *d = (float)(sc[s] & 63);
        *m = (float)(sc[s + 4] & 63);
    } else {
        *d = (float)((sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4));
        *m = (float)((sc[s + 4] >> 4) | ((sc[s] >> 6) << 4));
    }
}

// Element k of the row of type T that starts at `row`.
template <int T> __device__ __forceinline__ float deq(const u8* row, i64 k) {
    if constexpr (T == T_F32) {
        return ((const float*)row)[k];
    } else if constexpr (T == T_F16) {
        return h2f(((const u16*)row)[k]);
    } else if constexpr (T == T_Q4_0) {
        const u8* b = row + (k >> 5) * 18;
        const int j = k & 31;
        const u32 q = b[2 + (j & 15)];
        const u32 v = j >= 16 ? q >> 4 : q & 15;
        return ((float)v - 8.0f) * rh(b, 0);
    } else if constexpr (T == T_Q4_1) {
        const u8* b = row + (k >> 5) * 20;
        const int j = k & 31;
        const u32 q = b[4 + (j & 15)];
        const u32 v = j >= 16 ? q >> 4 : q & 15;
        return (float)v * rh(b, 0) + rh(b, 2);
    } else if constexpr (T == T_Q5_0) {
        const u8* b = row + (k >> 5) * 22;
        const int j = k & 31;
        const u32 h = (b[2 + (j >> 3)] >> (j & 7)) & 1;
        const u32 q = b[6 + (j & 15)];
        const u32 v = (j >= 16 ? q >> 4 : q & 15) | (h << 4);
        return ((float)v - 16.0f) * rh(b, 0);
    } else if constexpr (T == T_Q5_1) {
        const u8* b = row + (k >> 5) * 24;
        const int j = k & 31;
        const u32 h = (b[4 + (j >> 3)] >> (j & 7)) & 1;
        const u32 q = b[8 + (j & 15)];
        const u32 v = (j >= 16 ? q >> 4 : q & 15) | (h << 4);
        return (float)v * rh(b, 0) + rh(b, 2);
    } else if constexpr (T == T_Q8_0) {
        const u8* b = row + (k >> 5) * 34;
        return (float)ri8(b, 2 + (k & 31)) * rh(b, 0);
    } else if constexpr (T == T_Q4_K) {
        const u8* b = row + (k >> 8) * 144;
        const int e = k & 255, s = e >> 5, l = e & 31;
        const u32 q = b[16 + 32 * (s >> 1) + l];
        const u32 v = (s & 1) ? q >> 4 : q & 15;
        float sc, mn;
        scale_min_k4(b + 4, s, &sc, &mn);
        return rh(b, 0) * sc * (float)v - rh(b, 2) * mn;
    } else if constexpr (T == T_Q5_K) {
        const u8* b = row + (k >> 8) * 176;
        const int e = k & 255, s = e >> 5, l = e & 31;
        const u32 q = b[48 + 32 * (s >> 1) + l];
        const u32 h = (b[16 + l] >> s) & 1;
        const u32 v = ((s & 1) ? q >> 4 : q & 15) + 16 * h;
        float sc, mn;
        scale_min_k4(b + 4, s, &sc, &mn);
        return rh(b, 0) * sc * (float)v - rh(b, 2) * mn;
    } else {
        static_assert(T == T_Q6_K, "unknown type");
        const u8* b = row + (k >> 8) * 210;
        const int e = k & 255, n = e >> 7, w = e & 127, qt = w >> 5, l = w & 31;
        const u32 ql = b[64 * n + l + 32 * (qt & 1)];
        const u32 lo = qt >= 2 ? ql >> 4 : ql & 15;
        const u32 h = (b[128 + 32 * n + l] >> (2 * qt)) & 3;
        const int q = (int)(lo | (h << 4)) - 32;
        const int sc = ri8(b, 192 + 8 * n + (l >> 4) + 2 * qt);
        return rh(b, 208) * (float)sc * (float)q;
    }
}

// 32 activations as int8: value j is d * q[j]; s0, s1 are the sums of the dequantized values of
// elements 0..15 and 16..31 (for the weights' minimum terms).
struct Q8Y {
    float d, s0, s1, pad;
    int q[8];
};
// Q8Y_BYTES in backend/cuda/plan.rs.
static_assert(sizeof(Q8Y) == 48, "Q8Y layout");

// Sub-block `sb` (elements 32*sb .. 32*sb + 31) of a quantized row as integers: element j is
// d[j / 16] * q[j] + m[j / 16], with q[j] an int8 packed four to an int (element 4i in the low
// byte of q[i]). Every type above except f32/f16 fits this form, so one dp4a dot serves all.
template <int T> __device__ __forceinline__ void q32(const u8* row, i64 sb, int* q, float* d, float* m) {
    u8 v[32];
    if constexpr (T == T_Q4_0 || T == T_Q4_1) {
        const int bs = T == T_Q4_0 ? 18 : 20, qo = T == T_Q4_0 ? 2 : 4;
        const u8* b = row + sb * bs;
        const int off = T == T_Q4_0 ? 8 : 0;
        for (int j = 0; j < 16; j++) {
            v[j] = (u8)((b[qo + j] & 15) - off);
            v[j + 16] = (u8)((b[qo + j] >> 4) - off);
        }
        d[0] = d[1] = rh(b, 0);
        m[0] = m[1] = T == T_Q4_1 ? rh(b, 2) : 0.0f;
    } else if constexpr (T == T_Q5_0 || T == T_Q5_1) {
        const int bs = T == T_Q5_0 ? 22 : 24, ho = T == T_Q5_0 ? 2 : 4, qo = ho + 4;
        const u8* b = row + sb * bs;
        const u32 qh = b[ho] | (b[ho + 1] << 8) | (b[ho + 2] << 16) | ((u32)b[ho + 3] << 24);
        const int off = T == T_Q5_0 ? 16 : 0;
        for (int j = 0; j < 16; j++) {
            v[j] = (u8)(((b[qo + j] & 15) | (((qh >> j) & 1) << 4)) - off);
            v[j + 16] = (u8)(((b[qo + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off);
        }
        d[0] = d[1] = rh(b, 0);
        m[0] = m[1] = T == T_Q5_1 ? rh(b, 2) : 0.0f;
    } else if constexpr (T == T_Q8_0) {
        const u8* b = row + sb * 34;
        for (int j = 0; j < 32; j++) v[j] = b[2 + j];
        d[0] = d[1] = rh(b, 0);
        m[0] = m[1] = 0.0f;
    } else if constexpr (T == T_Q4_K || T == T_Q5_K) {
        const int bs = T == T_Q4_K ? 144 : 176, qo = T == T_Q4_K ? 16 : 48;
        const u8* b = row + (sb >> 3) * bs;
        const int s = sb & 7;
        for (int l = 0; l < 32; l++) {
            const u32 x = b[qo + 32 * (s >> 1) + l];
            u32 n = (s & 1) ? x >> 4 : x & 15;
            if constexpr (T == T_Q5_K) n += 16 * ((b[16 + l] >> s) & 1);
            v[l] = (u8)n;
        }
        float sc, mn;
        scale_min_k4(b + 4, s, &sc, &mn);
        d[0] = d[1] = rh(b, 0) * sc;
        m[0] = m[1] = -rh(b, 2) * mn;
    } else {
        static_assert(T == T_Q6_K, "no integer form");
        const u8* b = row + (sb >> 3) * 210;
        const int s = sb & 7, n = s >> 2, qt = s & 3;
        for (int l = 0; l < 32; l++) {
            const u32 ql = b[64 * n + l + 32 * (qt & 1)];
            const u32 lo = qt >= 2 ? ql >> 4 : ql & 15;
            const u32 h = (b[128 + 32 * n + l] >> (2 * qt)) & 3;
            v[l] = (u8)((int)(lo | (h << 4)) - 32);
        }
        const float dd = rh(b, 208);
        d[0] = dd * (float)ri8(b, 192 + 8 * n + 2 * qt);
        d[1] = dd * (float)ri8(b, 192 + 8 * n + 1 + 2 * qt);
        m[0] = m[1] = 0.0f;
    }
    for (int i = 0; i < 8; i++) {
        q[i] = (int)((u32)v[4 * i] | ((u32)v[4 * i + 1] << 8) | ((u32)v[4 * i + 2] << 16) | ((u32)v[4 * i + 3] << 24));
    }
}

// Dot product of sub-block `sb` of a quantized row with 32 q8 activations: dp4a over each half,
// scaled, plus the weights' minimum terms (the inner step of mat_vec).
template <int T> __device__ __forceinline__ float dot32(const u8* row, i64 sb, const Q8Y& y) {
    int q[8];
    float d[2], m[2];
    q32<T>(row, sb, q, d, m);
    int s0 = 0, s1 = 0;
    for (int t = 0; t < 4; t++) s0 = dp4a(q[t], y.q[t], s0);
    for (int t = 4; t < 8; t++) s1 = dp4a(q[t], y.q[t], s1);
    return y.d * (d[0] * (float)s0 + d[1] * (float)s1) + m[0] * y.s0 + m[1] * y.s1;
}
