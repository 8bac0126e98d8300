//! Training-checkpoint directories as Rust/PyTorch training code writes them, and inference-only export.
//!
//! Layout: `weights.safetensors`, `optimizer_m.safetensors` and `optimizer_v.safetensors` (Adam first and second
//! moments, same tensor names as the weights), `meta.json`, `train_state.json`. The legacy layout has `weights.json`
//! (an object mapping each tensor name to a 2-D array of numbers) instead of `weights.safetensors`; it is read only
//! when there is no `weights.safetensors`. Only the weights file is required.
//!
//! Where the layout comes from: this project's own description of how Rust/PyTorch training code saves a run
//! (issue 3), not Loom: Loom v0.80 writes no checkpoint directory and its spec has none. The files in it are plain
//! safetensors and JSON, so the tests (`crate/tests/checkpoint_dir.rs`) write them with the reference `safetensors`
//! crate and `serde_json`, as that code would.

use serde_json::Value;

use super::safetensors::{self, Dtype, SafetensorsFile, Semantics, TensorData, TensorView};
use crate::error::{json_err, LoomError, Result};

/// Name of the weights file.
pub const WEIGHTS: &str = "weights.safetensors";
/// Name of the legacy JSON weights file.
pub const LEGACY_WEIGHTS: &str = "weights.json";
/// Name of the Adam first-moment file.
pub const OPTIMIZER_M: &str = "optimizer_m.safetensors";
/// Name of the Adam second-moment file.
pub const OPTIMIZER_V: &str = "optimizer_v.safetensors";
/// Name of the model description file.
pub const META: &str = "meta.json";
/// Name of the training-state file.
pub const TRAIN_STATE: &str = "train_state.json";

/// The bytes behind one safetensors file: owned, or natively memory-mapped.
#[derive(Debug)]
enum Storage {
    Owned(Vec<u8>),
    #[cfg(not(target_arch = "wasm32"))]
    Mapped(memmap2::Mmap),
}

impl AsRef<[u8]> for Storage {
    fn as_ref(&self) -> &[u8] {
        match self {
            Storage::Owned(v) => v,
            #[cfg(not(target_arch = "wasm32"))]
            Storage::Mapped(m) => m,
        }
    }
}

/// Where a checkpoint's weights came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `weights.safetensors`.
    Safetensors,
    /// Legacy `weights.json` (read as F32 tensors of shape `[rows, cols]`, listed by name).
    LegacyJson,
}

/// A training checkpoint: weights with their Adam moments, plus `meta.json` and `train_state.json`.
#[derive(Debug)]
pub struct Checkpoint {
    layout: Layout,
    weights: SafetensorsFile<Storage>,
    optimizer_m: Option<SafetensorsFile<Storage>>,
    optimizer_v: Option<SafetensorsFile<Storage>>,
    meta: Option<(Vec<u8>, Value)>,
    train_state: Option<Value>,
}

/// One weight tensor and the Adam moments stored for it (if any).
#[derive(Clone, Copy, Debug)]
pub struct CheckpointTensor<'a> {
    /// The weight (name, dtype, shape, raw bytes).
    pub weight: TensorView<'a>,
    /// Adam first moment, same shape as the weight.
    pub adam_m: Option<TensorView<'a>>,
    /// Adam second moment, same shape as the weight.
    pub adam_v: Option<TensorView<'a>>,
}

/// The raw files of a checkpoint directory, before validation.
#[derive(Default)]
struct Files {
    weights: Option<Storage>,
    legacy: Option<Vec<u8>>,
    m: Option<Storage>,
    v: Option<Storage>,
    meta: Option<Vec<u8>>,
    train_state: Option<Vec<u8>>,
}

