//! Loom transformer `.entity` files (spec §8, §11) as chat models: [`read`] one into the decoder's tensors, and
//! [`write()`] one from any model, as Loom's `SerializeEntityTransformer` lays it out.
//!
//! The decoder is `4·L` layers (RMSNorm, MHA, RMSNorm, SwiGLU per block) plus the globals `transformer.embeddings`,
//! `transformer.lm_head` (absent when tied) and `transformer.final_norm`. A block's matrices are either the
//! layer's own weights (any Loom dtype) or Loom Q4_0 blobs `<layer>.q4_0.<key>`.

use bytes::Bytes;

use super::config::{Arch, BlockSpec, ModelConfig, RopeStyle};
use super::weights::{Global, Matrix, ModelWeights, RawTensor, Role, TensorSource};
use crate::convert::{LayerLoss, LossReport};
use crate::dtype::{q4_0, DType};
use crate::error::{LoomError, Result};
use crate::formats::entity;
use crate::network::{
    f32_bytes, Activation, ExtraBlob, Layer, LayerType, Network, Transformer, TransformerDims, WeightStore,
};
use crate::quant::{self, GgmlType};

/// Loom runs the final RMSNorm with this eps whatever `dims.rms_norm_eps` says (spec §11).
pub const LOOM_FINAL_NORM_EPS: f32 = 1e-6;
/// What Loom assumes when `dims` omits them (spec §11).
const DEFAULT_RMS_EPS: f64 = 1e-6;
const DEFAULT_ROPE_BASE: f64 = 10000.0;
/// Loom's MHA caches this many positions (spec §11): the context of an `.entity` model.
const LOOM_MAX_SEQ: usize = 2048;
const ARCHITECTURE: &str = "llama_style_decoder";

/// Q4_0 blob keys of the MHA and SwiGLU matrices (spec §1).
const MHA_KEYS: [(u32, Role); 4] = [(200, Role::Q), (201, Role::K), (202, Role::V), (203, Role::O)];
const SWIGLU_KEYS: [(u32, Role); 3] = [(100, Role::Gate), (101, Role::Up), (102, Role::Down)];

fn bad(msg: String) -> LoomError {
    LoomError::InvalidNetwork(format!("transformer .entity: {msg}"))
}

/// Index within a block (0–3) of the layer holding `role`.
fn slot(role: Role) -> usize {
    match role {
        Role::AttnNorm => 0,
        Role::FfnNorm => 2,
        Role::Gate | Role::Up | Role::Down | Role::GateBias | Role::UpBias | Role::DownBias | Role::GateUp => 3,
        _ => 1,
    }
}

fn role_label(role: Role) -> &'static str {
    match role {
        Role::AttnNorm => "attention norm",
        Role::Q => "q_proj",
        Role::K => "k_proj",
        Role::V => "v_proj",
        Role::O => "o_proj",
        Role::QBias => "q bias",
        Role::KBias => "k bias",
        Role::VBias => "v bias",
        Role::OBias => "o bias",
        Role::QNorm => "q_norm",
        Role::KNorm => "k_norm",
        Role::FfnNorm => "ffn norm",
        Role::PostAttnNorm => "post-attention norm",
        Role::PostFfnNorm => "post-feed-forward norm",
        Role::Gate => "gate_proj",
        Role::Up => "up_proj",
        Role::Down => "down_proj",
        Role::GateBias => "gate bias",
        Role::UpBias => "up bias",
        Role::DownBias => "down bias",
        Role::Qkv => "qkv_proj",
        Role::GateUp => "gate_up_proj",
    }
}

/// The tensors of a transformer `.entity` (all of them, or one block's or the globals' for a streamed load), for
/// [`super::weights::load`].
pub struct EntitySource {
    /// `(block, tensors)`.
    blocks: Vec<(usize, Vec<(Role, RawTensor)>)>,
    embeddings: Option<Bytes>,
    lm_head: Option<Bytes>,
    final_norm: Option<Bytes>,
    vocab: usize,
    hidden: usize,
}

