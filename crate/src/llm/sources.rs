//! Tensor sources for [`super::weights::load`]: a GGUF file, and HF safetensors (one file or shards).

use std::collections::HashMap;

use bytes::Bytes;

use super::config::{Arch, ModelConfig};
use super::weights::{Global, RawTensor, Role, TensorSource};
use crate::error::{LoomError, Result};
use crate::formats::gguf::GgufHeader;
use crate::quant::GgmlType;

/// A GGUF file's tensors: slices of the whole file held as one buffer (a memory map natively), or only some
/// tensors' bytes, each read on its own (a load that streams to the GPU), keyed by name.
pub struct GgufSource<'h> {
    pub header: &'h GgufHeader,
    pub data: GgufData,
}

pub enum GgufData {
    File(Bytes),
    Tensors(HashMap<String, Bytes>),
}

impl GgufSource<'_> {
    /// The names of block `block`'s tensors that the file holds (what a streaming load reads for it).
    pub fn block_tensors(header: &GgufHeader, block: usize) -> Vec<String> {
        let prefix = format!("blk.{block}.");
        header
            .tensors
            .iter()
            .filter(|t| t.name.starts_with(&prefix))
            .map(|t| t.name.clone())
            .collect()
    }

    /// The names of the tensors outside the blocks that the decoder reads.
    pub fn global_tensors(header: &GgufHeader) -> Vec<String> {
        ["token_embd.weight", "output_norm.weight", "output.weight"]
            .into_iter()
            .filter(|n| header.tensor(n).is_some())
            .map(String::from)
            .collect()
    }
}

/// The GGUF (llama.cpp) name of a block tensor.
pub fn gguf_block_name(block: usize, role: Role) -> String {
    let (name, kind) = match role {
        Role::AttnNorm => ("attn_norm", "weight"),
        Role::Q => ("attn_q", "weight"),
        Role::K => ("attn_k", "weight"),
        Role::V => ("attn_v", "weight"),
        Role::O => ("attn_output", "weight"),
        Role::QBias => ("attn_q", "bias"),
        Role::KBias => ("attn_k", "bias"),
        Role::VBias => ("attn_v", "bias"),
        Role::OBias => ("attn_output", "bias"),
        Role::QNorm => ("attn_q_norm", "weight"),
        Role::KNorm => ("attn_k_norm", "weight"),
        Role::FfnNorm => ("ffn_norm", "weight"),
        Role::PostAttnNorm => ("post_attention_norm", "weight"),
        Role::PostFfnNorm => ("post_ffw_norm", "weight"),
        Role::Gate => ("ffn_gate", "weight"),
        Role::Up => ("ffn_up", "weight"),
        Role::Down => ("ffn_down", "weight"),
        Role::GateBias => ("ffn_gate", "bias"),
        Role::UpBias => ("ffn_up", "bias"),
        Role::DownBias => ("ffn_down", "bias"),
        Role::Qkv => ("attn_qkv", "weight"),
        // llama.cpp's phi3 keeps gate|up (2·ffn rows) under the up projection's name.
        Role::GateUp => ("ffn_up", "weight"),
    };
    format!("blk.{block}.{name}.{kind}")
}

impl GgufSource<'_> {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some(t) = self.header.tensor(name) else {
            return Ok(None);
        };
        let ty = t.ggml_type;
        let data = match &self.data {
            GgufData::File(file) => {
                // The header reader checked every range against the file's length.
                let start = self.header.data_start + t.offset;
                let end = start + t.bytes;
                if end > file.len() as u64 {
                    return Err(LoomError::Truncated {
                        what: name.to_string(),
                        needed: end,
                        available: file.len() as u64,
                    });
                }
                file.slice(start as usize..end as usize)
            }
            GgufData::Tensors(parts) => match parts.get(name) {
                Some(b) if b.len() as u64 == t.bytes => b.clone(),
                Some(b) => {
                    return Err(LoomError::Truncated {
                        what: name.to_string(),
                        needed: t.bytes,
                        available: b.len() as u64,
                    })
                }
                None => return Ok(None),
            },
        };
        let shape = t
            .shape()
            .into_iter()
            .map(usize::try_from)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| LoomError::ShapeOverflow {
                what: name.to_string(),
                shape: t.shape(),
            })?;
        Ok(Some(RawTensor { ty, shape, data }))
    }
}

