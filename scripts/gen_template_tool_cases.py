#!/usr/bin/env python3
"""Renders the chat templates of testdata/templates with tools, as HF transformers' `apply_chat_template(messages,
tools=TOOLS)` does (the environment of gen_template_cases.py, jinja2 3.1.6): outside truth for the tool calls of
crate/tests/llm_template.rs. The conversation has a tool call (arguments as a dict, transformers' convention) and
its result; the tools are two JSON-Schema functions.

Usage: python3 scripts/gen_template_tool_cases.py testdata/templates
Writes testdata/templates/tools/<name>.expected.txt (the rendering) or <name>.error.txt (jinja2 refused it).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_template_cases import environment  # noqa: E402

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city now.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city's name."},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a time zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}},
]

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant with tools."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21}"},
    {"role": "user", "content": "And the time there?"},
]


def main():
    src = sys.argv[1]
    out = os.path.join(src, "tools")
    os.makedirs(out, exist_ok=True)
    env = environment()
    summary = {"rendered": 0, "errors": 0}
    for name in sorted(os.listdir(src)):
        if not name.endswith(".jinja"):
            continue
        stem = name[: -len(".jinja")]
        with open(os.path.join(src, name), encoding="utf-8") as f:
            source = f.read()
        try:
            text = env.from_string(source).render(
                messages=MESSAGES, tools=TOOLS, documents=None, add_generation_prompt=True,
                bos_token="<s>", eos_token="</s>")
            path, summary["rendered"] = os.path.join(out, stem + ".expected.txt"), summary["rendered"] + 1
        except Exception as e:
            text = "%s: %s" % (type(e).__name__, e)
            path, summary["errors"] = os.path.join(out, stem + ".error.txt"), summary["errors"] + 1
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print(summary)


if __name__ == "__main__":
    main()