impl EntitySource {
    /// The globals of `t` (their blobs installed), and no block.
    pub fn globals(t: &Transformer, cfg: &ModelConfig) -> EntitySource {
        EntitySource {
            blocks: Vec::new(),
            embeddings: t.embeddings.clone(),
            // Loom ignores a stored head when the section says it is tied.
            lm_head: t.lm_head.clone().filter(|_| !t.lm_head_tied),
            final_norm: t.final_norm.clone(),
            vocab: cfg.vocab,
            hidden: cfg.hidden,
        }
    }

    /// Block `b` of `net` (layers `4b..4b+4`, their blobs installed), and no global.
    pub fn block(net: &Network, b: usize, cfg: &ModelConfig) -> Result<EntitySource> {
        let layers = net
            .layers
            .get(4 * b..4 * b + 4)
            .ok_or_else(|| bad(format!("block {b} needs layers {}..{}", 4 * b, 4 * b + 4)))?;
        Ok(EntitySource {
            blocks: vec![(b, block_tensors(layers, b, cfg)?)],
            embeddings: None,
            lm_head: None,
            final_norm: None,
            vocab: cfg.vocab,
            hidden: cfg.hidden,
        })
    }

    /// The architecture the blocks' tensors show (q/k norms: Qwen3; q/k/v biases: Qwen2).
    pub fn arch(&self) -> Arch {
        let has = |role: Role| self.blocks.iter().any(|(_, b)| b.iter().any(|(r, _)| *r == role));
        if has(Role::QNorm) {
            Arch::Qwen3
        } else if has(Role::QBias) {
            Arch::Qwen2
        } else {
            Arch::Llama
        }
    }
}

impl TensorSource for EntitySource {
    fn block(&self, block: usize, role: Role) -> Result<Option<RawTensor>> {
        Ok(self
            .blocks
            .iter()
            .find(|(b, _)| *b == block)
            .and_then(|(_, b)| b.iter().find(|(r, _)| *r == role))
            .map(|(_, t)| t.clone()))
    }

    fn global(&self, g: Global) -> Result<Option<RawTensor>> {
        let (data, shape) = match g {
            Global::Embed => (&self.embeddings, vec![self.vocab, self.hidden]),
            Global::Head => (&self.lm_head, vec![self.vocab, self.hidden]),
            Global::FinalNorm => (&self.final_norm, vec![self.hidden]),
        };
        Ok(data.clone().map(|data| RawTensor {
            ty: GgmlType::F32,
            shape,
            data,
        }))
    }

    fn block_name(&self, block: usize, role: Role) -> String {
        format!("layers.{} ({})", 4 * block + slot(role), role_label(role))
    }

    fn global_name(&self, g: Global) -> String {
        match g {
            Global::Embed => "transformer.embeddings",
            Global::FinalNorm => "transformer.final_norm",
            Global::Head => "transformer.lm_head",
        }
        .to_string()
    }
}

/// A `dims` (or section) integer as a positive size.
fn size(name: &str, v: i64) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| bad(format!("{name} = {v}")))
}