impl Checkpoint {
    /// Opens a checkpoint directory; safetensors files are memory-mapped.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let io = |path: &std::path::Path, e: std::io::Error| LoomError::Io(format!("{}: {e}", path.display()));
        if !dir.is_dir() {
            return Err(LoomError::Io(format!("{}: not a directory", dir.display())));
        }
        let file = |name: &str| -> Result<Option<std::fs::File>> {
            let path = dir.join(name);
            match std::fs::File::open(&path) {
                Ok(f) if path.is_file() => Ok(Some(f)),
                Ok(_) => Err(LoomError::Io(format!("{}: not a regular file", path.display()))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io(&path, e)),
            }
        };
        let map = |name: &str| -> Result<Option<Storage>> {
            let Some(f) = file(name)? else { return Ok(None) };
            // SAFETY: read-only map; like any memory map it requires that the file is not modified while open.
            let m = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| io(&dir.join(name), e))?;
            Ok(Some(Storage::Mapped(m)))
        };
        let read = |name: &str| -> Result<Option<Vec<u8>>> {
            let Some(mut f) = file(name)? else { return Ok(None) };
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut buf).map_err(|e| io(&dir.join(name), e))?;
            Ok(Some(buf))
        };
        let weights = map(WEIGHTS)?;
        let files = Files {
            legacy: if weights.is_none() { read(LEGACY_WEIGHTS)? } else { None },
            weights,
            m: map(OPTIMIZER_M)?,
            v: map(OPTIMIZER_V)?,
            meta: read(META)?,
            train_state: read(TRAIN_STATE)?,
        };
        Checkpoint::build(files).map_err(|e| match e {
            LoomError::InvalidInput(m) if m.starts_with("no ") => {
                LoomError::InvalidInput(format!("{}: {m}", dir.display()))
            }
            e => e,
        })
    }

    /// Builds a checkpoint from in-memory files (e.g. a browser folder drop): `(relative path, contents)` pairs,
    /// matched by their last path component; other files are ignored.
    pub fn from_files(files: Vec<(String, Vec<u8>)>) -> Result<Self> {
        let mut out = Files::default();
        let mut seen: Vec<String> = Vec::new();
        for (path, bytes) in files {
            let base = path.rsplit(['/', '\\']).next().unwrap_or(&path).to_string();
            let slot_taken = match base.as_str() {
                WEIGHTS => out.weights.replace(Storage::Owned(bytes)).is_some(),
                LEGACY_WEIGHTS => out.legacy.replace(bytes).is_some(),
                OPTIMIZER_M => out.m.replace(Storage::Owned(bytes)).is_some(),
                OPTIMIZER_V => out.v.replace(Storage::Owned(bytes)).is_some(),
                META => out.meta.replace(bytes).is_some(),
                TRAIN_STATE => out.train_state.replace(bytes).is_some(),
                _ => false,
            };
            if slot_taken {
                let first = seen.iter().find(|p| p.rsplit(['/', '\\']).next() == Some(&base));
                return Err(LoomError::InvalidInput(format!(
                    "two files named {base}: {} and {path} (drop one checkpoint directory at a time)",
                    first.map_or("?", String::as_str)
                )));
            }
            seen.push(path);
        }
        if out.weights.is_some() {
            out.legacy = None;
        }
        Checkpoint::build(out)
    }

    fn build(files: Files) -> Result<Self> {
        let (layout, weights) = match (files.weights, files.legacy) {
            (Some(w), _) => (
                Layout::Safetensors,
                SafetensorsFile::from_bytes(w).map_err(|e| in_file(WEIGHTS, e))?,
            ),
            (None, Some(json)) => (Layout::LegacyJson, legacy_weights(&json)?),
            (None, None) => {
                return Err(LoomError::InvalidInput(format!(
                    "no {WEIGHTS} or {LEGACY_WEIGHTS}: not a training checkpoint"
                )))
            }
        };
        let moments = |name: &str, storage: Option<Storage>| -> Result<Option<SafetensorsFile<Storage>>> {
            let Some(storage) = storage else { return Ok(None) };
            let file = SafetensorsFile::from_bytes(storage).map_err(|e| in_file(name, e))?;
            for t in file.tensors() {
                let Some(w) = weights.header().tensor(t.name()) else {
                    return Err(LoomError::InvalidInput(format!(
                        "{name}: tensor {:?} has no weight of that name",
                        t.name()
                    )));
                };
                if w.shape != t.shape() {
                    return Err(LoomError::InvalidInput(format!(
                        "{name}: tensor {:?} has shape {:?}, but the weight has {:?}",
                        t.name(),
                        t.shape(),
                        w.shape
                    )));
                }
            }
            Ok(Some(file))
        };
        let optimizer_m = moments(OPTIMIZER_M, files.m)?;
        let optimizer_v = moments(OPTIMIZER_V, files.v)?;
        let parse = |name: &str, bytes: &[u8]| serde_json::from_slice::<Value>(bytes).map_err(|e| json_err(name, e));
        let meta = match files.meta {
            Some(raw) => {
                let v = parse(META, &raw)?;
                Some((raw, v))
            }
            None => None,
        };
        let train_state = files.train_state.map(|raw| parse(TRAIN_STATE, &raw)).transpose()?;
        Ok(Checkpoint {
            layout,
            weights,
            optimizer_m,
            optimizer_v,
            meta,
            train_state,
        })
    }

    /// Which weights file was read.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The weights in file order, each with its Adam moments.
    pub fn tensors(&self) -> impl Iterator<Item = CheckpointTensor<'_>> + '_ {
        self.weights.tensors().map(|weight| self.with_moments(weight))
    }

    /// The weight called `name`, with its Adam moments.
    pub fn tensor(&self, name: &str) -> Option<CheckpointTensor<'_>> {
        self.weights.tensor(name).ok().map(|weight| self.with_moments(weight))
    }

    fn with_moments<'a>(&'a self, weight: TensorView<'a>) -> CheckpointTensor<'a> {
        let moment = |f: &'a Option<SafetensorsFile<Storage>>| f.as_ref().and_then(|f| f.tensor(weight.name()).ok());
        CheckpointTensor {
            adam_m: moment(&self.optimizer_m),
            adam_v: moment(&self.optimizer_v),
            weight,
        }
    }

    /// `__metadata__` of `weights.safetensors` (empty for the legacy layout).
    pub fn weights_metadata(&self) -> &std::collections::BTreeMap<String, String> {
        self.weights.header().metadata()
    }

    /// Parsed `meta.json`, if present.
    pub fn meta(&self) -> Option<&Value> {
        self.meta.as_ref().map(|(_, v)| v)
    }

    /// Parsed `train_state.json`, if present.
    pub fn train_state(&self) -> Option<&Value> {
        self.train_state.as_ref()
    }
}