impl GgufSource<'_> {
    /// A 1-D tensor of f32 factors, if the file has it.
    fn factors(&self, name: &str) -> Result<Option<Vec<f32>>> {
        let Some(t) = self.get(name)? else {
            return Ok(None);
        };
        let n = t.shape.iter().product::<usize>();
        if t.shape.len() != 1 || t.ty.row_bytes(n).ok() != Some(t.data.len()) {
            return Err(LoomError::InvalidNetwork(format!(
                "{name}: shape {:?} of {} bytes",
                t.shape,
                t.data.len()
            )));
        }
        let mut factors = vec![0f32; n];
        crate::quant::dequantize(t.ty, &t.data, &mut factors)
            .map_err(|e| LoomError::InvalidNetwork(format!("{name}: {e}")))?;
        Ok(Some(factors))
    }

    /// Applies the RoPE factors a file holds as tensors to `cfg`: llama.cpp's `rope_freqs.weight` (a Llama 3.x
    /// file's, one per rotated pair), or LongRoPE's `rope_factors_short.weight` and `rope_factors_long.weight`
    /// (Phi-3), the long ones for sequences past `{arch}.rope.scaling.original_context_length` (default: the
    /// context). Such a file must never run as if it had none.
    pub fn apply_rope_tensors(&self, cfg: &mut ModelConfig) -> Result<()> {
        let freqs = self.factors(ROPE_FREQS)?;
        let (short, long) = (self.factors(ROPE_SHORT)?, self.factors(ROPE_LONG)?);
        match (freqs, short, long) {
            (None, None, None) => Ok(()),
            (Some(f), None, None) => cfg.set_rope_freqs(ROPE_FREQS, &f),
            (None, Some(short), Some(long)) => {
                let key = format!("{}.rope.scaling.original_context_length", cfg.arch.name());
                let after = match self.header.get(&key) {
                    None => cfg.context,
                    Some(v) => v
                        .as_u64()
                        .and_then(|v| usize::try_from(v).ok())
                        .ok_or_else(|| LoomError::Gguf(format!("{key} is not an unsigned integer: {}", v.display())))?,
                };
                cfg.set_rope_freqs(ROPE_SHORT, &short)?;
                cfg.set_long_rope(&long, after)
            }
            _ => Err(LoomError::InvalidNetwork(format!(
                "RoPE factors: {ROPE_FREQS} alone, or {ROPE_SHORT} with {ROPE_LONG}; this file has another mix"
            ))),
        }
    }
}

/// The GGUF tensor of a Llama 3.x file's RoPE factors.
pub const ROPE_FREQS: &str = "rope_freqs.weight";
/// LongRoPE's factors (Phi-3).
pub const ROPE_SHORT: &str = "rope_factors_short.weight";
pub const ROPE_LONG: &str = "rope_factors_long.weight";
/// Every GGUF tensor of RoPE factors (what a streamed load reads with the header).
pub const ROPE_TENSORS: [&str; 3] = [ROPE_FREQS, ROPE_SHORT, ROPE_LONG];

impl TensorSource for GgufSource<'_> {
    fn block(&self, block: usize, role: Role) -> Result<Option<RawTensor>> {
        self.get(&gguf_block_name(block, role))
    }

    fn global(&self, g: Global) -> Result<Option<RawTensor>> {
        self.get(&self.global_name(g))
    }

    fn block_name(&self, block: usize, role: Role) -> String {
        gguf_block_name(block, role)
    }

    fn global_name(&self, g: Global) -> String {
        gguf_global_name(g).to_string()
    }
}

