#!/usr/bin/env python3
"""Llama-shaped families, from a float64 numpy forward that follows transformers (not from loom-wasm):
SmolLM3 (`modeling_smollm3.py`: no RoPE on the layers `no_rope_layers` marks 0), Mistral (`modeling_mistral.py`:
every layer attends within `sliding_window` positions) and Granite (`modeling_granite.py`: the embedding times
`embedding_multiplier`, scores times `attention_multiplier`, each residual branch times `residual_multiplier`, the
logits divided by `logits_scaling`), and a Llama with every kind of bias (`modeling_llama.py` with `attention_bias`
and `mlp_bias`: q, k, v and o, gate, up and down) on layers 0 and 2 only, as llama.cpp's optional per-layer bias
tensors allow, so that one model has blocks with biases (whose projections the GPU engine keeps apart) and blocks
without (whose q|k|v and gate|up it fuses).

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy safetensors
    /tmp/gg/bin/python testdata/families/gen.py

The model: shared/golden's tiny Llama (hidden 64, 4 heads over 2 KV heads of 16, feed-forward 128, vocabulary 256)
made 4 layers deep, layers 2 and 3 its layers 0 and 1 with their matrices negated (so that no layer repeats
another), tied embeddings, rope_theta 10000.

Written:
- `model.safetensors`: the 4-layer weights in transformers' names (float32); the tests pair it with a config.json
  of each family and the tiny Llama's tokenizer.json;
- `smollm3.gguf`: the same as llama.cpp's converter writes a SmolLM3 (architecture `smollm3`, q/k rows permuted);
  llama.cpp skips RoPE on every 4th layer (`n_no_rope_layer_step` 4), so here layer 3, as `no_rope_layers`
  [1, 1, 1, 0] says for the HF folder;
- `granite.gguf`: the same as a Granite (architecture `granite`, its multipliers as `granite.embedding_scale`,
  `attention.scale`, `residual_scale`, `logit_scale`);
- `biases.safetensors`: the bias tensors (seeded), which the tests add beside `model.safetensors` in an HF folder;
- `unsupported.gguf`: a header that names `phi2` (which does not run) with a 16-row embedding: refused by name;
- `expected.json`: per family its config.json fields and, per prompt, the logits at every position (7 significant
  digits) and 8 greedy ids; for Mistral also a 200-token sequence (33 windows) with its last logits and 40 greedy
  ids.

Checked by hand against llama.cpp b11434 (`scripts/llama_logits.c`): it reads smollm3.gguf and granite.gguf as the
references here, within 0.0022 and 0.0004 over the top 3 at every position of the second prompt (its KV cache is
float16), with the same greedy ids.
"""
import json
import pathlib
import sys

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import load_file, save_file

here = pathlib.Path(__file__).resolve().parent
golden = here.parents[2] / "shared" / "golden"
sys.path.insert(0, str(golden))
from llama_ref import permute  # noqa: E402

tiny = golden / "tiny-llama"
base = json.loads((tiny / "config.json").read_text())
W = dict(load_file(str(tiny / "model.f32.safetensors")))
for i in (2, 3):
    for name in list(W):
        prefix = f"model.layers.{i - 2}."
        if name.startswith(prefix):
            w = W[name]
            W[f"model.layers.{i}." + name[len(prefix):]] = -w if w.ndim == 2 else w
LAYERS, H, NH, NKV, HD = 4, base["hidden_size"], base["num_attention_heads"], base["num_key_value_heads"], base[
    "head_dim"]
