//! A model opened from its files' headers alone, its tensors then read a block at a time: how a GPU load in the
//! browser keeps the model out of WebAssembly memory (each block is read, uploaded and dropped). Works for the
//! three formats [`super::model::LlmModel::from_files`] opens, from the same picked files.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::config::ModelConfig;
use super::entity::{network_config, EntitySource};
use super::model::{check_ids, gguf_config, hf_eos_ids, no_tokenizer, ModelFormat, Picked, PickedModel};
use super::sources::{
    hf_block_name_for, hf_canonical_name, hf_global_name, safetensors_type, GgufData, GgufSource, SafetensorsSource,
    ROPE_TENSORS,
};
use super::tokenizer::Tokenizer;
use super::weights::{self, BlockWeights, Global, Globals, RawTensor, Role};
use crate::error::{LoomError, Result};
use crate::formats::detect::DETECT_LEN;
use crate::formats::entity::{self, BlobEntry, BlobTarget, EntityHeader};
use crate::formats::gguf::{self, GgufHeader};
use crate::formats::safetensors as st;
use crate::formats::source::{PrefixSource, RangeReader};
use crate::network::Network;

/// A model whose configuration, tokenizer and tensor locations are known, its weights still in its files.
pub struct StreamedModel {
    pub format: ModelFormat,
    pub config: ModelConfig,
    pub eos_ids: Vec<u32>,
    pub tokenizer: Option<Arc<Tokenizer>>,
    tensors: Tensors,
}

/// Where the tensors lie.
enum Tensors {
    Gguf {
        file: usize,
        header: Box<GgufHeader>,
    },
    /// By HF name.
    Safetensors(HashMap<String, Located>),
    Entity(Box<EntityBlobs>),
}

/// A safetensors tensor: its file, absolute byte range and type.
struct Located {
    file: usize,
    offset: u64,
    len: u64,
    raw: RawTensor,
}

struct EntityBlobs {
    file: usize,
    payload_offset: u64,
    /// The topology without weights.
    network: Network,
    /// Each blob with its block (`None`: a transformer global).
    blobs: Vec<(BlobEntry, Option<usize>)>,
}

/// The whole of a small file (JSON beside the weights).
async fn read_whole(reader: &impl RangeReader, sizes: &[u64], file: usize) -> Result<Vec<u8>> {
    Ok(reader.read(file, 0, sizes[file]).await?.to_vec())
}

async fn read_opt(reader: &impl RangeReader, sizes: &[u64], file: Option<usize>) -> Result<Option<Vec<u8>>> {
    match file {
        Some(i) => Ok(Some(read_whole(reader, sizes, i).await?)),
        None => Ok(None),
    }
}

/// A prefix of file `file` that holds the header `parse` reads: it asks for more with [`LoomError::NeedMore`].
async fn read_header<T>(
    reader: &impl RangeReader,
    file: usize,
    size: u64,
    mut parse: impl FnMut(&[u8]) -> Result<T>,
) -> Result<T> {
    let mut prefix = reader.read(file, 0, size.min(64 << 10)).await?.to_vec();
    loop {
        match parse(&prefix) {
            Err(LoomError::NeedMore { needed, .. }) if needed > prefix.len() as u64 && needed <= size => {
                let more = reader
                    .read(file, prefix.len() as u64, needed - prefix.len() as u64)
                    .await?;
                prefix.extend_from_slice(&more);
            }
            other => return other,
        }
    }
}

impl StreamedModel {
    /// Opens the model among files `names` of lengths `sizes`, reading their first bytes, the headers and the
    /// small JSON files (config, tokenizer), not the weights.
    pub async fn open(names: &[String], sizes: &[u64], reader: &impl RangeReader) -> Result<StreamedModel> {
        let model = StreamedModel::open_unchecked(names, sizes, reader).await?;
        check_ids(&model.config, model.tokenizer.as_deref(), &model.eos_ids)?;
        Ok(model)
    }

