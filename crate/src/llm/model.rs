//! Opening a model for chat: a GGUF file, an HF folder (config.json + safetensors, single or sharded), or a Loom
//! transformer `.entity`. Each becomes the same [`LlmModel`]: config, weights as stored, tokenizer, chat
//! template and stop ids.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use super::config::ModelConfig;
use super::engine::CpuEngine;
use super::sources::{GgufData, GgufSource, SafetensorsSource};
use super::tokenizer::Tokenizer;
use super::weights::{self, ModelWeights};
use crate::error::{json_err, LoomError, Result};
use crate::formats::gguf;

/// Where a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelFormat {
    Gguf,
    HfFolder,
    Entity,
}

impl ModelFormat {
    pub fn name(self) -> &'static str {
        match self {
            ModelFormat::Gguf => "GGUF",
            ModelFormat::HfFolder => "HF folder",
            ModelFormat::Entity => "Loom transformer .entity",
        }
    }
}

/// A model ready to run: shared, read-only; each engine holds its own KV cache.
#[derive(Clone)]
pub struct LlmModel {
    pub format: ModelFormat,
    pub config: ModelConfig,
    pub weights: Arc<ModelWeights>,
    /// Ids that end a reply, from the model's own files (generation_config.json, the GGUF's eos/eot).
    pub eos_ids: Vec<u32>,
    /// The tokenizer (with the chat template), when the files carry one.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// The weights as CPU engines read them where that differs from `weights` ([`ModelWeights::for_cpu`]): made
    /// by the first CPU engine, shared by the rest and by the model's clones.
    cpu_weights: Arc<OnceLock<Arc<ModelWeights>>>,
}

/// The files of an HF folder, already read (natively memory-mapped; in the browser, the user's files).
#[derive(Default)]
pub struct HfFiles {
    pub config_json: Vec<u8>,
    /// `(file name, bytes)` of each safetensors file: one, or the shards an index names.
    pub safetensors: Vec<(String, Bytes)>,
    pub generation_config_json: Option<Vec<u8>>,
    pub tokenizer_json: Option<Vec<u8>>,
    pub tokenizer_config_json: Option<Vec<u8>>,
}

/// Ids from a JSON value that is an id or a list of ids.
fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().and_then(|x| u32::try_from(x).ok()).into_iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64())
            .filter_map(|x| u32::try_from(x).ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// The shard files `model.safetensors.index.json` names, each once, in the order first named.
fn shard_names(index: &[u8]) -> Result<Vec<String>> {
    let v: Value = serde_json::from_slice(index).map_err(|e| json_err("model.safetensors.index.json", e))?;
    let map = v
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| LoomError::InvalidNetwork("model.safetensors.index.json has no weight_map".into()))?;
    let mut names: Vec<String> = Vec::new();
    for f in map.values() {
        let f = f.as_str().ok_or_else(|| {
            LoomError::InvalidNetwork("model.safetensors.index.json: a weight_map value is not a file name".into())
        })?;
        // Shards live beside the index: no paths out of the folder.
        if f.contains('/') || f.contains('\\') || f == ".." {
            return Err(LoomError::InvalidNetwork(format!(
                "shard name {f:?} is not a file in the folder"
            )));
        }
        if !names.iter().any(|n| n == f) {
            names.push(f.to_string());
        }
    }
    Ok(names)
}

/// A GGUF header's model configuration and its end-of-reply ids (eos, eot).
pub fn gguf_config(header: &gguf::GgufHeader) -> Result<(ModelConfig, Vec<u32>)> {
    let embed = header
        .tensor("token_embd.weight")
        .ok_or_else(|| LoomError::InvalidNetwork("missing tensor token_embd.weight".into()))?;
    let vocab = embed
        .dims
        .get(1)
        .and_then(|&v| usize::try_from(v).ok())
        .ok_or_else(|| LoomError::InvalidNetwork("token_embd.weight is not a matrix".into()))?;
    let config = ModelConfig::from_gguf(header, vocab)?;
    // llama.cpp's rule: the token list has exactly the embedding's rows.
    if let Some(gguf::GgufValue::Array(_, tokens)) = header.get("tokenizer.ggml.tokens") {
        if tokens.len() != vocab {
            return Err(LoomError::InvalidNetwork(format!(
                "the GGUF lists {} tokens but token_embd.weight has {vocab} rows",
                tokens.len()
            )));
        }
    }
    let mut eos_ids = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(id) = header
            .get(key)
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
        {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }
    }
    Ok((config, eos_ids))
}

