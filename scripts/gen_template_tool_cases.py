#!/usr/bin/env python3
"""Renders the chat templates of testdata/templates with tools, as HF transformers' `apply_chat_template(messages,
tools=TOOLS)` does (the environment of gen_template_cases.py, jinja2 3.1.6): outside truth for the tool calls of
crate/tests/llm_template.rs. The conversation has a tool call (arguments as a dict, transformers' convention) and
its result; the tools are two JSON-Schema functions.

Usage: python3 scripts/gen_template_tool_cases.py testdata/templates
Writes testdata/templates/tools/<name>.expected.txt (the rendering) or <name>.error.txt (jinja2 refused it), and
conversation.json (the messages and tools the test renders).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_template_cases import render_all  # noqa: E402

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
    out = os.path.join(sys.argv[1], "tools")
    os.makedirs(out, exist_ok=True)
    # The conversation and tools themselves, for the Rust test to render the same.
    with open(os.path.join(out, "conversation.json"), "w", encoding="utf-8") as f:
        json.dump({"messages": MESSAGES, "tools": TOOLS}, f, indent=1)
        f.write("\n")
    render_all(sys.argv[1], out, MESSAGES, TOOLS)


if __name__ == "__main__":
    main()
