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


# Small templates, one construct each (rendered with `messages` = SNIPPET_MESSAGES).
SNIPPET_MESSAGES = [m("system", "S"), m("user", "Hello, World"), m("assistant", " x ")]
SNIPPETS = [
    "{% for x in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}",
    "{% for x in messages if x.role != 'system' %}{{ loop.index }}:{{ x.role }} {% else %}none{% endfor %}",
    "{% for x in [] %}a{% else %}empty{% endfor %}",
    "{% for x in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}{{ x.role }}{% endfor %}",
    "{% for x in messages %}{% if x.role == 'user' %}{% continue %}{% endif %}{{ x.role }}{% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% for x in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ x.role[0] %}{% endfor %}{{ ns.n }}{{ ns.s }}",
    "{% set a = 1 %}{% for x in messages %}{% set a = 2 %}{% endfor %}{{ a }}",
    "{{ messages[::-1] | map(attribute='role') | join(',') }}|{{ messages[1:] | length }}|{{ messages[-1].role }}|{{ 'abcdef'[1:4] }}{{ 'abcdef'[::2] }}{{ 'abc'[-1] }}",
    "{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}{{ ' x '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n a'.lstrip() }}|{{ 'a\\n'.rstrip('\\n') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'aaa'.replace('a', 'bb') }}",
    "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'b' in 'abc' }}{{ 'role' in messages[0] }}{{ 'x' not in ['x'] }}",
    "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 4 / 2 }} {{ 'a' ~ 1 ~ none ~ true }}",
    "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ not 0 }}{{ 0 or 'x' }}{{ '' and 'y' }}{{ none }}{{ [1, 'a', none, true, 1.5] }}{{ {'a': [1, {'b': 'c'}]} }}",
    "{{ x is defined }}{{ messages is defined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ messages[0] is mapping }}{{ messages is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ x is not defined }}{{ 1 is integer }}{{ 1.0 is float }}{{ false is false }}",
    "{{ messages | tojson }}|{{ {'a': 'é\\n\"', 'b': [1, 2.5, true, none]} | tojson }}|{{ messages[0] | tojson(indent=2) }}|{{ [] | tojson(indent=4) }}",
    "{{ ' pad ' | trim }}|{{ x | default('dflt') }}|{{ '' | default('e', true) }}|{{ messages | first | tojson }}|{{ 'abc' | last }}|{{ 'Hi' | upper }}{{ 'Hi' | lower }}|{{ [3, 1] | join('-') }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}",
    "{% for k, v in messages[0] | items %}{{ k }}={{ v }};{% endfor %}{% for k, v in messages[1].items() %}{{ k }}:{{ v }};{% endfor %}{{ messages[0].keys() | list }}{{ messages[0].get('nope', 'd') }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join }}{{ [1, 0, 2] | select | list }}{{ ['a', 'a', 'b'] | unique | list }}",
    "{% macro turn(role, content='-') %}<{{ role }}>{{ content | trim }}</{{ role }}>{% endmacro %}{{ turn('a') }}{{ turn('b', content=' c ') }}{% for x in messages %}{{ turn(x.role, x.content) }}{% endfor %}",
    "{{ 'yes' if messages else 'no' }}{{ 'y' if 0 }}|{{ (1, 2) | list }}{{ (1,)[0] }}{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ [1, 2] + [3] }}{{ 'ab' * 3 }}{{ messages | length - 1 }}{{ -1 | abs }}",
    "{%- set s -%}\n  block {{ 1 }}\n{%- endset -%}\n[{{ s }}]{# a comment #}\n  {%- if true %}\n    kept\n  {% endif %}\n{%+ if true %}+{% endif %}\n   {{- ' tight ' -}}   \n\nend",
    "line\n    {% if true %}\n        in\n    {% endif %}\n  {# c #}\ntail {{ 'v' }}\n{% for x in messages %}\n  - {{ x.role }}\n{% endfor %}",
    "{{ \"dq 'in'\" }}{{ 'sq \\'esc\\' \\\\ \\t|' }}{{ 'a' 'b' }}{{ 'u\\u00e9x\\x41' }}{{ '{{ not }}' }}{{ '%}' }}",
    "{% if messages[0].role == 'user' %}u{% elif messages[0].role == 'system' %}s{% else %}o{% endif %}{% if messages[5] is defined %}d{% endif %}{{ messages[9] }}{{ messages[0].nope }}{{ none.x }}",
    "{{ raise_exception('custom ' ~ messages | length) }}",
    "{{ undefined_name.attr }}",
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
    snippets = []
    for text in SNIPPETS:
        case = {"template": text}
        try:
            case["expected"] = env.from_string(text).render(messages=SNIPPET_MESSAGES)
        except Raised as e:
            case["raises"] = str(e)
        except jinja2.exceptions.UndefinedError as e:
            case["error"] = str(e)
        snippets.append(case)
    with open(os.path.join(ROOT, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump({"messages": SNIPPET_MESSAGES, "cases": snippets}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    path = os.path.join(ROOT, "vectors.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {sum(len(x['cases']) for x in out)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
