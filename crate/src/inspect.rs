//! Header-only inspection of any supported file: format, grid, layers and tensors, sizes. For `.entity` and
//! safetensors only the header is read, so a multi-GB file is inspected without touching its weights.

use std::collections::BTreeMap;

use serde::Serialize;
use ts_rs::TS;

use crate::error::{LoomError, Result};
use crate::formats::source::ByteSource;
use crate::formats::{self, entity, gguf, safetensors, Header, Opened};
use crate::network::{Layer, Network, WeightPart};

/// The grid of a Loom network.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct Grid {
    pub depth: usize,
    pub rows: usize,
    pub cols: usize,
    pub layers_per_cell: usize,
}

/// One layer, nested ones included (`nesting` > 0).
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct LayerRow {
    /// Blob path, e.g. `layers.1.sequential_layers.0`.
    pub path: String,
    pub nesting: usize,
    pub z: i64,
    pub y: i64,
    pub x: i64,
    pub l: i64,
    #[serde(rename = "type")]
    pub layer_type: String,
    pub activation: String,
    pub dtype: String,
    /// The weight scale, for layers with weights.
    pub scale: Option<f32>,
    pub params: u64,
    /// Bytes of this layer's weights in the file.
    pub bytes: u64,
    pub disabled: bool,
    /// The shape of its weights when they form one tensor (`[out, in]` for Dense); empty otherwise.
    pub shape: Vec<u64>,
    /// The parts of a combined store (MHA's Q/K/V/O weights and biases, SwiGLU's gate/up/down, LSTM's gates),
    /// each readable as the tensor `path#name`; empty for single-tensor layers.
    pub parts: Vec<PartRow>,
    /// One input row's shape and the output row's (see [`Layer::io_shapes`]), when the layer's config says.
    pub input: Option<Vec<u64>>,
    pub output: Option<Vec<u64>>,
}

/// One part of a layer's combined weight store.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct PartRow {
    pub name: String,
    pub shape: Vec<u64>,
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct TensorRow {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// Byte offset of its data in the file.
    pub offset: u64,
}

/// What [`inspect`] finds.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct Inspection {
    /// `entity`, `json`, `safetensors`, `gguf` or `checkpoint`.
    #[ts(type = r#""entity" | "json" | "safetensors" | "gguf" | "checkpoint""#)]
    pub format: &'static str,
    pub file_bytes: u64,
    pub header_bytes: u64,
    pub weight_bytes: u64,
    /// Bytes read from the source to produce this.
    pub bytes_read: u64,
    pub total_params: u64,
    pub grid: Option<Grid>,
    pub layers: Vec<LayerRow>,
    pub tensors: Vec<TensorRow>,
    /// Weight bytes per dtype.
    pub bytes_by_dtype: BTreeMap<String, u64>,
    pub metadata: BTreeMap<String, String>,
    /// The decoder a GGUF file or an HF folder holds, when it is one the LLM runtime runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub llm: Option<LlmSummary>,
    /// Why a GGUF file's decoder does not run (an architecture or a feature the runtime lacks), for the app's
    /// "Chat with this model".
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub llm_unsupported: Option<String>,
    /// What a Loom network takes as input, when its first layer says (see [`Network::input_spec`]).
    pub input: Option<crate::network::InputSpec>,
}

/// What `loom inspect` says of an LLM: its architecture and dimensions, the block types of its tensors, and
/// whether it carries a chat template.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct LlmSummary {
    pub architecture: &'static str,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub context: usize,
    pub rope_theta: f32,
    pub tied_embeddings: bool,
    /// Tensor count per block type (`Q4_1: 210, F32: 61, ...`).
    pub quantization: BTreeMap<String, u64>,
    pub chat_template: bool,
}

