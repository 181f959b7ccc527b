#!/usr/bin/env python3
"""Tokenizer vectors for every `tokenizer.ggml.pre` value, made with llama.cpp's own tokenizer.

For each pre-tokenizer name, writes a copy of a byte-level BPE vocab GGUF (default: the GPT-2 vocab
of llama.cpp's conformance fixtures) with `tokenizer.ggml.pre` set to that name, and runs
`llama-tokenize` on the texts below (llama.cpp's own test texts from the fixture `.inp` plus texts
that reach the other expressions: CJK, kana, Hangul, Greek, combining marks, long digit and space
runs, contractions in capitals, chameleon's sentinels). All texts go through one `llama-tokenize`
call per name, joined by `<|endoftext|>` with special-token parsing on (llama-tokenize's default): llama.cpp splits the text
at special tokens before pre-tokenizing, so each text is tokenized on its own, exactly as a single
call would, and the output is cut at that token.

Usage: scripts/make-pretok-vectors.py LLAMA_TOKENIZE FIXTURES_VOCAB_DIR OUT.json
  (this repo's native-tests/data/pretok-vectors.json was made with llama.cpp's v0.5.0-bundle
  llama-tokenize and shared/fixtures/vocab.) Needs the PyPI `gguf` package.

The output keeps each distinct token list once per text: {"base", "texts", "results":
[[ids…]…] per text, "pre": {name: [index into results[text] …] or null where llama-tokenize
failed}}.
"""
import json
import os
import subprocess
import sys
import tempfile

from gguf import GGUFReader, GGUFValueType, GGUFWriter

# The names llama.cpp's vocab loader accepts for BPE vocabularies (src/llama-vocab.cpp).
PRE_NAMES = """default minicpm5 llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2
jina-v5-nano deepseek-llm deepseek-coder deepseek-v3 spark2_5 youtu falcon mpt starcoder gpt-2 phi-2
jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert jais-2 gemma4
granite-embed-multi-311m sarvam-moe jina-v1-en jina-v2-code roberta-bpe whitespace refact command-r
qwen2 deepseek-r1-qwen kormo f2llmv2 qwen35 stablelm2 olmo dbrx smaug-bpe poro-chat glm4 chatglm-bpe
viking jais tekken smollm codeshell bloom gpt3-finnish exaone exaone4 exaone-moe chameleon minerva-7b
megrez gpt-4o llama4 kanana2 talkie granite-embed-multi-97m tiny_aya cohere2moe superbpe trillion
granite-docling bailingmoe bailingmoe2 llada-moe seed-coder hunyuan hunyuan-dense hy_v4 joyai-llm
kimi-k2 ufakzeka grok-2 afmoe laguna minimax-m2 solar-open mellum2""".split()

EXTRA_TEXTS = [
    "中文测试，你好世界！日本語のテキスト カタカナ ひらがな",
    "한국어 텍스트입니다. ㄱㄴㄷ ㄅㄆㄇ",
    "Ελληνικά κείμενα ΆΈΉ ώ ϋ ΐ",
    "e\u0301te\u0301 cafe\u0301 n\u0303 a\u0308\u0304",
    "1234567890 12 123 1234 12345678901234",
    "I'M HERE. YOU'LL SEE, it'S THEY'RE we'VE I'd",
    "HelloWorld camelCaseWord XMLHttpRequest ÉCOLE École",
    "def f(x):\n\treturn x**2  # comment\r\n\r\n}",
    "a" + " " * 600 + "b" + " " * 7 + "c  \n  d",
    "nbsp\u00a0here\u3000ideographic\u2003em space",
    "<sentinel:12> IMGIMGABCZ tabs\t\tand    four",
    "price: $5.99, 100% (ok) [x] {y} <z> a|b ~c ^d `e`",
    "…。，、।۔، poro-style punctuation… end.",
    "emoji 🦙🦙 mixed中文English123数字",
    "ﬁ ligature Ａｂｃ fullwidth ＡＢＣ １２３",
    "   leading and trailing spaces   ",
    "line1\nline2\n\n\nline3\r\nend\n",
]

SEP = "<|endoftext|>"


def fixture_texts(vocab_dir):
    with open(os.path.join(vocab_dir, "ggml-vocab-gpt-2.gguf.inp"), encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    return texts


def copy_with_pre(reader, path, pre):
    arch = reader.fields["general.architecture"].contents()
    w = GGUFWriter(path, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == GGUFValueType.ARRAY else None
        val = pre if name == "tokenizer.ggml.pre" else field.contents()
        w.add_key_value(name, val, vtype, sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    tokenize, vocab_dir, out = sys.argv[1:4]
    base = "ggml-vocab-gpt-2.gguf"
    reader = GGUFReader(os.path.join(vocab_dir, base))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    sep_id = tokens.index(SEP)
    texts = fixture_texts(vocab_dir) + EXTRA_TEXTS
    assert all(SEP not in t for t in texts)
    joined = SEP.join(texts)
    results = [[] for _ in texts]
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        prompt = os.path.join(tmp, "prompt.txt")
        with open(prompt, "w", encoding="utf-8") as f:
            f.write(joined)
        for pre in PRE_NAMES:
            model = os.path.join(tmp, "vocab.gguf")
            copy_with_pre(reader, model, pre)
            r = subprocess.run(
                [tokenize, "-m", model, "-f", prompt, "--no-escape", "--ids", "--no-bos",
                 "--log-disable"],
                capture_output=True, text=True)
            if r.returncode != 0:
                # "whitespace" expects llama.cpp's `whitespace` tokenizer model; on a gpt2 vocab
                # llama.cpp aborts (GGML_ASSERT on a space inside a merge candidate).
                print(f"{pre}: llama-tokenize failed, left out", file=sys.stderr)
                table[pre] = None
                continue
            line = [l for l in r.stdout.splitlines() if l.startswith("[")][-1]
            ids = json.loads(line)
            per_text = [[]]
            for t in ids:
                if t == sep_id:
                    per_text.append([])
                else:
                    per_text[-1].append(t)
            assert len(per_text) == len(texts), (pre, len(per_text))
            idx = []
            for k, got in enumerate(per_text):
                if got not in results[k]:
                    results[k].append(got)
                idx.append(results[k].index(got))
            table[pre] = idx
            print(f"{pre}: {len(ids)} ids", file=sys.stderr)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"base": base, "texts": texts, "results": results, "pre": table}, f,
                  ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
