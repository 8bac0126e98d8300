//! The decoder's hyper-parameters, read from a GGUF header (`{arch}.*` keys), an HF `config.json`, or a Loom
//! transformer `.entity` section. One struct for all three, so the engines never ask where a model came from.

use serde_json::Value;

use crate::cpu::ops::{RopeFreqs, RopePairs};
use crate::error::{LoomError, Result};
use crate::formats::gguf::{GgufHeader, GgufValue};

/// The decoder families we run. They differ only in the optional parts of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama, Mistral, SmolLM: plain blocks.
    Llama,
    /// Qwen2: biases on the q, k and v projections.
    Qwen2,
    /// Qwen3: per-head RMSNorm of q and k before RoPE.
    Qwen3,
    /// SmolLM3: Llama's block, without RoPE on every 4th layer (`BlockSpec::no_rope`).
    SmolLM3,
    /// Granite 3.x: Llama's block with multipliers on the embedding, the attention scores, each residual branch
    /// and the logits.
    Granite,
    /// Gemma 2: Gemma 3's block without q/k norms, with its attention scores and logits soft-capped
    /// (`cap · tanh(x / cap)`) and every other layer sliding.
    Gemma2,
    /// Gemma 3 (text): q/k norms, a norm after attention and after the feed-forward, GeGLU (tanh GELU), the
    /// embedding scaled by √hidden, sliding-window layers with their own RoPE base (see [`BlockSpec`]).
    Gemma3,
    /// Phi-3, Phi-3.5 and Phi-4-mini: Llama's block with q|k|v and gate|up stored fused (split as views at load),
    /// partial rotary dimensions, LongRoPE ([`LongRope`]) and a sliding window on every layer.
    Phi3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma2 => "gemma2",
            Arch::SmolLM3 => "smollm3",
            Arch::Granite => "granite",
            Arch::Phi3 => "phi3",
        }
    }
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Dimension i with i + d/2 (HF `rotate_half`, ggml NEOX): HF weights, and Qwen GGUFs.
    Neox,
    /// Dimensions 2i and 2i+1 (ggml NORM): llama GGUFs, whose q/k rows llama.cpp's converter permuted so that
    /// adjacent-pair RoPE on the stored rows equals `rotate_half` on the original ones.
    Adjacent,
}

impl RopeStyle {
    /// The ops' pairing of dimensions for this style.
    pub fn pairs(self) -> RopePairs {
        match self {
            RopeStyle::Neox => RopePairs::Half,
            RopeStyle::Adjacent => RopePairs::Adjacent,
        }
    }
}

/// The feed-forward's gate activation: `act(gate) · up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnAct {
    /// SwiGLU (Llama, Qwen).
    Silu,
    /// GeGLU with the tanh approximation of GELU (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// Layers that attend to a sliding window of the latest positions, with their own RoPE base (Gemma 2/3).
#[derive(Clone, Debug, PartialEq)]
pub struct Sliding {
    /// Positions a query sees, its own included.
    pub window: usize,
    /// Which layers slide (one flag a layer); the others attend to the whole context.
    pub layers: Vec<bool>,
    /// The sliding layers' own RoPE base, unscaled (Gemma's local RoPE); `None`: the model's RoPE.
    pub rope_theta: Option<f32>,
}

/// One family's decoder block as both engines run it: what differs from Llama's (pre-norm attention and SwiGLU,
/// each added to the residual stream). A family is this description, never a code path of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockSpec {
    /// RMSNorm of the attention output and of the feed-forward output before their residual adds (Gemma 2/3).
    pub post_norms: bool,
    pub ffn_act: FfnAct,
    /// The token embedding is multiplied by this (Gemma: √hidden).
    pub embed_scale: f32,
    /// Attention scores are q·k times this: 1/√head_dim, or Gemma's `query_pre_attn_scalar`^-½.
    pub attn_scale: f32,
    pub sliding: Option<Sliding>,
    /// Layers that skip RoPE (SmolLM3's NoPE layers), one flag a layer; `None`: every layer rotates.
    pub no_rope: Option<Vec<bool>>,
    /// Each residual branch (attention, feed-forward) is multiplied by this before its add (Granite).
    pub residual_scale: f32,
    /// The logits are divided by this (Granite's `logits_scaling`).
    pub logit_scale: f32,
    /// Attention scores become `cap · tanh(score / cap)` after their scale (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// The logits become `cap · tanh(logit / cap)` (Gemma 2).
    pub final_softcap: Option<f32>,
    /// Added to every RMSNorm weight as it loads: HF Gemma checkpoints store w for a norm that multiplies by 1 + w
    /// (llama.cpp's GGUFs store 1 + w already: 0 there).
    pub norm_offset: f32,
}

impl BlockSpec {
    /// Llama's block (also Mistral's without a window, and Qwen's: their q/k biases and norms are weights).
    pub fn llama(head_dim: usize) -> BlockSpec {
        BlockSpec {
            post_norms: false,
            ffn_act: FfnAct::Silu,
            embed_scale: 1.0,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            sliding: None,
            no_rope: None,
            residual_scale: 1.0,
            logit_scale: 1.0,
            attn_softcap: None,
            final_softcap: None,
            norm_offset: 0.0,
        }
    }

    /// Whether this is Llama's block exactly (what the GPU engine runs today).
    pub fn is_llama(&self, head_dim: usize) -> bool {
        *self == BlockSpec::llama(head_dim)
    }
}