    async fn open_unchecked(names: &[String], sizes: &[u64], reader: &impl RangeReader) -> Result<StreamedModel> {
        if names.len() != sizes.len() {
            return Err(LoomError::InvalidInput(format!(
                "{} names for {} file lengths",
                names.len(),
                sizes.len()
            )));
        }
        let mut heads = Vec::with_capacity(names.len());
        for (i, &size) in sizes.iter().enumerate() {
            heads.push(reader.read(i, 0, size.min(DETECT_LEN as u64)).await?);
        }
        let picked = Picked::new(names, |i| &heads[i])?;
        let file = picked.model_file().map(str::to_string);
        StreamedModel::open_picked(picked, sizes, reader)
            .await
            .map_err(|e| match &file {
                Some(f) => e.in_file(f),
                None => e,
            })
    }

    async fn open_picked(picked: Picked, sizes: &[u64], reader: &impl RangeReader) -> Result<StreamedModel> {
        match picked.model {
            PickedModel::Gguf(file) => {
                let size = sizes[file];
                let header = read_header(reader, file, size, |prefix| {
                    Ok(gguf::read_header(&mut PrefixSource::new(prefix, size)?, Vec::new())?.0)
                })
                .await?;
                let (mut config, eos_ids) = gguf_config(&header)?;
                // Factors are one f32 per rotated pair: a larger tensor is refused before it is read.
                let most = config.rope_dims as u64 * 2;
                if let Some(t) = ROPE_TENSORS
                    .iter()
                    .filter_map(|n| header.tensor(n))
                    .find(|t| t.bytes > most)
                {
                    return Err(LoomError::InvalidNetwork(format!(
                        "{}: {} bytes for {} RoPE factors",
                        t.name,
                        t.bytes,
                        config.rope_dims / 2
                    )));
                }
                let names = ROPE_TENSORS.iter().map(|n| n.to_string()).collect();
                let parts = read_gguf(reader, file, &header, names).await?;
                gguf_source(&header, parts).apply_rope_tensors(&mut config)?;
                let tokenizer = Some(Arc::new(Tokenizer::from_gguf(&header)?));
                Ok(StreamedModel {
                    format: ModelFormat::Gguf,
                    config,
                    eos_ids,
                    tokenizer,
                    tensors: Tensors::Gguf {
                        file,
                        header: Box::new(header),
                    },
                })
            }
            PickedModel::Entity(file) => {
                let size = sizes[file];
                let header = read_header(reader, file, size, |prefix| {
                    let needed = entity::PREAMBLE_LEN as u64 + entity::header_len(prefix)?;
                    if (prefix.len() as u64) < needed {
                        return Err(LoomError::NeedMore {
                            needed,
                            available: prefix.len() as u64,
                        });
                    }
                    entity::read_header(prefix)
                })
                .await?;
                let blobs = entity_blobs(file, size, header)?;
                let config = network_config(&blobs.network)?;
                let mut read = HashMap::new();
                let generation = picked.named("generation_config.json");
                for i in [
                    picked.named("tokenizer.json"),
                    picked.named("tokenizer_config.json"),
                    generation,
                ]
                .into_iter()
                .flatten()
                {
                    read.insert(i, read_whole(reader, sizes, i).await?);
                }
                let tokenizer = picked.tokenizer(&|i| i.and_then(|i| read.get(&i).cloned()))?;
                let generation = generation.and_then(|i| read.get(&i).cloned());
                Ok(StreamedModel {
                    format: ModelFormat::Entity,
                    config,
                    eos_ids: hf_eos_ids(generation.as_deref(), b"{}")?,
                    tokenizer,
                    tensors: Tensors::Entity(Box::new(blobs)),
                })
            }
            PickedModel::Hf { config, index } => {
                let config_json = read_whole(reader, sizes, config).await?;
                let index_json = read_opt(reader, sizes, index).await?;
                let mut tensors = HashMap::new();
                for file in picked.shards(index_json.as_deref())? {
                    let size = sizes[file];
                    let name = &picked.names[file];
                    let header = read_header(reader, file, size, |prefix| {
                        let needed = st::header_size(prefix)?;
                        if (prefix.len() as u64) < needed {
                            return Err(LoomError::NeedMore {
                                needed,
                                available: prefix.len() as u64,
                            });
                        }
                        st::inspect(prefix)
                    })
                    .await?;
                    if header.file_len() > size {
                        return Err(LoomError::Truncated {
                            what: name.clone(),
                            needed: header.file_len(),
                            available: size,
                        });
                    }
                    for t in header.tensors() {
                        let Some(ty) = safetensors_type(&t.name, t.dtype, name)? else {
                            continue;
                        };
                        let shape = t
                            .shape
                            .iter()
                            .map(|&d| usize::try_from(d))
                            .collect::<std::result::Result<Vec<_>, _>>()
                            .map_err(|_| LoomError::ShapeOverflow {
                                what: t.name.clone(),
                                shape: t.shape.clone(),
                            })?;
                        let located = Located {
                            file,
                            offset: t.absolute.0,
                            len: t.byte_len(),
                            raw: RawTensor {
                                ty,
                                shape,
                                data: Bytes::new(),
                            },
                        };
                        if tensors
                            .insert(hf_canonical_name(&t.name).into_owned(), located)
                            .is_some()
                        {
                            return Err(LoomError::Safetensors(format!(
                                "{name}: tensor {} is in two shards",
                                t.name
                            )));
                        }
                    }
                }
                let config_out = ModelConfig::from_hf_json(&config_json, tensors.contains_key("lm_head.weight"))?;
                let generation = read_opt(reader, sizes, picked.named("generation_config.json")).await?;
                let eos_ids = hf_eos_ids(generation.as_deref(), &config_json)?;
                let mut small = HashMap::new();
                for i in [picked.named("tokenizer.json"), picked.named("tokenizer_config.json")]
                    .into_iter()
                    .flatten()
                {
                    small.insert(i, read_whole(reader, sizes, i).await?);
                }
                let tokenizer = picked.tokenizer(&|i| i.and_then(|i| small.get(&i).cloned()))?;
                Ok(StreamedModel {
                    format: ModelFormat::HfFolder,
                    config: config_out,
                    eos_ids,
                    tokenizer,
                    tensors: Tensors::Safetensors(tensors),
                })
            }
        }
    }

