#!/usr/bin/env python3
"""Phi-3 references: a tiny random Phi-3 and its logits from a float64 numpy forward that follows transformers'
`modeling_phi3.py` (4.57) and `_compute_longrope_parameters` / `longrope_frequency_update` line by line, not from
loom-wasm.

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy safetensors
    /tmp/gg/bin/python testdata/phi3/gen.py

The model (seed 3): hidden 64, 4 heads over 2 KV heads of 16, feed-forward 96, 3 layers, vocabulary 256 (the tiny
Llama's byte tokenizer), q|k|v and gate|up stored fused (`qkv_proj`, `gate_up_proj`), rope_theta 10000, LongRoPE
with `original_max_position_embeddings` 16 and `max_position_embeddings` 64 (factor 4: attention factor
√(1 + ln 4 / ln 16)). Two configurations over the same weights:
- `phi3` (Phi-3.5-mini's shape): every dimension rotated, a sliding window of 10 on every layer, its own LM head;
- `phi4mini` (Phi-4-mini's shape): `partial_rotary_factor` 0.75 (12 of 16 dimensions rotated), no window, the head
  tied to the embedding.
transformers picks the long factors for a forward call whose sequence (its last position + 1) passes 16 and the
short ones otherwise; positions already in the KV cache keep the rotation they were stored with. So the 40-token
prompt runs long, the 12-token one short, and its greedy decode switches to long at its 17th position.

Written:
- `model.safetensors`: the weights in transformers' names (float32, with `lm_head.weight`);
- `phi3.gguf`, `phi4mini.gguf`: the same as llama.cpp's converter (`Phi3MiniModel`) writes them: `attn_qkv`,
  `ffn_up` holding gate|up (2·96 rows), `rope_factors_short.weight` / `rope_factors_long.weight`,
  `phi3.rope.scaling.original_context_length`, `phi3.rope.scaling.attn_factor`, `phi3.rope.dimension_count`,
  `phi3.attention.sliding_window` (phi3 only), no `output.weight` when tied; a byte-token SentencePiece vocabulary;
- `expected.json`: per configuration its config.json and, per prompt, the logits at every position, 8 greedy ids
  and the logits of each greedy step (which cross from short to long factors).

Checked by hand against llama.cpp b11434 (`LLAMA_KV_F32=1 scripts/crosscheck-llamacpp.sh`: float32 KV cache, no
flash attention): on `phi4mini.gguf` and the 40-token prompt (llama.cpp picks the long factors by its context size,
here past 16, as the reference does by the prompt's length) llama.cpp's top-5 logits at every position agree with
loom-wasm's within 5e-5, with the same 8 greedy ids. `phi3.gguf` differs past 10 positions by design: llama.cpp
b11434 runs Phi-3 without its sliding window (it warns so); with the window off both agree again.
"""
import json
import math
import pathlib

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import save_file

here = pathlib.Path(__file__).resolve().parent
L, H, NH, NKV, HD, FF, V = 3, 64, 4, 2, 16, 96, 256
THETA, EPS, OLD, MAX = 10000.0, 1e-5, 16, 64
PROMPTS = [list(range(40, 240, 5)), [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]]
rng = np.random.default_rng(3)


def rand(*shape, scale):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


W = {"model.embed_tokens.weight": rand(V, H, scale=0.5), "model.norm.weight": 1 + rand(H, scale=0.1),
     "lm_head.weight": rand(V, H, scale=0.2)}
for i in range(L):
    p = f"model.layers.{i}."
    W[p + "input_layernorm.weight"] = 1 + rand(H, scale=0.1)
    W[p + "post_attention_layernorm.weight"] = 1 + rand(H, scale=0.1)
    W[p + "self_attn.qkv_proj.weight"] = rand(NH * HD + 2 * NKV * HD, H, scale=0.25)
    W[p + "self_attn.o_proj.weight"] = rand(H, NH * HD, scale=0.15)
    W[p + "mlp.gate_up_proj.weight"] = rand(2 * FF, H, scale=0.2)
    W[p + "mlp.down_proj.weight"] = rand(H, FF, scale=0.15)


def factors(n, lo, hi):
    return [round(float(v), 4) for v in np.linspace(lo, hi, n)]