/// LongRoPE's factors for long sequences (Phi-3.5, Phi-4-mini): a forward call whose sequence runs past `after`
/// positions rotates with these instead of [`ModelConfig::rope_factors`] (the short ones), as transformers chooses
/// per call; positions already cached keep the rotation they had.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    pub factors: Vec<f32>,
    pub after: usize,
}

/// The RoPE frequencies an engine rotates with, computed once at load ([`ModelConfig::ropes`]).
#[derive(Clone, Debug)]
pub struct Ropes {
    global: RopeFreqs,
    long: Option<(usize, RopeFreqs)>,
    sliding: Option<RopeFreqs>,
}

impl Ropes {
    /// The model's frequencies for a forward call whose sequence ends at `end` positions.
    pub fn global(&self, end: usize) -> &RopeFreqs {
        match &self.long {
            Some((after, long)) if end > *after => long,
            _ => &self.global,
        }
    }

    /// The sliding layers' own frequencies (Gemma's local RoPE, never scaled: transformers and llama.cpp scale the
    /// global layers only), when they have a base of their own.
    pub fn sliding(&self) -> Option<&RopeFreqs> {
        self.sliding.as_ref()
    }

    /// Rotated pairs per head.
    pub fn pairs(&self) -> usize {
        self.global.pairs()
    }
}

/// Largest accepted dimensions: far above any model a browser runs, low enough that products cannot overflow.
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 1024;
/// Context used when the model does not say.
pub const DEFAULT_CONTEXT: usize = 4096;

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rope_theta: f32,
    /// Dimensions of a head that RoPE rotates (the first `rope_dims`; the rest pass through).
    pub rope_dims: usize,
    pub rope_style: RopeStyle,
    pub rms_eps: f32,
    /// The eps of the final RMSNorm before the head: the model's `rms_eps`, except for Loom transformer `.entity`
    /// files, whose final norm Loom always runs with 1e-6 whatever the dims say (spec §11).
    pub final_norm_eps: f32,
    /// Longest sequence the model was trained for: the KV cache's limit.
    pub context: usize,
    pub tied_embeddings: bool,
    pub block: BlockSpec,
    /// RoPE frequency divisors, one per rotated pair (llama.cpp's `rope_freqs`): Llama 3.x, linear and YaRN
    /// scaling, and LongRoPE's short factors.
    pub rope_factors: Option<Vec<f32>>,
    /// LongRoPE's long factors and when they apply.
    pub rope_long: Option<LongRope>,
    /// RoPE's cos and sin are multiplied by this: YaRN's and LongRoPE's attention factor (llama.cpp's
    /// `rope.scaling.attn_factor`); 1 otherwise.
    pub rope_mscale: f32,
}

impl ModelConfig {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// The RoPE frequencies of the model: its own (scaled by `rope_factors`, times `rope_mscale`), LongRoPE's long
    /// ones, and the sliding layers' own base.
    pub fn ropes(&self) -> Ropes {
        let scaled = |factors: Option<&[f32]>| {
            let mut f = RopeFreqs::plain(self.rope_theta, self.rope_dims);
            f.mscale = f64::from(self.rope_mscale);
            for (v, d) in f.inv_freq.iter_mut().zip(factors.unwrap_or(&[])) {
                *v /= f64::from(*d);
            }
            f
        };
        Ropes {
            global: scaled(self.rope_factors.as_deref()),
            long: self.rope_long.as_ref().map(|l| (l.after, scaled(Some(&l.factors)))),
            sliding: self
                .block
                .sliding
                .as_ref()
                .and_then(|s| s.rope_theta)
                .map(|t| RopeFreqs::plain(t, self.rope_dims)),
        }
    }

    /// Applies a GGUF's RoPE factors (tensor `name`: the converter's Llama 3 `rope_freqs.weight`, or LongRoPE's
    /// short ones), checked: one finite positive factor per rotated pair. With a linear factor already set, both
    /// apply.
    pub fn set_rope_freqs(&mut self, name: &str, factors: &[f32]) -> Result<()> {
        if factors.len() != self.rope_dims / 2 || !factors.iter().all(|f| f.is_finite() && *f > 0.0) {
            return Err(LoomError::InvalidNetwork(format!(
                "{name}: {} factors for {} rotated pairs (each finite and positive)",
                factors.len(),
                self.rope_dims / 2
            )));
        }
        self.rope_factors = Some(match &self.rope_factors {
            Some(old) => old.iter().zip(factors).map(|(a, b)| a * b).collect(),
            None => factors.to_vec(),
        });
        Ok(())
    }

    /// Sets LongRoPE's long factors (a GGUF's `rope_factors_long.weight`), checked as `rope_factors` are.
    pub fn set_long_rope(&mut self, factors: &[f32], after: usize) -> Result<()> {
        if factors.len() != self.rope_dims / 2 || !factors.iter().all(|f| f.is_finite() && *f > 0.0) {
            return Err(LoomError::InvalidNetwork(format!(
                "rope_factors_long.weight: {} factors for {} rotated pairs (each finite and positive)",
                factors.len(),
                self.rope_dims / 2
            )));
        }
        self.rope_long = Some(LongRope {
            factors: factors.to_vec(),
            after,
        });
        Ok(())
    }

    /// The sliding window layer `l` attends within, if it slides.
    pub fn window(&self, l: usize) -> Option<usize> {
        let s = self.block.sliding.as_ref()?;
        s.layers.get(l).copied().unwrap_or(false).then_some(s.window)
    }

