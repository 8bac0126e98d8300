//! The inspector's JavaScript API (wasm-bindgen, feature `inspector`): `detectFormat`, `inspectHeader`, the `Model`
//! class and the `GpuStream` class (a `.entity` file's weights streamed to the GPU blob by blob).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use js_sys::{Float32Array, Int32Array, Uint8Array};
use wasm_bindgen::prelude::*;

use crate::boundary::{BlobRange, Forward};
use crate::convert::{self, OutputFormat};
use crate::cpu::{CpuModel, Tensor};
use crate::dtype::DType;
use crate::error::LoomError;
use crate::formats::detect::{self, Format};
use crate::formats::safetensors::Dtype;
use crate::formats::source::PrefixSource;
use crate::gpu::{GpuModel, GpuStream};
use crate::inspect::{self, Inspection};
use crate::model::{Contents, LoadedModel};
use crate::stats;
use crate::wasm::{byte_count, forget_gpu, js_error, named_files, set, shared_gpu, to_js, JsResult};

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

/// A loaded file: a Loom network (runnable, convertible) or named tensors (safetensors, GGUF, checkpoint).
#[wasm_bindgen(js_name = Model)]
pub struct JsModel {
    model: LoadedModel,
    cpu: Option<CpuModel>,
    /// Kept between calls (weights stay uploaded, KV caches persist); shared with the pending forward's future.
    gpu: Rc<RefCell<GpuSlot<GpuModel>>>,
}

/// A forward's result object: the output and, on the GPU, the layers that ran on the CPU.
fn forward_result(t: &Tensor, cpu_layers: Option<&BTreeMap<String, String>>) -> JsResult<JsValue> {
    let out = Forward {
        data: Vec::new(),
        shape: t.shape.clone(),
        cpu_layers: cpu_layers.cloned(),
    };
    let o = to_js(&out)?;
    set(o.unchecked_ref(), "data", &Float32Array::from(&t.data[..]).into());
    Ok(o)
}

fn gpu_forward_result(out: &crate::Result<Tensor>, cpu_layers: &BTreeMap<String, String>) -> JsResult<JsValue> {
    forward_result(out.as_ref().map_err(|e| js_error(e.clone()))?, Some(cpu_layers))
}