/// One rule for a model's files: every id its tokenizer can produce (vocabulary, added and special tokens, BOS,
/// EOS) and every end-of-reply id has a row in the embedding and in the head (`config.vocab` rows: the loaders
/// check both tensors against it), so that no id encoded or sampled indexes past them.
pub fn check_ids(config: &ModelConfig, tokenizer: Option<&Tokenizer>, eos_ids: &[u32]) -> Result<()> {
    let rows = config.vocab;
    let past = |what: &str, id: u32| {
        Err(LoomError::InvalidNetwork(format!(
            "{what} {id} has no row in the embedding and head, which have {rows} rows"
        )))
    };
    if let Some(t) = tokenizer {
        if t.vocab_size() > rows {
            return past("the tokenizer's highest id", (t.vocab_size() - 1) as u32);
        }
        if let Some(id) = t.bos_id().filter(|&id| id as usize >= rows) {
            return past("the BOS id", id);
        }
        if let Some(id) = t.eos_ids().into_iter().find(|&id| id as usize >= rows) {
            return past("the EOS id", id);
        }
    }
    match eos_ids.iter().find(|&&id| id as usize >= rows) {
        Some(&id) => past("the end-of-reply id", id),
        None => Ok(()),
    }
}

impl LlmModel {
    /// Checks [`check_ids`] on the model as opened.
    fn checked(self) -> Result<LlmModel> {
        check_ids(&self.config, self.tokenizer.as_deref(), &self.eos_ids)?;
        Ok(self)
    }

    /// A GGUF file held in one buffer.
    pub fn from_gguf(file: Bytes) -> Result<LlmModel> {
        LlmModel::from_gguf_header(gguf::read_header_bytes(&file)?, file)
    }

    /// A GGUF file held in one buffer, its header already read.
    pub fn from_gguf_header(header: gguf::GgufHeader, file: Bytes) -> Result<LlmModel> {
        let (mut config, eos_ids) = gguf_config(&header)?;
        let src = GgufSource {
            header: &header,
            data: GgufData::File(file),
        };
        src.apply_rope_tensors(&mut config)?;
        let weights = weights::load(&config, &src)?;
        LlmModel {
            format: ModelFormat::Gguf,
            config,
            weights: Arc::new(weights),
            eos_ids,
            tokenizer: Some(Arc::new(Tokenizer::from_gguf(&header)?)),
            cpu_weights: Arc::default(),
        }
        .checked()
    }

    /// An HF folder's files.
    pub fn from_hf(files: &HfFiles) -> Result<LlmModel> {
        let mut src = SafetensorsSource::default();
        if files.safetensors.is_empty() {
            return Err(LoomError::InvalidInput("the HF folder has no .safetensors file".into()));
        }
        for (name, bytes) in &files.safetensors {
            src.add_file(bytes.clone(), name)?;
        }
        let config = ModelConfig::from_hf_json(&files.config_json, src.has("lm_head.weight"))?;
        src.set_arch(config.arch);
        let weights = weights::load(&config, &src)?;
        let eos_ids = hf_eos_ids(files.generation_config_json.as_deref(), &files.config_json)?;
        let tokenizer = match &files.tokenizer_json {
            Some(json) => Some(Arc::new(Tokenizer::from_json_with_config(
                json,
                files.tokenizer_config_json.as_deref(),
            )?)),
            None => None,
        };
        LlmModel {
            format: ModelFormat::HfFolder,
            config,
            weights: Arc::new(weights),
            eos_ids,
            tokenizer,
            cpu_weights: Arc::default(),
        }
        .checked()
    }

    /// The tokenizer, or an error that says what is missing.
    pub fn tokenizer(&self) -> Result<Arc<Tokenizer>> {
        self.tokenizer.clone().ok_or_else(|| no_tokenizer(self.format))
    }

    /// A Loom transformer `.entity` held in one buffer (spec §8); float32 layers stay slices of it.
    pub fn from_entity(file: Bytes) -> Result<LlmModel> {
        let (config, weights) = super::entity::read(file)?;
        Ok(LlmModel {
            format: ModelFormat::Entity,
            config,
            weights: Arc::new(weights),
            // The file names no end-of-reply token and holds no vocabulary: a tokenizer beside it brings both.
            eos_ids: Vec::new(),
            tokenizer: None,
            cpu_weights: Arc::default(),
        })
    }

