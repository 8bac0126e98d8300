//! What both JavaScript modules share (wasm-bindgen): `version`, `gpuInfo`, `memoryBytes`, the GPU test hooks, the
//! one GPU device and the conversions to JavaScript. The inspector's module (`loom_wasm`, feature `inspector`) adds
//! `wasm_inspector`, the chat module (`loom_chat`, feature `chat`) adds `wasm_chat`: each page loads only its half.
//!
//! Results are plain objects (snake_case fields, as the Rust structs serialize); every thrown error is a plain
//! object `{code, message}` with `code` from [`LoomError::code`], plus `needed` for `need_more`.

use std::cell::RefCell;
use std::sync::Arc;

use js_sys::{Object, Reflect, Uint8Array};
use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::boundary::{ErrorObject, GpuInfo};
use crate::error::LoomError;
use crate::gpu::Gpu;

// The types of what the modules take and give (src/boundary.rs), in both modules' `.d.ts`.
#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = include_str!("../ts/boundary.ts");

pub(crate) type JsResult<T> = std::result::Result<T, JsValue>;

/// The thrown object for an error.
pub(crate) fn js_error(e: LoomError) -> JsValue {
    // Serializing strings and a number cannot fail; the message alone is the fallback all the same.
    serialize(&ErrorObject::of(&e)).unwrap_or_else(|_| e.to_string().into())
}

pub(crate) fn set(o: &Object, key: &str, value: &JsValue) {
    // Setting a property on a fresh plain object cannot fail.
    let _ = Reflect::set(o, &key.into(), value);
}

/// Serializes as JSON would: maps become plain objects, `None` becomes `null`.
pub(crate) fn to_js<T: Serialize + ?Sized>(value: &T) -> JsResult<JsValue> {
    serialize(value).map_err(|e| js_error(LoomError::InvalidInput(format!("cannot build the result object: {e}"))))
}

fn serialize<T: Serialize + ?Sized>(value: &T) -> Result<JsValue, serde_wasm_bindgen::Error> {
    value.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
}

/// A JavaScript number that must be a byte count.
pub(crate) fn byte_count(n: f64, what: &str) -> JsResult<u64> {
    if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_992.0 {
        Ok(n as u64)
    } else {
        Err(js_error(LoomError::InvalidInput(format!(
            "{what} must be a whole number of bytes, got {n}"
        ))))
    }
}

/// File names paired with their contents, copied into wasm memory.
pub(crate) fn named_files(names: Vec<String>, files: Vec<Uint8Array>) -> JsResult<Vec<(String, Vec<u8>)>> {
    if names.len() != files.len() {
        return Err(js_error(LoomError::InvalidInput(format!(
            "{} names for {} files",
            names.len(),
            files.len()
        ))));
    }
    Ok(names.into_iter().zip(files.iter().map(Uint8Array::to_vec)).collect())
}

/// The crate version.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

thread_local! {
    /// One GPU device for every model, created on first use and dropped when it is lost.
    static GPU: RefCell<Option<Arc<Gpu>>> = const { RefCell::new(None) };
}

pub(crate) async fn shared_gpu() -> crate::Result<Arc<Gpu>> {
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

/// Drops the shared device after it was lost: the next GPU call asks for a new one.
pub(crate) fn forget_gpu() {
    GPU.with(|g| *g.borrow_mut() = None);
}

/// Bytes of WebAssembly memory this module holds: its high-water mark, as wasm memory never shrinks.
#[wasm_bindgen(js_name = memoryBytes)]
pub fn memory_bytes() -> f64 {
    (core::arch::wasm32::memory_size(0) as f64) * 65536.0
}

/// Test hook: every dispatch of a kernel whose pipeline name starts with `prefix` is skipped from here on (`null`
/// mends it), to see the self-test at open refuse the GPU (see `Gpu::break_kernel`).
#[wasm_bindgen(js_name = breakGpuKernel)]
pub async fn break_gpu_kernel(prefix: Option<String>) -> JsResult<()> {
    shared_gpu().await.map_err(js_error)?.break_kernel(prefix.as_deref());
    Ok(())
}

/// Test hook: destroys the shared WebGPU device (`GPUDevice.destroy()`), as a driver reset would lose it.
#[wasm_bindgen(js_name = loseGpuDevice)]
pub fn lose_gpu_device() {
    if let Some(gpu) = GPU.with(|g| g.borrow().clone()) {
        gpu.destroy();
    }
    forget_gpu();
}

/// Whether WebGPU works here.
#[wasm_bindgen(js_name = gpuInfo, unchecked_return_type = "Promise<RawGpuInfo>")]
pub fn gpu_info() -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async {
        let info = match shared_gpu().await {
            Ok(gpu) => GpuInfo {
                available: true,
                adapter: Some(gpu.info.name.clone()),
                shader_f16: Some(gpu.has_f16),
                ..GpuInfo::default()
            },
            Err(e) => GpuInfo {
                reason: Some(e.to_string()),
                ..GpuInfo::default()
            },
        };
        to_js(&info)
    })
}