/// The decoder config from the transformer section (spec §8, §11), checked before any size is used.
fn config(t: &Transformer) -> Result<ModelConfig> {
    let d = &t.dims;
    if !t.has_final_norm {
        return Err(LoomError::Unsupported(
            "transformer .entity without a final norm".into(),
        ));
    }
    if !(d.activation.is_empty() || d.activation.eq_ignore_ascii_case("silu")) {
        return Err(LoomError::Unsupported(format!(
            "transformer .entity with SwiGLU activation {:?} (Silu runs)",
            d.activation
        )));
    }
    let or = |v: f64, default: f64| if v > 0.0 { v } else { default };
    let head_dim = size("dims.head_dim", d.head_dim)?;
    let cfg = ModelConfig {
        // Refined from the blobs by `read` (q/k biases, q/k norms).
        arch: Arch::Llama,
        n_layers: size("dims.num_layers", d.num_layers)?,
        hidden: size("hidden_size", t.hidden_size)?,
        n_heads: size("dims.num_heads", d.num_heads)?,
        n_kv_heads: size("dims.num_kv_heads", d.num_kv_heads)?,
        head_dim,
        ffn: size("dims.intermediate_size", d.intermediate_size)?,
        vocab: size("vocab_size", t.vocab_size)?,
        rope_theta: or(d.rope_freq_base, DEFAULT_ROPE_BASE) as f32,
        rope_dims: head_dim,
        // Loom's importer keeps HF's row order, and Loom rotates halves as HF does.
        rope_style: RopeStyle::Neox,
        rms_eps: or(d.rms_norm_eps, DEFAULT_RMS_EPS) as f32,
        final_norm_eps: LOOM_FINAL_NORM_EPS,
        context: LOOM_MAX_SEQ,
        tied_embeddings: t.lm_head_tied,
        block: BlockSpec::llama(head_dim),
        rope_factors: None,
        rope_long: None,
        rope_mscale: 1.0,
    };
    cfg.validate()?;
    let (q, kv) = (
        cfg.n_heads as u64 * cfg.head_dim as u64,
        cfg.n_kv_heads as u64 * cfg.head_dim as u64,
    );
    if d.query_dim != 0 && d.query_dim as u64 != q || d.kv_dim != 0 && d.kv_dim as u64 != kv {
        return Err(bad(format!(
            "dims query_dim {} / kv_dim {} disagree with {} heads, {} kv heads of {head_dim}",
            d.query_dim, d.kv_dim, cfg.n_heads, cfg.n_kv_heads
        )));
    }
    Ok(cfg)
}

/// Checks that layer `i` is the `ty` layer the dims describe (`fields`: name, layer value, dims value).
fn check_layer(layer: &Layer, i: usize, ty: LayerType, fields: &[(&str, i64, usize)]) -> Result<()> {
    if layer.layer_type != ty {
        return Err(bad(format!(
            "layer {i} is {}, the block layout needs {}",
            layer.layer_type,
            ty.name()
        )));
    }
    for &(name, got, want) in fields {
        if got != want as i64 {
            return Err(bad(format!("layer {i} has {name} {got}, the dims say {want}")));
        }
    }
    Ok(())
}

/// float32 bytes of what Loom's forward reads from a layer's own weights. A float32 layer is sliced from the
/// file as it is; a layer in another Loom dtype has no block form our kernels read, so its dequantized float32
/// values are the honest in-memory form.
fn layer_values(layer: &Layer) -> Option<Bytes> {
    let ws = layer.weights.as_ref()?;
    if layer.dtype == DType::Float32 {
        if let Some(b) = ws.version_bytes(DType::Float32) {
            return Some(b);
        }
    }
    Some(Bytes::from(f32_bytes(&ws.active(layer.dtype))))
}

fn f32_tensor(data: Bytes, shape: Vec<usize>) -> RawTensor {
    RawTensor {
        ty: GgmlType::F32,
        shape,
        data,
    }
}

/// Splits float32 bytes into consecutive tensors of the given shapes (the caller checked the total length).
fn split(values: &Bytes, shapes: &[&[usize]]) -> Vec<RawTensor> {
    let mut at = 0;
    shapes
        .iter()
        .map(|s| {
            let n = 4 * s.iter().product::<usize>();
            let t = f32_tensor(values.slice(at..at + n), s.to_vec());
            at += n;
            t
        })
        .collect()
}

fn all_zero(b: &[u8]) -> bool {
    b.chunks_exact(4)
        .all(|c| f32::from_le_bytes(c.try_into().unwrap()) == 0.0)
}

