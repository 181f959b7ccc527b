// Reference dumper (ours, not part of the library): runs a GGUF with llama.cpp's C API and writes
// what the parity tests compare against. Build and usage: scripts/llama-ref/build.sh.
//
//   llama_logits MODEL PROMPT N_GEN OUT_PREFIX [TOPK]
//
// PROMPT "ids:1,2,3" gives token ids directly; otherwise the prompt is tokenized with the model's add_bos setting and special tokens parsed, evaluated in
// one llama_decode with every position's logits on, then N_GEN tokens are generated greedily one at
// a time. Writes OUT_PREFIX.json (ids, per-position argmax / logsumexp / top-k, greedy ids with
// each step's top-2 gap), OUT_PREFIX.last.f16 (the last prompt position's logits, IEEE half,
// little-endian) and OUT_PREFIX.all.f32 (all prompt positions, row-major; for local checks only).
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

static uint16_t to_half(float f) {
    // Round-to-nearest-even f32 -> f16 (finite logits only).
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

struct Stats {
    int argmax;
    double lse;
    float gap;  // top-1 minus top-2 logit
    std::vector<int> top;
};

static Stats stats(const float *l, int n, int k) {
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
        return l[a] > l[b] || (l[a] == l[b] && a < b);
    });
    double m = l[idx[0]], s = 0;
    for (int i = 0; i < n; i++) s += std::exp((double)l[i] - m);
    Stats st;
    st.argmax = idx[0];
    st.lse = m + std::log(s);
    st.gap = l[idx[0]] - l[idx[1]];
    st.top.assign(idx.begin(), idx.begin() + k);
    return st;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s MODEL PROMPT N_GEN OUT_PREFIX [TOPK]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    std::string prompt = argv[2];
    int n_gen = std::atoi(argv[3]);
    std::string out = argv[4];
    int topk = argc > 5 ? std::atoi(argv[5]) : 32;

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) return 1;
    const llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<llama_token> ids;
    if (prompt.rfind("ids:", 0) == 0) {
        // Token ids given directly (the random-weight fixtures have no tokenizer).
        const char *p = prompt.c_str() + 4;
        while (*p) {
            char *end;
            ids.push_back((llama_token)std::strtol(p, &end, 10));
            p = *end == ',' ? end + 1 : end;
            if (end == p && *p) return 2;
        }
    } else {
        ids.resize(prompt.size() + 8);
        int nt = llama_tokenize(vocab, prompt.data(), (int)prompt.size(), ids.data(), (int)ids.size(),
                                /*add_special*/ true, /*parse_special*/ true);
        if (nt < 0) return 1;
        ids.resize(nt);
    }
    int n = (int)ids.size();

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    // LLAMA_REF_NO_FA=1: flash attention off, to measure llama.cpp's own spread.
    if (std::getenv("LLAMA_REF_NO_FA")) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) return 1;

    FILE *fa = std::fopen((out + ".all.f32").c_str(), "wb");
    FILE *fj = std::fopen((out + ".json").c_str(), "w");
    std::fprintf(fj, "{\n \"model\": \"%s\",\n \"n_vocab\": %d,\n \"topk\": %d,\n \"prompt_ids\": [", path, n_vocab, topk);
    for (int i = 0; i < n; i++) std::fprintf(fj, "%s%d", i ? ", " : "", ids[i]);
    std::fprintf(fj, "],\n \"positions\": [\n");
    for (int i = 0; i < n; i++) {
        const float *l = llama_get_logits_ith(ctx, i);
        std::fwrite(l, sizeof(float), n_vocab, fa);
        Stats st = stats(l, n_vocab, topk);
        std::fprintf(fj, "  {\"argmax\": %d, \"gap\": %.9g, \"lse\": %.17g, \"top\": [", st.argmax, st.gap, st.lse);
        for (int j = 0; j < topk; j++)
            std::fprintf(fj, "%s[%d, %.9g]", j ? ", " : "", st.top[j], l[st.top[j]]);
        std::fprintf(fj, "]}%s\n", i + 1 < n ? "," : "");
        if (i == n - 1) {
            std::vector<uint16_t> h(n_vocab);
            for (int v = 0; v < n_vocab; v++) h[v] = to_half(l[v]);
            FILE *fl = std::fopen((out + ".last.f16").c_str(), "wb");
            std::fwrite(h.data(), 2, n_vocab, fl);
            std::fclose(fl);
        }
    }
    std::fclose(fa);
    std::fprintf(fj, " ],\n \"greedy\": [");
    llama_batch one = llama_batch_init(1, 0, 1);
    Stats st = stats(llama_get_logits_ith(ctx, n - 1), n_vocab, 2);
    for (int g = 0; g < n_gen; g++) {
        llama_token t = st.argmax;
        std::fprintf(fj, "%s[%d, %.9g]", g ? ", " : "", t, st.gap);
        if (g + 1 == n_gen) break;
        one.token[0] = t;
        one.pos[0] = n + g;
        one.n_seq_id[0] = 1;
        one.seq_id[0][0] = 0;
        one.logits[0] = 1;
        one.n_tokens = 1;
        if (llama_decode(ctx, one) != 0) return 1;
        st = stats(llama_get_logits_ith(ctx, 0), n_vocab, 2);
    }
    std::fprintf(fj, "]\n}\n");
    std::fclose(fj);
    llama_batch_free(one);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
