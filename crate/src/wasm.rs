//! The JavaScript API (wasm-bindgen): `version`, `detectFormat`, `inspectHeader`, `gpuInfo` and the `Model` class.
//!
//! Results are plain objects (snake_case fields, as the Rust structs serialize); every thrown error is a plain
//! object `{code, message}` with `code` from [`LoomError::code`], plus `needed` for `need_more`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use js_sys::{Array, Float32Array, Int32Array, Object, Reflect, Uint8Array};
use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::convert::{self, OutputFormat};
use crate::cpu::{CpuModel, Tensor};
use crate::dtype::DType;
use crate::error::LoomError;
use crate::formats::detect::{self, Format};
use crate::formats::safetensors::Dtype;
use crate::gpu::{Gpu, GpuModel};
use crate::inspect::{self, PrefixSource};
use crate::model::LoadedModel;
use crate::stats;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
export interface Grid { depth: number; rows: number; cols: number; layers_per_cell: number }
export interface LayerRow {
  path: string; nesting: number; z: number; y: number; x: number; l: number; type: string; activation: string;
  dtype: string; scale: number | null; params: number; bytes: number; disabled: boolean;
}
export interface TensorRow { name: string; dtype: string; shape: number[]; bytes: number; offset: number }
export interface Inspection {
  format: "entity" | "json" | "safetensors" | "gguf" | "checkpoint";
  file_bytes: number; header_bytes: number; weight_bytes: number; bytes_read: number; total_params: number;
  grid: Grid | null; layers: LayerRow[]; tensors: TensorRow[];
  bytes_by_dtype: Record<string, number>; metadata: Record<string, string>;
}
export interface LoomErrorObject { code: string; message: string; needed?: number }
export interface Histogram { min: number; max: number; counts: number[] }
export interface TensorStats {
  count: number; min: number; max: number; mean: number; std: number; sparsity: number; non_finite: number;
  histogram: Histogram;
}
export interface TensorPreview {
  name: string; dtype: string; scale: number | null; shape: number[]; values: Float32Array;
  codes: Int32Array | undefined;
}
export interface ForwardResult { data: Float32Array; shape: number[] }
export interface GpuForwardResult extends ForwardResult { cpu_layers: Record<string, string> }
export interface LayerLoss { path: string; from: string; to: string; changed: number; total: number; max_abs_error: number }
export interface LossReport { layers: LayerLoss[] }
export interface DiffEntry {
  name: string; status: "same" | "changed" | "added" | "removed"; dtype_before: string | null;
  dtype_after: string | null; max_abs: number | null; mean_abs: number | null;
}
export interface Diff { entries: DiffEntry[] }
export interface GpuInfo { available: boolean; reason?: string; adapter?: string; shader_f16?: boolean }
"#;

type JsResult<T> = std::result::Result<T, JsValue>;

/// The thrown object for an error.
fn js_error(e: LoomError) -> JsValue {
    let o = Object::new();
    set(&o, "code", &e.code().into());
    set(&o, "message", &e.to_string().into());
    if let LoomError::NeedMore { needed, .. } = e {
        set(&o, "needed", &(needed as f64).into());
    }
    o.into()
}

fn set(o: &Object, key: &str, value: &JsValue) {
    // Setting a property on a fresh plain object cannot fail.
    let _ = Reflect::set(o, &key.into(), value);
}

/// Serializes as JSON would: maps become plain objects, `None` becomes `null`.
fn to_js<T: Serialize + ?Sized>(value: &T) -> JsResult<JsValue> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| js_error(LoomError::InvalidInput(format!("cannot build the result object: {e}"))))
}

/// A JavaScript number that must be a byte count.
fn byte_count(n: f64, what: &str) -> JsResult<u64> {
    if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_992.0 {
        Ok(n as u64)
    } else {
        Err(js_error(LoomError::InvalidInput(format!(
            "{what} must be a whole number of bytes, got {n}"
        ))))
    }
}

/// The crate version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// `"entity" | "json" | "safetensors" | "gguf" | "unknown"` from a file's first bytes (16 are enough).
#[wasm_bindgen(js_name = detectFormat)]
pub fn detect_format(prefix: &[u8]) -> String {
    match detect::detect(prefix) {
        Format::Entity => "entity",
        Format::LoomJson => "json",
        Format::Safetensors => "safetensors",
        Format::Gguf => "gguf",
        Format::Unknown => "unknown",
    }
    .to_string()
}