    /// Whether layer `l` applies RoPE (SmolLM3's NoPE layers do not).
    pub fn rotates(&self, l: usize) -> bool {
        !self
            .block
            .no_rope
            .as_ref()
            .is_some_and(|n| n.get(l).copied().unwrap_or(false))
    }

    /// Layer `l`'s RoPE, of the model's (`global`) and the sliding layers' own (`sliding`, from
    /// [`Ropes::sliding`]): the sliding one where the layer slides and there is one.
    pub fn layer_rope<'a, T>(&self, l: usize, global: &'a T, sliding: Option<&'a T>) -> &'a T {
        match (sliding, self.window(l)) {
            (Some(own), Some(_)) => own,
            _ => global,
        }
    }

    /// Checks the relations the decoder relies on, so a lying header is an error here and never an index out of
    /// range later.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(LoomError::InvalidNetwork(format!("model config: {m}")));
        for (name, v, max) in [
            ("layers", self.n_layers, MAX_LAYERS),
            ("hidden size", self.hidden, MAX_DIM),
            ("heads", self.n_heads, MAX_DIM),
            ("kv heads", self.n_kv_heads, MAX_DIM),
            ("head_dim", self.head_dim, MAX_DIM),
            ("intermediate size", self.ffn, MAX_DIM),
            ("vocabulary", self.vocab, 1 << 24),
            ("context", self.context, 1 << 24),
        ] {
            if v == 0 || v > max {
                return bad(format!("{name} = {v} (1 to {max})"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} heads are not a multiple of {} kv heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        // Multiplied as u64: on wasm32 two sizes under MAX_DIM can overflow usize.
        let q_dim = self.n_heads as u64 * self.head_dim as u64;
        if q_dim > MAX_DIM as u64 {
            return bad(format!("heads × head_dim = {q_dim} exceeds {MAX_DIM}"));
        }
        if self.rope_dims == 0 || self.rope_dims > self.head_dim || !self.rope_dims.is_multiple_of(2) {
            return bad(format!(
                "RoPE over {} of {} head dimensions",
                self.rope_dims, self.head_dim
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!("rope_theta {}", self.rope_theta));
        }
        for f in self
            .rope_factors
            .iter()
            .chain(self.rope_long.as_ref().map(|l| &l.factors))
        {
            if f.len() != self.rope_dims / 2 || !f.iter().all(|f| f.is_finite() && *f > 0.0) {
                return bad(format!(
                    "{} RoPE factors for {} rotated pairs",
                    f.len(),
                    self.rope_dims / 2
                ));
            }
        }
        if !(self.rope_mscale.is_finite() && self.rope_mscale > 0.0) {
            return bad(format!("RoPE attention factor {}", self.rope_mscale));
        }
        let b = &self.block;
        if [b.attn_softcap, b.final_softcap]
            .iter()
            .flatten()
            .any(|c| !(c.is_finite() && *c > 0.0))
        {
            return bad(format!("soft caps {:?} / {:?}", b.attn_softcap, b.final_softcap));
        }
        if !(b.residual_scale.is_finite() && b.logit_scale.is_finite() && b.logit_scale != 0.0) {
            return bad(format!(
                "residual scale {} / logit scale {}",
                b.residual_scale, b.logit_scale
            ));
        }
        if !(b.embed_scale.is_finite() && b.attn_scale.is_finite() && b.attn_scale > 0.0) {
            return bad(format!(
                "embedding scale {} / attention scale {}",
                b.embed_scale, b.attn_scale
            ));
        }
        if b.no_rope.as_ref().is_some_and(|n| n.len() != self.n_layers) {
            return bad(format!("NoPE flags for other than {} layers", self.n_layers));
        }
        if let Some(s) = &b.sliding {
            if s.window == 0 || s.layers.len() != self.n_layers {
                return bad(format!(
                    "a sliding window of {} over {} layer flags for {} layers",
                    s.window,
                    s.layers.len(),
                    self.n_layers
                ));
            }
            if s.rope_theta.is_some_and(|t| !(t.is_finite() && t > 0.0)) {
                return bad(format!("sliding layers' rope_theta {:?}", s.rope_theta));
            }
        }
        for eps in [self.rms_eps, self.final_norm_eps] {
            if !(eps.is_finite() && eps >= 0.0) {
                return bad(format!("rms_norm_eps {eps}"));
            }
        }
        Ok(())
    }

    /// From a GGUF header's `general.architecture` and `{arch}.*` keys. The vocabulary size comes from the
    /// embedding tensor (passed by the caller), never from a key alone.
    pub fn from_gguf(h: &GgufHeader, vocab: usize) -> Result<ModelConfig> {
        let arch_name = match h.get("general.architecture") {
            Some(GgufValue::String(s)) => s.as_str(),
            _ => return Err(LoomError::Gguf("general.architecture is missing".into())),
        };
        let arch = match arch_name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            "gemma2" => Arch::Gemma2,
            "smollm3" => Arch::SmolLM3,
            "granite" => Arch::Granite,
            "phi3" => Arch::Phi3,
            other => {
                return Err(LoomError::Unsupported(format!(
                    "GGUF architecture {other:?} (llama, qwen2, qwen3, gemma2, gemma3, smollm3, granite and phi3 \
                     run)"
                )))
            }
        };
        let keys = ArchKeys { h, arch: arch_name };
        let (key, int, float) = (|k: &str| keys.key(k), |k: &str| keys.int(k), |k: &str| keys.float(k));
        let need =
            |k: &str| -> Result<usize> { int(k)?.ok_or_else(|| LoomError::Gguf(format!("{} is missing", key(k)))) };
        let hidden = need("embedding_length")?;
        let n_heads = need("attention.head_count")?;
        let head_dim = match int("attention.key_length")? {
            Some(d) => d,
            None => hidden / n_heads.max(1),
        };
        let n_layers = need("block_count")?;
        let rope_theta = float("rope.freq_base")?.unwrap_or(10000.0);
        let block = match arch {
            Arch::Gemma3 | Arch::Gemma2 => gemma_gguf_block(arch, &keys, n_layers, n_heads, head_dim, hidden)?,
            // llama.cpp's `n_no_rope_layer_step`: every 4th layer skips RoPE.
            Arch::SmolLM3 => BlockSpec {
                no_rope: Some((0..n_layers).map(|l| (l + 1) % 4 == 0).collect()),
                ..BlockSpec::llama(head_dim)
            },
            // llama.cpp's granite: each multiplier optional (0 or absent: none), the logit scale required.
            Arch::Granite => {
                let llama = BlockSpec::llama(head_dim);
                let or =
                    |k: &str, default: f32| -> Result<f32> { Ok(float(k)?.filter(|v| *v != 0.0).unwrap_or(default)) };
                BlockSpec {
                    embed_scale: or("embedding_scale", 1.0)?,
                    attn_scale: or("attention.scale", llama.attn_scale)?,
                    residual_scale: or("residual_scale", 1.0)?,
                    logit_scale: float("logit_scale")?
                        .ok_or_else(|| LoomError::Gguf(format!("{} is missing", key("logit_scale"))))?,
                    ..llama
                }
            }
            // Every layer within `attention.sliding_window`, as transformers runs Phi-3 (llama.cpp b11434 reads
            // the key but runs without the window, warning that results may suffer).
            Arch::Phi3 => BlockSpec {
                sliding: match int("attention.sliding_window")? {
                    Some(w) if w > 0 => Some(Sliding {
                        window: w,
                        layers: vec![true; n_layers],
                        rope_theta: None,
                    }),
                    _ => None,
                },
                ..BlockSpec::llama(head_dim)
            },
            _ => BlockSpec::llama(head_dim),
        };
        let rope_dims = int("rope.dimension_count")?.unwrap_or(head_dim);
        // `rope.scaling.type`: none, or linear (every frequency divided by `rope.scaling.factor`); a Llama 3 file
        // carries its factors as the tensor rope_freqs.weight instead (`set_rope_freqs`, by the loaders).
        let rope_factors = match h.get(&key("rope.scaling.type")) {
            None => None,
            Some(GgufValue::String(t)) if t == "none" => None,
            Some(GgufValue::String(t)) if t == "linear" => {
                let f = float("rope.scaling.factor")?.unwrap_or(1.0);
                if !(f.is_finite() && f > 0.0) {
                    return Err(LoomError::Gguf(format!("{} {f}", key("rope.scaling.factor"))));
                }
                Some(vec![f; rope_dims / 2])
            }
            Some(other) => {
                return Err(LoomError::Unsupported(format!(
                    "{} {}: RoPE scaling of that type does not run (none and linear do)",
                    key("rope.scaling.type"),
                    other.display()
                )))
            }
        };
        let cfg = ModelConfig {
            arch,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads: int("attention.head_count_kv")?.unwrap_or(n_heads),
            head_dim,
            ffn: need("feed_forward_length")?,
            vocab,
            rope_theta,
            rope_dims,
            // llama.cpp runs llama and SmolLM3 with NORM RoPE on permuted rows, Qwen and Gemma with NEOX on rows
            // as trained.
            rope_style: if matches!(arch, Arch::Llama | Arch::SmolLM3 | Arch::Granite) {
                RopeStyle::Adjacent
            } else {
                RopeStyle::Neox
            },
            rms_eps: float("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
            final_norm_eps: float("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
            context: int("context_length")?.unwrap_or(DEFAULT_CONTEXT),
            tied_embeddings: h.tensor("output.weight").is_none(),
            block,
            rope_factors,
            // Read by the loaders with the factor tensors (`rope_factors_long.weight`).
            rope_long: None,
            // llama.cpp multiplies cos and sin by it for every architecture.
            rope_mscale: float("rope.scaling.attn_factor")?.unwrap_or(1.0),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// From an HF `config.json` (Llama, Mistral, Qwen2, Qwen3). `has_lm_head` says whether the weights hold
    /// `lm_head.weight`; without it the head is tied whatever the config says.
    pub fn from_hf_json(json: &[u8], has_lm_head: bool) -> Result<ModelConfig> {
        let top: Value = serde_json::from_slice(json).map_err(|e| crate::error::json_err("config.json", e))?;
        // A multimodal model (Gemma 3's Gemma3ForConditionalGeneration) keeps its language model's config in
        // `text_config`: that is the decoder's.
        let v = match top.get("text_config").filter(|t| t.is_object()) {
            Some(t) => t.clone(),
            None => top.clone(),
        };
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
        let archs: Vec<String> = v
            .get("architectures")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_ascii_lowercase)
                    .collect()
            })
            .unwrap_or_default();
        let model_type = text("model_type");
        let is = |name: &str| model_type == name || archs.iter().any(|a| a.starts_with(name));
        // Exactly: Phi-3-small (`phi3small`) is another block.
        let arch = if model_type == "phi3" || archs.iter().any(|a| a == "phi3forcausallm") {
            Arch::Phi3
        } else if is("gemma3") {
            Arch::Gemma3
        } else if is("gemma2") {
            Arch::Gemma2
        } else if is("qwen3") {
            Arch::Qwen3
        } else if is("smollm3") {
            Arch::SmolLM3
        } else if is("granite") && !is("granitemoe") {
            Arch::Granite
        } else if is("qwen2") {
            Arch::Qwen2
        } else if is("llama") || is("mistral") || model_type.is_empty() && archs.is_empty() {
            Arch::Llama
        } else {
            return Err(LoomError::Unsupported(format!(
                "config.json model_type {model_type:?} / architectures {archs:?} (Llama, Mistral, Qwen2, Qwen3, \
                 SmolLM3, Granite, Phi-3, Gemma 2 and Gemma 3 run)"
            )));
        };
        let int = |k: &str| -> Result<Option<usize>> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .and_then(|x| usize::try_from(x).ok())
                    .map(Some)
                    .ok_or_else(|| {
                        LoomError::InvalidNetwork(format!("config.json: {k} is not an unsigned integer: {x}"))
                    }),
            }
        };
        let need = |k: &str| -> Result<usize> {
            int(k)?.ok_or_else(|| LoomError::InvalidNetwork(format!("config.json: {k} is missing")))
        };
        let float = |k: &str, default: f32| -> Result<f32> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => x
                    .as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| LoomError::InvalidNetwork(format!("config.json: {k} is not a number: {x}"))),
            }
        };
        let hidden = need("hidden_size")?;
        let n_heads = need("num_attention_heads")?;
        let head_dim = int("head_dim")?.unwrap_or(hidden / n_heads.max(1));
        // transformers ≤ 4.x: `rope_scaling` beside `rope_theta`; 5.x: `rope_parameters` holding both.
        let params = v.get("rope_parameters").filter(|x| x.is_object());
        let rope_theta = match params.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64) {
            Some(t) => t as f32,
            None => float("rope_theta", 10000.0)?,
        };
        let scaling = v.get("rope_scaling").filter(|x| !x.is_null()).or(params);
        let n_layers = need("num_hidden_layers")?;
        let block = hf_block(&v, arch, n_layers, head_dim)?;
        // transformers' `int(head_dim * partial_rotary_factor)` (Phi-4-mini: 0.75).
        let partial = match params.and_then(|p| p.get("partial_rotary_factor")) {
            Some(p) if !p.is_null() => p.as_f64().unwrap_or(f64::NAN),
            _ => f64::from(float("partial_rotary_factor", 1.0)?),
        };
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(LoomError::InvalidNetwork(format!(
                "config.json: partial_rotary_factor {partial} (above 0, at most 1)"
            )));
        }
        let rope_dims = (head_dim as f64 * partial) as usize;
        let context = int("max_position_embeddings")?.unwrap_or(DEFAULT_CONTEXT);
        // Phi3Config's default when a config leaves it out.
        let old_context = int("original_max_position_embeddings")?.or((arch == Arch::Phi3).then_some(4096));
        let scaled = match scaling {
            None => RopeScaling::default(),
            Some(s) => hf_rope_scaling(s, rope_theta, rope_dims, context, old_context)?,
        };
        let cfg = ModelConfig {
            arch,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads: int("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            ffn: need("intermediate_size")?,
            vocab: need("vocab_size")?,
            rope_theta,
            rope_dims,
            rope_style: RopeStyle::Neox,
            rms_eps: float("rms_norm_eps", 1e-6)?,
            final_norm_eps: float("rms_norm_eps", 1e-6)?,
            context,
            tied_embeddings: !has_lm_head,
            block,
            rope_factors: scaled.factors,
            rope_long: scaled.long,
            rope_mscale: scaled.mscale,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// A GGUF header's `{arch}.*` keys, read as the types they must have.
struct ArchKeys<'a> {
    h: &'a GgufHeader,
    arch: &'a str,
}

impl ArchKeys<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    fn get(&self, k: &str) -> Option<&GgufValue> {
        self.h.get(&self.key(k))
    }

    fn int(&self, k: &str) -> Result<Option<usize>> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|v| usize::try_from(v).ok())
                .map(Some)
                .ok_or_else(|| LoomError::Gguf(format!("{} is not an unsigned integer: {}", self.key(k), v.display()))),
        }
    }

    fn float(&self, k: &str) -> Result<Option<f32>> {
        match self.get(k) {
            None => Ok(None),
            Some(GgufValue::F32(v)) => Ok(Some(*v)),
            Some(GgufValue::F64(v)) => Ok(Some(*v as f32)),
            Some(v) => Err(LoomError::Gguf(format!(
                "{} is not a float: {}",
                self.key(k),
                v.display()
            ))),
        }
    }
}

