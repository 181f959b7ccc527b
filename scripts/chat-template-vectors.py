#!/usr/bin/env python3
"""Reference renderings of real chat templates, as transformers renders them, for
native-tests/tests/chat_template.rs (which asserts ggweb's interpreter gives the same bytes).

    pip install jinja2 && python3 scripts/chat-template-vectors.py

Templates (native-tests/data/chat/templates/, the models' `chat_template` text as published):
  smollm2, qwen2.5-coder   tokenizer.chat_template of the GGUFs scripts/fetch-models.sh fetches
  phi3 (Phi-3-mini), qwen2 tokenizer.chat_template of llama.cpp's ggml-vocab-{phi-3,qwen2}.gguf
  gemma3                   google/gemma-3 tokenizer_config.json's chat_template
  qwen3, llama3.2, phi3.5, gemma2
                           llama.cpp's models/templates/{Qwen-Qwen3-0.6B, meta-llama-Llama-3.2-3B-
                           Instruct, microsoft-Phi-3.5-mini-instruct, google-gemma-2-2b-it}.jinja

The environment is transformers' (`render_jinja_template`): an ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, its `tojson` filter and `raise_exception`; `tools` and
`documents` are None; the special tokens are passed as `bos_token`/`eos_token`. One difference:
transformers' `strftime_now` global is left out (ggweb has no clock in wasm), so Llama 3.2's
template writes its own fallback date, as it does under ggweb.
"""
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "native-tests", "data", "chat")

# name: (bos_token, eos_token) as the models' tokenizers (and GGUFs) have them; None: absent.
FAMILIES = {
    "smollm2": ("<|im_start|>", "<|im_end|>"),
    "qwen2.5-coder": (None, "<|im_end|>"),
    "qwen2": (None, "<|endoftext|>"),
    "qwen3": (None, "<|im_end|>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "phi3.5": ("<s>", "<|endoftext|>"),
    "gemma3": ("<bos>", "<eos>"),
    "gemma2": ("<bos>", "<eos>"),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
}


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    ([m("user", "What is the capital of France?")], True),
    ([m("user", "What is the capital of France?")], False),
    ([m("system", "You are a terse assistant."), m("user", "Hi there")], True),
    (
        [
            m("system", "Answer in French."),
            m("user", "Hello!"),
            m("assistant", "Bonjour !"),
            m("user", "How are you?"),
        ],
        True,
    ),
    ([m("user", "Tell me a joke."), m("assistant", "Why did the chicken cross the road?")], False),
    (
        [
            m("user", "  spaced\n\ttext  "),
            m("assistant", " ok \n"),
            m("user", "Ünïcödé 🙂 \"quotes\" 'single' {{ not a tag }} {% neither %}"),
        ],
        True,
    ),
    (
        [
            m("user", "2+2?"),
            m("assistant", "<think>\nadd them\n</think>\n\n4"),
            m("user", "and 3+3?"),
        ],
        True,
    ),
    ([m("user", "a"), m("user", "b")], True),
    ([m("system", "only a system prompt")], True),
    ([], True),
]


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    out = []
    for name, (bos, eos) in FAMILIES.items():
        with open(os.path.join(ROOT, "templates", name + ".jinja"), encoding="utf-8") as f:
            template = env.from_string(f.read())
        cases = []
        for messages, gen in CONVERSATIONS:
            kw = {"messages": messages, "add_generation_prompt": gen, "tools": None, "documents": None}
            if bos is not None:
                kw["bos_token"] = bos
            if eos is not None:
                kw["eos_token"] = eos
            case = {"messages": messages, "add_generation_prompt": gen}
            try:
                case["expected"] = template.render(**kw)
            except Raised as e:
                case["raises"] = str(e)
            except jinja2.exceptions.UndefinedError as e:
                case["error"] = str(e)
            cases.append(case)
        out.append({"name": name, "bos_token": bos, "eos_token": eos, "cases": cases})
    path = os.path.join(ROOT, "vectors.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {sum(len(x['cases']) for x in out)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