/// Prefixes an error with the file it came from.
fn in_file(file: &str, e: LoomError) -> LoomError {
    match e {
        LoomError::Truncated {
            what,
            needed,
            available,
        } => LoomError::Truncated {
            what: format!("{file}: {what}"),
            needed,
            available,
        },
        LoomError::TooLarge { what, len, max } => LoomError::TooLarge {
            what: format!("{file}: {what}"),
            len,
            max,
        },
        LoomError::ShapeOverflow { what, shape } => LoomError::ShapeOverflow {
            what: format!("{file}: {what}"),
            shape,
        },
        LoomError::Json { context, message } => LoomError::Json {
            context: format!("{file}: {context}"),
            message,
        },
        LoomError::Safetensors(m) => LoomError::Safetensors(format!("{file}: {m}")),
        e => e,
    }
}

/// Reads legacy `weights.json` into an in-memory F32 safetensors file.
fn legacy_weights(json: &[u8]) -> Result<SafetensorsFile<Storage>> {
    let value: Value = serde_json::from_slice(json).map_err(|e| json_err(LEGACY_WEIGHTS, e))?;
    let Value::Object(map) = value else {
        return Err(json_err(
            LEGACY_WEIGHTS,
            "expected an object of tensor name → 2-D array",
        ));
    };
    let bad = |name: &str, msg: String| LoomError::InvalidInput(format!("{LEGACY_WEIGHTS}: tensor {name:?}: {msg}"));
    let mut tensors: Vec<(String, [u64; 2], Vec<f32>)> = Vec::with_capacity(map.len());
    for (name, rows) in &map {
        let Value::Array(rows) = rows else {
            return Err(bad(name, "expected a 2-D array of numbers".into()));
        };
        let cols = match rows.first() {
            Some(Value::Array(r)) => r.len(),
            Some(_) => return Err(bad(name, "row 0 is not an array".into())),
            None => 0,
        };
        let mut values = Vec::with_capacity(rows.len().saturating_mul(cols));
        for (i, row) in rows.iter().enumerate() {
            let Value::Array(row) = row else {
                return Err(bad(name, format!("row {i} is not an array")));
            };
            if row.len() != cols {
                return Err(bad(
                    name,
                    format!("row {i} has {} numbers, row 0 has {cols}", row.len()),
                ));
            }
            for (j, x) in row.iter().enumerate() {
                let v = x
                    .as_f64()
                    .ok_or_else(|| bad(name, format!("[{i}][{j}] is not a number: {x}")))?;
                let f = v as f32;
                if !f.is_finite() {
                    return Err(bad(name, format!("[{i}][{j}] = {v} is out of float32 range")));
                }
                values.push(f);
            }
        }
        tensors.push((name.clone(), [rows.len() as u64, cols as u64], values));
    }
    let items: Vec<TensorData<'_>> = tensors
        .iter()
        .map(|(name, shape, values)| TensorData { name, shape, values })
        .collect();
    let bytes = safetensors::write(&items, Dtype::F32, &Default::default())?;
    SafetensorsFile::from_bytes(Storage::Owned(bytes))
}

