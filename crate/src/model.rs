//! A file of any supported format held whole in memory, as the bindings and the inspector use it: a Loom network
//! (runnable and convertible) or named tensors only (safetensors without our topology, GGUF, a training
//! checkpoint), with its inspection.

use bytes::Bytes;

use crate::convert::{self, TOPOLOGY_KEY};
use crate::dtype::{self, DType};
use crate::error::{LoomError, Result};
use crate::formats::checkpoint::Checkpoint;
use crate::formats::gguf::{GgufHeader, GgufTensorInfo};
use crate::formats::safetensors::{self as st, SafetensorsFile};
use crate::formats::{self, Header};
use crate::inspect::{self, Inspection};
use crate::network::{Layer, Network, WeightPart, WeightStore};
use crate::quant::{self, GgmlType};
use crate::stats;

/// What a loaded file holds.
pub enum Contents {
    /// A Loom network (`.entity`, Loom JSON, or safetensors carrying our topology).
    Network(Network),
    /// A safetensors file without Loom topology.
    Safetensors(SafetensorsFile<Bytes>),
    /// A training-checkpoint folder.
    Checkpoint(Checkpoint),
    /// A GGUF file: its header and the whole file.
    Gguf { header: GgufHeader, bytes: Bytes },
}

/// A loaded file: its contents and its inspection.
pub struct LoadedModel {
    pub name: String,
    pub contents: Contents,
    pub inspection: Inspection,
}

impl LoadedModel {
    /// Loads any supported file from its bytes (kept, not copied: `.entity` weights stay slices of them).
    pub fn from_bytes(bytes: Bytes, name: &str) -> Result<LoadedModel> {
        let opened = formats::open_bytes(&bytes)?;
        let mut inspection = inspect::inspection(&opened);
        let contents = match opened.header {
            Header::Gguf(header) => {
                // The whole file is at hand (its tensors' statistics read it).
                inspection.bytes_read = bytes.len() as u64;
                Contents::Gguf { header, bytes }
            }
            Header::Safetensors(h) if !h.metadata().contains_key(TOPOLOGY_KEY) => {
                Contents::Safetensors(SafetensorsFile::from_bytes(bytes)?)
            }
            Header::LoomJson(net) => Contents::Network(net),
            _ => Contents::Network(convert::read_network(bytes)?),
        };
        Ok(LoadedModel {
            name: name.to_string(),
            contents,
            inspection,
        })
    }

    /// Loads a training-checkpoint folder from `(relative path, contents)` pairs.
    pub fn from_files(files: Vec<(String, Vec<u8>)>, name: &str) -> Result<LoadedModel> {
        let ckpt = Checkpoint::from_files(files)?;
        Ok(LoadedModel {
            name: name.to_string(),
            inspection: inspect::inspect_checkpoint(&ckpt),
            contents: Contents::Checkpoint(ckpt),
        })
    }

    /// The Loom network, for what only a network can do (run it, convert it).
    pub fn network(&self) -> Result<&Network> {
        match &self.contents {
            Contents::Network(net) => Ok(net),
            _ => Err(LoomError::Unsupported(format!(
                "{} holds tensors without a Loom topology: it can be inspected, not run or converted",
                self.inspection.format
            ))),
        }
    }
}

/// One weight tensor of a loaded file: a Loom layer (by path, values as `GetActive` gives them) or a stored tensor.
pub struct WeightTensor<'a> {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    /// A Loom layer's scale.
    pub scale: Option<f32>,
    pub count: usize,
    data: Data<'a>,
}

enum Data<'a> {
    /// A Loom layer's dequantized values and a copy of its native bytes (absent for a float32 master). For one
    /// part of a combined store, `values` are the part's and `part_start` is where they start in `native`'s codes.
    Loom {
        values: Vec<f32>,
        dtype: DType,
        native: Option<Vec<u8>>,
        part_start: Option<usize>,
    },
    Safetensors {
        dtype: st::Dtype,
        bytes: &'a [u8],
    },
    Gguf {
        ty: GgmlType,
        bytes: &'a [u8],
    },
    /// Values decoded from blocks the codes are not kept for (a transformer `.entity`'s Loom Q4_0 matrices).
    Values(Vec<f32>),
}