/// Gemma 3's or Gemma 2's block from a GGUF's keys, as llama.cpp reads them (`llama_model_gemma3`,
/// `llama_model_gemma2`): a window from `attention.sliding_window` (Gemma 2: 4,096 by default) on the layers
/// `attention.sliding_window_pattern` picks (an array of flags, or every layer but each n-th, n = 6 for Gemma 3 and 2
/// for Gemma 2); Gemma 3's sliding layers rotate with `rope.freq_base_swa` (10,000 by default), Gemma 2's as the
/// others; queries scaled by 1/√head_dim (llama.cpp's rule but for the 27B models, 1/√(hidden/heads)); the
/// embedding by √hidden; Gemma 2's soft caps `attn_logit_softcapping` (50) and `final_logit_softcapping` (30), and
/// Gemma 3's final cap when a file sets one. The norms' weights are stored with their +1 (llama.cpp's converter adds
/// it).
fn gemma_gguf_block(
    arch: Arch,
    keys: &ArchKeys,
    n_layers: usize,
    n_heads: usize,
    head_dim: usize,
    hidden: usize,
) -> Result<BlockSpec> {
    let gemma2 = arch == Arch::Gemma2;
    let (key, get, float) = (|k: &str| keys.key(k), |k: &str| keys.get(k), |k: &str| keys.float(k));
    // A cap of 0 (or none where llama.cpp has no default) is no cap.
    let cap = |k: &str, default: f32| -> Result<Option<f32>> {
        Ok(float(k)?.or(gemma2.then_some(default)).filter(|c| *c != 0.0))
    };
    let window = match keys.int("attention.sliding_window")? {
        None if gemma2 => 4096,
        None => 0,
        Some(w) => w,
    };
    let sliding = if window == 0 {
        None
    } else {
        let layers = match get("attention.sliding_window_pattern") {
            Some(GgufValue::Array(_, items)) => items
                .iter()
                .map(|v| match v {
                    GgufValue::Bool(b) => Ok(*b),
                    other => Err(LoomError::Gguf(format!(
                        "{} holds {}, not flags",
                        key("attention.sliding_window_pattern"),
                        other.display()
                    ))),
                })
                .collect::<Result<Vec<bool>>>()?,
            other => {
                let n = match other {
                    None if gemma2 => 2,
                    None => 6,
                    Some(v) => v.as_u64().ok_or_else(|| {
                        LoomError::Gguf(format!("{} is not a count", key("attention.sliding_window_pattern")))
                    })?,
                };
                // llama.cpp's `set_swa_pattern`: every layer slides but each n-th (n = 0: all of them).
                (0..n_layers as u64).map(|l| n == 0 || l % n < n - 1).collect()
            }
        };
        let rope_theta = match (float("rope.freq_base_swa")?, gemma2) {
            (Some(t), _) => Some(t),
            (None, true) => None,
            (None, false) => Some(10000.0),
        };
        Some(Sliding {
            window,
            layers,
            rope_theta,
        })
    };
    let big = n_layers == if gemma2 { 46 } else { 62 };
    let scale_dim = if big { hidden / n_heads.max(1) } else { head_dim };
    Ok(BlockSpec {
        post_norms: true,
        ffn_act: FfnAct::GeluTanh,
        embed_scale: (hidden as f32).sqrt(),
        attn_scale: 1.0 / (scale_dim as f32).sqrt(),
        sliding,
        attn_softcap: cap("attn_logit_softcapping", 50.0)?,
        final_softcap: cap("final_logit_softcapping", 30.0)?,
        ..BlockSpec::llama(head_dim)
    })
}