EPS, THETA = base["rms_norm_eps"], base["rope_theta"]
PROMPTS = [list(range(40, 240, 5)), [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]]
FAMILIES = {
    "smollm3": {"model_type": "smollm3", "architectures": ["SmolLM3ForCausalLM"], "no_rope_layers": [1, 1, 1, 0]},
    "mistral": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": 6},
    "granite": {"model_type": "granite", "architectures": ["GraniteForCausalLM"], "embedding_multiplier": 2.0,
                "attention_multiplier": 0.15, "residual_multiplier": 0.5, "logits_scaling": 3.0},
    "biases": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "bias_layers": [0, 2]},
}
BIAS_NAMES = [("self_attn.q_proj", NH * HD), ("self_attn.k_proj", NKV * HD), ("self_attn.v_proj", NKV * HD),
              ("self_attn.o_proj", H), ("mlp.gate_proj", base["intermediate_size"]),
              ("mlp.up_proj", base["intermediate_size"]), ("mlp.down_proj", H)]
_rng = np.random.default_rng(2611)
B = {f"model.layers.{i}.{name}.bias": (_rng.standard_normal(n) * 0.2).astype(np.float32)
     for i in FAMILIES["biases"]["bias_layers"] for name, n in BIAS_NAMES}


def rms(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w.astype(np.float64)


def rope(x, positions):  # rotate_half; x [heads][n][hd]
    inv = 1.0 / THETA ** (np.arange(0, HD, 2, dtype=np.float64) / HD)
    emb = np.concatenate([np.outer(positions, inv)] * 2, axis=-1)
    half = HD // 2
    return x * np.cos(emb) + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * np.sin(emb)


def forward(ids, fam):
    n, positions = len(ids), np.arange(len(ids))
    m = lambda k: W[k].astype(np.float64)  # noqa: E731
    biased = fam.get("bias_layers", [])

    def b(i, name):  # LlamaAttention / LlamaMLP's Linear biases, where the layer has them
        return B[f"model.layers.{i}.{name}.bias"].astype(np.float64) if i in biased else 0.0
    h = m("model.embed_tokens.weight")[ids] * fam.get("embedding_multiplier", 1.0)  # GraniteModel
    residual = fam.get("residual_multiplier", 1.0)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        x = rms(h, W[p + "input_layernorm.weight"])
        q = (x @ m(p + "self_attn.q_proj.weight").T + b(i, "self_attn.q_proj")).reshape(n, NH, HD).transpose(1, 0, 2)
        k = (x @ m(p + "self_attn.k_proj.weight").T + b(i, "self_attn.k_proj")).reshape(n, NKV, HD).transpose(1, 0, 2)
        v = (x @ m(p + "self_attn.v_proj.weight").T + b(i, "self_attn.v_proj")).reshape(n, NKV, HD).transpose(1, 0, 2)
        if fam.get("no_rope_layers", [1] * LAYERS)[i]:  # SmolLM3Attention.use_rope
            q, k = rope(q, positions), rope(k, positions)
        k, v = np.repeat(k, NH // NKV, axis=0), np.repeat(v, NH // NKV, axis=0)
        scores = q @ k.transpose(0, 2, 1) * fam.get("attention_multiplier", 1.0 / np.sqrt(HD))
        qi, ki = np.meshgrid(positions, positions, indexing="ij")
        allowed = ki <= qi
        if "sliding_window" in fam:  # the sliding-window causal mask: q − k < window
            allowed &= qi - ki < fam["sliding_window"]
        scores = np.where(allowed, scores, -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        o = ((e / e.sum(axis=-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, NH * HD)
        h = h + (o @ m(p + "self_attn.o_proj.weight").T + b(i, "self_attn.o_proj")) * residual
        x = rms(h, W[p + "post_attention_layernorm.weight"])
        g = x @ m(p + "mlp.gate_proj.weight").T + b(i, "mlp.gate_proj")
        u = x @ m(p + "mlp.up_proj.weight").T + b(i, "mlp.up_proj")
        h = h + ((g / (1 + np.exp(-g)) * u) @ m(p + "mlp.down_proj.weight").T + b(i, "mlp.down_proj")) * residual
    logits = rms(h, W["model.norm.weight"]) @ m("model.embed_tokens.weight").T
    return logits / fam.get("logits_scaling", 1.0)


def write_gguf(path, arch):
    g = GGUFWriter(str(path), arch)
    if arch == "granite":  # llama.cpp's granite keys
        f = FAMILIES["granite"]
        g.add_float32("granite.embedding_scale", f["embedding_multiplier"])
        g.add_float32("granite.attention.scale", f["attention_multiplier"])
        g.add_float32("granite.residual_scale", f["residual_multiplier"])
        g.add_float32("granite.logit_scale", f["logits_scaling"])
    g.add_block_count(LAYERS)
    g.add_context_length(base["max_position_embeddings"])
    g.add_embedding_length(H)
    g.add_feed_forward_length(base["intermediate_size"])
    g.add_head_count(NH)
    g.add_head_count_kv(NKV)
    g.add_key_length(HD)
    g.add_value_length(HD)
    g.add_rope_dimension_count(HD)
    g.add_rope_freq_base(THETA)
    g.add_layer_norm_rms_eps(EPS)
    g.add_file_type(0)
    g.add_tokenizer_model("llama")
    g.add_token_list([f"<0x{b:02X}>" for b in range(256)])
    g.add_token_scores([0.0] * 256)
    g.add_token_types([6] * 256)
    g.add_add_bos_token(False)
    g.add_tensor("token_embd.weight", W["model.embed_tokens.weight"])
    for i in range(LAYERS):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        g.add_tensor(b + "attn_norm.weight", W[p + "input_layernorm.weight"])
        g.add_tensor(b + "attn_q.weight", permute(W[p + "self_attn.q_proj.weight"], NH))
        g.add_tensor(b + "attn_k.weight", permute(W[p + "self_attn.k_proj.weight"], NKV))
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


def write_unsupported(path):
    """A GGUF of an architecture the runtime does not run (Phi-2's name), header and embedding only."""
    g = GGUFWriter(str(path), "phi2")
    g.add_block_count(1)
    g.add_embedding_length(H)
    g.add_head_count(NH)
    g.add_tensor("token_embd.weight", W["model.embed_tokens.weight"][:16])
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def main():
    write_unsupported(here / "unsupported.gguf")
    save_file({k: np.ascontiguousarray(v) for k, v in sorted(W.items())}, str(here / "model.safetensors"))
    save_file({k: np.ascontiguousarray(v) for k, v in sorted(B.items())}, str(here / "biases.safetensors"))
    write_gguf(here / "smollm3.gguf", "smollm3")
    write_gguf(here / "granite.gguf", "granite")
    out = {"reference": "float64 numpy forward following transformers' modeling_smollm3 / modeling_mistral (gen.py)"}
    for name, fam in FAMILIES.items():
        cases = []
        for ids in PROMPTS:
            seq, greedy = list(ids), []
            for _ in range(8):
                nxt = int(np.argmax(forward(seq, fam)[-1]))
                greedy.append(nxt)
                seq.append(nxt)
            logits = forward(ids, fam)
            cases.append({"ids": ids, "logits": [[float(f"{v:.7g}") for v in r] for r in logits], "greedy": greedy})
        if "sliding_window" in fam:
            # A sequence many windows long: its last logits and 40 greedy ids, through caches that keep the window.
            seq = [(7 * i * i + 3 * i + 1) % 256 for i in range(200)]
            last = forward(seq, fam)[-1]
            ids = list(seq)
            for _ in range(40):
                ids.append(int(np.argmax(forward(ids, fam)[-1])))
            cases_long = {"ids": seq, "last_logits": [float(f"{v:.7g}") for v in last], "greedy": ids[200:]}
        plain = forward(PROMPTS[0], {})
        moved = float(np.abs(forward(PROMPTS[0], fam) - plain).max())
        assert moved > 0.05, f"{name} hardly differs from Llama ({moved})"
        config = {k: v for k, v in fam.items() if k != "bias_layers"}
        out[name] = {"config": {**base, "num_hidden_layers": LAYERS, **config}, "moved_from_llama": moved,
                     "cases": cases}
        if "sliding_window" in fam:
            out[name]["long"] = cases_long
    (here / "expected.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