/// The files of an inference-only copy: `meta.json` (verbatim, if present) and `weights.safetensors` holding every
/// weight as F32, or as F16 (rounded to nearest) with `half`; no optimizer state, no training state.
pub fn export_files(checkpoint: &Checkpoint, half: bool) -> Result<Vec<(String, Vec<u8>)>> {
    let mut decoded: Vec<(&str, &[u64], Vec<f32>)> = Vec::new();
    for t in checkpoint.tensors() {
        let w = t.weight;
        decoded.push((w.name(), w.shape(), w.to_f32(Semantics::Standard)?));
    }
    let items: Vec<TensorData<'_>> = decoded
        .iter()
        .map(|(name, shape, values)| TensorData { name, shape, values })
        .collect();
    let dtype = if half { Dtype::F16 } else { Dtype::F32 };
    let weights = safetensors::write(&items, dtype, checkpoint.weights_metadata())?;
    let mut files = Vec::with_capacity(2);
    if let Some((raw, _)) = &checkpoint.meta {
        files.push((META.to_string(), raw.clone()));
    }
    files.push((WEIGHTS.to_string(), weights));
    Ok(files)
}

/// Writes [`export_files`] into `out_dir` (created if needed). A non-empty `out_dir` is refused unless `overwrite`;
/// then only `meta.json` and `weights.safetensors` are replaced, each atomically (temporary file, then rename).
#[cfg(not(target_arch = "wasm32"))]
pub fn export(
    checkpoint: &Checkpoint,
    out_dir: impl AsRef<std::path::Path>,
    half: bool,
    overwrite: bool,
) -> Result<()> {
    use std::io::Write;
    let out_dir = out_dir.as_ref();
    let io = |path: &std::path::Path, e: std::io::Error| LoomError::Io(format!("{}: {e}", path.display()));
    // Convert first, so that a failure leaves the disk untouched.
    let files = export_files(checkpoint, half)?;
    if out_dir.exists() {
        if !out_dir.is_dir() {
            return Err(LoomError::Io(format!("{}: not a directory", out_dir.display())));
        }
        let non_empty = std::fs::read_dir(out_dir).map_err(|e| io(out_dir, e))?.next().is_some();
        if non_empty && !overwrite {
            return Err(LoomError::Unsaveable(format!(
                "{} is not empty; refusing to overwrite its files (ask for overwrite to replace {META} and {WEIGHTS})",
                out_dir.display()
            )));
        }
    }
    std::fs::create_dir_all(out_dir).map_err(|e| io(out_dir, e))?;
    for (name, bytes) in files {
        let dest = out_dir.join(&name);
        let tmp = out_dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let written = std::fs::File::create_new(&tmp).and_then(|mut f| {
            f.write_all(&bytes)?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &dest)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&dest, e));
        }
    }
    Ok(())
}