/// What an HF `rope_scaling` asks of RoPE.
struct RopeScaling {
    factors: Option<Vec<f32>>,
    long: Option<LongRope>,
    mscale: f32,
}

impl Default for RopeScaling {
    fn default() -> RopeScaling {
        RopeScaling {
            factors: None,
            long: None,
            mscale: 1.0,
        }
    }
}

/// RoPE scaling from an HF `rope_scaling` (or `rope_parameters`), as transformers' `ROPE_INIT_FUNCTIONS` compute it
/// over the `dims` rotated dimensions of a head: `default` none; `linear` every frequency divided by `factor`;
/// `llama3` (`_compute_llama3_parameters`) long wavelengths divided by `factor`, short ones kept, the band between
/// smoothed; `yarn` (`_compute_yarn_parameters`) the same blend by rotations (`beta_fast`, `beta_slow`) with its
/// attention factor; `longrope` (`_compute_longrope_parameters`, Phi-3) short and long factors, the long ones for
/// sequences past `original_max_position_embeddings`, with its attention factor. `context` is the config's
/// `max_position_embeddings`, `old_context` its top-level `original_max_position_embeddings`. Any other type
/// (dynamic, ...) is refused by name: it must never run unscaled.
fn hf_rope_scaling(
    s: &Value,
    theta: f32,
    dims: usize,
    context: usize,
    old_context: Option<usize>,
) -> Result<RopeScaling> {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let bad = |k: &str| LoomError::InvalidNetwork(format!("config.json: rope_scaling {k} is missing or not positive"));
    // An optional positive number (null or absent: `None`).
    let opt = |k: &str| -> Result<Option<f64>> {
        match s.get(k).filter(|x| !x.is_null()) {
            None => Ok(None),
            Some(x) => x
                .as_f64()
                .filter(|v| v.is_finite() && *v > 0.0)
                .map(Some)
                .ok_or_else(|| bad(k)),
        }
    };
    let num = |k: &str| -> Result<f64> { opt(k)?.ok_or_else(|| bad(k)) };
    let inv = crate::cpu::ops::rope_inv_freq(theta, dims);
    // transformers 5 keeps the pretraining length in the scaling; a top-level one (Phi-3's) comes first.
    let old_context = match (old_context, opt("original_max_position_embeddings")?) {
        (Some(n), _) => Some(n as f64),
        (None, s) => s,
    };
    let divisors = |scaled: &[f64]| -> Vec<f32> { inv.iter().zip(scaled).map(|(f, g)| (f / g) as f32).collect() };
    match kind {
        "default" => Ok(RopeScaling::default()),
        "linear" => Ok(RopeScaling {
            factors: Some(vec![num("factor")? as f32; inv.len()]),
            ..RopeScaling::default()
        }),
        "llama3" => {
            let (factor, low, high) = (num("factor")?, num("low_freq_factor")?, num("high_freq_factor")?);
            let old_context = old_context.ok_or_else(|| bad("original_max_position_embeddings"))?;
            if high <= low {
                return Err(LoomError::InvalidNetwork(format!(
                    "config.json: rope_scaling high_freq_factor {high} ≤ low_freq_factor {low}"
                )));
            }
            let (low_wavelen, high_wavelen) = (old_context / low, old_context / high);
            let scaled: Vec<f64> = inv
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old_context / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect();
            Ok(RopeScaling {
                factors: Some(divisors(&scaled)),
                ..RopeScaling::default()
            })
        }
        "yarn" => {
            // transformers 5 derives a missing `factor` from the two lengths; with neither there is nothing to scale by.
            let factor = match (opt("factor")?, old_context) {
                (Some(f), _) => f,
                (None, Some(old)) => context as f64 / old,
                (None, None) => return Err(bad("factor")),
            };
            let old_context = old_context.unwrap_or(context as f64);
            let get_mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
            let mscale = match (opt("attention_factor")?, opt("mscale")?, opt("mscale_all_dim")?) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(all)) => get_mscale(factor, m) / get_mscale(factor, all),
                _ => get_mscale(factor, 1.0),
            };
            let beta_fast = opt("beta_fast")?.unwrap_or(32.0);
            let beta_slow = opt("beta_slow")?.unwrap_or(1.0);
            let truncate = s.get("truncate").and_then(Value::as_bool).unwrap_or(true);
            let d = dims as f64;
            let base = f64::from(theta);
            let correction =
                |rotations: f64| d * (old_context / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln());
            let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
            if truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
            if low == high {
                high += 0.001;
            }
            let scaled: Vec<f64> = inv
                .iter()
                .enumerate()
                .map(|(i, &f)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let extrapolation = 1.0 - ramp;
                    f / factor * (1.0 - extrapolation) + f * extrapolation
                })
                .collect();
            Ok(RopeScaling {
                factors: Some(divisors(&scaled)),
                long: None,
                mscale: mscale as f32,
            })
        }
        "longrope" | "su" => {
            let list = |k: &str| -> Result<Vec<f32>> {
                s.get(k)
                    .and_then(Value::as_array)
                    .filter(|a| a.len() == inv.len())
                    .and_then(|a| {
                        a.iter()
                            .map(|x| x.as_f64().filter(|v| v.is_finite() && *v > 0.0).map(|v| v as f32))
                            .collect::<Option<Vec<f32>>>()
                    })
                    .ok_or_else(|| {
                        LoomError::InvalidNetwork(format!(
                            "config.json: rope_scaling {k} is not {} positive factors (one per rotated pair)",
                            inv.len()
                        ))
                    })
            };
            let (short, long) = (list("short_factor")?, list("long_factor")?);
            // transformers 5's rule (4.x let a top-level original length override `factor`; Phi-3's configs have
            // no `factor`, so both agree on them).
            let old_context = old_context.unwrap_or(context as f64);
            let factor = opt("factor")?.unwrap_or(context as f64 / old_context);
            let mscale = match opt("attention_factor")? {
                Some(a) => a,
                None if factor <= 1.0 => 1.0,
                None => (1.0 + factor.ln() / old_context.ln()).sqrt(),
            };
            Ok(RopeScaling {
                factors: Some(short),
                long: Some(LongRope {
                    factors: long,
                    after: old_context as usize,
                }),
                mscale: mscale as f32,
            })
        }
        other => Err(LoomError::Unsupported(format!(
            "config.json: rope_scaling type {other:?} does not run (default, linear, llama3, yarn and longrope do)"
        ))),
    }
}

