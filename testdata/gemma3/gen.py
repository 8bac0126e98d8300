#!/usr/bin/env python3
"""A tiny random Gemma 3 (text) and its logits from a float64 numpy forward that follows transformers'
`modeling_gemma3.py` (Gemma3ForCausalLM) line by line, not from loom-wasm.

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
    /tmp/gg/bin/python testdata/gemma3/gen.py

The model (seeded, re-running gives identical files): hidden 64, 3 layers, 4 heads over 2 KV heads of head_dim 32
(so q is 128 wide, not 64), feed-forward 96, a 300-token SentencePiece vocabulary (control, byte, pieces), a sliding
window of 4 positions on layers 0 and 1 (`sliding_window_pattern` 3: layer 2 is global), RoPE bases 1e6 (global)
and 1e4 (sliding), rms_norm_eps 1e-6, query_pre_attn_scalar = head_dim, tied embeddings. Weights are normal(0, 0.3)
in float32, the norms' HF weights normal(0, 0.3) too (Gemma's norms multiply by 1 + w).

Written:
- `model.f32.gguf`: the weights as llama.cpp's convert_hf_to_gguf.py writes a Gemma 3: its tensor names
  (`blk.N.post_attention_norm`, `post_ffw_norm`, `attn_q_norm`, ...), `gemma3.*` keys (`attention.sliding_window`,
  `attention.sliding_window_pattern`, `rope.freq_base_swa`) and every norm weight stored with its +1 added, as that
  converter does.
- `hf/`: `config.json` and `model.safetensors` as transformers saves a Gemma3ForCausalLM (its names, the norms' w);
- the same as a Gemma 2 (the weights without q/k norms, every other layer sliding, one RoPE base, scores and
  logits soft-capped at 2 and 5, far below Gemma 2's 50 and 30 so that this small model reaches them):
  `gemma2.f32.gguf` (llama.cpp's `gemma2.*` keys), `hf-gemma2/` (Gemma2ForCausalLM) and `expected_gemma2.json`;
- `expected.json`: per prompt, the logits at every position (float64 reference, 7 significant digits) and 8 greedy
  ids (argmax, the lowest id on ties), with the smallest top-1 margin seen.

Checked by hand against llama.cpp b11434 (`scripts/crosscheck-llamacpp.sh`, `scripts/llama_logits.c`): llama.cpp
reads model.f32.gguf as this reference does, within 0.0026 of its logits over the top 3 of the longest prompt (its
KV cache is float16), with the same greedy ids; gemma2.f32.gguf within 0.0007, with the same greedy ids.
"""
import json
import math
import pathlib

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import save_file

here = pathlib.Path(__file__).resolve().parent

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 64, 3, 4, 2, 32, 96, 300
WINDOW, PATTERN, THETA, THETA_LOCAL, EPS = 4, 3, 1e6, 1e4, 1e-6
PROMPTS = [[72], [72, 101, 108, 108, 111, 44, 32], [84, 104, 101, 32, 113, 117, 105, 99, 107, 32, 98, 114, 111]]
NEW = 8

rng = np.random.default_rng(20261126)


