#!/usr/bin/env python3
"""RoPE scaling references: shared/golden's tiny Llama with Llama 3 and linear RoPE scaling, its logits from the
goldens' numpy forward (shared/golden/llama_ref.py) with the inverse frequencies transformers computes
(`_compute_llama3_parameters`, `_compute_linear_scaling_rope_parameters`, `_compute_yarn_parameters` with its
attention factor on cos and sin), not from loom-wasm.

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy safetensors
    /tmp/gg/bin/python testdata/rope_scaling/gen.py

Scalings (head_dim 16, rope_theta 10000):
- llama3: factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 64, so that the tiny
  model's wavelengths fall in all three bands (kept, smoothed, divided by 8);
- linear: factor 2;
- yarn: factor 4 over original_max_position_embeddings 64 (beta_fast 32, beta_slow 1: the ramp covers pairs 0–3),
  attention factor 0.1·ln 4 + 1; yarn_untruncated: the same with `truncate` false and an explicit
  `attention_factor` 1.3 (HF folders only: GGUF yarn does not run).

Written:
- `llama3.gguf`: the tiny Llama as llama.cpp's converter writes a Llama 3 (q/k rows permuted, `rope_freqs.weight`
  holding 1 / (inv_freq_llama3 / inv_freq) per rotated pair, as `LlamaModel.generate_extra_tensors` computes them);
- `linear.gguf`: the same with `llama.rope.scaling.type` linear and `llama.rope.scaling.factor` 2 (no tensor);
  both with a byte-token SentencePiece vocabulary (256 tokens, the tiny model's vocabulary size);
- `hostile_yarn.gguf` (`rope.scaling.type` yarn, which does not run) and `hostile_short_freqs.gguf` (one factor too
  few), each with the embedding and final norm only: refused before any block is read;
- `expected.json`: per scaling, the HF `rope_scaling` block and, per prompt, the logits at every position and 8
  greedy ids; and how far each scaling moves the logits from the unscaled model (so that a run that ignored the
  scaling fails).
"""
import json
import math
import pathlib
import sys

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import load_file

here = pathlib.Path(__file__).resolve().parent
golden = here.parents[2] / "shared" / "golden"
sys.path.insert(0, str(golden))
from llama_ref import Llama, permute  # noqa: E402

tiny = golden / "tiny-llama"
cfg = json.loads((tiny / "config.json").read_text())
W = load_file(str(tiny / "model.f32.safetensors"))
HD, THETA = cfg["head_dim"], cfg["rope_theta"]
PROMPTS = [list(range(40, 240, 5)), [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]]
SCALINGS = {
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64},
    "linear": {"type": "linear", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    "yarn_untruncated": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                         "truncate": False, "attention_factor": 1.3},
}


def inv_freq_default():
    return 1.0 / THETA ** (np.arange(0, HD, 2, dtype=np.float64) / HD)