impl LlmSummary {
    pub fn new(c: &crate::llm::config::ModelConfig, tensor_types: &[&str], chat_template: bool) -> LlmSummary {
        let mut quantization = BTreeMap::new();
        for t in tensor_types {
            *quantization.entry(t.to_string()).or_default() += 1;
        }
        LlmSummary {
            architecture: c.arch.name(),
            layers: c.n_layers,
            hidden: c.hidden,
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            intermediate: c.ffn,
            vocab: c.vocab,
            context: c.context,
            rope_theta: c.rope_theta,
            tied_embeddings: c.tied_embeddings,
            quantization,
            chat_template,
        }
    }
}

impl Inspection {
    /// An inspection of a file that holds named tensors and no Loom topology.
    fn tensors_only(
        format: &'static str,
        file_bytes: u64,
        header_bytes: u64,
        metadata: BTreeMap<String, String>,
    ) -> Inspection {
        Inspection {
            format,
            file_bytes,
            header_bytes,
            weight_bytes: 0,
            bytes_read: 0,
            total_params: 0,
            grid: None,
            layers: Vec::new(),
            tensors: Vec::new(),
            bytes_by_dtype: BTreeMap::new(),
            metadata,
            llm: None,
            llm_unsupported: None,
            input: None,
        }
    }

    fn add_tensor(&mut self, t: &safetensors::TensorInfo) {
        self.total_params += t.elements;
        self.weight_bytes += t.byte_len();
        *self.bytes_by_dtype.entry(t.dtype.to_string()).or_default() += t.byte_len();
        self.tensors.push(TensorRow {
            name: t.name.clone(),
            dtype: t.dtype.to_string(),
            shape: t.shape.clone(),
            bytes: t.byte_len(),
            offset: t.absolute.0,
        });
    }
}

/// Inspects a source, reading only headers where the format allows it.
pub fn inspect(source: &mut dyn ByteSource) -> Result<Inspection> {
    Ok(inspection(&formats::open(source)?))
}

/// Inspects bytes already in memory.
pub fn inspect_bytes(bytes: &[u8]) -> Result<Inspection> {
    Ok(inspection(&formats::open_bytes(bytes)?))
}

/// The inspection of an opened file.
pub fn inspection(opened: &Opened) -> Inspection {
    let file_bytes = opened.file_bytes;
    let mut out = match &opened.header {
        Header::Entity(header) => entity_inspection(header, file_bytes),
        Header::Safetensors(header) => {
            let mut out = Inspection::tensors_only(
                "safetensors",
                file_bytes,
                header.data_start(),
                header.metadata().clone(),
            );
            header.tensors().iter().for_each(|t| out.add_tensor(t));
            out
        }
        Header::LoomJson(net) => network_inspection("json", net, file_bytes, file_bytes, |_| None),
        Header::Gguf(header) => gguf_inspection(header, file_bytes),
    };
    out.bytes_read = opened.bytes_read;
    out
}

fn entity_inspection(header: &entity::EntityHeader, file_bytes: u64) -> Inspection {
    // Blob bytes, scale and dtype per layer path; extra blobs (Q4_0, biases, norms) count towards their layer,
    // whose dtype shows as Q4_0 when its weights are Q4_0 blocks.
    let mut by_path: BTreeMap<&str, (u64, Option<f32>, Option<&str>)> = BTreeMap::new();
    for b in &header.blobs {
        let cut = b.path.find(".q4_0.").or_else(|| {
            [".biases", ".q_norm", ".k_norm"]
                .iter()
                .find_map(|s| b.path.strip_suffix(s).map(str::len))
        });
        let entry = by_path
            .entry(&b.path[..cut.unwrap_or(b.path.len())])
            .or_insert((0, None, None));
        entry.0 += b.length;
        if cut.is_none() {
            entry.1 = Some(b.scale);
        }
        if cut.is_none() || b.dtype == "Q4_0" {
            entry.2 = Some(&b.dtype);
        }
    }
    let mut out = network_inspection("entity", &header.network, file_bytes, header.payload_offset(), |path| {
        by_path
            .get(path)
            .map(|(bytes, scale, dtype)| (*bytes, *scale, dtype.map(str::to_string)))
    });
    out.bytes_by_dtype.clear();
    for b in &header.blobs {
        *out.bytes_by_dtype.entry(b.dtype.clone()).or_default() += b.length;
    }
    for g in header.blobs.iter().filter(|b| b.path.starts_with("transformer.")) {
        out.weight_bytes += g.length;
        out.total_params += g.length / 4;
        out.tensors.push(TensorRow {
            name: g.path.clone(),
            dtype: g.dtype.clone(),
            shape: vec![g.length / 4],
            bytes: g.length,
            offset: header.payload_offset() + g.offset,
        });
    }
    out
}