/// Inspects a file from its first bytes. Throws `{code: "need_more", needed}` when `prefix` is too short: call
/// again with the first `needed` bytes.
#[wasm_bindgen(js_name = inspectHeader, unchecked_return_type = "Inspection")]
pub fn inspect_header(prefix: &[u8], #[wasm_bindgen(js_name = totalLen)] total_len: f64) -> JsResult<JsValue> {
    let total = byte_count(total_len, "totalLen")?;
    let mut src = PrefixSource::new(prefix, total).map_err(js_error)?;
    to_js(&inspect::inspect(&mut src).map_err(js_error)?)
}

thread_local! {
    /// One GPU device for every model, created on first use and dropped when it is lost.
    static GPU: RefCell<Option<Arc<Gpu>>> = const { RefCell::new(None) };
}

async fn shared_gpu() -> crate::Result<Arc<Gpu>> {
    if let Some(gpu) = GPU.with(|g| g.borrow().clone()) {
        return Ok(gpu);
    }
    // wgpu assumes `navigator.gpu` and panics without it (Node, old browsers): ask first.
    let navigator = Reflect::get(&js_sys::global(), &"navigator".into()).unwrap_or(JsValue::UNDEFINED);
    let has_gpu = !navigator.is_undefined()
        && Reflect::get(&navigator, &"gpu".into()).is_ok_and(|g| !g.is_undefined() && !g.is_null());
    if !has_gpu {
        return Err(LoomError::NoGpu(
            "this JavaScript environment has no WebGPU (navigator.gpu is missing)".into(),
        ));
    }
    // GpuModel takes an Arc (shared across threads natively); in the browser there is one thread.
    #[allow(clippy::arc_with_non_send_sync)]
    let gpu = Arc::new(Gpu::new().await?);
    GPU.with(|g| *g.borrow_mut() = Some(gpu.clone()));
    Ok(gpu)
}

/// Whether WebGPU works here: `{available, reason?, adapter?, shader_f16?}`.
#[wasm_bindgen(js_name = gpuInfo, unchecked_return_type = "Promise<GpuInfo>")]
pub fn gpu_info() -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async {
        let o = Object::new();
        match shared_gpu().await {
            Ok(gpu) => {
                set(&o, "available", &true.into());
                set(&o, "adapter", &gpu.info.name.clone().into());
                set(&o, "shader_f16", &gpu.has_f16.into());
            }
            Err(e) => {
                set(&o, "available", &false.into());
                set(&o, "reason", &e.to_string().into());
            }
        }
        Ok(o.into())
    })
}

/// A loaded file: a Loom network (runnable, convertible) or named tensors (safetensors, GGUF, checkpoint).
#[wasm_bindgen(js_name = Model)]
pub struct JsModel {
    model: LoadedModel,
    cpu: Option<CpuModel>,
    /// Kept between calls (weights stay uploaded, KV caches persist); shared with the pending forward's future.
    gpu: Rc<RefCell<GpuSlot>>,
}

fn forward_result(t: Tensor) -> Object {
    let o = Object::new();
    set(&o, "data", &Float32Array::from(&t.data[..]).into());
    let shape: Array = t.shape.iter().map(|&d| JsValue::from(d as f64)).collect();
    set(&o, "shape", &shape.into());
    o
}