def normal(*shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


w = {"embed": normal(VOCAB, HIDDEN), "norm": normal(HIDDEN), "layers": []}
for _ in range(LAYERS):
    w["layers"].append({
        "input_layernorm": normal(HIDDEN),
        "q": normal(HEADS * HEAD_DIM, HIDDEN), "k": normal(KV_HEADS * HEAD_DIM, HIDDEN),
        "v": normal(KV_HEADS * HEAD_DIM, HIDDEN), "o": normal(HIDDEN, HEADS * HEAD_DIM),
        "q_norm": normal(HEAD_DIM), "k_norm": normal(HEAD_DIM),
        "post_attention_layernorm": normal(HIDDEN), "pre_feedforward_layernorm": normal(HIDDEN),
        "post_feedforward_layernorm": normal(HIDDEN),
        "gate": normal(FFN, HIDDEN), "up": normal(FFN, HIDDEN), "down": normal(HIDDEN, FFN),
    })
# HF's layer_types: "sliding_attention" unless (i + 1) % sliding_window_pattern == 0 (Gemma 2: every other layer).
sliding = [bool((i + 1) % PATTERN) for i in range(LAYERS)]
sliding2 = [bool((i + 1) % 2) for i in range(LAYERS)]
# Gemma 2's soft caps, far below its real 50 and 30 so that this small model's scores and logits reach them.
ATTN_CAP, FINAL_CAP = 2.0, 5.0


# --- modeling_gemma3.py, in float64 ---------------------------------------------------------------------------
def rms_norm(x, weight):  # Gemma3RMSNorm: x * rsqrt(mean(x²) + eps) * (1 + weight)
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * (1.0 + weight.astype(np.float64))


def rope(x, positions, theta):  # apply_rotary_pos_emb with rotate_half; x [heads][n][head_dim]
    inv_freq = 1.0 / theta ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    freqs = np.outer(positions, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    half = HEAD_DIM // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def gelu_tanh(x):  # ACT2FN["gelu_pytorch_tanh"]
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(ids, gemma2=False):
    """Gemma3ForCausalLM, or with gemma2 Gemma2ForCausalLM (modeling_gemma2.py: no q/k norms, one RoPE base,
    every other layer sliding, soft-capped scores and logits)."""
    n = len(ids)
    positions = np.arange(n)
    # Gemma3TextScaledWordEmbedding: embed * hidden**0.5 (the scale cast to the weights' dtype, float32).
    h = w["embed"][ids].astype(np.float64) * float(np.float32(HIDDEN ** 0.5))
    scaling = HEAD_DIM ** -0.5  # query_pre_attn_scalar ** -0.5
    for i, L in enumerate(w["layers"]):
        residual = h
        x = rms_norm(h, L["input_layernorm"])
        q = (x @ L["q"].T.astype(np.float64)).reshape(n, HEADS, HEAD_DIM).transpose(1, 0, 2)
        k = (x @ L["k"].T.astype(np.float64)).reshape(n, KV_HEADS, HEAD_DIM).transpose(1, 0, 2)
        v = (x @ L["v"].T.astype(np.float64)).reshape(n, KV_HEADS, HEAD_DIM).transpose(1, 0, 2)
        slides = sliding2[i] if gemma2 else sliding[i]
        if not gemma2:
            q, k = rms_norm(q, L["q_norm"]), rms_norm(k, L["k_norm"])
        theta = THETA_LOCAL if slides and not gemma2 else THETA
        q, k = rope(q, positions, theta), rope(k, positions, theta)
        k = np.repeat(k, HEADS // KV_HEADS, axis=0)
        v = np.repeat(v, HEADS // KV_HEADS, axis=0)
        scores = q @ k.transpose(0, 2, 1) * scaling
        if gemma2:  # attn_logit_softcapping
            scores = np.tanh(scores / ATTN_CAP) * ATTN_CAP
        qi, ki = np.meshgrid(positions, positions, indexing="ij")
        allowed = ki <= qi
        if slides:
            allowed &= qi - ki < WINDOW
        scores = np.where(allowed, scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(n, HEADS * HEAD_DIM)
        o = attn @ L["o"].T.astype(np.float64)
        o = rms_norm(o, L["post_attention_layernorm"])
        h = residual + o
        residual = h
        x = rms_norm(h, L["pre_feedforward_layernorm"])
        f = (gelu_tanh(x @ L["gate"].T.astype(np.float64)) * (x @ L["up"].T.astype(np.float64))) @ L["down"].T.astype(
            np.float64)
        f = rms_norm(f, L["post_feedforward_layernorm"])
        h = residual + f
    h = rms_norm(h, w["norm"])
    logits = h @ w["embed"].T.astype(np.float64)  # tied lm_head
    if gemma2:  # final_logit_softcapping (Gemma 3 has none)
        logits = np.tanh(logits / FINAL_CAP) * FINAL_CAP
    return logits


# --- the GGUF, as convert_hf_to_gguf.py writes Gemma3ForCausalLM ---------------------------------------------
def write_gguf(path, gemma2=False):
    arch = "gemma2" if gemma2 else "gemma3"
    g = GGUFWriter(str(path), arch)
    g.add_name("tiny-gemma3")
    g.add_block_count(LAYERS)
    g.add_context_length(512)
    g.add_embedding_length(HIDDEN)
    g.add_feed_forward_length(FFN)
    g.add_head_count(HEADS)
    g.add_head_count_kv(KV_HEADS)
    g.add_key_length(HEAD_DIM)
    g.add_value_length(HEAD_DIM)
    g.add_layer_norm_rms_eps(EPS)
    g.add_rope_freq_base(THETA)
    g.add_uint32(f"{arch}.attention.sliding_window", WINDOW)
    if gemma2:  # llama.cpp's Gemma 2: every other layer slides, one RoPE base; its converter writes both caps
        g.add_float32("gemma2.attn_logit_softcapping", ATTN_CAP)
        g.add_float32("gemma2.final_logit_softcapping", FINAL_CAP)
    else:
        g.add_uint32("gemma3.attention.sliding_window_pattern", PATTERN)
        g.add_float32("gemma3.rope.freq_base_swa", THETA_LOCAL)
    g.add_file_type(0)
    # A SentencePiece vocabulary as Gemma's ("llama" in GGUF): control tokens, the 256 byte tokens, then pieces.
    pieces = ["▁", "▁t", "▁a", "he", "in", "er", "an", "▁the", "on", "re"] + [chr(ord("a") + i) for i in range(26)]
    pieces += [p for p in ("▁" + chr(ord("a") + i) for i in range(26)) if p not in pieces]
    # Gemma's turn markers last (control tokens, as in Gemma's vocabulary), and no chat template: as the real
    # Gemma 3 270M GGUF, which chats through the Gemma template loom-wasm has built in.
    turns = ["<start_of_turn>", "<end_of_turn>"]
    pieces = pieces[:VOCAB - 4 - 256 - len(turns)]
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces + turns
    assert len(tokens) == VOCAB
    g.add_tokenizer_model("llama")
    g.add_token_list(tokens)
    g.add_token_scores([0.0] * 260 + [-float(i) for i in range(len(pieces))] + [0.0] * len(turns))
    g.add_token_types([3, 3, 3, 2] + [6] * 256 + [1] * len(pieces) + [3] * len(turns))
    g.add_bos_token_id(2)
    g.add_eos_token_id(1)
    g.add_unk_token_id(3)
    g.add_pad_token_id(0)
    g.add_add_bos_token(True)

    def norm(x):  # the converter stores Gemma's norm weights with their +1
        return (x + 1.0).astype(np.float32)

    g.add_tensor("token_embd.weight", w["embed"])
    for i, L in enumerate(w["layers"]):
        b = f"blk.{i}."
        g.add_tensor(b + "attn_norm.weight", norm(L["input_layernorm"]))
        g.add_tensor(b + "attn_q.weight", L["q"])
        g.add_tensor(b + "attn_k.weight", L["k"])
        g.add_tensor(b + "attn_v.weight", L["v"])
        g.add_tensor(b + "attn_output.weight", L["o"])
        if not gemma2:
            g.add_tensor(b + "attn_q_norm.weight", norm(L["q_norm"]))
            g.add_tensor(b + "attn_k_norm.weight", norm(L["k_norm"]))
        g.add_tensor(b + "post_attention_norm.weight", norm(L["post_attention_layernorm"]))
        g.add_tensor(b + "ffn_norm.weight", norm(L["pre_feedforward_layernorm"]))
        g.add_tensor(b + "post_ffw_norm.weight", norm(L["post_feedforward_layernorm"]))
        g.add_tensor(b + "ffn_gate.weight", L["gate"])
        g.add_tensor(b + "ffn_up.weight", L["up"])
        g.add_tensor(b + "ffn_down.weight", L["down"])
    g.add_tensor("output_norm.weight", norm(w["norm"]))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def write_hf(folder, gemma2=False):
    """The same weights as transformers saves a Gemma3ForCausalLM: its names, the norms' w (not 1 + w)."""
    folder.mkdir(exist_ok=True)
    t = {"model.embed_tokens.weight": w["embed"], "model.norm.weight": w["norm"]}
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
             "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm", "gate": "mlp.gate_proj",
             "up": "mlp.up_proj", "down": "mlp.down_proj"}
    for i, L in enumerate(w["layers"]):
        for k, v in L.items():
            if not (gemma2 and k in ("q_norm", "k_norm")):
                t[f"model.layers.{i}.{names.get(k, k)}.weight"] = v
    save_file({k: np.ascontiguousarray(v) for k, v in sorted(t.items())}, str(folder / "model.safetensors"))
    config = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": HIDDEN,
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": VOCAB, "rms_norm_eps": EPS,
        "rope_theta": THETA, "rope_local_base_freq": THETA_LOCAL, "sliding_window": WINDOW,
        "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
        "query_pre_attn_scalar": HEAD_DIM, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 512,
        "final_logit_softcapping": None, "attn_logit_softcapping": None, "rope_scaling": None,
        "tie_word_embeddings": True,
    }
    if gemma2:
        config.update({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                       "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding2],
                       "attn_logit_softcapping": ATTN_CAP, "final_logit_softcapping": FINAL_CAP})
        for k in ("rope_local_base_freq",):
            config.pop(k)
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def expected(gemma2):
    cases, margin = [], math.inf
    for ids in PROMPTS:
        logits = forward(ids, gemma2)
        seq, greedy = list(ids), []
        for _ in range(NEW):
            last = forward(seq, gemma2)[-1]
            top = np.sort(last)[::-1]
            margin = min(margin, float(top[0] - top[1]))
            nxt = int(np.argmax(last))
            greedy.append(nxt)
            seq.append(nxt)
        cases.append({"ids": ids, "logits": [[float(f"{v:.7g}") for v in row] for row in logits], "greedy": greedy})
    name = "modeling_gemma2.py" if gemma2 else "modeling_gemma3.py"
    return {
        "model": "gemma2.f32.gguf" if gemma2 else "model.f32.gguf",
        "reference": f"float64 numpy forward following transformers' {name} (gen.py)",
        "sliding_layers": sliding2 if gemma2 else sliding,
        "smallest_greedy_margin": margin,
        "cases": cases,
    }


def main():
    write_gguf(here / "model.f32.gguf")
    write_hf(here / "hf")
    (here / "expected.json").write_text(json.dumps(expected(False)) + "\n")
    write_gguf(here / "gemma2.f32.gguf", gemma2=True)
    write_hf(here / "hf-gemma2", gemma2=True)
    e2 = expected(True)
    assert max(abs(v) for row in e2["cases"][2]["logits"] for v in row) <= FINAL_CAP
    (here / "expected_gemma2.json").write_text(json.dumps(e2) + "\n")


if __name__ == "__main__":
    main()