/// A Q4_0 blob as a `rows × cols` matrix: its blocks regrouped into [`GgmlType::LoomQ4_0`] (same size, nothing
/// decoded) when every row is whole blocks; otherwise blocks cross rows and it is dequantized to float32.
fn q4_matrix(blob: &ExtraBlob, path: &str, rows: usize, cols: usize) -> Result<RawTensor> {
    let (n_scales, _) = q4_0::counts(&blob.bytes).map_err(|e| bad(format!("{path}: {e}")))?;
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| bad(format!("{path}: a {rows}×{cols} matrix")))?;
    if n_scales != n.div_ceil(q4_0::BLOCK) {
        return Err(bad(format!(
            "{path} holds {n_scales} blocks, a {rows}×{cols} matrix needs {}",
            n.div_ceil(q4_0::BLOCK)
        )));
    }
    let (ty, data) = if cols.is_multiple_of(q4_0::BLOCK) {
        (GgmlType::LoomQ4_0, q4_0::interleaved_blocks(&blob.bytes)?)
    } else {
        (
            GgmlType::F32,
            f32_bytes(&q4_0::Q4Blocks::parse(&blob.bytes)?.dequantize(n)),
        )
    };
    Ok(RawTensor {
        ty,
        shape: vec![rows, cols],
        data: Bytes::from(data),
    })
}

/// The extra blobs of a layer by suffix, refusing ones the layer type cannot have and duplicates.
fn extras<'a>(layer: &'a Layer, i: usize, allowed: &[&str]) -> Result<Vec<(&'a str, &'a ExtraBlob)>> {
    let mut out: Vec<(&str, &ExtraBlob)> = Vec::new();
    for e in &layer.extra_blobs {
        let s = e.suffix.as_str();
        if !allowed.contains(&s) {
            return Err(bad(format!(
                "layers.{i}.{s} does not belong to a {} layer",
                layer.layer_type
            )));
        }
        if out.iter().any(|(x, _)| *x == s) {
            return Err(bad(format!("layers.{i}.{s} appears twice")));
        }
        out.push((s, e));
    }
    Ok(out)
}

fn find<'a>(extras: &[(&str, &'a ExtraBlob)], suffix: &str) -> Option<&'a ExtraBlob> {
    extras.iter().find(|(s, _)| *s == suffix).map(|(_, e)| *e)
}