/// The block of an HF config (Llama-shaped families): Granite's multipliers (`embedding_multiplier`,
/// `attention_multiplier`, `residual_multiplier`, `logits_scaling`), SmolLM3's `no_rope_layers` (1 = the layer rotates; or every
/// `no_rope_layer_interval`-th layer skips, 4 by default, as its config builds the list), and a sliding window
/// where transformers applies one: every layer of a Llama/Mistral config with `sliding_window` set (and
/// `use_sliding_window` not false); a Qwen2 config's layers from `max_window_layers` on when `use_sliding_window` is
/// true.
fn hf_block(v: &Value, arch: Arch, n_layers: usize, head_dim: usize) -> Result<BlockSpec> {
    if matches!(arch, Arch::Gemma2 | Arch::Gemma3) {
        return hf_gemma_block(v, arch, n_layers, head_dim);
    }
    let mut block = BlockSpec::llama(head_dim);
    if arch == Arch::Granite {
        let multiplier = |k: &str, default: f32| -> Result<f32> {
            match v.get(k).filter(|x| !x.is_null()) {
                None => Ok(default),
                Some(x) => x
                    .as_f64()
                    .map(|x| x as f32)
                    .filter(|x| x.is_finite() && *x != 0.0)
                    .ok_or_else(|| LoomError::InvalidNetwork(format!("config.json: {k} {x}"))),
            }
        };
        block.embed_scale = multiplier("embedding_multiplier", 1.0)?;
        block.attn_scale = multiplier("attention_multiplier", block.attn_scale)?;
        block.residual_scale = multiplier("residual_multiplier", 1.0)?;
        block.logit_scale = multiplier("logits_scaling", 1.0)?;
    }
    let count = |k: &str| {
        v.get(k)
            .filter(|x| !x.is_null())
            .map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok()))
    };
    if arch == Arch::SmolLM3 {
        let flags = match v.get("no_rope_layers").filter(|x| !x.is_null()) {
            Some(list) => list
                .as_array()
                .filter(|a| a.len() == n_layers)
                .and_then(|a| {
                    a.iter()
                        .map(|x| x.as_u64().map(|x| x == 0))
                        .collect::<Option<Vec<bool>>>()
                })
                .ok_or_else(|| {
                    LoomError::InvalidNetwork(format!("config.json: no_rope_layers {list} is not {n_layers} flags"))
                })?,
            None => {
                let every = match count("no_rope_layer_interval") {
                    None => 4,
                    Some(Some(n)) if n > 0 => n,
                    Some(_) => {
                        return Err(LoomError::InvalidNetwork(
                            "config.json: no_rope_layer_interval is not a positive integer".into(),
                        ))
                    }
                };
                (0..n_layers).map(|l| (l + 1) % every == 0).collect()
            }
        };
        block.no_rope = Some(flags);
    }
    let use_window = v.get("use_sliding_window").and_then(Value::as_bool);
    let window = match count("sliding_window") {
        None => None,
        Some(Some(w)) if w > 0 => Some(w),
        Some(_) => {
            return Err(LoomError::InvalidNetwork(
                "config.json: sliding_window is not a positive integer".into(),
            ))
        }
    };
    let sliding_layers = match (arch, window, use_window) {
        (_, None, _) | (_, _, Some(false)) => None,
        (Arch::Qwen2 | Arch::Qwen3, Some(_), None) => None,
        (Arch::Qwen2 | Arch::Qwen3, Some(_), Some(true)) => {
            let from = match count("max_window_layers") {
                Some(Some(n)) => n,
                _ => 0,
            };
            Some((0..n_layers).map(|l| l >= from).collect())
        }
        (_, Some(_), _) => Some(vec![true; n_layers]),
    };
    if let (Some(window), Some(layers)) = (window, sliding_layers) {
        block.sliding = Some(Sliding {
            window,
            layers,
            rope_theta: None,
        });
    }
    Ok(block)
}