impl WeightTensor<'_> {
    /// Values `start..start + len` (`start` a multiple of [`crate::stats::CHUNK`], or 0), dequantized to f32.
    pub fn values(&self, start: usize, len: usize) -> Result<Vec<f32>> {
        let end = start
            .checked_add(len)
            .filter(|&e| e <= self.count)
            .ok_or_else(|| LoomError::InvalidInput(format!("{}: values {start}..+{len} out of range", self.name)))?;
        match &self.data {
            Data::Loom { values, .. } | Data::Values(values) => Ok(values[start..end].to_vec()),
            Data::Safetensors { dtype, bytes } => {
                let bits = dtype.bitsize();
                let slice = &bytes[start * bits / 8..(end * bits).div_ceil(8)];
                let mut v = st::decode(*dtype, slice, st::Semantics::Standard).map_err(|e| match e {
                    LoomError::Unsupported(m) => LoomError::UnsupportedDType(m),
                    e => e,
                })?;
                v.truncate(len);
                Ok(v)
            }
            Data::Gguf { ty, bytes } => {
                if !ty.can_compute() {
                    return Err(LoomError::UnsupportedDType(format!(
                        "{}: dequantizing GGUF {ty} tensors",
                        self.name
                    )));
                }
                // `start` is a multiple of every block length; the last block may reach past `end`.
                let (block, first) = (ty.block_len(), start / ty.block_len());
                let blocks = end.div_ceil(block) - first;
                let slice = &bytes[first * ty.block_bytes()..(first + blocks) * ty.block_bytes()];
                let mut v = vec![0.0; blocks * block];
                quant::dequantize(*ty, slice, &mut v)?;
                v.truncate(len);
                Ok(v)
            }
        }
    }

    /// The stored integer codes of the first `n` elements, for narrow dtypes: Loom's sub-32-bit dtypes (int4
    /// sign-extended, uint4, fp8 bytes, f16 bits…), safetensors 8/16-bit types, GGUF block types (in value order,
    /// see [`quant::codes`]) and F16/BF16 bits.
    pub fn codes(&self, n: usize) -> Option<Vec<i32>> {
        let n = n.min(self.count);
        let u16s = |b: &[u8], n: usize| -> Vec<i32> {
            b.chunks_exact(2)
                .take(n)
                .map(|c| i32::from(u16::from_le_bytes([c[0], c[1]])))
                .collect()
        };
        let i16s = |b: &[u8], n: usize| -> Vec<i32> {
            b.chunks_exact(2)
                .take(n)
                .map(|c| i32::from(i16::from_le_bytes([c[0], c[1]])))
                .collect()
        };
        let u8s = |b: &[u8], n: usize| -> Vec<i32> { b.iter().take(n).map(|&c| i32::from(c)).collect() };
        let i8s = |b: &[u8], n: usize| -> Vec<i32> { b.iter().take(n).map(|&c| i32::from(c as i8)).collect() };
        match &self.data {
            Data::Loom {
                dtype,
                native,
                part_start,
                ..
            } => {
                let bytes = native.as_deref()?;
                let first = part_start.unwrap_or(0);
                // The codes up to the part's end, then the part's own: sub-byte codes need not start on a byte.
                let upto = first + n;
                let mut codes = match dtype {
                    DType::Int16 => i16s(bytes, upto),
                    DType::Float16 | DType::BFloat16 | DType::Uint16 => u16s(bytes, upto),
                    dt if dt.bits() > 8 => return None,
                    DType::Int8 | DType::Int4 | DType::Int2 | DType::Ternary | DType::Binary => {
                        let packed = &bytes[..dtype.packed_len(upto)?.min(bytes.len())];
                        i8s(&dtype::unpack_codes(*dtype, packed), upto)
                    }
                    dt => {
                        let packed = &bytes[..dt.packed_len(upto)?.min(bytes.len())];
                        u8s(&dtype::unpack_codes(*dt, packed), upto)
                    }
                };
                Some(codes.split_off(first.min(codes.len())))
            }
            Data::Safetensors { dtype, bytes } => match dtype {
                st::Dtype::F16 | st::Dtype::BF16 | st::Dtype::U16 => Some(u16s(bytes, n)),
                st::Dtype::I16 => Some(i16s(bytes, n)),
                st::Dtype::I8 => Some(i8s(bytes, n)),
                st::Dtype::U8 | st::Dtype::F8_E4M3 | st::Dtype::F8_E5M2 => Some(u8s(bytes, n)),
                _ => None,
            },
            Data::Gguf { ty, bytes } => match ty {
                GgmlType::F16 | GgmlType::BF16 => Some(u16s(bytes, n)),
                ty => quant::codes(*ty, bytes, n).map(|(codes, _)| codes),
            },
            Data::Values(_) => None,
        }
    }

    /// For GGUF block types, the groups of shared scale (block or sub-block scale and min) covering the first `n`
    /// codes of [`WeightTensor::codes`].
    pub fn code_groups(&self, n: usize) -> Option<Vec<quant::CodeGroup>> {
        match &self.data {
            Data::Gguf { ty, bytes } => quant::codes(*ty, bytes, n.min(self.count)).map(|(_, groups)| groups),
            _ => None,
        }
    }

    /// The bytes the file stores for this tensor (a Loom float32 master, or a part of a layer, has none).
    pub fn stored_bytes(&self) -> Option<&[u8]> {
        match &self.data {
            Data::Loom {
                native,
                part_start: None,
                ..
            } => native.as_deref(),
            Data::Loom { .. } | Data::Values(_) => None,
            Data::Safetensors { bytes, .. } | Data::Gguf { bytes, .. } => Some(bytes),
        }
    }
}