/// The GGUF (llama.cpp) name of a global tensor.
pub fn gguf_global_name(g: Global) -> &'static str {
    match g {
        Global::Embed => "token_embd.weight",
        Global::FinalNorm => "output_norm.weight",
        Global::Head => "output.weight",
    }
}

/// The HF name of a GGUF tensor name (`blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`), if it is
/// one the decoder knows, with the role of a block tensor.
pub fn hf_name_of_gguf(name: &str) -> Option<(String, Option<Role>)> {
    for g in [Global::Embed, Global::FinalNorm, Global::Head] {
        if name == gguf_global_name(g) {
            return Some((hf_global_name(g).to_string(), None));
        }
    }
    let block: usize = name.strip_prefix("blk.")?.split('.').next()?.parse().ok()?;
    Role::ALL
        .into_iter()
        .find(|&r| gguf_block_name(block, r) == name)
        .map(|r| (hf_block_name(block, r), Some(r)))
}

/// A checkpoint tensor's name as a text-only model names it: a multimodal model's language model
/// (`model.language_model.*`, `language_model.model.*`, `language_model.lm_head.weight`, as Gemma 3's
/// `Gemma3ForConditionalGeneration` writes them) reads as `model.*` and `lm_head.weight`.
pub fn hf_canonical_name(name: &str) -> std::borrow::Cow<'_, str> {
    for (from, to) in [
        ("model.language_model.", "model."),
        ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."),
    ] {
        if let Some(rest) = name.strip_prefix(from) {
            return format!("{to}{rest}").into();
        }
    }
    name.into()
}

/// The HF name of a block tensor in `arch`'s checkpoints: Gemma's feed-forward norm is `pre_feedforward_layernorm`
/// (its `post_attention_layernorm` is the norm after attention); every other family's as [`hf_block_name`].
pub fn hf_block_name_for(arch: Arch, block: usize, role: Role) -> String {
    match (arch, role) {
        (Arch::Gemma2 | Arch::Gemma3, Role::FfnNorm) => {
            format!("model.layers.{block}.pre_feedforward_layernorm.weight")
        }
        _ => hf_block_name(block, role),
    }
}

/// The HF (transformers) name of a block tensor.
pub fn hf_block_name(block: usize, role: Role) -> String {
    let name = match role {
        Role::AttnNorm => "input_layernorm.weight",
        Role::Q => "self_attn.q_proj.weight",
        Role::K => "self_attn.k_proj.weight",
        Role::V => "self_attn.v_proj.weight",
        Role::O => "self_attn.o_proj.weight",
        Role::QBias => "self_attn.q_proj.bias",
        Role::KBias => "self_attn.k_proj.bias",
        Role::VBias => "self_attn.v_proj.bias",
        Role::OBias => "self_attn.o_proj.bias",
        Role::QNorm => "self_attn.q_norm.weight",
        Role::KNorm => "self_attn.k_norm.weight",
        Role::FfnNorm => "post_attention_layernorm.weight",
        // Gemma's names (its feed-forward norm is `pre_feedforward_layernorm`: `hf_block_name_for`).
        Role::PostAttnNorm => "post_attention_layernorm.weight",
        Role::PostFfnNorm => "post_feedforward_layernorm.weight",
        Role::Gate => "mlp.gate_proj.weight",
        Role::Up => "mlp.up_proj.weight",
        Role::Down => "mlp.down_proj.weight",
        Role::GateBias => "mlp.gate_proj.bias",
        Role::UpBias => "mlp.up_proj.bias",
        Role::DownBias => "mlp.down_proj.bias",
        Role::Qkv => "self_attn.qkv_proj.weight",
        Role::GateUp => "mlp.gate_up_proj.weight",
    };
    format!("model.layers.{block}.{name}")
}