fn shape_of(shape: &[u32]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

/// The preview object of `name`'s first `n` values.
fn preview_object(model: &LoadedModel, name: &str, n: u32) -> JsResult<JsValue> {
    let p = model.tensor_preview(name, n as usize).map_err(js_error)?;
    let o = to_js(&p)?;
    // The values and codes as typed arrays (see `Preview`).
    set(o.unchecked_ref(), "values", &Float32Array::from(&p.values[..]).into());
    if let Some(codes) = &p.codes {
        set(o.unchecked_ref(), "codes", &Int32Array::from(&codes[..]).into());
    }
    Ok(o)
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
        let model = LoadedModel::from_files(named_files(names, files)?, "checkpoint").map_err(js_error)?;
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
        preview_object(&self.model, name, n)
    }

    /// Runs the network on the CPU (bit-exact with Loom).
    #[wasm_bindgen(js_name = forwardCpu, unchecked_return_type = "RawForward")]
    pub fn forward_cpu(&mut self, input: &[f32], shape: &[u32]) -> JsResult<JsValue> {
        if self.cpu.is_none() {
            self.cpu = Some(CpuModel::new(self.model.network().map_err(js_error)?.clone()));
        }
        let cpu = self.cpu.as_mut().expect("set above");
        let out = cpu.forward(input, &shape_of(shape)).map_err(js_error)?;
        forward_result(&out, None)
    }

    /// Runs the network on WebGPU; layer families without a kernel run on the CPU (listed in `cpu_layers`).
    #[wasm_bindgen(js_name = forwardGpu, unchecked_return_type = "Promise<RawForward>")]
    pub fn forward_gpu(&self, input: Vec<f32>, shape: Vec<u32>) -> js_sys::Promise {
        let slot = self.gpu.clone();
        let net = self.model.network().cloned();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut model = match take_slot(&slot).map_err(js_error)? {
                Some(m) => m,
                None => match async { GpuModel::new(shared_gpu().await?, net?) }.await {
                    Ok(m) => m,
                    Err(e) => {
                        let failed = Err(e);
                        put_back(&slot, None, &failed);
                        return failed.map_err(js_error);
                    }
                },
            };
            let out = model.forward(&input, &shape_of(&shape)).await;
            let result = gpu_forward_result(&out, model.cpu_layers());
            put_back(&slot, Some(model), &out);
            result
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
    #[wasm_bindgen(unchecked_return_type = "ModelDiff")]
    pub fn diff(&self, other: &JsModel) -> JsResult<JsValue> {
        to_js(&stats::diff(&self.model, &other.model).map_err(js_error)?)
    }
}

/// A model's GPU state, kept between calls. An async call takes it out of its slot for the call's length, so a
/// second call meanwhile fails cleanly.
struct GpuSlot<T> {
    model: Option<T>,
    busy: bool,
}

impl<T> Default for GpuSlot<T> {
    fn default() -> Self {
        GpuSlot {
            model: None,
            busy: false,
        }
    }
}

/// Takes the state out of `slot` for an async call (`None`: not created yet).
fn take_slot<T>(slot: &RefCell<GpuSlot<T>>) -> crate::Result<Option<T>> {
    let mut s = slot.borrow_mut();
    if s.busy {
        return Err(LoomError::InvalidInput(
            "a GPU call is already running on this model; wait for it to finish".into(),
        ));
    }
    s.busy = true;
    Ok(s.model.take())
}

/// Puts the state back after a call, unless the call lost the device: a lost device is gone for every model, and
/// the next call starts afresh.
fn put_back<T, R>(slot: &RefCell<GpuSlot<T>>, model: Option<T>, result: &crate::Result<R>) {
    let mut s = slot.borrow_mut();
    s.busy = false;
    if matches!(result, Err(LoomError::GpuDeviceLost(_))) {
        forget_gpu();
    } else {
        s.model = model;
    }
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
        // A safetensors file without a Loom network re-exports as safetensors of another float type.
        if let Contents::Safetensors(file) = &self.model.contents {
            return match format {
                OutputFormat::Safetensors(st_dtype) if dtype.is_none() && per_layer.is_empty() => {
                    convert::retype_safetensors(file.as_bytes(), st_dtype).map_err(js_error)
                }
                _ => Err(js_error(LoomError::Unsupported(
                    "this safetensors file holds tensors without a Loom network: it converts to safetensors \
                     (F32, F16 or BF16) only"
                        .into(),
                ))),
            };
        }
        let mut net = self.model.network().map_err(js_error)?.clone();
        convert::convert_with(&mut net, format, dtype, &per_layer).map_err(js_error)
    }
}

/// A `.entity` network built on the GPU from its header, then fed its blobs one at a time: the wasm heap holds the
/// header and one blob, never the model. Statistics and previews of a layer take that layer's blob again.
#[wasm_bindgen(js_name = GpuStream)]
pub struct JsGpuStream {
    name: String,
    inspection: Inspection,
    blobs: Vec<BlobRange>,
    stream: Rc<RefCell<GpuSlot<GpuStream>>>,
}

#[wasm_bindgen(js_class = GpuStream)]
impl JsGpuStream {
    /// Starts from the first bytes of a `totalLen`-byte `.entity` file; throws `{code: "need_more", needed}` until
    /// `prefix` holds the whole header, `unsupported` for other formats, `no_webgpu` without WebGPU.
    pub async fn begin(
        prefix: Vec<u8>,
        #[wasm_bindgen(js_name = totalLen)] total_len: f64,
        name: Option<String>,
    ) -> JsResult<JsGpuStream> {
        let total = byte_count(total_len, "totalLen")?;
        let format = detect::detect(&prefix);
        if prefix.len() >= 8 && format != Format::Entity {
            return Err(js_error(LoomError::Unsupported(format!(
                "weights stream to the GPU from .entity files only; this is a {} file",
                detect_format(&prefix)
            ))));
        }
        let mut src = PrefixSource::new(&prefix, total).map_err(js_error)?;
        let inspection = inspect::inspect(&mut src).map_err(js_error)?;
        let gpu = shared_gpu().await.map_err(js_error)?;
        let stream = GpuStream::begin(gpu, &prefix, total).map_err(js_error)?;
        let blobs = stream
            .blobs()
            .map(|(b, r)| BlobRange {
                path: b.path.clone(),
                offset: r.start,
                length: b.length,
                dtype: b.dtype.clone(),
            })
            .collect();
        Ok(JsGpuStream {
            name: name.unwrap_or_else(|| "model".into()),
            inspection,
            blobs,
            stream: Rc::new(RefCell::new(GpuSlot {
                model: Some(stream),
                busy: false,
            })),
        })
    }

