//! The decoder's hyper-parameters, read from a GGUF header (`{arch}.*` keys), an HF `config.json`, or a Loom
//! transformer `.entity` section. One struct for all three, so the engines never ask where a model came from.

use serde_json::Value;

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
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
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
    /// Longest sequence the model was trained for: the KV cache's limit.
    pub context: usize,
    pub tied_embeddings: bool,
}

impl ModelConfig {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
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
        if self.q_dim() > MAX_DIM {
            return bad(format!("heads × head_dim = {} exceeds {MAX_DIM}", self.q_dim()));
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
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return bad(format!("rms_norm_eps {}", self.rms_eps));
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
            other => {
                return Err(LoomError::Unsupported(format!(
                    "GGUF architecture {other:?} (llama, qwen2 and qwen3 run)"
                )))
            }
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let int = |k: &str| -> Result<Option<usize>> {
            match h.get(&key(k)) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .map(Some)
                    .ok_or_else(|| LoomError::Gguf(format!("{} is not an unsigned integer: {}", key(k), v.display()))),
            }
        };
        let need =
            |k: &str| -> Result<usize> { int(k)?.ok_or_else(|| LoomError::Gguf(format!("{} is missing", key(k)))) };
        let float = |k: &str| -> Result<Option<f32>> {
            match h.get(&key(k)) {
                None => Ok(None),
                Some(GgufValue::F32(v)) => Ok(Some(*v)),
                Some(GgufValue::F64(v)) => Ok(Some(*v as f32)),
                Some(v) => Err(LoomError::Gguf(format!("{} is not a float: {}", key(k), v.display()))),
            }
        };
        let hidden = need("embedding_length")?;
        let n_heads = need("attention.head_count")?;
        let head_dim = match int("attention.key_length")? {
            Some(d) => d,
            None => hidden / n_heads.max(1),
        };
        let cfg = ModelConfig {
            arch,
            n_layers: need("block_count")?,
            hidden,
            n_heads,
            n_kv_heads: int("attention.head_count_kv")?.unwrap_or(n_heads),
            head_dim,
            ffn: need("feed_forward_length")?,
            vocab,
            rope_theta: float("rope.freq_base")?.unwrap_or(10000.0),
            rope_dims: int("rope.dimension_count")?.unwrap_or(head_dim),
            // llama.cpp runs llama with NORM RoPE on permuted rows, Qwen with NEOX on rows as trained.
            rope_style: if arch == Arch::Llama {
                RopeStyle::Adjacent
            } else {
                RopeStyle::Neox
            },
            rms_eps: float("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
            context: int("context_length")?.unwrap_or(DEFAULT_CONTEXT),
            tied_embeddings: h.tensor("output.weight").is_none(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// From an HF `config.json` (Llama, Mistral, Qwen2, Qwen3). `has_lm_head` says whether the weights hold
    /// `lm_head.weight`; without it the head is tied whatever the config says.
    pub fn from_hf_json(json: &[u8], has_lm_head: bool) -> Result<ModelConfig> {
        let v: Value = serde_json::from_slice(json).map_err(|e| crate::error::json_err("config.json", e))?;
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
        let arch = if is("qwen3") {
            Arch::Qwen3
        } else if is("qwen2") {
            Arch::Qwen2
        } else if is("llama") || is("mistral") || model_type.is_empty() && archs.is_empty() {
            Arch::Llama
        } else {
            return Err(LoomError::Unsupported(format!(
                "config.json model_type {model_type:?} / architectures {archs:?} (Llama, Mistral, Qwen2 and Qwen3 run)"
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
        let rope_scaling = v.get("rope_scaling").filter(|x| !x.is_null());
        if let Some(s) = rope_scaling {
            return Err(LoomError::Unsupported(format!("config.json: rope_scaling {s}")));
        }
        let cfg = ModelConfig {
            arch,
            n_layers: need("num_hidden_layers")?,
            hidden,
            n_heads,
            n_kv_heads: int("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            ffn: need("intermediate_size")?,
            vocab: need("vocab_size")?,
            rope_theta: float("rope_theta", 10000.0)?,
            rope_dims: head_dim,
            rope_style: RopeStyle::Neox,
            rms_eps: float("rms_norm_eps", 1e-6)?,
            context: int("max_position_embeddings")?.unwrap_or(DEFAULT_CONTEXT),
            tied_embeddings: !has_lm_head,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}