fn shape_of(shape: &[u32]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

/// The output format of `convert` / `lossReport` and the Loom dtype to re-quantize to (none for safetensors).
fn output_format(format: &str, dtype: Option<String>) -> crate::Result<(OutputFormat, Option<DType>)> {
    let dtype = dtype.as_deref().map(DType::parse).transpose()?;
    let format = match format {
        "entity" => OutputFormat::Entity,
        "json" => OutputFormat::Json,
        "safetensors" => OutputFormat::Safetensors(Dtype::F32),
        "safetensors-f16" => OutputFormat::Safetensors(Dtype::F16),
        "safetensors-bf16" => OutputFormat::Safetensors(Dtype::BF16),
        other => {
            return Err(LoomError::InvalidInput(format!(
                "unknown output format \"{other}\" (entity, json, safetensors, safetensors-f16, safetensors-bf16)"
            )))
        }
    };
    Ok((format, dtype))
}

/// Per-layer dtypes from a `Record<string, string>`.
fn layer_dtypes(value: JsValue) -> crate::Result<BTreeMap<String, DType>> {
    if value.is_undefined() || value.is_null() {
        return Ok(BTreeMap::new());
    }
    let names: BTreeMap<String, String> = serde_wasm_bindgen::from_value(value)
        .map_err(|e| LoomError::InvalidInput(format!("layerDtypes must map layer paths to dtype names: {e}")))?;
    names
        .into_iter()
        .map(|(path, dt)| Ok((path, DType::parse(&dt)?)))
        .collect()
}

#[wasm_bindgen(js_class = Model)]
impl JsModel {
    /// Loads an `.entity`, Loom JSON, safetensors (with or without Loom topology) or GGUF file.
    #[wasm_bindgen(js_name = fromBytes)]
    pub fn from_bytes(bytes: Vec<u8>, name: Option<String>) -> JsResult<JsModel> {
        let model =
            LoadedModel::from_bytes(Bytes::from(bytes), name.as_deref().unwrap_or("model")).map_err(js_error)?;
        Ok(JsModel::new(model))
    }

    /// Loads a training-checkpoint folder: file names (relative paths) and their contents.
    #[wasm_bindgen(js_name = fromFiles)]
    pub fn from_files(names: Vec<String>, files: Vec<Uint8Array>) -> JsResult<JsModel> {
        if names.len() != files.len() {
            return Err(js_error(LoomError::InvalidInput(format!(
                "{} names for {} files",
                names.len(),
                files.len()
            ))));
        }
        let files = names.into_iter().zip(files.iter().map(Uint8Array::to_vec)).collect();
        let model = LoadedModel::from_files(files, "checkpoint").map_err(js_error)?;
        Ok(JsModel::new(model))
    }

    /// The name given at load.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.model.name.clone()
    }

    #[wasm_bindgen(unchecked_return_type = "Inspection")]
    pub fn inspection(&self) -> JsResult<JsValue> {
        to_js(&self.model.inspection)
    }

    /// Summary statistics of a layer's weights (by path, e.g. `layers.0`) or of a named tensor.
    #[wasm_bindgen(js_name = tensorStats, unchecked_return_type = "TensorStats")]
    pub fn tensor_stats(&self, name: &str, bins: u32) -> JsResult<JsValue> {
        to_js(&self.model.tensor_stats(name, bins as usize).map_err(js_error)?)
    }

    /// The first `n` values of a layer or tensor, with the stored codes of packed dtypes.
    #[wasm_bindgen(js_name = tensorPreview, unchecked_return_type = "TensorPreview")]
    pub fn tensor_preview(&self, name: &str, n: u32) -> JsResult<JsValue> {
        let p = self.model.tensor_preview(name, n as usize).map_err(js_error)?;
        let o = Object::new();
        set(&o, "name", &p.name.into());
        set(&o, "dtype", &p.dtype.into());
        set(&o, "scale", &p.scale.map_or(JsValue::NULL, |s| f64::from(s).into()));
        let shape: Array = p.shape.iter().map(|&d| JsValue::from(d as f64)).collect();
        set(&o, "shape", &shape.into());
        set(&o, "values", &Float32Array::from(&p.values[..]).into());
        let codes = p.codes.map_or(JsValue::UNDEFINED, |c| Int32Array::from(&c[..]).into());
        set(&o, "codes", &codes);
        Ok(o.into())
    }

    /// Runs the network on the CPU (bit-exact with Loom).
    #[wasm_bindgen(js_name = forwardCpu, unchecked_return_type = "ForwardResult")]
    pub fn forward_cpu(&mut self, input: &[f32], shape: &[u32]) -> JsResult<JsValue> {
        if self.cpu.is_none() {
            self.cpu = Some(CpuModel::new(self.model.network().map_err(js_error)?.clone()));
        }
        let cpu = self.cpu.as_mut().expect("set above");
        let out = cpu.forward(input, &shape_of(shape)).map_err(js_error)?;
        Ok(forward_result(out).into())
    }

    /// Runs the network on WebGPU; layer families without a kernel run on the CPU (listed in `cpu_layers`).
    #[wasm_bindgen(js_name = forwardGpu, unchecked_return_type = "Promise<GpuForwardResult>")]
    pub fn forward_gpu(&self, input: Vec<f32>, shape: Vec<u32>) -> js_sys::Promise {
        let slot = self.gpu.clone();
        let net = self.model.network().cloned();
        wasm_bindgen_futures::future_to_promise(async move {
            // The model is taken out of its slot for the call: a second call meanwhile fails cleanly.
            let taken = {
                let mut s = slot.borrow_mut();
                if s.busy {
                    return Err(js_error(LoomError::InvalidInput(
                        "a GPU forward is already running on this model".into(),
                    )));
                }
                s.busy = true;
                s.model.take()
            };
            let result = async {
                let mut model = match taken {
                    Some(m) => m,
                    None => GpuModel::new(shared_gpu().await?, net?)?,
                };
                let out = model.forward(&input, &shape_of(&shape)).await;
                Ok::<_, LoomError>((model, out))
            }
            .await;
            let mut s = slot.borrow_mut();
            s.busy = false;
            let out = match result {
                Ok((model, out)) => {
                    if matches!(out, Err(LoomError::GpuDeviceLost(_))) {
                        // A lost device is gone for every model: the next call starts afresh.
                        GPU.with(|g| *g.borrow_mut() = None);
                    } else {
                        s.model = Some(model);
                    }
                    out
                }
                Err(e) => Err(e),
            }
            .map_err(js_error)?;
            let r = forward_result(out);
            let cpu_layers = s.model.as_ref().map(|m| m.cpu_layers().clone()).unwrap_or_default();
            set(&r, "cpu_layers", &to_js(&cpu_layers)?);
            Ok(r.into())
        })
    }

    /// What converting to `format` (optionally re-quantizing to `dtype`, per layer `layerDtypes`) would change.
    #[wasm_bindgen(js_name = lossReport, unchecked_return_type = "LossReport")]
    pub fn loss_report(
        &self,
        format: &str,
        dtype: Option<String>,
        #[wasm_bindgen(js_name = layerDtypes, unchecked_param_type = "Record<string, string> | undefined")]
        layer_dtypes_value: JsValue,
    ) -> JsResult<JsValue> {
        let (_, report) = self.convert_inner(format, dtype, layer_dtypes_value)?;
        to_js(&report)
    }

    /// The converted file's bytes, identical to what `loom convert` writes. A lossy conversion throws
    /// `{code: "lossy"}` unless `allowLossy`.
    pub fn convert(
        &self,
        format: &str,
        dtype: Option<String>,
        #[wasm_bindgen(js_name = layerDtypes, unchecked_param_type = "Record<string, string> | undefined")]
        layer_dtypes_value: JsValue,
        #[wasm_bindgen(js_name = allowLossy)] allow_lossy: Option<bool>,
    ) -> JsResult<Vec<u8>> {
        let (bytes, report) = self.convert_inner(format, dtype, layer_dtypes_value)?;
        if !report.is_lossless() && !allow_lossy.unwrap_or(false) {
            return Err(js_error(LoomError::Lossy(report.describe())));
        }
        Ok(bytes)
    }

    /// Per layer or tensor: same / changed / added / removed, dtypes, and the weight deltas.
    #[wasm_bindgen(unchecked_return_type = "Diff")]
    pub fn diff(&self, other: &JsModel) -> JsResult<JsValue> {
        to_js(&stats::diff(&self.model, &other.model).map_err(js_error)?)
    }
}

/// A model's GPU state, kept between calls.
#[derive(Default)]
struct GpuSlot {
    model: Option<GpuModel>,
    busy: bool,
}

impl JsModel {
    fn new(model: LoadedModel) -> JsModel {
        JsModel {
            model,
            cpu: None,
            gpu: Rc::new(RefCell::new(GpuSlot::default())),
        }
    }

    fn convert_inner(
        &self,
        format: &str,
        dtype: Option<String>,
        layer_dtypes_value: JsValue,
    ) -> JsResult<(Vec<u8>, convert::LossReport)> {
        let (format, dtype) = output_format(format, dtype).map_err(js_error)?;
        let per_layer = layer_dtypes(layer_dtypes_value).map_err(js_error)?;
        let mut net = self.model.network().map_err(js_error)?.clone();
        convert::convert_with(&mut net, format, dtype, &per_layer).map_err(js_error)
    }
}