impl LoadedModel {
    /// Every weight tensor: layers with weights (by path) for a network, stored tensors otherwise.
    pub fn weight_tensors(&self) -> Result<Vec<WeightTensor<'_>>> {
        let mut out = Vec::new();
        match &self.contents {
            Contents::Network(net) => {
                let mut tensors = Vec::new();
                net.for_each_layer(&mut |path, layer| {
                    if let Some(t) = q4_layer_tensor(path, layer, None) {
                        tensors.push(t);
                    } else if let Some(ws) = &layer.weights {
                        tensors.push(loom_tensor(path, layer, ws, None));
                    }
                });
                out = tensors.into_iter().collect::<Result<_>>()?;
                out.extend(transformer_tensors(net));
            }
            Contents::Safetensors(file) => out.extend(file.tensors().map(|t| safetensors_tensor(t.info(), t.bytes()))),
            Contents::Checkpoint(ckpt) => out.extend(
                ckpt.tensors()
                    .map(|t| safetensors_tensor(t.weight.info(), t.weight.bytes())),
            ),
            Contents::Gguf { header, bytes } => {
                for t in &header.tensors {
                    out.push(gguf_tensor(header, t, bytes)?);
                }
            }
        }
        Ok(out)
    }

    /// The layer at path `name` (`layers.0`) of a network, one part of its weights (`layers.0#q_weight`, see
    /// [`Layer::weight_parts`]), or the tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<WeightTensor<'_>> {
        let missing = || LoomError::UnknownName {
            kind: "layer with weights or tensor",
            name: name.to_string(),
        };
        match &self.contents {
            Contents::Network(net) => {
                if let Some(t) = transformer_tensors(net).find(|t| t.name == name) {
                    return Ok(t);
                }
                let (layer_path, part) = split_part(name);
                let mut found = None;
                net.for_each_layer(&mut |path, layer| {
                    if path != layer_path {
                        return;
                    }
                    found = q4_layer_tensor(path, layer, part)
                        .or_else(|| layer.weights.as_ref().map(|ws| loom_tensor(path, layer, ws, part)));
                });
                found.ok_or_else(missing)?
            }
            Contents::Safetensors(file) => {
                let t = file.tensor(name)?;
                Ok(safetensors_tensor(t.info(), t.bytes()))
            }
            Contents::Checkpoint(ckpt) => {
                let t = ckpt.tensor(name).ok_or_else(missing)?;
                Ok(safetensors_tensor(t.weight.info(), t.weight.bytes()))
            }
            Contents::Gguf { header, bytes } => gguf_tensor(header, header.tensor(name).ok_or_else(missing)?, bytes),
        }
    }

    /// Statistics of [`LoadedModel::tensor`]`(name)` with a `bins`-bin histogram.
    pub fn tensor_stats(&self, name: &str, bins: usize) -> Result<stats::TensorStats> {
        stats::tensor_stats(&self.tensor(name)?, bins)
    }

    /// The first `n` values and codes of [`LoadedModel::tensor`]`(name)`.
    pub fn tensor_preview(&self, name: &str, n: usize) -> Result<stats::Preview> {
        stats::preview(&self.tensor(name)?, n)
    }
}