/// Bytes, scale and dtype a file stores for one layer.
type FileInfo = Option<(u64, Option<f32>, Option<String>)>;

/// Rows for a network; `file_info(path)` gives the bytes, scale and dtype a file stores for a layer, when the
/// network itself does not hold the weights (header-only inspection).
fn network_inspection(
    format: &'static str,
    net: &Network,
    file_bytes: u64,
    header_bytes: u64,
    file_info: impl Fn(&str) -> FileInfo,
) -> Inspection {
    let mut out = Inspection {
        format,
        file_bytes,
        header_bytes,
        weight_bytes: 0,
        bytes_read: 0,
        total_params: 0,
        grid: Some(Grid {
            depth: net.depth,
            rows: net.rows,
            cols: net.cols,
            layers_per_cell: net.layers_per_cell,
        }),
        layers: Vec::new(),
        tensors: Vec::new(),
        bytes_by_dtype: BTreeMap::new(),
        metadata: BTreeMap::new(),
        llm: None,
        llm_unsupported: None,
        input: net.input_spec(),
    };
    fn visit(layer: &Layer, path: String, nesting: usize, out: &mut Inspection, file_info: &dyn Fn(&str) -> FileInfo) {
        let params = layer.weight_count().unwrap_or(0) as u64;
        let (shape, parts) = match <[WeightPart; 1]>::try_from(layer.weight_parts().unwrap_or_default()) {
            Ok([one]) => (one.shape, Vec::new()),
            Err(parts) => (Vec::new(), parts),
        };
        let io = layer.io_shapes();
        let (bytes, scale, dtype) = match &layer.weights {
            Some(ws) => {
                let bytes = ws.version(layer.dtype).map_or(4 * ws.len(), <[u8]>::len) as u64;
                (bytes, Some(ws.scale()), layer.dtype.name().to_string())
            }
            None => match file_info(&path) {
                Some((bytes, scale, dtype)) => (bytes, scale, dtype.unwrap_or_else(|| layer.dtype.name().into())),
                None => (0, None, layer.dtype.name().to_string()),
            },
        };
        out.total_params += if bytes > 0 { params } else { 0 };
        out.weight_bytes += bytes;
        if bytes > 0 {
            *out.bytes_by_dtype.entry(dtype.clone()).or_default() += bytes;
        }
        out.layers.push(LayerRow {
            path: path.clone(),
            nesting,
            z: layer.z,
            y: layer.y,
            x: layer.x,
            l: layer.l,
            layer_type: layer.layer_type.name().to_string(),
            activation: layer.activation.name().to_string(),
            dtype,
            scale,
            params,
            bytes,
            disabled: layer.is_disabled,
            shape,
            parts: parts
                .into_iter()
                .map(|p| PartRow {
                    name: p.name,
                    shape: p.shape,
                })
                .collect(),
            input: io.as_ref().map(|(i, _)| i.clone()),
            output: io.map(|(_, o)| o),
        });
        for (seg, child) in layer.children() {
            visit(child, format!("{path}.{seg}"), nesting + 1, out, file_info);
        }
    }
    for (i, layer) in net.layers.iter().enumerate() {
        visit(layer, format!("layers.{i}"), 0, &mut out, &file_info);
    }
    out
}