/// The tensors of block `b` (layers `4b..4b+4`).
fn block_tensors(layers: &[Layer], b: usize, cfg: &ModelConfig) -> Result<Vec<(Role, RawTensor)>> {
    let (h, q, kv, f, hd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn, cfg.head_dim);
    let base = 4 * b;
    let mut out = Vec::new();
    for (k, role) in [(0, Role::AttnNorm), (2, Role::FfnNorm)] {
        let l = &layers[k];
        check_layer(l, base + k, LayerType::RMSNorm, &[("input_height", l.input_height, h)])?;
        extras(l, base + k, &[])?;
        if let Some(v) = layer_values(l) {
            out.push((role, f32_tensor(v, vec![h])));
        }
    }

    let mha = &layers[1];
    let i = base + 1;
    check_layer(
        mha,
        i,
        LayerType::MultiHeadAttention,
        &[
            ("d_model", mha.d_model, h),
            ("num_heads", mha.num_heads, cfg.n_heads),
            ("num_kv_heads", mha.num_kv_heads, cfg.n_kv_heads),
            ("head_dim", mha.head_dim, hd),
            ("query_dim", mha.mha_query_dim(), q),
        ],
    )?;
    let ex = extras(
        mha,
        i,
        &[
            "q4_0.200", "q4_0.201", "q4_0.202", "q4_0.203", "biases", "q_norm", "k_norm",
        ],
    )?;
    let own = layer_values(mha);
    let mha_shapes = [(Role::Q, q, h), (Role::K, kv, h), (Role::V, kv, h), (Role::O, h, q)];
    // Own weights: Wq, Wk, Wv, Wo, then bq, bk, bv, bo (spec §6.2); the entity reader checked the length.
    let own_biases = own.as_ref().map(|v| v.slice(4 * (2 * q * h + 2 * kv * h)..));
    if ex.iter().any(|(s, _)| s.starts_with("q4_0.")) {
        // Loom runs the Q4_0 blocks whenever a layer has them (its own weights are then ignored).
        for ((key, role), (_, rows, cols)) in MHA_KEYS.iter().zip(mha_shapes) {
            if let Some(blob) = find(&ex, &format!("q4_0.{key}")) {
                out.push((*role, q4_matrix(blob, &format!("layers.{i}.q4_0.{key}"), rows, cols)?));
            }
        }
    } else if let Some(v) = &own {
        let shapes: Vec<[usize; 2]> = mha_shapes.iter().map(|&(_, r, c)| [r, c]).collect();
        let refs: Vec<&[usize]> = shapes.iter().map(|s| &s[..]).collect();
        for ((role, ..), t) in mha_shapes.iter().zip(split(v, &refs)) {
            out.push((*role, t));
        }
    }
    // The biases: a `.biases` blob (how we keep them beside Q4_0 blocks), else the own weights' tail.
    let biases = match find(&ex, "biases") {
        Some(blob) => {
            if blob.bytes.len() != 4 * (q + 2 * kv + h) {
                return Err(bad(format!(
                    "layers.{i}.biases has {} bytes, q|k|v|o biases need {}",
                    blob.bytes.len(),
                    4 * (q + 2 * kv + h)
                )));
            }
            Some(blob.bytes.clone())
        }
        None => own_biases,
    };
    // Loom adds every bias (spec §7); only non-zero ones are kept, so Llama-style files cost nothing extra.
    if let Some(bias) = biases {
        let parts = split(&bias, &[&[q], &[kv], &[kv], &[h]]);
        if !parts[..3].iter().all(|t| all_zero(&t.data)) {
            for (role, t) in [Role::QBias, Role::KBias, Role::VBias]
                .into_iter()
                .zip(parts.iter().cloned())
            {
                out.push((role, t));
            }
        }
        if !all_zero(&parts[3].data) {
            out.push((Role::OBias, parts[3].clone()));
        }
    }
    for (suffix, role) in [("q_norm", Role::QNorm), ("k_norm", Role::KNorm)] {
        if let Some(blob) = find(&ex, suffix) {
            out.push((role, f32_tensor(blob.bytes.clone(), vec![blob.bytes.len() / 4])));
        }
    }

    let ffn = &layers[3];
    let i = base + 3;
    check_layer(
        ffn,
        i,
        LayerType::SwiGLU,
        &[
            ("input_height", ffn.input_height, h),
            ("output_height", ffn.output_height, f),
        ],
    )?;
    let ex = extras(ffn, i, &["q4_0.100", "q4_0.101", "q4_0.102", "biases"])?;
    let own = layer_values(ffn);
    let ffn_shapes = [(Role::Gate, f, h), (Role::Up, f, h), (Role::Down, h, f)];
    if ex.iter().any(|(s, _)| s.starts_with("q4_0.")) {
        for ((key, role), (_, rows, cols)) in SWIGLU_KEYS.iter().zip(ffn_shapes) {
            if let Some(blob) = find(&ex, &format!("q4_0.{key}")) {
                out.push((*role, q4_matrix(blob, &format!("layers.{i}.q4_0.{key}"), rows, cols)?));
            }
        }
    } else if let Some(v) = &own {
        for ((role, ..), t) in ffn_shapes.iter().zip(split(v, &[&[f, h], &[f, h], &[h, f]])) {
            out.push((*role, t));
        }
    }
    // SwiGLU biases: gate, up, down.
    let ffn_bias = match find(&ex, "biases") {
        Some(blob) => Some(blob.bytes.clone()),
        None => own.map(|v| v.slice(4 * 3 * f * h..)),
    };
    if let Some(bias) = ffn_bias {
        if bias.len() != 4 * (2 * f + h) {
            return Err(bad(format!(
                "layers.{i}.biases has {} bytes, gate|up|down biases need {}",
                bias.len(),
                4 * (2 * f + h)
            )));
        }
        if !all_zero(&bias) {
            let parts = split(&bias, &[&[f], &[f], &[h]]);
            for (role, t) in [Role::GateBias, Role::UpBias, Role::DownBias].into_iter().zip(parts) {
                out.push((role, t));
            }
        }
    }
    Ok(out)
}