pub fn hf_global_name(g: Global) -> &'static str {
    match g {
        Global::Embed => "model.embed_tokens.weight",
        Global::FinalNorm => "model.norm.weight",
        Global::Head => "lm_head.weight",
    }
}

/// HF safetensors: one or more files (shards), each a buffer; tensors are slices of them.
/// Tensors are kept by their canonical names ([`hf_canonical_name`]) and looked up by the family's
/// ([`SafetensorsSource::set_arch`]).
#[derive(Default)]
pub struct SafetensorsSource {
    tensors: HashMap<String, RawTensor>,
    arch: Option<Arch>,
}

impl SafetensorsSource {
    /// Adds the tensors of one safetensors file (F32, F16 and BF16 tensors; others are refused when used).
    pub fn add_file(&mut self, file: Bytes, file_name: &str) -> Result<()> {
        let (n, meta) = safetensors::SafeTensors::read_metadata(&file)
            .map_err(|e| LoomError::Safetensors(format!("{file_name}: {e}")))?;
        let data_start = 8 + n;
        for (name, info) in meta.tensors() {
            let Some(ty) = safetensors_type(&name, info.dtype, file_name)? else {
                continue;
            };
            let (start, end) = info.data_offsets;
            let range = data_start.saturating_add(start)..data_start.saturating_add(end);
            if range.start > range.end || range.end > file.len() {
                return Err(LoomError::BlobOutOfRange {
                    path: format!("{file_name}: {name}"),
                    offset: range.start as u64,
                    end: range.end as u64,
                    payload: file.len() as u64,
                });
            }
            let data = file.slice(range);
            let shape = info.shape.clone();
            if self
                .tensors
                .insert(hf_canonical_name(&name).into_owned(), RawTensor { ty, shape, data })
                .is_some()
            {
                return Err(LoomError::Safetensors(format!(
                    "{file_name}: tensor {name} is in two shards"
                )));
            }
        }
        Ok(())
    }

    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Tensors read one by one (a streamed load), by canonical HF name, of a model of family `arch`.
    pub fn from_tensors(tensors: HashMap<String, RawTensor>, arch: Arch) -> SafetensorsSource {
        SafetensorsSource {
            tensors,
            arch: Some(arch),
        }
    }

    /// The family whose names the block tensors are looked up by (its config's).
    pub fn set_arch(&mut self, arch: Arch) {
        self.arch = Some(arch);
    }
}

/// The block type a safetensors tensor runs as: F32, F16, BF16; `None` for a tensor of another dtype outside the
/// decoder (ignored), an error for a decoder tensor in one.
pub fn safetensors_type(name: &str, dtype: safetensors::Dtype, file_name: &str) -> Result<Option<GgmlType>> {
    match dtype {
        safetensors::Dtype::F32 => Ok(Some(GgmlType::F32)),
        safetensors::Dtype::F16 => Ok(Some(GgmlType::F16)),
        safetensors::Dtype::BF16 => Ok(Some(GgmlType::BF16)),
        other if name.starts_with("model.") || name == "lm_head.weight" => {
            Err(LoomError::UnsupportedDType(format!("{file_name}: {name} is {other:?}")))
        }
        _ => Ok(None),
    }
}

impl TensorSource for SafetensorsSource {
    fn block(&self, block: usize, role: Role) -> Result<Option<RawTensor>> {
        Ok(self.tensors.get(&self.block_name(block, role)).cloned())
    }

    fn global(&self, g: Global) -> Result<Option<RawTensor>> {
        Ok(self.tensors.get(hf_global_name(g)).cloned())
    }

    fn block_name(&self, block: usize, role: Role) -> String {
        hf_block_name_for(self.arch.unwrap_or(Arch::Llama), block, role)
    }

    fn global_name(&self, g: Global) -> String {
        hf_global_name(g).to_string()
    }
}