/// Rows for a GGUF header: tensors with row-major shapes and absolute offsets, metadata as text plus
/// `gguf.version` and `gguf.alignment`.
pub fn gguf_inspection(header: &gguf::GgufHeader, file_bytes: u64) -> Inspection {
    let mut metadata = header.metadata_strings();
    metadata.insert("gguf.version".into(), header.version.to_string());
    metadata.insert("gguf.alignment".into(), header.alignment.to_string());
    let mut out = Inspection::tensors_only("gguf", file_bytes, header.data_start, metadata);
    // A header that is not a decoder we run (or lies) still inspects: it just has no LLM summary.
    let vocab = header
        .tensor("token_embd.weight")
        .and_then(|t| t.dims.get(1))
        .map(|&v| v as usize);
    match vocab.map(|v| crate::llm::config::ModelConfig::from_gguf(header, v)) {
        Some(Ok(cfg)) => {
            let types: Vec<&str> = header.tensors.iter().map(|t| t.ggml_type.name()).collect();
            out.llm = Some(LlmSummary::new(
                &cfg,
                &types,
                header.get("tokenizer.chat_template").is_some(),
            ));
        }
        Some(Err(e)) => out.llm_unsupported = Some(e.to_string()),
        None => out.llm_unsupported = Some("the file has no token_embd.weight matrix".into()),
    }
    for t in &header.tensors {
        out.total_params += t.elements;
        out.weight_bytes += t.bytes;
        *out.bytes_by_dtype.entry(t.ggml_type.name().to_string()).or_default() += t.bytes;
        out.tensors.push(TensorRow {
            name: t.name.clone(),
            dtype: t.ggml_type.name().to_string(),
            shape: t.shape(),
            bytes: t.bytes,
            offset: header.data_start + t.offset,
        });
    }
    out
}

/// Inspects a training checkpoint: its weight tensors (the Adam moments are counted in `metadata`).
pub fn inspect_checkpoint(ckpt: &crate::formats::checkpoint::Checkpoint) -> Inspection {
    let mut out = Inspection::tensors_only("checkpoint", 0, 0, ckpt.weights_metadata().clone());
    let mut moments = 0;
    for t in ckpt.tensors() {
        out.add_tensor(t.weight.info());
        moments += usize::from(t.adam_m.is_some()) + usize::from(t.adam_v.is_some());
    }
    out.metadata.insert("adam_moment_tensors".into(), moments.to_string());
    out
}

/// Inspects an HF folder (config.json + safetensors shards): every shard's tensors, read from headers only, and
/// the decoder's summary.
pub fn inspect_hf_folder(files: &crate::llm::model::HfFiles) -> Result<Inspection> {
    let mut out = Inspection::tensors_only("hf", 0, 0, BTreeMap::new());
    for (name, bytes) in &files.safetensors {
        let shard = inspect_bytes(bytes).map_err(|e| LoomError::Safetensors(format!("{name}: {e}")))?;
        out.file_bytes += shard.file_bytes;
        out.header_bytes += shard.header_bytes;
        out.weight_bytes += shard.weight_bytes;
        out.bytes_read += shard.bytes_read;
        out.total_params += shard.total_params;
        for (d, b) in shard.bytes_by_dtype {
            *out.bytes_by_dtype.entry(d).or_default() += b;
        }
        out.tensors.extend(shard.tensors);
    }
    let has_head = out.tensors.iter().any(|t| t.name == "lm_head.weight");
    let cfg = crate::llm::config::ModelConfig::from_hf_json(&files.config_json, has_head)?;
    let types: Vec<&str> = out.tensors.iter().map(|t| t.dtype.as_str()).collect();
    let template = files
        .tokenizer_config_json
        .as_deref()
        .and_then(|j| serde_json::from_slice::<serde_json::Value>(j).ok())
        .is_some_and(|v| v.get("chat_template").is_some_and(|t| !t.is_null()));
    out.llm = Some(LlmSummary::new(&cfg, &types, template));
    Ok(out)
}