    /// The files that carry what a `.entity` cannot beside it, so that it chats as this model does:
    /// `tokenizer.json` and `tokenizer_config.json` ([`Tokenizer::hf_files`]) and `generation_config.json` with every
    /// end-of-reply id (EOT/EOM as well as EOS); none for a model without a tokenizer.
    pub fn tokenizer_files(&self) -> Result<Vec<(&'static str, Vec<u8>)>> {
        let Some(t) = &self.tokenizer else {
            return Ok(Vec::new());
        };
        let (json, config) = t.hf_files()?;
        let mut eos = self.eos_ids.clone();
        eos.extend(t.eos_ids().into_iter().filter(|id| !self.eos_ids.contains(id)));
        let generation = serde_json::json!({ "bos_token_id": t.bos_id(), "eos_token_id": eos });
        Ok(vec![
            ("tokenizer.json", json),
            ("tokenizer_config.json", config),
            ("generation_config.json", generation.to_string().into_bytes()),
        ])
    }

    /// Writes the model as a Loom transformer `.entity` (see [`super::entity::write`]).
    pub fn to_entity(&self, q4: bool) -> Result<(Vec<u8>, crate::convert::LossReport)> {
        super::entity::write(&self.config, &self.weights, q4)
    }

    /// A CPU engine with an empty KV cache, over the weights as CPU engines read them (made once per model).
    pub fn cpu_engine(&self) -> CpuEngine {
        let weights = match self.weights.cpu_layout_pays() {
            true => self.cpu_weights.get_or_init(|| self.weights.for_cpu()).clone(),
            false => self.weights.clone(),
        };
        CpuEngine::new(self.config.clone(), weights)
    }

    /// A model from files a person picked (a dropped file or folder): one GGUF; a `.entity` with the folder's
    /// `tokenizer.json` (and `tokenizer_config.json`) beside it; or an HF folder. Names may carry folder paths:
    /// files are matched by their last component, formats by their first bytes.
    pub fn from_files(files: Vec<(String, Bytes)>) -> Result<LlmModel> {
        let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
        let picked = Picked::new(&names, |i| &files[i].1)?;
        let bytes = |i: usize| files[i].1.clone();
        let small = |i: Option<usize>| i.map(|i| files[i].1.to_vec());
        let model = match picked.model {
            PickedModel::Gguf(i) => LlmModel::from_gguf(bytes(i)),
            PickedModel::Entity(i) => {
                let mut model = LlmModel::from_entity(bytes(i))?;
                model.tokenizer = picked.tokenizer(&small)?;
                model.eos_ids = hf_eos_ids(small(picked.named("generation_config.json")).as_deref(), b"{}")?;
                model.checked()
            }
            PickedModel::Hf { config, index } => {
                let shards = picked.shards(small(index).as_deref())?;
                LlmModel::from_hf(&HfFiles {
                    config_json: bytes(config).to_vec(),
                    safetensors: shards
                        .into_iter()
                        .map(|i| (picked.names[i].clone(), bytes(i)))
                        .collect(),
                    generation_config_json: small(picked.named("generation_config.json")),
                    tokenizer_json: small(picked.named("tokenizer.json")),
                    tokenizer_config_json: small(picked.named("tokenizer_config.json")),
                })
            }
        };
        model.map_err(|e| picked.in_model_file(e))
    }
}

/// The error for a model without a tokenizer.
pub fn no_tokenizer(format: ModelFormat) -> LoomError {
    LoomError::InvalidInput(format!(
        "this {} has no tokenizer: put tokenizer.json (and tokenizer_config.json) beside it, or use token ids",
        format.name()
    ))
}

/// Which file holds the model among those a person picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PickedModel {
    Gguf(usize),
    /// A `.entity` (a `tokenizer.json` beside it brings the vocabulary).
    Entity(usize),
    /// An HF folder: its `config.json` and its `model.safetensors.index.json`, if any.
    Hf {
        config: usize,
        index: Option<usize>,
    },
}

/// Picked files by base name and format (detected from their first bytes), and the model among them.
pub struct Picked {
    /// Last path components.
    pub names: Vec<String>,
    formats: Vec<crate::formats::detect::Format>,
    pub model: PickedModel,
}