    /// Every weight tensor in the model's files, by name, with its size in bytes, from the headers alone.
    pub fn tensor_bytes(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = match &self.tensors {
            Tensors::Gguf { header, .. } => header.tensors.iter().map(|t| (t.name.clone(), t.bytes)).collect(),
            Tensors::Safetensors(map) => map.iter().map(|(n, l)| (n.clone(), l.len)).collect(),
            Tensors::Entity(e) => e.blobs.iter().map(|(b, _)| (b.path.clone(), b.length)).collect(),
        };
        out.sort();
        out
    }

    /// The tokenizer, or an error that says what is missing.
    pub fn tokenizer(&self) -> Result<Arc<Tokenizer>> {
        self.tokenizer.clone().ok_or_else(|| no_tokenizer(self.format))
    }

    /// Reads and checks the embedding, the final norm and the output head.
    pub async fn globals(&self, reader: &impl RangeReader) -> Result<Globals> {
        match &self.tensors {
            Tensors::Gguf { file, header } => {
                let parts = read_gguf(reader, *file, header, GgufSource::global_tensors(header)).await?;
                weights::load_globals(&self.config, &gguf_source(header, parts))
            }
            Tensors::Safetensors(all) => {
                let names = [Global::Embed, Global::FinalNorm, Global::Head].map(hf_global_name);
                let src = read_safetensors(reader, all, names.iter().map(|n| n.to_string()), self.config.arch).await?;
                weights::load_globals(&self.config, &src)
            }
            Tensors::Entity(e) => {
                let net = e.read(reader, None).await?;
                let t = net
                    .transformer
                    .as_ref()
                    .expect("network_config checked the transformer section");
                weights::load_globals(&self.config, &EntitySource::globals(t, &self.config))
            }
        }
    }

