#!/usr/bin/env python3
"""Expected ids for the tiny-llama byte tokenizer, from HF `tokenizers` (outside truth for crate/tests/llm_tokenizer.rs).

Usage: python3 scripts/gen_tokenizer_cases.py ../shared/golden/tiny-llama/tokenizer.json testdata/llm/tiny_llama_tokenizer_cases.json
Needs `pip install tokenizers` (written with 0.23.x). The strings are those of the SmolLM2 cases plus a few more.
"""
import json
import sys

from tokenizers import Tokenizer

TEXTS = [
    "Hello world",
    " leading space",
    "trailing space ",
    "12345 and 3.14159",
    "tabs\tand\nnewlines\r\n",
    "Ünïcödé façade naïve",
    "Привет, мир",
    "日本語のテキスト",
    "emoji 👋🏽 and 🦙",
    "def f(x):\n    return x ** 2",
    "don't can't I'm we'll",
    "",
    " ",
    "   \n\n  ",
]

tok = Tokenizer.from_file(sys.argv[1])
cases = []
for text in TEXTS:
    ids = tok.encode(text, add_special_tokens=False).ids
    cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
with open(sys.argv[2], "w") as f:
    json.dump({"reference": "HF tokenizers %s, encode(text, add_special_tokens=False)" % __import__("tokenizers").__version__,
               "cases": cases}, f, ensure_ascii=False, indent=1)
    f.write("\n")