/// Reads a transformer `.entity` (kept as slices of `file` where the bytes are usable as they are).
pub fn read(file: Bytes) -> Result<(ModelConfig, ModelWeights)> {
    let net = entity::read_bytes(file)?;
    let mut cfg = network_config(&net)?;
    let mut src = EntitySource::globals(net.transformer.as_ref().expect("checked by network_config"), &cfg);
    for b in 0..cfg.n_layers {
        src.blocks.extend(EntitySource::block(&net, b, &cfg)?.blocks);
    }
    cfg.arch = src.arch();
    let weights = super::weights::load(&cfg, &src)?;
    Ok((cfg, weights))
}

/// The decoder config of a transformer network (its header is enough), checked against its layer count. The
/// architecture is Llama's until the blocks are read ([`EntitySource::arch`] refines it).
pub fn network_config(net: &Network) -> Result<ModelConfig> {
    let t = net.transformer.as_ref().ok_or_else(|| {
        LoomError::Unsupported("this .entity has no transformer section: a Loom network, not a language model".into())
    })?;
    let cfg = config(t)?;
    if net.layers.len() != 4 * cfg.n_layers {
        return Err(bad(format!(
            "{} layers, {} blocks need {}",
            net.layers.len(),
            cfg.n_layers,
            4 * cfg.n_layers
        )));
    }
    Ok(cfg)
}

/// float32 values of a matrix, exactly (every block type dequantizes exactly to f32).
fn dense(m: &Matrix) -> Result<Vec<f32>> {
    let mut out = vec![0f32; m.rows * m.cols];
    quant::dequantize(m.ty, &m.data, &mut out)?;
    Ok(out)
}

/// llama.cpp's converter interleaves each head's q/k rows for adjacent-pair RoPE (stored row 2j is row j, 2j+1
/// is row j + head_dim/2); Loom rotates halves as HF does, so the rows go back to HF order.
pub(crate) fn unpermute_rows(w: &[f32], heads: usize, head_dim: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; w.len()];
    let half = head_dim / 2;
    for h in 0..heads {
        for j in 0..half {
            for (stored, row) in [(2 * j, j), (2 * j + 1, j + half)] {
                let src = (h * head_dim + stored) * cols;
                let dst = (h * head_dim + row) * cols;
                out[dst..dst + cols].copy_from_slice(&w[src..src + cols]);
            }
        }
    }
    out
}