    /// Reads and checks the tensors of block `i`.
    pub async fn block(&self, reader: &impl RangeReader, i: usize) -> Result<BlockWeights> {
        match &self.tensors {
            Tensors::Gguf { file, header } => {
                let parts = read_gguf(reader, *file, header, GgufSource::block_tensors(header, i)).await?;
                weights::load_block(&self.config, &gguf_source(header, parts), i)
            }
            Tensors::Safetensors(all) => {
                // Each name once: two roles share one (Llama's feed-forward norm and Gemma's post-attention norm).
                let arch = self.config.arch;
                let mut names: Vec<String> = Role::ALL.iter().map(|&r| hf_block_name_for(arch, i, r)).collect();
                names.sort();
                names.dedup();
                let src = read_safetensors(reader, all, names.into_iter(), arch).await?;
                weights::load_block(&self.config, &src, i)
            }
            Tensors::Entity(e) => {
                let net = e.read(reader, Some(i)).await?;
                weights::load_block(&self.config, &EntitySource::block(&net, i, &self.config)?, i)
            }
        }
    }

    /// The architecture the config names, refined by a block's tensors for an `.entity` (whose header does not
    /// say it).
    pub fn arch_with(&self, block: &BlockWeights) -> super::config::Arch {
        use super::config::Arch;
        match self.tensors {
            Tensors::Entity(_) if block.q_norm.is_some() => Arch::Qwen3,
            Tensors::Entity(_) if block.bq.is_some() => Arch::Qwen2,
            _ => self.config.arch,
        }
    }
}

fn gguf_source(header: &GgufHeader, parts: HashMap<String, Bytes>) -> GgufSource<'_> {
    GgufSource {
        header,
        data: GgufData::Tensors(parts),
    }
}

/// The named tensors of a GGUF, each read on its own.
async fn read_gguf(
    reader: &impl RangeReader,
    file: usize,
    header: &GgufHeader,
    names: Vec<String>,
) -> Result<HashMap<String, Bytes>> {
    let mut out = HashMap::new();
    for name in names {
        let Some(t) = header.tensor(&name) else { continue };
        // The header reader checked every range against the file's length.
        out.insert(name, reader.read(file, header.data_start + t.offset, t.bytes).await?);
    }
    Ok(out)
}

/// The named safetensors tensors that exist, each read on its own.
async fn read_safetensors(
    reader: &impl RangeReader,
    all: &HashMap<String, Located>,
    names: impl Iterator<Item = String>,
    arch: super::config::Arch,
) -> Result<SafetensorsSource> {
    let mut out = HashMap::new();
    for name in names {
        let Some(t) = all.get(&name) else { continue };
        let data = reader.read(t.file, t.offset, t.len).await?;
        out.insert(name, RawTensor { data, ..t.raw.clone() });
    }
    Ok(SafetensorsSource::from_tensors(out, arch))
}

/// The header's blobs checked against the file's length, each tagged with its block.
fn entity_blobs(file: usize, size: u64, header: EntityHeader) -> Result<EntityBlobs> {
    let payload_offset = header.payload_offset();
    let payload_len = size.checked_sub(payload_offset).ok_or(LoomError::Truncated {
        what: "ENTITY payload".into(),
        needed: payload_offset,
        available: size,
    })?;
    let mut blobs = Vec::with_capacity(header.blobs.len());
    for b in header.blobs {
        b.range(payload_len)?;
        let block = match b.target(&header.network)? {
            BlobTarget::Transformer => None,
            BlobTarget::Layer(path) => {
                let layer: usize = path
                    .strip_prefix("layers.")
                    .and_then(|p| p.split('.').next())
                    .and_then(|i| i.parse().ok())
                    .ok_or_else(|| LoomError::BadBlobPath(b.path.clone()))?;
                Some(layer / 4)
            }
        };
        blobs.push((b, block));
    }
    Ok(EntityBlobs {
        file,
        payload_offset,
        network: header.network,
        blobs,
    })
}

impl EntityBlobs {
    /// The topology with the blobs of `block` (or the globals, for `None`) read and installed.
    async fn read(&self, reader: &impl RangeReader, block: Option<usize>) -> Result<Network> {
        let mut net = self.network.clone();
        for (b, _) in self.blobs.iter().filter(|(_, at)| *at == block) {
            let data = reader.read(self.file, self.payload_offset + b.offset, b.length).await?;
            entity::apply(&mut net, b, data)?;
        }
        Ok(net)
    }
}