    /// The name given at `begin`.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// The header's inspection.
    #[wasm_bindgen(unchecked_return_type = "Inspection")]
    pub fn inspection(&self) -> JsResult<JsValue> {
        to_js(&self.inspection)
    }

    /// Every blob with its absolute byte range in the file, in the header's order.
    #[wasm_bindgen(unchecked_return_type = "BlobRange[]")]
    pub fn blobs(&self) -> JsResult<JsValue> {
        to_js(&self.blobs)
    }

    /// Decodes blob `path` (its whole byte range) into its layer; once the layer's blobs are all in, it is
    /// uploaded to the GPU and its host copy freed.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn feed(&self, path: String, bytes: Vec<u8>) -> js_sys::Promise {
        let slot = self.stream.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut stream = take_stream(&slot)?;
            let out = stream.feed(&path, Bytes::from(bytes)).await;
            put_back(&slot, Some(stream), &out);
            out.map(|()| JsValue::UNDEFINED).map_err(js_error)
        })
    }

    /// Runs the network on WebGPU once every blob is in (as `Model.forwardGpu`).
    #[wasm_bindgen(unchecked_return_type = "Promise<RawForward>")]
    pub fn forward(&self, input: Vec<f32>, shape: Vec<u32>) -> js_sys::Promise {
        let slot = self.stream.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut stream = take_stream(&slot)?;
            let out = stream.forward(&input, &shape_of(&shape)).await;
            let result = gpu_forward_result(&out, stream.model().cpu_layers());
            put_back(&slot, Some(stream), &out);
            result
        })
    }

    /// Statistics of the layer `name` from its blob's bytes (read again from the file).
    #[wasm_bindgen(js_name = tensorStats, unchecked_return_type = "TensorStats")]
    pub fn tensor_stats(&self, name: &str, bytes: Vec<u8>, bins: u32) -> JsResult<JsValue> {
        let model = self.one_layer(name, bytes)?;
        to_js(&model.tensor_stats(name, bins as usize).map_err(js_error)?)
    }

    /// The first `n` values of the layer `name` from its blob's bytes, as `Model.tensorPreview`.
    #[wasm_bindgen(js_name = tensorPreview, unchecked_return_type = "TensorPreview")]
    pub fn tensor_preview(&self, name: &str, bytes: Vec<u8>, n: u32) -> JsResult<JsValue> {
        preview_object(&self.one_layer(name, bytes)?, name, n)
    }
}

/// The stream out of its slot for an async call.
fn take_stream(slot: &RefCell<GpuSlot<GpuStream>>) -> JsResult<GpuStream> {
    match take_slot(slot) {
        Ok(Some(stream)) => Ok(stream),
        Ok(None) => {
            slot.borrow_mut().busy = false;
            Err(js_error(LoomError::GpuDeviceLost(
                "the GPU device was lost, and the weights with it: open the model again".into(),
            )))
        }
        Err(e) => Err(js_error(e)),
    }
}

impl JsGpuStream {
    /// The topology holding only the weights of layer `name`, decoded from `bytes` (its blob).
    fn one_layer(&self, name: &str, bytes: Vec<u8>) -> JsResult<LoadedModel> {
        // `path#part` names one part of the layer's weights (see `LoadedModel::tensor`).
        let (name, _) = crate::model::split_part(name);
        if !self.blobs.iter().any(|b| b.path == name) {
            return Err(js_error(LoomError::UnknownName {
                kind: "layer with weights",
                name: name.to_string(),
            }));
        }
        let slot = self.stream.borrow();
        let stream = slot.model.as_ref().ok_or_else(|| {
            js_error(LoomError::InvalidInput(
                "the model is busy with a GPU call, or its device was lost".into(),
            ))
        })?;
        let net = stream.with_blob(name, Bytes::from(bytes)).map_err(js_error)?;
        Ok(LoadedModel {
            name: self.name.clone(),
            contents: Contents::Network(net),
            inspection: self.inspection.clone(),
        })
    }
}
