//! The GPU decoder on WebGPU in headless Chromium (SwiftShader: no shader-f16): tiny-llama's Q4_0 GGUF and our Loom
//! Q4_0 `.entity` against the numpy reference's logits at every position (≤ 1e-3) and its 16 greedy ids, each
//! picked on the GPU. Every GPU call is awaited (the JS event loop drives WebGPU).
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use bytes::Bytes;
use loom_wasm::gpu::Gpu;
use loom_wasm::llm::gpu_engine::GpuEngine;
use loom_wasm::llm::model::{HfFiles, LlmModel};
use serde_json::Value;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

macro_rules! golden {
    ($name:literal) => {
        include_bytes!(concat!("../../../shared/golden/tiny-llama/", $name)) as &[u8]
    };
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

async fn check(model: &LlmModel, set: &str) {
    let gpu = Arc::new(Gpu::new().await.expect("no WebGPU adapter"));
    let expected: Value = serde_json::from_slice(golden!("expected.json")).unwrap();
    let prompts: Vec<Vec<u32>> = expected["prompts"].as_array().unwrap().iter().map(ids).collect();
    let results = expected["weight_sets"][set]["results"].as_array().unwrap();
    let vocab = model.config.vocab;
    for (p, (prompt, res)) in prompts.iter().zip(results).enumerate() {
        let mut engine = GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)
            .await
            .unwrap();
        let logits = engine.forward_logits(prompt, true).await.unwrap();
        let mut worst = 0f32;
        for (pos, row) in res["logits"].as_array().unwrap().iter().enumerate() {
            for (i, w) in row.as_array().unwrap().iter().enumerate() {
                worst = worst.max((logits[pos * vocab + i] - w.as_f64().unwrap() as f32).abs());
            }
        }
        assert!(worst <= 1e-3, "{set} prompt {p}: max |Δlogit| {worst}");
        engine.reset();
        let want = ids(&res["greedy_ids"]);
        let mut got = vec![engine.forward_argmax(prompt).await.unwrap()];
        while got.len() < want.len() {
            let last = *got.last().unwrap();
            got.push(engine.forward_argmax(&[last]).await.unwrap());
        }
        assert_eq!(got, want, "{set} prompt {p}: greedy ids");
    }
}

#[wasm_bindgen_test]
async fn tiny_llama_q4_0_gguf_on_webgpu() {
    let model = LlmModel::from_gguf(Bytes::from_static(golden!("model.q4_0.gguf"))).unwrap();
    check(&model, "gguf_q4_0").await;
}

#[wasm_bindgen_test]
async fn tiny_llama_loom_q4_0_entity_on_webgpu() {
    let files = HfFiles {
        config_json: golden!("config.json").to_vec(),
        safetensors: vec![(
            "model.safetensors".into(),
            Bytes::from_static(golden!("model.f32.safetensors")),
        )],
        ..HfFiles::default()
    };
    let src = LlmModel::from_hf(&files).unwrap();
    let (bytes, _) = src.to_entity(true).unwrap();
    check(&LlmModel::from_entity(bytes.into()).unwrap(), "loom_q4_0").await;
}