impl Picked {
    /// `head(i)`: at least the first [`crate::formats::detect::DETECT_LEN`] bytes of file `i` (fewer when it is
    /// shorter).
    pub fn new<'a>(names: &[String], head: impl Fn(usize) -> &'a [u8]) -> Result<Picked> {
        use crate::formats::detect::{detect, Format, DETECT_LEN};
        let names: Vec<String> = names
            .iter()
            .map(|n| n.rsplit(['/', '\\']).next().unwrap_or(n).to_string())
            .collect();
        let formats: Vec<Format> = (0..names.len()).map(|i| detect(head(i))).collect();
        // A file named as a model whose bytes are not that format (a corrupt or cut download) is named, never
        // passed over as if it were not there.
        for (i, name) in names.iter().enumerate() {
            let lower = name.to_ascii_lowercase();
            let named = [
                (".gguf", Format::Gguf, "GGUF"),
                (".entity", Format::Entity, "Loom ENTITY"),
                (".safetensors", Format::Safetensors, "safetensors"),
            ];
            if let Some((_, _, what)) = named
                .iter()
                .find(|(ext, f, _)| lower.ends_with(ext) && formats[i] != *f)
            {
                let error = match head(i).len() {
                    0 => LoomError::Truncated {
                        what: format!("a {what} file"),
                        needed: DETECT_LEN as u64,
                        available: 0,
                    },
                    _ => LoomError::BadMagic { format: what },
                };
                return Err(error.in_file(name));
            }
        }
        let one_of = |f: Format, what: &str| -> Result<Option<usize>> {
            let found: Vec<usize> = (0..names.len()).filter(|&i| formats[i] == f).collect();
            match found.as_slice() {
                [] => Ok(None),
                [i] => Ok(Some(*i)),
                _ => Err(LoomError::InvalidInput(format!(
                    "{} {what} files were given ({}): pick one",
                    found.len(),
                    found.iter().map(|&i| names[i].as_str()).collect::<Vec<_>>().join(", ")
                ))),
            }
        };
        let named = |name: &str| names.iter().position(|n| n == name);
        let model = if let Some(i) = one_of(Format::Gguf, "GGUF")? {
            PickedModel::Gguf(i)
        } else if let Some(i) = one_of(Format::Entity, ".entity")? {
            PickedModel::Entity(i)
        } else {
            let config = named("config.json").ok_or_else(|| {
                LoomError::InvalidInput(
                    "no model among these files: give a .gguf, a .entity, or an HF folder (config.json with .safetensors)"
                        .into(),
                )
            })?;
            PickedModel::Hf {
                config,
                index: named("model.safetensors.index.json"),
            }
        };
        Ok(Picked { names, formats, model })
    }

    /// The model's own file, for messages: the GGUF or the `.entity` (an HF folder's files name themselves).
    pub fn model_file(&self) -> Option<&str> {
        match self.model {
            PickedModel::Gguf(i) | PickedModel::Entity(i) => Some(&self.names[i]),
            PickedModel::Hf { .. } => None,
        }
    }

    /// `e` as an error in the model's own file, when there is one.
    pub fn in_model_file(&self, e: LoomError) -> LoomError {
        match self.model_file() {
            Some(name) => e.in_file(name),
            None => e,
        }
    }

    /// The file called `name` (its last path component).
    pub fn named(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The safetensors files of an HF folder: the shards its index (`index_json`) names, in order, or else every
    /// safetensors file picked.
    pub fn shards(&self, index_json: Option<&[u8]>) -> Result<Vec<usize>> {
        let Some(index) = index_json else {
            let all: Vec<usize> = (0..self.names.len())
                .filter(|&i| self.formats[i] == crate::formats::detect::Format::Safetensors)
                .collect();
            if all.is_empty() {
                return Err(LoomError::InvalidInput("the HF folder has no .safetensors file".into()));
            }
            return Ok(all);
        };
        shard_names(index)?
            .into_iter()
            .map(|n| {
                self.named(&n).ok_or_else(|| {
                    LoomError::InvalidInput(format!(
                        "the shard {n} named by model.safetensors.index.json is missing"
                    ))
                })
            })
            .collect()
    }

    /// The tokenizer from a picked `tokenizer.json` (with `tokenizer_config.json`), read by `read`.
    pub fn tokenizer(&self, read: &impl Fn(Option<usize>) -> Option<Vec<u8>>) -> Result<Option<Arc<Tokenizer>>> {
        let Some(json) = read(self.named("tokenizer.json")) else {
            return Ok(None);
        };
        let config = read(self.named("tokenizer_config.json"));
        Ok(Some(Arc::new(Tokenizer::from_json_with_config(
            &json,
            config.as_deref(),
        )?)))
    }
}

