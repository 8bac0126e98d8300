#!/usr/bin/env python3
"""Renders chat templates with Python jinja2 exactly as HF transformers' `apply_chat_template` does, as outside
truth for crate/tests/llm_template.rs.

Usage: python3 scripts/gen_template_cases.py TEMPLATES_DIR testdata/templates
TEMPLATES_DIR is `vendor/llama.cpp/models/templates` of the llama-cpp-python 0.3.36 sdist (MIT): every `*.jinja`
there is copied to the output with `<name>.expected.txt` (the rendering) or `<name>.error.txt` (jinja2 refused it).

The environment is transformers' `_compile_jinja_template`: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols, generation-tag]), filter `tojson` = json.dumps(ensure_ascii=False,
indent, separators, sort_keys=False), globals `raise_exception` and `strftime_now`. `strftime_now` is pinned to
FIXED_NOW so the output is reproducible; the Rust test pins the same instant. The render arguments are those of
`render_jinja_template`: messages, tools=None, documents=None, add_generation_prompt, bos_token, eos_token.
Written with jinja2 3.1.6.
"""
import json
import os
import shutil
import sys
from datetime import datetime, timezone

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# 2025-01-15 10:30:00 UTC, also in crate/tests/llm_template.rs.
FIXED_NOW = datetime(2025, 1, 15, 10, 30, 0, tzinfo=timezone.utc)

MESSAGES = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Germany? Answer in one word, then explain \"why\" briefly."},
]


class GenerationTag(Extension):
    """transformers' AssistantTracker without the tracking: `{% generation %}...{% endgeneration %}` renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_all(src, out, messages, tools, copy=False):
    """Renders every `*.jinja` of `src` for `messages` (and `tools`) into `out`: `<name>.expected.txt`, or
    `<name>.error.txt` when jinja2 refuses it (the Rust side must refuse it too). `copy` also copies the template."""
    os.makedirs(out, exist_ok=True)
    env = environment()
    summary = {"rendered": 0, "errors": 0}
    for name in sorted(os.listdir(src)):
        if not name.endswith(".jinja"):
            continue
        stem = name[: -len(".jinja")]
        if copy:
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
        with open(os.path.join(src, name), encoding="utf-8") as f:
            source = f.read()
        try:
            text = env.from_string(source).render(
                messages=messages, tools=tools, documents=None, add_generation_prompt=True,
                bos_token="<s>", eos_token="</s>")
            path, summary["rendered"] = os.path.join(out, stem + ".expected.txt"), summary["rendered"] + 1
        except Exception as e:  # jinja2 refused the template or the conversation
            text = "%s: %s" % (type(e).__name__, e)
            path, summary["errors"] = os.path.join(out, stem + ".error.txt"), summary["errors"] + 1
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print(summary)


def main():
    render_all(sys.argv[1], sys.argv[2], MESSAGES, None, copy=True)


if __name__ == "__main__":
    main()
