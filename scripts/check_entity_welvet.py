#!/usr/bin/env python3
"""Checks transformer .entity files against Loom itself (welvet 0.80.0, `pip install welvet==0.80.0`).

    check_entity_welvet.py [--prompt 72,101,108] [--greedy N] FILE.entity...

For every file: Loom's `LoadEntityTransformer` and `DeserializeEntity` must accept it (exit 1 otherwise).
For a float32 file (`weight_dtype: "float32"`) Loom also runs the prompt on its CPU decoder (the queued CPU
forward of `LoadEntityTransformerAs`, which ends with Loom's final RMSNorm), the LM head is applied here as Loom
does (f64 sums of hidden·row), and greedy ids follow by re-running the whole sequence. Loom's CPU forward does
not read Q4_0 blobs (spec §8), so Q4 files are only loaded. One JSON line per file goes to stdout:
{"file", "weight_dtype", "loaded", "logits": [[...] per position] | null, "greedy": [...] | null}.

welvet's Python layer wraps none of these calls, so they go through ctypes on the library welvet loaded.
"""
import argparse
import ctypes
import json
import struct
import sys

import welvet.utils as wu

LIB = wu._LIB
C = ctypes
for name, res, args in [
    ("LoomLoadEntityTransformer", C.c_longlong, [C.c_char_p]),
    ("LoomFreeEntityTransformer", None, [C.c_longlong]),
    ("LoomDeserializeEntity", C.c_longlong, [C.c_char_p, C.c_int]),
    ("LoomFreeNetwork", None, [C.c_longlong]),
    ("LoomLoadEntityTransformerAs", C.c_longlong, [C.c_char_p, C.c_int]),
    ("LoomSetTransformerForwardMode", C.c_char_p, [C.c_longlong, C.c_int]),
    ("LoomTransformerBeginCPUForwardQueue", C.c_char_p, [C.c_longlong, C.c_char_p]),
    ("LoomTransformerCPUForwardQueueTick", C.c_char_p, [C.c_longlong]),
    ("LoomTransformerCPUForwardQueueResult", C.c_char_p, [C.c_longlong]),
]:
    fn = getattr(LIB, name)
    fn.restype = res
    fn.argtypes = args

FLOAT32 = 1  # Loom DType id
QUEUED_CPU = 2  # TransformerForwardQueuedCPU


def call_json(fn, *args):
    out = json.loads(fn(*args).decode())
    if isinstance(out, dict) and "error" in out:
        raise RuntimeError(f"{fn.__name__}: {out['error']}")
    return out


def read_entity(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[12:20])[0]
    header = json.loads(data[20:20 + n])
    start = 20 + n

    def blob(p):
        b = next((b for b in header["blobs"] or [] if b["path"] == p), None)
        if b is None:
            return None
        raw = data[start + b["offset"]:start + b["offset"] + b["length"]]
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))

    return data, header, blob


def loom_hidden(tr, embeddings, hidden, tokens):
    """Loom's CPU decoder (blocks + final norm) over the token embeddings, one row per position."""
    data = []
    for t in tokens:
        data.extend(embeddings[t * hidden:(t + 1) * hidden])
    call_json(LIB.LoomTransformerBeginCPUForwardQueue, tr,
              json.dumps({"Data": data, "DType": FLOAT32, "Shape": [len(tokens), hidden]}).encode())
    while not call_json(LIB.LoomTransformerCPUForwardQueueTick, tr)["done"]:
        pass
    out = call_json(LIB.LoomTransformerCPUForwardQueueResult, tr)["Data"]
    return [out[i * hidden:(i + 1) * hidden] for i in range(len(tokens))]


def lm_head(rows, head, vocab, hidden):
    return [[float(struct.unpack("<f", struct.pack("<f", sum(h[d] * head[v * hidden + d] for d in range(hidden))))[0])
             for v in range(vocab)] for h in rows]


def check(path, prompt, n_greedy):
    data, header, blob = read_entity(path)
    t = header["transformer"]
    et = LIB.LoomLoadEntityTransformer(path.encode())
    net = LIB.LoomDeserializeEntity(data, len(data))
    result = {"file": path, "weight_dtype": t.get("weight_dtype"), "loaded": et >= 0 and net >= 0,
              "logits": None, "greedy": None}
    if et >= 0:
        LIB.LoomFreeEntityTransformer(et)
    if net >= 0:
        LIB.LoomFreeNetwork(net)
    if not result["loaded"] or t.get("weight_dtype") != "float32" or not prompt:
        return result
    tr = LIB.LoomLoadEntityTransformerAs(path.encode(), FLOAT32)
    if tr < 0:
        result["loaded"] = False
        return result
    call_json(LIB.LoomSetTransformerForwardMode, tr, QUEUED_CPU)
    hidden, vocab = t["hidden_size"], t["vocab_size"]
    embeddings = blob("transformer.embeddings")
    head = embeddings if t.get("lm_head_tied") else blob("transformer.lm_head")
    result["logits"] = lm_head(loom_hidden(tr, embeddings, hidden, prompt), head, vocab, hidden)
    tokens, greedy = list(prompt), []
    logits = result["logits"][-1]
    for step in range(n_greedy):
        nxt = max(range(vocab), key=lambda v: (logits[v], -v))
        greedy.append(nxt)
        tokens.append(nxt)
        if step + 1 < n_greedy:
            logits = lm_head(loom_hidden(tr, embeddings, hidden, tokens)[-1:], head, vocab, hidden)[0]
    result["greedy"] = greedy
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", default="", help="comma-separated token ids to run on float32 files")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    prompt = [int(x) for x in a.prompt.split(",") if x]
    ok = True
    for f in a.files:
        r = check(f, prompt, a.greedy)
        ok &= r["loaded"]
        print(json.dumps(r))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