/// An f32 as the f64 a JSON writer shows as its shortest decimal (1e-5f32 → 1e-5, as Loom reads config.json).
fn json_f64(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

fn f32_blob(suffix: &str, values: &[f32]) -> ExtraBlob {
    ExtraBlob {
        suffix: suffix.to_string(),
        dtype: DType::Float32.name().to_string(),
        scale: 0.0,
        native: false,
        bytes: Bytes::from(f32_bytes(values)),
    }
}

/// Bakes one matrix into a Loom Q4_0 blob, recording what it loses under `path`.
fn q4_blob(key: u32, values: &[f32], path: String, from: GgmlType, report: &mut LossReport) -> ExtraBlob {
    let bytes = q4_0::pack(values);
    let baked = q4_0::Q4Blocks::parse(&bytes)
        .expect("pack writes a valid payload")
        .dequantize(values.len());
    let (mut changed, mut max_abs_error) = (0, 0f32);
    for (a, b) in values.iter().zip(&baked) {
        if a.to_bits() != b.to_bits() {
            changed += 1;
            max_abs_error = max_abs_error.max((a - b).abs());
        }
    }
    if changed > 0 {
        report.layers.push(LayerLoss {
            path,
            from: from.name().to_string(),
            to: "Q4_0".into(),
            changed,
            total: values.len(),
            max_abs_error,
        });
    }
    ExtraBlob {
        suffix: format!("q4_0.{key}"),
        dtype: "Q4_0".into(),
        scale: 0.0,
        native: true,
        bytes: Bytes::from(bytes),
    }
}

/// A layer's bias vectors back to back, zeros for the absent ones (Loom's layers always hold them).
fn concat_biases(parts: &[(&Option<Vec<f32>>, usize)]) -> Vec<f32> {
    parts
        .iter()
        .flat_map(|&(b, n)| b.clone().unwrap_or_else(|| vec![0f32; n]))
        .collect()
}

/// Writes a model as a Loom transformer `.entity`, laid out as Loom's `SerializeEntityTransformer` writes it.
/// Without `q4` every matrix is a float32 layer holding its exact values (nothing changes); with `q4` the
/// q,k,v,o,gate,up,down matrices are baked into Loom Q4_0 as Loom's importer does (`weight_dtype: "int4"`), and
/// the report lists what that changes. q/k biases and Qwen3 q/k norms are kept (see ARCHITECTURE.md).
pub fn write(cfg: &ModelConfig, w: &ModelWeights, q4: bool) -> Result<(Vec<u8>, LossReport)> {
    // Loom's transformer layers are Llama's block: another family's norms, activation or windows have no place.
    if !cfg.block.is_llama(cfg.head_dim) {
        return Err(LoomError::Unsupported(format!(
            "a {} model as a Loom transformer .entity: Loom's layers hold Llama's block only",
            cfg.arch.name()
        )));
    }
    if cfg.rope_factors.is_some() || cfg.rope_long.is_some() || cfg.rope_mscale != 1.0 {
        return Err(LoomError::Unsupported(
            "a model with RoPE scaling as a Loom transformer .entity: Loom's format has no place for its factors"
                .into(),
        ));
    }
    if cfg.rope_dims != cfg.head_dim {
        return Err(LoomError::Unsupported(format!(
            "RoPE over {} of {} head dimensions: Loom rotates whole heads",
            cfg.rope_dims, cfg.head_dim
        )));
    }
    let (h, q, kv, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
    let to_i64 = |v: usize| v as i64;
    let mut net = Network::new(1, 1, 1, 4 * cfg.n_layers)?;
    let mut report = LossReport::default();
    for (b, blk) in w.blocks.iter().enumerate() {
        let base = 4 * b;
        for (k, norm) in [(0, &blk.attn_norm), (2, &blk.ffn_norm)] {
            let l = &mut net.layers[base + k];
            l.layer_type = LayerType::RMSNorm;
            l.input_height = to_i64(h);
            l.output_height = to_i64(h);
            l.weights = Some(WeightStore::from_master(norm.clone()));
        }

        let mut wq = dense(&blk.wq)?;
        let mut wk = dense(&blk.wk)?;
        if cfg.rope_style == RopeStyle::Adjacent {
            wq = unpermute_rows(&wq, cfg.n_heads, cfg.head_dim, h);
            wk = unpermute_rows(&wk, cfg.n_kv_heads, cfg.head_dim, h);
        }
        let mats = [
            (wq, &blk.wq),
            (wk, &blk.wk),
            (dense(&blk.wv)?, &blk.wv),
            (dense(&blk.wo)?, &blk.wo),
        ];
        let mha_biases = [(&blk.bq, q), (&blk.bk, kv), (&blk.bv, kv), (&blk.bo, h)];
        let has_bias = mha_biases.iter().any(|(b, _)| b.is_some());
        let biases = concat_biases(&mha_biases);
        let l = &mut net.layers[base + 1];
        l.layer_type = LayerType::MultiHeadAttention;
        l.num_heads = to_i64(cfg.n_heads);
        l.num_kv_heads = to_i64(cfg.n_kv_heads);
        l.head_dim = to_i64(cfg.head_dim);
        l.query_dim = to_i64(q);
        l.d_model = to_i64(h);
        l.rope_freq_base = json_f64(cfg.rope_theta);
        if q4 {
            for ((key, role), (values, m)) in MHA_KEYS.iter().zip(&mats) {
                let path = format!("layers.{}.q4_0.{key} (block {b} {})", base + 1, role_label(*role));
                l.extra_blobs.push(q4_blob(*key, values, path, m.ty, &mut report));
            }
            // Loom's Q4_0 writer drops MHA biases; a `.biases` blob keeps them (Loom's loader accepts it).
            if has_bias {
                l.extra_blobs.push(f32_blob("biases", &biases));
            }
        } else {
            let master: Vec<f32> = mats.iter().flat_map(|(v, _)| v.iter().copied()).chain(biases).collect();
            l.weights = Some(WeightStore::from_master(master));
        }
        for (suffix, norm) in [("q_norm", &blk.q_norm), ("k_norm", &blk.k_norm)] {
            if let Some(n) = norm {
                l.extra_blobs.push(f32_blob(suffix, n));
            }
        }

        let mats = [
            (dense(&blk.gate)?, &blk.gate),
            (dense(&blk.up)?, &blk.up),
            (dense(&blk.down)?, &blk.down),
        ];
        let l = &mut net.layers[base + 3];
        l.layer_type = LayerType::SwiGLU;
        l.activation = Activation::Silu;
        l.input_height = to_i64(h);
        l.output_height = to_i64(f);
        let biases = concat_biases(&[(&blk.b_gate, f), (&blk.b_up, f), (&blk.b_down, h)]);
        if q4 {
            for ((key, role), (values, m)) in SWIGLU_KEYS.iter().zip(&mats) {
                let path = format!("layers.{}.q4_0.{key} (block {b} {})", base + 3, role_label(*role));
                l.extra_blobs.push(q4_blob(*key, values, path, m.ty, &mut report));
            }
            l.extra_blobs.push(f32_blob("biases", &biases));
        } else {
            let master: Vec<f32> = mats.iter().flat_map(|(v, _)| v.iter().copied()).chain(biases).collect();
            l.weights = Some(WeightStore::from_master(master));
        }
    }
    let embed = dense(&w.embed)?;
    net.transformer = Some(Transformer {
        architecture: ARCHITECTURE.into(),
        hidden_size: to_i64(h),
        vocab_size: to_i64(cfg.vocab),
        lm_head_tied: w.head.is_none(),
        has_final_norm: true,
        weight_dtype: if q4 { DType::Int4 } else { DType::Float32 }.name().into(),
        dims: TransformerDims {
            num_layers: to_i64(cfg.n_layers),
            num_heads: to_i64(cfg.n_heads),
            num_kv_heads: to_i64(cfg.n_kv_heads),
            head_dim: to_i64(cfg.head_dim),
            query_dim: to_i64(q),
            kv_dim: to_i64(kv),
            intermediate_size: to_i64(f),
            rms_norm_eps: json_f64(cfg.rms_eps),
            rope_freq_base: json_f64(cfg.rope_theta),
            activation: Activation::Silu.name().into(),
        },
        embeddings: Some(Bytes::from(f32_bytes(&embed))),
        lm_head: w
            .head
            .as_ref()
            .map(|m| dense(m).map(|v| Bytes::from(f32_bytes(&v))))
            .transpose()?,
        final_norm: Some(Bytes::from(f32_bytes(&w.final_norm))),
    });
    Ok((entity::write(&mut net)?, report))
}