/// Gemma 3's or Gemma 2's block from its HF text config, as `modeling_gemma3.py` / `modeling_gemma2.py` run it: norms
/// after attention and feed-forward, each `(1 + w)`; GeGLU with `hidden_activation` gelu_pytorch_tanh; the embedding
/// times √hidden; scores times `query_pre_attn_scalar`^-½, then soft-capped by `attn_logit_softcapping`, and the
/// logits by `final_logit_softcapping` (null: none); the layers `layer_types` marks "sliding_attention" (or all but
/// each `sliding_window_pattern`-th: 6 for Gemma 3, every other for Gemma 2) within `sliding_window`, Gemma 3's with
/// `rope_local_base_freq` (10,000).
fn hf_gemma_block(v: &Value, arch: Arch, n_layers: usize, head_dim: usize) -> Result<BlockSpec> {
    let bad = |m: String| LoomError::InvalidNetwork(format!("config.json: {m}"));
    let gemma2 = arch == Arch::Gemma2;
    let cap = |k: &str| -> Result<Option<f32>> {
        match v.get(k).filter(|x| !x.is_null()) {
            None => Ok(None),
            Some(x) => match x.as_f64() {
                Some(c) if c.is_finite() && c > 0.0 => Ok(Some(c as f32)),
                _ => Err(bad(format!("{k} {x}"))),
            },
        }
    };
    let act = v
        .get("hidden_activation")
        .and_then(Value::as_str)
        .unwrap_or("gelu_pytorch_tanh");
    if act != "gelu_pytorch_tanh" {
        return Err(LoomError::Unsupported(format!(
            "config.json: hidden_activation {act:?}"
        )));
    }
    let num = |k: &str| v.get(k).filter(|x| !x.is_null()).and_then(Value::as_f64);
    let hidden = num("hidden_size").ok_or_else(|| bad("hidden_size is missing".into()))?;
    let scalar = num("query_pre_attn_scalar").unwrap_or(head_dim as f64);
    if !(scalar.is_finite() && scalar > 0.0) {
        return Err(bad(format!("query_pre_attn_scalar {scalar}")));
    }
    let sliding = match num("sliding_window") {
        None => None,
        Some(w) if w >= 1.0 && w.fract() == 0.0 => {
            let layers = match v.get("layer_types").and_then(Value::as_array) {
                Some(types) => types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("sliding_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        _ => Err(bad(format!("layer_types holds {t}"))),
                    })
                    .collect::<Result<Vec<bool>>>()?,
                None => {
                    let every = num("sliding_window_pattern").unwrap_or(if gemma2 { 2.0 } else { 6.0 });
                    let every = every.max(1.0) as usize;
                    (0..n_layers).map(|l| (l + 1) % every != 0).collect()
                }
            };
            Some(Sliding {
                window: w as usize,
                layers,
                rope_theta: match gemma2 {
                    true => None,
                    false => Some(num("rope_local_base_freq").unwrap_or(10000.0) as f32),
                },
            })
        }
        Some(w) => return Err(bad(format!("sliding_window {w}"))),
    };
    Ok(BlockSpec {
        post_norms: true,
        ffn_act: FfnAct::GeluTanh,
        // transformers casts √hidden to the weights' dtype; float32 here.
        embed_scale: (hidden as f32).sqrt(),
        attn_scale: scalar.powf(-0.5) as f32,
        sliding,
        attn_softcap: cap("attn_logit_softcapping")?,
        final_softcap: cap("final_logit_softcapping")?,
        norm_offset: 1.0,
        ..BlockSpec::llama(head_dim)
    })
}
