#!/usr/bin/env python3
"""Micro tokenizer.json files as seeds for the `tokenizer_template` fuzz target, one per kind of tokenizer that HF
models ship: byte-level BPE with merges (GPT-2, SmolLM2), with a regex `Split` first (Llama 3, Qwen2), SentencePiece
BPE with byte fallback (Llama 2, by normalizer or by `Metaspace`), Unigram (T5) and WordPiece (BERT); with added
and special tokens, normalizers and post-processors. Each is a few hundred bytes to a few KB, so libFuzzer mutates
whole tokenizers at thousands of executions per second (the template seeds of `seed_llm.sh` carry 10–20 KB
templates, whose rendering held the target at ~300 exec/s). Each tokenizer is written alone, and once followed by
a 0 byte and a short ChatML template. Standard library only:

    python3 fuzz/micro_tokenizers.py fuzz/corpus/tokenizer_micro
"""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def bytes_to_unicode():
    """GPT-2's byte → printable character table (what ByteLevel maps bytes through)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


BYTE_CHARS = bytes_to_unicode()


def added(tokens, first_id):
    return [
        {"id": first_id + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, t in enumerate(tokens)
    ]


def byte_level_bpe(merges_as_pairs):
    vocab = {c: i for i, c in enumerate(BYTE_CHARS)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"),
              ("H", "e"), ("l", "l"), ("He", "ll"), ("Hell", "o")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added(specials, len(vocab)),
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [[a, b] for a, b in merges] if merges_as_pairs else [f"{a} {b}" for a, b in merges]},
    }


def split_bpe():
    """Llama 3 / Qwen2: a regex split, then ByteLevel without its own regex; BOS by a template processor."""
    t = byte_level_bpe(True)
    t["normalizer"] = {"type": "NFC"}
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    bos = "<|endoftext|>"
    t["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {bos: {"id": bos, "ids": [t["added_tokens"][0]["id"]], "tokens": [bos]}}}]}
    return t


def sentencepiece_bpe(metaspace):
    """Llama 2 / Mistral: ▁ for spaces, byte fallback tokens <0x00>..<0xFF>, <s> prepended by the processor."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "w"), ("o", "r"), ("l", "d"), ("▁w", "or"), ("H", "e"),
              ("l", "l"), ("He", "ll")]
    for ch in "▁thewordlHo,!":
        vocab.setdefault(ch, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    t = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict(a, id=i) for i, a in enumerate(added(["<unk>", "<s>", "</s>"], 0))],
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    if metaspace:
        t["normalizer"] = None
        t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        t["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    else:
        t["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        t["pre_tokenizer"] = None
        t["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return t


def unigram():
    pieces = [["<unk>", 0.0], ["</s>", 0.0], ["▁", -2.0], ["▁the", -3.0], ["▁world", -4.0], ["He", -5.0],
              ["llo", -5.5], [",", -3.5], ["!", -3.6]]
    pieces += [[c, -8.0 - i * 0.1] for i, c in enumerate("abcdefghijklmnopqrstuvwxyzHW")]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict(a, id=i) for i, a in zip([0, 1], added(["<unk>", "</s>"], 0))],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                          "split": True}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 0}}],
                           "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": pieces, "byte_fallback": False},
    }


def wordpiece():
    vocab = {t: i for i, t in enumerate(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", ",", "world", "!", "the", "##s", "##ing", "un", "##ico", "##de"])}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict(a, id=i) for i, a in enumerate(added(["[PAD]", "[UNK]", "[CLS]", "[SEP]"], 0))],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }


def mixed_pre_tokenizers():
    """Pre-tokenizers and normalizers the other seeds lack, over a byte-level BPE."""
    t = byte_level_bpe(False)
    t["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True,
                                                                          "strip_right": True}]}
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, {"type": "Punctuation", "behavior": "Isolated"},
        {"type": "Whitespace"}, {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                 "use_regex": False}]}
    return t


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

seeds = {
    "bpe-bytelevel": byte_level_bpe(False),
    "bpe-bytelevel-pairs": byte_level_bpe(True),
    "bpe-split-regex": split_bpe(),
    "spm-bpe-normalizer": sentencepiece_bpe(False),
    "spm-bpe-metaspace": sentencepiece_bpe(True),
    "unigram": unigram(),
    "wordpiece": wordpiece(),
    "bpe-mixed-pre": mixed_pre_tokenizers(),
}
for name, t in seeds.items():
    text = json.dumps(t, ensure_ascii=False, separators=(",", ":")).encode()
    (out / name).write_bytes(text)
    (out / f"{name}-chatml").write_bytes(text + b"\0" + CHATML.encode())
print(f"{out}: {2 * len(seeds)} files")