def yarn(s):
    """transformers' _compute_yarn_parameters, in float64: (inverse frequencies, attention factor)."""
    factor, old, dim = s["factor"], s["original_max_position_embeddings"], HD
    attention = s.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)

    def correction(rotations):
        return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(THETA))

    low, high = correction(32), correction(1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    inv = inv_freq_default()
    return inv / factor * (1 - extrapolation) + inv * extrapolation, attention


class ScaledLlama(Llama):
    """The goldens' Llama with cos and sin times an attention factor (YaRN's), as transformers' rotary embedding
    multiplies them."""

    def __init__(self, cfg, W, mscale):
        super().__init__(cfg, W)
        self.mscale = mscale

    def rope(self, x, pos):
        hd = self.hd
        ang = np.outer(pos, self.inv)
        c = (np.cos(ang) * self.mscale)[:, None, :].astype(np.float32)
        s = (np.sin(ang) * self.mscale)[:, None, :].astype(np.float32)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def inv_freq_scaled(s):
    """transformers' modeling_rope_utils, in float64."""
    inv = inv_freq_default()
    if s.get("rope_type", s.get("type")) == "linear":
        return inv / s["factor"]
    factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s[
        "original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    inv_llama = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv_llama)


def run(inv, mscale=1.0):
    model = ScaledLlama(cfg, W, mscale)
    model.inv = inv
    out = []
    for ids in PROMPTS:
        logits, greedy = model.prefill_and_greedy(ids, 8)
        out.append((ids, logits, greedy))
    return out


def write_gguf(path, scaling, hostile=None):
    g = GGUFWriter(str(path), "llama")
    g.add_name("tiny-llama-rope-" + scaling)
    g.add_block_count(cfg["num_hidden_layers"])
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(cfg["hidden_size"])
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_head_count(cfg["num_attention_heads"])
    g.add_head_count_kv(cfg["num_key_value_heads"])
    g.add_key_length(HD)
    g.add_value_length(HD)
    g.add_rope_dimension_count(HD)
    g.add_rope_freq_base(THETA)
    g.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    g.add_file_type(0)
    if scaling == "linear":
        g.add_string("llama.rope.scaling.type", "linear")
        g.add_float32("llama.rope.scaling.factor", SCALINGS["linear"]["factor"])
    if hostile == "yarn":
        g.add_string("llama.rope.scaling.type", "yarn")
        g.add_float32("llama.rope.scaling.factor", 4.0)
    g.add_tokenizer_model("llama")
    g.add_token_list([f"<0x{b:02X}>" for b in range(256)])
    g.add_token_scores([0.0] * 256)
    g.add_token_types([6] * 256)
    g.add_add_bos_token(False)
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    g.add_tensor("token_embd.weight", W["model.embed_tokens.weight"])
    if scaling == "llama3":
        # convert_hf_to_gguf.py LlamaModel.generate_extra_tensors: factors the frequencies are divided by.
        factors = inv_freq_default() / inv_freq_scaled(SCALINGS["llama3"])
        if hostile == "short_freqs":
            factors = factors[:-1]
        g.add_tensor("rope_freqs.weight", factors.astype(np.float32))
    if hostile:  # the loaders refuse these from the header and rope_freqs alone: no blocks needed
        g.add_tensor("output_norm.weight", W["model.norm.weight"])
        g.write_header_to_file()
        g.write_kv_data_to_file()
        g.write_tensors_to_file()
        g.close()
        return
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        g.add_tensor(b + "attn_norm.weight", W[p + "input_layernorm.weight"])
        g.add_tensor(b + "attn_q.weight", permute(W[p + "self_attn.q_proj.weight"], nh))
        g.add_tensor(b + "attn_k.weight", permute(W[p + "self_attn.k_proj.weight"], nkv))
        g.add_tensor(b + "attn_v.weight", W[p + "self_attn.v_proj.weight"])
        g.add_tensor(b + "attn_output.weight", W[p + "self_attn.o_proj.weight"])
        g.add_tensor(b + "ffn_norm.weight", W[p + "post_attention_layernorm.weight"])
        g.add_tensor(b + "ffn_gate.weight", W[p + "mlp.gate_proj.weight"])
        g.add_tensor(b + "ffn_up.weight", W[p + "mlp.up_proj.weight"])
        g.add_tensor(b + "ffn_down.weight", W[p + "mlp.down_proj.weight"])
    g.add_tensor("output_norm.weight", W["model.norm.weight"])
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def main():
    plain = run(inv_freq_default())
    out = {"reference": "shared/golden/llama_ref.py with transformers' scaled inverse frequencies (gen.py)"}
    for name, s in SCALINGS.items():
        cases = run(*yarn(s)) if name.startswith("yarn") else run(inv_freq_scaled(s))
        moved = max(float(np.abs(c[1] - p[1]).max()) for c, p in zip(cases, plain))
        assert moved > 0.05, f"{name} scaling hardly changes the logits ({moved})"
        out[name] = {
            "rope_scaling": s,
            "moved_from_unscaled": moved,
            "cases": [{"ids": ids, "logits": [[float(f"{v:.7g}") for v in row] for row in logits], "greedy": greedy}
                      for ids, logits, greedy in cases],
        }
        if not name.startswith("yarn"):
            write_gguf(here / f"{name}.gguf", name)
    write_gguf(here / "hostile_yarn.gguf", "none", "yarn")
    write_gguf(here / "hostile_short_freqs.gguf", "llama3", "short_freqs")
    (here / "expected.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