/// A layer path and the part of its weights a tensor name asks for: `layers.0#q_weight` → (`layers.0`,
/// `q_weight`); `layers.0` → (`layers.0`, none).
pub fn split_part(name: &str) -> (&str, Option<&str>) {
    match name.split_once('#') {
        Some((path, part)) => (path, Some(part)),
        None => (name, None),
    }
}

/// A Loom layer's weights, whole or one named part, with values as `GetActive` gives them. A single-tensor layer
/// gets its shape (`[out, in]` for Dense); a whole combined store is flat.
fn loom_tensor(path: &str, layer: &Layer, ws: &WeightStore, part: Option<&str>) -> Result<WeightTensor<'static>> {
    let dtype = layer.dtype;
    let mut values = ws.active(dtype);
    let parts = layer.weight_parts()?;
    let (name, shape, part_start) = match (part, parts.as_slice()) {
        (None, [one]) if one.len == values.len() => (path.to_string(), one.shape.clone(), None),
        (None, _) => (path.to_string(), vec![values.len() as u64], None),
        (Some(part), _) => {
            let (name, p) = named_part(&parts, path, part)?;
            let end = p.start + p.len;
            if end > values.len() {
                return Err(LoomError::InvalidNetwork(format!(
                    "{name}: values {}..{end} of a store of {}",
                    p.start,
                    values.len()
                )));
            }
            values.truncate(end);
            values.drain(..p.start);
            (name, p.shape.clone(), Some(p.start))
        }
    };
    Ok(WeightTensor {
        name,
        dtype: dtype.name().to_string(),
        shape,
        scale: Some(ws.scale()),
        count: values.len(),
        data: Data::Loom {
            values,
            dtype,
            native: ws.version(dtype).map(<[u8]>::to_vec),
            part_start,
        },
    })
}

/// The part called `part` of a layer's weights, with its tensor name `path#part`.
fn named_part<'p>(parts: &'p [WeightPart], path: &str, part: &str) -> Result<(String, &'p WeightPart)> {
    let name = format!("{path}#{part}");
    match parts.iter().find(|p| p.name == part) {
        Some(p) => Ok((name, p)),
        None => Err(LoomError::UnknownName {
            kind: "part of a layer's weights",
            name,
        }),
    }
}

/// The blob suffix holding each matrix of a transformer layer as Loom Q4_0 blocks (spec §11): MHA's q/k/v/o, then
/// SwiGLU's gate/up/down. Their biases sit in one `biases` blob, in store order.
const Q4_MATRICES: [(&str, &str); 7] = [
    ("q_weight", "q4_0.200"),
    ("k_weight", "q4_0.201"),
    ("v_weight", "q4_0.202"),
    ("o_weight", "q4_0.203"),
    ("gate_weight", "q4_0.100"),
    ("up_weight", "q4_0.101"),
    ("down_weight", "q4_0.102"),
];