def config(partial, window, tied):
    pairs = int(HD * partial) // 2
    c = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": H, "intermediate_size": FF,
         "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV, "vocab_size": V,
         "hidden_act": "silu", "rms_norm_eps": EPS, "rope_theta": THETA, "max_position_embeddings": MAX,
         "original_max_position_embeddings": OLD, "partial_rotary_factor": partial, "sliding_window": window,
         "tie_word_embeddings": tied, "torch_dtype": "float32",
         "rope_scaling": {"type": "longrope", "short_factor": factors(pairs, 1.0, 1.6),
                          "long_factor": factors(pairs, 1.5, 9.0)}}
    return c


CONFIGS = {"phi3": config(1.0, 10, False), "phi4mini": config(0.75, None, True)}


def attention_factor(c):
    factor = c["max_position_embeddings"] / c["original_max_position_embeddings"]
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(c["original_max_position_embeddings"]))


class Phi3:
    def __init__(self, c):
        self.c = c
        self.dim = int(HD * c["partial_rotary_factor"])
        self.head = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]

    def rope(self, x, positions, seq_len):  # x [heads][n][hd]; apply_rotary_pos_emb on the first `dim` dims
        s = self.c["rope_scaling"]
        ext = np.array(s["long_factor"] if seq_len > self.c["original_max_position_embeddings"] else s["short_factor"],
                       dtype=np.float64)
        inv = 1.0 / (ext * THETA ** (np.arange(0, self.dim, 2, dtype=np.float64) / self.dim))
        emb = np.concatenate([np.outer(positions, inv)] * 2, axis=-1)
        cos, sin = np.cos(emb) * attention_factor(self.c), np.sin(emb) * attention_factor(self.c)
        rot, rest = x[..., :self.dim], x[..., self.dim:]
        half = self.dim // 2
        rotated = np.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)
        return np.concatenate([rot * cos + rotated * sin, rest], axis=-1)

    def forward(self, ids, cache, start):
        n = len(ids)
        positions = np.arange(start, start + n)
        seq_len = start + n  # longrope_frequency_update: max(position_ids) + 1
        m = lambda k: W[k].astype(np.float64)  # noqa: E731
        h = m("model.embed_tokens.weight")[ids]
        for i in range(L):
            p = f"model.layers.{i}."
            x = rms(h, W[p + "input_layernorm.weight"])
            qkv = x @ m(p + "self_attn.qkv_proj.weight").T
            q = qkv[:, :NH * HD].reshape(n, NH, HD).transpose(1, 0, 2)
            k = qkv[:, NH * HD:(NH + NKV) * HD].reshape(n, NKV, HD).transpose(1, 0, 2)
            v = qkv[:, (NH + NKV) * HD:].reshape(n, NKV, HD).transpose(1, 0, 2)
            q, k = self.rope(q, positions, seq_len), self.rope(k, positions, seq_len)
            cache[i][0].append(k)
            cache[i][1].append(v)
            K, Vv = np.concatenate(cache[i][0], axis=1), np.concatenate(cache[i][1], axis=1)
            K, Vv = np.repeat(K, NH // NKV, axis=0), np.repeat(Vv, NH // NKV, axis=0)
            scores = q @ K.transpose(0, 2, 1) * HD ** -0.5
            qi, ki = np.meshgrid(positions, np.arange(K.shape[1]), indexing="ij")
            allowed = ki <= qi
            if self.c["sliding_window"]:  # sliding_window_overlay: kv_idx > q_idx - window
                allowed &= ki > qi - self.c["sliding_window"]
            scores = np.where(allowed, scores, -np.inf)
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            o = ((e / e.sum(axis=-1, keepdims=True)) @ Vv).transpose(1, 0, 2).reshape(n, NH * HD)
            h = h + o @ m(p + "self_attn.o_proj.weight").T
            x = rms(h, W[p + "post_attention_layernorm.weight"])
            gate, up = np.split(x @ m(p + "mlp.gate_up_proj.weight").T, 2, axis=-1)  # Phi3MLP: chunk(2)
            h = h + (up * (gate / (1 + np.exp(-gate)))) @ m(p + "mlp.down_proj.weight").T
        return rms(h, W["model.norm.weight"]) @ self.head.astype(np.float64).T

    def case(self, ids, new=8):
        cache = [([], []) for _ in range(L)]
        logits = self.forward(ids, cache, 0)
        greedy, steps, last = [], [], logits[-1]
        for _ in range(new):
            nxt = int(np.argmax(last))
            greedy.append(nxt)
            if len(greedy) == new:
                break
            last = self.forward([nxt], cache, len(ids) + len(greedy) - 1)[0]
            steps.append(last)
        return logits, greedy, steps


def rms(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w.astype(np.float64)


def write_gguf(path, c):
    g = GGUFWriter(str(path), "phi3")
    g.add_block_count(L)
    g.add_context_length(c["max_position_embeddings"])
    g.add_embedding_length(H)
    g.add_feed_forward_length(FF)
    g.add_head_count(NH)
    g.add_head_count_kv(NKV)
    g.add_rope_dimension_count(int(HD * c["partial_rotary_factor"]))
    g.add_rope_freq_base(THETA)
    g.add_layer_norm_rms_eps(EPS)
    if c["sliding_window"]:
        g.add_sliding_window(c["sliding_window"])
    # Phi3MiniModel.set_gguf_parameters / generate_extra_tensors
    g.add_rope_scaling_attn_factors(attention_factor(c))
    g.add_uint32("phi3.rope.scaling.original_context_length", c["original_max_position_embeddings"])
    g.add_file_type(0)
    g.add_tokenizer_model("llama")
    g.add_token_list([f"<0x{b:02X}>" for b in range(256)])
    g.add_token_scores([0.0] * 256)
    g.add_token_types([6] * 256)
    g.add_add_bos_token(False)
    g.add_tensor("rope_factors_long.weight", np.array(c["rope_scaling"]["long_factor"], dtype=np.float32))
    g.add_tensor("rope_factors_short.weight", np.array(c["rope_scaling"]["short_factor"], dtype=np.float32))
    g.add_tensor("token_embd.weight", W["model.embed_tokens.weight"])
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        g.add_tensor(b + "attn_norm.weight", W[p + "input_layernorm.weight"])
        g.add_tensor(b + "attn_qkv.weight", W[p + "self_attn.qkv_proj.weight"])
        g.add_tensor(b + "attn_output.weight", W[p + "self_attn.o_proj.weight"])
        g.add_tensor(b + "ffn_norm.weight", W[p + "post_attention_layernorm.weight"])
        g.add_tensor(b + "ffn_up.weight", W[p + "mlp.gate_up_proj.weight"])
        g.add_tensor(b + "ffn_down.weight", W[p + "mlp.down_proj.weight"])
    g.add_tensor("output_norm.weight", W["model.norm.weight"])
    if not c["tie_word_embeddings"]:
        g.add_tensor("output.weight", W["lm_head.weight"])
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def main():
    save_file({k: np.ascontiguousarray(v) for k, v in sorted(W.items())}, str(here / "model.safetensors"))
    out = {"reference": "float64 numpy forward following transformers' modeling_phi3 and longrope (gen.py)"}
    for name, c in CONFIGS.items():
        model = Phi3(c)
        cases = []
        for ids in PROMPTS:
            logits, greedy, steps = model.case(ids)
            cases.append({"ids": ids, "logits": [[float(f"{v:.7g}") for v in row] for row in logits],
                          "greedy": greedy, "step_logits": [[float(f"{v:.7g}") for v in row] for row in steps]})
        # The factors must matter: the short prompt's steps past position 16 differ from an all-short run.
        short_only = json.loads(json.dumps(c))
        short_only["rope_scaling"]["long_factor"] = c["rope_scaling"]["short_factor"]
        _, _, plain = Phi3(short_only).case(PROMPTS[1])
        moved = max(float(np.abs(a - b).max()) for a, b in zip(steps, plain))
        assert moved > 0.05, f"{name}: the long factors hardly move the logits ({moved})"
        out[name] = {"config": c, "long_moves_steps_by": moved, "cases": cases}
        write_gguf(here / f"{name}.gguf", c)
    (here / "expected.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
