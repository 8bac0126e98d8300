//! The JavaScript bindings (`loom_wasm::wasm`, `loom_wasm::wasm_inspector`) in headless Chromium:
//! `Model.forwardGpu` on WebGPU (SwiftShader) against `Model.forwardCpu` and Loom's output, the model kept between GPU
//! calls, a concurrent call refused, and `inspectHeader` over growing prefixes. The Node tests (`tests-wasm/node/`) cover the rest of the API.
#![cfg(target_arch = "wasm32")]

use js_sys::{Float32Array, Reflect};
use loom_wasm::gpu::GPU_TOLERANCE;
use loom_wasm::wasm::gpu_info;
use loom_wasm::wasm_inspector::{inspect_header, JsModel};
use serde_json::Value;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

const MANIFEST: &str = include_str!("../../testdata/conformance/manifest.json");

macro_rules! entity {
    ($id:literal) => {
        (
            $id,
            include_bytes!(concat!("../../testdata/conformance/cases/", $id, "/loom.entity")) as &[u8],
        )
    };
}

/// Cases whose GPU path runs kernels (Dense, SwiGLU, norm, MHA, embedding) or falls back to the CPU (LSTM).
const CASES: [(&str, &[u8]); 8] = [
    entity!("layer_Dense_int4"),
    entity!("layer_SwiGLU_float32"),
    entity!("layer_RMSNorm_float32"),
    entity!("grid_2x1x2x2"),
    entity!("layer_MultiHeadAttention_float32"),
    entity!("layer_LSTM_float32"),
    entity!("transformer_int4"),
    entity!("layer_Embedding_float32"),
];

fn hex_f32(hex: &str) -> Vec<f32> {
    (0..hex.len())
        .step_by(8)
        .map(|i| {
            let b: Vec<u8> = (0..4)
                .map(|j| u8::from_str_radix(&hex[i + 2 * j..i + 2 * j + 2], 16).unwrap())
                .collect();
            f32::from_le_bytes(b.try_into().unwrap())
        })
        .collect()
}

/// Input, shape and Loom's output of a corpus case.
fn case(manifest: &Value, id: &str) -> (Vec<f32>, Vec<u32>, Vec<f32>) {
    let c = manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap();
    let shape = c["input_shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as u32)
        .collect();
    (
        hex_f32(c["input_f32_hex"].as_str().unwrap()),
        shape,
        hex_f32(c["expected_output_f32_hex"].as_str().unwrap()),
    )
}

fn get(o: &JsValue, key: &str) -> JsValue {
    Reflect::get(o, &key.into()).unwrap()
}

fn data(result: &JsValue) -> Vec<f32> {
    get(result, "data").dyn_into::<Float32Array>().unwrap().to_vec()
}

fn code(err: &JsValue) -> String {
    get(err, "code").as_string().unwrap()
}

#[wasm_bindgen_test]
async fn forward_gpu_matches_forward_cpu_and_loom() {
    let info = JsFuture::from(gpu_info()).await.unwrap();
    assert_eq!(get(&info, "available"), JsValue::TRUE, "{:?}", get(&info, "reason"));
    console_log!(
        "adapter {:?}, shader_f16 {:?}",
        get(&info, "adapter"),
        get(&info, "shader_f16")
    );

    let manifest: Value = serde_json::from_str(MANIFEST).unwrap();
    for (id, bytes) in CASES {
        let (input, shape, loom) = case(&manifest, id);
        let mut model = JsModel::from_bytes(bytes.to_vec(), Some(id.into())).unwrap();
        let cpu = data(&model.forward_cpu(&input, &shape).unwrap());
        assert_eq!(
            cpu.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            loom.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{id}: CPU vs Loom"
        );
        // Twice on the GPU: the second call reuses the uploaded model (MHA's KV cache grows, so compare once).
        let rounds = if id.contains("MultiHead") || id.starts_with("transformer") {
            1
        } else {
            2
        };
        for round in 0..rounds {
            let result = JsFuture::from(model.forward_gpu(input.clone(), shape.clone()))
                .await
                .unwrap_or_else(|e| panic!("{id}: {:?}", get(&e, "message")));
            let gpu = data(&result);
            assert_eq!(gpu.len(), cpu.len(), "{id}");
            let mut worst = 0f32;
            for (i, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
                let err = (g - c).abs();
                assert!(
                    err <= GPU_TOLERANCE.0 + GPU_TOLERANCE.1 * c.abs(),
                    "{id} round {round}: value {i} GPU {g}, CPU {c}"
                );
                worst = worst.max(err);
            }
            // A layer handed to the CPU would match bit for bit with the GPU unchecked: none may be.
            let cpu_layers = js_sys::Object::keys(&get(&result, "cpu_layers").into()).length();
            assert_eq!(cpu_layers, 0, "{id} round {round}: layers ran on the CPU");
            console_log!("{id} round {round}: max |gpu − cpu| {worst:e}");
        }
    }
}

#[wasm_bindgen_test]
async fn a_second_gpu_call_while_one_runs_is_refused() {
    let manifest: Value = serde_json::from_str(MANIFEST).unwrap();
    let (id, bytes) = CASES[0];
    let (input, shape, _) = case(&manifest, id);
    let model = JsModel::from_bytes(bytes.to_vec(), None).unwrap();
    let first = model.forward_gpu(input.clone(), shape.clone());
    let second = model.forward_gpu(input.clone(), shape.clone());
    assert!(JsFuture::from(first).await.is_ok());
    let err = JsFuture::from(second).await.unwrap_err();
    assert_eq!(code(&err), "invalid_input");
    // And the model still works afterwards.
    assert!(JsFuture::from(model.forward_gpu(input, shape)).await.is_ok());
}

#[wasm_bindgen_test]
fn inspect_header_over_growing_prefixes() {
    let (_, bytes) = CASES[6];
    let full = inspect_header(bytes, bytes.len() as f64).unwrap();
    let mut have = 16;
    let ins = loop {
        match inspect_header(&bytes[..have], bytes.len() as f64) {
            Ok(ins) => break ins,
            Err(e) => {
                assert_eq!(code(&e), "need_more");
                let needed = get(&e, "needed").as_f64().unwrap() as usize;
                assert!(needed > have && needed <= bytes.len());
                have = needed;
            }
        }
    };
    assert_eq!(
        js_sys::JSON::stringify(&ins).unwrap(),
        js_sys::JSON::stringify(&full).unwrap()
    );
    assert_eq!(get(&ins, "format"), JsValue::from("entity"));
    let err = inspect_header(b"not a model file", 16.0).unwrap_err();
    assert_eq!(code(&err), "bad_format");
}