/// A transformer layer that keeps its matrices as Loom Q4_0 blocks (which Loom runs instead of its own weights):
/// one part decoded from its blocks or its `biases` blob, or the whole layer (every stored part in store order,
/// flat). `None` for a layer without Q4_0 blocks.
fn q4_layer_tensor(path: &str, layer: &Layer, part: Option<&str>) -> Option<Result<WeightTensor<'static>>> {
    let blob = |suffix: &str| layer.extra_blobs.iter().find(|b| b.suffix == suffix);
    if !layer.extra_blobs.iter().any(|b| b.suffix.starts_with("q4_0.")) {
        return None;
    }
    // A part's values; `first_bias` is where the store's biases start (the `biases` blob holds them from there).
    let decode = |p: &WeightPart, first_bias: usize| -> Result<Option<Vec<f32>>> {
        let name = format!("{path}#{}", p.name);
        if let Some((_, suffix)) = Q4_MATRICES.iter().find(|(n, _)| *n == p.name) {
            let Some(b) = blob(suffix) else { return Ok(None) };
            let q4 = dtype::q4_0::Q4Blocks::parse(&b.bytes)?;
            let blocks = q4.scales.len();
            if blocks != p.len.div_ceil(dtype::q4_0::BLOCK) {
                return Err(LoomError::InvalidNetwork(format!(
                    "{name}: {blocks} Q4_0 blocks for {} values",
                    p.len
                )));
            }
            return Ok(Some(q4.dequantize(p.len)));
        }
        let Some(b) = blob("biases") else { return Ok(None) };
        let at = 4 * (p.start - first_bias.min(p.start));
        let bytes = b.bytes.get(at..at + 4 * p.len).ok_or_else(|| {
            LoomError::InvalidNetwork(format!(
                "{name}: the biases blob of {} bytes is too short",
                b.bytes.len()
            ))
        })?;
        Ok(Some(bytemuck::pod_collect_to_vec(bytes)))
    };
    let tensor = || -> Result<WeightTensor<'static>> {
        let parts = layer.weight_parts()?;
        let first_bias = parts.iter().find(|q| q.name.ends_with("_bias")).map_or(0, |q| q.start);
        let (name, shape, values) = match part {
            Some(part) => {
                let (name, p) = named_part(&parts, path, part)?;
                let values = decode(p, first_bias)?.ok_or_else(|| {
                    LoomError::Unsupported(format!(
                        "{name}: the file stores no {part} for this Q4_0 layer (Loom runs its Q4_0 blocks without it)"
                    ))
                })?;
                (name, p.shape.clone(), values)
            }
            None => {
                let mut values = Vec::new();
                for p in &parts {
                    values.extend(decode(p, first_bias)?.unwrap_or_default());
                }
                (path.to_string(), vec![values.len() as u64], values)
            }
        };
        Ok(WeightTensor {
            name,
            dtype: "Q4_0".into(),
            shape,
            scale: None,
            count: values.len(),
            data: Data::Values(values),
        })
    };
    Some(tensor())
}

/// A Loom transformer's float32 globals (`transformer.embeddings`, `.lm_head`, `.final_norm`), flat.
fn transformer_tensors(net: &Network) -> impl Iterator<Item = WeightTensor<'_>> {
    let t = net.transformer.as_ref();
    let globals = t.map(|t| {
        [
            ("embeddings", &t.embeddings),
            ("lm_head", &t.lm_head),
            ("final_norm", &t.final_norm),
        ]
    });
    globals.into_iter().flatten().filter_map(|(name, bytes)| {
        let bytes = bytes.as_ref()?;
        Some(WeightTensor {
            name: format!("transformer.{name}"),
            dtype: "float32".into(),
            shape: vec![(bytes.len() / 4) as u64],
            scale: None,
            count: bytes.len() / 4,
            data: Data::Safetensors {
                dtype: st::Dtype::F32,
                bytes,
            },
        })
    })
}

fn safetensors_tensor<'a>(info: &st::TensorInfo, bytes: &'a [u8]) -> WeightTensor<'a> {
    WeightTensor {
        name: info.name.clone(),
        dtype: info.dtype.to_string(),
        shape: info.shape.clone(),
        scale: None,
        count: info.elements as usize,
        data: Data::Safetensors {
            dtype: info.dtype,
            bytes,
        },
    }
}

fn gguf_tensor<'a>(header: &GgufHeader, t: &GgufTensorInfo, file: &'a [u8]) -> Result<WeightTensor<'a>> {
    let start = header.data_start + t.offset;
    // In range: the header reader checked every tensor against the file length.
    let bytes = &file[start as usize..(start + t.bytes) as usize];
    Ok(WeightTensor {
        name: t.name.clone(),
        dtype: t.ggml_type.name().to_string(),
        shape: t.shape(),
        scale: None,
        count: usize::try_from(t.elements).map_err(|_| LoomError::TooLarge {
            what: t.name.clone(),
            len: t.elements,
            max: usize::MAX as u64,
        })?,
        data: Data::Gguf { ty: t.ggml_type, bytes },
    })
}