/// End-of-reply ids from an HF folder's `generation_config.json` and `config.json`.
pub fn hf_eos_ids(generation_config_json: Option<&[u8]>, config_json: &[u8]) -> Result<Vec<u32>> {
    let mut eos_ids = Vec::new();
    for (name, json) in [
        ("generation_config.json", generation_config_json),
        ("config.json", Some(config_json)),
    ] {
        let Some(json) = json else { continue };
        let v: Value = serde_json::from_slice(json).map_err(|e| json_err(name, e))?;
        for id in ids_of(v.get("eos_token_id")) {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }
    }
    Ok(eos_ids)
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::formats::source::FileSource;
    use crate::formats::Header;

    /// A file memory-mapped as `Bytes` (zero-copy: loading a cached model costs no read).
    pub fn map_file(path: &Path) -> Result<Bytes> {
        let f = std::fs::File::open(path).map_err(|e| LoomError::Io(format!("{}: {e}", path.display())))?;
        // SAFETY: the map is read-only; a file changed under a running model gives wrong numbers, not UB in
        // safe code that reads bytes (the same trade every mmap-based model loader makes).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| LoomError::Io(format!("{}: {e}", path.display())))?;
        Ok(Bytes::from_owner(map))
    }

    fn read_opt(path: PathBuf) -> Result<Option<Vec<u8>>> {
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LoomError::Io(format!("{}: {e}", path.display()))),
        }
    }

    /// The files of an HF folder: `model.safetensors`, or the shards `model.safetensors.index.json` names, or
    /// the one `.safetensors` file given.
    pub fn hf_files(dir: &Path, single: Option<&Path>) -> Result<HfFiles> {
        let config_json = read_opt(dir.join("config.json"))?
            .ok_or_else(|| LoomError::InvalidInput(format!("{} has no config.json", dir.display())))?;
        let mut names: Vec<String> = Vec::new();
        if let Some(file) = single {
            names.push(file.file_name().unwrap_or_default().to_string_lossy().into_owned());
        } else if let Some(index) = read_opt(dir.join("model.safetensors.index.json"))? {
            names = shard_names(&index)?;
        } else if dir.join("model.safetensors").exists() {
            names.push("model.safetensors".into());
        } else {
            return Err(LoomError::InvalidInput(format!(
                "{} has no model.safetensors or model.safetensors.index.json",
                dir.display()
            )));
        }
        let safetensors = names
            .into_iter()
            .map(|n| Ok((n.clone(), map_file(&dir.join(&n))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(HfFiles {
            config_json,
            safetensors,
            generation_config_json: read_opt(dir.join("generation_config.json"))?,
            tokenizer_json: read_opt(dir.join("tokenizer.json"))?,
            tokenizer_config_json: read_opt(dir.join("tokenizer_config.json"))?,
        })
    }

    /// Only the tokenizer of a model (a GGUF's header vocabulary, an HF folder's tokenizer.json): no weights.
    pub fn open_tokenizer(path: &Path) -> Result<Tokenizer> {
        if path.is_dir() {
            let json = read_opt(path.join("tokenizer.json"))?
                .ok_or_else(|| LoomError::InvalidInput(format!("{} has no tokenizer.json", path.display())))?;
            return Tokenizer::from_json_with_config(&json, read_opt(path.join("tokenizer_config.json"))?.as_deref());
        }
        match crate::formats::open(&mut FileSource::open(path)?)?.header {
            Header::Gguf(header) => Tokenizer::from_gguf(&header),
            _ => open_tokenizer(path.parent().unwrap_or(Path::new("."))),
        }
    }

    impl LlmModel {
        /// Opens a GGUF file, a `.entity`, an HF folder, or a `.safetensors` file with `config.json` beside it.
        pub fn open(path: &Path) -> Result<LlmModel> {
            if path.is_dir() {
                return LlmModel::from_hf(&hf_files(path, None)?);
            }
            let file = map_file(path)?;
            match crate::formats::open_bytes(&file)?.header {
                Header::Gguf(header) => LlmModel::from_gguf_header(header, file),
                Header::Safetensors(_) => {
                    let dir = path.parent().unwrap_or(Path::new("."));
                    LlmModel::from_hf(&hf_files(dir, Some(path))?)
                }
                Header::Entity(_) => {
                    let mut model = LlmModel::from_entity(file)?;
                    let dir = path.parent().unwrap_or(Path::new("."));
                    if dir.join("tokenizer.json").exists() {
                        model.tokenizer = Some(Arc::new(open_tokenizer(dir)?));
                    }
                    let generation = read_opt(dir.join("generation_config.json"))?;
                    model.eos_ids = hf_eos_ids(generation.as_deref(), b"{}")?;
                    model.checked()
                }
                Header::LoomJson(_) => Err(LoomError::UnknownFormat(format!(
                    "{}: a Loom JSON network is not a model to chat with (GGUF, .entity, an HF folder, or \
                     .safetensors with config.json)",
                    path.display()
                ))),
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::{hf_files, map_file, open_tokenizer};
